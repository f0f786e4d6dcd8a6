//! The journal directory: its lock (and this process's claim on it), the
//! names of the files in it, its free space, and the probe of what its
//! file system allows (O_DIRECT, block size).

use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use overlap::{Engine, OpenOptions};

/// The journal directories this process has open for writing, by device
/// and inode: a second open in the same process is told so, instead of
/// being refused by its own `flock` as if another process held it (a
/// `flock` belongs to an open file description, and a second `open` of
/// `LOCK` makes a new one).
static OPEN_HERE: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// A directory's entry in [`OPEN_HERE`], removed when dropped.
pub(super) struct Claim((u64, u64));

impl Claim {
    /// Claims `dir` for this process; `None` if it is already claimed.
    pub(super) fn take(dir: &Path) -> io::Result<Option<Claim>> {
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

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
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
