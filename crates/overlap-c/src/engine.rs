//! The engine: create with options, the driver and why, statistics,
//! shutdown and free.

use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

use overlapped::{DriverChoice, DriverKind, Engine};

use crate::error::{fail, fail_with, guard, handle, refuse_forked};

/// Let the engine choose: the `OVERLAP_DRIVER` environment variable
/// (`uring`, `aio`, `pool`) if set, else io_uring when the kernel allows
/// it, else Linux AIO for O_DIRECT transfers with a thread pool for the
/// rest, else the thread pool. Which one runs, and why, is never silent:
/// see overlap_engine_driver() and overlap_engine_fallback_reason().
pub const OVERLAP_DRIVER_AUTO: i32 = 0;
/// io_uring, or overlap_engine_create() fails with `-EOPNOTSUPP` and a
/// message saying what to change (never a silent fallback).
pub const OVERLAP_DRIVER_URING: i32 = 1;
/// Linux AIO (`io_submit`) for O_DIRECT reads and writes, the bounded
/// thread pool for the rest (`aio+pool`).
pub const OVERLAP_DRIVER_AIO: i32 = 2;
/// The bounded thread pool: blocking system calls on up to
/// `pool_threads` threads.
pub const OVERLAP_DRIVER_POOL: i32 = 3;

/// Engine flag (overlap_engine_options.flags): a blocking call
/// (overlap_pread(), overlap_pwrite(), overlap_fsync(), ...) makes its system
/// call on the calling thread, as `pread` does, whatever the driver, instead
/// of submitting it to the thread's own io_uring ring (or `io_submit`) and
/// waiting there. A thread that blocks anyway gains nothing from the
/// kernel's asynchrony, and a ring's request costs CPU: with 64 threads each
/// blocking on 4 KiB O_DIRECT reads it brings the blocking calls from about
/// 0.88x to parity with `pread` (BENCHMARKS.md). Ports are unaffected: they
/// stay on io_uring, and a blocking call on a thread whose own ring holds
/// operations still goes through the ring. Counted in
/// overlap_stats.ran_on_caller. The thread-pool driver always does this. As
/// there, overlap_engine_shutdown() does not wait for a blocking call in
/// progress on another thread (its buffer is its caller's until it returns).
pub const OVERLAP_ENGINE_WAITS_ON_CALLER: u32 = 1;

/// An engine: the driver, its threads, the in-flight budget and the
/// statistics. One per process is the normal case. Opaque.
pub struct overlap_engine {
    pub(crate) engine: Engine,
    /// Set when overlap_engine_shutdown() begins: what makes ports and
    /// adopts files fails from then on (the engine refuses operations by
    /// itself; making a port or adopting a descriptor submits none).
    shut: AtomicBool,
}

impl overlap_engine {
    /// `-ESHUTDOWN` (with the message) once overlap_engine_shutdown() began.
    pub(crate) fn refuse_shut(&self, what: &str) -> Option<i32> {
        self.shut.load(Ordering::Acquire).then(|| {
            fail(
                crate::error::ESHUTDOWN,
                format!("{what}: the engine is shut down (overlap_engine_shutdown())"),
            )
        })
    }
}

/// Options for overlap_engine_create(). Fill it with
/// overlap_engine_options_init() first, then change what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct overlap_engine_options {
    /// `sizeof(overlap_engine_options)`, set by overlap_engine_options_init().
    pub size: u32,
    /// One of the `OVERLAP_DRIVER_*` values (default `OVERLAP_DRIVER_AUTO`).
    pub driver: i32,
    /// The in-flight budget: most operations in flight at once, counting
    /// completions not yet reaped (default 4096). Submission waits, or
    /// fails with `-EAGAIN` on a port made with `OVERLAP_PORT_NONBLOCK`,
    /// while it is full.
    pub max_inflight_ops: u64,
    /// The in-flight budget in bytes (default 64 MiB). A single request
    /// larger than this is admitted only while nothing else is in flight.
    pub max_inflight_bytes: u64,
    /// Threads of the thread pool (default 32, at most 1024), started on
    /// demand.
    pub pool_threads: u32,
    /// io_uring submission-queue entries (default 256).
    pub ring_entries: u32,
    /// At most this many kernel worker threads (io_uring's `iou-wrk`) per
    /// class; 0 (the default) leaves the kernel's limit.
    pub max_kernel_workers: u32,
    /// 0 (the default), or `OVERLAP_ENGINE_WAITS_ON_CALLER`; other bits
    /// are refused with `-EINVAL`.
    pub flags: u32,
}

/// What overlap_engine_stats() reports; all counts since the engine
/// started.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct overlap_stats {
    /// Operations accepted.
    pub submitted: u64,
    /// Operations whose result is known.
    pub completed: u64,
    /// Completions that were synchronous: already done when the submitting
    /// call returned (a page-cache hit, for example).
    pub completed_inline: u64,
    /// Completions that really overlapped with the caller.
    pub completed_async: u64,
    /// Operations that ended with an error.
    pub errors: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Highest number of operations in flight at once.
    pub inflight_ops_high_water: u64,
    /// Highest number of bytes in flight at once.
    pub inflight_bytes_high_water: u64,
    /// System calls made to submit work.
    pub submit_syscalls: u64,
    /// Times a submitter had to wait for the in-flight budget.
    pub backpressure_waits: u64,
    /// Operations handed to Linux AIO (`aio+pool`).
    pub submitted_aio: u64,
    /// Operations given to the thread pool's workers.
    pub submitted_pool: u64,
    /// Operations a thread blocked in overlap_pread()/overlap_pwrite() ran
    /// itself as a blocking system call (thread pool, the pool side of
    /// `aio+pool`, or an engine made with `OVERLAP_ENGINE_WAITS_ON_CALLER`).
    pub ran_on_caller: u64,
    /// Distinct kernel io_uring worker threads (`iou-wrk`) seen doing work:
    /// operations the kernel could not do asynchronously and handed to
    /// blocking kernel workers (all rings of the process).
    pub kernel_workers_seen: u64,
    /// Operations submitted again because the thread that submitted them
    /// exited while they were in flight (Linux fails them unperformed).
    pub resubmitted_after_exit: u64,
}

/// Fills `opts` with the defaults. Returns 0, or `-EINVAL` if `opts` is
/// NULL.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn overlap_engine_options_init(opts: *mut overlap_engine_options) -> i32 {
    guard("overlap_engine_options_init", || {
        if opts.is_null() {
            return fail(libc::EINVAL, "overlap_engine_options_init: opts is NULL");
        }
        let d = overlap_engine_options {
            size: std::mem::size_of::<overlap_engine_options>() as u32,
            driver: OVERLAP_DRIVER_AUTO,
            max_inflight_ops: overlapped::DEFAULT_MAX_INFLIGHT_OPS as u64,
            max_inflight_bytes: overlapped::DEFAULT_MAX_INFLIGHT_BYTES as u64,
            pool_threads: overlapped::DEFAULT_POOL_THREADS as u32,
            ring_entries: overlapped::DEFAULT_RING_ENTRIES,
            max_kernel_workers: 0,
            flags: 0,
        };
        // SAFETY: the caller passes a writable overlap_engine_options;
        // NULL was refused above.
        unsafe { opts.write(d) };
        0
    })
}

/// The caller's options (the defaults for NULL), or `-EINVAL` when their
/// `size` is not this version's.
fn options_from(opts: *const overlap_engine_options) -> Result<overlap_engine_options, i32> {
    let mut o = overlap_engine_options {
        size: 0,
        driver: 0,
        max_inflight_ops: 0,
        max_inflight_bytes: 0,
        pool_threads: 0,
        ring_entries: 0,
        max_kernel_workers: 0,
        flags: 0,
    };
    overlap_engine_options_init(&mut o);
    debug_assert_eq!(
        o.size as usize,
        std::mem::size_of::<overlap_engine_options>(),
        "the defaults carry the structure's size"
    );
    if opts.is_null() {
        return Ok(o);
    }
    // SAFETY: a non-NULL opts points to an overlap_engine_options (the
    // caller's promise); `size` is checked before use.
    o = unsafe { opts.read() };
    let want = std::mem::size_of::<overlap_engine_options>();
    if o.size as usize != want {
        return Err(fail(
            libc::EINVAL,
            format!(
                "overlap_engine_create: opts->size is {}, expected {want}: fill the options \
                 with overlap_engine_options_init()",
                o.size
            ),
        ));
    }
    Ok(o)
}

/// Starts an engine and stores its handle in `*out`. `opts` may be NULL
/// for the defaults.
///
/// Returns 0, or `-EINVAL` (NULL `out`, an option out of range: the
/// message says which), `-EOPNOTSUPP` (the driver asked for cannot run
/// here: the message says why and what to change), or another `-errno`.
///
/// Thread safety: any thread. The engine handle may be used from any
/// number of threads at once. An engine does not cross `fork()`: make a
/// new one in the child (calls on the parent's handles fail there with
/// `-ECHILD`).
#[no_mangle]
pub extern "C" fn overlap_engine_create(
    opts: *const overlap_engine_options,
    out: *mut *mut overlap_engine,
) -> i32 {
    const F: &str = "overlap_engine_create";
    guard(F, || {
        if out.is_null() {
            return fail(libc::EINVAL, format!("{F}: out is NULL"));
        }
        let o = match options_from(opts) {
            Ok(o) => o,
            Err(r) => return r,
        };
        let choice = match o.driver {
            OVERLAP_DRIVER_AUTO => DriverChoice::Auto,
            OVERLAP_DRIVER_URING => DriverChoice::Uring,
            OVERLAP_DRIVER_AIO => DriverChoice::Aio,
            OVERLAP_DRIVER_POOL => DriverChoice::Pool,
            #[cfg(windows)]
            crate::win32::OVERLAP_DRIVER_IOCP => DriverChoice::Iocp,
            other => {
                return fail(
                    libc::EINVAL,
                    format!(
                    "{F}: driver {other} is not one of OVERLAP_DRIVER_AUTO, _URING, _AIO, _POOL"
                ),
                )
            }
        };
        if o.flags & !OVERLAP_ENGINE_WAITS_ON_CALLER != 0 {
            return fail(
                libc::EINVAL,
                format!(
                    "{F}: opts->flags {:#x} has bits other than OVERLAP_ENGINE_WAITS_ON_CALLER",
                    o.flags
                ),
            );
        }
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let mut b = Engine::builder()
            .waits_on_caller(o.flags & OVERLAP_ENGINE_WAITS_ON_CALLER != 0)
            .driver(choice)
            .max_inflight_ops(to_usize(o.max_inflight_ops))
            .max_inflight_bytes(to_usize(o.max_inflight_bytes))
            .pool_threads(o.pool_threads as usize)
            .ring_entries(o.ring_entries);
        if o.max_kernel_workers > 0 {
            b = b.max_kernel_workers(o.max_kernel_workers);
        }
        match b.build() {
            Ok(engine) => {
                let h = Box::into_raw(Box::new(overlap_engine {
                    engine,
                    shut: AtomicBool::new(false),
                }));
                // SAFETY: out is a writable pointer (checked non-NULL).
                unsafe { out.write(h) };
                0
            }
            Err(e) => fail_with(F, &e),
        }
    })
}

/// The driver running: `OVERLAP_DRIVER_URING`, `OVERLAP_DRIVER_AIO`
/// (`aio+pool`) or `OVERLAP_DRIVER_POOL`; `-EINVAL` for a NULL handle.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_engine_driver(engine: *const overlap_engine) -> i32 {
    const F: &str = "overlap_engine_driver";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        refuse_forked!(e.engine, F);
        match e.engine.driver().kind {
            DriverKind::Uring => OVERLAP_DRIVER_URING,
            DriverKind::Aio => OVERLAP_DRIVER_AIO,
            #[cfg(windows)]
            DriverKind::Iocp => crate::win32::OVERLAP_DRIVER_IOCP,
            _ => OVERLAP_DRIVER_POOL,
        }
    })
}

/// Copies `text` into `buf` as `snprintf` would: at most `len - 1` bytes
/// and a NUL (nothing when `len` is 0); returns the full length.
fn copy_text(text: &str, buf: *mut c_char, len: u64) -> i64 {
    if !buf.is_null() && len > 0 {
        let n = text
            .len()
            .min(usize::try_from(len - 1).unwrap_or(usize::MAX));
        debug_assert!(
            (n as u64) < len,
            "the text and its NUL fit the caller's buffer"
        );
        // SAFETY: the caller lends `len` writable bytes at buf; n < len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    text.len() as i64
}

/// The driver and why io_uring is not in use when it is not, as one line
/// of text, e.g. `aio+pool (io_uring: io_uring_setup failed with EPERM:
/// blocked by a seccomp filter (common in containers))`. Copied into
/// `buf` as `snprintf` does (at most `len - 1` bytes and a NUL; `buf` may
/// be NULL when `len` is 0); returns the text's full length (call with
/// `len` 0 to size the buffer), or `-EINVAL` for a NULL handle.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_engine_driver_text(
    engine: *const overlap_engine,
    buf: *mut c_char,
    len: u64,
) -> i64 {
    const F: &str = "overlap_engine_driver_text";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        refuse_forked!(e.engine, F);
        copy_text(&e.engine.driver().to_string(), buf, len)
    })
}

/// Why the engine does not run on io_uring, and what to change, as text
/// (copied as by overlap_engine_driver_text()); the empty string (length
/// 0) when it runs on io_uring. Returns the text's full length, or
/// `-EINVAL` for a NULL handle.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_engine_fallback_reason(
    engine: *const overlap_engine,
    buf: *mut c_char,
    len: u64,
) -> i64 {
    const F: &str = "overlap_engine_fallback_reason";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        refuse_forked!(e.engine, F);
        let info = e.engine.driver();
        let mut text = match &info.fallback {
            Some(r) => format!("io_uring: {r}; to fix: {}", r.hint()),
            None => String::new(),
        };
        if let Some(a) = &info.aio_unavailable {
            text.push_str(&format!("; Linux AIO: {a}"));
        }
        copy_text(&text, buf, len)
    })
}

/// Fills `*out` with a snapshot of the engine's counters. Returns 0, or
/// `-EINVAL` for a NULL handle or `out`.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_engine_stats(
    engine: *const overlap_engine,
    out: *mut overlap_stats,
) -> i32 {
    const F: &str = "overlap_engine_stats";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        refuse_forked!(e.engine, F);
        if out.is_null() {
            return fail(libc::EINVAL, format!("{F}: out is NULL"));
        }
        let s = e.engine.stats();
        let st = overlap_stats {
            submitted: s.submitted,
            completed: s.completed,
            completed_inline: s.completed_inline,
            completed_async: s.completed_async,
            errors: s.errors,
            bytes_read: s.bytes_read,
            bytes_written: s.bytes_written,
            inflight_ops_high_water: s.inflight_ops_high_water,
            inflight_bytes_high_water: s.inflight_bytes_high_water,
            submit_syscalls: s.submit_syscalls,
            backpressure_waits: s.backpressure_waits,
            submitted_aio: s.submitted_aio,
            submitted_pool: s.submitted_pool,
            ran_on_caller: s.ran_on_caller,
            kernel_workers_seen: s.kernel_workers_seen,
            resubmitted_after_exit: s.resubmitted_after_exit,
        };
        // SAFETY: out is a writable overlap_stats (checked non-NULL).
        unsafe { out.write(st) };
        0
    })
}

/// Stops the engine: from now on every call that would start work
/// (submissions, blocking calls, opening or adopting a file, making a
/// port, posting) fails at once with `-ESHUTDOWN`; waits
/// until the kernel is done with every operation in flight (their
/// completions stay on their ports, for overlap_port_wait() to reap);
/// stops the driver's threads. Calling it again does nothing. Returns 0,
/// or `-EINVAL` for a NULL handle, `-ECHILD` at once in a child after
/// `fork()` (the engine is the parent's: nothing is stopped).
///
/// It waits as long as the kernel does: a read of a pipe nobody writes to
/// keeps it waiting (cancel such operations first). It does not free the
/// handle: overlap_engine_free() does.
///
/// Thread safety: any thread, concurrently with any call but
/// overlap_engine_free() of this engine.
#[no_mangle]
pub extern "C" fn overlap_engine_shutdown(engine: *const overlap_engine) -> i32 {
    const F: &str = "overlap_engine_shutdown";
    guard(F, || {
        let e = handle!(engine, "engine", F);
        refuse_forked!(e.engine, F);
        // Before the engine's own flag: a port made or a descriptor
        // adopted from now on is refused, as submissions are.
        e.shut.store(true, Ordering::Release);
        e.engine.shutdown();
        0
    })
}

/// Frees the engine handle (NULL is ignored). Files and ports made on the
/// engine keep it running until they are freed too; freeing the last of
/// them shuts it down as overlap_engine_shutdown() does (waiting for the
/// operations in flight). In a child after `fork()` it returns at once
/// and stops nothing (the engine is the parent's).
///
/// Thread safety: any thread, but no other call may use this handle at
/// the same time or after.
#[no_mangle]
pub extern "C" fn overlap_engine_free(engine: *mut overlap_engine) {
    guard("overlap_engine_free", || {
        if !engine.is_null() {
            // SAFETY: the handle came from Box::into_raw in
            // overlap_engine_create and is freed once (the caller's rule).
            drop(unsafe { Box::from_raw(engine) });
        }
    })
}
