//! The block of one overlapped read or write: its `OVERLAPPED` (first, so
//! that the `OVERLAPPED*` of its completion packet is the block's address)
//! and the operation that owns the buffer, both on the heap from before the
//! `ReadFile`/`WriteFile` until the kernel is done with them (its packet
//! arrived, or the call did not leave the operation pending).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use windows_sys::Win32::Foundation::{
    ERROR_BROKEN_PIPE, ERROR_HANDLE_EOF, ERROR_INVALID_USER_BUFFER, ERROR_IO_PENDING,
    ERROR_MORE_DATA, ERROR_NOT_ENOUGH_MEMORY, HANDLE, STATUS_PENDING, WAIT_OBJECT_0,
};
use windows_sys::Win32::Storage::FileSystem::{ReadFile, WriteFile};
use windows_sys::Win32::System::Threading::{ResetEvent, WaitForSingleObject, INFINITE};
use windows_sys::Win32::System::IO::{GetOverlappedResult, OVERLAPPED};

use super::port::last_error;
use crate::cell::Completable;
use crate::operation::Overlapped;

/// One operation in flight on the port.
#[repr(C)]
pub(super) struct OpBlock {
    /// First field: a pointer to it is a pointer to the block.
    ov: OVERLAPPED,
    /// The operation; it owns the buffer the kernel reads or writes.
    pub(super) op: Arc<dyn Completable>,
    /// The call, as the operation declared it.
    pub(super) call: Overlapped,
    /// The block's entry in the driver's table of operations in flight.
    pub(super) slot: usize,
    /// The port and key its completion goes to, which `Port::cancel`
    /// names (`Completable::queue_key`): none for a future's.
    pub(super) queue_key: Option<(usize, u64)>,
}

/// What the `ReadFile`/`WriteFile` of a block did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Issued {
    /// Pending: its packet will complete it (or, for a block made with a
    /// waiter's event, no packet comes and the waiter sees it finish,
    /// [`OpBlock::wait_done`]), and the block is the kernel's until then.
    Pending,
    /// Finished within the call (no packet comes): the result.
    Done(i64),
    /// Refused for lack of resources (too many operations outstanding, KB
    /// 156932): not started, no packet comes; the Win32 code.
    Busy(u32),
}

/// The file `HANDLE` the engine keeps as `fd` (see `crate::sys`).
#[inline]
pub(super) fn handle_of(fd: i32) -> HANDLE {
    debug_assert!(
        fd >= 0,
        "an operation's handle is open (-1 is closed): {fd}"
    );
    fd as isize as HANDLE
}

impl OpBlock {
    /// A block for `op`, whose overlapped form is `call`; not yet in the
    /// driver's table (`slot` is set by it). With `waiter`, the event of
    /// the thread that will wait for the call ([`wait_done`](Self::wait_done)):
    /// the completion signals it, and no packet is queued to the port (the
    /// low bit of `hEvent`, as `GetQueuedCompletionStatus` documents).
    pub(super) fn new(
        op: Arc<dyn Completable>,
        call: Overlapped,
        waiter: Option<HANDLE>,
    ) -> Box<OpBlock> {
        debug_assert_eq!(
            op.kind().overlapped(),
            Some(call),
            "the block's call is its operation's"
        );
        let mut ov = OVERLAPPED::default();
        ov.Anonymous.Anonymous.Offset = call.offset as u32;
        ov.Anonymous.Anonymous.OffsetHigh = (call.offset >> 32) as u32;
        if let Some(ev) = waiter {
            debug_assert!(
                !ev.is_null() && (ev as usize) & 1 == 0,
                "an event handle is non-null, its low bits free"
            );
            ov.hEvent = (ev as usize | 1) as HANDLE;
        }
        let queue_key = op.queue_key();
        Box::new(OpBlock {
            ov,
            op,
            call,
            slot: usize::MAX,
            queue_key,
        })
    }

    /// The block of a packet's `OVERLAPPED*`.
    ///
    /// # Safety
    /// `ov` is the address of a block made by `Box::into_raw` whose
    /// operation the kernel finished (its packet was dequeued, or its call
    /// returned without leaving it pending), and this is the only
    /// reclaiming of it.
    pub(super) unsafe fn reclaim(ov: *mut OVERLAPPED) -> Box<OpBlock> {
        debug_assert!(
            !ov.is_null(),
            "a packet of an operation carries its OVERLAPPED"
        );
        // SAFETY: the caller's contract; `ov` is the first field of a
        // `#[repr(C)]` block, so its address is the block's.
        // (A call that failed at once may leave its status pending: it
        // never started.)
        unsafe { Box::from_raw(ov.cast::<OpBlock>()) }
    }

    /// The address the kernel is given (and gives back in the packet).
    #[inline]
    pub(super) fn overlapped(block: *mut OpBlock) -> *mut OVERLAPPED {
        debug_assert!(!block.is_null(), "a block is allocated");
        block.cast()
    }

    /// Issues the block's `ReadFile` or `WriteFile`.
    ///
    /// # Safety
    /// `block` comes from `Box::into_raw` and is in the driver's table; if
    /// this returns [`Issued::Pending`] the block belongs to the kernel
    /// until its packet is dequeued (the caller touches it no more, it may
    /// already be freed), or, made with a waiter's event, until
    /// [`wait_done`](Self::wait_done) returns (no packet comes; the caller
    /// reclaims it then), otherwise it is still the caller's. The handle is
    /// associated with the port with its skip modes (`Port::associate`).
    pub(super) unsafe fn issue(block: *mut OpBlock) -> Issued {
        // SAFETY: the block is live and the caller's until the call below.
        let (call, slot) = unsafe { ((*block).call, (*block).slot) };
        debug_assert!(
            slot != usize::MAX,
            "a block is in the driver's table before its call"
        );
        #[cfg(test)]
        if let Some(e) = tests_busy::refuse(call.fd) {
            return Issued::Busy(e);
        }
        let h = handle_of(call.fd);
        let ov = Self::overlapped(block);
        // SAFETY: the buffer `addr..addr + len` is owned by the operation,
        // which the block holds until the kernel is done with it; `ov` is
        // the block's OVERLAPPED, which lives as long. The count pointer is
        // null, as for every overlapped call (the result is read from the
        // OVERLAPPED).
        let ok = unsafe {
            if call.write {
                WriteFile(
                    h,
                    call.addr as *const u8,
                    call.len,
                    std::ptr::null_mut(),
                    ov,
                )
            } else {
                ReadFile(h, call.addr as *mut u8, call.len, std::ptr::null_mut(), ov)
            }
        };
        if ok != 0 {
            // SAFETY: no packet comes for a call that succeeded at once
            // (FILE_SKIP_COMPLETION_PORT_ON_SUCCESS): still ours.
            return Issued::Done(unsafe { (*block).result() });
        }
        match last_error() {
            ERROR_IO_PENDING => Issued::Pending,
            // A warning status (a message longer than the buffer) completes
            // the request normally: its packet comes, as for a pending one.
            ERROR_MORE_DATA if !call.write => Issued::Pending,
            e @ (ERROR_INVALID_USER_BUFFER | ERROR_NOT_ENOUGH_MEMORY) => Issued::Busy(e),
            e => Issued::Done(result_of(call.write, 0, e)),
        }
    }

    /// Whether the kernel finished the operation of `block` (its status is
    /// no longer `STATUS_PENDING`): from then on it touches neither the
    /// block nor the buffer.
    ///
    /// # Safety
    /// `block` is live (the caller issued its call and has not reclaimed
    /// it).
    unsafe fn done(block: *mut OpBlock) -> bool {
        // SAFETY: the field is live and aligned for a usize (the caller's
        // contract); the kernel writes it, so it is read as an atomic, and
        // the acquire orders the kernel's writes of the data and the
        // status (made before it signals the event) before what follows.
        let status = unsafe { AtomicUsize::from_ptr(std::ptr::addr_of_mut!((*block).ov.Internal)) };
        status.load(Ordering::Acquire) != STATUS_PENDING as usize
    }

    /// Waits on `event` (the thread's, given to [`new`](Self::new)) until
    /// the kernel finished the pending call of `block`. It never returns
    /// before: should waiting on the event fail, it polls the status.
    ///
    /// # Safety
    /// `block`'s call was issued with `event` and returned pending, and
    /// nobody else reclaims the block (no packet comes for it).
    pub(super) unsafe fn wait_done(block: *mut OpBlock, event: HANDLE) {
        // The kernel writes the status before it signals the event, so a
        // signal left by an earlier call (reset here, then checked again)
        // cannot hide this one's.
        // SAFETY (each `done`): the caller's contract.
        while !unsafe { Self::done(block) } {
            // SAFETY: the event is open for the whole wait (the thread's,
            // or a temporary one that outlives it).
            if unsafe { WaitForSingleObject(event, INFINITE) } != WAIT_OBJECT_0 {
                super::report(&format!(
                    "waiting on a thread's event failed (Win32 error {}); polling the call instead",
                    last_error()
                ));
                while !unsafe { Self::done(block) } {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                return;
            }
            if unsafe { Self::done(block) } {
                return;
            }
            // SAFETY: as above; a stale signal, cleared before checking again.
            unsafe { ResetEvent(event) };
        }
    }

    /// The result of the finished operation: bytes moved, or `-code`.
    pub(super) fn result(&self) -> i64 {
        debug_assert!(
            self.ov.Internal != STATUS_PENDING as usize,
            "a result is read once the operation finished"
        );
        let mut n: u32 = 0;
        // SAFETY: the OVERLAPPED is live and no longer pending, so the call
        // only converts its status (it neither waits nor touches the
        // handle, which is open anyway while the operation is counted in).
        let ok = unsafe { GetOverlappedResult(handle_of(self.call.fd), &self.ov, &mut n, 0) };
        if ok != 0 {
            debug_assert!(
                n <= self.call.len,
                "a call moves at most what it asked for: {n}"
            );
            return i64::from(n.min(self.call.len));
        }
        result_of(self.call.write, n, last_error())
    }
}

/// The result of a call that failed with Win32 error `code` after moving
/// `n` bytes: end of file (a file's, or a pipe's whose writer closed it) is
/// a read of 0 bytes, as for `ReadFile` elsewhere (std reads a broken pipe
/// as its end); a read longer than a message returns the bytes of it that
/// fit; otherwise `-code`.
pub(super) fn result_of(write: bool, n: u32, code: u32) -> i64 {
    debug_assert!(code != 0, "a failed call leaves an error code");
    match code {
        ERROR_HANDLE_EOF | ERROR_BROKEN_PIPE if !write => 0,
        ERROR_MORE_DATA if !write => i64::from(n),
        0 => -i64::from(windows_sys::Win32::Foundation::ERROR_GEN_FAILURE),
        c => -i64::from(c),
    }
}

/// A refusal for lack of resources on demand, which no system gives at
/// will: the next calls on one handle are refused as too many outstanding.
#[cfg(test)]
pub(super) mod tests_busy {
    use std::sync::Mutex;

    use windows_sys::Win32::Foundation::ERROR_NOT_ENOUGH_MEMORY;

    /// Per handle, how many of its next calls are refused (tests run at
    /// once, each with handles of its own).
    static REFUSE: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());

    /// Refuses the next `n` calls on `fd`.
    pub(crate) fn set(fd: i32, n: usize) {
        let mut r = REFUSE.lock().unwrap();
        r.retain(|&(f, _)| f != fd);
        r.push((fd, n));
    }

    /// Whether this call on `fd` is refused (and with which code).
    pub(super) fn refuse(fd: i32) -> Option<u32> {
        let mut r = REFUSE.lock().unwrap();
        let i = r.iter().position(|&(f, n)| f == fd && n > 0)?;
        r[i].1 -= 1;
        if r[i].1 == 0 {
            r.swap_remove(i);
        }
        Some(ERROR_NOT_ENOUGH_MEMORY)
    }
}
