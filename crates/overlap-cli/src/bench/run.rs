//! Running one job: the requesters (a port, futures, threads, tokio tasks,
//! plain threads with pread) on each driver, measured by `measure`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::ProgressBar;
use overlapped::{
    AlignedBuf, AlignedBufPool, Completion, DriverChoice, Engine, File, KernelWorkers, Op, Port,
};

use super::{default_ops, Driver, Job, Requester, Rw, Target};

use super::claims::{Claims, Gate, Offsets, PAGE};
use super::measure::{progress_bar, EngineFigures, LatSink, LocalLat, Measured, Meter, Window};

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
        Driver::Auto | Driver::Uring | Driver::Aio | Driver::Pool | Driver::Iocp => {
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
    /// Register `pool` with the port (`--fixed-buffers`).
    fixed: bool,
    /// Register `file` with the port (`--fixed-files`).
    fixed_files: bool,
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
    if r.depth == 1 {
        // One loop (the cached preset; a W3 task): it owns its histogram,
        // as the `sync` arm's thread does, with no lock per operation.
        let mut h = r.lat.local();
        slot(&r, r.buf(), |d| h.record(d)).await;
        return h.finish();
    }
    // `depth` loops, each with one operation in flight at a time (a W3
    // requester's shape): nothing is allocated per operation but its cell.
    let h = std::sync::Mutex::new(r.lat.local());
    let record = |d| h.lock().unwrap_or_else(|p| p.into_inner()).record(d);
    // Polls only the woken loops, and inside `block_on` (the futures
    // requester) keeps their operations on the thread's own ring.
    overlapped::join_all((0..r.depth).map(|_| slot(&r, r.buf(), record))).await;
    h.into_inner().unwrap_or_else(|p| p.into_inner()).finish()
}

/// One loop of a requester: an operation at a time, in `buf`, until the
/// claims run out; `record` counts each, with its latency when timed.
async fn slot(r: &Req, mut buf: AlignedBuf, mut record: impl FnMut(Option<Duration>)) {
    while let Some(i) = r.claims.claim() {
        let off = r.offsets.at(i);
        // The operation is submitted on its first poll, right after.
        let t = r.lat.timed().then(Instant::now);
        let (res, b) = issue(&r.file, r.rw, buf, off).await;
        record(t.map(|t| t.elapsed()));
        r.claims.check(res, r.bs, off);
        buf = b;
    }
}

/// The depth from which the port requester submits each pass in one
/// [`Port::batch`] (see the measurement in `port_requester`).
const BATCH_FROM_DEPTH: usize = 64;

/// One requester keeping `depth` operations in flight through a completion port.
///
/// Submission uses the `try_` forms: a port's completions hold their share of
/// the in-flight budget until taken, so a single thread that blocked in a
/// submission waiting for budget would wait for itself forever. On
/// `WouldBlock` it takes a completion first, then retries.
fn port_requester(engine: &Engine, r: &Req) -> u64 {
    let port: Port<AlignedBuf> = Port::new(engine);
    register_on_port(&port, r);
    let mut h = r.lat.local();
    let mut s = PortSlots {
        starts: vec![(None, 0u64); r.depth],
        free: (0..r.depth).rev().map(|s| (s, None)).collect(),
        retry: None,
    };
    loop {
        // At depth, everything submitted in one pass reaches the kernel in
        // one system call (32 at most per call). Measured on the fast
        // device, 100,000 reads, 3-4 interleaved rounds (2026-11-26): at
        // depth 64 and 1024 the batch gave 1.02-1.33x the reads/s at 0.6-0.7x
        // the CPU per read; at depth 32 it gave 0.65-0.81x the reads/s (the
        // submissions of a pass wait for the pass), so shallower loops submit
        // each read as they go.
        if r.depth >= BATCH_FROM_DEPTH {
            port.batch(|port| port_pass(port, r, &h, &mut s));
        } else {
            port_pass(&port, r, &h, &mut s);
        }
        // Waits for one completion, then takes every other one ready, so
        // that the next pass resubmits them together.
        let Some(first) = port.next() else { break };
        port_take(&port, first, r, &mut h, &mut s);
    }
    h.finish()
}

/// The port requester's slots and the operation it could not submit yet.
struct PortSlots {
    /// Each slot's operation: its start (when timed) and its offset.
    starts: Vec<(Option<Instant>, u64)>,
    /// Slots free to submit into, with their buffer once they have one.
    free: Vec<(usize, Option<AlignedBuf>)>,
    /// An operation refused for lack of budget: (number, first attempt).
    retry: Option<(u64, Option<Instant>)>,
}

/// Registers the buffers (`--fixed-buffers`) and the file (`--fixed-files`)
/// with `port`; a failure fails the claims.
fn register_on_port(port: &Port<AlignedBuf>, r: &Req) {
    let claims = &r.claims;
    if r.fixed {
        match port.register_buffers(&r.pool) {
            Ok(true) => {}
            Ok(false) => claims.fail("--fixed-buffers: this driver's port has no ring".into()),
            Err(e) => claims.fail(format!("--fixed-buffers: registering the buffers: {e}")),
        }
    }
    if r.fixed_files {
        match port.register_file(&r.file) {
            Ok(true) => {}
            Ok(false) => claims.fail("--fixed-files: the port cannot register the file".into()),
            Err(e) => claims.fail(format!("--fixed-files: registering the file: {e}")),
        }
    }
}

/// One pass of the port requester: submits into every free slot until the
/// claims run out or a submission is refused.
fn port_pass(port: &Port<AlignedBuf>, r: &Req, h: &LocalLat, s: &mut PortSlots) {
    let Req {
        ref file,
        rw,
        ref claims,
        offsets,
        ..
    } = *r;
    // One clock read per pass: its submissions follow within
    // microseconds, so each latency is overstated by at most that
    // (two clock reads per operation cost about 4% of the CPU at
    // depth 256 on the fast device).
    let mut now = None;
    // Refused rather than waited for while operations of ours hold budget.
    let failing = port.with_when_full(overlapped::WhenFull::Fail);
    while let Some((slot, buf)) = s.free.pop() {
        let Some((i, t0)) = s.retry.take().or_else(|| {
            claims
                .claim()
                .map(|i| (i, *now.get_or_insert_with(|| h.now())))
        }) else {
            s.free.push((slot, buf));
            break;
        };
        let buf = buf.unwrap_or_else(|| r.buf());
        let off = offsets.at(i);
        s.starts[slot] = (t0, off);
        // Nothing of ours holds budget: wait for room.
        let p = if port.outstanding() == 0 {
            port
        } else {
            &failing
        };
        let res = if rw.is_write() {
            p.write_at(file, buf, off, slot as u64)
        } else {
            p.read_at(file, buf, off, slot as u64)
        };
        match res {
            Ok(()) => {}
            Err((overlapped::Error::WouldBlock, buf)) => {
                s.free.push((slot, Some(buf)));
                s.retry = Some((i, t0));
                break;
            }
            Err((e, buf)) => {
                claims.fail(format!("submission at offset {off} refused: {e}"));
                s.free.push((slot, Some(buf)));
                break;
            }
        }
    }
}

/// Records and checks `first` and every other completion ready on `port`,
/// and frees their slots.
fn port_take(
    port: &Port<AlignedBuf>,
    first: Completion<AlignedBuf>,
    r: &Req,
    h: &mut LocalLat,
    s: &mut PortSlots,
) {
    // One clock read for the completions taken together.
    let done = h.now();
    let mut next = Some(first);
    while let Some(c) = next {
        let slot = c.key as usize;
        let (t, off) = s.starts[slot];
        h.record(done.zip(t).map(|(d, t)| d.saturating_duration_since(t)));
        r.claims.check(c.result, r.bs, off);
        s.free.push((slot, Some(c.buf)));
        next = port.try_next();
    }
}

fn run_engine(
    job: &Job,
    target: &Target,
    claims: &Arc<Claims>,
    offsets: Offsets,
    bar: ProgressBar,
) -> Result<Measured> {
    let engine = build_engine(job)?;
    let (file, pool) = open_with_pool(job, target, &engine)?;
    let lat = LatSink::new(job.timed);
    let req = Req {
        file: file.clone(),
        rw: job.rw,
        pool: pool.clone(),
        depth: job.iodepth,
        claims: claims.clone(),
        offsets,
        bs: job.bs,
        lat: lat.clone(),
        fixed: job.fixed_buffers,
        fixed_files: job.fixed_files,
    };
    // Started before the measured window; shut down after it.
    let runtime = if job.concurrency > 1 && job.requester != Requester::Threads {
        Some(super::tokio_baselines::runtime(job.tokio_workers)?)
    } else {
        None
    };
    // A port registers the pool with its own ring (`port_requester`); the
    // other requesters' operations go on the engine's rings.
    let on_port = runtime.is_none()
        && (job.requester == Requester::Port
            || (job.requester == Requester::Auto && job.iodepth > 1));
    if job.fixed_buffers && !on_port {
        register_on_engine(&engine, &pool)?;
    }
    let s0 = engine.stats();
    if job.requester == Requester::Threads {
        // Its own window: it opens once the threads are started.
        let (ops, w) = thread_requesters(job, &req, bar)?;
        return engine_measured(&engine, s0, &lat, ops, w, "threads");
    }
    let meter = Meter::start(claims, job, bar);
    let (ops, requester) = match (&runtime, job.requester) {
        (Some(rt), _) => (tokio_requesters(rt, job, &req)?, "tokio"),
        // The engine's own block_on (what `.wait()` runs): the requester's
        // operations go on this thread's ring and the thread sleeps in the
        // kernel until their completions wake it.
        (None, Requester::Futures) => (overlapped::block_on(requester(req)), "futures"),
        (None, Requester::Auto) if job.iodepth <= 1 => {
            (overlapped::block_on(requester(req)), "futures")
        }
        (None, Requester::Port | Requester::Auto) => (port_requester(&engine, &req), "port"),
        (None, Requester::Threads) => unreachable!("handled above"),
    };
    let w = meter.finish();
    drop(runtime);
    engine_measured(&engine, s0, &lat, ops, w, requester)
}

/// The engine with the job's driver, fast path and limits.
fn build_engine(job: &Job) -> Result<Engine> {
    let mut b = Engine::builder()
        .driver(match job.driver {
            Driver::Pool => DriverChoice::Pool,
            Driver::Aio => DriverChoice::Aio,
            Driver::Iocp => DriverChoice::Iocp,
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
    b.build().context("starting the engine")
}

/// Opens the target on `engine`, checks `--bs` against its direct-I/O
/// alignment and makes the job's buffer pool.
fn open_with_pool(job: &Job, target: &Target, engine: &Engine) -> Result<(File, AlignedBufPool)> {
    let file = overlapped::OpenOptions::new()
        .read(true)
        .write(job.rw.is_write())
        .direct(job.direct)
        .open(engine, &target.path)
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
    let align = (a.memory.max(a.offset) as usize).clamp(PAGE, overlapped::MAX_ALIGN);
    let pool = if job.fixed_buffers {
        AlignedBufPool::contiguous(job.bs, align, job.in_flight())?
    } else {
        AlignedBufPool::new(job.bs, align, job.in_flight())?
    };
    Ok((file, pool))
}

/// Registers `pool` with the engine's ring (`--fixed-buffers` off a port).
fn register_on_engine(engine: &Engine, pool: &AlignedBufPool) -> Result<()> {
    match engine.register_buffers(pool) {
        Ok(true) => Ok(()),
        Ok(false) => bail!(
            "--fixed-buffers: the {} driver has no ring to register the buffers with",
            engine.driver().kind
        ),
        Err(e) => bail!("--fixed-buffers: registering the buffers: {e}"),
    }
}

/// `job.concurrency` requester tasks on `rt`; the operations they did.
fn tokio_requesters(rt: &tokio::runtime::Runtime, job: &Job, req: &Req) -> Result<u64> {
    let parts = rt.block_on(async {
        let tasks: Vec<_> = (0..job.concurrency)
            // overlapped-tokio: each worker submits on its own ring,
            // and tokio's reactor delivers the completions.
            .map(|_| tokio::spawn(overlapped_tokio::on_ring(requester(req.clone()))))
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
    Ok(parts.iter().sum())
}

/// An engine job's result: the window, the latencies and the engine's
/// statistics since `s0`.
fn engine_measured(
    engine: &Engine,
    s0: overlapped::Stats,
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
        fixed_buffer_ops: s1.fixed_buffer_ops - s0.fixed_buffer_ops,
        fixed_file_ops: s1.fixed_file_ops - s0.fixed_file_ops,
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
            overlapped::block_on(std::future::ready(()));
            gate.wait();
            while let Some(i) = claims.claim() {
                let off = offsets.at(i);
                let t = h.now();
                let (res, b) = issue(file, rw, buf, off).wait();
                h.done(t);
                claims.check(res, bs, off);
                buf = b;
            }
            Ok(())
        },
    )
}

/// The target opened with std, for the job's reads or writes (direct if
/// the job is).
pub(crate) fn open_std(job: &Job, target: &Target) -> Result<std::fs::File> {
    crate::sys::direct(
        std::fs::OpenOptions::new()
            .read(true)
            .write(job.rw.is_write()),
        job.direct,
    )
    .open(&target.path)
    .with_context(|| format!("opening {}", target.path.display()))
}

/// Whether each thread (or task) of a blocking baseline needs a handle of
/// its own: Windows performs the I/O of a handle opened for synchronous
/// I/O (std's) one call at a time, so a shared one would serialise them;
/// Linux's `pread`s on one descriptor run side by side.
pub(crate) const HANDLE_PER_THREAD: bool = cfg!(windows);

fn run_sync(
    job: &Job,
    target: &Target,
    claims: &Arc<Claims>,
    offsets: Offsets,
    bar: ProgressBar,
) -> Result<Measured> {
    let threads = job.in_flight();
    let files: Vec<std::fs::File> = (0..if HANDLE_PER_THREAD { threads } else { 1 })
        .map(|_| open_std(job, target))
        .collect::<Result<_>>()?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let lat = LatSink::new(job.timed);
    let (ops, w) = gated_threads(threads, "bench-sync", job, claims, &lat, bar, |gate, h| {
        let mut buf = AlignedBuf::new(job.bs, PAGE)?;
        fill_for_write(job.rw, &mut buf);
        let me = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = &files[me % files.len()];
        gate.wait();
        while let Some(i) = claims.claim() {
            let off = offsets.at(i);
            let t = h.now();
            let r = if job.rw.is_write() {
                crate::sys::write_at(file, &buf, off)
            } else {
                crate::sys::read_at(file, &mut buf, off)
            };
            h.done(t);
            claims.check(r.map_err(overlapped::Error::from), job.bs, off);
        }
        Ok(())
    })?;
    Ok(Measured::without_engine(ops, w, lat.merged()?, "threads"))
}
