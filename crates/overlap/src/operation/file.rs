//! The operations on an open file's descriptor (reads, writes, syncs,
//! allocation, truncation, Windows' valid data length, `statx`, close) and
//! the no-op a port delivers a known result through. See the
//! [module docs](super) for how an operation is declared.

use std::sync::atomic::{AtomicI32, Ordering};

#[cfg(target_os = "linux")]
use io_uring::{opcode, squeue, types};

#[cfg(target_os = "linux")]
use super::{ret, AioCode, AioCommand, STATX_MASK};
use super::{Data, Operation, Returns, Span, Transfer};
use crate::sys::RawStat;

/// Linux never transfers more than this in one read or write (`MAX_RW_COUNT`);
/// longer requests come back short and the `*_exact`/`*_all` forms go on.
pub const MAX_RW_BYTES: usize = 0x7fff_f000;

/// `pread` into memory the cell owns.
#[derive(Debug)]
pub(crate) struct Read {
    pub fd: i32,
    pub ptr: *mut u8,
    pub len: u32,
    pub offset: u64,
    /// The file was opened with O_DIRECT (the AIO driver takes only these).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub direct: bool,
    /// The handle was opened for synchronous I/O: the call blocks, so it
    /// has no overlapped form and runs on the pool.
    #[cfg(windows)]
    pub synchronous: bool,
}

impl Operation for Read {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Read::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "read"
    }
    fn transfer(&self) -> Transfer {
        debug_assert!(
            self.len as usize <= MAX_RW_BYTES && (self.len == 0 || !self.ptr.is_null()),
            "a read's span is one operation's, in memory"
        );
        Transfer::Read(Span {
            addr: self.ptr as usize,
            offset: self.offset,
            len: self.len as usize,
        })
    }
    fn data(&self) -> Option<Data> {
        Some(Data {
            fd: self.fd,
            addr: self.ptr as usize,
            len: self.len as usize,
        })
    }
    #[cfg(target_os = "linux")]
    fn fixed(&self, index: u16) -> Option<squeue::Entry> {
        Some(
            opcode::ReadFixed::new(types::Fd(self.fd), self.ptr, self.len, index)
                .offset(self.offset)
                .build(),
        )
    }
    #[cfg(target_os = "linux")]
    fn aio(&self) -> Option<AioCommand> {
        Some(AioCommand {
            code: AioCode::Pread,
            fd: self.fd,
            direct: self.direct,
        })
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        debug_assert!(self.fd >= 0, "a read is prepared on an open descriptor");
        opcode::Read::new(types::Fd(self.fd), self.ptr, self.len)
            .offset(self.offset)
            .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        debug_assert!(self.fd >= 0, "a read is prepared on an open descriptor");
        // SAFETY: ptr is valid for len writable bytes owned by the cell,
        // which outlives this call (module docs).
        let r = ret(unsafe {
            libc::pread(
                self.fd,
                self.ptr.cast(),
                self.len as usize,
                self.offset as libc::off_t,
            )
        } as i64);
        let r = if r != -(libc::ESPIPE as i64) {
            r
        } else {
            // A pipe, FIFO or socket has no offset; io_uring ignores it
            // there, and so does this side.
            // SAFETY: as above.
            ret(unsafe { libc::read(self.fd, self.ptr.cast(), self.len as usize) } as i64)
        };
        debug_assert!(
            r <= i64::from(self.len),
            "a read returns at most the bytes asked for"
        );
        r
    }
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        debug_assert!(self.fd >= 0, "a read is prepared on an open descriptor");
        // SAFETY: ptr is valid for len writable bytes owned by the cell,
        // which outlives this call (module docs); the file's claim keeps
        // the handle open.
        unsafe { crate::sys::transfer_at(self.fd, self.ptr, self.len, self.offset, false) }
    }
    #[cfg(windows)]
    fn overlapped(&self) -> Option<super::Overlapped> {
        (!self.synchronous).then_some(super::Overlapped {
            fd: self.fd,
            addr: self.ptr as usize,
            len: self.len,
            offset: self.offset,
            write: false,
        })
    }
}

/// `pwrite` from memory the cell owns.
#[derive(Debug)]
pub(crate) struct Write {
    pub fd: i32,
    pub ptr: *const u8,
    pub len: u32,
    pub offset: u64,
    /// The file was opened with O_DIRECT (the AIO driver takes only these).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub direct: bool,
    /// The handle was opened for synchronous I/O: the call blocks, so it
    /// has no overlapped form and runs on the pool.
    #[cfg(windows)]
    pub synchronous: bool,
}

impl Operation for Write {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Write::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "write"
    }
    fn transfer(&self) -> Transfer {
        debug_assert!(
            self.len as usize <= MAX_RW_BYTES && (self.len == 0 || !self.ptr.is_null()),
            "a write's span is one operation's, in memory"
        );
        Transfer::Write(Span {
            addr: self.ptr as usize,
            offset: self.offset,
            len: self.len as usize,
        })
    }
    fn data(&self) -> Option<Data> {
        Some(Data {
            fd: self.fd,
            addr: self.ptr as usize,
            len: self.len as usize,
        })
    }
    #[cfg(target_os = "linux")]
    fn fixed(&self, index: u16) -> Option<squeue::Entry> {
        Some(
            opcode::WriteFixed::new(types::Fd(self.fd), self.ptr, self.len, index)
                .offset(self.offset)
                .build(),
        )
    }
    #[cfg(target_os = "linux")]
    fn aio(&self) -> Option<AioCommand> {
        Some(AioCommand {
            code: AioCode::Pwrite,
            fd: self.fd,
            direct: self.direct,
        })
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        debug_assert!(self.fd >= 0, "a write is prepared on an open descriptor");
        opcode::Write::new(types::Fd(self.fd), self.ptr, self.len)
            .offset(self.offset)
            .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        debug_assert!(self.fd >= 0, "a write is prepared on an open descriptor");
        // SAFETY: ptr is valid for len readable bytes owned by the cell.
        let r = ret(unsafe {
            libc::pwrite(
                self.fd,
                self.ptr.cast(),
                self.len as usize,
                self.offset as libc::off_t,
            )
        } as i64);
        let r = if r != -(libc::ESPIPE as i64) {
            r
        } else {
            // Not seekable: the offset is ignored, as io_uring does.
            // SAFETY: as above.
            ret(unsafe { libc::write(self.fd, self.ptr.cast(), self.len as usize) } as i64)
        };
        debug_assert!(
            r <= i64::from(self.len),
            "a write takes at most the bytes given"
        );
        r
    }
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        debug_assert!(self.fd >= 0, "a write is prepared on an open descriptor");
        // SAFETY: ptr is valid for len readable bytes owned by the cell
        // (WriteFile only reads them); the file's claim keeps the handle
        // open.
        unsafe {
            crate::sys::transfer_at(self.fd, self.ptr.cast_mut(), self.len, self.offset, true)
        }
    }
    #[cfg(windows)]
    fn overlapped(&self) -> Option<super::Overlapped> {
        (!self.synchronous).then_some(super::Overlapped {
            fd: self.fd,
            addr: self.ptr as usize,
            len: self.len,
            offset: self.offset,
            write: true,
        })
    }
}

/// `fsync` or `fdatasync`.
#[derive(Debug)]
pub(crate) struct Fsync {
    pub fd: i32,
    /// Data only (Windows has no such flush: it flushes everything).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub datasync: bool,
}

impl Operation for Fsync {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Fsync::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "fsync"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn aio(&self) -> Option<AioCommand> {
        Some(AioCommand {
            code: if self.datasync {
                AioCode::Fdsync
            } else {
                AioCode::Fsync
            },
            fd: self.fd,
            direct: false,
        })
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        let flags = if self.datasync {
            types::FsyncFlags::DATASYNC
        } else {
            types::FsyncFlags::empty()
        };
        opcode::Fsync::new(types::Fd(self.fd)).flags(flags).build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: plain descriptor calls.
        ret(unsafe {
            if self.datasync {
                libc::fdatasync(self.fd)
            } else {
                libc::fsync(self.fd)
            }
        } as i64)
    }
    /// `FlushFileBuffers`, for both forms: Windows has no data-only flush.
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::flush(self.fd)
    }
}

/// `fallocate`.
#[derive(Debug)]
pub(crate) struct Fallocate {
    pub fd: i32,
    pub mode: i32,
    pub offset: u64,
    pub len: u64,
}

impl Operation for Fallocate {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Fallocate::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "fallocate"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::Fallocate::new(types::Fd(self.fd), self.len)
            .offset(self.offset)
            .mode(self.mode)
            .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: plain descriptor call.
        ret(unsafe {
            libc::fallocate(
                self.fd,
                self.mode,
                self.offset as libc::off_t,
                self.len as libc::off_t,
            )
        } as i64)
    }
    /// Linux's semantics of `mode` as Windows can give them
    /// (`sys::allocate`).
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::allocate(self.fd, self.mode, self.offset, self.len)
    }
}

/// `ftruncate` (an io_uring opcode only since Linux 6.9).
#[derive(Debug)]
pub(crate) struct Ftruncate {
    pub fd: i32,
    pub len: u64,
}

impl Operation for Ftruncate {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Ftruncate::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "ftruncate"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::Ftruncate::new(types::Fd(self.fd), self.len).build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: plain descriptor call.
        ret(unsafe { libc::ftruncate(self.fd, self.len as libc::off_t) } as i64)
    }
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::set_len(self.fd, self.len)
    }
}

/// `SetFileValidData` (Windows alone has it): moves the file's valid data
/// length forward to `len`, so that later writes below it need not zero
/// the space first (`sys::set_valid_data`). No io_uring or overlapped form:
/// every driver's pool performs it.
#[cfg(windows)]
#[derive(Debug)]
pub(crate) struct SetValidData {
    pub fd: i32,
    pub len: u64,
}

#[cfg(windows)]
impl Operation for SetValidData {
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "SetFileValidData"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn blocking(&self) -> i64 {
        debug_assert!(self.fd >= 0, "a valid data length is set on an open handle");
        crate::sys::set_valid_data(self.fd, self.len)
    }
}

/// `statx` of an open descriptor into a buffer the cell owns (on Windows
/// `GetFileInformationByHandleEx`, `sys::stat`).
#[derive(Debug)]
pub(crate) struct Statx {
    pub fd: i32,
    pub buf: *mut RawStat,
}

impl Operation for Statx {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Statx::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "statx"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::Statx::new(types::Fd(self.fd), c"".as_ptr(), self.buf.cast())
            .flags(libc::AT_EMPTY_PATH)
            .mask(STATX_MASK)
            .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: buf points to a statx owned by the cell.
        unsafe { crate::sys::statx_fd(self.fd, 0, self.buf) }
    }
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        // SAFETY: buf points to a RawStat owned by the cell.
        unsafe { crate::sys::stat(self.fd, self.buf) }
    }
}

/// `close`. The operation owns the descriptor until it has been closed: if
/// the operation is dropped before any driver ran it (its future dropped
/// while waiting for budget, the engine shut down), dropping it closes the
/// descriptor, so it is closed exactly once whatever happens.
#[derive(Debug)]
pub(crate) struct Close {
    fd: AtomicI32,
}

impl Close {
    pub(crate) fn new(fd: i32) -> Close {
        debug_assert!(fd >= 0, "closing an invalid descriptor");
        Close {
            fd: AtomicI32::new(fd),
        }
    }

    /// The kernel has run the close: the descriptor is no longer ours,
    /// whatever the result.
    fn release(&self) {
        self.fd.store(-1, Ordering::Release);
    }
}

impl Operation for Close {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Close::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "close"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::Close::new(types::Fd(self.fd.load(Ordering::Acquire))).build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd < 0 {
            return -(libc::EBADF as i64);
        }
        // SAFETY: this operation owned fd; swapping -1 in makes this the only
        // close. Linux releases the descriptor even when close reports EINTR.
        let r = unsafe { libc::close(fd) } as i64;
        match ret(r) {
            e if e == -(libc::EINTR as i64) => 0,
            other => other,
        }
    }
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd < 0 {
            return -i64::from(windows_sys::Win32::Foundation::ERROR_INVALID_HANDLE);
        }
        // This operation owned fd; swapping -1 in makes this the only close.
        crate::sys::close(fd)
    }
    /// The kernel has run the close: the descriptor is no longer ours,
    /// whatever the result.
    fn performed(&self) {
        self.release();
    }
    /// Refused or not, a close still closes: the descriptor must not leak.
    fn refused_in_child(&self) -> i64 {
        // A close still closes the child's copy of its descriptor.
        self.refused()
    }
    fn refused(&self) -> i64 {
        self.blocking()
    }
}

impl Drop for Close {
    fn drop(&mut self) {
        let fd = *self.fd.get_mut();
        if fd >= 0 {
            // The descriptor is still ours: no driver ran the close.
            crate::sys::close_quietly(fd);
        }
    }
}

/// A result known before submission (a completion port delivers it through
/// its ring like any other, so that a worker asleep in the kernel sees it).
#[derive(Debug)]
pub(crate) struct Nop {
    pub res: i64,
}

impl Operation for Nop {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::Nop::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "nop"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::Nop::new().build()
    }
    fn blocking(&self) -> i64 {
        debug_assert!(
            self.res >= -crate::sys::MAX_ERROR_CODE,
            "a no-op's result is a count or a negated errno"
        );
        self.res
    }
    fn result(&self, _cqe_res: i32) -> i64 {
        debug_assert!(
            self.res >= -crate::sys::MAX_ERROR_CODE,
            "a no-op's result is a count or a negated errno"
        );
        self.res
    }
}
