//! Windows' side of [`crate::sys`].

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::{FileExt, OpenOptionsExt};
use std::os::windows::io::AsRawHandle;
use std::path::Path;
use std::sync::OnceLock;

use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_CALL_NOT_IMPLEMENTED, ERROR_INVALID_FUNCTION, ERROR_INVALID_PARAMETER,
    ERROR_NOT_SUPPORTED, FILETIME, GENERIC_READ, INVALID_HANDLE_VALUE, TRUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    FileAllocationInfo, GetDiskFreeSpaceExW, GetVolumeInformationW, GetVolumePathNameW, ReOpenFile,
    SetFileInformationByHandle, FILE_ALLOCATION_INFO, FILE_FLAG_NO_BUFFERING, FILE_SHARE_DELETE,
    FILE_SHARE_READ, FILE_SHARE_WRITE,
};
use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetProcessTimes, OpenProcess, TerminateProcess, PROCESS_TERMINATE,
};

/// What Windows answers when it refuses `FILE_FLAG_NO_BUFFERING` at open.
pub(crate) const DIRECT_REFUSED: i32 = ERROR_INVALID_PARAMETER as i32;

/// [`DIRECT_REFUSED`]'s name, for messages.
pub(crate) const DIRECT_REFUSED_NAME: &str = "ERROR_INVALID_PARAMETER";

/// The system's own asynchronous driver, for messages.
pub(crate) const NATIVE_DRIVER: &str = "I/O completion ports";

/// The system's words for direct I/O, for messages.
pub(crate) const DIRECT_NAME: &str = "FILE_FLAG_NO_BUFFERING";

/// The call that makes data durable, for messages.
pub(crate) const SYNC_NAME: &str = "FlushFileBuffers";

/// The flag of write-through opens, for messages.
pub(crate) const WRITE_THROUGH_NAME: &str = "FILE_FLAG_WRITE_THROUGH";

/// The call that preallocates, for messages.
pub(crate) const ALLOCATE_NAME: &str = "SetFileInformationByHandle(FileAllocationInfo)";

/// Whether `code` says that the file system cannot preallocate at all
/// (`ERROR_INVALID_FUNCTION`, `ERROR_NOT_SUPPORTED`, or Wine's
/// `ERROR_CALL_NOT_IMPLEMENTED`), rather than that this call failed.
pub(crate) fn allocation_unsupported(code: i32) -> bool {
    [
        ERROR_INVALID_FUNCTION,
        ERROR_NOT_SUPPORTED,
        ERROR_CALL_NOT_IMPLEMENTED,
    ]
    .iter()
    .any(|&c| c as i32 == code)
}

/// `s` as a NUL-terminated UTF-16 string.
fn wide(s: &OsStr) -> Vec<u16> {
    s.encode_wide().chain(std::iter::once(0)).collect()
}

/// Bytes free to this user on the volume holding `dir`
/// (`GetDiskFreeSpaceExW`; quotas included).
pub(crate) fn free_bytes(dir: &Path) -> io::Result<u64> {
    let path = wide(dir.as_os_str());
    let mut avail = 0u64;
    // SAFETY: `path` is NUL-terminated; `avail` is a writable u64; the other
    // outputs are optional and null.
    let ok = unsafe {
        GetDiskFreeSpaceExW(
            path.as_ptr(),
            &mut avail,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(avail)
}

/// The file system of the volume holding `dir` (`NTFS`, `ReFS`, ...).
pub(crate) fn fs_kind(dir: &Path) -> String {
    let path = wide(dir.as_os_str());
    let mut root = [0u16; 1024];
    let mut name = [0u16; 64];
    // SAFETY: `path` is NUL-terminated; `root` and `name` are writable and
    // their lengths are given; the other outputs are optional and null.
    let ok = unsafe {
        GetVolumePathNameW(path.as_ptr(), root.as_mut_ptr(), root.len() as u32) != 0
            && GetVolumeInformationW(
                root.as_ptr(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                name.as_mut_ptr(),
                name.len() as u32,
            ) != 0
    };
    if !ok {
        return "unknown".to_string();
    }
    let len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    String::from_utf16_lossy(&name[..len])
}

/// Asks the system to drop the file's pages from its cache: a handle
/// opened on it without buffering (`ReOpenFile` with
/// `FILE_FLAG_NO_BUFFERING`). A file system keeps its cache coherent with
/// such a handle by flushing and purging the file's cached data when it is
/// opened, provided no cached handle of the file is open and no mapping
/// holds it (the FAT driver's published sources do so; NTFS is reported
/// to): the caller's `file` should be a handle without buffering itself,
/// and every cached one closed. Windows cannot say whether it worked.
pub(crate) fn drop_cache(file: &File) -> io::Result<()> {
    let share = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE;
    // SAFETY: the handle is `file`'s, open for the call; ReOpenFile makes a
    // new handle, closed below, and leaves the original as it was.
    let h = unsafe {
        ReOpenFile(
            file.as_raw_handle(),
            GENERIC_READ,
            share,
            FILE_FLAG_NO_BUFFERING,
        )
    };
    if h == INVALID_HANDLE_VALUE || h.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `h` was opened above and is closed once.
    unsafe { CloseHandle(h) };
    Ok(())
}

/// The words of [`drop_cache`], for messages.
pub(crate) const DROP_CACHE_NAME: &str = "a handle opened with FILE_FLAG_NO_BUFFERING";

/// Windows takes the random-access hint at open
/// (`FILE_FLAG_RANDOM_ACCESS`), not later: nothing to do.
pub(crate) fn advise_random(_file: &File) {}

/// Opens with direct I/O (`FILE_FLAG_NO_BUFFERING`) when `direct`.
pub(crate) fn direct(o: &mut OpenOptions, direct: bool) -> &mut OpenOptions {
    o.custom_flags(if direct { FILE_FLAG_NO_BUFFERING } else { 0 })
}

/// `ReadFile` at `offset` (the file's position moves; the commands never
/// use it).
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.seek_read(buf, offset)
}

/// `WriteFile` at `offset`.
pub(crate) fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<usize> {
    file.seek_write(buf, offset)
}

/// [`write_at`] until all of `buf` is written.
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match write_at(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reserves `size` bytes for `file` (`FileAllocationInfo`) and grows it
/// to `size` when it is shorter (the new range reads as zeros); a longer
/// file keeps its size and data, as with Linux's `fallocate`.
pub(crate) fn allocate(file: &File, size: u64) -> io::Result<()> {
    let len = file.metadata()?.len();
    let info = FILE_ALLOCATION_INFO {
        // Never below the size: a smaller allocation would cut the file.
        AllocationSize: i64::try_from(size.max(len))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "size too large"))?,
    };
    // SAFETY: the handle is `file`'s, open for the call; `info` is a live
    // FILE_ALLOCATION_INFO and its size is given.
    let ok = unsafe {
        SetFileInformationByHandle(
            file.as_raw_handle(),
            FileAllocationInfo,
            (&info as *const FILE_ALLOCATION_INFO).cast(),
            std::mem::size_of::<FILE_ALLOCATION_INFO>() as u32,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    if len < size {
        file.set_len(size)?;
    }
    Ok(())
}

/// The size of the memory page, in bytes.
pub(crate) fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: SYSTEM_INFO is plain old data; GetSystemInfo fills it.
        let mut info: SYSTEM_INFO = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a local SYSTEM_INFO.
        unsafe { GetSystemInfo(&mut info) };
        u64::from(info.dwPageSize).max(1)
    })
}

/// Windows does not tell which pages of a file are in its cache.
pub(crate) fn residency(_file: &File, _len: u64) -> Option<Vec<bool>> {
    None
}

/// Why [`residency`] answers `None`, for messages.
pub(crate) const RESIDENCY_UNKNOWN: &str = "Windows does not tell which pages of a file are cached";

/// Windows does not tell which pages of a file are dirty.
pub(crate) fn unwritten_pages(_file: &File, _offsets: &[u64], _chunk: u64) -> Option<u64> {
    None
}

/// CPU seconds (user + kernel) of every thread of the process
/// (`GetProcessTimes`); Windows does not count context switches per
/// process.
pub(crate) fn cpu_and_switches() -> (f64, Option<u64>) {
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: the pseudo-handle of this process and four writable FILETIMEs.
    let ok = unsafe {
        GetProcessTimes(
            GetCurrentProcess(),
            &mut created,
            &mut exited,
            &mut kernel,
            &mut user,
        )
    };
    if ok == 0 {
        return (0.0, None);
    }
    let secs = |t: FILETIME| {
        ((u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)) as f64 / 1e7
    };
    (secs(kernel) + secs(user), None)
}

/// Windows has no per-process limit on open files that a server meets
/// before memory runs out.
pub(crate) fn open_files_limit() -> Option<u64> {
    None
}

/// The name of the open-files limit, for messages.
pub(crate) const OPEN_FILES_LIMIT_NAME: &str = "the open-files limit";

/// Whether accepting failed on an error of the connection (not the
/// listener's): Windows reports those as reset or aborted, which the
/// caller already treats so.
pub(crate) fn is_protocol_error(_e: &io::Error) -> bool {
    false
}

/// Stops the process `pid` (a child of ours) at once (`TerminateProcess`).
pub(crate) fn kill(pid: u32) {
    // SAFETY: opens a process by id for termination only; the handle is
    // checked and closed once.
    unsafe {
        let h = OpenProcess(PROCESS_TERMINATE, 0, pid);
        if !h.is_null() {
            TerminateProcess(h, 1);
            CloseHandle(h);
        }
    }
}

/// Windows' file types other than files and directories (devices, pipes)
/// do not reach a path's metadata as such.
pub(crate) fn special_kind(_t: &std::fs::FileType) -> Option<&'static str> {
    None
}

/// Windows' disks are not opened by path as block devices here.
pub(crate) fn is_block_device(_t: &std::fs::FileType) -> bool {
    false
}

/// Not reached: [`is_block_device`] is never true.
pub(crate) fn device_size(f: &File) -> io::Result<u64> {
    Ok(f.metadata()?.len())
}

/// Opens `path` for reading (an open on Windows does not wait for a
/// writer as a FIFO's does on Linux).
pub(crate) fn open_no_wait(path: &Path) -> io::Result<Option<File>> {
    OpenOptions::new().read(true).open(path).map(Some)
}

/// Nothing to clear: see [`open_no_wait`].
pub(crate) fn clear_no_wait(_file: &File) -> io::Result<()> {
    Ok(())
}

/// The handler [`on_interrupt`] installed.
static ON_INTERRUPT: OnceLock<fn(i32)> = OnceLock::new();

/// Whether [`on_interrupt`]'s installation succeeded.
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// `STATUS_CONTROL_C_EXIT`: the exit code of a console program ended by
/// Ctrl-C.
const CONTROL_C_EXIT: i32 = 0xC000_013Au32 as i32;

unsafe extern "system" fn console_handler(_ctrl: u32) -> i32 {
    if let Some(f) = ON_INTERRUPT.get() {
        f(CONTROL_C_EXIT);
    }
    TRUE
}

/// Calls `on_interrupt(exit_code)` when the console asks the process to
/// stop (Ctrl-C, Ctrl-Break, the window closed, log-off, shut-down: the
/// system runs the handler on a thread of its own), instead of the
/// default end. `false` if the handler could not be installed.
pub(crate) fn on_interrupt(on_interrupt: fn(i32)) -> bool {
    *INSTALLED.get_or_init(|| {
        let _ = ON_INTERRUPT.set(on_interrupt);
        // SAFETY: installs a handler that lives as long as the process.
        unsafe { SetConsoleCtrlHandler(Some(console_handler), TRUE) != 0 }
    })
}
