//! Windows: the I/O completion port driver's number, the errno value of
//! a shut-down engine, and errors as the C runtime's errno values, with the
//! Win32 code of the calling thread's last failure kept beside them.
//!
//! Error codes. The engine reports Win32 codes (`GetLastError()`); every
//! function still returns `-errno`, as on Linux: the C runtime's
//! `<errno.h>` value the Win32 code maps to (the table below, the one the
//! Microsoft C runtime's `_dosmaperr` applies for `_open`, `_read` and
//! the like, e.g. ERROR_FILE_NOT_FOUND -> ENOENT), `-EIO` for a code with
//! no errno counterpart. One set of codes on both systems keeps a
//! caller's `r == -ENOENT` portable (libuv and the C runtime itself do
//! the same); the Win32 code is not lost: overlap_last_os_error() gives
//! it for the calling thread's last failure, and overlap_last_error()'s
//! message carries the system's text with `(os error N)`.

use std::cell::Cell;

/// Windows only: the I/O completion port driver (overlapped `ReadFile`
/// and `WriteFile` on a completion port, the thread pool for the rest),
/// which `OVERLAP_DRIVER_AUTO` picks there.
pub const OVERLAP_DRIVER_IOCP: i32 = 4;

/// Windows only: the errno value of `-ESHUTDOWN` returns (the engine is
/// shut down), which the C runtime's `<errno.h>` lacks: Winsock's
/// WSAESHUTDOWN, as Python's `errno.ESHUTDOWN` is on Windows. Outside
/// the C runtime's errno range (below 150), so it is never another
/// errno. `#define ESHUTDOWN OVERLAP_ESHUTDOWN` if the code names it.
pub const OVERLAP_ESHUTDOWN: i32 = 10058;

thread_local! {
    /// The Win32 code of the calling thread's last failure (0: the
    /// failure was not the system's). No destructor, as `LAST_ERROR`.
    static LAST_OS_ERROR: Cell<i32> = const { Cell::new(0) };
}

/// Records `code` as the Win32 code of the calling thread's last failure.
pub(crate) fn set_last_os_error(code: i32) {
    debug_assert!(code >= 0, "a Win32 error code is not negative");
    let _ = LAST_OS_ERROR.try_with(|c| c.set(code));
}

/// The C runtime's errno for a Win32 error code (`_dosmaperr`'s table,
/// plus cancellation and the errors of overlapped I/O); `EIO` when none
/// fits.
pub(crate) fn errno_of_win32(code: i32) -> i32 {
    let errno = match code {
        // FILE_NOT_FOUND, PATH_NOT_FOUND, INVALID_DRIVE, NO_MORE_FILES,
        // BAD_NETPATH, BAD_NET_NAME, INVALID_NAME, BAD_PATHNAME,
        // FILENAME_EXCED_RANGE
        2 | 3 | 15 | 18 | 53 | 67 | 123 | 161 | 206 => libc::ENOENT,
        // ACCESS_DENIED, WRITE_PROTECT, SHARING_VIOLATION, LOCK_VIOLATION,
        // NETWORK_ACCESS_DENIED, CANNOT_MAKE, DRIVE_LOCKED,
        // USER_MAPPED_FILE
        5 | 19 | 32 | 33 | 65 | 82 | 108 | 1224 => libc::EACCES,
        // INVALID_HANDLE, INVALID_TARGET_HANDLE, DIRECT_ACCESS_HANDLE
        6 | 114 | 130 => libc::EBADF,
        // NOT_ENOUGH_MEMORY, OUTOFMEMORY, NO_SYSTEM_RESOURCES,
        // NONPAGED_SYSTEM_RESOURCES, PAGED_SYSTEM_RESOURCES, WORKING_SET_QUOTA,
        // NOT_ENOUGH_QUOTA
        8 | 14 | 1450 | 1451 | 1452 | 1453 | 1816 => libc::ENOMEM,
        4 => libc::EMFILE,             // TOO_MANY_OPEN_FILES
        80 | 183 => libc::EEXIST,      // FILE_EXISTS, ALREADY_EXISTS
        17 => libc::EXDEV,             // NOT_SAME_DEVICE
        145 => libc::ENOTEMPTY,        // DIR_NOT_EMPTY
        267 => libc::ENOTDIR,          // DIRECTORY
        39 | 112 => libc::ENOSPC,      // HANDLE_DISK_FULL, DISK_FULL
        109 | 232 => libc::EPIPE,      // BROKEN_PIPE, NO_DATA
        995 | 1223 => libc::ECANCELED, // OPERATION_ABORTED, CANCELLED
        998 | 487 => libc::EFAULT,     // NOACCESS, INVALID_ADDRESS
        50 | 1 => libc::EOPNOTSUPP,    // NOT_SUPPORTED, INVALID_FUNCTION
        120 => libc::ENOSYS,           // CALL_NOT_IMPLEMENTED (Wine's file allocation)
        1314 => libc::EPERM,           // PRIVILEGE_NOT_HELD
        170 | 142 => libc::EBUSY,      // BUSY, BUSY_DRIVE
        258 | 1460 => libc::ETIMEDOUT, // WAIT_TIMEOUT, TIMEOUT
        // INVALID_PARAMETER, INVALID_DATA, NEGATIVE_SEEK, SEEK_ON_DEVICE,
        // INVALID_ACCESS
        87 | 13 | 131 | 132 | 12 => libc::EINVAL,
        _ => libc::EIO,
    };
    debug_assert!(errno > 0, "an errno is positive");
    errno
}

/// Windows only: the Win32 error code (`GetLastError()`'s) behind the
/// calling thread's last failure, e.g. 32 (ERROR_SHARING_VIOLATION) when
/// overlap_file_open() returned `-EACCES` because another process holds
/// the file; 0 when that failure did not come from the system (a NULL
/// argument, an unknown flag, a shut-down engine). Read it right after
/// the call returned a negative value, as overlap_last_error().
///
/// Error codes on Windows. Every function returns `-errno` there too,
/// with the C runtime's `<errno.h>` values: a Win32 error becomes the
/// errno the Microsoft C runtime gives it (its `_dosmaperr` table:
/// ERROR_FILE_NOT_FOUND and ERROR_PATH_NOT_FOUND -> ENOENT,
/// ERROR_ACCESS_DENIED and ERROR_SHARING_VIOLATION -> EACCES,
/// ERROR_INVALID_HANDLE -> EBADF, ERROR_INVALID_PARAMETER -> EINVAL,
/// ERROR_FILE_EXISTS -> EEXIST, ERROR_DISK_FULL -> ENOSPC,
/// ERROR_NOT_ENOUGH_MEMORY -> ENOMEM, ...; ERROR_OPERATION_ABORTED ->
/// ECANCELED), and `-EIO` when no errno fits. Why: one set of codes on
/// every system keeps `r == -ENOENT` portable, never collides with the
/// library's own `-EINVAL`, `-EAGAIN`, `-ESHUTDOWN` (raw Win32 codes
/// would: ERROR_ACCESS_DENIED is 5, which is EIO), and is what the C
/// runtime's own `_read`/`_open` and libuv do. The Win32 code is kept:
/// this function gives it, and overlap_last_error()'s message carries
/// the system's text and `(os error N)`. Linux-only features fail with
/// `-EOPNOTSUPP` (io_uring, Linux AIO, overlap_file_adopt() of a
/// descriptor: adopt a HANDLE with overlap_file_adopt_handle()).
/// overlap_file_open() takes a UTF-8 path and ignores `mode`; the file
/// is opened for overlapped I/O.
///
/// A completion's `result` is the errno only (`-EIO` for a Win32 code
/// without one): an operation reaped by overlap_port_wait() does not set
/// this.
///
/// Thread safety: any thread; each thread has its own code.
#[no_mangle]
pub extern "C" fn overlap_last_os_error() -> u32 {
    let code = LAST_OS_ERROR.try_with(Cell::get).unwrap_or(0);
    code as u32
}
