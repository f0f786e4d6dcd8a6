//! The calling thread, as the engine sees it: who polls an operation (its
//! [`Route`]), where a future polled by [`block_on`](crate::block_on) is
//! submitted, and the thread's waiter (where `block_on` sleeps and what
//! wakes it).
//!
//! On Linux these are io_uring's (`super::uring`): a thread's own ring, a
//! reactor ring, and a waiter that sleeps in the ring, in an AIO context it
//! leads, or parked. Elsewhere ([`plain`]) there is no ring per thread: a
//! future polled by `block_on` goes to the engine's driver, and the thread
//! parks until its waker fires.

#[cfg(target_os = "linux")]
pub(crate) use super::uring::thread::{
    flush_deferred, own_ring_busy, waker_id, with_waiter, JoinedScope,
};
#[cfg(target_os = "linux")]
pub(crate) use super::uring::{polled_by_block_on, route_for, submit_on_ring, Route};

#[cfg(not(target_os = "linux"))]
mod plain;
#[cfg(not(target_os = "linux"))]
pub(crate) use plain::{
    flush_deferred, own_ring_busy, polled_by_block_on, route_for, submit_on_ring, waker_id,
    with_waiter, JoinedScope, Route,
};
