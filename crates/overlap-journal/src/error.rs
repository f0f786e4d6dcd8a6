//! Typed errors of the journal.

use std::io;
use std::sync::Arc;

/// The result type of the journal.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a stretch of the log is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The record's length field is outside `24 ..= 24 + max_record_bytes`.
    BadLength(u64),
    /// The CRC32C over header and payload does not match.
    BadCrc,
    /// The record's LSN is not its position in the log: a stale record from
    /// an earlier use of the space.
    WrongLsn(u64),
    /// The record carries another segment's identity: stale data from an
    /// earlier use of the file, or from another journal.
    WrongSegment(u64),
    /// The record runs past the end of the data that exists (a torn write,
    /// or a missing segment).
    Truncated,
    /// The log ends here with zeros, but non-zero bytes follow within the
    /// next block (a torn or reordered write).
    GarbageAfterEnd,
    /// A segment file's header is not valid.
    BadSegmentHeader(u64),
    /// Segments are missing from the middle of the log.
    MissingSegment(u64),
    /// The checkpoint (durable point) file is damaged or missing.
    BadCheckpoint,
    /// Zeros where a record should start, with valid records after them
    /// (a hole in the log).
    Zeros,
    /// The records of an atomic batch starting here are not all there (or
    /// a batch's later record appears without its first): a batch is kept
    /// whole or not at all.
    IncompleteBatch,
    /// The stretch at the damage is not a valid record, and valid records
    /// of this journal follow it (the first at `next`): not the torn tail of
    /// a log written in order. The damaged record may have been
    /// acknowledged; recovery does not cut it (only `repair` does).
    RecordsFollow {
        /// What is wrong at the damage.
        first: Box<Damage>,
        /// The LSN of the first valid record after it.
        next: u64,
    },
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::BadLength(n) => write!(f, "impossible record length {n}"),
            Damage::BadCrc => f.write_str("CRC32C mismatch"),
            Damage::WrongLsn(l) => write!(f, "stale record (it claims LSN {l})"),
            Damage::WrongSegment(s) => write!(f, "stale record (segment identity {s:#x})"),
            Damage::Truncated => f.write_str("record cut short"),
            Damage::GarbageAfterEnd => f.write_str("non-zero bytes after the end of the log"),
            Damage::BadSegmentHeader(s) => write!(f, "segment {s} has a bad header"),
            Damage::MissingSegment(s) => write!(f, "segment {s} is missing"),
            Damage::BadCheckpoint => f.write_str("the checkpoint file is damaged"),
            Damage::Zeros => f.write_str("zeros where a record should start"),
            Damage::IncompleteBatch => {
                f.write_str("an atomic batch whose records are not all there")
            }
            Damage::RecordsFollow { first, next } => write!(
                f,
                "{first}, yet valid records follow (the first at LSN {next}): \
                 acknowledged records may be damaged (media corruption) or a power \
                 loss may have torn a write out of order; recovery cannot tell which \
                 and cuts nothing (`overlap journal repair` drops the damaged stretch, keeps \
                 the valid records after it, and saves and lists what it drops)"
            ),
        }
    }
}

/// Everything that can go wrong in the journal.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error (from the storage, during open or reading). Its text is
    /// in the message; it is not repeated as a `source` (which would print
    /// it twice in a chain of causes).
    #[error("{0}")]
    Io(Arc<io::Error>),
    /// The journal stopped after an I/O error while writing or syncing
    /// (fail-stop): nothing more is written or acknowledged. Reopen the
    /// journal to recover what is on disk.
    #[error("the journal failed and stopped: {0}")]
    Poisoned(Arc<io::Error>),
    /// `try_append` found the log buffer full.
    #[error("the log buffer is full")]
    Full,
    /// The record is larger than `max_record_bytes`.
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The record's length.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// The journal was closed.
    #[error("the journal is closed")]
    Closed,
    /// This process is a `fork` of the one that opened the journal: the
    /// journal's threads and its engine's are the parent's, so the
    /// child's appends and waits fail at once (the parent's go on in the
    /// parent). Dropping it in the child returns at once.
    #[error("the journal was opened by the parent of this forked process; open it anew here once the parent has closed it")]
    Forked,
    /// Another process holds the directory's lock.
    #[error("the journal directory {0} is locked by another process")]
    Locked(String),
    /// This process already has the journal open for writing (one
    /// [`crate::Journal`] per directory: share it, e.g. with an `Arc`).
    /// Also while a [`crate::Tail`] of a closed journal is still alive.
    #[error("the journal directory {0} is already open in this process")]
    AlreadyOpen(String),
    /// The log is corrupt where it must not be: before the durable point, or
    /// anywhere in `Strict` mode, or in its structure.
    #[error("journal corrupt at LSN {lsn}: {damage}")]
    Corrupt {
        /// Where the damage starts.
        lsn: u64,
        /// What is wrong.
        damage: Damage,
    },
    /// An argument is out of range (options, an LSN that is no record).
    #[error("invalid argument: {0}")]
    InvalidInput(String),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

impl From<overlapped::Error> for Error {
    fn from(e: overlapped::Error) -> Error {
        Error::Io(Arc::new(e.into()))
    }
}

impl Error {
    /// The OS error number behind an I/O or poison error (also when the
    /// storage added context to it, e.g. naming the `fallocate` that
    /// failed).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io(e) | Error::Poisoned(e) => os_error(e),
            _ => None,
        }
    }
}

/// An I/O error with a sentence of context ("preallocating segment 3 with
/// fallocate"), keeping the original error (and its OS error number).
/// Displays as `context: error`; it has no `source`, so a chain of causes
/// does not print the error twice.
#[derive(Debug)]
pub(crate) struct Context {
    what: String,
    error: io::Error,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.error)
    }
}

impl std::error::Error for Context {}

/// `error` with `what` in front, of the same kind and OS error number.
pub(crate) fn context(error: io::Error, what: impl Into<String>) -> io::Error {
    io::Error::new(
        error.kind(),
        Context {
            what: what.into(),
            error,
        },
    )
}

/// The OS error number of `e`, looking through [`context`].
pub(crate) fn os_error(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<Context>())
            .and_then(|c| os_error(&c.error))
    })
}

/// A copy of `e` (an `io::Error` is not `Clone`) with its kind, text and OS
/// error number.
pub(crate) fn copy_io(e: &io::Error) -> io::Error {
    if let Some(n) = e.raw_os_error() {
        return io::Error::from_raw_os_error(n);
    }
    if let Some(c) = e.get_ref().and_then(|i| i.downcast_ref::<Context>()) {
        return context(copy_io(&c.error), c.what.clone());
    }
    io::Error::new(e.kind(), e.to_string())
}

/// The OS error number for "no space left on the device": `ENOSPC`, on
/// Windows `ERROR_DISK_FULL`.
#[cfg(not(windows))]
pub(crate) const NO_SPACE: i32 = libc::ENOSPC;
/// The OS error number for "no space left on the device": `ENOSPC`, on
/// Windows `ERROR_DISK_FULL`.
#[cfg(windows)]
pub(crate) const NO_SPACE: i32 = windows_sys::Win32::Foundation::ERROR_DISK_FULL as i32;

/// The OS error number for a device's I/O error: `EIO`, on Windows
/// `ERROR_IO_DEVICE`.
#[cfg(not(windows))]
pub(crate) const IO_ERROR: i32 = libc::EIO;
/// The OS error number for a device's I/O error: `EIO`, on Windows
/// `ERROR_IO_DEVICE`.
#[cfg(windows)]
pub(crate) const IO_ERROR: i32 = windows_sys::Win32::Foundation::ERROR_IO_DEVICE as i32;
