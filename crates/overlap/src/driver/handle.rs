//! [`DriverHandle`]: the engine's driver, whichever it is, and what the
//! engine and the front ends ask of it.

use std::sync::Arc;

#[cfg(windows)]
use super::iocp;
#[cfg(target_os = "linux")]
use super::{aio, uring};
use super::{pool, Driver};
use crate::cell::Completable;

/// The Linux AIO context that a waiting thread may reap itself
/// (`aio::lead`), on an `aio+pool` engine.
#[cfg(target_os = "linux")]
pub(crate) use super::aio::Inner as AioContext;

/// Linux AIO's context, which no other system has: no value exists.
#[cfg(not(target_os = "linux"))]
pub(crate) enum AioContext {}

#[cfg(not(target_os = "linux"))]
impl AioContext {
    /// Interrupts the context's reaper (never called: there is none).
    pub(crate) fn kick(&self) {
        match *self {}
    }
}

pub(crate) enum DriverHandle {
    #[cfg(target_os = "linux")]
    Uring(uring::engine_thread::UringDriver),
    Pool(pool::PoolDriver),
    #[cfg(target_os = "linux")]
    Aio(aio::AioDriver),
    #[cfg(windows)]
    Iocp(iocp::IocpDriver),
}

impl DriverHandle {
    /// The driver, as its contract.
    #[inline]
    fn get(&self) -> &dyn Driver {
        match self {
            #[cfg(target_os = "linux")]
            DriverHandle::Uring(d) => d,
            DriverHandle::Pool(d) => d,
            #[cfg(target_os = "linux")]
            DriverHandle::Aio(d) => d,
            #[cfg(windows)]
            DriverHandle::Iocp(d) => d,
        }
    }

    pub(crate) fn is_uring(&self) -> bool {
        #[cfg(target_os = "linux")]
        return matches!(self, DriverHandle::Uring(_));
        #[cfg(not(target_os = "linux"))]
        return false;
    }

    /// Whether the engine's driver is Linux AIO beside a pool.
    pub(crate) fn is_aio(&self) -> bool {
        #[cfg(target_os = "linux")]
        return matches!(self, DriverHandle::Aio(_));
        #[cfg(not(target_os = "linux"))]
        return false;
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
            #[cfg(target_os = "linux")]
            DriverHandle::Uring(d) => Driver::submit(d, op, urgent),
            DriverHandle::Pool(d) => Driver::submit(d, op, urgent),
            #[cfg(target_os = "linux")]
            DriverHandle::Aio(d) => Driver::submit(d, op, urgent),
            #[cfg(windows)]
            DriverHandle::Iocp(d) => Driver::submit(d, op, urgent),
        }
    }

    /// Submits `op` for a thread that waits for it before anything else
    /// (`Op::wait`, `Task::wait`): on IOCP that thread is woken by the
    /// completion itself and completes it (`IocpDriver::submit_waited`);
    /// the pool takes it as any other (such a thread runs the pool's
    /// operations itself before they reach here).
    #[cfg(windows)]
    pub(crate) fn submit_waited(&self, op: Arc<dyn Completable>) {
        debug_assert!(
            !op.shared().forked(),
            "an operation of a parent's engine is refused in a forked child before any driver"
        );
        match self {
            DriverHandle::Iocp(d) => d.submit_waited(op),
            DriverHandle::Pool(d) => Driver::submit(d, op, false),
        }
    }

    /// Asks the driver to stop the operations in flight of the port
    /// `port` (`Completable::queue_key`) with `key`; how many were asked.
    /// Only IOCP can, of the drivers behind a port's queue.
    #[cfg(windows)]
    pub(crate) fn cancel_queue_key(&self, port: usize, key: u64) -> usize {
        match self {
            DriverHandle::Iocp(d) => d.cancel(port, key),
            DriverHandle::Pool(_) => 0,
        }
    }

    /// The AIO context, on an `aio+pool` engine.
    pub(crate) fn aio(&self) -> Option<&Arc<AioContext>> {
        let ctx = match self {
            #[cfg(target_os = "linux")]
            DriverHandle::Aio(d) => Some(d.inner()),
            _ => None,
        };
        debug_assert!(
            ctx.is_none() || self.is_aio(),
            "an AIO context is an aio+pool engine's"
        );
        ctx
    }

    /// Makes the driver able to perform overlapped I/O on `fd`, a file
    /// `HANDLE` the engine opened or adopted (see `crate::sys`): the IOCP
    /// driver associates it with its completion port. Called once per
    /// handle, before any operation on it.
    #[cfg(windows)]
    pub(crate) fn associate(&self, fd: i32) -> std::io::Result<()> {
        debug_assert!(fd >= 0, "a handle is associated while open");
        match self {
            DriverHandle::Iocp(d) => d.associate(fd),
            DriverHandle::Pool(_) => Ok(()),
        }
    }

    /// Wakes the engine's thread (io_uring) to look at the reactor rings.
    pub(crate) fn nudge(&self) {
        debug_assert!(
            self.is_uring(),
            "only io_uring's engine thread watches reactor rings"
        );
        self.get().nudge();
    }

    /// Stops accepting work, lets everything in flight complete, and joins
    /// the driver's threads (unless called from one of them).
    pub(crate) fn shutdown(&self) {
        self.get().shutdown();
    }
}
