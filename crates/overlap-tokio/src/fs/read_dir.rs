//! [`read_dir`], [`ReadDir`] and [`DirEntry`]: on tokio's blocking pool
//! (io_uring has no opcode to read a directory).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::{FileType, Metadata};
use std::future::Future;
use std::io;
#[cfg(unix)]
use std::os::unix::fs::DirEntryExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use super::support::{asyncify, spawn_blocking, Blocking};

/// Entries read per trip to the blocking pool.
const CHUNK: usize = 32;

/// Returns a stream over the entries within a directory (`std::fs::read_dir`
/// on tokio's blocking pool, 32 entries at a time).
///
/// # Errors
///
/// As `std::fs::read_dir`: the path does not exist, is not a directory, or
/// may not be read.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// use overlapped_tokio::fs;
///
/// let dir = tempfile::tempdir()?;
/// fs::write(dir.path().join("a"), b"").await?;
/// let mut entries = fs::read_dir(dir.path()).await?;
/// let entry = entries.next_entry().await?.expect("one entry");
/// assert_eq!(entry.file_name(), "a");
/// assert!(entries.next_entry().await?.is_none());
/// # Ok::<(), std::io::Error>(()) })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub async fn read_dir(path: impl AsRef<Path>) -> io::Result<ReadDir> {
    let path = path.as_ref().to_owned();
    asyncify(move || {
        let mut std = std::fs::read_dir(path)?;
        let mut buf = VecDeque::with_capacity(CHUNK);
        let more = next_chunk(&mut buf, &mut std);
        Ok(ReadDir(State::Idle(Some(Chunk { buf, std, more }))))
    })
    .await
}

/// Reads the next entries; returns whether there may be more.
fn next_chunk(buf: &mut VecDeque<io::Result<DirEntry>>, std: &mut std::fs::ReadDir) -> bool {
    debug_assert!(buf.is_empty(), "a chunk is read once the last is used up");
    for _ in 0..CHUNK {
        let Some(next) = std.next() else {
            return false;
        };
        let failed = next.is_err();
        buf.push_back(next.map(|e| DirEntry {
            file_type: e.file_type().ok(),
            std: Arc::new(e),
        }));
        if failed {
            break;
        }
    }
    true
}

/// Reads the entries in a directory: what [`read_dir`] returns.
///
/// The order of entries is the file system's; `.` and `..` are left out.
#[derive(Debug)]
#[must_use = "streams do nothing unless polled"]
pub struct ReadDir(State);

#[derive(Debug)]
struct Chunk {
    buf: VecDeque<io::Result<DirEntry>>,
    std: std::fs::ReadDir,
    more: bool,
}

#[derive(Debug)]
enum State {
    Idle(Option<Chunk>),
    Pending(Blocking<Chunk>),
}

impl ReadDir {
    /// Returns the next entry in the directory stream, or `None` at its
    /// end.
    ///
    /// # Cancel safety
    ///
    /// This method is cancellation safe.
    pub async fn next_entry(&mut self) -> io::Result<Option<DirEntry>> {
        std::future::poll_fn(|cx| self.poll_next_entry(cx)).await
    }

    /// Polls for the next directory entry: `Pending` while entries are
    /// being read (the waker in `cx` is woken when they are),
    /// `Ready(Ok(Some(entry)))` for an entry, `Ready(Ok(None))` at the end,
    /// `Ready(Err(err))` for an error reading it.
    ///
    /// Only the waker from the last call is woken.
    pub fn poll_next_entry(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<DirEntry>>> {
        loop {
            match &mut self.0 {
                State::Idle(chunk) => {
                    let Some(c) = chunk.as_mut() else {
                        // A join error was returned before: the stream ended.
                        return Poll::Ready(Ok(None));
                    };
                    if let Some(entry) = c.buf.pop_front() {
                        return Poll::Ready(entry.map(Some));
                    }
                    if !c.more {
                        return Poll::Ready(Ok(None));
                    }
                    let Some(mut c) = chunk.take() else {
                        return Poll::Ready(Ok(None));
                    };
                    self.0 = State::Pending(spawn_blocking(move || {
                        c.more = next_chunk(&mut c.buf, &mut c.std);
                        c
                    }));
                }
                State::Pending(handle) => {
                    let res = ready!(Pin::new(handle).poll(cx));
                    match res {
                        Ok(c) => self.0 = State::Idle(Some(c)),
                        Err(e) => {
                            self.0 = State::Idle(None);
                            return Poll::Ready(Err(e));
                        }
                    }
                }
            }
        }
    }
}

/// An entry of a directory stream ([`ReadDir`]).
#[derive(Debug)]
pub struct DirEntry {
    file_type: Option<FileType>,
    std: Arc<std::fs::DirEntry>,
}

impl DirEntry {
    /// Returns the inode number of the entry (`d_ino`).
    ///
    /// ```no_run
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut entries = overlapped_tokio::fs::read_dir(".").await?;
    /// while let Some(entry) = entries.next_entry().await? {
    ///     println!("{:?}: {}", entry.file_name(), entry.ino());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(unix)]
    pub fn ino(&self) -> u64 {
        self.std.ino()
    }

    /// Returns the full path to the file this entry represents: the path
    /// given to [`read_dir`] joined with the entry's name.
    ///
    /// ```no_run
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut entries = overlapped_tokio::fs::read_dir(".").await?;
    /// while let Some(entry) = entries.next_entry().await? {
    ///     println!("{:?}", entry.path());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn path(&self) -> PathBuf {
        self.std.path()
    }

    /// Returns the bare file name of this entry without any leading path.
    ///
    /// ```no_run
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut entries = overlapped_tokio::fs::read_dir(".").await?;
    /// while let Some(entry) = entries.next_entry().await? {
    ///     println!("{:?}", entry.file_name());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn file_name(&self) -> OsString {
        self.std.file_name()
    }

    /// Returns the metadata for the file this entry points at, not
    /// following a symbolic link (on tokio's blocking pool).
    ///
    /// ```no_run
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut entries = overlapped_tokio::fs::read_dir(".").await?;
    /// while let Some(entry) = entries.next_entry().await? {
    ///     if let Ok(metadata) = entry.metadata().await {
    ///         println!("{:?}: {:?}", entry.path(), metadata.permissions());
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn metadata(&self) -> io::Result<Metadata> {
        let std = self.std.clone();
        asyncify(move || std.metadata()).await
    }

    /// Returns the file type for the file this entry points at, not
    /// following a symbolic link (from the directory entry itself where
    /// the file system records it).
    ///
    /// ```no_run
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut entries = overlapped_tokio::fs::read_dir(".").await?;
    /// while let Some(entry) = entries.next_entry().await? {
    ///     if let Ok(file_type) = entry.file_type().await {
    ///         println!("{:?}: {:?}", entry.path(), file_type);
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn file_type(&self) -> io::Result<FileType> {
        if let Some(t) = self.file_type {
            return Ok(t);
        }
        let std = self.std.clone();
        asyncify(move || std.file_type()).await
    }
}
