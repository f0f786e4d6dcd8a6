//! What a path is: [`metadata`], [`symlink_metadata`] and
//! [`set_permissions`] (std's, on the blocking pool), and [`statx`],
//! [`symlink_statx`], [`try_exists`] (`statx` through the engine, or on
//! the calling thread from memory when the dentry cache holds the path on a
//! local file system: `overlapped::path::metadata`).

use std::io;
use std::path::Path;

use super::support::{asyncify, engine};
use crate::reactor::on_ring;
/// Given a path, queries the file system to get information about a file,
/// directory, etc., following symbolic links. (A `std::fs::Metadata` can
/// only come from std: this runs on tokio's blocking pool; [`statx`] asks
/// the engine.)
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// #[tokio::main]
/// async fn main() -> std::io::Result<()> {
///     let attr = fs::metadata("/some/file/path.txt").await?;
///     // inspect attr ...
///     Ok(())
/// }
/// ```
pub async fn metadata(path: impl AsRef<Path>) -> io::Result<std::fs::Metadata> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::metadata(path)).await
}

/// Queries the file system metadata for a path without following a
/// symbolic link (on tokio's blocking pool, as [`metadata`];
/// [`symlink_statx`] asks the engine).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// let attr = fs::symlink_metadata("/some/file/path.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn symlink_metadata(path: impl AsRef<Path>) -> io::Result<std::fs::Metadata> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::symlink_metadata(path)).await
}

/// Beyond tokio: what [`metadata`] reports, by `statx` through the engine
/// (or from memory on the calling thread, as `overlapped::path::metadata`
/// answers a cached path), as the engine's [`overlapped::path::Stat`].
///
/// ```
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// use overlapped_tokio::fs;
/// let dir = tempfile::tempdir()?;
/// fs::write(dir.path().join("f"), b"12345").await?;
/// let st = fs::statx(dir.path().join("f")).await?;
/// assert!(st.is_file());
/// assert_eq!(st.len, 5);
/// # Ok::<(), std::io::Error>(()) })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub async fn statx(path: impl AsRef<Path>) -> io::Result<overlapped::path::Stat> {
    let task = overlapped::path::metadata(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Beyond tokio: what [`symlink_metadata`] reports, by `statx` with
/// `AT_SYMLINK_NOFOLLOW` through the engine (or from memory, as [`statx`]).
pub async fn symlink_statx(path: impl AsRef<Path>) -> io::Result<overlapped::path::Stat> {
    let task = overlapped::path::symlink_metadata(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Returns `Ok(true)` if the path points at an existing entity, following
/// symbolic links (`statx`, as [`statx`] runs it). `Ok(false)` only when the
/// path does not exist; an error (such as permission denied) means that
/// existence cannot be told. A broken symbolic link is `Ok(false)`.
///
/// # Examples
///
/// ```no_run
/// # use overlapped_tokio::fs;
/// # async fn dox() -> std::io::Result<()> {
/// fs::try_exists("foo.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn try_exists(path: impl AsRef<Path>) -> io::Result<bool> {
    let task = overlapped::path::try_exists(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Changes the permissions found on a file or a directory (`chmod`, on
/// tokio's blocking pool).
pub async fn set_permissions(path: impl AsRef<Path>, perm: std::fs::Permissions) -> io::Result<()> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::set_permissions(path, perm)).await
}
