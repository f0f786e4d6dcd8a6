//! tower-http's `ServeDir` on the engine (feature `tower-http`).
//!
//! [`OverlapBackend`] implements tower-http 0.7's file-system
//! [`Backend`](tower_http::services::fs::Backend): `ServeDir` opens files
//! through the engine (`openat`), asks for their metadata with `statx`
//! (modification times with their nanoseconds, which `ETag` and
//! `Last-Modified` are made from: of an open file, the attributes the kernel
//! holds in memory, read on the calling thread with `AT_STATX_DONT_SYNC` as
//! [`overlap::File::stat_cached`] does, no I/O and no kernel worker; of a
//! path, following symbolic links, by [`overlap::path::metadata`]: on the
//! calling thread when the dentry cache holds the whole path, else through
//! the engine), and reads them as
//! [`overlap_tokio::fs::File`](crate::fs::File)s: a range request seeks (no
//! system call), the body is read 64 KiB at a time (see
//! [`OverlapBackend::with_read_size`]), from the page cache straight into
//! the body's buffer when it is there, and no further than the length the
//! response announced ([`OverlapFile`]). Nothing goes to tokio's blocking
//! pool.
//!
//! The change in an axum or tower application is one line:
//!
//! ```no_run
//! use overlap_tokio::tower_http::OverlapBackend;
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
//! use overlap_tokio::tower_http::serve_file;
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::SystemTime;

use tokio::io::{AsyncRead, AsyncSeek, ReadBuf};
use tower_http::services::fs::{self as thfs, DefaultServeDirFallback, ServeDir};

/// How much one read of a served file asks for: tower-http's default body
/// chunk.
pub const DEFAULT_READ_SIZE: usize = 64 << 10;

/// tower-http's file-system [`Backend`](thfs::Backend) on the overlap
/// engine: give it to `ServeDir::with_backend`.
#[derive(Clone, Debug)]
pub struct OverlapBackend {
    read_size: usize,
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
        }
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
        Box::pin(async move {
            let mut file = crate::fs::File::open(&path).await?;
            file.set_max_buf_size(read_size);
            Ok(OverlapFile {
                file,
                len: AtomicU64::new(UNKNOWN_LEN),
            })
        })
    }

    fn metadata(&self, path: PathBuf) -> Self::MetadataFuture {
        Box::pin(async move { crate::fs::statx(&path).await.map(OverlapMetadata) })
    }
}

/// A file opened by [`OverlapBackend`]: an
/// [`overlap_tokio::fs::File`](crate::fs::File) (its reads and seeks).
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
#[derive(Debug)]
pub struct OverlapFile {
    file: crate::fs::File,
    /// The length `metadata` reported ([`UNKNOWN_LEN`]: not asked).
    len: AtomicU64,
}

/// [`OverlapFile::len`] before `metadata` was asked for.
const UNKNOWN_LEN: u64 = u64::MAX;

impl OverlapFile {
    /// The file underneath.
    pub fn into_inner(self) -> crate::fs::File {
        self.file
    }
}

impl AsyncRead for OverlapFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let len = *me.len.get_mut();
        let left = match me.file.next_read_offset() {
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
        // thread (`overlap::File::stat_cached`: no I/O, about a microsecond),
        // not io_uring's STATX, which the kernel always hands to a worker:
        // `ServeDir` asks once per request.
        let st = self
            .file
            .engine_file()
            .stat_cached()
            .map_err(|e| crate::fs::engine_err(e, libc::EBADF));
        if let Ok(st) = &st {
            // A regular file's length (a special file's says nothing).
            if st.is_file() {
                self.len.store(st.len, Ordering::Relaxed);
            }
        }
        Box::pin(std::future::ready(st.map(OverlapMetadata)))
    }
}

/// What [`OverlapBackend`] tells `ServeDir` about a file: its `statx`.
#[derive(Clone, Debug)]
pub struct OverlapMetadata(overlap::path::Stat);

impl OverlapMetadata {
    /// Everything `statx` said.
    pub fn stat(&self) -> &overlap::path::Stat {
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

mod serve_file;
pub use serve_file::{serve_file, serve_file_with_mime, ServeFile};
