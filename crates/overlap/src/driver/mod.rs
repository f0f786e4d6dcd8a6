//! Drivers: who performs the system calls. `uring` hands them to the kernel
//! through io_uring; `pool` performs them on a bounded set of threads where
//! io_uring is unavailable.

pub(crate) mod pool;
pub(crate) mod uring;

use std::cell::Cell;
use std::sync::Arc;

use crate::op::Completable;

thread_local! {
    /// Set on driver threads, which must never join themselves.
    static DRIVER_THREAD: Cell<bool> = const { Cell::new(false) };
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
