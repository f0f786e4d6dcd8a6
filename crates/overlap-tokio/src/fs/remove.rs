//! Removing: [`remove_file`], [`remove_dir`] (`unlinkat` through the
//! engine) and [`remove_dir_all`] (std's, on the blocking pool).

use std::io;
use std::path::Path;

use super::support::{asyncify, engine};
use crate::reactor::on_ring;
/// Removes a file from the filesystem (`unlinkat` through the engine).
///
/// # Errors
///
/// As `std::fs::remove_file`: the path does not exist, is a directory, or
/// may not be removed.
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::remove_file("foo.txt").await?;
/// # Ok(())
/// # }
/// ```
pub async fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    let task = overlapped::path::remove_file(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Removes an existing, empty directory (`unlinkat` with `AT_REMOVEDIR`
/// through the engine).
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::remove_dir("/some/dir").await?;
/// # Ok(())
/// # }
/// ```
pub async fn remove_dir(path: impl AsRef<Path>) -> io::Result<()> {
    let task = overlapped::path::remove_dir(engine(), path.as_ref());
    on_ring(task).await.map_err(io::Error::from)
}

/// Removes a directory at this path, after removing all its contents. Use
/// carefully! (std's, on tokio's blocking pool.)
///
/// # Examples
///
/// ```no_run
/// use overlapped_tokio::fs;
///
/// # async fn dox() -> std::io::Result<()> {
/// fs::remove_dir_all("/some/dir").await?;
/// # Ok(())
/// # }
/// ```
pub async fn remove_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref().to_owned();
    asyncify(move || std::fs::remove_dir_all(path)).await
}
