//! [`DriverHandle`]: the engine's driver, whichever it is, and what the
//! engine and the front ends ask of it.

use std::sync::Arc;

use super::{aio, pool, uring, Driver};
use crate::cell::Completable;

pub(crate) enum DriverHandle {
    Uring(uring::engine_thread::UringDriver),
    Pool(pool::PoolDriver),
    Aio(aio::AioDriver),
}

impl DriverHandle {
    /// The driver, as its contract.
    #[inline]
    fn get(&self) -> &dyn Driver {
        match self {
            DriverHandle::Uring(d) => d,
            DriverHandle::Pool(d) => d,
            DriverHandle::Aio(d) => d,
        }
    }

    pub(crate) fn is_uring(&self) -> bool {
        matches!(self, DriverHandle::Uring(_))
    }

    /// Whether the thread pool performs `kind` (rather than the kernel,
    /// through io_uring or AIO): a thread in `Op::wait` then runs it itself.
    pub(crate) fn pool_takes(&self, kind: &crate::operation::OpKind) -> bool {
        let pool = self.get().pool_takes(kind);
        debug_assert!(
            !(pool && self.is_uring()),
            "io_uring performs every operation on the kernel, none on a pool"
        );
        pool
    }

    /// Submits `op`; `urgent` is false when a thread will wait for it
    /// (`block_on`, a port's worker): on AIO that thread reaps it itself
    /// (`aio::lead`).
    #[inline]
    pub(crate) fn submit_as(&self, op: Arc<dyn Completable>, urgent: bool) {
        debug_assert!(
            !op.shared().forked(),
            "an operation of a parent's engine is refused in a forked child before any driver"
        );
        // Per operation: dispatched statically, not through `get`'s vtable.
        match self {
            DriverHandle::Uring(d) => Driver::submit(d, op, urgent),
            DriverHandle::Pool(d) => Driver::submit(d, op, urgent),
            DriverHandle::Aio(d) => Driver::submit(d, op, urgent),
        }
    }

    /// The AIO context, on an `aio+pool` engine.
    pub(crate) fn aio(&self) -> Option<&Arc<aio::Inner>> {
        match self {
            DriverHandle::Aio(d) => Some(d.inner()),
            _ => None,
        }
    }

    /// Makes the driver able to perform overlapped I/O on `fd`, a file
    /// `HANDLE` the engine opened or adopted (see `crate::sys`): the IOCP
    /// driver associates it with its completion port. Called once per
    /// handle, before any operation on it.
    #[cfg(windows)]
    pub(crate) fn associate(&self, fd: i32) -> std::io::Result<()> {
        debug_assert!(fd >= 0, "a handle is associated while open");
        Ok(())
    }

    /// Wakes the engine's thread (io_uring) to look at the reactor rings.
    pub(crate) fn nudge(&self) {
        self.get().nudge();
    }

    /// Stops accepting work, lets everything in flight complete, and joins
    /// the driver's threads (unless called from one of them).
    pub(crate) fn shutdown(&self) {
        self.get().shutdown();
    }
}
