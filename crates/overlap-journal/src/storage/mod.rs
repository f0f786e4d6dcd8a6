//! Where the journal's bytes go: the [`Storage`] trait, and [`FsStorage`],
//! its implementation on the overlap engine.

mod dir;
mod fs_storage;

use std::io;
use std::path::PathBuf;

use overlapped::AlignedBuf;

pub use fs_storage::FsStorage;

/// A write in progress ([`Storage::write_async`]): resolves to the result
/// and the buffer.
pub type WriteFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = (io::Result<()>, AlignedBuf)> + Send>>;

/// The storage a journal writes to: numbered segment files of a fixed size
/// and a small checkpoint file. The journal is written against this trait so
/// that tests can substitute a fault-injecting implementation
/// ([`crate::fault::FaultStorage`]).
///
/// Contract: `write` either writes all of `buf` or fails; a write is not
/// durable until a later `sync` of the same segment succeeds;
/// `create_segment` and `remove_segment` are durable when they return
/// (file and directory are synced). Reading a segment that does not exist
/// returns `Ok(0)`.
pub trait Storage: Send + Sync + 'static {
    /// Writes must start and end on multiples of this (a power of two).
    fn block_size(&self) -> usize;
    /// The address alignment write buffers need.
    fn buffer_align(&self) -> usize {
        self.block_size()
    }
    /// Whether a completed write is already durable (O_DSYNC), so that no
    /// separate sync is needed.
    fn writes_are_durable(&self) -> bool {
        false
    }
    /// Whether a write future polled inside the engine's `block_on` is
    /// submitted on the calling thread's own ring, whose completion wakes
    /// that thread directly and is seen by a look that does not sleep:
    /// true on io_uring. The flusher runs in `block_on` and may poll for
    /// its write only where this holds. The default is false.
    fn completes_on_own_ring(&self) -> bool {
        false
    }
    /// Whether this is a read-only view of a journal that a writer holds
    /// open (its lock was taken): recovery then reads only the durable
    /// prefix the checkpoint records, and judges nothing after it.
    fn shared_with_writer(&self) -> bool {
        false
    }
    /// Whether this process is a `fork` of the one that opened the
    /// storage: its engine's threads (and the journal's) are the
    /// parent's, so nothing may be written or waited for here. The
    /// default is false.
    fn is_forked_copy(&self) -> bool {
        false
    }
    /// A human-readable note on how the storage writes (direct or buffered
    /// and why).
    fn describe(&self) -> String;
    /// How many of the segments created since the storage was opened have
    /// their full size but not their space reserved, because the file
    /// system reserves none (Windows' FAT, Wine): writes into them
    /// allocate as they go, and may find the disk full. The default is 0.
    fn segments_unreserved(&self) -> u64 {
        0
    }
    /// The segments that exist, in ascending order.
    fn list_segments(&self) -> io::Result<Vec<u64>>;
    /// The segments that exist in `[from, to)`, in ascending order,
    /// changing nothing (unlike [`list_segments`](Storage::list_segments),
    /// which may tidy what an interrupted creation left): what
    /// [`crate::Journal::truncate_before`] retires, however far apart the
    /// numbers are. The default filters `list_segments`.
    fn segments_between(&self, from: u64, to: u64) -> io::Result<Vec<u64>> {
        let mut v = self.list_segments()?;
        v.retain(|&s| s >= from && s < to);
        Ok(v)
    }
    /// Creates segment `seq` of `size` bytes, preallocated (reads as zeros),
    /// with `header` written at offset 0, all durable before returning.
    fn create_segment(&self, seq: u64, size: u64, header: &[u8]) -> io::Result<()>;
    /// Writes `buf` (all of it) at `offset` of segment `seq`; gives the
    /// buffer back.
    fn write(&self, seq: u64, offset: u64, buf: AlignedBuf) -> (io::Result<()>, AlignedBuf);
    /// As [`write`](Storage::write), but returns a future; the write is
    /// under way once the future has been polled once, so the journal can
    /// prepare the next batch meanwhile. The default writes at once.
    fn write_async(&self, seq: u64, offset: u64, buf: AlignedBuf) -> WriteFuture {
        let r = self.write(seq, offset, buf);
        Box::pin(std::future::ready(r))
    }
    /// Makes the writes to segment `seq` durable (fdatasync).
    fn sync(&self, seq: u64) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes at `offset` of segment `seq`.
    fn read(&self, seq: u64, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Makes `[offset, offset + len)` of segment `seq` read as zeros (not yet
    /// durable: sync the segment).
    fn zero(&self, seq: u64, offset: u64, len: u64) -> io::Result<()>;
    /// Deletes segment `seq` durably.
    fn remove_segment(&self, seq: u64) -> io::Result<()>;
    /// Retires segment `seq` (it holds nothing the log still needs): keeps
    /// its file, renamed out of the log, for
    /// [`reuse_segment`](Storage::reuse_segment) when fewer than `keep` retired files are
    /// kept; otherwise removes it. Returns whether it was kept. Durable
    /// when it returns. The default removes it.
    fn recycle_segment(&self, seq: u64, keep: usize) -> io::Result<bool> {
        let _ = keep;
        self.remove_segment(seq)?;
        Ok(false)
    }
    /// Makes segment `seq` out of a retired file kept by
    /// [`recycle_segment`](Storage::recycle_segment), if there is one:
    /// writes `header` at offset 0 followed by zeros up to `zero_to`, and
    /// renames it into place, all durable before returning. The rest of
    /// the file keeps the bytes of its earlier use (records the format
    /// rejects: their LSN and segment identity are the old ones). Returns
    /// `false`, doing nothing, when no retired file is kept (the default).
    fn reuse_segment(&self, seq: u64, header: &[u8], zero_to: u64) -> io::Result<bool> {
        let _ = (seq, header, zero_to);
        Ok(false)
    }
    /// The stretch `[start, end)` of segment `seq`, at or after `offset`,
    /// that may hold data: bytes outside every such stretch read as zeros
    /// (never written, or zeroed). `None` when nothing at or after
    /// `offset` was ever written. Lets recovery skip preallocated space;
    /// the default says everything may hold data.
    fn data_after(&self, seq: u64, offset: u64) -> io::Result<Option<(u64, u64)>> {
        let _ = seq;
        Ok(Some((offset, u64::MAX)))
    }
    /// Creates a new file named `name` beside the segments, for what
    /// `repair` drops (see [`crate::repair`]): its path and the file,
    /// whose directory entry is durable when this returns. An error of
    /// kind [`io::ErrorKind::AlreadyExists`] when the name is taken (a
    /// file of an earlier repair is never overwritten). `None` where the
    /// storage keeps no such files (the default).
    fn create_aside(&self, name: &str) -> io::Result<Option<(PathBuf, std::fs::File)>> {
        let _ = name;
        Ok(None)
    }
    /// The checkpoint file's contents, `None` if it does not exist.
    fn read_checkpoint(&self) -> io::Result<Option<Vec<u8>>>;
    /// Writes `data` at `offset` of the checkpoint file (creating it, and
    /// syncing its directory, the first time); syncs it when `sync`.
    fn write_checkpoint(&self, offset: u64, data: &[u8], sync: bool) -> io::Result<()>;
}

/// How the file system storage syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SyncMethod {
    /// Chosen per file system (the default): O_DSYNC where direct I/O
    /// works (each batch is then one write that the device makes durable,
    /// e.g. with FUA, and the flusher can prepare the next batch while it
    /// runs), `fdatasync` per group commit where writes are buffered (an
    /// O_DSYNC buffered write would flush once per write).
    #[default]
    Auto,
    /// Writes followed by one `fdatasync` per group commit, after the
    /// writes it covers.
    Fdatasync,
    /// Segment files opened with O_DSYNC: each write is durable when it
    /// completes, so `Written` and `Durable` coincide.
    Dsync,
}
