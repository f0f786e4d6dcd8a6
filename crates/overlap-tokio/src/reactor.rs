//! Completions through tokio's reactor.
//!
//! On Linux only: elsewhere (Windows) there are no rings, and every
//! operation goes through the engine's driver (on Windows its I/O
//! completion port, whose threads wake the task: one hand-off more).
//!
//! Each tokio thread that polls an engine operation gets a ring of its own
//! ([`overlapped::ReactorRing`], made on first use), registered with tokio's
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
//! Whatever becomes of the thread or the runtime, an operation completes
//! (the engine's rule, see [`overlapped::ReactorRing`]):
//! - A thread that exits (a worker at runtime shutdown, a blocking-pool
//!   thread after its keep-alive) orphans its ring: the engine's ring watcher
//!   completes what is in flight there, without holding up the thread's
//!   exit, and the reaper task ends, closing the ring's descriptor.
//! - A runtime dropped while a thread lives on (its reaper task is dropped
//!   with it) orphans the ring the same way; the thread's next poll makes a
//!   new one.
//! - A runtime that is not being run (`Handle::block_on` on a
//!   current-thread runtime, or a second current-thread runtime on the same
//!   thread while the first holds its ring) leaves its ring unreaped: the
//!   watcher completes those operations within 10-200 ms, late but
//!   neither lost nor hung (`Stats::reaped_by_watcher` counts them).
//! - A runtime built without its I/O driver (no `enable_io`) cannot watch a
//!   ring; tokio offers no way to ask but a panic, which is caught (and kept
//!   off stderr). In a program built with `panic = "abort"` that panic would
//!   end the process, so there the rings are used only where
//!   `OVERLAP_TOKIO_RINGS=always` says that every runtime has its I/O
//!   driver; otherwise operations take the engine's driver.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

#[cfg(target_os = "linux")]
mod ring;

/// Runs an [`overlapped`] engine future with its completions delivered by
/// tokio's reactor: the operations it submits go on the polling tokio
/// thread's ring (see the crate docs). Every operation of
/// [`fs`](crate::fs) is polled this way; use it for the engine's own API
/// ([`overlapped::File`], [`overlapped::Op`]) inside tokio.
///
/// Outside a tokio runtime, or where no ring can be had, the future is
/// polled as it is and its operations go through the engine's driver.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use overlapped::OpenOptions;
///
/// let dir = tempfile::tempdir()?;
/// let engine = overlapped_tokio::engine();
/// let file = overlapped_tokio::on_ring(
///     OpenOptions::new().read(true).write(true).create(true)
///         .open(engine, dir.path().join("f")),
/// ).await?;
/// let (res, _buf) = overlapped_tokio::on_ring(file.write_all_at(b"hello".to_vec(), 0)).await;
/// res?;
/// let (n, buf) = overlapped_tokio::on_ring(file.read_at(vec![0u8; 5], 0)).await;
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
        // tokio's cooperative budget, as a `spawn_blocking` handle (what
        // `tokio::fs` awaits) takes it: an operation that completes uses a
        // unit, and a task whose budget is spent gets `Pending` (woken at
        // once) before anything is submitted. Without it, reads answered on
        // the calling thread (the page cache, the dentry cache) would never
        // let the task yield. Outside a runtime the budget is unlimited.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        // SAFETY: structural pinning of the only field; it is never moved.
        let fut = unsafe { self.map_unchecked_mut(|s| &mut s.fut) };
        #[cfg(target_os = "linux")]
        let res = match ring::thread_ring().filter(|_| !off_ring_here()) {
            Some(ring) => ring.enter(|| fut.poll(cx)),
            None => fut.poll(cx),
        };
        #[cfg(not(target_os = "linux"))]
        let res = fut.poll(cx);
        if res.is_ready() {
            coop.made_progress();
        }
        res
    }
}

thread_local! {
    /// Set while [`off_ring`] runs on this thread.
    static OFF_RING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// Read by the rings only (Linux); elsewhere `off_ring` changes nothing.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn off_ring_here() -> bool {
    OFF_RING.try_with(std::cell::Cell::get).unwrap_or(false)
}

/// Runs `f` with the operations it polls on this thread going through the
/// engine's driver, not a ring reaped by a runtime's task: for work that
/// must finish even while the runtime shuts down (a dropped file's write).
pub(crate) fn off_ring<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = OFF_RING.try_with(|o| o.set(self.0));
        }
    }
    let _reset = Reset(OFF_RING.try_with(|o| o.replace(true)).unwrap_or(false));
    f()
}
