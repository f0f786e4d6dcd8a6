//! Operations on paths: rename, remove, create directories, links and
//! `statx`, each through the engine like a read or a write (an io_uring
//! opcode where the kernel has it, its blocking system call on the thread
//! pool or where the opcode is missing); a `statx` the dentry and inode
//! caches can answer on a local file system is answered on the calling
//! thread instead ([`metadata`]).
//!
//! Paths are relative to the process's working directory unless absolute
//! (`AT_FDCWD`). Each operation copies its paths into NUL-terminated
//! strings that it owns until the kernel has completed it, so dropping the
//! future early is safe; a path with a NUL byte is refused before submission
//! with [`Error::InvalidInput`].
//!
//! On Windows each operation is the wide-character call (`MoveFileExW`,
//! `DeleteFileW`, `RemoveDirectoryW`, `CreateDirectoryW`, `CreateHardLinkW`,
//! `CreateSymbolicLinkW`; the metadata of a path opened for its attributes)
//! on the thread pool, paths are UTF-16 (`OsStr::encode_wide`), and the
//! differences are named where they are.
//!
//! ```
//! use overlapped::{path, Engine};
//!
//! let engine = Engine::new()?;
//! let dir = tempfile::tempdir()?;
//! let sub = dir.path().join("sub");
//! path::create_dir(&engine, &sub, 0o755).wait()?;
//! assert!(path::metadata(&engine, &sub).wait()?.is_dir());
//! path::rename(&engine, &sub, dir.path().join("renamed")).wait()?;
//! path::remove_dir(&engine, dir.path().join("renamed")).wait()?;
//! # Ok::<(), overlapped::Error>(())
//! ```

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::future::{run_op, Op, Task};
use crate::operation::{self, OpKind};
use crate::request::{Owner, Request};
use crate::sys::{NativePath, RawStat};

/// `path` as a NUL-terminated string, or [`Error::InvalidInput`] naming it.
#[cfg(unix)]
pub(crate) fn cpath(path: &Path) -> Result<NativePath> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| nul_in(path))
}

/// `path` as NUL-terminated UTF-16 (what `CreateFileW` and the other wide
/// calls take; a path's unpaired surrogates pass through, as Windows allows
/// them; a long one made verbatim, `sys::long_path`), or
/// [`Error::InvalidInput`] naming it.
#[cfg(windows)]
pub(crate) fn cpath(path: &Path) -> Result<NativePath> {
    crate::sys::long_path(link_target(path)?).map_err(|r| Error::from_errno((-r) as i32))
}

/// A symbolic link's target as it is stored: as [`cpath`] on Linux; on
/// Windows NUL-terminated UTF-16 never made absolute (a relative target
/// stays relative to the link).
#[cfg(unix)]
fn link_target(path: &Path) -> Result<NativePath> {
    cpath(path)
}

/// A symbolic link's target as it is stored: as [`cpath`] on Linux; on
/// Windows NUL-terminated UTF-16 never made absolute (a relative target
/// stays relative to the link).
#[cfg(windows)]
fn link_target(path: &Path) -> Result<NativePath> {
    use std::os::windows::ffi::OsStrExt;
    let mut wide: Vec<u16> = path.as_os_str().encode_wide().collect();
    if wide.contains(&0) {
        return Err(nul_in(path));
    }
    wide.push(0);
    Ok(wide)
}

fn nul_in(path: &Path) -> Error {
    Error::InvalidInput(format!("path {:?} contains a NUL byte", path.as_os_str()))
}

/// The type of a file system object, from its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (only [`symlink_metadata`] reports one).
    Symlink,
    /// A block device.
    BlockDevice,
    /// A character device.
    CharDevice,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A type the kernel reported that none of the above names.
    Other,
}

#[cfg(target_os = "linux")]
impl FileKind {
    fn from_mode(mode: u32) -> FileKind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFBLK => FileKind::BlockDevice,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            _ => FileKind::Other,
        }
    }
}

/// What `statx` reports about a path or an open file.
///
/// On Windows (`GetFileInformationByHandleEx`): `kind` is a file, a
/// directory or a symbolic link (a reparse point that stands for another
/// name, as Rust's std says); `mode` is made up (the type bits, `0o444`
/// for a read-only file else `0o666`, `0o777` for a directory); `uid` and
/// `gid` are 0; `ino` is the file index and `dev` the volume's serial
/// number; `block_size` is the volume's physical sector size; `changed`
/// is the `ChangeTime` of the file's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stat {
    /// The type of the object.
    pub kind: FileKind,
    /// Size in bytes (for a symbolic link, the length of its target).
    pub len: u64,
    /// Permission bits with set-uid, set-gid and sticky (`mode & 0o7777`).
    pub permissions: u32,
    /// The full `st_mode`, type bits included.
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner's user id.
    pub uid: u32,
    /// Owner's group id.
    pub gid: u32,
    /// Inode number.
    pub ino: u64,
    /// Device the object lives on (`makedev(major, minor)`).
    pub dev: u64,
    /// Bytes of storage allocated (512-byte blocks × 512).
    pub allocated: u64,
    /// The file system's preferred I/O size.
    pub block_size: u32,
    /// Last access, where the file system records it.
    pub accessed: Option<SystemTime>,
    /// Last modification of the contents.
    pub modified: Option<SystemTime>,
    /// Last change of the metadata.
    pub changed: Option<SystemTime>,
    /// Creation, where the file system records it.
    pub created: Option<SystemTime>,
}

impl Stat {
    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        self.kind == FileKind::File
    }
    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileKind::Dir
    }
    /// Whether it is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.kind == FileKind::Symlink
    }

    /// What `statx` reported.
    #[cfg(target_os = "linux")]
    pub(crate) fn from_raw(st: &RawStat) -> Stat {
        let time = |bit: u32, t: &libc::statx_timestamp| {
            (st.stx_mask & bit != 0).then(|| {
                let nanos = Duration::new(0, t.tv_nsec.min(999_999_999));
                if t.tv_sec >= 0 {
                    SystemTime::UNIX_EPOCH + Duration::from_secs(t.tv_sec as u64) + nanos
                } else {
                    SystemTime::UNIX_EPOCH - Duration::from_secs(t.tv_sec.unsigned_abs()) + nanos
                }
            })
        };
        let mode = st.stx_mode as u32;
        Stat {
            kind: FileKind::from_mode(mode),
            len: st.stx_size,
            permissions: mode & 0o7777,
            mode,
            nlink: st.stx_nlink,
            uid: st.stx_uid,
            gid: st.stx_gid,
            ino: st.stx_ino,
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            allocated: st.stx_blocks * 512,
            block_size: st.stx_blksize,
            accessed: time(libc::STATX_ATIME, &st.stx_atime),
            modified: time(libc::STATX_MTIME, &st.stx_mtime),
            changed: time(libc::STATX_CTIME, &st.stx_ctime),
            created: time(libc::STATX_BTIME, &st.stx_btime),
        }
    }

    /// What `GetFileInformationByHandleEx` reported, in the same terms: a
    /// Unix-like `mode` (the type bits, and `0o444` for a read-only file
    /// else `0o666`, `0o777` for a directory), no owner (0), the volume's
    /// serial number as `dev` and the file index as `ino`.
    #[cfg(windows)]
    pub(crate) fn from_raw(st: &RawStat) -> Stat {
        /// `FILE_ATTRIBUTE_READONLY`.
        const READONLY: u32 = 0x1;
        let (kind, type_bits) = if st.is_symlink() {
            (FileKind::Symlink, 0o120000)
        } else if st.is_dir() {
            (FileKind::Dir, 0o040000)
        } else {
            (FileKind::File, 0o100000)
        };
        let permissions = match (kind, st.attributes & READONLY != 0) {
            (FileKind::Dir, _) => 0o777,
            (_, true) => 0o444,
            (_, false) => 0o666,
        };
        Stat {
            kind,
            len: st.len,
            permissions,
            mode: type_bits | permissions,
            nlink: st.links,
            uid: 0,
            gid: 0,
            ino: st.index,
            dev: u64::from(st.volume),
            allocated: st.allocated,
            block_size: if st.physical_sector > 0 {
                st.physical_sector
            } else {
                4096
            },
            accessed: filetime(st.accessed),
            modified: filetime(st.written),
            changed: filetime(st.changed),
            created: filetime(st.created),
        }
    }
}

/// A `FILETIME` (100 ns since 1601-01-01 UTC) as a `SystemTime`; 0 is
/// "not recorded".
#[cfg(windows)]
fn filetime(t: i64) -> Option<SystemTime> {
    /// Seconds from 1601-01-01 to 1970-01-01.
    const UNIX_EPOCH_AS_FILETIME_S: u64 = 11_644_473_600;
    let t = u64::try_from(t).ok().filter(|t| *t > 0)?;
    let since_1601 = Duration::new(t / 10_000_000, (t % 10_000_000) as u32 * 100);
    let epoch = Duration::from_secs(UNIX_EPOCH_AS_FILETIME_S);
    Some(match since_1601.checked_sub(epoch) {
        Some(after) => SystemTime::UNIX_EPOCH + after,
        None => SystemTime::UNIX_EPOCH - (epoch - since_1601),
    })
}

/// Runs a path operation built from already converted paths.
fn simple(engine: &Engine, kind: Result<OpKind>) -> Task<Result<()>> {
    let engine = engine.clone();
    Task::new(async move {
        run_op(Owner::Engine(engine.shared().clone()), kind?)
            .await
            .map(|_| ())
    })
}

/// Renames `from` to `to` (`renameat`), replacing `to` if it exists (a file
/// by a file, or an empty directory by a directory; on Windows,
/// `MoveFileExW` with `MOVEFILE_REPLACE_EXISTING`, a file only).
pub fn rename(engine: &Engine, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Task<Result<()>> {
    let kind = (|| {
        Ok(OpKind::Rename(operation::Rename {
            from: cpath(from.as_ref())?,
            to: cpath(to.as_ref())?,
        }))
    })();
    simple(engine, kind)
}

/// Removes a file or symbolic link (`unlinkat`); a directory is refused
/// (`EISDIR`; on Windows `ERROR_ACCESS_DENIED`, and a symbolic link to a
/// directory is removed with [`remove_dir`]).
pub fn remove_file(engine: &Engine, path: impl AsRef<Path>) -> Task<Result<()>> {
    let kind =
        cpath(path.as_ref()).map(|path| OpKind::Unlink(operation::Unlink { path, dir: false }));
    simple(engine, kind)
}

/// Removes an empty directory (`unlinkat` with `AT_REMOVEDIR`).
pub fn remove_dir(engine: &Engine, path: impl AsRef<Path>) -> Task<Result<()>> {
    let kind =
        cpath(path.as_ref()).map(|path| OpKind::Unlink(operation::Unlink { path, dir: true }));
    simple(engine, kind)
}

/// Creates a directory with permission bits `mode`, less the umask
/// (`mkdirat`); its parent must exist. Windows has no permission bits:
/// `mode` is ignored there.
pub fn create_dir(engine: &Engine, path: impl AsRef<Path>, mode: u32) -> Task<Result<()>> {
    let kind = cpath(path.as_ref()).map(|path| OpKind::Mkdir(operation::Mkdir { path, mode }));
    simple(engine, kind)
}

/// Creates `link` as a new hard link to `original` (`linkat`, not following
/// a symbolic `original`).
pub fn hard_link(
    engine: &Engine,
    original: impl AsRef<Path>,
    link: impl AsRef<Path>,
) -> Task<Result<()>> {
    let kind = (|| {
        Ok(OpKind::Link(operation::Link {
            original: cpath(original.as_ref())?,
            link: cpath(link.as_ref())?,
        }))
    })();
    simple(engine, kind)
}

/// Creates `link` as a symbolic link whose target is `original`
/// (`symlinkat`); the target need not exist. On Windows
/// (`CreateSymbolicLinkW`, which needs developer mode or the privilege) the
/// link is a directory link when `original` is a directory at creation (a
/// relative `original` is looked up from the link's directory), else a file
/// link.
pub fn symlink(
    engine: &Engine,
    original: impl AsRef<Path>,
    link: impl AsRef<Path>,
) -> Task<Result<()>> {
    let kind = (|| {
        Ok(OpKind::Symlink(operation::Symlink {
            target: link_target(original.as_ref())?,
            link: cpath(link.as_ref())?,
        }))
    })();
    simple(engine, kind)
}

/// `statx` of `path`, following symbolic links.
///
/// When the dentry cache holds every component of the path and the file is
/// on a local file system (ext4, xfs, btrfs, tmpfs, ...), the answer comes
/// from memory on the calling thread (`openat2(O_PATH, RESOLVE_CACHED)` and
/// `statx` of that descriptor), counted as an operation completed inline:
/// io_uring hands every `statx` to a kernel worker, a thread wake-up each.
/// Anything else goes through the engine: other file systems (network ones,
/// FUSE, overlayfs, whose layers may be either), kernels before 6.8 (the
/// file system is named by `statmount`, never by asking it). Off with
/// [`EngineBuilder::cache_fast_path`](crate::EngineBuilder::cache_fast_path)`(false)`.
pub fn metadata(engine: &Engine, path: impl AsRef<Path>) -> Task<Result<Stat>> {
    statx(engine, path.as_ref(), 0)
}

/// `statx` of `path` itself: a symbolic link is reported as one
/// (`AT_SYMLINK_NOFOLLOW`). Answered from memory when it can be, as
/// [`metadata`].
pub fn symlink_metadata(engine: &Engine, path: impl AsRef<Path>) -> Task<Result<Stat>> {
    statx(engine, path.as_ref(), crate::sys::STAT_NOFOLLOW)
}

/// Whether `path` exists (following symbolic links), as
/// `std::fs::exists`: `Ok(false)` only when it does not (`ENOENT`); any
/// other error (a directory that may not be searched, a file where a
/// directory should be) is returned, since existence cannot be told.
pub fn try_exists(engine: &Engine, path: impl AsRef<Path>) -> Task<Result<bool>> {
    let stat = metadata(engine, path);
    Task::new(async move {
        match stat.await {
            Ok(_) => Ok(true),
            // ENOENT; on Windows ERROR_FILE_NOT_FOUND or ERROR_PATH_NOT_FOUND.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    })
}

fn statx(engine: &Engine, path: &Path, flags: i32) -> Task<Result<Stat>> {
    debug_assert_eq!(
        flags & !crate::sys::STAT_NOFOLLOW,
        0,
        "a path's statx follows links or not, no other flag"
    );
    let engine = engine.clone();
    let path = cpath(path);
    Task::new(async move {
        let path = path?;
        // A path the dentry cache holds, on a local file system: answered
        // here, not by a kernel worker (`sys::statx_cached`; Linux only).
        #[cfg(target_os = "linux")]
        {
            let shared = engine.shared();
            if shared.fast_path && !shared.is_shut() {
                match crate::sys::statx_cached(&*shared.counters, &path, flags) {
                    Some(Ok(st)) => return Ok(Stat::from_raw(&st)),
                    Some(Err(errno)) => return Err(std::io::Error::from_raw_os_error(errno).into()),
                    None => {}
                }
            }
        }
        // SAFETY: RawStat is plain old data; all-zero is a valid value.
        let mut buf: Box<RawStat> = Box::new(unsafe { std::mem::zeroed() });
        // The box's heap memory does not move when the box moves into the
        // cell, which owns it until the kernel has completed.
        let kind = OpKind::StatxPath(operation::StatxPath {
            path,
            flags,
            buf: &mut *buf as *mut RawStat,
        });
        let req = Request {
            owner: Owner::Engine(engine.shared().clone()),
            buf,
            kind,
            bytes: 0,
            fast_path: false,
        };
        let (res, st) = Op::request(req).await;
        res?;
        Ok(Stat::from_raw(&st))
    })
}
