//! The io_uring driver.
//!
//! Design: one engine thread owns the ring. Callers append operations to a
//! shared queue and go on; the engine thread moves everything queued into
//! the submission ring and submits it with one `io_uring_enter`, so many
//! callers' operations reach the kernel in one system call. When it has
//! nothing to submit it sleeps in `io_uring_enter` waiting for completions or
//! for an eventfd that callers write to only when it is asleep. Because only
//! this thread enters the ring, it can use `IORING_SETUP_SINGLE_ISSUER` and
//! `IORING_SETUP_DEFER_TASKRUN` (completion work runs when the engine thread
//! asks for it, never as an interrupt to another thread), and every
//! completion found right after a submission without waiting is known to
//! have completed inline.
//!
//! Why not "callers submit directly, a reaper thread waits"? Measured on the
//! development machine (2 vCPUs, virtio disk, quiet; random 4 KiB O_DIRECT
//! reads, depth 32, one requester; `examples/randread.rs` against
//! `examples/design_b.rs`, interleaved with fio, medians of 5):
//!
//! | design | IOPS | CPU per read |
//! | --- | --- | --- |
//! | fio, io_uring engine (one thread, one request per `io_uring_enter`) | 89k | 4.9 us |
//! | callers submit (one `io_uring_enter` each), reaper thread | 88k | 4.6-4.9 us |
//! | this engine thread, chunks of 4 per `io_uring_enter` | 81k | 4.5 us |
//! | this engine thread, one `io_uring_enter` per batch | 71k | 3.9 us |
//!
//! Callers that submit directly reach the device sooner (no hand-off to
//! this thread) but pay a system call per operation, and they own the
//! completion task work of their requests, so the kernel interrupts them to
//! post completions a reaper waits for; many callers submitting at once also
//! contend for the ring. This thread batches any number of callers into few
//! system calls, runs with `SINGLE_ISSUER|DEFER_TASKRUN`, and can tell inline
//! from asynchronous completions; its cost is the hand-off, about 8% at
//! depth 32 from a single requester. Wake-ups of callers are deferred to the
//! end of each batch of completions (`WakeBatch`), so a waiting caller is
//! woken once per batch, not once per completion.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use io_uring::{opcode, squeue, types, IoUring};
use slab::Slab;

use crate::error::FallbackReason;
use crate::op::{Completable, OpKind};
use crate::stats::Counters;
use crate::sys::{self, STATX_MASK};

const EVENTFD_KEY: u64 = u64::MAX;

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
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local into our own eventfd. A full
        // counter (EAGAIN) still leaves the engine thread woken.
        let _ = unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// The kernel's answer to `io_uring_setup`, mapped to a fallback reason.
fn reason_for(err: &std::io::Error) -> FallbackReason {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => FallbackReason::NotSupported,
        Some(libc::EPERM) => match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .ok()
            .and_then(|s| s.trim().parse::<u8>().ok())
        {
            Some(v) if v > 0 => FallbackReason::DisabledBySysctl(v),
            _ => FallbackReason::PermissionDenied,
        },
        Some(libc::ENOMEM) => FallbackReason::MemoryLimit,
        _ => FallbackReason::Other(err.to_string()),
    }
}

/// Builds a ring with the best setup flags this kernel accepts.
fn build_ring(entries: u32, cq_entries: u32) -> Result<(IoUring, String), FallbackReason> {
    type Setup = (&'static str, fn(&mut io_uring::Builder));
    let attempts: [Setup; 3] = [
        ("SINGLE_ISSUER|DEFER_TASKRUN", |b| {
            b.setup_single_issuer().setup_defer_taskrun();
        }),
        ("COOP_TASKRUN", |b| {
            b.setup_coop_taskrun();
        }),
        ("none", |_| {}),
    ];
    // OVERLAP_URING_SETUP=coop|none skips the first attempts (for measuring
    // what each setup flag is worth on a given kernel).
    let skip = match std::env::var("OVERLAP_URING_SETUP").as_deref() {
        Ok("coop") => 1,
        Ok("none") => 2,
        _ => 0,
    };
    let mut last = None;
    for (name, apply) in attempts.into_iter().skip(skip) {
        let mut b = IoUring::builder();
        b.setup_cqsize(cq_entries).setup_clamp();
        apply(&mut b);
        match b.build(entries) {
            Ok(ring) => return Ok((ring, name.to_string())),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
            Err(e) => return Err(reason_for(&e)),
        }
    }
    Err(reason_for(&last.expect("at least one attempt")))
}

impl UringDriver {
    /// Starts the engine thread; the ring is created on it (a single-issuer
    /// ring belongs to the thread that creates it). Returns the setup flags.
    pub(crate) fn start(
        entries: u32,
        cq_entries: u32,
        max_kernel_workers: Option<u32>,
        submit_chunk: usize,
        counters: Arc<Counters>,
    ) -> Result<(UringDriver, String), FallbackReason> {
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
        let queue = Arc::new(Queue {
            idle: Condvar::new(),
            st: Mutex::new(QState {
                ops: Vec::new(),
                parked: false,
                sleeping: false,
                wake_pending: false,
                shutdown: false,
            }),
            eventfd,
        });
        let (tx, rx) = mpsc::channel();
        let q = queue.clone();
        let thread = std::thread::Builder::new()
            .name("overlap-uring".into())
            .spawn(move || {
                super::mark_driver_thread();
                let setup = build_ring(entries, cq_entries).and_then(|(ring, flags)| {
                    let has_ftruncate = check_opcodes(&ring)?;
                    let workers = bound_kernel_workers(&ring, max_kernel_workers)?;
                    Ok((ring, format!("{flags}; {workers}"), has_ftruncate))
                });
                match setup {
                    Ok((ring, flags, has_ftruncate)) => {
                        let _ = tx.send(Ok(flags));
                        EngineThread::new(ring, q, counters, has_ftruncate, submit_chunk).run();
                    }
                    Err(reason) => {
                        let _ = tx.send(Err(reason));
                    }
                }
            })
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
        if st.shutdown {
            drop(st);
            op.complete(-(libc::ECANCELED as i64), true);
            return;
        }
        st.ops.push(op);
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
        if super::on_driver_thread() {
            return; // the engine thread drains and exits by itself
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// Bounds the kernel's io-wq worker threads for this engine thread's rings
/// (`IORING_REGISTER_IOWQ_MAX_WORKERS`, Linux 5.15) and describes the limits
/// in force. Must run on the engine thread: io-wq belongs to the task.
fn bound_kernel_workers(ring: &IoUring, max: Option<u32>) -> Result<String, FallbackReason> {
    let submitter = ring.submitter();
    if let Some(n) = max {
        let mut limits = [n, n];
        if let Err(e) = submitter.register_iowq_max_workers(&mut limits) {
            return Err(FallbackReason::Other(format!(
                "could not bound the kernel's io_uring workers to {n}: {e}"
            )));
        }
    }
    // Zeros read the limits without changing them.
    let mut limits = [0u32, 0u32];
    match submitter.register_iowq_max_workers(&mut limits) {
        Ok(()) => Ok(format!(
            "kernel workers (io-wq) at most {} for file I/O, {} unbounded",
            limits[0], limits[1]
        )),
        Err(_) => Ok("kernel worker limits unknown (Linux < 5.15)".to_string()),
    }
}

/// Checks that the kernel has the operations the engine uses. Returns whether
/// `IORING_OP_FTRUNCATE` (Linux 6.9) is there; without it `set_len` runs on
/// the engine thread.
fn check_opcodes(ring: &IoUring) -> Result<bool, FallbackReason> {
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_err() {
        return Err(FallbackReason::MissingOpcode(
            "IORING_REGISTER_PROBE (Linux 5.6)",
        ));
    }
    let needed: [(u8, &'static str); 7] = [
        (opcode::Read::CODE, "IORING_OP_READ"),
        (opcode::Write::CODE, "IORING_OP_WRITE"),
        (opcode::Fsync::CODE, "IORING_OP_FSYNC"),
        (opcode::Fallocate::CODE, "IORING_OP_FALLOCATE"),
        (opcode::Statx::CODE, "IORING_OP_STATX"),
        (opcode::Close::CODE, "IORING_OP_CLOSE"),
        (opcode::OpenAt::CODE, "IORING_OP_OPENAT"),
    ];
    for (code, name) in needed {
        if !probe.is_supported(code) {
            return Err(FallbackReason::MissingOpcode(name));
        }
    }
    Ok(probe.is_supported(opcode::Ftruncate::CODE))
}

fn build_sqe(kind: &OpKind) -> squeue::Entry {
    match *kind {
        OpKind::Read {
            fd,
            ptr,
            len,
            offset,
        } => opcode::Read::new(types::Fd(fd), ptr, len)
            .offset(offset)
            .build(),
        OpKind::Write {
            fd,
            ptr,
            len,
            offset,
        } => opcode::Write::new(types::Fd(fd), ptr, len)
            .offset(offset)
            .build(),
        OpKind::Fsync { fd, datasync } => {
            let flags = if datasync {
                types::FsyncFlags::DATASYNC
            } else {
                types::FsyncFlags::empty()
            };
            opcode::Fsync::new(types::Fd(fd)).flags(flags).build()
        }
        OpKind::Fallocate {
            fd,
            mode,
            offset,
            len,
        } => opcode::Fallocate::new(types::Fd(fd), len)
            .offset(offset)
            .mode(mode)
            .build(),
        OpKind::Ftruncate { fd, len } => opcode::Ftruncate::new(types::Fd(fd), len).build(),
        OpKind::Statx { fd, buf } => opcode::Statx::new(types::Fd(fd), c"".as_ptr(), buf.cast())
            .flags(libc::AT_EMPTY_PATH)
            .mask(STATX_MASK)
            .build(),
        OpKind::Close { fd } => opcode::Close::new(types::Fd(fd)).build(),
        OpKind::Open {
            ref path,
            flags,
            mode,
        } => opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), path.as_ptr())
            .flags(flags)
            .mode(mode)
            .build(),
    }
}

struct EngineThread {
    // Field order matters: the ring is dropped (cancelling the eventfd read)
    // before the buffer that read targets.
    ring: IoUring,
    eventfd_buf: Box<u64>,
    queue: Arc<Queue>,
    counters: Arc<Counters>,
    has_ftruncate: bool,
    /// In-flight operations, keyed by SQE user_data, with their batch number.
    slab: Slab<(Arc<dyn Completable>, u64)>,
    batch: u64,
    eventfd_armed: bool,
    /// Entries per `io_uring_enter` fixed by the builder; 0 = adaptive.
    fixed_chunk: usize,
}

impl EngineThread {
    fn new(
        ring: IoUring,
        queue: Arc<Queue>,
        counters: Arc<Counters>,
        has_ftruncate: bool,
        fixed_chunk: usize,
    ) -> EngineThread {
        EngineThread {
            ring,
            eventfd_buf: Box::new(0),
            queue,
            counters,
            has_ftruncate,
            slab: Slab::new(),
            batch: 0,
            eventfd_armed: false,
            fixed_chunk,
        }
    }

    fn run(mut self) {
        self.counters
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .init();
        let mut local: Vec<Arc<dyn Completable>> = Vec::new();
        loop {
            if !self.eventfd_armed {
                let sqe = opcode::Read::new(
                    types::Fd(self.queue.eventfd.as_raw_fd()),
                    (&mut *self.eventfd_buf as *mut u64).cast(),
                    8,
                )
                .build()
                .user_data(EVENTFD_KEY);
                self.push(&sqe);
                self.eventfd_armed = true;
            }
            let shutdown = {
                let mut st = self.queue.lock();
                if st.ops.is_empty() && self.slab.is_empty() && !st.shutdown {
                    // Nothing in flight: nothing to wait for in the ring.
                    st.parked = true;
                    while st.ops.is_empty() && !st.shutdown {
                        st = self.queue.idle.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    st.parked = false;
                }
                std::mem::swap(&mut st.ops, &mut local);
                if local.is_empty() {
                    st.sleeping = true;
                }
                st.shutdown
            };
            if !local.is_empty() {
                self.batch += 1;
                for op in local.drain(..) {
                    if !self.has_ftruncate && matches!(op.kind(), OpKind::Ftruncate { .. }) {
                        let r = sys::execute(op.kind());
                        op.complete(r, true);
                        continue;
                    }
                    let sqe = build_sqe(op.kind());
                    let key = self.slab.insert((op, self.batch));
                    self.push(&sqe.user_data(key as u64));
                    let chunk = self.submit_chunk();
                    if self.ring.submission().len() >= chunk {
                        self.enter(0);
                    }
                }
                self.enter(0);
                self.reap(true);
                continue;
            }
            if shutdown && self.slab.is_empty() {
                break;
            }
            self.enter(1);
            self.queue.lock().sleeping = false;
            self.reap(false);
        }
        // The loop only ends with nothing in flight but the eventfd read; the
        // ring is dropped (cancelling it) before its buffer (field order).
        self.counters
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sample();
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
            0 => (self.slab.len() / 8).clamp(4, 64),
            n => n,
        }
    }

    /// Puts one entry in the submission ring, submitting first if it is full.
    fn push(&mut self, sqe: &squeue::Entry) {
        loop {
            // SAFETY: every pointer in `sqe` refers to memory owned by an
            // operation cell held in `self.slab` (or to `self.eventfd_buf`)
            // until its completion is reaped, so it outlives the kernel's use.
            let pushed = unsafe { self.ring.submission().push(sqe) };
            if pushed.is_ok() {
                return;
            }
            self.enter(0);
            self.reap(false);
        }
    }

    /// Submits what is queued and, if `want` > 0, waits for a completion.
    fn enter(&mut self, want: usize) {
        let has_sqes = !self.ring.submission().is_empty();
        loop {
            let r = if want > 0 {
                self.ring.submit_and_wait(want)
            } else {
                self.ring.submit()
            };
            if has_sqes {
                self.counters
                    .submit_syscalls
                    .fetch_add(1, Ordering::Relaxed);
            }
            match r {
                Ok(_) => return,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                    if want > 0 {
                        return; // woken by a signal: reap and loop
                    }
                }
                // The completion ring is full: reaping makes room.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) => {
                    return
                }
                Err(e) => {
                    // Should not happen with a valid ring; do not spin.
                    eprintln!("overlap: io_uring_enter failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    return;
                }
            }
        }
    }

    /// Takes every completion in the ring. When `after_submit`, completions
    /// of the batch just submitted were there before any wait: inline.
    fn reap(&mut self, after_submit: bool) {
        let _batch = super::WakeBatch::begin();
        let mut reaped = 0usize;
        loop {
            let mut cq = self.ring.completion();
            cq.sync();
            let mut any = false;
            for cqe in &mut cq {
                any = true;
                let key = cqe.user_data();
                if key == EVENTFD_KEY {
                    self.eventfd_armed = false;
                    self.queue.lock().wake_pending = false;
                    continue;
                }
                let (op, batch) = self.slab.remove(key as usize);
                reaped += 1;
                op.complete(cqe.result() as i64, after_submit && batch == self.batch);
            }
            if !any {
                break;
            }
        }
        if reaped > 0 {
            self.counters
                .workers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .maybe_sample();
        }
    }
}
