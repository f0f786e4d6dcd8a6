//! Windows' ways in and out of a [`File`]: adopting a caller's handle and
//! giving it back, the counterparts of `from_fd` and `into_fd`; and what
//! Windows alone has: the valid data length (`set_valid_data`).

use std::os::windows::io::{AsRawHandle, FromRawHandle, IntoRawHandle, OwnedHandle, RawHandle};
use std::sync::Arc;

use windows_sys::Win32::Foundation::{ERROR_INVALID_PARAMETER, ERROR_PRIVILEGE_NOT_HELD};

use super::{alignment_of, File, FileInner, Mode, Need};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::future::Task;
use crate::operation::{self, OpKind};
use crate::sys;

impl File {
    /// Takes ownership of an open handle (a `std::fs::File` converts into
    /// one with `.into()`). The handle must have been opened for
    /// overlapped I/O (`FILE_FLAG_OVERLAPPED`, with std's
    /// `OpenOptionsExt::custom_flags`): the engine's reads and writes are
    /// overlapped ones. Its access (read, write, append) and
    /// `FILE_FLAG_NO_BUFFERING` are read from the handle
    /// (`NtQueryInformationFile`); for `NO_BUFFERING` the alignment is
    /// read here too, on the calling thread. The handle is associated
    /// with the engine's driver (its I/O completion port) before any
    /// operation. A handle opened for synchronous I/O (std's default) is
    /// adopted by [`from_synchronous_handle`](File::from_synchronous_handle).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a handle opened for synchronous I/O (no
    /// `FILE_FLAG_OVERLAPPED`) or whose value is not a kernel handle's;
    /// [`Error::Io`] when the system cannot tell how the handle was opened,
    /// or the driver cannot associate it (a handle already associated with
    /// another completion port). The handle is closed then.
    pub fn from_handle(engine: &Engine, handle: OwnedHandle) -> Result<File> {
        let (inner, synchronous) = adopt(engine, handle, false)?;
        if synchronous {
            // Dropping `inner` closes the handle, as documented.
            return Err(Error::InvalidInput(
                "the handle was opened for synchronous I/O: open it with \
                 FILE_FLAG_OVERLAPPED, or adopt it with File::from_synchronous_handle"
                    .into(),
            ));
        }
        // From here the file owns the handle: an error below closes it.
        engine.shared().driver.associate(inner.fd())?;
        Ok(File {
            inner: Arc::new(inner),
            engine: engine.clone(),
        })
    }

    /// Takes ownership of an open handle opened for synchronous I/O, as
    /// std opens files (`std::fs::File` converts into one with `.into()`),
    /// which [`from_handle`](File::from_handle) refuses. Its reads and
    /// writes run on the engine's bounded thread pool, whatever the driver,
    /// as blocking `ReadFile`/`WriteFile` calls with the offset in an
    /// `OVERLAPPED` (counted as pool submissions in the statistics); the
    /// handle is not associated with any completion port. Everything else
    /// (syncs, metadata, length, allocation, valid data length, close) is
    /// as for any file. Access, `FILE_FLAG_NO_BUFFERING` and alignment are
    /// read from the handle as `from_handle` reads them.
    ///
    /// Windows serialises the I/O of a file object opened for synchronous
    /// I/O: concurrent operations on such a file (and on its
    /// [`try_clone`](File::try_clone)s and any other duplicate of the
    /// handle) are correct but do not overlap; each waits for the one
    /// before. Each read and write also moves the handle's current
    /// position to its end, which matters to anyone else using the handle's
    /// position (the engine's own operations all name their offset).
    /// Prefer opening the file with the engine, or with
    /// `FILE_FLAG_OVERLAPPED` for `from_handle`, where throughput matters.
    ///
    /// A handle opened for overlapped I/O is taken too, and treated the
    /// same way (blocking calls on the pool, no association): useful for
    /// one already associated with another completion port, which
    /// `from_handle` cannot associate.
    ///
    /// Should the system not say how the handle was opened, the file is
    /// taken as opened for reading and writing, buffered, and the system
    /// judges each operation.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a value that is not a kernel handle's
    /// (the handle is closed then).
    pub fn from_synchronous_handle(engine: &Engine, handle: OwnedHandle) -> Result<File> {
        let (mut inner, _synchronous) = adopt(engine, handle, true)?;
        inner.synchronous = true;
        Ok(File {
            inner: Arc::new(inner),
            engine: engine.clone(),
        })
    }

    /// A file without a handle, as one after [`close`](File::close): every
    /// operation on it fails with [`Error::Closed`], and its raw handle is
    /// `INVALID_HANDLE_VALUE`. For a conversion that cannot fail (an
    /// adapter's `from_std`) given a handle the engine cannot keep: the
    /// error then comes from the file's first use.
    pub fn closed(engine: &Engine) -> File {
        File {
            inner: Arc::new(FileInner::closed(engine.shared().clone())),
            engine: engine.clone(),
        }
    }

    /// Whether the file's reads and writes are blocking calls on the pool:
    /// a handle adopted with
    /// [`from_synchronous_handle`](File::from_synchronous_handle) (and its
    /// clones).
    pub fn is_synchronous(&self) -> bool {
        self.inner.synchronous
    }

    /// Gives the handle back, when this is the file's only handle and no
    /// operation holds it (none in flight); otherwise returns the file. A
    /// closed file is returned too. The handle stays associated with the
    /// engine's completion port (Windows cannot undo that): an overlapped
    /// call on it with an event whose low bit is set completes without
    /// the port. A handle adopted with
    /// [`from_synchronous_handle`](File::from_synchronous_handle) was never
    /// associated.
    pub fn into_handle(self) -> std::result::Result<OwnedHandle, File> {
        let fd = self.give_back()?;
        // SAFETY: the handle was this file's alone, no operation uses it,
        // and `give_back` swapped -1 in, so FileInner never closes it.
        Ok(unsafe { OwnedHandle::from_raw_handle(sys::handle(fd)) })
    }

    /// Moves the file's *valid data length* forward to `len`
    /// (`SetFileValidData`), so that later writes below `len` are truly
    /// asynchronous. NTFS keeps, besides a file's size and allocation, the
    /// length of the data written to it: a write beyond that length,
    /// even into space already allocated ([`allocate`](File::allocate),
    /// [`set_len`](File::set_len)), is performed synchronously, because the
    /// system zeroes the space up to it first (Microsoft's KB 156932,
    /// "Asynchronous disk I/O appears as synchronous on Windows"). This
    /// call lifts that for the range `..len`: a log writer pre-extends its
    /// file with `set_len` and `set_valid_data`, then writes into it.
    ///
    /// The file must already be at least `len` bytes long (`set_len` or
    /// `allocate` first), and `len` must be above the current valid data
    /// length (Windows documents that it never moves back). It needs
    /// `SeManageVolumePrivilege` enabled in the process's token:
    /// administrators hold it, but Windows does not enable it by default;
    /// [`enable_manage_volume_privilege`](crate::enable_manage_volume_privilege)
    /// enables it. The file must not be sparse, compressed, or on a network
    /// share. Run on the engine's pool, whatever the driver.
    ///
    /// # Security
    ///
    /// The bytes between the old valid data length and `len` are not
    /// zeroed: reads there return whatever the volume held before,
    /// possibly the data of deleted files, which the process (or anyone
    /// who may read the file) could not read otherwise. Use it only for a
    /// file the process overwrites wholly before anyone reads it (a log
    /// writer's pre-extension, a database's preallocated segment), and not
    /// where others can read the file meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::PrivilegeNotHeld`] without `SeManageVolumePrivilege`
    /// enabled; [`Error::InvalidInput`] for `len` 0, or when Windows refuses
    /// the length (`ERROR_INVALID_PARAMETER`: beyond the file's size, or
    /// not above its valid data length; also a sparse or compressed file);
    /// [`Error::OffsetOverflow`] above the largest file offset;
    /// [`Error::Closed`], [`Error::NotOpenedFor`] (a file not opened for
    /// writing); otherwise the system's error ([`Error::Io`]: a file
    /// system without valid data lengths, or Wine's
    /// `ERROR_CALL_NOT_IMPLEMENTED`).
    pub fn set_valid_data(&self, len: u64) -> Task<Result<()>> {
        if len == 0 {
            return Task::new(async move {
                Err(Error::InvalidInput(
                    "SetFileValidData needs a length of at least 1".into(),
                ))
            });
        }
        let set = self.simple(Need::Write, len, move |fd| {
            OpKind::SetValidData(operation::SetValidData { fd, len })
        });
        Task::new(async move { set.await.map_err(|e| valid_data_error(e, len)) })
    }

    /// The raw handle (for diagnostics; `INVALID_HANDLE_VALUE` once
    /// closed).
    pub fn as_raw_handle(&self) -> RawHandle {
        sys::handle(self.inner.fd())
    }
}

/// The state of a file on `handle`, from what the handle says it was
/// opened for (access, buffering, and the alignment where unbuffered), not
/// yet associated with the driver; with whether it was opened for
/// synchronous I/O. Where the system cannot say how the handle was opened,
/// `lenient` takes it as opened synchronously for reading and writing
/// (the system judges each operation); otherwise that is an error. The
/// handle is the state's from here (closed with it), or closed on an
/// error.
fn adopt(engine: &Engine, handle: OwnedHandle, lenient: bool) -> Result<(FileInner, bool)> {
    let mode = match sys::handle_mode(handle.as_raw_handle()) {
        Ok(m) => m,
        Err(sys::Refused::OutOfRange) => {
            return Err(Error::InvalidInput(format!(
                "{:?} is not a kernel handle the engine can keep",
                handle.as_raw_handle()
            )))
        }
        Err(sys::Refused::Os(_)) if lenient => sys::HandleMode {
            readable: true,
            writable: true,
            append: false,
            direct: false,
            synchronous: true,
        },
        Err(sys::Refused::Os(r)) => return Err(Error::from_errno((-r) as i32)),
    };
    let Some(fd) = sys::fd_of(handle.into_raw_handle()) else {
        // `handle_mode` has checked the value: not reached.
        return Err(Error::InvalidInput("not a kernel handle".into()));
    };
    let inner = FileInner::new(
        fd,
        engine.shared().clone(),
        Mode {
            readable: mode.readable,
            writable: mode.writable,
            append: mode.append,
            direct: mode.direct,
        },
    );
    if inner.direct {
        // SAFETY: RawStat is plain old data; all-zero is a valid value.
        let mut st: sys::RawStat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is writable; the handle is ours and open.
        if unsafe { sys::stat(fd, &mut st) } == 0 {
            let _ = inner.align.set(alignment_of(&st));
        }
    }
    Ok((inner, mode.synchronous))
}

/// The engine's error for Windows' refusal of `SetFileValidData(len)`:
/// the privilege and the length in words, the rest as the system said.
fn valid_data_error(err: Error, len: u64) -> Error {
    let code = match &err {
        Error::Io(e) => e.raw_os_error(),
        _ => None,
    };
    match code.and_then(|c| u32::try_from(c).ok()) {
        Some(ERROR_PRIVILEGE_NOT_HELD) => Error::PrivilegeNotHeld {
            privilege: "SeManageVolumePrivilege",
            call: "SetFileValidData",
        },
        Some(ERROR_INVALID_PARAMETER) => Error::InvalidInput(format!(
            "SetFileValidData({len}) was refused (ERROR_INVALID_PARAMETER): the valid data \
             length only moves forward, and at most to the file's size (set_len or allocate \
             first), on a file neither sparse nor compressed"
        )),
        _ => err,
    }
}

impl AsRawHandle for File {
    fn as_raw_handle(&self) -> RawHandle {
        File::as_raw_handle(self)
    }
}

#[cfg(all(test, windows))]
mod tests {
    //! The files and paths of an engine on the thread pool, on real files:
    //! what the operations' Windows forms give through the whole engine.

    use std::os::windows::fs::OpenOptionsExt;
    use std::path::PathBuf;

    use windows_sys::Win32::Storage::FileSystem::FILE_FLAG_OVERLAPPED;

    use crate::{path, DriverChoice, Engine, Error, File, OpenOptions};

    /// An engine on each driver Windows has: the thread pool, and the I/O
    /// completion ports where the engine offers them.
    fn engines() -> Vec<Engine> {
        let mut engines = vec![Engine::builder()
            .driver(DriverChoice::Pool)
            .build()
            .unwrap()];
        match Engine::builder().driver(DriverChoice::Iocp).build() {
            Ok(engine) => engines.push(engine),
            Err(e @ Error::IocpUnavailable { .. }) => eprintln!("SKIPPED iocp: {e}"),
            Err(e) => panic!("the IOCP driver: {e}"),
        }
        engines
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "overlap-file-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn open_write_read_metadata_and_close() {
        for engine in engines() {
            let dir = temp_dir("rw");
            let p = dir.join("f");
            let file = File::create(&engine, &p).wait().unwrap();
            let (n, _) = file.write_at(b"hello world".to_vec(), 0).wait();
            assert_eq!(n.unwrap(), 11);
            let (n, buf) = file.read_at(vec![0u8; 32], 6).wait();
            assert_eq!(&buf[..n.unwrap()], b"world");
            let (n, _) = file.read_at(vec![0u8; 8], 11).wait();
            assert_eq!(n.unwrap(), 0, "end of file");
            let (r, _) = file.read_exact_at(vec![0u8; 20], 0).wait();
            assert!(matches!(
                r,
                Err(Error::UnexpectedEof {
                    read: 11,
                    wanted: 20
                })
            ));
            file.set_len(4).wait().unwrap();
            assert_eq!(file.metadata().wait().unwrap().len, 4);
            file.sync_all().wait().unwrap();
            let stat = file.stat().wait().unwrap();
            assert!(stat.is_file() && stat.len == 4);
            assert_eq!(file.stat_cached().unwrap().len, 4);
            let (r, _) = file.set_xattr("user.a", b"x".to_vec()).wait();
            assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}");
            assert!(file.read_cached_at(&mut [0u8; 4], 0).unwrap().is_none());
            file.close().wait().unwrap();
            assert!(matches!(file.close().wait(), Err(Error::Closed)));
            assert_eq!(std::fs::read(&p).unwrap(), b"hell");
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn open_options_as_std_on_windows() {
        for engine in engines() {
            let dir = temp_dir("options");
            let p = dir.join("f");
            let missing = File::open(&engine, &p).wait().unwrap_err();
            assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&engine, &p)
                .wait()
                .unwrap();
            let (r, _) = file.read_at(vec![0u8; 1], 0).wait();
            assert!(matches!(r, Err(Error::NotOpenedFor("read"))));
            assert_eq!(file.metadata().wait().unwrap().len, 0, "write-only");
            drop(file);
            let again = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&engine, &p)
                .wait()
                .unwrap_err();
            assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
            let log = OpenOptions::new()
                .append(true)
                .open(&engine, &p)
                .wait()
                .unwrap();
            assert!(log.is_append());
            log.write_all_at(b"ab".to_vec(), 0).wait().0.unwrap();
            log.write_all_at(b"cd".to_vec(), 0).wait().0.unwrap();
            drop(log);
            assert_eq!(
                std::fs::read(&p).unwrap(),
                b"abcd",
                "appended, offsets ignored"
            );
            let hinted = OpenOptions::new()
                .read(true)
                .write(true)
                .write_through(true)
                .access(crate::Access::Sequential)
                .share_mode(0)
                .open(&engine, &p)
                .wait()
                .unwrap();
            hinted.write_all_at(b"AB".to_vec(), 0).wait().0.unwrap();
            let (n, buf) = hinted.read_at(vec![0u8; 8], 0).wait();
            assert_eq!(&buf[..n.unwrap()], b"ABcd");
            // Shared with nobody: a second open fails while it is open.
            let shut_out = File::open(&engine, &p).wait().unwrap_err();
            assert_eq!(shut_out.raw_os_error(), Some(32), "ERROR_SHARING_VIOLATION");
            drop(hinted);
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn adopting_a_handle() {
        for engine in engines() {
            let dir = temp_dir("adopt");
            let p = dir.join("f");
            std::fs::write(&p, b"adopted").unwrap();
            let sync = std::fs::File::open(&p).unwrap();
            let err = File::from_handle(&engine, sync.into()).unwrap_err();
            assert!(matches!(err, Error::InvalidInput(_)), "{err}");
            let overlapped = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(FILE_FLAG_OVERLAPPED)
                .open(&p)
                .unwrap();
            let file = File::from_handle(&engine, overlapped.into()).unwrap();
            let (n, buf) = file.read_at(vec![0u8; 16], 0).wait();
            assert_eq!(&buf[..n.unwrap()], b"adopted");
            let (r, _) = file.write_at(b"x".to_vec(), 0).wait();
            assert!(matches!(r, Err(Error::NotOpenedFor("write"))));
            let clone = file.try_clone().unwrap();
            let (n, _) = clone.read_at(vec![0u8; 3], 4).wait();
            assert_eq!(n.unwrap(), 3);
            drop(clone);
            let handle = file.into_handle().expect("nothing in flight");
            drop(std::fs::File::from(handle));
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn unbuffered_files_check_alignment_before_submission() {
        for engine in engines() {
            let dir = temp_dir("direct");
            let p = dir.join("f");
            std::fs::write(&p, vec![3u8; 8192]).unwrap();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .direct(true)
                .open(&engine, &p)
                .wait()
                .unwrap();
            assert!(file.is_direct());
            let a = file.alignment();
            // The volume's sector sizes where it says them (Windows), else
            // 4096 (Wine's FileStorageInfo says nothing).
            assert!(matches!(a.source, "storage-info" | "default"), "{a:?}");
            assert!(a.offset.is_power_of_two() && a.memory >= a.offset, "{a:?}");
            let (r, _) = file
                .read_at(crate::AlignedBuf::new(a.offset as usize, 4096).unwrap(), 1)
                .wait();
            assert!(
                matches!(
                    r,
                    Err(Error::Misaligned {
                        part: crate::AlignmentPart::Offset,
                        ..
                    })
                ),
                "{r:?}"
            );
            let buf = crate::AlignedBuf::new(a.offset as usize, a.memory as usize).unwrap();
            let (n, buf) = file.read_at(buf, 0).wait();
            assert_eq!(n.unwrap(), a.offset as usize);
            assert!(buf.iter().all(|b| *b == 3));
            drop(file);
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn windows_refusals_of_set_file_valid_data_are_explained() {
        let os = |code: i32| Error::Io(std::io::Error::from_raw_os_error(code));
        let privilege = super::valid_data_error(os(1314), 4096);
        assert!(
            matches!(
                privilege,
                Error::PrivilegeNotHeld {
                    privilege: "SeManageVolumePrivilege",
                    call: "SetFileValidData"
                }
            ),
            "{privilege:?}"
        );
        assert_eq!(privilege.raw_os_error(), Some(1314), "the code stays");
        assert_eq!(privilege.kind(), std::io::ErrorKind::PermissionDenied);
        let text = privilege.to_string();
        assert!(
            text.contains("SetFileValidData needs SeManageVolumePrivilege")
                && text.contains("enable_manage_volume_privilege()"),
            "{text}"
        );
        // ERROR_INVALID_PARAMETER: the length, in words.
        let length = super::valid_data_error(os(87), 4096);
        assert!(
            matches!(&length, Error::InvalidInput(m) if m.contains("SetFileValidData(4096)")),
            "{length:?}"
        );
        // Anything else is the system's own error.
        let other = super::valid_data_error(os(120), 4096);
        assert_eq!(
            other.raw_os_error(),
            Some(120),
            "ERROR_CALL_NOT_IMPLEMENTED"
        );
        assert!(matches!(
            super::valid_data_error(Error::Closed, 1),
            Error::Closed
        ));
    }

    #[test]
    fn path_operations() {
        for engine in engines() {
            let dir = temp_dir("paths");
            let sub = dir.join("sub");
            path::create_dir(&engine, &sub, 0o755).wait().unwrap();
            assert!(path::metadata(&engine, &sub).wait().unwrap().is_dir());
            std::fs::write(sub.join("a"), b"12345").unwrap();
            path::rename(&engine, sub.join("a"), sub.join("b"))
                .wait()
                .unwrap();
            path::hard_link(&engine, sub.join("b"), sub.join("c"))
                .wait()
                .unwrap();
            let stat = path::symlink_metadata(&engine, sub.join("c"))
                .wait()
                .unwrap();
            assert_eq!((stat.len, stat.nlink), (5, 2));
            assert!(!path::try_exists(&engine, sub.join("a")).wait().unwrap());
            path::remove_file(&engine, sub.join("b")).wait().unwrap();
            path::remove_file(&engine, sub.join("c")).wait().unwrap();
            path::remove_dir(&engine, &sub).wait().unwrap();
            let nul = path::metadata(&engine, dir.join("a\0b"))
                .wait()
                .unwrap_err();
            assert!(matches!(nul, Error::InvalidInput(_)));
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
