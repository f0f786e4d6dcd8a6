//! The Linux AIO driver (`io_setup`/`io_submit`/`io_getevents`), for where
//! io_uring is blocked (container seccomp profiles allow AIO): O_DIRECT
//! reads and writes, and `fsync`/`fdatasync` where the kernel has
//! `IOCB_CMD_FSYNC`/`IOCB_CMD_FDSYNC` (Linux 4.18), go to the kernel
//! truly asynchronously; everything else (buffered I/O, which AIO performs
//! synchronously inside `io_submit`, open, close, statx, ...) goes to the
//! thread pool beside it. `Stats::submitted_aio` and
//! `Stats::submitted_pool` say which path each operation took.
//!
//! # Design: callers submit; the thread that waits reaps
//!
//! `io_submit` is thread-safe and copies the iocb, so the calling thread
//! submits directly (one system call per operation, as fio's libaio
//! engine with `iodepth_batch=1`). Completions are reaped by the thread
//! that waits for them, as fio's single thread does: a port's worker in
//! `next`, a thread in `.wait()` or [`block_on`](crate::block_on) calls
//! `io_getevents` itself when no other thread does (leader/follower), and
//! the engine's reaper thread takes the role only while nobody waits
//! (futures of other executors, operations a waiting thread left in
//! flight). The protocol, its handover rules and invariants are in `lead`.
//!
//! | design | measured (4 KiB random O_DIRECT reads, depth 32, fast device, vs fio libaio in one invocation) | verdict |
//! | --- | --- | --- |
//! | one reaper thread sleeps in `io_getevents`, the requester sleeps on the port until the reaper hands it the batch (before) | 0.71x/0.82x on a quiet machine; the two threads woke each other per batch (44k wake-ups in 200k reads, fio 2.5k context switches) | replaced |
//! | `IOCB_FLAG_RESFD` with an eventfd | not built: it only moves the sleep (someone still waits on the eventfd, then calls `io_getevents`: one more system call per batch) | pays off only inside an event loop that polls descriptors |
//! | the waiting thread reaps; the reaper only while nobody waits, after a 2 ms grace (now) | quiet machine, 5 runs interleaved with the old design: 0.98-1.09x (old 0.82-0.95x), CPU per read 0.85-1.07x of libaio's (old 1.14-1.31x), 0.01-0.02 context switches per read as fio's 0.01-0.02 (old 0.19-0.22); the reaper only naps (0.6k-1.1k times in 200k reads) | chosen: the kernel wakes the thread that waits |
//! | the same with no grace: the reaper takes the role as soon as the last waiter leaves | 8 standalone runs: 0.13-0.16 context switches and 5.2-6.6 us CPU per read, against 0.05-0.09 and 4.1-5.0 us with the grace (a port's requester leaves `next` after every batch and comes back within microseconds, to find the reaper asleep in `io_getevents`: the kernel wakes both) | the 2 ms grace |
//!
//! # Memory the kernel may write
//!
//! Every operation handed to `io_submit` stays in the driver's slab (an
//! `Arc` of its cell, which owns the buffer) until its completion event is
//! reaped: a dropped future drops only the caller's reference. Shutdown
//! refuses new operations, and the reaper ends only once the slab is empty.
//! Whoever reaps an event (the reaper, or a waiting thread) takes the cell
//! out of the slab only then. Completion runs user code (wakers, a dropped
//! future's buffer); the reaper is a driver thread, so `contain` reports a
//! panic there and the reaper goes on, and a waiting thread that reaps
//! reports it too (the operation may be another's) and goes on. Should the reaper end anyway, the context is destroyed
//! (`io_destroy`, which waits for the requests in flight) before anything is
//! freed, and if that fails the slab is leaked rather than freed.

mod lead;

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use slab::Slab;

use super::pool::PoolDriver;
use crate::cell::Completable;

use crate::operation::{AioCode, AioCommand, OpKind};
use crate::stats::Counters;
pub(crate) use lead::{wait, Waiter};

/// `aio_context_t`.
type AioContext = libc::c_ulong;

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_FSYNC: u16 = 2;
const IOCB_CMD_FDSYNC: u16 = 3;

/// `struct iocb` (linux/aio_abi.h). `aio_key` and `aio_rw_flags` swap
/// places on big-endian machines (the header's `PADDED` macro).
#[repr(C)]
#[derive(Default)]
struct Iocb {
    aio_data: u64,
    #[cfg(target_endian = "little")]
    aio_key: u32,
    aio_rw_flags: i32,
    #[cfg(target_endian = "big")]
    aio_key: u32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

/// User data of the eventfd read that wakes the reaper at shutdown.
const WAKE_KEY: u64 = u64::MAX;
/// Completion events taken per `io_getevents`.
const EVENTS_PER_REAP: usize = 128;
/// Most operations in flight on one context (the engine's budget may be
/// larger: an operation beyond it goes to the pool). `io_setup` charges
/// about twice this against `fs.aio-max-nr` (65536 by default).
pub(crate) const MAX_AIO_EVENTS: usize = 1024;

fn io_setup(nr: u32) -> std::io::Result<AioContext> {
    debug_assert!(
        nr >= 1 && nr as usize <= MAX_AIO_EVENTS,
        "a context holds 1 to MAX_AIO_EVENTS events"
    );
    let mut ctx: AioContext = 0;
    // SAFETY: io_setup writes one aio_context_t into `ctx`, a live local.
    let r = unsafe { libc::syscall(libc::SYS_io_setup, nr as libc::c_long, &mut ctx) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    debug_assert_ne!(ctx, 0, "io_setup names the context it made");
    Ok(ctx)
}

fn io_destroy(ctx: AioContext) -> std::io::Result<()> {
    debug_assert_ne!(ctx, 0, "only a context io_setup made is destroyed");
    // SAFETY: ctx came from io_setup; io_destroy waits for the requests in
    // flight before it returns.
    let r = unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The iocb of an operation of `kind` (command `code` on `fd`), its key
/// (`aio_data`) still to be set.
#[inline]
fn iocb_for(kind: &OpKind, code: AioCode, fd: i32) -> Iocb {
    let opcode = match code {
        AioCode::Pread => IOCB_CMD_PREAD,
        AioCode::Pwrite => IOCB_CMD_PWRITE,
        AioCode::Fsync => IOCB_CMD_FSYNC,
        AioCode::Fdsync => IOCB_CMD_FDSYNC,
    };
    let mut iocb = Iocb {
        aio_lio_opcode: opcode,
        aio_fildes: fd as u32,
        ..Iocb::default()
    };
    let span = kind.span();
    debug_assert_eq!(
        span.is_some(),
        !code.is_sync(),
        "a read or a write has memory to move, a sync none"
    );
    if let Some(crate::operation::Span { addr, offset, len }) = span {
        iocb.aio_buf = addr as u64;
        iocb.aio_nbytes = len as u64;
        iocb.aio_offset = offset as i64;
    }
    iocb
}

/// Submits one iocb: `Ok(())`, or the errno `io_submit` returned.
fn io_submit_one(ctx: AioContext, iocb: &Iocb) -> Result<(), i32> {
    debug_assert!(
        iocb.aio_lio_opcode <= IOCB_CMD_FDSYNC && iocb.aio_flags == 0,
        "only the commands this driver knows, without flags"
    );
    let mut ptrs = [iocb as *const Iocb];
    loop {
        // SAFETY: `ptrs` holds one pointer to a live iocb, which the kernel
        // copies during the call. The memory the iocb points to (a buffer)
        // is owned by an operation cell the slab holds until its event is
        // reaped (module docs).
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                ctx,
                1 as libc::c_long,
                ptrs.as_mut_ptr(),
            )
        };
        match r {
            1 => return Ok(()),
            r if r < 0 => {
                let e = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if e != libc::EINTR {
                    return Err(e);
                }
            }
            // 0 submitted without an error: the queue is full.
            _ => {
                debug_assert_eq!(r, 0, "io_submit of one iocb submits one at most");
                return Err(libc::EAGAIN);
            }
        }
    }
}

/// How `io_setup` failed, as a sentence (for [`DriverInfo`](crate::DriverInfo)).
pub(crate) fn setup_failure(e: &std::io::Error) -> String {
    debug_assert!(e.raw_os_error().is_some(), "io_setup fails with an errno");
    match e.raw_os_error() {
        Some(libc::EAGAIN) => {
            let limit = std::fs::read_to_string("/proc/sys/fs/aio-max-nr")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into());
            let used = std::fs::read_to_string("/proc/sys/fs/aio-nr")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into());
            format!(
                "io_setup: EAGAIN: fs.aio-max-nr exhausted ({used} of {limit} events in use; raise it with sysctl -w fs.aio-max-nr=...)"
            )
        }
        Some(libc::ENOSYS) => "io_setup: ENOSYS: the kernel has no AIO (CONFIG_AIO=n)".into(),
        Some(libc::EPERM) => "io_setup: EPERM: blocked by a seccomp filter".into(),
        _ => format!("io_setup: {e}"),
    }
}

pub(crate) struct AioDriver {
    inner: Arc<Inner>,
    reaper: Mutex<Option<JoinHandle<()>>>,
    /// Where the operations AIO cannot do asynchronously go.
    pub(crate) pool: PoolDriver,
}

/// The context and the operations in flight on it; shared by the driver,
/// the reaper thread and the threads that wait (`lead`).
pub(crate) struct Inner {
    ctx: AioContext,
    st: Mutex<State>,
    /// The reaper sleeps here while it does not hold the reaping role.
    reaper_cv: Condvar,
    /// Whether a kick (an eventfd read through AIO) could be posted; if not
    /// (before Linux 5.11), leaders sleep in short slices.
    kick_ok: AtomicBool,
    counters: Arc<Counters>,
    /// The kernel accepted `IOCB_CMD_FSYNC`/`FDSYNC` (cleared at the first
    /// EINVAL: before Linux 4.18 syncs go to the pool).
    sync_ok: AtomicBool,
    /// Written, then read through AIO, to wake the thread asleep in
    /// `io_getevents` (`Inner::kick`). Non-blocking: a read that finds the
    /// counter at zero completes at once with EAGAIN, which wakes as well.
    eventfd: OwnedFd,
    /// What that read reads into. Only the kernel writes it, during the
    /// `io_submit` of the read (an eventfd read with a non-zero counter
    /// completes at once); it lives as long as `Inner`.
    wake_buf: Box<std::cell::UnsafeCell<u64>>,
}

// SAFETY: `wake_buf` is written only by the kernel (module docs); every
// other field is Sync.
unsafe impl Sync for Inner {}

struct State {
    /// In-flight operations keyed by their iocb's `aio_data`, with a flag
    /// set while the submitting `io_submit` has not returned (a completion
    /// reaped then was inline) and a sequence number (keys are reused).
    slab: Slab<Entry>,
    seq: u64,
    shutdown: bool,
    /// Operations a reaping thread took out of `slab` and has not finished
    /// completing ([`lead::complete`]): the reaper ends at shutdown only
    /// once this is zero too, so that shutdown returns with every
    /// operation completed, its budget released.
    completing: usize,
    /// Who calls `io_getevents` (`lead`).
    reaping: lead::Reaping,
}

struct Entry {
    op: Arc<dyn Completable>,
    submitting: bool,
    seq: u64,
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the thread asleep in `io_getevents` (if any; otherwise the
    /// next one returns at once): posts a completion event by reading the
    /// eventfd through AIO, which completes inside `io_submit`.
    pub(crate) fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local into our own eventfd.
        let _ = unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let iocb = Iocb {
            aio_data: WAKE_KEY,
            aio_lio_opcode: IOCB_CMD_PREAD,
            aio_fildes: self.eventfd.as_raw_fd() as u32,
            aio_buf: self.wake_buf.get() as u64,
            aio_nbytes: 8,
            ..Iocb::default()
        };
        match io_submit_one(self.ctx, &iocb) {
            Ok(()) => {}
            // The context is full for now: events are on their way anyway.
            Err(libc::EAGAIN) => {}
            // No eventfd reads through AIO here (before 5.11): leaders then
            // sleep in short slices, and the reaper notices shutdown at its
            // next timeout.
            Err(_) => self.kick_ok.store(false, Ordering::Relaxed),
        }
    }

    /// Waits up to `timeout` for at least one event; returns how many were
    /// stored in `events` (0 on timeout or interruption).
    fn getevents(&self, events: &mut [IoEvent], timeout: Duration) -> usize {
        debug_assert!(
            !events.is_empty() && events.len() <= EVENTS_PER_REAP,
            "room for one event at least (min_nr is 1), EVENTS_PER_REAP at most"
        );
        debug_assert!(!timeout.is_zero(), "a sleep with no timeout would spin");
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `events` has room for `events.len()` events; the timeout
        // points to a live local.
        let n = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.ctx,
                1 as libc::c_long,
                events.len() as libc::c_long,
                events.as_mut_ptr(),
                &ts as *const libc::timespec,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                // Not eprintln!: it panics when stderr is a closed pipe.
                let _ = writeln!(std::io::stderr(), "overlap: io_getevents failed: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
            return 0;
        }
        debug_assert!(
            n as usize <= events.len(),
            "io_getevents stores at most as many events as it has room for"
        );
        n as usize
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|p| p.into_inner());
        debug_assert!(
            st.completing == 0 && st.reaping.waiters == 0,
            "nobody completes or waits on a context that is going: {} completing, {} waiting",
            st.completing,
            st.reaping.waiters
        );
        // io_destroy waits for every request in flight: only then may the
        // cells the slab holds (and their buffers) be freed.
        if io_destroy(self.ctx).is_err() && !st.slab.is_empty() {
            std::mem::forget(std::mem::take(&mut st.slab));
        }
    }
}

impl AioDriver {
    /// Creates the context (`events` in flight at most) and starts the
    /// reaper thread. The pool is the caller's.
    pub(crate) fn start(
        events: usize,
        pool: PoolDriver,
        counters: Arc<Counters>,
    ) -> Result<AioDriver, (String, PoolDriver)> {
        debug_assert!(
            (1..=MAX_AIO_EVENTS).contains(&events),
            "the engine sizes the context within 1 and MAX_AIO_EVENTS, got {events}"
        );
        let events = events.clamp(1, MAX_AIO_EVENTS);
        let ctx = match io_setup(events as u32) {
            Ok(c) => c,
            Err(e) => return Err((setup_failure(&e), pool)),
        };
        // SAFETY: eventfd has no memory arguments; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            let _ = io_destroy(ctx);
            return Err((
                format!("eventfd: {}", std::io::Error::last_os_error()),
                pool,
            ));
        }
        let inner = Arc::new(Inner {
            ctx,
            st: Mutex::new(State {
                slab: Slab::new(),
                seq: 0,
                shutdown: false,
                completing: 0,
                reaping: lead::Reaping::new(),
            }),
            reaper_cv: Condvar::new(),
            kick_ok: AtomicBool::new(true),
            counters,
            sync_ok: AtomicBool::new(true),
            // SAFETY: efd is a fresh descriptor that nothing else owns.
            eventfd: unsafe { OwnedFd::from_raw_fd(efd) },
            wake_buf: Box::new(std::cell::UnsafeCell::new(0)),
        });
        let reaper_inner = inner.clone();
        let reaper = std::thread::Builder::new()
            .name("overlap-aio".into())
            .spawn(move || {
                super::mark_driver_thread();
                lead::reap(&reaper_inner);
            });
        match reaper {
            Ok(h) => Ok(AioDriver {
                inner,
                reaper: Mutex::new(Some(h)),
                pool,
            }),
            Err(e) => Err((format!("could not start the AIO reaper thread: {e}"), pool)),
        }
    }

    /// Whether AIO performs `kind` asynchronously (else the pool does).
    pub(crate) fn takes(&self, kind: &OpKind) -> bool {
        match kind.aio() {
            Some(cmd) if cmd.code.is_sync() => self.inner.sync_ok.load(Ordering::Relaxed),
            Some(cmd) => cmd.direct,
            None => false,
        }
    }

    /// The context's shared state, for threads that wait on it
    /// ([`wait`]).
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Submits `op`. `urgent`: nobody will wait for it on a thread (a
    /// future polled by another executor), so the reaper reaps it without
    /// leaving the waiting threads their grace period (`lead`).
    pub(crate) fn submit(&self, op: Arc<dyn Completable>, urgent: bool) {
        if !self.takes(op.kind()) {
            self.pool.submit(op);
            return;
        }
        let Some(AioCommand { code, fd, .. }) = op.kind().aio() else {
            debug_assert!(false, "takes() admits only operations with an AIO command");
            self.pool.submit(op);
            return;
        };
        let mut iocb = iocb_for(op.kind(), code, fd);
        let Some((op, key, seq)) = self.register(op, urgent) else {
            return;
        };
        iocb.aio_data = key as u64;
        let inner = &self.inner;
        inner
            .counters
            .submit_syscalls
            .fetch_add(1, Ordering::Relaxed);
        match io_submit_one(inner.ctx, &iocb) {
            Ok(()) => self.mark_submitted(key, seq),
            Err(errno) => self.not_submitted(op, code, key, seq, errno),
        }
    }

    /// Enters `op` in the slab under a fresh sequence number and returns it
    /// with its key and number; `None` when the operation went elsewhere
    /// (refused at shutdown, or to the pool when the context is full).
    #[inline]
    fn register(
        &self,
        op: Arc<dyn Completable>,
        urgent: bool,
    ) -> Option<(Arc<dyn Completable>, usize, u64)> {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.shutdown {
            drop(st);
            if let Some(p) = super::contain(op.kind().name(), || op.refuse()) {
                std::panic::resume_unwind(p);
            }
            return None;
        }
        if st.slab.len() >= MAX_AIO_EVENTS {
            // The context is full: the pool does it rather than a
            // caller waiting for room.
            drop(st);
            self.pool.submit(op);
            return None;
        }
        st.seq += 1;
        let seq = st.seq;
        let key = st.slab.insert(Entry {
            op: op.clone(),
            submitting: true,
            seq,
        });
        debug_assert!(
            (key as u64) < WAKE_KEY,
            "slab keys stay below the reserved one"
        );
        debug_assert!(
            st.slab.len() <= MAX_AIO_EVENTS,
            "at most MAX_AIO_EVENTS operations in flight on the context"
        );
        let promote = lead::submitted(inner, &mut st, urgent);
        lead::check(&st);
        drop(st);
        lead::wake_promoted(promote);
        Some((op, key, seq))
    }

    /// `io_submit` took the operation at `key`: a completion reaped from
    /// now on is not inline.
    #[inline]
    fn mark_submitted(&self, key: usize, seq: u64) {
        let inner = &self.inner;
        inner.counters.aio_submitted.fetch_add(1, Ordering::Relaxed);
        let mut st = inner.lock();
        if let Some(e) = st.slab.get_mut(key) {
            if e.seq == seq {
                debug_assert!(e.submitting, "an operation is marked submitted once");
                e.submitting = false;
            }
        }
    }

    /// `io_submit` refused the operation at `key` with `errno`: takes it out
    /// of the slab, then hands it to the pool or completes it with the error.
    fn not_submitted(
        &self,
        op: Arc<dyn Completable>,
        code: AioCode,
        key: usize,
        seq: u64,
        errno: i32,
    ) {
        debug_assert!(errno > 0, "io_submit failed with an errno");
        let inner = &self.inner;
        // Not submitted: the kernel holds no pointer into the cell.
        let removed = {
            let mut st = inner.lock();
            let ours = st.slab.get(key).is_some_and(|e| e.seq == seq);
            debug_assert!(ours, "an unsubmitted operation cannot complete");
            if ours {
                st.slab.try_remove(key)
            } else {
                None
            }
        };
        drop(removed);
        let is_sync = code.is_sync();
        if is_sync && errno == libc::EINVAL {
            // No IOCB_CMD_FSYNC/FDSYNC for this file or kernel.
            inner.sync_ok.store(false, Ordering::Relaxed);
            self.pool.submit(op);
        } else if errno == libc::EAGAIN {
            // Out of AIO resources for now: the pool does it.
            self.pool.submit(op);
        } else if let Some(p) =
            super::contain(op.kind().name(), || op.complete(-(errno as i64), true))
        {
            std::panic::resume_unwind(p);
        }
    }

    /// Refuses new work, lets what is in flight complete, stops the reaper
    /// (joining it unless called from a driver thread), then the pool.
    pub(crate) fn shutdown(&self) {
        let inner = &self.inner;
        let first = {
            let mut st = inner.lock();
            !std::mem::replace(&mut st.shutdown, true)
        };
        if first {
            inner.reaper_cv.notify_all();
            inner.kick();
        }
        // A thread completing reaped operations (user code run at
        // completion that shuts the engine down) does not wait for the
        // reaper, which waits for those completions to end.
        if !super::on_driver_thread() && !lead::completing_here() {
            if let Some(h) = self.reaper.lock().unwrap_or_else(|p| p.into_inner()).take() {
                if h.join().is_ok() {
                    let st = inner.lock();
                    debug_assert!(
                        st.slab.is_empty() && st.completing == 0,
                        "the reaper ends with nothing in flight or being completed"
                    );
                }
            }
        }
        self.pool.shutdown();
    }
}

impl crate::driver::Driver for AioDriver {
    fn submit(&self, op: Arc<dyn Completable>, urgent: bool) {
        AioDriver::submit(self, op, urgent);
    }
    fn pool_takes(&self, kind: &OpKind) -> bool {
        !self.takes(kind)
    }
    fn shutdown(&self) {
        AioDriver::shutdown(self);
    }
}
