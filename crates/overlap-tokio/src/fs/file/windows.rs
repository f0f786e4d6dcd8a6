//! Windows: a std file's handle is synchronous, the engine's overlapped.
//!
//! Whether a handle's I/O is synchronous or overlapped is fixed when the
//! file is opened (a property of the kernel's file object, shared by its
//! duplicates). std opens synchronously, and the engine's I/O is
//! overlapped; so [`File::from_std`](super::File::from_std) opens the same
//! file again for overlapped I/O (`ReOpenFile`, same access, sharing
//! everything) and closes the std handle; where the file cannot be opened
//! again, the engine adopts the std handle itself, its reads and writes
//! blocking calls on the engine's pool
//! (`overlapped::File::from_synchronous_handle`). And
//! [`File::into_std`](super::File::into_std) does the reverse: std's reads
//! and writes on an overlapped handle would fail (they pass no offset) or
//! abort the process (a read still pending when it returns).

use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};

use windows_sys::Wdk::Storage::FileSystem::{
    FileAccessInformation, FileModeInformation, NtQueryInformationFile, FILE_ACCESS_INFORMATION,
    FILE_MODE_INFORMATION, FILE_NO_INTERMEDIATE_BUFFERING, FILE_SYNCHRONOUS_IO_ALERT,
    FILE_SYNCHRONOUS_IO_NONALERT, FILE_WRITE_THROUGH,
};
use windows_sys::Win32::Foundation::{RtlNtStatusToDosError, INVALID_HANDLE_VALUE};
use windows_sys::Win32::Storage::FileSystem::{
    ReOpenFile, FILE_FLAG_NO_BUFFERING, FILE_FLAG_OVERLAPPED, FILE_FLAG_WRITE_THROUGH,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
};
use windows_sys::Win32::System::IO::IO_STATUS_BLOCK;

/// `NtQueryInformationFile(class)` of `h` into a `T`.
fn query<T>(h: RawHandle, class: i32, info: &mut T) -> io::Result<()> {
    // SAFETY: IO_STATUS_BLOCK is plain old data; all-zero is valid.
    let mut iosb: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
    // SAFETY: `h` is an open handle borrowed for the call; `info` is the
    // writable structure `class` names, of its size.
    let status = unsafe {
        NtQueryInformationFile(
            h,
            &mut iosb,
            (info as *mut T).cast::<c_void>(),
            std::mem::size_of::<T>() as u32,
            class,
        )
    };
    if status < 0 {
        // SAFETY: a pure translation of a status code.
        let code = unsafe { RtlNtStatusToDosError(status) };
        return Err(io::Error::from_raw_os_error(code as i32));
    }
    Ok(())
}

/// The access granted to `h` and its mode flags (`FILE_SYNCHRONOUS_IO_*`,
/// `FILE_NO_INTERMEDIATE_BUFFERING`, `FILE_WRITE_THROUGH`).
fn access_and_mode(h: RawHandle) -> io::Result<(u32, u32)> {
    let mut mode = FILE_MODE_INFORMATION { Mode: 0 };
    query(h, FileModeInformation, &mut mode)?;
    let mut access = FILE_ACCESS_INFORMATION { AccessFlags: 0 };
    query(h, FileAccessInformation, &mut access)?;
    debug_assert!(
        mode.Mode & FILE_SYNCHRONOUS_IO_ALERT == 0 || mode.Mode & FILE_SYNCHRONOUS_IO_NONALERT == 0,
        "a handle's synchronous I/O is alertable or not, never both"
    );
    Ok((access.AccessFlags, mode.Mode))
}

/// Opens the file of `h` again, with the same access, sharing everything,
/// with `flags` (the new handle is a new file object: its own I/O mode).
fn reopen(h: RawHandle, access: u32, flags: u32) -> io::Result<OwnedHandle> {
    debug_assert!(
        flags & !(FILE_FLAG_OVERLAPPED | FILE_FLAG_NO_BUFFERING | FILE_FLAG_WRITE_THROUGH) == 0,
        "only the I/O mode, buffering and write-through change on a reopen"
    );
    // SAFETY: `h` is an open handle borrowed for the call; the result is a
    // new handle or INVALID_HANDLE_VALUE.
    let new = unsafe {
        ReOpenFile(
            h,
            access,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            flags,
        )
    };
    if new == INVALID_HANDLE_VALUE || new.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a handle just opened, owned by nobody else.
    Ok(unsafe { OwnedHandle::from_raw_handle(new) })
}

/// The flags that carry a handle's buffering and write-through over.
fn carried_flags(mode: u32) -> u32 {
    debug_assert!(
        FILE_NO_INTERMEDIATE_BUFFERING != FILE_WRITE_THROUGH,
        "two mode bits, carried over apart"
    );
    let mut flags = 0;
    if mode & FILE_NO_INTERMEDIATE_BUFFERING != 0 {
        flags |= FILE_FLAG_NO_BUFFERING;
    }
    if mode & FILE_WRITE_THROUGH != 0 {
        flags |= FILE_FLAG_WRITE_THROUGH;
    }
    flags
}

fn synchronous(mode: u32) -> bool {
    mode & (FILE_SYNCHRONOUS_IO_ALERT | FILE_SYNCHRONOUS_IO_NONALERT) != 0
}

/// Where `std` was opened for synchronous I/O (std's default), a handle on
/// its file opened again for overlapped I/O, with the same access,
/// buffering and write-through; `None` where `std` is overlapped already.
/// `std` stays open either way.
///
/// # Errors
///
/// The system's, where the file cannot be opened again: a file opened
/// sharing neither reading nor writing with later opens, or whose access
/// was taken away since.
pub(super) fn overlapped(std: &std::fs::File) -> io::Result<Option<OwnedHandle>> {
    let (access, mode) = access_and_mode(std.as_raw_handle())?;
    if !synchronous(mode) {
        return Ok(None);
    }
    debug_assert!(access != 0, "an open handle was granted some access");
    reopen(
        std.as_raw_handle(),
        access,
        FILE_FLAG_OVERLAPPED | carried_flags(mode),
    )
    .map(Some)
}

/// A std file on the same file as `h`: `h` itself where it was opened for
/// synchronous I/O (a handle adopted as it was); otherwise the file opened
/// again for synchronous I/O with the same access, buffering and
/// write-through (`h` is closed then), or `h` itself where that cannot be
/// done, which std can use for metadata, times, permissions and length,
/// but whose reads and writes fail.
pub(super) fn synchronous_std(h: OwnedHandle) -> std::fs::File {
    let again = match access_and_mode(h.as_raw_handle()) {
        Ok((_, mode)) if synchronous(mode) => return std::fs::File::from(h),
        Ok((access, mode)) => reopen(h.as_raw_handle(), access, carried_flags(mode)),
        Err(e) => Err(e),
    };
    match again {
        Ok(sync) => {
            debug_assert!(
                access_and_mode(sync.as_raw_handle()).is_ok_and(|(_, m)| synchronous(m)),
                "the handle given back is synchronous, as std's own"
            );
            std::fs::File::from(sync)
        }
        Err(_) => std::fs::File::from(h),
    }
}
