//! A port's completions in a queue, for engines whose completions do not
//! come from a ring the port owns (the thread pool, Linux AIO, I/O
//! completion ports, or an io_uring engine that could not give the port a
//! ring): drivers push, workers wait on a condition variable (on Windows,
//! on the port's own completion port: below). On `aio+pool`, a worker that
//! would wait while operations are in flight on the AIO context reaps them
//! itself when no other thread does (`driver::aio::lead`), and a push while
//! it sleeps in `io_getevents` kicks the context.
//!
//! On Windows each port is a completion port of its own: its workers wait
//! in `GetQueuedCompletionStatus` on the port's own I/O completion port
//! (which wakes the thread that waited last first, as Windows does for
//! every port), and a completion, a [`post`](crate::Port::post) or the last
//! outstanding operation's end wakes them by posting to it. The files stay
//! associated with the engine's port (a handle has one port): the IOCP
//! driver's completion threads deliver here.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};
use std::time::Instant;

#[cfg(target_os = "linux")]
use crate::driver::aio;
use crate::driver::handle::AioContext;
use crate::error::Result;
use crate::limiter::Permit;

/// A finished operation taken from a [`Port`](crate::Port).
#[derive(Debug)]
#[non_exhaustive]
pub struct Completion<B> {
    /// The key given at submission.
    pub key: u64,
    /// Bytes transferred, or the error.
    pub result: Result<usize>,
    /// The buffer, given back.
    pub buf: B,
    /// Whether the operation completed synchronously (already done when the
    /// submitting system call returned: a page-cache hit, for example).
    pub inline: bool,
}

struct Delivered<B> {
    completion: Completion<B>,
    /// Held until a worker takes the completion, so that completions nobody
    /// collects still count against the in-flight budget.
    _permit: Option<Permit>,
}

pub(crate) struct Queue<B> {
    st: Mutex<State<B>>,
    cv: Condvar,
    /// Windows: the port's own completion port, where its workers sleep
    /// (`None` if the system would not make one: the condition variable
    /// then).
    #[cfg(windows)]
    bell: Option<Bell>,
}

/// A port's own completion port (Windows).
#[cfg(windows)]
type Bell = crate::driver::iocp::port::Port;

/// How many of a port's workers its completion port lets run at once: no
/// limit that matters (the port's workers also wait elsewhere, on budget
/// and files, where the kernel's count of running threads cannot see
/// them).
#[cfg(windows)]
const BELL_THREADS: u32 = 1 << 16;

struct State<B> {
    ready: VecDeque<Delivered<B>>,
    /// Submitted and not yet taken.
    outstanding: usize,
    /// Threads blocked in `next`; a completion wakes one only if there is
    /// one (a futex wake is a system call even with nobody waiting).
    waiting: usize,
    /// The AIO context a worker of this port sleeps in, holding the reaping
    /// role: a push kicks it.
    leader: Option<Arc<AioContext>>,
    /// A worker was promoted to reap AIO completions (`aio::Waiter`).
    promoted: bool,
}

/// Wakes one waiting worker; used through `driver::wake` so that a driver
/// delivering a batch wakes once per batch.
impl<B: Send + 'static> Wake for Queue<B> {
    fn wake(self: Arc<Self>) {
        self.notify(1);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.notify(1);
    }
}

impl<B: Send + 'static> Queue<B> {
    pub(crate) fn new() -> Queue<B> {
        Queue {
            st: Mutex::new(State {
                ready: VecDeque::new(),
                outstanding: 0,
                waiting: 0,
                leader: None,
                promoted: false,
            }),
            cv: Condvar::new(),
            #[cfg(windows)]
            bell: Bell::new(BELL_THREADS).ok(),
        }
    }

    /// Wakes `n` sleeping workers (at least one).
    fn notify(&self, n: usize) {
        debug_assert!(n >= 1, "a wake-up wakes somebody");
        #[cfg(windows)]
        if let Some(bell) = &self.bell {
            for _ in 0..n {
                // A refused post (the kernel out of memory) is tried again:
                // a sleeper without it might wait for ever.
                while !bell.post(crate::driver::iocp::port::BELL_KEY) {
                    std::thread::yield_now();
                }
            }
            return;
        }
        if n == 1 {
            self.cv.notify_one();
        } else {
            self.cv.notify_all();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<B>> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps on the condition variable (Windows: the port's completion
    /// port), counted as waiting, until woken or `deadline`.
    fn sleep<'a>(
        &'a self,
        mut st: std::sync::MutexGuard<'a, State<B>>,
        deadline: Option<Instant>,
    ) -> std::sync::MutexGuard<'a, State<B>> {
        st.waiting += 1;
        #[cfg(windows)]
        if let Some(bell) = &self.bell {
            // A post made between here and the wait stays queued on the
            // port: it is not lost as a condition variable's would be.
            drop(st);
            ring_wait(bell, deadline);
            let mut st = self.lock();
            st.waiting -= 1;
            return st;
        }
        st = match deadline {
            None => self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                self.cv
                    .wait_timeout(st, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
        st.waiting -= 1;
        st
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

    /// Whether a worker sleeps on the condition variable (and so will not
    /// reap an AIO completion itself).
    pub(crate) fn has_sleepers(&self) -> bool {
        self.lock().waiting > 0
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
        let kick = st.leader.clone();
        drop(st);
        if let Some(ctx) = kick {
            ctx.kick();
        }
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
        let result = crate::cell::to_result(res);
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
    /// returns `None` at once when nothing is outstanding, unless `idle`
    /// (then it waits for a completion submitted or pushed later).
    ///
    /// `aio`: the engine's AIO context, on which the worker reaps instead
    /// of sleeping when it can (module docs).
    pub(crate) fn take(
        self: &Arc<Self>,
        deadline: Option<Instant>,
        block: bool,
        idle: bool,
        aio: Option<&Arc<AioContext>>,
    ) -> Option<Completion<B>> {
        let mut st = self.lock();
        // Set once the AIO context had nothing in flight: then sleep here,
        // but only after looking at the queue again under the lock (the
        // thread that reaped this port's last events may have delivered
        // them meanwhile, with nobody counted as waiting to wake).
        #[cfg(target_os = "linux")]
        let mut aio_idle = false;
        #[cfg(not(target_os = "linux"))]
        let _ = aio;
        loop {
            if let Some(d) = st.ready.pop_front() {
                st.outstanding -= 1;
                // Wake workers waiting for completions that will not come.
                let idle = if st.outstanding == 0 { st.waiting } else { 0 };
                drop(st);
                if idle > 0 {
                    self.notify(idle);
                }
                return Some(d.completion); // the permit is released here
            }
            if (st.outstanding == 0 && !idle) || !block {
                return None;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            // What this thread queued in a batch on a ring's port must be in
            // the kernel before it sleeps here (it may wait for it).
            drop(st);
            crate::driver::caller::flush_deferred();
            st = self.lock();
            if !st.ready.is_empty() {
                continue;
            }
            #[cfg(target_os = "linux")]
            if let Some(ctx) = aio.filter(|_| !aio_idle && st.outstanding > 0) {
                drop(st);
                aio_idle = !aio::wait(ctx, &PortWaiter(self), deadline);
                st = self.lock();
                continue;
            }
            #[cfg(target_os = "linux")]
            {
                aio_idle = false;
            }
            st = self.sleep(st, deadline);
        }
    }
}

/// Waits on a port's own completion port until a packet comes or
/// `deadline` passes (a failed wait returns too: the caller looks at the
/// queue again either way).
#[cfg(windows)]
fn ring_wait(bell: &Bell, deadline: Option<Instant>) {
    use windows_sys::Win32::System::IO::OVERLAPPED_ENTRY;
    const INFINITE: u32 = u32::MAX;
    let ms = deadline.map_or(INFINITE, |d| {
        let left = d.saturating_duration_since(Instant::now());
        // Rounded up: a wait that ends before the deadline would spin.
        u32::try_from(left.as_micros().div_ceil(1000)).map_or(INFINITE - 1, |m| m.min(INFINITE - 1))
    });
    // SAFETY: OVERLAPPED_ENTRY is plain old data; all-zero is valid.
    let mut entry: [OVERLAPPED_ENTRY; 1] = unsafe { std::mem::zeroed() };
    let _ = bell.dequeue(&mut entry, ms);
}

/// A port's worker, as the AIO reaping protocol sees it.
#[cfg(target_os = "linux")]
struct PortWaiter<'a, B>(&'a Arc<Queue<B>>);

#[cfg(target_os = "linux")]
impl<B> PortWaiter<'_, B> {
    fn has_work(st: &State<B>) -> bool {
        !st.ready.is_empty() || st.outstanding == 0
    }
}

#[cfg(target_os = "linux")]
impl<B: Send + 'static> aio::Waiter for PortWaiter<'_, B> {
    fn ready(&self) -> bool {
        Self::has_work(&self.0.lock())
    }
    fn enter(&self, ctx: &Arc<aio::Inner>) -> bool {
        // Under the queue's lock: a push either comes before (and this sees
        // it) or sees the leader (and kicks).
        let mut st = self.0.lock();
        if Self::has_work(&st) {
            return false;
        }
        debug_assert!(st.leader.is_none(), "one leader at a time");
        st.leader = Some(ctx.clone());
        true
    }
    fn leave(&self) {
        let ctx = self.0.lock().leader.take();
        drop(ctx);
    }
    fn follow(&self, deadline: Option<Instant>) {
        let q = self.0;
        let mut st = q.lock();
        if !Self::has_work(&st) && !st.promoted {
            st = q.sleep(st, deadline);
        }
        st.promoted = false;
    }
    fn promoter(&self) -> Waker {
        Waker::from(Arc::new(Promote(self.0.clone())))
    }
    fn leading(&self, _on: bool) {}
}

/// Wakes a port's workers so that one takes the AIO reaping role.
#[cfg(target_os = "linux")]
struct Promote<B>(Arc<Queue<B>>);

#[cfg(target_os = "linux")]
impl<B: Send + 'static> Wake for Promote<B> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // Under the lock, so that a worker between its check and its wait
        // cannot miss it.
        self.0.lock().promoted = true;
        self.0.cv.notify_all();
    }
}

#[cfg(all(test, windows))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Each port has a completion port of its own; a worker sleeping on it
    /// is woken by a completion pushed from another thread, and one with a
    /// deadline comes back when it passes.
    #[test]
    fn a_ports_workers_sleep_on_its_own_completion_port() {
        let q: Arc<Queue<Vec<u8>>> = Arc::new(Queue::new());
        assert!(q.bell.is_some(), "CreateIoCompletionPort refused a port");
        let t0 = Instant::now();
        let deadline = Some(t0 + Duration::from_millis(50));
        assert!(q.take(deadline, true, true, None).is_none());
        assert!(t0.elapsed() >= Duration::from_millis(50));
        q.add_outstanding();
        let pusher = {
            let q = q.clone();
            std::thread::spawn(move || {
                // Wait until the worker sleeps, then deliver.
                while !q.has_sleepers() {
                    std::thread::yield_now();
                }
                q.deliver(7, 3, vec![1, 2, 3], None, false);
            })
        };
        let c = q
            .take(None, true, false, None)
            .expect("the pushed completion");
        assert_eq!((c.key, c.buf.len()), (7, 3));
        assert_eq!(c.result.unwrap(), 3);
        pusher.join().unwrap();
        assert_eq!(q.outstanding(), 0);
    }
}
