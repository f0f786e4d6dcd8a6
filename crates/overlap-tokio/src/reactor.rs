//! Completions through tokio's reactor.
//!
//! Each tokio thread that polls an engine operation gets a ring of its own
//! ([`overlap::ReactorRing`], made on first use), registered with tokio's
//! I/O driver through [`AsyncFd`]. Operations polled on that thread are
//! submitted on its ring by the polling thread itself. The kernel runs
//! their completion work on that thread (waking it from `epoll_wait` or
//! its park if it sleeps), the ring's descriptor turns readable, and a
//! small task per ring (the reaper) completes the operations and wakes
//! their tasks: on tokio's own threads, with no thread of overlap's in
//! between and no cross-thread hand-off of overlap's making.
//!
//! Where no ring can be had (io_uring blocked, the engine on its thread
//! pool, a runtime built without its I/O driver, a future polled outside
//! tokio), operations go through the engine's driver as they would without
//! this crate; `Stats::submitted_on_reactor_rings` tells the two apart.
//!
//! A thread drains its ring when it exits (Linux cancels the queued kernel
//! work of an exiting thread). A ring whose runtime has gone (its reaper
//! task dropped, e.g. a current-thread runtime dropped while the thread
//! lives on) is drained and replaced by the next poll on that thread.

use std::cell::RefCell;
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use overlap::{DriverKind, ReactorRing};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Runs an [`overlap`] engine future with its completions delivered by
/// tokio's reactor: the operations it submits go on the polling tokio
/// thread's ring (see the crate docs). Every operation of
/// [`fs`](crate::fs) is polled this way; use it for the engine's own API
/// ([`overlap::File`], [`overlap::Op`]) inside tokio.
///
/// Outside a tokio runtime, or where no ring can be had, the future is
/// polled as it is and its operations go through the engine's driver.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use overlap::OpenOptions;
///
/// let dir = tempfile::tempdir()?;
/// let engine = overlap_tokio::engine();
/// let file = overlap_tokio::on_ring(
///     OpenOptions::new().read(true).write(true).create(true)
///         .open(engine, dir.path().join("f")),
/// ).await?;
/// let (res, _buf) = overlap_tokio::on_ring(file.write_all_at(b"hello".to_vec(), 0)).await;
/// res?;
/// let (n, buf) = overlap_tokio::on_ring(file.read_at(vec![0u8; 5], 0)).await;
/// assert_eq!(&buf[..n?], b"hello");
/// # Ok(())
/// # }
/// ```
pub fn on_ring<F: Future>(fut: F) -> OnRing<F> {
    OnRing { fut }
}

/// The future of [`on_ring`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct OnRing<F> {
    fut: F,
}

impl<F: Future> Future for OnRing<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: structural pinning of the only field; it is never moved.
        let fut = unsafe { self.map_unchecked_mut(|s| &mut s.fut) };
        match thread_ring() {
            Some(ring) => ring.enter(|| fut.poll(cx)),
            None => fut.poll(cx),
        }
    }
}

/// A thread's ring and the liveness of the task that reaps it.
struct ThreadRing {
    ring: ReactorRing,
    reaper_alive: Arc<AtomicBool>,
}

impl Drop for ThreadRing {
    fn drop(&mut self) {
        // This thread submitted everything on the ring: wait for it before
        // the thread (and with it the kernel work it queued) goes.
        self.ring.drain();
    }
}

enum Local {
    Untried,
    Ready(ThreadRing),
    Unavailable,
}

thread_local! {
    static LOCAL: RefCell<Local> = const { RefCell::new(Local::Untried) };
}

/// This thread's ring, made if need be (inside a tokio runtime); `None`
/// where there is none to be had.
fn thread_ring() -> Option<ReactorRing> {
    LOCAL
        .try_with(|local| {
            match &*local.borrow() {
                Local::Ready(t) if t.reaper_alive.load(Ordering::Acquire) => {
                    return Some(t.ring.clone())
                }
                Local::Unavailable => return None,
                _ => {}
            }
            let handle = tokio::runtime::Handle::try_current().ok()?;
            // Drop (and drain) a ring whose runtime is gone before making
            // its successor.
            drop(std::mem::replace(&mut *local.borrow_mut(), Local::Untried));
            let made = make_ring(&handle);
            let ring = made.as_ref().map(|t| t.ring.clone());
            *local.borrow_mut() = made.map_or(Local::Unavailable, Local::Ready);
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
    let ring = ReactorRing::new().ok()?;
    let afd = {
        let _enter = handle.enter();
        let fd = RingFd(ring.clone());
        // Registration panics on a runtime built without its I/O driver
        // (`enable_io`); such a runtime keeps the engine's driver.
        let made = std::panic::catch_unwind(move || {
            // SAFETY: `RingFd` holds a handle to the ring, which keeps the
            // ring's descriptor open and unchanged for as long as the
            // `AsyncFd` owns it.
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
        });
        made.ok()?.ok()?
    };
    let reaper_alive = Arc::new(AtomicBool::new(true));
    let reaper = Reaper {
        afd,
        _alive: Alive(reaper_alive.clone()),
    };
    handle.spawn(reaper.run());
    Some(ThreadRing { ring, reaper_alive })
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
/// shut down).
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
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
    /// The reactor is shutting down.
    Closed,
}

impl Reaper {
    async fn run(self) {
        let ring = &self.afd.get_ref().0;
        loop {
            let event = std::future::poll_fn(|cx| {
                ring.set_flusher(cx.waker());
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
                    // operations) first: tokio runs a yielding task after
                    // them, so one system call submits the whole batch.
                    tokio::task::yield_now().await;
                    contain(|| ring.flush());
                }
            }
        }
    }
}

/// Runs completion work on the reaper. A panic in user code (a waker, a
/// buffer's Drop) was recorded with every other completion of its batch;
/// the reaper must survive it, or the ring would stop being reaped.
fn contain(f: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}
