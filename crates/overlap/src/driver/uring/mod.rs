//! The one home of io_uring: where each operation is submitted, who waits
//! for it, and why.
//!
//! | module | what |
//! | --- | --- |
//! | [`setup`] | making a ring: setup flags, opcode probe, kernel worker bound, fallback reasons |
//! | [`ring`] | the owner of every ring ([`Ring`](ring::Ring)): the one `io_uring_enter`, the one teardown, the fork generation |
//! | [`core`] | a ring one thread drives and its operations in flight ([`RingCore`](core::RingCore)): submit, reap, drain |
//! | [`engine_thread`] | the engine thread's ring ([`UringDriver`](engine_thread::UringDriver)) |
//! | [`thread`] | each thread's own ring, the thread's waiter, the deferral of a port's submissions (`Port::batch`) |
//! | [`reactor`] | reactor rings ([`ReactorRing`](crate::ReactorRing)) and their watcher |
//! | [`port`] | each completion port's ring |
//! | here | the routing: [`route_for`] and [`submit_on_ring`] pick the ring |
//!
//! This module and the other drivers depend only on the operation cell's
//! completion interface ([`crate::cell`]), never on the engine or the front
//! ends (`scripts/import-graph` checks it): the engine starts a driver, the
//! front ends hand it operations.
//!
//! # Design: the thread that waits is the thread the kernel wakes
//!
//! Linux runs an io_uring request's completion work on the thread that
//! submitted it, and a thread asleep in `io_uring_enter` on a ring is woken
//! by the kernel itself when a completion arrives there. So the fastest way
//! to wait is to submit on a ring of one's own and sleep on it: what a fio
//! job does, and what a Windows thread in `GetQueuedCompletionStatus` gets.
//! The engine routes every operation to the ring whose waiter will be woken:
//!
//! | who waits | ring | module |
//! | --- | --- | --- |
//! | a thread in `.wait()` / [`block_on`](crate::block_on) | the thread's own ring, `SINGLE_ISSUER\|DEFER_TASKRUN`, created lazily | [`thread`] |
//! | workers in [`Port::next`](crate::Port::next) | the port's own ring (many submitters, many waiters; `COOP_TASKRUN`) | [`port`] (the public `Port` in `crate::port`) |
//! | a future polled inside [`ReactorRing::enter`](crate::ReactorRing::enter) (overlapped-tokio's `on_ring` and `fs`, the Python package's loop) | the polling thread's reactor ring, watched by the executor's reactor (`COOP_TASKRUN`; any thread may reap) | [`reactor`] |
//! | a future polled by another executor (tokio, smol, ...) without an integration | this engine thread's ring, `SINGLE_ISSUER\|DEFER_TASKRUN` | [`engine_thread`] |
//!
//! # Every ring's life
//!
//! Every ring is made by one function, [`setup::make_ring`], which tries
//! `SINGLE_ISSUER|DEFER_TASKRUN` (one issuer), then `COOP_TASKRUN`, then no
//! flag, and requires `IORING_FEAT_EXT_ARG` (timed waits). Every ring is
//! owned by one type, [`ring::Ring`]: it makes the one `io_uring_enter`
//! every ring submits and waits with, knows whether the ring is a parent's
//! (in a child after `fork`), and tears the ring down one way
//! ([`Ring::close`](ring::Ring::close): registrations end, then the
//! descriptor and mappings go; a ring the kernel may still write through
//! is leaked, never freed). Its users keep the operations in flight:
//! [`core::RingCore`] for the rings one thread (or one lock) drives,
//! [`port::PortRing`] for a port's. Each kind:
//!
//! | | engine thread's ring | a thread's own ring | reactor ring | a port's ring |
//! | --- | --- | --- | --- | --- |
//! | made by | `EngineBuilder::build` (the engine thread, at start) | the thread's first `.wait()`/`block_on` of an operation | an integration, per executor thread (`Engine::reactor_ring`, `ReactorRing::new`) | `Port::new` on an io_uring engine |
//! | entries (SQ / CQ) | `EngineBuilder::ring_entries` (256) / `max_inflight_ops` clamped to 2x..65,536 | `EngineBuilder::thread_ring_entries` (64) / 16x, of the first engine the thread waits for | `EngineBuilder::reactor_ring_entries` (256) / 16x; `ReactorRing::new`: 256 / 4,096 | as the engine thread's |
//! | user of the [`Ring`](ring::Ring) | `RingCore` | `RingCore` | `RingCore` under a lock | `PortRing` |
//! | flags | one issuer | one issuer | `COOP_TASKRUN` at most (any thread reaps) | `COOP_TASKRUN` at most (many submitters and waiters) |
//! | who submits | the engine thread only (other threads queue to it and write its eventfd) | that thread only | the thread inside `enter`; the reaping task's flush | any thread |
//! | who reaps | the engine thread | that thread, inside `block_on` | the executor's task (`reap`), else the watcher | the port's workers in `next` |
//! | its thread or executor goes | lives with the engine | the thread's exit reaps it first (thread-local destructor); Linux cancels its kernel-worker work | `orphan` hands it to the watcher, which closes it once nothing is in flight | lives with the port; dropping the port waits for its operations |
//! | resubmits after a submitter's exit | no (its thread never exits first) | no (reaped before the exit) | yes, through the engine's driver | yes, from a live thread |
//! | after `fork` (in the child) | the engine's copy refuses operations (`Error::Forked`), the ring is never entered | never entered (`Ring::inherited`); a new one is made | never entered; the child's copies of its operations fail (`Error::Forked`) | never entered; the port refuses (`Error::Forked`) |
//! | engine shutdown | drains what is in flight, then the thread exits | operations counted in (`own_ring_ops`) are waited for | shutdown reaps every live ring itself | settled: what is in flight completes (`Settle`) |
//! | teardown (`Ring::close`) | after its drain | at the thread's exit, after its drain | by the last handle or the watcher, after its drain | when the port drops, after its drain |
//!
//! In a child after `fork` a ring's teardown closes only the child's copy
//! of the descriptor and mappings: the registrations and the operations
//! are the parent's, and the child's copies of the operations are leaked,
//! never completed.
//!
//! Ring sizes travel one way: `EngineBuilder::build` decides every kind's
//! (`RingSizes`, in the engine's state), and whoever makes a ring reads its
//! kind's size there. A full submission queue is submitted and refilled,
//! so more operations than entries may be in flight, and the kernel keeps
//! completion-queue overflow.
//!
//! The engine thread stays for futures of executors without an
//! integration, because such an executor parks where overlap cannot reach
//! (a tokio worker in `epoll_wait`): someone else must wait in the kernel
//! for those completions. An integration registers a ring per executor
//! thread with its reactor instead: the kernel runs the completion work on
//! the submitting thread (waking it from `epoll_wait`), the ring's
//! descriptor turns readable, and the executor's own task reaps it; the
//! submissions of the tasks one reaping woke are handed to the kernel in
//! one call by that task (`ReactorRing::set_flusher`). The tokio
//! integration's measurements are in BENCHMARKS.md (against `tokio::fs`)
//! and `docs/bench-log/2026-11-23-tokio-fs-and-rust-runtimes.md`
//! (against this thread).
//!
//! Constraints kept: the engine is `Clone + Send + Sync`; the budget is
//! global (every ring takes its permits from the one limiter); statistics
//! stay exact (a completion is inline when the submission itself posted
//! it: it comes before the `NOP` marker queued behind each submission on
//! the thread, reactor and engine rings, which lets one `io_uring_enter`
//! both submit and wait; the completion queue's tail at the submitting
//! call's return on a port's ring); a dropped future's buffer
//! stays owned by its cell until the kernel is done. Thread exit: Linux
//! cancels the queued kernel-worker (io-wq) work of an exiting thread, so
//! `block_on` never returns with its ring busy (nothing is left for an
//! absent thread to reap), and a port resubmits an operation the kernel
//! cancelled unperformed (`Stats::resubmitted_after_exit`).
//!
//! # Measured (the reason for the choice)
//!
//! The measurements that chose this design (each shape run with the
//! previous design, every operation handed to this thread and its
//! completion handed back, and with this one, fio beside each invocation)
//! are in `docs/bench-log/2026-11-23-hot-path.md`, with their commands
//! (`scripts/bench-hotpath`, `scripts/hotpath-table.py`). What they showed:
//! - A thread waiting on its own ring is the big win where the hand-off
//!   dominated: depth 1 and threads in `.wait()`. With many operations per
//!   waiter (depth 32 through `block_on`) it beats fio: one
//!   `io_uring_enter` submits a batch and the next waits.
//! - A port on its own ring removes the hand-off at shallow depths, but at
//!   depth 32 on a CPU-bound device the engine thread won: it ran beside the
//!   requester on the second vCPU, while the port's single requester makes
//!   one `io_uring_enter` per submission (as fio does) plus a lock per
//!   completion.
//! - Futures on executors without an integration still go through this
//!   thread; the integrations (overlapped-tokio, the Python package) put a ring
//!   per executor thread into the executor's reactor instead.
//!
//! Designs weighed and not taken: one shared ring where callers submit and
//! waiters reap (leader/follower) makes the reaper wake the other waiters
//! through futexes (a second wake-up per operation on this VM), and
//! completion work still runs on each submitter; SQPOLL spends a core of
//! two polling. An earlier measurement of "callers submit, one reaper
//! thread" is kept in `examples/design_b.rs`.
//!

pub(crate) mod core;
pub(crate) mod engine_thread;
pub(crate) mod port;
pub(crate) mod reactor;
pub(crate) mod registry;
pub(crate) mod ring;
mod ring_buffers;
pub(crate) mod setup;
pub(crate) mod thread;

use std::sync::Arc;
use std::task::Waker;

use crate::cell::Completable;

/// Who polls an operation, which decides where it is submitted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `Op::wait`/`Task::wait`: one operation at a time on this thread.
    Inline,
    /// Any [`block_on`](crate::block_on) of this thread.
    OwnRing,
    /// Another executor, or a port.
    Driver,
}

/// Where an operation polled with `waker` is submitted, by who polls it.
/// [`Route::Inline`]: a [`block_on`](crate::block_on) of this thread that runs one operation
/// at a time ([`Op::wait`](crate::Op::wait), [`Task::wait`](crate::Task::wait));
/// on the thread pool there is nothing to gain by handing it to a worker
/// and sleeping until the worker wakes this thread (two context switches
/// per operation where `pread` makes one): it runs on this thread, still
/// counted against the budget and in the statistics. [`Route::OwnRing`]:
/// this thread's `block_on` itself (directly, or through combinators that
/// pass its waker on), which will wait for it on this thread's ring.
/// [`Route::Driver`]: any other executor, even one nested inside
/// `block_on` (which would park without reaping the ring).
pub(crate) fn route_for(waker: &Waker) -> Route {
    thread::LOCAL
        .try_with(|l| {
            debug_assert!(
                !l.inline.get() || l.depth.get() > 0,
                "a run is one operation at a time only inside a block_on"
            );
            if !l.polled_by_block_on(waker) {
                Route::Driver
            } else if l.inline.get() {
                Route::Inline
            } else {
                Route::OwnRing
            }
        })
        .unwrap_or(Route::Driver)
}

/// Whether `waker` is this thread's [`block_on`](crate::block_on)'s own
/// (passed on by combinators), or the waker a [`join_all`](crate::join_all)
/// polled with it gives the future it polls now.
pub(crate) fn polled_by_block_on(waker: &Waker) -> bool {
    thread::LOCAL
        .try_with(|l| l.polled_by_block_on(waker))
        .unwrap_or(false)
}

/// Puts `op` on the ring its poller waits on, on an io_uring engine: the
/// calling thread's own ring when a [`block_on`](crate::block_on) of this
/// thread polled it (`route` not [`Route::Driver`]), else, for a future
/// (`for_future`), the reactor ring of an active
/// [`ReactorRing::enter`](crate::ReactorRing::enter). Gives it back for the
/// engine's driver (the engine thread's ring) otherwise, or when that ring
/// cannot take it (no ring, the engine shutting down).
#[inline]
pub(crate) fn submit_on_ring(
    op: Arc<dyn Completable>,
    route: Route,
    for_future: bool,
) -> Result<(), Arc<dyn Completable>> {
    if route != Route::Driver {
        thread::submit_on_own_ring(op)
    } else if for_future {
        reactor::submit_current(op)
    } else {
        Err(op)
    }
}
