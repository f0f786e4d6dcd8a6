//! Operations: what the kernel is asked to do, the cell that owns an
//! operation's buffer while the kernel may touch it, and the futures that
//! callers await.
//!
//! Ownership rule: once an operation is handed to a driver, the driver holds
//! an `Arc` of its [`OpCell`] until the kernel reports completion. The cell
//! owns the buffer. Dropping the caller's future drops only the caller's
//! `Arc`, so the buffer stays alive until the kernel is done with it.

use std::ffi::CString;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::file::FileRef;
use crate::limiter::{Acquire, Permit};
use crate::port::PortShared;

/// The system call an operation performs, with raw pointers into memory the
/// operation's cell owns.
#[derive(Debug)]
pub(crate) enum OpKind {
    Read {
        fd: i32,
        ptr: *mut u8,
        len: u32,
        offset: u64,
    },
    Write {
        fd: i32,
        ptr: *const u8,
        len: u32,
        offset: u64,
    },
    Fsync {
        fd: i32,
        datasync: bool,
    },
    Fallocate {
        fd: i32,
        mode: i32,
        offset: u64,
        len: u64,
    },
    Ftruncate {
        fd: i32,
        len: u64,
    },
    Statx {
        fd: i32,
        buf: *mut libc::statx,
    },
    Close {
        fd: i32,
    },
    Open {
        path: CString,
        flags: i32,
        mode: u32,
    },
}

// SAFETY: the raw pointers in OpKind point into buffers owned by the same
// OpCell, which is Send; they are only dereferenced by the kernel or by the
// one thread that executes the operation.
unsafe impl Send for OpKind {}
// SAFETY: OpKind is never mutated after construction; sharing it only shares
// addresses.
unsafe impl Sync for OpKind {}

/// What a driver sees of an operation.
pub(crate) trait Completable: Send + Sync {
    fn kind(&self) -> &OpKind;
    /// Records the kernel's result (`>= 0`, or `-errno`) and notifies the
    /// owner. `inline` says the result was known when submission returned.
    fn complete(&self, res: i64, inline: bool);
}

enum State {
    Waiting(Option<Waker>),
    Done(i64),
}

pub(crate) enum Target<B> {
    Future,
    Port { port: Arc<PortShared<B>>, key: u64 },
}

pub(crate) struct OpCell<B> {
    kind: OpKind,
    target: Target<B>,
    shared: Arc<Shared>,
    /// Everything that changes hands at completion, under one lock: the
    /// driver takes it once in `complete`, the future once when it is done.
    slot: Mutex<Slot<B>>,
}

struct Slot<B> {
    state: State,
    /// The kernel reads or writes the buffer's heap memory while in flight;
    /// nothing touches this field until completion.
    buf: Option<B>,
    /// Budget held while in flight; released at completion (futures) or when
    /// a port hands the completion to a worker.
    permit: Option<Permit>,
    /// Keeps the descriptor open (and counted in use) while the kernel uses it.
    file: Option<FileRef>,
}

impl<B: Send + 'static> OpCell<B> {
    pub(crate) fn new(
        kind: OpKind,
        buf: B,
        target: Target<B>,
        permit: Option<Permit>,
        file: Option<FileRef>,
        shared: Arc<Shared>,
    ) -> Arc<OpCell<B>> {
        Arc::new(OpCell {
            kind,
            target,
            shared,
            slot: Mutex::new(Slot {
                state: State::Waiting(None),
                buf: Some(buf),
                permit,
                file,
            }),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot<B>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The result and the buffer once done, or registers the waker.
    fn poll_done(&self, cx: &mut Context<'_>) -> Poll<(i64, B)> {
        let mut slot = self.slot();
        match &mut slot.state {
            State::Done(res) => {
                let res = *res;
                Poll::Ready((res, slot.buf.take().expect("buffer taken once")))
            }
            State::Waiting(w) => {
                match w {
                    Some(old) if old.will_wake(cx.waker()) => {}
                    _ => *w = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

impl<B: Send + 'static> Completable for OpCell<B> {
    fn kind(&self) -> &OpKind {
        &self.kind
    }

    fn complete(&self, res: i64, inline: bool) {
        self.shared.counters.record(&self.kind, res, inline);
        let (file, permit, waker, buf) = {
            let mut slot = self.slot();
            let waker = match std::mem::replace(&mut slot.state, State::Done(res)) {
                State::Waiting(w) => w,
                State::Done(_) => unreachable!("an operation completes once"),
            };
            // A port takes the buffer now; a future takes it when polled.
            let buf = match self.target {
                Target::Port { .. } => slot.buf.take(),
                Target::Future => None,
            };
            (slot.file.take(), slot.permit.take(), waker, buf)
        };
        // Side effects outside the lock: closing waits for the file count,
        // and releasing budget may wake submitters.
        drop(file);
        match &self.target {
            Target::Future => {
                drop(permit);
                if let Some(w) = waker {
                    crate::driver::wake(w);
                }
            }
            Target::Port { port, key } => {
                let buf = buf.expect("a port operation's buffer is in its cell");
                port.deliver(*key, res, buf, permit, inline);
            }
        }
    }
}

/// Turns a kernel result into a byte count or a typed error.
pub(crate) fn to_result(res: i64) -> Result<usize> {
    if res < 0 {
        Err(Error::from_errno((-res) as i32))
    } else {
        Ok(res as usize)
    }
}

/// A request prepared but not yet admitted to the engine.
pub(crate) struct Request<B> {
    pub shared: Arc<Shared>,
    pub file: Option<FileRef>,
    pub buf: B,
    /// Builds the kind once the buffer sits at its final address.
    pub make: fn(&mut B, &Params) -> OpKind,
    pub params: Params,
    /// Bytes charged against the in-flight budget.
    pub bytes: usize,
    /// Try `preadv2(RWF_NOWAIT)` on the caller's thread first.
    pub fast_path: bool,
}

impl<B> Request<B> {
    /// Checks that the engine runs and counts the operation in on its file
    /// (which fails once the file is closed).
    pub(crate) fn start(&mut self) -> Result<()> {
        if self.shared.is_shut() {
            return Err(Error::Shutdown);
        }
        match &mut self.file {
            Some(f) => f.start(),
            None => Ok(()),
        }
    }
}

/// Scalar arguments of a request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Params {
    pub fd: i32,
    pub offset: u64,
    pub len: u64,
    pub start: usize,
    pub flag: i32,
}

enum Stage<B> {
    Ready(Result<usize>, B),
    Init(Request<B>),
    Admitting(Acquire, Request<B>),
    InFlight(Arc<OpCell<B>>),
    Finished,
}

/// An operation on a file: a [`Future`] resolving to the result and the
/// buffer, returned on success and on error alike.
///
/// The operation is submitted on its first poll (as every Rust future, it is
/// lazy; poll many at once, e.g. with `futures::future::join_all`, to have
/// them in flight together). Dropping it after that is safe: the engine keeps
/// the buffer until the kernel has finished with it, and the operation still
/// runs to completion. For threads that are not async, [`Op::wait`] blocks.
#[must_use = "an operation does nothing until awaited or waited on"]
pub struct Op<B> {
    stage: Stage<B>,
}

impl<B: Send + 'static> Op<B> {
    pub(crate) fn ready(res: Result<usize>, buf: B) -> Op<B> {
        Op {
            stage: Stage::Ready(res, buf),
        }
    }

    pub(crate) fn request(req: Request<B>) -> Op<B> {
        Op {
            stage: Stage::Init(req),
        }
    }

    /// Blocks the calling thread until the operation completes.
    pub fn wait(self) -> (Result<usize>, B) {
        block_on(self)
    }
}

impl<B> Unpin for Op<B> {}

impl<B: Send + 'static> Future for Op<B> {
    type Output = (Result<usize>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match std::mem::replace(&mut this.stage, Stage::Finished) {
                Stage::Ready(res, buf) => return Poll::Ready((res, buf)),
                Stage::Init(mut req) => {
                    if let Err(e) = req.start() {
                        return Poll::Ready((Err(e), req.buf));
                    }
                    if let Some(n) = crate::sys::read_nowait(&mut req) {
                        return Poll::Ready((Ok(n), req.buf));
                    }
                    let acq = req.shared.limiter.acquire(req.bytes);
                    this.stage = Stage::Admitting(acq, req);
                }
                Stage::Admitting(mut acq, req) => match Pin::new(&mut acq).poll(cx) {
                    Poll::Ready(permit) => {
                        if req.shared.is_shut() {
                            // The engine stopped while this waited for budget.
                            drop(permit);
                            return Poll::Ready((Err(Error::Shutdown), req.buf));
                        }
                        this.stage = Stage::InFlight(submit(req, Target::Future, Some(permit)));
                    }
                    Poll::Pending => {
                        this.stage = Stage::Admitting(acq, req);
                        return Poll::Pending;
                    }
                },
                Stage::InFlight(cell) => match cell.poll_done(cx) {
                    Poll::Ready((res, buf)) => return Poll::Ready((to_result(res), buf)),
                    Poll::Pending => {
                        this.stage = Stage::InFlight(cell);
                        return Poll::Pending;
                    }
                },
                Stage::Finished => panic!("Op polled after completion"),
            }
        }
    }
}

/// Moves a request into a cell and hands it to the driver.
pub(crate) fn submit<B: Send + 'static>(
    req: Request<B>,
    target: Target<B>,
    permit: Option<Permit>,
) -> Arc<OpCell<B>> {
    let Request {
        shared,
        file,
        mut buf,
        make,
        params,
        ..
    } = req;
    // The buffer's heap memory does not move when `buf` moves into the cell
    // (IoBuf contract), so the addresses taken here stay valid.
    let kind = make(&mut buf, &params);
    let cell = OpCell::new(kind, buf, target, permit, file, shared.clone());
    shared
        .counters
        .submitted
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    shared.driver.submit(cell.clone());
    cell
}

/// A boxed operation for the less frequent calls (sync, allocate, metadata,
/// close, open, and the looping `*_exact`/`*_all` forms).
#[must_use = "an operation does nothing until awaited or waited on"]
pub struct Task<T> {
    fut: Pin<Box<dyn Future<Output = T> + Send + 'static>>,
}

impl<T> Task<T> {
    pub(crate) fn new(fut: impl Future<Output = T> + Send + 'static) -> Task<T> {
        Task { fut: Box::pin(fut) }
    }

    /// Blocks the calling thread until the operation completes.
    pub fn wait(self) -> T {
        block_on(self)
    }
}

impl<T> Future for Task<T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        self.fut.as_mut().poll(cx)
    }
}

impl<T> std::fmt::Debug for Task<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Task")
    }
}

impl<B> std::fmt::Debug for Op<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = match self.stage {
            Stage::Ready(..) => "ready",
            Stage::Init(_) => "not submitted",
            Stage::Admitting(..) => "waiting for budget",
            Stage::InFlight(_) => "in flight",
            Stage::Finished => "finished",
        };
        f.debug_struct("Op").field("stage", &stage).finish()
    }
}

/// How long a thread blocked in `wait()` polls for its wake-up (yielding
/// the CPU between looks) before it sleeps. On virtual machines without
/// guest halt polling, waking a sleeping thread on another vCPU costs an
/// inter-processor interrupt through the hypervisor. Measured here (criterion,
/// a cached read through the ring, fast path off): 52 us per round trip with
/// the waiter asleep, 16 us polling; with 4 callers on 2 vCPUs, 8.3 us before
/// and 6.8 us after (a pure spin there made it 14 us: spinning callers took
/// the CPU from the engine thread, hence the yield).
/// `OVERLAP_SPIN_US` overrides it (0 turns polling off).
pub(crate) fn spin_window() -> std::time::Duration {
    static SPIN_NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    std::time::Duration::from_nanos(*SPIN_NS.get_or_init(|| {
        std::env::var("OVERLAP_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_SPIN_NS, |us| us.min(1000) * 1000)
    }))
}

const DEFAULT_SPIN_NS: u64 = 20_000;

struct ThreadWaker {
    thread: Thread,
    /// Set by a wake-up, so that a polling waiter sees it without sleeping.
    notified: std::sync::atomic::AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.notified
            .store(true, std::sync::atomic::Ordering::Release);
        self.thread.unpark();
    }
}

/// Runs a future to completion on the current thread: what every `.wait()`
/// uses. Between polls it looks for its wake-up for up to 20 us (yielding the
/// CPU; `OVERLAP_SPIN_US` changes it, 0 turns it off), then parks.
///
/// ```
/// assert_eq!(overlap::block_on(async { 40 + 2 }), 42);
/// ```
pub fn block_on<F: Future>(fut: F) -> F::Output {
    use std::sync::atomic::Ordering;
    thread_local! {
        // One waker per thread, made once and lent to each poll: `wait()` is
        // on the page-cache fast path.
        static WAKER: (Arc<ThreadWaker>, Waker) = {
            let tw = Arc::new(ThreadWaker {
                thread: std::thread::current(),
                notified: std::sync::atomic::AtomicBool::new(false),
            });
            (tw.clone(), Waker::from(tw))
        };
    }
    let mut fut = std::pin::pin!(fut);
    let run = |tw: &ThreadWaker, waker: &Waker, fut: &mut std::pin::Pin<&mut F>| {
        let mut cx = Context::from_waker(waker);
        let spin = spin_window();
        loop {
            tw.notified.store(false, Ordering::Relaxed);
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            if !spin.is_zero() {
                let start = std::time::Instant::now();
                // Yield rather than spin: the vCPU stays awake, but a
                // runnable thread (the engine's, or another waiter) gets it.
                while !tw.notified.load(Ordering::Acquire) && start.elapsed() < spin {
                    std::thread::yield_now();
                }
            }
            if !tw.notified.load(Ordering::Acquire) {
                std::thread::park();
            }
        }
    };
    // Borrow the thread's waker without touching its reference count
    // (`try_with` is re-entrant, so a nested block_on is fine); during
    // thread teardown the thread-local is gone: make one.
    match WAKER.try_with(|(tw, w)| run(tw, w, &mut fut)) {
        Ok(v) => v,
        Err(_) => {
            let tw = Arc::new(ThreadWaker {
                thread: std::thread::current(),
                notified: std::sync::atomic::AtomicBool::new(false),
            });
            let w = Waker::from(tw.clone());
            run(&tw, &w, &mut fut)
        }
    }
}
