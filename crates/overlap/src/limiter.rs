//! Backpressure: a fair (FIFO) semaphore over two resources, in-flight
//! operations and in-flight bytes. A submitter over the budget waits, in
//! order of arrival; `try_acquire` refuses instead.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::stats::Counters;

/// Bits of [`Limiter::used`] that count bytes; the operations are above.
const BYTE_BITS: u32 = 40;
const BYTE_MASK: u64 = (1 << BYTE_BITS) - 1;
/// One operation in [`Limiter::used`].
const ONE_OP: u64 = 1 << BYTE_BITS;
/// The largest budgets the packed counter holds: 16 M operations and 1 TiB
/// (a larger setting is this one: no machine has more in flight).
const MAX_OPS: usize = (1 << (64 - BYTE_BITS)) - 1;
const MAX_BYTES: usize = BYTE_MASK as usize;

pub(crate) struct Limiter {
    max_ops: usize,
    max_bytes: usize,
    /// Operations (high bits) and bytes (low [`BYTE_BITS`]) in flight, in one
    /// word: a permit is taken and given back with one atomic operation
    /// while nobody waits.
    used: AtomicU64,
    /// Waiters queued in `waiters` (read without the lock). A releaser that
    /// sees none grants nothing; a waiter counts itself in before it looks at
    /// `used` a last time, so one of the two always sees the other
    /// (`SeqCst` on both sides).
    waiting: AtomicUsize,
    waiters: Mutex<VecDeque<Arc<Waiter>>>,
    counters: Arc<Counters>,
}

pub(crate) struct Waiter {
    bytes: usize,
    granted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// A claim on the budget, returned when dropped.
pub(crate) struct Permit {
    limiter: Arc<Limiter>,
    bytes: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.release(self.bytes);
    }
}

fn ops_of(used: u64) -> usize {
    (used >> BYTE_BITS) as usize
}

fn bytes_of(used: u64) -> usize {
    (used & BYTE_MASK) as usize
}

impl Limiter {
    pub(crate) fn new(max_ops: usize, max_bytes: usize, counters: Arc<Counters>) -> Limiter {
        assert!(
            max_ops > 0 && max_bytes > 0,
            "limits are validated by the builder"
        );
        Limiter {
            max_ops: max_ops.min(MAX_OPS),
            max_bytes: max_bytes.min(MAX_BYTES),
            used: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            waiters: Mutex::new(VecDeque::new()),
            counters,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Waiter>>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request larger than the whole byte budget is admitted only when
    /// nothing else is in flight, so it can never deadlock.
    fn fits(&self, used: u64, bytes: usize) -> bool {
        let in_bytes = bytes_of(used);
        ops_of(used) < self.max_ops && (in_bytes == 0 || in_bytes + bytes <= self.max_bytes)
    }

    /// Takes a permit's share of `used` if it fits (one compare-and-swap
    /// while nothing else changes it).
    fn take(&self, bytes: usize) -> bool {
        debug_assert!(bytes <= MAX_BYTES, "one request is at most MAX_RW_BYTES");
        let mut cur = self.used.load(Ordering::SeqCst);
        loop {
            if !self.fits(cur, bytes) {
                return false;
            }
            let next = cur + ONE_OP + bytes as u64;
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    // Never more than the budget, except one request larger
                    // than the whole byte budget, admitted with no bytes in
                    // flight.
                    debug_assert!(
                        ops_of(next) <= self.max_ops
                            && (bytes_of(next) <= self.max_bytes || bytes_of(next) == bytes),
                        "in flight {} ops, {} bytes over the budget of {} ops, {} bytes",
                        ops_of(next),
                        bytes_of(next),
                        self.max_ops,
                        self.max_bytes
                    );
                    self.counters.note_inflight(ops_of(next), bytes_of(next));
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    fn permit(self: &Arc<Self>, bytes: usize) -> Permit {
        Permit {
            limiter: self.clone(),
            bytes,
        }
    }

    /// A permit now, if the budget has room and nobody waits for it (a
    /// waiter is served first: fairness), else `None`.
    pub(crate) fn try_acquire(self: &Arc<Self>, bytes: usize) -> Option<Permit> {
        if self.waiting.load(Ordering::SeqCst) == 0 && self.take(bytes) {
            Some(self.permit(bytes))
        } else {
            None
        }
    }

    /// Queue for a permit (the caller's [`try_acquire`](Self::try_acquire)
    /// found no room): looks once more under the lock, else the returned
    /// future resolves once the budget has room and every earlier waiter has
    /// been served.
    pub(crate) fn queue(self: &Arc<Self>, bytes: usize) -> Acquire {
        let waiter = Arc::new(Waiter {
            bytes,
            granted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let mut queue = self.lock();
        // Counted in before the last look at `used`: a release after that
        // look sees the count and grants under the lock (which this holds
        // until the waiter is queued).
        self.waiting.fetch_add(1, Ordering::SeqCst);
        if queue.is_empty() && self.take(bytes) {
            let before = self.waiting.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(before >= 1, "this submitter counted itself in as waiting");
            drop(queue);
            return Acquire {
                limiter: self.clone(),
                bytes,
                waiter: None,
                ready: Some(self.permit(bytes)),
            };
        }
        queue.push_back(waiter.clone());
        debug_assert_eq!(queue.len(), self.waiting.load(Ordering::SeqCst));
        drop(queue);
        self.counters
            .backpressure_waits
            .fetch_add(1, Ordering::Relaxed);
        Acquire {
            limiter: self.clone(),
            bytes,
            waiter: Some(waiter),
            ready: None,
        }
    }

    fn release(&self, bytes: usize) {
        let before = self.used.fetch_sub(ONE_OP + bytes as u64, Ordering::SeqCst);
        debug_assert!(
            ops_of(before) >= 1 && bytes_of(before) >= bytes,
            "permit released twice"
        );
        debug_assert!(
            ops_of(before) > 1 || bytes_of(before) == bytes,
            "releases match grants: no bytes in flight without an operation"
        );
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut wake = Vec::new();
        {
            let mut queue = self.lock();
            self.grant(&mut queue, &mut wake);
        }
        Self::wake_all(wake);
    }

    /// Hands permits to waiters at the head of the queue while they fit.
    fn grant(&self, queue: &mut VecDeque<Arc<Waiter>>, wake: &mut Vec<Arc<Waiter>>) {
        while queue.front().is_some_and(|w| self.take(w.bytes)) {
            let Some(w) = queue.pop_front() else {
                break;
            };
            let before = self.waiting.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(before >= 1, "a queued waiter is counted as waiting");
            debug_assert!(
                !w.granted.load(Ordering::Relaxed),
                "a waiter is granted once, when it leaves the queue"
            );
            w.granted.store(true, Ordering::Release);
            wake.push(w);
        }
        debug_assert_eq!(queue.len(), self.waiting.load(Ordering::SeqCst));
        // A waiter left queued is one that did not fit, so something was in
        // flight when it was looked at (anything fits an empty budget); the
        // release of that something, even one racing with this loop, sees
        // `waiting` and grants again under the lock.
    }

    fn wake_all(wake: Vec<Arc<Waiter>>) {
        for w in wake {
            debug_assert!(
                w.granted.load(Ordering::Relaxed),
                "only granted waiters are woken"
            );
            if let Some(waker) = w.waker.lock().unwrap_or_else(|p| p.into_inner()).take() {
                waker.wake();
            }
        }
    }

    pub(crate) fn in_flight(&self) -> (usize, usize) {
        let used = self.used.load(Ordering::SeqCst);
        let (ops, bytes) = (ops_of(used), bytes_of(used));
        // (Bytes may exceed the budget: a larger request is admitted with no
        // bytes in flight, beside operations of none.)
        debug_assert!(
            ops <= self.max_ops && (ops > 0 || bytes == 0),
            "in flight within the operation budget, no bytes without an operation: {ops} ops, \
             {bytes} bytes"
        );
        (ops, bytes)
    }

    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    pub(crate) fn max_ops(&self) -> usize {
        self.max_ops
    }
}

/// Future returned by [`Limiter::queue`].
pub(crate) struct Acquire {
    limiter: Arc<Limiter>,
    bytes: usize,
    waiter: Option<Arc<Waiter>>,
    ready: Option<Permit>,
}

impl Future for Acquire {
    type Output = Permit;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let this = self.get_mut();
        if let Some(p) = this.ready.take() {
            return Poll::Ready(p);
        }
        #[allow(
            clippy::expect_used,
            reason = "polling a future after it returned Ready is a bug in the caller (this crate)"
        )]
        let w = this
            .waiter
            .as_ref()
            .expect("Acquire polled after completion");
        if !w.granted.load(Ordering::Acquire) {
            *w.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
            // The grant may have raced with storing the waker.
            if !w.granted.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
        this.waiter = None;
        Poll::Ready(Permit {
            limiter: this.limiter.clone(),
            bytes: this.bytes,
        })
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        let Some(w) = self.waiter.take() else { return };
        let mut queue = self.limiter.lock();
        if let Some(pos) = queue.iter().position(|x| Arc::ptr_eq(x, &w)) {
            debug_assert!(
                !w.granted.load(Ordering::Relaxed),
                "a waiter still queued was not granted"
            );
            queue.remove(pos);
            let before = self.limiter.waiting.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(before >= 1, "a queued waiter is counted as waiting");
            // A smaller request queued behind this one may fit now.
            let mut wake = Vec::new();
            self.limiter.grant(&mut queue, &mut wake);
            drop(queue);
            Limiter::wake_all(wake);
            return;
        }
        drop(queue);
        // Not queued any more: it was granted, so give the budget back.
        if w.granted.load(Ordering::Acquire) {
            drop(Permit {
                limiter: self.limiter.clone(),
                bytes: self.bytes,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Says that a thread ended (also by a panic).
    struct Finished(std::sync::mpsc::Sender<()>);

    impl Drop for Finished {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    /// Threads take and give back permits of mixed sizes through both
    /// paths, waiting, refusing and giving up while queued: the budget is
    /// never exceeded, every permit is returned, and nobody waits forever (a
    /// lost grant would hang the test).
    #[test]
    fn racing_permits_stay_within_the_budget_and_nobody_is_left_waiting() {
        const MAX_OPS: usize = 6;
        const MAX_BYTES: usize = 64 << 10;
        let limiter = Arc::new(Limiter::new(
            MAX_OPS,
            MAX_BYTES,
            Arc::new(Counters::default()),
        ));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let threads: Vec<_> = (0..6u64)
            .map(|t| {
                let limiter = limiter.clone();
                let done_tx = done_tx.clone();
                std::thread::spawn(move || {
                    let _done = Finished(done_tx);
                    let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    for _ in 0..20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Mostly small, sometimes larger than the whole budget.
                        let bytes = match x % 16 {
                            0 => MAX_BYTES + 4096,
                            1..=4 => 32 << 10,
                            _ => 4096,
                        };
                        let permit = match x % 3 {
                            0 => limiter.try_acquire(bytes),
                            _ => Some(crate::block_on(limiter.queue(bytes))),
                        };
                        let (ops, in_bytes) = limiter.in_flight();
                        assert!(ops <= MAX_OPS, "{ops} operations in flight");
                        assert!(
                            in_bytes <= MAX_BYTES || ops == 1,
                            "{in_bytes} bytes in flight with {ops} operations"
                        );
                        if x % 7 == 0 {
                            // Queue, then give up before the grant (or after).
                            drop(limiter.queue(4096));
                        }
                        drop(permit);
                    }
                })
            })
            .collect();
        drop(done_tx);
        for _ in 0..threads.len() {
            // A lost grant leaves a thread waiting forever: fail, not hang.
            done_rx
                .recv_timeout(std::time::Duration::from_secs(120))
                .expect("a thread still waits for a permit after 120 s: a grant was lost");
        }
        for t in threads {
            t.join().expect("a thread failed");
        }
        assert_eq!(limiter.in_flight(), (0, 0), "every permit was given back");
        assert_eq!(limiter.waiting.load(Ordering::SeqCst), 0);
        assert!(limiter.lock().is_empty());
    }
}
