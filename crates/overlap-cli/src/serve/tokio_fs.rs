//! `--io tokio-fs`: tower-http's default backend (`TokioBackend`: every
//! open, `stat` and read a task on tokio's blocking pool), serving regular
//! files only (`super::files`): tower-http's own opens a FIFO with a plain
//! `open`, which holds a blocking-pool thread and the request until a
//! writer comes.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, ReadBuf};
use tower_http::services::fs::{Backend, File};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send + 'a>>;

/// `tokio::fs` as tower-http's `TokioBackend` uses it.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioFsBackend;

impl Backend for TokioFsBackend {
    type File = TokioFsFile;
    type Metadata = std::fs::Metadata;
    type OpenFuture = BoxFuture<'static, TokioFsFile>;
    type MetadataFuture = BoxFuture<'static, std::fs::Metadata>;

    fn open(&self, path: PathBuf) -> Self::OpenFuture {
        // As `tokio::fs::File::open`: the open on the blocking pool.
        Box::pin(async move {
            let file = blocking(move || super::files::open(&path)).await?;
            Ok(TokioFsFile(tokio::fs::File::from_std(file)))
        })
    }

    fn metadata(&self, path: PathBuf) -> Self::MetadataFuture {
        Box::pin(blocking(move || super::files::metadata(&path)))
    }
}

/// `f` on tokio's blocking pool, as `tokio::fs` runs its calls.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// A `tokio::fs::File` (tower-http's `TokioFile`, whose field is private).
#[derive(Debug)]
pub struct TokioFsFile(tokio::fs::File);

impl AsyncRead for TokioFsFile {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncSeek for TokioFsFile {
    fn start_seek(mut self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.0).start_seek(position)
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Pin::new(&mut self.0).poll_complete(cx)
    }
}

impl File for TokioFsFile {
    type Metadata = std::fs::Metadata;
    type MetadataFuture<'a> = BoxFuture<'a, std::fs::Metadata>;

    fn metadata(&self) -> Self::MetadataFuture<'_> {
        Box::pin(self.0.metadata())
    }
}
