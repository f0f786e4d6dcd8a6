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
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::ptr;

use windows_sys::core::PCWSTR;
use windows_sys::Wdk::Storage::FileSystem::{
    FileAccessInformation, FileModeInformation, NtQueryInformationFile, FILE_ACCESS_INFORMATION,
    FILE_MODE_INFORMATION, FILE_NO_INTERMEDIATE_BUFFERING, FILE_SYNCHRONOUS_IO_ALERT,
    FILE_SYNCHRONOUS_IO_NONALERT,
};
use windows_sys::Win32::Foundation::{
    CloseHandle, DuplicateHandle, GetLastError, RtlNtStatusToDosError, DUPLICATE_SAME_ACCESS,
    ERROR_BROKEN_PIPE, ERROR_GEN_FAILURE, ERROR_HANDLE_EOF, ERROR_INVALID_HANDLE,
    ERROR_INVALID_PARAMETER, ERROR_IO_PENDING, ERROR_NOT_ALL_ASSIGNED, ERROR_NOT_SUPPORTED,
    ERROR_SUCCESS, HANDLE, INVALID_HANDLE_VALUE, LUID, WAIT_OBJECT_0,
};
use windows_sys::Win32::Security::{
    AdjustTokenPrivileges, LookupPrivilegeValueW, LUID_AND_ATTRIBUTES, SE_PRIVILEGE_ENABLED,
    TOKEN_ADJUST_PRIVILEGES, TOKEN_PRIVILEGES, TOKEN_QUERY,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateDirectoryW, CreateFileW, CreateHardLinkW, CreateSymbolicLinkW, DeleteFileW,
    FileAllocationInfo, FileAttributeTagInfo, FileBasicInfo, FileEndOfFileInfo, FileStandardInfo,
    FileStorageInfo, FlushFileBuffers, GetFileAttributesW, GetFileInformationByHandle,
    GetFileInformationByHandleEx, GetFullPathNameW, MoveFileExW, ReadFile, RemoveDirectoryW,
    SetFileInformationByHandle, SetFileValidData, WriteFile, BY_HANDLE_FILE_INFORMATION,
    FILE_ALLOCATION_INFO, FILE_APPEND_DATA, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_ATTRIBUTE_TAG_INFO, FILE_BASIC_INFO, FILE_END_OF_FILE_INFO, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_INFO_BY_HANDLE_CLASS, FILE_READ_ATTRIBUTES, FILE_READ_DATA,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_STANDARD_INFO, FILE_STORAGE_INFO,
    FILE_WRITE_DATA, INVALID_FILE_ATTRIBUTES, MOVEFILE_REPLACE_EXISTING, OPEN_EXISTING,
    SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE, SYMBOLIC_LINK_FLAG_DIRECTORY,
};
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};
use windows_sys::Win32::System::Threading::{
    CreateEventW, GetCurrentProcess, OpenProcessToken, WaitForSingleObject, INFINITE,
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

/// `path` (UTF-16, NUL-terminated) in a form the wide calls take whatever
/// its length, as Rust's std makes it: a path of 248 units or more (the
/// legacy `MAX_PATH` of `CreateDirectoryW`) is made absolute
/// (`GetFullPathNameW`, against the current directory now) and given the
/// verbatim prefix (`\\?\`, `\\?\UNC\` for a share), which lifts the
/// limit; a shorter one, or one already verbatim, is left as it is (a
/// relative one is then resolved when the call runs, as Linux's
/// `AT_FDCWD`). `Err(-code)` when the system cannot make it absolute.
pub(crate) fn long_path(path: Vec<u16>) -> Result<Vec<u16>, i64> {
    const SEP: u16 = b'\\' as u16;
    const VERBATIM: [u16; 4] = [SEP, SEP, b'?' as u16, SEP];
    const NT: [u16; 4] = [SEP, b'?' as u16, b'?' as u16, SEP];
    const LEGACY_MAX_PATH: usize = 248;
    debug_assert_eq!(path.last(), Some(&0), "a wide path is NUL-terminated");
    if path.len() < LEGACY_MAX_PATH || path.starts_with(&VERBATIM) || path.starts_with(&NT) {
        return Ok(path);
    }
    let mut full = vec![0u16; path.len() + 16];
    loop {
        // SAFETY: `path` is NUL-terminated; `full` is writable for the
        // length given; no file part is asked for.
        let n = unsafe {
            GetFullPathNameW(
                path.as_ptr(),
                full.len() as u32,
                full.as_mut_ptr(),
                ptr::null_mut(),
            )
        } as usize;
        if n == 0 {
            return Err(last_error());
        }
        if n < full.len() {
            full.truncate(n); // without its NUL
            break;
        }
        full.resize(n, 0); // n: the length needed, its NUL included
    }
    let is_sep = |c: &u16| *c == SEP || *c == u16::from(b'/');
    let mut out = Vec::with_capacity(full.len() + 9);
    out.extend_from_slice(&VERBATIM);
    match full.as_slice() {
        // A device (\\.\name): \\?\name.
        [a, b, dot, c, rest @ ..]
            if is_sep(a) && is_sep(b) && *dot == u16::from(b'.') && is_sep(c) =>
        {
            out.extend_from_slice(rest);
        }
        // A share (\\server\share): \\?\UNC\server\share.
        [a, b, rest @ ..] if is_sep(a) && is_sep(b) => {
            out.extend("UNC\\".encode_utf16());
            out.extend_from_slice(rest);
        }
        _ => out.extend_from_slice(&full),
    }
    // A verbatim path is not normalised by the system: one separator only.
    for c in out.iter_mut().filter(|c| **c == u16::from(b'/')) {
        *c = SEP;
    }
    out.push(0);
    Ok(out)
}

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
    _counters: &impl super::Tally,
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

/// Runs `f` with a manual-reset event for overlapped calls the thread
/// waits for itself: the thread's own, or a new one while the thread is
/// exiting (its own already dropped); `None` if the system had none to
/// give. The event may be left signalled by an earlier call (a call that
/// pends resets it as it starts; one that does not pend sets it).
pub(crate) fn with_thread_event<R>(f: impl FnOnce(Option<HANDLE>) -> R) -> R {
    // The thread's event stays open until the thread exits, which it does
    // not do within `f`.
    if let Some(event) = EVENT.try_with(|e| e.as_ref().map(|e| e.0)).ok().flatten() {
        return f(Some(event));
    }
    let own = Event::new();
    // The temporary event lives until `f` returned.
    f(own.as_ref().map(|e| e.0))
}

/// Runs `f` with an event for one overlapped call ([`with_thread_event`]),
/// or fails with the system's error.
fn with_event(f: impl FnOnce(HANDLE) -> i64) -> i64 {
    with_thread_event(|event| match event {
        Some(event) => f(event),
        None => last_error(),
    })
}

/// A positional `ReadFile` (`write`: `WriteFile`) of `len` bytes at
/// `offset` on the handle `fd`, waited for on the calling thread: the byte
/// count or `-code`; a read at or past the end of the file is 0
/// (`ERROR_HANDLE_EOF`; a pipe's end, `ERROR_BROKEN_PIPE`, too). An
/// overlapped handle's call is waited for with the thread's event; a
/// synchronous handle's returns when done (the offset still comes from the
/// `OVERLAPPED`, and the file object's current position moves past it).
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
            // SAFETY: `event` is an open event; INFINITE: the memory must
            // not go back before the call is done. Should the wait fail,
            // GetOverlappedResult below waits instead.
            let waited = unsafe { WaitForSingleObject(event, INFINITE) };
            debug_assert_eq!(waited, WAIT_OBJECT_0, "an open event can be waited for");
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

/// A failed read's or write's result: end of file (a file's, or a pipe's
/// whose writer closed it) is a read of 0 bytes, as the IOCP driver's
/// `result_of` says and std reads a broken pipe.
fn transfer_failed(code: u32, write: bool) -> i64 {
    if !write && (code == ERROR_HANDLE_EOF || code == ERROR_BROKEN_PIPE) {
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
/// `ERROR_NOT_SUPPORTED`. A file system without the allocation call
/// (Wine's: `ERROR_CALL_NOT_IMPLEMENTED`) fails the whole call before it
/// changes anything: the size is not grown without the reservation.
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
        // Reserved first: should that fail, nothing has changed.
        let r = set_allocation(fd, end.max(std_info.EndOfFile));
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

/// Reserves `size` bytes for the file
/// (`SetFileInformationByHandle(FileAllocationInfo)`).
fn set_allocation(fd: i32, size: i64) -> i64 {
    let info = FILE_ALLOCATION_INFO {
        AllocationSize: size,
    };
    set_info(fd, FileAllocationInfo, &info)
}

/// `SetFileValidData(len)`: the file's valid data length moves forward to
/// `len` (NTFS then reads the range as it lies on the volume instead of
/// zeroing it, and writes below `len` need not extend the valid data
/// synchronously). Windows asks for `SeManageVolumePrivilege` enabled
/// (else `ERROR_PRIVILEGE_NOT_HELD`), a handle with write access, and
/// `len` above the current valid data length and at most the file's size
/// (else `ERROR_INVALID_PARAMETER`). 0 or `-code`.
pub(crate) fn set_valid_data(fd: i32, len: u64) -> i64 {
    debug_assert!(fd >= 0, "a valid data length is set on an open handle");
    let Ok(len) = i64::try_from(len) else {
        return error(ERROR_INVALID_PARAMETER);
    };
    // SAFETY: a plain handle call.
    ok_or_last_error(unsafe { SetFileValidData(handle(fd), len) })
}

/// Enables privilege `name` (`SE_*_NAME`) in the process's token
/// (`OpenProcessToken`, `LookupPrivilegeValueW`, `AdjustTokenPrivileges`):
/// `Ok(true)` when it is enabled now (or was), `Ok(false)` when the token
/// does not hold it (`ERROR_NOT_ALL_ASSIGNED`: nothing changed), `Err`
/// when a call fails.
pub(crate) fn enable_privilege(name: PCWSTR) -> std::io::Result<bool> {
    debug_assert!(!name.is_null(), "a privilege has a name");
    let mut token: HANDLE = ptr::null_mut();
    // SAFETY: the pseudo-handle of this process; `token` is writable.
    let opened = unsafe {
        OpenProcessToken(
            GetCurrentProcess(),
            TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY,
            &mut token,
        )
    };
    if opened == 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the token handle was just opened for us alone; the
    // OwnedHandle closes it once.
    let token = unsafe { OwnedHandle::from_raw_handle(token) };
    let mut luid = LUID {
        LowPart: 0,
        HighPart: 0,
    };
    // SAFETY: `name` is a NUL-terminated wide string; `luid` is writable;
    // a null system name is the local system.
    if unsafe { LookupPrivilegeValueW(ptr::null(), name, &mut luid) } == 0 {
        return Err(std::io::Error::last_os_error());
    }
    let privileges = TOKEN_PRIVILEGES {
        PrivilegeCount: 1,
        Privileges: [LUID_AND_ATTRIBUTES {
            Luid: luid,
            Attributes: SE_PRIVILEGE_ENABLED,
        }],
    };
    // SAFETY: the token is open with TOKEN_ADJUST_PRIVILEGES; `privileges`
    // is read for the call; the previous state is not asked for. The
    // last error is read right after: it says whether all were assigned.
    let (adjusted, code) = unsafe {
        let adjusted = AdjustTokenPrivileges(
            token.as_raw_handle(),
            0,
            &privileges,
            0,
            ptr::null_mut(),
            ptr::null_mut(),
        );
        (adjusted, GetLastError())
    };
    match (adjusted, code) {
        (0, code) => Err(std::io::Error::from_raw_os_error(code as i32)),
        (_, ERROR_NOT_ALL_ASSIGNED) => Ok(false),
        (_, ERROR_SUCCESS) => Ok(true),
        (_, code) => Err(std::io::Error::from_raw_os_error(code as i32)),
    }
}

/// An `NTSTATUS` as a result: 0, or `-code` of the Win32 error it stands
/// for.
fn nt_result(status: i32) -> i64 {
    if status < 0 {
        // SAFETY: a pure translation of a status code.
        return error(unsafe { RtlNtStatusToDosError(status) });
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
/// Windows' handles: `ERROR_NOT_SUPPORTED` (the files refuse them before
/// submission with `Error::Unsupported`; this is the operation's own
/// answer should one be submitted).
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
    /// Opened for synchronous I/O (without `FILE_FLAG_OVERLAPPED`): the
    /// file object serialises its I/O, and its calls block.
    pub synchronous: bool,
}

/// Why a handle cannot be adopted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a value the engine can keep as a descriptor.
    OutOfRange,
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
    nt_result(status)
}

/// What the open handle `h` was opened for, read from the handle
/// (`NtQueryInformationFile`'s `FileModeInformation`, documented for user
/// mode, and `FileAccessInformation`), including whether it was opened for
/// synchronous I/O (which the caller may refuse).
pub(crate) fn handle_mode(h: HANDLE) -> Result<HandleMode, Refused> {
    let fd = fd_of(h).ok_or(Refused::OutOfRange)?;
    let mut mode = FILE_MODE_INFORMATION { Mode: 0 };
    let r = query_nt(fd, FileModeInformation, &mut mode);
    if r < 0 {
        return Err(Refused::Os(r));
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
        synchronous: mode.Mode & (FILE_SYNCHRONOUS_IO_ALERT | FILE_SYNCHRONOUS_IO_NONALERT) != 0,
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

/// A monotonic clock in nanoseconds (`QueryPerformanceCounter`, through
/// `Instant`), counted from its first reading in the process.
pub(crate) fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(all(test, windows))]
mod tests {
    //! The Windows calls on real files under a temporary directory, without
    //! an engine. They run under Wine too; where Wine departs from Windows
    //! the test says so and asserts Windows' documented result on Windows.

    use super::*;
    use std::os::windows::io::AsRawHandle;
    use std::path::{Path, PathBuf};
    use windows_sys::Win32::Foundation::{
        ERROR_ALREADY_EXISTS, ERROR_CALL_NOT_IMPLEMENTED, ERROR_FILE_NOT_FOUND,
        ERROR_PATH_NOT_FOUND, GENERIC_READ, GENERIC_WRITE,
    };
    use windows_sys::Win32::Storage::FileSystem::{
        CREATE_ALWAYS, FILE_FLAG_NO_BUFFERING, FILE_FLAG_OVERLAPPED, FILE_GENERIC_WRITE,
    };

    /// A directory of its own under the system's temporary directory,
    /// removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(
                format!(
                    "overlap-sys-{name}-{}-{:?}",
                    std::process::id(),
                    std::time::SystemTime::now()
                )
                .replace([' ', ':', '{', '}', ','], "_"),
            );
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        fn join(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn wide(path: &Path) -> Vec<u16> {
        crate::path::cpath(path).unwrap()
    }

    /// Opens (creating or truncating) `path` for overlapped reading and
    /// writing, with further `flags`.
    fn create(path: &Path, flags: u32) -> i32 {
        open_with(path, CREATE_ALWAYS, flags)
    }

    fn open_with(path: &Path, disposition: u32, flags: u32) -> i32 {
        let how = OpenHow {
            access: GENERIC_READ | GENERIC_WRITE,
            share: SHARE_ALL,
            disposition,
            flags: FILE_FLAG_OVERLAPPED | flags,
        };
        let fd = open(&wide(path), &how);
        assert!(fd >= 0, "CreateFileW {}: {}", path.display(), -fd);
        fd as i32
    }

    fn read(fd: i32, len: usize, offset: u64) -> (i64, Vec<u8>) {
        let mut buf = vec![0u8; len];
        // SAFETY: `buf` is writable for its length; `fd` is open.
        let r = unsafe { transfer_at(fd, buf.as_mut_ptr(), len as u32, offset, false) };
        buf.truncate(usize::try_from(r).unwrap_or(0));
        (r, buf)
    }

    fn write(fd: i32, data: &[u8], offset: u64) -> i64 {
        // SAFETY: WriteFile only reads `data`; `fd` is open.
        unsafe {
            transfer_at(
                fd,
                data.as_ptr().cast_mut(),
                data.len() as u32,
                offset,
                true,
            )
        }
    }

    fn stat_of(fd: i32) -> RawStat {
        let mut st = RawStat::default();
        // SAFETY: `st` is writable; `fd` is open.
        let r = unsafe { stat(fd, &mut st) };
        assert_eq!(r, 0, "stat");
        st
    }

    fn stat_of_path(path: &Path, nofollow: bool) -> std::result::Result<RawStat, i64> {
        let mut st = RawStat::default();
        // SAFETY: `st` is writable.
        let r = unsafe { stat_path(&wide(path), nofollow, &mut st) };
        if r < 0 {
            Err(r)
        } else {
            Ok(st)
        }
    }

    fn not_found(r: i64) -> bool {
        r == -i64::from(ERROR_FILE_NOT_FOUND) || r == -i64::from(ERROR_PATH_NOT_FOUND)
    }

    /// Whether this runs under Wine (ntdll exports `wine_get_version`).
    fn under_wine() -> bool {
        #[link(name = "kernel32")]
        extern "system" {
            fn GetModuleHandleA(name: *const u8) -> *mut c_void;
            fn GetProcAddress(module: *mut c_void, name: *const u8) -> *mut c_void;
        }
        // SAFETY: NUL-terminated names; ntdll is loaded in every process.
        unsafe {
            let ntdll = GetModuleHandleA(c"ntdll.dll".as_ptr().cast());
            !ntdll.is_null()
                && !GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()).is_null()
        }
    }

    #[test]
    fn descriptors_are_handles_sign_extended() {
        assert_eq!(fd_of(INVALID_HANDLE_VALUE), None);
        assert_eq!(fd_of(handle(-1)), None, "-1 is INVALID_HANDLE_VALUE");
        assert_eq!(handle(-1), INVALID_HANDLE_VALUE);
        assert_eq!(fd_of(0x1_0000_0000_isize as HANDLE), None);
        assert_eq!(fd_of(handle(0x7ff0)), Some(0x7ff0));
        assert_eq!(fd_of(handle(i32::MAX)), Some(i32::MAX));
    }

    #[test]
    fn write_read_back_and_end_of_file() {
        let dir = TempDir::new("rw");
        let fd = create(&dir.join("f"), 0);
        assert_eq!(write(fd, b"hello world", 0), 11);
        assert_eq!(read(fd, 11, 0), (11, b"hello world".to_vec()));
        // A read across the end is short; at or past it, 0.
        assert_eq!(read(fd, 16, 6), (5, b"world".to_vec()));
        assert_eq!(read(fd, 16, 11).0, 0, "a read at the end of the file is 0");
        assert_eq!(read(fd, 16, 1 << 40).0, 0, "a read past it is 0");
        // A write past the end extends the file with zeros between.
        assert_eq!(write(fd, b"!", 4096), 1);
        let (n, back) = read(fd, 4097, 0);
        assert_eq!(n, 4097);
        assert_eq!(&back[..11], b"hello world");
        assert!(back[11..4096].iter().all(|b| *b == 0));
        assert_eq!(back[4096], b'!');
        // Offsets above 4 GiB reach OffsetHigh.
        assert_eq!(write(fd, b"far", (5 << 30) + 3), 3);
        assert_eq!(read(fd, 3, (5 << 30) + 3), (3, b"far".to_vec()));
        assert_eq!(flush(fd), 0);
        assert_eq!(close(fd), 0);
    }

    #[test]
    fn metadata_of_a_handle_and_of_paths() {
        let dir = TempDir::new("meta");
        let path = dir.join("f");
        let fd = create(&path, 0);
        assert_eq!(write(fd, &[7u8; 1000], 0), 1000);
        let st = stat_of(fd);
        assert_eq!(st.len, 1000);
        assert!(!st.is_dir() && !st.is_symlink());
        assert_eq!(st.links, 1);
        assert!(st.allocated >= 1000 || st.allocated == 0, "{st:?}");
        let stat = crate::path::Stat::from_raw(&st);
        assert!(stat.is_file());
        let modified = stat.modified.expect("NTFS records the last write");
        let age = std::time::SystemTime::now()
            .duration_since(modified)
            .unwrap_or_default();
        assert!(
            age.as_secs() < 600,
            "modified {modified:?}: FILETIME converted"
        );
        assert_eq!(close(fd), 0);
        let by_path = stat_of_path(&path, false).unwrap();
        assert_eq!((by_path.len, by_path.index), (1000, st.index));
        let of_dir = stat_of_path(&dir.0, false).unwrap();
        assert!(of_dir.is_dir());
        assert_eq!(
            crate::path::Stat::from_raw(&of_dir).kind,
            crate::path::FileKind::Dir
        );
        let missing = stat_of_path(&dir.join("missing"), false).unwrap_err();
        assert!(not_found(missing), "{missing}");
        let err = std::io::Error::from_raw_os_error((-missing) as i32);
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn truncate_and_extend() {
        let dir = TempDir::new("len");
        let fd = create(&dir.join("f"), 0);
        assert_eq!(write(fd, b"abcdef", 0), 6);
        assert_eq!(set_len(fd, 3), 0);
        assert_eq!(stat_of(fd).len, 3);
        assert_eq!(read(fd, 10, 0), (3, b"abc".to_vec()));
        assert_eq!(set_len(fd, 10_000), 0);
        assert_eq!(stat_of(fd).len, 10_000);
        let (n, back) = read(fd, 100, 5000);
        assert_eq!(n, 100);
        assert!(back.iter().all(|b| *b == 0), "an extension reads as zeros");
        assert_eq!(set_len(fd, u64::MAX), -i64::from(ERROR_INVALID_PARAMETER));
        assert_eq!(close(fd), 0);
    }

    #[test]
    fn allocate_grows_or_keeps_the_size_as_linux_does() {
        let dir = TempDir::new("alloc");
        let fd = create(&dir.join("f"), 0);
        assert_eq!(write(fd, b"abc", 0), 3);
        // Punching a hole (FALLOC_FL_PUNCH_HOLE | KEEP_SIZE) has no form here.
        assert_eq!(allocate(fd, 0x03, 0, 4096), -i64::from(ERROR_NOT_SUPPORTED));
        if under_wine() {
            // Wine 8 has no FileAllocationInfo (ERROR_CALL_NOT_IMPLEMENTED;
            // nor FileAllocationInformation below it): the allocation
            // fails before it changes anything.
            assert_eq!(
                allocate(fd, 0, 0, 8192),
                -i64::from(ERROR_CALL_NOT_IMPLEMENTED)
            );
            assert_eq!(stat_of(fd).len, 3, "a failed allocation changes nothing");
            assert_eq!(close(fd), 0);
            return;
        }
        // Mode 0: the file grows to offset + len, the range reads as zeros.
        assert_eq!(allocate(fd, 0, 0, 8192), 0);
        let st = stat_of(fd);
        assert_eq!(st.len, 8192);
        assert!(st.allocated >= 8192, "{st:?}");
        let (n, back) = read(fd, 8192, 0);
        assert_eq!(n, 8192);
        assert_eq!(&back[..3], b"abc", "allocation keeps the data");
        assert!(back[3..].iter().all(|b| *b == 0));
        // Within the file: nothing changes.
        assert_eq!(allocate(fd, 0, 100, 100), 0);
        assert_eq!(stat_of(fd).len, 8192);
        // KEEP_SIZE past the end: the size stays.
        assert_eq!(allocate(fd, FALLOC_FL_KEEP_SIZE, 8192, 1 << 20), 0);
        let allocated = stat_of(fd).allocated;
        assert!(
            allocated >= 8192 + (1 << 20),
            "reserved past the end: {allocated}"
        );
        assert_eq!(stat_of(fd).len, 8192);
        assert_eq!(close(fd), 0);
    }

    /// Creating symbolic links and setting a valid data length need a
    /// privilege the token may lack.
    const ERROR_PRIVILEGE_NOT_HELD: i64 = 1314;

    #[test]
    fn enabling_the_manage_volume_privilege() {
        use windows_sys::Win32::Security::SE_MANAGE_VOLUME_NAME;
        let first = enable_privilege(SE_MANAGE_VOLUME_NAME);
        // Wine 8's token holds every privilege: it enables this one.
        println!("SeManageVolumePrivilege enabled: {first:?}");
        let first = first.expect("the process's token can be opened and adjusted");
        assert_eq!(
            enable_privilege(SE_MANAGE_VOLUME_NAME).unwrap(),
            first,
            "enabling again gives the same answer"
        );
        if under_wine() {
            assert!(first, "Wine's token holds SeManageVolumePrivilege");
        }
        let unknown: Vec<u16> = "SeNoSuchPrivilege\0".encode_utf16().collect();
        let err = enable_privilege(unknown.as_ptr()).unwrap_err();
        // ERROR_NO_SUCH_PRIVILEGE
        assert_eq!(err.raw_os_error(), Some(1313), "{err}");
    }

    #[test]
    fn set_valid_data_within_the_size_keeps_the_size_and_the_writes() {
        const MIB: u64 = 1 << 20;
        let enabled =
            enable_privilege(windows_sys::Win32::Security::SE_MANAGE_VOLUME_NAME).unwrap();
        let dir = TempDir::new("vdl");
        let fd = create(&dir.join("f"), 0);
        assert_eq!(set_len(fd, MIB), 0);
        let r = set_valid_data(fd, MIB);
        if r == -ERROR_PRIVILEGE_NOT_HELD {
            assert!(!enabled, "refused although enabled");
            assert_eq!(
                set_valid_data(fd, 2 * MIB),
                r,
                "the privilege is checked first"
            );
            println!("SKIPPED: SetFileValidData (the process lacks SeManageVolumePrivilege)");
            assert_eq!(close(fd), 0);
            return;
        }
        if r == -i64::from(ERROR_CALL_NOT_IMPLEMENTED) {
            println!(
                "SKIPPED: SetFileValidData is not implemented here (ERROR_CALL_NOT_IMPLEMENTED)"
            );
            assert_eq!(close(fd), 0);
            return;
        }
        assert_eq!(r, 0, "SetFileValidData(1 MiB) of a 1 MiB file");
        assert_eq!(stat_of(fd).len, MIB, "the size stays");
        // Beyond the size: refused (Wine and Windows alike).
        assert_eq!(
            set_valid_data(fd, 2 * MIB),
            -i64::from(ERROR_INVALID_PARAMETER)
        );
        assert_eq!(
            set_valid_data(fd, u64::MAX),
            -i64::from(ERROR_INVALID_PARAMETER)
        );
        let back = set_valid_data(fd, 4096);
        if under_wine() {
            // Wine keeps no valid data length (its SetFileValidData checks
            // the size and reserves the space): moving back is accepted.
            assert_eq!(back, 0);
        } else {
            // Windows documents the length as only moving forward.
            assert!(
                back == 0 || back == -i64::from(ERROR_INVALID_PARAMETER),
                "{back}"
            );
        }
        assert_eq!(write(fd, b"written", MIB - 7), 7);
        assert_eq!(write(fd, b"abc", 4096), 3);
        assert_eq!(read(fd, 7, MIB - 7), (7, b"written".to_vec()));
        assert_eq!(read(fd, 3, 4096), (3, b"abc".to_vec()));
        assert_eq!(
            stat_of(fd).len,
            MIB,
            "writes within the size do not grow it"
        );
        assert_eq!(close(fd), 0);
    }

    #[test]
    fn rename_unlink_mkdir_and_link() {
        let dir = TempDir::new("paths");
        let (a, b, sub) = (dir.join("a"), dir.join("b"), dir.join("sub"));
        std::fs::write(&a, b"first").unwrap();
        std::fs::write(&b, b"second").unwrap();
        assert_eq!(rename(&wide(&a), &wide(&b)), 0, "replaces an existing file");
        assert_eq!(std::fs::read(&b).unwrap(), b"first");
        assert!(!a.exists());
        assert!(not_found(rename(&wide(&a), &wide(&b))));
        assert_eq!(hard_link(&wide(&b), &wide(&a)), 0);
        assert_eq!(std::fs::read(&a).unwrap(), b"first");
        assert_eq!(stat_of_path(&a, false).unwrap().links, 2);
        assert_eq!(unlink(&wide(&a), false), 0);
        assert!(not_found(unlink(&wide(&a), false)));
        assert_eq!(mkdir(&wide(&sub)), 0);
        assert!(sub.is_dir());
        assert_eq!(mkdir(&wide(&sub)), -i64::from(ERROR_ALREADY_EXISTS));
        assert_eq!(unlink(&wide(&sub), true), 0);
        assert!(!sub.exists());
        assert!(not_found(mkdir(&wide(&dir.join("no/such")))));
    }

    #[test]
    fn utf16_paths_and_interior_nul() {
        let dir = TempDir::new("utf16");
        let path = dir.join("\u{e9}t\u{e9} \u{65e5}\u{672c} \u{1f600}.txt");
        let w = wide(&path);
        assert_eq!(w.last(), Some(&0));
        assert!(
            w.contains(&0xD83D),
            "a character outside the BMP is a surrogate pair"
        );
        let fd = create(&path, 0);
        assert_eq!(write(fd, b"x", 0), 1);
        assert_eq!(close(fd), 0);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"x",
            "std finds the same name"
        );
        let err = crate::path::cpath(Path::new("a\0b")).unwrap_err();
        assert!(matches!(err, crate::Error::InvalidInput(_)), "{err}");
    }

    #[test]
    fn long_paths_are_made_verbatim() {
        let text = |w: &[u16]| String::from_utf16_lossy(&w[..w.len() - 1]);
        assert_eq!(
            text(&wide(Path::new("short\\name"))),
            "short\\name",
            "short: as it is"
        );
        let long_name = "n".repeat(120);
        let share = format!("\\\\server\\share\\{long_name}\\{long_name}");
        let unc = text(&wide(Path::new(&share)));
        assert_eq!(
            unc,
            format!("\\\\?\\UNC\\server\\share\\{long_name}\\{long_name}")
        );
        let relative = Path::new(&long_name).join(&long_name).join(&long_name);
        let relative = text(&wide(&relative.join("f")));
        assert!(
            relative.starts_with("\\\\?\\") && relative.ends_with("\\f"),
            "{relative}"
        );
        assert!(!relative.contains('/'));
        // Real files under a directory deeper than MAX_PATH.
        let dir = TempDir::new("long");
        let mut deep = dir.0.clone();
        for _ in 0..3 {
            deep.push(&long_name);
            assert_eq!(mkdir(&wide(&deep)), 0, "{}", deep.display());
        }
        let path = deep.join("f");
        assert!(path.as_os_str().len() > 360);
        let fd = create(&path, 0);
        assert_eq!(write(fd, b"deep", 0), 4);
        assert_eq!(close(fd), 0);
        assert_eq!(stat_of_path(&path, false).unwrap().len, 4);
        let moved = deep.join("g");
        assert_eq!(rename(&wide(&path), &wide(&moved)), 0);
        assert_eq!(unlink(&wide(&moved), false), 0);
        for _ in 0..3 {
            assert_eq!(unlink(&wide(&deep), true), 0);
            deep.pop();
        }
    }

    #[test]
    fn an_adopted_handle_says_how_it_was_opened() {
        let dir = TempDir::new("adopt");
        let path = dir.join("f");
        let sync = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let mode = handle_mode(sync.as_raw_handle()).unwrap();
        assert!(
            mode.synchronous && mode.readable && mode.writable,
            "{mode:?}"
        );
        // Positioned on a synchronous handle: the call returns when done.
        let fd = fd_of(sync.as_raw_handle()).unwrap();
        assert_eq!(write(fd, b"sync", 2), 4);
        assert_eq!(read(fd, 8, 0).1, b"\0\0sync");
        assert_eq!(read(fd, 8, 6).0, 0, "end of file");
        drop(sync);
        let fd = create(&path, 0);
        let mode = handle_mode(handle(fd)).unwrap();
        assert_eq!(
            mode,
            HandleMode {
                readable: true,
                writable: true,
                append: false,
                direct: false,
                synchronous: false
            }
        );
        let dup = duplicate(fd);
        assert!(dup >= 0, "{dup}");
        assert_eq!(write(dup as i32, b"dup", 0), 3);
        assert_eq!(close(dup as i32), 0);
        assert_eq!(read(fd, 3, 0).1, b"dup");
        assert_eq!(close(fd), 0);
        let how = OpenHow {
            access: FILE_GENERIC_WRITE & !FILE_WRITE_DATA,
            share: SHARE_ALL,
            disposition: OPEN_EXISTING,
            flags: FILE_FLAG_OVERLAPPED,
        };
        let fd = open(&wide(&path), &how) as i32;
        assert!(fd >= 0);
        let mode = handle_mode(handle(fd)).unwrap();
        assert!(
            mode.append && mode.writable && !mode.readable && !mode.synchronous,
            "{mode:?}"
        );
        // Appending: the offset is not looked at, the write goes to the end.
        assert_eq!(write(fd, b"++", 0), 2);
        assert_eq!(close(fd), 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"dup++");
        assert_eq!(
            handle_mode(0x1_0000_0000_isize as HANDLE),
            Err(Refused::OutOfRange)
        );
    }

    #[test]
    fn a_misaligned_unbuffered_read_is_refused() {
        let dir = TempDir::new("direct");
        let path = dir.join("f");
        std::fs::write(&path, vec![1u8; 8192]).unwrap();
        let fd = open_with(&path, OPEN_EXISTING, FILE_FLAG_NO_BUFFERING);
        let st = stat_of(fd);
        let sector = if st.logical_sector > 0 {
            st.logical_sector
        } else {
            512
        };
        // A page-aligned buffer, a sector-sized length, an offset of 1.
        let layout = std::alloc::Layout::from_size_align(8192, 4096).unwrap();
        // SAFETY: a non-zero size.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!buf.is_null());
        // SAFETY: `buf` is 8192 writable bytes.
        let misaligned = unsafe { transfer_at(fd, buf, sector, 1, false) };
        // SAFETY: as above.
        let aligned = unsafe { transfer_at(fd, buf, sector, 0, false) };
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(buf, layout) };
        assert_eq!(close(fd), 0);
        assert_eq!(aligned, i64::from(sector), "a whole sector at 0 is read");
        if under_wine() {
            // Wine does not enforce FILE_FLAG_NO_BUFFERING's alignment.
            eprintln!("under Wine: a misaligned unbuffered read gave {misaligned}");
        } else {
            // Windows: offsets and lengths in whole sectors, else
            // ERROR_INVALID_PARAMETER (Microsoft's "File Buffering").
            assert_eq!(misaligned, -i64::from(ERROR_INVALID_PARAMETER));
        }
    }

    #[test]
    fn symbolic_links_to_files_and_directories() {
        // Creating symbolic links needs developer mode or the privilege
        // (else ERROR_PRIVILEGE_NOT_HELD).
        let dir = TempDir::new("symlink");
        std::fs::write(dir.join("target"), b"12345").unwrap();
        std::fs::create_dir(dir.join("subdir")).unwrap();
        let (to_file, to_dir) = (dir.join("to-file"), dir.join("to-dir"));
        // Relative targets, looked up from the link's directory.
        let r = symlink(&wide(Path::new("target")), &wide(&to_file));
        if r == -ERROR_PRIVILEGE_NOT_HELD {
            eprintln!("SKIPPED: no privilege to create symbolic links here");
            return;
        }
        assert_eq!(r, 0);
        assert_eq!(symlink(&wide(Path::new("subdir")), &wide(&to_dir)), 0);
        if under_wine() && std::fs::symlink_metadata(&to_file).is_err() {
            // Wine 8's CreateSymbolicLinkW is a stub that makes nothing and
            // reports success.
            eprintln!("SKIPPED: Wine made no symbolic link");
            return;
        }
        let link = stat_of_path(&to_file, true).unwrap();
        assert!(link.is_symlink() && !link.is_dir(), "{link:?}");
        let target = stat_of_path(&to_file, false).unwrap();
        assert!(!target.is_symlink() && target.len == 5, "{target:?}");
        let dir_link = stat_of_path(&to_dir, true).unwrap();
        assert!(
            dir_link.is_symlink() && dir_link.is_dir(),
            "a directory link: {dir_link:?}"
        );
        assert!(stat_of_path(&to_dir, false).unwrap().is_dir());
        assert_eq!(
            unlink(&wide(&to_dir), true),
            0,
            "a directory link goes as a directory"
        );
        assert_eq!(unlink(&wide(&to_file), false), 0);
        assert!(dir.join("subdir").is_dir() && dir.join("target").is_file());
    }

    #[test]
    fn extended_attributes_are_unsupported() {
        assert_eq!(xattr_unsupported(), -i64::from(ERROR_NOT_SUPPORTED));
        let err = crate::Error::Unsupported("extended attributes");
        assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
    }

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two() && page_size() >= 4096);
    }
}
