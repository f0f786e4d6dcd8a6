//! Windows' side of the OS layer: a `HANDLE` kept as the engine's `i32`
//! descriptor, the positional reads and writes of a blocking operation on
//! an overlapped handle, and the file and path calls each operation's
//! blocking form makes (`CreateFileW`, `FlushFileBuffers`,
//! `SetFileInformationByHandle`, `GetFileInformationByHandleEx`,
//! `MoveFileExW`, ...).
//!
//! Results follow the engine's convention: `>= 0`, or `-code` where `code`
//! is the Win32 error (`GetLastError()`), which
//! `std::io::Error::from_raw_os_error` turns into the right message and
//! `ErrorKind`.
//!
//! Every handle the engine opens is opened for overlapped I/O
//! (`FILE_FLAG_OVERLAPPED`), so that the I/O completion port driver can
//! run its reads and writes; a blocking read or write on such a handle
//! passes an `OVERLAPPED` with the file offset and an event whose low bit
//! is set, which keeps the completion from being queued to the port, and
//! waits for that event.

use std::ffi::c_void;
use std::ptr;

use windows_sys::Wdk::Storage::FileSystem::{
    FileAccessInformation, FileModeInformation, NtQueryInformationFile, FILE_ACCESS_INFORMATION,
    FILE_MODE_INFORMATION, FILE_NO_INTERMEDIATE_BUFFERING, FILE_SYNCHRONOUS_IO_ALERT,
    FILE_SYNCHRONOUS_IO_NONALERT,
};
use windows_sys::Win32::Foundation::{
    CloseHandle, DuplicateHandle, GetLastError, RtlNtStatusToDosError, DUPLICATE_SAME_ACCESS,
    ERROR_GEN_FAILURE, ERROR_HANDLE_EOF, ERROR_INVALID_HANDLE, ERROR_INVALID_PARAMETER,
    ERROR_IO_PENDING, ERROR_NOT_SUPPORTED, HANDLE, INVALID_HANDLE_VALUE, WAIT_OBJECT_0,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateDirectoryW, CreateFileW, CreateHardLinkW, CreateSymbolicLinkW, DeleteFileW,
    FileAllocationInfo, FileAttributeTagInfo, FileBasicInfo, FileEndOfFileInfo, FileStandardInfo,
    FileStorageInfo, FlushFileBuffers, GetFileAttributesW, GetFileInformationByHandle,
    GetFileInformationByHandleEx, MoveFileExW, ReadFile, RemoveDirectoryW,
    SetFileInformationByHandle, WriteFile, BY_HANDLE_FILE_INFORMATION, FILE_ALLOCATION_INFO,
    FILE_APPEND_DATA, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_ATTRIBUTE_TAG_INFO, FILE_BASIC_INFO, FILE_END_OF_FILE_INFO, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_INFO_BY_HANDLE_CLASS, FILE_READ_ATTRIBUTES, FILE_READ_DATA,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_STANDARD_INFO, FILE_STORAGE_INFO,
    FILE_WRITE_DATA, INVALID_FILE_ATTRIBUTES, MOVEFILE_REPLACE_EXISTING, OPEN_EXISTING,
    SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE, SYMBOLIC_LINK_FLAG_DIRECTORY,
};
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};
use windows_sys::Win32::System::Threading::{
    CreateEventW, GetCurrentProcess, WaitForSingleObject, INFINITE,
};
use windows_sys::Win32::System::IO::{GetOverlappedResult, IO_STATUS_BLOCK, OVERLAPPED};

use super::MissHistory;

/// `FALLOC_FL_KEEP_SIZE` (linux/falloc.h): an allocation that leaves the
/// file's size alone. The one `fallocate` mode bit Windows can honour.
pub(crate) const FALLOC_FL_KEEP_SIZE: i32 = 0x01;

/// The largest error code of a result (`-code`): Win32 errors are 16-bit.
pub(crate) const MAX_ERROR_CODE: i64 = 0xFFFF;

/// The flag of a path's metadata that does not follow a final symbolic
/// link (Linux's `AT_SYMLINK_NOFOLLOW` value; `stat_path`'s `nofollow`).
pub(crate) const STAT_NOFOLLOW: i32 = 0x100;

/// A path as the wide-character calls take it: UTF-16, NUL-terminated.
pub(crate) type NativePath = Vec<u16>;

/// The engine's descriptor of a `HANDLE`. Windows' kernel handles are
/// 32-bit values, sign-extended on 64-bit Windows (Microsoft's
/// "Interprocess Communication Between 32-bit and 64-bit Applications"), so
/// a file handle fits an `i32`; `-1` (`INVALID_HANDLE_VALUE`) is "closed".
pub(crate) fn handle(fd: i32) -> HANDLE {
    fd as isize as HANDLE
}

/// The descriptor of handle `h`, or `None` for a value outside
/// `0..=i32::MAX` (not a kernel handle the engine can keep, or
/// `INVALID_HANDLE_VALUE`).
pub(crate) fn fd_of(h: HANDLE) -> Option<i32> {
    i32::try_from(h as isize).ok().filter(|fd| *fd >= 0)
}

/// The calling thread's last Win32 error as a result (`-code`).
fn last_error() -> i64 {
    // SAFETY: reads the calling thread's last-error value.
    let code = unsafe { GetLastError() };
    error(code)
}

/// Win32 error `code` as a result; a 0 (no error recorded) becomes
/// `ERROR_GEN_FAILURE`, so a failure is never a success.
fn error(code: u32) -> i64 {
    debug_assert!(code != 0, "a failed call records its error");
    -i64::from(if code == 0 { ERROR_GEN_FAILURE } else { code })
}

/// The result of a call that returns a `BOOL`.
fn ok_or_last_error(ok: i32) -> i64 {
    if ok != 0 {
        0
    } else {
        last_error()
    }
}

/// Windows has no read that answers only from the file cache without
/// waiting for the device (Linux's `preadv2(RWF_NOWAIT)`): the fast path
/// is not available, and every read goes through the driver.
///
/// # Safety
///
/// None beyond Linux's form (this one touches nothing).
pub(crate) unsafe fn nowait_into(
    _counters: &crate::stats::Counters,
    _file: Option<&MissHistory>,
    _fd: i32,
    _ptr: *mut u8,
    _len: usize,
    _offset: u64,
) -> Option<usize> {
    None
}

/// A manual-reset event owned by a thread, for its blocking reads and
/// writes; closed when the thread exits.
struct Event(HANDLE);

impl Event {
    fn new() -> Option<Event> {
        // SAFETY: no security attributes, no name: an anonymous event.
        let h = unsafe { CreateEventW(ptr::null(), 1, 0, ptr::null()) };
        (!h.is_null()).then_some(Event(h))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event is this value's alone.
        unsafe { CloseHandle(self.0) };
    }
}

thread_local! {
    static EVENT: Option<Event> = Event::new();
}

/// Runs `f` with an event for one overlapped call: the thread's own, or a
/// new one while the thread is exiting (its own already dropped).
fn with_event(f: impl FnOnce(HANDLE) -> i64) -> i64 {
    let mut f = Some(f);
    let run = |event: &Option<Event>, f: &mut Option<_>| match (event, f.take()) {
        (Some(e), Some(f)) => Some(f(e.0)),
        _ => None,
    };
    if let Ok(Some(r)) = EVENT.try_with(|e| run(e, &mut f)) {
        return r;
    }
    let Some(f) = f else {
        return error(ERROR_GEN_FAILURE);
    };
    match Event::new() {
        Some(e) => f(e.0),
        None => last_error(),
    }
}

/// A positional `ReadFile` (`write`: `WriteFile`) of `len` bytes at
/// `offset` on the overlapped handle `fd`, waited for on the calling
/// thread: the byte count or `-code`; a read at or past the end of the
/// file is 0 (`ERROR_HANDLE_EOF`).
///
/// # Safety
///
/// `ptr` must be valid for `len` bytes (writable for a read) for the
/// duration of the call, and `fd` an open handle that stays open during it.
pub(crate) unsafe fn transfer_at(fd: i32, ptr: *mut u8, len: u32, offset: u64, write: bool) -> i64 {
    debug_assert!(fd >= 0, "a transfer is made on an open handle");
    let h = handle(fd);
    with_event(|event| {
        // SAFETY: OVERLAPPED is plain old data; all-zero is a valid value.
        let mut ov: OVERLAPPED = unsafe { std::mem::zeroed() };
        ov.Anonymous.Anonymous.Offset = offset as u32;
        ov.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
        // The low bit keeps the completion off the handle's completion port.
        ov.hEvent = (event as usize | 1) as HANDLE;
        // SAFETY: the caller guarantees the memory and the handle; `ov`
        // lives until the call is known to be done (below).
        let started = unsafe {
            if write {
                WriteFile(h, ptr, len, ptr::null_mut(), &mut ov)
            } else {
                ReadFile(h, ptr, len, ptr::null_mut(), &mut ov)
            }
        };
        if started == 0 {
            // SAFETY: reads the thread's last-error value.
            let code = unsafe { GetLastError() };
            if code != ERROR_IO_PENDING {
                // Not started: nothing refers to `ov` or the memory.
                return transfer_failed(code, write);
            }
            // SAFETY: `event` is the thread's open event; INFINITE: the
            // memory must not go back before the call is done.
            if unsafe { WaitForSingleObject(event, INFINITE) } != WAIT_OBJECT_0 {
                // The event failed: wait on the handle instead (below).
                debug_assert!(false, "waiting for an event fails only on a bad handle");
            }
        }
        let mut n = 0u32;
        // SAFETY: `ov` is the call's; TRUE waits until the call is done,
        // whatever happened to the event.
        if unsafe { GetOverlappedResult(h, &ov, &mut n, 1) } == 0 {
            // SAFETY: reads the thread's last-error value.
            return transfer_failed(unsafe { GetLastError() }, write);
        }
        debug_assert!(n <= len, "a transfer moves at most the bytes asked for");
        i64::from(n)
    })
}

/// A failed read's or write's result: end of file is a read of 0 bytes.
fn transfer_failed(code: u32, write: bool) -> i64 {
    if !write && code == ERROR_HANDLE_EOF {
        0
    } else {
        error(code)
    }
}

/// `FlushFileBuffers`: the file's data and metadata reach stable storage
/// (Windows has no data-only form).
pub(crate) fn flush(fd: i32) -> i64 {
    // SAFETY: a plain handle call.
    ok_or_last_error(unsafe { FlushFileBuffers(handle(fd)) })
}

/// `SetFileInformationByHandle(class, info)`.
fn set_info<T>(fd: i32, class: FILE_INFO_BY_HANDLE_CLASS, info: &T) -> i64 {
    // SAFETY: `info` is the structure `class` names, read for its size.
    ok_or_last_error(unsafe {
        SetFileInformationByHandle(
            handle(fd),
            class,
            (info as *const T).cast::<c_void>(),
            std::mem::size_of::<T>() as u32,
        )
    })
}

/// `GetFileInformationByHandleEx(class)` into a `T`: 0 or `-code`.
fn get_info<T>(fd: i32, class: FILE_INFO_BY_HANDLE_CLASS, info: &mut T) -> i64 {
    // SAFETY: `info` is the writable structure `class` names, of its size.
    ok_or_last_error(unsafe {
        GetFileInformationByHandleEx(
            handle(fd),
            class,
            (info as *mut T).cast::<c_void>(),
            std::mem::size_of::<T>() as u32,
        )
    })
}

/// Sets the file's size (`FileEndOfFileInfo`): truncates or extends it
/// (the new bytes read as zeros).
pub(crate) fn set_len(fd: i32, len: u64) -> i64 {
    let Ok(len) = i64::try_from(len) else {
        return error(ERROR_INVALID_PARAMETER);
    };
    set_info(
        fd,
        FileEndOfFileInfo,
        &FILE_END_OF_FILE_INFO { EndOfFile: len },
    )
}

/// Linux's `fallocate(fd, mode, offset, len)` as Windows can do it: space
/// is reserved up to `offset + len` (`FileAllocationInfo`, never below the
/// file's size, which would truncate it), and with mode 0 the file grows
/// to `offset + len` when it is shorter (`FileEndOfFileInfo`; the new
/// range reads as zeros), as on Linux; with `FALLOC_FL_KEEP_SIZE` its size
/// stays (NTFS releases space reserved past the end when the file's last
/// handle is closed). Any other mode (punching or zeroing a range) is
/// `ERROR_NOT_SUPPORTED`.
pub(crate) fn allocate(fd: i32, mode: i32, offset: u64, len: u64) -> i64 {
    if mode & !FALLOC_FL_KEEP_SIZE != 0 {
        return error(ERROR_NOT_SUPPORTED);
    }
    let Some(end) = offset
        .checked_add(len)
        .and_then(|end| i64::try_from(end).ok())
    else {
        return error(ERROR_INVALID_PARAMETER);
    };
    // SAFETY: FILE_STANDARD_INFO is plain old data; all-zero is valid.
    let mut std_info: FILE_STANDARD_INFO = unsafe { std::mem::zeroed() };
    let r = get_info(fd, FileStandardInfo, &mut std_info);
    if r < 0 {
        return r;
    }
    if end > std_info.AllocationSize {
        let info = FILE_ALLOCATION_INFO {
            AllocationSize: end.max(std_info.EndOfFile),
        };
        let r = set_info(fd, FileAllocationInfo, &info);
        if r < 0 {
            return r;
        }
    }
    if mode & FALLOC_FL_KEEP_SIZE == 0 && end > std_info.EndOfFile {
        return set_info(
            fd,
            FileEndOfFileInfo,
            &FILE_END_OF_FILE_INFO { EndOfFile: end },
        );
    }
    0
}

/// What the engine reads of a file's metadata on Windows
/// (`GetFileInformationByHandle` and `GetFileInformationByHandleEx`), the
/// counterpart of Linux's `statx`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawStat {
    /// `FILE_ATTRIBUTE_*`.
    pub attributes: u32,
    /// The reparse tag of a reparse point (0 otherwise).
    pub reparse_tag: u32,
    /// Size in bytes.
    pub len: u64,
    /// Bytes allocated on the volume.
    pub allocated: u64,
    /// Number of hard links.
    pub links: u32,
    /// The volume's serial number.
    pub volume: u32,
    /// The file's index on its volume.
    pub index: u64,
    /// Times in 100 ns since 1601-01-01 UTC (`FILETIME`); 0: not recorded.
    pub created: i64,
    pub accessed: i64,
    pub written: i64,
    pub changed: i64,
    /// The volume's logical sector size (`FileStorageInfo`); 0 unknown.
    pub logical_sector: u32,
    /// Its physical sector size for performance; 0 unknown.
    pub physical_sector: u32,
}

impl RawStat {
    /// A directory (or a reparse point to one).
    pub(crate) fn is_dir(&self) -> bool {
        self.attributes & FILE_ATTRIBUTE_DIRECTORY != 0
    }

    /// A symbolic link or junction: a reparse point whose tag is a name
    /// surrogate (as Rust's std tells a symbolic link on Windows).
    pub(crate) fn is_symlink(&self) -> bool {
        /// Bit 29 of a reparse tag: the reparse point stands for another
        /// named entity (IsReparseTagNameSurrogate).
        const NAME_SURROGATE: u32 = 0x2000_0000;
        self.attributes & FILE_ATTRIBUTE_REPARSE_POINT != 0
            && self.reparse_tag & NAME_SURROGATE != 0
    }
}

/// Fills `buf` with the metadata of the open handle `fd`: 0 or `-code`.
/// The sector sizes are left 0 where the volume will not say.
///
/// # Safety
///
/// `buf` must point to a writable `RawStat` for the duration of the call.
pub(crate) unsafe fn stat(fd: i32, buf: *mut RawStat) -> i64 {
    // SAFETY: BY_HANDLE_FILE_INFORMATION is plain old data.
    let mut by_handle: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `by_handle` is writable for the call.
    if unsafe { GetFileInformationByHandle(handle(fd), &mut by_handle) } == 0 {
        return last_error();
    }
    // SAFETY: both are plain old data; all-zero is valid.
    let (mut basic, mut standard): (FILE_BASIC_INFO, FILE_STANDARD_INFO) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    for r in [
        get_info(fd, FileBasicInfo, &mut basic),
        get_info(fd, FileStandardInfo, &mut standard),
    ] {
        if r < 0 {
            return r;
        }
    }
    let mut tag = FILE_ATTRIBUTE_TAG_INFO {
        FileAttributes: 0,
        ReparseTag: 0,
    };
    if basic.FileAttributes & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        let r = get_info(fd, FileAttributeTagInfo, &mut tag);
        if r < 0 {
            return r;
        }
    }
    let (logical_sector, physical_sector) = sector_sizes(fd).unwrap_or((0, 0));
    let st = RawStat {
        attributes: basic.FileAttributes,
        reparse_tag: tag.ReparseTag,
        len: standard.EndOfFile.max(0) as u64,
        allocated: standard.AllocationSize.max(0) as u64,
        links: standard.NumberOfLinks,
        volume: by_handle.dwVolumeSerialNumber,
        index: u64::from(by_handle.nFileIndexHigh) << 32 | u64::from(by_handle.nFileIndexLow),
        created: basic.CreationTime,
        accessed: basic.LastAccessTime,
        written: basic.LastWriteTime,
        changed: basic.ChangeTime,
        logical_sector,
        physical_sector,
    };
    // SAFETY: the caller guarantees `buf`.
    unsafe { buf.write(st) };
    0
}

/// The volume's logical sector size and physical sector size for
/// performance (`FileStorageInfo`), or `None` where the volume or the
/// system does not say.
fn sector_sizes(fd: i32) -> Option<(u32, u32)> {
    // SAFETY: FILE_STORAGE_INFO is plain old data; all-zero is valid.
    let mut info: FILE_STORAGE_INFO = unsafe { std::mem::zeroed() };
    if get_info(fd, FileStorageInfo, &mut info) < 0 || info.LogicalBytesPerSector == 0 {
        return None;
    }
    let physical = info
        .PhysicalBytesPerSectorForPerformance
        .max(info.LogicalBytesPerSector);
    Some((info.LogicalBytesPerSector, physical))
}

/// The metadata of `fd` on the calling thread (Windows answers an open
/// handle's from memory): 0 or `-code`.
///
/// # Safety
///
/// `buf` must point to a writable `RawStat` for the duration of the call.
pub(crate) unsafe fn stat_in_memory(fd: i32, buf: *mut RawStat) -> i64 {
    // SAFETY: as the caller guarantees.
    unsafe { stat(fd, buf) }
}

/// The metadata of `path` (`nofollow`: of a symbolic link itself): the
/// path opened for its attributes only (`FILE_FLAG_BACKUP_SEMANTICS`
/// opens a directory; `FILE_FLAG_OPEN_REPARSE_POINT` the link rather than
/// its target), read, and closed. 0 or `-code`.
///
/// # Safety
///
/// `buf` must point to a writable `RawStat` for the duration of the call.
pub(crate) unsafe fn stat_path(path: &[u16], nofollow: bool, buf: *mut RawStat) -> i64 {
    let mut flags = FILE_FLAG_BACKUP_SEMANTICS;
    if nofollow {
        flags |= FILE_FLAG_OPEN_REPARSE_POINT;
    }
    let how = OpenHow {
        access: FILE_READ_ATTRIBUTES,
        share: SHARE_ALL,
        disposition: OPEN_EXISTING,
        flags,
    };
    let fd = open(path, &how);
    if fd < 0 {
        return fd;
    }
    let fd = fd as i32;
    // SAFETY: the caller guarantees `buf`; `fd` is open until below.
    let r = unsafe { stat(fd, buf) };
    close_quietly(fd);
    r
}

/// What `CreateFileW` is given besides the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenHow {
    /// `dwDesiredAccess`.
    pub access: u32,
    /// `dwShareMode`.
    pub share: u32,
    /// `dwCreationDisposition`.
    pub disposition: u32,
    /// `dwFlagsAndAttributes`.
    pub flags: u32,
}

/// The share mode of every handle the engine opens, as Rust's std opens
/// files: others may read, write, rename and delete the file meanwhile.
pub(crate) const SHARE_ALL: u32 = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE;

/// `CreateFileW(path, how)`: the new handle as a descriptor, or `-code`.
/// A handle outside the descriptor range (which Windows does not give) is
/// closed and refused with `ERROR_INVALID_HANDLE`.
pub(crate) fn open(path: &[u16], how: &OpenHow) -> i64 {
    debug_assert_eq!(path.last(), Some(&0), "a wide path is NUL-terminated");
    // SAFETY: `path` is NUL-terminated; no security attributes or template.
    let h = unsafe {
        CreateFileW(
            path.as_ptr(),
            how.access,
            how.share,
            ptr::null(),
            how.disposition,
            how.flags,
            ptr::null_mut(),
        )
    };
    if h == INVALID_HANDLE_VALUE {
        return last_error();
    }
    match fd_of(h) {
        Some(fd) => i64::from(fd),
        None => {
            // SAFETY: the handle was just returned to us alone.
            unsafe { CloseHandle(h) };
            error(ERROR_INVALID_HANDLE)
        }
    }
}

/// `CloseHandle`: 0 or `-code`.
pub(crate) fn close(fd: i32) -> i64 {
    debug_assert!(fd >= 0, "closing an open handle");
    // SAFETY: the caller owns the handle and gives it up here.
    ok_or_last_error(unsafe { CloseHandle(handle(fd)) })
}

/// Closes a handle the engine owns, ignoring the result (a drop's close:
/// nobody is there to be told).
pub(crate) fn close_quietly(fd: i32) {
    let _ = close(fd);
}

/// `MoveFileExW(from, to, MOVEFILE_REPLACE_EXISTING)`: a file replaces an
/// existing file (not a directory, which Windows refuses).
pub(crate) fn rename(from: &[u16], to: &[u16]) -> i64 {
    // SAFETY: both paths are NUL-terminated.
    ok_or_last_error(unsafe { MoveFileExW(from.as_ptr(), to.as_ptr(), MOVEFILE_REPLACE_EXISTING) })
}

/// `DeleteFileW`, or with `dir` `RemoveDirectoryW` (an empty directory,
/// or a directory symbolic link).
pub(crate) fn unlink(path: &[u16], dir: bool) -> i64 {
    // SAFETY: the path is NUL-terminated.
    ok_or_last_error(unsafe {
        if dir {
            RemoveDirectoryW(path.as_ptr())
        } else {
            DeleteFileW(path.as_ptr())
        }
    })
}

/// `CreateDirectoryW` with the default security (Windows has no mode bits).
pub(crate) fn mkdir(path: &[u16]) -> i64 {
    // SAFETY: the path is NUL-terminated; no security attributes.
    ok_or_last_error(unsafe { CreateDirectoryW(path.as_ptr(), ptr::null()) })
}

/// `CreateHardLinkW(link, original)`.
pub(crate) fn hard_link(original: &[u16], link: &[u16]) -> i64 {
    // SAFETY: both paths are NUL-terminated; no security attributes.
    ok_or_last_error(unsafe { CreateHardLinkW(link.as_ptr(), original.as_ptr(), ptr::null()) })
}

/// `CreateSymbolicLinkW(link, target)`: a directory link when the target
/// is a directory now (a relative target is looked up from the link's
/// directory), a file link otherwise. Unprivileged creation is asked for
/// (developer mode); a Windows too old to know the flag is asked again
/// without it, as Rust's std does.
pub(crate) fn symlink(target: &[u16], link: &[u16]) -> i64 {
    let mut flags = SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE;
    if target_is_dir(target, link) {
        flags |= SYMBOLIC_LINK_FLAG_DIRECTORY;
    }
    // SAFETY: both paths are NUL-terminated.
    let made = |flags| unsafe { CreateSymbolicLinkW(link.as_ptr(), target.as_ptr(), flags) };
    if made(flags) {
        return 0;
    }
    // SAFETY: reads the thread's last-error value.
    if unsafe { GetLastError() } == ERROR_INVALID_PARAMETER
        && made(flags & !SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE)
    {
        return 0;
    }
    last_error()
}

/// Whether the symbolic link target `target` of `link` names a directory.
fn target_is_dir(target: &[u16], link: &[u16]) -> bool {
    let sep = |c: &u16| *c == u16::from(b'\\') || *c == u16::from(b'/');
    let absolute = target.first().is_some_and(sep) || target.get(1) == Some(&u16::from(b':'));
    let resolved: Vec<u16> = match link.iter().rposition(sep) {
        Some(i) if !absolute => link[..=i].iter().chain(target).copied().collect(),
        _ => target.to_vec(),
    };
    // SAFETY: `resolved` ends with the target's NUL.
    let attributes = unsafe { GetFileAttributesW(resolved.as_ptr()) };
    attributes != INVALID_FILE_ATTRIBUTES && attributes & FILE_ATTRIBUTE_DIRECTORY != 0
}

/// Extended attributes (Linux's `user.*` names) have no counterpart on
/// Windows' handles: `ERROR_NOT_SUPPORTED`, `ErrorKind::Unsupported`.
pub(crate) fn xattr_unsupported() -> i64 {
    error(ERROR_NOT_SUPPORTED)
}

/// What an adopted handle was opened for, read from the handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HandleMode {
    pub readable: bool,
    pub writable: bool,
    /// Opened with `FILE_APPEND_DATA` but not `FILE_WRITE_DATA`: every
    /// write goes to the end of the file.
    pub append: bool,
    /// Opened with `FILE_FLAG_NO_BUFFERING`.
    pub direct: bool,
}

/// Why a handle cannot be adopted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a value the engine can keep as a descriptor.
    OutOfRange,
    /// Opened for synchronous I/O (without `FILE_FLAG_OVERLAPPED`).
    Synchronous,
    /// The system could not say (`-code`).
    Os(i64),
}

/// `NtQueryInformationFile(class)` into a `T`: 0 or `-code`.
fn query_nt<T>(fd: i32, class: i32, info: &mut T) -> i64 {
    // SAFETY: IO_STATUS_BLOCK is plain old data; all-zero is valid.
    let mut iosb: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is the writable structure `class` names, of its size.
    let status = unsafe {
        NtQueryInformationFile(
            handle(fd),
            &mut iosb,
            (info as *mut T).cast::<c_void>(),
            std::mem::size_of::<T>() as u32,
            class,
        )
    };
    if status < 0 {
        // SAFETY: a pure translation of a status code.
        return error(unsafe { RtlNtStatusToDosError(status) });
    }
    0
}

/// What the open handle `h` was opened for, read from the handle
/// (`NtQueryInformationFile`'s `FileModeInformation`, documented for user
/// mode, and `FileAccessInformation`): a handle opened for synchronous I/O
/// is refused, since the engine's reads and writes are overlapped.
pub(crate) fn handle_mode(h: HANDLE) -> Result<HandleMode, Refused> {
    let fd = fd_of(h).ok_or(Refused::OutOfRange)?;
    let mut mode = FILE_MODE_INFORMATION { Mode: 0 };
    let r = query_nt(fd, FileModeInformation, &mut mode);
    if r < 0 {
        return Err(Refused::Os(r));
    }
    if mode.Mode & (FILE_SYNCHRONOUS_IO_ALERT | FILE_SYNCHRONOUS_IO_NONALERT) != 0 {
        return Err(Refused::Synchronous);
    }
    let mut access = FILE_ACCESS_INFORMATION { AccessFlags: 0 };
    let r = query_nt(fd, FileAccessInformation, &mut access);
    if r < 0 {
        return Err(Refused::Os(r));
    }
    let granted = access.AccessFlags;
    Ok(HandleMode {
        readable: granted & FILE_READ_DATA != 0,
        writable: granted & (FILE_WRITE_DATA | FILE_APPEND_DATA) != 0,
        append: granted & FILE_APPEND_DATA != 0 && granted & FILE_WRITE_DATA == 0,
        direct: mode.Mode & FILE_NO_INTERMEDIATE_BUFFERING != 0,
    })
}

/// A second handle on the same open file (`DuplicateHandle`, same
/// access): the new descriptor, or `-code`. It shares the file object, and
/// so its completion port association and overlapped mode.
pub(crate) fn duplicate(fd: i32) -> i64 {
    let mut dup: HANDLE = ptr::null_mut();
    // SAFETY: duplicates within this process into a local.
    let ok = unsafe {
        let me = GetCurrentProcess();
        DuplicateHandle(me, handle(fd), me, &mut dup, 0, 0, DUPLICATE_SAME_ACCESS)
    };
    if ok == 0 {
        return last_error();
    }
    match fd_of(dup) {
        Some(fd) => i64::from(fd),
        None => {
            // SAFETY: the duplicate is ours alone.
            unsafe { CloseHandle(dup) };
            error(ERROR_INVALID_HANDLE)
        }
    }
}

/// The memory page size (`GetSystemInfo`).
pub(crate) fn page_size() -> usize {
    // SAFETY: SYSTEM_INFO is plain old data; GetSystemInfo fills it.
    let mut info: SYSTEM_INFO = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is writable for the call.
    unsafe { GetSystemInfo(&mut info) };
    let n = info.dwPageSize as usize;
    if n.is_power_of_two() {
        n
    } else {
        4096
    }
}
