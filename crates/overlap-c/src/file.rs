//! Files: open by path, adopt a descriptor, the direct-I/O alignment,
//! close and free; and the blocking conveniences (`pread`/`pwrite`-like,
//! through the calling thread's own ring).

use std::ffi::{c_char, c_void, CStr};
#[cfg(unix)]
use std::os::fd::{FromRawFd, OwnedFd};
#[cfg(unix)]
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

use overlapped::{File, OpenOptions};

use crate::buf::CBuf;
use crate::engine::overlap_engine;
use crate::error::{fail, fail_parts, fail_with, guard, handle, refuse_forked};

/// Open for reading.
pub const OVERLAP_OPEN_READ: u32 = 1;
/// Open for writing.
pub const OVERLAP_OPEN_WRITE: u32 = 2;
/// Create the file if it does not exist (`O_CREAT`; needs WRITE).
pub const OVERLAP_OPEN_CREATE: u32 = 4;
/// Truncate it to 0 bytes (`O_TRUNC`; needs WRITE).
pub const OVERLAP_OPEN_TRUNCATE: u32 = 8;
/// Create it, failing with `-EEXIST` if it exists (`O_CREAT|O_EXCL`).
pub const OVERLAP_OPEN_EXCLUSIVE: u32 = 16;
/// Every write goes to the end of the file (`O_APPEND`; needs WRITE).
pub const OVERLAP_OPEN_APPEND: u32 = 32;
/// Bypass the page cache (`O_DIRECT`): buffer addresses, offsets and
/// lengths must then be multiples of overlap_file_alignment()'s figures,
/// or the submission fails with `-EINVAL` (nothing is submitted).
pub const OVERLAP_OPEN_DIRECT: u32 = 64;
/// Each write completes only once its data is on stable storage
/// (`O_DSYNC`).
pub const OVERLAP_OPEN_WRITE_THROUGH: u32 = 128;

const ALL_OPEN_FLAGS: u32 = 255;

/// An open file of an engine. Opaque.
pub struct overlap_file {
    pub(crate) file: File,
    /// overlap_file_close() closed the child's copy of the descriptor in a
    /// child after `fork()`: the `File` still names its number, which the
    /// child may reuse, so overlap_file_free() must not close it again.
    closed_in_child: AtomicBool,
}

/// The direct-I/O alignment a file needs (overlap_file_alignment()).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct overlap_alignment {
    /// Alignment of buffer addresses, in bytes.
    pub memory: u32,
    /// Alignment of file offsets and lengths, in bytes.
    pub offset: u32,
    /// 1 if the file is open with O_DIRECT (the figures are enforced),
    /// else 0.
    pub direct: u32,
    /// Zero.
    pub reserved: u32,
}

pub(crate) fn store_file(out: *mut *mut overlap_file, file: File) -> i32 {
    debug_assert!(!out.is_null(), "the caller refused a NULL out");
    let h = Box::into_raw(Box::new(overlap_file {
        file,
        closed_in_child: AtomicBool::new(false),
    }));
    // SAFETY: out is a writable pointer, checked non-NULL by the caller.
    unsafe { out.write(h) };
    0
}

/// Opens `path` (a NUL-terminated string) with `flags` (`OVERLAP_OPEN_*`,
/// at least READ or WRITE) and, when creating, permissions `mode` (e.g.
/// 0644); stores the file's handle in `*out`. The descriptor has
/// `O_CLOEXEC`. The open runs through the engine.
///
/// Returns 0, or `-EINVAL` (NULL argument, unknown flag bits, neither
/// READ nor WRITE, CREATE, TRUNCATE or APPEND without WRITE, TRUNCATE with
/// APPEND), or the kernel's `-errno` (`-ENOENT`, `-EACCES`, `-EEXIST`,
/// `-EINVAL` for O_DIRECT on a file system without it, ...), or
/// `-ESHUTDOWN`, `-ECHILD` (an engine of the parent after `fork()`).
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_file_open(
    engine: *const overlap_engine,
    path: *const c_char,
    flags: u32,
    mode: u32,
    out: *mut *mut overlap_file,
) -> i32 {
    const F: &str = "overlap_file_open";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        if path.is_null() || out.is_null() {
            return fail(libc::EINVAL, format!("{F}: path or out is NULL"));
        }
        if flags & !ALL_OPEN_FLAGS != 0 {
            return fail(
                libc::EINVAL,
                format!("{F}: unknown flag bits {:#x}", flags & !ALL_OPEN_FLAGS),
            );
        }
        refuse_forked!(e.engine, F);
        let has = |f: u32| flags & f != 0;
        if !has(OVERLAP_OPEN_READ) && !has(OVERLAP_OPEN_WRITE) {
            return fail(
                libc::EINVAL,
                format!("{F}: flags need OVERLAP_OPEN_READ or OVERLAP_OPEN_WRITE"),
            );
        }
        if has(OVERLAP_OPEN_APPEND) && !has(OVERLAP_OPEN_WRITE) {
            // As O_APPEND without O_WRONLY/O_RDWR: no write access is given
            // by appending alone (the engine's `OpenOptions`, like Rust's,
            // would grant it).
            return fail(
                libc::EINVAL,
                format!("{F}: OVERLAP_OPEN_APPEND needs OVERLAP_OPEN_WRITE"),
            );
        }
        // SAFETY: path is a NUL-terminated string (the caller's promise),
        // checked non-NULL above.
        let cpath = unsafe { CStr::from_ptr(path) };
        #[cfg(unix)]
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(cpath.to_bytes()));
        #[cfg(windows)]
        let p = match cpath.to_str() {
            Ok(s) => std::path::Path::new(s),
            Err(_) => return fail(libc::EINVAL, format!("{F}: the path is not UTF-8")),
        };
        let mut o = OpenOptions::new();
        o.read(has(OVERLAP_OPEN_READ))
            .write(has(OVERLAP_OPEN_WRITE))
            .create(has(OVERLAP_OPEN_CREATE))
            .truncate(has(OVERLAP_OPEN_TRUNCATE))
            .create_new(has(OVERLAP_OPEN_EXCLUSIVE))
            .append(has(OVERLAP_OPEN_APPEND))
            .direct(has(OVERLAP_OPEN_DIRECT))
            .write_through(has(OVERLAP_OPEN_WRITE_THROUGH));
        #[cfg(unix)]
        o.mode(mode);
        #[cfg(windows)]
        let _ = mode;
        match o.open(&e.engine, p).wait() {
            Ok(file) => store_file(out, file),
            Err(err) => fail_with(&format!("{F} {}", p.display()), &err),
        }
    })
}

/// Adopts a descriptor the caller opened (a file, a pipe, a block
/// device): the engine owns it from now on and closes it in
/// overlap_file_close() or overlap_file_free(); `dup()` it first to keep
/// one of your own. Its access mode, O_APPEND and O_DIRECT are read from
/// the descriptor (`fcntl(F_GETFL)`); for O_DIRECT the alignment is asked
/// of the kernel. Stores the handle in `*out`.
///
/// Returns 0, or `-EBADF` (not an open descriptor), `-EINVAL` (NULL
/// argument), `-ESHUTDOWN` (the engine is shut down), `-ECHILD` (an engine
/// of the parent after `fork()`); on failure the descriptor is not adopted
/// and stays the caller's.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_file_adopt(
    engine: *const overlap_engine,
    fd: i32,
    out: *mut *mut overlap_file,
) -> i32 {
    const F: &str = "overlap_file_adopt";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        refuse_forked!(e.engine, F);
        if out.is_null() {
            return fail(libc::EINVAL, format!("{F}: out is NULL"));
        }
        if let Some(r) = e.refuse_shut(F) {
            return r;
        }
        adopt_fd(e, fd, out)
    })
}

/// overlap_file_adopt() past its checks: a descriptor of Linux's table.
#[cfg(unix)]
fn adopt_fd(e: &overlap_engine, fd: i32, out: *mut *mut overlap_file) -> i32 {
    const F: &str = "overlap_file_adopt";
    // SAFETY: F_GETFD on any number is harmless; it tells whether fd
    // is an open descriptor.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return fail(libc::EBADF, format!("{F}: {fd} is not an open descriptor"));
    }
    // SAFETY: fd is open (checked above) and the caller hands it over:
    // nothing else closes it from now on (the function's contract).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    store_file(out, File::from_fd(&e.engine, owned))
}

/// overlap_file_adopt() on Windows: a C runtime descriptor (`_open`'s) is
/// not opened for overlapped I/O, which the engine needs; the caller's
/// `HANDLE` is adopted with overlap_file_adopt_handle().
#[cfg(windows)]
fn adopt_fd(_: &overlap_engine, fd: i32, out: *mut *mut overlap_file) -> i32 {
    debug_assert!(!out.is_null(), "the caller refused a NULL out");
    fail(
        libc::EOPNOTSUPP,
        format!(
            "overlap_file_adopt: descriptor {fd}: on Windows adopt a HANDLE opened with \
             FILE_FLAG_OVERLAPPED with overlap_file_adopt_handle()"
        ),
    )
}

/// Fills `*out` with the direct-I/O alignment the file needs (from
/// `statx`'s STATX_DIOALIGN where the kernel reports it, else the device's
/// logical block size). Returns 0, or `-EINVAL` for NULL arguments.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_file_alignment(
    file: *const overlap_file,
    out: *mut overlap_alignment,
) -> i32 {
    const F: &str = "overlap_file_alignment";
    guard(F, || {
        let f = handle!(file, "file", F);
        refuse_forked!(f.file.engine(), F);
        if out.is_null() {
            return fail(libc::EINVAL, format!("{F}: out is NULL"));
        }
        let a = f.file.alignment();
        let al = overlap_alignment {
            memory: a.memory,
            offset: a.offset,
            direct: u32::from(f.file.is_direct()),
            reserved: 0,
        };
        // SAFETY: out is a writable overlap_alignment (checked non-NULL).
        unsafe { out.write(al) };
        0
    })
}

/// The file's descriptor (for `fstat` and the like; do not close it), or
/// `-EBADF` once the file is closed, `-EINVAL` for a NULL handle.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_file_fd(file: *const overlap_file) -> i32 {
    const F: &str = "overlap_file_fd";
    guard(F, || {
        let f = handle!(file, "file", F);
        refuse_forked!(f.file.engine(), F);
        match f.file.as_raw_fd() {
            fd if fd >= 0 => fd,
            _ => fail(libc::EBADF, format!("{F}: the file is closed")),
        }
    })
}

/// Closes the file: submissions on it fail with `-EBADF` from now on;
/// operations of threads' blocking calls finish first; the descriptor is
/// closed through the engine and the kernel's verdict returned (0, or
/// `-errno`: some file systems report write-back errors here). Closing
/// again returns `-EBADF`. The handle stays valid until
/// overlap_file_free().
///
/// After overlap_engine_shutdown() it still closes the descriptor, on the
/// calling thread, and returns 0: the engine runs no operation any more,
/// so the kernel's verdict of that close is not known (sync the file
/// before shutdown to learn of write-back errors). It never reports a
/// descriptor it closed as a failure.
///
/// In a child after `fork()`, on a file of the parent: closes the child's
/// copy of the descriptor (the child's own descriptor table; the parent's
/// stays open and its operations go on) and returns at once, 0 or
/// `close(2)`'s `-errno`, without waiting for any operation (those in
/// flight are the parent's). Every other call on the file fails there
/// with `-ECHILD`.
///
/// Operations already submitted on a port are not cancelled and still
/// complete with their real results: their buffers stay in use until
/// their completions are reaped, as always. On io_uring the kernel holds
/// its own reference to the file, so this does not wait for them. On the
/// thread pool and Linux AIO a pool thread or the kernel uses the
/// descriptor itself: this waits until each of them has been performed
/// (not reaped), so a port read of a pipe nobody writes keeps it waiting.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_file_close(file: *const overlap_file) -> i32 {
    const F: &str = "overlap_file_close";
    guard(F, || {
        let f = handle!(file, "file", F);
        if f.file.engine().is_forked_copy() {
            return close_in_child(f);
        }
        match f.file.close().wait() {
            Ok(()) => 0,
            // The close operation owns the descriptor once the file let it
            // go; refused by a shut-down engine, it closes it when dropped
            // (the engine's `operation::Close`): the descriptor is closed.
            Err(overlapped::Error::Shutdown) => 0,
            Err(e) => fail_with(F, &e),
        }
    })
}

/// overlap_file_close() in a child after `fork()`: closes the child's copy
/// of the descriptor, once, and never waits (the operations the file
/// counts in flight are the parent's, and no thread of the child will
/// finish them). Allocates nothing.
fn close_in_child(f: &overlap_file) -> i32 {
    const F: &str = "overlap_file_close";
    let fd = f.file.as_raw_fd();
    if fd < 0 || f.closed_in_child.swap(true, Ordering::AcqRel) {
        return fail_parts(libc::EBADF, &[F, ": the file is closed"]);
    }
    #[cfg(unix)]
    // SAFETY: fd is this file's descriptor in the child's own table; the
    // flag set above keeps it from being closed twice (overlap_file_free()
    // then forgets the file instead of closing the number again).
    let closed = unsafe { libc::close(fd) } == 0;
    #[cfg(windows)]
    let closed = false; // no fork() on Windows: a file is never a forked copy
    if closed {
        0
    } else {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        fail_parts(
            errno,
            &[F, ": close(2) of the descriptor failed in the forked child"],
        )
    }
}

/// Frees the file handle (NULL is ignored), closing the descriptor if
/// overlap_file_close() did not (without reporting the kernel's verdict:
/// close first to see it). Operations in flight on it keep their own
/// reference and complete as usual. In a child after `fork()` it returns
/// at once.
///
/// Thread safety: any thread, but no other call may use this handle at
/// the same time or after.
#[no_mangle]
pub extern "C" fn overlap_file_free(file: *mut overlap_file) {
    guard("overlap_file_free", || {
        if !file.is_null() {
            // SAFETY: the handle came from Box::into_raw and is freed once
            // (the caller's rule).
            let f = unsafe { Box::from_raw(file) };
            if f.closed_in_child.load(Ordering::Acquire) {
                // Its descriptor number was closed in this forked child and
                // may name another file by now: the `File` must not close
                // it again. Its memory is the parent's engine's, which the
                // child leaves alone anyway.
                std::mem::forget(f.file);
            }
        }
    })
}

/// Reads up to `len` bytes at `offset` into `buf` and waits for the
/// result, as `pread` does: the byte count (0 at end of file, fewer near
/// it), or `-errno`. On io_uring the read goes on the calling thread's own
/// ring and the thread sleeps in the kernel until it completes (one
/// system call, the depth-1 path); on the thread pool it runs on the
/// calling thread.
///
/// `-EINVAL`: NULL handle, a length above `SSIZE_MAX`, `offset + len`
/// past the largest file offset, or on an O_DIRECT file a buffer, offset
/// or length not aligned as overlap_file_alignment() says (the message
/// says which; nothing is submitted). `-EFAULT`: NULL `buf` with a length.
/// `-EBADF`: closed, or not open for reading. `-ESHUTDOWN`.
///
/// Buffer rule: `buf` must stay valid until the call returns.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_pread(
    file: *const overlap_file,
    buf: *mut c_void,
    len: u64,
    offset: u64,
) -> i64 {
    const F: &str = "overlap_pread";
    guard(F, || {
        let f = handle!(file, "file", F);
        refuse_forked!(f.file.engine(), F);
        let b = match CBuf::new(buf, len, F) {
            Ok(b) => b,
            Err((errno, msg)) => return fail(errno, msg),
        };
        match f.file.read_at(b, offset).wait().0 {
            Ok(n) => {
                debug_assert!(n as u64 <= len, "a read returns at most the bytes lent");
                n as i64
            }
            Err(e) => fail_with(F, &e),
        }
    })
}

/// Reads into `buf` only if the page cache holds the whole range, on the
/// calling thread, without ever waiting for the device: one
/// `preadv2(RWF_NOWAIT)`. Returns the byte count (fewer than `len` only at
/// end of file, 0 at or past it, or for a `len` above 0x7fff_f000, Linux's
/// largest single read, as overlap_pread()), or `-EAGAIN` when the kernel could not
/// answer at once (part of the range is not cached, or its pages are
/// locked), the file is O_DIRECT, the engine's cache fast path is off, or
/// recent misses on this file made it skip the attempt: then submit the
/// read (overlap_port_read()) or block (overlap_pread()). After `-EAGAIN`
/// the contents of `buf` are unspecified. For a caller that must not block
/// and wants a cached answer without an operation. An answer counts as an
/// operation submitted and completed inline (overlap_stats.completed_inline).
///
/// `-EINVAL`: NULL handle, a length above `SSIZE_MAX`, `offset + len` past
/// the largest file offset, or on an O_DIRECT file a buffer, offset or
/// length not aligned as overlap_file_alignment() says (checked as a read's
/// would be; an aligned request on an O_DIRECT file is `-EAGAIN`).
/// `-EFAULT`: NULL `buf` with a length. `-EBADF`: closed, or not open for
/// reading. `-ESHUTDOWN`.
///
/// Buffer rule: `buf` must stay valid until the call returns.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_pread_cached(
    file: *const overlap_file,
    buf: *mut c_void,
    len: u64,
    offset: u64,
) -> i64 {
    const F: &str = "overlap_pread_cached";
    guard(F, || {
        let f = handle!(file, "file", F);
        refuse_forked!(f.file.engine(), F);
        if let Err((errno, msg)) = CBuf::new(buf, len, F) {
            return fail(errno, msg);
        }
        let slice: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: non-NULL (CBuf::new refused NULL with a length),
            // `len` bytes writable until this call returns (the buffer rule
            // above), and at most SSIZE_MAX (checked).
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len as usize) }
        };
        match f.file.read_cached_at(slice, offset) {
            Ok(Some(n)) => {
                debug_assert!(n as u64 <= len, "a read returns at most the bytes lent");
                n as i64
            }
            Ok(None) if len == 0 => 0,
            Ok(None) => fail(
                libc::EAGAIN,
                "overlap_pread_cached: not answered from the page cache at once; read it another way",
            ),
            Err(e) => fail_with(F, &e),
        }
    })
}

/// Writes `len` bytes of `buf` at `offset` and waits for the result, as
/// `pwrite` does: the byte count (the kernel may write fewer), or
/// `-errno`; as overlap_pread() otherwise (`-EBADF` when not open for
/// writing).
///
/// Buffer rule: `buf` must stay valid until the call returns.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_pwrite(
    file: *const overlap_file,
    buf: *const c_void,
    len: u64,
    offset: u64,
) -> i64 {
    const F: &str = "overlap_pwrite";
    guard(F, || {
        let f = handle!(file, "file", F);
        refuse_forked!(f.file.engine(), F);
        let b = match CBuf::new(buf, len, F) {
            Ok(b) => b,
            Err((errno, msg)) => return fail(errno, msg),
        };
        match f.file.write_at(b, offset).wait().0 {
            Ok(n) => {
                debug_assert!(n as u64 <= len, "a write takes at most the bytes lent");
                n as i64
            }
            Err(e) => fail_with(F, &e),
        }
    })
}

/// `fsync` (data and metadata to stable storage) through the engine,
/// waiting for it: 0 or `-errno` (`-EBADF` once closed).
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_fsync(file: *const overlap_file) -> i32 {
    const F: &str = "overlap_fsync";
    guard(F, || {
        let f = handle!(file, "file", F);
        refuse_forked!(f.file.engine(), F);
        match f.file.sync_all().wait() {
            Ok(()) => 0,
            Err(e) => fail_with(F, &e),
        }
    })
}

/// `fdatasync` through the engine, waiting for it: 0 or `-errno`.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_fdatasync(file: *const overlap_file) -> i32 {
    const F: &str = "overlap_fdatasync";
    guard(F, || {
        let f = handle!(file, "file", F);
        refuse_forked!(f.file.engine(), F);
        match f.file.sync_data().wait() {
            Ok(()) => 0,
            Err(e) => fail_with(F, &e),
        }
    })
}
