//! Results: the JSON schema, the human table and the overlap/fio ratios.

use std::io::Write;

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::measure::{EngineFigures, Measured};
use super::{Job, Preset, Target};
use crate::size::fmt_bytes;

/// One result line. Units are named last in every key: `_us` microseconds,
/// `_s` seconds, `mb_s` 10^6 bytes per second.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BenchResult {
    /// `"overlap"` or `"fio"`.
    pub system: String,
    /// overlap: `uring`, `pool` or `sync`; fio: its ioengine (`io_uring`, `psync`).
    pub driver: String,
    /// `read`, `write`, `randread` or `randwrite`.
    pub rw: String,
    /// Bytes per operation.
    pub bs: u64,
    /// Operations each requester keeps in flight.
    pub iodepth: u64,
    /// Independent requesters (fio: numjobs).
    pub concurrency: u64,
    /// O_DIRECT.
    pub direct: bool,
    /// Write jobs: the file was allocated first (else writes extend it).
    pub prealloc: bool,
    /// The preset that defined the job, if any.
    pub preset: Option<String>,
    /// Operations completed.
    pub ops: u64,
    /// Bytes the job covered in the file.
    pub file_size: u64,
    /// Wall-clock seconds of the measured window.
    pub runtime_s: f64,
    /// Operations per second.
    pub iops: f64,
    /// Throughput in 10^6 bytes per second.
    pub mb_s: f64,
    /// Latency from submission to completion as the requester sees it.
    pub lat_us_mean: f64,
    /// Median latency.
    pub lat_us_p50: f64,
    /// 99th percentile latency.
    pub lat_us_p99: f64,
    /// 99.9th percentile latency.
    pub lat_us_p999: f64,
    /// Largest latency.
    pub lat_us_max: f64,
    /// CPU time (user + system, all threads) per operation in microseconds;
    /// numerically equal to CPU seconds per million operations.
    pub cpu_us_per_op: f64,
    /// Context switches (voluntary + involuntary) during the run.
    pub ctx_switches: u64,
    /// Most threads the process had at once during the run (overlap: includes
    /// the bench's main, sampler and signal-waiting threads; fio: its job threads and main thread).
    pub threads_peak: u64,
    /// Largest resident set of the process during the run (sampled VmRSS, bytes).
    pub rss_peak_bytes: u64,
    /// Kernel io_uring workers (iou-wrk) that did work during the run.
    pub kernel_workers: u64,
    /// How requesters were run: `futures`, `port`, `tokio`, `threads` or `fio`.
    pub requester: String,
    /// The engine's statistics over the run (engine drivers only).
    pub engine: Option<EngineFigures>,
    /// fio results: the exact command that produced them.
    pub fio_command: Option<String>,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

pub(crate) fn latency(h: &Histogram<u64>) -> [f64; 5] {
    if h.is_empty() {
        return [0.0; 5];
    }
    [
        h.mean() / 1e3,
        us(h.value_at_quantile(0.50)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.max()),
    ]
}

impl BenchResult {
    pub(crate) fn from_overlap(
        preset: Option<Preset>,
        job: &Job,
        target: &Target,
        m: Measured,
    ) -> BenchResult {
        let secs = m.elapsed.as_secs_f64().max(1e-9);
        let [mean, p50, p99, p999, max] = if job.timed {
            latency(&m.hist)
        } else {
            // `--disable-lat`: nothing timed (null in JSON, `-` in the table).
            [f64::NAN; 5]
        };
        BenchResult {
            system: "overlap".into(),
            driver: job.driver.as_str().into(),
            rw: job.rw.as_str().into(),
            bs: job.bs as u64,
            iodepth: job.iodepth as u64,
            concurrency: job.concurrency as u64,
            direct: job.direct,
            prealloc: job.prealloc,
            preset: preset.map(|p| p.as_str().to_string()),
            ops: m.ops,
            file_size: target.size,
            runtime_s: secs,
            iops: m.ops as f64 / secs,
            mb_s: m.bytes as f64 / secs / 1e6,
            lat_us_mean: mean,
            lat_us_p50: p50,
            lat_us_p99: p99,
            lat_us_p999: p999,
            lat_us_max: max,
            cpu_us_per_op: if m.ops > 0 {
                m.cpu_s * 1e6 / m.ops as f64
            } else {
                0.0
            },
            ctx_switches: m.ctx_switches,
            threads_peak: m.threads_peak,
            rss_peak_bytes: m.rss_peak_bytes,
            kernel_workers: m.kernel_workers,
            requester: m.requester.into(),
            engine: m.engine,
            fio_command: None,
        }
    }

    /// Operations in flight when the requesters keep up.
    pub(crate) fn in_flight(&self) -> u64 {
        self.iodepth * self.concurrency
    }
}

pub(crate) fn print_json(r: &BenchResult) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, r)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// What the table's terser columns mean, printed under the header (the
/// full list is in docs/benchmarking.md, "How to read the table").
pub(crate) const LEGEND: &str = "# req: how requests were made (futures, port, tokio tasks, \
    threads, fio); dio: O_DIRECT; file: a write's file growing or preallocated; ctx_sw: context \
    switches; thr: most threads the process had at once; kw: io_uring kernel workers (iou-wrk) \
    that did work, i.e. operations the kernel could not do asynchronously; rss_MiB: peak resident \
    memory";

/// The table's header line and its legend (printed before the first
/// result).
pub(crate) fn print_header() {
    println!(
        "{:<8} {:<8} {:<9} {:>7} {:>5} {:>5} {:<7} {:<4} {:<7} {:>9} {:>11} {:>8} {:>9} {:>9} {:>9} {:>8} {:>9} {:>5} {:>3} {:>7}",
        "system",
        "driver",
        "rw",
        "bs",
        "depth",
        "conc",
        "req",
        "dio",
        "file",
        "ops",
        "iops",
        "MB/s",
        "p50_us",
        "p99_us",
        "p99.9_us",
        "cpu_us/op",
        "ctx_sw",
        "thr",
        "kw",
        "rss_MiB"
    );
    println!("{LEGEND}");
}

/// One result as a line of the table, printed as soon as it is known (an
/// interrupted sweep keeps the rows it finished).
pub(crate) fn print_row(r: &BenchResult) {
    println!(
        "{:<8} {:<8} {:<9} {:>7} {:>5} {:>5} {:<7} {:<4} {:<7} {:>9} {:>11.0} {:>8.1} {:>9} {:>9} {:>9} {:>8.2} {:>9} {:>5} {:>3} {:>7.1}",
        r.system,
        r.driver,
        r.rw,
        fmt_bytes(r.bs),
        r.iodepth,
        r.concurrency,
        r.requester,
        if r.direct { "yes" } else { "no" },
        if r.rw.contains("write") {
            if r.prealloc {
                "prealloc"
            } else {
                "growing"
            }
        } else {
            "-"
        },
        r.ops,
        r.iops,
        r.mb_s,
        fmt_lat(r.lat_us_p50),
        fmt_lat(r.lat_us_p99),
        fmt_lat(r.lat_us_p999),
        r.cpu_us_per_op,
        r.ctx_switches,
        r.threads_peak,
        r.kernel_workers,
        r.rss_peak_bytes as f64 / (1 << 20) as f64
    );
}

/// A latency column: `-` where nothing was timed (`--disable-lat`).
fn fmt_lat(us: f64) -> String {
    if us.is_nan() {
        "-".into()
    } else {
        format!("{us:.1}")
    }
}

/// fio results comparable to an overlap result: same rw, bs, direct,
/// preallocation and total operations in flight, in the order of the
/// comparisons that matter: the engine's `threads` requester (N threads,
/// each waiting on one operation) is fio psync with numjobs=N first, then
/// io_uring at iodepth N; other engine results io_uring (and the pool also
/// psync); the sync baseline psync.
pub(crate) fn fio_peers<'a>(o: &BenchResult, results: &'a [BenchResult]) -> Vec<&'a BenchResult> {
    let wanted: &[&str] = match (o.driver.as_str(), o.requester.as_str()) {
        ("uring" | "pool", "threads") => &["psync", "io_uring"],
        ("aio", "threads") => &["psync", "libaio"],
        ("uring", _) => &["io_uring"],
        ("aio", _) => &["libaio", "psync"],
        ("pool", _) => &["io_uring", "psync"],
        _ => &["psync"],
    };
    wanted
        .iter()
        .flat_map(|&engine| {
            results.iter().filter(move |f| {
                f.system == "fio"
                    && f.driver == engine
                    && f.rw == o.rw
                    && f.bs == o.bs
                    && f.direct == o.direct
                    && f.prealloc == o.prealloc
                    && f.in_flight() == o.in_flight()
            })
        })
        .collect()
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.2}x", a / b)
    } else {
        "n/a".into()
    }
}

pub(crate) fn print_ratios(results: &[BenchResult]) {
    let mut header = false;
    for o in results.iter().filter(|r| r.system == "overlap") {
        for f in fio_peers(o, results) {
            if !header {
                println!();
                println!(
                    "overlap / fio (iops above 1 is faster; cpu/op and p99 below 1 are better):"
                );
                header = true;
            }
            println!(
                "  overlap {:<13} vs fio {:<8} {} bs={} in_flight={}{}: iops {}  cpu/op {}  p50 {}  p99 {}",
                format!("{}/{}", o.driver, o.requester),
                f.driver,
                o.rw,
                fmt_bytes(o.bs),
                o.in_flight(),
                if o.rw.contains("write") {
                    if o.prealloc {
                        " prealloc"
                    } else {
                        " growing"
                    }
                } else {
                    ""
                },
                ratio(o.iops, f.iops),
                ratio(o.cpu_us_per_op, f.cpu_us_per_op),
                ratio(o.lat_us_p50, f.lat_us_p50),
                ratio(o.lat_us_p99, f.lat_us_p99),
            );
        }
    }
}
