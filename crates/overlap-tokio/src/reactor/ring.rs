//! The rings themselves: one per tokio thread and runtime, registered with
//! tokio's reactor, and the task that reaps each (Linux: io_uring).

use std::cell::RefCell;
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use overlapped::{DriverKind, ReactorRing};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A thread's ring and the liveness of the task that reaps it.
struct ThreadRing {
    /// Shared with the polls in progress on this thread (`Rc`: no atomic
    /// count per poll, as a `ReactorRing` handle's clone would take).
    ring: Rc<ReactorRing>,
    reaper_alive: Arc<AtomicBool>,
}

impl ThreadRing {
    fn usable(&self) -> bool {
        self.reaper_alive.load(Ordering::Acquire) && !self.ring.is_orphaned()
    }
}

impl Drop for ThreadRing {
    fn drop(&mut self) {
        // The thread is ending, or its runtime went: the watcher completes
        // what is in flight (an operation the kernel cancels at this
        // thread's exit is submitted again), and the reaper task ends.
        // Never a blocking drain: a pipe read may never complete.
        flush_then_orphan(&self.ring);
    }
}

/// What a thread has for one runtime: a ring, or `None` where that runtime
/// cannot have one (no I/O driver, io_uring refused).
struct ForRuntime {
    runtime: tokio::runtime::Id,
    /// A multi-thread runtime: this thread is one of its workers (or of its
    /// blocking pool) and runs no other runtime's tasks, so the ring is used
    /// without asking which runtime polls.
    multi_thread: bool,
    ring: Option<ThreadRing>,
}

/// The most runtimes a thread keeps rings for at once (current-thread
/// runtimes run one after another on the same thread); past it,
/// operations take the engine's driver.
const RUNTIMES_PER_THREAD: usize = 4;

thread_local! {
    static LOCAL: RefCell<Vec<ForRuntime>> = const { RefCell::new(Vec::new()) };
}

/// This thread's ring for the runtime polling it, made if need be (inside
/// a tokio runtime); `None` where there is none to be had.
///
/// A ring belongs to one runtime, whose reaper task reaps it: a
/// current-thread runtime reaps only while it is run, so two of them alive
/// on one thread each get a ring of their own.
pub(super) fn thread_ring() -> Option<Rc<ReactorRing>> {
    LOCAL
        .try_with(|local| {
            {
                let l = local.borrow();
                if let [only] = &l[..] {
                    if only.multi_thread {
                        if let Some(t) = only.ring.as_ref().filter(|t| t.usable()) {
                            return Some(t.ring.clone());
                        }
                    }
                }
            }
            let handle = tokio::runtime::Handle::try_current().ok()?;
            let id = handle.id();
            let mut l = local.borrow_mut();
            if let Some(e) = l.iter().find(|e| e.runtime == id) {
                match &e.ring {
                    Some(t) if t.usable() => return Some(t.ring.clone()),
                    None => return None,
                    Some(_) => {}
                }
            }
            // Let go of the rings whose runtime is gone (orphaned: the
            // watcher finishes what is in flight) before making one.
            let stale: Vec<ForRuntime> = {
                let (keep, stale) = std::mem::take(&mut *l)
                    .into_iter()
                    .partition(|e| e.runtime != id && e.ring.as_ref().is_some_and(|t| t.usable()));
                *l = keep;
                stale
            };
            if l.len() >= RUNTIMES_PER_THREAD {
                return None;
            }
            let multi_thread =
                handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
            let made = make_ring(&handle);
            let ring = made.as_ref().map(|t| t.ring.clone());
            l.push(ForRuntime {
                runtime: id,
                multi_thread,
                ring: made,
            });
            debug_assert!(
                l.len() <= RUNTIMES_PER_THREAD && l.iter().filter(|e| e.runtime == id).count() == 1,
                "one entry per runtime, at most RUNTIMES_PER_THREAD of them"
            );
            drop(l);
            drop(stale);
            ring
        })
        .ok()
        .flatten()
}

/// Makes a ring for this thread and starts its reaper on `handle`'s runtime.
fn make_ring(handle: &tokio::runtime::Handle) -> Option<ThreadRing> {
    // A process engine on the pool would never use the ring. (Engines of
    // the caller's own may be polled here too: the process engine is not
    // made just to look.)
    if crate::global::engine_if_made().is_some_and(|e| e.driver().kind != DriverKind::Uring) {
        return None;
    }
    if !may_register() {
        return None;
    }
    // Sized by the process engine's builder once it is made; the default
    // size otherwise (the ring serves any engine's futures).
    let ring = match crate::global::engine_if_made() {
        Some(e) => e.reactor_ring().ok()?,
        None => ReactorRing::new().ok()?,
    };
    let afd = {
        let _enter = handle.enter();
        let fd = RingFd(ring.clone());
        // Registration panics on a runtime built without its I/O driver
        // (`enable_io`); such a runtime keeps the engine's driver.
        let made = quietly(move || {
            // SAFETY: `RingFd` holds a handle to the ring, which keeps the
            // ring's descriptor open and unchanged for as long as the
            // `AsyncFd` owns it.
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
        });
        match made {
            Some(Ok(afd)) => afd,
            _ => {
                ring.orphan();
                return None;
            }
        }
    };
    let reaper_alive = Arc::new(AtomicBool::new(true));
    let reaper = Reaper {
        afd,
        _alive: Alive(reaper_alive.clone(), ring.clone()),
    };
    handle.spawn(reaper.run());
    Some(ThreadRing {
        ring: Rc::new(ring),
        reaper_alive,
    })
}

/// Whether a ring may be registered with a runtime's reactor: tokio's only
/// answer to "has this runtime an I/O driver?" is a panic, which a program
/// built with `panic = "abort"` does not survive.
fn may_register() -> bool {
    if cfg!(panic = "unwind") {
        return true;
    }
    static ALWAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALWAYS.get_or_init(|| std::env::var("OVERLAP_TOKIO_RINGS").is_ok_and(|v| v == "always"))
}

thread_local! {
    /// Set while [`quietly`] runs on this thread.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, catching a panic without printing it: the panic hook (the
/// program's own, chained) is skipped for panics raised inside `f` on this
/// thread only.
fn quietly<R>(f: impl FnOnce() -> R) -> Option<R> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.try_with(std::cell::Cell::get).unwrap_or(false) {
                previous(info);
            }
        }));
    });
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = QUIET.try_with(|q| q.set(self.0));
        }
    }
    let _reset = Reset(QUIET.with(|q| q.replace(true)));
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// The ring as tokio's reactor sees it: its descriptor, kept open by the
/// handle.
struct RingFd(ReactorRing);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Clears the liveness flag when the reaper task is dropped (its runtime
/// shut down), and orphans the ring: nobody else reaps it now.
struct Alive(Arc<AtomicBool>, ReactorRing);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
        flush_then_orphan(&self.1);
    }
}

/// Orphans `ring` (the watcher completes what is in flight there), after
/// handing the kernel what was queued for the reaper's next flush: an
/// operation only queued is not yet in flight, and the reaper that would
/// have submitted it is gone (a runtime's end right after a dropped file's
/// write was polled, say).
fn flush_then_orphan(ring: &ReactorRing) {
    if ring.queued() > 0 {
        contain(|| ring.flush());
    }
    ring.orphan();
    debug_assert!(
        ring.is_orphaned(),
        "an orphaned ring takes no more operations"
    );
}

/// The task that reaps one ring.
struct Reaper {
    afd: AsyncFd<RingFd>,
    _alive: Alive,
}

/// What woke the reaper.
enum Event {
    /// Completions wait in the ring.
    Readable,
    /// Submissions were queued for a flush.
    Queued,
    /// The reactor is shutting down, or the ring was orphaned (its thread
    /// ended): the task ends, and with it this handle to the ring.
    Closed,
}

impl Reaper {
    async fn run(self) {
        let ring = &self.afd.get_ref().0;
        loop {
            let event = std::future::poll_fn(|cx| {
                ring.set_flusher(cx.waker());
                if ring.is_orphaned() {
                    return Poll::Ready(Event::Closed);
                }
                if ring.queued() > 0 {
                    return Poll::Ready(Event::Queued);
                }
                match self.afd.poll_read_ready(cx) {
                    Poll::Ready(Ok(mut ready)) => {
                        // Clear first, then reap: a completion posted after
                        // the reap makes the descriptor readable again.
                        ready.clear_ready();
                        Poll::Ready(Event::Readable)
                    }
                    Poll::Ready(Err(_)) => Poll::Ready(Event::Closed),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            match event {
                Event::Closed => return,
                Event::Readable => contain(|| {
                    ring.reap();
                }),
                Event::Queued => {
                    // Let the tasks that are ready run (and queue their
                    // operations) first: a task that wakes itself goes to
                    // the back of its worker's queue, behind them, so one
                    // system call submits the whole batch. (Not
                    // `yield_now`, which also makes the worker poll its
                    // reactor first: an `epoll_wait` per flush. On a
                    // multi-thread runtime another worker may steal the
                    // reaper meanwhile and flush from its thread, which
                    // the ring allows.)
                    YieldToBack(false).await;
                    contain(|| ring.flush());
                }
            }
        }
    }
}

/// Yields to the back of the run queue without making the scheduler poll
/// its driver first (tokio's `yield_now` defers the wake until it has).
struct YieldToBack(bool);

impl Future for YieldToBack {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Runs completion work on the reaper. A panic in user code (a waker, a
/// buffer's Drop) was recorded with every other completion of its batch;
/// the reaper must survive it, or the ring would stop being reaped.
fn contain(f: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}
