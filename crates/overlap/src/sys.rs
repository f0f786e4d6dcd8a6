//! The page-cache fast path: `preadv2(RWF_NOWAIT)` on the caller's thread.

use std::sync::atomic::Ordering;

use crate::future::Request;
use crate::operation::OpKind;

/// The cache fast path: `preadv2(RWF_NOWAIT)` on the caller's thread. Returns
/// the byte count when the whole request was served from the page cache (or
/// the read ended at end of file); `None` sends it to the driver.
pub(crate) fn read_nowait<B>(req: &mut Request<B>) -> Option<usize> {
    if !req.fast_path {
        return None;
    }
    let counters = &req.shared.counters;
    let OpKind::Read(read) = &req.kind else {
        return None;
    };
    // SAFETY: the read's memory is the request's own buffer, exclusively
    // borrowed through `req` for the duration of this call.
    unsafe {
        nowait_into(
            counters,
            req.file.as_ref().map(|f| f.inner()),
            read.fd,
            read.ptr,
            read.len as usize,
            read.offset,
        )
    }
}

/// One attempt of the cache fast path on the calling thread, counted: the
/// byte count when the kernel answered the whole range from the page cache
/// (or the file ended within it), else `None` (a partial answer is dropped:
/// the caller reads the whole range another way; or recent misses on
/// `file` made it skip the attempt, counted as skipped).
///
/// # Safety
///
/// `ptr` must be writable for `len` bytes for the duration of the call, and
/// `fd` an open descriptor that stays open during it.
pub(crate) unsafe fn nowait_into(
    counters: &crate::stats::Counters,
    file: Option<&crate::file::FileInner>,
    fd: i32,
    ptr: *mut u8,
    len: usize,
    offset: u64,
) -> Option<usize> {
    if file.is_some_and(|f| !f.fast_path_worth_trying()) {
        counters.fast_skipped.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let iov = libc::iovec {
        iov_base: ptr.cast(),
        iov_len: len,
    };
    // SAFETY: the caller guarantees the memory and the descriptor.
    let r = unsafe { preadv2_nowait(fd, &iov, offset) };
    if r >= 0 && (r as u64 == len as u64 || at_or_past_eof(fd, offset + r as u64)) {
        // A hit counts as submitted, completed and inline through
        // `fast_hits` (see `Counters::snapshot`): two atomics, not five.
        counters.fast_hits.fetch_add(1, Ordering::Relaxed);
        counters.fast_bytes.fetch_add(r as u64, Ordering::Relaxed);
        if let Some(f) = file {
            f.fast_path_result(true);
        }
        return Some(r as usize);
    }
    counters.fast_misses.fetch_add(1, Ordering::Relaxed);
    if let Some(f) = file {
        f.fast_path_result(false);
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
