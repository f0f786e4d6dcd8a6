//! Blocking system calls: how the thread-pool driver performs each
//! operation, and the page-cache fast path.

use std::sync::atomic::Ordering;

use crate::op::{OpKind, Request};

fn errno() -> i64 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO) as i64
}

fn ret(r: i64) -> i64 {
    if r < 0 {
        -errno()
    } else {
        r
    }
}

/// Performs `kind` synchronously; returns the byte count / descriptor, or
/// `-errno`. EINTR is retried.
pub(crate) fn execute(kind: &OpKind) -> i64 {
    loop {
        let r = execute_once(kind);
        if r != -(libc::EINTR as i64) {
            return r;
        }
    }
}

fn execute_once(kind: &OpKind) -> i64 {
    match *kind {
        // SAFETY (all arms): the pointers in OpKind point into memory owned by
        // the operation's cell, valid for `len` bytes, and the cell is kept
        // alive by the driver until this call has returned.
        OpKind::Read {
            fd,
            ptr,
            len,
            offset,
        } => {
            ret(unsafe { libc::pread(fd, ptr.cast(), len as usize, offset as libc::off_t) } as i64)
        }
        OpKind::Write {
            fd,
            ptr,
            len,
            offset,
        } => {
            ret(unsafe { libc::pwrite(fd, ptr.cast(), len as usize, offset as libc::off_t) } as i64)
        }
        OpKind::Fsync { fd, datasync } => {
            // SAFETY: plain descriptor call.
            ret(unsafe {
                if datasync {
                    libc::fdatasync(fd)
                } else {
                    libc::fsync(fd)
                }
            } as i64)
        }
        OpKind::Fallocate {
            fd,
            mode,
            offset,
            len,
        } => {
            // SAFETY: plain descriptor call.
            ret(
                unsafe { libc::fallocate(fd, mode, offset as libc::off_t, len as libc::off_t) }
                    as i64,
            )
        }
        OpKind::Ftruncate { fd, len } => {
            // SAFETY: plain descriptor call.
            ret(unsafe { libc::ftruncate(fd, len as libc::off_t) } as i64)
        }
        OpKind::Statx { fd, buf } => {
            // SAFETY: buf points to a statx owned by the cell; the empty path
            // with AT_EMPTY_PATH refers to fd itself.
            ret(
                unsafe { libc::statx(fd, c"".as_ptr(), libc::AT_EMPTY_PATH, STATX_MASK, buf) }
                    as i64,
            )
        }
        OpKind::Close { fd } => {
            // SAFETY: the descriptor is owned by the closing operation; close is
            // not retried on EINTR by `execute` callers that matter (Linux
            // always releases the descriptor).
            let r = unsafe { libc::close(fd) } as i64;
            if r < 0 && errno() == libc::EINTR as i64 {
                0
            } else {
                ret(r)
            }
        }
        OpKind::Open {
            ref path,
            flags,
            mode,
        } => {
            // SAFETY: path is a NUL-terminated string owned by the cell.
            ret(unsafe { libc::open(path.as_ptr(), flags, mode as libc::c_uint) } as i64)
        }
    }
}

/// `STATX_DIOALIGN` (Linux 6.1), which the libc crate may not name yet.
pub(crate) const STATX_DIOALIGN: u32 = 0x2000;
pub(crate) const STATX_MASK: u32 = libc::STATX_BASIC_STATS | STATX_DIOALIGN;

/// The cache fast path: `preadv2(RWF_NOWAIT)` on the caller's thread. Returns
/// the byte count when the whole request was served from the page cache (or
/// the read ended at end of file); `None` sends it to the driver.
pub(crate) fn read_nowait<B>(req: &mut Request<B>) -> Option<usize> {
    if !req.fast_path {
        return None;
    }
    let counters = &req.shared.counters;
    if let Some(f) = &req.file {
        if !f.inner().fast_path_worth_trying() {
            counters.fast_skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
    }
    let OpKind::Read {
        fd,
        ptr,
        len,
        offset,
    } = (req.make)(&mut req.buf, &req.params)
    else {
        return None;
    };
    let iov = libc::iovec {
        iov_base: ptr.cast(),
        iov_len: len as usize,
    };
    // SAFETY: iov describes the request's own buffer, exclusively borrowed
    // through `req` for the duration of this call.
    let r = unsafe { preadv2_nowait(fd, &iov, offset) };
    if r >= 0 && (r as u64 == len as u64 || at_or_past_eof(fd, offset + r as u64)) {
        // A hit counts as submitted, completed and inline through
        // `fast_hits` (see `Counters::snapshot`): two atomics, not five.
        counters.fast_hits.fetch_add(1, Ordering::Relaxed);
        counters.fast_bytes.fetch_add(r as u64, Ordering::Relaxed);
        if let Some(f) = &req.file {
            f.inner().fast_path_result(true);
        }
        return Some(r as usize);
    }
    counters.fast_misses.fetch_add(1, Ordering::Relaxed);
    if let Some(f) = &req.file {
        f.inner().fast_path_result(false);
    }
    None
}

/// `preadv2(fd, iov, 1, offset, RWF_NOWAIT)` as a raw system call: glibc's
/// wrapper makes it a thread-cancellation point, switching the cancellation
/// state around the call, which costs more than the rest of the fast path.
///
/// # Safety
///
/// `iov` must describe memory writable for `iov_len` bytes.
unsafe fn preadv2_nowait(fd: i32, iov: &libc::iovec, offset: u64) -> isize {
    #[cfg(target_pointer_width = "64")]
    {
        // SAFETY: the caller guarantees the iovec; on 64-bit kernels the
        // offset is passed whole as the low half, the high half is 0.
        unsafe {
            libc::syscall(
                libc::SYS_preadv2,
                fd as libc::c_long,
                iov as *const libc::iovec,
                1 as libc::c_long,
                offset as libc::c_long,
                0 as libc::c_long,
                libc::RWF_NOWAIT as libc::c_long,
            ) as isize
        }
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        // SAFETY: as above, through glibc's wrapper.
        unsafe { libc::preadv2(fd, iov, 1, offset as libc::off_t, libc::RWF_NOWAIT) }
    }
}

fn at_or_past_eof(fd: i32, offset: u64) -> bool {
    // SAFETY: fstat writes into a local stat struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid, writable stat buffer.
    unsafe { libc::fstat(fd, &mut st) == 0 && offset >= st.st_size as u64 }
}
