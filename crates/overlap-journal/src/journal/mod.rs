//! The journal: the API of [`Journal`] (appending, waiting, reading,
//! retiring, closing). Its parts: [`options`], the [`shared`] state, the
//! [`flusher`], the [`prealloc`]ator and the [`reader`].

mod bell;
mod flusher;
mod options;
mod prealloc;
mod reader;
mod shared;
mod tail;

pub use options::{
    Level, Lsn, Options, DEFAULT_BUFFER_BYTES, DEFAULT_MAX_RECORD_BYTES, DEFAULT_RECYCLE_SEGMENTS,
    DEFAULT_SEGMENT_SIZE, MAX_RECORD_LIMIT,
};
pub use reader::{Record, RecordIter};
pub use tail::Tail;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Instant;

use overlapped::{block_on, AlignedBuf, Engine};

use self::bell::Bell;
use self::flusher::*;
use self::prealloc::*;
use self::shared::*;
use crate::error::{Error, Result};
use crate::format::{
    align_down, align_up, record_span, Geometry, CLEAN_END_MAX, LSN_MASK, RECORD_ALIGN,
};
use crate::recovery::{recover, Recovered, RecoveryReport};
use crate::ring::{Padded, Ring};
use crate::stats::{Counters, JournalStats};
use crate::storage::{FsStorage, Storage};

/// A write-ahead log. `Send + Sync`: share it between threads with an `Arc`.
///
/// See the crate documentation for an overview and an example.
pub struct Journal {
    sh: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    prealloc: Mutex<Option<(Arc<Prealloc>, JoinHandle<()>)>>,
    report: RecoveryReport,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("reserved", &(self.sh.reserve.load(SeqCst) & !FLAGS))
            .field("durable", &self.sh.durable.load(SeqCst))
            .finish()
    }
}

impl Journal {
    /// Opens the journal in directory `dir` (creating it if needed),
    /// recovering what is there.
    ///
    /// When the open fails, a directory it created is removed again.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Journal> {
        options.validate()?;
        let dir = dir.as_ref();
        let engine = match &options.engine {
            Some(e) => e.clone(),
            None => Engine::new()?,
        };
        let existed = dir.exists();
        let res = FsStorage::open(&engine, dir, options.direct_io, options.sync)
            .and_then(|storage| Journal::open_with_storage(Arc::new(storage), options));
        if res.is_err() && !existed {
            remove_made(dir);
        }
        res
    }

    /// Opens a journal on any [`Storage`] (tests use a fault-injecting one).
    pub fn open_with_storage(storage: Arc<dyn Storage>, options: Options) -> Result<Journal> {
        options.validate()?;
        let rec = recover(
            &storage,
            options.recovery,
            options.segment_size,
            options.max_record_bytes,
            true,
            None,
        )?;
        let shared = first_shared(&storage, &options, &rec);
        let flusher = first_flusher(&shared, &storage, &options, &rec)?;
        let prealloc = flusher.prealloc.clone();
        let pre_handle = {
            let prealloc = prealloc.clone();
            let sh = shared.clone();
            std::thread::Builder::new()
                .name("journal-prealloc".into())
                .spawn(move || prealloc.run(&sh))
                .map_err(Error::from)?
        };
        let handle = std::thread::Builder::new()
            .name("journal-flusher".into())
            .spawn(move || flusher.run())
            .map_err(Error::from)?;
        Ok(Journal {
            sh: shared,
            flusher: Mutex::new(Some(handle)),
            prealloc: Mutex::new(Some((prealloc, pre_handle))),
            report: rec.report,
        })
    }

    /// What recovery found when the journal was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The journal's geometry.
    pub fn geometry(&self) -> Geometry {
        self.sh.geo
    }

    /// Appends a record: copies it into the log buffer and returns its LSN
    /// at once. When the buffer is full, blocks until the flusher frees
    /// space (counted in [`JournalStats::full_waits`]).
    pub fn append(&self, data: &[u8]) -> Result<Lsn> {
        match self.sh.try_append(data) {
            Ok(pos) => Ok(Lsn(pos)),
            Err(Error::Full) => block_on(self.append_async(data)),
            Err(e) => Err(e),
        }
    }

    /// As [`append`](Self::append), but fails with [`Error::Full`] instead
    /// of waiting when the buffer is full.
    pub fn try_append(&self, data: &[u8]) -> Result<Lsn> {
        match self.sh.try_append(data) {
            Ok(pos) => Ok(Lsn(pos)),
            Err(Error::Full) => {
                Counters::add(&self.sh.stats.full_refusals, 1);
                Err(Error::Full)
            }
            Err(e) => Err(e),
        }
    }

    /// Appends the records of `records` as one atomic batch: after a
    /// crash, all of them are in the log or none is (recovery drops a
    /// batch whose last record is missing), and readers and watermarks
    /// never see part of one. Returns their LSNs, consecutive in the log.
    /// Blocks when the buffer is full, as [`append`](Self::append).
    ///
    /// A batch takes at most as much log space as one record of
    /// [`Options::max_record_bytes`] (each record's 24-byte header and
    /// padding to 8 bytes counted), else [`Error::TooLarge`]; an empty one
    /// is [`Error::InvalidInput`].
    pub fn append_batch<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<Vec<Lsn>> {
        let refs: Vec<&[u8]> = records.iter().map(|r| r.as_ref()).collect();
        let first = match self.sh.try_append_batch(&refs) {
            Ok(pos) => pos,
            Err(Error::Full) => block_on(self.reserve_async(|sh| sh.try_append_batch(&refs)))?,
            Err(e) => return Err(e),
        };
        Ok(batch_lsns(first, &refs))
    }

    /// As [`append_batch`](Self::append_batch), but fails with
    /// [`Error::Full`] instead of waiting when the buffer is full.
    pub fn try_append_batch<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<Vec<Lsn>> {
        let refs: Vec<&[u8]> = records.iter().map(|r| r.as_ref()).collect();
        match self.sh.try_append_batch(&refs) {
            Ok(first) => Ok(batch_lsns(first, &refs)),
            Err(Error::Full) => {
                Counters::add(&self.sh.stats.full_refusals, 1);
                Err(Error::Full)
            }
            Err(e) => Err(e),
        }
    }

    /// As [`append_batch`](Self::append_batch), but waits asynchronously
    /// when the buffer is full.
    pub async fn append_batch_async<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<Vec<Lsn>> {
        let refs: Vec<&[u8]> = records.iter().map(|r| r.as_ref()).collect();
        let first = self.reserve_async(|sh| sh.try_append_batch(&refs)).await?;
        Ok(batch_lsns(first, &refs))
    }

    /// As [`append`](Self::append), but waits asynchronously when the
    /// buffer is full.
    pub fn append_async<'a>(&'a self, data: &'a [u8]) -> impl Future<Output = Result<Lsn>> + 'a {
        let fut = self.reserve_async(move |sh| sh.try_append(data));
        async move { fut.await.map(Lsn) }
    }

    /// Runs `attempt` until it does not find the buffer full, waiting
    /// asynchronously for the flusher to free space in between (counted in
    /// [`JournalStats::full_waits`]).
    fn reserve_async<'a>(
        &'a self,
        attempt: impl Fn(&Shared) -> Result<u64> + 'a,
    ) -> impl Future<Output = Result<u64>> + 'a {
        let mut waited: Option<Instant> = None;
        std::future::poll_fn(move |cx| {
            let sh = &self.sh;
            let mut registered = false;
            loop {
                match attempt(sh) {
                    Ok(pos) => {
                        if let Some(t) = waited {
                            let us = t.elapsed().as_micros() as u64;
                            sh.stats.with(|h| {
                                let _ = h.full_wait_us.record(us);
                            });
                        }
                        return Poll::Ready(Ok(pos));
                    }
                    Err(Error::Full) if registered => return Poll::Pending,
                    Err(Error::Full) => {
                        if waited.is_none() {
                            waited = Some(Instant::now());
                            Counters::add(&sh.stats.full_waits, 1);
                        }
                        {
                            let mut s = sh.space.lock().unwrap_or_else(|p| p.into_inner());
                            if !s.iter().any(|w| w.will_wake(cx.waker())) {
                                s.push(cx.waker().clone());
                            }
                            sh.space_waiting.store(s.len(), SeqCst);
                        }
                        registered = true;
                        sh.wake_flusher();
                        // Try once more: space may have been freed before
                        // the flusher could see our waker.
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        })
    }

    /// A future that resolves when every record up to and including `lsn`
    /// has reached `level`, or with the journal's error.
    pub fn wait(&self, lsn: Lsn, level: Level) -> Wait<'_> {
        Wait {
            sh: &self.sh,
            lsn: lsn.0,
            level,
        }
    }

    /// Blocks until every record up to and including `lsn` has reached
    /// `level`.
    ///
    /// Returns at once when the level is already reached: for `Accepted`,
    /// as soon as every record up to `lsn` is in the log buffer (which it is
    /// when the appends that returned them have returned), without waiting
    /// for the flusher.
    pub fn wait_blocking(&self, lsn: Lsn, level: Level) -> Result<()> {
        if let Some(r) = self.sh.wait_done(lsn.0, level) {
            return r;
        }
        match level {
            Level::Accepted => block_on(self.wait(lsn, level)),
            // A write (and for Durable a device flush) lies ahead: sleep
            // at once, on the level's futex word. (The engine's block_on
            // first looks for its wake-up for 20 us, yielding in a loop:
            // with 64 committers on 2 vCPUs that took the CPU from the
            // flusher and split group commits.)
            _ => self.sh.wait_blocking(lsn.0, level),
        }
    }

    /// The watermark of `level`: every record below this LSN has reached it.
    pub fn watermark(&self, level: Level) -> Lsn {
        Lsn(self.sh.watermark(level))
    }

    /// Statistics.
    pub fn stats(&self) -> JournalStats {
        let mut s = self.sh.stats.snapshot();
        s.reserved_lsn = self.sh.reserve.load(SeqCst) & !FLAGS;
        s.accepted_lsn = self.sh.accepted.load(SeqCst);
        s.written_lsn = self.sh.written.load(SeqCst);
        s.durable_lsn = self.sh.durable.load(SeqCst);
        s.recovery_cut_lsn = self.report.truncated_at;
        s.recovery_cuts = self.report.truncated_at.is_some() as u64;
        s.recovery_dropped_records = self.report.dropped_records;
        s.segments_unreserved = self.sh.storage.segments_unreserved();
        s
    }

    /// The first LSN still in the log.
    pub fn start_lsn(&self) -> Lsn {
        Lsn(self
            .sh
            .meta
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .checkpoint
            .start_lsn)
    }

    /// Iterates the records from `lsn` (a record's LSN, the start, or the
    /// [`Record::next_lsn`] of one) up to the `Written` watermark at the
    /// time of the call. An LSN that is not where a record starts is
    /// refused ([`Error::InvalidInput`]), as by
    /// [`truncate_before`](Self::truncate_before).
    pub fn read_from(&self, lsn: Lsn) -> Result<RecordIter> {
        let end = self.sh.written.load(SeqCst);
        self.check_start(lsn.0, end)?;
        Ok(RecordIter::new(
            self.sh.storage.clone(),
            self.sh.geo,
            self.sh.read_limit,
            lsn.0,
            end,
        ))
    }

    /// A reader that follows the log from `lsn` (as for
    /// [`read_from`](Self::read_from); it may also be the end of the log,
    /// where the next record will go) as records reach `level` (`Written`
    /// or `Durable`): the shape of a Kafka consumer or RocksDB's
    /// `GetUpdatesSince`. Iterating it blocks until the next record reaches
    /// the level; [`Tail::next_async`] waits asynchronously. It ends (with
    /// `None`) once the journal is closed and every record that reached the
    /// level was read, and with the journal's error if it fails.
    ///
    /// A `Durable` tail sees records as group commits make them durable:
    /// it requests no sync itself. The tail keeps the journal's files open
    /// (and its directory locked) until it is dropped.
    pub fn tail(&self, lsn: Lsn, level: Level) -> Result<Tail> {
        if level == Level::Accepted {
            return Err(Error::InvalidInput(
                "a tail follows `written` or `durable` records (accepted ones are only in memory)"
                    .into(),
            ));
        }
        let appended = self.sh.reserve.load(SeqCst) & !FLAGS;
        if lsn.0 > appended {
            return Err(Error::InvalidInput(format!(
                "LSN {} is beyond the end of the log ({appended})",
                lsn.0
            )));
        }
        let written = self.sh.written.load(SeqCst);
        self.check_start(lsn.0, written)?;
        let iter = RecordIter::new(
            self.sh.storage.clone(),
            self.sh.geo,
            self.sh.read_limit,
            lsn.0,
            self.sh.watermark(level).max(lsn.0),
        );
        Ok(Tail::new(self.sh.clone(), iter, level))
    }

    /// Checks that reading may start at `lsn`: not retired, and where a
    /// record starts (its header names it) when a record is there (below
    /// `written`).
    fn check_start(&self, lsn: u64, written: u64) -> Result<()> {
        let start = self.start_lsn().0;
        if lsn < start {
            return Err(Error::InvalidInput(format!(
                "LSN {lsn} was retired; the log starts at {start}"
            )));
        }
        let not_a_record =
            || Error::InvalidInput(format!("LSN {lsn} is not the start of a record"));
        if lsn % RECORD_ALIGN != 0 {
            return Err(not_a_record());
        }
        if lsn < written {
            let mut src = crate::recovery::StorageSource {
                storage: self.sh.storage.clone(),
                geo: self.sh.geo,
                end: written,
            };
            let mut hdr = [0u8; 16];
            use crate::format::StreamSource;
            let n = src.read_stream(lsn, &mut hdr)?;
            let field = u64::from_le_bytes(hdr[8..16].try_into().unwrap_or([0; 8]));
            if n < hdr.len() || field & LSN_MASK != lsn {
                return Err(not_a_record());
            }
        }
        Ok(())
    }

    /// Retires the segments that hold only records before `lsn` (which must
    /// be a record's LSN at or below the durable watermark). Reading before
    /// `lsn` is refused afterwards. Up to [`Options::recycle_segments`]
    /// retired files are kept (renamed `<seq>.free`) and reused for later
    /// segments; the rest are removed.
    pub fn truncate_before(&self, lsn: Lsn) -> Result<()> {
        let sh = &self.sh;
        if let Some(e) = sh.failure.get() {
            return Err(Error::Poisoned(e.clone()));
        }
        let durable = sh.durable.load(SeqCst);
        if lsn.0 > durable {
            return Err(Error::InvalidInput(format!(
                "LSN {} is beyond the durable watermark {durable}",
                lsn.0
            )));
        }
        // One truncation at a time.
        let mut first_seq = sh.first_seq.lock().unwrap_or_else(|p| p.into_inner());
        let start = self.start_lsn().0;
        if lsn.0 <= start {
            return Ok(());
        }
        if lsn.0 < durable {
            let mut it = RecordIter::new(sh.storage.clone(), sh.geo, sh.read_limit, lsn.0, durable);
            match it.next() {
                Some(Ok(r)) if r.lsn == lsn => {}
                Some(Err(e)) if !matches!(e, Error::Corrupt { .. }) => return Err(e),
                _ => {
                    return Err(Error::InvalidInput(format!(
                        "LSN {} is not the start of a record",
                        lsn.0
                    )))
                }
            }
        }
        sh.write_checkpoint(
            |c| {
                c.start_lsn = lsn.0;
                c.durable_lsn = c.durable_lsn.max(lsn.0);
            },
            true,
        )?;
        let keep = sh.geo.segment_of(lsn.0);
        // The segment files that exist, never every number below `keep`
        // (a repaired log may skip segments, up to any number). Kept for
        // reuse (renamed out of the log) up to the bound, removed beyond.
        for seq in sh.storage.segments_between(*first_seq, keep)? {
            sh.storage.recycle_segment(seq, sh.recycle_segments)?;
            *first_seq = seq + 1;
            Counters::add(&sh.stats.segments_retired, 1);
        }
        *first_seq = (*first_seq).max(keep);
        Ok(())
    }

    /// Stops accepting records, writes and syncs everything appended, and
    /// stops the flusher. Returns the journal's error if it failed.
    /// Dropping the journal does the same, ignoring the error.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
        if self.sh.storage.is_forked_copy() {
            // The flusher and the preallocator are threads of the parent:
            // there is nothing to join here, and nothing of the parent's
            // to touch. Their handles are forgotten.
            self.sh.reserve.fetch_or(CLOSED, SeqCst);
            let f = self
                .flusher
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let p = self
                .prealloc
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            std::mem::forget((f, p));
            return Err(Error::Forked);
        }
        let state = self.sh.reserve.fetch_or(CLOSED, SeqCst);
        let handle = self
            .flusher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = handle {
            // The flusher publishes its waker on its first turn, at once
            // after it starts: wait for it (or for the thread to end), so
            // that the wake-up below cannot miss a flusher that has just
            // read the state from before CLOSED. A flusher that already
            // saw CLOSED takes the wake-up as a spurious one.
            while self.sh.flusher.get().is_none() && !h.is_finished() {
                std::thread::yield_now();
            }
            if let Some(w) = self.sh.flusher.get() {
                w.wake_by_ref();
            }
            let _ = h.join();
        }
        let pre = self
            .prealloc
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((p, h)) = pre {
            p.stop();
            let _ = h.join();
        }
        // The watermarks are final: tails end once they have read up to them.
        self.sh.finished.store(true, SeqCst);
        self.sh.wake_waiters(true);
        self.sh.ring_bells_all();
        self.sh.wake_space();
        if state & DEAD != 0 || self.sh.failure.get().is_some() {
            return Err(self.sh.fail_error(DEAD));
        }
        Ok(())
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// The future of [`Journal::wait`].
#[derive(Debug)]
#[must_use = "a wait does nothing unless awaited"]
pub struct Wait<'a> {
    sh: &'a Shared,
    lsn: u64,
    level: Level,
}

impl Future for Wait<'_> {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.sh.poll_wait(self.lsn, self.level, cx)
    }
}

/// The LSNs of a batch of `records` whose first is at `first`.
fn batch_lsns(first: u64, records: &[&[u8]]) -> Vec<Lsn> {
    let mut at = first;
    records
        .iter()
        .map(|r| {
            let lsn = Lsn(at);
            at += record_span(r.len());
            lsn
        })
        .collect()
}

/// The first state of the journal's shared part, at the end recovery found.
fn first_shared(storage: &Arc<dyn Storage>, options: &Options, rec: &Recovered) -> Arc<Shared> {
    let end = rec.end;
    Arc::new(Shared {
        reserve: Padded(AtomicU64::new(end)),
        released: Padded(AtomicU64::new(end)),
        sleeping: Padded(AtomicBool::new(false)),
        accepted: Padded(AtomicU64::new(end)),
        written: AtomicU64::new(end),
        durable: AtomicU64::new(end),
        durable_request: AtomicU64::new(0),
        ring: Ring::new(options.buffer_bytes),
        max_record: options.max_record_bytes,
        read_limit: rec.read_limit,
        recycle_segments: options.recycle_segments,
        failure: OnceLock::new(),
        space: Mutex::new(Vec::new()),
        space_waiting: AtomicUsize::new(0),
        waiters: Mutex::new(Vec::new()),
        waiting: AtomicUsize::new(0),
        written_bell: Bell::default(),
        durable_bell: Bell::default(),
        flusher: OnceLock::new(),
        stats: Counters::new(),
        storage: storage.clone(),
        geo: rec.geo,
        meta: Mutex::new(Meta {
            checkpoint: rec.checkpoint,
        }),
        first_seq: Mutex::new(rec.first_seq),
        finished: AtomicBool::new(false),
    })
}

/// The flusher's first state: its stage holds the block recovery ended in,
/// up to the end; its preallocator continues from the last segment.
fn first_flusher(
    sh: &Arc<Shared>,
    storage: &Arc<dyn Storage>,
    options: &Options,
    rec: &Recovered,
) -> Result<Flusher> {
    let bs = storage.block_size() as u64;
    let end = rec.end;
    let stage_cap = align_up(
        (STAGE_BYTES as u64)
            .max(2 * record_span(options.max_record_bytes) + 4 * bs + CLEAN_END_MAX),
        bs,
    ) as usize;
    debug_assert_eq!(
        rec.tail.len() as u64,
        end - align_down(end, bs),
        "the stage starts with the bytes of the end's block before the end"
    );
    let mut stage = AlignedBuf::new(stage_cap, storage.buffer_align())?;
    stage[..rec.tail.len()].copy_from_slice(&rec.tail);
    Ok(Flusher {
        sh: sh.clone(),
        stage: Some(stage),
        stage_pos: align_down(end, bs),
        stage_len: rec.tail.len(),
        filled: end,
        submitted: end,
        bs,
        inflight: None,
        ckpt_durable: rec.checkpoint.durable_lsn,
        ckpt_reserved: rec.checkpoint.reserved_lsn,
        ckpt_at: Instant::now(),
        n_collected: 0,
        n_submitted: 0,
        n_written: 0,
        n_durable: 0,
        last_commit_records: 0,
        last_woken: 0,
        polling: false,
        write_ewma_ns: 0,
        own_ring: storage.completes_on_own_ring(),
        spin_waiters: spin_waiters(options.spin_committers),
        spare: Some(AlignedBuf::new(stage_cap, storage.buffer_align())?),
        dirty: BTreeSet::new(),
        prealloc: Arc::new(Prealloc {
            st: Mutex::new(PreallocState {
                want: rec.last_seq.max(rec.geo.segment_of(end) + 1),
                created: rec.last_seq,
                error: None,
                stop: false,
                recycled: Default::default(),
                ckpt_want: 0,
                ckpt_done: 0,
            }),
            cv: std::sync::Condvar::new(),
        }),
    })
}

/// Removes a journal directory that a failed [`Journal::open`] created:
/// the files a journal makes (the lock, a checkpoint, segments of a journal
/// never used, temporary files), then the directory itself only if that
/// left it empty, so nothing another process put there meanwhile is lost.
fn remove_made(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let ours = name == "LOCK"
                || name == "checkpoint"
                || name == ".probe.tmp"
                || name.ends_with(".seg")
                || name.ends_with(".free")
                || name.ends_with(".seg.tmp");
            if ours {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
