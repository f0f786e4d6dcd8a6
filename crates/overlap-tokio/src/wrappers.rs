//! Wrappers that make this crate's types [`Stream`]s, as
//! `tokio_stream::wrappers` does for tokio's (feature `stream`).
//!
//! `tokio_stream::wrappers::ReadDirStream::new` takes tokio's own
//! `ReadDir`, which overlap's is not; switch its `use` line:
//!
//! ```
//! use futures::StreamExt; // or tokio_stream::StreamExt
//! use overlapped_tokio::fs;
//! use overlapped_tokio::wrappers::ReadDirStream; // instead of tokio_stream::wrappers::ReadDirStream
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! fs::write(dir.path().join("a"), b"").await?;
//! let mut entries = ReadDirStream::new(fs::read_dir(dir.path()).await?);
//! while let Some(entry) = entries.next().await {
//!     assert_eq!(entry?.file_name(), "a");
//! }
//! # Ok::<(), std::io::Error>(()) })?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

pub use futures_core::Stream;

use crate::fs::{DirEntry, ReadDir};

/// A [`Stream`] of the entries of a [`ReadDir`]: what
/// `tokio_stream::wrappers::ReadDirStream` is for tokio's, with the same
/// methods. Each item is an entry or the error reading it; the stream ends
/// after the last entry.
#[derive(Debug)]
#[must_use = "streams do nothing unless polled"]
pub struct ReadDirStream {
    inner: ReadDir,
}

impl ReadDirStream {
    /// Creates a new `ReadDirStream`.
    pub fn new(read_dir: ReadDir) -> Self {
        Self { inner: read_dir }
    }

    /// Gets back the inner `ReadDir`.
    pub fn into_inner(self) -> ReadDir {
        self.inner
    }
}

impl Stream for ReadDirStream {
    type Item = io::Result<DirEntry>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_entry(cx).map(Result::transpose)
    }
}

impl AsRef<ReadDir> for ReadDirStream {
    fn as_ref(&self) -> &ReadDir {
        &self.inner
    }
}

impl AsMut<ReadDir> for ReadDirStream {
    fn as_mut(&mut self) -> &mut ReadDir {
        &mut self.inner
    }
}
