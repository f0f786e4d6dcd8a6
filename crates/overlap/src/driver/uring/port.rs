//! A port's own ring: the completion port of Windows on io_uring. Any thread
//! submits (under a lock on the submission queue), any worker waits in
//! `io_uring_enter` on the ring, and the kernel wakes a waiting worker when
//! a completion arrives: no thread of the engine stands in between.
//!
//! The ring has neither `SINGLE_ISSUER` nor `DEFER_TASKRUN` (many threads
//! submit and wait). Linux runs an operation's completion work on the thread
//! that submitted it: when that thread next enters or leaves the kernel,
//! when it is woken from any sleep for it, or, once it has exited, on a
//! kernel worker. So a completion is posted whatever its submitter does
//! next, and every worker asleep in the ring sees it. A worker that both
//! submits and waits (the usual pipeline) is woken by its own completions
//! directly, as a fio job is.
//!
//! `user_data` is the address of the operation's cell (`Arc::into_raw`);
//! the reaper turns it back into the `Arc`, so a cell lives exactly until
//! its completion is taken. `WAKE` (0) marks the no-ops that wake waiting
//! workers when the last outstanding completion has been taken, `CANCEL`
//! (1) the cancellations [`PortRing::cancel`] submits. On a port made
//! cancellable, `inflight` maps the cell of every operation submitted and
//! not yet taken to its key, for cancellation by key (other ports keep no
//! map: it costs a lock and two map updates per operation).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use io_uring::{opcode, squeue};

use super::registry::{Keep, Registry};
use super::ring::Ring;
use super::setup::{bound_kernel_workers, make_ring, Issuers};
use super::thread::{deferral, flush_deferred, Deferral, Deferred};
use crate::cell::{Completable, EngineState, FixedFiles, RegisteredFile};
use crate::error::Error;
use crate::operation::OpKind;

const WAKE: u64 = 0;

/// Hashes a cell's address for `inflight`: addresses are unique and
/// aligned, so a multiplication spreads them well enough, without SipHash's
/// cost on every operation.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
/// The user data of the `IORING_OP_ASYNC_CANCEL` entries of
/// [`PortRing::cancel`] (no cell is at address 1).
const CANCEL: u64 = 1;

// A cell's address (`Arc::into_raw`) is aligned at least as its counts
// are, so no cell is at `WAKE` or `CANCEL`.
const _: () = assert!(
    WAKE != CANCEL && std::mem::align_of::<std::sync::atomic::AtomicUsize>() as u64 > CANCEL
);

/// The longest a worker sleeps in the ring before it checks whether any
/// completion is still to come.
const RECHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// A completion taken from the ring: the cell, the kernel's result, inline.
type Taken<C> = (Arc<C>, i32, bool);

/// What a port's ring needs of an operation's cell beyond its completion
/// interface (implemented by `crate::future::OpCell`): the ring takes the
/// completion itself, by the cell's address in the entry's user data, and
/// hands the port's worker what the cell makes of it.
pub(crate) trait PortOp: Completable + Sized + 'static {
    /// What a worker of the port receives (`crate::Completion`).
    type Completion;
    /// Records a result obtained before submission (delivered through a
    /// no-op).
    fn preset(&self, res: i64);
    fn set_submitting(&self, on: bool);
    /// Releases the operation's claim on its file (the kernel holds its own
    /// reference once it has taken the submission).
    fn release_file(&self);
    /// Claims the operation's file again before a resubmission: `false` if
    /// the file was closed since.
    fn reclaim_file(&self) -> bool;
    /// Counts a resubmission after the submitter's exit; `false` once the
    /// operation came back failed too often to try again.
    fn may_resubmit(&self) -> bool;
    /// The port's user asked to cancel the operation: no resubmission.
    fn forbid_resubmit(&self);
    /// Records the completion queue's tail right after submission.
    fn set_inline_before(&self, tail: u32);
    /// Whether a completion found at queue position `pos` was inline.
    fn inline_at(&self, pos: u32) -> bool;
    /// The key of a port's operation.
    fn port_key(&self) -> u64;
    /// Takes the operation's result (from the completion's `res`, unless it
    /// was preset) and its buffer, once, for the worker that reaped it:
    /// `None` if there is nothing to hand over.
    fn take_completion(&self, cqe_res: i32, inline: bool) -> Option<Self::Completion>;
}

pub(crate) struct PortRing<C> {
    /// Closed by `Drop` (the port drained its operations first).
    ring: Ring,
    /// Serialises pushes to the submission queue.
    sq: Mutex<()>,
    /// Serialises taking from the completion queue; counts the entries taken
    /// (the queue's head position).
    cq: Mutex<u32>,
    /// Submitted and not yet taken.
    outstanding: AtomicUsize,
    /// The cells (addresses) of the operations submitted and not yet taken,
    /// with their keys. A cell in here is alive: it leaves in `complete`,
    /// under this lock, before its last reference can go.
    /// `None` on a port not made cancellable.
    inflight: Option<Mutex<HashMap<usize, u64, BuildHasherDefault<AddrHasher>>>>,
    /// Completions taken from the ring by an engine shutting down, for the
    /// port's workers to take (see [`Settle`]); `stashed` counts them.
    stash: Mutex<std::collections::VecDeque<Taken<C>>>,
    stashed: AtomicUsize,
    /// Operations queued without a system call inside `Port::batch`
    /// (`super::thread::defer`), until the submitting call that flushes them.
    deferred: Mutex<Vec<Arc<C>>>,
    /// `deferred`'s length as last stored under its lock: a look without
    /// the lock on every system call that may submit.
    listed_count: AtomicUsize,
    /// Cells of completed operations, empty (their buffer, permit and file
    /// taken) and referenced from nowhere else, for the next operations to
    /// reuse ([`take_spare`](Self::take_spare)): a port at steady state
    /// allocates nothing per operation. At most [`SPARE_CELLS`].
    spare: Mutex<Vec<Arc<C>>>,
    /// Buffers and descriptors registered with the kernel (`Registry`).
    registry: Registry,
}

/// The most spare cells a port's ring keeps (about 200 bytes each).
const SPARE_CELLS: usize = 1024;

/// A port's ring as an engine shutting down sees it: it takes the ring's
/// completions into the port's stash, so that it knows when the kernel is
/// done with every operation of the port without taking them from the
/// port's workers.
pub(crate) trait Settle: Send + Sync {
    /// Takes what the ring holds into the stash; whether the kernel is done
    /// with every operation of the port.
    fn settle(&self) -> bool;
}

impl<C: PortOp> Settle for PortRing<C> {
    fn settle(&self) -> bool {
        if self.inherited() {
            return true;
        }
        // Entries another thread queued in a batch are submitted by this
        // call too; this thread's own are flushed first.
        flush_deferred();
        self.enter_getevents();
        while let Some((cell, res, inline)) = self.pop() {
            if let Some((cell, res, inline)) = self.resubmit_or_keep(cell, res, inline) {
                let mut stash = self.stash.lock().unwrap_or_else(|p| p.into_inner());
                stash.push_back((cell, res, inline));
                debug_assert!(
                    stash.len() <= self.outstanding.load(Ordering::Acquire),
                    "every stashed completion is still counted outstanding"
                );
                drop(stash);
                self.stashed.fetch_add(1, Ordering::AcqRel);
            }
        }
        // A worker between taking a completion and counting it out is done
        // with the kernel too, but this waits for it: a moment.
        self.outstanding.load(Ordering::Acquire) <= self.stashed.load(Ordering::Acquire)
    }
}

impl<C> Drop for PortRing<C> {
    /// Ends the registrations before the ring's descriptor closes
    /// ([`Registry::unregister_all`]), through the one teardown
    /// ([`Ring::close`]). The port drained its operations before this:
    /// what the kernel may still hold is only what an unwinding drain left,
    /// and then the ring is leaked.
    fn drop(&mut self) {
        let outstanding = *self.outstanding.get_mut();
        let stashed = *self.stashed.get_mut();
        let idle = outstanding <= stashed;
        debug_assert!(
            self.inflight
                .as_mut()
                .is_none_or(|m| m.get_mut().map_or(true, |m| m.len() <= outstanding)),
            "every cell in flight is counted outstanding"
        );
        debug_assert!(
            stashed <= outstanding,
            "every stashed completion is still counted outstanding"
        );
        debug_assert!(
            idle || std::thread::panicking() || self.ring.inherited(),
            "a port's ring goes only once the kernel is done with its operations"
        );
        let registry = &mut self.registry;
        self.ring.close(idle, |io| registry.unregister_all(io));
    }
}

impl<C: PortOp> FixedFiles for PortRing<C> {
    fn forget(&self, fd: i32) {
        if !self.inherited() {
            self.registry.forget(self.ring.io(), fd);
        }
    }
}

impl<C: PortOp> Deferred for PortRing<C> {
    fn flush(&self) {
        PortRing::flush(self);
    }
}

impl<C: PortOp> PortRing<C> {
    /// A ring for a port of `shared`'s engine, or `None` if none can be
    /// made (the port then queues completions from the engine's driver).
    pub(crate) fn new(shared: &EngineState, cancellable: bool) -> Option<PortRing<C>> {
        let (ring, _flags) = make_ring(shared.rings.engine, Issuers::Many).ok()?;
        if shared.max_kernel_workers.is_some() {
            // io-wq belongs to the submitting task; a port's ring carries
            // the engine's bound for the threads that submit on it.
            let _ = bound_kernel_workers(ring.io(), shared.max_kernel_workers);
        }
        Some(PortRing {
            ring,
            sq: Mutex::new(()),
            cq: Mutex::new(0),
            outstanding: AtomicUsize::new(0),
            inflight: cancellable.then(|| Mutex::new(HashMap::default())),
            stash: Mutex::new(std::collections::VecDeque::new()),
            stashed: AtomicUsize::new(0),
            deferred: Mutex::new(Vec::new()),
            listed_count: AtomicUsize::new(0),
            spare: Mutex::new(Vec::new()),
            registry: Registry::new(),
        })
    }

    /// Registers the file's descriptor with the kernel for this port
    /// ([`Registry::register_file`]): `Ok(false)` when it cannot.
    pub(crate) fn register_file(
        self: &Arc<Self>,
        file: &dyn RegisteredFile,
    ) -> Result<bool, Error> {
        self.check_not_inherited()?;
        let me: Arc<dyn FixedFiles> = self.clone();
        self.registry
            .register_file(self.ring.io(), file, Arc::downgrade(&me))
    }

    /// Registers a pool's memory, which `arena` keeps allocated
    /// ([`Registry::register_region`]).
    pub(crate) fn register_arena(
        &self,
        start: usize,
        len: usize,
        arena: Keep,
    ) -> Result<(), Error> {
        self.check_not_inherited()?;
        debug_assert!(
            start.checked_add(len).is_some(),
            "a pool's arena is a range of memory"
        );
        // SAFETY: `arena` holds `start..start + len` allocated, and the
        // registry keeps it for as long as the ring lives: the kernel never
        // reaches memory this process freed.
        unsafe {
            self.registry
                .register_region(self.ring.io(), self.ring.ops(), start, len, Some(arena))
        }
    }

    /// Registers `len` bytes at `start`, memory the caller owns (a C
    /// program's buffer pool), as [`register_arena`](Self::register_arena)
    /// does a pool's.
    ///
    /// # Safety
    ///
    /// The memory stays allocated (not freed, not unmapped) until the ring
    /// is dropped: the kernel keeps its pages pinned, and operations whose
    /// buffers lie in the range go to those pages.
    pub(crate) unsafe fn register_memory(&self, start: usize, len: usize) -> Result<(), Error> {
        self.check_not_inherited()?;
        // SAFETY: the caller's contract above.
        unsafe {
            self.registry
                .register_region(self.ring.io(), self.ring.ops(), start, len, None)
        }
    }

    /// Refuses a registration in a child after `fork` (the ring and its
    /// tables are the parent's).
    fn check_not_inherited(&self) -> Result<(), Error> {
        if self.inherited() {
            return Err(Error::Forked(
                "this port was made before fork: make a new one in the child",
            ));
        }
        Ok(())
    }

    /// Submitted and not yet taken; none in a child after `fork` (what was
    /// in flight is the parent's).
    pub(crate) fn outstanding(&self) -> usize {
        if self.inherited() {
            return 0;
        }
        self.outstanding.load(Ordering::Acquire)
    }

    /// Made before a `fork` this process is the child of.
    fn inherited(&self) -> bool {
        self.ring.inherited()
    }

    /// Counts an operation in before it is submitted ([`submit_admitted`]);
    /// `false` (counting nothing) once the engine's shutdown began: shutdown
    /// may already have found the port settled.
    ///
    /// [`submit_admitted`]: Self::submit_admitted
    pub(crate) fn admit(&self, shared: &EngineState) -> bool {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        if shared.is_shut() {
            let before = self.outstanding.fetch_sub(1, Ordering::AcqRel);
            debug_assert!(before > 0, "an admission counted in is counted out once");
            return false;
        }
        true
    }

    /// A completed operation's cell to write the next one into (no
    /// allocation), if the ring kept one: referenced from nowhere else.
    pub(crate) fn take_spare(&self) -> Option<Arc<C>> {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert!(spare.len() <= SPARE_CELLS, "at most SPARE_CELLS are kept");
        let cell = spare.pop();
        drop(spare);
        debug_assert!(
            cell.as_ref().is_none_or(|c| Arc::strong_count(c) == 1),
            "a spare cell is referenced from nowhere else"
        );
        cell
    }

    /// Keeps a completed operation's cell for reuse, if nothing else
    /// references it (the submitter may still hold its own reference for a
    /// moment) and there is room.
    fn recycle(&self, mut cell: Arc<C>) {
        if Arc::get_mut(&mut cell).is_none() {
            return;
        }
        debug_assert!(
            self.inflight.as_ref().is_none_or(|m| !m
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&(Arc::as_ptr(&cell) as usize))),
            "a cell kept for reuse is no longer in flight"
        );
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARE_CELLS {
            spare.push(cell);
        }
        debug_assert!(spare.len() <= SPARE_CELLS, "at most SPARE_CELLS are kept");
    }

    /// Submits the operation in `cell` (a read, a write, or a no-op carrying
    /// a result known in advance).
    pub(crate) fn submit(&self, cell: Arc<C>) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        self.submit_admitted(cell);
    }

    /// As [`submit`](Self::submit), for an operation [`admit`](Self::admit)
    /// counted in.
    pub(crate) fn submit_admitted(&self, cell: Arc<C>) {
        debug_assert!(
            !self.inherited(),
            "a port refuses operations in a child after fork"
        );
        cell.shared()
            .counters
            .submitted
            .fetch_add(1, Ordering::Relaxed);
        if let Some(inflight) = &self.inflight {
            let mut map = inflight.lock().unwrap_or_else(|p| p.into_inner());
            let earlier = map.insert(Arc::as_ptr(&cell) as usize, cell.port_key());
            debug_assert!(earlier.is_none(), "a cell is in flight once");
            debug_assert!(
                map.len() <= self.outstanding.load(Ordering::Acquire),
                "every cell in flight is counted outstanding"
            );
        }
        self.enqueue(cell);
    }

    /// Asks the kernel to cancel every operation with `key` submitted and
    /// not yet taken (`IORING_OP_ASYNC_CANCEL` by each one's user data);
    /// returns how many it asked for. Each still completes once: with
    /// `-ECANCELED` if the kernel stopped it in time, else with its own
    /// result (a read or write the device already has is not stopped).
    pub(crate) fn cancel(&self, key: u64) -> usize {
        if self.inherited() {
            return 0;
        }
        // Held until the cancellations are submitted: no cell of the map
        // can be taken and freed (and its address reused by another
        // operation) before the kernel has looked the address up.
        let Some(inflight) = &self.inflight else {
            debug_assert!(false, "cancel on a port made without cancellation");
            return 0;
        };
        let inflight = inflight.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert!(
            inflight.len() <= self.outstanding.load(Ordering::Acquire),
            "every cell in flight is counted outstanding"
        );
        let mut asked = 0;
        for (&addr, _) in inflight.iter().filter(|(_, &k)| k == key) {
            debug_assert!(
                addr % std::mem::align_of::<C>() == 0,
                "a key of the map is a cell's address"
            );
            // SAFETY: a cell in `inflight` is alive (see the field).
            let cell = unsafe { &*(addr as *const C) };
            cell.forbid_resubmit();
            let sqe = opcode::AsyncCancel::new(addr as u64)
                .build()
                .user_data(CANCEL);
            self.push(&sqe);
            asked += 1;
        }
        if asked > 0 {
            self.enter_submit();
        }
        drop(inflight);
        asked
    }

    /// Hands the cell's operation to the kernel (again, after a
    /// cancellation it did not ask for).
    fn enqueue(&self, cell: Arc<C>) {
        debug_assert!(
            self.outstanding.load(Ordering::Acquire) > 0,
            "an operation is counted in before it is submitted"
        );
        let sqe = match self
            .registry
            .entry(cell.kind(), self.ring.ops(), &cell.shared().counters)
        {
            Some(sqe) => sqe,
            None => {
                // No opcode on this kernel: perform it here and let the ring
                // deliver the result (a no-op wakes a waiting worker).
                cell.preset(cell.kind().blocking());
                opcode::Nop::new().build()
            }
        };
        cell.set_submitting(true);
        // Our own reference while submitting: a worker may take (and drop)
        // the completion before the submitting call has even returned.
        let cell_ref = cell.clone();
        let raw = Arc::into_raw(cell);
        self.push(&sqe.user_data(raw as u64));
        // Inside `Port::batch`, queued entries reach the kernel together.
        // The cell is listed after its entry is in the queue: a flush that
        // finds it there submits (or already submitted) its entry.
        match deferral(self as *const Self as *const ()) {
            Deferral::No => {}
            Deferral::Queued => return self.defer_cell(cell_ref),
            Deferral::Full => {
                self.defer_cell(cell_ref);
                return self.flush();
            }
        }
        let counted = self.enter_submit();
        self.submitted(&[cell_ref], !counted);
    }

    fn defer_cell(&self, cell: Arc<C>) {
        let mut list = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert_eq!(
            self.listed_count.load(Ordering::Acquire),
            list.len(),
            "the listed count mirrors the list under its lock"
        );
        list.push(cell);
        self.listed_count.store(list.len(), Ordering::Release);
    }

    /// Submits the operations queued by [`enqueue`](Self::enqueue) inside
    /// a batch, in one system call: every thread's, since the submission
    /// queue is the ring's. Nothing (no system call) when no batch listed
    /// an operation since the last submitting call; nothing in a child
    /// after `fork` (the queued entries, like the ring, are the parent's:
    /// submitting them from here would have the kernel read into the
    /// child's copies of the parent's buffers). Any thread may call it
    /// ([`crate::Port::flush`]).
    pub(crate) fn flush(&self) {
        if self.inherited() {
            return;
        }
        if self.listed_count.load(Ordering::Acquire) == 0 {
            return;
        }
        // `enter_submit` settles what is listed (`settle`).
        self.enter_submit();
    }

    /// Takes the cells listed by batches, before a system call that will
    /// submit every entry queued so far: their entries were pushed before
    /// they were listed, so that call submits them (`settled` does their
    /// bookkeeping after it). A cell listed after this look, whose entry
    /// the same call may also take, is settled by the next call.
    fn take_listed(&self) -> Vec<Arc<C>> {
        if self.listed_count.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut list = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert_eq!(
            self.listed_count.load(Ordering::Acquire),
            list.len(),
            "the listed count mirrors the list under its lock"
        );
        self.listed_count.store(0, Ordering::Release);
        std::mem::take(&mut *list)
    }

    /// After a system call that submitted the cells [`take_listed`]
    /// gave: their bookkeeping as for any submission (`count_call`: the
    /// call is counted here, not by its caller), and the list's capacity
    /// back for the next batch unless a new list was started meanwhile.
    ///
    /// [`take_listed`]: Self::take_listed
    fn settled(&self, mut cells: Vec<Arc<C>>, count_call: bool) {
        if cells.is_empty() {
            return;
        }
        self.submitted(&cells, count_call);
        cells.clear();
        let mut list = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
        if list.is_empty() {
            *list = cells;
        }
        debug_assert_eq!(
            self.listed_count.load(Ordering::Acquire),
            list.len(),
            "the listed count mirrors the list under its lock"
        );
    }

    /// After the submitting call for `cells`: releases their files if the
    /// kernel took every entry, counts the call (`count_call`), records
    /// what was inline.
    fn submitted(&self, cells: &[Arc<C>], count_call: bool) {
        let Some(first) = cells.first() else { return };
        let cell_ref = first;
        // The kernel takes its own reference to the file when it consumes
        // the entry: from then on the descriptor may close (`File::close`
        // waits for the file's operations) even if nobody has collected
        // this completion yet.
        if self.submission_empty() {
            for cell in cells {
                cell.release_file();
            }
        }
        if count_call {
            cell_ref
                .shared()
                .counters
                .submit_syscalls
                .fetch_add(1, Ordering::Relaxed);
        }
        // Completions at queue positions before the tail seen now were
        // posted before the submitting call returned: inline. A worker that
        // takes one before the tail is recorded (the flag still set)
        // counts it inline too: it was there no later than that.
        let taken = self.cq.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: `cq` serialises every user of the completion queue.
        let ready = unsafe { self.ring.io().completion_shared() }.len();
        debug_assert!(
            ready <= self.ring.io().params().cq_entries() as usize,
            "the kernel's completion tail stays within a lap of the head"
        );
        let tail = (ready as u32).wrapping_add(*taken);
        for cell in cells {
            cell.set_inline_before(tail);
        }
        drop(taken);
    }

    // Every `SubmissionQueue` view below is dropped inside a statement that
    // ends while `sq` is held: dropping the view stores the tail it read back
    // into the ring. A view in a block's tail expression would outlive the
    // guard (edition 2021) and could store a stale tail after another
    // thread's push: the kernel would then take a lap of old entries (cells
    // already freed) as new ones.

    fn push(&self, sqe: &squeue::Entry) {
        debug_assert!(
            !self.inherited(),
            "a child never queues on its parent's ring"
        );
        loop {
            let g = self.sq.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: `sq` serialises every user of the submission queue.
            // The entry's pointers refer to memory owned by its cell, which
            // the ring keeps alive (`user_data`) until its completion is
            // taken.
            let pushed = unsafe {
                let mut sq = self.ring.io().submission_shared();
                debug_assert!(
                    sq.len() <= sq.capacity(),
                    "the kernel's submission head ran past the tail"
                );
                sq.push(sqe)
            };
            drop(g);
            if pushed.is_ok() {
                return;
            }
            // A full queue: submit it, without `sq` (the submitting call
            // settles what batches listed, which looks at the queue under
            // `sq`), and try again.
            self.enter_submit();
        }
    }

    /// Entries in the submission queue, not yet taken by the kernel.
    fn queued(&self) -> u32 {
        let _g = self.sq.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: `sq` serialises every user of the submission queue.
        let n = unsafe { self.ring.io().submission_shared() }.len() as u32;
        debug_assert!(
            n <= self.ring.io().params().sq_entries(),
            "the kernel's submission head stays behind the tail"
        );
        n
    }

    fn submission_empty(&self) -> bool {
        self.queued() == 0
    }

    /// `io_uring_enter` submitting every queued entry; settles what batches
    /// listed before it (`take_listed`). Returns whether it counted the
    /// call (it does when it settled listed cells).
    fn enter_submit(&self) -> bool {
        debug_assert!(
            !self.inherited(),
            "a child never submits on its parent's ring"
        );
        let listed = self.take_listed();
        loop {
            match self.ring.io().submitter().submit() {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // EBUSY/EAGAIN: the kernel takes the entries with a later
                // submission; any other error leaves them queued as well.
                _ => break,
            }
        }
        let counted = !listed.is_empty();
        self.settled(listed, true);
        counted
    }

    /// The next completion if one is in the ring.
    ///
    /// Linux cancels the queued kernel-worker (io-wq) work of a thread that
    /// exits (`-ECANCELED`, unperformed), and finishes a buffered read of
    /// such a thread on a kernel worker that has none of the process's
    /// memory (`-EFAULT`, nothing copied: every buffer is the engine's).
    /// Nothing else cancels a port's operations, so such an operation is
    /// submitted again from this (live) thread, and the caller sees only its
    /// real result.
    pub(crate) fn try_take(&self) -> Option<C::Completion> {
        if self.inherited() {
            // The ring's completions are the parent's.
            return None;
        }
        if self.stashed.load(Ordering::Acquire) > 0 {
            let mut stash = self.stash.lock().unwrap_or_else(|p| p.into_inner());
            let stashed = stash.pop_front();
            debug_assert!(
                stash.len() + usize::from(stashed.is_some())
                    <= self.outstanding.load(Ordering::Acquire),
                "every stashed completion is still counted outstanding"
            );
            drop(stash);
            if let Some((cell, res, inline)) = stashed {
                let before = self.stashed.fetch_sub(1, Ordering::AcqRel);
                debug_assert!(before > 0, "a stashed completion is counted once");
                return self.complete(cell, res, inline);
            }
        }
        loop {
            let Some((cell, res, inline)) = self.pop() else {
                // The caller may wait or poll again: what this thread
                // queued in a batch must be in the kernel first.
                flush_deferred();
                return None;
            };
            if !OpKind::may_have_failed_by_submitter_exit(i64::from(res)) {
                return self.complete(cell, res, inline);
            }
            if let Some((cell, res, inline)) = self.resubmit_or_keep(cell, res, inline) {
                return self.complete(cell, res, inline);
            }
        }
    }

    /// Submits the operation again if its submitter's exit failed it (see
    /// [`try_take`](Self::try_take)); gives the completion back otherwise.
    fn resubmit_or_keep(&self, cell: Arc<C>, res: i32, inline: bool) -> Option<Taken<C>> {
        if cell.kind().failed_by_submitter_exit(i64::from(res))
            && cell.may_resubmit()
            && cell.reclaim_file()
        {
            cell.shared()
                .counters
                .resubmitted
                .fetch_add(1, Ordering::Relaxed);
            self.enqueue(cell);
            return None;
        }
        Some((cell, res, inline))
    }

    /// `io_uring_enter(GETEVENTS)` without waiting: submits what is queued
    /// (a batch another thread has not flushed yet), runs the calling
    /// thread's completion work, flushes an overflowed completion queue.
    fn enter_getevents(&self) {
        debug_assert!(!self.inherited(), "a child never enters its parent's ring");
        let queued = self.queued();
        let listed = self.take_listed();
        // SAFETY: the kernel takes at most the entries queued (pushed under
        // `sq`, their cells alive in the ring).
        let took = unsafe { self.ring.enter(queued, 0, None) };
        debug_assert!(
            took <= queued as usize,
            "the kernel takes what is queued, no more"
        );
        self.settled(listed, true);
    }

    fn pop(&self) -> Option<Taken<C>> {
        {
            let mut taken = self.cq.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: `cq` serialises every user of the completion queue.
            let mut cq = unsafe { self.ring.io().completion_shared() };
            let mut found = None;
            for cqe in &mut cq {
                let pos = *taken;
                *taken = taken.wrapping_add(1);
                if cqe.user_data() == WAKE || cqe.user_data() == CANCEL {
                    continue;
                }
                debug_assert!(
                    cqe.user_data() % std::mem::align_of::<C>() as u64 == 0,
                    "an operation's user data is its cell's address"
                );
                debug_assert!(
                    self.outstanding.load(Ordering::Acquire) > 0,
                    "a completion taken is of an operation counted in"
                );
                // SAFETY: every other user data is a cell address from
                // `Arc::into_raw` in `submit`, and each completion is taken
                // once (under `cq`).
                let cell = unsafe { Arc::from_raw(cqe.user_data() as *const C) };
                let inline = cell.inline_at(pos);
                found = Some((cell, cqe.result(), inline));
                break;
            }
            found
        }
    }

    fn complete(&self, cell: Arc<C>, res: i32, inline: bool) -> Option<C::Completion> {
        if let Some(inflight) = &self.inflight {
            let mut map = inflight.lock().unwrap_or_else(|p| p.into_inner());
            let removed = map.remove(&(Arc::as_ptr(&cell) as usize));
            debug_assert!(removed.is_some(), "a cell in flight is removed once");
            debug_assert!(
                map.len() < self.outstanding.load(Ordering::Acquire),
                "the cell removed is still counted outstanding"
            );
        }
        // Counted out before any user code runs (`take` releases the file,
        // whose close may wake a waker that panics).
        let before = self.outstanding.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(
            before > 0,
            "an operation is counted out once, after it was counted in"
        );
        let left = before.wrapping_sub(1);
        if left == 0 {
            // Workers waiting in the ring for completions that will not
            // come must return.
            self.wake_all();
        }
        let completion = cell.take_completion(res, inline);
        self.recycle(cell);
        completion
    }

    /// Sleeps in the ring until a completion arrives or `deadline` passes,
    /// or at most [`RECHECK`]: the no-op that wakes waiting workers when the
    /// last completion is taken can be consumed by another taker before a
    /// worker that already decided to wait has entered the kernel, so a
    /// waiter looks at `outstanding` again at least that often.
    pub(crate) fn wait(&self, deadline: Option<Instant>) {
        if self.inherited() {
            return;
        }
        flush_deferred();
        let recheck = Instant::now() + RECHECK;
        let deadline = deadline.map_or(recheck, |d| d.min(recheck));
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return;
        };
        debug_assert!(
            left <= RECHECK,
            "a worker looks at outstanding again at least every RECHECK"
        );
        // While a batch has listed operations, the wait submits nothing
        // (`to_submit` 0): what another thread queued in a batch is
        // submitted by that thread's own calls (or a flush), which account
        // for it (`submitted`); a wait that took those entries would leave
        // them counted as inline until then. Otherwise it submits what is
        // queued: entries a submitting call left there (`EBUSY`) go now.
        let to_submit = if self.listed_count.load(Ordering::Acquire) == 0 {
            self.queued()
        } else {
            0
        };
        // SAFETY: the entries queued were pushed under `sq`, their cells
        // alive in the ring until their completions are taken.
        let took = unsafe { self.ring.enter(to_submit, 1, Some(left)) };
        debug_assert!(
            took <= to_submit as usize,
            "the kernel takes what is queued, no more"
        );
    }

    /// Posts a no-op so that every worker asleep in the ring wakes.
    fn wake_all(&self) {
        self.push(&opcode::Nop::new().build().user_data(WAKE));
        self.enter_submit();
    }

    /// Takes every outstanding completion and drops it (the port is gone):
    /// no cell is freed before the kernel is done with it.
    pub(crate) fn drain(&self) {
        if self.inherited() {
            // A child after fork: the ring and its operations are the
            // parent's.
            return;
        }
        while self.outstanding() > 0 {
            let taken = crate::driver::contain("completion of a dropped port", || {
                if self.try_take().is_none() {
                    self.wait(None);
                }
            });
            if let Some(p) = taken {
                crate::driver::report_panic("a completion of a dropped port", &p);
            }
        }
    }
}
