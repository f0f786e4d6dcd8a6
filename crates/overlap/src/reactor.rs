//! [`ReactorRing`]: rings watched by an executor's reactor.

use std::cell::Cell;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;

use crate::driver::ring::{self, complete_all, Done, Issuers, RingCore};
use crate::error::FallbackReason;
use crate::op::Completable;

/// Submission-queue entries of a reactor ring (a full queue is submitted
/// and refilled, so more may be in flight).
const ENTRIES: u32 = 256;
/// Completion-queue entries (the kernel keeps any overflow).
const CQ_ENTRIES: u32 = 4096;

/// Rings watched by an executor's reactor: how an async runtime (tokio,
/// smol, ...) gets completions without a thread of overlap's in between.
///
/// A future polled by a foreign executor normally reaches the kernel
/// through the engine thread: its submission crosses to that thread and its
/// completion crosses back, two cross-thread wake-ups per operation. An
/// integration removes both with a [`ReactorRing`]:
///
/// 1. Each executor thread makes a ring of its own ([`ReactorRing::new`])
///    and registers the ring's descriptor with its reactor (tokio's
///    `AsyncFd`, smol's `Async`): the descriptor is readable while
///    completions wait in the ring.
/// 2. It polls engine futures inside [`ReactorRing::enter`]: operations they
///    submit go onto that ring, from the polling thread, with no hand-off.
/// 3. When the descriptor is readable, a task of the executor calls
///    [`ReactorRing::reap`], which completes the operations and wakes their
///    futures, on the executor's own thread.
///
/// The kernel runs an operation's completion work on the thread that
/// submitted it; a thread asleep in the reactor (`epoll_wait`) or parked
/// is woken for it by the kernel, and the ring's descriptor turns readable.
/// So the thread that waits is the thread the kernel wakes, as with a
/// thread in [`block_on`](crate::block_on).
///
/// The ring has neither `SINGLE_ISSUER` nor `DEFER_TASKRUN`: the reaping
/// task may run on any thread of a work-stealing executor. Submissions and
/// reaping take a lock that is normally uncontended (one ring per thread).
///
/// Rules for integrations:
/// - Only the thread that made a ring should submit on it (poll inside
///   `enter` on that thread), and that thread must [`drain`](ReactorRing::drain)
///   it before it exits: Linux cancels the queued kernel-worker work of an
///   exiting thread, which would fail such operations with `ECANCELED`.
///   Memory stays safe either way: a ring is only freed once nothing is in
///   flight on it.
/// - Engines on the thread pool ignore reactor rings: their operations go
///   to the pool as usual, so an integration works unchanged where io_uring
///   is blocked ([`Stats::submitted_on_reactor_rings`](crate::Stats) says
///   which path operations took).
///
/// Cloning gives another handle to the same ring.
///
/// ```
/// use overlap::{Engine, OpenOptions, ReactorRing};
/// use std::os::fd::AsRawFd;
///
/// let engine = Engine::new()?;
/// let dir = tempfile::tempdir()?;
/// let file = OpenOptions::new().read(true).write(true).create(true)
///     .open(&engine, dir.path().join("f")).wait()?;
/// let ring = match ReactorRing::new() {
///     Ok(ring) => ring,
///     Err(why) => { println!("no ring: {why}"); return Ok(()) }
/// };
/// // An executor would register `ring.as_raw_fd()` with its reactor and
/// // poll its tasks inside `enter`; here one poll submits the write...
/// let mut op = std::pin::pin!(file.write_at(b"hi".to_vec(), 0));
/// let waker = std::task::Waker::noop();
/// let mut cx = std::task::Context::from_waker(&waker);
/// let mut polled = ring.enter(|| op.as_mut().poll(&mut cx));
/// // ...and reaping the ring when its descriptor is readable completes it.
/// while polled.is_pending() {
///     ring.reap();
///     polled = ring.enter(|| op.as_mut().poll(&mut cx));
/// }
/// # use std::future::Future;
/// let std::task::Poll::Ready((res, _buf)) = polled else { unreachable!() };
/// assert_eq!(res?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ReactorRing {
    inner: Arc<Inner>,
}

struct Inner {
    core: Mutex<RingCore>,
    /// Woken when a submission is deferred (see [`ReactorRing::set_flusher`]).
    flusher: Mutex<Option<Waker>>,
    fd: RawFd,
}

/// With a flusher registered, submissions wait for it once this many
/// operations are in flight on the ring (below, each is submitted at once:
/// a flush costs the executor a task poll, which only pays off when it
/// carries several entries).
const DEFER_FROM: usize = 8;

/// The most entries a deferred flush carries: the kernel plugs the block
/// layer for a multi-entry submission, so no request of a batch reaches the
/// device before the whole batch is issued; the entry that fills a batch is
/// submitted at once with the others. `OVERLAP_SUBMIT_BATCH` overrides it
/// (1 turns deferral off: every submission enters the kernel at once).
const DEFAULT_BATCH: usize = 32;

fn batch_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("OVERLAP_SUBMIT_BATCH")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(DEFAULT_BATCH, |n| n.clamp(1, ENTRIES as usize))
    })
}

thread_local! {
    /// The ring of the innermost `ReactorRing::enter` on this thread.
    static CURRENT: Cell<Option<NonNull<Inner>>> = const { Cell::new(None) };
}

/// Every live reactor ring, so that an engine shutting down can reap them
/// itself (the executor that would may be the one blocked in the shutdown).
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

impl ReactorRing {
    /// A new ring, or the reason io_uring cannot be used (the integration
    /// then leaves operations to the engine's driver).
    pub fn new() -> Result<ReactorRing, FallbackReason> {
        let (ring, _flags) = ring::build_ring(ENTRIES, CQ_ENTRIES, Issuers::Many)?;
        let ops = ring::probe_opcodes(&ring)?;
        let fd = ring.as_raw_fd();
        let inner = Arc::new(Inner {
            core: Mutex::new(RingCore::new(ring, ops, None)),
            flusher: Mutex::new(None),
            fd,
        });
        let mut live = lock(&LIVE);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&inner));
        Ok(ReactorRing { inner })
    }

    /// Runs `f` with this ring as the calling thread's reactor ring: engine
    /// operations that `f` polls for the first time are submitted on it
    /// (on an io_uring engine; a pool engine ignores it). Nests: the
    /// innermost ring wins, and the previous one is restored on return.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<NonNull<Inner>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let this = NonNull::from(&*self.inner);
        let _restore = Restore(CURRENT.with(|c| c.replace(Some(this))));
        f()
    }

    /// Completes every operation whose completion is in the ring, waking
    /// their futures; returns how many. Does not block and makes no system
    /// call when nothing is there.
    pub fn reap(&self) -> usize {
        let mut done = Vec::new();
        lock(&self.inner.core).reap_ready(&mut done);
        let n = done.len();
        finish(&mut done);
        n
    }

    /// Operations in flight on this ring (queued ones included).
    pub fn in_flight(&self) -> usize {
        lock(&self.inner.core).in_flight()
    }

    /// Registers the waker of the executor task that flushes the ring.
    /// From then on, while at least a few operations are in flight, a
    /// submission only queues its entry and wakes this task, which calls
    /// [`flush`](Self::flush) once the executor has run what was ready: one
    /// system call then submits everything those tasks queued (fio's and
    /// tokio-uring's batching). Without a flusher every submission enters
    /// the kernel at once.
    pub fn set_flusher(&self, waker: &Waker) {
        let mut f = lock(&self.inner.flusher);
        if !f.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *f = Some(waker.clone());
        }
    }

    /// Entries queued and not yet handed to the kernel.
    pub fn queued(&self) -> usize {
        lock(&self.inner.core).pending()
    }

    /// Hands every queued entry to the kernel in one system call, and
    /// completes what that call found complete.
    pub fn flush(&self) {
        let mut done = Vec::new();
        let left = {
            let mut core = lock(&self.inner.core);
            if core.pending() == 0 {
                return;
            }
            if core.submit(&mut done) {
                charge_syscall(&done, &core);
            }
            core.pending()
        };
        if left > 0 {
            // The kernel took only part (EBUSY/EAGAIN: completion queue
            // full, or short of memory): flush again later, or the rest
            // would wait for a flusher that only a new first entry wakes.
            self.inner.wake_flusher();
        }
        finish(&mut done);
    }

    /// Blocks until every operation in flight on this ring has completed,
    /// completing them: what a thread that made the ring does before it
    /// exits.
    pub fn drain(&self) {
        self.inner.drain();
    }
}

impl AsRawFd for ReactorRing {
    /// The ring's descriptor: readable while completions wait in the ring.
    /// It stays open as long as any handle to the ring lives.
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd
    }
}

impl std::fmt::Debug for ReactorRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReactorRing")
            .field("fd", &self.inner.fd)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Inner {
    /// Wakes the registered flusher, if any.
    fn wake_flusher(&self) {
        let w = lock(&self.flusher).clone();
        if let Some(w) = w {
            w.wake();
        }
    }

    fn drain(&self) {
        loop {
            let mut done = Vec::new();
            {
                let mut core = lock(&self.core);
                if core.in_flight() == 0 {
                    return;
                }
                core.wait(None, &mut done);
            }
            finish(&mut done);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle: nothing can submit any more. Wait for what is in
        // flight (normally nothing: the owning thread drained it) before the
        // ring and the operations' memory go.
        let core = self.core.get_mut().unwrap_or_else(|p| p.into_inner());
        core.drain(crate::wait::count_out);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Completes reaped operations with the ring unlocked (completion runs user
/// code: wakers, a dropped future's buffer); resumes the first panic once
/// all are recorded.
fn finish(done: &mut Vec<Done>) {
    crate::wait::count_out(done);
    if let Some(p) = complete_all(done) {
        std::panic::resume_unwind(p);
    }
}

/// Counts a submitting system call made by [`ReactorRing::flush`] for the
/// engine of an operation on the ring (rings are shared by engines; the
/// first one found is charged).
fn charge_syscall(done: &[Done], core: &RingCore) {
    let op = done.first().map(|d| &d.op).or_else(|| core.any_in_flight());
    if let Some(op) = op {
        op.shared()
            .counters
            .submit_syscalls
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Puts `op` on the calling thread's current reactor ring, if a
/// [`ReactorRing::enter`] is active; gives it back otherwise (or if the
/// engine is shutting down), for the engine's driver.
pub(crate) fn submit_current(op: Arc<dyn Completable>) -> Result<(), Arc<dyn Completable>> {
    let Some(ptr) = CURRENT.try_with(Cell::get).ok().flatten() else {
        return Err(op);
    };
    // SAFETY: `CURRENT` holds a pointer only while `enter` runs on this
    // thread, and `enter` borrows a handle that keeps the ring alive.
    let inner = unsafe { ptr.as_ref() };
    let counters = Arc::clone(&op.shared().counters);
    if !op.shared().admit_to_own_ring() {
        return Err(op);
    }
    counters.reactor_submitted.fetch_add(1, Ordering::Relaxed);
    let mut done = Vec::new();
    let wake_flusher = {
        let mut core = lock(&inner.core);
        core.push(op, &mut done);
        let deferred = core.in_flight() > DEFER_FROM
            && core.pending() < batch_limit()
            && lock(&inner.flusher).is_some();
        if deferred {
            // The first entry queued wakes the flusher.
            core.pending() == 1
        } else {
            if core.submit(&mut done) {
                counters.submit_syscalls.fetch_add(1, Ordering::Relaxed);
            }
            // Taken only in part (see `flush`): the flusher must come back
            // for the rest.
            core.pending() > 0
        }
    };
    if wake_flusher {
        inner.wake_flusher();
    }
    finish(&mut done);
    Ok(())
}

/// Reaps every live reactor ring from the calling thread: an engine
/// shutting down waits for their operations, and the executor task that
/// would reap them may be the very one blocked in the shutdown.
pub(crate) fn reap_all() {
    let rings: Vec<Arc<Inner>> = lock(&LIVE).iter().filter_map(Weak::upgrade).collect();
    for inner in rings {
        let mut done = Vec::new();
        if let Ok(mut core) = inner.core.try_lock() {
            if core.pending() > 0 {
                // Entries queued for a flusher that may never run (its
                // executor is gone, or blocked in this very shutdown).
                core.submit(&mut done);
            }
            core.reap_ready(&mut done);
        }
        crate::wait::count_out(&done);
        if let Some(p) = complete_all(&mut done) {
            crate::driver::report_panic("an operation reaped at shutdown", &p);
        }
    }
}
