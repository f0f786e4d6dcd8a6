//! Where the journal's bytes go: the [`Storage`] trait, and [`FsStorage`],
//! its implementation on the overlap engine.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use overlap::{AlignedBuf, Engine, File, OpenOptions};

use crate::error::context;
use crate::format::align_up;

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
    /// A human-readable note on how the storage writes (direct or buffered
    /// and why).
    fn describe(&self) -> String;
    /// The segments that exist, in ascending order.
    fn list_segments(&self) -> io::Result<Vec<u64>>;
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
    /// Creates (or empties) a file named `name` beside the segments, for
    /// what `repair` drops (see [`crate::repair`]): its path and the file,
    /// whose directory entry is durable when this returns. `None` where
    /// the storage keeps no such files (the default).
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

struct Seg {
    file: File,
}

/// The journal's storage on a directory of files, doing its I/O on the
/// overlap [`Engine`].
///
/// - Segment files are created under a temporary name, preallocated to
///   their full size with `File::allocate` (so steady-state writes never
///   extend a file and stay asynchronous), given their header, fsynced,
///   renamed into place, and the directory fsynced.
/// - Writes use O_DIRECT with aligned buffers where the file system accepts
///   it; elsewhere (e.g. tmpfs on older kernels) buffered I/O, said in
///   [`Storage::describe`].
/// - An advisory `flock` on `DIR/LOCK` keeps a second process out.
pub struct FsStorage {
    dir: PathBuf,
    engine: Engine,
    direct: bool,
    dsync: bool,
    block: usize,
    mem_align: usize,
    note: String,
    writable: bool,
    live: bool,
    segs: Mutex<BTreeMap<u64, Arc<Seg>>>,
    /// Retired segment files kept for reuse (`<old seq>.free`), oldest
    /// first.
    free: Mutex<Vec<PathBuf>>,
    ckpt: Mutex<Option<File>>,
    _lock: std::fs::File,
    /// This process's claim on the directory (dropped after the lock).
    _claim: Option<Claim>,
}

/// The journal directories this process has open for writing, by device
/// and inode: a second open in the same process is told so, instead of
/// being refused by its own `flock` as if another process held it (a
/// `flock` belongs to an open file description, and a second `open` of
/// `LOCK` makes a new one).
static OPEN_HERE: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// A directory's entry in [`OPEN_HERE`], removed when dropped.
struct Claim((u64, u64));

impl Claim {
    /// Claims `dir` for this process; `None` if it is already claimed.
    fn take(dir: &Path) -> io::Result<Option<Claim>> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir)?;
        let key = (m.dev(), m.ino());
        let mut open = OPEN_HERE.lock().unwrap_or_else(|p| p.into_inner());
        if open.contains(&key) {
            return Ok(None);
        }
        open.push(key);
        Ok(Some(Claim(key)))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut open = OPEN_HERE.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|k| *k != self.0);
    }
}

impl std::fmt::Debug for FsStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsStorage")
            .field("dir", &self.dir)
            .field("note", &self.note)
            .finish()
    }
}

/// Opens the journal directory's `LOCK` file and locks it (exclusively
/// to write, shared to read); returns it and whether it is locked (a
/// reader may go on unlocked, beside a writer in another process).
fn lock_dir(dir: &Path, write: bool) -> crate::Result<(std::fs::File, bool)> {
    let lock_path = dir.join("LOCK");
    let lock_file = if write {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)?
    } else {
        std::fs::File::open(&lock_path).or_else(|_| std::fs::File::open(dir))?
    };
    // A lock held only for a moment (a process forking between opening
    // and exec, which briefly shares the descriptor) is waited out, for
    // at most about half a second.
    let mut locked = lock(&lock_file, write)?;
    let mut pause = Duration::from_millis(1);
    while !locked && write && pause < Duration::from_millis(256) {
        std::thread::sleep(pause);
        pause *= 2;
        locked = lock(&lock_file, write)?;
    }
    if !locked && write {
        return Err(crate::Error::Locked(dir.display().to_string()));
    }
    Ok((lock_file, locked))
}

/// Probes, with a scratch file in `dir`, whether O_DIRECT works there
/// (when wanted) and the block size and memory alignment to write with;
/// returns them with a note for the report: `(direct, block, mem_align,
/// note)`.
fn probe_io(
    engine: &Engine,
    dir: &Path,
    want_direct: bool,
) -> crate::Result<(bool, usize, usize, String)> {
    let probe = dir.join(".probe.tmp");
    let res = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .direct(want_direct)
        .open(engine, &probe)
        .wait();
    let out = match res {
        Ok(f) => {
            let a = f.alignment();
            if want_direct {
                // Write whole file-system blocks, not just what
                // STATX_DIOALIGN allows (often 512): ext4 treats a
                // direct write that is not block-aligned as unaligned
                // I/O, takes its exclusive inode lock and io_uring
                // hands the write to a kernel worker.
                let fs_block = f.metadata().wait().map(|m| m.block_size).unwrap_or(0);
                let block = (a.offset.max(fs_block) as usize)
                    .clamp(512, 65536)
                    .next_power_of_two();
                let mem = (a.memory as usize).clamp(1, 65536).next_power_of_two();
                (
                    true,
                    block,
                    mem.max(block),
                    format!("direct I/O (O_DIRECT), {block}-byte blocks ({})", a.source),
                )
            } else {
                (
                    false,
                    512,
                    512,
                    "buffered I/O (direct I/O not requested)".into(),
                )
            }
        }
        Err(e) if want_direct => (
            false,
            512,
            512,
            format!("buffered I/O: this file system refused O_DIRECT ({e})"),
        ),
        Err(e) => return Err(e.into()),
    };
    let _ = std::fs::remove_file(&probe);
    Ok(out)
}

fn seg_name(seq: u64) -> String {
    format!("{seq:016x}.seg")
}

/// The name a retired segment file is kept under for reuse.
fn free_name(seq: u64) -> String {
    format!("{seq:016x}.free")
}

/// The retired segment files kept in `dir` from earlier opens.
fn list_free(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(hex) = name.strip_suffix(".free") {
            if hex.len() == 16 && u64::from_str_radix(hex, 16).is_ok() {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Bytes an unprivileged user may still allocate on the file system holding
/// `dir` (`statvfs`: available blocks times the fragment size); `None` for
/// a file system that reports no size at all (ramfs, some FUSE ones).
fn free_bytes(dir: &Path) -> io::Result<Option<u64>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
    // SAFETY: statvfs is plain data; all-zero is a valid value.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `vfs` is a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut vfs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if vfs.f_blocks == 0 {
        return Ok(None);
    }
    Ok(Some(
        (vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64),
    ))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn lock(file: &std::fs::File, exclusive: bool) -> io::Result<bool> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let r = unsafe { libc::flock(file.as_raw_fd(), op) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

impl FsStorage {
    /// Opens (creating if needed) the journal directory `dir` for writing,
    /// taking its exclusive lock. `direct` asks for O_DIRECT where the file
    /// system supports it.
    pub fn open(
        engine: &Engine,
        dir: impl AsRef<Path>,
        direct: bool,
        sync: SyncMethod,
    ) -> crate::Result<FsStorage> {
        Self::open_inner(engine, dir.as_ref(), direct, sync, true)
    }

    /// Opens an existing journal directory for reading only (shared lock),
    /// as `verify` and `dump` do. When a writer holds the journal, it opens
    /// without the lock and reads only the durable prefix
    /// ([`Storage::shared_with_writer`]).
    pub fn open_read_only(engine: &Engine, dir: impl AsRef<Path>) -> crate::Result<FsStorage> {
        Self::open_inner(engine, dir.as_ref(), false, SyncMethod::Fdatasync, false)
    }

    fn open_inner(
        engine: &Engine,
        dir: &Path,
        want_direct: bool,
        sync: SyncMethod,
        write: bool,
    ) -> crate::Result<FsStorage> {
        if write {
            if !dir.exists() {
                std::fs::create_dir_all(dir)?;
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    sync_dir(parent)?;
                }
            }
        } else if !dir.is_dir() {
            return Err(crate::Error::InvalidInput(format!(
                "{} is not a journal directory",
                dir.display()
            )));
        }
        let claim = if write {
            match Claim::take(dir)? {
                Some(c) => Some(c),
                None => return Err(crate::Error::AlreadyOpen(dir.display().to_string())),
            }
        } else {
            None
        };
        let (lock_file, locked) = lock_dir(dir, write)?;
        // Probe O_DIRECT and the block size with a scratch file.
        let (direct, block, mem_align, note) = if write {
            probe_io(engine, dir, want_direct)?
        } else {
            (false, 512, 512, "read only".into())
        };
        let dsync = match sync {
            SyncMethod::Dsync => true,
            SyncMethod::Fdatasync => false,
            _ => direct,
        };
        let how = if sync == SyncMethod::Auto {
            "chosen for this file system"
        } else {
            "as asked"
        };
        let note = match dsync {
            _ if !write => note,
            false => format!("{note}; fdatasync per group commit ({how})"),
            true => format!("{note}; O_DSYNC writes ({how})"),
        };
        Ok(FsStorage {
            dir: dir.to_path_buf(),
            engine: engine.clone(),
            direct,
            dsync: dsync && write,
            block,
            mem_align,
            note,
            writable: write,
            live: !locked,
            segs: Mutex::new(BTreeMap::new()),
            free: Mutex::new(if write { list_free(dir)? } else { Vec::new() }),
            ckpt: Mutex::new(None),
            _lock: lock_file,
            _claim: claim,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether segment writes use O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    fn options(&self) -> OpenOptions {
        let mut o = OpenOptions::new();
        o.read(true)
            .write(true)
            .direct(self.direct)
            .write_through(self.dsync);
        o
    }

    fn seg(&self, seq: u64) -> io::Result<Option<Arc<Seg>>> {
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = segs.get(&seq) {
            return Ok(Some(s.clone()));
        }
        let path = self.dir.join(seg_name(seq));
        let res = if self.writable {
            self.options().open(&self.engine, &path).wait()
        } else {
            File::open(&self.engine, &path).wait()
        };
        match res {
            Ok(file) => {
                let s = Arc::new(Seg { file });
                segs.insert(seq, s.clone());
                Ok(Some(s))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn must_seg(&self, seq: u64) -> io::Result<Arc<Seg>> {
        self.seg(seq)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("segment {seq} does not exist"),
            )
        })
    }
}

impl Storage for FsStorage {
    fn block_size(&self) -> usize {
        self.block
    }

    fn buffer_align(&self) -> usize {
        self.mem_align
    }

    fn writes_are_durable(&self) -> bool {
        self.dsync
    }

    fn completes_on_own_ring(&self) -> bool {
        self.engine.driver().kind == overlap::DriverKind::Uring
    }

    fn shared_with_writer(&self) -> bool {
        self.live
    }

    fn describe(&self) -> String {
        if self.live {
            return format!("{}; a writer holds the journal", self.note);
        }
        self.note.clone()
    }

    fn list_segments(&self) -> io::Result<Vec<u64>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(hex) = name.strip_suffix(".seg") {
                if hex.len() == 16 {
                    if let Ok(seq) = u64::from_str_radix(hex, 16) {
                        out.push(seq);
                    }
                }
            } else if name.ends_with(".seg.tmp") && self.writable {
                // A segment whose creation was interrupted: never renamed
                // into place, so never used.
                let _ = std::fs::remove_file(self.dir.join(name));
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn create_segment(&self, seq: u64, size: u64, header: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!("{}.tmp", seg_name(seq)));
        let path = self.dir.join(seg_name(seq));
        // Refuse before allocating anything when the file system cannot
        // hold the segment: a failed fallocate may leave a partly
        // allocated file behind and the file system full until removed.
        if let Some(free) = free_bytes(&self.dir)?.filter(|&f| f < size) {
            return Err(context(
                io::Error::from_raw_os_error(libc::ENOSPC),
                format!(
                    "segment {seq} needs {} MiB, {} MiB free on the file system of {}",
                    size.div_ceil(1 << 20),
                    free >> 20,
                    self.dir.display()
                ),
            ));
        }
        let made = (|| -> io::Result<File> {
            let file = self
                .options()
                .create(true)
                .truncate(true)
                .open(&self.engine, &tmp)
                .wait()?;
            file.allocate(0, size).wait().map_err(|e| {
                context(
                    e.into(),
                    format!("preallocating segment {seq} ({size} bytes) with fallocate"),
                )
            })?;
            let mut buf = AlignedBuf::new(self.block.max(header.len()), self.mem_align)?;
            buf[..header.len()].copy_from_slice(header);
            let (res, _) = file.write_all_at(buf, 0).wait();
            res?;
            file.sync_all().wait()?;
            Ok(file)
        })();
        let file = match made {
            Ok(f) => f,
            Err(e) => {
                // Give the space back: nothing refers to the temporary file.
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        sync_dir(&self.dir)?;
        self.segs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seq, Arc::new(Seg { file }));
        Ok(())
    }

    fn write(&self, seq: u64, offset: u64, buf: AlignedBuf) -> (io::Result<()>, AlignedBuf) {
        let seg = match self.must_seg(seq) {
            Ok(s) => s,
            Err(e) => return (Err(e), buf),
        };
        let (res, buf) = seg.file.write_all_at(buf, offset).wait();
        (res.map_err(io::Error::from), buf)
    }

    fn write_async(&self, seq: u64, offset: u64, buf: AlignedBuf) -> WriteFuture {
        let seg = match self.must_seg(seq) {
            Ok(s) => s,
            Err(e) => return Box::pin(std::future::ready((Err(e), buf))),
        };
        let task = seg.file.write_all_at(buf, offset);
        Box::pin(async move {
            let (res, buf) = task.await;
            (res.map_err(io::Error::from), buf)
        })
    }

    fn sync(&self, seq: u64) -> io::Result<()> {
        let seg = self.must_seg(seq)?;
        seg.file.sync_data().wait()?;
        Ok(())
    }

    fn read(&self, seq: u64, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let Some(seg) = self.seg(seq)? else {
            return Ok(0);
        };
        if seg.file.is_direct() {
            // Direct reads need aligned requests; read the covering blocks.
            let b = self.block as u64;
            let start = offset & !(b - 1);
            let end = (offset + buf.len() as u64).div_ceil(b) * b;
            let abuf = AlignedBuf::new((end - start) as usize, self.mem_align)?;
            let (res, abuf) = seg.file.read_at(abuf, start).wait();
            let n = res? as u64;
            let skip = (offset - start) as usize;
            let avail = (n as usize).saturating_sub(skip).min(buf.len());
            buf[..avail].copy_from_slice(&abuf[skip..skip + avail]);
            return Ok(avail);
        }
        let (res, v) = seg.file.read_at(vec![0u8; buf.len()], offset).wait();
        let n = res?;
        buf[..n].copy_from_slice(&v[..n]);
        Ok(n)
    }

    fn data_after(&self, seq: u64, offset: u64) -> io::Result<Option<(u64, u64)>> {
        let Some(seg) = self.seg(seq)? else {
            return Ok(None);
        };
        let fd = seg.file.as_raw_fd();
        let Ok(off) = libc::off_t::try_from(offset) else {
            return Ok(None);
        };
        // SAFETY: lseek on a descriptor the segment keeps open; no memory is
        // passed. SEEK_DATA skips holes and unwritten (preallocated, never
        // written) extents that have no page in the cache.
        let start = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
        if start < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENXIO) => Ok(None),
                // Not supported here: everything may hold data.
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(Some((offset, u64::MAX))),
                _ => Err(e),
            };
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        if end < 0 {
            return Ok(Some((start as u64, u64::MAX)));
        }
        Ok(Some((start as u64, end as u64)))
    }

    fn zero(&self, seq: u64, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let seg = self.must_seg(seq)?;
        // SAFETY: fallocate on a descriptor the segment keeps open; no memory
        // is passed.
        let r = unsafe {
            libc::fallocate(
                seg.file.as_raw_fd(),
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        // Not supported here: write zeros.
        let chunk = (1u64 << 20).min(len.div_ceil(self.block as u64) * self.block as u64);
        let mut at = offset;
        let end = offset + len;
        let mut buf = AlignedBuf::new(chunk as usize, self.mem_align)?;
        while at < end {
            let n = chunk.min(end - at);
            buf.set_len(n as usize)?;
            let (res, b) = seg.file.write_all_at(buf, at).wait();
            res?;
            buf = b;
            at += n;
        }
        Ok(())
    }

    fn remove_segment(&self, seq: u64) -> io::Result<()> {
        self.segs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&seq);
        match std::fs::remove_file(self.dir.join(seg_name(seq))) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        sync_dir(&self.dir)
    }

    fn recycle_segment(&self, seq: u64, keep: usize) -> io::Result<bool> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() >= keep {
            drop(free);
            self.remove_segment(seq)?;
            return Ok(false);
        }
        self.segs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&seq);
        let to = self.dir.join(free_name(seq));
        match std::fs::rename(self.dir.join(seg_name(seq)), &to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        }
        sync_dir(&self.dir)?;
        free.push(to);
        Ok(true)
    }

    fn reuse_segment(&self, seq: u64, header: &[u8], zero_to: u64) -> io::Result<bool> {
        let Some(from) = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
            return Ok(false);
        };
        let path = self.dir.join(seg_name(seq));
        let made = (|| -> io::Result<File> {
            let file = self.options().open(&self.engine, &from).wait()?;
            let len = align_up(zero_to.max(header.len() as u64), self.block as u64) as usize;
            let mut buf = AlignedBuf::new(len, self.mem_align)?;
            buf[..header.len()].copy_from_slice(header);
            let (res, _) = file.write_all_at(buf, 0).wait();
            res?;
            file.sync_data().wait()?;
            std::fs::rename(&from, &path)?;
            sync_dir(&self.dir)?;
            Ok(file)
        })();
        match made {
            Ok(file) => {
                self.segs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(seq, Arc::new(Seg { file }));
                Ok(true)
            }
            Err(e) => {
                // Never leave a file of unknown state under a segment's name.
                let _ = std::fs::remove_file(&from);
                Err(e)
            }
        }
    }

    fn create_aside(&self, name: &str) -> io::Result<Option<(PathBuf, std::fs::File)>> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the journal is open read only",
            ));
        }
        let path = self.dir.join(name);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| context(e, format!("creating {}", path.display())))?;
        sync_dir(&self.dir)?;
        Ok(Some((path, f)))
    }

    fn read_checkpoint(&self) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.dir.join("checkpoint")) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write_checkpoint(&self, offset: u64, data: &[u8], sync: bool) -> io::Result<()> {
        let mut guard = self.ckpt.lock().unwrap_or_else(|p| p.into_inner());
        let f = match guard.take() {
            Some(f) => f,
            None => {
                let path = self.dir.join("checkpoint");
                let existed = path.exists();
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .open(&self.engine, &path)
                    .wait()?;
                if !existed {
                    f.sync_all().wait()?;
                    sync_dir(&self.dir)?;
                }
                f
            }
        };
        let f = guard.insert(f);
        let (res, _) = f.write_all_at(data.to_vec(), offset).wait();
        res?;
        if sync {
            f.sync_data().wait()?;
        }
        Ok(())
    }
}
