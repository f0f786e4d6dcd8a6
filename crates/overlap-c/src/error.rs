//! Errors across the boundary: `-errno` return values, the calling
//! thread's message for its last failure, and the panic guard.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use overlapped::Error;

/// The longest message kept, with its NUL (longer ones are cut at a
/// character boundary).
const MESSAGE_ROOM: usize = 2048;

thread_local! {
    /// A plain array, not a `CString`: a thread-local without a destructor
    /// stays usable while the thread ends, so that a failure inside an
    /// `atexit` handler (run after the main thread's thread-local
    /// destructors) or a thread-exit destructor still leaves its message.
    static LAST_ERROR: RefCell<[u8; MESSAGE_ROOM]> = const { RefCell::new([0; MESSAGE_ROOM]) };
}

/// Records `msg` as the calling thread's last failure.
pub(crate) fn set_error(msg: impl Into<String>) {
    let mut msg = msg.into();
    msg.retain(|c| c != '\0');
    set_error_parts(&[&msg]);
}

/// Records the concatenation of `parts` (without NUL bytes) as the calling
/// thread's last failure, allocating nothing: usable in a child after
/// `fork()`, where another thread of the parent may have held the
/// allocator's lock.
fn set_error_parts(parts: &[&str]) {
    let _ = LAST_ERROR.try_with(|e| {
        let Ok(mut e) = e.try_borrow_mut() else {
            return;
        };
        let mut n = 0;
        for part in parts {
            let mut take = part.len().min(MESSAGE_ROOM - 1 - n);
            while !part.is_char_boundary(take) {
                take -= 1;
            }
            e[n..n + take].copy_from_slice(&part.as_bytes()[..take]);
            n += take;
        }
        debug_assert!(n < MESSAGE_ROOM, "the message leaves room for its NUL");
        e[n] = 0;
    });
    #[cfg(windows)]
    crate::win32::set_last_os_error(0);
}

/// A failure whose message is `parts` joined; allocates nothing.
pub(crate) fn fail_parts<T: Ret>(errno: i32, parts: &[&str]) -> T {
    set_error_parts(parts);
    T::from_errno(errno)
}

/// A failure: records `msg`, returns `-errno`.
pub(crate) fn fail<T: Ret>(errno: i32, msg: impl Into<String>) -> T {
    set_error(msg);
    T::from_errno(errno)
}

/// `ESHUTDOWN`: the system's on Linux; on Windows, whose C runtime has
/// none, `OVERLAP_ESHUTDOWN` (`windows.rs`).
#[cfg(unix)]
pub(crate) const ESHUTDOWN: i32 = libc::ESHUTDOWN;
#[cfg(windows)]
pub(crate) const ESHUTDOWN: i32 = crate::win32::OVERLAP_ESHUTDOWN;

/// The errno an operating-system error code stands for: itself on Linux;
/// on Windows the C runtime's errno for the Win32 code (`windows.rs`).
fn errno_of_os(code: i32) -> i32 {
    #[cfg(windows)]
    let code = crate::win32::errno_of_win32(code);
    code
}

/// The errno an engine error stands for.
pub(crate) fn errno_of(e: &Error) -> i32 {
    let errno = match e {
        Error::Io(io) => io.raw_os_error().map_or(libc::EIO, errno_of_os),
        Error::Misaligned { .. } | Error::OffsetOverflow { .. } | Error::InvalidInput(_) => {
            libc::EINVAL
        }
        Error::NotOpenedFor(_) | Error::Closed => libc::EBADF,
        Error::WouldBlock => libc::EAGAIN,
        Error::Shutdown => ESHUTDOWN,
        Error::UringUnavailable { .. } | Error::AioUnavailable { .. } => libc::EOPNOTSUPP,
        Error::Forked(_) => libc::ECHILD,
        // A privilege the process's token does not hold enabled (Windows'
        // ERROR_PRIVILEGE_NOT_HELD): not permitted, as Linux says it.
        Error::PrivilegeNotHeld { .. } => libc::EPERM,
        _ => libc::EIO,
    };
    debug_assert!(errno > 0, "an error is a positive errno, negated on return");
    errno
}

/// A failure from the engine: records its message (prefixed with `what`),
/// returns `-errno`.
pub(crate) fn fail_with<T: Ret>(what: &str, e: &Error) -> T {
    let r = fail(errno_of(e), format!("{what}: {e}"));
    #[cfg(windows)]
    crate::win32::set_last_os_error(e.raw_os_error().unwrap_or(0));
    r
}

/// A return type of an exported function that can carry `-errno`.
pub(crate) trait Ret {
    fn from_errno(errno: i32) -> Self;
}

impl Ret for i32 {
    fn from_errno(errno: i32) -> Self {
        debug_assert!(errno > 0, "a failure returns a negative errno");
        -errno
    }
}

impl Ret for i64 {
    fn from_errno(errno: i32) -> Self {
        debug_assert!(errno > 0, "a failure returns a negative errno");
        -i64::from(errno)
    }
}

impl Ret for () {
    fn from_errno(_: i32) -> Self {}
}

/// Runs an exported function's body: a panic inside is contained (it
/// becomes `-EIO` and the thread's message says what happened), never
/// unwinding into C.
pub(crate) fn guard<T: Ret>(what: &str, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            // Dropping the payload may panic too; never let it unwind.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(p)));
            fail(
                libc::EIO,
                format!("{what}: internal error (a Rust panic, contained): {msg}"),
            )
        }
    }
}

/// Turns a handle pointer into a reference, or fails with `-EINVAL`.
macro_rules! handle {
    ($ptr:expr, $what:expr, $fn:expr) => {{
        let p = $ptr;
        if p.is_null() {
            return $crate::error::fail(
                libc::EINVAL,
                format!("{}: the {} handle is NULL", $fn, $what),
            );
        }
        // SAFETY: the caller passes a handle this library made and has not
        // freed (the header's rule for every handle); NULL was refused above.
        unsafe { &*p }
    }};
}
pub(crate) use handle;

/// What a call on a parent's handle says in a child after `fork()`.
pub(crate) const FORKED: &str = "the handle was made before this process forked: an engine, its \
    files and ports belong to the parent (make a new engine in the child)";

/// Returns `-ECHILD` from the calling function when `$engine` (an
/// `overlapped::Engine`) was made before this process forked: the parent's
/// driver threads, AIO context and rings are not in the child, and its
/// operations in flight are the parent's. Allocates nothing (see
/// `set_error_parts`).
macro_rules! refuse_forked {
    ($engine:expr, $fn:expr) => {
        if $engine.is_forked_copy() {
            return $crate::error::fail_parts(libc::ECHILD, &[$fn, ": ", $crate::error::FORKED]);
        }
    };
}
pub(crate) use refuse_forked;

/// The calling thread's message for its last failure: what failed and why,
/// in words, e.g. `overlap_port_read: direct I/O needs the buffer address
/// aligned to 512 bytes, got 94371 (...)`. An empty string if nothing on
/// this thread failed yet. Like `errno`, a successful call does not clear
/// it: read it right after a call returned a negative value.
///
/// The string belongs to the library and stays valid until the calling
/// thread's next call into it; never free it. It is cut at 2047 bytes. It
/// works also while the thread or the process ends (in an `atexit`
/// handler, a thread-exit destructor).
///
/// Thread safety: any thread; each thread has its own message.
#[no_mangle]
pub extern "C" fn overlap_last_error() -> *const c_char {
    let r = catch_unwind(|| {
        LAST_ERROR
            .try_with(|e| e.as_ptr().cast::<c_char>().cast_const())
            .unwrap_or(c"".as_ptr())
    });
    r.unwrap_or(c"".as_ptr())
}
