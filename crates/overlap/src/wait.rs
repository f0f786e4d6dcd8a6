//! Blocking waits: [`block_on`], what every `.wait()` uses. Where the
//! waiting thread sleeps (its own ring, an AIO context, parked) and what
//! wakes it is the thread's waiter, in `crate::driver::caller`.

use std::future::Future;
use std::task::{Context, Poll};

use crate::driver::caller::with_waiter;

/// Runs a future to completion on the current thread: what every `.wait()`
/// uses.
///
/// Operations the future polls, on an io_uring engine, are submitted on
/// the calling thread's own ring, and the thread sleeps in the kernel on
/// that ring until a completion wakes it; it returns only once nothing it
/// submitted there is in flight. While it waits for anything else (the
/// budget, an operation polled earlier by another executor) it looks for
/// its wake-up for up to 20 us (yielding the CPU; `OVERLAP_SPIN_US` changes
/// it, 0 turns it off), then parks.
///
/// The thread's own ring takes the operations polled with this
/// `block_on`'s own waker: the future itself, `join!`, `select!`,
/// `futures::future::join_all` of up to 30 futures, or a loop that polls
/// many with its own context; and those of [`join_all`](crate::join_all),
/// whose futures' wakers it trusts. Another combinator that gives each
/// future a waker of its own (`FuturesUnordered`, `futures`' `join_all` of
/// more than 30) cannot be told from another executor nested inside, which
/// would park the thread without reaping its ring: its operations go
/// through the engine's thread instead: correct, and at 256 reads in
/// flight on the fast device 0.85x the reads/s at 1.3x the CPU per read of
/// the thread's own ring (even at 1024; BENCHMARKS.md). For many operations
/// in flight on one thread, use [`join_all`](crate::join_all) (which polls
/// only the woken futures, where `join!` polls every one on each wake-up)
/// or a [`Port`](crate::Port).
///
/// ```
/// assert_eq!(overlapped::block_on(async { 40 + 2 }), 42);
/// ```
pub fn block_on<F: Future>(fut: F) -> F::Output {
    block_on_as(fut, false)
}

/// [`block_on`] for a future that has one operation in flight at a time
/// (`Op::wait`, `Task::wait`): on a thread-pool engine its operations run
/// on the calling thread (`route_for` in `crate::driver::caller`).
pub(crate) fn block_on_one<F: Future>(fut: F) -> F::Output {
    block_on_as(fut, true)
}

fn block_on_as<F: Future>(fut: F, inline: bool) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    with_waiter(inline, |w| {
        let mut cx = Context::from_waker(w.waker());
        loop {
            w.take_wake_up();
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            w.sleep();
        }
    })
}
