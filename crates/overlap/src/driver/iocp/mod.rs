//! The I/O completion port driver (Windows): reads and writes go to the
//! kernel as overlapped `ReadFile`/`WriteFile` calls on handles associated
//! with the engine's one completion port; everything else (syncs,
//! allocation, metadata, opens, closes, paths) goes to the thread pool
//! beside it, as on the AIO driver.
//!
//! # Submission
//!
//! The calling thread issues the call itself. Its `OVERLAPPED` lives in a
//! heap block ([`op::OpBlock`]) with the operation (which owns the buffer),
//! entered in the table of operations in flight before the call. Every
//! handle is associated with `FILE_SKIP_COMPLETION_PORT_ON_SUCCESS`, so
//! the call's return says who completes it:
//! - it succeeded (a cache hit, an extending write, which Windows performs
//!   synchronously, KB 156932): no packet comes, the caller completes it
//!   (`inline`);
//! - `ERROR_IO_PENDING`: its packet completes it, on a completion thread;
//!   or, for a thread that waits for it before anything else (`Op::wait`,
//!   [`IocpDriver::submit_waited`]), no packet: the call carries the
//!   thread's event, the completion wakes that thread alone, and it
//!   completes the operation itself (`iocp_waited_on_caller`);
//! - `ERROR_INVALID_USER_BUFFER` or `ERROR_NOT_ENOUGH_MEMORY` (too many
//!   operations outstanding, KB 156932): the caller waits for completions
//!   and tries again (`iocp_busy_retries`), or, on a driver thread or with
//!   nothing else in flight to wait for, hands the operation to the pool:
//!   never an error to its owner;
//! - any other error: no packet comes, the caller completes it with
//!   `-code` (a read's end of file is 0 bytes).
//!
//! # Completion threads
//!
//! One or two threads (the port's concurrency) take up to [`BATCH`] packets
//! per `GetQueuedCompletionStatusEx`, take their blocks out of the table,
//! and complete them with the batch's wake-ups deferred to its end
//! ([`complete_all`](super::complete_all)), no lock held.
//!
//! # Memory the kernel may write
//!
//! A block, and with it the operation and its buffer, is freed only after
//! its packet was dequeued, after its waiter saw its status leave
//! `STATUS_PENDING`, or after its call returned without leaving it
//! pending. Shutdown refuses new operations and waits for every one in
//! flight; after [`SHUTDOWN_GRACE`] it cancels those still in flight on
//! anything but a disk file (`CancelIoEx`: a read of a pipe nobody writes
//! would never end; a disk's operation ends by itself, and is waited for
//! as on Linux) every [`CANCEL_PERIOD`], and still waits for their end
//! (their packet, or their waiter's completion: `ERROR_OPERATION_ABORTED`,
//! or their result if they finished first).
//! Only when nothing is in flight, nor being completed, does a stop packet
//! end the threads. Should the port go with operations in flight anyway,
//! their blocks are leaked, never freed.
//!
//! Windows keeps an operation alive past the exit of the thread that
//! issued it (since Vista), so a caller's thread may end while its
//! operations are in flight.
//!
//! # What the driver relies on
//!
//! Every handle an overlapped call names was associated with the port
//! ([`IocpDriver::associate`]) before its first operation, and is used no
//! further if that failed (a handle adopted for synchronous I/O is never
//! associated: its reads and writes have no overlapped form and go to the
//! pool): a pending call on a handle of no port (or of
//! another port) queues its packet elsewhere, and nothing here would
//! complete it; an association without the skip modes would queue a packet
//! for a call the caller already completed. The handle stays open while
//! its operations are in flight (the file counts them in).

mod op;
pub(crate) mod port;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cancel;
#[cfg(test)]
mod tests_waited;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use slab::Slab;
use windows_sys::Win32::Foundation::{ERROR_OPERATION_ABORTED, HANDLE};
use windows_sys::Win32::Storage::FileSystem::{GetFileType, FILE_TYPE_DISK};
use windows_sys::Win32::System::Threading::INFINITE;
use windows_sys::Win32::System::IO::{CancelIoEx, OVERLAPPED_ENTRY};

use self::op::{handle_of, Issued, OpBlock};
use self::port::{Port, STOP_KEY, WAKE_KEY};
use super::pool::PoolDriver;
use super::Done;
use crate::cell::Completable;
use crate::operation::OpKind;
use crate::stats::Counters;

/// Packets taken per `GetQueuedCompletionStatusEx`.
pub(crate) const BATCH: usize = 64;
/// The most completion threads a driver runs.
pub(crate) const MAX_THREADS: usize = 4;
/// How long shutdown waits for the operations in flight before it cancels
/// them.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// How often, after the grace, shutdown cancels what is still in flight (an
/// operation issued while the last cancellation ran is cancelled by the
/// next).
pub(crate) const CANCEL_PERIOD: Duration = Duration::from_millis(100);
/// How long a caller refused for lack of resources waits for a completion
/// before it tries again.
const BUSY_WAIT: Duration = Duration::from_millis(10);

/// The IOCP driver: the port, its completion threads, the pool beside it.
pub(crate) struct IocpDriver {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What the driver, its completion threads and the submitting threads
/// share.
struct Inner {
    port: Port,
    st: Mutex<State>,
    /// Signalled when operations leave the table or finish completing.
    retired: Condvar,
    counters: Arc<Counters>,
    /// Where the operations with no overlapped form go.
    pool: PoolDriver,
    /// Completion threads started.
    threads: usize,
    /// Shutdown began (`State::shutdown` is set): read without the lock by
    /// the completion threads before each wait.
    shutting: AtomicBool,
    /// `Port::cancel` was called once: from then on, an issuer whose call
    /// pended looks whether it was asked for before its call.
    cancels: AtomicBool,
}

/// An operation in flight: what `CancelIoEx` needs.
struct Flight {
    fd: i32,
    /// The block's address (`*mut OpBlock`), the kernel's until its packet
    /// (or its waiter sees it finish).
    block: usize,
    /// The port and key its completion goes to (`Port::cancel`).
    queue_key: Option<(usize, u64)>,
    /// `Port::cancel` asked for it: cancelled again by its issuer once
    /// the call pends, should the request have come before the call.
    cancel_asked: bool,
}

struct State {
    /// The operations whose block the kernel may hold, by slot.
    flight: Slab<Flight>,
    /// Operations taken out of `flight` whose completion has not finished.
    completing: usize,
    /// Operations retired so far (a busy caller waits for it to move).
    retirements: u64,
    /// When shutdown began.
    shutdown: Option<Instant>,
    /// When the operations in flight were last cancelled.
    cancelled: Option<Instant>,
    /// The stop packet was posted (once nothing was in flight).
    stopping: bool,
}

impl State {
    /// Operations the kernel may hold or whose completion runs.
    fn in_flight(&self) -> usize {
        debug_assert!(
            !self.stopping || (self.shutdown.is_some() && self.flight.is_empty() && self.completing == 0),
            "the stop packet is posted at shutdown, once nothing is in flight, and nothing enters after"
        );
        self.flight.len() + self.completing
    }
}

impl IocpDriver {
    /// Creates the port and starts `threads` completion threads (1 to
    /// [`MAX_THREADS`]) and a pool of at most `pool_threads` threads beside
    /// them.
    pub(crate) fn start(
        threads: usize,
        pool_threads: usize,
        counters: Arc<Counters>,
    ) -> io::Result<IocpDriver> {
        debug_assert!(
            (1..=MAX_THREADS).contains(&threads),
            "1 to {MAX_THREADS} completion threads: {threads}"
        );
        let threads = threads.clamp(1, MAX_THREADS);
        let inner = Arc::new(Inner {
            port: Port::new(threads as u32)?,
            st: Mutex::new(State {
                flight: Slab::new(),
                completing: 0,
                retirements: 0,
                shutdown: None,
                cancelled: None,
                stopping: false,
            }),
            retired: Condvar::new(),
            pool: PoolDriver::start(pool_threads.max(1), counters.clone()),
            counters,
            threads,
            shutting: AtomicBool::new(false),
            cancels: AtomicBool::new(false),
        });
        let driver = IocpDriver {
            inner,
            threads: Mutex::new(Vec::with_capacity(threads)),
        };
        for i in 0..threads {
            let inner = driver.inner.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("overlap-iocp-{i}"))
                .spawn(move || inner.run());
            match spawned {
                Ok(h) => driver.lock_threads().push(h),
                Err(e) => {
                    // Ends the threads started (nothing is in flight yet).
                    super::Driver::shutdown(&driver);
                    return Err(e);
                }
            }
        }
        Ok(driver)
    }

    fn lock_threads(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        let threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert!(
            threads.len() <= self.inner.threads,
            "at most the threads started are held"
        );
        threads
    }

    /// Associates `fd` (a file `HANDLE`, see `crate::sys`) with the port:
    /// called once per handle the engine opens or adopts, before any
    /// operation on it. An error (a handle already associated with another
    /// port, an invalid one) means that the handle cannot be used with this
    /// engine.
    pub(crate) fn associate(&self, fd: i32) -> io::Result<()> {
        debug_assert!(fd >= 0, "a handle is associated while open");
        self.inner.port.associate(handle_of(fd))
    }

    /// Performs `op` for a thread that waits for it before anything else
    /// (`Op::wait`, `Task::wait`): its overlapped call is issued with the
    /// thread's event and no packet, waited for and completed on this
    /// thread, so that the completion wakes the waiter directly, as its
    /// own ring does on Linux (`Stats::iocp_waited_on_caller`). What has
    /// no overlapped form, or a thread with no event, takes the usual way.
    /// The operation is in the table while it pends, as any other: shutdown
    /// waits for it and cancels it as the others.
    pub(crate) fn submit_waited(&self, op: Arc<dyn Completable>) {
        debug_assert!(
            !op.shared().forked(),
            "a forked child submits nothing to its parent's engine"
        );
        let Some(call) = op.kind().overlapped() else {
            return super::Driver::submit(self, op, false);
        };
        debug_assert!(
            op.queue_key().is_none(),
            "a waited operation is a future's, which no port's cancel names (none is cancelled by its issuer here)"
        );
        crate::sys::with_thread_event(|ev| {
            let Some(block) = self.inner.register(OpBlock::new(op, call, ev)) else {
                return;
            };
            self.inner.issue(block, ev);
        });
    }
}

impl IocpDriver {
    /// Cancels (`CancelIoEx`) the operations in flight whose completion
    /// goes to the port `port` (its identity, `Completable::queue_key`) with
    /// `key`; returns how many were asked. Each still completes exactly
    /// once: with `ERROR_OPERATION_ABORTED` if stopped in time (or if the
    /// kernel refused its call for lack of resources before it ran), else
    /// with its own result; its buffer stays the kernel's until then. One
    /// already handed to the pool (a refused call, with nothing else in
    /// flight to wait for) runs to its end.
    pub(crate) fn cancel(&self, port: usize, key: u64) -> usize {
        self.inner.cancel(port, key)
    }
}

impl Drop for IocpDriver {
    /// Shuts down (again: it does nothing the second time but join).
    fn drop(&mut self) {
        super::Driver::shutdown(self);
        debug_assert!(
            self.inner.lock().shutdown.is_some(),
            "a dropped driver refuses work"
        );
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enters `block` in the table and gives up its box (the kernel may get
    /// it); `None` at shutdown, the operation refused.
    fn register(&self, mut block: Box<OpBlock>) -> Option<*mut OpBlock> {
        let mut st = self.lock();
        if st.shutdown.is_some() {
            drop(st);
            let OpBlock { op, .. } = *block;
            if let Some(p) = super::contain(op.kind().name(), || op.refuse()) {
                std::panic::resume_unwind(p);
            }
            return None;
        }
        debug_assert!(!st.stopping, "nothing enters once the threads stop");
        let entry = st.flight.vacant_entry();
        block.slot = entry.key();
        debug_assert!(block.slot != usize::MAX, "a slot is a table index");
        let fd = block.call.fd;
        let queue_key = block.queue_key;
        let raw = Box::into_raw(block);
        entry.insert(Flight {
            fd,
            block: raw as usize,
            queue_key,
            cancel_asked: false,
        });
        Some(raw)
    }

    /// Cancels (`CancelIoEx`) the operations in flight whose completion
    /// goes to `port` with `key`; returns how many were asked. One not yet
    /// issued is marked, and its issuer cancels it once its call pends.
    fn cancel(&self, port: usize, key: u64) -> usize {
        // Before the marks: an issuer that does not see it made its call
        // before it, and the `CancelIoEx` below finds that call.
        self.cancels.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let mut st = self.lock();
        let mut asked = 0;
        for (_, f) in st.flight.iter_mut() {
            if f.queue_key != Some((port, key)) {
                continue;
            }
            f.cancel_asked = true;
            asked += 1;
            // SAFETY: the block is in the table, so allocated (freed only
            // after leaving it, under this lock), and its handle open (its
            // file counts the operation in). A call not issued yet, or
            // finished, is not found (ERROR_NOT_FOUND), which is harmless.
            unsafe {
                CancelIoEx(
                    handle_of(f.fd),
                    OpBlock::overlapped(f.block as *mut OpBlock),
                )
            };
        }
        asked
    }

    /// Cancels the call of `block` (in `slot`), which just pended, if
    /// `Port::cancel` asked for it before the call was made.
    fn cancel_if_asked(&self, slot: usize, block: *mut OpBlock) {
        // The call (the kernel's stores that queued it) before the load:
        // with `cancel`'s store before its own look, one of the two sees
        // the other (Dekker's pattern), whatever the kernel's own barriers.
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.cancels.load(Ordering::SeqCst) {
            return;
        }
        let st = self.lock();
        // The entry is looked up, not the block: its packet may already
        // have freed it.
        let Some(f) = st.flight.get(slot) else {
            return;
        };
        if f.block == block as usize && f.cancel_asked {
            // SAFETY: in the table under the lock: allocated, handle open
            // (as in `cancel`).
            unsafe { CancelIoEx(handle_of(f.fd), OpBlock::overlapped(block)) };
        }
    }

    /// Issues `block`'s call (registered), completing it here if it did not
    /// pend, retrying it while the kernel is short of resources. With
    /// `waiter` (the event the block was made with), a call that pends is
    /// waited for and completed here too ([`IocpDriver::submit_waited`]).
    fn issue(&self, block: *mut OpBlock, waiter: Option<HANDLE>) {
        // SAFETY: the block is registered and still ours. (Only a port's
        // operation can be asked to stop before its call: a future's pends
        // without looking.)
        let (slot, cancellable) = unsafe { ((*block).slot, (*block).queue_key.is_some()) };
        loop {
            self.counters
                .submit_syscalls
                .fetch_add(1, Ordering::Relaxed);
            // SAFETY: the block is registered and ours (from `register`, or
            // returned by a call that did not start it).
            let issued = unsafe { OpBlock::issue(block) };
            match issued {
                Issued::Pending => {
                    self.counters.iocp_submitted.fetch_add(1, Ordering::Relaxed);
                    match waiter {
                        // SAFETY: the block was made with `ev` and pends;
                        // no packet comes for it.
                        Some(ev) => return unsafe { self.complete_waited(block, ev) },
                        // The block is the kernel's now: not touched again
                        // here (only its table entry is looked at).
                        None if cancellable => return self.cancel_if_asked(slot, block),
                        None => return,
                    }
                }
                Issued::Done(res) => {
                    self.counters.iocp_submitted.fetch_add(1, Ordering::Relaxed);
                    // SAFETY: no packet comes for a call that did not pend.
                    let block = unsafe { OpBlock::reclaim(OpBlock::overlapped(block)) };
                    debug_assert!(
                        res <= i64::from(block.call.len),
                        "a call moves at most what it asked for: {res}"
                    );
                    return self.complete_here(*block, res, true);
                }
                Issued::Busy(code) => {
                    debug_assert!(code != 0, "a refusal has its Win32 code");
                    self.counters
                        .iocp_busy_retries
                        .fetch_add(1, Ordering::Relaxed);
                    if super::on_driver_thread() || !self.wait_for_room() {
                        // SAFETY: the call did not start the operation.
                        let block = unsafe { OpBlock::reclaim(OpBlock::overlapped(block)) };
                        return self.to_pool(*block);
                    }
                }
            }
        }
    }

    /// Waits (a little) for an operation to retire, so that a call the
    /// kernel refused for lack of resources may be tried again; `false` if
    /// nothing else is in flight to wait for.
    fn wait_for_room(&self) -> bool {
        let st = self.lock();
        debug_assert!(
            st.in_flight() >= 1,
            "the caller's own operation is in the table"
        );
        if st.in_flight() <= 1 {
            return false;
        }
        let seen = st.retirements;
        let _ = self
            .retired
            .wait_timeout_while(st, BUSY_WAIT, |st| st.retirements == seen)
            .unwrap_or_else(|p| p.into_inner());
        true
    }

    /// Hands the operation of `block` (never started) to the pool, then
    /// takes it out of the table: the pool holds it before shutdown may see
    /// nothing in flight and shut the pool down.
    fn to_pool(&self, block: OpBlock) {
        // Asked to stop while refused: not run at all (the pool could not
        // stop it).
        let asked = self
            .lock()
            .flight
            .get(block.slot)
            .is_some_and(|f| f.cancel_asked);
        if asked {
            return self.complete_here(block, -i64::from(ERROR_OPERATION_ABORTED), true);
        }
        let OpBlock { op, slot, .. } = block;
        self.pool.submit(op);
        let mut st = self.lock();
        let gone = st.flight.try_remove(slot);
        debug_assert!(gone.is_some(), "a block leaves the table once");
        self.retire_locked(&mut st, 0);
    }

    /// Waits on `ev` for the pending call of `block`, then completes its
    /// operation on this thread: the completion wakes this thread alone,
    /// and no completion thread takes part.
    ///
    /// # Safety
    /// `block` is registered, its call was issued with `ev` (the low bit
    /// set: no packet is queued for it) and pends.
    unsafe fn complete_waited(&self, block: *mut OpBlock, ev: HANDLE) {
        // SAFETY: the caller's contract; the block stays in the table (so
        // shutdown waits for it, and may cancel it) until it is done.
        unsafe { OpBlock::wait_done(block, ev) };
        self.counters
            .iocp_waited_on_caller
            .fetch_add(1, Ordering::Relaxed);
        // SAFETY: the kernel finished with the block, and no packet comes
        // for it: this is its only reclaiming.
        let block = unsafe { OpBlock::reclaim(OpBlock::overlapped(block)) };
        let res = block.result();
        self.complete_here(*block, res, false);
    }

    /// Completes the operation of `block` on this thread: it finished
    /// within its call (`inline`), or its waiter saw it finish.
    fn complete_here(&self, block: OpBlock, res: i64, inline: bool) {
        let OpBlock { op, slot, .. } = block;
        {
            let mut st = self.lock();
            let gone = st.flight.try_remove(slot);
            debug_assert!(gone.is_some(), "a block leaves the table once");
            st.completing += 1;
        }
        let mut done = super::spare_done();
        done.push(Done { op, res, inline });
        let panic = super::complete_all(&mut done);
        super::keep_done(done);
        self.retire(1);
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }

    /// Counts `n` completions finished.
    fn retire(&self, n: usize) {
        debug_assert!(n >= 1, "a retirement finishes a completion at least");
        let mut st = self.lock();
        self.retire_locked(&mut st, n);
    }

    /// Counts `n` completions finished (and an operation out of the
    /// table), wakes busy callers, and stops the threads once shutdown
    /// finds nothing in flight.
    fn retire_locked(&self, st: &mut State, n: usize) {
        debug_assert!(
            st.completing >= n,
            "{n} completions finish of {} begun",
            st.completing
        );
        st.completing -= n;
        st.retirements += 1;
        self.retired.notify_all();
        self.stop_if_idle(st);
    }

    /// Posts the stop packet once shutdown began and nothing is in flight.
    fn stop_if_idle(&self, st: &mut State) {
        debug_assert!(
            !st.stopping || st.shutdown.is_some(),
            "the threads stop only at shutdown"
        );
        if st.shutdown.is_some() && st.in_flight() == 0 && !st.stopping {
            st.stopping = true;
            if !self.port.post(STOP_KEY) {
                report("could not post the stop packet; the completion threads keep running");
            }
        }
    }

    /// Refuses new operations from now on; wakes a completion thread to
    /// time the grace of what is in flight, or stops them if nothing is.
    fn begin_shutdown(&self) {
        let mut st = self.lock();
        if st.shutdown.is_some() {
            return;
        }
        debug_assert!(
            !st.stopping && st.cancelled.is_none(),
            "stops and cancellations follow shutdown"
        );
        st.shutdown = Some(Instant::now());
        self.shutting.store(true, Ordering::Release);
        if st.in_flight() > 0 && !self.port.post(WAKE_KEY) {
            report("could not wake a completion thread for shutdown");
        }
        self.stop_if_idle(&mut st);
    }

    /// How long a completion thread waits for packets: for ever, except at
    /// shutdown with operations in flight, where it cancels them once the
    /// grace is over (then every [`CANCEL_PERIOD`]).
    fn wait_time(&self) -> u32 {
        if !self.shutting.load(Ordering::Acquire) {
            return INFINITE;
        }
        let mut st = self.lock();
        let Some(began) = st.shutdown else {
            return INFINITE;
        };
        if st.flight.is_empty() {
            return INFINITE;
        }
        let now = Instant::now();
        let due = match st.cancelled {
            None => began + SHUTDOWN_GRACE,
            Some(at) => at + CANCEL_PERIOD,
        };
        if now < due {
            return millis(due - now);
        }
        st.cancelled = Some(now);
        debug_assert!(!st.stopping, "nothing is cancelled once the threads stop");
        for (_, f) in st.flight.iter() {
            if on_disk(f.fd) {
                // A disk's read or write ends by itself: the contract is to
                // wait for it (its write may be what the caller relies on).
                continue;
            }
            // SAFETY: the block is in the table, so it is allocated (it is
            // freed only after leaving the table, under this lock) and its
            // handle open (its file counts it in). A finished or not yet
            // issued operation is simply not found.
            unsafe {
                CancelIoEx(
                    handle_of(f.fd),
                    OpBlock::overlapped(f.block as *mut OpBlock),
                )
            };
        }
        millis(CANCEL_PERIOD)
    }

    /// A completion thread.
    fn run(self: Arc<Self>) {
        super::mark_driver_thread();
        let mut entries = [OVERLAPPED_ENTRY::default(); BATCH];
        let mut done: Vec<Done> = Vec::with_capacity(BATCH);
        loop {
            let n = match self.port.dequeue(&mut entries, self.wait_time()) {
                Ok(n) => n,
                Err(e) => {
                    report(&format!("GetQueuedCompletionStatusEx failed: {e}"));
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
            };
            let stop = self.take_batch(&entries[..n], &mut done);
            let k = done.len();
            if k > 0 {
                // Completion runs user code; `contain` reports a panic
                // there (this is a driver thread) and the thread goes on.
                let _ = super::complete_all(&mut done);
                self.retire(k);
            }
            if stop {
                // Passes the stop on to the next thread (the last one's
                // stays queued, freed with the port).
                if !self.port.post(STOP_KEY) {
                    report("could not pass the stop packet on");
                }
                return;
            }
        }
    }

    /// Takes the operations of dequeued `entries` out of the table into
    /// `done` with their results, counted as completing; returns whether
    /// the stop packet was among them.
    fn take_batch(&self, entries: &[OVERLAPPED_ENTRY], done: &mut Vec<Done>) -> bool {
        debug_assert!(done.is_empty(), "the list of completions is kept empty");
        let mut stop = false;
        let mut st = self.lock();
        for e in entries {
            if e.lpOverlapped.is_null() {
                debug_assert!(
                    e.lpCompletionKey == STOP_KEY || e.lpCompletionKey == WAKE_KEY,
                    "a packet without OVERLAPPED is the driver's own"
                );
                stop |= e.lpCompletionKey == STOP_KEY;
                continue;
            }
            // SAFETY: a packet with an OVERLAPPED is one of an operation
            // issued on an associated handle, whose block the driver made;
            // dequeued once, it is reclaimed once.
            let block = unsafe { OpBlock::reclaim(e.lpOverlapped) };
            // Out of the table (under the lock) before the block is freed.
            let gone = st.flight.try_remove(block.slot);
            debug_assert!(
                gone.is_some_and(|f| f.block == e.lpOverlapped as usize),
                "a dequeued block was in the table"
            );
            let res = block.result();
            let OpBlock { op, .. } = *block;
            done.push(Done {
                op,
                res,
                inline: false,
            });
        }
        st.completing += done.len();
        stop
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|p| p.into_inner());
        debug_assert!(
            st.in_flight() == 0 || std::thread::panicking(),
            "the port goes with nothing in flight: {} in the table, {} completing",
            st.flight.len(),
            st.completing
        );
        // Blocks still in the table (only if a completion thread was lost)
        // are leaked with it: the kernel may still write them.
    }
}

/// `d` in milliseconds, rounded up, below `INFINITE`.
fn millis(d: Duration) -> u32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    let ms = u32::try_from(ms).unwrap_or(INFINITE - 1).min(INFINITE - 1);
    debug_assert!(ms < INFINITE, "a timed wait is not an infinite one");
    ms
}

/// Says on stderr what went wrong on a completion thread (never panics).
fn report(what: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "overlap: IOCP driver: {what}");
}

impl super::Driver for IocpDriver {
    /// Performs `op`: its overlapped call on the port, or the pool.
    /// (`urgent` changes nothing: the completion threads reap every packet.)
    fn submit(&self, op: Arc<dyn Completable>, _urgent: bool) {
        debug_assert!(
            !op.shared().forked(),
            "a forked child submits nothing to its parent's engine"
        );
        let Some(call) = op.kind().overlapped() else {
            self.inner.pool.submit(op);
            return;
        };
        let Some(block) = self.inner.register(OpBlock::new(op, call, None)) else {
            return;
        };
        self.inner.issue(block, None);
    }

    /// Whether the pool performs `kind`: it has no overlapped form.
    fn pool_takes(&self, kind: &OpKind) -> bool {
        let overlapped = kind.overlapped();
        debug_assert!(
            overlapped.is_none_or(|o| kind
                .span()
                .is_some_and(|s| s.len == o.len as usize && s.offset == o.offset)),
            "an overlapped call moves its operation's span"
        );
        overlapped.is_none()
    }

    /// Refuses new operations, waits for every one in flight to complete
    /// (cancelling them after [`SHUTDOWN_GRACE`]), ends the completion
    /// threads (joining them unless called from a driver thread, which
    /// leaves them to end on their own), then shuts the pool down.
    fn shutdown(&self) {
        self.inner.begin_shutdown();
        if !super::on_driver_thread() {
            let handles = std::mem::take(&mut *self.lock_threads());
            let joined = !handles.is_empty();
            for h in handles {
                let _ = h.join();
            }
            if joined {
                let st = self.inner.lock();
                debug_assert!(
                    st.in_flight() == 0 && st.stopping,
                    "the completion threads end once nothing is in flight: {} in the table, {} completing",
                    st.flight.len(),
                    st.completing
                );
            }
        }
        self.inner.pool.shutdown();
    }
}

/// Whether `fd` is a file on a disk (not a pipe, a socket or a character
/// device), whose operations end by themselves.
fn on_disk(fd: i32) -> bool {
    debug_assert!(fd >= 0, "an operation in flight has an open handle");
    // SAFETY: reads the type of a handle that is open while its operation
    // is in the table (its file counts the operation in).
    unsafe { GetFileType(handle_of(fd)) == FILE_TYPE_DISK }
}
