//! The journal directory: its lock (and this process's claim on it), the
//! names of the files in it, its free space, and the probe of what its
//! file system allows (O_DIRECT, block size).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use overlapped::{Engine, OpenOptions};

/// The journal directories this process has open for writing, by device
/// and inode (on Windows: volume serial number and file index): a second open in the same process is told so, instead of
/// being refused by its own `flock` as if another process held it (a
/// `flock` belongs to an open file description, and a second `open` of
/// `LOCK` makes a new one; on Windows a `LockFileEx` lock belongs to its
/// handle).
static OPEN_HERE: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// A directory's entry in [`OPEN_HERE`], removed when dropped.
pub(super) struct Claim((u64, u64));

impl Claim {
    /// Claims `dir` for this process; `None` if it is already claimed.
    pub(super) fn take(dir: &Path) -> io::Result<Option<Claim>> {
        let key = dir_key(dir)?;
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

/// Opens the journal directory's `LOCK` file and locks it (exclusively
/// to write, shared to read); returns it and whether it is locked (a
/// reader may go on unlocked, beside a writer in another process).
pub(super) fn lock_dir(dir: &Path, write: bool) -> crate::Result<(std::fs::File, bool)> {
    let lock_path = dir.join("LOCK");
    let lock_file = if write {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)?
    } else {
        match std::fs::File::open(&lock_path) {
            Ok(f) => f,
            // No `LOCK`: no writer ever opened the journal. Linux locks the
            // directory instead; Windows locks no directory (`LockFileEx`
            // locks a file's bytes), and there is no writer to keep out.
            #[cfg(windows)]
            Err(_) => return Ok((open_dir(dir, false)?, true)),
            #[cfg(not(windows))]
            Err(_) => std::fs::File::open(dir)?,
        }
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
pub(super) fn probe_io(
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
                    format!(
                        "direct I/O ({DIRECT_FLAG}), {block}-byte blocks ({})",
                        a.source
                    ),
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
            format!("buffered I/O: this file system refused {DIRECT_FLAG} ({e})"),
        ),
        Err(e) => return Err(e.into()),
    };
    let _ = std::fs::remove_file(&probe);
    Ok(out)
}

/// The open flag of direct I/O, for the storage's note.
#[cfg(not(windows))]
const DIRECT_FLAG: &str = "O_DIRECT";
#[cfg(windows)]
const DIRECT_FLAG: &str = "FILE_FLAG_NO_BUFFERING";

pub(super) fn seg_name(seq: u64) -> String {
    format!("{seq:016x}.seg")
}

/// The name a retired segment file is kept under for reuse.
pub(super) fn free_name(seq: u64) -> String {
    format!("{seq:016x}.free")
}

/// The retired segment files kept in `dir` from earlier opens.
pub(super) fn list_free(dir: &Path) -> io::Result<Vec<PathBuf>> {
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
#[cfg(unix)]
pub(super) fn free_bytes(dir: &Path) -> io::Result<Option<u64>> {
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

/// Windows' form of [`free_bytes`]: `GetDiskFreeSpaceExW`'s bytes free to
/// the caller (quotas included); `None` for a volume of no size.
#[cfg(windows)]
pub(super) fn free_bytes(dir: &Path) -> io::Result<Option<u64>> {
    use windows_sys::Win32::Storage::FileSystem::GetDiskFreeSpaceExW;
    let wide = wide(dir)?;
    let (mut avail, mut total, mut free) = (0u64, 0u64, 0u64);
    // SAFETY: `wide` is NUL-terminated; the three outputs are writable u64s.
    if unsafe { GetDiskFreeSpaceExW(wide.as_ptr(), &mut avail, &mut total, &mut free) } == 0 {
        return Err(io::Error::last_os_error());
    }
    debug_assert!(
        avail <= total,
        "no more is free to the caller than the volume holds"
    );
    Ok((total != 0).then_some(avail))
}

/// Makes `dir`'s entries (a file created, renamed or removed in it)
/// durable: `fsync` of the directory.
#[cfg(not(windows))]
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Windows' form of [`sync_dir`]. Windows has no call documented for a
/// directory's entries; NTFS journals its metadata (a create, rename or
/// delete is an atomic transaction in its log, replayed or undone after a
/// crash), and `FlushFileBuffers` on a directory handle (opened with
/// `FILE_FLAG_BACKUP_SEMANTICS` and write access) flushes that log on
/// NTFS, so that is done. Where the file system refuses it (FAT, some
/// network file systems: `ERROR_INVALID_FUNCTION`, `ERROR_ACCESS_DENIED`,
/// `ERROR_NOT_SUPPORTED`), the change rests on the file system's own
/// ordering, as it does on Linux file systems without directory fsync:
/// nothing more can be asked.
#[cfg(windows)]
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    use windows_sys::Win32::Foundation::{
        ERROR_ACCESS_DENIED, ERROR_INVALID_FUNCTION, ERROR_INVALID_PARAMETER, ERROR_NOT_SUPPORTED,
    };
    let refused = |e: &io::Error| {
        [
            ERROR_ACCESS_DENIED,
            ERROR_INVALID_FUNCTION,
            ERROR_INVALID_PARAMETER,
            ERROR_NOT_SUPPORTED,
        ]
        .iter()
        .any(|&c| e.raw_os_error() == Some(c as i32))
    };
    match open_dir(dir, true).and_then(|d| d.sync_all()) {
        Err(e) if refused(&e) => Ok(()),
        r => r,
    }
}

/// A handle on the directory `dir` (`FILE_FLAG_BACKUP_SEMANTICS`), with
/// write access when `write` (which `FlushFileBuffers` needs).
#[cfg(windows)]
fn open_dir(dir: &Path, write: bool) -> io::Result<std::fs::File> {
    use std::os::windows::fs::OpenOptionsExt;
    use windows_sys::Win32::Storage::FileSystem::FILE_FLAG_BACKUP_SEMANTICS;
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
        .open(dir)
}

/// `path` as a NUL-terminated wide string.
#[cfg(windows)]
fn wide(path: &Path) -> io::Result<Vec<u16>> {
    use std::os::windows::ffi::OsStrExt;
    let w: Vec<u16> = path.as_os_str().encode_wide().chain([0]).collect();
    if w[..w.len() - 1].contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "NUL in the path",
        ));
    }
    Ok(w)
}

/// The identity of the directory `dir`: its device and inode.
#[cfg(unix)]
fn dir_key(dir: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir)?;
    Ok((m.dev(), m.ino()))
}

/// The identity of the directory `dir`: its volume's serial number and its
/// file index (`GetFileInformationByHandle`).
#[cfg(windows)]
fn dir_key(dir: &Path) -> io::Result<(u64, u64)> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Storage::FileSystem::{
        GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION,
    };
    let d = open_dir(dir, false)?;
    // SAFETY: plain data; all-zero is a valid value.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `d` is an open handle; `info` is writable and of the type
    // asked for.
    if unsafe { GetFileInformationByHandle(d.as_raw_handle(), &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    debug_assert!(
        info.dwFileAttributes & windows_sys::Win32::Storage::FileSystem::FILE_ATTRIBUTE_DIRECTORY
            != 0,
        "the journal's path names a directory"
    );
    Ok((u64::from(info.dwVolumeSerialNumber), index))
}

#[cfg(unix)]
fn lock(file: &std::fs::File, exclusive: bool) -> io::Result<bool> {
    use std::os::unix::io::AsRawFd;
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

/// Windows' form of [`lock`]: `LockFileEx` of the file's first byte,
/// without waiting (`LOCKFILE_FAIL_IMMEDIATELY`), exclusive or shared. A
/// byte-range lock on Windows is mandatory (it refuses others' reads and
/// writes of that byte), which no one needs: `LOCK` holds no data. It is
/// released when the handle is closed, or the process ends.
#[cfg(windows)]
fn lock(file: &std::fs::File, exclusive: bool) -> io::Result<bool> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Foundation::ERROR_LOCK_VIOLATION;
    use windows_sys::Win32::Storage::FileSystem::{
        LockFileEx, LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
    };
    let mut flags = LOCKFILE_FAIL_IMMEDIATELY;
    if exclusive {
        flags |= LOCKFILE_EXCLUSIVE_LOCK;
    }
    // SAFETY: OVERLAPPED is plain data; all-zero is offset 0, no event.
    let mut ov: windows_sys::Win32::System::IO::OVERLAPPED = unsafe { std::mem::zeroed() };
    // SAFETY: `file` is an open handle (std opens it for synchronous I/O,
    // so the call is done when it returns and `ov` may go); one byte is
    // locked, at the offset `ov` gives.
    let ok = unsafe { LockFileEx(file.as_raw_handle(), flags, 0, 1, 0, &mut ov) };
    if ok != 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
        Ok(false)
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "overlapped-journal-dir-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The lock keeps a second exclusive holder out (also another handle
    /// of this process: `flock` belongs to the open file description,
    /// `LockFileEx` to the handle), lets shared holders in together, and
    /// is released with its file.
    #[test]
    fn the_lock_excludes_a_second_writer_and_admits_readers() {
        let d = scratch("lock");
        let (first, locked) = lock_dir(&d, true).unwrap();
        assert!(locked);
        let second = std::fs::File::open(d.join("LOCK")).unwrap();
        assert!(!lock(&second, true).unwrap(), "a second writer is kept out");
        assert!(!lock(&second, false).unwrap(), "a reader sees the writer");
        drop(first);
        assert!(lock(&second, false).unwrap(), "released with its file");
        let third = std::fs::File::open(d.join("LOCK")).unwrap();
        assert!(lock(&third, false).unwrap(), "readers share");
        assert!(!lock(&std::fs::File::open(d.join("LOCK")).unwrap(), true).unwrap());
        drop((second, third));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A directory's identity is the same however its path is spelled,
    /// and differs between directories; its entries can be synced; the
    /// file system reports free space.
    #[test]
    fn directory_identity_sync_and_free_space() {
        let d = scratch("ident");
        let sub = d.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let key = dir_key(&sub).unwrap();
        assert_eq!(dir_key(&sub.join("..").join("sub")).unwrap(), key);
        assert_ne!(dir_key(&d).unwrap(), key);
        std::fs::write(sub.join("f"), b"x").unwrap();
        sync_dir(&sub).unwrap();
        #[cfg(windows)]
        eprintln!(
            "FlushFileBuffers on a directory handle: {:?}",
            open_dir(&sub, true).and_then(|h| h.sync_all())
        );
        let free = free_bytes(&d).unwrap();
        assert!(free.is_none_or(|f| f > 0), "{free:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
