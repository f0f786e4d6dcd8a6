//! Drivers: who performs the system calls. `uring` hands them to the kernel
//! through io_uring; `pool` performs them on a bounded set of threads where
//! io_uring is unavailable.

pub(crate) mod pool;
pub(crate) mod uring;

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::task::Waker;

use crate::op::Completable;

thread_local! {
    /// Set on driver threads, which must never join themselves.
    static DRIVER_THREAD: Cell<bool> = const { Cell::new(false) };
}

thread_local! {
    /// Wake-ups collected while a driver delivers a batch of completions.
    static DEFERRED: RefCell<Option<Vec<Waker>>> = const { RefCell::new(None) };
}

/// Wakes `w`, or, inside a [`WakeBatch`], when the batch ends: the woken
/// thread then finds every completion of the batch at once instead of
/// preempting the driver after the first.
pub(crate) fn wake(w: Waker) {
    let w = DEFERRED.with(|d| match d.borrow_mut().as_mut() {
        Some(list) => {
            list.push(w);
            None
        }
        None => Some(w),
    });
    if let Some(w) = w {
        w.wake();
    }
}

/// Defers [`wake`] calls on this thread until dropped.
pub(crate) struct WakeBatch(());

impl WakeBatch {
    pub(crate) fn begin() -> WakeBatch {
        DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = Some(Vec::new());
            }
        });
        WakeBatch(())
    }
}

impl Drop for WakeBatch {
    fn drop(&mut self) {
        let list = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
        for w in list {
            w.wake();
        }
    }
}

pub(crate) fn mark_driver_thread() {
    DRIVER_THREAD.with(|c| c.set(true));
}

pub(crate) fn on_driver_thread() -> bool {
    DRIVER_THREAD.with(|c| c.get())
}

pub(crate) enum DriverHandle {
    Uring(uring::UringDriver),
    Pool(pool::PoolDriver),
}

impl DriverHandle {
    pub(crate) fn submit(&self, op: Arc<dyn Completable>) {
        match self {
            DriverHandle::Uring(d) => d.submit(op),
            DriverHandle::Pool(d) => d.submit(op),
        }
    }

    /// Stops accepting work, lets everything in flight complete, and joins the
    /// driver's threads (unless called from one of them).
    pub(crate) fn shutdown(&self) {
        match self {
            DriverHandle::Uring(d) => d.shutdown(),
            DriverHandle::Pool(d) => d.shutdown(),
        }
    }
}
