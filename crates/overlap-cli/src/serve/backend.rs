//! The engine's `ServeDir` backend as `overlap serve` uses it (Linux),
//! with two things kept for the request being answered, in a task-local
//! slot of its connection ([`scope`]):
//!
//! - `ServeDir` asks for a path's metadata (is it a directory?) and then
//!   opens it: the metadata is taken from a real open of the path
//!   (`openat2` through the dentry cache, on the calling thread when it
//!   holds the path), and the open that follows for the same path takes
//!   that file instead of walking the path again;
//! - a duplicate of the descriptor of the file opened last, for a body
//!   sent by `sendfile` (`super::sendfile`).
//!
//! Outside a scope it is the engine's backend as it is.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::pin::Pin;

use overlapped_tokio::tower_http::{OverlapBackend, OverlapFile, OverlapMetadata};
use tower_http::services::fs::{self as thfs, File as _};

/// What one connection keeps for the request it answers: small, for the
/// task-local slot moves it in and out at each poll of the connection.
#[derive(Default)]
struct Kept {
    /// A file opened for its metadata, with its path, for the open that
    /// follows.
    opened_for_metadata: Option<Box<(PathBuf, OverlapFile)>>,
    /// A duplicate of the descriptor of the file opened last.
    last_opened: Option<OwnedFd>,
}

tokio::task_local! {
    static KEPT: RefCell<Kept>;
}

/// Runs a connection's future where the backend keeps what it opens.
pub fn scope<F: Future>(f: F) -> impl Future<Output = F::Output> {
    KEPT.scope(RefCell::new(Kept::default()), f)
}

/// A duplicate of the descriptor the backend opened last on this
/// connection, taken, and whatever else was kept dropped: called as each
/// request's response is made, so that the next request begins with
/// nothing kept (`None` outside [`scope`]).
pub fn take_opened() -> Option<OwnedFd> {
    KEPT.try_with(|k| std::mem::take(&mut *k.borrow_mut()).last_opened)
        .ok()
        .flatten()
}

/// The engine's backend, keeping what it opens within [`scope`].
#[derive(Clone, Debug)]
pub struct Backend(pub OverlapBackend);

type BoxFuture<T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send>>;

impl thfs::Backend for Backend {
    type File = OverlapFile;
    type Metadata = OverlapMetadata;
    type OpenFuture = BoxFuture<OverlapFile>;
    type MetadataFuture = BoxFuture<OverlapMetadata>;

    fn open(&self, path: PathBuf) -> Self::OpenFuture {
        let kept = KEPT
            .try_with(|k| k.borrow_mut().opened_for_metadata.take())
            .ok()
            .flatten()
            .filter(|kept| kept.0 == path);
        let open = match kept {
            Some(kept) => Box::pin(std::future::ready(Ok(kept.1))),
            None => self.0.open(path),
        };
        Box::pin(async move {
            let file = open.await?;
            // Without a descriptor to spare, the body is read as
            // `ServeDir` reads it.
            let dup = file.get_ref().as_fd().try_clone_to_owned().ok();
            let _ = KEPT.try_with(|k| k.borrow_mut().last_opened = dup);
            Ok(file)
        })
    }

    fn metadata(&self, path: PathBuf) -> Self::MetadataFuture {
        if KEPT.try_with(|_| ()).is_err() {
            return self.0.metadata(path);
        }
        let (open, backend) = (self.0.open(path.clone()), self.0.clone());
        Box::pin(async move {
            match open.await {
                Ok(file) => {
                    let meta = file.metadata().await?;
                    let kept = Some(Box::new((path, file)));
                    let _ = KEPT.try_with(|k| k.borrow_mut().opened_for_metadata = kept);
                    Ok(meta)
                }
                // Not found (or not served) by the open as by `statx`.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
                // A file that may not be read still has metadata.
                Err(_) => backend.metadata(path).await,
            }
        })
    }
}
