//! Files and how to open them.

use std::mem::MaybeUninit;
#[cfg(unix)]
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;

use crate::buf::{AlignedBufPool, IoBuf, IoBufMut};
use crate::engine::Engine;
use crate::error::{AlignmentPart, Error, Result};
use crate::future::{run_op, Op, Task};
use crate::operation::{self, OpKind};
use crate::request::{Owner, Request};

pub use crate::operation::MAX_RW_BYTES;

mod align;
pub(crate) mod inner;
mod meta;
mod options;
#[cfg(windows)]
mod windows;

use align::alignment_of;
pub use align::Alignment;
pub(crate) use inner::{FileInner, FileRef};
use inner::{Mode, CLOSED};
pub use meta::Metadata;
pub use options::{Access, OpenOptions};

/// An open file. Cheap to clone (handles share the descriptor); closing any
/// handle closes it for all, after the operations in flight finish.
///
/// Every operation takes its buffer by value and returns it with the result.
#[derive(Clone)]
pub struct File {
    inner: Arc<FileInner>,
    engine: Engine,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("fd", &self.inner.fd())
            .field("direct", &self.inner.direct)
            .field("alignment", &self.inner.align.get())
            .finish()
    }
}

/// The access an operation needs the file to have been opened with.
#[derive(Clone, Copy)]
enum Need {
    Read,
    Write,
    /// Any open file (sync, metadata).
    Open,
}

pub(crate) enum Prepared<B> {
    Done(Result<usize>, B),
    Req(Request<B>),
}

impl<B> Prepared<B> {
    /// No page-cache attempt on the submitting thread for this request.
    fn skip_fast_path(&mut self) {
        if let Prepared::Req(req) = self {
            req.fast_path = false;
        }
    }
}

impl File {
    /// Opens an existing file for reading (buffered).
    pub fn open(engine: &Engine, path: impl AsRef<Path>) -> Task<Result<File>> {
        OpenOptions::new().read(true).open(engine, path)
    }

    /// Creates or truncates a file for reading and writing (buffered).
    pub fn create(engine: &Engine, path: impl AsRef<Path>) -> Task<Result<File>> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(engine, path)
    }

    /// The direct-I/O alignment this file requires (enforced when it was
    /// opened with `direct(true)`, and then read when it was opened). Of a
    /// file opened without O_DIRECT, the first call reads it on the calling
    /// thread (`statx` with `AT_STATX_DONT_SYNC` of the descriptor, and the
    /// device's logical block size from sysfs when the file system does not
    /// report one; on Windows the volume's sector sizes, `FileStorageInfo`).
    pub fn alignment(&self) -> Alignment {
        if let Some(a) = self.inner.align.get() {
            return *a;
        }
        // Counted in as an operation, so that a concurrent close cannot
        // free the descriptor's number (and another open reuse it) while
        // it is asked.
        if !self.inner.try_start() {
            return self.inner.align(); // closed: the default, not remembered
        }
        // SAFETY: RawStat is plain old data; all-zero is a valid value.
        let mut st: crate::sys::RawStat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is writable for the call; the descriptor stays open
        // until `finish` (the close waits for it).
        let r = unsafe { crate::sys::stat_in_memory(self.inner.fd(), &mut st) };
        self.inner.finish();
        if r != 0 {
            return self.inner.align();
        }
        *self.inner.align.get_or_init(|| alignment_of(&st))
    }

    /// Whether the file was opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.inner.direct
    }

    /// The state the file's handles share.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the io_uring rings' registration
    pub(crate) fn shared_inner(&self) -> &Arc<FileInner> {
        &self.inner
    }

    /// The raw descriptor (for diagnostics; `-1` once closed).
    pub fn as_raw_fd(&self) -> i32 {
        self.inner.fd()
    }

    /// The engine this file belongs to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether the file was opened for appending (O_APPEND): every write
    /// then goes to the end of the file, whatever its offset.
    pub fn is_append(&self) -> bool {
        self.inner.append
    }

    /// Takes ownership of an open descriptor (a `std::fs::File` converts
    /// into one with `.into()`). Its access mode, O_APPEND and O_DIRECT are
    /// read from the descriptor (`fcntl(F_GETFL)`); for O_DIRECT the
    /// alignment is asked of the kernel (`statx`) here, on the calling
    /// thread.
    ///
    /// ```
    /// use overlapped::{Engine, File};
    ///
    /// let engine = Engine::new()?;
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("f"), b"hello")?;
    /// let std_file = std::fs::File::open(dir.path().join("f"))?;
    /// let file = File::from_fd(&engine, std_file.into());
    /// let (n, buf) = file.read_at(vec![0u8; 5], 0).wait();
    /// assert_eq!(&buf[..n?], b"hello");
    /// let std_file = std::fs::File::from(file.into_fd().expect("nothing in flight"));
    /// # drop(std_file);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(unix)]
    pub fn from_fd(engine: &Engine, fd: OwnedFd) -> File {
        let raw = fd.into_raw_fd();
        // SAFETY: a plain descriptor call on the descriptor we now own.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
        // A valid descriptor always has flags; should the call fail anyway,
        // claim read and write access and let the kernel judge each request.
        let flags = if flags < 0 { libc::O_RDWR } else { flags };
        let inner = FileInner::new(raw, engine.shared().clone(), Mode::from_flags(flags));
        if inner.direct {
            // SAFETY: statx is plain old data; all-zero is a valid value.
            let mut st: libc::statx = unsafe { std::mem::zeroed() };
            // SAFETY: st is a writable statx; the descriptor is ours.
            let r = unsafe { crate::sys::statx_fd(raw, 0, &mut st) };
            if r == 0 {
                let _ = inner.align.set(alignment_of(&st));
            }
        }
        File {
            inner: Arc::new(inner),
            engine: engine.clone(),
        }
    }

    /// Gives the descriptor back, when this is the file's only handle and no
    /// operation holds it (none in flight); otherwise returns the file.
    /// A closed file is returned too.
    #[cfg(unix)]
    pub fn into_fd(self) -> std::result::Result<OwnedFd, File> {
        let fd = self.give_back()?;
        // SAFETY: the descriptor was this file's alone, no operation uses
        // it, and `give_back` swapped -1 in, so FileInner never closes it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Takes the descriptor out of the file when this is its only handle
    /// and no operation holds it (none in flight), so that the caller owns
    /// it; otherwise (a closed file too) gives the file back.
    fn give_back(self) -> std::result::Result<i32, File> {
        let File { inner, engine } = self;
        match Arc::try_unwrap(inner) {
            Ok(inner) => {
                let fd = inner.fd.swap(-1, Ordering::AcqRel);
                if fd < 0 || inner.state.load(Ordering::Acquire) != 0 {
                    inner.fd.store(fd, Ordering::Release);
                    return Err(File {
                        inner: Arc::new(inner),
                        engine,
                    });
                }
                // The caller owns the descriptor from here: no ring's table
                // may keep the file open behind its back.
                inner.forget_registrations(fd);
                debug_assert!(fd >= 0, "an open descriptor is given back");
                Ok(fd)
            }
            Err(inner) => Err(File { inner, engine }),
        }
    }

    /// A new file with a duplicate of the descriptor (`F_DUPFD_CLOEXEC`; on
    /// Windows `DuplicateHandle`): an independent handle on the same open
    /// file description (they share the file offset and flags, not
    /// closing; on Windows also the completion port the file object is
    /// associated with, so the duplicate is not associated again).
    pub fn try_clone(&self) -> Result<File> {
        // Claimed like an operation: a close waits, so the number duplicated
        // is this file's, not a descriptor reused by another file meanwhile.
        if !self.inner.try_start() {
            return Err(Error::Closed);
        }
        let fd = self.inner.fd();
        let dup = if fd < 0 {
            -1
        } else {
            crate::sys::duplicate(fd)
        };
        self.inner.finish();
        if fd < 0 {
            return Err(Error::Closed);
        }
        if dup < 0 {
            return Err(Error::from_errno((-dup) as i32));
        }
        debug_assert!(dup <= i64::from(i32::MAX), "a descriptor is an int");
        let dup = dup as i32;
        let i = &self.inner;
        let inner = FileInner {
            fd: AtomicI32::new(dup),
            append: i.append,
            state: AtomicUsize::new(0),
            misses: crate::sys::MissHistory::default(),
            close_waker: Mutex::new(None),
            shared: i.shared.clone(),
            readable: i.readable,
            writable: i.writable,
            direct: i.direct,
            #[cfg(windows)]
            synchronous: i.synchronous,
            align: OnceLock::new(),
            registered: Mutex::new(Vec::new()),
        };
        if let Some(a) = i.align.get() {
            let _ = inner.align.set(*a);
        }
        Ok(File {
            inner: Arc::new(inner),
            engine: self.engine.clone(),
        })
    }

    fn check(&self, need: Need, addr: usize, offset: u64, len: usize) -> Result<()> {
        let inner = &self.inner;
        if inner.fd() < 0 {
            return Err(Error::Closed);
        }
        match need {
            Need::Read if !inner.readable => return Err(Error::NotOpenedFor("read")),
            Need::Write if !inner.writable => return Err(Error::NotOpenedFor("write")),
            _ => {}
        }
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(Error::OffsetOverflow {
                offset,
                len: len as u64,
            });
        }
        // Zero bytes need no alignment (the kernel returns 0 for them too).
        if inner.direct && len > 0 {
            let a = inner.align();
            if a.memory > 0 && addr % a.memory as usize != 0 {
                return Err(Error::Misaligned {
                    part: AlignmentPart::Buffer,
                    required: a.memory,
                    value: addr as u64,
                });
            }
            if a.offset > 0 && offset % a.offset as u64 != 0 {
                return Err(Error::Misaligned {
                    part: AlignmentPart::Offset,
                    required: a.offset,
                    value: offset,
                });
            }
            if a.offset > 0 && len % a.offset as usize != 0 {
                return Err(Error::Misaligned {
                    part: AlignmentPart::Length,
                    required: a.offset,
                    value: len as u64,
                });
            }
        }
        Ok(())
    }

    pub(crate) fn prepare_read<B: IoBufMut>(
        &self,
        mut buf: B,
        start: usize,
        offset: u64,
    ) -> Prepared<B> {
        debug_assert!(
            start <= buf.bytes_len(),
            "a read continues inside its buffer"
        );
        let len = buf.bytes_len().saturating_sub(start).min(MAX_RW_BYTES);
        let ptr = buf.stable_mut_ptr().wrapping_add(start);
        let kind = OpKind::Read(operation::Read {
            fd: self.inner.fd(),
            ptr,
            len: len as u32,
            offset,
            direct: self.inner.direct,
            #[cfg(windows)]
            synchronous: self.inner.synchronous,
        });
        let fast_path = self.inner.shared.fast_path && !self.inner.direct;
        self.prepare(buf, kind, Need::Read, fast_path)
    }

    pub(crate) fn prepare_write<B: IoBuf>(&self, buf: B, start: usize, offset: u64) -> Prepared<B> {
        debug_assert!(
            start <= buf.bytes_len(),
            "a write continues inside its buffer"
        );
        let len = buf.bytes_len().saturating_sub(start).min(MAX_RW_BYTES);
        let ptr = buf.stable_ptr().wrapping_add(start);
        let kind = OpKind::Write(operation::Write {
            fd: self.inner.fd(),
            ptr,
            len: len as u32,
            offset,
            direct: self.inner.direct,
            #[cfg(windows)]
            synchronous: self.inner.synchronous,
        });
        self.prepare(buf, kind, Need::Write, false)
    }

    /// Validates the read or write `kind` and turns it into a request;
    /// invalid and zero-length transfers are answered at once. `kind` points
    /// into `buf`'s heap memory, which does not move with `buf` (IoBuf
    /// contract).
    fn prepare<B: IoBuf>(&self, buf: B, kind: OpKind, need: Need, fast_path: bool) -> Prepared<B> {
        let operation::Span { addr, offset, len } = kind.span().unwrap_or_default();
        if let Err(e) = self.check(need, addr, offset, len) {
            return Prepared::Done(Err(e), buf);
        }
        if len == 0 {
            return Prepared::Done(Ok(0), buf);
        }
        debug_assert!(
            len <= MAX_RW_BYTES,
            "one operation moves at most MAX_RW_BYTES"
        );
        Prepared::Req(Request {
            owner: Owner::File(FileRef::new(self.inner.clone())),
            buf,
            kind,
            bytes: len,
            fast_path,
        })
    }

    /// A completion port's `fsync`/`fdatasync` of this file, carrying
    /// `buf` (which the operation does not touch) to its completion.
    pub(crate) fn prepare_sync<B>(&self, buf: B, datasync: bool) -> Prepared<B> {
        if let Err(e) = self.check(Need::Open, 0, 0, 0) {
            return Prepared::Done(Err(e), buf);
        }
        let kind = OpKind::Fsync(operation::Fsync {
            fd: self.inner.fd(),
            datasync,
        });
        self.bufferless(buf, kind)
    }

    /// A completion port's `fallocate(mode, offset, len)` of this file,
    /// carrying `buf` (which the operation does not touch) to its
    /// completion. Checked as [`allocate`](Self::allocate) checks.
    pub(crate) fn prepare_allocate<B>(
        &self,
        buf: B,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Prepared<B> {
        if let Err(e) = check_allocate(offset, len) {
            return Prepared::Done(Err(e), buf);
        }
        if let Err(e) = self.check(Need::Write, 0, offset, 0) {
            return Prepared::Done(Err(e), buf);
        }
        let kind = OpKind::Fallocate(operation::Fallocate {
            fd: self.inner.fd(),
            mode,
            offset,
            len,
        });
        self.bufferless(buf, kind)
    }

    fn bufferless<B>(&self, buf: B, kind: OpKind) -> Prepared<B> {
        Prepared::Req(Request {
            owner: Owner::File(FileRef::new(self.inner.clone())),
            buf,
            kind,
            bytes: 0,
            fast_path: false,
        })
    }

    fn op<B: Send + 'static>(p: Prepared<B>) -> Op<B> {
        match p {
            Prepared::Done(res, buf) => Op::ready(res, buf),
            Prepared::Req(req) => Op::request(req),
        }
    }

    /// Reads up to `buf.len()` bytes at `offset` into the start of `buf`.
    /// Returns the count: 0 at or past end of file, fewer near it.
    ///
    /// A buffered read first tries the page cache on the calling thread
    /// (`preadv2(RWF_NOWAIT)`, see [`EngineBuilder::cache_fast_path`](crate::EngineBuilder::cache_fast_path));
    /// not on Windows, which has no read that never waits for the device.
    pub fn read_at<B: IoBufMut>(&self, buf: B, offset: u64) -> Op<B> {
        Self::op(self.prepare_read(buf, 0, offset))
    }

    /// Reads into `buf` at `offset` on the calling thread only if the page
    /// cache holds all of it: one `preadv2(RWF_NOWAIT)`, which never waits
    /// for the device. `Ok(Some(n))` is the byte count (fewer than
    /// `buf.len()` only at end of file); `Ok(None)` means the kernel could
    /// not answer at once (part of the range is not cached, or the pages
    /// are locked), the file is O_DIRECT, the engine's cache fast path is
    /// off, or recent misses on this file made it skip the attempt (and
    /// always on Windows, which has no such read): then
    /// read with [`read_at`](Self::read_at). Nothing is read into `buf`
    /// that the caller should use after `Ok(None)`. As `read_at`, one call
    /// reads at most 0x7fff_f000 bytes (Linux's largest single read): a
    /// longer `buf` gets that many, not end of file.
    ///
    /// For callers that must not block and want a cached answer without an
    /// operation (the Java channel's `read` that returns a `Future`): what
    /// [`read_at`](Self::read_at) tries first anyway. Counted as the fast
    /// path is (`Stats::fast_path_hits`, `fast_path_misses`).
    ///
    /// ```
    /// # let engine = overlapped::Engine::new()?;
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("f");
    /// std::fs::write(&path, b"hello")?; // just written: in the page cache
    /// let file = overlapped::File::open(&engine, &path).wait()?;
    /// let mut buf = [0u8; 16];
    /// match file.read_cached_at(&mut buf, 0)? {
    ///     Some(n) => assert_eq!(&buf[..n], b"hello"),
    ///     None => { /* not cached: file.read_at(...) */ }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], [`Error::NotOpenedFor`] (a file not opened for
    /// reading), [`Error::OffsetOverflow`], [`Error::Shutdown`], and on an
    /// O_DIRECT file [`Error::Misaligned`] (checked as a read's would be).
    pub fn read_cached_at(&self, buf: &mut [u8], offset: u64) -> Result<Option<usize>> {
        // SAFETY: initialised bytes viewed as possibly uninitialised ones; the
        // kernel writes only initialised bytes into them.
        let uninit = unsafe {
            std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<MaybeUninit<u8>>(), buf.len())
        };
        self.read_cached_at_uninit(uninit, offset)
    }

    /// [`read_cached_at`](Self::read_cached_at) into memory that need not be
    /// initialised (a `tokio::io::ReadBuf`'s unfilled part, a `Vec`'s spare
    /// capacity): `Some(n)` means its first `n` bytes are now initialised,
    /// the bytes of the file from `offset`.
    pub fn read_cached_at_uninit(
        &self,
        buf: &mut [MaybeUninit<u8>],
        offset: u64,
    ) -> Result<Option<usize>> {
        let len = buf.len().min(MAX_RW_BYTES);
        self.check(Need::Read, buf.as_ptr() as usize, offset, len)?;
        let shared = &self.inner.shared;
        if shared.is_shut() {
            return Err(Error::Shutdown);
        }
        if self.inner.direct || !shared.fast_path || len == 0 {
            return Ok(None);
        }
        // Counted in: a close waits for this call, so the descriptor is not
        // closed (and its number not reused) under it.
        let mut guard = FileRef::new(self.inner.clone());
        guard.start()?;
        // SAFETY: `buf` is exclusively borrowed and `len` bytes long (the
        // kernel only writes it); the descriptor stays open while `guard` is
        // held.
        let n = unsafe {
            crate::sys::nowait_into(
                &*shared.counters,
                Some(&self.inner.misses),
                self.inner.fd(),
                buf.as_mut_ptr().cast::<u8>(),
                len,
                offset,
            )
        };
        debug_assert!(n.is_none_or(|n| n <= len));
        Ok(n)
    }

    /// As [`read_at`](Self::read_at), without the page-cache attempt on the
    /// calling thread that a buffered read makes first: for a caller whose
    /// [`read_cached_at`](Self::read_cached_at) of the same range just
    /// answered `None`, so that a miss costs one `preadv2`, not two.
    pub fn read_at_after_miss<B: IoBufMut>(&self, buf: B, offset: u64) -> Op<B> {
        let mut prepared = self.prepare_read(buf, 0, offset);
        prepared.skip_fast_path();
        Self::op(prepared)
    }

    /// Writes `buf` at `offset`; returns how many bytes were written (the
    /// kernel may write fewer; [`write_all_at`](Self::write_all_at) goes on).
    pub fn write_at<B: IoBuf>(&self, buf: B, offset: u64) -> Op<B> {
        Self::op(self.prepare_write(buf, 0, offset))
    }

    /// Fills `buf` entirely from `offset`, continuing after short reads.
    /// Fails with [`Error::UnexpectedEof`] if the file ends first.
    pub fn read_exact_at<B: IoBufMut>(&self, buf: B, offset: u64) -> Task<(Result<()>, B)> {
        let file = self.clone();
        Task::new(async move {
            let wanted = buf.bytes_len();
            let mut buf = buf;
            let mut done = 0usize;
            while done < wanted {
                let (res, b) = Self::op(file.prepare_read(buf, done, offset + done as u64)).await;
                buf = b;
                match res {
                    Ok(0) => return (Err(Error::UnexpectedEof { read: done, wanted }), buf),
                    Ok(n) => {
                        debug_assert!(n <= wanted - done, "a read returns at most what is left");
                        done += n;
                    }
                    Err(e) => return (Err(e), buf),
                }
            }
            (Ok(()), buf)
        })
    }

    /// Writes all of `buf` at `offset`, continuing after short writes.
    pub fn write_all_at<B: IoBuf>(&self, buf: B, offset: u64) -> Task<(Result<()>, B)> {
        let file = self.clone();
        Task::new(async move {
            let wanted = buf.bytes_len();
            let mut buf = buf;
            let mut done = 0usize;
            while done < wanted {
                let (res, b) = Self::op(file.prepare_write(buf, done, offset + done as u64)).await;
                buf = b;
                match res {
                    Ok(0) => {
                        return (
                            Err(Error::WriteZero {
                                written: done,
                                wanted,
                            }),
                            buf,
                        )
                    }
                    Ok(n) => {
                        debug_assert!(n <= wanted - done, "a write takes at most what is left");
                        done += n;
                    }
                    Err(e) => return (Err(e), buf),
                }
            }
            (Ok(()), buf)
        })
    }

    /// Runs a buffer-less operation on this file; `make` builds it from the
    /// descriptor once the file is known to be open.
    fn simple(
        &self,
        need: Need,
        offset: u64,
        make: impl FnOnce(i32) -> OpKind + Send + 'static,
    ) -> Task<Result<()>> {
        let file = self.clone();
        Task::new(async move {
            file.check(need, 0, offset, 0)?;
            let kind = make(file.inner.fd());
            run_op(Owner::File(FileRef::new(file.inner.clone())), kind)
                .await
                .map(|_| ())
        })
    }

    /// `fsync`: data and metadata reach stable storage.
    pub fn sync_all(&self) -> Task<Result<()>> {
        self.simple(Need::Open, 0, |fd| {
            OpKind::Fsync(operation::Fsync {
                fd,
                datasync: false,
            })
        })
    }

    /// `fdatasync`: data (and the metadata needed to read it) reach stable
    /// storage.
    pub fn sync_data(&self) -> Task<Result<()>> {
        self.simple(Need::Open, 0, |fd| {
            OpKind::Fsync(operation::Fsync { fd, datasync: true })
        })
    }

    /// Reserves `len` bytes of space from `offset` (`fallocate` mode 0): the
    /// file grows if needed, and the new range reads back as zeros, never as
    /// stale data. Later writes there do not extend the file, so direct
    /// writes stay asynchronous.
    pub fn allocate(&self, offset: u64, len: u64) -> Task<Result<()>> {
        if let Err(err) = check_allocate(offset, len) {
            return Task::new(async move { Err(err) });
        }
        self.simple(Need::Write, offset, move |fd| {
            OpKind::Fallocate(operation::Fallocate {
                fd,
                mode: 0,
                offset,
                len,
            })
        })
    }

    /// Truncates or extends the file to `len` bytes (`ftruncate`).
    pub fn set_len(&self, len: u64) -> Task<Result<()>> {
        if len > i64::MAX as u64 {
            return Task::new(async move {
                Err(Error::OffsetOverflow {
                    offset: len,
                    len: 0,
                })
            });
        }
        self.simple(Need::Write, 0, move |fd| {
            OpKind::Ftruncate(operation::Ftruncate { fd, len })
        })
    }

    /// Closes the file for every handle: new operations fail with
    /// [`Error::Closed`], operations in flight finish first, then the
    /// descriptor is closed through the engine and the kernel's verdict
    /// (which can be an I/O error on some file systems) is returned.
    /// Closing twice gives [`Error::Closed`]. In a child after `fork` it
    /// fails at once with [`Error::Forked`] and closes nothing: the
    /// operations in flight are the parent's (the kernel completes them
    /// there), so waiting for them would wait for ever; dropping the
    /// child's handles releases its copy of the descriptor.
    pub fn close(&self) -> Task<Result<()>> {
        let inner = self.inner.clone();
        Task::new(async move {
            if inner.shared.forked() {
                return Err(Error::Forked(crate::cell::FORKED_ENGINE));
            }
            let prev = inner.state.fetch_or(CLOSED, Ordering::AcqRel);
            if prev & CLOSED != 0 {
                return Err(Error::Closed);
            }
            std::future::poll_fn(|cx| {
                if inner.state.load(Ordering::Acquire) == CLOSED {
                    return Poll::Ready(());
                }
                *inner.close_waker.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(cx.waker().clone());
                if inner.state.load(Ordering::Acquire) == CLOSED {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            let fd = inner.fd.swap(-1, Ordering::AcqRel);
            if fd < 0 {
                return Err(Error::Closed);
            }
            // No operation is in flight or queued: the rings that registered
            // the descriptor drop it before it is closed.
            inner.forget_registrations(fd);
            // From here the close operation owns the descriptor: whatever
            // happens to this future or the engine, it is closed once.
            run_op(
                Owner::Engine(inner.shared.clone()),
                OpKind::Close(operation::Close::new(fd)),
            )
            .await
            .map(|_| ())
        })
    }
}

/// Declared with the files rather than beside the pool: it reads a file's
/// alignment, and the buffers sit below the files.
impl AlignedBufPool {
    /// A pool whose buffers suit `file`'s direct-I/O alignment: the address
    /// is aligned to the memory alignment, and at least to the page size, and
    /// `len` is rounded up to the offset alignment.
    ///
    /// Why the page size: STATX_DIOALIGN's memory alignment (often 512) is
    /// what the kernel *accepts*, not what it handles best. ext4 counts a
    /// buffer that is not aligned to the file-system block as "unaligned
    /// I/O", and serialises such writes into preallocated (unwritten)
    /// extents under its exclusive inode lock; io_uring then hands every one
    /// to a kernel worker thread (measured by `overlap probe`).
    pub fn for_file(file: &File, len: usize, max_idle: usize) -> Result<AlignedBufPool> {
        let a = file.alignment();
        let align = (a.memory as usize)
            .max(a.offset as usize)
            .max(crate::buf::page_size().min(crate::buf::MAX_ALIGN));
        let len = len
            .max(1)
            .checked_next_multiple_of(a.offset.max(1) as usize)
            .ok_or_else(|| Error::InvalidInput(format!("buffer length {len} is too large")))?;
        AlignedBufPool::new(len, align, max_idle)
    }
}

/// The one check of an `fallocate` range, for [`File::allocate`] and a
/// port's (`prepare_allocate`): at least one byte, ending within the
/// largest file offset.
fn check_allocate(offset: u64, len: u64) -> Result<()> {
    if len == 0 {
        return Err(Error::InvalidInput(
            "fallocate needs a length of at least 1".into(),
        ));
    }
    if offset
        .checked_add(len)
        .is_none_or(|end| end > i64::MAX as u64)
    {
        return Err(Error::OffsetOverflow { offset, len });
    }
    Ok(())
}
