//! What the functions and types of `fs` share: tokio's blocking pool (or a
//! thread of its own outside a runtime), the engine, and the mapping of an
//! engine error to the `io::Error` std would have given.

use std::io;

/// Runs `f` on tokio's blocking pool (on a thread of its own outside a
/// tokio runtime).
pub(crate) async fn asyncify<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    spawn_blocking(f).await?
}

/// Starts `f` on tokio's blocking pool when polled inside a tokio runtime
/// (as `tokio::task::spawn_blocking`), else on a thread of its own: a
/// future of this crate polled outside tokio (`futures::executor::block_on`,
/// `overlapped::block_on`) works rather than panics.
pub(crate) fn spawn_blocking<F, T>(f: F) -> Blocking<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        return Blocking::Pool(handle.spawn_blocking(f));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("overlapped-tokio-blocking".into())
        .spawn(move || {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(res.map_err(|_| ()));
        });
    match spawned {
        Ok(_) => Blocking::Thread(rx),
        Err(e) => Blocking::Failed(Some(e)),
    }
}

/// The future of [`spawn_blocking`]: the result of the blocking call, or
/// why there is none (it panicked, its runtime shut down, no thread could
/// be started), as tokio reports it.
pub(crate) enum Blocking<T> {
    Pool(tokio::task::JoinHandle<T>),
    Thread(tokio::sync::oneshot::Receiver<Result<T, ()>>),
    Failed(Option<io::Error>),
}

impl<T> std::fmt::Debug for Blocking<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Blocking::Pool(_) => "Blocking::Pool",
            Blocking::Thread(_) => "Blocking::Thread",
            Blocking::Failed(_) => "Blocking::Failed",
        })
    }
}

impl<T> std::future::Future for Blocking<T> {
    type Output = io::Result<T>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<T>> {
        use std::task::{ready, Poll};
        // Every variant is Unpin.
        Poll::Ready(match self.get_mut() {
            Blocking::Pool(h) => ready!(std::pin::Pin::new(h).poll(cx)).map_err(join_err),
            Blocking::Thread(rx) => match ready!(std::pin::Pin::new(rx).poll(cx)) {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(())) | Err(_) => Err(io::Error::other("background task failed: panicked")),
            },
            Blocking::Failed(e) => Err(e
                .take()
                .unwrap_or_else(|| io::Error::other("background task failed"))),
        })
    }
}

/// A blocking task that did not finish, as tokio reports it.
pub(crate) fn join_err(e: tokio::task::JoinError) -> io::Error {
    io::Error::other(format!("background task failed: {e}"))
}

/// An engine error as std would have reported it: `not_opened` is the errno
/// the kernel gives for a descriptor not open for the access (`EBADF` for
/// reads and writes, `EINVAL` for `ftruncate`), which the engine checks
/// before submission.
pub(crate) fn engine_err(e: overlapped::Error, not_opened: i32) -> io::Error {
    match e {
        overlapped::Error::NotOpenedFor(_) => io::Error::from_raw_os_error(not_opened),
        overlapped::Error::Closed => io::Error::from_raw_os_error(code::CLOSED),
        e => e.into(),
    }
}

/// The system's codes for the errors std would give where the engine
/// refuses before any system call: a file not opened for the access, a
/// closed file.
#[cfg(unix)]
pub(crate) mod code {
    /// A read or write on a file not opened for it (`EBADF`).
    pub(crate) const NOT_OPENED: i32 = libc::EBADF;
    /// Open options that do not go together (`EINVAL`).
    pub(crate) const INVALID: i32 = libc::EINVAL;
    /// `set_len` of a file not opened for writing (`ftruncate`: `EINVAL`).
    pub(crate) const SET_LEN_NOT_OPENED: i32 = libc::EINVAL;
    /// A closed descriptor (`EBADF`).
    pub(crate) const CLOSED: i32 = libc::EBADF;
}

/// The system's codes for the errors std would give where the engine
/// refuses before any system call (Win32 errors, as `GetLastError`).
#[cfg(windows)]
pub(crate) mod code {
    use windows_sys::Win32::Foundation::{
        ERROR_ACCESS_DENIED, ERROR_INVALID_HANDLE, ERROR_INVALID_PARAMETER, ERROR_NEGATIVE_SEEK,
    };
    /// A read or write on a handle without that access: `ReadFile` and
    /// `WriteFile` fail with `ERROR_ACCESS_DENIED`.
    pub(crate) const NOT_OPENED: i32 = ERROR_ACCESS_DENIED as i32;
    /// Open options that do not go together (`ERROR_INVALID_PARAMETER`,
    /// std's own check).
    pub(crate) const INVALID: i32 = ERROR_INVALID_PARAMETER as i32;
    /// `set_len` of a handle without write access
    /// (`SetFileInformationByHandle`: `ERROR_ACCESS_DENIED`).
    pub(crate) const SET_LEN_NOT_OPENED: i32 = ERROR_ACCESS_DENIED as i32;
    /// A seek before the start of the file (`SetFilePointerEx`:
    /// `ERROR_NEGATIVE_SEEK`).
    pub(crate) const NEGATIVE_SEEK: i32 = ERROR_NEGATIVE_SEEK as i32;
    /// A closed handle (`ERROR_INVALID_HANDLE`).
    pub(crate) const CLOSED: i32 = ERROR_INVALID_HANDLE as i32;
}

pub(super) fn engine() -> &'static overlapped::Engine {
    crate::engine()
}

/// Files up to this size are read or written with one request; larger ones
/// in pieces of this size (a request larger than the engine's in-flight
/// budget waits until nothing else is in flight).
pub(super) const WHOLE_MAX: usize = 8 << 20;
