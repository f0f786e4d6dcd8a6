//! The state appenders, waiters and the flusher share: the reservation
//! cursor, the ring buffer, the watermarks and the waiter lists.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use super::bell::Bell;
use super::options::*;
use crate::error::{Error, Result};
use crate::format::{
    align_up, record_span, Checkpoint, Geometry, CHECKPOINT_SLOT, FLAG_BATCH_CONT, FLAG_BATCH_MORE,
    LSN_MASK, RECORD_ALIGN, RECORD_HEADER,
};
use crate::ring::{Padded, Ring};
use crate::stats::Counters;
use crate::storage::Storage;

pub(super) const CLOSED: u64 = 1 << 63;
pub(super) const DEAD: u64 = 1 << 62;
pub(super) const FLAGS: u64 = CLOSED | DEAD;
/// Most bytes the flusher stages (and writes) at once.
pub(super) const STAGE_BYTES: usize = 4 << 20;
/// In a ring commit word's length half: more records of the same atomic
/// batch follow this one (the flusher takes a batch whole). Lengths stay
/// below it (at most `24 + 2^30`).
pub(super) const RING_BATCH_MORE: u32 = 1 << 31;
/// Most records `wait(.., Accepted)` looks at in the ring itself before it
/// leaves the rest to the flusher.
const ACCEPTED_SCAN: usize = 4096;

pub(super) struct Waiter {
    pub(super) lsn: u64,
    pub(super) level: Level,
    pub(super) waker: Waker,
}

pub(super) struct Meta {
    pub(super) checkpoint: Checkpoint,
}

pub(super) struct Shared {
    pub(super) reserve: Padded<AtomicU64>,
    pub(super) released: Padded<AtomicU64>,
    pub(super) sleeping: Padded<AtomicBool>,
    pub(super) accepted: Padded<AtomicU64>,
    pub(super) written: AtomicU64,
    pub(super) durable: AtomicU64,
    pub(super) durable_request: AtomicU64,
    pub(super) ring: Ring,
    pub(super) max_record: usize,
    /// Length limit when reading back (records of earlier opens may be
    /// larger than this open allows).
    pub(super) read_limit: usize,
    /// How many retired segment files to keep for reuse.
    pub(super) recycle_segments: usize,
    pub(super) failure: OnceLock<Arc<io::Error>>,
    pub(super) space: Mutex<Vec<Waker>>,
    pub(super) space_waiting: AtomicUsize,
    pub(super) waiters: Mutex<Vec<Waiter>>,
    pub(super) waiting: AtomicUsize,
    /// Threads blocked for `Written` and for `Durable` sleep here.
    pub(super) written_bell: Bell,
    pub(super) durable_bell: Bell,
    /// The flusher's waker (its `block_on`'s), set on its first turn.
    pub(super) flusher: OnceLock<Waker>,
    pub(super) stats: Counters,
    pub(super) storage: Arc<dyn Storage>,
    pub(super) geo: Geometry,
    pub(super) meta: Mutex<Meta>,
    /// The first segment not retired; its lock also serializes
    /// truncations (held while files are renamed or removed, which the
    /// flusher never waits for).
    pub(super) first_seq: Mutex<u64>,
    /// Set once the journal is closed and its flusher has stopped: the
    /// watermarks no longer move (tails end).
    pub(super) finished: AtomicBool,
}

impl Shared {
    pub(super) fn fail_error(&self, state: u64) -> Error {
        match self.failure.get() {
            Some(e) => Error::Poisoned(e.clone()),
            None if state & DEAD != 0 => Error::Poisoned(Arc::new(io::Error::other("failed"))),
            None => Error::Closed,
        }
    }

    pub(super) fn try_reserve(&self, len: usize) -> Result<u64> {
        if len > self.max_record {
            return Err(Error::TooLarge {
                len,
                max: self.max_record,
            });
        }
        self.try_reserve_span(record_span(len))
    }

    /// Reserves `span` log bytes (at most one largest record's).
    fn try_reserve_span(&self, span: u64) -> Result<u64> {
        debug_assert!(
            span % RECORD_ALIGN == 0
                && span >= RECORD_HEADER as u64
                && span <= record_span(self.max_record),
            "a reservation is whole records, at most one largest record's span: {span}"
        );
        if self.storage.is_forked_copy() {
            return Err(Error::Forked);
        }
        let cap = self.ring.cap();
        let mut cur = self.reserve.load(SeqCst);
        loop {
            if cur & FLAGS != 0 {
                return Err(self.fail_error(cur));
            }
            if cur + span > LSN_MASK {
                return Err(Error::InvalidInput(
                    "the log has used up its LSNs (2^61 bytes)".into(),
                ));
            }
            let released = self.released.load(SeqCst);
            if !fits(cur, span, released, cap) {
                return Err(Error::Full);
            }
            match self
                .reserve
                .compare_exchange_weak(cur, cur + span, SeqCst, SeqCst)
            {
                Ok(_) => {
                    debug_assert!(
                        cur % RECORD_ALIGN == 0 && cur + span - released <= cap,
                        "a reservation starts aligned and lies in the released ring"
                    );
                    return Ok(cur);
                }
                Err(v) => cur = v,
            }
        }
    }

    /// Reserves room for `data` and copies it in: one CAS, one copy, one
    /// store. Returns the record's LSN.
    pub(super) fn try_append(&self, data: &[u8]) -> Result<u64> {
        let pos = self.try_reserve(data.len())?;
        self.fill(pos, data);
        Ok(pos)
    }

    /// Reserves room for the records of an atomic batch at once, copies
    /// them in and publishes them, the first last: the flusher, which takes
    /// records in order, sees the batch only once all of it is there, and
    /// takes it whole. Returns the first record's LSN.
    pub(super) fn try_append_batch(&self, records: &[&[u8]]) -> Result<u64> {
        match records {
            [] => return Err(Error::InvalidInput("an empty batch".into())),
            [one] => return self.try_append(one),
            _ => {}
        }
        let mut span = 0u64;
        for r in records {
            if r.len() > self.max_record {
                return Err(Error::TooLarge {
                    len: r.len(),
                    max: self.max_record,
                });
            }
            span += record_span(r.len());
        }
        if span > record_span(self.max_record) {
            return Err(Error::TooLarge {
                len: (span - RECORD_HEADER as u64) as usize,
                max: self.max_record,
            });
        }
        let first = self.try_reserve_span(span)?;
        let last = records.len() - 1;
        let mut words = Vec::with_capacity(records.len());
        let mut pos = first;
        for (i, data) in records.iter().enumerate() {
            let mut flags = 0u64;
            if i > 0 {
                flags |= FLAG_BATCH_CONT;
            }
            let mut total = (RECORD_HEADER + data.len()) as u32;
            if i < last {
                flags |= FLAG_BATCH_MORE;
                total |= RING_BATCH_MORE;
            }
            // SAFETY: `try_reserve_span` gave us [first, first + span)
            // exclusively, released by the flusher; each record's header
            // and payload lie inside it.
            unsafe {
                self.ring.write(pos + 8, &flags.to_le_bytes());
                self.ring.write(pos + RECORD_HEADER as u64, data);
            }
            words.push((pos, self.ring.commit_word(pos, total)));
            pos += align_up((RECORD_HEADER + data.len()) as u64, RECORD_ALIGN);
        }
        debug_assert_eq!(
            pos - first,
            span,
            "the batch's records fill its reservation exactly"
        );
        for &(at, word) in words.iter().rev() {
            // SAFETY: as above; every record's bytes were written first.
            unsafe { self.ring.publish(at, word) };
        }
        self.wake_flusher();
        Ok(first)
    }

    /// Whether every record up to and including `lsn` is published in the
    /// ring (accepted), looking at the records the flusher has not taken
    /// yet (at most [`ACCEPTED_SCAN`] of them), so that a wait for
    /// `Accepted` needs no turn of the flusher.
    fn accepted_through(&self, lsn: u64) -> bool {
        let mut p = self.accepted.load(SeqCst);
        for _ in 0..ACCEPTED_SCAN {
            if p > lsn {
                return true;
            }
            match self.ring.committed(p) {
                Some(total) => {
                    p += align_up((total & !RING_BATCH_MORE) as u64, RECORD_ALIGN);
                }
                None => {
                    // Taken by the flusher meanwhile, or not published yet.
                    let taken = self.accepted.load(SeqCst);
                    if taken <= p {
                        return false;
                    }
                    p = taken;
                }
            }
        }
        p > lsn
    }

    pub(super) fn fill(&self, pos: u64, data: &[u8]) {
        debug_assert!(
            pos % RECORD_ALIGN == 0 && data.len() <= self.max_record,
            "a record fills an aligned reservation of at most max_record bytes"
        );
        // SAFETY: `try_reserve` gave us [pos, pos + span) exclusively and
        // checked that the flusher released it.
        unsafe {
            self.ring.write(pos + RECORD_HEADER as u64, data);
            self.ring.publish(
                pos,
                self.ring
                    .commit_word(pos, (RECORD_HEADER + data.len()) as u32),
            );
        }
        self.wake_flusher();
    }

    /// Wakes the flusher if it sleeps. Called on every append and wait:
    /// the flag is only read (no write to its cache line) while the flusher
    /// is awake.
    pub(super) fn wake_flusher(&self) {
        if self.sleeping.load(SeqCst) && self.sleeping.swap(false, SeqCst) {
            if let Some(w) = self.flusher.get() {
                w.wake_by_ref();
            }
        }
    }

    pub(super) fn watermark(&self, level: Level) -> u64 {
        match level {
            Level::Accepted => self.accepted.load(SeqCst),
            Level::Written => self.written.load(SeqCst),
            Level::Durable => self.durable.load(SeqCst),
        }
    }

    /// The outcome of a wait for `lsn` at `level`, if it is decided.
    pub(super) fn wait_done(&self, lsn: u64, level: Level) -> Option<Result<()>> {
        if self.storage.is_forked_copy() {
            // The flusher is a thread of the parent: nothing moves here.
            return Some(Err(Error::Forked));
        }
        let state = self.reserve.load(SeqCst);
        if state & DEAD != 0 {
            return Some(Err(self.fail_error(state)));
        }
        if self.watermark(level) > lsn || (level == Level::Accepted && self.accepted_through(lsn)) {
            return Some(Ok(()));
        }
        if lsn >= state & !FLAGS {
            return Some(Err(Error::InvalidInput(format!(
                "LSN {lsn} has not been appended"
            ))));
        }
        None
    }

    /// Blocks the calling thread until the wait for `lsn` at `level`
    /// (`Written` or `Durable`) is decided. The thread sleeps on the
    /// level's futex word, which the flusher bumps whenever the watermark
    /// moves; the sleepers then wake each other (see [`Bell`]). A sleeper
    /// whose record the move did not cover sleeps again (counted in
    /// `spurious_wakeups`).
    pub(super) fn wait_blocking(&self, lsn: u64, level: Level) -> Result<()> {
        debug_assert!(
            level != Level::Accepted,
            "only Written and Durable waits block on a bell"
        );
        let bell = match level {
            Level::Durable => &self.durable_bell,
            _ => &self.written_bell,
        };
        let mut slept = false;
        loop {
            let seen = bell.seen();
            if let Some(r) = self.wait_done(lsn, level) {
                return r;
            }
            if slept {
                Counters::add(&self.stats.spurious_wakeups, 1);
            }
            if level == Level::Durable {
                self.durable_request.fetch_max(lsn + 1, SeqCst);
            }
            self.wake_flusher();
            slept = bell.sleep(seen);
        }
    }

    /// Wakes the threads blocked in [`wait_blocking`](Self::wait_blocking)
    /// for `Written` and, when `durable`, for `Durable` (after the
    /// watermarks moved). Returns how many slept on the `Durable` word.
    pub(super) fn ring_bells(&self, durable: bool) -> u64 {
        self.written_bell.ring();
        if durable {
            self.durable_bell.ring()
        } else {
            0
        }
    }

    /// Wakes every thread blocked in [`wait_blocking`](Self::wait_blocking)
    /// at once (failure, close): each checks again and returns.
    pub(super) fn ring_bells_all(&self) {
        self.written_bell.ring_all();
        self.durable_bell.ring_all();
    }

    /// Before the flusher goes idle: wakes any sleeper a ring's tree missed
    /// (see [`Bell::sweep`]), on a level whose watermark has reached
    /// everything appended, so that nobody asleep on it can be waiting
    /// for more. A committer that appends again and sleeps between that
    /// check and the wake-up is woken in vain (counted in
    /// `spurious_wakeups`), unless the last ring woke its few sleepers
    /// itself: then the bell needs no sweep ([`Bell::ring`]).
    pub(super) fn sweep_bells(&self) {
        let appended = self.reserve.load(SeqCst) & !FLAGS;
        if self.written.load(SeqCst) >= appended {
            self.written_bell.sweep();
        }
        if self.durable.load(SeqCst) >= appended {
            self.durable_bell.sweep();
        }
    }

    pub(super) fn poll_wait(
        &self,
        lsn: u64,
        level: Level,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        let check = |this: &Shared| this.wait_done(lsn, level);
        if let Some(r) = check(self) {
            return Poll::Ready(r);
        }
        if level == Level::Durable {
            self.durable_request.fetch_max(lsn + 1, SeqCst);
        }
        {
            let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            // A future polled again before its LSN is reached is already
            // registered: keep one entry per waiter, not one per poll.
            let known = w
                .iter()
                .any(|x| x.lsn == lsn && x.level == level && x.waker.will_wake(cx.waker()));
            if !known {
                w.push(Waiter {
                    lsn,
                    level,
                    waker: cx.waker().clone(),
                });
                self.waiting.store(w.len(), SeqCst);
            }
            debug_assert_eq!(
                self.waiting.load(SeqCst),
                w.len(),
                "the waiter count mirrors the list (under its lock)"
            );
        }
        self.wake_flusher();
        match check(self) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    /// Wakes the waiters whose level's watermark passed their LSN (every
    /// one when `all`); returns how many of them waited for `Durable`.
    pub(super) fn wake_waiters(&self, all: bool) -> u64 {
        if self.waiting.load(SeqCst) == 0 {
            return 0;
        }
        let marks = [
            self.accepted.load(SeqCst),
            self.written.load(SeqCst),
            self.durable.load(SeqCst),
        ];
        let mut ready = Vec::new();
        let mut durable = 0;
        {
            let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            let mut i = 0;
            while i < w.len() {
                let mark = marks[w[i].level as usize];
                if all || mark > w[i].lsn {
                    durable += (w[i].level == Level::Durable) as u64;
                    ready.push(w.swap_remove(i).waker);
                } else {
                    i += 1;
                }
            }
            self.waiting.store(w.len(), SeqCst);
        }
        for w in ready {
            w.wake();
        }
        durable
    }

    pub(super) fn wake_space(&self) {
        if self.space_waiting.load(SeqCst) == 0 {
            return;
        }
        let ws = {
            let mut s = self.space.lock().unwrap_or_else(|p| p.into_inner());
            self.space_waiting.store(0, SeqCst);
            std::mem::take(&mut *s)
        };
        for w in ws {
            w.wake();
        }
    }

    pub(super) fn poison(&self, e: io::Error) {
        let _ = self.failure.set(Arc::new(e));
        self.reserve.fetch_or(DEAD, SeqCst);
        // An idle flusher (when the preallocator failed) sees DEAD and ends.
        self.wake_flusher();
        self.ring_bells_all();
        self.wake_waiters(true);
        self.wake_space();
    }

    pub(super) fn write_checkpoint(
        &self,
        f: impl FnOnce(&mut Checkpoint),
        sync: bool,
    ) -> io::Result<()> {
        let meta = self.meta.lock().unwrap_or_else(|p| p.into_inner());
        self.write_checkpoint_locked(meta, f, sync)
    }

    fn write_checkpoint_locked(
        &self,
        mut meta: std::sync::MutexGuard<'_, Meta>,
        f: impl FnOnce(&mut Checkpoint),
        sync: bool,
    ) -> io::Result<()> {
        let mut c = meta.checkpoint;
        f(&mut c);
        debug_assert!(
            c.geometry == meta.checkpoint.geometry && c.generation == meta.checkpoint.generation,
            "a checkpoint update keeps the geometry and leaves the generation to the writer"
        );
        // Everything acknowledged is below the durable point: the floor
        // is never below it.
        c.reserved_lsn = c.reserved_lsn.max(c.durable_lsn);
        debug_assert!(
            c.start_lsn >= meta.checkpoint.start_lsn
                && c.durable_lsn >= meta.checkpoint.durable_lsn,
            "the checkpoint's start and durable point move forward only"
        );
        c.generation += 1;
        self.storage.write_checkpoint(
            (c.generation % 2) * CHECKPOINT_SLOT as u64,
            &c.encode_checked(),
            sync,
        )?;
        meta.checkpoint = c;
        Ok(())
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

/// Whether a record of `span` bytes reserved at `cur` fits in a ring of
/// `cap` bytes that the flusher has released up to `released`. `cur` was
/// read before `released`, so it may be stale: other appenders may have
/// reserved after it, and the flusher released their records, past `cur`.
/// Such a `cur` fits (the reservation's compare-and-swap then fails and
/// reads it again) instead of underflowing.
fn fits(cur: u64, span: u64, released: u64, cap: u64) -> bool {
    debug_assert!(span <= cap, "a reservation is at most the ring");
    (cur + span).saturating_sub(released) <= cap
}

#[cfg(test)]
mod tests {
    use super::fits;

    #[test]
    fn a_stale_reservation_cursor_fits_instead_of_underflowing() {
        // Released past the stale cursor: no panic, and the CAS decides.
        assert!(fits(100, 8, 4096, 1024));
        // The ring's bounds, exactly.
        assert!(fits(1000, 24, 0, 1024));
        assert!(!fits(1000, 25, 0, 1024));
        assert!(fits(5000, 24, 4000, 1024));
        assert!(!fits(5000, 25, 4000, 1024));
    }
}
