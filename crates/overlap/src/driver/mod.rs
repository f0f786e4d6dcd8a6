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

pub(crate) mod aio;
pub(crate) mod handle;
pub(crate) mod pool;
pub(crate) mod uring;

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
                *d = Some(SPARE_WAKES.try_with(Cell::take).unwrap_or_default());
            }
            outermost
        })
        .unwrap_or(false);
    let mut first = f();
    if outermost {
        let mut list = DEFERRED
            .try_with(|d| d.borrow_mut().take())
            .ok()
            .flatten()
            .unwrap_or_default();
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
    DRIVER_THREAD.with(|c| c.set(true));
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
    std::time::Duration::from_nanos(*SPIN_NS.get_or_init(|| {
        std::env::var("OVERLAP_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_SPIN_NS, |us| us.min(1000) * 1000)
    }))
}

const DEFAULT_SPIN_NS: u64 = 20_000;
