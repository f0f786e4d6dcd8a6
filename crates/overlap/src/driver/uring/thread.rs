//! Each thread's own ring, and the thread's waiter: where a thread in
//! [`block_on`](crate::block_on) (`crate::wait`) sleeps, and what wakes it.
//!
//! A thread that blocks in [`block_on`](crate::block_on) (every `.wait()`) is the thread the
//! kernel wakes: operations first polled inside it, on an io_uring engine,
//! go onto a ring that belongs to the calling thread (created lazily,
//! `SINGLE_ISSUER|DEFER_TASKRUN`), and the thread sleeps in `io_uring_enter`
//! on that ring until a completion arrives. The completion's task work wakes
//! this very thread; no engine thread and no futex hand-off stand in
//! between, which is what fio's psync/io_uring jobs and a Windows thread in
//! `GetQueuedCompletionStatus` get.
//!
//! Rules that keep it sound:
//! - Only this thread submits to and reaps its ring (thread-local state), so
//!   no lock is needed and `DEFER_TASKRUN` applies.
//! - The outermost `block_on` of a thread does not return while operations
//!   are in flight on the thread's ring (a future dropped or moved out
//!   mid-flight included): nothing is left that only this thread could reap
//!   while it does something else. A thread that ends reaps its ring from
//!   its thread-local destructor before the ring is freed.
//! - Completion runs user code (wakers, a dropped future's buffer); it runs
//!   with the ring not borrowed, and a panic in it is resumed only once
//!   every completion of the batch has been recorded.
//! - Something other than the ring (an operation on the engine thread, the
//!   budget, a port) may wake the thread while it sleeps in the ring: its
//!   waker then writes the thread's eventfd, which a read pending in the
//!   ring turns into a completion.
//!
//! On an `aio+pool` engine (io_uring blocked) there is no ring per thread,
//! but the same holds: a thread that waits while operations are in flight
//! on the engine's AIO context calls `io_getevents` itself when no other
//! thread does, and completes what it gets (leader/follower:
//! `driver::aio::lead`). Its waker, seeing it asleep there (`IN_AIO`),
//! kicks the context.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Wake, Waker};
use std::thread::Thread;

use super::core::RingCore;
use super::setup::{self, Issuers};
use crate::cell::{Completable, RingSize};
use crate::driver::aio;
use crate::driver::{complete_all, keep_done, spare_done, Done};
use crate::driver::{spin_window, Panic};
use crate::stats::Counters;

const RUNNING: u8 = 0;
const PARKED: u8 = 1;
const IN_RING: u8 = 2;
/// Holds the reaping role of an AIO context, not inside `io_getevents`.
const LEADING: u8 = 3;
/// Asleep in `io_getevents`, holding the reaping role.
const IN_AIO: u8 = 4;

/// The waker of a thread blocked in [`block_on`](crate::block_on).
pub(crate) struct ThreadWaker {
    thread: Thread,
    /// Set by a wake-up, so that a waiter sees it without sleeping.
    pub(crate) notified: AtomicBool,
    /// Where the thread sleeps: `RUNNING`, `PARKED`, `IN_RING`, `LEADING`
    /// or `IN_AIO`.
    state: AtomicU8,
    /// The AIO context the thread sleeps in while `IN_AIO` (to kick it).
    aio: Mutex<Option<Arc<aio::Inner>>>,
    /// Written to wake the thread asleep in its ring. Owned by the waker so
    /// that a waker outliving the thread never writes a descriptor number
    /// that was reused.
    eventfd: OnceLock<OwnedFd>,
}

impl ThreadWaker {
    fn new() -> ThreadWaker {
        ThreadWaker {
            thread: std::thread::current(),
            notified: AtomicBool::new(false),
            state: AtomicU8::new(RUNNING),
            aio: Mutex::new(None),
            eventfd: OnceLock::new(),
        }
    }
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // SeqCst pairs with the waiter's store of `state` and load of
        // `notified`: either the waiter sees the flag, or this sees where
        // it sleeps.
        self.notified.store(true, Ordering::SeqCst);
        let state = self.state.load(Ordering::SeqCst);
        debug_assert!(
            state <= IN_AIO,
            "a thread's waker is in one of its five states"
        );
        match state {
            IN_RING => {
                debug_assert!(
                    self.eventfd.get().is_some(),
                    "a thread sleeps in its ring only once its eventfd is made"
                );
                if let Some(fd) = self.eventfd.get() {
                    let one: u64 = 1;
                    // SAFETY: writes 8 bytes from a local into an eventfd
                    // this waker owns.
                    let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
                }
            }
            IN_AIO => {
                let ctx = self.aio.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some(ctx) = ctx {
                    ctx.kick();
                }
            }
            PARKED => self.thread.unpark(),
            // Running, or holding the AIO reaping role outside
            // `io_getevents`: it checks `notified` before it sleeps (the
            // SeqCst pair above), so there is nothing to interrupt.
            _ => {}
        }
    }
}

/// A thread's own ring.
pub(crate) struct ThreadRing {
    core: RingCore,
    /// The bound on the kernel's workers applied to this thread's io-wq.
    workers_bound: Option<u32>,
    /// The counters of the engine charged for the next submitting system
    /// call.
    last_engine: Weak<Counters>,
    /// The core's count of submitting system calls already charged to an
    /// engine (`RingCore::marks`): every one is counted, including those a
    /// full submission queue makes while operations are queued.
    charged: u64,
}

impl ThreadRing {
    /// A ring of `size` (the engine's `RingSizes::thread`) for this thread:
    /// more operations than its entries may be in flight (a full
    /// submission queue is submitted and refilled; the kernel keeps
    /// completion-queue overflow).
    fn create(waker: &ThreadWaker, size: RingSize) -> Option<ThreadRing> {
        let (ring, _flags) = setup::make_ring(size, Issuers::One).ok()?;
        if waker.eventfd.get().is_none() {
            // SAFETY: eventfd has no memory arguments; the result is checked.
            let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if efd < 0 {
                return None;
            }
            // SAFETY: efd is a fresh descriptor that nothing else owns.
            let _ = waker.eventfd.set(unsafe { OwnedFd::from_raw_fd(efd) });
        }
        let efd = waker.eventfd.get()?.as_raw_fd();
        Some(ThreadRing {
            core: RingCore::new(ring, Some(efd)),
            workers_bound: None,
            last_engine: Weak::new(),
            charged: 0,
        })
    }

    /// Applies an engine's bound on kernel workers to this thread's io-wq
    /// (the smallest bound asked for wins).
    fn bound_workers(&mut self, max: Option<u32>) {
        let before = self.workers_bound;
        if let Some(n) = max {
            if self.workers_bound.is_none_or(|b| n < b)
                && setup::bound_kernel_workers(self.core.ring().io(), Some(n)).is_ok()
            {
                self.workers_bound = Some(n);
            }
        }
        debug_assert!(
            before.is_none_or(|b| self.workers_bound.is_some_and(|now| now <= b)),
            "the bound on a thread's kernel workers only tightens"
        );
    }

    fn submit(&mut self, done: &mut Vec<Done>) {
        self.core.submit(done);
        self.charge_syscalls();
        debug_assert_eq!(
            self.charged,
            self.core.marks().1,
            "every submitting call of the thread's ring is charged"
        );
    }

    /// Charges the submitting system calls made since the last charge to
    /// the engine that last submitted here. Operations queued on the ring
    /// reach the kernel together, when the thread waits or when the
    /// submission queue is full: `submit_syscalls` shows how many calls that
    /// took.
    fn charge_syscalls(&mut self) {
        let (_, made) = self.core.marks();
        debug_assert!(
            self.charged <= made,
            "the calls charged never outnumber the calls made"
        );
        let calls = made - self.charged;
        if calls == 0 {
            return;
        }
        self.charged = made;
        if let Some(counters) = self.last_engine.upgrade() {
            counters.submit_syscalls.fetch_add(calls, Ordering::Relaxed);
        }
    }
}

impl Drop for ThreadRing {
    fn drop(&mut self) {
        if self.core.inherited() {
            // A child after fork: the ring's operations are the parent's;
            // the core leaves them and the registrations alone.
            return;
        }
        // The thread is ending: reap what is in flight (normally nothing:
        // block_on drains) and the eventfd read, then free the ring.
        self.core.drain(count_out);
        debug_assert!(
            self.charged <= self.core.marks().1,
            "the calls charged never outnumber the calls made"
        );
    }
}

pub(crate) enum RingState {
    Untried,
    Ready(Box<ThreadRing>),
    Unavailable,
}

/// Per-thread state. Field order: the ring is dropped (and drained) before
/// this thread's reference to the waker that owns its eventfd.
pub(crate) struct Local {
    pub(crate) ring: RefCell<RingState>,
    /// Nesting of `block_on` on this thread.
    pub(crate) depth: Cell<u32>,
    /// The innermost `block_on` runs one operation at a time (`Op::wait`,
    /// `Task::wait`): on a thread-pool engine its operations run on this
    /// thread (see [`route_for`](super::route_for)).
    pub(crate) inline: Cell<bool>,
    pub(crate) waker: Arc<ThreadWaker>,
    pub(crate) waker_obj: Waker,
    /// The identity of the waker a [`join_all`](crate::join_all) polled
    /// by this thread's `block_on` gives the future it polls now
    /// ([`JoinedScope`]); [`NOT_JOINED`] otherwise.
    pub(crate) joined: Cell<(usize, usize)>,
    /// The AIO context this thread last submitted to while in `block_on`:
    /// where it reaps when it waits (`driver::aio::lead`).
    aio: RefCell<Weak<aio::Inner>>,
}

impl Local {
    pub(crate) fn new() -> Local {
        let waker = Arc::new(ThreadWaker::new());
        Local {
            ring: RefCell::new(RingState::Untried),
            depth: Cell::new(0),
            inline: Cell::new(false),
            waker_obj: Waker::from(waker.clone()),
            waker,
            joined: Cell::new(NOT_JOINED),
            aio: RefCell::new(Weak::new()),
        }
    }
}

impl Local {
    /// Whether `waker` is this thread's `block_on`'s own (inside one), or
    /// a joined future's while its combinator, polled with it, polls it.
    pub(crate) fn polled_by_block_on(&self, waker: &Waker) -> bool {
        self.depth.get() > 0
            && (waker.will_wake(&self.waker_obj) || self.joined.get() == waker_id(waker))
    }
}

/// A `block_on` of this thread as the thread's waiter sees it
/// ([`with_waiter`]): the waker to poll with, the take of a wake-up before
/// each poll, and the sleep until the next.
pub(crate) struct Waiter<'a> {
    local: &'a Local,
}

impl Waiter<'_> {
    /// The thread's waker: what polls with it (directly, or through
    /// combinators that pass it on) submits on the thread's own ring.
    pub(crate) fn waker(&self) -> &Waker {
        debug_assert!(
            self.local.depth.get() > 0,
            "a waiter lives inside its block_on"
        );
        &self.local.waker_obj
    }

    /// Takes the thread's pending wake-up, before a poll. A swap, not a
    /// store: when it takes away a wake-up that another thread's completion
    /// set, it synchronises with that thread, so the poll that follows sees
    /// what the completion wrote (a future's lock-free `done` check in
    /// `OpCell::poll_done`). A plain store could be ordered after that
    /// check: the poll would see the operation not done, and the wake-up it
    /// erased would be lost.
    pub(crate) fn take_wake_up(&self) {
        debug_assert!(self.local.depth.get() > 0, "taken inside a block_on only");
        self.local.waker.notified.swap(false, Ordering::SeqCst);
    }

    /// Sleeps until woken: in the thread's ring, in an AIO context it
    /// leads, or parked.
    pub(crate) fn sleep(&self) {
        debug_assert!(
            self.local.depth.get() > 0,
            "a block_on sleeps inside itself"
        );
        sleep(self.local);
    }
}

/// Runs `f` as a `block_on` of this thread (`inline`: one operation at a
/// time, [`route_for`](super::route_for)), nested in any enclosing one. On
/// the way out (also when unwinding) the outermost reaps the thread's ring
/// and the enclosing run's `inline` is restored. During the thread's
/// teardown (its thread-local gone) it waits without a ring.
pub(crate) fn with_waiter<R>(inline: bool, f: impl FnOnce(&Waiter<'_>) -> R) -> R {
    // `try_with` is re-entrant, so a nested block_on is fine.
    if LOCAL.try_with(|_| ()).is_ok() {
        return LOCAL.with(|l| run_waiter(l, inline, f));
    }
    let local = Local::new();
    local.ring.replace(RingState::Unavailable);
    run_waiter(&local, inline, f)
}

fn run_waiter<R>(l: &Local, inline: bool, f: impl FnOnce(&Waiter<'_>) -> R) -> R {
    l.depth.set(l.depth.get() + 1);
    let _depth = Depth(l, l.inline.replace(inline));
    f(&Waiter { local: l })
}

/// Leaves a `block_on`: the outermost one reaps the thread's ring, also
/// when unwinding. Restores the enclosing run's `inline` flag.
struct Depth<'a>(&'a Local, bool);

impl Drop for Depth<'_> {
    fn drop(&mut self) {
        let l = self.0;
        debug_assert!(l.depth.get() > 0, "every block_on left was entered");
        l.inline.set(self.1);
        l.depth.set(l.depth.get() - 1);
        if l.depth.get() > 0 {
            // The nested run cleared the thread's wake-up flag, which the
            // outer future may have been woken through meanwhile: poll it
            // again (a spurious poll is harmless, a lost wake-up is not).
            l.waker.notified.store(true, Ordering::SeqCst);
        }
        if l.depth.get() == 0 {
            debug_assert!(
                !l.inline.get(),
                "outside every block_on no run is one operation at a time"
            );
            if let Some(p) = drain_own_ring(l) {
                if std::thread::panicking() {
                    crate::driver::report_panic("an operation reaped while unwinding", &p);
                } else {
                    std::panic::resume_unwind(p);
                }
            }
        }
    }
}

/// [`Local::joined`] outside a joined future's poll (no waker has a null
/// data and vtable pointer).
pub(crate) const NOT_JOINED: (usize, usize) = (0, 0);

thread_local! {
    pub(crate) static LOCAL: Local = Local::new();
}

/// A waker's identity, as `Waker::will_wake` compares it (data and vtable).
pub(crate) fn waker_id(w: &Waker) -> (usize, usize) {
    (w.data() as usize, std::ptr::from_ref(w.vtable()) as usize)
}

/// While a [`join_all`](crate::join_all) polled with `block_on`'s own waker
/// polls one of its futures: that future's waker counts as `block_on`'s
/// ([`route_for`](super::route_for)). The combinator never parks the
/// thread, it returns to `block_on`, which waits on the thread's ring.
/// Restores the previous scope when dropped (nested combinators, a
/// panicking poll).
pub(crate) struct JoinedScope {
    previous: (usize, usize),
}

impl JoinedScope {
    pub(crate) fn enter(child: &Waker) -> JoinedScope {
        let id = waker_id(child);
        debug_assert_ne!(id, NOT_JOINED, "no waker has the identity of none");
        let previous = LOCAL
            .try_with(|l| l.joined.replace(id))
            .unwrap_or(NOT_JOINED);
        JoinedScope { previous }
    }
}

impl Drop for JoinedScope {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| l.joined.set(self.previous));
    }
}

pub(crate) fn count_out(done: &[Done]) {
    for d in done {
        let before = d.op.shared().own_ring_ops.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "an own-ring operation is counted out once");
    }
}

/// A shared ring (a port's) on which a thread queues operations without a
/// system call each, inside [`defer`]'s scope (`Port::batch`): what the
/// thread queued reaches the kernel in one `io_uring_enter` when
/// [`DEFER_BATCH`] are queued, when the scope ends, and before the thread
/// blocks anywhere (its `block_on` sleeping or parking, a port's wait):
/// an operation queued but not submitted while its thread sleeps would
/// never complete.
pub(crate) trait Deferred: Send + Sync {
    /// Submits what this thread queued on the ring.
    fn flush(&self);
}

/// Operations a thread queues on a shared ring before it submits them in
/// one system call, at most.
/// 32: the probe's 500 reads go in 16 calls (with 16, the last partial batch
/// made it 32, one more than one per 16).
pub(crate) const DEFER_BATCH: usize = 32;

/// What [`deferral`] tells a ring about the operation just queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deferral {
    /// The calling thread does not defer on this ring: submit now.
    No,
    /// Left queued, to be submitted with the next ones.
    Queued,
    /// The batch is full: submit it now ([`Deferred::flush`]).
    Full,
}

struct Deferring {
    ring: Arc<dyn Deferred>,
    /// Queued since the last flush.
    queued: usize,
}

/// The rings the calling thread defers on. Each scope's guard flushes its
/// ring when it ends, also when unwinding; should a thread end with a ring
/// still listed, its destructor submits what is queued all the same.
struct DeferringRings(RefCell<Vec<Deferring>>);

impl Drop for DeferringRings {
    fn drop(&mut self) {
        for d in self.0.get_mut().drain(..) {
            debug_assert!(d.queued < DEFER_BATCH, "a full batch was submitted");
            if d.queued > 0 {
                d.ring.flush();
            }
        }
    }
}

thread_local! {
    static DEFERRING: DeferringRings = const { DeferringRings(RefCell::new(Vec::new())) };
}

fn ring_key(ring: &Arc<dyn Deferred>) -> *const () {
    Arc::as_ptr(ring).cast::<()>()
}

/// The calling thread defers submission on `ring` until the guard goes
/// (which submits what is queued). `None` if it already does (a nested
/// scope adds nothing) or its thread-locals are gone (it submits at once).
pub(crate) fn defer(ring: Arc<dyn Deferred>) -> Option<DeferGuard> {
    let key = ring_key(&ring);
    DEFERRING
        .try_with(|d| {
            let mut rings = d.0.try_borrow_mut().ok()?;
            if rings.iter().any(|r| ring_key(&r.ring) == key) {
                return None;
            }
            rings.push(Deferring { ring, queued: 0 });
            debug_assert_eq!(
                rings.iter().filter(|r| ring_key(&r.ring) == key).count(),
                1,
                "a thread lists a ring it defers on once"
            );
            Some(DeferGuard {
                key,
                _not_send: std::marker::PhantomData,
            })
        })
        .ok()
        .flatten()
}

/// Ends a [`defer`] scope: submits what the thread queued on the ring and
/// submits at once from then on. Stays on the thread that made it.
pub(crate) struct DeferGuard {
    key: *const (),
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for DeferGuard {
    fn drop(&mut self) {
        let ring = DEFERRING
            .try_with(|d| {
                let mut rings = d.0.try_borrow_mut().ok()?;
                let i = rings.iter().position(|r| ring_key(&r.ring) == self.key)?;
                let ring = rings.swap_remove(i).ring;
                debug_assert!(
                    !rings.iter().any(|r| ring_key(&r.ring) == self.key),
                    "a thread lists a ring it defers on once"
                );
                Some(ring)
            })
            .ok()
            .flatten();
        // Flushed with the list released: flushing runs no user code, but
        // nothing here needs the list either.
        if let Some(ring) = ring {
            ring.flush();
        }
    }
}

/// Called by a shared ring for each operation the calling thread queued on
/// it (`ring` is the ring's address): whether to submit now, leave it
/// queued, or submit the full batch.
pub(crate) fn deferral(ring: *const ()) -> Deferral {
    DEFERRING
        .try_with(|d| {
            let Ok(mut rings) = d.0.try_borrow_mut() else {
                return Deferral::No;
            };
            let Some(r) = rings.iter_mut().find(|r| ring_key(&r.ring) == ring) else {
                return Deferral::No;
            };
            debug_assert!(r.queued < DEFER_BATCH, "a full batch was submitted");
            r.queued += 1;
            if r.queued >= DEFER_BATCH {
                r.queued = 0;
                Deferral::Full
            } else {
                Deferral::Queued
            }
        })
        .unwrap_or(Deferral::No)
}

/// Submits everything the calling thread queued on shared rings without
/// submitting: called wherever the thread may block.
pub(crate) fn flush_deferred() {
    let mut pending: Vec<Arc<dyn Deferred>> = Vec::new();
    let _ = DEFERRING.try_with(|d| {
        if let Ok(mut rings) = d.0.try_borrow_mut() {
            for r in rings.iter_mut().filter(|r| r.queued > 0) {
                debug_assert!(r.queued < DEFER_BATCH, "a full batch was submitted");
                r.queued = 0;
                pending.push(r.ring.clone());
            }
        }
    });
    for ring in pending {
        ring.flush();
    }
}

/// Records that the calling thread, inside `block_on`, submitted to the
/// AIO context `ctx`: it reaps there when it waits.
pub(crate) fn note_aio(ctx: &Arc<aio::Inner>) {
    let _ = LOCAL.try_with(|l| {
        if let Ok(mut cur) = l.aio.try_borrow_mut() {
            if cur.as_ptr() != Arc::as_ptr(ctx) {
                *cur = Arc::downgrade(ctx);
            }
        }
    });
}

/// A thread in `block_on`, as the AIO reaping protocol sees it.
struct ThreadWaiter<'a>(&'a Local);

impl aio::Waiter for ThreadWaiter<'_> {
    fn ready(&self) -> bool {
        self.0.waker.notified.load(Ordering::SeqCst)
    }
    fn enter(&self, ctx: &Arc<aio::Inner>) -> bool {
        debug_assert!(
            self.0.depth.get() > 0,
            "a thread sleeps in io_getevents inside a block_on"
        );
        let tw = &self.0.waker;
        debug_assert!(
            matches!(tw.state.load(Ordering::SeqCst), RUNNING | LEADING),
            "a thread enters io_getevents awake"
        );
        *tw.aio.lock().unwrap_or_else(|p| p.into_inner()) = Some(ctx.clone());
        // SeqCst pairs with the waker's store of `notified` and load of
        // `state`: either this sees the wake-up, or the waker kicks.
        tw.state.store(IN_AIO, Ordering::SeqCst);
        if tw.notified.load(Ordering::SeqCst) {
            self.leave();
            return false;
        }
        true
    }
    fn leave(&self) {
        let tw = &self.0.waker;
        debug_assert_eq!(
            tw.state.load(Ordering::SeqCst),
            IN_AIO,
            "a thread leaves io_getevents from inside it"
        );
        tw.state.store(LEADING, Ordering::SeqCst);
        tw.aio.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
    fn follow(&self, _deadline: Option<std::time::Instant>) {
        debug_assert!(self.0.depth.get() > 0, "a follower waits inside a block_on");
        park_until_notified(&self.0.waker);
    }
    fn promoter(&self) -> Waker {
        self.0.waker_obj.clone()
    }
    fn leading(&self, on: bool) {
        debug_assert!(self.0.depth.get() > 0, "a leader reaps inside a block_on");
        let s = if on { LEADING } else { RUNNING };
        debug_assert_ne!(
            self.0.waker.state.load(Ordering::SeqCst),
            IN_AIO,
            "the reaping role changes hands outside io_getevents"
        );
        self.0.waker.state.store(s, Ordering::SeqCst);
    }
}

/// Puts `op` on the calling thread's ring (the caller checked
/// [`route_for`](super::route_for)); gives it back, for the engine's driver, if the
/// thread has no ring or the engine is shutting down.
pub(crate) fn submit_on_own_ring(op: Arc<dyn Completable>) -> Result<(), Arc<dyn Completable>> {
    if LOCAL.try_with(|_| ()).is_err() {
        return Err(op);
    }
    LOCAL.with(|l| {
        debug_assert!(
            l.depth.get() > 0,
            "only a block_on of this thread submits on its ring"
        );
        let Ok(mut state) = l.ring.try_borrow_mut() else {
            return Err(op);
        };
        if let RingState::Ready(r) = &mut *state {
            if r.core.inherited() {
                // A child after fork: the ring's memory is the parent's.
                // Forget it (never drain or free it) and make a new one.
                let RingState::Ready(inherited) =
                    std::mem::replace(&mut *state, RingState::Untried)
                else {
                    unreachable!("matched above")
                };
                std::mem::forget(inherited);
            }
        }
        if matches!(*state, RingState::Untried) {
            *state = match ThreadRing::create(&l.waker, op.shared().rings.thread) {
                Some(r) => RingState::Ready(Box::new(r)),
                None => RingState::Unavailable,
            };
        }
        let RingState::Ready(r) = &mut *state else {
            return Err(op);
        };
        debug_assert!(
            !r.core.inherited(),
            "a thread's ring in use is its process's own (an inherited one was replaced)"
        );
        {
            let shared = op.shared();
            r.bound_workers(shared.max_kernel_workers);
            if r.last_engine.as_ptr() != Arc::as_ptr(&shared.counters) {
                r.last_engine = Arc::downgrade(&shared.counters);
            }
            if !shared.admit_to_own_ring() {
                return Err(op);
            }
            debug_assert!(
                shared.own_ring_ops.load(Ordering::Acquire) > 0,
                "an operation admitted is counted on the engine's rings"
            );
            shared
                .counters
                .thread_ring_submitted
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut done = Vec::new();
        // Queued only: it reaches the kernel with the others this thread
        // queues, when the thread waits (`sleep`) or the queue is full.
        r.core.push(op, &mut done);
        r.charge_syscalls();
        drop(state);
        finish(&mut done);
        Ok(())
    })
}

/// Completes reaped operations with the ring released; resumes the first
/// panic of user code once all are recorded.
fn finish(done: &mut Vec<Done>) {
    count_out(done);
    if let Some(p) = complete_all(done) {
        std::panic::resume_unwind(p);
    }
    debug_assert!(done.is_empty(), "complete_all takes every completion");
}

/// Reaps everything in flight on the calling thread's ring.
pub(crate) fn drain_own_ring(l: &Local) -> Option<Panic> {
    let mut caught = None;
    let mut done = spare_done();
    loop {
        {
            let Ok(mut state) = l.ring.try_borrow_mut() else {
                break;
            };
            let RingState::Ready(r) = &mut *state else {
                break;
            };
            if r.core.in_flight() == 0 || r.core.inherited() {
                break;
            }
            r.core.wait(None, &mut done);
            r.charge_syscalls();
        }
        count_out(&done);
        caught = caught.or(complete_all(&mut done));
        debug_assert!(done.is_empty(), "complete_all takes every completion");
    }
    keep_done(done);
    caught
}

/// Whether the calling thread's own ring holds operations (in flight, or
/// queued and not yet submitted), or cannot be looked at now (borrowed by
/// the code that called this): a blocking wait must then go through the
/// ring, whose entry submits what is queued, rather than make its call on
/// this thread and leave those waiting.
pub(crate) fn own_ring_busy() -> bool {
    LOCAL
        .try_with(|l| match l.ring.try_borrow_mut() {
            Ok(mut state) => match &mut *state {
                RingState::Ready(r) if !r.core.inherited() => {
                    r.core.in_flight() > 0 || r.core.pending() > 0
                }
                _ => false,
            },
            Err(_) => true,
        })
        .unwrap_or(false)
}

/// Called by an engine shutting down: reaps the calling thread's own ring
/// (it may hold operations of that engine that nobody else can reap).
pub(crate) fn drain_current_thread() {
    if let Ok(Some(p)) = LOCAL.try_with(drain_own_ring) {
        crate::driver::report_panic("an operation reaped at shutdown", &p);
    }
}

/// Waits until the thread's waker fires or its ring has completions.
pub(crate) fn sleep(l: &Local) {
    // What this thread queued on a port's ring must be in the kernel before
    // it sleeps: the future may wait for one of those operations, or for
    // the budget they hold.
    flush_deferred();
    let tw = &l.waker;
    let mut done = spare_done();
    let in_ring = {
        let mut state = l.ring.borrow_mut();
        let busy = match &mut *state {
            RingState::Ready(r) if !r.core.inherited() => {
                r.core.in_flight() > 0 || r.core.pending() > 0
            }
            _ => false,
        };
        match &mut *state {
            RingState::Ready(r) if busy => {
                r.core.arm_eventfd(&mut done);
                debug_assert!(
                    matches!(tw.state.load(Ordering::SeqCst), RUNNING | LEADING),
                    "a thread goes to sleep in its ring awake"
                );
                tw.state.store(IN_RING, Ordering::SeqCst);
                if tw.notified.load(Ordering::SeqCst) {
                    r.submit(&mut done);
                } else {
                    r.core.wait(None, &mut done);
                    r.charge_syscalls();
                }
                debug_assert_eq!(
                    tw.state.load(Ordering::SeqCst),
                    IN_RING,
                    "only the thread itself moves its waker's state"
                );
                tw.state.store(RUNNING, Ordering::SeqCst);
                true
            }
            _ => false,
        }
    };
    if in_ring {
        finish(&mut done);
        debug_assert!(done.is_empty(), "finish takes every completion");
    }
    keep_done(done);
    if in_ring {
        return;
    }
    let ctx = l.aio.try_borrow().ok().and_then(|w| w.upgrade());
    if let Some(ctx) = ctx {
        if aio::wait(&ctx, &ThreadWaiter(l), None) {
            return;
        }
    }
    park_until_notified(tw);
}

/// Looks for the thread's wake-up for the spin window, then parks until it.
fn park_until_notified(tw: &ThreadWaker) {
    flush_deferred();
    let spin = spin_window();
    if !spin.is_zero() {
        let start = std::time::Instant::now();
        // Yield rather than spin: the vCPU stays awake, but a runnable
        // thread (the engine's, or another waiter) gets it.
        while !tw.notified.load(Ordering::Acquire) && start.elapsed() < spin {
            std::thread::yield_now();
        }
    }
    debug_assert!(
        matches!(tw.state.load(Ordering::SeqCst), RUNNING | LEADING),
        "a thread parks awake"
    );
    tw.state.store(PARKED, Ordering::SeqCst);
    if !tw.notified.load(Ordering::SeqCst) {
        std::thread::park();
    }
    debug_assert_eq!(
        tw.state.load(Ordering::SeqCst),
        PARKED,
        "only the thread itself moves its waker's state"
    );
    tw.state.store(RUNNING, Ordering::SeqCst);
}
