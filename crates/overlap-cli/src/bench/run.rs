//! Running one job and measuring it: latency per operation (hdrhistogram,
//! submit → completion as the requester sees it), CPU time and context
//! switches (getrusage of the whole process), peak threads (sampled from
//! /proc), and the kernel's io_uring workers.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use overlap::{AlignedBuf, AlignedBufPool, DriverChoice, Engine, File, KernelWorkers, Op, Port};
use serde::Serialize;

use super::{default_ops, Driver, Job, Requester, Rw, Target};
use crate::util::new_hist;

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
}

/// Buffers are aligned to at least this.
pub(crate) const PAGE: usize = 4096;

/// Latency histograms shared by all requesters: a few shards behind
/// mutexes, fed in batches, allocated before the measured window. (One
/// histogram per requester would zero 1024 × 256 KiB inside the window at
/// concurrency 1024: measured, it cost more CPU than the I/O.)
pub(crate) struct LatSink {
    shards: Vec<Mutex<Histogram<u64>>>,
    next: std::sync::atomic::AtomicUsize,
}

impl LatSink {
    pub(crate) fn new() -> Arc<LatSink> {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
        Arc::new(LatSink {
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
            sink: self.clone(),
            shard,
            buf: Vec::with_capacity(LocalLat::BATCH),
            count: 0,
        }
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
    sink: Arc<LatSink>,
    shard: usize,
    buf: Vec<u64>,
    count: u64,
}

impl LocalLat {
    const BATCH: usize = 64;

    #[inline]
    pub(crate) fn record(&mut self, d: Duration) {
        self.buf.push((d.as_nanos() as u64).max(1));
        self.count += 1;
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

/// Hands out operation numbers to the requesters until the count (or the
/// time) is used up, and keeps the first error.
pub(crate) struct Claims {
    next: AtomicU64,
    total: u64,
    stop: AtomicBool,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Claims {
    fn new(total: u64) -> Claims {
        Claims {
            next: AtomicU64::new(0),
            total,
            stop: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
        }
    }

    #[inline]
    pub(crate) fn claim(&self) -> Option<u64> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.total).then_some(i)
    }

    fn claimed(&self) -> u64 {
        self.next.load(Ordering::Relaxed).min(self.total)
    }

    fn fail(&self, msg: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        let mut e = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg);
        }
    }

    /// Checks one operation's result.
    #[inline]
    pub(crate) fn check(&self, res: overlap::Result<usize>, bs: usize, offset: u64) {
        match res {
            Ok(n) if n == bs => {}
            Ok(n) => self.fail(format!(
                "short transfer at offset {offset}: {n} of {bs} bytes"
            )),
            Err(e) => self.fail(format!("operation at offset {offset} failed: {e}")),
        }
    }

    fn result(&self) -> Result<()> {
        let n = self.errors.load(Ordering::Relaxed);
        if n > 0 {
            let first = self
                .first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .unwrap_or_default();
            bail!("{n} operation(s) failed; first: {first}");
        }
        Ok(())
    }
}

/// Holds threads until the measured window opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut g = self.open.lock().unwrap_or_else(|p| p.into_inner());
        while !*g {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }
}

/// Operation number → file offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offsets {
    random: bool,
    blocks: u64,
    bs: u64,
    seed: u64,
}

impl Offsets {
    #[inline]
    pub(crate) fn at(&self, i: u64) -> u64 {
        let block = if self.random {
            splitmix64(self.seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % self.blocks
        } else {
            i % self.blocks
        };
        block * self.bs
    }
}

#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// getrusage(RUSAGE_SELF): CPU seconds (user + system) and context
/// switches (voluntary + involuntary) of every thread of the process.
fn rusage() -> (f64, u64) {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (
        secs(ru.ru_utime) + secs(ru.ru_stime),
        (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
    )
}

/// `Threads:` and `VmRSS:` (in bytes) of /proc/<pid>/status.
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
        let handle = std::thread::Builder::new()
            .name("bench-sampler".into())
            .spawn(move || {
                let start = Instant::now();
                let mut out = Sampled::default();
                let mut baseline: HashMap<u32, u64> = HashMap::new();
                let mut seen: HashSet<u32> = HashSet::new();
                let mut tick = 0u64;
                loop {
                    let finished = d.load(Ordering::Acquire);
                    if let Some((n, rss)) = proc_threads_rss(&pid_s) {
                        out.threads_peak = out.threads_peak.max(n);
                        out.rss_peak_bytes = out.rss_peak_bytes.max(rss);
                    }
                    if track_workers {
                        for (tid, ns) in proc_iou_workers(&pid_s) {
                            if baseline.insert(tid, ns).is_none_or(|b| b != ns) && ns > 0 {
                                seen.insert(tid);
                            }
                        }
                    }
                    if let (Some(dl), Some(c)) = (deadline, &stop) {
                        if Instant::now() >= dl {
                            c.stop.store(true, Ordering::Relaxed);
                        }
                    }
                    if tick % 10 == 0 {
                        match &progress {
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
            })
            .expect("spawning the sampler thread");
        Sampler {
            done,
            handle: Some(handle),
        }
    }

    /// Stops sampling and says what it saw.
    pub(crate) fn finish(mut self) -> Sampled {
        self.done.store(true, Ordering::Release);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
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

/// Runs `job` on `target` and measures it.
pub(crate) fn run_job(job: &Job, target: &Target, interactive: bool) -> Result<Measured> {
    let total = match job.runtime {
        Some(_) => u64::MAX,
        None => job.ops.unwrap_or_else(|| default_ops(job, target.size)),
    };
    let claims = Arc::new(Claims::new(total));
    let offsets = Offsets {
        random: job.rw.is_random(),
        blocks: target.blocks(job.bs),
        bs: job.bs as u64,
        seed: job.seed,
    };
    let bar = match job.runtime {
        Some(rt) => progress_bar(interactive, rt.as_millis() as u64, "ms"),
        None => progress_bar(interactive, total, "ops"),
    };
    let mut m = match job.driver {
        Driver::Sync => run_sync(job, target, &claims, offsets, bar)?,
        Driver::Auto | Driver::Uring | Driver::Aio | Driver::Pool => {
            run_engine(job, target, &claims, offsets, bar)?
        }
        Driver::SpawnBlocking | Driver::TokioFs => {
            super::tokio_baselines::run(job, target, &claims, offsets, bar)?
        }
    };
    claims.result()?;
    m.bytes = m.ops * job.bs as u64;
    if job.driver == Driver::Uring {
        // The engine is gone; let its ring's kernel workers exit so that the
        // next result does not count them.
        let t = Instant::now();
        while KernelWorkers::snapshot().alive() > 0 && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(m)
}

pub(crate) fn fill_for_write(rw: Rw, buf: &mut AlignedBuf) {
    if rw.is_write() {
        super::datafile::fill_pattern(buf);
    }
}

fn issue(file: &File, rw: Rw, buf: AlignedBuf, offset: u64) -> Op<AlignedBuf> {
    if rw.is_write() {
        file.write_at(buf, offset)
    } else {
        file.read_at(buf, offset)
    }
}

async fn timed(
    op: Op<AlignedBuf>,
    offset: u64,
) -> (Duration, u64, overlap::Result<usize>, AlignedBuf) {
    let t = Instant::now(); // the operation is submitted on its first poll, right after
    let (res, buf) = op.await;
    (t.elapsed(), offset, res, buf)
}

/// What a requester needs.
#[derive(Clone)]
struct Req {
    file: File,
    rw: Rw,
    pool: AlignedBufPool,
    depth: usize,
    claims: Arc<Claims>,
    offsets: Offsets,
    bs: usize,
    lat: Arc<LatSink>,
}

impl Req {
    /// A buffer from the pool, filled with the data pattern for writes.
    fn buf(&self) -> AlignedBuf {
        let mut buf = self.pool.get();
        fill_for_write(self.rw, &mut buf);
        buf
    }
}

/// One requester keeping `depth` operations in flight with futures.
async fn requester(r: Req) -> u64 {
    let mut h = r.lat.local();
    let Req {
        ref file,
        rw,
        depth,
        ref claims,
        offsets,
        bs,
        ..
    } = r;
    if depth == 1 {
        let mut buf = r.buf();
        while let Some(i) = claims.claim() {
            let off = offsets.at(i);
            let t = Instant::now();
            let (res, b) = issue(file, rw, buf, off).await;
            h.record(t.elapsed());
            claims.check(res, bs, off);
            buf = b;
        }
        return h.finish();
    }
    let mut inflight = FuturesUnordered::new();
    for _ in 0..depth {
        let Some(i) = claims.claim() else { break };
        let off = offsets.at(i);
        inflight.push(timed(issue(file, rw, r.buf(), off), off));
    }
    while let Some((took, off, res, buf)) = inflight.next().await {
        h.record(took);
        claims.check(res, bs, off);
        if let Some(i) = claims.claim() {
            let off = offsets.at(i);
            inflight.push(timed(issue(file, rw, buf, off), off));
        }
    }
    h.finish()
}

/// One requester keeping `depth` operations in flight through a completion port.
///
/// Submission uses the `try_` forms: a port's completions hold their share of
/// the in-flight budget until taken, so a single thread that blocked in a
/// submission waiting for budget would wait for itself forever. On
/// `WouldBlock` it takes a completion first, then retries.
fn port_requester(engine: &Engine, r: &Req) -> u64 {
    let Req {
        ref file,
        rw,
        depth,
        ref claims,
        offsets,
        bs,
        ..
    } = *r;
    let port: Port<AlignedBuf> = Port::new(engine);
    let mut h = r.lat.local();
    let mut starts = vec![(Instant::now(), 0u64); depth];
    // Slots free to submit into, with their buffer once they have one.
    let mut free: Vec<(usize, Option<AlignedBuf>)> = (0..depth).rev().map(|s| (s, None)).collect();
    // An operation refused for lack of budget: (number, first attempt).
    let mut retry: Option<(u64, Instant)> = None;
    loop {
        while let Some((slot, buf)) = free.pop() {
            let Some((i, t0)) = retry
                .take()
                .or_else(|| claims.claim().map(|i| (i, Instant::now())))
            else {
                free.push((slot, buf));
                break;
            };
            let buf = buf.unwrap_or_else(|| r.buf());
            let off = offsets.at(i);
            starts[slot] = (t0, off);
            let wait = port.outstanding() == 0; // nothing of ours holds budget
            let res = match (rw.is_write(), wait) {
                (true, true) => port.write_at(file, buf, off, slot as u64),
                (true, false) => port.try_write_at(file, buf, off, slot as u64),
                (false, true) => port.read_at(file, buf, off, slot as u64),
                (false, false) => port.try_read_at(file, buf, off, slot as u64),
            };
            match res {
                Ok(()) => {}
                Err((overlap::Error::WouldBlock, buf)) => {
                    free.push((slot, Some(buf)));
                    retry = Some((i, t0));
                    break;
                }
                Err((e, buf)) => {
                    claims.fail(format!("submission at offset {off} refused: {e}"));
                    free.push((slot, Some(buf)));
                    break;
                }
            }
        }
        let Some(c) = port.next() else { break };
        let slot = c.key as usize;
        let (t, off) = starts[slot];
        h.record(t.elapsed());
        claims.check(c.result, bs, off);
        free.push((slot, Some(c.buf)));
    }
    h.finish()
}

fn run_engine(
    job: &Job,
    target: &Target,
    claims: &Arc<Claims>,
    offsets: Offsets,
    bar: ProgressBar,
) -> Result<Measured> {
    let mut b = Engine::builder()
        .driver(match job.driver {
            Driver::Pool => DriverChoice::Pool,
            Driver::Aio => DriverChoice::Aio,
            Driver::Auto => DriverChoice::Auto,
            _ => DriverChoice::Uring,
        })
        .cache_fast_path(job.fast_path);
    if let Some(n) = job.max_inflight_ops {
        b = b.max_inflight_ops(n);
    }
    if let Some(n) = job.max_inflight_bytes {
        b = b.max_inflight_bytes(n);
    }
    if let Some(n) = job.pool_threads {
        b = b.pool_threads(n);
    }
    if let Some(n) = job.max_kernel_workers {
        b = b.max_kernel_workers(n);
    }
    let engine = b.build().context("starting the engine")?;
    let file = overlap::OpenOptions::new()
        .read(true)
        .write(job.rw.is_write())
        .direct(job.direct)
        .open(&engine, &target.path)
        .wait()
        .with_context(|| format!("opening {}", target.path.display()))?;
    let a = file.alignment();
    if job.direct && a.offset > 0 && job.bs % a.offset as usize != 0 {
        bail!(
            "--bs {} with --direct: {} needs multiples of {} bytes (direct-I/O alignment from {})",
            job.bs,
            target.path.display(),
            a.offset,
            a.source
        );
    }
    // Page-aligned, as fio's buffers: ext4 treats a direct write whose
    // *address* is not aligned to the file system block as unaligned and
    // takes the exclusive-lock path, which io_uring can only run on a
    // kernel worker (measured: 8 iou-wrk threads and 5x fewer IOPS on
    // preallocated appends with 512-byte aligned buffers).
    let align = (a.memory.max(a.offset) as usize).clamp(PAGE, overlap::MAX_ALIGN);
    let pool = AlignedBufPool::new(job.bs, align, job.in_flight())?;
    let lat = LatSink::new();
    let req = Req {
        file: file.clone(),
        rw: job.rw,
        pool: pool.clone(),
        depth: job.iodepth,
        claims: claims.clone(),
        offsets,
        bs: job.bs,
        lat: lat.clone(),
    };
    // Started before the measured window; shut down after it.
    let runtime = if job.concurrency > 1 && job.requester != Requester::Threads {
        Some(super::tokio_baselines::runtime()?)
    } else {
        None
    };
    let s0 = engine.stats();
    if job.requester == Requester::Threads {
        // Its own window: it opens once the threads are started.
        let (ops, w) = thread_requesters(job, &req, bar)?;
        return engine_measured(&engine, s0, &lat, ops, w, "threads");
    }
    let meter = Meter::start(claims, job, bar);
    let (ops, requester) = match (&runtime, job.requester) {
        (Some(rt), _) => {
            let parts = rt.block_on(async {
                let tasks: Vec<_> = (0..job.concurrency)
                    // overlap-tokio: each worker submits on its own ring,
                    // and tokio's reactor delivers the completions.
                    .map(|_| tokio::spawn(overlap_tokio::on_ring(requester(req.clone()))))
                    .collect();
                let mut parts = Vec::with_capacity(tasks.len());
                for t in tasks {
                    parts.push(t.await);
                }
                parts
            });
            let parts = parts
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .context("a requester task panicked")?;
            (parts.iter().sum(), "tokio")
        }
        // The engine's own block_on (what `.wait()` runs): the requester's
        // operations go on this thread's ring and the thread sleeps in the
        // kernel until their completions wake it.
        (None, Requester::Futures) => (overlap::block_on(requester(req)), "futures"),
        (None, Requester::Auto) if job.iodepth <= 1 => {
            (overlap::block_on(requester(req)), "futures")
        }
        (None, Requester::Port | Requester::Auto) => (port_requester(&engine, &req), "port"),
        (None, Requester::Threads) => unreachable!("handled above"),
    };
    let w = meter.finish();
    drop(runtime);
    engine_measured(&engine, s0, &lat, ops, w, requester)
}

/// An engine job's result: the window, the latencies and the engine's
/// statistics since `s0`.
fn engine_measured(
    engine: &Engine,
    s0: overlap::Stats,
    lat: &LatSink,
    ops: u64,
    w: Window,
    requester: &'static str,
) -> Result<Measured> {
    let hist = lat.merged()?;
    let s1 = engine.stats();
    let figures = EngineFigures {
        driver_detail: engine.driver().detail.clone(),
        completed_inline: s1.completed_inline - s0.completed_inline,
        completed_async: s1.completed_async - s0.completed_async,
        fast_path_hits: s1.fast_path_hits - s0.fast_path_hits,
        backpressure_waits: s1.backpressure_waits - s0.backpressure_waits,
        submit_syscalls: s1.submit_syscalls - s0.submit_syscalls,
        inflight_ops_high_water: s1.inflight_ops_high_water,
    };
    let mut m = Measured::without_engine(ops, w, hist, requester);
    m.kernel_workers = m.kernel_workers.max(
        s1.kernel_workers_seen
            .saturating_sub(s0.kernel_workers_seen),
    );
    m.engine = Some(figures);
    Ok(m)
}

/// Starts `threads` threads named `name`, each running `work` with its own
/// latency batch and the gate; `work` prepares what it needs (buffers), waits
/// on the gate, then claims operations until none are left. The measured
/// window opens once every thread is started, so that thread creation is not
/// in it and all start together. Returns the operations recorded.
///
/// Shared by the sync baseline and the engine's `threads` requester, so that
/// both (and fio's psync with numjobs, their peer) are measured alike.
fn gated_threads<F>(
    threads: usize,
    name: &str,
    job: &Job,
    claims: &Arc<Claims>,
    lat: &Arc<LatSink>,
    bar: ProgressBar,
    work: F,
) -> Result<(u64, Window)>
where
    F: Fn(&Gate, &mut LocalLat) -> Result<()> + Sync,
{
    let gate = Gate::default();
    let (gate, work) = (&gate, &work);
    std::thread::scope(|s| -> Result<_> {
        let mut handles = Vec::with_capacity(threads);
        for _ in 0..threads {
            let mut h = lat.local();
            let spawned = std::thread::Builder::new()
                .name(name.into())
                .stack_size(256 << 10)
                .spawn_scoped(s, move || -> Result<u64> {
                    work(gate, &mut h)?;
                    Ok(h.finish())
                });
            match spawned {
                Ok(t) => handles.push(t),
                Err(e) => {
                    // Let the threads already started finish at once.
                    claims.fail(format!("starting thread {}: {e}", handles.len() + 1));
                    break;
                }
            }
        }
        let meter = Meter::start(claims, job, bar);
        gate.open();
        let mut ops = 0;
        for t in handles {
            ops += t
                .join()
                .map_err(|_| anyhow!("a requester thread ({name}) panicked"))??;
        }
        Ok((ops, meter.finish()))
    })
}

/// The engine's `threads` requester: `job.concurrency` OS threads, each with
/// one operation in flight, blocking in the engine's `.wait()` until it
/// completes (fio's psync with numjobs, on the engine).
fn thread_requesters(job: &Job, req: &Req, bar: ProgressBar) -> Result<(u64, Window)> {
    let Req {
        ref file,
        rw,
        ref claims,
        offsets,
        bs,
        ref lat,
        ..
    } = *req;
    gated_threads(
        job.concurrency,
        "bench-thread",
        job,
        claims,
        lat,
        bar,
        |gate, h| {
            let mut buf = req.buf();
            // The engine's per-thread waker is made on the first wait: make it
            // before the window opens.
            overlap::block_on(std::future::ready(()));
            gate.wait();
            while let Some(i) = claims.claim() {
                let off = offsets.at(i);
                let t = Instant::now();
                let (res, b) = issue(file, rw, buf, off).wait();
                h.record(t.elapsed());
                claims.check(res, bs, off);
                buf = b;
            }
            Ok(())
        },
    )
}

fn run_sync(
    job: &Job,
    target: &Target,
    claims: &Arc<Claims>,
    offsets: Offsets,
    bar: ProgressBar,
) -> Result<Measured> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(job.rw.is_write())
        .custom_flags(if job.direct { libc::O_DIRECT } else { 0 })
        .open(&target.path)
        .with_context(|| format!("opening {}", target.path.display()))?;
    let lat = LatSink::new();
    let file = &file;
    let (ops, w) = gated_threads(
        job.in_flight(),
        "bench-sync",
        job,
        claims,
        &lat,
        bar,
        |gate, h| {
            let mut buf = AlignedBuf::new(job.bs, PAGE)?;
            fill_for_write(job.rw, &mut buf);
            gate.wait();
            while let Some(i) = claims.claim() {
                let off = offsets.at(i);
                let t = Instant::now();
                let r = if job.rw.is_write() {
                    file.write_at(&buf, off)
                } else {
                    file.read_at(&mut buf, off)
                };
                h.record(t.elapsed());
                claims.check(r.map_err(overlap::Error::from), job.bs, off);
            }
            Ok(())
        },
    )?;
    Ok(Measured::without_engine(ops, w, lat.merged()?, "threads"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_stay_in_the_file_and_aligned() {
        for random in [false, true] {
            let o = Offsets {
                random,
                blocks: 37,
                bs: 4096,
                seed: 9,
            };
            for i in 0..10_000 {
                let off = o.at(i);
                assert_eq!(off % 4096, 0);
                assert!(off < 37 * 4096);
            }
        }
        let o = Offsets {
            random: true,
            blocks: 1 << 20,
            bs: 512,
            seed: 1,
        };
        let distinct: HashSet<u64> = (0..1000).map(|i| o.at(i)).collect();
        assert!(distinct.len() > 990, "random offsets should rarely repeat");
    }
}
