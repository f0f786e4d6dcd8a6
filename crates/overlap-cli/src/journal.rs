//! `overlap journal`: append to, dump, verify and benchmark a journal
//! (the write-ahead log of `overlap-journal`).
//!
//! - `append DIR [--level accepted|written|durable]`: one record per line
//!   of standard input; each record's LSN is printed on standard output as
//!   soon as it is acknowledged at the level (default durable).
//! - `dump DIR [--json]`: the records; with `--json`, one object per line
//!   with `lsn` and `data` (UTF-8 text) or `data_b64` (anything else).
//! - `verify DIR`: what recovery would do; exits non-zero when corrupt.
//! - `repair DIR`: salvage a damaged journal: cut it at the first damage
//!   and list what that dropped.
//! - `bench`: append latency and throughput, and group commit against a
//!   baseline that calls `fdatasync` after every record (see [`bench`]).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use clap::{Args, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use overlap_journal::{Journal, Level, Lsn, Options, RecoveryMode, SyncMethod};
use serde::Serialize;

use crate::size::fmt_bytes;
use crate::util::new_hist;

/// Options of `overlap journal`.
#[derive(Args, Debug)]
pub struct JournalArgs {
    #[command(subcommand)]
    cmd: JournalCmd,
}

#[derive(Subcommand, Debug)]
enum JournalCmd {
    /// Append standard input, one record per line (at most 1 MiB each,
    /// the newline not included), printing each record's LSN as soon as it
    /// is acknowledged at `--level`: `accepted` (in the journal's memory:
    /// lost if the process dies), `written` (handed to the kernel: survives
    /// the process, not a power loss) or `durable` (on stable storage:
    /// survives a power loss). Segment files are preallocated in full
    /// (`--segment-mib`, 64 MiB by default) and the next one is made ahead
    /// of need, so even a few records occupy two segments (128 MiB by
    /// default). Exits non-zero if any line was not appended or any LSN not
    /// printed, saying whether the journal or standard output failed.
    Append {
        /// The journal directory (created if needed).
        dir: PathBuf,
        /// Acknowledge at this level.
        #[arg(long, value_enum, default_value_t = LevelArg::Durable)]
        level: LevelArg,
        #[command(flatten)]
        open: OpenArgs,
    },
    /// Print the records, one per line: `LSN<TAB>payload`. A payload that
    /// is UTF-8 without control characters and does not start with `"` is
    /// printed as it is; any other is printed quoted, with `\n`, `\t`,
    /// `\\`, `\"` and `\xNN` escapes, so the two never look alike. Works
    /// while an appender runs (reading the durable prefix).
    Dump {
        /// The journal directory.
        dir: PathBuf,
        /// One JSON object per line: `lsn` and `data` (UTF-8) or `data_b64`.
        #[arg(long)]
        json: bool,
        /// Treat any damage as an error.
        #[arg(long)]
        strict: bool,
    },
    /// Report what recovery would do; exit status 1 when the journal is
    /// corrupt or damaged in a way only `repair` cuts. Works while an
    /// appender runs (checking the durable prefix).
    Verify {
        /// The journal directory.
        dir: PathBuf,
        /// Strict recovery: any damage is corruption.
        #[arg(long)]
        strict: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Salvage a damaged journal: cut the log at the first damage, even
    /// where recovery refuses to (damage before the durable point, or with
    /// valid records after it), and print what was dropped. The dropped
    /// records' LSNs are handed out again to new records.
    Repair {
        /// The journal directory.
        dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure append latency, throughput and group commit.
    Bench(BenchArgs),
}

#[derive(Args, Debug, Clone)]
struct OpenArgs {
    /// Segment size for a new journal: a bare number counts MiB (64), or a
    /// size with a binary unit (64M, 1G).
    #[arg(long = "segment-mib", value_name = "MIB", default_value = "64", value_parser = parse_mib)]
    segment_bytes: u64,
    /// Log buffer size (a power of two): a bare number counts MiB (16), or
    /// a size with a binary unit (16M, 1G).
    #[arg(long = "buffer-mib", value_name = "MIB", default_value = "16", value_parser = parse_mib)]
    buffer_bytes: u64,
    /// Buffered I/O instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// How writes become durable: auto (O_DSYNC with direct I/O, else
    /// fdatasync), fdatasync (one per group commit), or dsync.
    #[arg(long, value_enum, default_value_t = SyncArg::Auto)]
    sync: SyncArg,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum SyncArg {
    Auto,
    Fdatasync,
    Dsync,
}

/// A size option counted in MiB (see [`crate::size::parse_in`]).
fn parse_mib(s: &str) -> std::result::Result<u64, crate::size::SizeError> {
    crate::size::parse_in(s, 1 << 20)
}

/// A size option counted in bytes, as a `usize`.
fn parse_bytes(s: &str) -> std::result::Result<usize, crate::size::SizeError> {
    let v = crate::size::parse(s)?;
    let v = crate::size::at_most(s, v, usize::MAX as u64)?;
    Ok(v as usize)
}

impl OpenArgs {
    fn options(&self) -> Result<Options> {
        if !(1 << 20..=1 << 40).contains(&self.segment_bytes) {
            bail!(
                "--segment-mib must be between 1 MiB and 1 TiB (1 to 1048576 MiB), not {}",
                fmt_bytes(self.segment_bytes)
            );
        }
        if !self.buffer_bytes.is_power_of_two() || !(1 << 20..=4 << 30).contains(&self.buffer_bytes)
        {
            bail!(
                "--buffer-mib must be a power of two between 1 MiB and 4 GiB (1 to 4096 MiB), not {}",
                fmt_bytes(self.buffer_bytes)
            );
        }
        let buffer_bytes = usize::try_from(self.buffer_bytes).context("--buffer-mib")?;
        let opts = Options::default();
        // The journal's engine, made here so that its driver (and why not
        // io_uring, in a container) is said on stderr; if it cannot start,
        // Journal::open reports the error.
        let opts = match overlap::Engine::new() {
            Ok(engine) => {
                eprintln!("overlap journal: engine driver {}", engine.driver());
                opts.engine(engine)
            }
            Err(_) => opts,
        };
        Ok(opts
            .segment_size(self.segment_bytes)
            .buffer_bytes(buffer_bytes)
            .max_record_bytes(overlap_journal::DEFAULT_MAX_RECORD_BYTES.min(buffer_bytes / 4))
            .direct_io(!self.buffered)
            .sync(match self.sync {
                SyncArg::Auto => SyncMethod::Auto,
                SyncArg::Fdatasync => SyncMethod::Fdatasync,
                SyncArg::Dsync => SyncMethod::Dsync,
            }))
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum LevelArg {
    Accepted,
    Written,
    Durable,
}

impl From<LevelArg> for Level {
    fn from(l: LevelArg) -> Level {
        match l {
            LevelArg::Accepted => Level::Accepted,
            LevelArg::Written => Level::Written,
            LevelArg::Durable => Level::Durable,
        }
    }
}

/// Runs `overlap journal`.
pub fn run(args: JournalArgs) -> Result<()> {
    match args.cmd {
        JournalCmd::Append { dir, level, open } => append(&dir, level.into(), &open),
        JournalCmd::Dump { dir, json, strict } => dump(&dir, json, strict),
        JournalCmd::Verify { dir, strict, json } => verify(&dir, strict, json),
        JournalCmd::Repair { dir, json } => repair(&dir, json),
        JournalCmd::Bench(b) => bench(b),
    }
}

fn mode(strict: bool) -> RecoveryMode {
    if strict {
        RecoveryMode::Strict
    } else {
        RecoveryMode::TolerateTornTail
    }
}

/// Prints the cut recovery made, if any (never silent).
fn report_cut(dir: &Path, r: &overlap_journal::RecoveryReport) {
    if let Some(at) = r.truncated_at {
        let _ = writeln!(
            std::io::stderr(),
            "overlap journal: recovery cut {} at LSN {at} ({}); nothing valid followed it and it \
             is past the durable point {} recorded in the checkpoint (a torn write)",
            dir.display(),
            r.damage.as_deref().unwrap_or("damage"),
            r.checkpoint_durable_lsn
        );
    }
}

fn append(dir: &Path, level: Level, open: &OpenArgs) -> Result<()> {
    let opts = open.options()?;
    let max = opts.max_record_bytes;
    let j = Arc::new(
        Journal::open(dir, opts)
            .with_context(|| format!("opening the journal {}", dir.display()))?,
    );
    report_cut(dir, j.recovery_report());
    // A printer thread acknowledges in order while the main thread appends.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Lsn>(65536);
    let printer = {
        let j = j.clone();
        std::thread::spawn(move || -> (u64, Result<()>) {
            let stdout = std::io::stdout();
            let mut printed = 0u64;
            for lsn in rx {
                if let Err(e) = j.wait_blocking(lsn, level) {
                    let e = anyhow::Error::from(e)
                        .context(format!("the journal: waiting for LSN {lsn} to be {level}"));
                    return (printed, Err(e));
                }
                let mut o = stdout.lock();
                if let Err(e) = writeln!(o, "{lsn}").and_then(|()| o.flush()) {
                    // Not an io::Error in the chain: a closed pipe here is a
                    // failure (records not reported), not a quiet exit.
                    let e = anyhow::anyhow!(
                        "standard output failed ({e}); the journal is fine, but LSN {lsn} and \
                         later could not be reported"
                    );
                    return (printed, Err(e));
                }
                printed += 1;
            }
            (printed, Ok(()))
        })
    };
    let stdin = std::io::stdin();
    let mut line = Vec::new();
    let mut n = 0u64;
    let mut input = stdin.lock();
    let result = loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(anyhow::anyhow!("reading standard input: {e}")),
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.len() > max {
            break Err(anyhow::anyhow!(
                "line {}: {} bytes exceeds the record limit of {max} bytes",
                n + 1,
                line.len()
            ));
        }
        match j.append(&line) {
            Ok(lsn) => {
                n += 1;
                if tx.send(lsn).is_err() {
                    break Ok(()); // the printer failed; its error follows
                }
            }
            Err(e) => {
                break Err(anyhow::Error::from(e).context(format!(
                    "the journal {}: appending line {}",
                    dir.display(),
                    n + 1
                )))
            }
        }
    };
    drop(tx);
    let (printed, printer_res) = printer
        .join()
        .map_err(|_| anyhow::anyhow!("printer thread panicked"))?;
    let j = Arc::try_unwrap(j).map_err(|_| anyhow::anyhow!("journal still shared"))?;
    let closed = j.close();
    let partial = |e: anyhow::Error| {
        e.context(format!(
            "stopped after appending {n} line(s), {printed} acknowledged as {level}"
        ))
    };
    result.map_err(partial)?;
    printer_res.map_err(partial)?;
    closed.with_context(|| format!("closing the journal {}", dir.display()))?;
    Ok(())
}

#[derive(Serialize)]
struct DumpLine<'a> {
    lsn: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_b64: Option<String>,
}

/// The plain-dump form of a payload: as it is when it is UTF-8 without
/// control characters and does not start with `"`; otherwise quoted with
/// escapes. The two forms never coincide.
fn plain(data: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(t) = std::str::from_utf8(data) {
        if !t.starts_with('"') && !t.chars().any(char::is_control) {
            return t.into();
        }
    }
    let mut out = String::with_capacity(data.len() + 2);
    out.push('"');
    for chunk in data.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c if c.is_control() => {
                    let mut b = [0u8; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out.push('"');
    out.into()
}

fn dump(dir: &Path, json: bool, strict: bool) -> Result<()> {
    let opts = Options::default().recovery(mode(strict));
    let (report, records) = overlap_journal::inspect(dir, &opts)
        .with_context(|| format!("reading {}", dir.display()))?;
    if report.live {
        eprintln!(
            "note: another process is appending to {}; showing the durable prefix (up to LSN {})",
            dir.display(),
            report.checkpoint_durable_lsn
        );
    }
    let stdout = std::io::stdout();
    let mut o = std::io::BufWriter::new(stdout.lock());
    let b64 = base64::engine::general_purpose::STANDARD;
    for r in records {
        let r = r?;
        if json {
            let text = std::str::from_utf8(&r.data).ok();
            let line = DumpLine {
                lsn: r.lsn.0,
                data: text,
                data_b64: text.is_none().then(|| b64.encode(&r.data)),
            };
            serde_json::to_writer(&mut o, &line)?;
            writeln!(o)?;
        } else {
            writeln!(o, "{}\t{}", r.lsn, plain(&r.data))?;
        }
    }
    o.flush()?;
    if let (Some(at), Some(d)) = (report.truncated_at, &report.damage) {
        eprintln!(
            "note: the log has a torn tail at LSN {at} ({d}) that recovery would cut off \
             (nothing valid follows it)"
        );
    }
    Ok(())
}

fn verify(dir: &Path, strict: bool, json: bool) -> Result<()> {
    let opts = Options::default().recovery(mode(strict));
    match overlap_journal::verify(dir, &opts) {
        Ok(r) => {
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "ok: {} records in {} segments, LSN {}..{}; durable point {}{}",
                    r.records,
                    r.segments,
                    r.start_lsn,
                    r.end_lsn,
                    r.checkpoint_durable_lsn,
                    if r.live {
                        " (another process is appending: the durable prefix was checked)"
                    } else {
                        ""
                    }
                );
                if let (Some(at), Some(d)) = (r.truncated_at, &r.damage) {
                    println!(
                        "recovery would cut a torn tail at LSN {at} ({d}): it is past the \
                         checkpoint's durable point and no valid record follows it"
                    );
                }
            }
            Ok(())
        }
        Err(e @ overlap_journal::Error::Corrupt { .. }) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"corrupt": true, "error": e.to_string()})
                );
            }
            bail!(
                "{}: {e}\n(`overlap journal repair {}` cuts the log there and lists what it drops)",
                dir.display(),
                dir.display()
            )
        }
        Err(e) => Err(anyhow::Error::from(e).context(format!("verifying {}", dir.display()))),
    }
}

fn repair(dir: &Path, json: bool) -> Result<()> {
    let opts = Options::default().recovery(RecoveryMode::Salvage);
    // Never create a journal here: look first.
    overlap_journal::verify(dir, &opts).with_context(|| format!("reading {}", dir.display()))?;
    let j = Journal::open(dir, opts).with_context(|| format!("repairing {}", dir.display()))?;
    let r = j.recovery_report().clone();
    j.close().context("closing the journal")?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    match (r.truncated_at, &r.damage) {
        (Some(at), Some(d)) => {
            println!("cut the log at LSN {at}: {d}");
            if r.cut_acknowledged {
                println!(
                    "the cut is before the durable point {}: records acknowledged durable were dropped",
                    r.checkpoint_durable_lsn
                );
            }
            println!(
                "dropped {} valid record(s) after the damage ({} payload bytes){}",
                r.dropped_records,
                r.dropped_bytes,
                if r.dropped_records > 0 {
                    "; their LSNs will be handed out again"
                } else {
                    ""
                }
            );
            for lsn in &r.dropped_lsns {
                println!("dropped\t{lsn}");
            }
            if r.dropped_records > r.dropped_lsns.len() as u64 {
                println!(
                    "dropped\t... {} more",
                    r.dropped_records - r.dropped_lsns.len() as u64
                );
            }
            println!(
                "kept {} record(s), LSN {}..{}",
                r.records, r.start_lsn, r.end_lsn
            );
        }
        _ => println!(
            "nothing to repair: {} records, LSN {}..{}",
            r.records, r.start_lsn, r.end_lsn
        ),
    }
    Ok(())
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// The issue's three scenarios: append latency (100 B, 4 threads),
    /// throughput at Written (100 B, 4 threads), and 64 committers waiting
    /// for Durable on 4 KiB records against an fdatasync-per-record baseline.
    Targets,
    /// One run with --record-bytes, --threads, --level.
    Custom,
}

/// Options of `overlap journal bench`.
#[derive(Args, Debug, Clone)]
struct BenchArgs {
    /// Which scenarios.
    #[arg(long, value_enum, default_value_t = Scenario::Targets)]
    scenario: Scenario,
    /// Record payload size (custom scenario): bytes, or a size with a
    /// binary unit (4k).
    #[arg(long, value_name = "SIZE", default_value = "100", value_parser = parse_bytes)]
    record_bytes: usize,
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
    #[arg(long, default_value_t = overlap_journal::DEFAULT_RECYCLE_SEGMENTS)]
    recycle_segments: usize,
    #[command(flatten)]
    open: OpenArgs,
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
    segments_created: u64,
    segments_recycled: u64,
    write_us_p50: u64,
    syncs: u64,
    sync_us_p50: u64,
    storage: String,
}

fn bench(args: BenchArgs) -> Result<()> {
    if !(args.duration > 0.0 && args.duration <= 3600.0) {
        bail!("--duration must be more than 0 and at most 3600 seconds");
    }
    let limit = overlap_journal::DEFAULT_MAX_RECORD_BYTES;
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
        .join(format!("overlap-journal-bench-{}", std::process::id()));
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
         segments created {}, recycled {}",
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
        r.segments_created,
        r.segments_recycled
    );
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
        .options()?
        .max_record_bytes(bytes.max(1).next_power_of_two())
        .recycle_segments(args.recycle_segments);
    let j = Arc::new(Journal::open(dir, opts).context("opening the bench journal")?);
    let storage = j.recovery_report().storage.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let duration = Duration::from_secs_f64(args.duration);
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let j = j.clone();
            let stop = stop.clone();
            std::thread::spawn(
                move || -> Result<(Histogram<u64>, Histogram<u64>, u64, Lsn)> {
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
                            let _ = commit.record(
                                t1.elapsed().as_micros().max(1) as u64
                                    + (t1 - t0).as_micros() as u64,
                            );
                        }
                        n += 1;
                    }
                    Ok((lat, commit, n, last))
                },
            )
        })
        .collect();
    // The retirer: what a database does after each checkpoint.
    let retirer = (args.retire_every_ms > 0).then(|| {
        let j = j.clone();
        let stop = stop.clone();
        let every = Duration::from_millis(args.retire_every_ms);
        std::thread::spawn(move || -> Result<()> {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(every);
                j.truncate_before(j.watermark(Level::Durable))?;
            }
            Ok(())
        })
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
    let stats = j.stats();
    drop(j);
    let records_per_s = records as f64 / elapsed;
    let baseline = if level == Level::Durable {
        Some(baseline_commits(dir, bytes, threads, duration)?)
    } else {
        None
    };
    Ok(BenchResult {
        scenario: name.to_string(),
        record_bytes: bytes,
        threads,
        level: level.to_string(),
        duration_s: elapsed,
        records,
        records_per_s,
        append_ns_p50: lat.value_at_quantile(0.5),
        append_ns_p99: lat.value_at_quantile(0.99),
        append_ns_p999: lat.value_at_quantile(0.999),
        append_ns_max: lat.max(),
        commits_per_s: (level == Level::Durable).then_some(records_per_s),
        baseline_commits_per_s: baseline,
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
        segments_created: stats.segments_created,
        segments_recycled: stats.segments_recycled,
        write_us_p50: stats.write_latency_us.p50,
        syncs: stats.syncs,
        sync_us_p50: stats.sync_latency_us.p50,
        storage,
    })
}

/// The naive log: `threads` committers share one preallocated file; each
/// commit writes its record at the next offset and calls `fdatasync`
/// before the next commit may start (a mutex keeps the log's order).
fn baseline_commits(dir: &Path, bytes: usize, threads: usize, duration: Duration) -> Result<f64> {
    use std::os::unix::fs::FileExt;
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
    f.write_all_at(&vec![0u8; SIZE as usize], 0)?;
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
                    g.0.write_all_at(&data, off)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<JournalArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            journal: JournalArgs,
        }
        <Cli as clap::Parser>::try_parse_from(
            std::iter::once("journal").chain(args.iter().copied()),
        )
        .map(|c| c.journal)
    }

    fn open_of(args: &[&str]) -> OpenArgs {
        match parse(args).unwrap().cmd {
            JournalCmd::Append { open, .. } => open,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mib_options_take_a_bare_number_of_mib_or_a_size() {
        assert_eq!(open_of(&["append", "d"]).segment_bytes, 64 << 20);
        assert_eq!(open_of(&["append", "d"]).buffer_bytes, 16 << 20);
        for (arg, bytes) in [
            ("8", 8u64 << 20),
            ("8M", 8 << 20),
            ("1G", 1 << 30),
            ("2048k", 2 << 20),
        ] {
            let o = open_of(&["append", "d", "--segment-mib", arg]);
            assert_eq!(o.segment_bytes, bytes, "{arg}");
        }
        let e = parse(&["append", "d", "--segment-mib", "512K"]).unwrap_err();
        assert!(e.to_string().contains("not a whole number of 1 MiB"), "{e}");
        let e = parse(&["append", "d", "--buffer-mib", "1.5"]).unwrap_err();
        assert!(e.to_string().contains("fractions are refused"), "{e}");
    }

    #[test]
    fn record_bytes_take_a_size() {
        for (arg, bytes) in [("100", 100usize), ("4k", 4096), ("1MiB", 1 << 20)] {
            match parse(&["bench", "--record-bytes", arg]).unwrap().cmd {
                JournalCmd::Bench(b) => assert_eq!(b.record_bytes, bytes, "{arg}"),
                other => panic!("{other:?}"),
            }
        }
        assert!(parse(&["bench", "--record-bytes", "-1"]).is_err());
    }

    #[test]
    fn out_of_range_sizes_are_refused_before_anything_is_made() {
        let e = open_of(&["append", "d", "--segment-mib", "0"])
            .options()
            .unwrap_err();
        assert!(e.to_string().contains("--segment-mib"), "{e}");
        let e = open_of(&["append", "d", "--buffer-mib", "3"])
            .options()
            .unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}
