//! `--io blocking`: the synchronous I/O antipattern on purpose. A
//! `ServeDir` backend whose every operation is a `std::fs` call made
//! inside `poll`, on whichever runtime worker polls it (as
//! static-web-server reads files with a blocking `read()` inside
//! `poll_next`): while the kernel reads, that worker serves nothing else.
//! Only `overlap serve --io blocking` uses it, to show the damage.

use std::future::{ready, Ready};
use std::io::{self, Read, Seek};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, ReadBuf};
use tower_http::services::fs::{Backend, File};

/// Blocks the calling worker for every open, `stat`, read and seek.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockingBackend;

impl Backend for BlockingBackend {
    type File = BlockingFile;
    type Metadata = std::fs::Metadata;
    type OpenFuture = Ready<io::Result<BlockingFile>>;
    type MetadataFuture = Ready<io::Result<std::fs::Metadata>>;

    // `ServeDir` calls these inside its response future's `poll`.
    // Regular files only (`super::files`): a FIFO's open would block the
    // worker until a writer comes.
    fn open(&self, path: PathBuf) -> Self::OpenFuture {
        ready(super::files::open(&path).map(|file| BlockingFile { file, seek: None }))
    }

    fn metadata(&self, path: PathBuf) -> Self::MetadataFuture {
        ready(super::files::metadata(&path))
    }
}

/// A `std::fs::File` read and sought synchronously in `poll`.
#[derive(Debug)]
pub struct BlockingFile {
    file: std::fs::File,
    /// The result of the last `start_seek`, for `poll_complete`.
    seek: Option<io::Result<u64>>,
}

impl AsyncRead for BlockingFile {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = match self.file.read(buf.initialize_unfilled()) {
            Ok(n) => n,
            Err(e) => return Poll::Ready(Err(e)),
        };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for BlockingFile {
    fn start_seek(mut self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        let res = self.file.seek(position);
        self.seek = Some(res);
        Ok(())
    }

    fn poll_complete(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(match self.seek.take() {
            Some(res) => res,
            // No seek started: where the file is.
            None => self.file.stream_position(),
        })
    }
}

impl File for BlockingFile {
    type Metadata = std::fs::Metadata;
    type MetadataFuture<'a> = Ready<io::Result<std::fs::Metadata>>;

    fn metadata(&self) -> Self::MetadataFuture<'_> {
        ready(self.file.metadata())
    }
}
