//! Files and how to open them.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Poll, Waker};

use crate::buf::{IoBuf, IoBufMut};
use crate::engine::{Engine, Shared};
use crate::error::{AlignmentPart, Error, Result};
use crate::op::{Op, Request, Task};
use crate::ops::{self, OpKind};

/// Linux never transfers more than this in one read or write (`MAX_RW_COUNT`);
/// longer requests come back short and the `*_exact`/`*_all` forms go on.
pub const MAX_RW_BYTES: usize = 0x7fff_f000;

const CLOSED: usize = 1 << (usize::BITS - 1);

/// Expected access pattern, passed to the kernel as `posix_fadvise` advice
/// (the analogue of Windows' `FILE_FLAG_SEQUENTIAL_SCAN` and
/// `FILE_FLAG_RANDOM_ACCESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Access {
    /// No advice.
    #[default]
    Normal,
    /// Mostly sequential: the kernel reads ahead more aggressively.
    Sequential,
    /// Random: the kernel disables read-ahead.
    Random,
}

/// Alignment that direct I/O on a file requires, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Alignment {
    /// Alignment of the buffer's address.
    pub memory: u32,
    /// Alignment of file offsets and lengths.
    pub offset: u32,
    /// Where the figures came from: `"statx"` (STATX_DIOALIGN) or
    /// `"block-device"` (the device's logical block size), or `"default"`.
    pub source: &'static str,
}

/// Options for opening a [`File`], as `std::fs::OpenOptions` plus direct
/// I/O, write-through and access hints.
///
/// Durability: a plain write is in the page cache (RAM) when it completes.
/// `write_through(true)` (O_DSYNC) makes each write durable before it
/// completes; `direct(true)` (O_DIRECT) bypasses the page cache but does not
/// by itself flush the device's cache: use `sync_data` or write-through.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
    append: bool,
    mode: u32,
    custom_flags: i32,
    direct: bool,
    write_through: bool,
    access: Access,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read: false,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            append: false,
            mode: 0o666,
            custom_flags: 0,
            direct: false,
            write_through: false,
            access: Access::Normal,
        }
    }
}

impl OpenOptions {
    /// All options off (nothing is readable or writable yet).
    pub fn new() -> Self {
        Self::default()
    }
    /// Open for reading.
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.read = on;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.write = on;
        self
    }
    /// Create the file if it does not exist (needs `write`).
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }
    /// Create the file, failing if it exists (needs `write`).
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }
    /// Truncate an existing file to length 0 (needs `write`).
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }
    /// Open for appending (O_APPEND): every write goes to the end of the
    /// file whatever its offset, as one step with no other writer in
    /// between. Implies write access.
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.append = on;
        self
    }
    /// Further `open(2)` flags, or-ed in (the access mode bits are ignored;
    /// `O_DIRECT` here has the effect of [`direct`](Self::direct)).
    pub fn custom_flags(&mut self, flags: i32) -> &mut Self {
        self.custom_flags = flags;
        self
    }
    /// Permission bits for a created file (default 0o666, less the umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }
    /// O_DIRECT: bypass the page cache. Buffers, offsets and lengths must then
    /// be aligned as [`File::alignment`] says; misaligned requests fail before
    /// submission with [`Error::Misaligned`].
    pub fn direct(&mut self, on: bool) -> &mut Self {
        self.direct = on;
        self
    }
    /// O_DSYNC: each write completes only once its data is on stable storage.
    pub fn write_through(&mut self, on: bool) -> &mut Self {
        self.write_through = on;
        self
    }
    /// Access-pattern advice for the kernel's read-ahead.
    pub fn access(&mut self, access: Access) -> &mut Self {
        self.access = access;
        self
    }

    /// The `open(2)` flags, with the rules of `std::fs::OpenOptions`.
    fn flags(&self) -> Result<i32> {
        let mut flags = libc::O_CLOEXEC;
        flags |= match (self.read, self.write, self.append) {
            (true, false, false) => libc::O_RDONLY,
            (false, true, false) => libc::O_WRONLY,
            (true, true, false) => libc::O_RDWR,
            (false, _, true) => libc::O_WRONLY | libc::O_APPEND,
            (true, _, true) => libc::O_RDWR | libc::O_APPEND,
            (false, false, false) => {
                return Err(Error::InvalidInput(
                    "open for read, write, append or a combination".into(),
                ));
            }
        };
        if (self.create || self.create_new || self.truncate) && !(self.write || self.append) {
            return Err(Error::InvalidInput(
                "create, create_new and truncate need write(true) or append(true)".into(),
            ));
        }
        if self.append && self.truncate && !self.create_new {
            return Err(Error::InvalidInput(
                "truncate and append together make no sense".into(),
            ));
        }
        if self.create_new {
            flags |= libc::O_CREAT | libc::O_EXCL;
        } else {
            if self.create {
                flags |= libc::O_CREAT;
            }
            if self.truncate {
                flags |= libc::O_TRUNC;
            }
        }
        if self.direct {
            flags |= libc::O_DIRECT;
        }
        if self.write_through {
            flags |= libc::O_DSYNC;
        }
        flags |= self.custom_flags & !libc::O_ACCMODE;
        Ok(flags)
    }

    /// Opens `path` on `engine` (the `openat` itself goes through the engine).
    pub fn open(&self, engine: &Engine, path: impl AsRef<Path>) -> Task<Result<File>> {
        let opts = self.clone();
        let engine = engine.clone();
        let path = path.as_ref().to_path_buf();
        Task::new(async move {
            let flags = opts.flags()?;
            let open = OpKind::Open(ops::Open {
                path: crate::path::cpath(&path)?,
                flags,
                mode: opts.mode,
            });
            let fd = run_op(engine.shared(), None, open).await? as i32;
            let inner = FileInner::new(fd, engine.shared().clone(), flags);
            let advice = match opts.access {
                Access::Normal => None,
                Access::Sequential => Some(libc::POSIX_FADV_SEQUENTIAL),
                Access::Random => Some(libc::POSIX_FADV_RANDOM),
            };
            if let Some(advice) = advice {
                // SAFETY: plain descriptor call on the descriptor we own.
                unsafe { libc::posix_fadvise(fd, 0, 0, advice) };
            }
            let file = File {
                inner: Arc::new(inner),
                engine: engine.clone(),
            };
            let meta = file.metadata().await?;
            let _ = file.inner.align.set(meta.alignment);
            Ok(file)
        })
    }
}

/// Runs a buffer-less operation through the engine.
pub(crate) async fn run_op(
    shared: &Arc<Shared>,
    file: Option<&Arc<FileInner>>,
    kind: OpKind,
) -> Result<i64> {
    let req = Request {
        shared: shared.clone(),
        file: file.map(|f| FileRef::new(f.clone())),
        buf: (),
        kind,
        bytes: 0,
        fast_path: false,
    };
    let (res, ()) = Op::request(req).await;
    res.map(|n| n as i64)
}

pub(crate) struct FileInner {
    fd: AtomicI32,
    /// Opened with O_APPEND.
    append: bool,
    /// Operations in flight on this file, with the CLOSED bit.
    state: AtomicUsize,
    close_waker: Mutex<Option<Waker>>,
    /// The engine's state, not an `Engine` handle: operations in flight hold
    /// this, and must not keep the engine alive once the user has dropped
    /// every handle (dropping the last one waits for them instead).
    shared: Arc<Shared>,
    readable: bool,
    writable: bool,
    direct: bool,
    /// Set once, right after opening, from `statx`.
    align: OnceLock<Alignment>,
    /// Consecutive page-cache fast-path misses on this file.
    miss_streak: AtomicU32,
    /// Reads that skipped the fast path because of the streak.
    skipped: AtomicU32,
    /// When the last miss happened (ns on CLOCK_MONOTONIC).
    last_miss_ns: AtomicU64,
}

/// After this many consecutive misses the fast path is skipped: on a miss the
/// kernel starts the disk read on the calling thread, which is exactly the
/// blocking that asynchronous I/O should spare it.
const MISS_STREAK: u32 = 4;
/// While skipping, one read in this many still tries the page cache, so a
/// file that becomes cached gets the fast path back.
const RETRY_EVERY: u32 = 32;
/// A streak is forgotten once the last miss is this old: the file may have
/// been read into the cache meanwhile.
const STREAK_EXPIRES_NS: u64 = 10_000_000;

fn monotonic_ns() -> u64 {
    // SAFETY: clock_gettime writes into the local timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl FileInner {
    /// The state of a descriptor this engine now owns, opened with `flags`.
    fn new(fd: i32, shared: Arc<Shared>, flags: i32) -> FileInner {
        let acc = flags & libc::O_ACCMODE;
        FileInner {
            fd: AtomicI32::new(fd),
            append: flags & libc::O_APPEND != 0,
            state: AtomicUsize::new(0),
            miss_streak: AtomicU32::new(0),
            skipped: AtomicU32::new(0),
            last_miss_ns: AtomicU64::new(0),
            close_waker: Mutex::new(None),
            shared,
            readable: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            writable: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            direct: flags & libc::O_DIRECT != 0,
            align: OnceLock::new(),
        }
    }

    /// Whether a buffered read of this file should try the page cache first.
    pub(crate) fn fast_path_worth_trying(&self) -> bool {
        if self.miss_streak.load(Ordering::Relaxed) < MISS_STREAK {
            return true;
        }
        let since_miss = monotonic_ns().saturating_sub(self.last_miss_ns.load(Ordering::Relaxed));
        since_miss > STREAK_EXPIRES_NS
            || self.skipped.fetch_add(1, Ordering::Relaxed) % RETRY_EVERY == RETRY_EVERY - 1
    }

    /// Records the outcome of a fast-path attempt.
    pub(crate) fn fast_path_result(&self, hit: bool) {
        if hit {
            if self.miss_streak.load(Ordering::Relaxed) != 0 {
                self.miss_streak.store(0, Ordering::Relaxed);
            }
        } else {
            self.miss_streak.fetch_add(1, Ordering::Relaxed);
            self.last_miss_ns.store(monotonic_ns(), Ordering::Relaxed);
        }
    }

    fn align(&self) -> Alignment {
        self.align.get().copied().unwrap_or(Alignment {
            memory: 512,
            offset: 512,
            source: "default",
        })
    }

    /// Counts an operation in, unless the file is closed.
    pub(crate) fn try_start(&self) -> bool {
        let prev = self.state.fetch_add(1, Ordering::AcqRel);
        if prev & CLOSED != 0 {
            self.finish();
            return false;
        }
        true
    }

    pub(crate) fn finish(&self) {
        let prev = self.state.fetch_sub(1, Ordering::AcqRel);
        if prev == CLOSED | 1 {
            if let Some(w) = self
                .close_waker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                w.wake();
            }
        }
    }

    pub(crate) fn fd(&self) -> i32 {
        self.fd.load(Ordering::Acquire)
    }
}

impl Drop for FileInner {
    fn drop(&mut self) {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: we own fd, and no operation holds this FileInner any more.
            unsafe { libc::close(fd) };
        }
    }
}

/// An operation's claim on a file: keeps the descriptor open and counted
/// as in use until the operation is done.
pub(crate) struct FileRef {
    inner: Arc<FileInner>,
    started: bool,
}

impl FileRef {
    pub(crate) fn inner(&self) -> &FileInner {
        &self.inner
    }

    pub(crate) fn new(inner: Arc<FileInner>) -> FileRef {
        FileRef {
            inner,
            started: false,
        }
    }
    /// Counts the operation in; fails if the file was closed.
    pub(crate) fn start(&mut self) -> Result<()> {
        if !self.started {
            if !self.inner.try_start() {
                return Err(Error::Closed);
            }
            self.started = true;
        }
        Ok(())
    }
}

impl Drop for FileRef {
    fn drop(&mut self) {
        if self.started {
            self.inner.finish();
        }
    }
}

/// What [`File::metadata`] reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Metadata {
    /// Size in bytes.
    pub len: u64,
    /// Whether it is a regular file.
    pub is_file: bool,
    /// The file system's preferred I/O size.
    pub block_size: u32,
    /// Bytes of storage allocated (512-byte blocks × 512).
    pub allocated: u64,
    /// Direct-I/O alignment: STATX_DIOALIGN where the kernel and file system
    /// report it, else the device's logical block size.
    pub alignment: Alignment,
}

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
            .field("alignment", &self.inner.align())
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
    /// opened with `direct(true)`).
    pub fn alignment(&self) -> Alignment {
        self.inner.align()
    }

    /// Whether the file was opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.inner.direct
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
    /// use overlap::{Engine, File};
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
    pub fn from_fd(engine: &Engine, fd: OwnedFd) -> File {
        let raw = fd.into_raw_fd();
        // SAFETY: a plain descriptor call on the descriptor we now own.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
        // A valid descriptor always has flags; should the call fail anyway,
        // claim read and write access and let the kernel judge each request.
        let flags = if flags < 0 { libc::O_RDWR } else { flags };
        let inner = FileInner::new(raw, engine.shared().clone(), flags);
        if inner.direct {
            // SAFETY: statx is plain old data; all-zero is a valid value.
            let mut st: libc::statx = unsafe { std::mem::zeroed() };
            // SAFETY: st is a writable statx; the empty path with
            // AT_EMPTY_PATH names the descriptor itself.
            let r = unsafe {
                libc::statx(
                    raw,
                    c"".as_ptr(),
                    libc::AT_EMPTY_PATH,
                    ops::STATX_MASK,
                    &mut st,
                )
            };
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
    pub fn into_fd(self) -> std::result::Result<OwnedFd, File> {
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
                // SAFETY: the descriptor was this file's alone, no operation
                // uses it, and swapping -1 in keeps FileInner from closing it.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            }
            Err(inner) => Err(File { inner, engine }),
        }
    }

    /// A new file with a duplicate of the descriptor (`F_DUPFD_CLOEXEC`): an
    /// independent handle on the same open file description (they share
    /// the file offset and flags, not closing).
    pub fn try_clone(&self) -> Result<File> {
        let fd = self.inner.fd();
        if fd < 0 {
            return Err(Error::Closed);
        }
        // SAFETY: a plain descriptor call; a new descriptor comes back.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(Error::Io(std::io::Error::last_os_error()));
        }
        let i = &self.inner;
        let inner = FileInner {
            fd: AtomicI32::new(dup),
            append: i.append,
            state: AtomicUsize::new(0),
            miss_streak: AtomicU32::new(0),
            skipped: AtomicU32::new(0),
            last_miss_ns: AtomicU64::new(0),
            close_waker: Mutex::new(None),
            shared: i.shared.clone(),
            readable: i.readable,
            writable: i.writable,
            direct: i.direct,
            align: OnceLock::new(),
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
        let len = buf.bytes_len().saturating_sub(start).min(MAX_RW_BYTES);
        let ptr = buf.stable_mut_ptr().wrapping_add(start);
        let kind = OpKind::Read(ops::Read {
            fd: self.inner.fd(),
            ptr,
            len: len as u32,
            offset,
            direct: self.inner.direct,
        });
        let fast_path = self.inner.shared.fast_path && !self.inner.direct;
        self.prepare(buf, kind, Need::Read, fast_path)
    }

    pub(crate) fn prepare_write<B: IoBuf>(&self, buf: B, start: usize, offset: u64) -> Prepared<B> {
        let len = buf.bytes_len().saturating_sub(start).min(MAX_RW_BYTES);
        let ptr = buf.stable_ptr().wrapping_add(start);
        let kind = OpKind::Write(ops::Write {
            fd: self.inner.fd(),
            ptr,
            len: len as u32,
            offset,
            direct: self.inner.direct,
        });
        self.prepare(buf, kind, Need::Write, false)
    }

    /// Validates the read or write `kind` and turns it into a request;
    /// invalid and zero-length transfers are answered at once. `kind` points
    /// into `buf`'s heap memory, which does not move with `buf` (IoBuf
    /// contract).
    fn prepare<B: IoBuf>(&self, buf: B, kind: OpKind, need: Need, fast_path: bool) -> Prepared<B> {
        let (addr, offset, len) = kind.span().unwrap_or_default();
        if let Err(e) = self.check(need, addr, offset, len) {
            return Prepared::Done(Err(e), buf);
        }
        if len == 0 {
            return Prepared::Done(Ok(0), buf);
        }
        Prepared::Req(Request {
            shared: self.inner.shared.clone(),
            file: Some(FileRef::new(self.inner.clone())),
            buf,
            kind,
            bytes: len,
            fast_path,
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
    /// (`preadv2(RWF_NOWAIT)`, see [`EngineBuilder::cache_fast_path`](crate::EngineBuilder::cache_fast_path)).
    pub fn read_at<B: IoBufMut>(&self, buf: B, offset: u64) -> Op<B> {
        Self::op(self.prepare_read(buf, 0, offset))
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
                    Ok(n) => done += n,
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
                    Ok(n) => done += n,
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
            run_op(&file.inner.shared, Some(&file.inner), kind)
                .await
                .map(|_| ())
        })
    }

    /// `fsync`: data and metadata reach stable storage.
    pub fn sync_all(&self) -> Task<Result<()>> {
        self.simple(Need::Open, 0, |fd| {
            OpKind::Fsync(ops::Fsync {
                fd,
                datasync: false,
            })
        })
    }

    /// `fdatasync`: data (and the metadata needed to read it) reach stable
    /// storage.
    pub fn sync_data(&self) -> Task<Result<()>> {
        self.simple(Need::Open, 0, |fd| {
            OpKind::Fsync(ops::Fsync { fd, datasync: true })
        })
    }

    /// Reserves `len` bytes of space from `offset` (`fallocate` mode 0): the
    /// file grows if needed, and the new range reads back as zeros, never as
    /// stale data. Later writes there do not extend the file, so direct
    /// writes stay asynchronous.
    pub fn allocate(&self, offset: u64, len: u64) -> Task<Result<()>> {
        if len == 0 || offset.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
            let err = if len == 0 {
                Error::InvalidInput("allocate needs a length of at least 1".into())
            } else {
                Error::OffsetOverflow { offset, len }
            };
            return Task::new(async move { Err(err) });
        }
        self.simple(Need::Write, offset, move |fd| {
            OpKind::Fallocate(ops::Fallocate {
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
            OpKind::Ftruncate(ops::Ftruncate { fd, len })
        })
    }

    /// Size, block size and direct-I/O alignment (`statx`).
    pub fn metadata(&self) -> Task<Result<Metadata>> {
        let file = self.clone();
        Task::new(async move {
            let st = file.statx().await?;
            let alignment = alignment_of(&st);
            Ok(Metadata {
                len: st.stx_size,
                is_file: (st.stx_mode as u32 & libc::S_IFMT) == libc::S_IFREG,
                block_size: st.stx_blksize,
                allocated: st.stx_blocks * 512,
                alignment,
            })
        })
    }

    /// Type, size, permissions, owner and times of the open file (`statx`
    /// through the engine), as [`path::metadata`](crate::path::metadata)
    /// reports them for a path.
    pub fn stat(&self) -> Task<Result<crate::path::Stat>> {
        let file = self.clone();
        Task::new(async move {
            let st = file.statx().await?;
            Ok(crate::path::Stat::from_statx(&st))
        })
    }

    /// `statx` of the descriptor through the engine.
    async fn statx(&self) -> Result<Box<libc::statx>> {
        let file = self;
        {
            file.check(Need::Open, 0, 0, 0)?;
            // SAFETY: statx is plain old data; all-zero is a valid value.
            let mut buf: Box<libc::statx> = Box::new(unsafe { std::mem::zeroed() });
            let kind = OpKind::Statx(ops::Statx {
                fd: file.inner.fd(),
                buf: &mut *buf as *mut libc::statx,
            });
            let req = Request {
                shared: file.inner.shared.clone(),
                file: Some(FileRef::new(file.inner.clone())),
                buf,
                kind,
                bytes: 0,
                fast_path: false,
            };
            let (res, st) = Op::request(req).await;
            res?;
            Ok(st)
        }
    }

    /// Closes the file for every handle: new operations fail with
    /// [`Error::Closed`], operations in flight finish first, then the
    /// descriptor is closed through the engine and the kernel's verdict
    /// (which can be an I/O error on some file systems) is returned.
    /// Closing twice gives [`Error::Closed`].
    pub fn close(&self) -> Task<Result<()>> {
        let inner = self.inner.clone();
        Task::new(async move {
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
            // From here the close operation owns the descriptor: whatever
            // happens to this future or the engine, it is closed once.
            run_op(&inner.shared, None, OpKind::Close(ops::Close::new(fd)))
                .await
                .map(|_| ())
        })
    }
}

/// The direct-I/O alignment `st` reports, or the device's.
fn alignment_of(st: &libc::statx) -> Alignment {
    if st.stx_mask & ops::STATX_DIOALIGN != 0 && st.stx_dio_offset_align > 0 {
        Alignment {
            memory: st.stx_dio_mem_align,
            offset: st.stx_dio_offset_align,
            source: "statx",
        }
    } else {
        match logical_block_size(st.stx_dev_major, st.stx_dev_minor) {
            Some(n) => Alignment {
                memory: n,
                offset: n,
                source: "block-device",
            },
            None => Alignment {
                memory: 4096,
                offset: 4096,
                source: "default",
            },
        }
    }
}

fn logical_block_size(major: u32, minor: u32) -> Option<u32> {
    let base = format!("/sys/dev/block/{major}:{minor}");
    for p in [
        format!("{base}/queue/logical_block_size"),
        format!("{base}/../queue/logical_block_size"),
    ] {
        if let Some(n) = std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return Some(n);
        }
    }
    None
}
