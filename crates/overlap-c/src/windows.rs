//! Windows: adopting and lending a `HANDLE` (errors: `crate::win32`).

use std::ffi::c_void;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};

use windows_sys::Win32::Foundation::{
    CloseHandle, DuplicateHandle, DUPLICATE_SAME_ACCESS, HANDLE, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::System::Threading::GetCurrentProcess;

use overlapped::File;

use crate::engine::overlap_engine;
use crate::error::{fail, fail_with, guard, handle, refuse_forked};
use crate::file::{overlap_file, store_file};

/// Windows only: adopts a file `HANDLE` the caller opened (`CreateFileW`
/// with `FILE_FLAG_OVERLAPPED`, which the engine's reads and writes
/// need): on success the engine owns the file and the caller's handle is
/// closed (the engine keeps a duplicate of it, which overlap_file_handle()
/// gives, and closes that in overlap_file_close() or overlap_file_free());
/// `DuplicateHandle()` it first to keep one of your own. Its access (read,
/// write, append) and `FILE_FLAG_NO_BUFFERING` are read from the handle;
/// for NO_BUFFERING the alignment is asked of the volume. The file is
/// associated with the engine's I/O completion port (on the IOCP driver)
/// before any operation: Windows cannot undo that, and a file belongs to
/// one port. Stores the file's handle in `*out`.
///
/// Returns 0, or `-EBADF` (NULL, `INVALID_HANDLE_VALUE` or not an open
/// handle), `-EINVAL` (NULL `engine` or `out`, a handle opened without
/// `FILE_FLAG_OVERLAPPED`: the message says so), `-ESHUTDOWN` (the engine
/// is shut down), or the system's error as `-errno`, with
/// overlap_last_os_error() giving the Win32 code (a file already
/// associated with another completion port, for example). On failure the
/// handle is not adopted and stays the caller's, open.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_file_adopt_handle(
    engine: *const overlap_engine,
    handle: *mut c_void,
    out: *mut *mut overlap_file,
) -> i32 {
    adopt(
        "overlap_file_adopt_handle",
        engine,
        handle,
        out,
        File::from_handle,
    )
}

/// Windows only: adopts a file `HANDLE` opened for synchronous I/O (no
/// `FILE_FLAG_OVERLAPPED`: `fopen`'s, `_open`'s, or `CreateFileW`'s
/// default), as overlap_file_adopt_handle() adopts an overlapped one, with
/// the same ownership rules. Its reads and writes run as blocking calls
/// (the offset in an `OVERLAPPED`) on the engine's bounded pool; the
/// handle is associated with no completion port. Windows performs the I/O
/// of such a handle one operation at a time, in every duplicate of it:
/// concurrent operations are correct but do not overlap. Each read and
/// write also moves the handle's file position past its end. A handle
/// opened for overlapped I/O is taken too, and treated the same way (one
/// already associated with another completion port, for example).
///
/// Returns 0, or `-EBADF` (NULL, `INVALID_HANDLE_VALUE` or not an open
/// handle), `-EINVAL` (NULL `engine` or `out`), `-ESHUTDOWN` (the engine
/// is shut down), or the system's error as `-errno`, with
/// overlap_last_os_error() giving the Win32 code. On failure the handle is
/// not adopted and stays the caller's, open.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_file_adopt_synchronous_handle(
    engine: *const overlap_engine,
    handle: *mut c_void,
    out: *mut *mut overlap_file,
) -> i32 {
    adopt(
        "overlap_file_adopt_synchronous_handle",
        engine,
        handle,
        out,
        File::from_synchronous_handle,
    )
}

/// Adopts `handle` with `from` (named `f` in messages): the checks, the
/// duplicate the engine keeps, and the caller's handle closed on success.
fn adopt(
    f: &'static str,
    engine: *const overlap_engine,
    handle: *mut c_void,
    out: *mut *mut overlap_file,
    from: fn(&overlapped::Engine, OwnedHandle) -> overlapped::Result<File>,
) -> i32 {
    guard(f, || {
        let e = handle!(engine, "engine", f);
        refuse_forked!(e.engine, f);
        if out.is_null() {
            return fail(libc::EINVAL, format!("{f}: out is NULL"));
        }
        if handle.is_null() || handle == INVALID_HANDLE_VALUE {
            return fail(
                libc::EBADF,
                format!("{f}: {handle:?} is not an open handle (NULL or INVALID_HANDLE_VALUE)"),
            );
        }
        if let Some(r) = e.refuse_shut(f) {
            return r;
        }
        let dup = match duplicate(handle) {
            Ok(dup) => dup,
            Err(err) => return fail_with(&format!("{f}: {handle:?}"), &err.into()),
        };
        let dup_raw = dup.as_raw_handle();
        // A refusal below closes the duplicate: the caller's handle stays.
        match from(&e.engine, dup) {
            Ok(file) => {
                debug_assert!(
                    file.as_raw_handle() == dup_raw,
                    "the file keeps the duplicate"
                );
                // SAFETY: the caller handed its handle over and the engine
                // owns the file through the duplicate: the original is
                // ours to close, once.
                unsafe { CloseHandle(handle) };
                store_file(out, file)
            }
            Err(err) => fail_with(f, &err),
        }
    })
}

/// A duplicate of `handle` (same access, same file object: its overlapped
/// mode, completion port and offset rules are the original's).
fn duplicate(handle: HANDLE) -> std::io::Result<OwnedHandle> {
    let mut dup: HANDLE = std::ptr::null_mut();
    // SAFETY: GetCurrentProcess() is a pseudo-handle needing no close;
    // `handle` is any value (an invalid one fails with
    // ERROR_INVALID_HANDLE); `dup` is writable.
    let ok = unsafe {
        let me = GetCurrentProcess();
        DuplicateHandle(me, handle, me, &mut dup, 0, 0, DUPLICATE_SAME_ACCESS)
    };
    if ok == 0 {
        return Err(std::io::Error::last_os_error());
    }
    debug_assert!(!dup.is_null(), "DuplicateHandle succeeded with a handle");
    // SAFETY: `dup` is a new handle that nothing else owns.
    Ok(unsafe { OwnedHandle::from_raw_handle(dup as RawHandle) })
}

/// Windows only: stores the file's `HANDLE` in `*out` (for
/// `GetFileSizeEx` and the like; do not close it, nor use it with another
/// completion port). Returns 0, `-EBADF` once the file is closed (`*out`
/// is then `INVALID_HANDLE_VALUE`), `-EINVAL` for NULL arguments.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_file_handle(file: *const overlap_file, out: *mut *mut c_void) -> i32 {
    const F: &str = "overlap_file_handle";
    guard(F, || {
        let f = handle!(file, "file", F);
        if out.is_null() {
            return fail(libc::EINVAL, format!("{F}: out is NULL"));
        }
        let h = f.file.as_raw_handle();
        debug_assert!(
            !h.is_null(),
            "a file's handle is open or INVALID_HANDLE_VALUE"
        );
        // SAFETY: out is a writable pointer (checked non-NULL).
        unsafe { out.write(h.cast()) };
        if f.file.as_raw_fd() < 0 {
            return fail(libc::EBADF, format!("{F}: the file is closed"));
        }
        0
    })
}
