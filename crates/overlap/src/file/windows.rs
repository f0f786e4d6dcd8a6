//! Windows' ways in and out of a [`File`]: adopting a caller's handle and
//! giving it back, the counterparts of `from_fd` and `into_fd`.

use std::os::windows::io::{AsRawHandle, FromRawHandle, IntoRawHandle, OwnedHandle, RawHandle};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{alignment_of, File, FileInner, Mode};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::sys;

impl File {
    /// Takes ownership of an open handle (a `std::fs::File` converts into
    /// one with `.into()`). The handle must have been opened for
    /// overlapped I/O (`FILE_FLAG_OVERLAPPED`, with std's
    /// `OpenOptionsExt::custom_flags`): the engine's reads and writes are
    /// overlapped ones. Its access (read, write, append) and
    /// `FILE_FLAG_NO_BUFFERING` are read from the handle
    /// (`NtQueryInformationFile`); for `NO_BUFFERING` the alignment is
    /// read here too, on the calling thread. The handle is associated
    /// with the engine's driver (its I/O completion port) before any
    /// operation.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a handle opened for synchronous I/O (no
    /// `FILE_FLAG_OVERLAPPED`) or whose value is not a kernel handle's;
    /// [`Error::Io`] when the system cannot tell how the handle was opened,
    /// or the driver cannot associate it (a handle already associated with
    /// another completion port). The handle is closed then.
    pub fn from_handle(engine: &Engine, handle: OwnedHandle) -> Result<File> {
        let mode = match sys::handle_mode(handle.as_raw_handle()) {
            Ok(m) => m,
            Err(sys::Refused::Synchronous) => {
                return Err(Error::InvalidInput(
                    "the handle was opened for synchronous I/O: open it with \
                     FILE_FLAG_OVERLAPPED for the engine to adopt it"
                        .into(),
                ))
            }
            Err(sys::Refused::OutOfRange) => {
                return Err(Error::InvalidInput(format!(
                    "{:?} is not a kernel handle the engine can keep",
                    handle.as_raw_handle()
                )))
            }
            Err(sys::Refused::Os(r)) => return Err(Error::from_errno((-r) as i32)),
        };
        let Some(fd) = sys::fd_of(handle.into_raw_handle()) else {
            // `handle_mode` has checked the value: not reached.
            return Err(Error::InvalidInput("not a kernel handle".into()));
        };
        let mode = Mode {
            readable: mode.readable,
            writable: mode.writable,
            append: mode.append,
            direct: mode.direct,
        };
        // From here the file owns the handle: an error below closes it.
        let inner = FileInner::new(fd, engine.shared().clone(), mode);
        engine.shared().driver.associate(fd)?;
        if inner.direct {
            // SAFETY: RawStat is plain old data; all-zero is a valid value.
            let mut st: sys::RawStat = unsafe { std::mem::zeroed() };
            // SAFETY: `st` is writable; the handle is ours and open.
            if unsafe { sys::stat(fd, &mut st) } == 0 {
                let _ = inner.align.set(alignment_of(&st));
            }
        }
        Ok(File {
            inner: Arc::new(inner),
            engine: engine.clone(),
        })
    }

    /// Gives the handle back, when this is the file's only handle and no
    /// operation holds it (none in flight); otherwise returns the file. A
    /// closed file is returned too. The handle stays associated with the
    /// engine's completion port (Windows cannot undo that): an overlapped
    /// call on it with an event whose low bit is set completes without
    /// the port.
    pub fn into_handle(self) -> std::result::Result<OwnedHandle, File> {
        let File { inner, engine } = self;
        match Arc::try_unwrap(inner) {
            Ok(inner) => {
                let fd = inner.fd.swap(-1, Ordering::AcqRel);
                if fd < 0 || inner.state.load(Ordering::Acquire) != 0 {
                    inner.fd.store(fd, Ordering::Release);
                    return Err(File {
                        inner: Arc::new(inner),
                        engine,
                    });
                }
                // SAFETY: the handle was this file's alone, no operation
                // uses it, and swapping -1 in keeps FileInner from closing it.
                Ok(unsafe { OwnedHandle::from_raw_handle(sys::handle(fd)) })
            }
            Err(inner) => Err(File { inner, engine }),
        }
    }

    /// The raw handle (for diagnostics; `INVALID_HANDLE_VALUE` once
    /// closed).
    pub fn as_raw_handle(&self) -> RawHandle {
        sys::handle(self.inner.fd())
    }
}

impl AsRawHandle for File {
    fn as_raw_handle(&self) -> RawHandle {
        File::as_raw_handle(self)
    }
}
