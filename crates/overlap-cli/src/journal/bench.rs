//! `overlap journal bench`: append latency and throughput, and group
//! commit against a baseline that calls `fdatasync` after every record.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use overlapped_journal::{Journal, JournalStats, Level, Lsn};
use serde::Serialize;

use crate::size::fmt_bytes;
use crate::util::new_hist;

use super::{LevelArg, OpenArgs};

/// A size option counted in bytes, as a `usize`.
fn parse_bytes(s: &str) -> std::result::Result<usize, crate::size::SizeError> {
    let v = crate::size::parse(s)?;
    let v = crate::size::at_most(s, v, usize::MAX as u64)?;
    Ok(v as usize)
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// The three target scenarios: append latency (100 B, 4 threads),
    /// throughput at Written (100 B, 4 threads), and 64 committers waiting
    /// for Durable on 4 KiB records against an fdatasync-per-record baseline.
    Targets,
    /// One run with --record-bytes, --threads, --level.
    Custom,
}

/// Options of `overlap journal bench`.
#[derive(Args, Debug, Clone)]
pub(super) struct BenchArgs {
    /// Which scenarios.
    #[arg(long, value_enum, default_value_t = Scenario::Targets)]
    scenario: Scenario,
    /// Record payload size (custom scenario): bytes, or a size with a
    /// binary unit (4k).
    #[arg(long, value_name = "SIZE", default_value = "100", value_parser = parse_bytes)]
    pub(super) record_bytes: usize,
    /// Appending threads (custom scenario).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Level to wait for (custom scenario): accepted = never wait, written =
    /// wait once at the end, durable = every append waits (a commit).
    #[arg(long, value_enum, default_value_t = LevelArg::Accepted)]
    level: LevelArg,
    /// Seconds per scenario.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Where to put the scratch journal (a subdirectory is created and
    /// removed).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// One JSON object per scenario.
    #[arg(long)]
    json: bool,
    /// Every this many milliseconds, retire everything durable
    /// (`truncate_before` the durable watermark), as a database retires its
    /// log after a checkpoint; retired segment files are reused for new
    /// segments (up to `--recycle-segments`). 0: never retire.
    #[arg(long, default_value_t = 100)]
    retire_every_ms: u64,
    /// Retired segment files the journal keeps for reuse (0: remove them).
    #[arg(long, default_value_t = overlapped_journal::DEFAULT_RECYCLE_SEGMENTS)]
    recycle_segments: usize,
    /// The flusher looks for its write's completion without sleeping while
    /// more than this many committers wait (default: 16 per CPU; "never"
    /// turns it off).
    #[arg(long, value_name = "N|never", value_parser = parse_spin_committers)]
    spin_committers: Option<u64>,
    #[command(flatten)]
    open: OpenArgs,
    /// What `overlap journal -v`/`-q` says of the engine driver.
    #[arg(skip = super::Say::Fallback)]
    say: super::Say,
}

#[derive(Serialize, Debug)]
struct BenchResult {
    scenario: String,
    record_bytes: usize,
    threads: usize,
    level: String,
    duration_s: f64,
    records: u64,
    records_per_s: f64,
    append_ns_p50: u64,
    append_ns_p99: u64,
    append_ns_p999: u64,
    append_ns_max: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    commits_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_commits_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    commit_us_p50: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    commit_us_p99: Option<u64>,
    full_waits: u64,
    batches: u64,
    batch_records_p50: u64,
    writes: u64,
    write_records_p50: u64,
    write_records_p99: u64,
    write_records_max: u64,
    sync_records_p50: u64,
    sync_records_p99: u64,
    sync_records_max: u64,
    commit_batch_records_p50: u64,
    commit_batch_records_p99: u64,
    commit_batch_records_max: u64,
    sync_waiters_p50: u64,
    polled_writes: u64,
    segments_created: u64,
    segments_recycled: u64,
    write_us_p50: u64,
    syncs: u64,
    sync_us_p50: u64,
    storage: String,
}

pub(super) fn bench(mut args: BenchArgs, say: super::Say) -> Result<()> {
    args.say = say;
    if !(args.duration > 0.0 && args.duration <= 3600.0) {
        bail!("--duration must be more than 0 and at most 3600 seconds");
    }
    let limit = overlapped_journal::DEFAULT_MAX_RECORD_BYTES;
    if args.record_bytes > limit {
        bail!(
            "--record-bytes must be at most {limit} (the journal's record limit, {})",
            fmt_bytes(limit as u64)
        );
    }
    if args.open.buffer_bytes < 4 * (args.record_bytes.max(1).next_power_of_two() as u64) {
        bail!("--buffer-mib must hold at least four records of --record-bytes");
    }
    // The scratch directory goes inside --dir, which must exist: a
    // benchmark creates nothing the user did not ask for.
    if !args.dir.is_dir() {
        bail!("--dir {}: not an existing directory", args.dir.display());
    }
    if args.threads == 0 || args.threads > 1024 {
        bail!("--threads must be between 1 and 1024");
    }
    let runs: Vec<(&str, usize, usize, Level)> = match args.scenario {
        Scenario::Targets => vec![
            ("append", 100, 4, Level::Accepted),
            ("written", 100, 4, Level::Written),
            ("commit", 4096, 64, Level::Durable),
        ],
        Scenario::Custom => vec![("custom", args.record_bytes, args.threads, args.level.into())],
    };
    let scratch = args
        .dir
        .join(format!("overlapped-journal-bench-{}", std::process::id()));
    // Ctrl-C, SIGTERM or SIGHUP remove the scratch journal (gigabytes of
    // preallocated segments) before exiting.
    crate::cleanup::install("journal bench", None);
    for (name, bytes, threads, level) in runs {
        crate::cleanup::remove_one(&scratch);
        crate::cleanup::registry().push(scratch.clone());
        let res = run_scenario(&args, &scratch, name, bytes, threads, level);
        crate::cleanup::remove_one(&scratch);
        let r = res?;
        if args.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            print_human(&r);
        }
    }
    Ok(())
}

fn print_human(r: &BenchResult) {
    println!(
        "{:8} {:>7} x {:>2} threads, {:8}: {:>12.0} records/s; append p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
        r.scenario,
        fmt_bytes(r.record_bytes as u64),
        r.threads,
        r.level,
        r.records_per_s,
        r.append_ns_p50,
        r.append_ns_p99,
        r.append_ns_p999,
        r.append_ns_max
    );
    if let (Some(c), Some(b)) = (r.commits_per_s, r.baseline_commits_per_s) {
        println!(
            "         commits/s {c:.0} vs fdatasync-per-record baseline {b:.0} ({:.1}x); commit p50 {} us, p99 {} us",
            c / b.max(1e-9),
            r.commit_us_p50.unwrap_or(0),
            r.commit_us_p99.unwrap_or(0)
        );
    }
    println!(
        "         {} batches (p50 {} records), {} writes (p50 {} us), {} syncs (p50 {} us), {} full-buffer waits; {}",
        r.batches,
        r.batch_records_p50,
        r.writes,
        r.write_us_p50,
        r.syncs,
        r.sync_us_p50,
        r.full_waits,
        r.storage
    );
    println!(
        "         records per write p50/p99/max {}/{}/{}, per group commit {}/{}/{}; \
         group commit per record {}/{}/{}; durable waiters woken per group commit p50 {}; \
         writes found complete by polling {}; segments created {}, recycled {}",
        r.write_records_p50,
        r.write_records_p99,
        r.write_records_max,
        r.sync_records_p50,
        r.sync_records_p99,
        r.sync_records_max,
        r.commit_batch_records_p50,
        r.commit_batch_records_p99,
        r.commit_batch_records_max,
        r.sync_waiters_p50,
        r.polled_writes,
        r.segments_created,
        r.segments_recycled
    );
}

/// One committer of [`run_scenario`]: appends records of `bytes` bytes
/// (waiting for each to be durable at `Level::Durable`) until `stop`;
/// returns the append latencies (ns), the commit latencies (µs), how many
/// it appended and the last LSN.
fn appender(
    j: &Journal,
    stop: &AtomicBool,
    t: usize,
    bytes: usize,
    level: Level,
) -> Result<(Histogram<u64>, Histogram<u64>, u64, Lsn)> {
    let data = vec![b'a' + (t % 26) as u8; bytes];
    let mut lat = new_hist();
    let mut commit = new_hist();
    let mut n = 0u64;
    let mut last = Lsn(0);
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        last = j.append(&data)?;
        let t1 = Instant::now();
        let _ = lat.record((t1 - t0).as_nanos().max(1) as u64);
        if level == Level::Durable {
            j.wait_blocking(last, Level::Durable)?;
            let _ = commit
                .record(t1.elapsed().as_micros().max(1) as u64 + (t1 - t0).as_micros() as u64);
        }
        n += 1;
    }
    Ok((lat, commit, n, last))
}

/// The retirer of [`run_scenario`], what a database does after each
/// checkpoint: every `every`, retires the log up to its durable point.
fn retire_every(j: &Journal, stop: &AtomicBool, every: Duration) -> Result<()> {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(every);
        j.truncate_before(j.watermark(Level::Durable))?;
    }
    Ok(())
}

fn run_scenario(
    args: &BenchArgs,
    dir: &Path,
    name: &str,
    bytes: usize,
    threads: usize,
    level: Level,
) -> Result<BenchResult> {
    let opts = args
        .open
        .options(args.say)?
        .max_record_bytes(bytes.max(1).next_power_of_two())
        .recycle_segments(args.recycle_segments)
        .spin_committers(args.spin_committers);
    let j = Arc::new(Journal::open(dir, opts).context("opening the bench journal")?);
    let storage = j.recovery_report().storage.clone();
    let duration = Duration::from_secs_f64(args.duration);
    let a = append_for(args, &j, bytes, threads, level, duration)?;
    let stats = j.stats();
    drop(j);
    let baseline = if level == Level::Durable {
        Some(baseline_commits(dir, bytes, threads, duration)?)
    } else {
        None
    };
    Ok(BenchResult {
        baseline_commits_per_s: baseline,
        ..bench_result(name, bytes, threads, level, &a, &stats, storage)
    })
}

/// What the committers of one scenario did.
struct Appended {
    /// Append latencies (ns).
    lat: Histogram<u64>,
    /// Commit latencies (µs), at `Level::Durable`.
    commit: Histogram<u64>,
    /// Records appended.
    records: u64,
    /// Seconds from the start of the committers to the end of the run.
    elapsed: f64,
}

/// Runs `threads` committers (and the retirer, if asked) on `j` for
/// `duration`, then at `Level::Written` waits for the last record.
fn append_for(
    args: &BenchArgs,
    j: &Arc<Journal>,
    bytes: usize,
    threads: usize,
    level: Level,
    duration: Duration,
) -> Result<Appended> {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (j, stop) = (j.clone(), stop.clone());
            std::thread::spawn(move || appender(&j, &stop, t, bytes, level))
        })
        .collect();
    let retirer = (args.retire_every_ms > 0).then(|| {
        let (j, stop) = (j.clone(), stop.clone());
        let every = Duration::from_millis(args.retire_every_ms);
        std::thread::spawn(move || retire_every(&j, &stop, every))
    });
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    if let Some(r) = retirer {
        r.join()
            .map_err(|_| anyhow::anyhow!("retirer thread panicked"))??;
    }
    let mut lat = new_hist();
    let mut commit = new_hist();
    let mut records = 0;
    let mut last = Lsn(0);
    for w in workers {
        let (l, c, n, lsn) = w
            .join()
            .map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
        lat.add(&l)?;
        commit.add(&c)?;
        records += n;
        last = last.max(lsn);
    }
    if level == Level::Written && records > 0 {
        j.wait_blocking(last, Level::Written)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Appended {
        lat,
        commit,
        records,
        elapsed,
    })
}

/// A scenario's result from what its committers did and the journal's
/// statistics; no baseline.
fn bench_result(
    name: &str,
    bytes: usize,
    threads: usize,
    level: Level,
    a: &Appended,
    stats: &JournalStats,
    storage: String,
) -> BenchResult {
    let (lat, commit) = (&a.lat, &a.commit);
    let records_per_s = a.records as f64 / a.elapsed;
    BenchResult {
        scenario: name.to_string(),
        record_bytes: bytes,
        threads,
        level: level.to_string(),
        duration_s: a.elapsed,
        records: a.records,
        records_per_s,
        append_ns_p50: lat.value_at_quantile(0.5),
        append_ns_p99: lat.value_at_quantile(0.99),
        append_ns_p999: lat.value_at_quantile(0.999),
        append_ns_max: lat.max(),
        commits_per_s: (level == Level::Durable).then_some(records_per_s),
        baseline_commits_per_s: None,
        commit_us_p50: (level == Level::Durable).then(|| commit.value_at_quantile(0.5)),
        commit_us_p99: (level == Level::Durable).then(|| commit.value_at_quantile(0.99)),
        full_waits: stats.full_waits,
        batches: stats.batches,
        batch_records_p50: stats.batch_records.p50,
        writes: stats.writes,
        write_records_p50: stats.write_records.p50,
        write_records_p99: stats.write_records.p99,
        write_records_max: stats.write_records.max,
        sync_records_p50: stats.sync_records.p50,
        sync_records_p99: stats.sync_records.p99,
        sync_records_max: stats.sync_records.max,
        commit_batch_records_p50: stats.commit_batch_records.p50,
        commit_batch_records_p99: stats.commit_batch_records.p99,
        commit_batch_records_max: stats.commit_batch_records.max,
        sync_waiters_p50: stats.sync_waiters.p50,
        polled_writes: stats.polled_writes,
        segments_created: stats.segments_created,
        segments_recycled: stats.segments_recycled,
        write_us_p50: stats.write_latency_us.p50,
        syncs: stats.syncs,
        sync_us_p50: stats.sync_latency_us.p50,
        storage,
    }
}

/// The naive log: `threads` committers share one preallocated file; each
/// commit writes its record at the next offset and calls `fdatasync`
/// before the next commit may start (a mutex keeps the log's order).
fn baseline_commits(dir: &Path, bytes: usize, threads: usize, duration: Duration) -> Result<f64> {
    const SIZE: u64 = 64 << 20;
    std::fs::create_dir_all(dir)?;
    let path = dir.join("baseline.log");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    // Preallocate as the journal does, so neither side extends its file.
    f.set_len(SIZE)?;
    crate::sys::write_all_at(&f, &vec![0u8; SIZE as usize], 0)?;
    f.sync_all()?;
    let log = Arc::new(Mutex::new((f, 0u64)));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let log = log.clone();
            let stop = stop.clone();
            std::thread::spawn(move || -> std::io::Result<u64> {
                let data = vec![b'b'; bytes];
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut g = log.lock().unwrap_or_else(|p| p.into_inner());
                    let off = g.1;
                    crate::sys::write_all_at(&g.0, &data, off)?;
                    g.0.sync_data()?;
                    g.1 = (off + bytes as u64) % (SIZE - bytes as u64);
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for w in workers {
        total += w
            .join()
            .map_err(|_| anyhow::anyhow!("baseline thread panicked"))??;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    Ok(rate)
}

/// `--spin-committers`: a count, or "never".
fn parse_spin_committers(s: &str) -> std::result::Result<u64, String> {
    match s.trim() {
        "never" => Ok(u64::MAX),
        n => n
            .parse()
            .map_err(|_| format!("{s:?}: expected a number of committers or \"never\"")),
    }
}
