//! [`OpenOptions`]: `tokio::fs::OpenOptions`, opening through the engine.

use std::io;
use std::path::Path;

use super::support::{code, engine_err};
use super::File;
use crate::reactor::on_ring;

/// Options and flags which can be used to configure how a file is opened:
/// `tokio::fs::OpenOptions`, with the `openat` done by the engine, plus the
/// engine's direct I/O, write-through and access hints.
///
/// Generally, `File::open` and `File::create` are simpler; use
/// `OpenOptions::new()`, set each option, then call [`open`](Self::open).
///
/// # Examples
///
/// Opening a file to read:
///
/// ```no_run
/// use overlapped_tokio::fs::OpenOptions;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     let file = OpenOptions::new()
///         .read(true)
///         .open("foo.txt")
///         .await?;
///
///     Ok(())
/// }
/// ```
///
/// Opening a file for both reading and writing, as well as creating it if it
/// doesn't exist:
///
/// ```no_run
/// use overlapped_tokio::fs::OpenOptions;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     let file = OpenOptions::new()
///         .read(true)
///         .write(true)
///         .create(true)
///         .open("foo.txt")
///         .await?;
///
///     Ok(())
/// }
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    inner: overlapped::OpenOptions,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// Creates a blank new set of options ready for configuration: all
    /// options are initially `false`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    ///
    /// let mut options = OpenOptions::new();
    /// let future = options.read(true).open("foo.txt");
    /// ```
    pub fn new() -> OpenOptions {
        OpenOptions {
            inner: overlapped::OpenOptions::new(),
        }
    }

    /// Sets the option for read access.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let file = OpenOptions::new()
    ///         .read(true)
    ///         .open("foo.txt")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub fn read(&mut self, read: bool) -> &mut OpenOptions {
        self.inner.read(read);
        self
    }

    /// Sets the option for write access. If the file already exists, write
    /// calls on it overwrite its contents, without truncating it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let file = OpenOptions::new()
    ///         .write(true)
    ///         .open("foo.txt")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub fn write(&mut self, write: bool) -> &mut OpenOptions {
        self.inner.write(write);
        self
    }

    /// Sets the option for append mode: writes append to the file instead
    /// of overwriting its contents. `.write(true).append(true)` has the
    /// same effect as `.append(true)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let file = OpenOptions::new()
    ///         .append(true)
    ///         .open("foo.txt")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub fn append(&mut self, append: bool) -> &mut OpenOptions {
        self.inner.append(append);
        self
    }

    /// Sets the option for truncating a previous file: an existing file is
    /// truncated to 0 length. The file must be opened with write access.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let file = OpenOptions::new()
    ///         .write(true)
    ///         .truncate(true)
    ///         .open("foo.txt")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub fn truncate(&mut self, truncate: bool) -> &mut OpenOptions {
        self.inner.truncate(truncate);
        self
    }

    /// Sets the option for creating a new file, or opening it if it already
    /// exists. Needs write or append access.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let file = OpenOptions::new()
    ///         .write(true)
    ///         .create(true)
    ///         .open("foo.txt")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub fn create(&mut self, create: bool) -> &mut OpenOptions {
        self.inner.create(create);
        self
    }

    /// Sets the option to always create a new file, failing with
    /// [`io::ErrorKind::AlreadyExists`] if it exists (atomically). When set,
    /// `create` and `truncate` are ignored. Needs write or append access.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let file = OpenOptions::new()
    ///         .write(true)
    ///         .create_new(true)
    ///         .open("foo.txt")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub fn create_new(&mut self, create_new: bool) -> &mut OpenOptions {
        self.inner.create_new(create_new);
        self
    }

    /// Sets the mode bits that a new file will be created with (default
    /// `0o666`, less the process's umask).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let mut options = OpenOptions::new();
    ///     options.mode(0o644); // Give read/write for owner and read for others.
    ///     let file = options.open("foo.txt").await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    #[cfg(unix)]
    pub fn mode(&mut self, mode: u32) -> &mut OpenOptions {
        self.inner.mode(mode);
        self
    }

    /// Passes custom flags to the `flags` argument of `open`. The access
    /// mode bits are masked out (`O_ACCMODE`); custom flags only add flags.
    /// This option overwrites any previously set custom flags.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let mut options = OpenOptions::new();
    ///     options.write(true);
    ///     if cfg!(unix) {
    ///         options.custom_flags(libc::O_NOFOLLOW);
    ///     }
    ///     let file = options.open("foo.txt").await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    #[cfg(unix)]
    pub fn custom_flags(&mut self, flags: i32) -> &mut OpenOptions {
        self.inner.custom_flags(flags);
        self
    }

    /// Sets the share mode of the file (`dwShareMode` of `CreateFileW`; by
    /// default read, write and delete are shared, as std's). Windows only.
    #[cfg(windows)]
    pub fn share_mode(&mut self, share: u32) -> &mut OpenOptions {
        self.inner.share_mode(share);
        self
    }

    /// Sets extra flags for `dwFlagsAndAttributes` of `CreateFileW`
    /// (`FILE_FLAG_*`); `FILE_FLAG_OVERLAPPED` is always set, the engine's
    /// I/O being overlapped. Windows only.
    #[cfg(windows)]
    pub fn custom_flags(&mut self, flags: u32) -> &mut OpenOptions {
        self.inner.custom_flags(flags);
        self
    }

    /// Sets the file attributes a new file is created with
    /// (`FILE_ATTRIBUTE_*` of `CreateFileW`). Windows only.
    #[cfg(windows)]
    pub fn attributes(&mut self, attributes: u32) -> &mut OpenOptions {
        self.inner.attributes(attributes);
        self
    }

    /// Beyond tokio: O_DIRECT, bypassing the page cache. Buffers, offsets
    /// and lengths must then be aligned as [`File::alignment`] says: use
    /// [`File::read_at`] and [`File::write_all_at`] with
    /// `overlapped::AlignedBuf`s. (`AsyncRead`/`AsyncWrite` use a `Vec`, aligned
    /// only by chance: misaligned requests fail with
    /// [`io::ErrorKind::InvalidInput`].)
    pub fn direct(&mut self, direct: bool) -> &mut OpenOptions {
        self.inner.direct(direct);
        self
    }

    /// Beyond tokio: O_DSYNC, each write completes only once its data is on
    /// stable storage.
    pub fn write_through(&mut self, write_through: bool) -> &mut OpenOptions {
        self.inner.write_through(write_through);
        self
    }

    /// Beyond tokio: the expected access pattern, as `posix_fadvise`
    /// advice to the kernel's read-ahead.
    pub fn access(&mut self, access: overlapped::Access) -> &mut OpenOptions {
        self.inner.access(access);
        self
    }

    /// Opens a file at `path` with the options specified by `self` (the
    /// `openat` is an engine operation).
    ///
    /// # Errors
    ///
    /// As `std::fs::OpenOptions::open`: [`NotFound`](io::ErrorKind::NotFound)
    /// when the file does not exist and neither create nor create_new is
    /// set, [`PermissionDenied`](io::ErrorKind::PermissionDenied),
    /// [`AlreadyExists`](io::ErrorKind::AlreadyExists) for `create_new` on an
    /// existing file, [`InvalidInput`](io::ErrorKind::InvalidInput) for
    /// invalid combinations of options (truncate without write access, no
    /// access mode set, ...) and for paths with a NUL byte, and others from
    /// the file system.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::OpenOptions;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     let file = OpenOptions::new().open("foo.txt").await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        // The task copies the path; `path` itself lives until the open is
        // done, as in tokio (a `NamedTempFile` given by value removes its
        // file when dropped).
        let task = self.inner.open(crate::engine(), path.as_ref());
        let file = on_ring(task)
            .await
            .map_err(|e| engine_err(e, code::INVALID))?;
        Ok(File::from_engine(file))
    }
}

/// `File`'s constructors by path, declared beside the options they use
/// (the options' `open` returns a `File`).
impl File {
    /// Attempts to open a file in read-only mode.
    ///
    /// See [`OpenOptions`] for more details.
    ///
    /// # Errors
    ///
    /// This function will return an error if path does not already exist.
    /// Other errors may also be returned according to [`OpenOptions::open`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    /// use tokio::io::AsyncReadExt;
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
    pub async fn open(path: impl AsRef<Path>) -> io::Result<File> {
        Self::options().read(true).open(path).await
    }

    /// Opens a file in write-only mode.
    ///
    /// This function will create a file if it does not exist, and will
    /// truncate it if it does.
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
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create(path: impl AsRef<Path>) -> io::Result<File> {
        Self::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .await
    }

    /// Opens a file in read-write mode, creating it, or failing with
    /// [`io::ErrorKind::AlreadyExists`] if it exists: if the call succeeds,
    /// the file returned is new (atomically, with no race between checking
    /// and creating).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut file = File::create_new("foo.txt").await?;
    /// file.write_all(b"hello, world!").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_new<P: AsRef<Path>>(path: P) -> std::io::Result<File> {
        Self::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .await
    }

    /// Returns a new [`OpenOptions`] object, as `OpenOptions::new()`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::File;
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # async fn dox() -> std::io::Result<()> {
    /// let mut f = File::options().append(true).open("example.log").await?;
    /// f.write_all(b"new line\n").await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }
}
