//! Who calls `io_getevents`: the thread that waits (leader/follower), or
//! the background reaper when nobody waits.
//!
//! # The reaping role
//!
//! At most one thread at a time sleeps in `io_getevents` on the context
//! (the kernel wakes every thread asleep there at each completion, so two
//! would both wake). That thread holds the *role* (`State::role`):
//!
//! - **A waiting thread** (a [`Port`](crate::Port) worker in `next`, a
//!   thread in [`block_on`](crate::block_on) or `.wait()`) that finds the
//!   role free takes it ([`wait`]) and reaps: every event it gets is
//!   completed on its own thread (its own operation, and the operations of
//!   others, whose owners are woken as usual), until its own wake-up
//!   condition holds ([`Waiter::ready`]). It is the thread the kernel wakes:
//!   no hand-off through another thread. A waiting thread that finds the
//!   role taken registers as a *follower* (with a waker for promotion) and
//!   sleeps its own way (park, condition variable).
//! - **The reaper thread** takes the role only while nobody waits: for
//!   futures polled by other executors (tokio, smol), which have no thread
//!   blocked on them, and for operations that a waiting thread left in
//!   flight (a dropped future, a port nobody is collecting from).
//!
//! # Handover (every transition is made under the state lock)
//!
//! 1. A leader leaving (its condition holds, or its deadline passed)
//!    releases the role ([`fill_role`]): if operations are still in flight
//!    it promotes one registered follower (removes it from the list and
//!    wakes it; it takes the role when it comes back to wait, or, leaving
//!    itself, hands over again in turn); with no waiter left, it records
//!    the time (`left_at`) and makes sure the reaper is not asleep without
//!    a timeout (`ReaperSleep::Untimed` -> notified).
//! 2. The reaper, asleep with a timeout (`GRACE`), takes the role once no
//!    thread has waited for `GRACE`: a requester that leaves the port to
//!    submit and comes back within microseconds keeps the role for itself,
//!    and the two threads never wake each other. A submission by a future
//!    of another executor (`urgent`) skips the grace: nobody will wait for
//!    it.
//! 3. The reaper holding the role keeps reaping while nobody waits; once a
//!    thread registered as a follower, it releases the role after its
//!    current `io_getevents` returns and promotes a follower.
//! 4. A submission that finds the role free promotes a registered
//!    follower if there is one (followers stay registered when the role
//!    was released with nothing in flight, and may sleep for long on
//!    something else); with nobody waiting and the reaper asleep without a
//!    timeout, it notifies the reaper. The reaper sleeps
//!    without a timeout only with nothing in flight and after
//!    `IDLE_ROUNDS` idle rounds.
//!
//! Invariant (asserted in [`check`]): with operations in flight, the role
//! is held, or a follower has been promoted, or the reaper is awake or
//! asleep with a timeout. So an event is never left without a thread that
//! will call `io_getevents`.
//!
//! A leader asleep in `io_getevents` is also woken by whatever else its
//! condition waits for (a pool operation, the budget, a completion pushed
//! into its port by the pool): the waker sees it asleep there
//! ([`Waiter::enter`]) and *kicks* the context ([`Inner::kick`]: an
//! eventfd read submitted through AIO completes at once and posts an
//! event). Where the kernel cannot read an eventfd through AIO (before
//! 5.11) a leader sleeps at most `LEADER_TIMEOUT_NO_KICK` at a time.
//!
//! Completion on a leader runs user code (wakers, the `Drop` of a dropped
//! future's buffer) of operations that may not be its own: a panic there is
//! contained and reported, as on the reaper, and the leader goes on. User
//! code there that itself blocks on I/O of the same engine (a nested
//! `block_on`) finds the role held by its own thread (`Held`) and reaps
//! on, rather than sleeping as a follower of itself. The
//! slab keeps owning each operation's cell until its event is reaped,
//! whoever reaps it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use super::{Inner, IoEvent, State, EVENTS_PER_REAP, MAX_AIO_EVENTS, WAKE_KEY};
use crate::driver::Panic;
use crate::driver::{complete_all, Done};

/// How long the reaper leaves the role to the waiting threads after the
/// last one left with operations in flight.
const GRACE: Duration = Duration::from_millis(2);
/// Idle rounds (of `GRACE`) with nothing in flight before the reaper sleeps
/// without a timeout.
const IDLE_ROUNDS: u32 = 25;
/// A leader's longest sleep in `io_getevents` when kicks work (a safety
/// net only), and when they do not.
const LEADER_TIMEOUT: Duration = Duration::from_millis(100);
const LEADER_TIMEOUT_NO_KICK: Duration = Duration::from_millis(1);

/// Who holds the reaping role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Free,
    /// A waiting thread.
    Waiter,
    /// The background reaper thread.
    Reaper,
}

/// Where the reaper thread is when it does not hold the role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReaperSleep {
    /// Running (deciding, or holding the role).
    Awake,
    /// Asleep with a timeout of at most `GRACE`.
    Timed,
    /// Asleep until notified (nothing was in flight).
    Untimed,
    /// Notified out of `Untimed`, not yet running.
    Notified,
}

/// The reaping state (inside [`State`]).
pub(super) struct Reaping {
    pub role: Role,
    /// Threads inside [`wait`]: the leader and the followers.
    pub waiters: usize,
    /// Followers that can be promoted, with the waker that wakes each.
    pub followers: Vec<(u64, Waker)>,
    pub next_id: u64,
    pub reaper: ReaperSleep,
    /// A future of another executor is in flight and nobody waits: the
    /// reaper takes the role without the grace period.
    pub urgent: bool,
    /// When the last waiting thread left with operations in flight.
    pub left_at: Option<Instant>,
}

impl Reaping {
    pub(super) fn new() -> Reaping {
        Reaping {
            role: Role::Free,
            waiters: 0,
            followers: Vec::new(),
            next_id: 0,
            reaper: ReaperSleep::Awake,
            urgent: false,
            left_at: None,
        }
    }
}

/// A thread that waits on an AIO engine, seen by the protocol.
pub(crate) trait Waiter {
    /// Whether the thread has what it waits for (then it stops reaping).
    fn ready(&self) -> bool;
    /// Marks the thread asleep in `io_getevents` on `inner`, so that a
    /// wake-up from elsewhere kicks the context; `false` (and not marked)
    /// if it is ready already. Pairs with the waker side so that either
    /// this sees the wake-up or the waker sees the thread asleep.
    fn enter(&self, inner: &Arc<Inner>) -> bool;
    /// Marks the thread awake again.
    fn leave(&self);
    /// Sleeps the thread's own way until it is woken (by its own wake-up or
    /// through [`Waiter::promoter`]) or `deadline` passes.
    fn follow(&self, deadline: Option<Instant>);
    /// A waker that ends [`Waiter::follow`] (promotion to leader).
    fn promoter(&self) -> Waker;
    /// Marks the thread as leading (`true`) or not: a wake-up while it
    /// leads but is not in `io_getevents` needs neither a kick nor an
    /// unpark (it checks [`Waiter::ready`] before sleeping again).
    fn leading(&self, on: bool);
}

/// The protocol's invariants; see the module docs.
pub(super) fn check(st: &State) {
    let r = &st.reaping;
    debug_assert!(
        r.role != Role::Waiter || r.waiters >= 1,
        "a waiting thread holds the role only while it is counted"
    );
    debug_assert!(
        r.followers.len() <= r.waiters,
        "every registered follower is counted as waiting"
    );
    debug_assert!(
        st.slab.is_empty()
            || r.role != Role::Free
            || r.waiters > 0
            || r.reaper != ReaperSleep::Untimed,
        "operations in flight with nobody to reap them"
    );
    debug_assert!(
        r.role != Role::Reaper || r.reaper == ReaperSleep::Awake,
        "the reaper is awake while it holds the role"
    );
    debug_assert!(
        st.slab.len() <= MAX_AIO_EVENTS,
        "at most MAX_AIO_EVENTS operations in flight on the context"
    );
}

/// Called by a thread about to sleep while it may have operations on this
/// AIO context: takes the role and reaps until `w.ready()` or `deadline`,
/// or, with the role taken, sleeps as a follower. Returns `false` without
/// waiting when nothing is in flight on the context (the caller then sleeps
/// its own way).
pub(crate) fn wait(inner: &Arc<Inner>, w: &dyn Waiter, deadline: Option<Instant>) -> bool {
    let mut st = inner.lock();
    if st.slab.is_empty() {
        return false;
    }
    if Held::on_this_thread(inner) {
        // User code run at completion by this very thread, which holds the
        // role further up its stack (a waker or a buffer's `Drop` that
        // blocks on I/O): following would wait for itself. It reaps.
        debug_assert_ne!(
            st.reaping.role,
            Role::Free,
            "the role is held while a thread that took it completes"
        );
        drop(st);
        reap_until(inner, w, deadline);
        return true;
    }
    st.reaping.waiters += 1;
    if st.reaping.role == Role::Free {
        st.reaping.role = Role::Waiter;
        check(&st);
        drop(st);
        lead(inner, w, deadline);
        return true;
    }
    let id = st.reaping.next_id;
    st.reaping.next_id += 1;
    st.reaping.followers.push((id, w.promoter()));
    check(&st);
    drop(st);
    w.follow(deadline);
    let mut st = inner.lock();
    st.reaping.followers.retain(|(i, _)| *i != id);
    debug_assert!(
        st.reaping.waiters > st.reaping.followers.len(),
        "a follower leaving is counted as waiting, and no longer registered"
    );
    st.reaping.waiters -= 1;
    let promote = fill_role(inner, &mut st);
    check(&st);
    drop(st);
    wake_promoted(promote);
    true
}

/// Reaps on the calling thread (which holds the role) until `w.ready()`,
/// `deadline`, or nothing is in flight; then releases the role.
fn lead(inner: &Arc<Inner>, w: &dyn Waiter, deadline: Option<Instant>) {
    /// Releases the role however `lead` ends.
    struct Release<'a>(&'a Arc<Inner>, &'a dyn Waiter);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.1.leading(false);
            let mut st = self.0.lock();
            debug_assert_eq!(st.reaping.role, Role::Waiter, "the leader holds the role");
            debug_assert!(st.reaping.waiters >= 1, "the leader is counted as waiting");
            st.reaping.role = Role::Free;
            st.reaping.waiters -= 1;
            let promote = fill_role(self.0, &mut st);
            check(&st);
            drop(st);
            wake_promoted(promote);
        }
    }
    w.leading(true);
    let _release = Release(inner, w);
    let _held = Held::mark(inner);
    reap_until(inner, w, deadline);
}

/// The contexts whose reaping role the calling thread holds (further up
/// its stack, while it runs user code at completion).
struct Held(usize);

thread_local! {
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Held {
    fn mark(inner: &Arc<Inner>) -> Held {
        debug_assert!(
            !Held::on_this_thread(inner),
            "a thread takes a context's role once (a nested wait reaps on, unmarked)"
        );
        let p = Arc::as_ptr(inner) as usize;
        let _ = HELD.try_with(|h| h.borrow_mut().push(p));
        Held(p)
    }
    fn on_this_thread(inner: &Arc<Inner>) -> bool {
        let p = Arc::as_ptr(inner) as usize;
        HELD.try_with(|h| h.borrow().contains(&p)).unwrap_or(false)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            let i = h.iter().rposition(|p| *p == self.0);
            debug_assert!(
                i.is_some(),
                "a context's mark is on the thread that made it"
            );
            if let Some(i) = i {
                h.remove(i);
            }
        });
    }
}

/// The leader's loop (the calling thread holds the role): reaps until
/// `w.ready()`, `deadline`, or nothing is in flight.
fn reap_until(inner: &Arc<Inner>, w: &dyn Waiter, deadline: Option<Instant>) {
    let mut events = [IoEvent::default(); EVENTS_PER_REAP];
    let mut done: Vec<Done> = Vec::new();
    loop {
        debug_assert!(done.is_empty(), "the last batch was completed");
        if w.ready() {
            return;
        }
        let cap = if inner.kick_ok.load(Ordering::Relaxed) {
            LEADER_TIMEOUT
        } else {
            LEADER_TIMEOUT_NO_KICK
        };
        let timeout = match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return;
                }
                (d - now).min(cap)
            }
            None => cap,
        };
        if !w.enter(inner) {
            return;
        }
        let n = inner.getevents(&mut events, timeout);
        w.leave();
        let empty = {
            let mut st = inner.lock();
            debug_assert_ne!(st.reaping.role, Role::Free, "the leader holds the role");
            collect(&mut st, &events[..n], &mut done);
            debug_assert!(done.len() <= n, "one operation per event at most");
            st.slab.is_empty()
        };
        if !done.is_empty() {
            inner
                .counters
                .aio_reaped_by_waiters
                .fetch_add(done.len() as u64, Ordering::Relaxed);
            if let Some(p) = complete(inner, &mut done) {
                // Not necessarily this thread's operation: reported, as on
                // the reaper, and the leader goes on.
                crate::driver::report_panic("read or write reaped by a waiting thread", &p);
            }
        }
        if empty {
            return;
        }
    }
}

thread_local! {
    /// Whether this thread is inside [`complete`].
    static COMPLETING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is completing operations it reaped (user
/// code run at completion).
pub(super) fn completing_here() -> bool {
    COMPLETING.try_with(|c| c.get()).unwrap_or(false)
}

/// Completes what [`collect`] took out of the slab, then counts it out of
/// `State::completing` (waking the reaper, which may be waiting for that
/// at shutdown). Returns the first panic of user code.
fn complete(inner: &Inner, done: &mut Vec<Done>) -> Option<Panic> {
    let n = done.len();
    debug_assert!(n > 0, "called with a batch to complete");
    let outer = COMPLETING.try_with(|c| c.replace(true)).unwrap_or(false);
    let caught = complete_all(done);
    let _ = COMPLETING.try_with(|c| c.set(outer));
    let mut st = inner.lock();
    debug_assert!(st.completing >= n, "completions are counted in collect");
    st.completing -= n;
    if st.shutdown && st.completing == 0 {
        inner.reaper_cv.notify_all();
    }
    caught
}

/// Moves the operations of `events` out of the slab into `done`, counting
/// them in `State::completing` until [`complete`] has completed them.
pub(super) fn collect(st: &mut MutexGuard<'_, State>, events: &[IoEvent], done: &mut Vec<Done>) {
    for ev in events {
        if ev.data == WAKE_KEY {
            continue;
        }
        let Some(e) = st.slab.try_remove(ev.data as usize) else {
            debug_assert!(false, "an AIO event for an unknown operation");
            continue;
        };
        debug_assert!(
            ev.res <= e.op.kind().span().map_or(0, |s| s.len as i64),
            "the kernel moved at most the bytes asked for (a sync, none): {}",
            ev.res
        );
        done.push(Done {
            op: e.op,
            res: ev.res,
            inline: e.submitting,
        });
        st.completing += 1;
    }
    debug_assert!(
        st.completing >= done.len(),
        "what is collected is counted as completing until it is completed"
    );
}

/// The role was released (or a waiter left): hands it on. Returns the
/// follower to wake (after the lock is released).
fn fill_role(inner: &Inner, st: &mut State) -> Option<Waker> {
    let r = &mut st.reaping;
    if r.role != Role::Free || st.slab.is_empty() {
        return None;
    }
    if let Some((_, w)) = r.followers.pop() {
        debug_assert!(r.waiters >= 1, "a promoted follower is counted as waiting");
        return Some(w);
    }
    if r.waiters == 0 {
        r.left_at = Some(Instant::now());
        if r.reaper == ReaperSleep::Untimed {
            r.reaper = ReaperSleep::Notified;
            inner.reaper_cv.notify_one();
        }
    }
    // Otherwise every waiting thread is a promoted follower or on its way
    // into `wait`: it takes the role, or leaves through here. (With
    // nothing in flight, registered followers stay asleep: the next
    // submission promotes one, `submitted`.)
    None
}

pub(super) fn wake_promoted(w: Option<Waker>) {
    if let Some(w) = w {
        if let Some(p) = crate::driver::contain("promotion", || w.wake()) {
            crate::driver::report_panic("a promotion wake-up", &p);
        }
    }
}

/// A submission made the slab non-empty (or added to it): makes sure
/// someone will reap it (rule 4). `urgent`: a future of another executor,
/// which nobody will wait for. Returns a follower to wake (after the lock
/// is released).
///
/// Followers stay registered when the role was released with nothing in
/// flight (nobody is promoted then), and they may sleep for long on
/// something else (a thread in `block_on` awaiting a channel): with the
/// role free, one of them is promoted now, or nobody would reap (the
/// reaper leaves the role to the threads that wait).
#[must_use]
pub(super) fn submitted(inner: &Inner, st: &mut State, urgent: bool) -> Option<Waker> {
    debug_assert!(!st.slab.is_empty(), "called after a submission");
    let r = &mut st.reaping;
    if urgent && r.role == Role::Free && r.followers.is_empty() && r.waiters == 0 {
        r.urgent = true;
        if matches!(r.reaper, ReaperSleep::Timed | ReaperSleep::Untimed) {
            r.reaper = ReaperSleep::Notified;
            inner.reaper_cv.notify_one();
        }
        return None;
    }
    // Otherwise as when the role is released: a follower is promoted, or
    // with nobody waiting the grace starts now (the submitter, or a port's
    // worker, is about to wait for it), or a waiter on its way takes it.
    fill_role(inner, st)
}

/// The reaper thread: takes the role while nobody waits (module docs) and
/// completes what arrives, until shutdown with nothing in flight.
pub(super) fn reap(inner: &Arc<Inner>) {
    let mut events = [IoEvent::default(); EVENTS_PER_REAP];
    let mut done: Vec<Done> = Vec::with_capacity(EVENTS_PER_REAP);
    let mut idle_rounds = 0u32;
    loop {
        let st = inner.lock();
        let Some(st) = await_role(inner, st, &mut idle_rounds) else {
            return;
        };
        hold_role(inner, st, &mut events, &mut done);
    }
}

/// The reaper waits, the lock `st` held but for its sleeps, until the role
/// is its to take; `None` at shutdown with nothing in flight (then the
/// reaper ends). `idle_rounds`: consecutive rounds with nothing in flight.
fn await_role<'a>(
    inner: &'a Inner,
    mut st: MutexGuard<'a, State>,
    idle_rounds: &mut u32,
) -> Option<MutexGuard<'a, State>> {
    // Wait until the role is ours to take.
    loop {
        st.reaping.reaper = ReaperSleep::Awake;
        if st.shutdown && st.slab.is_empty() && st.completing == 0 {
            check(&st);
            return None;
        }
        let r = &st.reaping;
        let free = r.role == Role::Free && r.waiters == 0 && !st.slab.is_empty();
        let since = r.left_at.map_or(GRACE, |t| t.elapsed());
        if free && (r.urgent || st.shutdown || since >= GRACE) {
            return Some(st);
        }
        if st.slab.is_empty() {
            *idle_rounds += 1;
        } else {
            *idle_rounds = 0;
        }
        if *idle_rounds > IDLE_ROUNDS && !st.shutdown {
            st.reaping.reaper = ReaperSleep::Untimed;
            check(&st);
            st = inner.reaper_cv.wait(st).unwrap_or_else(|p| p.into_inner());
            debug_assert!(
                matches!(
                    st.reaping.reaper,
                    ReaperSleep::Untimed | ReaperSleep::Notified
                ),
                "an untimed sleep ends untimed (spuriously) or notified"
            );
            *idle_rounds = 0;
        } else {
            st.reaping.reaper = ReaperSleep::Timed;
            let nap = if free {
                GRACE.saturating_sub(since)
            } else {
                GRACE
            };
            st = inner
                .reaper_cv
                .wait_timeout(st, nap.max(Duration::from_micros(100)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            debug_assert!(
                matches!(
                    st.reaping.reaper,
                    ReaperSleep::Timed | ReaperSleep::Notified
                ),
                "a timed sleep ends timed or notified"
            );
        }
    }
}

/// The reaper takes the role (the lock `st` held) and reaps and completes
/// until a thread waits or nothing is in flight, then hands the role on.
fn hold_role<'a>(
    inner: &'a Arc<Inner>,
    mut st: MutexGuard<'a, State>,
    events: &mut [IoEvent; EVENTS_PER_REAP],
    done: &mut Vec<Done>,
) {
    debug_assert!(
        st.reaping.role == Role::Free && st.reaping.waiters == 0,
        "the reaper takes the role only when it is free and nobody waits"
    );
    st.reaping.role = Role::Reaper;
    st.reaping.urgent = false;
    let held = Held::mark(inner);
    // Hold the role while nobody waits.
    loop {
        let timeout = if st.shutdown {
            Duration::from_millis(10)
        } else {
            Duration::from_secs(1)
        };
        check(&st);
        drop(st);
        let n = inner.getevents(events, timeout);
        st = inner.lock();
        debug_assert_eq!(
            st.reaping.role,
            Role::Reaper,
            "only the reaper gives its role up"
        );
        collect(&mut st, &events[..n], done);
        let keep = st.reaping.waiters == 0 && !st.slab.is_empty();
        if !keep {
            st.reaping.role = Role::Free;
            drop(held);
            let promote = fill_role(inner, &mut st);
            check(&st);
            drop(st);
            wake_promoted(promote);
            if !done.is_empty() {
                // On this driver thread `contain` reports panics.
                let _ = complete(inner, done);
            }
            return;
        }
        if !done.is_empty() {
            drop(st);
            let _ = complete(inner, done);
            st = inner.lock();
        }
    }
}
