//! Small helpers that more than one command uses.

use std::ffi::CStr;
use std::os::fd::AsRawFd;

use hdrhistogram::Histogram;

/// A latency histogram: 1 ns to 1 hour, 3 significant digits.
#[allow(
    clippy::expect_used,
    reason = "the bounds are constants that hdrhistogram accepts: a failure is a bug"
)]
pub(crate) fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// `posix_fadvise(advice)` over the whole of `file`.
pub(crate) fn fadvise(file: &std::fs::File, advice: libc::c_int) -> std::io::Result<()> {
    // SAFETY: plain descriptor call on a descriptor we hold open; advice only.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// Bytes free to an unprivileged user on the file system holding `dir`
/// (`statvfs`: available blocks × fragment size).
pub(crate) fn free_bytes(dir: &CStr) -> std::io::Result<u64> {
    // SAFETY: statvfs is plain data; all-zero is a valid value.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is NUL-terminated and `vfs` is a writable statvfs.
    if unsafe { libc::statvfs(dir.as_ptr(), &mut vfs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64))
}
