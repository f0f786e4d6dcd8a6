//! The background flusher: batches, writes, group commit, checkpoint.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{fence, AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use overlapped::{block_on, AlignedBuf};

use super::prealloc::*;
use super::shared::*;
use crate::format::{
    align_down, align_up, clean_end, reads_back, seal_record, CLEAN_END_MAX, RECORD_ALIGN,
    RECORD_HEADER,
};
use crate::stats::Counters;
use crate::storage::WriteFuture;

/// The background flusher: takes published records from the ring, writes
/// them, syncs when someone waits for `Durable`.
pub(super) struct Flusher {
    pub(super) sh: Arc<Shared>,
    /// The stage being filled.
    pub(super) stage: Option<AlignedBuf>,
    /// The other stage buffer, when no write holds it.
    pub(super) spare: Option<AlignedBuf>,
    /// Log position of `stage[0]` (block aligned).
    pub(super) stage_pos: u64,
    /// Valid bytes in the stage.
    pub(super) stage_len: usize,
    /// Records taken from the ring up to here.
    pub(super) filled: u64,
    /// Handed to the storage up to here.
    pub(super) submitted: u64,
    pub(super) bs: u64,
    /// Segments written since the last sync.
    pub(super) dirty: BTreeSet<u64>,
    /// Segment files are created ahead of need by this.
    pub(super) prealloc: Arc<Prealloc>,
    /// The write in flight: the next batch is collected meanwhile.
    pub(super) inflight: Option<InFlight>,
    /// The durable point last written to the checkpoint, and when.
    pub(super) ckpt_durable: u64,
    pub(super) ckpt_at: Instant,
    /// The checkpoint's floor ([`Checkpoint::reserved_lsn`]) as last
    /// written: no record ending past it is acknowledged durable.
    ///
    /// [`Checkpoint::reserved_lsn`]: crate::format::Checkpoint::reserved_lsn
    pub(super) ckpt_reserved: u64,
    /// Records counted so far: taken from the ring, handed to the storage
    /// in writes that end on a record boundary, written, durable (for the
    /// batch-size statistics).
    pub(super) n_collected: u64,
    pub(super) n_submitted: u64,
    pub(super) n_written: u64,
    pub(super) n_durable: u64,
    /// Records the last group commit covered.
    pub(super) last_commit_records: u64,
    /// Committers the last group commit woke.
    pub(super) last_woken: u64,
    /// Moving average of how long writes take, from submission to the
    /// flusher seeing them complete.
    pub(super) write_ewma_ns: u64,
    /// Whether the flusher's writes go on its own thread's ring (io_uring,
    /// [`Storage::completes_on_own_ring`](crate::storage::Storage::completes_on_own_ring)):
    /// it then runs in `block_on` and may poll for a write's completion.
    pub(super) own_ring: bool,
    /// The flusher spins on its write only when the last group commit woke
    /// more committers than this ([`Flusher::spin_on`]).
    pub(super) spin_waiters: u64,
    /// Whether the last turn returned without sleeping to look for the
    /// write in flight ([`Flusher::spin_on`]).
    pub(super) polling: bool,
}

/// Committers per CPU beyond which the flusher spins on its write, by
/// default ([`Options::spin_committers`](super::Options::spin_committers)).
const SPIN_WAITERS_PER_CPU: u64 = 16;
/// The shortest and longest the flusher spins on a write.
const WRITE_SPIN_MIN: Duration = Duration::from_micros(20);
const WRITE_SPIN_MAX: Duration = Duration::from_millis(1);

/// How many committers must wait for the flusher to spin on its write:
/// `configured`, or [`SPIN_WAITERS_PER_CPU`] per CPU.
pub(super) fn spin_waiters(configured: Option<u64>) -> u64 {
    configured.unwrap_or_else(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        SPIN_WAITERS_PER_CPU * cpus
    })
}

pub(super) struct InFlight {
    /// The write; not polled again once `done` is set.
    pub(super) fut: WriteFuture,
    /// The result, if the write completed when it was submitted.
    pub(super) done: Option<(io::Result<()>, AlignedBuf)>,
    pub(super) seq: u64,
    /// Where the written piece ends.
    pub(super) piece_end: u64,
    /// Whether `piece_end` is a record boundary (else the piece stopped at
    /// a segment's end inside a record).
    pub(super) boundary: bool,
    /// Records taken from the ring up to `piece_end` (counting from the
    /// open), when `boundary`.
    pub(super) n_end: u64,
    pub(super) started: Instant,
}

impl Flusher {
    /// Runs the flusher until the journal closes or fails.
    ///
    /// On io_uring, inside the engine's [`block_on`]: its writes go onto
    /// this thread's own ring, so a write's completion wakes this thread
    /// directly, with no engine thread handing it over, and a turn that
    /// wakes itself looks at the ring without sleeping. On the fallback
    /// drivers its writes go to the engine's driver, whose reaper completes
    /// them at once and unparks this thread ([`Flusher::park_loop`]): inside
    /// `block_on` an AIO write would wait to be reaped until this thread
    /// slept, which it does not while appends keep arriving.
    ///
    /// A failure poisons the journal at once, releasing every waiter,
    /// before `block_on` waits for the write still in flight.
    pub(super) fn run(mut self) {
        let own_ring = self.own_ring;
        let mut turn = |cx: &mut Context<'_>| match self.poll_run(cx) {
            Poll::Ready(Err(e)) => {
                self.sh.poison(e);
                Poll::Ready(())
            }
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        };
        if own_ring {
            block_on(std::future::poll_fn(turn));
        } else {
            Flusher::park_loop(&mut turn);
        }
    }

    /// Polls `turn` until it is ready, parking between turns until its
    /// waker fires (or [`IDLE_PARK`] passes, as a backstop).
    fn park_loop(turn: &mut dyn FnMut(&mut Context<'_>) -> Poll<()>) {
        let unpark = Arc::new(Unpark {
            thread: std::thread::current(),
            notified: AtomicBool::new(false),
        });
        let waker = Waker::from(unpark.clone());
        let mut cx = Context::from_waker(&waker);
        loop {
            unpark.notified.store(false, SeqCst);
            if turn(&mut cx).is_ready() {
                return;
            }
            // A wake-up after this check leaves the thread's park token
            // set: `park_timeout` then returns at once.
            if !unpark.notified.load(SeqCst) {
                std::thread::park_timeout(IDLE_PARK);
            }
        }
    }

    /// One turn of the flusher: does everything there is to do, then
    /// returns `Pending` to sleep (in the ring while a write is in flight,
    /// parked otherwise), or after waking itself, so that `block_on` hands
    /// a new write to the kernel at once and reaps what completed.
    pub(super) fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let sh = self.sh.clone();
        if sh.flusher.get().is_none() {
            let _ = sh.flusher.set(cx.waker().clone());
        }
        if sh.sleeping.load(SeqCst) {
            sh.sleeping.store(false, SeqCst);
        }
        loop {
            let mut progress = self.reap(cx)?;
            progress |= self.collect();
            if self.submit(cx)? {
                // Queued on the ring: `block_on` submits it when this
                // returns; collecting goes on right after.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.sync_if_requested(false)?;
            let state = sh.reserve.load(SeqCst);
            if state & DEAD != 0 {
                return Poll::Ready(Ok(()));
            }
            if state & CLOSED != 0 {
                match self.closing_turn(state, progress) {
                    Some(ready) => return ready,
                    None => continue,
                }
            }
            if let Some(inf) = &self.inflight {
                let wants_spin = self.spin_on(inf);
                self.while_writing(cx, progress, wants_spin);
                // Else: sleep in the ring until the write completes.
                return Poll::Pending;
            }
            if progress {
                continue;
            }
            // Nothing to do: bring the checkpoint up to date, then sleep
            // until an appender or waiter wakes us.
            if self.work_before_sleep()? {
                continue;
            }
            return Poll::Pending;
        }
    }

    /// The end of a turn once the journal is closed: `Some` to return (the
    /// last sync once everything is written, or to wait for the write in
    /// flight), `None` to go on.
    #[inline]
    fn closing_turn(&mut self, state: u64, progress: bool) -> Option<Poll<io::Result<()>>> {
        debug_assert!(
            self.filled <= state & !FLAGS,
            "the flusher takes only reserved records"
        );
        let drained = self.filled == state & !FLAGS
            && self.inflight.is_none()
            && self.stage_pos + self.stage_len as u64 <= self.submitted;
        if drained {
            return Some(Poll::Ready(self.sync_if_requested(true)));
        }
        if !progress {
            if self.inflight.is_some() {
                // The write's completion wakes us.
                return Some(Poll::Pending);
            }
            // An appender reserved space and is still copying.
            std::thread::yield_now();
        }
        None
    }

    /// With a write in flight, before the turn returns: spins on it when
    /// `wants_spin` and nothing progressed, and wakes the turn again
    /// when it spins or progressed.
    #[inline]
    fn while_writing(&mut self, cx: &mut Context<'_>, progress: bool, wants_spin: bool) {
        if wants_spin {
            Counters::add(&self.sh.stats.poll_turns, 1);
        }
        let spin = !progress && wants_spin;
        self.polling = spin;
        if spin {
            // Stay runnable while the write is in flight.
            std::thread::yield_now();
        }
        if progress || spin {
            // Look at the ring without sleeping (with `DEFER_TASKRUN`
            // a completion is only seen when `block_on` enters it),
            // then go on.
            cx.waker().wake_by_ref();
        }
    }

    /// Brings the checkpoint up to date and marks the flusher asleep;
    /// returns whether work arrived meanwhile (the flusher is then awake).
    #[inline]
    fn work_before_sleep(&mut self) -> io::Result<bool> {
        self.record_durable(true)?;
        let sh = &*self.sh;
        sh.sleeping.store(true, SeqCst);
        // Pairs with the appender's publish-then-load of `sleeping`:
        // either it sees the flag or the loads below see its record
        // (`ring.committed` alone is only an acquire load).
        fence(SeqCst);
        let durable = sh.durable.load(SeqCst);
        let work = sh.ring.committed(self.filled).is_some()
            || (sh.durable_request.load(SeqCst) > durable && self.filled > durable)
            || sh.reserve.load(SeqCst) & FLAGS != 0;
        if work {
            sh.sleeping.store(false, SeqCst);
            return Ok(true);
        }
        sh.sweep_bells();
        Ok(false)
    }

    /// Moves published records from the ring into the stage.
    pub(super) fn collect(&mut self) -> bool {
        let Some(stage) = self.stage.as_mut() else {
            return false;
        };
        let sh = &*self.sh;
        // Room for a block moved to the next stage, and for the zeros a
        // write into a recycled segment appends.
        let room = stage.capacity() as u64 - 2 * self.bs - CLEAN_END_MAX;
        debug_assert!(
            self.stage_pos <= self.submitted && self.submitted <= self.filled,
            "stage start <= submitted <= taken"
        );
        let p = published_end(sh, self.filled, self.stage_pos, room);
        if p == self.filled {
            return false;
        }
        debug_assert!(
            p <= sh.reserve.load(SeqCst) & !FLAGS,
            "only reserved records are published"
        );
        let off = (self.filled - self.stage_pos) as usize;
        let len = (p - self.filled) as usize;
        debug_assert!(
            off + len <= stage.capacity(),
            "the records taken fit the stage"
        );
        if stage.len() < off + len {
            let cap = stage.capacity();
            let _ = stage.set_len(cap);
        }
        // SAFETY: every record in [filled, p) was seen published (by
        // `published_end`) and
        // is released only below; zeroing the taken bytes means no byte left
        // in the ring ever looks like a commit word later.
        unsafe {
            sh.ring.read(self.filled, &mut stage[off..off + len]);
            sh.ring.zero(self.filled, len);
        }
        advance(&sh.released, p);
        sh.wake_space();
        // Seal the headers and zero the padding.
        let (n, payload) = seal_taken(sh, stage, self.stage_pos, self.filled, p);
        self.stage_len = off + len;
        self.n_collected += n;
        count_batch(&sh.stats, n, payload, len as u64);
        self.filled = p;
        advance(&sh.accepted, p);
        sh.wake_waiters(false);
        true
    }

    /// Completes the write in flight, if it is done. Returns whether one
    /// completed.
    pub(super) fn reap(&mut self, cx: &mut Context<'_>) -> io::Result<bool> {
        let Some(mut inf) = self.inflight.take() else {
            return Ok(false);
        };
        let (res, buf) = match inf.done.take() {
            Some(r) => r,
            None => match inf.fut.as_mut().poll(cx) {
                Poll::Ready(r) => r,
                Poll::Pending => {
                    self.inflight = Some(inf);
                    return Ok(false);
                }
            },
        };
        debug_assert!(
            self.spare.is_none(),
            "the spare stage is the write's buffer"
        );
        self.spare = Some(buf);
        res?;
        debug_assert!(
            inf.piece_end <= self.submitted,
            "a write ends at or before what was submitted"
        );
        let sh = self.sh.clone();
        let took = inf.started.elapsed();
        self.write_ewma_ns = (7 * self.write_ewma_ns + took.as_nanos() as u64) / 8;
        let us = took.as_micros() as u64;
        Counters::add(&sh.stats.writes, 1);
        if std::mem::take(&mut self.polling) {
            // Found complete by a look that did not sleep.
            Counters::add(&sh.stats.polled_writes, 1);
        }
        if sh.durable_request.load(SeqCst) <= sh.durable.load(SeqCst) {
            // Nobody waits for `Durable`: no committers to poll for, until
            // a group commit counts them again.
            self.last_woken = 0;
        }
        sh.stats.with(|h| {
            let _ = h.write_us.record(us);
        });
        self.dirty.insert(inf.seq);
        if inf.boundary {
            debug_assert!(
                inf.piece_end <= sh.accepted.load(SeqCst),
                "written <= accepted"
            );
            advance(&sh.written, inf.piece_end);
            debug_assert!(
                self.n_written <= inf.n_end && inf.n_end <= self.n_collected,
                "records written <= records the write covers <= records taken"
            );
            self.n_written = inf.n_end;
            let dsync = sh.storage.writes_are_durable();
            if dsync {
                self.dirty.clear();
                self.reserve(inf.piece_end)?;
                self.count_group_commit();
                advance(&sh.durable, inf.piece_end);
            }
            let woken = sh.ring_bells(dsync) + sh.wake_waiters(false);
            if dsync {
                self.count_woken(woken);
                self.record_durable(false)?;
            }
        }
        Ok(true)
    }

    /// Whether the flusher, with nothing else to do while `inf` is in
    /// flight, looks for its completion, yielding the CPU between looks,
    /// instead of sleeping in the ring: only when the last group commit
    /// woke more committers than `spin_waiters`
    /// ([`Options::spin_committers`](super::Options::spin_committers), by
    /// default [`SPIN_WAITERS_PER_CPU`] per CPU), and for about twice as
    /// long as writes have been taking (between [`WRITE_SPIN_MIN`] and
    /// [`WRITE_SPIN_MAX`]).
    ///
    /// Why: with that many committers the CPUs' run queues are long, and a
    /// flusher woken from the ring waits in one before it can wake the
    /// committers and start the next write; a yielding flusher stays on
    /// the run queue and gets the CPU back as soon as the committers
    /// ahead of it block. Measured on 2 vCPUs (BENCHMARKS.md):
    /// 64 committers 156-178k commits/s polling against 105-140k sleeping,
    /// 128 committers 176-185k against 159-163k. With few committers it
    /// gains nothing and takes CPU (1 committer, forced: 4.6-5.0k against
    /// 4.9-5.2k sleeping, with the machine 57% idle instead of 74%), so
    /// the flusher sleeps.
    fn spin_on(&self, inf: &InFlight) -> bool {
        if !self.own_ring || self.last_woken <= self.spin_waiters {
            return false;
        }
        let window =
            Duration::from_nanos(2 * self.write_ewma_ns).clamp(WRITE_SPIN_MIN, WRITE_SPIN_MAX);
        inf.started.elapsed() < window
    }

    /// Starts writing the staged bytes not yet handed to the storage (up to
    /// the end of their segment), unless a write is in flight. The stage's
    /// last partial block (or the part for the next segment) moves to the
    /// spare buffer, which becomes the stage.
    pub(super) fn submit(&mut self, cx: &mut Context<'_>) -> io::Result<bool> {
        let end = self.stage_pos + self.stage_len as u64;
        if self.inflight.is_some() || end <= self.submitted {
            return Ok(false);
        }
        let (Some(mut cur), Some(mut next)) = (self.stage.take(), self.spare.take()) else {
            return Err(io::Error::other("stage buffers lost"));
        };
        let geo = self.sh.geo;
        let seq = geo.segment_of(self.stage_pos);
        debug_assert!(
            self.stage_pos % self.bs == 0,
            "writes start at a block boundary of the log"
        );
        let piece_end = end.min(geo.segment_start(seq + 1));
        debug_assert!(
            piece_end > self.stage_pos && piece_end > self.submitted,
            "a write covers staged bytes not yet submitted"
        );
        let wlen = align_up(piece_end - self.stage_pos, self.bs) as usize;
        let cap = cur.capacity();
        let _ = cur.set_len(cap);
        let _ = next.set_len(cap);
        let recycled = self.prealloc.ensure(seq)?;
        let boundary = piece_end == end;
        // In a recycled segment the space after the end holds old bytes:
        // write zeros up to where the reader needs them to see a clean end
        // (the next write overwrites them; never more than one write is in
        // flight, so the two never race).
        let wlen = if recycled && boundary {
            let room = geo.segment_start(seq + 1) - self.stage_pos;
            align_up(clean_end(piece_end) - self.stage_pos, self.bs).min(room) as usize
        } else {
            wlen
        };
        debug_assert!(wlen <= cap, "the stage keeps room for the zeros");
        if boundary {
            cur[self.stage_len..wlen].fill(0);
        }
        let keep_from = align_down(piece_end, self.bs);
        debug_assert!(
            keep_from >= self.stage_pos,
            "the kept tail starts inside the stage"
        );
        let shift = (keep_from - self.stage_pos) as usize;
        next[..self.stage_len - shift].copy_from_slice(&cur[shift..self.stage_len]);
        let _ = cur.set_len(wlen);
        if boundary {
            self.count_write_records();
        }
        self.start_write(cx, seq, cur, piece_end, boundary);
        self.stage = Some(next);
        self.stage_len -= shift;
        self.stage_pos = keep_from;
        self.submitted = piece_end;
        // Preallocate the next segment ahead of need.
        self.prealloc.request(seq + 1);
        Ok(true)
    }

    /// Counts the records of a write that ends on a record boundary.
    #[inline]
    fn count_write_records(&mut self) {
        debug_assert!(
            self.n_written <= self.n_submitted && self.n_submitted <= self.n_collected,
            "records written <= submitted <= taken"
        );
        let n = self.n_collected - self.n_submitted;
        self.n_submitted = self.n_collected;
        self.sh.stats.with(|h| {
            let _ = h.write_records.record(n);
        });
    }

    /// Hands `buf` to the storage as the write of segment `seq` at the
    /// stage's position, ending at `piece_end`; it is then in flight.
    #[inline]
    fn start_write(
        &mut self,
        cx: &mut Context<'_>,
        seq: u64,
        buf: AlignedBuf,
        piece_end: u64,
        boundary: bool,
    ) {
        debug_assert!(self.inflight.is_none(), "one write in flight at most");
        debug_assert_eq!(
            self.sh.geo.segment_of(self.stage_pos),
            seq,
            "a write stays inside its segment"
        );
        let offset = self.sh.geo.file_offset(self.stage_pos);
        let mut fut = self.sh.storage.write_async(seq, offset, buf);
        // Poll once: that queues the write on this thread's ring (the
        // caller returns to `block_on`, which hands it to the kernel).
        let done = match fut.as_mut().poll(cx) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        };
        self.inflight = Some(InFlight {
            fut,
            done,
            seq,
            piece_end,
            boundary,
            n_end: self.n_collected,
            started: Instant::now(),
        });
    }

    /// Syncs what is written when a waiter asked for `Durable` (or when
    /// closing). A failed sync is never retried: the caller poisons.
    pub(super) fn sync_if_requested(&mut self, closing: bool) -> io::Result<()> {
        let written = self.sh.written.load(SeqCst);
        let durable = self.sh.durable.load(SeqCst);
        let wanted = closing || self.sh.durable_request.load(SeqCst) > durable;
        if !wanted || (written <= durable && !closing) {
            return Ok(());
        }
        let sh = self.sh.clone();
        if !sh.storage.writes_are_durable() {
            let t = Instant::now();
            for &seq in &self.dirty {
                sh.storage.sync(seq)?;
            }
            let us = t.elapsed().as_micros() as u64;
            Counters::add(&sh.stats.syncs, 1);
            sh.stats.with(|h| {
                let _ = h.sync_us.record(us);
            });
            self.dirty.clear();
        }
        self.reserve(written)?;
        self.count_group_commit();
        debug_assert!(written <= sh.written.load(SeqCst), "durable <= written");
        advance(&sh.durable, written);
        let woken = sh.ring_bells(true) + sh.wake_waiters(false);
        self.count_woken(woken);
        self.record_durable(closing)
    }

    /// Makes sure the checkpoint's floor is at or past `durable` before
    /// records up to it are acknowledged: if not, writes it, synced, at
    /// a segment's start ahead ([`RESERVE_SEGMENTS`]), so that losing
    /// records acknowledged after the checkpoint's durable point was last
    /// written (damage to a segment) never hands their LSNs out again.
    /// A failed write is never retried: the caller poisons.
    fn reserve(&mut self, durable: u64) -> io::Result<()> {
        if durable <= self.ckpt_reserved {
            return Ok(());
        }
        let geo = self.sh.geo;
        let to = geo.segment_start(geo.segment_of(durable).saturating_add(RESERVE_SEGMENTS));
        debug_assert!(to > durable, "the floor covers what is acknowledged");
        self.sh
            .write_checkpoint(|c| c.reserved_lsn = c.reserved_lsn.max(to), true)?;
        self.ckpt_reserved = to;
        Ok(())
    }

    /// Counts a group commit: the durable watermark is about to move to
    /// the written one, covering the records written since the last one
    /// (counted before the waiters are woken, so that they see it).
    fn count_group_commit(&mut self) {
        debug_assert!(
            self.n_durable <= self.n_written,
            "records durable <= records written"
        );
        let n = self.n_written - self.n_durable;
        self.n_durable = self.n_written;
        self.last_commit_records = n;
        if n == 0 {
            return;
        }
        self.sh.stats.with(|h| {
            let _ = h.sync_records.record(n);
            // Once per record: the batch size its commit saw.
            let _ = h.commit_batch_records.record_n(n, n);
        });
    }

    /// Counts the `Durable` waiters the last group commit woke.
    fn count_woken(&mut self, woken: u64) {
        if self.last_commit_records > 0 {
            self.last_woken = woken;
            self.sh.stats.with(|h| {
                let _ = h.sync_waiters.record(woken);
            });
        }
    }

    /// Records the durable watermark in the checkpoint: a lower bound even
    /// if this write is lost, since it is written only after the sync (or
    /// O_DSYNC write) covering it succeeded. At most once per
    /// `CHECKPOINT_EVERY` under load, handed to the preallocator's thread
    /// (the flusher does not wait for the write: doing it here, between
    /// group commits, cost about a sixth of the commit rate); at once and
    /// here when `force`d (going idle, closing, where it is also synced).
    pub(super) fn record_durable(&mut self, force: bool) -> io::Result<()> {
        let durable = self.sh.durable.load(SeqCst);
        debug_assert!(
            durable <= self.sh.written.load(SeqCst),
            "the durable mark never passes the written one"
        );
        if durable <= self.ckpt_durable || !(force || self.ckpt_at.elapsed() >= CHECKPOINT_EVERY) {
            if force && self.sh.reserve.load(SeqCst) & CLOSED != 0 {
                // The durable point handed to the preallocator may not be
                // written yet (it stops at close): write it here.
                self.write_closing_checkpoint(durable)?;
            }
            return Ok(());
        }
        let closing = self.sh.reserve.load(SeqCst) & CLOSED != 0;
        let update = |c: &mut crate::format::Checkpoint| c.durable_lsn = c.durable_lsn.max(durable);
        if closing {
            self.write_closing_checkpoint(durable)?;
        } else if force {
            self.sh.write_checkpoint(update, false)?;
        } else {
            self.prealloc.checkpoint(durable);
        }
        self.ckpt_durable = durable;
        self.ckpt_at = Instant::now();
        Ok(())
    }
}

/// Where the published records from `from` end, taking only whole atomic
/// batches, and none that would end more than `room` past `stage_pos`.
#[inline]
fn published_end(sh: &Shared, from: u64, stage_pos: u64, room: u64) -> u64 {
    let mut p = from;
    'take: while let Some(mut total) = sh.ring.committed(p) {
        // An atomic batch is taken whole (its later records were
        // published before its first), so that no write, and no
        // watermark, ends inside one.
        let mut q = p;
        loop {
            q += align_up((total & !RING_BATCH_MORE) as u64, RECORD_ALIGN);
            if total & RING_BATCH_MORE == 0 {
                break;
            }
            match sh.ring.committed(q) {
                Some(t) => total = t,
                None => break 'take,
            }
        }
        if q - stage_pos > room {
            break;
        }
        p = q;
    }
    debug_assert!(
        p == from || (p > from && p - stage_pos <= room),
        "the records taken end inside the stage's room"
    );
    p
}

/// Seals the headers of the records in [`from`, `to`) of the stage (which
/// starts at log position `stage_pos`) and zeroes their padding; returns
/// how many there are and their payload bytes.
#[inline]
fn seal_taken(
    sh: &Shared,
    stage: &mut AlignedBuf,
    stage_pos: u64,
    from: u64,
    to: u64,
) -> (u64, u64) {
    let p = to;
    let mut q = from;
    let (mut n, mut payload) = (0u64, 0u64);
    while q < p {
        let o = (q - stage_pos) as usize;
        let mut w = [0u8; 8];
        w.copy_from_slice(&stage[o..o + 8]);
        let total = (u64::from_ne_bytes(w) as u32 & !RING_BATCH_MORE) as usize;
        let span = align_up(total as u64, RECORD_ALIGN) as usize;
        debug_assert!(
            q % RECORD_ALIGN == 0
                && (RECORD_HEADER..=RECORD_HEADER + sh.max_record).contains(&total)
                && q + span as u64 <= p,
            "a record taken from the ring at {q} (total {total}) lies within [{from}, {p})"
        );
        seal_record(&sh.geo, q, &mut stage[o..o + total]);
        debug_assert!(
            reads_back(&sh.geo, q, &stage[o..o + total]),
            "the record sealed at {q} reads back"
        );
        stage[o + total..o + span].fill(0);
        payload += (total - RECORD_HEADER) as u64;
        n += 1;
        q += span as u64;
    }
    debug_assert_eq!(q, p, "the records sealed tile [from, to) exactly");
    (n, payload)
}

/// Counts a batch taken from the ring: `n` records, `payload` bytes of
/// payload, `len` bytes of log.
#[inline]
fn count_batch(st: &Counters, n: u64, payload: u64, len: u64) {
    debug_assert!(
        n > 0 && payload + n * RECORD_HEADER as u64 <= len,
        "a batch's log bytes hold its records' headers and payloads"
    );
    Counters::add(&st.appends, n);
    Counters::add(&st.payload_bytes, payload);
    Counters::add(&st.log_bytes, len);
    Counters::add(&st.batches, 1);
    st.with(|h| {
        let _ = h.batch_records.record(n);
        let _ = h.batch_bytes.record(len);
    });
}

impl Flusher {
    /// The checkpoint written, synced, when closing: its durable point is
    /// `durable` (everything acknowledged), and so is its floor (nothing
    /// past it was acknowledged), so that `repair` of a journal closed
    /// cleanly continues where it ends. A later acknowledgement (none is
    /// expected) reserves anew.
    fn write_closing_checkpoint(&mut self, durable: u64) -> io::Result<()> {
        let mut floor = durable;
        self.sh.write_checkpoint(
            |c| {
                c.durable_lsn = c.durable_lsn.max(durable);
                c.reserved_lsn = c.durable_lsn;
                floor = c.durable_lsn;
            },
            true,
        )?;
        debug_assert!(
            floor >= durable,
            "the closing floor covers the durable point"
        );
        self.ckpt_reserved = floor;
        Ok(())
    }
}

/// The checkpoint's floor is written at the start of the segment this
/// many after the durable point's: one to two segments of LSNs ahead, so
/// one extra synced checkpoint write per segment of records (about as
/// often as segments are made), not per commit; `repair` after a crash
/// skips at most two segments of LSNs, and continues at a segment's start,
/// where the segment is left to the preallocator (so that a journal on a
/// full file system still repairs and opens).
const RESERVE_SEGMENTS: u64 = 2;

/// The longest the flusher parks between turns on the fallback drivers
/// ([`Flusher::park_loop`]), should a wake-up ever be missed.
const IDLE_PARK: Duration = Duration::from_millis(100);

/// Wakes the flusher parked in [`Flusher::park_loop`].
struct Unpark {
    thread: Thread,
    notified: AtomicBool,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.notified.store(true, SeqCst);
        self.thread.unpark();
    }
}

/// How often, at most, the flusher rewrites the checkpoint under load.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(1);

/// Moves a watermark (`released`, `accepted`, `written`, `durable`) that
/// only the flusher stores: in debug builds, checks that it never goes
/// back.
fn advance(mark: &std::sync::atomic::AtomicU64, to: u64) {
    debug_assert!(
        mark.load(SeqCst) <= to,
        "a watermark moves forward only: {} -> {to}",
        mark.load(SeqCst)
    );
    mark.store(to, SeqCst);
}
