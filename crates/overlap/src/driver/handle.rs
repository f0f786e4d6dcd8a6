//! [`DriverHandle`]: the engine's driver, whichever it is, and what the
//! engine and the front ends ask of it.

use std::sync::Arc;

use super::{aio, pool, uring};
use crate::cell::Completable;

pub(crate) enum DriverHandle {
    Uring(uring::engine_thread::UringDriver),
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
