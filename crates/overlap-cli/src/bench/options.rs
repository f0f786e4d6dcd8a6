//! `overlap bench`'s options: what can be asked for, and the value
//! parsers that refuse bad values with a clear message.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::ValueEnum;

/// Most requesters or depth accepted (bounded like everything else).
pub(crate) const MAX_PARALLEL: usize = 65_536;

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
    /// The overlap engine on Windows' I/O completion ports (Windows only).
    Iocp,
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
    /// The system's own asynchronous driver: io_uring on Linux, I/O
    /// completion ports on Windows (what the presets compare).
    #[cfg(not(windows))]
    pub(crate) const NATIVE: Driver = Driver::Uring;
    /// The system's own asynchronous driver: io_uring on Linux, I/O
    /// completion ports on Windows (what the presets compare).
    #[cfg(windows)]
    pub(crate) const NATIVE: Driver = Driver::Iocp;

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Driver::Auto => "auto",
            Driver::Uring => "uring",
            Driver::Aio => "aio",
            Driver::Pool => "pool",
            Driver::Iocp => "iocp",
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
    /// cheaper of the two for each; see docs/benchmarking.md).
    Auto,
    /// N futures polled together on one thread with its own context (as
    /// `join!` does): in `overlapped::block_on`, on the thread's own ring.
    Futures,
    /// A completion port with N outstanding, resubmitting on each completion.
    Port,
    /// --concurrency N OS threads, each blocking in the engine's `.wait()`
    /// on one operation at a time (fio's psync with numjobs=N, a
    /// thread-per-request server); --iodepth must be 1. With --driver sync,
    /// what sync always does.
    Threads,
}

/// The standard workloads (docs/benchmarking.md gives the equivalent fio commands).
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
    pub(crate) opts: Box<BenchOpts>,
}

/// The options themselves (boxed: they are many).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BenchOpts {
    /// A named standard workload; explicit options override its settings.
    #[arg(long, value_enum)]
    pub(crate) preset: Option<Preset>,

    /// Access pattern [default: randread].
    #[arg(long, value_enum)]
    pub(crate) rw: Option<Rw>,

    /// Block size of each operation (list: sweep) [default: 4k].
    #[arg(long, value_name = "SIZE[,SIZE...]", value_delimiter = ',', value_parser = parse_bs)]
    pub(crate) bs: Vec<usize>,

    /// Operations one requester keeps in flight; with --driver sync, that many
    /// threads, as fio's psync with numjobs (list: sweep) [default: 1].
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', value_parser = parse_parallel)]
    pub(crate) iodepth: Vec<usize>,

    /// Independent requesters, each with one operation in flight (list:
    /// sweep) [default: 1].
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', value_parser = parse_parallel)]
    pub(crate) concurrency: Vec<usize>,

    /// O_DIRECT (bypass the page cache). `--direct`, `--direct=1` or `--direct=0`.
    #[arg(long, num_args = 0..=1, default_missing_value = "1", value_parser = parse_bool)]
    pub(crate) direct: Option<bool>,

    /// Size of the data file [default: 1G]. With --file, at most the file's length.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) size: Option<u64>,

    /// Operations per result (total over all requesters).
    #[arg(long, value_name = "N", conflicts_with = "runtime", value_parser = parse_ops)]
    pub(crate) ops: Option<u64>,

    /// Run each result for this long instead of a number of operations
    /// (`10s`, `500ms`, `2m`; a bare number is seconds).
    #[arg(long, value_name = "TIME", value_parser = crate::util::parse_duration)]
    pub(crate) runtime: Option<Duration>,

    /// Write jobs: allocate the whole file (fallocate) before writing;
    /// without it, writes extend a fresh, empty file.
    #[arg(long)]
    pub(crate) prealloc: bool,

    /// Who performs the I/O: the engine with the driver it chooses (auto),
    /// on io_uring, on Linux AIO beside its pool (aio), on its thread pool,
    /// or plain pread/pwrite (list: sweep; an unavailable driver is
    /// skipped and said) [default: auto].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) driver: Vec<Driver>,

    /// Directory for the data file (`overlap-bench-*.dat`, removed at the end)
    /// [default: the current directory].
    #[arg(long, value_name = "DIR", conflicts_with = "file")]
    pub(crate) dir: Option<PathBuf>,

    /// Use this existing file (as fio's --filename). Never written by read
    /// jobs; write jobs are refused unless --allow-write is given.
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Option<PathBuf>,

    /// Allow write jobs to overwrite the file given with --file.
    #[arg(long, requires = "file")]
    pub(crate) allow_write: bool,

    /// The engine's in-flight byte budget [default: the engine's, 64M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) max_inflight_bytes: Option<u64>,

    /// The engine's in-flight operation budget [default: the engine's, 4096].
    #[arg(long, value_name = "N", value_parser = parse_ops)]
    pub(crate) max_inflight_ops: Option<u64>,

    /// Threads of the engine's pool driver [default: the engine's, 32].
    #[arg(long, value_name = "N", value_parser = parse_ops)]
    pub(crate) pool_threads: Option<u64>,

    /// Most kernel io_uring workers (iou-wrk) per class [default: the kernel's].
    #[arg(long, value_name = "N", value_parser = parse_ops)]
    pub(crate) max_kernel_workers: Option<u64>,

    /// Turn off the engine's page-cache fast path (preadv2 RWF_NOWAIT).
    #[arg(long)]
    pub(crate) no_fast_path: bool,

    /// Register the buffers with the kernel (io_uring's READ_FIXED and
    /// WRITE_FIXED: no page pinning per operation): with the port's ring,
    /// or for futures, threads and tokio tasks with the engine's rings.
    #[arg(long)]
    pub(crate) fixed_buffers: bool,

    /// Worker threads of the tokio runtime that runs --concurrency tasks and
    /// the tokio baselines [default: one per CPU].
    #[arg(long, value_name = "N", value_parser = parse_ops)]
    pub(crate) tokio_workers: Option<u64>,

    /// Register the file with the kernel (io_uring's registered files: no
    /// descriptor lookup per operation); `--requester port` only.
    #[arg(long)]
    pub(crate) fixed_files: bool,

    /// Do not time each operation (fio's disable_lat): no clock reads and no
    /// histogram record per operation, in every arm and in fio's
    /// (--compare-fio); the latency columns are empty. For comparing CPU per
    /// operation with programs that time nothing (the peer runtimes'
    /// harnesses)
    #[arg(long)]
    pub(crate) disable_lat: bool,

    /// Buffered reads: read the whole file into the page cache first and keep
    /// it there (without it, cached pages of the file are dropped before each
    /// result, as fio's invalidate=1 does).
    #[arg(long)]
    pub(crate) warm: bool,

    /// How one engine requester keeps --iodepth operations in flight (with
    /// --concurrency above 1, each requester is a tokio task using futures);
    /// or `threads`: the --concurrency requesters are OS threads blocking in
    /// `.wait()`, one operation each (--iodepth 1 only).
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) requester: Requester,

    /// Seed for random offsets.
    #[arg(long, default_value_t = 0x6f76_6572_6c61_70)]
    pub(crate) seed: u64,

    /// Also run fio (if on PATH) with the equivalent jobs on the same file and
    /// print overlap/fio ratios.
    #[arg(long)]
    pub(crate) compare_fio: bool,

    /// One JSON object per result on stdout, instead of a table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Draw throughput against the swept parameter into FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE", value_parser = parse_plot_path)]
    pub(crate) plot: Option<PathBuf>,
}

// ---------------------------------------------------------------------------
// Value parsers: clear messages for bad values.

fn parse_size(s: &str) -> Result<u64, String> {
    crate::size::parse_nonzero(s).map_err(|e| e.to_string())
}

fn parse_bs(s: &str) -> Result<usize, String> {
    let v = parse_size(s)?;
    if v > overlapped::MAX_RW_BYTES as u64 {
        return Err(format!(
            "block size `{s}` exceeds the largest single transfer ({} bytes)",
            overlapped::MAX_RW_BYTES
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

    #[test]
    fn durations() {
        assert_eq!(
            crate::util::parse_duration("10s"),
            Ok(Duration::from_secs(10))
        );
        assert_eq!(
            crate::util::parse_duration("500ms"),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(crate::util::parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(crate::util::parse_duration("0").is_err());
        assert!(crate::util::parse_duration("5 parsecs").is_err());
    }
}
