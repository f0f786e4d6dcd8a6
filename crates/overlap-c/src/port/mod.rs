//! The completion port: submit with a 64-bit user datum, reap from any
//! number of threads with a minimum, a maximum and a timeout; cancel by
//! user datum; post a completion.
//!
//! # The buffer rule (the OVERLAPPED rule)
//!
//! A buffer passed to a submit function belongs to the operation from the
//! moment the function returns 0 until the operation's completion has
//! been reaped by overlap_port_wait(): the caller keeps the memory valid
//! and does not read, write or free it meanwhile, whatever else happens
//! (the operation is cancelled, its file closed or freed, the engine shut
//! down). After overlap_port_free() returns, no operation of the port
//! touches any buffer. A submission that fails (negative return) never
//! uses the buffer.

use std::cell::RefCell;
use std::ffi::c_void;
use std::time::Duration;

use overlapped::{Completion, Engine, Error, Port, WhenFull};

use crate::buf::CBuf;
use crate::engine::overlap_engine;
use crate::error::{errno_of, fail, fail_with, guard, handle, refuse_forked};
use crate::file::overlap_file;

mod ring;
pub use ring::*;

/// overlap_port_create(): when the in-flight budget is full, submissions
/// fail at once with `-EAGAIN` (reap, then submit again) instead of
/// waiting for budget. A thread that both submits and reaps should use
/// it: waiting for budget that only its own unreaped completions hold
/// would wait forever.
pub const OVERLAP_PORT_NONBLOCK: u32 = 1;

/// A port flag: operations of the port can be cancelled
/// (overlap_port_cancel()). Such a port keeps a map from each operation in
/// flight to its user datum, which costs a lock and two map updates per
/// operation on io_uring: a port that never cancels is made without it.
pub const OVERLAP_PORT_CANCEL: u32 = 2;

/// A completion flag: the operation was already complete when the
/// submitting call returned (a page-cache hit, a device that answered at
/// once): nothing overlapped.
pub const OVERLAP_COMPLETION_INLINE: u32 = 1;
/// A completion flag: the kernel handed the operation to one of its
/// blocking worker threads. Neither io_uring nor Linux AIO says so per
/// operation, so this version never sets it; the engine-wide count is
/// overlap_stats.kernel_workers_seen.
pub const OVERLAP_COMPLETION_KERNEL_WORKER: u32 = 2;
/// A completion flag: the completion was posted by overlap_port_post().
pub const OVERLAP_COMPLETION_POSTED: u32 = 4;

/// overlap_op.opcode: read into `buf`.
pub const OVERLAP_OP_READ: u32 = 1;
/// overlap_op.opcode: write from `buf`.
pub const OVERLAP_OP_WRITE: u32 = 2;
/// overlap_op.opcode: `fsync` (`buf`, `len`, `offset` unused).
pub const OVERLAP_OP_FSYNC: u32 = 3;
/// overlap_op.opcode: `fdatasync` (`buf`, `len`, `offset` unused).
pub const OVERLAP_OP_FDATASYNC: u32 = 4;
/// overlap_op.opcode: `fallocate(mode, offset, len)` (`buf` unused).
pub const OVERLAP_OP_FALLOCATE: u32 = 5;

/// A completion port of an engine. Opaque.
pub struct overlap_port {
    /// Made with the port's `OVERLAP_PORT_NONBLOCK` as its `WhenFull`.
    port: Port<CBuf>,
    /// The port's engine (the port holds it too), for the fork check.
    engine: Engine,
}

/// One operation of a batch for overlap_port_submit().
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct overlap_op {
    /// One of the `OVERLAP_OP_*` values.
    pub opcode: u32,
    /// For `OVERLAP_OP_FALLOCATE`: the mode (0, `FALLOC_FL_KEEP_SIZE`, ...).
    pub mode: i32,
    /// The file.
    pub file: *const overlap_file,
    /// The buffer (reads and writes), under the buffer rule.
    pub buf: *mut c_void,
    /// Bytes to transfer, or the fallocate length.
    pub len: u64,
    /// The file offset.
    pub offset: u64,
    /// The user datum the completion carries.
    pub user_data: u64,
}

/// A completion taken by overlap_port_wait().
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct overlap_completion {
    /// The user datum given at submission (or to overlap_port_post()).
    pub user_data: u64,
    /// Bytes transferred (0 for fsync, fdatasync, fallocate), or `-errno`
    /// (`-ECANCELED` for an operation overlap_port_cancel() stopped); for a
    /// posted completion, the result given to overlap_port_post().
    pub result: i64,
    /// `OVERLAP_COMPLETION_*` bits.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
}

/// Makes a completion port on `engine` and stores its handle in `*out`.
/// `flags`: 0, or `OVERLAP_PORT_NONBLOCK` and/or `OVERLAP_PORT_CANCEL`
/// (or-ed). On io_uring the port has a
/// ring of its own: submitting threads hand operations to the kernel
/// themselves, and waiting threads sleep in the kernel on that ring.
///
/// Returns 0 or `-EINVAL` (NULL argument, unknown flags), `-ESHUTDOWN`
/// (the engine is shut down), `-ECHILD` (an engine of the parent after
/// `fork()`).
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine. The port handle may be used
/// from any number of threads at once: any thread submits, any thread
/// waits, and each completion goes to exactly one waiter.
#[no_mangle]
pub extern "C" fn overlap_port_create(
    engine: *const overlap_engine,
    flags: u32,
    out: *mut *mut overlap_port,
) -> i32 {
    const F: &str = "overlap_port_create";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        refuse_forked!(e.engine, F);
        if out.is_null() {
            return fail(libc::EINVAL, format!("{F}: out is NULL"));
        }
        if flags & !(OVERLAP_PORT_NONBLOCK | OVERLAP_PORT_CANCEL) != 0 {
            return fail(libc::EINVAL, format!("{F}: unknown flags {flags:#x}"));
        }
        if let Some(r) = e.refuse_shut(F) {
            return r;
        }
        let port = if flags & OVERLAP_PORT_CANCEL != 0 {
            Port::cancellable(&e.engine)
        } else {
            Port::new(&e.engine)
        };
        let port = port.with_when_full(if flags & OVERLAP_PORT_NONBLOCK != 0 {
            WhenFull::Fail
        } else {
            WhenFull::Wait
        });
        let h = Box::into_raw(Box::new(overlap_port {
            port,
            engine: e.engine.clone(),
        }));
        // SAFETY: out is a writable pointer (checked non-NULL).
        unsafe { out.write(h) };
        0
    })
}

/// Submits one operation; 0, or `-errno` with the thread's message set.
fn submit_one(p: &overlap_port, op: &overlap_op, what: &str) -> i32 {
    if op.file.is_null() {
        return fail(libc::EINVAL, format!("{what}: the file handle is NULL"));
    }
    // SAFETY: a non-NULL file is a live handle (the header's rule).
    let f = unsafe { &*op.file };
    let (port, file, key) = (&p.port, &f.file, op.user_data);
    let res: Result<(), Error> = match op.opcode {
        OVERLAP_OP_READ | OVERLAP_OP_WRITE => {
            let b = match CBuf::new(op.buf, op.len, what) {
                Ok(b) => b,
                Err((errno, msg)) => return fail(errno, msg),
            };
            let r = if op.opcode == OVERLAP_OP_READ {
                port.read_at(file, b, op.offset, key)
            } else {
                port.write_at(file, b, op.offset, key)
            };
            r.map_err(|(e, _)| e)
        }
        OVERLAP_OP_FSYNC => port.sync_all(file, key),
        OVERLAP_OP_FDATASYNC => port.sync_data(file, key),
        OVERLAP_OP_FALLOCATE => port.allocate(file, op.mode, op.offset, op.len, key),
        other => {
            return fail(
                libc::EINVAL,
                format!("{what}: opcode {other} is not one of OVERLAP_OP_*"),
            )
        }
    };
    match res {
        Ok(()) => 0,
        Err(e) => fail_with(what, &e),
    }
}

fn submit_single(port: *const overlap_port, op: overlap_op, what: &str) -> i32 {
    guard(what, || {
        let p = handle!(port, "port", what);
        refuse_forked!(p.engine, what);
        submit_one(p, &op, what)
    })
}

/// Queues a read of up to `len` bytes at `offset` of `file` into `buf`;
/// its completion carries `user_data` and the byte count (0 at end of
/// file) or `-errno`. Returns 0 once queued, waiting only while the
/// in-flight budget is full (unless the port is `OVERLAP_PORT_NONBLOCK`:
/// then `-EAGAIN`).
///
/// Refused at once, nothing submitted: `-EINVAL` (NULL handle; a length
/// above `SSIZE_MAX`; `offset + len` past the largest file offset; on an
/// O_DIRECT file a buffer address, offset or length not aligned as
/// overlap_file_alignment() says), `-EFAULT` (NULL `buf` with a length),
/// `-EBADF` (closed, or not open for reading), `-ESHUTDOWN`, `-ECHILD`
/// (a port of the parent after `fork()`).
///
/// Buffer rule (as Windows' OVERLAPPED): once this returns 0, `buf`
/// belongs to the operation until its completion has been reaped by
/// overlap_port_wait(): keep it valid and do not touch it, even after
/// overlap_port_cancel(), overlap_file_close() or
/// overlap_engine_shutdown().
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port and overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_port_read(
    port: *const overlap_port,
    file: *const overlap_file,
    buf: *mut c_void,
    len: u64,
    offset: u64,
    user_data: u64,
) -> i32 {
    let op = overlap_op {
        opcode: OVERLAP_OP_READ,
        mode: 0,
        file,
        buf,
        len,
        offset,
        user_data,
    };
    submit_single(port, op, "overlap_port_read")
}

/// Queues a write of `len` bytes of `buf` at `offset` of `file`; its
/// completion carries `user_data` and the byte count or `-errno`. As
/// overlap_port_read() otherwise (`-EBADF` when not open for writing).
///
/// Buffer rule (as Windows' OVERLAPPED): once this returns 0, `buf`
/// belongs to the operation until its completion has been reaped by
/// overlap_port_wait(): keep it valid and unchanged.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port and overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_port_write(
    port: *const overlap_port,
    file: *const overlap_file,
    buf: *const c_void,
    len: u64,
    offset: u64,
    user_data: u64,
) -> i32 {
    let op = overlap_op {
        opcode: OVERLAP_OP_WRITE,
        mode: 0,
        file,
        buf: buf as *mut c_void,
        len,
        offset,
        user_data,
    };
    submit_single(port, op, "overlap_port_write")
}

/// Queues an `fsync` of `file` (data and metadata to stable storage); its
/// completion carries `user_data` and 0 or `-errno`. Backpressure and
/// refusals as overlap_port_read().
///
/// Buffer rule: the operation has no buffer.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port and overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_port_fsync(
    port: *const overlap_port,
    file: *const overlap_file,
    user_data: u64,
) -> i32 {
    submit_single(
        port,
        sync_op(OVERLAP_OP_FSYNC, file, user_data),
        "overlap_port_fsync",
    )
}

/// The bufferless entry of an `fsync` or `fdatasync` (`opcode`) of `file`.
fn sync_op(opcode: u32, file: *const overlap_file, user_data: u64) -> overlap_op {
    debug_assert!(
        opcode == OVERLAP_OP_FSYNC || opcode == OVERLAP_OP_FDATASYNC,
        "a sync entry is an fsync or an fdatasync"
    );
    overlap_op {
        opcode,
        mode: 0,
        file,
        buf: std::ptr::null_mut(),
        len: 0,
        offset: 0,
        user_data,
    }
}

/// Queues an `fdatasync` of `file`; as overlap_port_fsync().
///
/// Buffer rule: the operation has no buffer.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port and overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_port_fdatasync(
    port: *const overlap_port,
    file: *const overlap_file,
    user_data: u64,
) -> i32 {
    submit_single(
        port,
        sync_op(OVERLAP_OP_FDATASYNC, file, user_data),
        "overlap_port_fdatasync",
    )
}

/// Queues `fallocate(mode, offset, len)` on `file` (mode 0 reserves the
/// range and grows the file; `FALLOC_FL_KEEP_SIZE`,
/// `FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE`, ... as the kernel takes
/// them); its completion carries `user_data` and 0 or `-errno`. Refused
/// at once with `-EINVAL` for a zero `len` or a range past the largest
/// file offset, `-EBADF` when not open for writing; backpressure as
/// overlap_port_read().
///
/// Buffer rule: the operation has no buffer.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port and overlap_file_free() of this file.
#[no_mangle]
pub extern "C" fn overlap_port_fallocate(
    port: *const overlap_port,
    file: *const overlap_file,
    mode: i32,
    offset: u64,
    len: u64,
    user_data: u64,
) -> i32 {
    let op = overlap_op {
        opcode: OVERLAP_OP_FALLOCATE,
        mode,
        file,
        buf: std::ptr::null_mut(),
        len,
        offset,
        user_data,
    };
    submit_single(port, op, "overlap_port_fallocate")
}

/// Submits the `n` operations at `ops` in order, as `io_submit` does:
/// returns how many were taken (from the first), stopping at the first
/// one refused. If the first is refused, returns its `-errno` (and the
/// thread's message says why); if a later one is, returns the count
/// before it, and submitting again from there reports its error. On an
/// `OVERLAP_PORT_NONBLOCK` port a full in-flight budget stops the batch
/// the same way (`-EAGAIN` if nothing was taken); otherwise each
/// operation waits for budget. `n` = 0 returns 0.
///
/// Buffer rule (as Windows' OVERLAPPED): the buffer of every operation
/// taken belongs to it until its completion has been reaped by
/// overlap_port_wait(); the `ops` array itself may be reused as soon as
/// this returns.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port and overlap_file_free() of the files
/// named.
#[no_mangle]
pub extern "C" fn overlap_port_submit(
    port: *const overlap_port,
    ops: *const overlap_op,
    n: u64,
) -> i64 {
    const F: &str = "overlap_port_submit";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        if n == 0 {
            return 0;
        }
        if ops.is_null() {
            return fail(libc::EINVAL, format!("{F}: ops is NULL with n = {n}"));
        }
        if n > crate::buf::MAX_LEN / std::mem::size_of::<overlap_op>() as u64 {
            return fail(libc::EINVAL, format!("{F}: n = {n} cannot be an array"));
        }
        for i in 0..n as usize {
            // SAFETY: ops points to n readable overlap_op (the caller's
            // promise; n was bounded above); read without assuming
            // alignment.
            let op = unsafe { ops.add(i).read_unaligned() };
            let r = submit_one(p, &op, F);
            if r < 0 {
                return if i == 0 { i64::from(r) } else { i as i64 };
            }
        }
        n as i64
    })
}

thread_local! {
    /// The calling thread's completions between taking and copying out.
    static TAKEN: RefCell<Vec<Completion<CBuf>>> = const { RefCell::new(Vec::new()) };
}

fn to_c(c: Completion<CBuf>) -> overlap_completion {
    let mut flags = 0;
    if c.inline {
        flags |= OVERLAP_COMPLETION_INLINE;
    }
    if c.buf.posted {
        flags |= OVERLAP_COMPLETION_POSTED;
    }
    debug_assert!(
        !c.buf.posted || overlapped::IoBuf::bytes_len(&c.buf) == 0,
        "a posted completion lends no memory"
    );
    let result = match &c.result {
        Ok(n) => *n as i64,
        // A posted result is the caller's number, given back as it came
        // (on Windows it is not a Win32 code to map).
        Err(e) if c.buf.posted => -i64::from(e.raw_os_error().unwrap_or_else(|| errno_of(e))),
        Err(e) => -i64::from(errno_of(e)),
    };
    debug_assert!(
        c.result.is_err() || c.buf.posted || result as u64 <= crate::buf::MAX_LEN,
        "an operation's result is a count of bytes, never negative"
    );
    overlap_completion {
        user_data: c.key,
        result,
        flags,
        reserved: 0,
    }
}

/// Takes completions into `out` (room for `max`): waits until at least
/// `min` were taken or `timeout_ns` nanoseconds passed (negative: no time
/// limit; 0 with `min` 0: a poll), then takes whatever else is ready, up
/// to `max`. Returns how many it stored (fewer than `min` only at the
/// timeout), or `-EINVAL` (NULL handle, NULL `out` with `max` > 0, `min` >
/// `max`).
///
/// It waits even when nothing is outstanding, for other threads'
/// submissions or overlap_port_post() (`GetQueuedCompletionStatusEx`'s
/// contract): a port's worker threads can wait on it for good and be
/// woken, for shutdown for example, by posted completions.
///
/// Any number of threads may wait at once; any thread takes any
/// completion, and each completion goes to exactly one of them. Once a
/// completion is stored here, its operation's buffer is the caller's
/// again (the buffer rule).
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port.
#[no_mangle]
pub extern "C" fn overlap_port_wait(
    port: *const overlap_port,
    out: *mut overlap_completion,
    min: u64,
    max: u64,
    timeout_ns: i64,
) -> i64 {
    const F: &str = "overlap_port_wait";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        if min > max {
            return fail(libc::EINVAL, format!("{F}: min ({min}) > max ({max})"));
        }
        if max == 0 {
            return 0;
        }
        if out.is_null() {
            return fail(libc::EINVAL, format!("{F}: out is NULL with max = {max}"));
        }
        let timeout = u64::try_from(timeout_ns).ok().map(Duration::from_nanos);
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        let min = usize::try_from(min).unwrap_or(usize::MAX);
        let taken = TAKEN.try_with(|t| {
            // A thread-local Vec (no allocation per call); its length is
            // bounded by the completions taken, which the in-flight budget
            // bounds, whatever `max` says.
            let mut v = t.try_borrow_mut().ok()?;
            v.clear();
            let n = p.port.next_batch(&mut v, min, max, timeout);
            // Memory: `out` has room for `max` entries, no more.
            assert!(
                n <= max && v.len() == n,
                "the port hands out at most max completions"
            );
            for (i, c) in v.drain(..).enumerate() {
                // SAFETY: out has room for max entries (the caller's
                // promise) and i < n <= max.
                unsafe { out.add(i).write_unaligned(to_c(c)) };
            }
            Some(n)
        });
        match taken {
            Ok(Some(n)) => n as i64,
            _ => {
                // Only during thread teardown (or a re-entrant call):
                // take with a fresh Vec.
                let mut v = Vec::new();
                let n = p.port.next_batch(&mut v, min, max, timeout);
                // Memory: as above.
                assert!(
                    n <= max && v.len() == n,
                    "the port hands out at most max completions"
                );
                for (i, c) in v.into_iter().enumerate() {
                    // SAFETY: as above.
                    unsafe { out.add(i).write_unaligned(to_c(c)) };
                }
                n as i64
            }
        }
    })
}

/// Asks that every operation of this port with `user_data`, submitted and
/// not yet reaped, be stopped; returns how many were asked (0 if none
/// could be), `-EINVAL` for a NULL handle, or `-EOPNOTSUPP` for a port
/// made without `OVERLAP_PORT_CANCEL`. Each of them still
/// completes exactly once: with `-ECANCELED` if it was stopped in time,
/// else with its real result. Its buffer stays under the buffer rule
/// until that completion is reaped.
///
/// io_uring and Windows' completion ports (`CancelIoEx`, reads and writes
/// only) can stop an operation: one waiting in the kernel (a read of a
/// pipe with nothing in it, work queued for a kernel worker) stops; a read
/// or write the device already has does not. On the thread pool (a
/// blocking system call) and Linux AIO (whose `io_cancel` stops no file
/// I/O) nothing can be asked, and this returns 0.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port.
#[no_mangle]
pub extern "C" fn overlap_port_cancel(port: *const overlap_port, user_data: u64) -> i64 {
    const F: &str = "overlap_port_cancel";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        if !p.port.is_cancellable() {
            return fail(
                libc::EOPNOTSUPP,
                format!("{F}: the port was made without OVERLAP_PORT_CANCEL"),
            );
        }
        match p.port.cancel(user_data) {
            Ok(n) => n as i64,
            Err(e) => fail_with(F, &e),
        }
    })
}

/// Posts a completion with `user_data` and `result` (a count >= 0 or a
/// negated errno, -4095 to -1) and the flag `OVERLAP_COMPLETION_POSTED`
/// (`PostQueuedCompletionStatus`): one waiter in overlap_port_wait() takes
/// it, e.g. to wake a worker for shutdown. It holds a share of the
/// in-flight budget until reaped, so posting is bounded: `-EAGAIN` when
/// the budget is full (never a wait). Returns 0, or `-EINVAL` (NULL
/// handle, `result` below -4095), `-EAGAIN`, `-ESHUTDOWN`.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port.
#[no_mangle]
pub extern "C" fn overlap_port_post(port: *const overlap_port, user_data: u64, result: i64) -> i32 {
    const F: &str = "overlap_port_post";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        match p.port.post(user_data, result, CBuf::posted()) {
            Ok(()) => 0,
            Err((e, _)) => fail_with(F, &e),
        }
    })
}

/// Operations (and posted completions) of this port not yet reaped, or
/// `-EINVAL` for a NULL handle.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_port_free() of this port.
#[no_mangle]
pub extern "C" fn overlap_port_outstanding(port: *const overlap_port) -> i64 {
    const F: &str = "overlap_port_outstanding";
    guard(F, || {
        let p = handle!(port, "port", F);
        refuse_forked!(p.engine, F);
        p.port.outstanding() as i64
    })
}

/// Frees the port (NULL is ignored): first waits until every operation
/// still outstanding on it has completed, and discards those completions
/// (and posted ones); then no operation of the port touches any buffer
/// again. It waits as long as the kernel does (a read of a pipe nobody
/// writes to: cancel it first). In a child after `fork()`, on a port of
/// the parent, it returns at once (the operations are the parent's).
///
/// Thread safety: any thread, but no other call may use this handle at
/// the same time or after.
#[no_mangle]
pub extern "C" fn overlap_port_free(port: *mut overlap_port) {
    guard("overlap_port_free", || {
        if port.is_null() {
            return;
        }
        // SAFETY: the handle came from Box::into_raw and is freed once
        // (the caller's rule).
        let p = unsafe { Box::from_raw(port) };
        if p.engine.is_forked_copy() {
            // A child after fork: the operations outstanding are the
            // parent's, and no thread of the child will complete them.
            // Dropping the handle touches neither them nor the kernel.
            return;
        }
        // `next` returns None once nothing is outstanding.
        while p.port.next().is_some() {}
        debug_assert_eq!(
            p.port.outstanding(),
            0,
            "after its last completion no operation of the port holds a buffer"
        );
        drop(p);
    })
}
