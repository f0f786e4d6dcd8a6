//! One io_uring and the operations in flight on it: what the engine thread,
//! every thread's own ring and every reactor ring share. Submission,
//! reaping, and a teardown that never frees memory the kernel may still
//! write. (Making the ring is [`super::setup`].)

use std::mem::ManuallyDrop;
use std::os::fd::RawFd;
use std::sync::Arc;

use io_uring::{opcode, squeue, types};

#[cfg(test)]
use super::setup::{build_ring, probe_opcodes, Issuers};
use slab::Slab;

use super::ring::Ring;
use super::ring_buffers::RingBuffers;
use crate::cell::Completable;
use crate::driver::{complete_all, Done};

/// User data of the eventfd read that wakes a thread asleep in its ring.
const EVENTFD_KEY: u64 = u64::MAX;
/// User data of the cancellation of that read at teardown.
const CANCEL_KEY: u64 = u64::MAX - 1;
/// Set in the user data of a submission's marker (a `NOP` queued behind
/// what a call submits); the low bits carry the call's number.
const MARKER_BIT: u64 = 1 << 63;

// The user-data encodings of a ring: an operation's slab key below
// `MARKER_BIT`, a marker with it set and its call's number below, and the
// two reserved keys, which the completion loop matches before markers,
// above every call number a ring reaches.
const _: () = {
    assert!(MARKER_BIT.is_power_of_two());
    assert!(EVENTFD_KEY != CANCEL_KEY);
    assert!(EVENTFD_KEY & MARKER_BIT != 0 && CANCEL_KEY & MARKER_BIT != 0);
    assert!(CANCEL_KEY < EVENTFD_KEY);
};

/// A ring and the operations in flight on it.
pub(crate) struct RingCore {
    /// Closed by `Drop` only once nothing is in flight (`drain`); otherwise
    /// leaked, never freed under the kernel.
    ring: Ring,
    // Freed with the ring, or leaked with it.
    eventfd_buf: ManuallyDrop<Box<u64>>,
    eventfd: Option<RawFd>,
    eventfd_armed: bool,
    /// Completed eventfd reads: each consumed the wake-ups written before it.
    eventfd_reads: u64,
    /// In-flight operations keyed by user data, with the number of the
    /// submitting system call.
    slab: Slab<(Arc<dyn Completable>, u64)>,
    /// Number of the last submitting `io_uring_enter`.
    batch: u64,
    /// Number of the last submitting call whose marker has been reaped: an
    /// operation of a later call whose completion is reaped now was
    /// completed by the submission itself (inline).
    marked: u64,
    /// Completions taken from the ring so far (the ring's own included).
    reaped_total: u64,
    /// Operations reaped (their futures woken) and not yet followed by as
    /// many submissions: about that many submissions are likely soon, from
    /// the tasks just woken. Only a hint for deferring submissions (a woken
    /// task may submit nothing): a reactor ring's flush forgets it, since
    /// the tasks ready by then have run (`forget_woken`). Never more than
    /// the most operations ever in flight at once (a push takes one off
    /// whatever a reap added).
    woken: usize,
    /// The pools registered with the engines whose operations this ring
    /// carries, as this ring registered them with the kernel.
    buffers: RingBuffers,
}

impl RingCore {
    /// `eventfd`, if given, must outlive the core: a thread asleep in the
    /// ring is woken by writing it.
    pub(crate) fn new(ring: Ring, eventfd: Option<RawFd>) -> RingCore {
        debug_assert!(
            eventfd.is_none_or(|fd| fd >= 0),
            "a wake-up eventfd is open"
        );
        debug_assert!(!ring.inherited(), "a new core's ring is this process's own");
        RingCore {
            ring,
            eventfd_buf: ManuallyDrop::new(Box::new(0)),
            eventfd,
            eventfd_armed: false,
            eventfd_reads: 0,
            slab: Slab::new(),
            batch: 0,
            marked: 0,
            reaped_total: 0,
            woken: 0,
            buffers: RingBuffers::default(),
        }
    }

    /// `op`'s entry: `READ_FIXED`/`WRITE_FIXED` when its buffer lies in a
    /// pool registered with its engine (`ring_buffers`); `None` when the
    /// kernel lacks the opcode.
    #[inline]
    fn entry_of(&mut self, op: &dyn Completable) -> Option<squeue::Entry> {
        debug_assert!(
            !self.ring.inherited(),
            "a child never queues on its parent's ring"
        );
        self.buffers
            .entry(self.ring.io(), op.kind(), self.ring.ops(), op.shared())
    }

    /// (completions taken, submitting calls made) so far: a watcher that
    /// sees the same marks twice knows that nobody served the ring between.
    pub(crate) fn marks(&self) -> (u64, u64) {
        debug_assert!(
            self.marked <= self.batch,
            "a call's marker is reaped only after the call"
        );
        (self.reaped_total, self.batch)
    }

    /// In a child after `fork`: the ring and its operations are the
    /// parent's (see [`Ring::inherited`]).
    pub(crate) fn inherited(&self) -> bool {
        self.ring.inherited()
    }

    /// In a child after `fork`: gives the child's
    /// copies of its operations back, failed with [`Error::Forked`]
    /// (`INHERITED_ACROSS_FORK`), so that a future of the child waiting for
    /// one hears what happened instead of hanging. Nothing of the ring is
    /// touched: the slab is the child's own memory.
    ///
    /// [`Error::Forked`]: crate::Error::Forked
    pub(crate) fn give_up_inherited(&mut self, done: &mut Vec<Done>) {
        debug_assert!(
            self.inherited(),
            "only a child gives up a ring's operations"
        );
        let before = done.len();
        let given = self.slab.len();
        for (_, (op, _)) in std::mem::take(&mut self.slab) {
            done.push(Done {
                op,
                res: crate::cell::INHERITED_ACROSS_FORK,
                inline: false,
            });
        }
        debug_assert_eq!(
            done.len(),
            before + given,
            "every operation in flight is given back once"
        );
    }

    /// Operations in flight (not counting the eventfd read).
    pub(crate) fn in_flight(&self) -> usize {
        debug_assert!(
            !self.eventfd_armed || self.eventfd.is_some(),
            "only a core with a wake-up eventfd arms a read of it"
        );
        self.slab.len()
    }

    /// One of the operations in flight, if any.
    pub(crate) fn any_in_flight(&self) -> Option<&Arc<dyn Completable>> {
        self.slab.iter().next().map(|(_, (op, _))| op)
    }

    /// By how many the operations reaped from this ring outnumber the
    /// submissions made since: about as many submissions are likely soon,
    /// from the tasks those completions woke.
    pub(crate) fn likely_soon(&self) -> usize {
        debug_assert!(
            self.woken as u64 <= self.reaped_total,
            "the operations woken were reaped"
        );
        self.woken
    }

    /// Forgets the reaped operations whose futures have not submitted
    /// again: called when the tasks they woke have had their turn.
    pub(crate) fn forget_woken(&mut self) {
        self.woken = 0;
    }

    /// The operation in flight under `key` (what [`push`](Self::push)
    /// gave), if it has not completed.
    pub(crate) fn op(&self, key: usize) -> Option<&Arc<dyn Completable>> {
        debug_assert!(
            (key as u64) < MARKER_BIT,
            "an operation's key is below the markers"
        );
        self.slab.get(key).map(|(op, _)| op)
    }

    /// Entries queued but not yet taken by the kernel.
    pub(crate) fn pending(&mut self) -> usize {
        let sq = self.ring.io_mut().submission();
        debug_assert!(
            sq.len() <= sq.capacity(),
            "the kernel's head stays behind the tail"
        );
        sq.len()
    }

    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// How many eventfd reads have completed: a writer that saw an earlier
    /// count knows its wake-up was consumed.
    pub(crate) fn eventfd_reads(&self) -> u64 {
        debug_assert!(
            self.eventfd.is_some() || self.eventfd_reads == 0,
            "only a core with a wake-up eventfd reads it"
        );
        debug_assert!(
            self.eventfd_reads <= self.reaped_total,
            "every eventfd read completed was reaped"
        );
        self.eventfd_reads
    }

    /// Queues `op`; returns its key while it is in flight
    /// ([`op`](Self::op)). An operation without an opcode on this kernel
    /// runs its blocking call here and lands in `done` (`None`).
    pub(crate) fn push(&mut self, op: Arc<dyn Completable>, done: &mut Vec<Done>) -> Option<usize> {
        let Some(sqe) = self.entry_of(&*op) else {
            let res = op.kind().blocking();
            done.push(Done {
                op,
                res,
                inline: true,
            });
            return None;
        };
        self.woken = self.woken.saturating_sub(1);
        let before = self.slab.len();
        let key = self.slab.insert((op, self.batch + 1));
        debug_assert!(
            (key as u64) < MARKER_BIT,
            "slab keys stay below the markers and the reserved keys"
        );
        debug_assert_eq!(
            self.slab.len(),
            before + 1,
            "an operation pushed is in flight once"
        );
        self.push_entry(&sqe.user_data(key as u64), done);
        Some(key)
    }

    fn push_entry(&mut self, sqe: &squeue::Entry, done: &mut Vec<Done>) {
        loop {
            if self.free_slots() < 2 {
                // The last slot is the marker's (`submit_marked`).
                self.submit(done);
                continue;
            }
            // SAFETY: every pointer in `sqe` refers to memory owned by an
            // operation cell held in `self.slab` (or to `self.eventfd_buf`)
            // until its completion is reaped; `drain` reaps everything
            // before the ring and the buffer go, and `Drop` leaks both
            // rather than free them with anything in flight.
            let pushed = unsafe { self.ring.io_mut().submission().push(sqe) };
            if pushed.is_ok() {
                debug_assert!(
                    self.free_slots() >= 1,
                    "an entry pushed leaves the marker's slot free"
                );
                return;
            }
            self.submit(done);
        }
    }

    /// Free entries in the submission queue.
    fn free_slots(&mut self) -> usize {
        let sq = self.ring.io_mut().submission();
        debug_assert!(
            sq.len() <= sq.capacity(),
            "the kernel's head stays behind the tail"
        );
        sq.capacity() - sq.len()
    }

    /// Hands queued entries to the kernel and runs completion work
    /// (`IORING_ENTER_GETEVENTS` with no minimum: with `DEFER_TASKRUN` a
    /// submit-only enter would leave completions waiting for as long as new
    /// submissions keep coming). Returns whether a system call submitted
    /// anything. Which completions are inline: see `submit_marked`.
    pub(crate) fn submit(&mut self, done: &mut Vec<Done>) -> bool {
        let calls = self.batch;
        let had = self.submit_marked(0, None, done);
        debug_assert_eq!(
            self.batch,
            calls + u64::from(had),
            "a submission that found entries queued is one more call"
        );
        had
    }

    /// Submits what is queued and waits until at least one completion (or
    /// the eventfd read, when armed) arrives, or `timeout` passes: one
    /// system call when something is queued.
    pub(crate) fn wait(&mut self, timeout: Option<std::time::Duration>, done: &mut Vec<Done>) {
        self.submit_marked(1, timeout, done);
    }

    /// One `io_uring_enter` that submits what is queued and waits for
    /// `want` completions (0: none), then reaps.
    ///
    /// Inline, exactly: a `NOP` (the marker) is queued behind the
    /// submission. The kernel posts the completions of the requests it
    /// completes while submitting (a page-cache hit, an error) together, in
    /// submission order, when the submission ends; everything else (a
    /// device's interrupt, a kernel worker, with `DEFER_TASKRUN` or
    /// `COOP_TASKRUN` alike) reaches the ring through task work, which runs
    /// later in the call or after it. So an operation of this call whose
    /// completion comes before the call's marker completed inline, and one
    /// that comes after it did not, even though one call both submits and
    /// waits.
    fn submit_marked(
        &mut self,
        want: usize,
        timeout: Option<std::time::Duration>,
        done: &mut Vec<Done>,
    ) -> bool {
        debug_assert!(want <= 1, "a wait wants one completion, or none");
        debug_assert!(
            !self.ring.inherited(),
            "a child never enters its parent's ring"
        );
        let had = self.pending() > 0;
        debug_assert!(
            want == 0 || timeout.is_some() || had || !self.slab.is_empty() || self.eventfd_armed,
            "an untimed wait waits for a completion that will come"
        );
        if had {
            self.batch += 1;
            debug_assert!(
                MARKER_BIT | self.batch < CANCEL_KEY,
                "call numbers stay below the marker bit and the reserved keys"
            );
            let marker = opcode::Nop::new()
                .build()
                .user_data(MARKER_BIT | self.batch);
            // SAFETY: a NOP carries no pointer.
            let pushed = unsafe { self.ring.io_mut().submission().push(&marker) };
            // `push_entry` keeps the marker's slot free; only a submission
            // the kernel refused (EBUSY: its completion queue overflowed)
            // can leave it taken. Then this call's operations are judged by
            // the next call's marker (inline if they complete before it).
            let _ = pushed;
        }
        // The marker's completion is one more to wait for.
        let want = if want > 0 && had { want + 1 } else { want };
        self.enter(want, timeout);
        self.reap(done);
        debug_assert!(
            self.marked <= self.batch,
            "a call's marker is reaped only after the call"
        );
        had
    }

    fn enter(&mut self, want: usize, timeout: Option<std::time::Duration>) {
        debug_assert!(want <= 2, "one completion and a marker, at most");
        debug_assert!(
            timeout.is_none() || want > 0,
            "a timeout bounds a wait only"
        );
        let to_submit = self.pending() as u32;
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        // SAFETY: the queued entries' pointers are into cells this core
        // keeps until their completions (module docs); GETEVENTS asks the
        // kernel to run completion work and to wait for `want`.
        let took = unsafe { self.ring.enter(to_submit, want, timeout) };
        debug_assert!(
            took <= to_submit as usize,
            "the kernel takes what is queued, no more"
        );
    }

    /// Takes every completion in the ring into `done`; those of operations
    /// whose submitting call's marker has not been reaped yet are inline.
    fn reap(&mut self, done: &mut Vec<Done>) -> usize {
        let handed = done.len();
        let mut cq = self.ring.io_mut().completion();
        let mut reaped = 0;
        loop {
            cq.sync();
            let mut any = false;
            for cqe in &mut cq {
                any = true;
                match cqe.user_data() {
                    EVENTFD_KEY => {
                        debug_assert!(
                            self.eventfd_armed,
                            "an eventfd read completes once per arming"
                        );
                        reaped += 1;
                        self.eventfd_armed = false;
                        self.eventfd_reads += 1;
                    }
                    CANCEL_KEY => {
                        debug_assert!(
                            self.eventfd.is_some(),
                            "only a core with a wake-up eventfd cancels its read"
                        );
                        reaped += 1;
                    }
                    marker if marker & MARKER_BIT != 0 => {
                        let call = marker & !MARKER_BIT;
                        debug_assert!(
                            call > self.marked && call <= self.batch,
                            "markers arrive once each, in the order of their calls"
                        );
                        self.marked = call;
                    }
                    key => {
                        reaped += 1;
                        let Some((op, batch)) = self.slab.try_remove(key as usize) else {
                            debug_assert!(false, "a completion for an unknown operation");
                            continue;
                        };
                        debug_assert!(
                            batch <= self.batch,
                            "an operation completes after the call that submitted it"
                        );
                        let res = op.kind().result(cqe.result());
                        self.woken += 1;
                        done.push(Done {
                            op,
                            res,
                            inline: batch > self.marked,
                        });
                    }
                }
            }
            if !any {
                debug_assert!(
                    done.len() - handed <= reaped,
                    "every completion handed over was reaped"
                );
                self.reaped_total += reaped as u64;
                debug_assert!(
                    self.woken as u64 <= self.reaped_total,
                    "the operations woken were reaped"
                );
                return reaped;
            }
        }
    }

    /// Takes the completions already in the ring, without a system call.
    pub(crate) fn reap_ready(&mut self, done: &mut Vec<Done>) -> usize {
        self.reap(done)
    }

    /// Makes sure a read of the eventfd is pending, so that writing the
    /// eventfd wakes a thread asleep in this ring.
    pub(crate) fn arm_eventfd(&mut self, done: &mut Vec<Done>) {
        let Some(fd) = self.eventfd else { return };
        if self.eventfd_armed {
            return;
        }
        debug_assert!(
            !self.ring.inherited(),
            "a child never arms a read on its parent's ring"
        );
        let sqe = opcode::Read::new(
            types::Fd(fd),
            (&mut **self.eventfd_buf as *mut u64).cast(),
            8,
        )
        .build()
        .user_data(EVENTFD_KEY);
        self.push_entry(&sqe, done);
        self.eventfd_armed = true;
    }

    /// Waits for every operation in flight, completing them, then cancels
    /// the eventfd read and waits for it too, so that nothing the kernel may
    /// write is freed when the core is dropped.
    pub(crate) fn drain(&mut self, reaped: fn(&[Done])) {
        debug_assert!(
            !self.ring.inherited(),
            "a child never waits on its parent's ring"
        );
        let mut done = Vec::new();
        while self.in_flight() > 0 {
            self.wait(None, &mut done);
            reaped(&done);
            if let Some(p) = complete_all(&mut done) {
                crate::driver::report_panic("an operation completed at teardown", &p);
            }
        }
        if self.eventfd_armed {
            let sqe = opcode::AsyncCancel::new(EVENTFD_KEY)
                .build()
                .user_data(CANCEL_KEY);
            debug_assert!(
                self.eventfd.is_some(),
                "only a core with a wake-up eventfd arms a read of it"
            );
            self.push_entry(&sqe, &mut done);
            while self.eventfd_armed {
                self.wait(None, &mut done);
            }
        }
        debug_assert!(done.is_empty() && self.slab.is_empty() && !self.eventfd_armed);
    }
}

impl Drop for RingCore {
    fn drop(&mut self) {
        let idle = self.slab.is_empty() && !self.eventfd_armed;
        debug_assert!(
            idle || std::thread::panicking() || self.ring.inherited(),
            "a core goes once drained, unless its owner is unwinding"
        );
        if !idle || self.ring.inherited() {
            // Busy: only an unwinding owner gets here, and the kernel may
            // still write into the cells' buffers: they are leaked, never
            // freed. In a child after `fork` the operations are copies of
            // the parent's, never completed here: leaked as well.
            std::mem::forget(std::mem::take(&mut self.slab));
        }
        let buffers = &mut self.buffers;
        self.ring.close(idle, |io| buffers.unregister_all(io));
        if idle {
            // SAFETY: no eventfd read is armed: the kernel holds no pointer
            // to the buffer, which is dropped exactly once, here.
            unsafe { ManuallyDrop::drop(&mut self.eventfd_buf) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eventfd read's 8-byte buffer must stay alive
    /// for as long as the kernel may write it. `RingCore` frees it in `Drop`
    /// right after `drain`; so once `drain` has returned, writing the
    /// eventfd (as `shutdown()` does to wake a sleeper) must leave that
    /// buffer untouched and the counter unread, under each setup the driver
    /// uses (`SINGLE_ISSUER|DEFER_TASKRUN` for a thread's own ring,
    /// `COOP_TASKRUN` for a shared one).
    ///
    /// This checks the ownership rule at the point of the free, with the
    /// kernel as the witness: without the cancellation in `drain` the
    /// pending read completes into the buffer here. (The end-to-end test in
    /// `tests/soundness.rs`, which watches freed blocks after real engine
    /// shutdowns, never failed on Linux 6.18, even without that cancellation: once the
    /// ring is closed the kernel cancels the read's task work.)
    #[test]
    fn after_drain_the_kernel_no_longer_writes_the_eventfd_buffer() {
        const SENTINEL: u64 = 0x5EED_0F0F_5EED_0F0F;
        for issuers in [Issuers::One, Issuers::Many] {
            let (ring, setup) = match build_ring(8, 16, issuers) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("SKIPPED: io_uring unavailable here: {e}");
                    return;
                }
            };
            let ops = probe_opcodes(&ring).expect("opcode probe");
            // SAFETY: no memory arguments; the result is checked.
            let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            assert!(efd >= 0, "eventfd: {}", std::io::Error::last_os_error());
            // SAFETY: a fresh descriptor, owned (and closed) by this guard,
            // which outlives the core (declared first, dropped last).
            let _efd =
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
            let mut core = RingCore::new(Ring::new(ring, ops), Some(efd));
            let mut done = Vec::new();
            core.arm_eventfd(&mut done);
            core.submit(&mut done);
            assert!(core.eventfd_armed, "{setup}: the read is in the kernel");

            core.drain(|_| {});

            // What `Drop` is about to free: mark it, then wake the eventfd
            // and give the kernel every chance to run a pending read.
            **core.eventfd_buf = SENTINEL;
            let five = 5u64;
            // SAFETY: writes 8 bytes from a local into our own eventfd.
            let n = unsafe { libc::write(efd, (&five as *const u64).cast(), 8) };
            assert_eq!(n, 8, "eventfd write");
            for _ in 0..3 {
                core.enter(0, None); // runs the ring's task work
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            core.reap(&mut done);
            assert_eq!(
                **core.eventfd_buf, SENTINEL,
                "{setup}: the kernel wrote the eventfd read's buffer after drain(): \
                 freeing it there would be a use-after-free"
            );
            let mut got = 0u64;
            // SAFETY: reads 8 bytes into a local from our own eventfd.
            let n = unsafe { libc::read(efd, (&mut got as *mut u64).cast(), 8) };
            assert_eq!(
                (n, got),
                (8, 5),
                "{setup}: the counter written after drain() is still there, unread by the ring"
            );
            assert!(done.is_empty() && !core.eventfd_armed);
            drop(core);
        }
    }
}
