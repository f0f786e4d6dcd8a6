//! The ring watcher: the passes the engines' threads make while reactor
//! rings live (`super::super::engine_thread` calls [`watch_tick`] and [`watch_if_due`]).
//! No thread of its own: an operation on a reactor ring counts against its
//! engine until completed, so an engine, and on io_uring its thread, lives
//! while any is in flight. See [`ReactorRing`]'s docs for what it
//! guarantees.

use super::*;
use crate::cell::EngineLink;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};
use std::time::{Duration, Instant};

/// How often rings are looked at while operations are in flight: what
/// an operation on a ring that nobody reaps may wait, at most twice
/// over.
const BUSY_TICK: Duration = Duration::from_millis(10);
/// How often while nothing is in flight, or once operations have stayed
/// in flight for [`QUIET_LOOKS`] looks without any completing on a ring
/// the watcher served (a pipe nobody writes to).
const IDLE_TICK: Duration = Duration::from_millis(100);
const QUIET_LOOKS: u32 = 20;

// A busy ring is looked at more often than an idle one.
const _: () = assert!(BUSY_TICK.as_millis() < IDLE_TICK.as_millis());

/// Live rings made in this process copy (made, not yet dropped).
pub(super) static LIVE_RINGS: AtomicUsize = AtomicUsize::new(0);
/// Whether the last pass found operations in flight, and how many
/// passes in a row completed nothing.
static BUSY: AtomicBool = AtomicBool::new(false);
static QUIET: AtomicU32 = AtomicU32::new(0);
/// When the last pass started, in microseconds since `epoch()`.
static LAST_PASS_US: AtomicU64 = AtomicU64::new(0);

/// Orphaned rings, held until nothing is in flight on them.
static ORPHANS: Mutex<Vec<Arc<Inner>>> = Mutex::new(Vec::new());

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// How long an engine thread may sleep before the next pass is due;
/// `None` while no reactor ring lives (in this process copy).
pub(crate) fn watch_tick() -> Option<Duration> {
    if LIVE_RINGS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let busy = BUSY.load(Ordering::Relaxed) && QUIET.load(Ordering::Relaxed) < QUIET_LOOKS;
    Some(if busy { BUSY_TICK } else { IDLE_TICK })
}

/// Makes a pass if one is due (one engine thread makes it; others skip).
pub(crate) fn watch_if_due() {
    let Some(tick) = watch_tick() else { return };
    let now = epoch().elapsed().as_micros() as u64;
    let last = LAST_PASS_US.load(Ordering::Relaxed);
    // A little early is fine: timed waits end a bit before the tick.
    if now.saturating_sub(last) + 1000 < tick.as_micros() as u64 {
        return;
    }
    if LAST_PASS_US
        .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    pass();
}

/// Serves the orphans, and every live ring left unreaped since the
/// previous look.
fn pass() {
    let orphans = own_orphans();
    let (mut busy, mut reaped) = (false, false);
    for o in &orphans {
        debug_assert!(
            o.orphaned.load(Ordering::Acquire),
            "the watcher holds orphaned rings only"
        );
        let (b, r) = o.reap_now(true, true);
        (busy, reaped) = (busy | b, reaped | r);
    }
    for r in live_rings() {
        if !r.orphaned.load(Ordering::Acquire) {
            let (b, rr) = r.reap_now(false, true);
            (busy, reaped) = (busy | b, reaped | rr);
        }
    }
    BUSY.store(busy, Ordering::Relaxed);
    if reaped {
        QUIET.store(0, Ordering::Relaxed);
    } else {
        let _ = QUIET.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
            Some(q.saturating_add(1))
        });
    }
    release_idle_orphans();
}

/// The orphans this process copy serves. In a child after `fork` the
/// parent's orphans are let go of instead: their completion queue is memory
/// the child shares with the parent, and a child that reaped it would take
/// the parent's completions (dropping them closes only the child's copy of
/// each ring and leaks the child's copies of their operations).
fn own_orphans() -> Vec<Arc<Inner>> {
    let (own, inherited): (Vec<_>, Vec<_>) = {
        let Some(mut o) = lock_registry(&ORPHANS) else {
            return Vec::new();
        };
        let (own, inherited): (Vec<_>, Vec<_>) = std::mem::take(&mut *o)
            .into_iter()
            .partition(|r| !r.inherited());
        o.clone_from(&own);
        (own, inherited)
    };
    // Outside the lock: a drop may close a ring.
    drop(inherited);
    debug_assert!(
        own.iter().all(|r| !r.inherited()),
        "the watcher serves its own process copy's rings only"
    );
    own
}

/// Lets go of the orphans with nothing in flight (the last handle's
/// drop closes the ring).
pub(crate) fn release_idle_orphans() {
    let idle: Vec<Arc<Inner>> = {
        let Some(mut o) = lock_registry(&ORPHANS) else {
            return;
        };
        let (keep, idle): (Vec<_>, Vec<_>) = std::mem::take(&mut *o)
            .into_iter()
            .partition(|r| r.still_busy());
        *o = keep;
        debug_assert!(
            idle.iter().all(|r| r.orphaned.load(Ordering::Acquire)),
            "the watcher holds orphaned rings only"
        );
        idle
    };
    // Outside the lock: the drop of the last handle closes the ring.
    drop(idle);
}

/// Takes an orphaned ring: serves it once now, and the engines'
/// threads serve it until nothing is in flight.
pub(super) fn adopt(inner: Arc<Inner>) {
    debug_assert!(
        inner.orphaned.load(Ordering::Acquire),
        "only an orphaned ring is adopted"
    );
    let (busy, _) = inner.reap_now(true, true);
    if !busy {
        // Nothing in flight: nothing to serve (its last handle's drop
        // closes it).
        return;
    }
    let nudge = inner.any_engine();
    match lock_registry(&ORPHANS) {
        Some(mut o) => {
            debug_assert!(
                !o.iter().any(|r| Arc::ptr_eq(r, &inner)),
                "a ring is adopted once"
            );
            o.push(inner);
        }
        // A child whose parent's thread held the registry at the fork:
        // nobody would serve it; forget it (never freed under the
        // kernel).
        None => std::mem::forget(inner),
    }
    BUSY.store(true, Ordering::Relaxed);
    QUIET.store(0, Ordering::Relaxed);
    if let Some(engine) = nudge {
        engine.nudge();
    }
}

impl Inner {
    fn still_busy(&self) -> bool {
        match self.core.try_lock() {
            Ok(mut core) => core.in_flight() > 0 || core.pending() > 0,
            Err(_) => true,
        }
    }

    /// The engine of an operation in flight on the ring, if any.
    fn any_engine(&self) -> Option<Arc<dyn EngineLink>> {
        let core = self.core.try_lock().ok()?;
        core.any_in_flight().map(|op| op.engine())
    }
}

/// Reaps every live reactor ring from the calling thread: an engine
/// shutting down waits for their operations, and the executor task that
/// would reap them may be the very one blocked in the shutdown.
pub(crate) fn reap_all() {
    for inner in live_rings() {
        // Counted as the watcher's: reaped by someone other than the
        // ring's executor.
        let _ = inner.reap_now(true, true);
    }
}

/// Every live ring made in this process copy.
fn live_rings() -> Vec<Arc<Inner>> {
    let Some(live) = lock_registry(&LIVE) else {
        return Vec::new();
    };
    live.iter()
        .filter_map(Weak::upgrade)
        .filter(|r| !r.inherited())
        .collect()
}

impl Inner {
    /// Submits what is queued and completes what the ring holds, from the
    /// calling thread, unless someone else holds the ring (then it is being
    /// served). With `force` false, only what waited since the watcher's
    /// previous look. `by_watcher` counts what it completes in
    /// `Stats::reaped_by_watcher`. Returns whether operations are still in
    /// flight, and whether it completed any.
    fn reap_now(&self, force: bool, by_watcher: bool) -> (bool, bool) {
        debug_assert_eq!(
            self.generation,
            fork_generation(),
            "a child never reaps its parent's ring"
        );
        let mut done = Vec::new();
        let busy = {
            let Ok(mut core) = self.core.try_lock() else {
                return (true, false);
            };
            let marks = core.marks();
            let mut seen = lock(&self.seen);
            debug_assert!(
                marks.0 >= seen.0 && marks.1 >= seen.1,
                "a ring's marks only grow"
            );
            let stalled = *seen == marks;
            *seen = marks;
            if force || stalled || self.orphaned.load(Ordering::Acquire) {
                if core.pending() > 0 {
                    // Entries queued for a flusher that may never run (its
                    // executor is gone, or not being run).
                    core.submit(&mut done);
                }
                if core.reap_ready(&mut done) > 0 && by_watcher {
                    let n = done.len() as u64;
                    if let Some(d) = done.first() {
                        d.op.shared()
                            .counters
                            .watcher_reaped
                            .fetch_add(n, Ordering::Relaxed);
                    }
                }
                *seen = core.marks();
            }
            core.in_flight() > 0 || core.pending() > 0
        };
        let reaped = !done.is_empty();
        resubmit_after_exit(&mut done);
        count_out(&done);
        if let Some(p) = complete_all(&mut done) {
            crate::driver::report_panic("an operation reaped by the ring watcher", &p);
        }
        (busy, reaped)
    }
}
