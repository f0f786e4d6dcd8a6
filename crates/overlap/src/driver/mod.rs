//! Drivers: who performs the system calls. `uring` hands them to the kernel
//! through io_uring from the engine thread (futures polled by any executor);
//! `ring` is the io_uring machinery it shares with each thread's own ring
//! (`crate::wait`) and each completion port's ring; `pool` performs them on
//! a bounded set of threads where io_uring is unavailable; `aio` hands
//! O_DIRECT reads and writes to Linux AIO where io_uring is unavailable and
//! leaves the rest to a pool beside it (its completions reaped by the
//! threads that wait for them, `aio::lead`).

pub(crate) mod aio;
pub(crate) mod pool;
pub(crate) mod ring;
pub(crate) mod uring;

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::task::Waker;

use crate::future::Completable;

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

pub(crate) enum DriverHandle {
    Uring(uring::UringDriver),
    Pool(pool::PoolDriver),
    Aio(aio::AioDriver),
}

impl DriverHandle {
    pub(crate) fn is_uring(&self) -> bool {
        matches!(self, DriverHandle::Uring(_))
    }

    /// Whether the thread pool performs `kind` (rather than the kernel,
    /// through io_uring or AIO): a thread in `Op::wait` then runs it itself.
    pub(crate) fn pool_takes(&self, kind: &crate::operation::OpKind) -> bool {
        match self {
            DriverHandle::Uring(_) => false,
            DriverHandle::Pool(_) => true,
            DriverHandle::Aio(d) => !d.takes(kind),
        }
    }

    /// Submits `op`; `urgent` is false when a thread will wait for it
    /// (`block_on`, a port's worker): on AIO that thread reaps it itself
    /// (`aio::lead`).
    pub(crate) fn submit_as(&self, op: Arc<dyn Completable>, urgent: bool) {
        match self {
            DriverHandle::Uring(d) => d.submit(op),
            DriverHandle::Pool(d) => d.submit(op),
            DriverHandle::Aio(d) => d.submit(op, urgent),
        }
    }

    /// The AIO context, on an `aio+pool` engine.
    pub(crate) fn aio(&self) -> Option<&Arc<aio::Inner>> {
        match self {
            DriverHandle::Aio(d) => Some(d.inner()),
            _ => None,
        }
    }

    /// Stops accepting work, lets everything in flight complete, and joins the
    /// driver's threads (unless called from one of them).
    /// Wakes the engine's thread (io_uring) to look at the reactor rings.
    pub(crate) fn nudge(&self) {
        if let DriverHandle::Uring(d) = self {
            d.nudge();
        }
    }

    pub(crate) fn shutdown(&self) {
        match self {
            DriverHandle::Uring(d) => d.shutdown(),
            DriverHandle::Pool(d) => d.shutdown(),
            DriverHandle::Aio(d) => d.shutdown(),
        }
    }
}
