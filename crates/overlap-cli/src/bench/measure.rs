//! What a job measures and how: the result (`Measured`), latency per
//! operation (hdrhistogram, submit to completion as the requester sees it),
//! CPU time and context switches (getrusage of the whole process), peak
//! threads and memory and the kernel's io_uring workers (sampled from
//! /proc), progress, and the throughput meter.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use overlapped::KernelWorkers;
use serde::Serialize;

use super::Job;
use crate::util::new_hist;

use super::claims::Claims;

/// What one job measured.
#[derive(Debug)]
pub(crate) struct Measured {
    pub ops: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Nanoseconds from submission to completion, per operation.
    pub hist: Histogram<u64>,
    pub cpu_s: f64,
    pub ctx_switches: u64,
    pub threads_peak: u64,
    pub rss_peak_bytes: u64,
    pub kernel_workers: u64,
    pub engine: Option<EngineFigures>,
    /// How the requesters were run (`futures`, `port`, `tokio`, `threads`).
    pub requester: &'static str,
}

impl Measured {
    /// A result measured outside the engine (no engine statistics).
    pub(crate) fn without_engine(
        ops: u64,
        w: Window,
        hist: Histogram<u64>,
        requester: &'static str,
    ) -> Measured {
        Measured {
            ops,
            bytes: 0,
            elapsed: w.elapsed,
            hist,
            cpu_s: w.cpu_s,
            ctx_switches: w.ctx,
            threads_peak: w.threads_peak,
            rss_peak_bytes: w.rss_peak_bytes,
            kernel_workers: w.kernel_workers,
            engine: None,
            requester,
        }
    }
}

/// The engine's own statistics over one job.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EngineFigures {
    /// The driver's setup (io_uring flags or the pool's thread limit).
    pub driver_detail: String,
    /// Completions known when the submitting call returned (fast path or inline).
    pub completed_inline: u64,
    /// Completions that really overlapped with the caller.
    pub completed_async: u64,
    /// Buffered reads answered from the page cache on the caller's thread.
    pub fast_path_hits: u64,
    /// Times a submitter waited for the in-flight budget.
    pub backpressure_waits: u64,
    /// io_uring_enter calls with submissions (one per operation for the pool).
    pub submit_syscalls: u64,
    /// Most operations in flight at once inside the engine.
    pub inflight_ops_high_water: u64,
    /// Reads and writes into buffers registered with the kernel (READ_FIXED).
    pub fixed_buffer_ops: u64,
    /// Reads and writes by a file registered with the kernel.
    pub fixed_file_ops: u64,
}

/// Latency histograms shared by all requesters: a few shards behind
/// mutexes, fed in batches, allocated before the measured window. (One
/// histogram per requester would zero 1024 × 256 KiB inside the window at
/// concurrency 1024: measured, it cost more CPU than the I/O.)
pub(crate) struct LatSink {
    timed: bool,
    shards: Vec<Mutex<Histogram<u64>>>,
    next: std::sync::atomic::AtomicUsize,
}

impl LatSink {
    /// `timed` false (`--disable-lat`): requesters only count operations.
    pub(crate) fn new(timed: bool) -> Arc<LatSink> {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
        Arc::new(LatSink {
            timed,
            shards: (0..n.clamp(2, 16))
                .map(|_| Mutex::new(new_hist()))
                .collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A requester's own batch, flushed into a shard every 64 records and
    /// when dropped.
    pub(crate) fn local(self: &Arc<Self>) -> LocalLat {
        let shard = self.next.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        LocalLat {
            timed: self.timed,
            sink: self.clone(),
            shard,
            buf: Vec::with_capacity(LocalLat::BATCH),
            count: 0,
        }
    }

    /// Whether operations are timed (not `--disable-lat`).
    pub(crate) fn timed(&self) -> bool {
        self.timed
    }

    pub(crate) fn merged(&self) -> Result<Histogram<u64>> {
        let mut h = new_hist();
        for s in &self.shards {
            h.add(&*s.lock().unwrap_or_else(|p| p.into_inner()))
                .map_err(|e| anyhow!("merging histograms: {e:?}"))?;
        }
        Ok(h)
    }
}

/// See [`LatSink::local`].
pub(crate) struct LocalLat {
    timed: bool,
    sink: Arc<LatSink>,
    shard: usize,
    buf: Vec<u64>,
    count: u64,
}

impl LocalLat {
    const BATCH: usize = 64;

    /// The time an operation starts, if operations are timed.
    #[inline]
    pub(crate) fn now(&self) -> Option<Instant> {
        self.timed.then(Instant::now)
    }

    /// Counts an operation started at `t` (from [`now`](Self::now)) and
    /// records its latency, if timed.
    #[inline]
    pub(crate) fn done(&mut self, t: Option<Instant>) {
        self.record(t.map(|t| t.elapsed()));
    }

    /// Counts an operation and records `d`, if given.
    #[inline]
    pub(crate) fn record(&mut self, d: Option<Duration>) {
        self.count += 1;
        let Some(d) = d else { return };
        self.buf.push((d.as_nanos() as u64).max(1));
        if self.buf.len() == Self::BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let mut h = self.sink.shards[self.shard]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for v in self.buf.drain(..) {
            h.saturating_record(v);
        }
    }

    /// Flushes and returns how many operations were recorded.
    pub(crate) fn finish(mut self) -> u64 {
        self.flush();
        self.count
    }
}

impl Drop for LocalLat {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            self.flush();
        }
    }
}

/// CPU seconds (user + system) and context switches (voluntary +
/// involuntary; 0 where the system does not count them) of every thread
/// of the process.
pub(crate) fn rusage() -> (f64, u64) {
    let (cpu, switches) = crate::sys::cpu_and_switches();
    (cpu, switches.unwrap_or(0))
}

/// `Threads:` and `VmRSS:` (in bytes) of `/proc/<pid>/status`.
pub(crate) fn proc_threads_rss(pid: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some((field("Threads:")?, field("VmRSS:").unwrap_or(0) * 1024))
}

/// What the sampler saw.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sampled {
    pub threads_peak: u64,
    pub rss_peak_bytes: u64,
    /// io_uring workers of another process (fio) that did work.
    pub kernel_workers: u64,
}

/// The `iou-wrk` threads of a process and their CPU time so far.
pub(crate) fn proc_iou_workers(pid: &str) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let p = e.path();
        if !std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.starts_with("iou-wrk")) {
            continue;
        }
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0);
        out.insert(tid, ns);
    }
    out
}

/// A thread that samples the thread count (and, for another process, its
/// io_uring workers), enforces `--runtime` and moves the progress bar.
pub(crate) struct Sampler {
    done: Arc<AtomicBool>,
    handle: Option<JoinHandle<Sampled>>,
    /// Threads and RSS sampled as the sampler started.
    first: (u64, u64),
}

pub(crate) enum Progress {
    Ops(Arc<Claims>),
    Time,
}

impl Sampler {
    pub(crate) fn start(
        pid: Option<u32>,
        progress: Progress,
        deadline: Option<Instant>,
        stop: Option<Arc<Claims>>,
        bar: ProgressBar,
    ) -> Sampler {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let pid_s = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
        let track_workers = pid.is_some();
        let first_pid = pid_s.clone();
        // Meter::start's callers expect a sampler (gated_threads starts it
        // while its requesters wait at their gate): a process that cannot
        // start one more thread cannot be measured, and the bench ends here.
        #[allow(
            clippy::expect_used,
            reason = "callers have no path for a missing sampler; see the comment above"
        )]
        let handle = std::thread::Builder::new()
            .name("bench-sampler".into())
            .spawn(move || {
                let stop = stop.as_ref();
                sample(&d, &pid_s, track_workers, &progress, deadline, stop, &bar)
            })
            .expect("spawning the sampler thread");
        // One sample now, on the caller's thread, with the sampler started:
        // the requesters are alive, and a short run may be over before the
        // sampler thread is first scheduled (CI: 16 threads of 25 cached
        // reads each, on 2 CPUs).
        let first = proc_threads_rss(&first_pid).unwrap_or_default();
        Sampler {
            done,
            handle: Some(handle),
            first,
        }
    }

    /// Stops sampling and says what it saw.
    pub(crate) fn finish(mut self) -> Sampled {
        self.done.store(true, Ordering::Release);
        let mut out: Sampled = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        out.threads_peak = out.threads_peak.max(self.first.0);
        out.rss_peak_bytes = out.rss_peak_bytes.max(self.first.1);
        out
    }
}

/// The sampler thread's loop: every 10 ms until `done`, samples the threads
/// and RSS of `pid_s` (and its io_uring workers when `track_workers`), stops
/// `stop`'s claims at `deadline` and moves the bar every 100 ms.
fn sample(
    done: &AtomicBool,
    pid_s: &str,
    track_workers: bool,
    progress: &Progress,
    deadline: Option<Instant>,
    stop: Option<&Arc<Claims>>,
    bar: &ProgressBar,
) -> Sampled {
    let start = Instant::now();
    let mut out = Sampled::default();
    let mut baseline: HashMap<u32, u64> = HashMap::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let mut tick = 0u64;
    loop {
        let finished = done.load(Ordering::Acquire);
        if let Some((n, rss)) = proc_threads_rss(pid_s) {
            out.threads_peak = out.threads_peak.max(n);
            out.rss_peak_bytes = out.rss_peak_bytes.max(rss);
        }
        if track_workers {
            for (tid, ns) in proc_iou_workers(pid_s) {
                if baseline.insert(tid, ns).is_none_or(|b| b != ns) && ns > 0 {
                    seen.insert(tid);
                }
            }
        }
        if let (Some(dl), Some(c)) = (deadline, stop) {
            if Instant::now() >= dl {
                c.stop.store(true, Ordering::Relaxed);
            }
        }
        if tick % 10 == 0 {
            match progress {
                Progress::Ops(c) => bar.set_position(c.claimed()),
                Progress::Time => bar.set_position(start.elapsed().as_millis() as u64),
            }
        }
        if finished {
            break;
        }
        tick += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    bar.finish_and_clear();
    out.kernel_workers = seen.len() as u64;
    out
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

pub(crate) fn progress_bar(interactive: bool, len: u64, unit: &str) -> ProgressBar {
    if !interactive {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let tpl = if unit == "ops" {
        "  {bar:40} {pos}/{len} ops ({per_sec}, eta {eta})".to_string()
    } else {
        format!("  {{bar:40}} {{pos}}/{{len}} {unit}")
    };
    bar.set_style(
        ProgressStyle::with_template(&tpl).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// The measured window: rusage, time and samplers around the work.
pub(crate) struct Meter {
    t0: Instant,
    ru0: (f64, u64),
    kw0: KernelWorkers,
    sampler: Sampler,
}

pub(crate) struct Window {
    elapsed: Duration,
    cpu_s: f64,
    ctx: u64,
    threads_peak: u64,
    rss_peak_bytes: u64,
    kernel_workers: u64,
}

impl Meter {
    pub(crate) fn start(claims: &Arc<Claims>, job: &Job, bar: ProgressBar) -> Meter {
        let kw0 = KernelWorkers::snapshot();
        let t0 = Instant::now();
        let sampler = Sampler::start(
            None,
            match job.runtime {
                Some(_) => Progress::Time,
                None => Progress::Ops(claims.clone()),
            },
            job.runtime.map(|r| t0 + r),
            Some(claims.clone()),
            bar,
        );
        Meter {
            t0,
            ru0: rusage(),
            kw0,
            sampler,
        }
    }

    pub(crate) fn finish(self) -> Window {
        let (cpu1, ctx1) = rusage();
        let elapsed = self.t0.elapsed();
        let kw = KernelWorkers::snapshot().active_since(&self.kw0) as u64;
        let sampled = self.sampler.finish();
        Window {
            elapsed,
            cpu_s: cpu1 - self.ru0.0,
            ctx: ctx1.saturating_sub(self.ru0.1),
            threads_peak: sampled.threads_peak,
            rss_peak_bytes: sampled.rss_peak_bytes,
            kernel_workers: kw,
        }
    }
}
