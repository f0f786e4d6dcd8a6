//! The operations on paths (open, `statx` by path, rename, unlink, mkdir,
//! links) and on extended attributes. See the [module docs](super) for how
//! an operation is declared.

use std::ffi::CString;

#[cfg(target_os = "linux")]
use io_uring::{opcode, squeue, types};

#[cfg(target_os = "linux")]
use super::{ret, STATX_MASK};
use super::{Operation, Returns, Transfer};
use crate::sys::{NativePath, RawStat};

/// `openat(AT_FDCWD, path)` (on Windows `CreateFileW`). The path lives in
/// the operation.
#[derive(Debug)]
pub(crate) struct Open {
    pub path: NativePath,
    #[cfg(target_os = "linux")]
    pub flags: i32,
    #[cfg(target_os = "linux")]
    pub mode: u32,
    #[cfg(windows)]
    pub how: crate::sys::OpenHow,
}

impl Operation for Open {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::OpenAt::CODE;
    const RETURNS: Returns = Returns::Descriptor;
    fn name(&self) -> &'static str {
        "open"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .flags(self.flags)
            .mode(self.mode)
            .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: path is NUL-terminated and owned by the operation.
        ret(unsafe { libc::open(self.path.as_ptr(), self.flags, self.mode as libc::c_uint) } as i64)
    }
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::open(&self.path, &self.how)
    }
}

/// `statx(AT_FDCWD, path)` into a buffer the cell owns; `flags` may hold
/// `AT_SYMLINK_NOFOLLOW` (`sys::STAT_NOFOLLOW`). The path lives in the
/// operation. On Windows: the path opened for its attributes
/// (`sys::stat_path`).
#[derive(Debug)]
pub(crate) struct StatxPath {
    pub path: NativePath,
    pub flags: i32,
    pub buf: *mut RawStat,
}

impl Operation for StatxPath {
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
        opcode::Statx::new(
            types::Fd(libc::AT_FDCWD),
            self.path.as_ptr(),
            self.buf.cast(),
        )
        .flags(self.flags)
        .mask(STATX_MASK)
        .build()
    }
    #[cfg(target_os = "linux")]
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
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        let nofollow = self.flags & crate::sys::STAT_NOFOLLOW != 0;
        // SAFETY: buf points to a RawStat owned by the cell.
        unsafe { crate::sys::stat_path(&self.path, nofollow, self.buf) }
    }
}

/// `renameat(AT_FDCWD, from, AT_FDCWD, to)`. The paths live in the operation.
#[derive(Debug)]
pub(crate) struct Rename {
    pub from: NativePath,
    pub to: NativePath,
}

impl Operation for Rename {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::RenameAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "rename"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::RenameAt::new(
            types::Fd(libc::AT_FDCWD),
            self.from.as_ptr(),
            types::Fd(libc::AT_FDCWD),
            self.to.as_ptr(),
        )
        .build()
    }
    #[cfg(target_os = "linux")]
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
    /// `MoveFileExW` replacing an existing file.
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::rename(&self.from, &self.to)
    }
}

/// `unlinkat(AT_FDCWD, path)`: a file, or with `dir` an empty directory
/// (`AT_REMOVEDIR`). The path lives in the operation.
#[derive(Debug)]
pub(crate) struct Unlink {
    pub path: NativePath,
    pub dir: bool,
}

#[cfg(target_os = "linux")]
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
    #[cfg(target_os = "linux")]
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
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::UnlinkAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .flags(self.flags())
            .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: path is NUL-terminated and owned by the operation.
        ret(unsafe { libc::unlinkat(libc::AT_FDCWD, self.path.as_ptr(), self.flags()) } as i64)
    }
    /// `DeleteFileW`, or `RemoveDirectoryW` for a directory.
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::unlink(&self.path, self.dir)
    }
}

/// `mkdirat(AT_FDCWD, path, mode)`. The path lives in the operation.
#[derive(Debug)]
pub(crate) struct Mkdir {
    pub path: NativePath,
    /// Permission bits (Windows has none: ignored there).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub mode: u32,
}

impl Operation for Mkdir {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::MkDirAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "mkdir"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::MkDirAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .mode(self.mode as libc::mode_t)
            .build()
    }
    #[cfg(target_os = "linux")]
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
    /// `CreateDirectoryW`; `mode` has no Windows counterpart.
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::mkdir(&self.path)
    }
}

/// `linkat(AT_FDCWD, original, AT_FDCWD, link, 0)`: a hard link (a symbolic
/// `original` is not followed, as `std::fs::hard_link` on Linux). The paths
/// live in the operation.
#[derive(Debug)]
pub(crate) struct Link {
    pub original: NativePath,
    pub link: NativePath,
}

impl Operation for Link {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::LinkAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "link"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::LinkAt::new(
            types::Fd(libc::AT_FDCWD),
            self.original.as_ptr(),
            types::Fd(libc::AT_FDCWD),
            self.link.as_ptr(),
        )
        .build()
    }
    #[cfg(target_os = "linux")]
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
    /// `CreateHardLinkW`.
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::hard_link(&self.original, &self.link)
    }
}

/// `symlinkat(target, AT_FDCWD, link)`. The paths live in the operation.
#[derive(Debug)]
pub(crate) struct Symlink {
    pub target: NativePath,
    pub link: NativePath,
}

impl Operation for Symlink {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::SymlinkAt::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "symlink"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::SymlinkAt::new(
            types::Fd(libc::AT_FDCWD),
            self.target.as_ptr(),
            self.link.as_ptr(),
        )
        .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: both paths are NUL-terminated and owned by the operation.
        ret(
            unsafe { libc::symlinkat(self.target.as_ptr(), libc::AT_FDCWD, self.link.as_ptr()) }
                as i64,
        )
    }
    /// `CreateSymbolicLinkW` (`sys::symlink`).
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::symlink(&self.target, &self.link)
    }
}

/// `fsetxattr(fd, name, value, len, flags)`: sets an extended attribute of
/// an open file to bytes the cell owns. The name lives in the operation.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // Windows refuses it
pub(crate) struct SetXattr {
    pub fd: i32,
    pub name: CString,
    pub value: *const u8,
    pub len: u32,
    /// `XATTR_CREATE`, `XATTR_REPLACE`, or 0 (either).
    pub flags: i32,
}

impl Operation for SetXattr {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::FSetXattr::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "setxattr"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
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
    #[cfg(target_os = "linux")]
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
    /// Windows has no extended attributes of this kind:
    /// `ERROR_NOT_SUPPORTED`.
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::xattr_unsupported()
    }
}

/// `fgetxattr(fd, name, value, len)`: reads an extended attribute of an
/// open file into memory the cell owns (with `len` 0, only its size). The
/// name lives in the operation.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // Windows refuses it
pub(crate) struct GetXattr {
    pub fd: i32,
    pub name: CString,
    pub value: *mut u8,
    pub len: u32,
}

impl Operation for GetXattr {
    #[cfg(target_os = "linux")]
    const CODE: u8 = opcode::FGetXattr::CODE;
    const RETURNS: Returns = Returns::Value;
    fn name(&self) -> &'static str {
        "getxattr"
    }
    fn transfer(&self) -> Transfer {
        Transfer::None
    }
    #[cfg(target_os = "linux")]
    fn entry(&self) -> squeue::Entry {
        opcode::FGetXattr::new(
            types::Fd(self.fd),
            self.name.as_ptr(),
            self.value.cast(),
            self.len,
        )
        .build()
    }
    #[cfg(target_os = "linux")]
    fn blocking(&self) -> i64 {
        // SAFETY: name is NUL-terminated and owned by the operation; value
        // is valid for len writable bytes owned by the cell.
        let r = ret(unsafe {
            libc::fgetxattr(
                self.fd,
                self.name.as_ptr(),
                self.value.cast(),
                self.len as usize,
            )
        } as i64);
        debug_assert!(
            r <= i64::from(self.len) || self.len == 0,
            "an attribute read fills at most the buffer (a zero length asks for the size)"
        );
        r
    }
    /// Windows has no extended attributes of this kind:
    /// `ERROR_NOT_SUPPORTED`.
    #[cfg(windows)]
    fn blocking(&self) -> i64 {
        crate::sys::xattr_unsupported()
    }
}
