//! The completion port: one per engine, every handle the engine opens or
//! adopts associated with it, drained by the driver's completion threads;
//! and one per [`crate::Port`], on which its workers wait (see
//! `crate::port::queue`).

use std::io;

use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, HANDLE, INVALID_HANDLE_VALUE, WAIT_TIMEOUT,
};
use windows_sys::Win32::Storage::FileSystem::SetFileCompletionNotificationModes;
use windows_sys::Win32::System::IO::{
    CreateIoCompletionPort, GetQueuedCompletionStatusEx, PostQueuedCompletionStatus,
    OVERLAPPED_ENTRY,
};

/// `FILE_SKIP_COMPLETION_PORT_ON_SUCCESS` (winbase.h; windows-sys puts it
/// under a feature the engine does not otherwise need): a call that
/// succeeds at once queues no packet.
const FILE_SKIP_COMPLETION_PORT_ON_SUCCESS: u8 = 1;
/// `FILE_SKIP_SET_EVENT_ON_HANDLE`: the kernel does not signal the file
/// handle itself when an operation on it completes (nobody waits on it).
const FILE_SKIP_SET_EVENT_ON_HANDLE: u8 = 2;

/// The completion key of every file handle associated with the port.
pub(super) const FILE_KEY: usize = 1;
/// The key of the packet that wakes a completion thread at shutdown, to
/// look at what is still in flight.
pub(super) const WAKE_KEY: usize = usize::MAX - 1;
/// The key of the packet that ends a completion thread (each one passes it
/// on before it ends).
pub(super) const STOP_KEY: usize = usize::MAX;
/// The key of the packet that wakes a worker waiting on a
/// [`crate::Port`]'s own completion port.
pub(crate) const BELL_KEY: usize = 2;

/// An I/O completion port, closed when dropped.
pub(crate) struct Port {
    handle: HANDLE,
}

// SAFETY: a completion port is a kernel object whose functions are
// thread-safe; the handle is only closed by `Drop`, once nothing else holds
// the `Port`.
unsafe impl Send for Port {}
// SAFETY: as above.
unsafe impl Sync for Port {}

/// The last Win32 error of this thread.
pub(super) fn last_error() -> u32 {
    // SAFETY: no arguments; reads this thread's last-error value.
    unsafe { GetLastError() }
}

impl Port {
    /// A new port that lets at most `threads` threads run its completions
    /// at once.
    pub(crate) fn new(threads: u32) -> io::Result<Port> {
        debug_assert!(threads >= 1, "a port is drained by one thread at least");
        // SAFETY: INVALID_HANDLE_VALUE with no existing port makes a new
        // port; no memory is passed.
        let handle = unsafe {
            CreateIoCompletionPort(INVALID_HANDLE_VALUE, std::ptr::null_mut(), 0, threads)
        };
        if handle.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Port { handle })
    }

    /// Associates `file` with the port (key [`FILE_KEY`]) and asks for no
    /// packet when a call succeeds at once, nor the handle's signal. On an
    /// error the handle must not be used with the port: an association
    /// without the skip would queue a packet for a call the driver
    /// completes itself.
    pub(super) fn associate(&self, file: HANDLE) -> io::Result<()> {
        // SAFETY: `file` is a handle value the caller owns (an invalid one
        // fails with ERROR_INVALID_HANDLE); the port is ours and open.
        let port = unsafe { CreateIoCompletionPort(file, self.handle, FILE_KEY, 0) };
        if port.is_null() {
            return Err(io::Error::last_os_error());
        }
        debug_assert_eq!(port, self.handle, "an association returns the port");
        let modes = FILE_SKIP_COMPLETION_PORT_ON_SUCCESS | FILE_SKIP_SET_EVENT_ON_HANDLE;
        // SAFETY: as above; no memory is passed.
        if unsafe { SetFileCompletionNotificationModes(file, modes) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Queues a packet with `key` and no `OVERLAPPED`; `false` if the
    /// kernel refused it (out of memory).
    pub(crate) fn post(&self, key: usize) -> bool {
        debug_assert!(
            key == WAKE_KEY || key == STOP_KEY || key == BELL_KEY,
            "only the driver's and the ports' own keys are posted"
        );
        // SAFETY: a null OVERLAPPED is allowed; the port is open.
        unsafe { PostQueuedCompletionStatus(self.handle, 0, key, std::ptr::null()) != 0 }
    }

    /// Waits up to `timeout_ms` (`INFINITE`) for packets and stores up to
    /// `entries.len()` of them; returns how many (0 on timeout).
    pub(crate) fn dequeue(
        &self,
        entries: &mut [OVERLAPPED_ENTRY],
        timeout_ms: u32,
    ) -> io::Result<usize> {
        debug_assert!(!entries.is_empty(), "room for one packet at least");
        let room = u32::try_from(entries.len()).unwrap_or(u32::MAX);
        let mut n: u32 = 0;
        // SAFETY: `entries` has room for `room` entries and `n` is a live
        // local; the port is open; not alertable (no APCs run here).
        let ok = unsafe {
            GetQueuedCompletionStatusEx(
                self.handle,
                entries.as_mut_ptr(),
                room,
                &mut n,
                timeout_ms,
                0,
            )
        };
        if ok == 0 {
            let e = last_error();
            if e == WAIT_TIMEOUT {
                return Ok(0);
            }
            return Err(io::Error::from_raw_os_error(e as i32));
        }
        debug_assert!(
            n >= 1 && n <= room,
            "a successful dequeue removes 1 to {room} packets: {n}"
        );
        Ok(n as usize)
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        debug_assert!(
            !self.handle.is_null(),
            "a port is a handle CreateIoCompletionPort made"
        );
        // SAFETY: the port is ours and closed once, here. Packets still
        // queued are discarded with it; no operation is in flight then
        // (the driver's invariant, see `Inner`'s drop).
        unsafe { CloseHandle(self.handle) };
    }
}
