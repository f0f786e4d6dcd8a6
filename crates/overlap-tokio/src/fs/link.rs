//! Names and links: [`rename`], [`hard_link`], [`symlink`] (through the
//! engine), and [`canonicalize`], [`read_link`] (on the blocking pool).

use std::io;
use std::path::{Path, PathBuf};

use super::support::{asyncify, engine};
use crate::reactor::on_ring;
/// Renames a file or directory to a new name, replacing the original file
/// if `to` already exists (`renameat` through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::rename("a.txt", "b.txt").await?; // Rename a.txt to b.txt
/// # Ok(())
/// # }
/// ```
pub async fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let task = overlapped::path::rename(engine(), from.as_ref(), to.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Creates a new hard link on the filesystem: `link` names the same file
/// as `original` (`linkat` through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// #[tokio::main]
/// async fn main() -> std::io::Result<()> {
///     fs::hard_link("a.txt", "b.txt").await?; // Hard link a.txt to b.txt
///     Ok(())
/// }
/// ```
pub async fn hard_link(original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
    let task = overlapped::path::hard_link(engine(), original.as_ref(), link.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Creates a new symbolic link on the filesystem: `link` points to
/// `original` (`symlinkat` through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::symlink("a.txt", "b.txt").await?;
/// # Ok(())
/// # }
/// ```
#[cfg(unix)]
pub async fn symlink(original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
    let task = overlapped::path::symlink(engine(), original.as_ref(), link.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Creates a new file symbolic link on the filesystem: `link` points to
/// the file `original` (`std::os::windows::fs::symlink_file` on tokio's
/// blocking pool, as tokio's: the engine's `symlink` chooses the kind by
/// what `original` is, this one makes a file link whatever it is).
///
/// Windows needs developer mode or the `SeCreateSymbolicLinkPrivilege`.
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::symlink_file("a.txt", "b.txt").await?;
/// # Ok(())
/// # }
/// ```
#[cfg(windows)]
pub async fn symlink_file(original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
    let (original, link) = (original.as_ref().to_owned(), link.as_ref().to_owned());
    asyncify(move || std::os::windows::fs::symlink_file(original, link)).await
}

/// Creates a new directory symbolic link on the filesystem: `link` points
/// to the directory `original` (`std::os::windows::fs::symlink_dir` on
/// tokio's blocking pool, as tokio's).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::symlink_dir("a", "b").await?;
/// # Ok(())
/// # }
/// ```
#[cfg(windows)]
pub async fn symlink_dir(original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
    let (original, link) = (original.as_ref().to_owned(), link.as_ref().to_owned());
    asyncify(move || std::os::windows::fs::symlink_dir(original, link)).await
}

/// Returns the canonical, absolute form of a path with all intermediate
/// components normalized and symbolic links resolved (`realpath`, on
/// tokio's blocking pool).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
/// use std::io;
///
/// #[tokio::main]
/// async fn main() -> io::Result<()> {
///     let path = fs::canonicalize("../a/../foo.txt").await?;
///     Ok(())
/// }
/// ```
pub async fn canonicalize(path: impl AsRef<Path>) -> io::Result<PathBuf> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::canonicalize(path)).await
}

/// Reads a symbolic link, returning the file that the link points to (on
/// tokio's blocking pool).
pub async fn read_link(path: impl AsRef<Path>) -> io::Result<PathBuf> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::read_link(path)).await
}
