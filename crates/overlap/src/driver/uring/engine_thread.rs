//! The engine thread and its ring: futures polled by executors without an
//! integration (see [the routing table](super)).
//!
//! Callers append operations to a shared queue and go on; the engine thread
//! moves everything queued into the submission ring and submits it in
//! chunks, so many callers' operations reach the kernel in few system
//! calls. Every submitting `io_uring_enter` carries `IORING_ENTER_GETEVENTS`:
//! with `DEFER_TASKRUN` a submit-only call never runs completion work, and
//! while new operations kept arriving, completions waited (a direct read's
//! median went from 45 us to 7 ms beside two streaming threads;
//! `tests/taskrun.rs` holds the bound). When it has nothing to submit it
//! sleeps in `io_uring_enter` waiting for completions or for an eventfd
//! that callers write to only when it is asleep. Wake-ups of callers are
//! deferred to the end of each batch of completions, so a waiting caller is
//! woken once per batch, not once per completion.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::core::RingCore;
use super::setup::{self, Issuers};
use crate::cell::{Completable, RingSize};
use crate::driver::{complete_all, Done};
use crate::driver::{contain, mark_driver_thread, on_driver_thread};
use crate::error::FallbackReason;
use crate::stats::Counters;

pub(crate) struct UringDriver {
    queue: Arc<Queue>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Queue {
    st: Mutex<QState>,
    /// Where the engine thread waits when nothing is in flight (there is
    /// nothing to wait for in the ring): submitters wake it with a futex
    /// wake-up rather than an eventfd write that the ring must turn into a
    /// completion. QD1 round trip of a 0-byte read, caller polling: 8.8-9.5
    /// us waking it inside the ring, 6.9-7.9 us this way.
    idle: Condvar,
    /// Written to wake the engine thread asleep in its ring. Owned here, so
    /// it outlives the ring (which reads it) and every writer.
    eventfd: OwnedFd,
}

struct QState {
    ops: Vec<Arc<dyn Completable>>,
    /// The engine thread has nothing in flight and waits on `Queue::idle`.
    parked: bool,
    /// The engine thread found the queue empty and is about to wait in the
    /// ring for completions (woken for new work through the eventfd).
    sleeping: bool,
    /// An eventfd write is on its way; no need for another.
    wake_pending: bool,
    shutdown: bool,
    /// The engine thread is gone (it can only end by shutting down, but an
    /// operation must never wait for a thread that is not there).
    dead: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local into our own eventfd. A full
        // counter (EAGAIN) still leaves the engine thread woken.
        let n = unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        debug_assert!(
            n == 8
                || matches!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::EAGAIN | libc::EINTR)
                ),
            "an eventfd takes an 8-byte write unless its counter is full"
        );
    }
}

impl Queue {
    /// An empty queue with its own eventfd.
    fn new() -> Result<Arc<Queue>, FallbackReason> {
        // SAFETY: eventfd has no memory arguments; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(FallbackReason::Other(format!(
                "eventfd: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: efd is a fresh descriptor that nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(efd) };
        Ok(Arc::new(Queue {
            idle: Condvar::new(),
            st: Mutex::new(QState {
                ops: Vec::new(),
                parked: false,
                sleeping: false,
                wake_pending: false,
                shutdown: false,
                dead: false,
            }),
            eventfd,
        }))
    }
}

/// The engine thread: sets up its ring, reports the setup flags (or why
/// it failed) on `tx`, then runs until shutdown.
fn engine_thread_main(
    config: RingConfig,
    q: Arc<Queue>,
    counters: Arc<Counters>,
    tx: mpsc::Sender<Result<String, FallbackReason>>,
) {
    mark_driver_thread();
    let setup = setup::make_ring(config.size, Issuers::One).and_then(|(ring, flags)| {
        let workers = setup::bound_kernel_workers(ring.io(), config.max_kernel_workers)?;
        Ok((ring, format!("{flags}; {workers}")))
    });
    match setup {
        Ok((ring, flags)) => {
            let _ = tx.send(Ok(flags));
            let core = RingCore::new(ring, Some(q.eventfd.as_raw_fd()));
            let mut engine = EngineThread {
                core,
                queue: q.clone(),
                counters,
                fixed_chunk: config.submit_chunk,
            };
            // However the thread ends, later operations are
            // refused, not queued for a thread that is gone.
            let _dead = Dead(q.clone());
            engine.run();
            debug_assert_eq!(
                engine.core.in_flight(),
                0,
                "the engine thread leaves its loop with nothing in flight"
            );
            // Everything in flight was reaped; the eventfd read
            // is cancelled and reaped too before the ring goes.
            engine.core.drain(|_| {});
        }
        Err(reason) => {
            let _ = tx.send(Err(reason));
        }
    }
}

/// Setup of the engine's rings, decided once on the engine thread.
#[derive(Clone, Copy)]
pub(crate) struct RingConfig {
    pub size: RingSize,
    pub max_kernel_workers: Option<u32>,
    /// Entries per `io_uring_enter` fixed by the builder; 0 = adaptive.
    pub submit_chunk: usize,
}

impl UringDriver {
    /// Starts the engine thread; the ring is created on it (a single-issuer
    /// ring belongs to the thread that creates it). Returns the setup flags.
    pub(crate) fn start(
        config: RingConfig,
        counters: Arc<Counters>,
    ) -> Result<(UringDriver, String), FallbackReason> {
        let queue = Queue::new()?;
        let (tx, rx) = mpsc::channel();
        let q = queue.clone();
        let thread = std::thread::Builder::new()
            .name("overlap-uring".into())
            .spawn(move || engine_thread_main(config, q, counters, tx))
            .map_err(|e| {
                FallbackReason::Other(format!("could not start the engine thread: {e}"))
            })?;
        match rx.recv() {
            Ok(Ok(flags)) => Ok((
                UringDriver {
                    queue,
                    thread: Mutex::new(Some(thread)),
                },
                flags,
            )),
            Ok(Err(reason)) => {
                let _ = thread.join();
                Err(reason)
            }
            Err(_) => Err(FallbackReason::Other(
                "the engine thread died during setup".into(),
            )),
        }
    }

    pub(crate) fn submit(&self, op: Arc<dyn Completable>) {
        let mut st = self.queue.lock();
        if st.shutdown || st.dead {
            drop(st);
            op.refuse();
            return;
        }
        st.ops.push(op);
        debug_assert!(
            !st.parked || !st.sleeping,
            "the engine thread waits in one place at a time"
        );
        self.wake(st);
    }

    /// Wakes the engine thread wherever it sleeps, so that it looks at
    /// the reactor rings (`super::reactor::watch_tick`) from now on.
    pub(crate) fn nudge(&self) {
        self.wake(self.queue.lock());
    }

    /// Wakes the engine thread: from its condition variable if parked,
    /// else through the eventfd if it sleeps in its ring (once per sleep).
    fn wake(&self, mut st: std::sync::MutexGuard<'_, QState>) {
        debug_assert!(
            !st.parked || !st.sleeping,
            "the engine thread waits in one place at a time"
        );
        if st.parked {
            st.parked = false;
            drop(st);
            self.queue.idle.notify_one();
            return;
        }
        let kick = st.sleeping && !st.wake_pending;
        if kick {
            st.wake_pending = true;
        }
        drop(st);
        if kick {
            self.queue.kick();
        }
    }

    pub(crate) fn shutdown(&self) {
        let kick = {
            let mut st = self.queue.lock();
            st.shutdown = true;
            let kick = !st.wake_pending;
            st.wake_pending = true;
            kick
        };
        self.queue.idle.notify_one();
        if kick {
            self.queue.kick();
        }
        if on_driver_thread() {
            return; // the engine thread drains and exits by itself
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
            debug_assert!(
                self.queue.lock().dead,
                "the engine thread marks itself gone before it ends"
            );
        }
    }
}

/// Marks the engine thread gone and refuses what was queued for it.
struct Dead(Arc<Queue>);

impl Drop for Dead {
    fn drop(&mut self) {
        let stranded = {
            let mut st = self.0.lock();
            debug_assert!(!st.dead, "the engine thread goes once");
            st.dead = true;
            std::mem::take(&mut st.ops)
        };
        for op in stranded {
            let _ = contain(op.kind().name(), || op.refuse());
        }
    }
}

struct EngineThread {
    core: RingCore,
    queue: Arc<Queue>,
    counters: Arc<Counters>,
    fixed_chunk: usize,
}

impl EngineThread {
    fn run(&mut self) {
        self.counters
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .init();
        let mut local: Vec<Arc<dyn Completable>> = Vec::new();
        let mut done: Vec<Done> = Vec::new();
        let mut reads_seen = 0;
        loop {
            self.core.arm_eventfd(&mut done);
            let shutdown = self.take_queued(&mut local, &mut reads_seen);
            if !local.is_empty() {
                self.submit_all(&mut local, &mut done);
                continue;
            }
            if shutdown && self.core.in_flight() == 0 {
                debug_assert!(
                    self.queue.lock().ops.is_empty(),
                    "nothing is queued once shutdown began and the queue was taken"
                );
                break;
            }
            self.core.wait(super::reactor::watch_tick(), &mut done);
            {
                let mut st = self.queue.lock();
                debug_assert!(
                    st.sleeping,
                    "the engine thread wakes from the sleep it announced"
                );
                st.sleeping = false;
            }
            complete_all(&mut done);
            super::reactor::watch_if_due();
        }
        self.counters
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sample();
    }

    /// Under the queue's lock: swaps what callers queued into `local`
    /// (parked first while nothing is queued or in flight), marks the
    /// thread sleeping when there is nothing, and returns whether shutdown
    /// began. `reads_seen`: the eventfd reads already accounted for.
    fn take_queued(&self, local: &mut Vec<Arc<dyn Completable>>, reads_seen: &mut u64) -> bool {
        debug_assert!(local.is_empty(), "the previous batch was all pushed");
        let mut st = self.queue.lock();
        debug_assert!(
            self.core.eventfd_reads() >= *reads_seen,
            "the eventfd reads accounted for have completed"
        );
        if self.core.eventfd_reads() != *reads_seen {
            // The eventfd write was consumed: the next one must wake.
            debug_assert!(
                st.wake_pending,
                "an eventfd read completes only after a write, announced by wake_pending"
            );
            *reads_seen = self.core.eventfd_reads();
            st.wake_pending = false;
        }
        if st.ops.is_empty() && self.core.in_flight() == 0 && !st.shutdown {
            // Nothing in flight: nothing to wait for in the ring.
            st = self.park(st);
        }
        std::mem::swap(&mut st.ops, local);
        debug_assert!(
            st.ops.is_empty() && !st.parked,
            "the engine thread, running, takes all that was queued"
        );
        if local.is_empty() {
            st.sleeping = true;
        }
        st.shutdown
    }

    /// Waits on the queue's condition variable (the guard `st` held
    /// throughout but for the waits and the reactor watcher's passes) until
    /// an operation is queued or shutdown begins.
    fn park<'a>(
        &'a self,
        mut st: std::sync::MutexGuard<'a, QState>,
    ) -> std::sync::MutexGuard<'a, QState> {
        debug_assert!(
            !st.sleeping,
            "the engine thread parks only once awake from its ring"
        );
        debug_assert_eq!(
            self.core.in_flight(),
            0,
            "the engine thread parks with nothing in flight"
        );
        while st.ops.is_empty() && !st.shutdown {
            // Before every wait: a wake-up that came while the
            // lock was let go (the watcher's pass below) cleared
            // it, and `wake` notifies only a parked thread.
            st.parked = true;
            // While reactor rings live, the engine thread is
            // also their watcher (`super::reactor`).
            let Some(tick) = super::reactor::watch_tick() else {
                st = self.queue.idle.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            st = self
                .queue
                .idle
                .wait_timeout(st, tick)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if st.ops.is_empty() && !st.shutdown {
                drop(st);
                super::reactor::watch_if_due();
                st = self.queue.lock();
            }
        }
        st.parked = false;
        st
    }

    /// Moves `local`'s operations into the ring, submitting in chunks,
    /// then completes what was reaped.
    fn submit_all(&mut self, local: &mut Vec<Arc<dyn Completable>>, done: &mut Vec<Done>) {
        debug_assert!(!local.is_empty(), "a batch to submit holds operations");
        for op in local.drain(..) {
            self.core.push(op, done);
            if self.core.pending() >= self.submit_chunk() {
                self.submit(done);
            }
        }
        self.submit(done);
        complete_all(done);
        debug_assert!(
            local.is_empty() && done.is_empty(),
            "every operation taken was pushed, every completion completed"
        );
        // Under steady load this branch may run for long: the
        // reactor rings' passes are due here too.
        super::reactor::watch_if_due();
    }

    fn submit(&mut self, done: &mut Vec<Done>) {
        debug_assert!(
            on_driver_thread(),
            "only the engine thread submits on its one-issuer ring"
        );
        if self.core.submit(done) {
            self.counters
                .submit_syscalls
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many entries to hand the kernel per `io_uring_enter`. The kernel
    /// plugs the block layer for a multi-entry submission: no request of it
    /// reaches the device until all are issued (a few microseconds each), so
    /// at shallow queues small chunks keep the device busier. Measured here
    /// (random 4 KiB direct reads at depth 32): one chunk per batch ~70k
    /// IOPS, chunks of 4 ~82k (fio: ~88k) for 0.5 us more CPU per read;
    /// chunks of 2 cost more CPU than fio. Deep queues hide the delay, and
    /// larger chunks save system calls: the chunk is in-flight/8, 4 to 64,
    /// unless the builder fixed it.
    fn submit_chunk(&self) -> usize {
        match self.fixed_chunk {
            0 => (self.core.in_flight() / 8).clamp(4, 64),
            n => n,
        }
    }
}

impl crate::driver::Driver for UringDriver {
    fn submit(&self, op: Arc<dyn Completable>, _urgent: bool) {
        UringDriver::submit(self, op);
    }
    fn pool_takes(&self, _kind: &crate::operation::OpKind) -> bool {
        false
    }
    fn nudge(&self) {
        UringDriver::nudge(self);
    }
    fn shutdown(&self) {
        UringDriver::shutdown(self);
    }
}
