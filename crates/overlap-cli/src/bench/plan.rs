//! From the options (and a preset) to the list of jobs to run.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::size::fmt_bytes;

use super::options::{BenchOpts, Driver, Preset, Requester, Rw, MAX_PARALLEL};

/// Data written to `--dir` is this big unless `--size` says otherwise.
const DEFAULT_SIZE: u64 = 1 << 30;
/// Operations per result for random jobs when neither `--ops` nor
/// `--runtime` is given (sequential jobs make one pass over the file).
pub(crate) const DEFAULT_RANDOM_OPS: u64 = 100_000;
/// Most threads the sync baseline (concurrency × iodepth) or the `threads`
/// requester (concurrency) may start.
const MAX_SYNC_THREADS: usize = 4096;

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
    /// Buffers registered with the port's ring (`Port::register_buffers`).
    pub fixed_buffers: bool,
    /// The file registered with the port's ring (`Port::register_file`).
    pub fixed_files: bool,
    /// Worker threads of the tokio runtime (`--tokio-workers`).
    pub tokio_workers: Option<usize>,
    pub requester: Requester,
    pub seed: u64,
    /// Each operation timed (latency percentiles); off with `--disable-lat`.
    pub timed: bool,
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
            drivers: vec![Driver::NATIVE, Driver::Pool, Driver::Sync],
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
            drivers: vec![Driver::NATIVE, Driver::Sync],
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
    let axes = Axes {
        drivers: or_default(&args.driver, d.drivers),
        bs: or_default(&args.bs, d.bs),
        iodepth: or_default(&args.iodepth, d.iodepth),
        concurrency: or_default(&args.concurrency, d.concurrency),
        prealloc: if args.prealloc {
            vec![true]
        } else if rw.is_write() {
            d.prealloc
        } else {
            vec![false]
        },
    };
    let direct = args.direct.unwrap_or(d.direct);
    let warm = args.warm || d.warm;
    let ops = if args.runtime.is_some() {
        None
    } else {
        args.ops.or(d.ops)
    };
    let size = args.size.unwrap_or(DEFAULT_SIZE);

    refuse_contradictions(args, rw, direct, warm, size, &axes)?;
    let max_inflight_ops = usize_opt(args.max_inflight_ops, "max-inflight-ops")?;
    let max_inflight_bytes = usize_opt(args.max_inflight_bytes, "max-inflight-bytes")?;
    let pool_threads = usize_opt(args.pool_threads, "pool-threads")?;
    let max_kernel_workers = max_kernel_workers(args)?;
    refuse_pool_threads(pool_threads)?;
    refuse_for_requesters(args, direct, &axes)?;

    let threads = args.requester == Requester::Threads;
    let jobs = axes.expand(threads, |driver, bs, iodepth, concurrency, prealloc| Job {
        driver,
        rw,
        bs,
        iodepth,
        concurrency,
        direct: direct && driver != Driver::TokioFs,
        prealloc,
        warm,
        ops,
        runtime: args.runtime,
        max_inflight_ops,
        max_inflight_bytes,
        pool_threads,
        max_kernel_workers,
        fast_path: !args.no_fast_path,
        fixed_buffers: args.fixed_buffers,
        fixed_files: args.fixed_files,
        timed: !args.disable_lat,
        tokio_workers: args.tokio_workers.map(|n| n as usize),
        requester: args.requester,
        seed: args.seed,
    })?;
    Ok(Plan {
        preset: args.preset,
        jobs,
        size,
        swept: axes.swept(),
    })
}

/// `--max-kernel-workers` as the engine takes it.
fn max_kernel_workers(args: &BenchOpts) -> Result<Option<u32>> {
    args.max_kernel_workers
        .map(|n| u32::try_from(n).with_context(|| format!("--max-kernel-workers {n} is too large")))
        .transpose()
}

/// Refuses `--pool-threads` over the engine's ceiling.
fn refuse_pool_threads(pool_threads: Option<usize>) -> Result<()> {
    if let Some(n) = pool_threads {
        if n > overlapped::MAX_POOL_THREADS {
            bail!(
                "--pool-threads {n} exceeds the engine's ceiling of {}",
                overlapped::MAX_POOL_THREADS
            );
        }
    }
    Ok(())
}

/// The values a plan sweeps: every combination is a job.
struct Axes {
    drivers: Vec<Driver>,
    bs: Vec<usize>,
    iodepth: Vec<usize>,
    concurrency: Vec<usize>,
    prealloc: Vec<bool>,
}

impl Axes {
    /// One job per combination, made by `job`; refuses a combination
    /// that would start too many threads or operations.
    fn expand(
        &self,
        threads: bool,
        job: impl Fn(Driver, usize, usize, usize, bool) -> Job,
    ) -> Result<Vec<Job>> {
        let mut jobs = Vec::new();
        for &driver in &self.drivers {
            for &b in &self.bs {
                for &depth in &self.iodepth {
                    for &conc in &self.concurrency {
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
                        for &pre in &self.prealloc {
                            jobs.push(job(driver, b, depth, conc, pre));
                        }
                    }
                }
            }
        }
        Ok(jobs)
    }

    /// The axis that has more than one value, for the table's first
    /// column (the first of concurrency, iodepth, bs, prealloc, driver).
    fn swept(&self) -> Option<&'static str> {
        if self.concurrency.len() > 1 {
            Some("concurrency")
        } else if self.iodepth.len() > 1 {
            Some("iodepth")
        } else if self.bs.len() > 1 {
            Some("bs")
        } else if self.prealloc.len() > 1 {
            Some("prealloc")
        } else if self.drivers.len() > 1 {
            Some("driver")
        } else {
            None
        }
    }
}

/// Refuses options that contradict each other, the file or its size (the
/// plan's resolved values: `args` with the preset's defaults).
fn refuse_contradictions(
    args: &BenchOpts,
    rw: Rw,
    direct: bool,
    warm: bool,
    size: u64,
    axes: &Axes,
) -> Result<()> {
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
    for &b in &axes.bs {
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
    Ok(())
}

/// Refuses queue depths the requester or the driver cannot keep; notes
/// that tokio-fs runs buffered.
fn refuse_for_requesters(args: &BenchOpts, direct: bool, axes: &Axes) -> Result<()> {
    if args.requester == Requester::Threads {
        if let Some(&depth) = axes.iodepth.iter().find(|&&d| d > 1) {
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

    let tokio_baselines = axes
        .drivers
        .iter()
        .filter(|d| matches!(d, Driver::SpawnBlocking | Driver::TokioFs))
        .count();
    if tokio_baselines > 0 && axes.iodepth.iter().any(|&d| d > 1) {
        bail!(
            "--driver spawn-blocking and tokio-fs run --concurrency N tokio tasks with one operation each in flight: \
             --iodepth above 1 is refused (use --concurrency)"
        );
    }
    if args.fixed_buffers
        && axes
            .drivers
            .iter()
            .any(|d| matches!(d, Driver::Sync | Driver::SpawnBlocking | Driver::TokioFs))
    {
        bail!(
            "--fixed-buffers registers the engine's buffers with its rings: it applies to the \
             engine's drivers (auto, uring, aio, pool), not to sync, spawn-blocking or tokio-fs"
        );
    }
    if direct && axes.drivers.contains(&Driver::TokioFs) {
        eprintln!(
            "note: --driver tokio-fs runs buffered: tokio::fs::File reads through a buffer of its own, \
             which cannot be aligned for O_DIRECT; the file is evicted from the page cache first"
        );
    }

    Ok(())
}
