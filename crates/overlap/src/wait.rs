//! Blocking waits: [`block_on`], what every `.wait()` uses. Where the
//! waiting thread sleeps (its own ring, an AIO context, parked) and what
//! wakes it is the thread's waiter, in `crate::driver::uring::thread`.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use crate::driver::uring::thread::{drain_own_ring, sleep, Local, RingState, LOCAL};

/// Leaves a `block_on`: the outermost one reaps the thread's ring, also
/// when unwinding. Restores the enclosing run's `inline` flag.
struct Depth<'a>(&'a Local, bool);

impl Drop for Depth<'_> {
    fn drop(&mut self) {
        let l = self.0;
        l.inline.set(self.1);
        l.depth.set(l.depth.get() - 1);
        if l.depth.get() > 0 {
            // The nested run cleared the thread's wake-up flag, which the
            // outer future may have been woken through meanwhile: poll it
            // again (a spurious poll is harmless, a lost wake-up is not).
            l.waker.notified.store(true, Ordering::SeqCst);
        }
        if l.depth.get() == 0 {
            if let Some(p) = drain_own_ring(l) {
                if std::thread::panicking() {
                    crate::driver::report_panic("an operation reaped while unwinding", &p);
                } else {
                    std::panic::resume_unwind(p);
                }
            }
        }
    }
}

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
/// assert_eq!(overlap::block_on(async { 40 + 2 }), 42);
/// ```
pub fn block_on<F: Future>(fut: F) -> F::Output {
    block_on_as(fut, false)
}

/// [`block_on`] for a future that has one operation in flight at a time
/// (`Op::wait`, `Task::wait`): on a thread-pool engine its operations run
/// on the calling thread ([`route_for`](crate::driver::uring::route_for)).
pub(crate) fn block_on_one<F: Future>(fut: F) -> F::Output {
    block_on_as(fut, true)
}

fn block_on_as<F: Future>(fut: F, inline: bool) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    // `try_with` is re-entrant, so a nested block_on is fine; during thread
    // teardown the thread-local is gone: wait without a ring.
    if LOCAL.try_with(|_| ()).is_ok() {
        return LOCAL.with(|l| run(l, fut.as_mut(), inline));
    }
    let local = Local::new();
    local.ring.replace(RingState::Unavailable);
    run(&local, fut, inline)
}

fn run<F: Future>(l: &Local, mut fut: std::pin::Pin<&mut F>, inline: bool) -> F::Output {
    l.depth.set(l.depth.get() + 1);
    let _depth = Depth(l, l.inline.replace(inline));
    let mut cx = Context::from_waker(&l.waker_obj);
    loop {
        // A swap, not a store: when it takes away a wake-up that another
        // thread's completion set, it synchronises with that thread, so the
        // poll below sees what the completion wrote (a future's lock-free
        // `done` check in `OpCell::poll_done`). A plain store could be
        // ordered after that check: the poll would see the operation not
        // done, and the wake-up it erased would be lost.
        l.waker.notified.swap(false, Ordering::SeqCst);
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        sleep(l);
    }
}
