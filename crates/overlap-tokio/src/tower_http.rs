//! tower-http's `ServeDir` on the engine (feature `tower-http`).
//!
//! [`OverlapBackend`] implements tower-http 0.7's file-system
//! [`Backend`](tower_http::services::fs::Backend): `ServeDir` opens files
//! through the engine (`openat`), asks for their metadata with `statx`
//! (modification times with their nanoseconds, which `ETag` and
//! `Last-Modified` are made from: of an open file, the attributes the kernel
//! holds in memory, read on the calling thread with `AT_STATX_DONT_SYNC` as
//! [`overlapped::File::stat_cached`] does, no I/O and no kernel worker; of a
//! path, following symbolic links, by [`overlapped::path::metadata`]: on the
//! calling thread when the dentry cache holds the whole path, else through
//! the engine), and reads them as
//! [`overlapped_tokio::fs::File`](crate::fs::File)s: a range request seeks (no
//! system call), the body is read 64 KiB at a time (see
//! [`OverlapBackend::with_read_size`]), from the page cache straight into
//! the body's buffer when it is there, and no further than the length the
//! response announced ([`OverlapFile`]). Nothing goes to tokio's blocking
//! pool. About 32 reads of files not in the page cache are in flight at
//! once ([`OverlapBackend::with_max_uncached_reads`]), and with many files
//! reading from the device each reads ahead a bounded window, so that what
//! is read ahead fits in memory however many clients ask at once.
//!
//! Only regular files (and directories, for their `index.html`) are
//! served: a FIFO, socket or device is `NotFound`, a 404, found so at once
//! (a FIFO is opened with `O_NONBLOCK`, never waited on), for the path's
//! metadata as for its open, so that `ServeDir`'s `HEAD` (which asks for
//! the metadata only) answers as its `GET` (which opens).
//!
//! The change in an axum or tower application is one line:
//!
//! ```no_run
//! use overlapped_tokio::tower_http::OverlapBackend;
//! use tower_http::services::ServeDir;
//!
//! // instead of `ServeDir::new("assets")`:
//! let service = ServeDir::with_backend("assets", OverlapBackend::new());
//! // e.g. axum: Router::new().fallback_service(service)
//! # let _ = service;
//! ```
//!
//! # A single file
//!
//! tower-http 0.7's `ServeFile` takes no backend (its single-file
//! `ServeDir` constructor is private): [`serve_file`] makes the same
//! service on the engine, a `ServeDir` over the file's directory that
//! answers every request with that file, with `ServeFile`'s content type
//! (guessed from the file's extension), precompressed variants, ranges and
//! conditional requests. [`serve_file_with_mime`] sets the content type.
//!
//! ```no_run
//! use overlapped_tokio::tower_http::serve_file;
//!
//! // instead of `ServeFile::new("assets/index.html")`:
//! let service = serve_file("assets/index.html").precompressed_gzip();
//! // e.g. axum: Router::new().route_service("/", service)
//! # let _ = service;
//! ```

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use tokio::io::{AsyncRead, AsyncSeek, ReadBuf};
use tokio::sync::Semaphore;
use tokio_util::sync::PollSemaphore;
use tower_http::services::fs::{self as thfs, DefaultServeDirFallback, ServeDir};

/// How much one read of a served file asks for: tower-http's default body
/// chunk.
pub const DEFAULT_READ_SIZE: usize = 64 << 10;

/// How many reads of files not in the page cache an [`OverlapBackend`]
/// keeps in flight at once by default: as many as nginx's `aio threads`
/// pool has threads.
pub const DEFAULT_MAX_UNCACHED_READS: usize = 32;

/// What the files of one [`OverlapBackend`] read ahead of their readers at
/// most, shared among those reading from the device (64 MiB, the engine's
/// default in-flight budget): one reader gets [`MAX_READ_AHEAD`], a
/// thousand three reads' worth each.
pub const READ_AHEAD_BUDGET: u64 = 64 << 20;

/// The read-ahead window of a lone reader (2 MiB).
pub const MAX_READ_AHEAD: u64 = 2 << 20;

/// How many of a backend's files may read from the device with the
/// kernel's own read-ahead by default
/// ([`OverlapBackend::with_kernel_read_ahead_streams`]): a file opened when as many are already
/// reading from the device reads ahead itself, within
/// [`READ_AHEAD_BUDGET`]. Measured here: the kernel's read-ahead (8 MiB on
/// the virtio disk) served 256 readers of 1 MiB files in a 256 MiB cgroup
/// at full speed, and 1024 at a third of it (its pages reclaimed before
/// their readers reached them); the bounded window is 15-20% slower at 64
/// and 256 readers (small folios, `posix_fadvise`'s), 2.2x faster at 1024.
pub const KERNEL_READ_AHEAD_STREAMS: usize = 256;

/// tower-http's file-system [`Backend`](thfs::Backend) on the overlap
/// engine: give it to `ServeDir::with_backend`. Its clones share one limit
/// of uncached reads ([`with_max_uncached_reads`](Self::with_max_uncached_reads)).
#[derive(Clone, Debug)]
pub struct OverlapBackend {
    read_size: usize,
    /// Permits for reads that may go to the device (`None`: no limit).
    uncached: Option<Arc<Semaphore>>,
    /// Their number.
    max_uncached: usize,
    /// See [`KERNEL_READ_AHEAD_STREAMS`].
    kernel_read_ahead_streams: usize,
    /// How many of its files are reading ahead from the device now.
    streams: Arc<AtomicUsize>,
}

impl Default for OverlapBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl OverlapBackend {
    /// The backend, reading [`DEFAULT_READ_SIZE`] bytes at a time.
    pub fn new() -> Self {
        OverlapBackend {
            read_size: DEFAULT_READ_SIZE,
            uncached: Some(Arc::new(Semaphore::new(DEFAULT_MAX_UNCACHED_READS))),
            max_uncached: DEFAULT_MAX_UNCACHED_READS,
            kernel_read_ahead_streams: KERNEL_READ_AHEAD_STREAMS,
            streams: Arc::default(),
        }
    }

    /// At most `n` reads of data not in the page cache in flight at once,
    /// over every file this backend (and its clones) opened; 0: no limit.
    /// Default [`DEFAULT_MAX_UNCACHED_READS`].
    ///
    /// Why: a buffered read that misses the page cache starts the kernel's
    /// read-ahead, which reads up to the device's `read_ahead_kb` (often
    /// megabytes) beyond it into the page cache at once. A thousand
    /// clients each fetching a large uncached file start a thousand
    /// read-aheads; when that is more than the memory the server may use
    /// (its cgroup's limit), the pages read ahead are reclaimed before
    /// their reader reaches them and read again, and the device's
    /// bandwidth goes to waste (measured in BENCHMARKS.md: 1 MiB files,
    /// 1024 connections, 256 MiB of memory). With the limit, the other
    /// readers wait for a permit: a read whose bytes are all in the page
    /// cache (`cachestat`, Linux 6.5) never waits, nor does any read while
    /// permits are left; a permit is held only while a read is in flight,
    /// so a client that stops reading holds none.
    ///
    /// The bound is close, not exact: a read judged cached may find a page
    /// reclaimed meanwhile, a read-ahead asked for by a file (see
    /// [`with_kernel_read_ahead_streams`](Self::with_kernel_read_ahead_streams))
    /// is not counted, and a read whose file was dropped goes on without
    /// its permit. Asking for a read-ahead (`posix_fadvise(WILLNEED)`)
    /// allocates its pages and submits the reads on the calling thread, as
    /// a buffered read that misses does.
    pub fn with_max_uncached_reads(mut self, n: usize) -> Self {
        self.max_uncached = n.min(Semaphore::MAX_PERMITS);
        self.uncached = (n > 0).then(|| Arc::new(Semaphore::new(self.max_uncached)));
        debug_assert!(
            self.uncached_reads_in_flight() == 0,
            "a new gate starts with every permit available"
        );
        self
    }

    /// How many reads of uncached data hold a permit now (of
    /// [`with_max_uncached_reads`](Self::with_max_uncached_reads)'s `n`).
    pub fn uncached_reads_in_flight(&self) -> usize {
        self.uncached.as_ref().map_or(0, |s| {
            debug_assert!(
                s.available_permits() <= self.max_uncached,
                "a permit is given back once per permit taken"
            );
            self.max_uncached.saturating_sub(s.available_permits())
        })
    }

    /// How many of this backend's files may read from the device with the
    /// kernel's read-ahead before the next ones read ahead themselves, a
    /// bounded window (default [`KERNEL_READ_AHEAD_STREAMS`]; 0: every file
    /// reads ahead itself).
    pub fn with_kernel_read_ahead_streams(mut self, n: usize) -> Self {
        self.kernel_read_ahead_streams = n;
        self
    }

    /// How much each read of a served file asks the kernel for at most
    /// (clamped to 4 KiB ..= 16 MiB). A body chunk is at most this long,
    /// whatever `ServeDir::with_buf_chunk_size` says.
    pub fn with_read_size(mut self, bytes: usize) -> Self {
        self.read_size = bytes.clamp(4 << 10, 16 << 20);
        self
    }

    /// The read size in force.
    pub fn read_size(&self) -> usize {
        self.read_size
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send + 'a>>;

impl thfs::Backend for OverlapBackend {
    type File = OverlapFile;
    type Metadata = OverlapMetadata;
    type OpenFuture = BoxFuture<'static, OverlapFile>;
    type MetadataFuture = BoxFuture<'static, OverlapMetadata>;

    fn open(&self, path: PathBuf) -> Self::OpenFuture {
        let read_size = self.read_size;
        let gate = self.uncached.clone().map(Gate::new);
        let streams = self.streams.clone();
        let kernel_streams = self.kernel_read_ahead_streams;
        Box::pin(async move {
            // Only regular files are served. O_NONBLOCK lets the open of a
            // FIFO return at once (without it the open waits for a writer,
            // holding the request, and where the engine runs on its thread
            // pool a pool thread, as with tower-http's default backend); the
            // type is then checked on the open file (no race with a rename).
            // A socket's open fails with ENXIO: not served either.
            let mut file = os::open_options().open(&path).await.map_err(|e| {
                if os::not_served(&e) {
                    not_served()
                } else {
                    e
                }
            })?;
            let st = file.engine_file().stat_cached().map_err(|e| {
                crate::fs::support::engine_err(e, crate::fs::support::code::NOT_OPENED)
            })?;
            if !st.is_file() && !st.is_dir() {
                return Err(not_served());
            }
            os::opened(&file)?;
            debug_assert!(
                (4 << 10..=16 << 20).contains(&read_size),
                "the read size lies in the range with_read_size keeps it to"
            );
            file.set_max_buf_size(read_size);
            // With many files already reading from the device, no kernel
            // read-ahead for this one: it reads up to the device's
            // `read_ahead_kb` (often megabytes) ahead of every reader, which
            // a thousand slow readers cannot hold in memory; the file reads
            // ahead itself, a bounded window (`OverlapFile::read_ahead`).
            let bounded = streams.load(Ordering::Relaxed) >= kernel_streams;
            if bounded {
                os::advise_random(&file);
            }
            Ok(OverlapFile {
                file,
                opened: std::sync::Mutex::new(Some(st)),
                len: AtomicU64::new(UNKNOWN_LEN),
                gate,
                read_size: read_size as u64,
                bounded,
                ahead_to: 0,
                streams: Streams {
                    count: streams,
                    counted: false,
                },
            })
        })
    }

    fn metadata(&self, path: PathBuf) -> Self::MetadataFuture {
        Box::pin(async move {
            let st = crate::fs::statx(&path).await?;
            // As `open`: `ServeDir` answers a `HEAD` from this alone, and
            // its `GET` of a FIFO, socket or device is a 404 (`open`), so
            // its `HEAD` must be one too.
            if !st.is_file() && !st.is_dir() {
                return Err(not_served());
            }
            Ok(OverlapMetadata(st))
        })
    }
}

/// What a FIFO, socket or device gets: `NotFound` (a 404), for its open as
/// for its metadata.
fn not_served() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        "not a regular file (a FIFO, socket or device is not served)",
    )
}

/// A file opened by [`OverlapBackend`]: an
/// [`overlapped_tokio::fs::File`](crate::fs::File) (its reads and seeks).
///
/// Once its [`metadata`](thfs::File::metadata) was asked for (`ServeDir`
/// does, and promises the client that many bytes in `Content-Length`), it
/// reads no further than the length it reported: the end of the body is
/// known without a read that returns 0, and a read never asks the engine
/// for more than is left (a miss of a 4 KiB file reads 4 KiB, not 64 KiB;
/// the body's own buffer is `ServeDir`'s). A file that grows meanwhile is
/// served as long as it was when the response began, and one that shrank
/// ends cleanly where it ends now (a short body, as any server sending a
/// file that changed under it), never with more bytes than the response
/// announced.
///
/// A read that may go to the device waits for one of the backend's
/// permits ([`OverlapBackend::with_max_uncached_reads`]).
#[derive(Debug)]
pub struct OverlapFile {
    file: crate::fs::File,
    /// What `statx` said as the file was opened, for the first `metadata`
    /// (`ServeDir` asks right after the open): one system call, not two.
    opened: std::sync::Mutex<Option<overlapped::path::Stat>>,
    /// The length `metadata` reported ([`UNKNOWN_LEN`]: not asked).
    len: AtomicU64,
    gate: Option<Gate>,
    read_size: u64,
    /// Read ahead by this file, kernel read-ahead off (see
    /// [`KERNEL_READ_AHEAD_STREAMS`]).
    bounded: bool,
    /// Where what was asked to be read ahead ends (0: nothing asked yet).
    ahead_to: u64,
    streams: Streams,
}

/// A file's place in its backend's count of files reading ahead from the
/// device: counted from its first read-ahead from the device until it is
/// dropped.
#[derive(Debug)]
struct Streams {
    count: Arc<AtomicUsize>,
    counted: bool,
}

impl Streams {
    /// Counts the file in, once.
    fn count_in(&mut self) {
        if !self.counted {
            self.counted = true;
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        if self.counted {
            let before = self.count.fetch_sub(1, Ordering::Relaxed);
            debug_assert!(before > 0, "a stream counted out was counted in");
        }
    }
}

/// One file's share of its backend's limit of uncached reads.
#[derive(Debug)]
struct Gate {
    sem: Arc<Semaphore>,
    poll: PollSemaphore,
    /// `poll` is waiting for a permit for us.
    acquiring: bool,
    /// The permit of a read in flight, given back when it completes.
    pending: Option<Arc<Release>>,
}

impl Gate {
    fn new(sem: Arc<Semaphore>) -> Gate {
        Gate {
            poll: PollSemaphore::new(sem.clone()),
            sem,
            acquiring: false,
            pending: None,
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if let Some(rel) = self.pending.take() {
            rel.release();
        }
    }
}

/// The waker a read in flight holding a permit is polled with: its wake-up
/// (the read's completion) gives the permit back at once, then wakes the
/// task. So a permit is never held by a response waiting for its client to
/// take the bytes (hyper polls the body only when it can send more).
#[derive(Debug)]
struct Release {
    sem: Arc<Semaphore>,
    held: AtomicBool,
    waker: std::sync::Mutex<std::task::Waker>,
}

impl Release {
    fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            self.sem.add_permits(1);
        }
    }

    fn set_waker(&self, waker: &std::task::Waker) {
        let mut w = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        if !w.will_wake(waker) {
            w.clone_from(waker);
        }
    }
}

impl std::task::Wake for Release {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.release();
        self.waker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .wake_by_ref();
    }
}

/// Whether the page cache holds all that the next read of `file` into
/// `buf` would return, the file being `len` bytes long.
#[inline]
fn next_read_cached(file: &mut crate::fs::File, len: u64, buf: &ReadBuf<'_>) -> bool {
    file.next_read_offset().is_some_and(|pos| {
        let want = (buf.remaining() as u64).min(len.saturating_sub(pos));
        os::all_cached(file, pos, want)
    })
}

/// [`OverlapFile::len`] before `metadata` was asked for.
const UNKNOWN_LEN: u64 = u64::MAX;

impl OverlapFile {
    /// The file underneath (with `POSIX_FADV_RANDOM` set, if it was one of
    /// the files reading ahead themselves).
    pub fn into_inner(self) -> crate::fs::File {
        self.file
    }

    /// A reference to the file underneath: e.g. its descriptor, for a
    /// server that sends the body itself (`sendfile`).
    pub fn get_ref(&self) -> &crate::fs::File {
        debug_assert!(
            (4 << 10..=16 << 20).contains(&self.read_size),
            "a file reads in the sizes with_read_size allows"
        );
        &self.file
    }
}

impl AsyncRead for OverlapFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let res = me.poll_read_gated(cx, buf);
        if res.is_pending() {
            // Waiting for the device (or for a permit to ask it).
            me.streams.count_in();
        }
        res
    }
}

impl OverlapFile {
    /// Asks the kernel to read the next bytes of the file into the page
    /// cache (`posix_fadvise(WILLNEED)`: starts the reads, waits for none),
    /// so that a body's next reads find their data there and the device
    /// sees large requests; nothing when the page cache already holds it
    /// (`cachestat`). Kernel read-ahead is off for these files: this one
    /// is bounded, its window [`READ_AHEAD_BUDGET`] shared among the
    /// backend's files reading from the device (at most
    /// [`MAX_READ_AHEAD`], at least three reads' worth), asked for in
    /// pieces of two thirds of it.
    fn read_ahead(&mut self, end: u64) {
        if !self.bounded {
            return;
        }
        let len = *self.len.get_mut();
        if len == UNKNOWN_LEN || len <= end.saturating_add(self.read_size) {
            return; // the length is unknown, or the next read takes the rest
        }
        let streams =
            self.streams.count.load(Ordering::Relaxed) as u64 + u64::from(!self.streams.counted);
        debug_assert!(streams > 0, "this stream is among those counted");
        let window = (READ_AHEAD_BUDGET / streams.max(1))
            .clamp(3 * self.read_size, MAX_READ_AHEAD.max(3 * self.read_size));
        let target = end.saturating_add(window).min(len);
        let from = self.ahead_to.max(end);
        if target <= from || target - from < (window * 2 / 3).min(len - end) {
            return;
        }
        debug_assert!(
            self.ahead_to <= from && from < target && target <= len,
            "the window read ahead moves forward and ends at the file's length at most"
        );
        if !os::all_cached(&self.file, from, target - from) {
            self.streams.count_in();
            os::advise_willneed(&self.file, from, target - from);
        }
        self.ahead_to = target;
    }

    /// The read, after a permit when the backend's limit of uncached reads
    /// says so.
    fn poll_read_gated(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self;
        let Some(gate) = me.gate.as_mut() else {
            return me.poll_read_within_len(cx, buf, true);
        };
        debug_assert!(
            !(gate.acquiring && gate.pending.is_some()),
            "a read holds a permit or waits for one, not both"
        );
        // A read still in flight with its permit: polled again (before its
        // completion woke us), it keeps the permit. Its permit given back
        // (the completion woke us), the read is first polled as it is: done,
        // it needs no permit to hand its bytes over.
        if let Some(rel) = gate.pending.take() {
            if let Some(res) = me.poll_pending(rel, cx, buf) {
                return res;
            }
        }
        let Some(gate) = me.gate.as_mut() else {
            return me.poll_read_within_len(cx, buf, true);
        };
        if !gate.acquiring {
            let taken = gate.sem.try_acquire().map(|p| p.forget()).is_ok();
            if !taken {
                // None left: a read the page cache answers whole goes on
                // without one (asking the cache starts no read-ahead; a read
                // that misses would).
                if next_read_cached(&mut me.file, *me.len.get_mut(), buf) {
                    // Without a permit: no read-ahead either.
                    return me.poll_read_within_len(cx, buf, false);
                }
                gate.acquiring = true;
            }
        }
        if gate.acquiring {
            match gate.poll.poll_acquire(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(permit)) => permit.forget(),
                Poll::Ready(None) => {
                    // Closed: never (no one closes it). Go on unlimited.
                    gate.acquiring = false;
                    return me.poll_read_within_len(cx, buf, true);
                }
            }
            gate.acquiring = false;
        }
        // A permit is ours (taken and forgotten: given back by hand).
        debug_assert!(
            !gate.acquiring && gate.pending.is_none(),
            "a permit in hand, and none held by a read in flight"
        );
        let sem = gate.sem.clone();
        let res = me.poll_read_within_len(cx, buf, true);
        if res.is_ready() {
            sem.add_permits(1); // answered at once: the page cache had it
            return res;
        }
        // In flight: from now on its completion gives the permit back.
        let rel = Arc::new(Release {
            sem,
            held: AtomicBool::new(true),
            waker: std::sync::Mutex::new(cx.waker().clone()),
        });
        me.poll_holding(rel, buf, false)
    }

    /// The read that held `rel`'s permit, polled again: `Some` when that
    /// settles this poll, `None` when it goes on as a new read, for a permit.
    #[inline]
    fn poll_pending(
        &mut self,
        rel: Arc<Release>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Option<Poll<io::Result<()>>> {
        debug_assert!(self.gate.is_some(), "only a gated file holds a permit");
        if !rel.held.load(Ordering::Acquire) {
            let res = self.poll_read_within_len(cx, buf, false);
            if res.is_ready() {
                return Some(res);
            }
            // Woken early (by the engine's budget, say): on as a new
            // read, for a permit.
            None
        } else {
            rel.set_waker(cx.waker());
            Some(self.poll_holding(rel, buf, true))
        }
    }

    /// Polls the read holding `rel`'s permit with `rel` as its waker (its
    /// completion gives the permit back); the permit is given back at once
    /// when the read is done, else kept as the gate's pending one.
    fn poll_holding(
        &mut self,
        rel: Arc<Release>,
        buf: &mut ReadBuf<'_>,
        ahead: bool,
    ) -> Poll<io::Result<()>> {
        debug_assert!(self.gate.is_some(), "only a gated file holds a permit");
        let waker = std::task::Waker::from(rel.clone());
        let res = self.poll_read_within_len(&mut Context::from_waker(&waker), buf, ahead);
        match res {
            Poll::Ready(_) => rel.release(),
            Poll::Pending => {
                if let Some(gate) = self.gate.as_mut() {
                    debug_assert!(gate.pending.is_none(), "a file holds one permit at most");
                    gate.pending = Some(rel);
                }
            }
        }
        res
    }
}

impl OverlapFile {
    /// The read itself, no further than the length `metadata` reported;
    /// with `ahead`, after asking for what comes next ([`Self::read_ahead`]).
    fn poll_read_within_len(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        ahead: bool,
    ) -> Poll<io::Result<()>> {
        let me = self;
        let pos = me.file.next_read_offset();
        if let (true, Some(pos)) = (ahead, pos) {
            me.read_ahead(pos);
        }
        let len = *me.len.get_mut();
        let left = match pos {
            Some(pos) if len != UNKNOWN_LEN => len.saturating_sub(pos),
            _ => return Pin::new(&mut me.file).poll_read(cx, buf),
        };
        if left == 0 {
            return Poll::Ready(Ok(())); // the end of what metadata reported
        }
        if (buf.remaining() as u64) <= left {
            return Pin::new(&mut me.file).poll_read(cx, buf);
        }
        // Ask for no more than is left.
        let mut part = buf.take(left as usize);
        let res = Pin::new(&mut me.file).poll_read(cx, &mut part);
        let n = part.filled().len();
        debug_assert!(
            n as u64 <= left,
            "a read stops at the length the metadata reported"
        );
        // SAFETY: `part` is `buf`'s unfilled memory; the read filled (and so
        // initialised) its first `n` bytes.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        res
    }
}

impl AsyncSeek for OverlapFile {
    fn start_seek(mut self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.file).start_seek(position)
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Pin::new(&mut self.file).poll_complete(cx)
    }
}

impl thfs::File for OverlapFile {
    type Metadata = OverlapMetadata;
    type MetadataFuture<'a> = BoxFuture<'a, OverlapMetadata>;

    fn metadata(&self) -> Self::MetadataFuture<'_> {
        // The open file's attributes as the kernel holds them, on this
        // thread (`overlapped::File::stat_cached`: no I/O, about a microsecond),
        // not io_uring's STATX, which the kernel always hands to a worker:
        // `ServeDir` asks once per request.
        let opened = self.opened.lock().unwrap_or_else(|p| p.into_inner()).take();
        let st = match opened {
            Some(st) => Ok(st),
            None => self.file.engine_file().stat_cached().map_err(|e| {
                crate::fs::support::engine_err(e, crate::fs::support::code::NOT_OPENED)
            }),
        };
        if let Ok(st) = &st {
            // A regular file's length (a special file's says nothing).
            if st.is_file() {
                debug_assert_ne!(
                    st.len, UNKNOWN_LEN,
                    "no file is as long as the unknown length"
                );
                self.len.store(st.len, Ordering::Relaxed);
            }
        }
        Box::pin(std::future::ready(st.map(OverlapMetadata)))
    }
}

/// What [`OverlapBackend`] tells `ServeDir` about a file: its `statx`.
#[derive(Clone, Debug)]
pub struct OverlapMetadata(overlapped::path::Stat);

impl OverlapMetadata {
    /// Everything `statx` said.
    pub fn stat(&self) -> &overlapped::path::Stat {
        &self.0
    }
}

impl thfs::Metadata for OverlapMetadata {
    fn is_dir(&self) -> bool {
        self.0.is_dir()
    }

    /// The modification time with its nanoseconds; `Unsupported` where
    /// the file system keeps none (as std's `Metadata::modified`).
    fn modified(&self) -> io::Result<SystemTime> {
        self.0.modified.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "modification time not available on this file system",
            )
        })
    }

    fn len(&self) -> u64 {
        self.0.len
    }
}

/// A `ServeDir` serving from `path` on the overlap engine:
/// `ServeDir::with_backend(path, OverlapBackend::new())`.
pub fn serve_dir(path: impl AsRef<Path>) -> ServeDir<DefaultServeDirFallback, OverlapBackend> {
    ServeDir::with_backend(path, OverlapBackend::new())
}

mod os;
mod serve_file;
pub use serve_file::{serve_file, serve_file_with_mime, ServeFile};
