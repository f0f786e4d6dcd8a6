//! [`ReactorRing`]: rings watched by an executor's reactor.

use std::cell::Cell;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;

use super::core::RingCore;
use super::setup::{self, Issuers};
use super::thread::count_out;
use crate::cell::{fork_generation, Completable, EngineState, RingSize, ENGINE_ACROSS_FORK};
use crate::cell::{DEFAULT_REACTOR_RING_ENTRIES, MAX_SQ_ENTRIES};
use crate::driver::{complete_all, keep_done, spare_done, Done};
use crate::error::FallbackReason;
use crate::operation::OpKind;

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
/// What happens to an operation whatever becomes of the code around it
/// (the engine's rule: an operation's outcome never depends on the thread,
/// runtime or loop that submitted it, nor on the process copy it runs in):
/// - **The submitting thread exits** with operations in flight: Linux
///   cancels the kernel-worker work it queued (`-ECANCELED`) and finishes a
///   buffered read that must copy out from a worker without the process's
///   memory (`-EFAULT`). Whoever reaps the ring then submits such an
///   operation again, through the engine's own (long-lived) driver, so its
///   future sees the real result ([`Stats::resubmitted_after_exit`](crate::Stats)
///   counts them).
/// - **Nobody reaps the ring any more** (its executor was dropped, or is not
///   being run): [`orphan`](ReactorRing::orphan) hands it to the engine's
///   ring watcher (the passes the engines' threads make while reactor rings
///   live), which submits what is queued,
///   completes what is in flight and closes the ring once nothing is. The
///   watcher also looks at every live ring every few milliseconds while
///   operations are in flight, and completes what has waited in a ring
///   without being reaped since its previous look
///   ([`Stats::reaped_by_watcher`](crate::Stats)): an executor that stalls
///   makes its operations late, never lost or hung.
/// - **`fork`**: a ring made before the fork belongs to the parent. In the
///   child, every method leaves it alone (`enter` does not submit on it,
///   `reap`, `flush`, `drain` and `orphan` do nothing, dropping it never
///   touches it); the parent's operations complete in the parent.
/// - **Engine shutdown** reaps every live ring itself (the executor that
///   would may be blocked in the shutdown) and returns once nothing of the
///   engine is in flight on any of them.
///
/// Rules for integrations:
/// - Poll engine futures inside `enter` only on the thread that made the
///   ring, and call [`orphan`](ReactorRing::orphan) (never a blocking
///   [`drain`](ReactorRing::drain), which would hang on a read that never
///   completes) when that thread or its executor goes away. Memory stays
///   safe whatever an integration does: a ring is only freed once nothing
///   is in flight on it.
/// - Engines on the thread pool ignore reactor rings: their operations go
///   to the pool as usual, so an integration works unchanged where io_uring
///   is blocked ([`Stats::submitted_on_reactor_rings`](crate::Stats) says
///   which path operations took).
///
/// Cloning gives another handle to the same ring. Dropping the last handle
/// with operations in flight [orphans](ReactorRing::orphan) the ring: the
/// drop never blocks, and the watcher completes them.
///
/// ```
/// use overlapped::{Engine, OpenOptions, ReactorRing};
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
pub struct ReactorRing {
    inner: Arc<Inner>,
}

impl Clone for ReactorRing {
    fn clone(&self) -> Self {
        let before = self.inner.handles.fetch_add(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a handle is cloned from a live one");
        ReactorRing {
            inner: self.inner.clone(),
        }
    }
}

impl Drop for ReactorRing {
    fn drop(&mut self) {
        // The last handle (the watcher's and the registry's references are
        // not handles): nobody can submit or reap any more. What is in
        // flight goes to the watcher, as `orphan` hands it, rather than the
        // ring's drop blocking until the kernel is done (forever, for a
        // pipe nobody writes).
        let before = self.inner.handles.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a handle is dropped once, after it was counted");
        if before == 1 && !self.inner.orphaned.load(Ordering::Acquire) && self.in_flight() > 0 {
            self.orphan();
        }
    }
}

struct Inner {
    core: Mutex<RingCore>,
    /// Woken when a submission is deferred (see [`ReactorRing::set_flusher`]).
    flusher: Mutex<Option<Waker>>,
    /// Whether `flusher` holds a waker (read by every submission, without
    /// the lock).
    has_flusher: AtomicBool,
    /// The most entries a deferred flush carries on this ring
    /// ([`ReactorRing::set_batch_limit`]); 0 for the engine's default.
    batch: AtomicUsize,
    fd: RawFd,
    /// Whether the ring is a parent's, in a child after `fork`
    /// ([`Ring::inherited`](super::ring::Ring::inherited)), known without
    /// the core's lock (which a thread of the parent may have held at the
    /// fork).
    generation: u64,
    /// Handed to the watcher ([`ReactorRing::orphan`]): nothing submits on
    /// it any more.
    orphaned: AtomicBool,
    /// Live [`ReactorRing`] handles (the watcher's and the registry's
    /// references are not counted).
    handles: AtomicUsize,
    /// In a child after `fork`: the inherited operations were failed.
    given_up: AtomicBool,
    /// The engine (its `EngineState`'s address) whose thread was last asked to
    /// watch the reactor rings on this ring's first submission for it.
    nudged: std::sync::atomic::AtomicUsize,
    /// What the watcher saw at its previous look: (completions reaped,
    /// submitting calls made). Only the watcher uses it.
    seen: Mutex<(u64, u64)>,
}

/// With a flusher registered, submissions wait for it once more than this
/// many operations are in flight on the ring or about to be (counting the
/// operations reaped whose futures have not submitted again since the last
/// flush), or more than this many of the engine's are in flight on its
/// rings together (reactor rings and threads' own rings: a multi-thread
/// runtime's tasks move between its workers' rings, and 64 tasks on two
/// workers went at 0.43 system calls per read, 0.28 with this); otherwise
/// each is submitted at once: a flush costs the executor
/// a task poll, which only pays off when it carries several entries, and
/// at a shallow depth a submitting call is also how completions are picked
/// up without sleeping.
const DEFER_FROM: usize = 8;

/// The most entries a deferred flush carries: the kernel plugs the block
/// layer for a multi-entry submission, so no request of a batch reaches the
/// device before the whole batch is issued; the entry that fills a batch is
/// submitted at once with the others. `OVERLAP_SUBMIT_BATCH` overrides it
/// (1 turns deferral off: every submission enters the kernel at once).
const DEFAULT_BATCH: usize = 32;

// `ReactorRing::new`'s ring is one the kernel makes.
const _: () =
    assert!(DEFAULT_REACTOR_RING_ENTRIES >= 1 && DEFAULT_REACTOR_RING_ENTRIES <= MAX_SQ_ENTRIES);

// A batch is at least one entry, and fits a submission queue.
const _: () = assert!(DEFAULT_BATCH >= 1 && DEFAULT_BATCH <= MAX_SQ_ENTRIES as usize);

/// The batch limit of a ring whose own is `ring` (0: none set):
/// `OVERLAP_SUBMIT_BATCH` when set, else the ring's, else [`DEFAULT_BATCH`].
fn batch_limit(ring: usize) -> usize {
    static LIMIT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let env = *LIMIT.get_or_init(|| {
        std::env::var("OVERLAP_SUBMIT_BATCH")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map(|n| n.clamp(1, MAX_SQ_ENTRIES as usize))
    });
    env.unwrap_or(if ring == 0 { DEFAULT_BATCH } else { ring })
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
    ///
    /// Its size is [`DEFAULT_REACTOR_RING_ENTRIES`](crate::DEFAULT_REACTOR_RING_ENTRIES)
    /// (a full submission queue is submitted and refilled, so more may be
    /// in flight; the kernel keeps completion-queue overflow);
    /// [`Engine::reactor_ring`](crate::Engine::reactor_ring) makes one of
    /// the size an engine's builder set.
    pub fn new() -> Result<ReactorRing, FallbackReason> {
        Self::with_size(RingSize::per_thread(DEFAULT_REACTOR_RING_ENTRIES))
    }

    /// A new ring of `size`.
    pub(crate) fn with_size(size: RingSize) -> Result<ReactorRing, FallbackReason> {
        let (ring, _flags) = setup::make_ring(size, Issuers::Many)?;
        let fd = ring.fd();
        let inner = Arc::new(Inner {
            core: Mutex::new(RingCore::new(ring, None)),
            flusher: Mutex::new(None),
            has_flusher: AtomicBool::new(false),
            batch: AtomicUsize::new(0),
            fd,
            generation: fork_generation(),
            orphaned: AtomicBool::new(false),
            handles: AtomicUsize::new(1),
            given_up: AtomicBool::new(false),
            nudged: std::sync::atomic::AtomicUsize::new(0),
            seen: Mutex::new((0, 0)),
        });
        if let Some(mut live) = lock_registry(&LIVE) {
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&inner));
        }
        watcher::LIVE_RINGS.fetch_add(1, Ordering::Relaxed);
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
        debug_assert!(
            self.inner.handles.load(Ordering::Relaxed) > 0,
            "a ring is used through a live handle"
        );
        let this = NonNull::from(&*self.inner);
        let _restore = Restore(CURRENT.with(|c| c.replace(Some(this))));
        let r = f();
        debug_assert_eq!(
            CURRENT.with(Cell::get),
            Some(this),
            "an inner enter restored this ring when it returned"
        );
        r
    }

    /// Completes every operation whose completion is in the ring, waking
    /// their futures; returns how many. Does not block and makes no system
    /// call when nothing is there.
    pub fn reap(&self) -> usize {
        debug_assert!(
            self.inner.handles.load(Ordering::Relaxed) > 0,
            "a ring is used through a live handle"
        );
        if self.inner.inherited() {
            return 0;
        }
        let mut done = spare_done();
        let reaped = lock(&self.inner.core).reap_ready(&mut done);
        let n = done.len();
        debug_assert!(n <= reaped, "every completion handed over was reaped");
        finish(&mut done);
        keep_done(done);
        n
    }

    /// Operations in flight on this ring (queued ones included).
    pub fn in_flight(&self) -> usize {
        if self.inner.inherited() {
            return 0;
        }
        lock(&self.inner.core).in_flight()
    }

    /// The most entries one deferred flush carries on this ring: the entry
    /// that fills a batch is submitted at once with the others. The default
    /// (32, or `OVERLAP_SUBMIT_BATCH`, which overrides this too) suits
    /// tasks that cost a few microseconds to run; where each costs ten or
    /// more (an asyncio task's step), a full batch holds the first reads of
    /// it back from the device while the rest run, and the tasks move in
    /// convoys. Clamped to 1..=1024.
    pub fn set_batch_limit(&self, entries: usize) {
        let n = entries.clamp(1, MAX_SQ_ENTRIES as usize);
        self.inner.batch.store(n, Ordering::Relaxed);
        debug_assert!(n >= 1, "a batch holds at least one entry");
    }

    /// Registers the waker of the executor task that flushes the ring.
    /// From then on, while more than a few operations are in flight or
    /// about to be (the futures of reaped operations were woken and have
    /// not all submitted again), or more than a few of the engine's are in
    /// flight on its rings together (threads' own rings included), a
    /// submission only queues its entry and
    /// wakes this task, which calls
    /// [`flush`](Self::flush) once the executor has run what was ready: one
    /// system call then submits everything those tasks queued (fio's and
    /// tokio-uring's batching). Without a flusher every submission enters
    /// the kernel at once.
    pub fn set_flusher(&self, waker: &Waker) {
        debug_assert!(
            self.inner.handles.load(Ordering::Relaxed) > 0,
            "a ring is used through a live handle"
        );
        let mut f = lock(&self.inner.flusher);
        // Under the lock: `orphan` sets the flag before it takes the
        // flusher out, so a waker stored here is never left behind.
        if self.is_orphaned() {
            return;
        }
        if !f.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *f = Some(waker.clone());
            self.inner.has_flusher.store(true, Ordering::Release);
        }
        debug_assert!(
            self.inner.has_flusher.load(Ordering::Acquire) == f.is_some(),
            "has_flusher says, under the flusher's lock, whether one is registered"
        );
    }

    /// Entries queued and not yet handed to the kernel.
    pub fn queued(&self) -> usize {
        debug_assert!(
            self.inner.handles.load(Ordering::Relaxed) > 0,
            "a ring is used through a live handle"
        );
        if self.inner.inherited() {
            return 0;
        }
        lock(&self.inner.core).pending()
    }

    /// Hands every queued entry to the kernel in one system call, and
    /// completes what that call found complete.
    pub fn flush(&self) {
        debug_assert!(
            self.inner.handles.load(Ordering::Relaxed) > 0,
            "a ring is used through a live handle"
        );
        if self.inner.inherited() {
            return;
        }
        let mut done = spare_done();
        let left = {
            let mut core = lock(&self.inner.core);
            let queued = core.pending();
            if queued == 0 {
                keep_done(done);
                return;
            }
            // The tasks that were ready when the flush was asked for have
            // run: those of them that did not submit are not about to.
            core.forget_woken();
            if core.submit(&mut done) {
                charge_syscall(&done, &core);
            }
            debug_assert!(
                core.pending() <= queued + 1,
                "a flush leaves at most what was queued, and its marker"
            );
            core.pending()
        };
        if left > 0 {
            // The kernel took only part (EBUSY/EAGAIN: completion queue
            // full, or short of memory): flush again later, or the rest
            // would wait for a flusher that only a new first entry wakes.
            self.inner.wake_flusher();
        }
        finish(&mut done);
        keep_done(done);
    }

    /// Blocks until every operation in flight on this ring has completed,
    /// completing them. It waits as long as the kernel does: for a read of
    /// a pipe, until a writer writes. Where the ring's thread or executor
    /// goes away, [`orphan`](Self::orphan) is the call that cannot hang.
    pub fn drain(&self) {
        debug_assert!(
            self.inner.handles.load(Ordering::Relaxed) > 0,
            "a ring is used through a live handle"
        );
        if !self.inner.inherited() {
            self.inner.drain();
        }
    }

    /// Hands the ring to the engine's ring watcher, for good: from now on
    /// operations polled inside [`enter`](Self::enter) go to the engine's
    /// driver, and the watcher submits what is queued on the ring, completes
    /// what is in flight (waking the futures from its own thread; an
    /// operation the kernel cancelled because its submitting thread exited
    /// is submitted again through the engine's driver) and closes the ring
    /// once nothing is in flight and no handle is left. Does not block.
    ///
    /// What an integration calls when the executor that reaped the ring goes
    /// away: a runtime dropped, an event loop closed, the ring's thread
    /// exiting. Idempotent; does nothing in a forked child.
    pub fn orphan(&self) {
        if self.inner.inherited() {
            return;
        }
        {
            // Under the ring's lock: a submission holding it either went on
            // the ring before (and `adopt` below sees it in flight) or sees
            // the flag after, and goes to the driver.
            let _core = lock(&self.inner.core);
            if self.inner.orphaned.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        // The flusher's task (an integration's reaper) learns it this way.
        let flusher = {
            let mut f = lock(&self.inner.flusher);
            self.inner.has_flusher.store(false, Ordering::Release);
            f.take()
        };
        debug_assert!(
            !self.inner.has_flusher.load(Ordering::Acquire),
            "an orphaned ring has no flusher"
        );
        watcher::adopt(self.inner.clone());
        if let Some(w) = flusher {
            w.wake();
        }
    }

    /// Whether [`orphan`](Self::orphan) was called on this ring (by any of
    /// its handles). An integration's reaping task can end once it is.
    pub fn is_orphaned(&self) -> bool {
        self.inner.orphaned.load(Ordering::Acquire)
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
    /// Made before a `fork` this process is the child of. The first time
    /// a child finds it so, the child's copies of the operations in flight
    /// fail with `Error::Forked` (their futures are woken), and the ring is
    /// never touched.
    #[inline]
    fn inherited(&self) -> bool {
        if self.generation == fork_generation() {
            return false;
        }
        self.give_up_inherited();
        true
    }

    /// The first time a child finds the ring inherited: fails the child's
    /// copies of the operations in flight (see [`inherited`](Self::inherited)).
    #[cold]
    fn give_up_inherited(&self) {
        debug_assert_ne!(
            self.generation,
            fork_generation(),
            "only a child gives up a ring's operations"
        );
        if !self.given_up.swap(true, Ordering::AcqRel) {
            let mut done = Vec::new();
            // Locked by a thread of the parent at the fork: that thread is
            // not here, and the operations stay pending in the child.
            if let Ok(mut core) = self.core.try_lock() {
                core.give_up_inherited(&mut done);
            }
            count_out(&done);
            if let Some(p) = complete_all(&mut done) {
                crate::driver::report_panic("an operation a forked child inherited", &p);
            }
        }
    }

    /// Wakes the registered flusher, if any.
    fn wake_flusher(&self) {
        let w = lock(&self.flusher).clone();
        if let Some(w) = w {
            w.wake();
        }
    }

    fn drain(&self) {
        debug_assert_eq!(
            self.generation,
            fork_generation(),
            "a child never waits on its parent's ring"
        );
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
        let live = watcher::LIVE_RINGS.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(
            live > 0,
            "a ring is counted out once, after it was counted in"
        );
        debug_assert_eq!(
            *self.handles.get_mut(),
            0,
            "a ring goes after its last handle"
        );
        if self.inherited() {
            // A child after fork: the ring's operations and registrations
            // are the parent's; the child's copies of the operations were
            // failed (or, if the ring was locked at the fork, are leaked
            // with the core), and only the child's descriptor and mappings
            // go (`Ring::close`).
            return;
        }
        // The last handle: nothing can submit any more. Wait for what is in
        // flight (normally nothing: the ring was orphaned and the watcher
        // let go of it only once it was empty) before the ring and the
        // operations' memory go.
        let core = self.core.get_mut().unwrap_or_else(|p| p.into_inner());
        core.drain(count_out);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks one of the process-wide registries (`LIVE`, the watcher's
/// state). In a child after `fork`, a thread of the parent (the watcher)
/// may have held it at the fork, and that thread is not in the child: the
/// lock is then tried for a while and given up (`None`): the child's rings
/// go unwatched rather than the child hanging.
fn lock_registry<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    if fork_generation() == 0 {
        return Some(lock(m));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(50);
    loop {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::yield_now();
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// Completes reaped operations with the ring unlocked (completion runs user
/// code: wakers, a dropped future's buffer); resumes the first panic once
/// all are recorded.
fn finish(done: &mut Vec<Done>) {
    resubmit_after_exit(done);
    count_out(done);
    if let Some(p) = complete_all(done) {
        std::panic::resume_unwind(p);
    }
    debug_assert!(done.is_empty(), "complete_all takes every completion");
}

/// Takes out of `done` the operations that the kernel failed because the
/// thread that submitted them exited, and submits them again through the
/// engine's driver, whose thread lives as long as the engine: their futures
/// see the real result.
///
/// Nothing of overlap's cancels an operation on a reactor ring, so
/// `-ECANCELED` there means that Linux dropped the queued kernel-worker work
/// (or the armed poll) of an exiting submitter, unperformed; and every
/// buffer of an operation is memory the engine owns, so `-EFAULT` means the
/// completion ran on a kernel worker without the process's memory (a
/// buffered read of an exiting submitter), with nothing copied. Either way
/// the operation had no effect, and performing it again is what its caller
/// asked for. The driver's result is final: it never comes back here.
#[inline]
fn resubmit_after_exit(done: &mut Vec<Done>) {
    // The result first: it is in hand, the kind is behind a virtual call.
    if done.iter().any(|d| {
        OpKind::may_have_failed_by_submitter_exit(d.res)
            && d.op.kind().failed_by_submitter_exit(d.res)
    }) {
        resubmit_failed(done);
    }
}

/// The rare part of [`resubmit_after_exit`].
#[cold]
fn resubmit_failed(done: &mut Vec<Done>) {
    let mut kept = Vec::with_capacity(done.len());
    for d in done.drain(..) {
        if !d.op.kind().failed_by_submitter_exit(d.res) {
            kept.push(d);
            continue;
        }
        let op = d.op;
        let engine = op.engine();
        let shared = engine.state();
        if shared.forked() {
            // A child's ring carrying an operation of the parent's engine,
            // whose driver's threads are not here.
            kept.push(Done {
                op,
                res: ENGINE_ACROSS_FORK,
                inline: false,
            });
            continue;
        }
        shared.counters.resubmitted.fetch_add(1, Ordering::Relaxed);
        // Handed to the driver while still counted on the rings, so that a
        // shutdown cannot stop the driver in between; counted out after.
        engine.submit_to_driver(op, true);
        let before = shared.own_ring_ops.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "an own-ring operation is counted out once");
    }
    debug_assert!(
        kept.iter()
            .all(|d| d.res == ENGINE_ACROSS_FORK || !d.op.kind().failed_by_submitter_exit(d.res)),
        "what is kept is no operation a submitter's exit failed"
    );
    *done = kept;
}

/// Counts a submitting system call made by [`ReactorRing::flush`] for the
/// engine of an operation it carried or found complete (rings are shared
/// by engines; the first one found is charged).
fn charge_syscall(done: &[Done], core: &RingCore) {
    charge_syscall_of(done.first().map(|d| &d.op).or_else(|| core.any_in_flight()));
}

/// Counts a submitting system call made by a submission for its own
/// engine (`engine`, the address of its state): the operation is still in
/// flight under `key`, or completed into `done`.
fn charge_syscall_to(engine: usize, key: Option<usize>, done: &[Done], core: &RingCore) {
    let of_engine =
        |op: &&Arc<dyn Completable>| op.shared() as *const EngineState as usize == engine;
    let op = key
        .and_then(|k| core.op(k))
        .filter(of_engine)
        .or_else(|| done.iter().map(|d| &d.op).find(of_engine));
    debug_assert!(op.is_some(), "the submitted operation is in flight or done");
    charge_syscall_of(op);
}

/// Counts a submitting system call for `op`'s engine.
fn charge_syscall_of(op: Option<&Arc<dyn Completable>>) {
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
    if inner.orphaned.load(Ordering::Acquire) || inner.inherited() || op.shared().forked() {
        // Nobody reaps it any more, or it is the parent's, or the operation
        // is of the parent's engine (a forked child's copy of a parent's
        // file): the driver, which refuses the last with `Error::Forked`.
        return Err(op);
    }
    if !op.shared().admit_to_own_ring() {
        return Err(op);
    }
    debug_assert!(
        op.shared().own_ring_ops.load(Ordering::Acquire) > 0,
        "an operation admitted is counted on the engine's rings"
    );
    let engine = op.shared() as *const EngineState as usize;
    // On the engine's rings together (threads' own rings too), this one
    // included: where a runtime's workers share the tasks, a task woken by
    // one ring's reap often submits on another's, whose own counts then
    // look shallow.
    let engine_deep = op.shared().own_ring_ops.load(Ordering::Relaxed) > DEFER_FROM;
    if inner.nudged.load(Ordering::Relaxed) != engine && !op.shared().forked() {
        // The engine's thread watches the reactor rings from now on, even
        // if it was asleep with no timeout when this ring was made.
        inner.nudged.store(engine, Ordering::Relaxed);
        op.engine().nudge();
    }
    op.shared()
        .counters
        .reactor_submitted
        .fetch_add(1, Ordering::Relaxed);
    let mut done = spare_done();
    let wake_flusher = push_current(inner, op, engine, engine_deep, &mut done)?;
    if wake_flusher {
        inner.wake_flusher();
    }
    finish(&mut done);
    keep_done(done);
    Ok(())
}

/// Under the ring's lock: pushes `op` (of the engine at address `engine`,
/// `engine_deep` when that engine has many operations on its rings) and
/// submits now or leaves it to the flusher. Returns whether the flusher
/// must be woken, or the operation back when the ring was orphaned.
#[inline]
fn push_current(
    inner: &Inner,
    op: Arc<dyn Completable>,
    engine: usize,
    engine_deep: bool,
    done: &mut Vec<Done>,
) -> Result<bool, Arc<dyn Completable>> {
    debug_assert_eq!(
        inner.generation,
        fork_generation(),
        "a child never submits on its parent's ring"
    );
    let mut core = lock(&inner.core);
    if inner.orphaned.load(Ordering::Acquire) {
        // Orphaned since the check above: not on this ring.
        drop(core);
        let before = op.shared().own_ring_ops.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "an own-ring operation is counted out once");
        return Err(op);
    }
    let key = core.push(op, done);
    // Deferred while enough is in flight or about to be: the tasks
    // that the last reaps woke and that have not submitted yet count
    // (without them, a ring that a busy executor had let run low went
    // on at one read per system call, which kept the executor busy).
    // The engine's count wins even on an idle ring: at 64 tasks on two
    // workers one ring often sat empty while the other held the reads,
    // and the tasks stolen onto it submitted alone (requiring something
    // else in flight here kept 94% of those calls). What it costs where
    // the engine is deep for other reasons (threads' own rings, idle
    // pipe reads): a lone read waits for one poll of the flusher.
    let deferred = (core.in_flight() + core.likely_soon() > DEFER_FROM || engine_deep)
        && core.pending() < batch_limit(inner.batch.load(Ordering::Relaxed))
        && inner.has_flusher.load(Ordering::Acquire);
    if deferred {
        // The first entry queued wakes the flusher.
        return Ok(core.pending() == 1);
    }
    if core.submit(done) {
        charge_syscall_to(engine, key, done, &core);
    }
    // Taken only in part (see `flush`): the flusher must come back
    // for the rest.
    Ok(core.pending() > 0)
}

mod watcher;

pub(crate) use watcher::{reap_all, release_idle_orphans, watch_if_due, watch_tick};
