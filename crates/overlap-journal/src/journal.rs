//! The journal: appenders, waiters, and the background flusher.

use std::collections::BTreeSet;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use overlap::{block_on, AlignedBuf, Engine};

use crate::error::{Damage, Error, Result};
use crate::format::{
    align_down, align_up, record_span, seal_record, Checkpoint, Geometry, Next, RecordReader,
    CHECKPOINT_SLOT, RECORD_ALIGN, RECORD_HEADER,
};
use crate::recovery::{recover, RecoveryMode, RecoveryReport, StorageSource};
use crate::ring::{Padded, Ring};
use crate::stats::{Counters, JournalStats};
use crate::storage::{FsStorage, Storage, SyncMethod, WriteFuture};

/// A log sequence number: the record's byte position in the log (as in
/// InnoDB and PostgreSQL). LSNs increase with the order of appends; the
/// next record's LSN is the previous one's plus its padded size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
pub struct Lsn(pub u64);

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How far a record has gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Level {
    /// In the journal's memory (the log buffer).
    Accepted,
    /// Handed to the operating system: survives a crash of the process.
    Written,
    /// On stable storage: survives a power loss.
    Durable,
}

impl std::str::FromStr for Level {
    type Err = Error;
    fn from_str(s: &str) -> Result<Level> {
        match s {
            "accepted" => Ok(Level::Accepted),
            "written" => Ok(Level::Written),
            "durable" => Ok(Level::Durable),
            other => Err(Error::InvalidInput(format!(
                "level {other:?}: expected accepted, written or durable"
            ))),
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Level::Accepted => "accepted",
            Level::Written => "written",
            Level::Durable => "durable",
        })
    }
}

/// Default segment size (64 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;
/// Default log buffer size (16 MiB).
pub const DEFAULT_BUFFER_BYTES: usize = 16 << 20;
/// Default record size limit (1 MiB).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;
/// Largest record size limit accepted.
pub const MAX_RECORD_LIMIT: usize = 1 << 30;

/// How to open a journal.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Size of each segment file (default 64 MiB; a multiple of 4 KiB).
    /// Fixed when the journal is created; an existing journal keeps its own.
    pub segment_size: u64,
    /// Log buffer size in bytes (a power of two; default 16 MiB).
    pub buffer_bytes: usize,
    /// Largest record payload (default 1 MiB; the buffer must hold at least
    /// two of the largest).
    pub max_record_bytes: usize,
    /// What recovery does with a damaged tail.
    pub recovery: RecoveryMode,
    /// Use O_DIRECT where the file system supports it (default on).
    pub direct_io: bool,
    /// How writes are made durable (default [`SyncMethod::Auto`]).
    pub sync: SyncMethod,
    /// The engine to run the I/O on (default: a new one).
    pub engine: Option<Engine>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_size: DEFAULT_SEGMENT_SIZE,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            recovery: RecoveryMode::TolerateTornTail,
            direct_io: true,
            sync: SyncMethod::Auto,
            engine: None,
        }
    }
}

macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {$(
        #[doc = concat!("Sets [`Options::", stringify!($field), "`].")]
        pub fn $field(mut self, v: $ty) -> Self {
            self.$field = v;
            self
        }
    )*};
}

impl Options {
    setters! {
        segment_size: u64,
        buffer_bytes: usize,
        max_record_bytes: usize,
        recovery: RecoveryMode,
        direct_io: bool,
        sync: SyncMethod,
    }
    /// Sets [`Options::engine`].
    pub fn engine(mut self, e: Engine) -> Self {
        self.engine = Some(e);
        self
    }

    fn validate(&self) -> Result<()> {
        if self.segment_size < 8192
            || self.segment_size % 4096 != 0
            || self.segment_size > 1 << 40
        {
            return Err(Error::InvalidInput(format!(
                "segment_size {} must be a multiple of 4 KiB between 8 KiB and 1 TiB",
                self.segment_size
            )));
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > MAX_RECORD_LIMIT {
            return Err(Error::InvalidInput(format!(
                "max_record_bytes must be between 1 and {MAX_RECORD_LIMIT}"
            )));
        }
        if !self.buffer_bytes.is_power_of_two()
            || self.buffer_bytes < 4096
            || (self.buffer_bytes as u64) < 2 * record_span(self.max_record_bytes)
        {
            return Err(Error::InvalidInput(format!(
                "buffer_bytes {} must be a power of two of at least 4096 holding two records of max_record_bytes {}",
                self.buffer_bytes, self.max_record_bytes
            )));
        }
        Ok(())
    }
}

const CLOSED: u64 = 1 << 63;
const DEAD: u64 = 1 << 62;
const FLAGS: u64 = CLOSED | DEAD;
/// Most bytes the flusher stages (and writes) at once.
const STAGE_BYTES: usize = 4 << 20;

struct Waiter {
    lsn: u64,
    level: Level,
    waker: Waker,
}

struct Meta {
    checkpoint: Checkpoint,
    first_seq: u64,
}

struct Shared {
    reserve: Padded<AtomicU64>,
    released: Padded<AtomicU64>,
    sleeping: Padded<AtomicBool>,
    accepted: Padded<AtomicU64>,
    written: AtomicU64,
    durable: AtomicU64,
    durable_request: AtomicU64,
    ring: Ring,
    max_record: usize,
    /// Length limit when reading back (records of earlier opens may be
    /// larger than this open allows).
    read_limit: usize,
    failure: OnceLock<Arc<io::Error>>,
    space: Mutex<Vec<Waker>>,
    space_waiting: AtomicUsize,
    waiters: Mutex<Vec<Waiter>>,
    waiting: AtomicUsize,
    flusher: OnceLock<Thread>,
    stats: Counters,
    storage: Arc<dyn Storage>,
    geo: Geometry,
    meta: Mutex<Meta>,
}

impl Shared {
    fn fail_error(&self, state: u64) -> Error {
        match self.failure.get() {
            Some(e) => Error::Poisoned(e.clone()),
            None if state & DEAD != 0 => Error::Poisoned(Arc::new(io::Error::other("failed"))),
            None => Error::Closed,
        }
    }

    fn try_reserve(&self, len: usize) -> Result<u64> {
        if len > self.max_record {
            return Err(Error::TooLarge {
                len,
                max: self.max_record,
            });
        }
        let span = record_span(len);
        let cap = self.ring.cap();
        let mut cur = self.reserve.load(SeqCst);
        loop {
            if cur & FLAGS != 0 {
                return Err(self.fail_error(cur));
            }
            let released = self.released.load(SeqCst);
            if cur + span - released > cap {
                return Err(Error::Full);
            }
            match self
                .reserve
                .compare_exchange_weak(cur, cur + span, SeqCst, SeqCst)
            {
                Ok(_) => return Ok(cur),
                Err(v) => cur = v,
            }
        }
    }

    /// Reserves room for `data` and copies it in: one CAS, one copy, one
    /// store. Returns the record's LSN.
    fn try_append(&self, data: &[u8]) -> Result<u64> {
        let pos = self.try_reserve(data.len())?;
        self.fill(pos, data);
        Ok(pos)
    }

    fn fill(&self, pos: u64, data: &[u8]) {
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
        if self.sleeping.load(SeqCst) {
            self.wake_flusher();
        }
    }

    fn wake_flusher(&self) {
        if self.sleeping.swap(false, SeqCst) {
            if let Some(t) = self.flusher.get() {
                t.unpark();
            }
        }
    }

    fn watermark(&self, level: Level) -> u64 {
        match level {
            Level::Accepted => self.accepted.load(SeqCst),
            Level::Written => self.written.load(SeqCst),
            Level::Durable => self.durable.load(SeqCst),
        }
    }

    fn poll_wait(&self, lsn: u64, level: Level, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let check = |this: &Shared| -> Option<Result<()>> {
            let state = this.reserve.load(SeqCst);
            if state & DEAD != 0 {
                return Some(Err(this.fail_error(state)));
            }
            if this.watermark(level) > lsn {
                return Some(Ok(()));
            }
            if lsn >= state & !FLAGS {
                return Some(Err(Error::InvalidInput(format!(
                    "LSN {lsn} has not been appended"
                ))));
            }
            None
        };
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
        }
        self.wake_flusher();
        match check(self) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    fn wake_waiters(&self, all: bool) {
        if self.waiting.load(SeqCst) == 0 {
            return;
        }
        let marks = [
            self.accepted.load(SeqCst),
            self.written.load(SeqCst),
            self.durable.load(SeqCst),
        ];
        let mut ready = Vec::new();
        {
            let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            let mut i = 0;
            while i < w.len() {
                let mark = marks[w[i].level as usize];
                if all || mark > w[i].lsn {
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
    }

    fn wake_space(&self) {
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

    fn poison(&self, e: io::Error) {
        let _ = self.failure.set(Arc::new(e));
        self.reserve.fetch_or(DEAD, SeqCst);
        self.wake_waiters(true);
        self.wake_space();
    }

    fn write_checkpoint(&self, f: impl FnOnce(&mut Checkpoint), sync: bool) -> io::Result<()> {
        let mut meta = self.meta.lock().unwrap_or_else(|p| p.into_inner());
        let mut c = meta.checkpoint;
        f(&mut c);
        c.generation += 1;
        self.storage.write_checkpoint(
            (c.generation % 2) * CHECKPOINT_SLOT as u64,
            &c.encode(),
            sync,
        )?;
        meta.checkpoint = c;
        Ok(())
    }
}

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
            // Only what this call made is in it: the lock, perhaps a
            // checkpoint or a segment of a journal never used.
            let _ = std::fs::remove_dir_all(dir);
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
        )?;
        let bs = storage.block_size() as u64;
        let end = rec.end;
        let shared = Arc::new(Shared {
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
            failure: OnceLock::new(),
            space: Mutex::new(Vec::new()),
            space_waiting: AtomicUsize::new(0),
            waiters: Mutex::new(Vec::new()),
            waiting: AtomicUsize::new(0),
            flusher: OnceLock::new(),
            stats: Counters::new(),
            storage: storage.clone(),
            geo: rec.geo,
            meta: Mutex::new(Meta {
                checkpoint: rec.checkpoint,
                first_seq: rec.first_seq,
            }),
        });
        let stage_cap = align_up(
            (STAGE_BYTES as u64).max(2 * record_span(options.max_record_bytes) + 2 * bs),
            bs,
        ) as usize;
        let mut stage = AlignedBuf::new(stage_cap, storage.buffer_align())?;
        stage[..rec.tail.len()].copy_from_slice(&rec.tail);
        let flusher = Flusher {
            sh: shared.clone(),
            stage: Some(stage),
            stage_pos: align_down(end, bs),
            stage_len: rec.tail.len(),
            filled: end,
            submitted: end,
            bs,
            inflight: None,
            ckpt_durable: rec.checkpoint.durable_lsn,
            ckpt_at: Instant::now(),
            spare: Some(AlignedBuf::new(stage_cap, storage.buffer_align())?),
            dirty: BTreeSet::new(),
            prealloc: Arc::new(Prealloc {
                st: Mutex::new(PreallocState {
                    want: rec.last_seq.max(rec.geo.segment_of(end) + 1),
                    created: rec.last_seq,
                    error: None,
                    stop: false,
                }),
                cv: std::sync::Condvar::new(),
            }),
        };
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
        let _ = shared.flusher.set(handle.thread().clone());
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

    /// As [`append`](Self::append), but waits asynchronously when the
    /// buffer is full.
    pub fn append_async<'a>(&'a self, data: &'a [u8]) -> impl Future<Output = Result<Lsn>> + 'a {
        let mut waited: Option<Instant> = None;
        std::future::poll_fn(move |cx| {
            let sh = &self.sh;
            let mut registered = false;
            loop {
                match sh.try_append(data) {
                    Ok(pos) => {
                        if let Some(t) = waited {
                            let us = t.elapsed().as_micros() as u64;
                            sh.stats.with(|h| {
                                let _ = h.full_wait_us.record(us);
                            });
                        }
                        return Poll::Ready(Ok(Lsn(pos)));
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
    pub fn wait_blocking(&self, lsn: Lsn, level: Level) -> Result<()> {
        block_on(self.wait(lsn, level))
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

    /// Iterates the records from `lsn` (a record's LSN, or the start) up to
    /// the `Written` watermark at the time of the call.
    pub fn read_from(&self, lsn: Lsn) -> Result<RecordIter> {
        let start = self.start_lsn().0;
        if lsn.0 < start {
            return Err(Error::InvalidInput(format!(
                "LSN {} was retired; the log starts at {start}",
                lsn.0
            )));
        }
        let end = self.sh.written.load(SeqCst);
        Ok(RecordIter::new(
            self.sh.storage.clone(),
            self.sh.geo,
            self.sh.read_limit,
            lsn.0,
            end,
        ))
    }

    /// Retires the segments that hold only records before `lsn` (which must
    /// be a record's LSN at or below the durable watermark). Reading before
    /// `lsn` is refused afterwards.
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
        let mut meta = sh.meta.lock().unwrap_or_else(|p| p.into_inner());
        while meta.first_seq < keep {
            sh.storage.remove_segment(meta.first_seq)?;
            meta.first_seq += 1;
            Counters::add(&sh.stats.segments_retired, 1);
        }
        Ok(())
    }

    /// Stops accepting records, writes and syncs everything appended, and
    /// stops the flusher. Returns the journal's error if it failed.
    /// Dropping the journal does the same, ignoring the error.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
        let state = self.sh.reserve.fetch_or(CLOSED, SeqCst);
        let handle = self
            .flusher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = handle {
            h.thread().unpark();
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
        self.sh.wake_waiters(true);
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

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Future for Wait<'_> {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.sh.poll_wait(self.lsn, self.level, cx)
    }
}

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its payload.
    pub data: Vec<u8>,
}

/// Iterator over records (from [`Journal::read_from`] or [`crate::inspect`]).
pub struct RecordIter {
    reader: RecordReader<StorageSource>,
    end: u64,
    done: bool,
}

impl std::fmt::Debug for RecordIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordIter")
            .field("position", &self.reader.position())
            .field("end", &self.end)
            .finish()
    }
}

impl RecordIter {
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        geo: Geometry,
        max_record: usize,
        from: u64,
        end: u64,
    ) -> RecordIter {
        RecordIter {
            reader: RecordReader::new(StorageSource { storage, geo, end }, geo, max_record, from),
            end,
            done: false,
        }
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Result<Record>> {
        if self.done || self.reader.position() >= self.end {
            return None;
        }
        let pos = self.reader.position();
        let res = match self.reader.next_record() {
            Ok(Next::Record(lsn, data)) => {
                return Some(Ok(Record {
                    lsn: Lsn(lsn),
                    data,
                }))
            }
            Ok(Next::End) => Err(Error::Corrupt {
                lsn: pos,
                damage: Damage::Truncated,
            }),
            Ok(Next::Damaged(damage)) => Err(Error::Corrupt { lsn: pos, damage }),
            Err(e) => Err(e.into()),
        };
        self.done = true;
        Some(res)
    }
}

/// Creates (preallocates) segment files ahead of need on its own thread,
/// so that the flusher does not stall on `fallocate` and the fsyncs of a
/// new file and its directory.
struct Prealloc {
    st: Mutex<PreallocState>,
    cv: std::sync::Condvar,
}

struct PreallocState {
    /// Create segments up to here.
    want: u64,
    /// Segments up to here exist.
    created: u64,
    error: Option<io::Error>,
    stop: bool,
}

impl Prealloc {
    fn lock(&self) -> std::sync::MutexGuard<'_, PreallocState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self, sh: &Shared) {
        let geo = sh.geo;
        let mut st = self.lock();
        loop {
            if st.stop || st.error.is_some() {
                return;
            }
            if st.created >= st.want {
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let seq = st.created + 1;
            drop(st);
            let res =
                sh.storage
                    .create_segment(seq, geo.segment_size, &geo.encode_segment_header(seq));
            st = self.lock();
            match res {
                Ok(()) => {
                    st.created = seq;
                    Counters::add(&sh.stats.segments_created, 1);
                }
                Err(e) => st.error = Some(e),
            }
            self.cv.notify_all();
        }
    }

    /// Raises the target to `seq` (under the lock `st` holds).
    fn want(&self, st: &mut PreallocState, seq: u64) {
        if seq > st.want {
            st.want = seq;
            self.cv.notify_all();
        }
    }

    /// Asks for segments up to `seq`, without waiting.
    fn request(&self, seq: u64) {
        self.want(&mut self.lock(), seq);
    }

    /// Waits until segment `seq` exists.
    fn ensure(&self, seq: u64) -> io::Result<()> {
        let mut st = self.lock();
        self.want(&mut st, seq);
        while st.created < seq {
            if let Some(e) = &st.error {
                return Err(crate::error::copy_io(e));
            }
            if st.stop {
                return Err(io::Error::other("journal closing"));
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        Ok(())
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }
}


/// The background flusher: takes published records from the ring, writes
/// them, syncs when someone waits for `Durable`.
struct Flusher {
    sh: Arc<Shared>,
    /// The stage being filled.
    stage: Option<AlignedBuf>,
    /// The other stage buffer, when no write holds it.
    spare: Option<AlignedBuf>,
    /// Log position of `stage[0]` (block aligned).
    stage_pos: u64,
    /// Valid bytes in the stage.
    stage_len: usize,
    /// Records taken from the ring up to here.
    filled: u64,
    /// Handed to the storage up to here.
    submitted: u64,
    bs: u64,
    /// Segments written since the last sync.
    dirty: BTreeSet<u64>,
    /// Segment files are created ahead of need by this.
    prealloc: Arc<Prealloc>,
    /// The write in flight: the next batch is collected meanwhile.
    inflight: Option<InFlight>,
    /// The durable point last written to the checkpoint, and when.
    ckpt_durable: u64,
    ckpt_at: Instant,
}

struct InFlight {
    /// The write; not polled again once `done` is set.
    fut: WriteFuture,
    /// The result, if the write completed when it was submitted.
    done: Option<(io::Result<()>, AlignedBuf)>,
    seq: u64,
    /// Where the written piece ends.
    piece_end: u64,
    /// Whether `piece_end` is a record boundary (else the piece stopped at
    /// a segment's end inside a record).
    boundary: bool,
    started: Instant,
}

impl Flusher {
    fn run(mut self) {
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        if let Err(e) = self.run_inner(&waker) {
            self.sh.poison(e);
        }
    }

    fn run_inner(&mut self, waker: &Waker) -> io::Result<()> {
        loop {
            let mut progress = self.reap(waker, false)?;
            progress |= self.collect();
            progress |= self.submit(waker)?;
            self.sync_if_requested(false)?;
            let state = self.sh.reserve.load(SeqCst);
            if state & DEAD != 0 {
                return Ok(());
            }
            if state & CLOSED != 0 {
                let drained = self.filled == state & !FLAGS
                    && self.inflight.is_none()
                    && self.stage_pos + self.stage_len as u64 <= self.submitted;
                if drained {
                    return self.sync_if_requested(true);
                }
                if self.inflight.is_some() {
                    self.reap(waker, true)?;
                } else if !progress {
                    // An appender reserved space and is still copying.
                    std::thread::yield_now();
                }
                continue;
            }
            if progress {
                continue;
            }
            if self.inflight.is_some() {
                // Nothing more to collect: wait for the write.
                self.reap(waker, true)?;
                continue;
            }
            // Nothing to do: bring the checkpoint up to date, then sleep
            // until an appender or waiter wakes us.
            self.record_durable(true)?;
            self.sh.sleeping.store(true, SeqCst);
            let durable = self.sh.durable.load(SeqCst);
            let work = self.sh.ring.committed(self.filled).is_some()
                || (self.sh.durable_request.load(SeqCst) > durable && self.filled > durable)
                || self.sh.reserve.load(SeqCst) & FLAGS != 0;
            if !work {
                std::thread::park_timeout(Duration::from_millis(100));
            }
            self.sh.sleeping.store(false, SeqCst);
        }
    }

    /// Moves published records from the ring into the stage.
    fn collect(&mut self) -> bool {
        let Some(stage) = self.stage.as_mut() else {
            return false;
        };
        let sh = &*self.sh;
        let room = stage.capacity() as u64 - self.bs;
        let mut p = self.filled;
        while let Some(total) = sh.ring.committed(p) {
            let span = align_up(total as u64, RECORD_ALIGN);
            if p + span - self.stage_pos > room {
                break;
            }
            p += span;
        }
        if p == self.filled {
            return false;
        }
        let off = (self.filled - self.stage_pos) as usize;
        let len = (p - self.filled) as usize;
        if stage.len() < off + len {
            let cap = stage.capacity();
            let _ = stage.set_len(cap);
        }
        // SAFETY: every record in [filled, p) was seen published above and
        // is released only below; zeroing the taken bytes means no byte left
        // in the ring ever looks like a commit word later.
        unsafe {
            sh.ring.read(self.filled, &mut stage[off..off + len]);
            sh.ring.zero(self.filled, len);
        }
        sh.released.store(p, SeqCst);
        sh.wake_space();
        // Seal the headers and zero the padding.
        let mut q = self.filled;
        let (mut n, mut payload) = (0u64, 0u64);
        while q < p {
            let o = (q - self.stage_pos) as usize;
            let mut w = [0u8; 8];
            w.copy_from_slice(&stage[o..o + 8]);
            let total = u64::from_ne_bytes(w) as u32 as usize;
            let span = align_up(total as u64, RECORD_ALIGN) as usize;
            seal_record(&sh.geo, q, &mut stage[o..o + total]);
            stage[o + total..o + span].fill(0);
            payload += (total - RECORD_HEADER) as u64;
            n += 1;
            q += span as u64;
        }
        self.stage_len = off + len;
        let st = &sh.stats;
        Counters::add(&st.appends, n);
        Counters::add(&st.payload_bytes, payload);
        Counters::add(&st.log_bytes, len as u64);
        Counters::add(&st.batches, 1);
        st.with(|h| {
            let _ = h.batch_records.record(n);
            let _ = h.batch_bytes.record(len as u64);
        });
        self.filled = p;
        sh.accepted.store(p, SeqCst);
        sh.wake_waiters(false);
        true
    }

    /// Completes the write in flight, if it is done (or waits for it when
    /// `block`). Returns whether one completed.
    fn reap(&mut self, waker: &Waker, block: bool) -> io::Result<bool> {
        let Some(mut inf) = self.inflight.take() else {
            return Ok(false);
        };
        let (res, buf) = match inf.done.take() {
            Some(r) => r,
            None if block => block_on(inf.fut.as_mut()),
            None => match inf.fut.as_mut().poll(&mut Context::from_waker(waker)) {
                Poll::Ready(r) => r,
                Poll::Pending => {
                    self.inflight = Some(inf);
                    return Ok(false);
                }
            },
        };
        self.spare = Some(buf);
        res?;
        let sh = &*self.sh;
        let us = inf.started.elapsed().as_micros() as u64;
        Counters::add(&sh.stats.writes, 1);
        sh.stats.with(|h| {
            let _ = h.write_us.record(us);
        });
        self.dirty.insert(inf.seq);
        if inf.boundary {
            sh.written.store(inf.piece_end, SeqCst);
            let dsync = sh.storage.writes_are_durable();
            if dsync {
                self.dirty.clear();
                sh.durable.store(inf.piece_end, SeqCst);
            }
            sh.wake_waiters(false);
            if dsync {
                self.record_durable(false)?;
            }
        }
        Ok(true)
    }

    /// Starts writing the staged bytes not yet handed to the storage (up to
    /// the end of their segment), unless a write is in flight. The stage's
    /// last partial block (or the part for the next segment) moves to the
    /// spare buffer, which becomes the stage.
    fn submit(&mut self, waker: &Waker) -> io::Result<bool> {
        let end = self.stage_pos + self.stage_len as u64;
        if self.inflight.is_some() || end <= self.submitted {
            return Ok(false);
        }
        let (Some(mut cur), Some(mut next)) = (self.stage.take(), self.spare.take()) else {
            return Err(io::Error::other("stage buffers lost"));
        };
        let geo = self.sh.geo;
        let seq = geo.segment_of(self.stage_pos);
        let piece_end = end.min(geo.segment_start(seq + 1));
        let wlen = align_up(piece_end - self.stage_pos, self.bs) as usize;
        let cap = cur.capacity();
        let _ = cur.set_len(cap);
        let _ = next.set_len(cap);
        if piece_end == end {
            cur[self.stage_len..wlen].fill(0);
        }
        let keep_from = align_down(piece_end, self.bs);
        let shift = (keep_from - self.stage_pos) as usize;
        next[..self.stage_len - shift].copy_from_slice(&cur[shift..self.stage_len]);
        self.prealloc.ensure(seq)?;
        let _ = cur.set_len(wlen);
        let mut fut = self
            .sh
            .storage
            .write_async(seq, geo.file_offset(self.stage_pos), cur);
        // Poll once: that submits the write to the engine.
        let done = match fut.as_mut().poll(&mut Context::from_waker(waker)) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        };
        self.inflight = Some(InFlight {
            fut,
            done,
            seq,
            piece_end,
            boundary: piece_end == end,
            started: Instant::now(),
        });
        self.stage = Some(next);
        self.stage_len -= shift;
        self.stage_pos = keep_from;
        self.submitted = piece_end;
        // Preallocate the next segment ahead of need.
        self.prealloc.request(seq + 1);
        Ok(true)
    }

    /// Syncs what is written when a waiter asked for `Durable` (or when
    /// closing). A failed sync is never retried: the caller poisons.
    fn sync_if_requested(&mut self, closing: bool) -> io::Result<()> {
        let sh = &*self.sh;
        let written = sh.written.load(SeqCst);
        let durable = sh.durable.load(SeqCst);
        let wanted = closing || sh.durable_request.load(SeqCst) > durable;
        if !wanted || (written <= durable && !closing) {
            return Ok(());
        }
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
        sh.durable.store(written, SeqCst);
        sh.wake_waiters(false);
        self.record_durable(closing)
    }

    /// Records the durable watermark in the checkpoint: a lower bound even
    /// if this write is lost, since it is written only after the sync (or
    /// O_DSYNC write) covering it succeeded. At most once per
    /// `CHECKPOINT_EVERY` under load; at once when `force`d (going idle,
    /// closing, where it is also synced).
    fn record_durable(&mut self, force: bool) -> io::Result<()> {
        let durable = self.sh.durable.load(SeqCst);
        if durable <= self.ckpt_durable || !(force || self.ckpt_at.elapsed() >= CHECKPOINT_EVERY) {
            if force && self.sh.reserve.load(SeqCst) & CLOSED != 0 {
                self.sh.write_checkpoint(|_| {}, true)?;
            }
            return Ok(());
        }
        let closing = self.sh.reserve.load(SeqCst) & CLOSED != 0;
        self.sh
            .write_checkpoint(|c| c.durable_lsn = c.durable_lsn.max(durable), closing)?;
        self.ckpt_durable = durable;
        self.ckpt_at = Instant::now();
        Ok(())
    }
}

/// How often, at most, the flusher rewrites the checkpoint under load.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(1);

/// Wakes the flusher thread, which parks between passes of its loop.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}
