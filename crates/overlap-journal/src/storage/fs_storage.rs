//! [`FsStorage`]: the [`Storage`] implementation on a directory of segment
//! files, doing its I/O on the overlap engine. Opening, segment creation
//! (preallocated, or a recycled file reused), writes, reads, syncs and the
//! checkpoint file; the trait implementation stays whole, as Rust wants
//! one `impl` block for it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use overlapped::{AlignedBuf, Engine, File, OpenOptions};

use super::dir::{free_bytes, free_name, list_free, lock_dir, probe_io, seg_name, sync_dir, Claim};
use super::{Storage, SyncMethod, WriteFuture};
use crate::error::context;
use crate::format::align_up;
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
///
/// On Windows: `FILE_FLAG_NO_BUFFERING` and `FILE_FLAG_WRITE_THROUGH` for
/// O_DIRECT and O_DSYNC, `FlushFileBuffers` for the syncs (of a directory
/// too), `LockFileEx` on `DIR/LOCK`, and the size alone where the file
/// system reserves no space (the crate documentation's *On Windows*).
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
    /// Segments created whose space the file system would not reserve.
    unreserved: AtomicU64,
}

impl std::fmt::Debug for FsStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsStorage")
            .field("dir", &self.dir)
            .field("note", &self.note)
            .finish()
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
            false => format!("{note}; {SYNC_CALL} per group commit ({how})"),
            true => format!("{note}; {DSYNC_FLAG} writes ({how})"),
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
            unreserved: AtomicU64::new(0),
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

    /// Gives the new segment file `file` its full `size`, reserved
    /// (`File::allocate`: `fallocate`, on Windows the file's allocation
    /// size and then its end of file) so that later writes neither extend
    /// it nor run out of space. A Windows file system that reserves
    /// nothing (`ERROR_INVALID_FUNCTION`, `ERROR_NOT_SUPPORTED`: FAT's; or
    /// Wine's `ERROR_CALL_NOT_IMPLEMENTED`) gets the size alone (`File::set_len`, `SetEndOfFile`; the
    /// space is then taken as it is written), counted in
    /// [`Storage::segments_unreserved`].
    ///
    /// `SetFileValidData` (which would spare NTFS from zeroing, or
    /// serialising, the first writes past a file's valid data length) is
    /// not used, even by a process holding `SE_MANAGE_VOLUME_NAME`: it
    /// exposes the disk's earlier contents as the file's, and the format
    /// reads nonzero bytes after the end of the log in space that was
    /// never written as damage. Recycled segments
    /// ([`Options::recycle_segments`](crate::Options::recycle_segments))
    /// are written already, as on Linux.
    fn preallocate(&self, file: &File, seq: u64, size: u64) -> io::Result<()> {
        debug_assert!(size > 0, "a segment has a header at least");
        let what = || format!("preallocating segment {seq} ({size} bytes) with {ALLOCATE_CALL}");
        let e: io::Error = match file.allocate(0, size).wait() {
            Ok(()) => return Ok(()),
            Err(e) => e.into(),
        };
        if !cfg!(windows) || !allocation_unsupported(&e) {
            return Err(context(e, what()));
        }
        file.set_len(size)
            .wait()
            .map_err(|e2| context(e2.into(), format!("{} (after {e}), SetEndOfFile", what())))?;
        self.unreserved.fetch_add(1, Relaxed);
        Ok(())
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
        self.engine.driver().kind == overlapped::DriverKind::Uring
    }

    fn is_forked_copy(&self) -> bool {
        self.engine.is_forked_copy()
    }

    fn shared_with_writer(&self) -> bool {
        self.live
    }

    fn describe(&self) -> String {
        if self.live {
            return format!("{}; a writer holds the journal", self.note);
        }
        let unreserved = self.unreserved.load(Relaxed);
        if unreserved > 0 {
            return format!(
                "{}; {unreserved} segments extended without reserving their space \
                 (the file system reserves none)",
                self.note
            );
        }
        self.note.clone()
    }

    fn segments_unreserved(&self) -> u64 {
        self.unreserved.load(Relaxed)
    }

    fn segments_between(&self, from: u64, to: u64) -> io::Result<Vec<u64>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let seq = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .filter(|hex| hex.len() == 16)
                .and_then(|hex| u64::from_str_radix(hex, 16).ok());
            out.extend(seq.filter(|&s| s >= from && s < to));
        }
        out.sort_unstable();
        Ok(out)
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
                io::Error::from_raw_os_error(crate::error::NO_SPACE),
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
            self.preallocate(&file, seq, size)?;
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
            debug_assert!(
                start <= offset && offset + buf.len() as u64 <= end && (end - start) % b == 0,
                "the blocks read cover the bytes asked for"
            );
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
        debug_assert!(
            n <= buf.len() && v.len() == buf.len(),
            "a read returns at most the bytes asked for, in the buffer handed in"
        );
        buf[..n].copy_from_slice(&v[..n]);
        Ok(n)
    }

    fn data_after(&self, seq: u64, offset: u64) -> io::Result<Option<(u64, u64)>> {
        let Some(seg) = self.seg(seq)? else {
            return Ok(None);
        };
        data_after(&seg.file, offset)
    }

    fn zero(&self, seq: u64, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let seg = self.must_seg(seq)?;
        if zero_range(&seg.file, offset, len) {
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
            .create_new(true)
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

/// The stretch of `file` at or after `offset` that may hold data
/// ([`Storage::data_after`]): `SEEK_DATA` and `SEEK_HOLE`.
#[cfg(target_os = "linux")]
fn data_after(file: &File, offset: u64) -> io::Result<Option<(u64, u64)>> {
    let fd = file.as_raw_fd();
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

/// Windows' form of [`Storage::data_after`]: everything may hold data. Its
/// allocated-range query (`FSCTL_QUERY_ALLOCATED_RANGES`) tells holes of
/// sparse files only, and a segment is not sparse; what NTFS never wrote
/// (past the valid data length) reads as zeros, which recovery reads.
#[cfg(windows)]
fn data_after(file: &File, offset: u64) -> io::Result<Option<(u64, u64)>> {
    debug_assert!(file.as_raw_fd() >= 0, "the segment keeps its file open");
    Ok(Some((offset, u64::MAX)))
}

/// Makes `[offset, offset + len)` of `file` read as zeros without writing
/// them (`FALLOC_FL_ZERO_RANGE`, keeping the size); false where the file
/// system cannot (the caller writes zeros).
#[cfg(target_os = "linux")]
fn zero_range(file: &File, offset: u64, len: u64) -> bool {
    debug_assert!(len > 0, "the caller zeroes no empty range");
    // SAFETY: fallocate on a descriptor the segment keeps open; no memory
    // is passed.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    r == 0
}

/// Windows' form of [`zero_range`]: none (`FSCTL_SET_ZERO_DATA` writes the
/// zeros of a file that is not sparse itself, synchronously); the caller
/// writes zeros through the engine.
#[cfg(windows)]
fn zero_range(_file: &File, _offset: u64, len: u64) -> bool {
    debug_assert!(len > 0, "the caller zeroes no empty range");
    false
}

/// Whether `e` says the file system reserves no space ahead of writes
/// (Windows: `ERROR_INVALID_FUNCTION`, `ERROR_NOT_SUPPORTED`, and Wine's
/// `ERROR_CALL_NOT_IMPLEMENTED`).
#[cfg(windows)]
fn allocation_unsupported(e: &io::Error) -> bool {
    use windows_sys::Win32::Foundation::{
        ERROR_CALL_NOT_IMPLEMENTED, ERROR_INVALID_FUNCTION, ERROR_NOT_SUPPORTED,
    };
    let code = crate::error::os_error(e);
    [
        ERROR_INVALID_FUNCTION,
        ERROR_NOT_SUPPORTED,
        ERROR_CALL_NOT_IMPLEMENTED,
    ]
    .iter()
    .any(|&c| code == Some(c as i32))
}

/// Linux reserves with `fallocate` or fails: no fallback.
#[cfg(not(windows))]
fn allocation_unsupported(_e: &io::Error) -> bool {
    false
}

/// The call that reserves a segment's space, for messages.
#[cfg(not(windows))]
const ALLOCATE_CALL: &str = "fallocate";
#[cfg(windows)]
const ALLOCATE_CALL: &str = "FileAllocationInformation";
/// The call a group commit syncs with, for the storage's note.
#[cfg(not(windows))]
const SYNC_CALL: &str = "fdatasync";
#[cfg(windows)]
const SYNC_CALL: &str = "FlushFileBuffers";
/// The open flag that makes writes durable, for the storage's note.
#[cfg(not(windows))]
const DSYNC_FLAG: &str = "O_DSYNC";
#[cfg(windows)]
const DSYNC_FLAG: &str = "FILE_FLAG_WRITE_THROUGH";
