//! [`File`]: `tokio::fs::File` on the engine.

use std::fmt;
use std::io::{self, Seek, SeekFrom};
#[cfg(unix)]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
#[cfg(windows)]
use std::os::windows::io::{
    AsHandle, AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle, RawHandle,
};
use std::sync::Arc;

use tokio::sync::Mutex;
#[cfg(windows)]
use windows_sys::Win32::Foundation::{ERROR_INVALID_HANDLE, INVALID_HANDLE_VALUE};

use super::support::{asyncify, code, engine_err};
use crate::reactor::on_ring;

/// The largest transfer one `poll_read` or `poll_write` makes, as tokio's
/// (2 MiB); [`File::set_max_buf_size`] changes it.
pub(crate) const DEFAULT_MAX_BUF_SIZE: usize = 2 * 1024 * 1024;

#[macro_use]
mod cursor;
mod leftover;
mod stream;
#[cfg(windows)]
mod windows;

use cursor::{Cursor, AT_END};
use stream::{Buf, Inner, State};

/// A reference to an open file on the filesystem: `tokio::fs::File`, whose
/// reads, writes, syncs and truncation are engine operations (io_uring where
/// the kernel allows it).
///
/// An instance of a `File` can be read and/or written depending on what
/// options it was opened with. Files also implement
/// [`AsyncSeek`](tokio::io::AsyncSeek) to alter the logical cursor that the
/// file contains internally.
///
/// As tokio's, the file keeps one operation in flight at a time and a
/// buffer: a write copies the data, starts the write and returns at once;
/// its error, if any, comes from the next write, or from `flush`. Call
/// [`flush`](tokio::io::AsyncWriteExt::flush) before dropping a file to know
/// that its writes are done and succeeded. A file dropped with a write in
/// flight (and bytes behind it) still writes them all, on tokio's blocking
/// pool: a runtime that ends right after (dropped, `shutdown_timeout`, the
/// end of `#[tokio::main]`) does not cut them short (see the
/// [module docs](super#acknowledged-bytes-drop-the-runtimes-end-the-budget)). Reading after a seek, or after a write, reads what is
/// there: the position is the file's.
///
/// Unlike tokio's, reads and writes are positional (`pread`/`pwrite` at the
/// file's own cursor, kept here), so no `lseek` is made per operation.
///
/// # Examples
///
/// Create a new file and asynchronously write bytes to it:
///
/// ```no_run
/// use overlapped_tokio::fs::File;
/// use tokio::io::AsyncWriteExt; // for write_all()
///
/// # async fn dox() -> std::io::Result<()> {
/// let mut file = File::create("foo.txt").await?;
/// file.write_all(b"hello, world!").await?;
/// # Ok(())
/// # }
/// ```
///
/// Read the contents of a file into a buffer:
///
/// ```no_run
/// use overlapped_tokio::fs::File;
/// use tokio::io::AsyncReadExt; // for read_to_end()
///
/// # async fn dox() -> std::io::Result<()> {
/// let mut file = File::open("foo.txt").await?;
///
/// let mut contents = vec![];
/// file.read_to_end(&mut contents).await?;
///
/// println!("len = {}", contents.len());
/// # Ok(())
/// # }
/// ```
pub struct File {
    file: overlapped::File,
    cursor: Arc<Cursor>,
    inner: Mutex<Inner>,
    max_buf_size: usize,
    /// Whether `poll_write` may add to a write in flight (write-behind):
    /// not on O_DIRECT files, whose transfers the caller aligns.
    write_behind: bool,
}

impl File {
    fn new(file: overlapped::File, pos: u64, max_buf_size: usize) -> File {
        debug_assert!(
            (1..=overlapped::MAX_RW_BYTES).contains(&max_buf_size),
            "a file's buffer holds one operation of the engine"
        );
        File {
            write_behind: !file.is_direct(),
            file,
            cursor: Arc::new(Cursor::new(pos)),
            inner: Mutex::new(Inner {
                state: State::Idle(Buf::default()),
                behind: Default::default(),
                last_write_err: None,
                pos,
                seek_done_here: false,
                busy_writing: false,
            }),
            max_buf_size,
        }
    }

    pub(crate) fn from_engine(file: overlapped::File) -> File {
        File::new(file, 0, DEFAULT_MAX_BUF_SIZE)
    }

    /// Converts a [`std::fs::File`] to a `File`. The file's position is
    /// where the std file's was.
    ///
    /// On Windows a std file's handle is synchronous and the engine's I/O
    /// overlapped: the same file is opened again for overlapped I/O
    /// (`ReOpenFile`, same access, buffering and write-through; every
    /// sharing allowed) and the std handle closed. A handle opened for
    /// overlapped I/O already is adopted as it is.
    ///
    /// Where the file cannot be opened again (its first open shares
    /// neither reading nor writing with later opens, or its access was
    /// taken away since), or the engine refuses the overlapped handle (one
    /// already associated with another completion port), the std handle
    /// itself (or a duplicate of it) is adopted
    /// (`overlapped::File::from_synchronous_handle`): its reads and writes
    /// are then blocking calls on the engine's bounded thread pool, which
    /// Windows performs one at a time on that file, and everything else is
    /// as for any file. Should even that fail (a std file made from a raw
    /// value that is no kernel handle), the file is one whose every
    /// operation fails with `ERROR_INVALID_HANDLE`, as a closed file's: the
    /// error comes with the first use, since this conversion cannot fail.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// // This line could block. It is not recommended to do this on the Tokio
    /// // runtime.
    /// let std_file = std::fs::File::open("foo.txt").unwrap();
    /// let file = overlapped_tokio::fs::File::from_std(std_file);
    /// ```
    pub fn from_std(std: std::fs::File) -> File {
        // lseek(fd, 0, SEEK_CUR) reads a number; it does not wait for I/O.
        let pos = (&std).stream_position().unwrap_or(0);
        File::new(Self::adopt(std), pos, DEFAULT_MAX_BUF_SIZE)
    }

    #[cfg(unix)]
    fn adopt(std: std::fs::File) -> overlapped::File {
        overlapped::File::from_fd(crate::engine(), std.into())
    }

    #[cfg(windows)]
    fn adopt(std: std::fs::File) -> overlapped::File {
        let engine = crate::engine();
        // The handle for the engine's overlapped I/O, and one on the same
        // file to adopt as it is should the engine refuse that: `std`
        // itself, or where `std` is the first (overlapped already), a
        // duplicate of it. The one not adopted is closed here.
        let (first, spare) = match windows::overlapped(&std) {
            Ok(Some(reopened)) => (Ok(reopened), Some(std)),
            Ok(None) => {
                let spare = std.try_clone().ok();
                (Ok(std.into()), spare)
            }
            Err(e) => (Err(e), Some(std)),
        };
        let first = first
            .map_err(overlapped::Error::from)
            .and_then(|h| overlapped::File::from_handle(engine, h));
        let adopted = match (first, spare) {
            (Ok(file), _) => Ok(file),
            (Err(_), Some(spare)) => {
                overlapped::File::from_synchronous_handle(engine, spare.into())
            }
            (Err(e), None) => Err(e),
        };
        match adopted {
            Ok(file) => {
                debug_assert!(
                    !file.as_raw_handle().is_null(),
                    "an adopted file holds its handle"
                );
                file
            }
            // Not a kernel handle (only a std file made from a raw value
            // can hold one): a file whose every operation fails, as one
            // closed, with the system's word for it (ERROR_INVALID_HANDLE).
            Err(_) => overlapped::File::closed(engine),
        }
    }

    /// Attempts to sync all OS-internal metadata to disk (`fsync` through
    /// the engine), after the write in flight, if any.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut file = File::create("foo.txt").await?;
    /// file.write_all(b"hello, world!").await?;
    /// file.sync_all().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sync_all(&self) -> io::Result<()> {
        let mut inner = self.inner.lock().await;
        inner.complete_inflight().await;
        on_ring(self.file.sync_all())
            .await
            .map_err(|e| engine_err(e, code::NOT_OPENED))
    }

    /// As [`sync_all`](Self::sync_all), but may skip metadata that is not
    /// needed to read the data back (`fdatasync`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut file = File::create("foo.txt").await?;
    /// file.write_all(b"hello, world!").await?;
    /// file.sync_data().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sync_data(&self) -> io::Result<()> {
        let mut inner = self.inner.lock().await;
        inner.complete_inflight().await;
        on_ring(self.file.sync_data())
            .await
            .map_err(|e| engine_err(e, code::NOT_OPENED))
    }

    /// Truncates or extends the underlying file, updating the size of this
    /// file to become `size` (`ftruncate` through the engine). Extending
    /// fills with zeros. The position does not change.
    ///
    /// # Errors
    ///
    /// This function will return an error if the file is not opened for
    /// writing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut file = File::create("foo.txt").await?;
    /// file.write_all(b"hello, world!").await?;
    /// file.set_len(10).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_len(&self, size: u64) -> io::Result<()> {
        let mut inner = self.inner.lock().await;
        inner.complete_inflight().await;
        if let State::Idle(buf) = &mut inner.state {
            self.cursor.unread_in_turn(buf.discard()).await;
        }
        on_ring(self.file.set_len(size))
            .await
            .map_err(|e| engine_err(e, code::SET_LEN_NOT_OPENED))
    }

    /// Queries metadata about the underlying file. (A `std::fs::Metadata`
    /// can only be had from std, so this runs `fstat` on tokio's blocking
    /// pool; [`File::statx`] asks the engine.)
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let file = File::open("foo.txt").await?;
    /// let metadata = file.metadata().await?;
    ///
    /// println!("{:?}", metadata);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn metadata(&self) -> io::Result<std::fs::Metadata> {
        let std = self.dup_std()?;
        asyncify(move || std.metadata()).await
    }

    /// Creates a new `File` instance that shares the same underlying file
    /// handle as the existing `File` instance. Reads, writes, and seeks will
    /// affect both File instances simultaneously.
    ///
    /// Clones share one position, as tokio's do (theirs share the kernel's
    /// open file description): each read, write and seek moves it for all,
    /// atomically. A write takes its range of the position when it starts,
    /// that is before `write` returns, so a write by a clone afterwards
    /// starts after it even while the first is still in flight. Operations
    /// on clones take turns on the position as the kernel's would (a read
    /// waits for a clone's read or seek in flight); each clone keeps its own
    /// buffer and its own operation in flight.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let file = File::open("foo.txt").await?;
    /// let file_clone = file.try_clone().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_clone(&self) -> io::Result<File> {
        let pos = {
            let mut inner = self.inner.lock().await;
            inner.complete_inflight().await;
            inner.pos
        };
        let file = self
            .file
            .try_clone()
            .map_err(|e| engine_err(e, code::NOT_OPENED))?;
        // From now on the two take turns on the cursor.
        self.cursor.share();
        Ok(File {
            write_behind: self.write_behind,
            file,
            cursor: self.cursor.clone(),
            inner: Mutex::new(Inner {
                state: State::Idle(Buf::default()),
                behind: Default::default(),
                last_write_err: None,
                pos,
                seek_done_here: false,
                busy_writing: false,
            }),
            max_buf_size: self.max_buf_size,
        })
    }

    /// Destructures `File` into a [`std::fs::File`]. This function is async
    /// to allow any in-flight operations to complete. The std file's
    /// position is this file's.
    ///
    /// Use `File::try_into_std` to attempt conversion immediately.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let tokio_file = File::open("foo.txt").await?;
    /// let std_file = tokio_file.into_std().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn into_std(mut self) -> std::fs::File {
        self.inner.get_mut().complete_inflight().await;
        // Where the cursor is the end of the file, the std file's offset is
        // put there (SEEK_END) rather than asked for.
        match self.try_into_std() {
            Ok(std) => std,
            // With nothing in flight, nothing else holds the engine's file
            // (it is never handed out): only a file with no handle (see
            // `from_std`) comes here, or, should it happen anyway, a shared
            // one, for which a duplicate of the descriptor serves.
            Err(mut me) => match me.dup_std() {
                Ok(std) => {
                    let _ = (&std).seek(me.std_seek());
                    std
                }
                Err(e) => Self::std_without_handle(e),
            },
        }
    }

    /// The std file of a file that holds no handle: on Windows one whose
    /// every operation fails (`INVALID_HANDLE_VALUE`), as this one's did.
    /// Elsewhere every file holds its descriptor, and this is unreachable.
    #[cfg(windows)]
    fn std_without_handle(_why: io::Error) -> std::fs::File {
        // SAFETY: INVALID_HANDLE_VALUE is a value `OwnedHandle` may hold
        // (std documents it); closing it closes nothing.
        unsafe { std::fs::File::from_raw_handle(INVALID_HANDLE_VALUE as RawHandle) }
    }

    #[cfg(unix)]
    fn std_without_handle(why: io::Error) -> std::fs::File {
        panic!("overlapped-tokio: no descriptor for into_std: {why}")
    }

    /// Tries to immediately destructure `File` into a [`std::fs::File`].
    ///
    /// # Errors
    ///
    /// This function will return an error containing the file if some
    /// operation is in-flight.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let tokio_file = File::open("foo.txt").await?;
    /// let std_file = tokio_file.try_into_std().unwrap();
    /// # Ok(())
    /// # }
    /// ```
    #[allow(clippy::result_large_err)]
    pub fn try_into_std(mut self) -> Result<std::fs::File, Self> {
        if matches!(self.inner.get_mut().state, State::Busy(_)) {
            return Err(self);
        }
        let seek = self.std_seek();
        let File {
            file,
            cursor,
            inner,
            max_buf_size,
            write_behind,
        } = self;
        match Self::give_back(file) {
            Ok(std) => {
                let _ = (&std).seek(seek);
                Ok(std)
            }
            Err(file) => Err(File {
                file,
                cursor,
                inner,
                max_buf_size,
                write_behind,
            }),
        }
    }

    /// The std file of the engine's, when it is its only handle and idle.
    #[cfg(unix)]
    fn give_back(file: overlapped::File) -> Result<std::fs::File, overlapped::File> {
        file.into_fd().map(std::fs::File::from)
    }

    /// The std file of the engine's, when it is its only handle and idle:
    /// opened again for synchronous I/O, as std's own files are.
    #[cfg(windows)]
    fn give_back(file: overlapped::File) -> Result<std::fs::File, overlapped::File> {
        file.into_handle().map(windows::synchronous_std)
    }

    /// Where a std file's offset goes for this file's position (idle).
    fn std_seek(&mut self) -> SeekFrom {
        let unread = match &self.inner.get_mut().state {
            State::Idle(buf) => buf.remaining() as u64,
            State::Busy(_) => 0,
        };
        match self.cursor.get() {
            AT_END => SeekFrom::End(0),
            pos => SeekFrom::Start(pos.saturating_sub(unread)),
        }
    }

    /// A `std::fs::File` on a duplicate of the descriptor, for the calls
    /// that only std makes.
    pub(crate) fn dup_std(&self) -> io::Result<std::fs::File> {
        #[cfg(unix)]
        let dup = self.as_fd().try_clone_to_owned()?;
        #[cfg(windows)]
        let dup = {
            // A file `from_std` could not adopt holds no handle: its raw
            // value, INVALID_HANDLE_VALUE, is also the process's
            // pseudo-handle, which must not be duplicated as a file.
            if self.file.as_raw_fd() < 0 {
                return Err(io::Error::from_raw_os_error(ERROR_INVALID_HANDLE as i32));
            }
            self.as_handle().try_clone_to_owned()?
        };
        Ok(std::fs::File::from(dup))
    }

    /// Changes the permissions on the underlying file (`fchmod`, on tokio's
    /// blocking pool: io_uring has no opcode for it).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let file = File::open("foo.txt").await?;
    /// let mut perms = file.metadata().await?.permissions();
    /// perms.set_readonly(true);
    /// file.set_permissions(perms).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_permissions(&self, perm: std::fs::Permissions) -> io::Result<()> {
        let std = self.dup_std()?;
        asyncify(move || std.set_permissions(perm)).await
    }

    /// Changes the timestamps on the underlying file (on tokio's blocking
    /// pool), after the operation in flight, if any.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::{File, FileTimes};
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let file = File::open("foo.txt").await?;
    /// let times = FileTimes::new()
    ///     .set_accessed(std::time::SystemTime::now())
    ///     .set_modified(std::time::SystemTime::now());
    /// file.set_times(times).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_times(&self, times: std::fs::FileTimes) -> io::Result<()> {
        self.inner.lock().await.complete_inflight().await;
        let std = self.dup_std()?;
        asyncify(move || std.set_times(times)).await
    }

    /// Changes the modification time of the underlying file, as
    /// [`set_times`](Self::set_times) with only that time set.
    pub async fn set_modified(&self, time: std::time::SystemTime) -> io::Result<()> {
        self.set_times(std::fs::FileTimes::new().set_modified(time))
            .await
    }

    /// Sets the maximum buffer size for the underlying
    /// [`AsyncRead`](tokio::io::AsyncRead) /
    /// [`AsyncWrite`](tokio::io::AsyncWrite) operation (default 2 MiB): the
    /// most one read or write transfers. A size above the engine's largest
    /// transfer ([`overlapped::MAX_RW_BYTES`]) is taken as that.
    ///
    /// # Panics
    ///
    /// This function panics if `max_buf_size` is 0 (as tokio's).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut file = File::open("foo.txt").await?;
    ///
    /// // Set maximum buffer size to 8 MiB
    /// file.set_max_buf_size(8 * 1024 * 1024);
    ///
    /// let mut buf = vec![1; 1024 * 1024 * 1024];
    ///
    /// // Write the 1 GiB buffer in chunks up to 8 MiB each.
    /// file.write_all(&mut buf).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn set_max_buf_size(&mut self, max_buf_size: usize) {
        assert!(max_buf_size > 0, "`max_buf_size` must be greater than 0");
        self.max_buf_size = max_buf_size.min(overlapped::MAX_RW_BYTES);
        debug_assert!(
            (1..=overlapped::MAX_RW_BYTES).contains(&self.max_buf_size),
            "a file's buffer holds one operation of the engine"
        );
    }

    /// Gets the maximum buffer size for the underlying
    /// [`AsyncRead`](tokio::io::AsyncRead) /
    /// [`AsyncWrite`](tokio::io::AsyncWrite) operation.
    pub fn max_buf_size(&self) -> usize {
        self.max_buf_size
    }

    // ------------------------------------------------------------ beyond tokio

    /// The engine's file underneath. Not public: a clone of it could close
    /// the descriptor under [`AsFd`] borrows.
    pub(crate) fn engine_file(&self) -> &overlapped::File {
        &self.file
    }

    /// The direct-I/O alignment of the file (what buffers, offsets and
    /// lengths must be multiples of when it was opened with
    /// [`OpenOptions::direct`](super::OpenOptions::direct)).
    pub fn alignment(&self) -> overlapped::Alignment {
        self.file.alignment()
    }

    /// Whether the file was opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.file.is_direct()
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf` (a `Vec<u8>`,
    /// an `overlapped::AlignedBuf`, ...), which comes back with the count. The
    /// file's cursor does not move, and the read does not wait for this
    /// file's `AsyncRead`/`AsyncWrite` operation in flight.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// use overlapped_tokio::fs;
    /// let dir = tempfile::tempdir()?;
    /// fs::write(dir.path().join("f"), b"hello world").await?;
    /// let file = fs::File::open(dir.path().join("f")).await?;
    /// let (n, buf) = file.read_at(vec![0u8; 5], 6).await;
    /// assert_eq!(&buf[..n?], b"world");
    /// # Ok::<(), std::io::Error>(()) })?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn read_at<B: overlapped::IoBufMut>(
        &self,
        buf: B,
        offset: u64,
    ) -> (io::Result<usize>, B) {
        let (res, buf) = on_ring(self.file.read_at(buf, offset)).await;
        debug_assert!(
            res.as_ref().map_or(true, |&n| n <= buf.bytes_len()),
            "a read returns at most the buffer's length"
        );
        (res.map_err(|e| engine_err(e, code::NOT_OPENED)), buf)
    }

    /// Writes `buf` at `offset` (fewer bytes may be written; see
    /// [`write_all_at`](Self::write_all_at)); the cursor does not move. On a
    /// file opened for appending the data goes to the end (Linux's rule).
    pub async fn write_at<B: overlapped::IoBuf>(
        &self,
        buf: B,
        offset: u64,
    ) -> (io::Result<usize>, B) {
        let (res, buf) = on_ring(self.file.write_at(buf, offset)).await;
        debug_assert!(
            res.as_ref().map_or(true, |&n| n <= buf.bytes_len()),
            "a write takes at most the buffer's length"
        );
        (res.map_err(|e| engine_err(e, code::NOT_OPENED)), buf)
    }

    /// Fills `buf` from `offset`, or fails with
    /// [`io::ErrorKind::UnexpectedEof`]; the cursor does not move.
    pub async fn read_exact_at<B: overlapped::IoBufMut>(
        &self,
        buf: B,
        offset: u64,
    ) -> (io::Result<()>, B) {
        let (res, buf) = on_ring(self.file.read_exact_at(buf, offset)).await;
        (res.map_err(|e| engine_err(e, code::NOT_OPENED)), buf)
    }

    /// Writes all of `buf` at `offset`; the cursor does not move.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// use overlapped_tokio::fs;
    /// let dir = tempfile::tempdir()?;
    /// let file = fs::File::create_new(dir.path().join("f")).await?;
    /// let (res, _buf) = file.write_all_at(b"abc".to_vec(), 4).await;
    /// res?;
    /// assert_eq!(fs::read(dir.path().join("f")).await?, b"\0\0\0\0abc");
    /// # Ok::<(), std::io::Error>(()) })?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn write_all_at<B: overlapped::IoBuf>(
        &self,
        buf: B,
        offset: u64,
    ) -> (io::Result<()>, B) {
        let (res, buf) = on_ring(self.file.write_all_at(buf, offset)).await;
        (res.map_err(|e| engine_err(e, code::NOT_OPENED)), buf)
    }

    /// Reserves `len` bytes from `offset` (`fallocate`): the file grows if
    /// needed, the new range reads as zeros, and later writes there do not
    /// extend the file.
    pub async fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        on_ring(self.file.allocate(offset, len))
            .await
            .map_err(|e| engine_err(e, code::NOT_OPENED))
    }

    /// Type, size, permissions and times of the file by `statx` through the
    /// engine (what [`metadata`](Self::metadata) gives as std's type, from
    /// the blocking pool).
    pub async fn statx(&self) -> io::Result<overlapped::path::Stat> {
        on_ring(self.file.stat())
            .await
            .map_err(|e| engine_err(e, code::NOT_OPENED))
    }
}

impl From<std::fs::File> for File {
    fn from(std: std::fs::File) -> Self {
        Self::from_std(std)
    }
}

#[cfg(unix)]
impl From<OwnedFd> for File {
    fn from(fd: OwnedFd) -> Self {
        Self::from_std(std::fs::File::from(fd))
    }
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("overlapped_tokio::fs::File")
            .field("file", &self.file)
            .finish()
    }
}

#[cfg(unix)]
impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

#[cfg(unix)]
impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to `self.file`, which this crate
        // never closes; it stays open at least as long as `self` is borrowed.
        unsafe { BorrowedFd::borrow_raw(self.file.as_raw_fd()) }
    }
}

#[cfg(unix)]
impl FromRawFd for File {
    unsafe fn from_raw_fd(fd: RawFd) -> Self {
        // SAFETY: the caller's contract is std's `FromRawFd::from_raw_fd`.
        unsafe { std::fs::File::from_raw_fd(fd) }.into()
    }
}

#[cfg(windows)]
impl From<OwnedHandle> for File {
    fn from(handle: OwnedHandle) -> Self {
        Self::from_std(std::fs::File::from(handle))
    }
}

#[cfg(windows)]
impl AsRawHandle for File {
    fn as_raw_handle(&self) -> RawHandle {
        self.file.as_raw_handle()
    }
}

#[cfg(windows)]
impl AsHandle for File {
    fn as_handle(&self) -> BorrowedHandle<'_> {
        // SAFETY: the handle belongs to `self.file`, which this crate never
        // closes; it stays open at least as long as `self` is borrowed.
        unsafe { BorrowedHandle::borrow_raw(self.file.as_raw_handle()) }
    }
}

#[cfg(windows)]
impl FromRawHandle for File {
    unsafe fn from_raw_handle(handle: RawHandle) -> Self {
        // SAFETY: the caller's contract is std's
        // `FromRawHandle::from_raw_handle`.
        unsafe { std::fs::File::from_raw_handle(handle) }.into()
    }
}
