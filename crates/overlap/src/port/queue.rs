//! A port's completions in a queue, for engines whose completions do not
//! come from a ring the port owns (the thread pool, or an io_uring engine
//! that could not give the port a ring): drivers push, workers wait on a
//! condition variable.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};
use std::time::Instant;

use super::Completion;
use crate::limiter::Permit;

struct Delivered<B> {
    completion: Completion<B>,
    /// Held until a worker takes the completion, so that completions nobody
    /// collects still count against the in-flight budget.
    _permit: Option<Permit>,
}

pub(crate) struct Queue<B> {
    st: Mutex<State<B>>,
    cv: Condvar,
}

struct State<B> {
    ready: VecDeque<Delivered<B>>,
    /// Submitted and not yet taken.
    outstanding: usize,
    /// Threads blocked in `next`; a completion wakes one only if there is
    /// one (a futex wake is a system call even with nobody waiting).
    waiting: usize,
}

/// Wakes one waiting worker; used through `driver::wake` so that a driver
/// delivering a batch wakes once per batch.
impl<B: Send + 'static> Wake for Queue<B> {
    fn wake(self: Arc<Self>) {
        self.cv.notify_one();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.cv.notify_one();
    }
}

impl<B: Send + 'static> Queue<B> {
    pub(crate) fn new() -> Queue<B> {
        Queue {
            st: Mutex::new(State {
                ready: VecDeque::new(),
                outstanding: 0,
                waiting: 0,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<B>> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts an operation about to be submitted (before a driver can
    /// complete it).
    pub(crate) fn add_outstanding(&self) {
        self.lock().outstanding += 1;
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.lock().outstanding
    }

    pub(crate) fn ready_len(&self) -> usize {
        self.lock().ready.len()
    }

    /// Queues a completion and wakes a waiting worker if there is one that
    /// the completions already queued will not satisfy. `new` counts it as
    /// outstanding under the same lock (a completion known at submission).
    pub(crate) fn push(
        self: &Arc<Self>,
        completion: Completion<B>,
        permit: Option<Permit>,
        new: bool,
    ) {
        let mut st = self.lock();
        if new {
            st.outstanding += 1;
        }
        st.ready.push_back(Delivered {
            completion,
            _permit: permit,
        });
        let wake = st.waiting >= st.ready.len();
        drop(st);
        if wake {
            crate::driver::wake(Waker::from(self.clone()));
        }
    }

    /// A driver's completion of an operation submitted to this port.
    pub(crate) fn deliver(
        self: &Arc<Self>,
        key: u64,
        res: i64,
        buf: B,
        permit: Option<Permit>,
        inline: bool,
    ) {
        let result = crate::op::to_result(res);
        self.push(
            Completion {
                key,
                result,
                buf,
                inline,
            },
            permit,
            false,
        );
    }

    /// A result known at submission (zero length, or the page-cache fast
    /// path), counted as outstanding and ready at once.
    pub(crate) fn push_immediate(
        self: &Arc<Self>,
        key: u64,
        n: usize,
        buf: B,
        permit: Option<Permit>,
    ) {
        let completion = Completion {
            key,
            result: Ok(n),
            buf,
            inline: true,
        };
        self.push(completion, permit, true);
    }

    /// The next completion: waits until `deadline` (forever if `None`), or
    /// returns `None` at once when nothing is outstanding.
    pub(crate) fn take(&self, deadline: Option<Instant>, block: bool) -> Option<Completion<B>> {
        let mut st = self.lock();
        loop {
            if let Some(d) = st.ready.pop_front() {
                st.outstanding -= 1;
                if st.outstanding == 0 && st.waiting > 0 {
                    // Wake workers waiting for completions that will not come.
                    self.cv.notify_all();
                }
                drop(st);
                return Some(d.completion); // the permit is released here
            }
            if st.outstanding == 0 || !block {
                return None;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            st.waiting += 1;
            st = match deadline {
                None => self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    self.cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
            st.waiting -= 1;
        }
    }
}
