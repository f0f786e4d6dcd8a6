//! Copying a file: [`copy`] (`tokio::fs::copy`) and [`copy_reporting`],
//! by `copy_file_range` on the blocking pool, or by reads and writes
//! through the engine where the kernel refuses it.

use std::io;
#[cfg(target_os = "linux")]
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::support::asyncify;
#[cfg(target_os = "linux")]
use super::File;
/// How much [`copy`] moves per read and write.
#[cfg(target_os = "linux")]
const COPY_CHUNK: usize = 1 << 20;

/// Copies the contents of one file to another, and the permission bits;
/// the destination is created or truncated. Returns the number of bytes
/// copied.
///
/// As std's `fs::copy` (which tokio's runs on its blocking pool), the bytes
/// move inside the kernel with `copy_file_range` where it allows it (same
/// file system type; a reflink where the file system can share extents).
/// io_uring has no opcode for `copy_file_range`, so the copy runs as one
/// task on tokio's blocking pool, as tokio's does: open, `fstat`, open,
/// `copy_file_range` (up to 1 GiB a call), `fchmod`. Where the kernel
/// refuses it (`EXDEV`, `EINVAL`, `ENOSYS`, `EOPNOTSUPP`, `EPERM`, `EBADF`
/// before any byte was copied, or a first call that copies nothing, as a
/// `/proc` file's) the copy goes on by reads and writes of 1 MiB through
/// the engine. [`copy_reporting`] says which way the bytes went.
///
/// On Windows, as tokio's there: `std::fs::copy` (`CopyFileExW`, which
/// also copies the attributes and alternate streams) on the blocking pool.
///
/// # Errors
///
/// As `std::fs::copy`; [`io::ErrorKind::InvalidInput`] when `from` is not a
/// regular file (nor a symbolic link to one).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::copy("foo.txt", "bar.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn copy(from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<u64, std::io::Error> {
    copy_reporting(from, to).await.map(|r| r.bytes)
}

/// What [`copy_reporting`] did: how many bytes it copied, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CopyReport {
    /// Bytes copied in all ([`copy`]'s result).
    pub bytes: u64,
    /// Of those, bytes the kernel copied by `copy_file_range` (on Windows,
    /// by `CopyFileExW`: all of them).
    pub by_copy_file_range: u64,
    /// Of those, bytes read and written through the engine (the fallback).
    pub by_read_write: u64,
}

/// Beyond tokio: [`copy`], reporting how the bytes were copied (by
/// `copy_file_range` in the kernel, or by reads and writes through the
/// engine where the kernel refused).
///
/// ```
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// use overlapped_tokio::fs;
/// let dir = tempfile::tempdir()?;
/// fs::write(dir.path().join("a"), b"hello").await?;
/// let r = fs::copy_reporting(dir.path().join("a"), dir.path().join("b")).await?;
/// assert_eq!(r.bytes, 5);
/// assert_eq!(r.by_copy_file_range + r.by_read_write, 5);
/// # Ok::<(), std::io::Error>(()) })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub async fn copy_reporting(
    from: impl AsRef<Path>,
    to: impl AsRef<Path>,
) -> io::Result<CopyReport> {
    copy_paths(from.as_ref().to_owned(), to.as_ref().to_owned()).await
}

/// [`copy_reporting`] on Windows: the system's copy, as tokio's.
#[cfg(windows)]
async fn copy_paths(from: PathBuf, to: PathBuf) -> io::Result<CopyReport> {
    let bytes = asyncify(move || {
        let n = std::fs::copy(&from, &to)?;
        // std counts the bytes by `CopyFileExW`'s progress callback, which
        // Wine does not call (0 for any file): the copy's length then.
        debug_assert!(
            n == 0 || std::fs::metadata(&to).map_or(true, |m| m.len() == n),
            "a count std gives is the copy's length"
        );
        match n {
            0 => std::fs::metadata(&to).map(|m| m.len()),
            n => Ok(n),
        }
    })
    .await?;
    Ok(CopyReport {
        bytes,
        by_copy_file_range: bytes,
        by_read_write: 0,
    })
}

/// [`copy_reporting`] on Linux.
#[cfg(target_os = "linux")]
async fn copy_paths(from: PathBuf, to: PathBuf) -> io::Result<CopyReport> {
    // One task on the blocking pool does what std's copy does (open,
    // `fstat`, open, `copy_file_range`, `fchmod`): for a small file the
    // hand-offs, not the bytes, are the cost, and tokio's copy has one.
    let (src, dst, perm, done, how) = asyncify(move || {
        let src = std::fs::File::open(&from)?;
        let st = src.metadata()?;
        if !st.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the source path is neither a regular file nor a symlink to a regular file",
            ));
        }
        let perm = st.permissions();
        let dst = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(perm.mode())
            .open(&to)?;
        let (done, how) = kernel_copy(&src, &dst)?;
        if how == KernelCopy::Done {
            dst.set_permissions(perm.clone())?;
        }
        Ok((src, dst, perm, done, how))
    })
    .await?;
    let mut report = CopyReport {
        bytes: done,
        by_copy_file_range: done,
        by_read_write: 0,
    };
    if how == KernelCopy::Refused {
        let len_hint = src.metadata().map(|m| m.len()).unwrap_or(0);
        let (src, dst) = (File::from_std(src), File::from_std(dst));
        let n = read_write_copy(&src, &dst, done, len_hint).await?;
        report.by_read_write = n;
        report.bytes += n;
        dst.set_permissions(perm).await?;
    }
    debug_assert_eq!(
        report.bytes,
        report.by_copy_file_range + report.by_read_write,
        "every byte copied was copied one way or the other"
    );
    Ok(report)
}

#[cfg(target_os = "linux")]
/// How far `copy_file_range` got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelCopy {
    /// To the end of the source.
    Done,
    /// The kernel refused (or a first call copied nothing): the rest goes
    /// by reads and writes.
    Refused,
}

#[cfg(target_os = "linux")]
/// Most bytes one `copy_file_range` call is asked for.
const KERNEL_COPY_CHUNK: usize = 1 << 30;

#[cfg(target_os = "linux")]
/// `copy_file_range` from offset 0 of `src` to offset 0 of `dst` until the
/// end of `src` (blocking: run on the blocking pool). Returns the bytes
/// copied and whether the copy is done or refused (then from that offset
/// on by reads and writes).
fn kernel_copy(src: &std::fs::File, dst: &std::fs::File) -> io::Result<(u64, KernelCopy)> {
    use std::os::fd::AsRawFd;
    let (mut off_in, mut off_out): (libc::loff_t, libc::loff_t) = (0, 0);
    let mut copied = 0u64;
    loop {
        // SAFETY: both descriptors are open for the whole call (borrowed
        // from live files); the two offsets are locals the kernel updates;
        // flags 0 as the system call requires.
        let r = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                KERNEL_COPY_CHUNK,
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(
                    libc::EXDEV
                    | libc::EINVAL
                    | libc::ENOSYS
                    | libc::EOPNOTSUPP
                    | libc::EPERM
                    | libc::EBADF,
                ) if copied == 0 => Ok((0, KernelCopy::Refused)),
                _ => Err(e),
            };
        }
        if r == 0 {
            // A first call that copies nothing may be a file whose size the
            // kernel does not know (procfs, sysfs): read it to be sure.
            let how = if copied == 0 {
                KernelCopy::Refused
            } else {
                KernelCopy::Done
            };
            return Ok((copied, how));
        }
        copied += r as u64;
        debug_assert!(
            off_in == off_out && off_in as u64 == copied,
            "both offsets move by what was copied"
        );
    }
}

#[cfg(target_os = "linux")]
/// Copies from `at` to the end of `src` by reads and writes through the
/// engine; returns how many bytes.
async fn read_write_copy(src: &File, dst: &File, at: u64, len_hint: u64) -> io::Result<u64> {
    let mut copied = 0u64;
    let chunk = COPY_CHUNK.min(len_hint.saturating_sub(at).max(4096) as usize);
    debug_assert!(chunk >= 4096, "a read asks for a page at least");
    let mut buf = vec![0u8; chunk];
    loop {
        buf.resize(chunk, 0);
        let (res, back) = src.read_at(buf, at + copied).await;
        buf = back;
        let n = res?;
        debug_assert!(n <= chunk, "a read returns at most the chunk asked for");
        if n == 0 {
            return Ok(copied);
        }
        buf.truncate(n);
        let (res, back) = dst.write_all_at(buf, at + copied).await;
        buf = back;
        res?;
        copied += n as u64;
    }
}
