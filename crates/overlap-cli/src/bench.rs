//! `overlap bench`: fio-style measurements of the overlap engine (io_uring or
//! the thread pool) and of plain `pread`/`pwrite`, optionally side by side
//! with fio itself on the same file.
//!
//! Vocabulary (also in BENCHMARKS.md):
//! - `--iodepth N`: one requester keeps N operations in flight (engine: one
//!   thread with a completion port, or N futures; sync: N threads, as fio's
//!   psync with `numjobs=N`).
//! - `--concurrency N`: N independent requesters, each with one operation in
//!   flight (engine: N tokio tasks on a multi-thread runtime with one worker
//!   per core, or with `--requester threads` N OS threads each blocking in
//!   `.wait()`; sync: N threads). Both given: concurrency × iodepth in flight
//!   (`--requester threads` refuses an iodepth above 1).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use crate::size::fmt_bytes;

mod claims;
mod datafile;
mod fio;
mod measure;
mod plot;
mod report;
mod run;
mod tokio_baselines;

pub(crate) use report::BenchResult;

/// Data written to `--dir` is this big unless `--size` says otherwise.
const DEFAULT_SIZE: u64 = 1 << 30;
/// Operations per result for random jobs when neither `--ops` nor
/// `--runtime` is given (sequential jobs make one pass over the file).
const DEFAULT_RANDOM_OPS: u64 = 100_000;
/// Most threads the sync baseline (concurrency × iodepth) or the `threads`
/// requester (concurrency) may start.
const MAX_SYNC_THREADS: usize = 4096;
/// Most requesters or depth accepted (bounded like everything else).
const MAX_PARALLEL: usize = 65_536;

/// Access pattern, as fio's `--rw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Rw {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniformly random block-aligned reads.
    Randread,
    /// Uniformly random block-aligned writes.
    Randwrite,
}

impl Rw {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::Randread => "randread",
            Rw::Randwrite => "randwrite",
        }
    }
    pub(crate) fn is_write(self) -> bool {
        matches!(self, Rw::Write | Rw::Randwrite)
    }
    pub(crate) fn is_random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite)
    }
}

/// Who performs the I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Driver {
    /// The overlap engine with the driver it chooses (io_uring, else Linux
    /// AIO beside the pool, else the pool; `OVERLAP_DRIVER` obeyed): what
    /// an application gets. Resolved before the run, and said.
    Auto,
    /// The overlap engine on io_uring.
    Uring,
    /// The overlap engine on Linux AIO for O_DIRECT reads and writes, its
    /// thread pool for the rest (`aio+pool`).
    Aio,
    /// The overlap engine on its bounded thread pool.
    Pool,
    /// Plain pread/pwrite on the caller's threads: the baseline.
    Sync,
    /// pread/pwrite inside `tokio::task::spawn_blocking`, from --concurrency
    /// tokio tasks (what `tokio::fs` does underneath).
    SpawnBlocking,
    /// `tokio::fs::File` (seek, then read_exact or write_all), one per
    /// tokio task; always buffered (its buffer cannot be aligned for
    /// O_DIRECT), reading the evicted file through the page cache.
    TokioFs,
}

impl Driver {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Driver::Auto => "auto",
            Driver::Uring => "uring",
            Driver::Aio => "aio",
            Driver::Pool => "pool",
            Driver::Sync => "sync",
            Driver::SpawnBlocking => "spawn-blocking",
            Driver::TokioFs => "tokio-fs",
        }
    }
}

/// How one engine requester keeps `--iodepth` operations in flight, or how
/// the `--concurrency` requesters run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Requester {
    /// A port when --iodepth is above 1, a future awaited in a loop at 1 (the
    /// cheaper of the two for each; see BENCHMARKS.md).
    Auto,
    /// N futures in a `FuturesUnordered`, polled on one thread.
    Futures,
    /// A completion port with N outstanding, resubmitting on each completion.
    Port,
    /// --concurrency N OS threads, each blocking in the engine's `.wait()`
    /// on one operation at a time (fio's psync with numjobs=N, a
    /// thread-per-request server); --iodepth must be 1. With --driver sync,
    /// what sync always does.
    Threads,
}

/// The standard workloads (BENCHMARKS.md gives the equivalent fio commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Preset {
    /// 500 × 64 KiB scattered O_DIRECT reads, all submitted at once.
    Asynchio,
    /// 4 KiB random O_DIRECT reads, 32 in flight, 200,000 reads; uring, pool and sync.
    Randread,
    /// Concurrency 4, 16, 64, 256, 1024; 4 KiB random O_DIRECT reads; 100,000 per level.
    Scale,
    /// Sequential 64 KiB O_DIRECT writes over the whole file, 32 in flight,
    /// growing file vs preallocated.
    Append,
    /// 4 KiB random reads from a file fully in the page cache; uring vs sync.
    Cached,
}

impl Preset {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Preset::Asynchio => "asynchio",
            Preset::Randread => "randread",
            Preset::Scale => "scale",
            Preset::Append => "append",
            Preset::Cached => "cached",
        }
    }
}

/// Options of `overlap bench`. Sizes take binary suffixes as fio does
/// (`4k` = 4096, `1M`, `1G`; `KiB`/`MiB`/`GiB` also accepted). A
/// comma-separated list for `--bs`, `--iodepth`, `--concurrency` or
/// `--driver` runs a sweep (every combination).
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    overlap bench --preset randread --compare-fio\n  \
    overlap bench --rw randread --bs 4k --direct --iodepth 1,8,32 --ops 100000 --plot depth.svg\n  \
    overlap bench --preset scale --driver uring,sync --json")]
pub struct BenchArgs {
    #[command(flatten)]
    opts: Box<BenchOpts>,
}

/// The options themselves (boxed: they are many).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BenchOpts {
    /// A named standard workload; explicit options override its settings.
    #[arg(long, value_enum)]
    preset: Option<Preset>,

    /// Access pattern [default: randread].
    #[arg(long, value_enum)]
    rw: Option<Rw>,

    /// Block size of each operation (list: sweep) [default: 4k].
    #[arg(long, value_name = "SIZE[,SIZE...]", value_delimiter = ',', value_parser = parse_bs)]
    bs: Vec<usize>,

    /// Operations one requester keeps in flight; with --driver sync, that many
    /// threads, as fio's psync with numjobs (list: sweep) [default: 1].
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', value_parser = parse_parallel)]
    iodepth: Vec<usize>,

    /// Independent requesters, each with one operation in flight (list:
    /// sweep) [default: 1].
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', value_parser = parse_parallel)]
    concurrency: Vec<usize>,

    /// O_DIRECT (bypass the page cache). `--direct`, `--direct=1` or `--direct=0`.
    #[arg(long, num_args = 0..=1, default_missing_value = "1", value_parser = parse_bool)]
    direct: Option<bool>,

    /// Size of the data file [default: 1G]. With --file, at most the file's length.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size: Option<u64>,

    /// Operations per result (total over all requesters).
    #[arg(long, value_name = "N", conflicts_with = "runtime", value_parser = parse_ops)]
    ops: Option<u64>,

    /// Run each result for this long instead of a number of operations
    /// (`10s`, `500ms`, `2m`; a bare number is seconds).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    runtime: Option<Duration>,

    /// Write jobs: allocate the whole file (fallocate) before writing;
    /// without it, writes extend a fresh, empty file.
    #[arg(long)]
    prealloc: bool,

    /// Who performs the I/O: the engine with the driver it chooses (auto),
    /// on io_uring, on Linux AIO beside its pool (aio), on its thread pool,
    /// or plain pread/pwrite (list: sweep; an unavailable driver is
    /// skipped and said) [default: auto].
    #[arg(long, value_enum, value_delimiter = ',')]
    driver: Vec<Driver>,

    /// Directory for the data file (`overlap-bench-*.dat`, removed at the end)
    /// [default: the current directory].
    #[arg(long, value_name = "DIR", conflicts_with = "file")]
    dir: Option<PathBuf>,

    /// Use this existing file (as fio's --filename). Never written by read
    /// jobs; write jobs are refused unless --allow-write is given.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,

    /// Allow write jobs to overwrite the file given with --file.
    #[arg(long, requires = "file")]
    allow_write: bool,

    /// The engine's in-flight byte budget [default: the engine's, 64M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_inflight_bytes: Option<u64>,

    /// The engine's in-flight operation budget [default: the engine's, 4096].
    #[arg(long, value_name = "N", value_parser = parse_ops)]
    max_inflight_ops: Option<u64>,

    /// Threads of the engine's pool driver [default: the engine's, 32].
    #[arg(long, value_name = "N", value_parser = parse_ops)]
    pool_threads: Option<u64>,

    /// Most kernel io_uring workers (iou-wrk) per class [default: the kernel's].
    #[arg(long, value_name = "N", value_parser = parse_ops)]
    max_kernel_workers: Option<u64>,

    /// Turn off the engine's page-cache fast path (preadv2 RWF_NOWAIT).
    #[arg(long)]
    no_fast_path: bool,

    /// Buffered reads: read the whole file into the page cache first and keep
    /// it there (without it, cached pages of the file are dropped before each
    /// result, as fio's invalidate=1 does).
    #[arg(long)]
    warm: bool,

    /// How one engine requester keeps --iodepth operations in flight (with
    /// --concurrency above 1, each requester is a tokio task using futures);
    /// or `threads`: the --concurrency requesters are OS threads blocking in
    /// `.wait()`, one operation each (--iodepth 1 only).
    #[arg(long, value_enum, default_value = "auto")]
    requester: Requester,

    /// Seed for random offsets.
    #[arg(long, default_value_t = 0x6f76_6572_6c61_70)]
    seed: u64,

    /// Also run fio (if on PATH) with the equivalent jobs on the same file and
    /// print overlap/fio ratios.
    #[arg(long)]
    compare_fio: bool,

    /// One JSON object per result on stdout, instead of a table.
    #[arg(long)]
    json: bool,

    /// Draw throughput against the swept parameter into FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE", value_parser = parse_plot_path)]
    plot: Option<PathBuf>,
}

/// One measurement to make.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub driver: Driver,
    pub rw: Rw,
    pub bs: usize,
    pub iodepth: usize,
    pub concurrency: usize,
    pub direct: bool,
    pub prealloc: bool,
    pub warm: bool,
    pub ops: Option<u64>,
    pub runtime: Option<Duration>,
    pub max_inflight_ops: Option<usize>,
    pub max_inflight_bytes: Option<usize>,
    pub pool_threads: Option<usize>,
    pub max_kernel_workers: Option<u32>,
    pub fast_path: bool,
    pub requester: Requester,
    pub seed: u64,
}

impl Job {
    /// Operations in flight at once when the requesters keep up.
    pub(crate) fn in_flight(&self) -> usize {
        self.iodepth * self.concurrency
    }
}

/// Everything resolved from the options and the preset.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub preset: Option<Preset>,
    pub jobs: Vec<Job>,
    pub size: u64,
    pub swept: Option<&'static str>,
}

// ---------------------------------------------------------------------------
// Value parsers: clear messages for bad values.

fn parse_size(s: &str) -> Result<u64, String> {
    crate::size::parse_nonzero(s).map_err(|e| e.to_string())
}

fn parse_bs(s: &str) -> Result<usize, String> {
    let v = parse_size(s)?;
    if v > overlap::MAX_RW_BYTES as u64 {
        return Err(format!(
            "block size `{s}` exceeds the largest single transfer ({} bytes)",
            overlap::MAX_RW_BYTES
        ));
    }
    Ok(v as usize)
}

fn parse_parallel(s: &str) -> Result<usize, String> {
    let v: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number (expected 1 to {MAX_PARALLEL})"))?;
    if v == 0 || v > MAX_PARALLEL {
        return Err(format!(
            "`{s}` is out of range: expected 1 to {MAX_PARALLEL}"
        ));
    }
    Ok(v)
}

fn parse_ops(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let v: u64 = t
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if v == 0 {
        return Err(format!("`{s}`: must be at least 1"));
    }
    Ok(v)
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("`{s}`: expected 1 or 0 (true or false)")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("`{s}` is not a duration: expected e.g. 10s, 500ms, 2m or a number of seconds")
    })?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "`{s}`: unknown time unit `{other}` (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 {
        return Err(format!(
            "`{s}`: the duration must be above 0 and at most 24h"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_plot_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    match p
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
    {
        Some(e) if e == "svg" || e == "png" => Ok(p),
        _ => Err(format!("`{s}`: the plot file must end in .svg or .png")),
    }
}

fn usize_opt(v: Option<u64>, name: &str) -> Result<Option<usize>> {
    v.map(|n| usize::try_from(n).with_context(|| format!("--{name} {n} is too large")))
        .transpose()
}

// ---------------------------------------------------------------------------
// Resolving options and presets into jobs.

struct PresetDefaults {
    rw: Rw,
    bs: Vec<usize>,
    iodepth: Vec<usize>,
    concurrency: Vec<usize>,
    direct: bool,
    ops: Option<u64>,
    drivers: Vec<Driver>,
    prealloc: Vec<bool>,
    warm: bool,
}

fn preset_defaults(p: Option<Preset>) -> PresetDefaults {
    let base = PresetDefaults {
        rw: Rw::Randread,
        bs: vec![4096],
        iodepth: vec![1],
        concurrency: vec![1],
        direct: false,
        ops: None,
        drivers: vec![Driver::Auto],
        prealloc: vec![false],
        warm: false,
    };
    match p {
        None => base,
        Some(Preset::Asynchio) => PresetDefaults {
            bs: vec![64 << 10],
            iodepth: vec![500],
            direct: true,
            ops: Some(500),
            ..base
        },
        Some(Preset::Randread) => PresetDefaults {
            iodepth: vec![32],
            direct: true,
            ops: Some(200_000),
            drivers: vec![Driver::Uring, Driver::Pool, Driver::Sync],
            ..base
        },
        Some(Preset::Scale) => PresetDefaults {
            concurrency: vec![4, 16, 64, 256, 1024],
            direct: true,
            ops: Some(100_000),
            ..base
        },
        Some(Preset::Append) => PresetDefaults {
            rw: Rw::Write,
            bs: vec![64 << 10],
            iodepth: vec![32],
            direct: true,
            ops: None, // one pass over the file
            prealloc: vec![false, true],
            ..base
        },
        Some(Preset::Cached) => PresetDefaults {
            ops: Some(200_000),
            drivers: vec![Driver::Uring, Driver::Sync],
            warm: true,
            ..base
        },
    }
}

fn or_default<T: Clone>(given: &[T], default: Vec<T>) -> Vec<T> {
    if given.is_empty() {
        default
    } else {
        given.to_vec()
    }
}

/// Turns the options into the list of jobs; rejects contradictions.
pub(crate) fn plan(args: &BenchOpts) -> Result<Plan> {
    let d = preset_defaults(args.preset);
    let rw = args.rw.unwrap_or(d.rw);
    let bs = or_default(&args.bs, d.bs);
    let iodepth = or_default(&args.iodepth, d.iodepth);
    let concurrency = or_default(&args.concurrency, d.concurrency);
    let drivers = or_default(&args.driver, d.drivers);
    let direct = args.direct.unwrap_or(d.direct);
    let prealloc = if args.prealloc {
        vec![true]
    } else if rw.is_write() {
        d.prealloc
    } else {
        vec![false]
    };
    let warm = args.warm || d.warm;
    let ops = if args.runtime.is_some() {
        None
    } else {
        args.ops.or(d.ops)
    };
    let size = args.size.unwrap_or(DEFAULT_SIZE);

    if args.file.is_some() && rw.is_write() && !args.allow_write {
        bail!(
            "--rw {} would write to --file {}: refused (pass --allow-write to overwrite it, or use --dir for a scratch file)",
            rw.as_str(),
            args.file.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
        );
    }
    if args.prealloc && !rw.is_write() {
        bail!("--prealloc only applies to write jobs (--rw write or randwrite)");
    }
    if warm && direct {
        bail!(
            "--warm (page-cache reads{}) and --direct (bypass the page cache) contradict each other",
            if args.warm { "" } else { ", implied by --preset cached" }
        );
    }
    if warm && rw.is_write() {
        bail!("--warm applies to read jobs only");
    }
    for &b in &bs {
        if u64::try_from(b).unwrap_or(u64::MAX) > size {
            bail!(
                "--bs {} is larger than --size {}: the file must hold at least one block",
                fmt_bytes(b as u64),
                fmt_bytes(size)
            );
        }
        if direct && b % 512 != 0 {
            bail!(
                "--bs {b} with --direct: O_DIRECT needs block sizes that are multiples of the file's \
                 direct-I/O alignment (512 or 4096 bytes)"
            );
        }
    }
    let max_inflight_ops = usize_opt(args.max_inflight_ops, "max-inflight-ops")?;
    let max_inflight_bytes = usize_opt(args.max_inflight_bytes, "max-inflight-bytes")?;
    let pool_threads = usize_opt(args.pool_threads, "pool-threads")?;
    let max_kernel_workers = args
        .max_kernel_workers
        .map(|n| u32::try_from(n).with_context(|| format!("--max-kernel-workers {n} is too large")))
        .transpose()?;
    if let Some(n) = pool_threads {
        if n > overlap::MAX_POOL_THREADS {
            bail!(
                "--pool-threads {n} exceeds the engine's ceiling of {}",
                overlap::MAX_POOL_THREADS
            );
        }
    }

    let threads = args.requester == Requester::Threads;
    if threads {
        if let Some(&depth) = iodepth.iter().find(|&&d| d > 1) {
            bail!(
                "--requester threads keeps one operation in flight per thread: --iodepth {depth}{} is refused \
                 (use --concurrency N for N threads, with --iodepth 1)",
                match (args.iodepth.is_empty(), args.preset) {
                    (true, Some(p)) => format!(" (set by --preset {})", p.as_str()),
                    _ => String::new(),
                }
            );
        }
    }

    let tokio_baselines = drivers
        .iter()
        .filter(|d| matches!(d, Driver::SpawnBlocking | Driver::TokioFs))
        .count();
    if tokio_baselines > 0 && iodepth.iter().any(|&d| d > 1) {
        bail!(
            "--driver spawn-blocking and tokio-fs run --concurrency N tokio tasks with one operation each in flight: \
             --iodepth above 1 is refused (use --concurrency)"
        );
    }
    if direct && drivers.contains(&Driver::TokioFs) {
        eprintln!(
            "note: --driver tokio-fs runs buffered: tokio::fs::File reads through a buffer of its own, \
             which cannot be aligned for O_DIRECT; the file is evicted from the page cache first"
        );
    }

    let mut jobs = Vec::new();
    for &driver in &drivers {
        for &b in &bs {
            for &depth in &iodepth {
                for &conc in &concurrency {
                    if driver == Driver::Sync && depth * conc > MAX_SYNC_THREADS {
                        bail!(
                            "--driver sync with concurrency {conc} × iodepth {depth} would start {} threads; at most {MAX_SYNC_THREADS}",
                            depth * conc
                        );
                    }
                    if threads && conc > MAX_SYNC_THREADS {
                        bail!(
                            "--requester threads with concurrency {conc} would start {conc} threads; at most {MAX_SYNC_THREADS}"
                        );
                    }
                    if depth * conc > MAX_PARALLEL {
                        bail!(
                            "concurrency {conc} × iodepth {depth} = {} operations in flight; at most {MAX_PARALLEL}",
                            depth * conc
                        );
                    }
                    for &pre in &prealloc {
                        jobs.push(Job {
                            driver,
                            rw,
                            bs: b,
                            iodepth: depth,
                            concurrency: conc,
                            direct: direct && driver != Driver::TokioFs,
                            prealloc: pre,
                            warm,
                            ops,
                            runtime: args.runtime,
                            max_inflight_ops,
                            max_inflight_bytes,
                            pool_threads,
                            max_kernel_workers,
                            fast_path: !args.no_fast_path,
                            requester: args.requester,
                            seed: args.seed,
                        });
                    }
                }
            }
        }
    }
    let swept = if concurrency.len() > 1 {
        Some("concurrency")
    } else if iodepth.len() > 1 {
        Some("iodepth")
    } else if bs.len() > 1 {
        Some("bs")
    } else if prealloc.len() > 1 {
        Some("prealloc")
    } else if drivers.len() > 1 {
        Some("driver")
    } else {
        None
    };
    Ok(Plan {
        preset: args.preset,
        jobs,
        size,
        swept,
    })
}

/// Runs `overlap bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let args = *args.opts;
    let mut plan = plan(&args)?;
    resolve_drivers(&mut plan)?;
    let interactive = !args.json && std::io::stderr().is_terminal();
    let mut data = datafile::DataFiles::new(
        args.dir.clone().unwrap_or_else(|| PathBuf::from(".")),
        args.file.clone(),
        args.size.is_some(),
        plan.size,
    );
    let outcome = run_plan(&args, &plan, &mut data, interactive);
    let cleanup = data.cleanup();
    let results = outcome?;
    cleanup?;
    if !args.json {
        // The rows were printed as each result came in.
        report::print_ratios(&results);
    }
    if let Some(path) = &args.plot {
        plot::draw(path, &results, plan.swept)?;
        if !args.json {
            println!("plot written to {}", path.display());
        }
    }
    Ok(())
}

/// Whether the engine can run on `driver` here: `Err(why)` if not.
fn engine_available(driver: Driver) -> std::result::Result<overlap::DriverInfo, String> {
    let choice = match driver {
        Driver::Uring => overlap::DriverChoice::Uring,
        Driver::Aio => overlap::DriverChoice::Aio,
        Driver::Pool => overlap::DriverChoice::Pool,
        _ => overlap::DriverChoice::Auto,
    };
    overlap::Engine::builder()
        .driver(choice)
        .build()
        .map(|e| e.driver().clone())
        .map_err(|e| e.to_string())
}

/// Replaces `auto` with the driver the engine chooses (saying which and
/// why), and drops the jobs of drivers unavailable here (saying so), so a
/// sweep such as `uring,pool,sync` runs what it can.
fn resolve_drivers(plan: &mut Plan) -> Result<()> {
    let mut verdicts: Vec<(Driver, std::result::Result<Driver, String>)> = Vec::new();
    for job in &plan.jobs {
        if verdicts.iter().any(|(d, _)| *d == job.driver) {
            continue;
        }
        let verdict = match job.driver {
            Driver::Auto => {
                let info = engine_available(Driver::Auto)
                    .map_err(|e| anyhow::anyhow!("the engine could not start: {e}"))?;
                eprintln!("overlap bench: no --driver given: the engine chose {info}");
                Ok(match info.kind {
                    overlap::DriverKind::Uring => Driver::Uring,
                    overlap::DriverKind::Aio => Driver::Aio,
                    _ => Driver::Pool,
                })
            }
            d @ (Driver::Uring | Driver::Aio) => engine_available(d).map(|_| d),
            d => Ok(d),
        };
        if let Err(why) = &verdict {
            eprintln!(
                "overlap bench: skipped --driver {}: {why}",
                job.driver.as_str()
            );
        }
        verdicts.push((job.driver, verdict));
    }
    let total = plan.jobs.len();
    plan.jobs.retain_mut(
        |job| match verdicts.iter().find(|(d, _)| *d == job.driver) {
            Some((_, Ok(d))) => {
                job.driver = *d;
                true
            }
            _ => false,
        },
    );
    if plan.jobs.is_empty() && total > 0 {
        bail!("no job left to run: every driver asked for is unavailable here (see above)");
    }
    Ok(())
}

fn run_plan(
    args: &BenchOpts,
    plan: &Plan,
    data: &mut datafile::DataFiles,
    interactive: bool,
) -> Result<Vec<BenchResult>> {
    let fio_bin = args.compare_fio.then(fio::find).flatten();
    if args.compare_fio && fio_bin.is_none() {
        eprintln!(
            "fio not found on PATH: running overlap alone (install it with `apt-get install fio`, \
             or the package of your distribution, to get the comparison)"
        );
    }
    let mut results = Vec::new();
    let mut fio_done: Vec<fio::FioJob> = Vec::new();
    let total = plan.jobs.len();
    for (n, job) in plan.jobs.iter().enumerate() {
        let target = data.target_for(job)?;
        if !args.json {
            eprintln!(
                "[{}/{}] overlap {} {} bs={} iodepth={} concurrency={}{}{}{}",
                n + 1,
                total,
                job.driver.as_str(),
                job.rw.as_str(),
                job.bs,
                job.iodepth,
                job.concurrency,
                if job.requester == Requester::Threads {
                    " threads"
                } else {
                    ""
                },
                if job.direct { " direct" } else { "" },
                if job.rw.is_write() {
                    if job.prealloc {
                        " preallocated"
                    } else {
                        " growing"
                    }
                } else {
                    ""
                }
            );
        }
        let res = run::run_job(job, &target, interactive)
            .with_context(|| format!("{} job on {}", job.driver.as_str(), target.path.display()))?;
        let r = BenchResult::from_overlap(plan.preset, job, &target, res);
        show(&r, args.json, results.is_empty())?;
        results.push(r);

        if let Some(bin) = &fio_bin {
            for fj in fio::equivalents(job, &target) {
                if fio_done.iter().any(|d| d.same_as(&fj)) {
                    continue;
                }
                let target = data.target_for(job)?; // fresh file again for write jobs
                if !args.json {
                    eprintln!("      fio: {}", fj.command_line(bin, &target.path));
                }
                match fio::run(bin, &fj, &target, plan.preset, interactive) {
                    Ok(r) => {
                        show(&r, args.json, results.is_empty())?;
                        results.push(r);
                    }
                    // fio's own failure costs the comparison, not the results.
                    Err(e) => eprintln!("fio: {e:#}; going on without this comparison"),
                }
                fio_done.push(fj);
            }
        }
    }
    Ok(results)
}

/// Prints a result as soon as it is known: a JSON line, or a table row
/// (after the header, for the first).
fn show(r: &BenchResult, json: bool, first: bool) -> Result<()> {
    if json {
        return report::print_json(r);
    }
    if first {
        report::print_header();
    }
    report::print_row(r);
    Ok(())
}

/// Where a job reads or writes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub path: PathBuf,
    /// Usable bytes: the file (or the part of it the job covers).
    pub size: u64,
}

impl Target {
    pub(crate) fn blocks(&self, bs: usize) -> u64 {
        self.size / bs as u64
    }
}

/// The default number of operations for a job on `size` bytes.
pub(crate) fn default_ops(job: &Job, size: u64) -> u64 {
    if job.rw.is_random() {
        DEFAULT_RANDOM_OPS
    } else {
        (size / job.bs as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("x").is_err());
        assert!(parse_size("4q").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999999999999t").is_err());
    }

    fn plan_of(args: &[&str]) -> Result<Plan> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            opts: BenchOpts,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(
            std::iter::once("bench").chain(args.iter().copied()),
        )?;
        plan(&cli.opts)
    }

    #[test]
    fn threads_requester_pairs_with_psync_numjobs_then_io_uring() {
        let p = plan_of(&[
            "--requester",
            "threads",
            "--concurrency",
            "4,16",
            "--driver",
            "uring,pool,sync",
        ])
        .unwrap();
        assert_eq!(p.swept, Some("concurrency"));
        assert_eq!(p.jobs.len(), 6);
        let target = Target {
            path: PathBuf::from("/nonexistent"),
            size: 1 << 20,
        };
        for job in &p.jobs {
            assert_eq!(job.requester, Requester::Threads);
            assert_eq!(job.iodepth, 1);
            let n = job.concurrency;
            let got: Vec<_> = fio::equivalents(job, &target)
                .iter()
                .map(|f| (f.ioengine, f.iodepth, f.numjobs))
                .collect();
            match job.driver {
                Driver::Sync => assert_eq!(got, [("psync", 1, n)]),
                _ => assert_eq!(got, [("psync", 1, n), ("io_uring", n, 1)]),
            }
        }
        // Without --requester threads, the tokio rows keep their pairing.
        let p = plan_of(&["--concurrency", "4", "--driver", "uring"]).unwrap();
        let got: Vec<_> = fio::equivalents(&p.jobs[0], &target)
            .iter()
            .map(|f| (f.ioengine, f.iodepth, f.numjobs))
            .collect();
        assert_eq!(got, [("io_uring", 4, 1)]);
    }

    #[test]
    fn threads_requester_refuses_a_depth() {
        let e = plan_of(&["--requester", "threads", "--iodepth", "2"]).unwrap_err();
        assert!(e.to_string().contains("--iodepth 2 is refused"), "{e}");
        assert!(plan_of(&["--requester", "threads", "--preset", "scale"]).is_ok());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }
}
