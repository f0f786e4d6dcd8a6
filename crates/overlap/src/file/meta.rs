//! What a file says of itself: its metadata (`statx`) and extended
//! attributes.

use std::ffi::{CString, OsStr};

use super::{alignment_of, Alignment, File, FileRef, Need, Prepared};
use crate::buf::{IoBuf, IoBufMut};
use crate::error::{Error, Result};
use crate::future::{Op, Task};
use crate::operation::{self, OpKind};
use crate::request::{Owner, Request};
use crate::sys::RawStat;

/// What [`File::metadata`] reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Metadata {
    /// Size in bytes.
    pub len: u64,
    /// Whether it is a regular file.
    pub is_file: bool,
    /// The file system's preferred I/O size.
    pub block_size: u32,
    /// Bytes of storage allocated (512-byte blocks × 512).
    pub allocated: u64,
    /// Direct-I/O alignment: STATX_DIOALIGN where the kernel and file system
    /// report it, else the device's logical block size (on Windows the
    /// volume's sector sizes).
    pub alignment: Alignment,
}

impl Metadata {
    /// What `statx` reported.
    #[cfg(target_os = "linux")]
    fn from_raw(st: &RawStat) -> Metadata {
        Metadata {
            len: st.stx_size,
            is_file: (st.stx_mode as u32 & libc::S_IFMT) == libc::S_IFREG,
            block_size: st.stx_blksize,
            allocated: st.stx_blocks * 512,
            alignment: alignment_of(st),
        }
    }

    /// What `GetFileInformationByHandleEx` reported: the block size is the
    /// volume's physical sector size (4096 where it does not say).
    #[cfg(windows)]
    fn from_raw(st: &RawStat) -> Metadata {
        Metadata {
            len: st.len,
            is_file: !st.is_dir() && !st.is_symlink(),
            block_size: if st.physical_sector > 0 {
                st.physical_sector
            } else {
                4096
            },
            allocated: st.allocated,
            alignment: alignment_of(st),
        }
    }
}

impl File {
    /// Sets the extended attribute `name` (say `user.origin`; the
    /// namespace prefix is part of it) of the open file to the bytes of
    /// `value`, creating or replacing it (`fsetxattr`), and gives `value`
    /// back.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] after [`close`](Self::close);
    /// [`Error::InvalidInput`] for a name with a NUL byte or a value over
    /// 4 GiB; otherwise the kernel's error as [`Error::Io`]: `EOPNOTSUPP`
    /// where the file system keeps no such attributes, `E2BIG` for a value
    /// over its limit (64 KiB on Linux), `ERANGE` for a name over 255 bytes,
    /// `EPERM`/`EACCES` where the caller may not set it. On Windows, always
    /// [`Error::Unsupported`] (`ErrorKind::Unsupported`), before
    /// submission: its files have no such attributes.
    pub fn set_xattr<B: IoBuf>(&self, name: impl AsRef<OsStr>, value: B) -> Task<(Result<()>, B)> {
        let len = value.bytes_len();
        let value_ptr = value.stable_ptr();
        let p = self.xattr_request(name.as_ref(), value, len, |fd, name, len| {
            OpKind::SetXattr(operation::SetXattr {
                fd,
                name,
                value: value_ptr,
                len,
                flags: 0,
            })
        });
        Task::new(async move {
            let (res, value) = Self::op(p).await;
            (res.map(|_| ()), value)
        })
    }

    /// Reads the extended attribute `name` of the open file into the start
    /// of `buf` (`fgetxattr`); returns the value's length. An empty `buf`
    /// asks for the length alone, to size a buffer for it.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] after [`close`](Self::close);
    /// [`Error::InvalidInput`] for a name with a NUL byte; otherwise the
    /// kernel's error as [`Error::Io`]: `ENODATA` when the file has no such
    /// attribute, `ERANGE` when `buf` is too small for the value,
    /// `EOPNOTSUPP` where the file system keeps no such attributes. On
    /// Windows, always [`Error::Unsupported`] (`ErrorKind::Unsupported`),
    /// before submission.
    pub fn get_xattr<B: IoBufMut>(&self, name: impl AsRef<OsStr>, mut buf: B) -> Op<B> {
        // Longer than any attribute value (64 KiB on Linux).
        let len = buf.bytes_len().min(u32::MAX as usize);
        let value = buf.stable_mut_ptr();
        Self::op(
            self.xattr_request(name.as_ref(), buf, len, |fd, name, len| {
                OpKind::GetXattr(operation::GetXattr {
                    fd,
                    name,
                    value,
                    len,
                })
            }),
        )
    }

    /// Checks an extended-attribute request and builds its operation with
    /// `make(fd, name, len)`; `buf` holds the value the operation points
    /// into (its heap memory does not move with it, IoBuf contract).
    fn xattr_request<B>(
        &self,
        name: &OsStr,
        buf: B,
        len: usize,
        make: impl FnOnce(i32, CString, u32) -> OpKind,
    ) -> Prepared<B> {
        if let Err(e) = self.check(Need::Open, 0, 0, 0) {
            return Prepared::Done(Err(e), buf);
        }
        if cfg!(windows) {
            return Prepared::Done(Err(Error::Unsupported("extended attributes")), buf);
        }
        let Ok(name) = CString::new(name.as_encoded_bytes()) else {
            let e = Error::InvalidInput(format!("attribute name {name:?} contains a NUL byte"));
            return Prepared::Done(Err(e), buf);
        };
        let Ok(len) = u32::try_from(len) else {
            let e = Error::InvalidInput(format!("an attribute value of {len} bytes is too long"));
            return Prepared::Done(Err(e), buf);
        };
        self.bufferless(buf, make(self.inner.fd(), name, len))
    }

    /// Size, block size and direct-I/O alignment (`statx`).
    pub fn metadata(&self) -> Task<Result<Metadata>> {
        let file = self.clone();
        Task::new(async move {
            let st = file.statx().await?;
            Ok(Metadata::from_raw(&st))
        })
    }

    /// Type, size, permissions, owner and times of the open file (`statx`
    /// through the engine), as [`path::metadata`](crate::path::metadata)
    /// reports them for a path.
    pub fn stat(&self) -> Task<Result<crate::path::Stat>> {
        let file = self.clone();
        Task::new(async move {
            let st = file.statx().await?;
            Ok(crate::path::Stat::from_raw(&st))
        })
    }

    /// Type, size, permissions, owner and times of the open file as the
    /// kernel holds them in memory, on the calling thread: one `statx(fd,
    /// "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC)`, about a microsecond. An open
    /// file's inode is in memory, so a local file system does no I/O for it,
    /// and `AT_STATX_DONT_SYNC` tells a network file system to answer from
    /// its cache instead of asking its server (its answer may then be
    /// stale). [`stat`](Self::stat) asks through the engine, which io_uring
    /// always hands to a kernel worker: a cross-thread round trip that costs
    /// more than the call itself. A server that stats every file it opens
    /// (tower-http's `ServeDir`) or `fs::read`'s size hint want this one.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] after [`close`](Self::close); the kernel's error
    /// otherwise.
    pub fn stat_cached(&self) -> Result<crate::path::Stat> {
        self.check(Need::Open, 0, 0, 0)?;
        // Counted in as an operation: a concurrent close waits, so the
        // descriptor's number cannot be freed and reused meanwhile.
        if !self.inner.try_start() {
            return Err(Error::Closed);
        }
        // SAFETY: RawStat is plain old data; all-zero is a valid value.
        let mut st: RawStat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is writable; the descriptor stays open until `finish`.
        let r = unsafe { crate::sys::stat_in_memory(self.inner.fd(), &mut st) };
        self.inner.finish();
        debug_assert!(r <= 0, "statx returns 0 or a negated errno");
        if r < 0 {
            return Err(std::io::Error::from_raw_os_error(-r as i32).into());
        }
        Ok(crate::path::Stat::from_raw(&st))
    }

    /// `statx` of the descriptor through the engine.
    async fn statx(&self) -> Result<Box<RawStat>> {
        let file = self;
        {
            file.check(Need::Open, 0, 0, 0)?;
            // SAFETY: RawStat is plain old data; all-zero is a valid value.
            let mut buf: Box<RawStat> = Box::new(unsafe { std::mem::zeroed() });
            let kind = OpKind::Statx(operation::Statx {
                fd: file.inner.fd(),
                buf: &mut *buf as *mut RawStat,
            });
            let req = Request {
                owner: Owner::File(FileRef::new(file.inner.clone())),
                buf,
                kind,
                bytes: 0,
                fast_path: false,
            };
            let (res, st) = Op::request(req).await;
            res?;
            Ok(st)
        }
    }
}
