//! The operations. Each one is a type whose io_uring entry and blocking
//! system call stand side by side (compio's model): a driver asks
//! [`OpKind::entry`] for the submission entry, and when this kernel lacks the
//! opcode it gets `None` and runs [`OpKind::blocking`] instead, with no
//! special case in the driver loop.
//!
//! Adding an operation is one declaration here: a type, its [`Operation`]
//! implementation (opcode, name, io_uring entry, blocking call, what it
//! transfers, what its result is; every one of them required, so a
//! forgotten one does not compile), and its name in the [`operations!`]
//! list, which generates [`OpKind`] and its dispatch (no wildcard arm that a
//! new operation could fall through). Then its public method, in `file/` or
//! `path.rs`, builds it.
//!
//! The raw pointers an operation carries point into memory owned by the same
//! operation cell (its buffer), or into the operation itself (a path), so
//! they stay valid until the cell is dropped, which no driver does before the
//! kernel has reported completion.

use std::ffi::CString;
use std::sync::atomic::{AtomicI32, Ordering};

use io_uring::{opcode, squeue, types};

/// `STATX_DIOALIGN` (Linux 6.1), which the libc crate may not name yet.
pub(crate) const STATX_DIOALIGN: u32 = 0x2000;
/// What `statx` is asked for.
pub(crate) const STATX_MASK: u32 = libc::STATX_BASIC_STATS | libc::STATX_BTIME | STATX_DIOALIGN;

/// One operation of the kernel interface. The required items are what every
/// operation must say; the provided ones are for an operation that owns a
/// resource before it runs (a close owns its descriptor) or knows its result
/// before submission (a no-op).
pub(crate) trait Operation {
    /// The io_uring opcode; where this kernel lacks it, drivers call
    /// [`blocking`](Self::blocking) instead of [`entry`](Self::entry).
    const CODE: u8;
    /// What a successful result is.
    const RETURNS: Returns;
    /// Short name for messages.
    fn name(&self) -> &'static str;
    /// The submission entry (without user data).
    fn entry(&self) -> squeue::Entry;
    /// The same operation as a blocking system call: the result, or `-errno`.
    fn blocking(&self) -> i64;
    /// The file data a successful result moved, if any (the byte counters,
    /// the AIO driver and the resubmission after a submitter's exit go by it).
    fn transfer(&self) -> Transfer;

    /// The operation's result from its completion entry's `res`.
    fn result(&self, cqe_res: i32) -> i64 {
        cqe_res as i64
    }
    /// Called once a driver has performed the operation (kernel or system
    /// call).
    fn performed(&self) {}
    /// The result to report when the engine refuses the operation (it shut
    /// down first): not performed.
    fn refused(&self) -> i64 {
        -(libc::ECANCELED as i64)
    }
}

/// What a successful result (`>= 0`) of an operation is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Returns {
    /// A byte count or a status: nothing to release.
    Value,
    /// A new descriptor, which the engine closes if nobody takes the result.
    Descriptor,
}

/// A read's or write's memory, file offset and length.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    pub addr: usize,
    pub offset: u64,
    pub len: usize,
}

/// The file data an operation moves: which byte counter a successful result
/// adds to, and where.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Transfer {
    /// File data into memory.
    Read(Span),
    /// Memory into the file.
    Write(Span),
    /// No file data (a sync, metadata, a path, an attribute).
    None,
}

/// The result of a raw libc call as `>= 0` or `-errno`.
fn ret(r: i64) -> i64 {
    if r < 0 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as i64)
    } else {
        r
    }
}

/// `pread` into memory the cell owns.
#[derive(Debug)]
pub(crate) struct Read {
    pub fd: i32,
    pub ptr: *mut u8,
    pub len: u32,
    pub offset: u64,
    /// The file was opened with O_DIRECT (the AIO driver takes only these).
    pub direct: bool,
}

impl Operation for Read {
    const CODE: u8 = opcode::Read::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "read"
    }
    fn transfer(&self) -> Transfer {
        Transfer::Read(Span {
            addr: self.ptr as usize,
            offset: self.offset,
            len: self.len as usize,
        })
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Read::new(types::Fd(self.fd), self.ptr, self.len)
            .offset(self.offset)
            .build()
    }
    fn blocking(&self) -> i64 {
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
        if r != -(libc::ESPIPE as i64) {
            return r;
        }
        // A pipe, FIFO or socket has no offset; io_uring ignores it there,
        // and so does this side.
        // SAFETY: as above.
        ret(unsafe { libc::read(self.fd, self.ptr.cast(), self.len as usize) } as i64)
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
    pub direct: bool,
}

impl Operation for Write {
    const CODE: u8 = opcode::Write::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "write"
    }
    fn transfer(&self) -> Transfer {
        Transfer::Write(Span {
            addr: self.ptr as usize,
            offset: self.offset,
            len: self.len as usize,
        })
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Write::new(types::Fd(self.fd), self.ptr, self.len)
            .offset(self.offset)
            .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: ptr is valid for len readable bytes owned by the cell.
        let r = ret(unsafe {
            libc::pwrite(
                self.fd,
                self.ptr.cast(),
                self.len as usize,
                self.offset as libc::off_t,
            )
        } as i64);
        if r != -(libc::ESPIPE as i64) {
            return r;
        }
        // Not seekable: the offset is ignored, as io_uring does.
        // SAFETY: as above.
        ret(unsafe { libc::write(self.fd, self.ptr.cast(), self.len as usize) } as i64)
    }
}

/// `fsync` or `fdatasync`.
#[derive(Debug)]
pub(crate) struct Fsync {
    pub fd: i32,
    pub datasync: bool,
}

impl Operation for Fsync {
    const CODE: u8 = opcode::Fsync::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "fsync"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        let flags = if self.datasync {
            types::FsyncFlags::DATASYNC
        } else {
            types::FsyncFlags::empty()
        };
        opcode::Fsync::new(types::Fd(self.fd)).flags(flags).build()
    }
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
    const CODE: u8 = opcode::Fallocate::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "fallocate"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Fallocate::new(types::Fd(self.fd), self.len)
            .offset(self.offset)
            .mode(self.mode)
            .build()
    }
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
}

/// `ftruncate` (an io_uring opcode only since Linux 6.9).
#[derive(Debug)]
pub(crate) struct Ftruncate {
    pub fd: i32,
    pub len: u64,
}

impl Operation for Ftruncate {
    const CODE: u8 = opcode::Ftruncate::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "ftruncate"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Ftruncate::new(types::Fd(self.fd), self.len).build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: plain descriptor call.
        ret(unsafe { libc::ftruncate(self.fd, self.len as libc::off_t) } as i64)
    }
}

/// `statx` of an open descriptor into a buffer the cell owns.
#[derive(Debug)]
pub(crate) struct Statx {
    pub fd: i32,
    pub buf: *mut libc::statx,
}

impl Operation for Statx {
    const CODE: u8 = opcode::Statx::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "statx"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Statx::new(types::Fd(self.fd), c"".as_ptr(), self.buf.cast())
            .flags(libc::AT_EMPTY_PATH)
            .mask(STATX_MASK)
            .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: buf points to a statx owned by the cell.
        unsafe { statx_fd(self.fd, 0, self.buf) }
    }
}

/// `statx(fd, "", AT_EMPTY_PATH | flags, STATX_MASK, buf)` as a blocking
/// call: 0 or `-errno`. The empty path with AT_EMPTY_PATH names `fd` itself.
///
/// # Safety
///
/// `buf` must point to a writable `statx` for the duration of the call.
pub(crate) unsafe fn statx_fd(fd: i32, flags: i32, buf: *mut libc::statx) -> i64 {
    // SAFETY: the caller gives a writable buf; the path is a NUL-terminated
    // empty string, as AT_EMPTY_PATH requires.
    ret(unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | flags,
            STATX_MASK,
            buf,
        )
    } as i64)
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
    const CODE: u8 = opcode::Close::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "close"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Close::new(types::Fd(self.fd.load(Ordering::Acquire))).build()
    }
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
    /// The kernel has run the close: the descriptor is no longer ours,
    /// whatever the result.
    fn performed(&self) {
        self.release();
    }
    /// Refused or not, a close still closes: the descriptor must not leak.
    fn refused(&self) -> i64 {
        self.blocking()
    }
}

impl Drop for Close {
    fn drop(&mut self) {
        let fd = *self.fd.get_mut();
        if fd >= 0 {
            // SAFETY: the descriptor is still ours: no driver ran the close.
            unsafe { libc::close(fd) };
        }
    }
}

/// `openat(AT_FDCWD, path)`. The path lives in the operation.
#[derive(Debug)]
pub(crate) struct Open {
    pub path: CString,
    pub flags: i32,
    pub mode: u32,
}

impl Operation for Open {
    const CODE: u8 = opcode::OpenAt::CODE;
    const RETURNS: Returns = Returns::Descriptor;
    fn name(&self) -> &'static str {
        "open"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .flags(self.flags)
            .mode(self.mode)
            .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: path is NUL-terminated and owned by the operation.
        ret(unsafe { libc::open(self.path.as_ptr(), self.flags, self.mode as libc::c_uint) } as i64)
    }
}

/// `statx(AT_FDCWD, path)` into a buffer the cell owns; `flags` may hold
/// `AT_SYMLINK_NOFOLLOW`. The path lives in the operation.
#[derive(Debug)]
pub(crate) struct StatxPath {
    pub path: CString,
    pub flags: i32,
    pub buf: *mut libc::statx,
}

impl Operation for StatxPath {
    const CODE: u8 = opcode::Statx::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "statx"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Statx::new(
            types::Fd(libc::AT_FDCWD),
            self.path.as_ptr(),
            self.buf.cast(),
        )
        .flags(self.flags)
        .mask(STATX_MASK)
        .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: path is NUL-terminated and owned by the operation; buf
        // points to a statx owned by the cell.
        ret(unsafe {
            libc::statx(
                libc::AT_FDCWD,
                self.path.as_ptr(),
                self.flags,
                STATX_MASK,
                self.buf,
            )
        } as i64)
    }
}

/// `renameat(AT_FDCWD, from, AT_FDCWD, to)`. The paths live in the operation.
#[derive(Debug)]
pub(crate) struct Rename {
    pub from: CString,
    pub to: CString,
}

impl Operation for Rename {
    const CODE: u8 = opcode::RenameAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "rename"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::RenameAt::new(
            types::Fd(libc::AT_FDCWD),
            self.from.as_ptr(),
            types::Fd(libc::AT_FDCWD),
            self.to.as_ptr(),
        )
        .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: both paths are NUL-terminated and owned by the operation.
        ret(unsafe {
            libc::renameat(
                libc::AT_FDCWD,
                self.from.as_ptr(),
                libc::AT_FDCWD,
                self.to.as_ptr(),
            )
        } as i64)
    }
}

/// `unlinkat(AT_FDCWD, path)`: a file, or with `dir` an empty directory
/// (`AT_REMOVEDIR`). The path lives in the operation.
#[derive(Debug)]
pub(crate) struct Unlink {
    pub path: CString,
    pub dir: bool,
}

impl Unlink {
    fn flags(&self) -> i32 {
        if self.dir {
            libc::AT_REMOVEDIR
        } else {
            0
        }
    }
}

impl Operation for Unlink {
    const CODE: u8 = opcode::UnlinkAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        if self.dir {
            "rmdir"
        } else {
            "unlink"
        }
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::UnlinkAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .flags(self.flags())
            .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: path is NUL-terminated and owned by the operation.
        ret(unsafe { libc::unlinkat(libc::AT_FDCWD, self.path.as_ptr(), self.flags()) } as i64)
    }
}

/// `mkdirat(AT_FDCWD, path, mode)`. The path lives in the operation.
#[derive(Debug)]
pub(crate) struct Mkdir {
    pub path: CString,
    pub mode: u32,
}

impl Operation for Mkdir {
    const CODE: u8 = opcode::MkDirAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "mkdir"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::MkDirAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .mode(self.mode as libc::mode_t)
            .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: path is NUL-terminated and owned by the operation.
        ret(unsafe {
            libc::mkdirat(
                libc::AT_FDCWD,
                self.path.as_ptr(),
                self.mode as libc::mode_t,
            )
        } as i64)
    }
}

/// `linkat(AT_FDCWD, original, AT_FDCWD, link, 0)`: a hard link (a symbolic
/// `original` is not followed, as `std::fs::hard_link` on Linux). The paths
/// live in the operation.
#[derive(Debug)]
pub(crate) struct Link {
    pub original: CString,
    pub link: CString,
}

impl Operation for Link {
    const CODE: u8 = opcode::LinkAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "link"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::LinkAt::new(
            types::Fd(libc::AT_FDCWD),
            self.original.as_ptr(),
            types::Fd(libc::AT_FDCWD),
            self.link.as_ptr(),
        )
        .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: both paths are NUL-terminated and owned by the operation.
        ret(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                self.original.as_ptr(),
                libc::AT_FDCWD,
                self.link.as_ptr(),
                0,
            )
        } as i64)
    }
}

/// `symlinkat(target, AT_FDCWD, link)`. The paths live in the operation.
#[derive(Debug)]
pub(crate) struct Symlink {
    pub target: CString,
    pub link: CString,
}

impl Operation for Symlink {
    const CODE: u8 = opcode::SymlinkAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "symlink"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::SymlinkAt::new(
            types::Fd(libc::AT_FDCWD),
            self.target.as_ptr(),
            self.link.as_ptr(),
        )
        .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: both paths are NUL-terminated and owned by the operation.
        ret(
            unsafe { libc::symlinkat(self.target.as_ptr(), libc::AT_FDCWD, self.link.as_ptr()) }
                as i64,
        )
    }
}

/// `fsetxattr(fd, name, value, len, flags)`: sets an extended attribute of
/// an open file to bytes the cell owns. The name lives in the operation.
#[derive(Debug)]
pub(crate) struct SetXattr {
    pub fd: i32,
    pub name: CString,
    pub value: *const u8,
    pub len: u32,
    /// `XATTR_CREATE`, `XATTR_REPLACE`, or 0 (either).
    pub flags: i32,
}

impl Operation for SetXattr {
    const CODE: u8 = opcode::FSetXattr::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "setxattr"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::FSetXattr::new(
            types::Fd(self.fd),
            self.name.as_ptr(),
            self.value.cast(),
            self.len,
        )
        .flags(self.flags)
        .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: name is NUL-terminated and owned by the operation; value
        // is valid for len readable bytes owned by the cell.
        ret(unsafe {
            libc::fsetxattr(
                self.fd,
                self.name.as_ptr(),
                self.value.cast(),
                self.len as usize,
                self.flags,
            )
        } as i64)
    }
}

/// `fgetxattr(fd, name, value, len)`: reads an extended attribute of an
/// open file into memory the cell owns (with `len` 0, only its size). The
/// name lives in the operation.
#[derive(Debug)]
pub(crate) struct GetXattr {
    pub fd: i32,
    pub name: CString,
    pub value: *mut u8,
    pub len: u32,
}

impl Operation for GetXattr {
    const CODE: u8 = opcode::FGetXattr::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "getxattr"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::FGetXattr::new(
            types::Fd(self.fd),
            self.name.as_ptr(),
            self.value.cast(),
            self.len,
        )
        .build()
    }
    fn blocking(&self) -> i64 {
        // SAFETY: name is NUL-terminated and owned by the operation; value
        // is valid for len writable bytes owned by the cell.
        ret(unsafe {
            libc::fgetxattr(
                self.fd,
                self.name.as_ptr(),
                self.value.cast(),
                self.len as usize,
            )
        } as i64)
    }
}

/// A result known before submission (a completion port delivers it through
/// its ring like any other, so that a worker asleep in the kernel sees it).
#[derive(Debug)]
pub(crate) struct Nop {
    pub res: i64,
}

impl Operation for Nop {
    const CODE: u8 = opcode::Nop::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "nop"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    fn entry(&self) -> squeue::Entry {
        opcode::Nop::new().build()
    }
    fn blocking(&self) -> i64 {
        self.res
    }
    fn result(&self, _cqe_res: i32) -> i64 {
        self.res
    }
}

/// Lists every operation once: generates [`OpKind`], one variant per
/// operation type (named as the type), a `From` for each, and [`OpKind`]'s
/// dispatch to [`Operation`], one exhaustive match per item.
macro_rules! operations {
    ($($op:ident),+ $(,)?) => {
        /// Every operation the engine performs.
        #[derive(Debug)]
        pub(crate) enum OpKind {
            $($op($op),)+
        }

        $(impl From<$op> for OpKind {
            fn from(op: $op) -> OpKind {
                OpKind::$op(op)
            }
        })+

        impl OpKind {
            /// The io_uring entry, or `None` when this kernel lacks the
            /// opcode (the driver then calls [`blocking`](Self::blocking)).
            #[inline]
            pub(crate) fn entry(&self, ops: &Opcodes) -> Option<squeue::Entry> {
                match self {
                    $(OpKind::$op(op) => ops.has(<$op as Operation>::CODE).then(|| op.entry()),)+
                }
            }

            /// One blocking attempt (`-EINTR` included).
            fn blocking_once(&self) -> i64 {
                match self {
                    $(OpKind::$op(op) => op.blocking(),)+
                }
            }

            /// Short name for messages.
            pub(crate) fn name(&self) -> &'static str {
                match self {
                    $(OpKind::$op(op) => op.name(),)+
                }
            }

            /// The file data a successful result moved.
            #[inline]
            pub(crate) fn transfer(&self) -> Transfer {
                match self {
                    $(OpKind::$op(op) => op.transfer(),)+
                }
            }

            /// What a successful result is.
            fn returns(&self) -> Returns {
                match self {
                    $(OpKind::$op(_) => <$op as Operation>::RETURNS,)+
                }
            }

            /// The operation's result from its completion entry's `res`.
            #[inline]
            pub(crate) fn result(&self, cqe_res: i32) -> i64 {
                match self {
                    $(OpKind::$op(op) => op.result(cqe_res),)+
                }
            }

            /// Called once a driver has performed the operation (kernel or
            /// system call): a close no longer owns its descriptor.
            #[inline]
            pub(crate) fn performed(&self) {
                match self {
                    $(OpKind::$op(op) => op.performed(),)+
                }
            }

            /// The result to report when the engine refuses the operation
            /// (it shut down first). A close still closes: the descriptor
            /// must not leak.
            pub(crate) fn refused(&self) -> i64 {
                match self {
                    $(OpKind::$op(op) => op.refused(),)+
                }
            }
        }
    };
}

operations! {
    Read,
    Write,
    Fsync,
    Fallocate,
    Ftruncate,
    Statx,
    Close,
    Open,
    StatxPath,
    Rename,
    Unlink,
    Mkdir,
    Link,
    Symlink,
    SetXattr,
    GetXattr,
    Nop,
}

// SAFETY: the raw pointers point into memory owned by the same operation
// cell (module docs); they are dereferenced only by the kernel or by the one
// thread that performs the operation.
unsafe impl Send for OpKind {}
// SAFETY: shared access only reads addresses; the one mutable part (Close's
// descriptor) is atomic.
unsafe impl Sync for OpKind {}

/// The opcodes this kernel's io_uring has (`IORING_REGISTER_PROBE`).
pub(crate) struct Opcodes {
    supported: [bool; 256],
}

impl Opcodes {
    pub(crate) fn from_probe(probe: &io_uring::Probe) -> Opcodes {
        let mut supported = [false; 256];
        for (code, s) in supported.iter_mut().enumerate() {
            *s = probe.is_supported(code as u8);
        }
        Opcodes { supported }
    }

    pub(crate) fn has(&self, code: u8) -> bool {
        self.supported[code as usize]
    }
}

impl OpKind {
    /// Performs the operation with a blocking system call; EINTR is retried.
    pub(crate) fn blocking(&self) -> i64 {
        loop {
            let r = self.blocking_once();
            if r != -(libc::EINTR as i64) {
                return r;
            }
        }
    }

    /// Releases what a result owns when nobody took it (the future was
    /// dropped): an opened descriptor is closed.
    pub(crate) fn unclaimed(&self, res: i64) {
        if res >= 0 && self.returns() == Returns::Descriptor {
            // SAFETY: the kernel returned this descriptor to us and no one
            // else ever saw it.
            unsafe { libc::close(res as i32) };
        }
    }

    /// Whether a result of this operation on a port's or a reactor's ring
    /// means that Linux failed it, unperformed, because the thread that
    /// submitted it exited: `-ECANCELED` (its queued io-wq work or armed
    /// poll dropped) or `-EFAULT` (a buffered read finished on a kernel
    /// worker without the process's memory; every buffer is the engine's).
    /// Only reads and writes are submitted again for it.
    pub(crate) fn failed_by_submitter_exit(&self, res: i64) -> bool {
        Self::may_have_failed_by_submitter_exit(res) && !matches!(self.transfer(), Transfer::None)
    }

    /// Whether `res` is one of the results an exiting submitter leaves
    /// (see [`failed_by_submitter_exit`](Self::failed_by_submitter_exit)),
    /// whatever the operation.
    #[inline]
    pub(crate) fn may_have_failed_by_submitter_exit(res: i64) -> bool {
        res == -i64::from(libc::ECANCELED) || res == -i64::from(libc::EFAULT)
    }

    /// A read's or write's memory, file offset and length.
    #[inline]
    pub(crate) fn span(&self) -> Option<Span> {
        match self.transfer() {
            Transfer::Read(s) | Transfer::Write(s) => Some(s),
            Transfer::None => None,
        }
    }
}
