//! What a port's own ring offers beyond submitting and reaping: batches
//! of submissions that reach the kernel together, and memory and files
//! registered with the kernel.

use std::cell::RefCell;
use std::ffi::c_void;

use crate::error::{fail, fail_with, guard, handle, refuse_forked};
use crate::file::overlap_file;

use super::overlap_port;

thread_local! {
    /// The batches the calling thread began (overlap_port_batch_begin()),
    /// by port address: each ends (submits) when removed.
    static BATCHES: RefCell<Vec<(usize, overlapped::Batch)>> = const { RefCell::new(Vec::new()) };
}

/// Begins a batch on `port` for the calling thread: until
/// overlap_port_batch_end() on the same thread, the operations this thread
/// submits to the port wait in the port's submission queue and reach the
/// kernel together: at the latest when 32 are queued, when the batch ends,
/// or when the thread waits in any call of this library
/// (overlap_port_wait() included); earlier if another thread's submission
/// or overlap_port_flush() takes them. Not before the thread blocks
/// elsewhere: inside a batch, block only in this library's calls, end the
/// batch first, or have another thread call overlap_port_flush(). End it
/// before the thread exits. Returns 1 if a batch began, 0 if there is
/// nothing to batch (the port has no ring of its own, or the thread is
/// already in a batch on it; submissions then go at once, as without), or
/// `-EINVAL` (NULL handle).
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port, which must not run before the batch
/// ends.
#[no_mangle]
pub extern "C" fn overlap_port_batch_begin(port: *const overlap_port) -> i32 {
    const F: &str = "overlap_port_batch_begin";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        match p.port.begin_batch() {
            Some(b) => {
                let pushed = BATCHES
                    .try_with(|l| l.borrow_mut().push((port as usize, b)))
                    .is_ok();
                i32::from(pushed)
            }
            None => 0,
        }
    })
}

/// Ends the calling thread's batch on `port` (overlap_port_batch_begin()):
/// submits what it queued. Returns 1 if a batch ended, 0 if the thread had
/// none on the port, or `-EINVAL` (NULL handle).
///
/// Thread safety: as overlap_port_batch_begin().
#[no_mangle]
pub extern "C" fn overlap_port_batch_end(port: *const overlap_port) -> i32 {
    const F: &str = "overlap_port_batch_end";
    guard(F, || {
        // Only the address is compared: the handle is not dereferenced.
        if port.is_null() {
            return fail(libc::EINVAL, format!("{F}: the port handle is NULL"));
        }
        let batch = BATCHES
            .try_with(|l| {
                let mut l = l.borrow_mut();
                let i = l.iter().position(|(k, _)| *k == port as usize)?;
                Some(l.swap_remove(i).1)
            })
            .ok()
            .flatten();
        // Dropped with the list released: the drop submits.
        i32::from(batch.is_some())
    })
}

/// Submits what any thread queued on `port` inside a batch
/// (overlap_port_batch_begin()) and has not submitted yet: for a thread
/// that watches over threads which may block, inside a batch, outside this
/// library. No system call when no batch queued anything since the last
/// submission. Returns 0, or `-EINVAL` (NULL handle).
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port.
#[no_mangle]
pub extern "C" fn overlap_port_flush(port: *const overlap_port) -> i32 {
    const F: &str = "overlap_port_flush";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        p.port.flush();
        0
    })
}

/// Registers `len` bytes of memory at `addr` with the kernel for `port`
/// (io_uring's registered buffers, as liburing's
/// io_uring_register_buffers()): the port's reads and writes whose buffers
/// lie inside it then skip pinning their pages for every operation. Meant
/// for a buffer pool allocated once. At most 8 ranges per port, each at most
/// 1 GiB; registering the same range again does nothing.
///
/// Memory rule: the range must stay allocated, neither freed nor unmapped,
/// until overlap_port_free() of this port: the kernel keeps its pages
/// pinned, and an operation into an address of the range goes to those
/// pages.
///
/// Returns 1 once registered, 0 when the port has no ring of its own (the
/// AIO and thread-pool drivers: operations work as before), or `-EINVAL`
/// (NULL handle or address, zero length, over 1 GiB, a ninth range),
/// `-ECHILD` (a port of the parent after `fork()`), or the kernel's
/// `-errno` (`-ENOMEM` when the pages exceed `RLIMIT_MEMLOCK` for a process
/// without `CAP_IPC_LOCK`).
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port.
#[no_mangle]
pub extern "C" fn overlap_port_register_memory(
    port: *const overlap_port,
    addr: *mut c_void,
    len: u64,
) -> i32 {
    const F: &str = "overlap_port_register_memory";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        if addr.is_null() {
            return fail(libc::EINVAL, format!("{F}: addr is NULL"));
        }
        let Ok(len) = usize::try_from(len) else {
            return fail(libc::EINVAL, format!("{F}: len {len} is too large"));
        };
        // SAFETY: the header's memory rule: the caller keeps the range
        // allocated until overlap_port_free() of this port.
        match unsafe { p.port.register_memory(addr.cast(), len) } {
            Ok(registered) => i32::from(registered),
            Err(e) => fail_with(F, &e),
        }
    })
}

/// Registers `file` with the kernel for `port` (io_uring's registered
/// files): the port's reads and writes of it then skip the kernel's lookup
/// of the descriptor for every operation. The registration ends by itself
/// when the file is closed (overlap_file_close()) or freed, or the port is
/// freed; the descriptor must not be closed in any other way meanwhile.
///
/// Returns 1 once registered (again: nothing changes), 0 when the port
/// cannot register it and works as before (no ring of its own: the AIO and
/// thread-pool drivers; a kernel before 6.13, which releases a removed file
/// late; a descriptor number beyond the port's table of 4096, or
/// `RLIMIT_NOFILE` if lower), or `-EINVAL` (NULL handle, a file of
/// another engine), `-EBADF` (closed), `-ECHILD` (a port of the parent
/// after `fork()`), or the kernel's `-errno`.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port and overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_port_register_file(
    port: *const overlap_port,
    file: *const overlap_file,
) -> i32 {
    const F: &str = "overlap_port_register_file";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        let f = handle!(file, "file", F);
        match p.port.register_file(&f.file) {
            Ok(registered) => i32::from(registered),
            Err(e) => fail_with(F, &e),
        }
    })
}
