//! How completions reach an asyncio event loop.
//!
//! Each event loop has one [`Hub`], made on first use by `overlapped._loop`:
//!
//! - On io_uring, the hub owns an [`overlapped::ReactorRing`]. Engine
//!   futures are polled inside [`ReactorRing::enter`] on the loop's thread,
//!   so their operations are submitted on that ring by the loop's thread
//!   itself. The ring's descriptor is registered with `loop.add_reader`:
//!   when completions wait in the ring the selector wakes, the loop calls
//!   [`Hub::reap`], which completes the operations; their wakers run right
//!   there, on the loop's thread, and the futures are polled again and
//!   their asyncio futures resolved in the same callback.
//! - A waker fired on any other thread (where io_uring is blocked, Linux
//!   AIO's reaper or the thread pool beside it; or a released share of the
//!   in-flight budget)
//!   queues the operation and writes the hub's eventfd, also watched with
//!   `loop.add_reader`: no Python thread and no GIL on the waking thread.
//! - Submissions are batched: the hub registers a flusher with its ring
//!   ([`ReactorRing::set_flusher`]), so once a few operations are in flight
//!   a submission only queues its entry. The first entry queued asks for a
//!   flush, which the hub schedules once with `loop.call_soon`: it runs
//!   after the callbacks already scheduled (the tasks woken in this
//!   iteration, which queue their entries too), and one `io_uring_enter`
//!   ([`ReactorRing::flush`]) then submits them all.
//!
//! An operation is an [`OpState`]: the engine future and its hub. The
//! engine holds it (through the waker) while the operation is in flight, so
//! a cancelled asyncio future never drops an operation early: the engine
//! future runs to completion, its buffer stays alive until the kernel is
//! done, and its result is discarded. The asyncio future it resolves is
//! held by the hub (`futures`), not by the operation: a ring the engine
//! holds never reaches a Python object through it, so no reference cycle
//! runs through Rust, where Python's collector cannot see it.
//!
//! A hub's life ends with its loop's: `overlapped._loop` wraps `loop.close`
//! and closes the hub right after the loop closed (the loop's collection
//! closes it too, for a loop never closed). Closing it hands its ring to
//! the engine ([`ReactorRing::orphan`]), whose ring watcher (passes the
//! engine's thread makes) submits what is queued and completes what is in
//! flight, without blocking the closing
//! thread; the asyncio futures of the operations still in flight are
//! dropped (nobody can await them on a closed loop), and so is every
//! operation once it completes: its budget share and buffer are released.
//!
//! After `os.fork`, the child forgets every hub it inherited
//! (`Hub._forget_after_fork`, called by `overlapped._loop`'s fork hook, and
//! [`_forget_hubs_after_fork`] for this module's cache): it never touches the
//! parent's rings (neither does the engine: a ring made before a fork is
//! inert in the child), the asyncio futures of the operations it inherited
//! in flight fail with a `RuntimeError` that says why, and its own use of
//! overlap makes new hubs on its own engine.

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use overlapped::ReactorRing;
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyWeakrefReference;

/// Builds an operation's Python result on the loop's thread, with the GIL.
pub type Resolve = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;
/// An engine future whose output turns into the Python result.
pub type BoxFut = Pin<Box<dyn Future<Output = Resolve> + Send>>;

thread_local! {
    /// The hub whose queue this thread is running (inside `dispatch`):
    /// wakes for it need no eventfd, the running loop picks them up.
    static DISPATCHING: Cell<*const HubInner> = const { Cell::new(std::ptr::null()) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One in-flight operation.
struct OpState {
    /// The engine future; `None` once it has completed.
    fut: Mutex<Option<BoxFut>>,
    /// The key of the asyncio future it resolves in the hub's `futures`.
    id: u64,
    hub: Arc<HubInner>,
    /// Sits in the hub's queue (set by a wake, cleared before a poll).
    queued: AtomicBool,
    /// Woken while being polled further up the stack: poll again.
    again: AtomicBool,
}

impl Wake for OpState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.hub.schedule(self.clone());
        }
    }
}

/// A hub's shared state: held by its Python object and by every operation
/// in flight on it.
pub struct HubInner {
    ring: Option<ReactorRing>,
    efd: OwnedFd,
    queue: Mutex<Vec<Arc<OpState>>>,
    /// The asyncio futures of the operations in flight, by operation id
    /// (see the module docs: held here, not by the operations). Emptied
    /// when the hub closes.
    futures: Mutex<HashMap<u64, Py<PyAny>>>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// Operations started and not yet completed.
    pending: AtomicUsize,
    /// Wakes that came through the eventfd, and reaps of the ring that found
    /// completions (for `overlapped.stats()` and the tests).
    eventfd_wakes: AtomicU64,
    ring_reaps: AtomicU64,
    /// Set to wake the loop with `loop.call_soon_threadsafe(callback)`
    /// instead of the eventfd (measured against it: see BENCHMARKS.md).
    threadsafe: std::sync::OnceLock<(Py<PyAny>, Py<PyAny>)>,
    /// The loop (weakly: the loop holds the hub through its readers) and
    /// the callback that flushes the ring, once `Hub.use_loop` registered
    /// the flusher.
    flush_via: std::sync::OnceLock<(Py<PyWeakrefReference>, Py<FlushCallback>)>,
    /// A flush is asked for or scheduled and has not run yet: later
    /// requests are folded into it.
    flush_scheduled: AtomicBool,
    /// A flush was asked for and the loop's thread has not scheduled it yet
    /// (it does at the end of its current `dispatch`).
    flush_requested: AtomicBool,
    /// Flushes of the ring that submitted queued entries.
    flushes: AtomicU64,
}

/// The most entries one flush of a hub's ring carries (the engine's
/// default is 32). An asyncio task's step costs 10-15 us, so a batch of 32
/// held the first reads of a batch back for ~0.4 ms while the rest ran, and
/// 32 tasks moved in convoys (29 entries per `io_uring_enter`, 15 of the 32
/// reads at the device on average). 32 tasks of 4 KiB O_DIRECT reads,
/// interleaved, 4 rounds each: 1.25x the reads/s with 16 on the disk, 1.11x
/// on the fast device (BENCHMARKS.md).
const ASYNCIO_BATCH: usize = 16;

/// The ring's flusher: woken (normally on the loop's thread, inside a
/// poll) when a submission queued the first entry of a batch. Holds the
/// hub weakly: the ring holds the waker and the hub holds the ring.
struct FlushWaker(std::sync::Weak<HubInner>);

impl Wake for FlushWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(hub) = self.0.upgrade() {
            hub.request_flush();
        }
    }
}

/// The callable that `loop.call_soon` runs to flush a hub's ring. Holds
/// the hub weakly, so that a callback still scheduled keeps nothing alive.
#[pyclass(module = "overlapped._native", name = "_FlushCallback", frozen)]
pub struct FlushCallback {
    hub: std::sync::Weak<HubInner>,
}

#[pymethods]
impl FlushCallback {
    fn __call__(&self, py: Python<'_>) {
        if let Some(hub) = self.hub.upgrade() {
            hub.flush_scheduled_now(py);
        }
    }
}

impl HubInner {
    /// Queues a woken operation for the loop's thread.
    fn schedule(&self, op: Arc<OpState>) {
        debug_assert!(
            std::ptr::eq(Arc::as_ptr(&op.hub), self) && op.queued.load(Ordering::Acquire),
            "an operation is scheduled on its own hub, once marked queued"
        );
        if self.closed.load(Ordering::Acquire) {
            // Nobody will poll it again: the loop is gone. Dropping it here
            // is safe (the engine future has completed or owns its buffer).
            return;
        }
        let local = DISPATCHING
            .try_with(|d| std::ptr::eq(d.get(), self))
            .unwrap_or(false);
        let was_empty = {
            let mut q = lock(&self.queue);
            let e = q.is_empty();
            q.push(op);
            e
        };
        if self.closed.load(Ordering::Acquire) {
            // The hub closed meanwhile, after taking the queue: what is
            // there now would stay forever.
            drop(std::mem::take(&mut *lock(&self.queue)));
            return;
        }
        if was_empty && !local {
            self.signal();
        }
    }

    /// Wakes the loop: makes the eventfd readable (or, where configured,
    /// `call_soon_threadsafe`, which takes the GIL on the waking thread).
    fn signal(&self) {
        if let Some((call, cb)) = self.threadsafe.get() {
            Python::attach(|py| {
                if let Err(e) = call.call1(py, (cb.clone_ref(py),)) {
                    // The loop is closed: nobody waits any more.
                    drop(e);
                }
            });
            return;
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local into our eventfd. EAGAIN (the
        // counter is saturated) leaves it readable, which is all we need.
        let wrote = unsafe {
            libc::write(
                self.efd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        debug_assert!(
            wrote == 8 || wrote < 0,
            "an eventfd write adds the whole 8-byte count or nothing"
        );
    }

    /// Runs `f` with this hub as the thread's dispatching hub, then polls
    /// every queued operation until the queue is empty.
    fn dispatch<R>(self: &Arc<Self>, py: Python<'_>, f: impl FnOnce() -> R) -> R {
        struct Restore(*const HubInner);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = DISPATCHING.try_with(|d| d.set(self.0));
            }
        }
        let prev = DISPATCHING.with(|d| d.replace(Arc::as_ptr(self)));
        let _restore = Restore(prev);
        let r = f();
        debug_assert!(
            DISPATCHING.with(|d| std::ptr::eq(d.get(), Arc::as_ptr(self))),
            "a nested dispatch gives back the hub it found"
        );
        let mut batch = Vec::new();
        loop {
            debug_assert!(batch.is_empty(), "a batch is polled whole before the next");
            std::mem::swap(&mut batch, &mut *lock(&self.queue));
            if batch.is_empty() {
                if self.flush_requested.swap(false, Ordering::AcqRel) && !self.schedule_flush(py) {
                    // No loop to schedule it on: flush now, and poll what
                    // that completed.
                    self.flush_ring(py);
                    continue;
                }
                break;
            }
            for op in batch.drain(..) {
                self.poll_op(py, &op);
            }
        }
        r
    }

    /// Polls one operation (inside the ring, so that what it submits goes
    /// there) and resolves its asyncio future when it is done.
    fn poll_op(self: &Arc<Self>, py: Python<'_>, op: &Arc<OpState>) {
        debug_assert!(
            Arc::ptr_eq(&op.hub, self),
            "an operation is polled by its own hub"
        );
        debug_assert!(
            op.queued.load(Ordering::Acquire),
            "an operation is polled once queued (by spawn or a wake-up)"
        );
        op.queued.store(false, Ordering::Release);
        let outcome = loop {
            let Ok(mut guard) = op.fut.try_lock() else {
                // Polled further up this thread's stack (a buffer's release
                // ran Python code that started an operation): that poll
                // will go round again.
                op.again.store(true, Ordering::Release);
                return;
            };
            let Some(fut) = guard.as_mut() else { return };
            op.again.store(false, Ordering::Release);
            let waker = Waker::from(op.clone());
            let mut cx = Context::from_waker(&waker);
            let polled =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &self.ring {
                    Some(ring) => ring.enter(|| fut.as_mut().poll(&mut cx)),
                    None => fut.as_mut().poll(&mut cx),
                }));
            match polled {
                Ok(Poll::Pending) => {
                    drop(guard);
                    if op.again.swap(false, Ordering::AcqRel) {
                        continue;
                    }
                    return;
                }
                Ok(Poll::Ready(resolve)) => {
                    *guard = None;
                    break Ok(resolve);
                }
                Err(panic) => {
                    // The engine never panics on its own; if it did, the
                    // operation fails rather than the interpreter.
                    *guard = None;
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    break Err(PyRuntimeError::new_err(format!(
                        "overlap: internal error: {msg}"
                    )));
                }
            }
        };
        self.resolve(py, op, outcome);
    }

    /// Counts `op` out and resolves its asyncio future with `outcome` (or
    /// drops the outcome, with the GIL, if the hub closed meanwhile).
    fn resolve(self: &Arc<Self>, py: Python<'_>, op: &Arc<OpState>, outcome: PyResult<Resolve>) {
        let started = self.pending.fetch_sub(1, Ordering::AcqRel);
        // An operation completes once (its future is taken above).
        debug_assert!(started > 0, "more operations completed than started");
        let pyfut = {
            let mut futures = lock(&self.futures);
            let pyfut = futures.remove(&op.id);
            // All under the GIL: spawn adds a future before counting its
            // operation, and an operation is counted out before its future
            // is removed.
            debug_assert!(
                futures.len() <= self.pending.load(Ordering::Acquire),
                "every asyncio future waits for an operation in flight"
            );
            pyfut
        };
        debug_assert!(
            pyfut.is_some() || self.closed.load(Ordering::Acquire),
            "an operation's future goes missing only when the hub closed"
        );
        match pyfut {
            Some(pyfut) => finish(py, pyfut.bind(py), outcome),
            // The hub closed: nobody waits for the result, which is
            // dropped here, with the GIL.
            None => drop(outcome),
        }
    }

    /// Completes what the ring holds; returns how many.
    fn reap_ring(self: &Arc<Self>, py: Python<'_>) -> usize {
        self.dispatch(py, || match &self.ring {
            Some(ring) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.reap())).unwrap_or(0)
            }
            None => 0,
        })
    }

    /// Asks for a flush of the ring (the flusher's wake). On the loop's
    /// thread, inside `dispatch`, the flush is scheduled when the dispatch
    /// ends; from any other thread, the eventfd wakes the loop, whose
    /// dispatch schedules it.
    fn request_flush(&self) {
        if self.flush_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        self.flush_requested.store(true, Ordering::Release);
        let local = DISPATCHING
            .try_with(|d| std::ptr::eq(d.get(), self))
            .unwrap_or(false);
        if !local {
            self.signal();
        }
    }

    /// Schedules the flush with `loop.call_soon`; false if it cannot be
    /// (the loop is gone or closed, or was never given).
    fn schedule_flush(&self, py: Python<'_>) -> bool {
        let Some((lp, cb)) = self.flush_via.get() else {
            return false;
        };
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let Some(lp) = lp.bind(py).upgrade() else {
            return false;
        };
        lp.call_method1(intern!(py, "call_soon"), (cb.clone_ref(py),))
            .is_ok()
    }

    /// The scheduled flush: submits what the tasks of this iteration
    /// queued, and polls the operations that completed meanwhile.
    fn flush_scheduled_now(self: &Arc<Self>, py: Python<'_>) {
        self.dispatch(py, || self.flush_ring(py));
    }

    /// Hands the ring's queued entries to the kernel in one system call
    /// (without the GIL). Completions it finds wake their operations onto
    /// the queue. A panic from user code run by a completion (a waker, a
    /// buffer's release) is contained, as in `reap_ring`: the hub must
    /// keep serving its loop.
    fn flush_ring(&self, py: Python<'_>) {
        self.flush_scheduled.store(false, Ordering::Release);
        let Some(ring) = &self.ring else { return };
        if ring.queued() == 0 {
            return;
        }
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let flushed =
            py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.flush())));
        drop(flushed);
    }

    /// Shuts the hub down (its loop closed or is gone) without waiting:
    /// hands the ring to the engine ([`ReactorRing::orphan`]), whose watcher
    /// submits the entries still queued for a flush and completes what is
    /// in flight (the wakes then drop the operations, releasing their
    /// budget and buffers), and drops every queued operation and the
    /// asyncio futures of those in flight, with the GIL (`_py`): nothing of
    /// the hub's reaches the loop any more.
    fn close(self: &Arc<Self>, _py: Python<'_>) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(ring) = &self.ring {
            ring.orphan();
        }
        let queued = std::mem::take(&mut *lock(&self.queue));
        drop(queued);
        let futures = std::mem::take(&mut *lock(&self.futures));
        drop(futures);
    }

    /// In a child made by `fork`: the hub is the parent's. Closes it
    /// without touching anything the parent's operations use (the ring is
    /// inert here; queued operations are leaked rather than dropped, as
    /// dropping them would reach into the parent's engine, whose threads
    /// are not here), and fails the asyncio futures of the operations in
    /// flight: their completions belong to the parent.
    fn forget_after_fork(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        // Only the forking thread is in the child: a lock held at the fork
        // (by a thread of the engine's pool queueing a wake-up, say) stays
        // held for ever. What it guards is left alone then.
        if let Ok(mut queue) = self.queue.try_lock() {
            std::mem::forget(std::mem::take(&mut *queue));
        }
        let futures = match self.futures.try_lock() {
            Ok(mut f) => std::mem::take(&mut *f),
            Err(std::sync::TryLockError::Poisoned(p)) => std::mem::take(&mut *p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Default::default(),
        };
        for (_, pyfut) in futures {
            let pyfut = pyfut.bind(py);
            let err = PyRuntimeError::new_err(
                "overlap: this operation was started before os.fork() and belongs to the \
                 parent process: it cannot complete in the child",
            );
            // A future already done, or whose loop is closed, refuses it or
            // cannot schedule its callbacks: nothing more to do then.
            if pyfut
                .call_method1(intern!(py, "set_exception"), (err.into_value(py),))
                .is_ok()
            {
                // Retrieved: no "exception was never retrieved" log for a
                // future the child may never look at.
                let _ = pyfut.call_method0(intern!(py, "exception"));
            }
        }
    }

    /// Wakes on the loop's thread, counted like an eventfd wake.
    fn on_wake(self: &Arc<Self>, py: Python<'_>) {
        self.eventfd_wakes.fetch_add(1, Ordering::Relaxed);
        self.dispatch(py, || ());
    }
}

/// Resolves the asyncio future with the operation's outcome. One that is
/// already done (cancelled) refuses it, and the result is dropped here, on
/// the loop's thread, with the GIL.
fn finish(py: Python<'_>, pyfut: &Bound<'_, PyAny>, outcome: PyResult<Resolve>) {
    let res = match outcome.and_then(|resolve| resolve(py)) {
        Ok(value) => pyfut.call_method1(intern!(py, "set_result"), (value,)),
        Err(err) => pyfut.call_method1(intern!(py, "set_exception"), (err.into_value(py),)),
    };
    if let Err(e) = res {
        // A cancelled future refuses the result (InvalidStateError): the
        // result is dropped here, on the loop's thread, with the GIL.
        let done = pyfut
            .call_method0(intern!(py, "done"))
            .and_then(|d| d.is_truthy())
            .unwrap_or(false);
        if !done {
            e.write_unraisable(py, Some(pyfut));
        }
    }
}

/// `overlapped._native.Hub`: the completion hub of one event loop (see the
/// module docs). Made and registered by `overlapped._loop.hub_for`.
#[pyclass(module = "overlapped._native", name = "Hub", frozen)]
pub struct Hub {
    pub(crate) inner: Arc<HubInner>,
}

#[pymethods]
impl Hub {
    #[new]
    fn new() -> PyResult<Hub> {
        let engine = crate::engine()?;
        let ring = engine.reactor_ring().ok();
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(PyOSError::new_err(format!(
                "eventfd: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let efd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Hub {
            inner: Arc::new(HubInner {
                ring,
                efd,
                queue: Mutex::new(Vec::new()),
                futures: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                pending: AtomicUsize::new(0),
                eventfd_wakes: AtomicU64::new(0),
                ring_reaps: AtomicU64::new(0),
                threadsafe: std::sync::OnceLock::new(),
                flush_via: std::sync::OnceLock::new(),
                flush_scheduled: AtomicBool::new(false),
                flush_requested: AtomicBool::new(false),
                flushes: AtomicU64::new(0),
            }),
        })
    }

    /// The reactor ring's descriptor (readable while completions wait), or
    /// -1 when operations go through the engine's driver.
    #[getter]
    fn ring_fd(&self) -> i32 {
        self.inner.ring.as_ref().map_or(-1, |r| r.as_raw_fd())
    }

    /// The eventfd that wakes the loop for completions from other threads.
    #[getter]
    fn event_fd(&self) -> i32 {
        self.inner.efd.as_raw_fd()
    }

    /// Operations started on this hub and not yet completed.
    #[getter]
    fn pending(&self) -> usize {
        let n = self.inner.pending.load(Ordering::Acquire);
        debug_assert!(
            lock(&self.inner.futures).len() <= n,
            "every asyncio future waits for an operation in flight"
        );
        n
    }

    /// Whether `close` ran.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Wake-ups through the eventfd / reaps of the ring that found
    /// completions.
    #[getter]
    fn wakeups(&self) -> (u64, u64) {
        (
            self.inner.eventfd_wakes.load(Ordering::Relaxed),
            self.inner.ring_reaps.load(Ordering::Relaxed),
        )
    }

    /// Flushes of the ring that submitted queued entries.
    #[getter]
    fn flushes(&self) -> u64 {
        self.inner.flushes.load(Ordering::Relaxed)
    }

    /// Entries queued on the ring for the next flush.
    #[getter]
    fn queued(&self) -> usize {
        self.inner.ring.as_ref().map_or(0, |r| r.queued())
    }

    /// Batches submissions: registers the ring's flusher, whose flushes
    /// are scheduled with `loop.call_soon` (the loop is held weakly). Does
    /// nothing without a ring or a second time.
    fn use_loop(&self, py: Python<'_>, lp: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(ring) = &self.inner.ring else {
            return Ok(());
        };
        let lp = PyWeakrefReference::new(lp)?.unbind();
        let cb = Py::new(
            py,
            FlushCallback {
                hub: Arc::downgrade(&self.inner),
            },
        )?;
        if self.inner.flush_via.set((lp, cb)).is_ok() {
            let waker = Waker::from(Arc::new(FlushWaker(Arc::downgrade(&self.inner))));
            ring.set_batch_limit(ASYNCIO_BATCH);
            ring.set_flusher(&waker);
        }
        Ok(())
    }

    /// The ring's reader callback: completes the operations in the ring.
    fn reap(&self, py: Python<'_>) -> usize {
        let n = self.inner.reap_ring(py);
        if n > 0 {
            self.inner.ring_reaps.fetch_add(1, Ordering::Relaxed);
        }
        n
    }

    /// The eventfd's reader callback: polls operations woken elsewhere.
    fn on_event(&self, py: Python<'_>) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a local from our non-blocking eventfd;
        // EAGAIN (nothing to read) is fine.
        let got = unsafe {
            libc::read(
                self.inner.efd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        debug_assert!(
            got == 8 || got < 0,
            "an eventfd read takes the whole 8-byte count or nothing"
        );
        self.inner.on_wake(py);
    }

    /// The `call_soon_threadsafe` callback: polls operations woken elsewhere.
    fn on_threadsafe(&self, py: Python<'_>) {
        self.inner.on_wake(py);
    }

    /// Wakes the loop for completions from other threads with
    /// `call_soon_threadsafe(callback)` (the loop's bound method) instead of
    /// the eventfd. For measurements (`OVERLAP_PY_WAKE=threadsafe`).
    fn use_call_soon_threadsafe(&self, call_soon_threadsafe: Py<PyAny>, callback: Py<PyAny>) {
        let _ = self.inner.threadsafe.set((call_soon_threadsafe, callback));
    }

    /// Stops the hub (its loop closed or is gone) without waiting: the
    /// engine completes what is in flight on the ring (see the module
    /// docs). Idempotent.
    fn close(&self, py: Python<'_>) {
        self.inner.close(py);
    }

    /// In a child made by `fork`: forgets this hub, inherited from the
    /// parent, without touching its ring; the operations in flight fail
    /// with `RuntimeError`. Called by `overlapped._loop`'s fork hook.
    fn _forget_after_fork(&self, py: Python<'_>) {
        self.inner.forget_after_fork(py);
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let inner = self.inner.clone();
        Python::attach(move |py| inner.close(py));
    }
}

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static HUB_FOR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

thread_local! {
    /// The last loop seen on this thread (by address) and its hub. A hub is
    /// closed when its loop closes or is collected, before the address can
    /// be reused.
    static CACHE: std::cell::RefCell<Option<(usize, Arc<HubInner>)>> =
        const { std::cell::RefCell::new(None) };
}

/// `_native._forget_hubs_after_fork()`: in a child made by `fork` (called
/// by `overlapped._loop`'s fork hook, on the thread that forked, the child's
/// only one), forgets the hub this module cached, so that the child's next
/// operation finds or makes the hub of its own loop. The parent's hub is
/// leaked, not dropped: dropping it could reach into the parent's engine.
#[pyfunction]
pub fn _forget_hubs_after_fork() {
    let _ = CACHE.try_with(|c| {
        if let Some(cached) = c.borrow_mut().take() {
            std::mem::forget(cached);
        }
    });
}

/// The running loop and its hub; `RuntimeError` outside a running loop.
pub fn current(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Arc<HubInner>)> {
    let get = GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?;
    let lp = get.call0()?;
    let key = lp.as_ptr() as usize;
    let cached = CACHE.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|(k, h)| *k == key && !h.closed.load(Ordering::Acquire))
            .map(|(_, h)| h.clone())
    });
    if let Some(hub) = cached {
        return Ok((lp, hub));
    }
    let hub_for = HUB_FOR.import(py, "overlapped._loop", "hub_for")?;
    let hub = hub_for.call1((&lp,))?;
    let hub = hub.cast::<Hub>()?.get().inner.clone();
    debug_assert!(
        !hub.closed.load(Ordering::Acquire),
        "the running loop's hub is open"
    );
    CACHE.with(|c| *c.borrow_mut() = Some((key, hub.clone())));
    Ok((lp, hub))
}

/// Starts `fut` on the running loop: polls it once now (submitting its
/// operation), and returns the asyncio future it will resolve.
pub fn spawn<'py>(py: Python<'py>, fut: BoxFut) -> PyResult<Bound<'py, PyAny>> {
    let (lp, hub) = current(py)?;
    let pyfut = lp.call_method0(intern!(py, "create_future"))?;
    let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
    let earlier = lock(&hub.futures).insert(id, pyfut.clone().unbind());
    debug_assert!(earlier.is_none(), "operation ids are unique");
    let op = Arc::new(OpState {
        fut: Mutex::new(Some(fut)),
        id,
        hub: hub.clone(),
        queued: AtomicBool::new(true),
        again: AtomicBool::new(false),
    });
    hub.pending.fetch_add(1, Ordering::AcqRel);
    debug_assert!(
        lock(&hub.futures).len() <= hub.pending.load(Ordering::Acquire),
        "every asyncio future waits for an operation in flight"
    );
    hub.dispatch(py, || hub.poll_op(py, &op));
    Ok(pyfut)
}
