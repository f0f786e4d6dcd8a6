//! Filesystem operations: the names of `tokio::fs`, with the same
//! signatures and behaviour, so that `use overlap_tokio::fs;` replaces
//! `use tokio::fs;`.
//!
//! What has an io_uring opcode is an operation of the [`overlap`] engine
//! (io_uring where the kernel allows it, else the engine's bounded thread
//! pool; an opcode missing on an older kernel falls back to its system call
//! by itself). What has none runs on tokio's blocking pool
//! (`spawn_blocking`), as in tokio:
//!
//! | item | runs on | how |
//! | --- | --- | --- |
//! | [`File::open`], [`File::create`], [`File::create_new`], [`OpenOptions::open`] | engine | `openat` (then `statx` for the direct-I/O alignment) |
//! | `File` as `AsyncRead` | engine | `read` at the file's own cursor (positional, no `lseek`) |
//! | `File` as `AsyncWrite` (also vectored), `flush`, `shutdown` | engine | `write` at the cursor (`O_APPEND`: at the end); writes made while one is in flight are taken at once and written after it as one `write` (write-behind, below) |
//! | `File` as `AsyncSeek` | engine / none | `SeekFrom::End` asks `statx`; `Start` and `Current` need no system call |
//! | [`File::sync_all`], [`File::sync_data`] | engine | `fsync`, `fdatasync` |
//! | [`File::set_len`] | engine | `ftruncate` (Linux 6.9; the system call before) |
//! | [`File::try_clone`] | calling thread | `fcntl(F_DUPFD_CLOEXEC)` (does no I/O) |
//! | [`File::from_std`], [`File::into_std`], [`File::try_into_std`] | calling thread | `fcntl(F_GETFL)`, `lseek` (no I/O; `from_std` of an O_DIRECT file also `statx` for its alignment) |
//! | [`File::metadata`] | blocking pool | `fstat`: a `std::fs::Metadata` can only come from std ([`File::statx`] uses the engine) |
//! | [`File::set_permissions`], [`File::set_times`] | blocking pool | `fchmod`, `utimensat`: no opcode |
//! | [`read`], [`read_to_string`] | engine (+ calling thread) | `openat`, `read`s; the size hint by `statx(AT_STATX_DONT_SYNC)` of the open file on the calling thread (in-memory attributes, no I/O) |
//! | [`write()`] | engine | `openat`, `write`s |
//! | [`copy`], [`copy_reporting`] | blocking pool (+ engine) | one task as std's copy, which tokio's runs there: `openat`, `fstat`, `openat`, `copy_file_range` (io_uring has no opcode for it), `fchmod`; where the kernel refuses `copy_file_range`, `read`s and `write`s through the engine, then `fchmod` |
//! | [`create_dir`], [`create_dir_all`], [`DirBuilder::create`] | engine | `mkdirat` (and `statx` to tell an existing directory) |
//! | [`remove_file`], [`remove_dir`] | engine | `unlinkat` |
//! | [`rename`] | engine | `renameat` |
//! | [`hard_link`], [`symlink`] | engine | `linkat`, `symlinkat` |
//! | [`try_exists`] | engine | `statx` |
//! | [`metadata`], [`symlink_metadata`] | blocking pool | `statx` by std: a `std::fs::Metadata` can only come from std ([`statx`], [`symlink_statx`] use the engine) |
//! | [`read_dir`], [`ReadDir`], [`DirEntry::metadata`], [`DirEntry::file_type`] | blocking pool | `getdents64`: no opcode |
//! | [`remove_dir_all`] | blocking pool | std's (it guards against symbolic-link races with `openat` and `unlinkat` relative to directory descriptors) |
//! | [`canonicalize`], [`read_link`], [`set_permissions`] | blocking pool | `realpath`, `readlink`, `chmod`: no opcode |
//!
//! # Where writes and copies run, and why
//!
//! - A **buffered write** is an engine `write`. io_uring first tries it
//!   without blocking on file systems that allow that (XFS, btrfs: the
//!   write is a memory copy into the page cache, done inline); ext4 offers
//!   io_uring no non-blocking buffered writes, so there each write goes to
//!   a kernel worker (`iou-wrk`), a thread hand-off as tokio's
//!   `spawn_blocking` is. A `pwritev2(RWF_NOWAIT)` on the calling thread,
//!   as reads do, would not help: ext4 refuses `RWF_NOWAIT` for buffered
//!   writes (`EOPNOTSUPP`) and the others already complete inline. What
//!   costs is the number of hand-offs: `tokio::io::copy` and a `BufWriter`
//!   write 8 KiB at a time. So `File` writes **behind**: the first write
//!   starts at once (as tokio's), and while it is in flight later
//!   `poll_write`s are copied into a second buffer (up to
//!   [`File::max_buf_size`], 2 MiB) and return at once; that buffer is
//!   written, as one `write`, as soon as the one in flight completes.
//!   Many 8 KiB writes become a few of up to 2 MiB, one hand-off each.
//!   Positions, `flush` (it waits for every byte taken), `O_APPEND` (each
//!   write at the end, in order) and errors (the first error ends the
//!   chain: the bytes behind it are not written, and the error comes from
//!   the next write or `flush`, as any write's) are as without it. Not for
//!   clones sharing a position (each write takes its range when it
//!   starts), nor O_DIRECT files (the caller aligns each transfer).
//!   Memory: at most two buffers of `max_buf_size` per file.
//! - [`write()`] writes the whole contents in pieces of up to 8 MiB, each
//!   one engine `write`.
//! - [`copy`] runs as one task on the blocking pool, as tokio's (std's
//!   `fs::copy`): `copy_file_range` moves the bytes inside the kernel (no
//!   copy through user space; a reflink where the file system shares
//!   extents). io_uring has no `copy_file_range` opcode (its `splice`
//!   needs a pipe between two files), and for a small file the hand-offs,
//!   not the bytes, are the cost, so one task does the opens, the copy and
//!   the `fchmod`. Where the kernel refuses `copy_file_range` (another
//!   file system type, `/proc`), reads and writes through the engine.
//!   `crates/overlap-tokio/examples/write_copy.rs` measures each of these
//!   against `tokio::fs`.
//!
//! Errors are `std::io::Error`s with the kinds tokio's have, and with the
//! kernel's errno (`raw_os_error`) when it came from the kernel.
//!
//! As in tokio, a function's arguments live until its future completes (a
//! `tempfile::NamedTempFile` given by value keeps its file until then).
//! Unlike tokio's, every function also works when its future is polled
//! outside a tokio runtime (`futures::executor::block_on`,
//! [`overlap::block_on`]): what would run on tokio's blocking pool then runs
//! on a thread of its own.
//!
//! # Differences from `tokio::fs`
//!
//! - `metadata`, `symlink_metadata`, `File::metadata` and
//!   `DirEntry::metadata` return `std::fs::Metadata`, which only std can
//!   make, so they run on the blocking pool; [`statx`], [`symlink_statx`]
//!   and [`File::statx`] give the same facts through the engine.
//! - `File` reads and writes at a position of its own (shared with its
//!   [`File::try_clone`] copies as tokio's clones share theirs, each read,
//!   write and seek moving it atomically for all; a write takes its range
//!   when it starts), not at the descriptor's offset: another
//!   descriptor for the same open file made outside this crate (a `dup`
//!   kept before [`File::from_std`]) does not see the position move. The
//!   descriptor's offset is set when the file goes back to std.
//! - [`File::into_std`] leaves the std file at the position the reader has
//!   reached; tokio's leaves it after the bytes it had read ahead.
//! - After a write to a file opened for appending, the position is the end
//!   of the file as `statx` reports it when next needed, not the end of
//!   that write taken atomically (they differ only if someone else appends
//!   meanwhile).
//! - A write's error reported later (at the next write or `flush`) keeps
//!   its errno; tokio's keeps only its kind.
//! - A write made while another is in flight returns at once (taken behind
//!   it, see above) where tokio's waits for the one in flight; should the
//!   one in flight fail, the bytes taken behind it are not written (its
//!   error comes from the next write or `flush`, as in tokio).
//! - There is no `From<std::fs::OpenOptions>` for [`OpenOptions`] (std's
//!   options cannot be read back).
//! - `tokio_stream::wrappers::ReadDirStream::new` takes tokio's `ReadDir`
//!   and so not this one: with the feature `stream`,
//!   `overlap_tokio::wrappers::ReadDirStream` is the same wrapper (`new`,
//!   `into_inner`, `Stream<Item = io::Result<DirEntry>>`) for [`ReadDir`];
//!   switch its `use` line as this module's.
//! - On an O_DIRECT file (by [`OpenOptions::direct`] or `custom_flags`),
//!   an `AsyncRead`/`AsyncWrite` transfer whose buffer, offset or length is
//!   not aligned (the internal buffer is a `Vec`, aligned only by chance)
//!   fails with `InvalidInput` before any system call, where std's would
//!   get `EINVAL` from the kernel; use [`File::read_at`] and
//!   [`File::write_all_at`] with `overlap::AlignedBuf`s.

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::reactor::on_ring;

mod file;
mod open_options;
mod read_dir;

pub use file::File;
pub use open_options::OpenOptions;
pub use read_dir::{read_dir, DirEntry, ReadDir};
pub use std::fs::FileTimes;

/// Runs `f` on tokio's blocking pool (on a thread of its own outside a
/// tokio runtime).
pub(crate) async fn asyncify<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    spawn_blocking(f).await?
}

/// Starts `f` on tokio's blocking pool when polled inside a tokio runtime
/// (as `tokio::task::spawn_blocking`), else on a thread of its own: a
/// future of this crate polled outside tokio (`futures::executor::block_on`,
/// `overlap::block_on`) works rather than panics.
pub(crate) fn spawn_blocking<F, T>(f: F) -> Blocking<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        return Blocking::Pool(handle.spawn_blocking(f));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("overlap-tokio-blocking".into())
        .spawn(move || {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(res.map_err(|_| ()));
        });
    match spawned {
        Ok(_) => Blocking::Thread(rx),
        Err(e) => Blocking::Failed(Some(e)),
    }
}

/// The future of [`spawn_blocking`]: the result of the blocking call, or
/// why there is none (it panicked, its runtime shut down, no thread could
/// be started), as tokio reports it.
pub(crate) enum Blocking<T> {
    Pool(tokio::task::JoinHandle<T>),
    Thread(tokio::sync::oneshot::Receiver<Result<T, ()>>),
    Failed(Option<io::Error>),
}

impl<T> std::fmt::Debug for Blocking<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Blocking::Pool(_) => "Blocking::Pool",
            Blocking::Thread(_) => "Blocking::Thread",
            Blocking::Failed(_) => "Blocking::Failed",
        })
    }
}

impl<T> std::future::Future for Blocking<T> {
    type Output = io::Result<T>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<T>> {
        use std::task::{ready, Poll};
        // Every variant is Unpin.
        Poll::Ready(match self.get_mut() {
            Blocking::Pool(h) => ready!(std::pin::Pin::new(h).poll(cx)).map_err(join_err),
            Blocking::Thread(rx) => match ready!(std::pin::Pin::new(rx).poll(cx)) {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(())) | Err(_) => Err(io::Error::other("background task failed: panicked")),
            },
            Blocking::Failed(e) => Err(e
                .take()
                .unwrap_or_else(|| io::Error::other("background task failed"))),
        })
    }
}

/// A blocking task that did not finish, as tokio reports it.
pub(crate) fn join_err(e: tokio::task::JoinError) -> io::Error {
    io::Error::other(format!("background task failed: {e}"))
}

/// An engine error as std would have reported it: `not_opened` is the errno
/// the kernel gives for a descriptor not open for the access (`EBADF` for
/// reads and writes, `EINVAL` for `ftruncate`), which the engine checks
/// before submission.
pub(crate) fn engine_err(e: overlap::Error, not_opened: i32) -> io::Error {
    match e {
        overlap::Error::NotOpenedFor(_) => io::Error::from_raw_os_error(not_opened),
        overlap::Error::Closed => io::Error::from_raw_os_error(libc::EBADF),
        e => e.into(),
    }
}

fn engine() -> &'static overlap::Engine {
    crate::engine()
}

/// How much [`read`] asks for at a time once past the expected length.
const READ_CHUNK: usize = 64 << 10;
/// Files up to this size are read or written with one request; larger ones
/// in pieces of this size (a request larger than the engine's in-flight
/// budget waits until nothing else is in flight).
const WHOLE_MAX: usize = 8 << 20;
/// How much [`copy`] moves per read and write.
const COPY_CHUNK: usize = 1 << 20;

/// Reads the entire contents of a file into a bytes vector: `open`, then
/// reads through the engine until end of file.
///
/// # Errors
///
/// As `std::fs::read`: the file does not exist, may not be read, ...
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
/// use std::net::SocketAddr;
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error + 'static>> {
///     let contents = fs::read("address.txt").await?;
///     let foo: SocketAddr = String::from_utf8_lossy(&contents).parse()?;
///     Ok(())
/// }
/// ```
pub async fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    // `path` itself lives until the read is done, as in tokio (a
    // `NamedTempFile` given by value removes its file when dropped).
    let file = File::open(path.as_ref().to_path_buf()).await?;
    let file = file.engine_file();
    // The size hint from the attributes the kernel holds (no I/O, no
    // kernel worker: see `overlap::File::stat_cached`); only a hint, the
    // reads go on to the end of the file whatever it says.
    let hint = file.stat_cached().map(|st| st.len as usize).unwrap_or(0);
    // The expected length plus one byte, so that a file of exactly that
    // length is known complete. Zeroed memory of this size comes from the
    // kernel untouched (calloc), so the reads below fault in each page once.
    let mut out = Tail {
        vec: vec![0u8; hint.saturating_add(1)],
        start: 0,
        len: 0,
    };
    loop {
        if out.start == out.vec.len() {
            // The file grew, or had no known length: room for more.
            out.vec.resize(out.start + READ_CHUNK.max(out.start / 2), 0);
        }
        // Each read lands in place, in pieces well within the engine's
        // in-flight budget: no copy through a separate buffer.
        out.len = (out.vec.len() - out.start).min(WHOLE_MAX);
        let at = out.start as u64;
        let (res, back) = on_ring(file.read_at(out, at)).await;
        out = back;
        let n = res.map_err(|e| engine_err(e, libc::EBADF))?;
        if n == 0 {
            let mut vec = out.vec;
            vec.truncate(out.start);
            return Ok(vec);
        }
        out.start += n;
    }
}

/// `len` bytes of a vector from `start` on, as a read's buffer: the result
/// of [`read`] is read into in place.
struct Tail {
    vec: Vec<u8>,
    start: usize,
    len: usize,
}

// SAFETY: the bytes are the vector's heap allocation, which does not move
// when the value moves and is not resized while the value is lent to an
// operation; `start + len <= vec.len()` (checked below), all initialised.
unsafe impl overlap::IoBuf for Tail {
    fn stable_ptr(&self) -> *const u8 {
        debug_assert!(self.start + self.len <= self.vec.len());
        self.vec[self.start..].as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len.min(self.vec.len().saturating_sub(self.start))
    }
}

// SAFETY: as above; u8 accepts any byte.
unsafe impl overlap::IoBufMut for Tail {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.vec[self.start..].as_mut_ptr()
    }
}

/// Creates a future which will open a file for reading and read the entire
/// contents into a string and return said string.
///
/// # Errors
///
/// As [`read`], and [`io::ErrorKind::InvalidData`] if the contents are not
/// UTF-8.
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// let contents = fs::read_to_string("foo.txt").await?;
/// println!("foo.txt contains {} bytes", contents.len());
/// # Ok(())
/// # }
/// ```
pub async fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    let bytes = read(path).await?;
    String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

/// Creates a future that will open a file for writing and write the entire
/// contents of `contents` to it: the file is created if it does not exist
/// and truncated if it does.
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::write("foo.txt", b"Hello world!").await?;
/// # Ok(())
/// # }
/// ```
pub async fn write(path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
    let contents = contents.as_ref();
    let file = File::create(path.as_ref().to_path_buf()).await?;
    // Owned copies for the engine, one piece at a time.
    let mut buf = Vec::with_capacity(contents.len().min(WHOLE_MAX));
    for (i, piece) in contents.chunks(WHOLE_MAX).enumerate() {
        buf.clear();
        buf.extend_from_slice(piece);
        let (res, back) = file.write_all_at(buf, (i * WHOLE_MAX) as u64).await;
        res?;
        buf = back;
    }
    Ok(())
}

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
/// # Errors
///
/// As `std::fs::copy`; [`io::ErrorKind::InvalidInput`] when `from` is not a
/// regular file (nor a symbolic link to one).
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
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
    /// Of those, bytes the kernel copied by `copy_file_range`.
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
/// use overlap_tokio::fs;
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
    // One task on the blocking pool does what std's copy does (open,
    // `fstat`, open, `copy_file_range`, `fchmod`): for a small file the
    // hand-offs, not the bytes, are the cost, and tokio's copy has one.
    let (from, to) = (from.as_ref().to_owned(), to.as_ref().to_owned());
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
    Ok(report)
}

/// How far `copy_file_range` got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelCopy {
    /// To the end of the source.
    Done,
    /// The kernel refused (or a first call copied nothing): the rest goes
    /// by reads and writes.
    Refused,
}

/// Most bytes one `copy_file_range` call is asked for.
const KERNEL_COPY_CHUNK: usize = 1 << 30;

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
    }
}

/// Copies from `at` to the end of `src` by reads and writes through the
/// engine; returns how many bytes.
async fn read_write_copy(src: &File, dst: &File, at: u64, len_hint: u64) -> io::Result<u64> {
    let mut copied = 0u64;
    let chunk = COPY_CHUNK.min(len_hint.saturating_sub(at).max(4096) as usize);
    let mut buf = vec![0u8; chunk];
    loop {
        buf.resize(chunk, 0);
        let (res, back) = src.read_at(buf, at + copied).await;
        buf = back;
        let n = res?;
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

/// Creates a new, empty directory at the provided path (`mkdirat` through
/// the engine, mode `0o777` less the umask).
///
/// # Errors
///
/// As `std::fs::create_dir`: the parent does not exist
/// ([`NotFound`](io::ErrorKind::NotFound)), the path exists
/// ([`AlreadyExists`](io::ErrorKind::AlreadyExists)), permission is denied.
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     fs::create_dir("/some/dir").await?;
///     Ok(())
/// }
/// ```
pub async fn create_dir(path: impl AsRef<Path>) -> io::Result<()> {
    mkdir(path.as_ref(), 0o777).await
}

async fn mkdir(path: &Path, mode: u32) -> io::Result<()> {
    on_ring(overlap::path::create_dir(engine(), path, mode))
        .await
        .map_err(io::Error::from)
}

async fn is_dir(path: &Path) -> bool {
    on_ring(overlap::path::metadata(engine(), path))
        .await
        .is_ok_and(|st| st.is_dir())
}

/// `mkdir -p`: creates every missing directory on the way, as
/// `std::fs::create_dir_all` does (an existing directory, or one created
/// concurrently, is success).
async fn mkdir_all(path: &Path, mode: u32) -> io::Result<()> {
    if path.as_os_str().is_empty() {
        return Ok(());
    }
    // Walk up to the deepest ancestor that exists, then create downwards.
    let mut missing: Vec<&Path> = Vec::new();
    let mut cur = path;
    loop {
        match mkdir(cur, mode).await {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(cur);
                match cur.parent() {
                    Some(p) if !p.as_os_str().is_empty() => cur = p,
                    // Relative to the working directory: creating below
                    // reports the real error.
                    Some(_) => break,
                    None => return Err(io::Error::other("failed to create whole tree")),
                }
            }
            Err(_) if is_dir(cur).await => break,
            Err(e) => return Err(e),
        }
    }
    for p in missing.into_iter().rev() {
        match mkdir(p, mode).await {
            Ok(()) => {}
            Err(_) if is_dir(p).await => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Recursively creates a directory and all of its parent components if
/// they are missing (`mkdirat` through the engine for each).
///
/// # Errors
///
/// As `std::fs::create_dir_all`; a directory that already exists (or is
/// created meanwhile by someone else) is not an error.
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     fs::create_dir_all("/some/dir").await?;
///     Ok(())
/// }
/// ```
pub async fn create_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    mkdir_all(path.as_ref(), 0o777).await
}

/// A builder for creating directories in various manners:
/// `tokio::fs::DirBuilder`, creating through the engine.
#[derive(Debug, Default, Clone)]
pub struct DirBuilder {
    recursive: bool,
    mode: Option<u32>,
}

impl DirBuilder {
    /// Creates a new set of options with default mode/security settings
    /// for all platforms and also non-recursive.
    ///
    /// # Examples
    ///
    /// ```
    /// use overlap_tokio::fs::DirBuilder;
    ///
    /// let builder = DirBuilder::new();
    /// ```
    pub fn new() -> Self {
        DirBuilder::default()
    }

    /// Indicates whether to create directories recursively (including all
    /// parent directories). Parents that do not exist are created with the
    /// same security and permissions settings. Default `false`.
    ///
    /// # Examples
    ///
    /// ```
    /// use overlap_tokio::fs::DirBuilder;
    ///
    /// let mut builder = DirBuilder::new();
    /// builder.recursive(true);
    /// ```
    pub fn recursive(&mut self, recursive: bool) -> &mut Self {
        self.recursive = recursive;
        self
    }

    /// Sets the mode to create new directories with (default `0o777`, less
    /// the umask).
    ///
    /// # Examples
    ///
    /// ```
    /// use overlap_tokio::fs::DirBuilder;
    ///
    /// let mut builder = DirBuilder::new();
    /// builder.mode(0o775);
    /// ```
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = Some(mode);
        self
    }

    /// Creates the specified directory with the configured options.
    ///
    /// # Errors
    ///
    /// As [`create_dir`], or with `recursive(true)` as [`create_dir_all`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlap_tokio::fs::DirBuilder;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     DirBuilder::new()
    ///         .recursive(true)
    ///         .create("/tmp/foo/bar/baz")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub async fn create(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let mode = self.mode.unwrap_or(0o777);
        if self.recursive {
            mkdir_all(path.as_ref(), mode).await
        } else {
            mkdir(path.as_ref(), mode).await
        }
    }
}

/// Removes a file from the filesystem (`unlinkat` through the engine).
///
/// # Errors
///
/// As `std::fs::remove_file`: the path does not exist, is a directory, or
/// may not be removed.
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::remove_file("foo.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    let task = overlap::path::remove_file(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Removes an existing, empty directory (`unlinkat` with `AT_REMOVEDIR`
/// through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::remove_dir("/some/dir").await?;
/// # Ok(())
/// # }
/// ```
pub async fn remove_dir(path: impl AsRef<Path>) -> io::Result<()> {
    let task = overlap::path::remove_dir(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Removes a directory at this path, after removing all its contents. Use
/// carefully! (std's, on tokio's blocking pool.)
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::remove_dir_all("/some/dir").await?;
/// # Ok(())
/// # }
/// ```
pub async fn remove_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::remove_dir_all(path)).await
}

/// Renames a file or directory to a new name, replacing the original file
/// if `to` already exists (`renameat` through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::rename("a.txt", "b.txt").await?; // Rename a.txt to b.txt
/// # Ok(())
/// # }
/// ```
pub async fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let task = overlap::path::rename(engine(), from.as_ref(), to.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Creates a new hard link on the filesystem: `link` names the same file
/// as `original` (`linkat` through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// #[tokio::main]
/// async fn main() -> std::io::Result<()> {
///     fs::hard_link("a.txt", "b.txt").await?; // Hard link a.txt to b.txt
///     Ok(())
/// }
/// ```
pub async fn hard_link(original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
    let task = overlap::path::hard_link(engine(), original.as_ref(), link.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Creates a new symbolic link on the filesystem: `link` points to
/// `original` (`symlinkat` through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::symlink("a.txt", "b.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn symlink(original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
    let task = overlap::path::symlink(engine(), original.as_ref(), link.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Given a path, queries the file system to get information about a file,
/// directory, etc., following symbolic links. (A `std::fs::Metadata` can
/// only come from std: this runs on tokio's blocking pool; [`statx`] asks
/// the engine.)
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// #[tokio::main]
/// async fn main() -> std::io::Result<()> {
///     let attr = fs::metadata("/some/file/path.txt").await?;
///     // inspect attr ...
///     Ok(())
/// }
/// ```
pub async fn metadata(path: impl AsRef<Path>) -> io::Result<std::fs::Metadata> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::metadata(path)).await
}

/// Queries the file system metadata for a path without following a
/// symbolic link (on tokio's blocking pool, as [`metadata`];
/// [`symlink_statx`] asks the engine).
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// let attr = fs::symlink_metadata("/some/file/path.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn symlink_metadata(path: impl AsRef<Path>) -> io::Result<std::fs::Metadata> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::symlink_metadata(path)).await
}

/// Beyond tokio: what [`metadata`] reports, by `statx` through the engine,
/// as the engine's [`overlap::path::Stat`].
///
/// ```
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// use overlap_tokio::fs;
/// let dir = tempfile::tempdir()?;
/// fs::write(dir.path().join("f"), b"12345").await?;
/// let st = fs::statx(dir.path().join("f")).await?;
/// assert!(st.is_file());
/// assert_eq!(st.len, 5);
/// # Ok::<(), std::io::Error>(()) })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub async fn statx(path: impl AsRef<Path>) -> io::Result<overlap::path::Stat> {
    let task = overlap::path::metadata(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Beyond tokio: what [`symlink_metadata`] reports, by `statx` with
/// `AT_SYMLINK_NOFOLLOW` through the engine.
pub async fn symlink_statx(path: impl AsRef<Path>) -> io::Result<overlap::path::Stat> {
    let task = overlap::path::symlink_metadata(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Returns `Ok(true)` if the path points at an existing entity, following
/// symbolic links (`statx` through the engine). `Ok(false)` only when the
/// path does not exist; an error (such as permission denied) means that
/// existence cannot be told. A broken symbolic link is `Ok(false)`.
///
/// # Examples
///
/// ```no_run
/// # use overlap_tokio::fs;
/// # async fn dox() -> std::io::Result<()> {
/// fs::try_exists("foo.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn try_exists(path: impl AsRef<Path>) -> io::Result<bool> {
    let task = overlap::path::try_exists(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Returns the canonical, absolute form of a path with all intermediate
/// components normalized and symbolic links resolved (`realpath`, on
/// tokio's blocking pool).
///
/// # Examples
///
/// ```no_run
/// use overlap_tokio::fs;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     let path = fs::canonicalize("../a/../foo.txt").await?;
///     Ok(())
/// }
/// ```
pub async fn canonicalize(path: impl AsRef<Path>) -> io::Result<PathBuf> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::canonicalize(path)).await
}

/// Reads a symbolic link, returning the file that the link points to (on
/// tokio's blocking pool).
pub async fn read_link(path: impl AsRef<Path>) -> io::Result<PathBuf> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::read_link(path)).await
}

/// Changes the permissions found on a file or a directory (`chmod`, on
/// tokio's blocking pool).
pub async fn set_permissions(path: impl AsRef<Path>, perm: std::fs::Permissions) -> io::Result<()> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::set_permissions(path, perm)).await
}
