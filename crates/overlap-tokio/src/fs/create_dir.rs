//! Creating directories: [`create_dir`], [`create_dir_all`] and
//! [`DirBuilder`] (`mkdirat` through the engine).

use std::io;
use std::path::Path;

use super::support::engine;
use crate::reactor::on_ring;
/// Creates a new, empty directory at the provided path (`mkdirat` through
/// the engine, mode `0o777` less the umask).
///
/// # Errors
///
/// As `std::fs::create_dir`: the parent does not exist
/// ([`NotFound`](io::ErrorKind::NotFound)), the path exists
/// ([`AlreadyExists`](io::ErrorKind::AlreadyExists)), permission is denied.
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     fs::create_dir("/some/dir").await?;
///     Ok(())
/// }
/// ```
pub async fn create_dir(path: impl AsRef<Path>) -> io::Result<()> {
    mkdir(path.as_ref(), 0o777).await
}

async fn mkdir(path: &Path, mode: u32) -> io::Result<()> {
    on_ring(overlapped::path::create_dir(engine(), path, mode))
        .await
        .map_err(io::Error::from)
}

async fn is_dir(path: &Path) -> bool {
    on_ring(overlapped::path::metadata(engine(), path))
        .await
        .is_ok_and(|st| st.is_dir())
}

/// `mkdir -p`: creates every missing directory on the way, as
/// `std::fs::create_dir_all` does (an existing directory, or one created
/// concurrently, is success).
async fn mkdir_all(path: &Path, mode: u32) -> io::Result<()> {
    if path.as_os_str().is_empty() {
        return Ok(());
    }
    // Walk up to the deepest ancestor that exists, then create downwards.
    let mut missing: Vec<&Path> = Vec::new();
    let mut cur = path;
    loop {
        match mkdir(cur, mode).await {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(cur);
                match cur.parent() {
                    Some(p) if !p.as_os_str().is_empty() => cur = p,
                    // Relative to the working directory: creating below
                    // reports the real error.
                    Some(_) => break,
                    None => return Err(io::Error::other("failed to create whole tree")),
                }
            }
            Err(_) if is_dir(cur).await => break,
            Err(e) => return Err(e),
        }
    }
    debug_assert!(
        missing.iter().all(|p| path.starts_with(p)),
        "only the path and its ancestors are made"
    );
    for p in missing.into_iter().rev() {
        match mkdir(p, mode).await {
            Ok(()) => {}
            Err(_) if is_dir(p).await => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Recursively creates a directory and all of its parent components if
/// they are missing (`mkdirat` through the engine for each).
///
/// # Errors
///
/// As `std::fs::create_dir_all`; a directory that already exists (or is
/// created meanwhile by someone else) is not an error.
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     fs::create_dir_all("/some/dir").await?;
///     Ok(())
/// }
/// ```
pub async fn create_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    mkdir_all(path.as_ref(), 0o777).await
}

/// A builder for creating directories in various manners:
/// `tokio::fs::DirBuilder`, creating through the engine.
#[derive(Debug, Default, Clone)]
pub struct DirBuilder {
    recursive: bool,
    mode: Option<u32>,
}

impl DirBuilder {
    /// Creates a new set of options with default mode/security settings
    /// for all platforms and also non-recursive.
    ///
    /// # Examples
    ///
    /// ```
    /// use overlapped_tokio::fs::DirBuilder;
    ///
    /// let builder = DirBuilder::new();
    /// ```
    pub fn new() -> Self {
        DirBuilder::default()
    }

    /// Indicates whether to create directories recursively (including all
    /// parent directories). Parents that do not exist are created with the
    /// same security and permissions settings. Default `false`.
    ///
    /// # Examples
    ///
    /// ```
    /// use overlapped_tokio::fs::DirBuilder;
    ///
    /// let mut builder = DirBuilder::new();
    /// builder.recursive(true);
    /// ```
    pub fn recursive(&mut self, recursive: bool) -> &mut Self {
        self.recursive = recursive;
        self
    }

    /// Sets the mode to create new directories with (default `0o777`, less
    /// the umask).
    ///
    /// # Examples
    ///
    /// ```
    /// use overlapped_tokio::fs::DirBuilder;
    ///
    /// let mut builder = DirBuilder::new();
    /// builder.mode(0o775);
    /// ```
    #[cfg(unix)]
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = Some(mode);
        self
    }

    /// Creates the specified directory with the configured options.
    ///
    /// # Errors
    ///
    /// As [`create_dir`], or with `recursive(true)` as [`create_dir_all`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use overlapped_tokio::fs::DirBuilder;
    /// use std::io;
    ///
    /// #[tokio::main]
    /// async fn main() -> io::Result<()> {
    ///     DirBuilder::new()
    ///         .recursive(true)
    ///         .create("/tmp/foo/bar/baz")
    ///         .await?;
    ///
    ///     Ok(())
    /// }
    /// ```
    pub async fn create(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let mode = self.mode.unwrap_or(0o777);
        if self.recursive {
            mkdir_all(path.as_ref(), mode).await
        } else {
            mkdir(path.as_ref(), mode).await
        }
    }
}
