//! The calling thread without a ring of its own (every system but Linux):
//! a [`block_on`](crate::block_on) parks until its waker fires, and what it
//! polls goes to the engine's driver, which wakes it on completion (on
//! Windows the IOCP driver's completion thread, or a pool worker).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread::Thread;

use crate::cell::Completable;
use crate::driver::spin_window;

/// Who polls an operation, which decides where it is submitted (as on
/// Linux, `crate::driver::uring::Route`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `Op::wait`/`Task::wait`: one operation at a time on this thread.
    Inline,
    /// Any [`block_on`](crate::block_on) of this thread.
    OwnRing,
    /// Another executor, or a port.
    Driver,
}

/// The waker of a thread blocked in [`block_on`](crate::block_on).
struct ThreadWaker {
    thread: Thread,
    /// Set by a wake-up, so that a waiter sees it without parking.
    notified: AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        debug_assert!(
            Arc::strong_count(self) >= 2,
            "a wake-up comes through a waker, beside the thread's own reference"
        );
        // SeqCst pairs with the waiter's check before it parks; an unpark
        // before the park makes that park return at once.
        self.notified.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// Per-thread state of `block_on`.
struct Local {
    /// Nesting of `block_on` on this thread.
    depth: Cell<u32>,
    /// The innermost `block_on` runs one operation at a time.
    inline: Cell<bool>,
    waker: Arc<ThreadWaker>,
    waker_obj: Waker,
    /// The identity of the waker a [`join_all`](crate::join_all) polled
    /// by this thread's `block_on` gives the future it polls now.
    joined: Cell<(usize, usize)>,
}

impl Local {
    fn new() -> Local {
        let waker = Arc::new(ThreadWaker {
            thread: std::thread::current(),
            notified: AtomicBool::new(false),
        });
        debug_assert_eq!(
            Arc::strong_count(&waker),
            1,
            "a thread's waker is made with its state"
        );
        Local {
            depth: Cell::new(0),
            inline: Cell::new(false),
            waker_obj: Waker::from(waker.clone()),
            waker,
            joined: Cell::new(NOT_JOINED),
        }
    }

    fn polled_by_block_on(&self, waker: &Waker) -> bool {
        debug_assert!(
            self.joined.get() == NOT_JOINED || self.depth.get() > 0,
            "a joined future is polled inside a block_on"
        );
        self.depth.get() > 0
            && (waker.will_wake(&self.waker_obj) || self.joined.get() == waker_id(waker))
    }
}

/// [`Local::joined`] outside a joined future's poll.
const NOT_JOINED: (usize, usize) = (0, 0);

thread_local! {
    static LOCAL: Local = Local::new();
}

/// Where an operation polled with `waker` is submitted (see
/// `crate::driver::uring::route_for`).
pub(crate) fn route_for(waker: &Waker) -> Route {
    LOCAL
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

/// Whether `waker` is this thread's `block_on`'s own, or a joined
/// future's while its combinator polls it.
pub(crate) fn polled_by_block_on(waker: &Waker) -> bool {
    LOCAL
        .try_with(|l| l.polled_by_block_on(waker))
        .unwrap_or(false)
}

/// There is no ring of the caller's: every operation goes to the engine's
/// driver.
#[inline]
pub(crate) fn submit_on_ring(
    op: Arc<dyn Completable>,
    route: Route,
    for_future: bool,
) -> Result<(), Arc<dyn Completable>> {
    debug_assert!(
        route != Route::Driver || for_future,
        "a ring is asked for what block_on polled, or for a future"
    );
    Err(op)
}

/// No ring of the caller's holds operations.
pub(crate) fn own_ring_busy() -> bool {
    debug_assert!(
        LOCAL.try_with(|l| l.depth.get() < u32::MAX).unwrap_or(true),
        "block_on's nesting is counted without overflow"
    );
    false
}

/// Nothing is queued on a shared ring without a system call.
pub(crate) fn flush_deferred() {}

/// A waker's identity, as `Waker::will_wake` compares it (data and vtable).
pub(crate) fn waker_id(w: &Waker) -> (usize, usize) {
    let id = (w.data() as usize, std::ptr::from_ref(w.vtable()) as usize);
    debug_assert_ne!(id.1, 0, "a waker's vtable is a reference, never null");
    id
}

/// While a [`join_all`](crate::join_all) polled with `block_on`'s own
/// waker polls one of its futures, that future's waker counts as
/// `block_on`'s. Restores the previous scope when dropped.
pub(crate) struct JoinedScope {
    previous: (usize, usize),
}

impl JoinedScope {
    pub(crate) fn enter(child: &Waker) -> JoinedScope {
        let id = waker_id(child);
        debug_assert_ne!(id, NOT_JOINED, "no waker has the identity of none");
        let previous = LOCAL
            .try_with(|l| l.joined.replace(id))
            .unwrap_or(NOT_JOINED);
        JoinedScope { previous }
    }
}

impl Drop for JoinedScope {
    fn drop(&mut self) {
        debug_assert!(
            LOCAL.try_with(|l| l.depth.get() > 0).unwrap_or(true),
            "a joined future is polled inside a block_on"
        );
        let _ = LOCAL.try_with(|l| l.joined.set(self.previous));
    }
}

/// A `block_on` of this thread as its waiter sees it.
pub(crate) struct Waiter<'a> {
    local: &'a Local,
}

impl Waiter<'_> {
    /// The thread's waker.
    pub(crate) fn waker(&self) -> &Waker {
        debug_assert!(
            self.local.depth.get() > 0,
            "a waiter lives inside its block_on"
        );
        &self.local.waker_obj
    }

    /// Takes the thread's pending wake-up, before a poll (a swap: it
    /// synchronises with the completion that set it).
    pub(crate) fn take_wake_up(&self) {
        debug_assert!(self.local.depth.get() > 0, "taken inside a block_on only");
        self.local.waker.notified.swap(false, Ordering::SeqCst);
    }

    /// Looks for the wake-up for the spin window, then parks until it.
    pub(crate) fn sleep(&self) {
        debug_assert!(
            self.local.depth.get() > 0,
            "a block_on sleeps inside itself"
        );
        let tw = &self.local.waker;
        let spin = spin_window();
        let start = std::time::Instant::now();
        while !tw.notified.load(Ordering::Acquire) && start.elapsed() < spin {
            std::thread::yield_now();
        }
        // `park` may return spuriously: the flag decides.
        while !tw.notified.load(Ordering::SeqCst) {
            std::thread::park();
        }
    }
}

/// Runs `f` as a `block_on` of this thread (`inline`: one operation at a
/// time), nested in any enclosing one. During the thread's teardown (its
/// thread-local gone) it waits on a waker of its own.
pub(crate) fn with_waiter<R>(inline: bool, f: impl FnOnce(&Waiter<'_>) -> R) -> R {
    if LOCAL.try_with(|_| ()).is_ok() {
        return LOCAL.with(|l| run_waiter(l, inline, f));
    }
    run_waiter(&Local::new(), inline, f)
}

fn run_waiter<R>(l: &Local, inline: bool, f: impl FnOnce(&Waiter<'_>) -> R) -> R {
    debug_assert!(
        l.depth.get() > 0 || !l.inline.get(),
        "outside every block_on no run is one operation at a time"
    );
    l.depth.set(l.depth.get() + 1);
    let _depth = Depth(l, l.inline.replace(inline));
    f(&Waiter { local: l })
}

/// Leaves a `block_on`, also when unwinding: restores the enclosing run's
/// `inline` flag.
struct Depth<'a>(&'a Local, bool);

impl Drop for Depth<'_> {
    fn drop(&mut self) {
        let l = self.0;
        debug_assert!(l.depth.get() > 0, "every block_on left was entered");
        l.inline.set(self.1);
        l.depth.set(l.depth.get() - 1);
        debug_assert!(
            l.depth.get() > 0 || !l.inline.get(),
            "leaving the outermost block_on restores one run at a time off"
        );
        if l.depth.get() > 0 {
            // The nested run cleared the wake-up flag, which the outer
            // future may have been woken through meanwhile: poll it again.
            l.waker.notified.store(true, Ordering::SeqCst);
        }
    }
}
