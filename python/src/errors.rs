//! overlap's errors as the Python exceptions of the usual types.

use overlapped::Error;
use pyo3::exceptions::{
    PyBlockingIOError, PyEOFError, PyOSError, PyPermissionError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static UNSUPPORTED: PyOnceLock<Py<pyo3::types::PyType>> = PyOnceLock::new();

/// `strerror` without the " (os error N)" that `io::Error` appends.
fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.rfind(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Maps an engine error to a Python exception: `OSError(errno, strerror,
/// filename)` (which Python turns into `FileNotFoundError`,
/// `PermissionError`, ... by errno), `ValueError` for bad arguments and
/// misaligned direct I/O (naming the alignment), `io.UnsupportedOperation`
/// for a file not opened for the access, `ValueError` on a closed file,
/// `RuntimeError` after the engine's shutdown and in a child made by
/// `fork` on the parent's files, `PermissionError` for a privilege the
/// process's token does not hold enabled (Windows).
pub fn to_pyerr(e: Error, filename: Option<&Py<PyAny>>) -> PyErr {
    match e {
        Error::Io(io) => match io.raw_os_error() {
            Some(errno) => Python::attach(|py| {
                debug_assert!(errno > 0, "an operation's errno is positive");
                match filename {
                    Some(name) => PyOSError::new_err((errno, strerror(errno), name.clone_ref(py))),
                    None => PyOSError::new_err((errno, strerror(errno))),
                }
            }),
            None => PyOSError::new_err(io.to_string()),
        },
        Error::Misaligned {
            part,
            required,
            value,
        } => PyValueError::new_err(format!(
            "direct I/O needs the {part} aligned to {required} bytes, got {value} \
             (use overlapped.AlignedBuffer, and offsets and lengths that are multiples of \
             File.alignment.offset)"
        )),
        Error::NotOpenedFor(what) => {
            let msg = format!(
                "File not open for {}",
                if what == "read" { "reading" } else { "writing" }
            );
            Python::attach(
                |py| match UNSUPPORTED.import(py, "io", "UnsupportedOperation") {
                    Ok(t) => PyErr::from_type(t.clone(), msg),
                    Err(e) => e,
                },
            )
        }
        Error::Closed => PyValueError::new_err("I/O operation on closed file"),
        Error::WouldBlock => PyBlockingIOError::new_err(e.to_string()),
        Error::UnexpectedEof { .. } => PyEOFError::new_err(e.to_string()),
        Error::Shutdown | Error::Forked(_) | Error::UringUnavailable { .. } => {
            PyRuntimeError::new_err(e.to_string())
        }
        Error::OffsetOverflow { .. } | Error::InvalidInput(_) => {
            PyValueError::new_err(e.to_string())
        }
        // As Python raises a refused privilege: errno EPERM, with its words.
        Error::PrivilegeNotHeld { .. } => PyPermissionError::new_err((libc::EPERM, e.to_string())),
        other => PyOSError::new_err(other.to_string()),
    }
}
