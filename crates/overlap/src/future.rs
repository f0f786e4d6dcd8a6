//! The cell that owns an operation's buffer while the kernel may touch it,
//! and the futures callers await.
//!
//! Ownership rule: once an operation is handed to a driver, the driver holds
//! an `Arc` of its [`OpCell`] until the kernel reports completion. The cell
//! owns the buffer. Dropping the caller's future drops only the caller's
//! `Arc`, so the buffer stays alive until the kernel is done with it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::admit::{Admission, FastPath, Running, Verdict};
use crate::cell::{to_result, Completable, EngineLink, EngineState};
use crate::driver::caller::{self, Route};
#[cfg(target_os = "linux")]
use crate::driver::uring::port::PortOp;
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::file::inner::FileRef;
use crate::limiter::Permit;
use crate::operation::OpKind;
#[cfg(target_os = "linux")]
use crate::port::queue::Completion;
use crate::port::queue::Queue as PortShared;
use crate::request::{Owner, Request};

enum State {
    Waiting(Option<Waker>),
    Done(i64),
    /// The owner took the result.
    Taken,
}

pub(crate) enum Target<B> {
    /// An [`Op`] future takes the result.
    Future,
    /// A driver delivers the completion to a port's queue, with the key.
    Port(Arc<PortShared<B>>, u64),
    /// A port's ring: the worker that reaps the completion takes it
    /// ([`OpCell::take`]); the key goes with it.
    Ring(u64),
}

/// How often a port's ring submits an operation again after its submitter
/// exited (each time from a thread alive when it did), before the failure
/// stands.
const MAX_RESUBMITS: u8 = 8;

pub(crate) struct OpCell<B> {
    kind: OpKind,
    target: Target<B>,
    shared: Arc<Shared>,
    /// For a port's ring: set until the submitter has recorded
    /// `inline_before`, the completion queue's tail right after the
    /// submitting call returned. A completion found at a position before it,
    /// or while the flag is still set, was inline.
    submitting: AtomicBool,
    inline_before: AtomicU32,
    /// Times a port's ring submitted it again after its submitter exited.
    resubmits: AtomicU8,
    /// Set once the result is in the slot (after `finish` left the lock):
    /// a future polled again with the waker it registered returns `Pending`
    /// without taking the lock while this is false ([`OpCell::poll_done`]).
    done: AtomicBool,
    /// Everything that changes hands at completion, under one lock: the
    /// driver takes it once in `finish`, the future once when it is done.
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
    /// `waker`: a future's, registered before anyone else can see the
    /// cell (no lock, and no window in which a completion finds none).
    pub(crate) fn new(
        req: Request<B>,
        target: Target<B>,
        permit: Option<Permit>,
        waker: Option<Waker>,
    ) -> Arc<OpCell<B>> {
        Arc::new(OpCell::value(req, target, permit, waker))
    }

    /// The cell `new` puts in its `Arc` (a port's ring writes it into a
    /// recycled one instead: [`crate::port`]'s spare cells).
    pub(crate) fn value(
        req: Request<B>,
        target: Target<B>,
        permit: Option<Permit>,
        waker: Option<Waker>,
    ) -> OpCell<B> {
        debug_assert!(
            matches!(target, Target::Future) || waker.is_none(),
            "only a future's operation carries a waker"
        );
        let Request {
            owner, buf, kind, ..
        } = req;
        let (shared, file) = match owner {
            Owner::File(f) => (f.shared().clone(), Some(f)),
            Owner::Engine(s) => (s, None),
        };
        OpCell {
            kind,
            target,
            shared,
            submitting: AtomicBool::new(false),
            inline_before: AtomicU32::new(0),
            resubmits: AtomicU8::new(0),
            done: AtomicBool::new(false),
            slot: Mutex::new(Slot {
                state: State::Waiting(waker),
                buf: Some(buf),
                permit,
                file,
            }),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot<B>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The result and the buffer once done, or registers the waker.
    /// `registered`: the identity of the waker this future registered last
    /// (`None` before the first), kept by the future: polled again with
    /// it while the operation is not done (a `join!` polls every future
    /// it holds on each wake-up), it returns `Pending` without the lock.
    /// That waker, or one equal to it (`Waker::will_wake`), is woken by
    /// `finish`, which sets `done` only after it took the waker.
    fn poll_done(&self, cx: &mut Context<'_>, registered: &mut Option<WakerId>) -> Poll<(i64, B)> {
        // SeqCst, as the store in `finish`: with the waker's own SeqCst
        // operations (a combinator clearing its "queued" flag before it
        // polls, `block_on` taking its wake-up flag) either this sees the
        // operation done or the completion's wake-up reaches the poller.
        if *registered == Some(WakerId::of(cx.waker())) && !self.done.load(Ordering::SeqCst) {
            return Poll::Pending;
        }
        let mut slot = self.slot();
        match &mut slot.state {
            State::Done(res) => {
                let res = *res;
                slot.state = State::Taken;
                let buf = slot.buf.take();
                debug_assert!(buf.is_some(), "a finished operation holds its buffer");
                match buf {
                    Some(buf) => Poll::Ready((res, buf)),
                    None => Poll::Pending,
                }
            }
            State::Waiting(w) => {
                let stored = match w {
                    Some(old) if old.will_wake(cx.waker()) => old,
                    _ => w.insert(cx.waker().clone()),
                };
                *registered = Some(WakerId::of(stored));
                Poll::Pending
            }
            State::Taken => {
                debug_assert!(false, "an operation's result is taken once");
                Poll::Pending
            }
        }
    }

    /// For a port's ring: the operation's result (from the completion's
    /// `res`, unless it was preset), the buffer and the permit, taken once by
    /// the worker that reaped the completion.
    pub(crate) fn take(&self, cqe_res: i32, inline: bool) -> (i64, Option<(B, Option<Permit>)>) {
        debug_assert!(
            matches!(self.target, Target::Ring(_)),
            "only an operation on a port's ring is taken from it"
        );
        self.kind.performed();
        let mut slot = self.slot();
        debug_assert!(
            !matches!(slot.state, State::Taken),
            "an operation's completion is taken once"
        );
        let res = match slot.state {
            State::Done(preset) => preset,
            _ => self.kind.result(cqe_res),
        };
        slot.state = State::Taken;
        let file = slot.file.take();
        let out = slot.buf.take().map(|b| (b, slot.permit.take()));
        drop(slot);
        drop(file);
        self.shared.counters.record(&self.kind, res, inline);
        (res, out)
    }

    /// Records a result obtained before submission (a port's ring delivers
    /// it through a no-op).
    pub(crate) fn preset(&self, res: i64) {
        debug_assert!(
            matches!(self.target, Target::Ring(_)),
            "only an operation on a port's ring has its result preset"
        );
        let mut slot = self.slot();
        debug_assert!(
            !matches!(slot.state, State::Taken),
            "a result is preset before the completion is taken"
        );
        slot.state = State::Done(res);
        drop(slot);
        self.done.store(true, Ordering::SeqCst);
    }

    pub(crate) fn set_submitting(&self, on: bool) {
        self.submitting.store(on, Ordering::Release);
    }

    /// Releases the operation's claim on its file (the kernel holds its own
    /// reference once it has taken the submission).
    pub(crate) fn release_file(&self) {
        // Keep the file (not its descriptor's claim): a resubmission claims
        // it again, or learns that it was closed meanwhile. A close that
        // waited for it is woken (user code) after the slot's lock.
        let close = self.slot().file.as_mut().and_then(FileRef::release);
        if let Some(w) = close {
            w.wake();
        }
    }

    /// Claims the operation's file again before a resubmission: `false` if
    /// the file was closed since (its descriptor number may name another
    /// file by now, so the operation must not be submitted again).
    pub(crate) fn reclaim_file(&self) -> bool {
        match self.slot().file.as_mut() {
            Some(f) => f.start().is_ok(),
            None => true,
        }
    }

    /// Counts a resubmission after the submitter's exit; `false` once the
    /// operation came back failed too often to try again.
    pub(crate) fn may_resubmit(&self) -> bool {
        self.resubmits.fetch_add(1, Ordering::Relaxed) < MAX_RESUBMITS
    }

    /// The port's user asked to cancel the operation: a `-ECANCELED`
    /// result then stands and is not taken for the work of a submitter's
    /// exit (no resubmission).
    pub(crate) fn forbid_resubmit(&self) {
        self.resubmits.store(MAX_RESUBMITS, Ordering::Relaxed);
    }

    /// Records the completion queue's tail right after submission.
    pub(crate) fn set_inline_before(&self, tail: u32) {
        self.inline_before.store(tail, Ordering::Relaxed);
        self.submitting.store(false, Ordering::Release);
    }

    /// Whether a completion found at queue position `pos` was inline.
    pub(crate) fn inline_at(&self, pos: u32) -> bool {
        self.submitting.load(Ordering::Acquire)
            || (pos.wrapping_sub(self.inline_before.load(Ordering::Relaxed)) as i32) < 0
    }

    /// The key of a port's operation.
    pub(crate) fn port_key(&self) -> u64 {
        match self.target {
            Target::Port(_, key) | Target::Ring(key) => key,
            Target::Future => 0,
        }
    }
}

impl<B: Send + 'static> Completable for OpCell<B> {
    fn kind(&self) -> &OpKind {
        &self.kind
    }

    #[inline]
    fn shared(&self) -> &EngineState {
        &self.shared.state
    }

    fn engine(&self) -> Arc<dyn EngineLink> {
        self.shared.clone()
    }

    fn complete(&self, res: i64, inline: bool) {
        self.kind.performed();
        self.finish(res, inline);
    }

    #[cfg(windows)]
    fn queue_key(&self) -> Option<(usize, u64)> {
        match &self.target {
            Target::Port(q, key) => Some((port_id(q), *key)),
            Target::Future | Target::Ring(_) => None,
        }
    }

    fn finish(&self, res: i64, inline: bool) {
        self.shared.counters.record(&self.kind, res, inline);
        let (file, permit, waker, buf) = {
            let mut slot = self.slot();
            let waker = match std::mem::replace(&mut slot.state, State::Done(res)) {
                State::Waiting(w) => w,
                State::Done(_) | State::Taken => {
                    debug_assert!(false, "an operation completes once");
                    None
                }
            };
            // A port takes the buffer now; a future takes it when polled.
            let buf = match self.target {
                Target::Port(..) => {
                    slot.state = State::Taken;
                    slot.buf.take()
                }
                Target::Future | Target::Ring(_) => None,
            };
            (slot.file.take(), slot.permit.take(), waker, buf)
        };
        // After the lock: a poll that sees it finds the result; one that
        // does not is woken below through the waker taken above (SeqCst:
        // see `poll_done`).
        self.done.store(true, Ordering::SeqCst);
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
            Target::Port(port, key) => {
                debug_assert!(buf.is_some(), "a port's operation delivers its buffer once");
                if let Some(buf) = buf {
                    port.deliver(*key, res, buf, permit, inline);
                }
            }
            Target::Ring(_) => {
                debug_assert!(false, "a port's ring operation is taken, not completed");
                drop(permit);
            }
        }
    }
}

#[cfg(target_os = "linux")]
impl<B: Send + 'static> PortOp for OpCell<B> {
    type Completion = Completion<B>;

    fn preset(&self, res: i64) {
        OpCell::preset(self, res);
    }
    fn set_submitting(&self, on: bool) {
        OpCell::set_submitting(self, on);
    }
    fn release_file(&self) {
        OpCell::release_file(self);
    }
    fn reclaim_file(&self) -> bool {
        OpCell::reclaim_file(self)
    }
    fn may_resubmit(&self) -> bool {
        OpCell::may_resubmit(self)
    }
    fn forbid_resubmit(&self) {
        OpCell::forbid_resubmit(self);
    }
    fn set_inline_before(&self, tail: u32) {
        OpCell::set_inline_before(self, tail);
    }
    fn inline_at(&self, pos: u32) -> bool {
        OpCell::inline_at(self, pos)
    }
    fn port_key(&self) -> u64 {
        OpCell::port_key(self)
    }
    fn take_completion(&self, cqe_res: i32, inline: bool) -> Option<Completion<B>> {
        let key = self.port_key();
        let (res, taken) = self.take(cqe_res, inline);
        let (buf, permit) = taken?;
        drop(permit);
        Some(Completion {
            key,
            result: to_result(res),
            buf,
            inline,
        })
    }
}

impl<B> Drop for OpCell<B> {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(|p| p.into_inner());
        if let State::Done(res) = slot.state {
            // Nobody took the result (the future was dropped): release what
            // it owns (an opened descriptor).
            self.kind.unclaimed(res);
        }
    }
}

/// Runs a buffer-less operation through the engine: on `owner`'s file (its
/// engine's), or on the engine alone.
pub(crate) async fn run_op(owner: Owner, kind: OpKind) -> Result<i64> {
    let req = Request {
        owner,
        buf: (),
        kind,
        bytes: 0,
        fast_path: false,
    };
    let (res, ()) = Op::request(req).await;
    res.map(|n| n as i64)
}

/// A waker's identity: what `Waker::will_wake` compares (its data and
/// vtable pointers), kept as numbers so that the future stays `Send`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct WakerId(usize, usize);

impl WakerId {
    fn of(w: &Waker) -> WakerId {
        let (data, vtable) = caller::waker_id(w);
        WakerId(data, vtable)
    }
}

enum Stage<B> {
    Ready(Result<usize>, B),
    Admitting(Admission<B>),
    /// With the identity of the waker registered last (`OpCell::poll_done`).
    InFlight(Arc<OpCell<B>>, Option<WakerId>),
    Finished,
}

/// An operation on a file: a [`Future`] resolving to the result and the
/// buffer, returned on success and on error alike.
///
/// The operation is submitted on its first poll (as every Rust future, it is
/// lazy; poll many at once, e.g. with `futures::future::join_all`, to have
/// them in flight together). Dropping it after that is safe: the engine keeps
/// the buffer until the kernel has finished with it, and the operation still
/// runs to completion. For threads that are not async, [`Op::wait`] blocks:
/// it submits the operation on the calling thread's own ring and sleeps in
/// the kernel until the completion wakes it.
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
            stage: Stage::Admitting(Admission::new(req, FastPath::BeforeBudget)),
        }
    }

    /// Blocks the calling thread until the operation completes. On a
    /// thread-pool engine (or for an operation the AIO driver leaves to the
    /// pool) the system call runs on the calling thread, as `pread` would:
    /// handing it to a worker and sleeping would only add a wake-up. On
    /// io_uring it goes through the thread's own ring, and on Windows'
    /// completion ports a read or write carries the thread's event: either
    /// way the kernel's completion wakes this thread itself.
    pub fn wait(mut self) -> (Result<usize>, B) {
        if let Some(out) = self.answered_at_once() {
            return out;
        }
        crate::wait::block_on_one(self)
    }

    /// The page-cache fast path (and the refusals before it) without a
    /// waiter: a hit returns here, before `block_on` sets one up.
    fn answered_at_once(&mut self) -> Option<(Result<usize>, B)> {
        let Stage::Admitting(adm) = &mut self.stage else {
            return None;
        };
        let v = adm.try_fast()?;
        let req = adm.take()?;
        self.stage = Stage::Finished;
        Some(match v {
            Verdict::Cached(n, _) => (Ok(n), req.buf),
            Verdict::Refused(e) => (Err(e), req.buf),
            Verdict::Go(_) | Verdict::Full => {
                debug_assert!(false, "the fast path admits nothing");
                (Err(Error::WouldBlock), req.buf)
            }
        })
    }
}

impl<B> Unpin for Op<B> {}

impl<B: Send + 'static> Future for Op<B> {
    type Output = (Result<usize>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // The stage is matched in place and replaced only when it changes:
        // a pending poll moves nothing (an admission holds the request, a
        // few hundred bytes).
        match &mut this.stage {
            Stage::InFlight(cell, registered) => match cell.poll_done(cx, registered) {
                Poll::Ready((res, buf)) => {
                    this.stage = Stage::Finished;
                    Poll::Ready((to_result(res), buf))
                }
                Poll::Pending => Poll::Pending,
            },
            // The one admission path (`crate::admit`); then the future is
            // submitted where who polls it waits.
            // The request stays in the admission until the verdict, then
            // moves once, into its cell.
            Stage::Admitting(adm) => match adm.poll_verdict(cx, &Running) {
                Poll::Ready(v) => {
                    let Some(req) = adm.take() else {
                        debug_assert!(false, "a verdict leaves the request to take");
                        return Poll::Pending;
                    };
                    match v {
                        Verdict::Go(permit) => {
                            let route = caller::route_for(cx.waker());
                            // Registered in the new cell, without its lock.
                            let waker = cx.waker().clone();
                            let id = WakerId::of(&waker);
                            let cell =
                                submit(req, Target::Future, Some(permit), route, Some(waker));
                            this.stage = Stage::InFlight(cell, Some(id));
                            // Polled again at once: an inline completion is ready.
                            Pin::new(this).poll(cx)
                        }
                        Verdict::Cached(n, _) => {
                            this.stage = Stage::Finished;
                            Poll::Ready((Ok(n), req.buf))
                        }
                        Verdict::Refused(e) => {
                            this.stage = Stage::Finished;
                            Poll::Ready((Err(e), req.buf))
                        }
                        Verdict::Full => {
                            debug_assert!(false, "a full budget queues, it is no verdict");
                            this.stage = Stage::Finished;
                            Poll::Ready((Err(Error::WouldBlock), req.buf))
                        }
                    }
                }
                Poll::Pending => Poll::Pending,
            },
            Stage::Ready(..) => match std::mem::replace(&mut this.stage, Stage::Finished) {
                Stage::Ready(res, buf) => Poll::Ready((res, buf)),
                _ => unreachable!("matched above"),
            },
            Stage::Finished => panic!("Op polled after completion"),
        }
    }
}

/// Moves a request into a cell and hands it to a driver, by who polls it
/// (`route`): a future polled by [`block_on`](crate::block_on) itself on an
/// io_uring engine goes to the calling thread's own ring (the thread will
/// wait for it there); a future polled inside
/// [`ReactorRing::enter`](crate::ReactorRing::enter) goes to that reactor
/// ring; anything else to the engine's driver. An operation polled by
/// `Op::wait` on a thread-pool engine (or one the AIO driver leaves to the
/// pool, or any on an engine built with `waits_on_caller`) runs here, on the
/// waiting thread: the blocking call a worker would make, without the two
/// hand-offs.
pub(crate) fn submit<B: Send + 'static>(
    req: Request<B>,
    target: Target<B>,
    permit: Option<Permit>,
    route: Route,
    waker: Option<Waker>,
) -> Arc<OpCell<B>> {
    let shared = req.shared();
    let uring = shared.driver.is_uring();
    // A parent's engine in a forked child runs nothing, on no route: the
    // child's calls on the parent's handles fail at once (below).
    let forked = shared.forked();
    let inline = runs_on_caller(shared, &req.kind, route, uring, forked);
    let own_ring = route != Route::Driver && uring;
    let for_future = matches!(target, Target::Future);
    let awaited = is_awaited(shared, &target, route);
    // An operation run here is done before this returns: it needs no
    // waker (storing one would only have the completion wake its own
    // poller).
    let waker = if inline { None } else { waker };
    let cell = OpCell::new(req, target, permit, waker);
    // Borrowed from the cell, which outlives every use below.
    let shared: &Shared = &cell.shared;
    shared.counters.submitted.fetch_add(1, Ordering::Relaxed);
    let op: Arc<dyn Completable> = cell.clone();
    if inline {
        run_here(&cell, op, uring);
        return cell;
    }
    // The ring whose waiter will be woken, on io_uring (the routing of
    // `crate::driver::uring`); else the engine's driver.
    let op = if uring && (own_ring || for_future) && !forked {
        match caller::submit_on_ring(op, route, for_future) {
            Ok(()) => return cell,
            Err(op) => op,
        }
    } else {
        op
    };
    if forked {
        // A child after `fork`, with an engine of the parent: its driver's
        // threads (and its AIO context, its rings) are the parent's and not
        // here, and a blocking call on this thread would act on the parent's
        // handles as if they were the child's. Refused with what to do (a
        // close still closes the child's copy of its descriptor).
        op.finish(op.kind().refused_in_child(), true);
        return cell;
    }
    // A thread in `.wait()` on IOCP waits on its own call's event.
    #[cfg(windows)]
    if route == Route::Inline && for_future {
        shared.driver.submit_waited(op);
        return cell;
    }
    #[cfg(target_os = "linux")]
    if route != Route::Driver {
        if let Some(aio) = shared.driver.aio() {
            crate::driver::uring::thread::note_aio(aio);
        }
    }
    shared.driver.submit_as(op, !awaited);
    cell
}

/// The identity of a port's queue, as drivers see it
/// ([`Completable::queue_key`]).
#[cfg(windows)]
pub(crate) fn port_id<B>(q: &Arc<PortShared<B>>) -> usize {
    Arc::as_ptr(q).cast::<()>() as usize
}

/// Whether an operation of `kind` polled by `route` runs on the calling
/// thread (`uring`: the engine's driver is io_uring; `forked`: the engine
/// is a parent's).
#[inline]
fn runs_on_caller(shared: &Shared, kind: &OpKind, route: Route, uring: bool, forked: bool) -> bool {
    // `waits_on_caller`: the call is made here unless this thread's own
    // ring holds operations, which only a ring's entry would submit.
    route == Route::Inline
        && (shared.driver.pool_takes(kind)
            || (shared.waits_on_caller && !(uring && caller::own_ring_busy())))
        && !shared.is_shut()
        && !forked
}

/// Whether a thread will wait for an operation delivered to `target` and
/// polled by `route`.
#[inline]
fn is_awaited<B: Send + 'static>(shared: &Shared, target: &Target<B>, route: Route) -> bool {
    // A thread in `block_on` will wait for the operation, and a port's
    // worker for a port's (unless the port's workers sleep on its condition
    // variable, not reaping): on AIO that thread reaps it (`aio::lead`).
    match target {
        Target::Future => route != Route::Driver,
        Target::Port(q, _) => !(shared.driver.is_aio() && q.has_sleepers()),
        Target::Ring(_) => true,
    }
}

/// Runs `op`, the operation of `cell`, on the calling thread (`uring`: the
/// engine's driver is io_uring).
#[inline]
fn run_here<B: Send + 'static>(cell: &OpCell<B>, op: Arc<dyn Completable>, uring: bool) {
    if uring {
        // What this thread queued on a port's ring inside
        // `Port::batch` goes to the kernel before it blocks here.
        caller::flush_deferred();
    }
    crate::driver::pool::run_on_caller(op);
    // The future's lock-free check (`OpCell::poll_done`) relies on it.
    debug_assert!(
        cell.done.load(Ordering::SeqCst),
        "an operation run on the caller is done"
    );
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

    /// Blocks the calling thread until the operation completes (on a
    /// thread-pool engine, running its system calls on the calling thread).
    pub fn wait(self) -> T {
        crate::wait::block_on_one(self)
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
            Stage::Admitting(ref a) if a.waiting() => "waiting for budget",
            Stage::Admitting(_) => "not submitted",
            Stage::InFlight(..) => "in flight",
            Stage::Finished => "finished",
        };
        f.debug_struct("Op").field("stage", &stage).finish()
    }
}
