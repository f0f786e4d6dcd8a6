//! # overlapped-journal
//!
//! A write-ahead log on the [`overlapped`] engine: callers hand over records
//! and carry on; one background flusher writes them, batched, into
//! preallocated segment files (with direct I/O where the file system allows),
//! and syncs once for every waiter a flush covers (group commit).
//!
//! ```
//! use overlapped_journal::{Journal, Level, Options};
//! let dir = tempfile::tempdir()?;
//! let opts = Options::default().segment_size(1 << 20);
//! let journal = Journal::open(dir.path(), opts.clone())?;
//! let a = journal.append(b"first")?;          // returns at once
//! let b = journal.append(b"second")?;
//! journal.wait_blocking(b, Level::Durable)?;  // both are on stable storage
//! drop(journal);
//! let journal = Journal::open(dir.path(), opts)?; // recovery
//! let back: Vec<_> = journal.read_from(a)?.map(|r| r.unwrap().data).collect();
//! assert_eq!(back, [b"first".to_vec(), b"second".to_vec()]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Appending
//!
//! [`Journal::append`] reserves space in a bounded ring buffer with one
//! compare-and-swap on a shared cursor, copies the payload, and publishes
//! the record with one atomic store (its *commit word*). No lock is taken.
//! When the buffer is full, `append` blocks, [`Journal::append_async`]
//! waits asynchronously, and [`Journal::try_append`] returns
//! [`Error::Full`]; all three are counted ([`JournalStats`]).
//!
//! [`Journal::append_batch`] appends several records atomically: one
//! reservation for all of them, the records published last to first, so
//! that the flusher (which takes records in order) sees the batch only when
//! all of it is there, and takes it whole. No write and no watermark ends
//! inside a batch, and after a crash recovery keeps a batch only if its
//! last record is there (each record's header says whether it continues a
//! batch and whether more of it follow). A batch takes at most the log
//! space of one largest record.
//!
//! ## Reading
//!
//! [`Journal::read_from`] iterates from a record's LSN up to the `Written`
//! watermark; [`Record::next_lsn`] is where the record after one starts, to
//! resume after the last record processed. [`Journal::tail`] follows the
//! log as records reach `Written` or `Durable`, blocking
//! ([`Iterator`]) or asynchronously ([`Tail::next_async`]), and ends when
//! the journal closes. An LSN where no record starts is refused
//! ([`Error::InvalidInput`]), not reported as corruption.
//!
//! ## Durability levels and group commit
//!
//! [`Level::Accepted`] (in memory), [`Level::Written`] (handed to the OS)
//! and [`Level::Durable`] (synced). [`Journal::wait`] (a future) and
//! [`Journal::wait_blocking`] resolve when every record up to the LSN has
//! reached the level: acknowledgement is by contiguous watermark. A wait
//! for `Accepted` needs no turn of the flusher: it follows the published
//! records in the ring from the accepted watermark itself (a record is
//! accepted when the `append` that returned its LSN has returned).
//!
//! The flusher takes every record published so far (no fixed sleep: what
//! accumulated while the previous write or sync ran is the next batch),
//! copies it into one of two aligned stage buffers (sealing each header with
//! its CRC), and writes it on the engine; while that write is in flight it
//! collects the next batch into the other buffer. When anyone waits for
//! `Durable`, it issues one `fdatasync` per segment touched, covering only
//! writes that have completed; one sync serves every waiter below the new
//! watermark. Where direct I/O works, the default ([`SyncMethod::Auto`])
//! opens the segments O_DSYNC instead: every write is durable on completion
//! (one device round trip per batch, overlapped with collecting the next),
//! which measured faster than write + `fdatasync` on the development
//! machine; buffered storage keeps `fdatasync`.
//!
//! A second background thread creates the next segment file (preallocated
//! to its full size, header written, file and directory fsynced) as soon as
//! the flusher starts writing the current one, so the flusher never waits
//! for a file to be created and never extends one. Where a retired segment
//! file is kept ([`Options::recycle_segments`], see *Recycled segments*
//! below), it is reused instead: writes then land in space that was
//! written before, which on ext4 spares each O_DSYNC write the conversion
//! of an unwritten extent (a file-system journal commit).
//!
//! [`Journal::wait_blocking`] for `Written` or `Durable` puts the calling
//! thread to sleep at once (a write or a device flush lies ahead) on a
//! futex word of that level; when the watermark moves, the flusher wakes
//! four sleepers and goes back to work, and each woken sleeper wakes four
//! more before it looks at its own record, so the wake-ups spread over the
//! CPUs instead of keeping the flusher in a system call (waking 64
//! committers at once took the flusher about 200 µs per group commit,
//! during which it could not start the next write). A sleeper whose record
//! the move did not cover sleeps again
//! ([`JournalStats::spurious_wakeups`]); a lone committer is woken exactly
//! once per commit. No sleep lasts longer than 10 ms before the sleeper
//! checks again, whatever happens to the wake-ups.
//!
//! One batch write is in flight at a time, by design: consecutive batches
//! share a block (records are packed, and an LSN is a byte position fixed
//! when the record is appended), and two writes of the same block in
//! flight at once may reach the device in either order, so the older one
//! could overwrite records the newer one acknowledged. The flusher collects
//! the next batch while a write runs, so a batch covers everything
//! appended meanwhile. (A build allowing two writes in flight, unsafe for
//! the reason above and measured only as an upper bound, gained nothing on
//! the development machine: BENCHMARKS.md.)
//!
//! On io_uring the flusher runs inside the engine's [`overlapped::block_on`]:
//! its writes go on its own thread's ring and the kernel wakes it when one
//! completes (no engine thread hands the completion over); on the fallback
//! drivers it parks, and the driver's reaper wakes it. While a write is
//! in flight and the last group commit woke more committers than
//! [`Options::spin_committers`] (default 16 per CPU), it does not sleep
//! but looks at its ring, yielding the CPU between looks, for up to twice
//! the recent write latency: woken from the ring it would wait in a run
//! queue behind the committers it just woke before it could start the next
//! write. On 2 vCPUs with 64 committers this took group commit from a
//! median 132k to 169k commits/s (BENCHMARKS.md); with few committers it
//! would only take CPU from them, so the flusher sleeps
//! ([`JournalStats::polled_writes`] counts the writes it found complete
//! by polling).
//!
//! [`JournalStats`] reports the batch sizes: records per write, per group
//! commit (`sync_records`), the group-commit size each record rode in
//! (`commit_batch_records`) and the waiters each group commit woke.
//!
//! ## On Windows
//!
//! The same format, rules and guarantees, on the engine's I/O completion
//! port driver (or its pool), with Windows' calls in place of Linux's:
//!
//! - Segment files are opened with `FILE_FLAG_NO_BUFFERING` where the file
//!   system accepts it (direct I/O) and, for write-through
//!   ([`SyncMethod::Dsync`], the default where direct I/O works), with
//!   `FILE_FLAG_WRITE_THROUGH`; a group commit's sync is
//!   `FlushFileBuffers` (data and metadata: Windows has no data-only
//!   form).
//! - Preallocation: [`overlapped::File::allocate`] reserves the segment's
//!   space (`FileAllocationInformation`) and sets its size. A file system
//!   that reserves nothing (Wine's, FAT) gets the size alone
//!   (`SetEndOfFile`): counted in [`JournalStats::segments_unreserved`] and
//!   said in the storage's note; writes then allocate as they go and may
//!   find the disk full (fail-stop, as ever). On NTFS the space past a
//!   file's valid data length reads as zeros, and a write past it moves it
//!   (NTFS runs such a write synchronously, and under write-through
//!   commits the new length too): the cost ext4 pays to convert unwritten
//!   extents, which recycled segments avoid here as there.
//!   `SetFileValidData` is not used, even with `SE_MANAGE_VOLUME_NAME`:
//!   it would make the disk's earlier bytes the file's, and recovery reads
//!   nonzero bytes in never-written space after the log's end as damage.
//! - Directory sync: Windows documents none. NTFS logs every create,
//!   rename and delete in its metadata journal, and `FlushFileBuffers` on
//!   a directory handle (`FILE_FLAG_BACKUP_SEMANTICS`, write access)
//!   flushes it: that is done (it works under Wine too). A file system that
//!   refuses it leaves the order of its metadata to itself.
//! - `DIR/LOCK` carries a `LockFileEx` lock on its first byte (exclusive
//!   to write, shared to read), released when its handle is closed or the
//!   process ends; a second open in the same process is told so as on
//!   Linux.
//! - Committers sleep with `WaitOnAddress` and are woken with
//!   `WakeByAddressSingle` (the tree of wake-ups) or `WakeByAddressAll`;
//!   Windows promises no order among sleepers, which the sweep and the
//!   10 ms limit do not need.
//! - Free space before a segment is made: `GetDiskFreeSpaceExW`. Running
//!   out is `ERROR_DISK_FULL` where Linux says ENOSPC; [`fault`]'s EIO is
//!   `ERROR_IO_DEVICE`.
//! - Recovery cannot skip preallocated space (no `SEEK_DATA` for a file
//!   that is not sparse): it reads it, as zeros. Zeroing a range writes
//!   zeros.
//! - There is no `fork`: [`Error::Forked`] does not occur.
//!
//! ## Fail-stop
//!
//! An error on a write or a sync (EIO, ENOSPC, a short write) poisons the
//! journal: every pending and later call returns [`Error::Poisoned`]; a
//! failed sync is never retried (after a failed `fsync` the kernel may have
//! dropped the dirty pages, so a retry that succeeds proves nothing).
//! Reopen the journal to recover what reached the disk.
//!
//! In a process forked from the one that opened the journal, its
//! flusher is not there (it is a thread of the parent): every append and
//! wait of the child fails at once with [`Error::Forked`], and closing or
//! dropping the journal there returns at once, touching nothing of the
//! parent's. The journal keeps the contract of every front end of overlap,
//! `docs/acknowledged-bytes.md` in the repository (a record is
//! acknowledged when a wait for it at [`Level::Durable`] returns `Ok`).
//!
//! ## On-disk format
//!
//! The log is one stream of bytes; a record's **LSN is its byte position**
//! in that stream. The stream is cut into segment files `DIR/<seq>.seg`
//! (`seq` as 16 hex digits) of a fixed size (default 64 MiB), each starting
//! with a header block of `header_size` bytes (4096, or the device block if
//! larger); segment `s` holds stream positions
//! `[s·D, (s+1)·D)` with `D = segment_size − header_size`. Records may span
//! block and segment boundaries.
//!
//! Segment header (little endian): `"OVLJSEG1"`, version `u32` (3; the
//! checkpoint slots carry it too; version 1, without the LSN field's flag
//! bits below, and version 2, without the checkpoint's floor, are still
//! read, and builds that know only an older version refuse a newer one
//! rather than misread fillers, batches or the checkpoint),
//! `header_size u32`, `segment_size u64`, `seq u64`, journal `uuid u64`,
//! CRC32C of the preceding 40 bytes `u32`.
//!
//! Record, at a position that is a multiple of 8, padded with zeros to the
//! next multiple of 8:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | `total_len u32`: header + payload bytes (24 ..= 24 + max record) |
//! | 4..8 | `crc u32`: CRC32C of bytes 0..4, then 8..24, then the payload |
//! | 8..16 | `lsn u64`: bits 0..61 must equal the record's position; bit 63 marks a filler, bit 62 "more records of this batch follow", bit 61 "continues a batch" |
//! | 16..24 | `segment identity u64`: a hash of the journal's uuid and the number of the segment the record starts in |
//! | 24.. | payload |
//!
//! A *filler* ([`format::FLAG_FILLER`]) is a record of 8 payload bytes, a
//! length `L` (at least 32), that recovery writes over the start of a stretch of the log
//! it drops (see *Recovery*), or, for a stretch of 24 bytes (a damaged
//! empty record), the header alone, `L` = 24 (a build older than that form
//! reports such a filler as damage rather than misreading it); readers skip `[lsn, lsn + L)` and go on after
//! it, so the LSNs in it are never used again.
//!
//! A record is valid only if its length is in range, its CRC matches, its
//! LSN equals its position and its identity is the one its segment expects:
//! a stale record left in reused or preallocated space, or copied from
//! another journal, is never taken for a new one. The log ends at 8 zero
//! bytes where a header would be, provided every byte from there to
//! [`format::clean_end`] (the end of the next 4 KiB block after the one
//! holding the position) is zero too; nonzero bytes there are damage
//! (preallocated space reads as zeros).
//!
//! ### Recycled segments
//!
//! [`Journal::truncate_before`] keeps up to [`Options::recycle_segments`]
//! retired segment files (default 2), renamed `DIR/<old seq>.free`, and
//! removes the others; recovery never reads `.free` files. A new segment
//! is made from one of them when there is one: its header and the 8 KiB
//! after it are rewritten (the new segment's first position is a clean
//! end), it is synced and renamed to `<seq>.seg`. The rest of the file
//! keeps the records of its earlier use. The rule that keeps them out of
//! the log: a record is valid only where its LSN equals its position and
//! its identity matches the segment it starts in, and an old record's LSN
//! is that of its old position (`(new − old)·D` lower), so it never
//! passes; and every write into a reused segment is followed by zeros up
//! to [`format::clean_end`] of the position it ends at (overwritten by the
//! next write), so the end of the log is a clean end there as in fresh
//! space. A crash that loses those zeros (a power loss that persisted a
//! write's sectors out of order) leaves old bytes after the last record:
//! damage past the durable point followed by nothing valid, which the
//! default recovery cuts as a torn tail (losing no record) and `Strict`
//! reports. The search for valid records after the end reads the whole
//! of a reused segment (no unwritten space to skip), at most the tail's
//! segment and the one made ahead.
//!
//! `DIR/checkpoint` holds two 512-byte slots (written alternately, the valid
//! one with the higher generation wins): geometry, uuid, `start_lsn` (the
//! first record not retired), `durable_lsn`, a lower bound of what was
//! acknowledged durable, the largest record size ever allowed (the
//! reader's length limit), and (version 3) `reserved_lsn`, the *floor*:
//! an upper bound of what was acknowledged durable (every acknowledged
//! record ends at or below it; a version-1 or -2 slot reads with its floor
//! at its durable point). Slot layout (little endian): `"OVLJCKP1"`,
//! version `u32`, `header_size u32`, `segment_size u64`, `uuid u64`,
//! `generation u64`, `start_lsn u64`, `durable_lsn u64`,
//! `max_record_bytes u32`, then (version 3) `reserved_lsn u64` and the
//! CRC32C of the preceding 68 bytes `u32` (versions 1 and 2: the CRC of
//! the preceding 60 bytes, at 60). Before the flusher acknowledges records
//! ending past the floor, it writes the checkpoint, synced, with the floor
//! at the start of the segment after the next (one to two segments of
//! LSNs past them) (one extra synced write per segment
//! of records, not one per commit); a clean close lowers it to the durable
//! point (nothing past it was acknowledged). It is rewritten after group commits: under load
//! at most once a millisecond, by the preallocator's thread so that the
//! flusher does not wait for it; by the flusher at once when it goes idle;
//! synced on close and on truncation (writes of it never overlap). Because `durable_lsn` is written only after the
//! sync it reports has succeeded, it is a true lower bound even when its
//! own write is lost; it may lag the last group commit by that millisecond,
//! and after a power loss by more (its write is not synced on its own). `DIR/LOCK` carries the `flock`.
//!
//! ## Recovery: torn writes and corruption
//!
//! [`Journal::open`] reads the checkpoint, checks every segment header,
//! and scans records from `start_lsn` to the first position that is not a
//! valid record (the *end*). What happens there follows one rule:
//!
//! > **Recovery never cuts a record that may have been acknowledged.** It
//! > cuts only a *torn tail*: damage after the checkpoint's durable point
//! > with no valid record of this journal anywhere after it. Everything
//! > else is an error that names the damage, and only an explicit salvage
//! > (`overlap journal repair`, [`repair`], [`RecoveryMode::Salvage`])
//! > drops it, saving and listing what it drops. **No LSN is handed out
//! > twice**: what is dropped is covered by a filler, and new records
//! > continue after it.
//!
//! Why: a write that a power loss tore can only damage the last writes in
//! flight, so its damage is followed by nothing valid (zeros of
//! preallocated space, or stale bytes of another journal or position, which
//! the LSN and segment identity in every header reject). Damage *followed
//! by valid records* is what media corruption of acknowledged data looks
//! like ([`Damage::RecordsFollow`]); a power loss that persisted a write's
//! sectors out of order can look the same, and the two cannot be told
//! apart from the bytes, so recovery stops instead of guessing. Damage
//! before the durable point is corruption of acknowledged records.
//! The checkpoint's durable point is a lower bound that lags the last
//! acknowledgement (it is rewritten at most once a millisecond and not
//! synced on its own), which is why the durable point alone cannot decide.
//! The choice follows what others do: PostgreSQL ends replay at the first
//! invalid record (silently treating it as the end of WAL); RocksDB's WAL
//! recovery modes range from `kAbsoluteConsistency` (any damage is an
//! error: our [`RecoveryMode::Strict`]) through
//! `kTolerateCorruptedTailRecords` (our default) and `kPointInTimeRecovery`
//! (stop at the first damage, and report corruption when later data
//! exists: the check that makes our default refuse) to
//! `kSkipAnyCorruptedRecords` (our [`RecoveryMode::Salvage`]: it skips
//! each damaged stretch and resynchronises on the next valid record, as
//! PostgreSQL's `pg_waldump` finds the first valid record after a position
//! that is not a record's start); TigerBeetle tells a
//! torn write from corruption by a second, redundant record of what was
//! written, and treats a damaged entry that is confirmed as corruption
//! (our checkpoint is that second record, for the prefix it covers).
//!
//! | found at the end | `Strict` | `TolerateTornTail` (default) | `Salvage` (`repair`) |
//! |---|---|---|---|
//! | zeros, nothing valid after | clean end | clean end | clean end |
//! | damage before the durable point | error | error | dropped, reported (`cut_acknowledged`) |
//! | damage after it, nothing valid after | error | cut, reported | cut, reported |
//! | damage or zeros with valid records after | error | error ([`Damage::RecordsFollow`]) | the stretch up to the next valid record dropped, every valid record kept |
//! | a batch whose last record is missing | error | cut with the tail | dropped with its valid records (`dropped_records`) |
//!
//! The search for valid records after the end covers every segment file
//! that exists, skipping space that was never written ([`Storage::data_after`]:
//! `SEEK_DATA`), so it costs little on preallocated segments. What it costs
//! in availability: after a power loss that persisted a write's sectors
//! out of order (seen in the simulated power-loss test in about one
//! recovery in ten), the default refuses to open until `repair` is run,
//! although only unacknowledged records are then cut.
//!
//! Every cut is reported: [`RecoveryReport::truncated_at`] and `damage`,
//! [`JournalStats::recovery_cuts`], and the CLI prints it on stderr.
//!
//! A cut tail's LSNs are not handed out again: the dropped stretch reaches
//! past the last non-zero byte after the damage (space never written is
//! skipped), and new records continue there ([`RecoveryReport::end_lsn`]),
//! so a record that was on disk (even torn, and perhaps read at `Written`
//! before the crash) never shares its LSN with a new one. In a reused
//! segment file, whose old bytes cannot be told from bytes this journal
//! wrote, that is the end of the segment's data: up to a segment's LSNs
//! (and the rest of its space, until it is retired) are skipped. What this
//! cannot cover: a record that never reached the disk at all (accepted and
//! lost with the process, or written to the page cache and lost entirely
//! in a power loss before any of it was persisted) leaves no trace, and
//! its LSN may be handed out again; a reader that must never see a record
//! that is later lost reads at `Durable`.
//!
//! When the journal is opened for writing, what is dropped is then covered
//! by fillers and the tail is repaired: the block holding the end is
//! rewritten with zeros after the end, the rest of the segment is zeroed,
//! later segments are removed, and everything is synced, so no stale byte
//! can ever be read as a record after a later crash. [`verify`] reports
//! what recovery would do without changing anything; while another process
//! appends, it reads only the durable prefix the checkpoint records
//! ([`RecoveryReport::live`]).
//!
//! ## Repair
//!
//! [`repair`] (`overlap journal repair`) salvages: it drops each damaged
//! stretch and keeps every valid record after it. It makes the whole plan
//! first, from the bytes alone: the stretches it drops (each to be covered
//! by a filler), the segment headers it rewrites (bad ones in the log's
//! range; the records in them are checked one by one anyway: LSN,
//! identity, CRC), the segment files it removes (after the end's segment,
//! those with a bad header or any data after it; before the start's,
//! those with a bad header), and where new records continue
//! ([`RecoveryReport::end_lsn`], [`RecoveryReport::rewritten_headers`],
//! [`RecoveryReport::removed_segments`]). A dry run reports exactly that
//! plan and changes nothing; a plan that changes nothing
//! ([`RecoveryReport::changes_anything`]) is not applied at all.
//!
//! The plan is applied in steps, each leaving a journal that a repair
//! takes up again (and that opens, once the fillers are written): every
//! byte the later steps drop, rewrite or remove is saved to a new
//! `DIR/dropped-<N>.bin` and synced (a file an earlier, interrupted repair
//! left is never overwritten); bad headers are rewritten; fillers are
//! written; what was written, and the records from the old durable point
//! to the end, are synced; the segment files are removed; the checkpoint
//! is written last. Nothing is overwritten or removed before it is saved.
//!
//! **The checkpoint's durable point is never lowered, and no LSN at or
//! below it is handed out again.** The checkpoint is a file of its own,
//! which damage to segments does not reach. When the records before it
//! are gone (a segment file cut short, blocks that read back as zeros, a
//! missing segment), repair drops the stretch from the last valid record
//! up to the durable point, reports it as acknowledged records lost
//! ([`RecoveryReport::cut_acknowledged`]), and new records continue after
//! it. **Nor is the highest LSN ever acknowledged handed out again:** the
//! durable point may lag the last acknowledgement, so when the log ends
//! below the checkpoint's floor ([`format::Checkpoint::reserved_lsn`],
//! written and synced before any acknowledgement it covers), repair drops
//! the stretch from the end up to the floor too (records acknowledged
//! there may have been lost to damage that reads as a clean end), and new
//! records continue at or above it. After a crash this skips at most two
//! segments of LSNs, to a segment's start (the segment is made by the
//! preallocator, as when space ran out); after a clean close, none. An open (without
//! repair) continues at the valid end, as after any crash: damage there
//! reads as records never written. The work is bounded by the files that exist: a stretch across
//! missing segments (up to a segment number of any size) costs a filler,
//! not a byte per LSN.
//!
//! The file of dropped bytes (little endian): `"OVLJDROP"`, version `u32`
//! (2), `u32` 0, the journal's `uuid u64`; then entries, each followed by
//! its pieces. A dropped stretch: `"STRETCH2"`, `from u64`, `to u64`,
//! `damage_len u32`, `records u32` (valid records of an incomplete batch
//! in it), the damage's description (UTF-8). A segment's bytes:
//! `"SEGMENT2"`, `seq u64`, `fate u32` (1: its header block is rewritten,
//! 2: the file is removed), `u32` 0. A piece: `len u32` (1 to 1 MiB; 0
//! ends the entry's pieces), `seq u64`, `offset u64` (in the segment
//! file), then `len` bytes as they were there. Holes (space never written,
//! which reads as zeros) and missing segments have no pieces.
//!
//! ## Running out of space
//!
//! A segment is created only if the file system has room for all of it
//! (checked with `statvfs` first); a failed preallocation removes its
//! temporary file, and a new journal's settings (the checkpoint) are
//! written only once its first segment exists. A journal that ran out of
//! space stops (fail-stop) and opens again, and appends again, once space
//! is freed.
//!
//! The last partial block is rewritten (with identical leading bytes) by
//! the next flush; this relies on 512-byte sector writes being atomic, as
//! every log that rewrites its tail block does.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod error;
pub mod fault;
pub mod format;
mod journal;
mod recovery;
mod ring;
mod stats;
mod storage;

use std::path::Path;
use std::sync::Arc;

pub use error::{Damage, Error, Result};
pub use journal::{
    Journal, Level, Lsn, Options, Record, RecordIter, Tail, Wait, DEFAULT_BUFFER_BYTES,
    DEFAULT_MAX_RECORD_BYTES, DEFAULT_RECYCLE_SEGMENTS, DEFAULT_SEGMENT_SIZE, MAX_RECORD_LIMIT,
};
pub use recovery::{DroppedStretch, RecoveryMode, RecoveryReport, MAX_LISTED};
pub use stats::{JournalStats, Summary};
pub use storage::{FsStorage, Storage, SyncMethod, WriteFuture};

/// Reports what recovery of the journal in `dir` would do, changing
/// nothing: `Ok` with the report, or the error opening would give
/// (e.g. [`Error::Corrupt`]).
pub fn verify(dir: impl AsRef<Path>, options: &Options) -> Result<RecoveryReport> {
    inspect(dir, options).map(|(r, _)| r)
}

/// As [`verify`], and an iterator over the valid records (up to the first
/// damage recovery would drop).
pub fn inspect(dir: impl AsRef<Path>, options: &Options) -> Result<(RecoveryReport, RecordIter)> {
    let engine = match &options.engine {
        Some(e) => e.clone(),
        None => overlapped::Engine::new()?,
    };
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::open_read_only(&engine, dir)?);
    inspect_storage(storage, options)
}

/// [`inspect`] on any storage.
pub fn inspect_storage(
    storage: Arc<dyn Storage>,
    options: &Options,
) -> Result<(RecoveryReport, RecordIter)> {
    let rec = recovery::recover(
        &storage,
        options.recovery,
        options.segment_size,
        options.max_record_bytes,
        false,
        None,
    )?;
    let it = RecordIter::new(
        storage,
        rec.geo,
        rec.read_limit,
        rec.checkpoint.start_lsn,
        rec.read_end,
    );
    Ok((rec.report, it))
}

/// Salvages the journal in `dir` ([`RecoveryMode::Salvage`], whatever
/// `options.recovery` says): every damaged stretch is dropped and every
/// valid record after it kept, and `on_dropped` sees each dropped stretch
/// in log order (all of them; the report lists the first
/// [`MAX_LISTED`]), before anything is changed. Unless `dry_run`, every
/// byte the repair drops, rewrites or removes is first saved to a new
/// `DIR/dropped-<N>.bin` ([`RecoveryReport::dropped_file`]; the plan, its
/// steps and the format are in the crate documentation, "Repair"), then a
/// filler is written over the start of each dropped stretch so that
/// readers skip it, and new records continue after the highest LSN the
/// log holds and after the checkpoint's durable point (a dropped or
/// acknowledged LSN is never handed out again). With `dry_run`, nothing
/// is changed: the report is the plan a repair would apply.
///
/// Never creates a journal; refuses ([`Error::Locked`],
/// [`Error::AlreadyOpen`]) while the journal is open.
pub fn repair(
    dir: impl AsRef<Path>,
    options: &Options,
    dry_run: bool,
    on_dropped: &mut dyn FnMut(&DroppedStretch),
) -> Result<RecoveryReport> {
    let dir = dir.as_ref();
    if !dir.join("checkpoint").is_file() {
        return Err(Error::InvalidInput(format!(
            "{} holds no journal (no checkpoint file)",
            dir.display()
        )));
    }
    let engine = match &options.engine {
        Some(e) => e.clone(),
        None => overlapped::Engine::new()?,
    };
    let storage: Arc<dyn Storage> = if dry_run {
        let s = FsStorage::open_read_only(&engine, dir)?;
        if s.shared_with_writer() {
            return Err(Error::Locked(dir.display().to_string()));
        }
        Arc::new(s)
    } else {
        Arc::new(FsStorage::open(
            &engine,
            dir,
            options.direct_io,
            options.sync,
        )?)
    };
    repair_storage(storage, options, dry_run, on_dropped)
}

/// [`repair`] on any storage (tests inject failures with it); `dry_run`
/// changes nothing. The storage must be opened for writing unless
/// `dry_run`.
pub fn repair_storage(
    storage: Arc<dyn Storage>,
    options: &Options,
    dry_run: bool,
    on_dropped: &mut dyn FnMut(&DroppedStretch),
) -> Result<RecoveryReport> {
    let mut each = |d: &DroppedStretch| -> Result<()> {
        on_dropped(d);
        Ok(())
    };
    recovery::salvage(
        &storage,
        options.max_record_bytes,
        !dry_run,
        Some(&mut each),
    )
}
