//! Backpressure: a fair (FIFO) semaphore over two resources, in-flight
//! operations and in-flight bytes. A submitter over the budget waits, in
//! order of arrival; `try_acquire` refuses instead.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::stats::Counters;

pub(crate) struct Limiter {
    max_ops: usize,
    max_bytes: usize,
    state: Mutex<State>,
    counters: Arc<Counters>,
}

struct State {
    ops: usize,
    bytes: usize,
    waiters: VecDeque<Arc<Waiter>>,
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

impl Limiter {
    pub(crate) fn new(max_ops: usize, max_bytes: usize, counters: Arc<Counters>) -> Limiter {
        assert!(
            max_ops > 0 && max_bytes > 0,
            "limits are validated by the builder"
        );
        Limiter {
            max_ops,
            max_bytes,
            state: Mutex::new(State {
                ops: 0,
                bytes: 0,
                waiters: VecDeque::new(),
            }),
            counters,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request larger than the whole byte budget is admitted only when
    /// nothing else is in flight, so it can never deadlock.
    fn fits(&self, st: &State, bytes: usize) -> bool {
        st.ops < self.max_ops && (st.bytes == 0 || st.bytes + bytes <= self.max_bytes)
    }

    fn take(&self, st: &mut State, bytes: usize) {
        debug_assert!(
            self.fits(st, bytes),
            "a permit is granted only when it fits"
        );
        st.ops += 1;
        st.bytes += bytes;
        // Never more than the budget, except one request larger than the
        // whole byte budget, admitted with no bytes in flight.
        debug_assert!(
            st.ops <= self.max_ops && (st.bytes <= self.max_bytes || st.bytes == bytes),
            "in flight {} ops, {} bytes over the budget of {} ops, {} bytes",
            st.ops,
            st.bytes,
            self.max_ops,
            self.max_bytes
        );
        self.counters.note_inflight(st.ops, st.bytes);
    }

    pub(crate) fn try_acquire(self: &Arc<Self>, bytes: usize) -> Option<Permit> {
        let mut st = self.lock();
        if st.waiters.is_empty() && self.fits(&st, bytes) {
            self.take(&mut st, bytes);
            Some(Permit {
                limiter: self.clone(),
                bytes,
            })
        } else {
            None
        }
    }

    /// Queue for a permit. The returned future resolves once the budget has
    /// room and every earlier waiter has been served.
    pub(crate) fn acquire(self: &Arc<Self>, bytes: usize) -> Acquire {
        if let Some(p) = self.try_acquire(bytes) {
            return Acquire {
                limiter: self.clone(),
                bytes,
                waiter: None,
                ready: Some(p),
            };
        }
        let waiter = Arc::new(Waiter {
            bytes,
            granted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let mut st = self.lock();
        // Re-check under the lock: a release may have happened in between.
        if st.waiters.is_empty() && self.fits(&st, bytes) {
            self.take(&mut st, bytes);
            drop(st);
            return Acquire {
                limiter: self.clone(),
                bytes,
                waiter: None,
                ready: Some(Permit {
                    limiter: self.clone(),
                    bytes,
                }),
            };
        }
        st.waiters.push_back(waiter.clone());
        drop(st);
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
        let mut wake = Vec::new();
        {
            let mut st = self.lock();
            debug_assert!(st.ops >= 1 && st.bytes >= bytes, "permit released twice");
            st.ops -= 1;
            st.bytes -= bytes;
            debug_assert!(
                st.ops > 0 || st.bytes == 0,
                "releases match grants: no bytes in flight without an operation"
            );
            self.grant(&mut st, &mut wake);
        }
        Self::wake_all(wake);
    }

    /// Hands permits to waiters at the head of the queue while they fit.
    fn grant(&self, st: &mut State, wake: &mut Vec<Arc<Waiter>>) {
        while st.waiters.front().is_some_and(|w| self.fits(st, w.bytes)) {
            let Some(w) = st.waiters.pop_front() else {
                break;
            };
            self.take(st, w.bytes);
            w.granted.store(true, Ordering::Release);
            wake.push(w);
        }
        // Anything fits an empty budget: a waiter left queued with nothing
        // in flight would wait for a release that never comes.
        debug_assert!(
            st.ops > 0 || st.waiters.is_empty(),
            "a waiter is queued with nothing in flight"
        );
    }

    fn wake_all(wake: Vec<Arc<Waiter>>) {
        for w in wake {
            if let Some(waker) = w.waker.lock().unwrap_or_else(|p| p.into_inner()).take() {
                waker.wake();
            }
        }
    }

    pub(crate) fn in_flight(&self) -> (usize, usize) {
        let st = self.lock();
        (st.ops, st.bytes)
    }

    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    pub(crate) fn max_ops(&self) -> usize {
        self.max_ops
    }
}

/// Future returned by [`Limiter::acquire`].
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
        let mut st = self.limiter.lock();
        if let Some(pos) = st.waiters.iter().position(|x| Arc::ptr_eq(x, &w)) {
            st.waiters.remove(pos);
            // A smaller request queued behind this one may fit now.
            let mut wake = Vec::new();
            self.limiter.grant(&mut st, &mut wake);
            drop(st);
            Limiter::wake_all(wake);
            return;
        }
        drop(st);
        // Not queued any more: it was granted, so give the budget back.
        if w.granted.load(Ordering::Acquire) {
            drop(Permit {
                limiter: self.limiter.clone(),
                bytes: self.bytes,
            });
        }
    }
}
