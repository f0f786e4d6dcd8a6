//! Options of a journal, its LSNs and durability levels.

use overlapped::Engine;

use crate::error::{Error, Result};
use crate::format::record_span;
use crate::recovery::RecoveryMode;
use crate::storage::SyncMethod;

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
/// Default number of retired segment files kept for reuse.
pub const DEFAULT_RECYCLE_SEGMENTS: usize = 2;
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
    /// How many retired segment files (see [`crate::Journal::truncate_before`])
    /// to keep and reuse for new segments instead of creating fresh ones
    /// (default [`DEFAULT_RECYCLE_SEGMENTS`]; 0 removes them). Writes into a
    /// reused file land in space that was written before, which on ext4
    /// avoids converting unwritten extents (a file-system journal commit per
    /// O_DSYNC write). Each kept file takes `segment_size` bytes of disk.
    pub recycle_segments: usize,
    /// While a batch write is in flight and the last group commit woke more
    /// than this many committers (threads blocked for `Durable`, and
    /// pending [`wait`](crate::Journal::wait) futures), the flusher looks
    /// for the write's completion without sleeping (yielding the CPU
    /// between looks, for at most twice the recent write latency, 20 µs to
    /// 1 ms), so that it runs the moment the write completes instead of
    /// waiting behind the woken committers in a run queue. `None` (the
    /// default): 16 per CPU. `Some(0)` polls whenever the last group
    /// commit woke anyone; `Some(u64::MAX)` never polls. A write completing
    /// while nobody waits for `Durable` resets the count. Only on io_uring;
    /// how many writes were found complete by polling is in
    /// [`JournalStats::polled_writes`](crate::JournalStats::polled_writes).
    pub spin_committers: Option<u64>,
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
            recycle_segments: DEFAULT_RECYCLE_SEGMENTS,
            spin_committers: None,
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
        recycle_segments: usize,
        spin_committers: Option<u64>,
    }
    /// Sets [`Options::engine`].
    pub fn engine(mut self, e: Engine) -> Self {
        self.engine = Some(e);
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.segment_size < 8192 || self.segment_size % 4096 != 0 || self.segment_size > 1 << 40
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
        if self.recycle_segments > MAX_RECYCLE_SEGMENTS {
            return Err(Error::InvalidInput(format!(
                "recycle_segments {} must be at most {MAX_RECYCLE_SEGMENTS}",
                self.recycle_segments
            )));
        }
        Ok(())
    }
}

/// Most retired segment files a journal keeps for reuse.
pub const MAX_RECYCLE_SEGMENTS: usize = 64;
