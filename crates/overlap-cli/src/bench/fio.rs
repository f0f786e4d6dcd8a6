//! `--compare-fio`: the equivalent fio job on the same file, its JSON parsed
//! into the same result type.
//!
//! Equivalences (docs/benchmarking.md repeats them):
//! - `uring` (and `pool`): `--ioengine=io_uring --iodepth=<concurrency × iodepth> --numjobs=1`;
//! - `aio`: `--ioengine=libaio --iodepth=<concurrency × iodepth> --numjobs=1`,
//!   then psync as for `pool`;
//! - `sync` (and `pool`): `--ioengine=psync --numjobs=<concurrency × iodepth>`, one
//!   synchronous operation in flight per job thread;
//! - `--requester threads` (uring or pool, N threads each waiting on one
//!   operation): psync with `--numjobs=N` first, the same shape, then
//!   io_uring at `--iodepth=N`, the same number in flight.
//!
//! Always `--thread --group_reporting --norandommap --randrepeat=0
//! --lat_percentiles=1`, `--io_size` = operations × block size (split over
//! the jobs) or `--time_based --runtime`, and `--invalidate=0` for warm
//! (cached) jobs, 1 otherwise. Write jobs: `--fallocate=native` when
//! preallocated, `--fallocate=none` on a fresh empty file when growing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use super::measure::{progress_bar, Progress, Sampler};
use super::report::BenchResult;
use super::{default_ops, Driver, Job, Preset, Requester, Rw, Target};

/// Finds `fio` on PATH.
pub(crate) fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("fio"))
        .find(|p| p.is_file())
}

/// One fio job, comparable to an overlap job.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FioJob {
    pub ioengine: &'static str,
    pub rw: Rw,
    pub bs: usize,
    pub iodepth: usize,
    pub numjobs: usize,
    pub direct: bool,
    pub prealloc: bool,
    pub warm: bool,
    /// Each operation timed (not `--disable-lat`).
    pub timed: bool,
    /// Bytes each job transfers (`--io_size`), or the run time.
    pub io_size_per_job: Option<u64>,
    pub runtime: Option<Duration>,
    pub size: u64,
}

impl FioJob {
    pub(crate) fn same_as(&self, other: &FioJob) -> bool {
        self == other
    }

    pub(crate) fn args(&self, file: &Path) -> Vec<String> {
        let mut a = vec![
            "--name=overlap-bench".to_string(),
            format!("--filename={}", file.display()),
            format!("--rw={}", self.rw.as_str()),
            format!("--bs={}", self.bs),
            format!("--direct={}", u8::from(self.direct)),
            format!("--ioengine={}", self.ioengine),
            format!("--iodepth={}", self.iodepth),
            format!("--numjobs={}", self.numjobs),
            format!("--size={}", self.size),
        ];
        match (self.io_size_per_job, self.runtime) {
            (_, Some(rt)) => {
                a.push("--time_based".into());
                a.push(format!("--runtime={}ms", rt.as_millis().max(1)));
            }
            (Some(n), None) => a.push(format!("--io_size={n}")),
            (None, None) => {}
        }
        if self.rw.is_write() {
            a.push(format!(
                "--fallocate={}",
                if self.prealloc { "native" } else { "none" }
            ));
        }
        a.extend(
            [
                "--thread",
                "--group_reporting",
                "--norandommap",
                "--randrepeat=0",
                "--lat_percentiles=1",
                "--percentile_list=50:99:99.9",
                "--output-format=json",
            ]
            .map(String::from),
        );
        a.push(format!("--invalidate={}", u8::from(!self.warm)));
        if !self.timed {
            a.extend(["--disable_lat=1", "--disable_clat=1", "--disable_slat=1"].map(String::from));
        }
        a
    }

    pub(crate) fn command_line(&self, bin: &Path, file: &Path) -> String {
        let mut s = bin.display().to_string();
        for a in self.args(file) {
            s.push(' ');
            s.push_str(&a);
        }
        s
    }
}

/// The fio jobs equivalent to `job` (see the module documentation).
pub(crate) fn equivalents(job: &Job, target: &Target) -> Vec<FioJob> {
    let n = job.in_flight();
    let ops = job.ops.unwrap_or_else(|| default_ops(job, target.size));
    let base = |ioengine: &'static str, iodepth: usize, numjobs: usize| FioJob {
        ioengine,
        rw: job.rw,
        bs: job.bs,
        iodepth,
        numjobs,
        direct: job.direct,
        prealloc: job.prealloc,
        warm: job.warm,
        timed: job.timed,
        io_size_per_job: match job.runtime {
            Some(_) => None,
            None => Some(ops.div_ceil(numjobs as u64) * job.bs as u64),
        },
        runtime: job.runtime,
        size: target.blocks(job.bs) * job.bs as u64,
    };
    match (job.driver, job.requester) {
        (Driver::Sync | Driver::SpawnBlocking | Driver::TokioFs, _) => {
            vec![base("psync", 1, n)]
        }
        (Driver::Iocp, Requester::Threads) => {
            vec![base("psync", 1, n), base("windowsaio", n, 1)]
        }
        (Driver::Iocp, _) => vec![base("windowsaio", n, 1)],
        (Driver::Aio, Requester::Threads) => vec![base("psync", 1, n), base("libaio", n, 1)],
        (_, Requester::Threads) => vec![base("psync", 1, n), base("io_uring", n, 1)],
        (Driver::Uring | Driver::Auto, _) => vec![base("io_uring", n, 1)],
        (Driver::Aio, _) => vec![base("libaio", n, 1), base("psync", 1, n)],
        (Driver::Pool, _) => vec![base("io_uring", n, 1), base("psync", 1, n)],
    }
}

/// Runs fio and turns its JSON into a result.
pub(crate) fn run(
    bin: &Path,
    job: &FioJob,
    target: &Target,
    preset: Option<Preset>,
    interactive: bool,
) -> Result<BenchResult> {
    let mut child = Command::new(bin)
        .args(job.args(&target.path))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    super::datafile::set_fio_child(Some(child.id()));
    let bar = if interactive {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_message("fio running");
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        progress_bar(false, 0, "")
    };
    let sampler = Sampler::start(Some(child.id()), Progress::Time, None, None, bar);
    // Read both pipes fully, then reap the child.
    let stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    });
    let mut stdout = String::new();
    if let Some(mut o) = child.stdout.take() {
        std::io::Read::read_to_string(&mut o, &mut stdout).context("reading fio's output")?;
    }
    let status = child.wait().context("waiting for fio");
    super::datafile::set_fio_child(None);
    let status = status?;
    let stderr = err_reader.join().unwrap_or_default();
    let sampled = sampler.finish();
    if !status.success() {
        bail!(
            "fio failed ({status}): {}",
            stderr.trim().lines().last().unwrap_or("no message")
        );
    }
    let mut r = parse(&stdout, job, preset, target.size)
        .with_context(|| format!("parsing fio's JSON (stderr: {})", stderr.trim()))?;
    r.threads_peak = sampled.threads_peak;
    r.rss_peak_bytes = sampled.rss_peak_bytes;
    r.kernel_workers = sampled.kernel_workers;
    r.fio_command = Some(job.command_line(bin, &target.path));
    Ok(r)
}

fn num(v: &Value, key: &str) -> Result<f64> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| anyhow!("fio's JSON has no number `{key}`"))
}

fn percentile(lat: &Value, p: &str) -> Option<f64> {
    let pct = lat.get("percentile")?.as_object()?;
    pct.iter()
        .find(|(k, _)| k.parse::<f64>().ok() == p.parse::<f64>().ok())
        .and_then(|(_, v)| v.as_f64())
}

/// The latencies (µs) of a read/write section of fio's JSON: mean, p50,
/// p99, p99.9, max; all NaN when not `timed`.
fn latencies(sect: &Value, timed: bool) -> Result<[f64; 5]> {
    if !timed {
        // `--disable-lat`: nothing timed, as in overlap's arms.
        return Ok([f64::NAN; 5]);
    }
    let lat = sect
        .get("lat_ns")
        .filter(|l| l.get("percentile").is_some())
        .or_else(|| sect.get("clat_ns"))
        .ok_or_else(|| anyhow!("fio's JSON has no latency figures"))?;
    let p = |q: &str| percentile(lat, q).map(|ns| ns / 1e3).unwrap_or(0.0);
    let us = |key: &str| num(lat, key).unwrap_or(0.0) / 1e3;
    Ok([us("mean"), p("50"), p("99"), p("99.9"), us("max")])
}

/// Parses fio's `--output-format=json` (fio may print notices before the JSON).
pub(crate) fn parse(
    out: &str,
    job: &FioJob,
    preset: Option<Preset>,
    file_size: u64,
) -> Result<BenchResult> {
    let start = out
        .find("\n{")
        .map(|i| i + 1)
        .or_else(|| out.starts_with('{').then_some(0))
        .ok_or_else(|| anyhow!("no JSON object in fio's output"))?;
    let root: Value = serde_json::from_str(&out[start..])?;
    let j = root
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or_else(|| anyhow!("fio's JSON has no jobs"))?;
    let sect = j
        .get(if job.rw.is_write() { "write" } else { "read" })
        .ok_or_else(|| anyhow!("fio's JSON has no read/write section"))?;
    let ops = num(sect, "total_ios")? as u64;
    let runtime_s = num(sect, "runtime")? / 1e3;
    let [mean, p50, p99, p999, max] = latencies(sect, job.timed)?;
    // usr_cpu/sys_cpu are percentages of the jobs' summed run time.
    let job_runtime_s = num(j, "job_runtime")? / 1e3;
    let cpu_s = (num(j, "usr_cpu")? + num(j, "sys_cpu")?) / 100.0 * job_runtime_s;
    let (iodepth, concurrency) = (job.iodepth as u64, job.numjobs as u64);
    Ok(BenchResult {
        system: "fio".into(),
        driver: job.ioengine.into(),
        rw: job.rw.as_str().into(),
        bs: job.bs as u64,
        iodepth,
        concurrency,
        direct: job.direct,
        prealloc: job.prealloc,
        preset: preset.map(|p| p.as_str().to_string()),
        ops,
        file_size,
        runtime_s,
        iops: num(sect, "iops")?,
        mb_s: num(sect, "bw_bytes")? / 1e6,
        lat_us_mean: mean,
        lat_us_p50: p50,
        lat_us_p99: p99,
        lat_us_p999: p999,
        lat_us_max: max,
        cpu_us_per_op: if ops > 0 {
            cpu_s * 1e6 / ops as f64
        } else {
            0.0
        },
        ctx_switches: num(j, "ctx").unwrap_or(0.0) as u64,
        threads_peak: 0,
        rss_peak_bytes: 0,
        kernel_workers: 0,
        requester: "fio".into(),
        engine: None,
        fio_command: None,
    })
}
