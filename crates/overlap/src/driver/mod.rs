//! Drivers: who performs the system calls. [`uring`] is the one home of
//! io_uring (the engine thread's ring for futures polled by any executor,
//! each thread's own ring, reactor rings, completion ports' rings, and the
//! routing that picks one); [`pool`] performs them on a bounded set of
//! threads where io_uring is unavailable; [`aio`] hands O_DIRECT reads and
//! writes to Linux AIO where io_uring is unavailable and leaves the rest to
//! a pool beside it (its completions reaped by the threads that wait for
//! them, `aio::lead`); [`handle`] is the engine's driver, whichever it is.
//!
//! This module holds what every driver shares: wake-ups deferred to the end
//! of a batch, panics in user code contained, the marks of driver threads,
//! the spin window of a waiting thread. Drivers import each other and the
//! layer below them ([`crate::cell`], `operation`, `stats`, `error`, ...),
//! never the engine or the front ends (`scripts/import-graph` checks it).

#[cfg(target_os = "linux")]
pub(crate) mod aio;
pub(crate) mod caller;
pub(crate) mod handle;
#[cfg(windows)]
pub(crate) mod iocp;
pub(crate) mod pool;
#[cfg(target_os = "linux")]
pub(crate) mod uring;

use std::sync::Arc;

use crate::cell::Completable;
use crate::operation::OpKind;

/// What a driver does for the engine: the contract that io_uring (the
/// engine thread's ring, [`uring::engine_thread::UringDriver`]), Linux AIO
/// beside a pool ([`aio::AioDriver`]) and the pool ([`pool::PoolDriver`])
/// keep, and that a new driver (IOCP) implements without touching them;
/// [`handle::DriverHandle`] is the engine's one, whichever it is.
///
/// - **Submit** ([`submit`](Self::submit)): the operation arrives admitted
///   (its share of the in-flight budget held, its file counted in, so the
///   descriptor stays open), and the driver performs it: on the kernel, or
///   on a thread of its own. It never waits for the operation on the
///   caller's thread, except where the caller waits for it anyway: the
///   pool (`Stats::ran_on_caller`), and IOCP's `submit_waited` for a
///   thread in `Op::wait` (`Stats::iocp_waited_on_caller`). `urgent`: no thread will wait for this
///   operation (a future polled by another executor), so nobody else will
///   reap it.
/// - **Complete**: exactly once per operation submitted, the driver calls
///   [`Completable::complete`] (performed: the kernel's `>= 0` or `-errno`,
///   and whether it was known when the submitting call returned) or
///   [`Completable::refuse`] (shutting down: not performed, a close still
///   closes), through [`contain`], with none of its locks held (completion
///   runs user code). Until that call the buffer and the operation belong
///   to the kernel: nothing frees them.
/// - **Wait**: a thread that waits for its own operations may reap them
///   itself (a thread's own ring, `aio::lead`, an IOCP call carrying the
///   thread's event); the driver never makes one caller wait for another
///   caller's operation.
/// - **Cancel**: io_uring and IOCP (`CancelIoEx`) can stop an operation
///   in the kernel (a port's `cancel`); elsewhere an operation runs to its
///   end. A stopped one still completes exactly once.
/// - **Shut down** ([`shutdown`](Self::shutdown)): refuse what comes after,
///   complete everything in flight, join the driver's threads (unless
///   called from one of them).
/// - **Count** what only the driver knows, in the engine's counters: each
///   submitting system call (`submit_syscalls`), what went to AIO or the
///   pool (`aio_submitted`, `pool_submitted`), what ran on the caller. A
///   result's bytes, errors and "inline" are counted by the operation cell
///   at completion, the same for every driver.
/// - **Fork**: an operation of a parent's engine in a forked child never
///   reaches a driver (the cell refuses it first), so no driver acts on
///   the parent's threads, rings or context from the child.
pub(crate) trait Driver: Send + Sync {
    /// Performs `op` (see the contract above).
    fn submit(&self, op: Arc<dyn Completable>, urgent: bool);
    /// Whether a thread of the pool performs `kind` (rather than the kernel):
    /// a thread in `Op::wait` then runs it itself.
    fn pool_takes(&self, kind: &OpKind) -> bool;
    /// Wakes the driver's thread to look at the reactor rings (io_uring's).
    fn nudge(&self) {}
    /// Refuses new work, completes what is in flight, joins the threads.
    fn shutdown(&self);
}

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;
use std::task::Waker;

thread_local! {
    /// Set on driver threads, which must never join themselves.
    static DRIVER_THREAD: Cell<bool> = const { Cell::new(false) };
}

thread_local! {
    /// Wake-ups collected while a driver delivers a batch of completions.
    static DEFERRED: RefCell<Option<Vec<Waker>>> = const { RefCell::new(None) };
    /// The list of the last batch, emptied, kept for its capacity: a batch
    /// allocates nothing at steady state.
    static SPARE_WAKES: Cell<Vec<Waker>> = const { Cell::new(Vec::new()) };
}

/// Wakes `w`, or, inside [`with_deferred_wakes`], when it ends: the woken
/// thread then finds every completion of the batch at once instead of
/// preempting the driver after the first.
pub(crate) fn wake(w: Waker) {
    // During thread teardown the thread-local may be gone: wake now.
    let mut w = Some(w);
    let _ = DEFERRED.try_with(|d| {
        if let Some(list) = d.borrow_mut().as_mut() {
            list.extend(w.take());
        }
    });
    if let Some(w) = w {
        w.wake();
    }
}

/// A caught panic's payload.
pub(crate) type Panic = Box<dyn Any + Send>;

/// Runs `f` (which completes a batch of operations) with [`wake`] calls
/// deferred to its end, then performs them, each contained. Returns the
/// first panic caught.
pub(crate) fn with_deferred_wakes(f: impl FnOnce() -> Option<Panic>) -> Option<Panic> {
    let outermost = DEFERRED
        .try_with(|d| {
            let mut d = d.borrow_mut();
            let outermost = d.is_none();
            if outermost {
                let spare = SPARE_WAKES.try_with(Cell::take).unwrap_or_default();
                debug_assert!(spare.is_empty(), "the spare list of wake-ups is kept empty");
                *d = Some(spare);
            }
            outermost
        })
        .unwrap_or(false);
    let mut first = f();
    if outermost {
        let taken = DEFERRED.try_with(|d| d.borrow_mut().take());
        debug_assert!(
            !matches!(taken, Ok(None)),
            "a nested batch leaves the outermost one's list in place"
        );
        let mut list = taken.ok().flatten().unwrap_or_default();
        for w in list.drain(..) {
            let p = contain("wake-up", || w.wake());
            first = first.or(p);
        }
        // Emptied (each wake-up contained): kept for its capacity.
        let _ = SPARE_WAKES.try_with(|s| s.set(list));
    }
    first
}

/// Runs completion code that reaches user code (wakers, a buffer's `Drop`)
/// so that a panic in it cannot unwind the thread that owns a ring or a
/// pool worker: unwinding there would drop memory the kernel still owns.
/// Returns the panic's payload, if any; on a driver thread it is reported
/// and dropped.
pub(crate) fn contain(what: &str, f: impl FnOnce()) -> Option<Panic> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => None,
        Err(payload) => {
            if on_driver_thread() {
                report_panic(what, &payload);
                None
            } else {
                Some(payload)
            }
        }
    }
}

/// Says on stderr that a panic in user code was caught and where.
pub(crate) fn report_panic(what: &str, payload: &Panic) {
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(|s| s.as_str()))
        .unwrap_or("(not a string)");
    use std::io::Write;
    // Never panics (a closed stderr must not turn a contained panic into an
    // unwinding driver thread).
    let _ = writeln!(
        std::io::stderr(),
        "overlap: caught a panic in user code (a waker or a buffer's Drop) while completing \
         a {what} on {}: {msg}; the engine goes on",
        std::thread::current().name().unwrap_or("an engine thread")
    );
}

pub(crate) fn mark_driver_thread() {
    DRIVER_THREAD.with(|c| {
        debug_assert!(!c.get(), "a driver thread is marked once, when it starts");
        c.set(true);
    });
}

pub(crate) fn on_driver_thread() -> bool {
    DRIVER_THREAD.try_with(|c| c.get()).unwrap_or(false)
}

/// How long a thread parked in `wait()` (waiting for something other than
/// its own ring: the engine thread, the budget) polls for its wake-up,
/// yielding the CPU between looks, before it sleeps. On virtual machines
/// without guest halt polling, waking a sleeping thread on another vCPU
/// costs an inter-processor interrupt through the hypervisor. Measured here
/// (criterion, a cached read through the engine thread, fast path off): 52
/// us per round trip with the waiter asleep, 16 us polling; with 4 callers
/// on 2 vCPUs, 8.3 us before and 6.8 us after (a pure spin there made it 14
/// us: spinning callers took the CPU from the engine thread, hence the
/// yield). `OVERLAP_SPIN_US` overrides it (0 turns polling off).
pub(crate) fn spin_window() -> std::time::Duration {
    static SPIN_NS: OnceLock<u64> = OnceLock::new();
    let ns = *SPIN_NS.get_or_init(|| {
        std::env::var("OVERLAP_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_SPIN_NS, |us| us.min(1000) * 1000)
    });
    debug_assert!(ns <= 1_000_000, "the spin window is at most 1 ms");
    std::time::Duration::from_nanos(ns)
}

const DEFAULT_SPIN_NS: u64 = 20_000;

// What the drivers share to complete operations: a batch of results
// completed with the wake-ups deferred to its end, each panic contained.

/// An operation whose result is known, to be completed once the ring is no
/// longer borrowed (completion runs user code, which may use the ring).
pub(crate) struct Done {
    pub op: Arc<dyn Completable>,
    pub res: i64,
    pub inline: bool,
}

/// The most completions a thread's spare list keeps room for between
/// batches (a larger batch's list is let go).
const SPARE_DONE_MAX: usize = 1024;

thread_local! {
    /// An empty list of completions with room in it, lent to each reap of a
    /// thread's or a reactor's ring on this thread, so that reaping
    /// allocates nothing per batch at steady state (a nested reap, finding
    /// it lent, makes its own).
    static SPARE_DONE: std::cell::Cell<Vec<Done>> = const { std::cell::Cell::new(Vec::new()) };
}

/// This thread's spare list of completions (empty), or a new one.
pub(crate) fn spare_done() -> Vec<Done> {
    let v = SPARE_DONE
        .try_with(std::cell::Cell::take)
        .unwrap_or_default();
    debug_assert!(v.is_empty(), "a spare list is kept empty");
    v
}

/// Gives `done` (completed, so empty) back as this thread's spare list.
pub(crate) fn keep_done(done: Vec<Done>) {
    debug_assert!(
        done.is_empty(),
        "completions are finished before the list is kept"
    );
    if done.is_empty() && done.capacity() <= SPARE_DONE_MAX {
        let _ = SPARE_DONE.try_with(|s| s.set(done));
    }
}

/// Completes `done` operations, containing panics in user code, with the
/// wake-ups of the batch deferred to its end. Returns the first panic's
/// payload (on a driver thread panics are reported instead; a thread that
/// reaps its own ring resumes it once its ring is consistent again).
pub(crate) fn complete_all(done: &mut Vec<Done>) -> Option<Panic> {
    let first = done.first()?;
    first.op.shared().counters.sample_workers_maybe();
    debug_assert!(
        {
            let mut ops: Vec<*const ()> = done.iter().map(|d| Arc::as_ptr(&d.op).cast()).collect();
            ops.sort_unstable();
            let n = ops.len();
            ops.dedup();
            ops.len() == n
        },
        "a batch holds each operation once: it is completed once"
    );
    with_deferred_wakes(|| {
        let mut caught = None;
        for d in done.drain(..) {
            let name = d.op.kind().name();
            let p = contain(name, move || {
                let Done { op, res, inline } = d;
                op.complete(res, inline);
                // The last reference may be this one: the buffer's Drop
                // runs here.
                drop(op);
            });
            caught = caught.or(p);
        }
        caught
    })
}
