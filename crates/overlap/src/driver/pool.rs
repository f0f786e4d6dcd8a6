//! The thread-pool driver: blocking system calls on at most `max_threads`
//! threads, started on demand. A real fallback, not a toy: it is what
//! `fio --ioengine=psync --numjobs=N` does.
//!
//! Two things keep it from being slower than psync (figures in
//! BENCHMARKS.md): a thread blocked in `Op::wait` makes the call itself
//! ([`run_on_caller`]: one context switch per read, as `pread`, where the
//! hand-off to a worker and back made five), and an idle worker looks for
//! work for 2.5 spin windows (50 us) before it sleeps, so that the next submission,
//! which usually follows a completion within microseconds, needs no futex
//! wake-up.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::cell::Completable;
use crate::stats::Counters;

pub(crate) struct PoolDriver {
    inner: Arc<Inner>,
}

struct Inner {
    st: Mutex<State>,
    /// Operations queued (the queue's length, readable without the lock by
    /// workers looking for work).
    queued: AtomicUsize,
    cv: Condvar,
    max_threads: usize,
    counters: Arc<Counters>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

struct State {
    queue: VecDeque<Arc<dyn Completable>>,
    /// Workers without work: looking for it (see `Inner::run`) or asleep.
    idle: usize,
    /// Of those, the ones asleep on the condition variable.
    asleep: usize,
    threads: usize,
    shutdown: bool,
}

impl State {
    /// The counts' invariant: a sleeping worker is idle, an idle one is a
    /// running thread, and no more threads run than the bound.
    #[inline]
    fn check(&self, max_threads: usize) {
        debug_assert!(
            self.asleep <= self.idle && self.idle <= self.threads && self.threads <= max_threads,
            "pool counts: {} asleep, {} idle, {} threads (at most {max_threads})",
            self.asleep,
            self.idle,
            self.threads
        );
    }
}

impl PoolDriver {
    pub(crate) fn start(max_threads: usize, counters: Arc<Counters>) -> PoolDriver {
        debug_assert!(
            max_threads >= 1,
            "the builder validates pool_threads: a pool may start one thread at least"
        );
        PoolDriver {
            inner: Arc::new(Inner {
                queued: AtomicUsize::new(0),
                st: Mutex::new(State {
                    queue: VecDeque::new(),
                    idle: 0,
                    asleep: 0,
                    threads: 0,
                    shutdown: false,
                }),
                cv: Condvar::new(),
                max_threads,
                counters,
                handles: Mutex::new(Vec::new()),
            }),
        }
    }

    pub(crate) fn submit(&self, op: Arc<dyn Completable>) {
        let inner = &self.inner;
        inner
            .counters
            .submit_syscalls
            .fetch_add(1, Ordering::Relaxed);
        inner
            .counters
            .pool_submitted
            .fetch_add(1, Ordering::Relaxed);
        let mut st = inner.st.lock().unwrap_or_else(|p| p.into_inner());
        if st.shutdown {
            drop(st);
            if let Some(p) = super::contain(op.kind().name(), || op.refuse()) {
                std::panic::resume_unwind(p);
            }
            return;
        }
        debug_assert_eq!(
            inner.queued.load(Ordering::Relaxed),
            st.queue.len(),
            "the queue's length is mirrored under the lock"
        );
        st.queue.push_back(op);
        inner.queued.store(st.queue.len(), Ordering::Release);
        if st.queue.len() > st.idle && st.threads < inner.max_threads {
            let n = st.threads;
            let worker = inner.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("overlap-pool-{n}"))
                .spawn(move || worker.run());
            match spawned {
                Ok(h) => {
                    st.threads += 1;
                    inner
                        .handles
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(h);
                }
                Err(_) if st.threads == 0 => {
                    // No thread could be started at all: do the work here
                    // rather than strand it.
                    if let Some(op) = st.queue.pop_back() {
                        inner.queued.store(st.queue.len(), Ordering::Release);
                        drop(st);
                        let r = op.kind().blocking();
                        if let Some(p) =
                            super::contain(op.kind().name(), move || op.complete(r, true))
                        {
                            std::panic::resume_unwind(p);
                        }
                    }
                    return;
                }
                Err(_) => {}
            }
        }
        // Workers still looking for work take it without a wake-up; wake
        // a sleeping one only for what they cannot take.
        st.check(inner.max_threads);
        debug_assert!(
            st.threads > 0 || st.queue.is_empty(),
            "queued work has a worker to take it"
        );
        let looking = st.idle - st.asleep;
        if st.asleep > 0 && st.queue.len() > looking {
            inner.cv.notify_one();
        }
    }

    pub(crate) fn shutdown(&self) {
        {
            let mut st = self.inner.st.lock().unwrap_or_else(|p| p.into_inner());
            st.shutdown = true;
        }
        self.inner.cv.notify_all();
        if super::on_driver_thread() {
            return; // the workers drain the queue and exit on their own
        }
        let handles =
            std::mem::take(&mut *self.inner.handles.lock().unwrap_or_else(|p| p.into_inner()));
        let joined = !handles.is_empty();
        for h in handles {
            let _ = h.join();
        }
        if joined {
            let st = self.inner.st.lock().unwrap_or_else(|p| p.into_inner());
            debug_assert!(
                st.threads == 0 && st.queue.is_empty(),
                "after shutdown every worker ended with the queue drained: {} threads, {} queued",
                st.threads,
                st.queue.len()
            );
        }
    }
}

/// Runs `op` on the calling thread, which would otherwise hand it to a
/// worker and sleep until the worker woke it: what a blocking
/// `Op::wait` does on a thread-pool engine. The operation holds its share of
/// the budget (taken before submission) until it completes here, and is
/// counted as inline (its result was known when the call returned) and in
/// `Stats::ran_on_caller`. A panic in user code reached by completion (a
/// released permit's waker) is resumed once the operation is recorded.
pub(crate) fn run_on_caller(op: Arc<dyn Completable>) {
    debug_assert!(
        !op.shared().forked(),
        "a forked child runs no operation of its parent's engine"
    );
    let counters = &op.shared().counters;
    counters.submit_syscalls.fetch_add(1, Ordering::Relaxed);
    counters.ran_on_caller.fetch_add(1, Ordering::Relaxed);
    let r = op.kind().blocking();
    if let Some(p) = super::contain(op.kind().name(), move || op.complete(r, true)) {
        std::panic::resume_unwind(p);
    }
}

/// Uncounts a worker when it ends, however it ends, so that a worker lost
/// to a panic is replaced by the next submission instead of leaving work
/// queued for a thread that is gone.
struct Alive<'a>(&'a Inner);

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        let mut st = self.0.st.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert!(st.threads > 0, "a worker is uncounted once");
        st.threads -= 1;
        st.check(self.0.max_threads);
        debug_assert!(
            st.shutdown || std::thread::panicking(),
            "a worker ends at shutdown, or by a panic"
        );
        let orphaned = !st.queue.is_empty() && st.idle == 0 && !st.shutdown;
        drop(st);
        if orphaned && std::thread::panicking() {
            eprintln!(
                "overlap: a pool worker ended by a panic; the next submission starts another"
            );
        }
    }
}

impl Inner {
    fn run(self: Arc<Self>) {
        super::mark_driver_thread();
        let _alive = Alive(&self);
        // 2.5 times a waiter's window (50 us by default; OVERLAP_SPIN_US=0
        // turns both off). Measured at depth 32 through a port on the fast
        // device, one invocation each against fio psync with 32 jobs
        // (BENCHMARKS.md): 0 us 0.48x, 20 us 0.69x, 50 us 0.80x, 100 us
        // 0.80x, 200 us 0.77x.
        let spin = super::spin_window() * 5 / 2;
        loop {
            let job = {
                let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    debug_assert_eq!(
                        self.queued.load(Ordering::Relaxed),
                        st.queue.len(),
                        "the queue's length is mirrored under the lock"
                    );
                    if let Some(j) = st.queue.pop_front() {
                        self.queued.store(st.queue.len(), Ordering::Release);
                        break Some(j);
                    }
                    if st.shutdown {
                        break None;
                    }
                    debug_assert!(st.idle < st.threads, "this worker is not yet counted idle");
                    st.idle += 1;
                    if !spin.is_zero() {
                        // Look for work for a little while, yielding the CPU,
                        // before sleeping: the caller that this worker just
                        // completed an operation for usually submits the next
                        // one within microseconds, and finding it here saves
                        // the futex wake-up and the context switch that a
                        // sleeping worker costs per operation (what made the
                        // pool slower than psync).
                        drop(st);
                        let start = std::time::Instant::now();
                        while self.queued.load(Ordering::Acquire) == 0 && start.elapsed() < spin {
                            std::thread::yield_now();
                        }
                        st = self.st.lock().unwrap_or_else(|p| p.into_inner());
                        if !st.queue.is_empty() || st.shutdown {
                            debug_assert!(st.idle > st.asleep, "this worker is idle, awake");
                            st.idle -= 1;
                            continue;
                        }
                    }
                    debug_assert!(st.asleep < st.idle, "this worker is idle, not yet asleep");
                    st.asleep += 1;
                    st.check(self.max_threads);
                    st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                    debug_assert!(st.asleep > 0, "this worker is counted asleep");
                    st.asleep -= 1;
                    st.idle -= 1;
                }
            };
            let Some(op) = job else { return };
            let r = op.kind().blocking();
            debug_assert!(
                op.kind().span().is_none_or(|s| r <= s.len as i64),
                "a read or a write moves at most the bytes asked for: {r}"
            );
            // User code runs in here (wakers, a dropped future's buffer);
            // `contain` keeps a panic from ending this worker.
            super::contain(op.kind().name(), move || {
                op.complete(r, false);
                drop(op);
            });
        }
    }
}

impl super::Driver for PoolDriver {
    fn submit(&self, op: Arc<dyn Completable>, _urgent: bool) {
        PoolDriver::submit(self, op);
    }
    fn pool_takes(&self, _kind: &crate::operation::OpKind) -> bool {
        true
    }
    fn shutdown(&self) {
        PoolDriver::shutdown(self);
    }
}
