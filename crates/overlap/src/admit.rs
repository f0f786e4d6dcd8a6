//! The one admission path: how a prepared request becomes an operation the
//! engine runs. Futures ([`Op`](crate::Op)) and completion ports
//! ([`Port`](crate::Port)) both go through [`Admission`]:
//!
//! 1. **start**: the engine runs, and the request counts itself in on its
//!    file (which fails once the file is closed);
//! 2. **fast path** ([`FastPath`]): a buffered read tries the page cache on
//!    the caller's thread (`preadv2(RWF_NOWAIT)`, [`crate::sys`]);
//! 3. **budget**: a permit from the in-flight limiter, waiting in order of
//!    arrival or, without a context to wake, refused with
//!    [`Error::WouldBlock`];
//! 4. **shutdown check** ([`Gate`]): the engine may have stopped while the
//!    request waited for budget;
//! 5. **submit**: left to the caller, which knows where the operation goes
//!    (a future by who polls it, [`crate::future::submit`]; a port to its ring
//!    or its queue).
//!
//! Where the fast path sits is the one difference between them, for a
//! reason ([`FastPath`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::engine::Shared;
use crate::error::Error;
use crate::limiter::{Acquire, Permit};
use crate::request::Request;

/// Where the caller-side page-cache fast path runs in the admission.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FastPath {
    /// Before the budget (a future): a hit goes back to the caller who
    /// awaits it at once, so it needs no budget and does not wait for any.
    BeforeBudget,
    /// After the budget and the shutdown check (a port's queue): a hit is a
    /// completion like any other, which holds its share of the budget until
    /// a worker takes it, so completions nobody collects cannot pile up
    /// without bound; and a port handle that fails when full (`WhenFull::Fail`) refuses on a full budget, hit or not.
    AfterBudget,
    /// Not at all (a port's ring): the kernel tries a buffered read against
    /// the page cache during submission and completes it inline on a hit,
    /// so the caller-side try would only add a system call.
    Never,
}

/// The shutdown check after the budget: whether the engine still takes the
/// operation.
pub(crate) trait Gate {
    fn admits(&self, shared: &Shared) -> bool;
}

/// The engine's own check: it has not begun to shut down. (A port's ring
/// also counts the operation in for shutdown to wait for.)
pub(crate) struct Running;

impl Gate for Running {
    #[inline]
    fn admits(&self, shared: &Shared) -> bool {
        !shared.is_shut()
    }
}

/// What admission gives back.
pub(crate) enum Admitted<B> {
    /// The fast path served the read: the byte count, the buffer, and the
    /// permit when it was taken first ([`FastPath::AfterBudget`]).
    Cached(usize, B, Option<Permit>),
    /// Admitted with its permit: the caller submits it.
    Go(Request<B>, Permit),
}

/// The outcome of admission: admitted, or refused with the error and the
/// buffer given back.
pub(crate) type Outcome<B> = std::result::Result<Admitted<B>, (Error, B)>;

enum Stage<B> {
    /// Not started.
    Init(Request<B>),
    /// Waiting for budget.
    Budget(Acquire, Request<B>),
    /// The outcome was given.
    Done,
}

/// A request on its way through steps 1 to 4 (module docs), waiting for
/// budget when it is full. [`Admission::now`] is the same path for a caller
/// that does not wait.
pub(crate) struct Admission<B> {
    stage: Stage<B>,
    fast: FastPath,
}

impl<B> Admission<B> {
    pub(crate) fn new(req: Request<B>, fast: FastPath) -> Admission<B> {
        Admission {
            stage: Stage::Init(req),
            fast,
        }
    }

    /// Admits `req` without waiting: a full budget refuses it with
    /// [`Error::WouldBlock`].
    pub(crate) fn now(req: Request<B>, fast: FastPath, gate: &impl Gate) -> Outcome<B> {
        let mut req = req;
        match now_in_place(&mut req, fast, gate) {
            Verdict::Full => Err((Error::WouldBlock, req.buf)),
            v => outcome(req, v),
        }
    }

    /// Drives the admission; `Pending` while it waits for budget (woken
    /// through `cx` when a permit is granted).
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, gate: &impl Gate) -> Poll<Outcome<B>> {
        match self.poll_verdict(cx, gate) {
            Poll::Ready(v) => match self.take() {
                Some(req) => Poll::Ready(outcome(req, v)),
                None => {
                    debug_assert!(false, "a verdict leaves the request to take");
                    Poll::Pending
                }
            },
            Poll::Pending => Poll::Pending,
        }
    }

    /// [`poll`](Self::poll) with the request left where it is: the verdict
    /// (never [`Verdict::Full`]: a full budget queues), after which
    /// [`take`](Self::take) moves the request out, once. A future's poll
    /// moves its request a single time this way, into its cell.
    pub(crate) fn poll_verdict(&mut self, cx: &mut Context<'_>, gate: &impl Gate) -> Poll<Verdict> {
        loop {
            match &mut self.stage {
                Stage::Init(req) => {
                    // Room in the budget and nobody queued before: no
                    // waiting future to make; else it queues.
                    match now_in_place(req, self.fast, gate) {
                        Verdict::Full => {}
                        v => return Poll::Ready(v),
                    }
                    let acq = req.shared().limiter.queue(req.bytes);
                    if let Stage::Init(req) = std::mem::replace(&mut self.stage, Stage::Done) {
                        self.stage = Stage::Budget(acq, req);
                    }
                    debug_assert!(
                        matches!(self.stage, Stage::Budget(..)),
                        "a request the budget could not take waits for it, from Init"
                    );
                }
                Stage::Budget(acq, req) => {
                    return match Pin::new(acq).poll(cx) {
                        Poll::Ready(permit) => Poll::Ready(admitted(req, permit, self.fast, gate)),
                        Poll::Pending => Poll::Pending,
                    };
                }
                Stage::Done => {
                    debug_assert!(false, "admission polled after its outcome");
                    return Poll::Pending;
                }
            }
        }
    }

    /// The request, once [`poll_verdict`](Self::poll_verdict) gave its
    /// verdict (`None` after that: it was taken).
    pub(crate) fn take(&mut self) -> Option<Request<B>> {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Init(req) | Stage::Budget(_, req) => Some(req),
            Stage::Done => None,
        }
    }

    /// Steps 1 and 2 alone, before anything else of the admission: for a
    /// caller that answers a page-cache hit without a context or a waiter
    /// (`Op::wait`). The verdict when admission ended there (a hit, or a
    /// refusal), or `None` and the request goes on through
    /// [`poll_verdict`](Self::poll_verdict) with its fast path spent: a
    /// miss costs one `preadv2`, not two.
    pub(crate) fn try_fast(&mut self) -> Option<Verdict> {
        let Stage::Init(req) = &mut self.stage else {
            return None;
        };
        if self.fast != FastPath::BeforeBudget || !req.fast_path {
            return None;
        }
        let v = begin(req, self.fast);
        debug_assert!(
            matches!(v, None | Some(Verdict::Cached(..) | Verdict::Refused(_))),
            "before the budget admission ends in a hit or a refusal"
        );
        if v.is_none() {
            req.fast_path = false;
        }
        v
    }

    /// Whether it waits for budget (for `Debug`).
    pub(crate) fn waiting(&self) -> bool {
        matches!(self.stage, Stage::Budget(..))
    }
}

/// What admission decided about a request it worked on in place
/// ([`now_in_place`]): the request itself stays with the caller, which moves
/// it once, to where it goes (a port's cell), or gives its buffer back.
pub(crate) enum Verdict {
    /// Admitted with its permit: the caller submits it.
    Go(Permit),
    /// The fast path read `n` bytes into the request's buffer; the permit
    /// when it was taken first ([`FastPath::AfterBudget`]).
    Cached(usize, Option<Permit>),
    /// Refused (the file closed, the engine shut down).
    Refused(Error),
    /// The budget is full: the caller refuses ([`Error::WouldBlock`]) or
    /// waits ([`Admission`]).
    Full,
}

/// Steps 1 to 4 without waiting, on the request in place (no move of the
/// request through the steps: at 136 bytes, each was a `memcpy` on a
/// port's hot path). [`Admission::now`] is this with the request moved into
/// its outcome.
#[inline]
pub(crate) fn now_in_place<B>(req: &mut Request<B>, fast: FastPath, gate: &impl Gate) -> Verdict {
    if let Some(end) = begin(req, fast) {
        return end;
    }
    match req.shared().limiter.try_acquire(req.bytes) {
        Some(permit) => admitted(req, permit, fast, gate),
        None => Verdict::Full,
    }
}

/// Steps 1 and (before the budget) 2: `None` to go on to the budget, or
/// the verdict when admission ends here.
#[inline]
fn begin<B>(req: &mut Request<B>, fast: FastPath) -> Option<Verdict> {
    if let Err(e) = req.start() {
        return Some(Verdict::Refused(e));
    }
    if fast == FastPath::BeforeBudget {
        if let Some(n) = read_nowait(req) {
            return Some(Verdict::Cached(n, None));
        }
    }
    None
}

/// Steps 4 and (after the budget) 2, once the permit is held.
#[inline]
fn admitted<B>(req: &mut Request<B>, permit: Permit, fast: FastPath, gate: &impl Gate) -> Verdict {
    if !gate.admits(req.shared()) {
        // The engine stopped while this waited for budget.
        drop(permit);
        return Verdict::Refused(Error::Shutdown);
    }
    if fast == FastPath::AfterBudget {
        if let Some(n) = read_nowait(req) {
            return Verdict::Cached(n, Some(permit));
        }
    }
    Verdict::Go(permit)
}

/// The outcome of a verdict reached through `poll` (which holds the request
/// by value).
fn outcome<B>(req: Request<B>, v: Verdict) -> Outcome<B> {
    match v {
        Verdict::Go(permit) => Ok(Admitted::Go(req, permit)),
        Verdict::Cached(n, permit) => Ok(Admitted::Cached(n, req.buf, permit)),
        Verdict::Refused(e) => Err((e, req.buf)),
        Verdict::Full => {
            debug_assert!(false, "a full budget queues, it is no outcome");
            Err((Error::WouldBlock, req.buf))
        }
    }
}

/// The cache fast path: `preadv2(RWF_NOWAIT)` on the caller's thread. Returns
/// the byte count when the whole request was served from the page cache (or
/// the read ended at end of file); `None` sends it to the driver.
fn read_nowait<B>(req: &mut Request<B>) -> Option<usize> {
    if !req.fast_path {
        return None;
    }
    let counters = &req.shared().counters;
    let crate::operation::OpKind::Read(read) = &req.kind else {
        return None;
    };
    // SAFETY: the read's memory is the request's own buffer, exclusively
    // borrowed through `req` for the duration of this call.
    let n = unsafe {
        crate::sys::nowait_into(
            &**counters,
            req.file().map(|f| &f.inner().misses),
            read.fd,
            read.ptr,
            read.len as usize,
            read.offset,
        )
    };
    debug_assert!(
        n.is_none_or(|n| n <= read.len as usize),
        "the fast path reads at most the request's length into its buffer"
    );
    n
}
