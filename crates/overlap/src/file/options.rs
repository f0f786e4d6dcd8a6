//! How a file is opened: [`OpenOptions`] and [`Access`] hints.

use std::path::Path;
use std::sync::Arc;

use super::{File, FileInner, Mode};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::future::{run_op, Task};
use crate::operation::{self, OpKind};
use crate::request::Owner;

/// Expected access pattern, passed to the kernel as `posix_fadvise` advice
/// (the analogue of Windows' `FILE_FLAG_SEQUENTIAL_SCAN` and
/// `FILE_FLAG_RANDOM_ACCESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Access {
    /// No advice.
    #[default]
    Normal,
    /// Mostly sequential: the kernel reads ahead more aggressively.
    Sequential,
    /// Random: the kernel disables read-ahead.
    Random,
}

/// Options for opening a [`File`], as `std::fs::OpenOptions` plus direct
/// I/O, write-through and access hints.
///
/// Durability: a plain write is in the page cache (RAM) when it completes.
/// `write_through(true)` (O_DSYNC) makes each write durable before it
/// completes; `direct(true)` (O_DIRECT) bypasses the page cache but does not
/// by itself flush the device's cache: use `sync_data` or write-through.
///
/// On Windows the file is opened with `CreateFileW`, always for overlapped
/// I/O (`FILE_FLAG_OVERLAPPED`) and shared as Rust's std shares it (others
/// may read, write and delete it; `share_mode`, on Windows, changes
/// that): `direct` is `FILE_FLAG_NO_BUFFERING`, `write_through`
/// `FILE_FLAG_WRITE_THROUGH`, the [`Access`] hints
/// `FILE_FLAG_SEQUENTIAL_SCAN` and `FILE_FLAG_RANDOM_ACCESS`, and `append`
/// opens the file with `FILE_APPEND_DATA` but not `FILE_WRITE_DATA`
/// access, as std does, with which Windows writes every write at the end
/// of the file whatever its offset (and refuses `set_len` and `allocate`,
/// which need `FILE_WRITE_DATA`: `ERROR_ACCESS_DENIED`). Every file is
/// opened with `FILE_READ_ATTRIBUTES` too, so that a write-only file's
/// metadata can be read, as on Linux.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
    append: bool,
    #[cfg(unix)]
    mode: u32,
    #[cfg(unix)]
    custom_flags: i32,
    #[cfg(windows)]
    share_mode: u32,
    #[cfg(windows)]
    custom_flags: u32,
    #[cfg(windows)]
    attributes: u32,
    direct: bool,
    write_through: bool,
    access: Access,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read: false,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            append: false,
            #[cfg(unix)]
            mode: 0o666,
            #[cfg(unix)]
            custom_flags: 0,
            #[cfg(windows)]
            share_mode: crate::sys::SHARE_ALL,
            #[cfg(windows)]
            custom_flags: 0,
            #[cfg(windows)]
            attributes: 0,
            direct: false,
            write_through: false,
            access: Access::Normal,
        }
    }
}

impl OpenOptions {
    /// All options off (nothing is readable or writable yet).
    pub fn new() -> Self {
        Self::default()
    }
    /// Open for reading.
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.read = on;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.write = on;
        self
    }
    /// Create the file if it does not exist (needs `write`).
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }
    /// Create the file, failing if it exists (needs `write`).
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }
    /// Truncate an existing file to length 0 (needs `write`).
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }
    /// Open for appending (O_APPEND): every write goes to the end of the
    /// file whatever its offset, as one step with no other writer in
    /// between. Implies write access.
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.append = on;
        self
    }
    /// Further `open(2)` flags, or-ed in (the access mode bits are ignored;
    /// `O_DIRECT` here has the effect of [`direct`](Self::direct)).
    #[cfg(unix)]
    pub fn custom_flags(&mut self, flags: i32) -> &mut Self {
        self.custom_flags = flags;
        self
    }
    /// Permission bits for a created file (default 0o666, less the umask).
    #[cfg(unix)]
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }
    /// `CreateFileW`'s share mode (`FILE_SHARE_*`; default read, write and
    /// delete, as Rust's std).
    #[cfg(windows)]
    pub fn share_mode(&mut self, share: u32) -> &mut Self {
        self.share_mode = share;
        self
    }
    /// Further `FILE_FLAG_*` flags, or-ed in (`FILE_FLAG_OVERLAPPED` is
    /// always set; `FILE_FLAG_NO_BUFFERING` here has the effect of
    /// [`direct`](Self::direct)).
    #[cfg(windows)]
    pub fn custom_flags(&mut self, flags: u32) -> &mut Self {
        self.custom_flags = flags;
        self
    }
    /// `FILE_ATTRIBUTE_*` attributes of a created file.
    #[cfg(windows)]
    pub fn attributes(&mut self, attributes: u32) -> &mut Self {
        self.attributes = attributes;
        self
    }
    /// O_DIRECT: bypass the page cache. Buffers, offsets and lengths must then
    /// be aligned as [`File::alignment`] says; misaligned requests fail before
    /// submission with [`Error::Misaligned`].
    pub fn direct(&mut self, on: bool) -> &mut Self {
        self.direct = on;
        self
    }
    /// O_DSYNC: each write completes only once its data is on stable storage.
    pub fn write_through(&mut self, on: bool) -> &mut Self {
        self.write_through = on;
        self
    }
    /// Access-pattern advice for the kernel's read-ahead.
    pub fn access(&mut self, access: Access) -> &mut Self {
        self.access = access;
        self
    }

    /// The combinations `std::fs::OpenOptions` refuses.
    fn check(&self) -> Result<()> {
        if !(self.read || self.write || self.append) {
            return Err(Error::InvalidInput(
                "open for read, write, append or a combination".into(),
            ));
        }
        if (self.create || self.create_new || self.truncate) && !(self.write || self.append) {
            return Err(Error::InvalidInput(
                "create, create_new and truncate need write(true) or append(true)".into(),
            ));
        }
        if self.append && self.truncate && !self.create_new {
            return Err(Error::InvalidInput(
                "truncate and append together make no sense".into(),
            ));
        }
        Ok(())
    }

    /// The `open(2)` flags, with the rules of `std::fs::OpenOptions`.
    #[cfg(target_os = "linux")]
    fn flags(&self) -> Result<i32> {
        self.check()?;
        let mut flags = libc::O_CLOEXEC;
        flags |= match (self.read, self.append) {
            (false, true) => libc::O_WRONLY | libc::O_APPEND,
            (true, true) => libc::O_RDWR | libc::O_APPEND,
            (true, false) if !self.write => libc::O_RDONLY,
            (false, false) => libc::O_WRONLY,
            (true, false) => libc::O_RDWR,
        };
        if self.create_new {
            flags |= libc::O_CREAT | libc::O_EXCL;
        } else {
            if self.create {
                flags |= libc::O_CREAT;
            }
            if self.truncate {
                flags |= libc::O_TRUNC;
            }
        }
        if self.direct {
            flags |= libc::O_DIRECT;
        }
        if self.write_through {
            flags |= libc::O_DSYNC;
        }
        flags |= self.custom_flags & !libc::O_ACCMODE;
        // (Custom flags never change the access mode: their mode bits are
        // masked off above.)
        debug_assert!(
            matches!(
                flags & libc::O_ACCMODE,
                libc::O_RDONLY | libc::O_WRONLY | libc::O_RDWR
            ),
            "a file opens with one access mode"
        );
        Ok(flags)
    }

    /// The flags `CreateFileW` is given, with the rules of
    /// `std::fs::OpenOptions` on Windows, and what the handle is opened for.
    #[cfg(windows)]
    fn how(&self) -> Result<(crate::sys::OpenHow, Mode)> {
        use windows_sys::Win32::Foundation::{GENERIC_READ, GENERIC_WRITE};
        use windows_sys::Win32::Storage::FileSystem::{
            CREATE_ALWAYS, CREATE_NEW, FILE_FLAG_NO_BUFFERING, FILE_FLAG_OVERLAPPED,
            FILE_FLAG_RANDOM_ACCESS, FILE_FLAG_SEQUENTIAL_SCAN, FILE_FLAG_WRITE_THROUGH,
            FILE_GENERIC_WRITE, FILE_READ_ATTRIBUTES, FILE_WRITE_DATA, OPEN_ALWAYS, OPEN_EXISTING,
            TRUNCATE_EXISTING,
        };
        self.check()?;
        let read = if self.read { GENERIC_READ } else { 0 };
        let write = match (self.write, self.append) {
            // Appending: every write at the end of the file (std's choice).
            (_, true) => FILE_GENERIC_WRITE & !FILE_WRITE_DATA,
            (true, false) => GENERIC_WRITE,
            (false, false) => 0,
        };
        let disposition = match (self.create, self.truncate, self.create_new) {
            (_, _, true) => CREATE_NEW,
            (false, false, false) => OPEN_EXISTING,
            (true, false, false) => OPEN_ALWAYS,
            (false, true, false) => TRUNCATE_EXISTING,
            (true, true, false) => CREATE_ALWAYS,
        };
        let mut flags = FILE_FLAG_OVERLAPPED | self.custom_flags | self.attributes;
        if self.direct {
            flags |= FILE_FLAG_NO_BUFFERING;
        }
        if self.write_through {
            flags |= FILE_FLAG_WRITE_THROUGH;
        }
        flags |= match self.access {
            Access::Normal => 0,
            Access::Sequential => FILE_FLAG_SEQUENTIAL_SCAN,
            Access::Random => FILE_FLAG_RANDOM_ACCESS,
        };
        let how = crate::sys::OpenHow {
            // Attributes are readable whatever the access, as `fstat` reads
            // any descriptor: metadata and alignment need them.
            access: read | write | FILE_READ_ATTRIBUTES,
            share: self.share_mode,
            disposition,
            flags,
        };
        let mode = Mode {
            readable: self.read,
            writable: self.write || self.append,
            append: self.append,
            direct: flags & FILE_FLAG_NO_BUFFERING != 0,
        };
        Ok((how, mode))
    }

    /// The open operation of `path`, and what it opens the file for.
    #[cfg(target_os = "linux")]
    fn open_op(&self, path: &Path) -> Result<(OpKind, Mode)> {
        let flags = self.flags()?;
        let open = OpKind::Open(operation::Open {
            path: crate::path::cpath(path)?,
            flags,
            mode: self.mode,
        });
        Ok((open, Mode::from_flags(flags)))
    }

    /// The open operation of `path`, and what it opens the file for.
    #[cfg(windows)]
    fn open_op(&self, path: &Path) -> Result<(OpKind, Mode)> {
        let (how, mode) = self.how()?;
        let open = OpKind::Open(operation::Open {
            path: crate::path::cpath(path)?,
            how,
        });
        Ok((open, mode))
    }

    /// What follows a successful open before the file is used: the access
    /// advice (`posix_fadvise`).
    #[cfg(target_os = "linux")]
    fn opened(&self, inner: &FileInner) -> Result<()> {
        let advice = match self.access {
            Access::Normal => None,
            Access::Sequential => Some(libc::POSIX_FADV_SEQUENTIAL),
            Access::Random => Some(libc::POSIX_FADV_RANDOM),
        };
        if let Some(advice) = advice {
            // SAFETY: plain descriptor call on the descriptor we own.
            unsafe { libc::posix_fadvise(inner.fd(), 0, 0, advice) };
        }
        Ok(())
    }

    /// What follows a successful open before the file is used: the
    /// handle's association with the driver (its completion port).
    #[cfg(windows)]
    fn opened(&self, inner: &FileInner) -> Result<()> {
        inner.shared.driver.associate(inner.fd())?;
        Ok(())
    }

    /// Opens `path` on `engine` (the `openat` itself goes through the
    /// engine). On io_uring, an open that creates and truncates nothing is
    /// first tried on the calling thread as io_uring itself first tries it
    /// at submission, through the dentry cache alone and without waiting
    /// (see [`EngineBuilder::cache_fast_path`](crate::EngineBuilder::cache_fast_path)):
    /// the same outcome with no trip through the ring and no wake-up.
    pub fn open(&self, engine: &Engine, path: impl AsRef<Path>) -> Task<Result<File>> {
        let opts = self.clone();
        let engine = engine.clone();
        let path = path.as_ref().to_path_buf();
        Task::new(async move {
            let (open, mode) = opts.open_op(&path)?;
            let fd = match open_at_once(&engine, &open) {
                Some(fd) => fd?,
                None => run_op(Owner::Engine(engine.shared().clone()), open).await? as i32,
            };
            debug_assert!(fd >= 0, "an open that succeeded returns a descriptor");
            // From here the file owns the descriptor: an error closes it.
            let inner = FileInner::new(fd, engine.shared().clone(), mode);
            opts.opened(&inner)?;
            let file = File {
                inner: Arc::new(inner),
                engine: engine.clone(),
            };
            // A direct file's alignment is checked on every operation: read
            // it now, through the engine (a `statx` that may ask the file
            // system; an engine shut down meanwhile refuses it, and the
            // file, dropped, closes its descriptor). Other files learn it
            // when `File::alignment` is first asked.
            if file.inner.direct {
                let meta = file.metadata().await?;
                let _ = file.inner.align.set(meta.alignment);
            }
            Ok(file)
        })
    }
}

/// The open `open` describes, done on the calling thread when io_uring
/// would have done it at submission ([`crate::sys::open_inline`]): only
/// where the driver is io_uring, so that what a FIFO, a lease or a device
/// does to the open is what the driver would have done; `None` where the
/// driver must open the file.
#[cfg(target_os = "linux")]
fn open_at_once(engine: &Engine, open: &OpKind) -> Option<Result<i32>> {
    let shared = engine.shared();
    if !shared.fast_path || shared.is_shut() || shared.info.kind != crate::DriverKind::Uring {
        return None;
    }
    let OpKind::Open(op) = open else {
        debug_assert!(false, "open_at_once is given an open");
        return None;
    };
    let fd = crate::sys::open_inline(&*shared.counters, &op.path, op.flags)?;
    Some(fd.map_err(Error::from_errno))
}

/// Windows opens through the driver.
#[cfg(windows)]
fn open_at_once(_: &Engine, _: &OpKind) -> Option<Result<i32>> {
    None
}
