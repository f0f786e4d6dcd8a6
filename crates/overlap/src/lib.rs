//! # overlap
//!
//! File I/O on Linux that is really asynchronous, bounded in memory, and
//! honest about what the kernel did.
//!
//! - [`Engine`] runs operations on **io_uring** when the kernel allows it,
//!   otherwise O_DIRECT transfers on **Linux AIO** and the rest on a bounded
//!   thread pool (or everything on the pool), and records which and why
//!   ([`Engine::driver`]).
//! - [`File`] operations take their buffer by value and return it with the
//!   result: `(Result<usize>, B)`. A dropped future never lets the kernel
//!   touch freed memory: the engine owns in-flight buffers until completion.
//! - Every operation is a plain [`Future`](std::future::Future) (tokio, smol,
//!   any executor) with a blocking `.wait()`.
//! - [`path`] has the operations on paths (rename, remove, create
//!   directories, links, `statx`), engine operations like reads and writes.
//! - [`Port`] delivers completions to any number of worker threads.
//! - The in-flight budget (operations and bytes) applies backpressure.
//! - [`Engine::stats`] says how many operations completed inline
//!   (synchronously) and how many really overlapped, and how many kernel
//!   worker threads the kernel used for work it could not do asynchronously.
//! - What a dropped future, [`File::close`], [`Engine::shutdown`], the
//!   process's exit and `fork` do to operations in flight, and when a write
//!   counts as acknowledged, is one contract for every binding: the
//!   repository's `docs/acknowledged-bytes.md`. An acknowledged byte is
//!   never lost, and no buffer goes back to its owner while the kernel may
//!   still touch it.
//!
//! ```
//! use overlapped::{AlignedBufPool, Engine, OpenOptions};
//!
//! let engine = Engine::new()?;
//! let dir = tempfile::tempdir()?;
//! let file = OpenOptions::new().read(true).write(true).create(true).direct(true)
//!     .open(&engine, dir.path().join("data")).wait()?;
//! let pool = AlignedBufPool::for_file(&file, 4096, 8)?;
//! let mut buf = pool.get();
//! buf.fill(7);
//! let (res, buf) = file.write_all_at(buf, 0).wait();
//! res?;
//! let (res, back) = file.read_at(pool.get(), 0).wait();
//! assert_eq!(res?, 4096);
//! assert_eq!(&back[..], &buf[..]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Where things live
//!
//! Three layers; imports flow one way, downwards:
//!
//! - **The bottom** (imports nothing above it): `error`, `operation/` (every
//!   operation, one declaration each), `sys`, `stats`, `limiter`, `buf`,
//!   and `cell` (what a driver sees of an operation and its engine: the
//!   completion interface `Completable`, `EngineState`, `to_result`, the
//!   fork generation).
//! - **The drivers**, `driver/` (import each other and the bottom only):
//!   `driver/mod.rs` (what every driver shares: deferred wake-ups, contained
//!   panics, driver-thread marks, the spin window), `driver/handle.rs` (the
//!   engine's driver, whichever it is), `driver/pool.rs`, `driver/aio/`,
//!   and `driver/uring/`, the one home of io_uring: `setup.rs` (making a
//!   ring, probing), `core.rs` (`RingCore`: submit, reap, teardown),
//!   `engine_thread.rs` (the engine thread), `thread.rs` (each thread's own
//!   ring and waiter, the deferral of `Port::batch`), `reactor/`
//!   ([`ReactorRing`] and its watcher), `port.rs` (completion ports' rings),
//!   and in `mod.rs` the routing table and the one routing point
//!   (`route_for`, `submit_on_ring`).
//! - **The top**: `engine` (starts a driver), `admit`, `future` (`OpCell`,
//!   [`Op`], [`Task`], `submit`), `wait` ([`block_on`]), `port` ([`Port`]),
//!   `file/`, [`path`].
//!
//! `scripts/import-graph` prints the module graph and fails (in CI) on a
//! cycle through `driver/`.
//!
//! ## The life of a read
//!
//! 1. [`File::read_at`] checks the request (`File::check`: open for
//!    reading, offset range, direct-I/O alignment) and builds an
//!    `operation::Read` (one operation, declared in `operation/`) pointing
//!    into the buffer's heap memory (`File::prepare_read`). The result is an
//!    [`Op`] (`future.rs`), a future that has done nothing yet.
//! 2. Its first poll (`Op::poll`) goes through the one admission path that
//!    ports share (`admit::Admission`): it counts it in on the file
//!    (`Request::start`), tries the page cache on the calling thread for a
//!    buffered read (`sys::read_nowait`, `preadv2(RWF_NOWAIT)`), and else
//!    takes a share of the in-flight budget (`Limiter::try_acquire`, else
//!    `Limiter::queue`, waiting if it is full).
//! 3. `future::submit` moves the request into an `OpCell`, which owns the buffer
//!    from now until the kernel is done with it, and picks the ring (on
//!    io_uring through `driver::uring::submit_on_ring`):
//!    - polled inside [`block_on`] (every `.wait()`) on io_uring, the calling
//!      thread's own ring (`thread::submit_on_own_ring`, then `RingCore::push`,
//!      which asks `OpKind::entry` for the io_uring entry, or runs
//!      `OpKind::blocking` where the kernel lacks the opcode);
//!    - polled by another executor, the engine thread's queue
//!      (`UringDriver::submit`), which the engine thread moves into its ring;
//!    - on the thread pool, the pool's queue (`PoolDriver::submit`), except
//!      that an operation of [`Op::wait`] runs on the waiting thread itself
//!      (`pool::run_on_caller`: one system call, no hand-off);
//!    - on `aio+pool` (io_uring blocked), an O_DIRECT read or write goes to
//!      Linux AIO (`AioDriver::submit`, `io_submit` on the calling thread);
//!      everything else goes to the pool as above.
//! 4. The kernel performs the read. A thread in `block_on` sleeps in
//!    `io_uring_enter` on its own ring (`RingCore::wait`), and the
//!    completion's task work wakes that very thread; the engine thread does
//!    the same on its ring for the futures it carries. On `aio+pool`, the
//!    waiting thread (in `block_on`, or a port's worker in `next`) sleeps in
//!    `io_getevents` itself when no other thread does (`aio::lead::wait`,
//!    leader/follower), and reaps every event it gets; the engine's reaper
//!    thread does so only while nobody waits (futures of other executors).
//! 5. The reaper (`RingCore::reap`) turns the completion into a `Done`, and
//!    `core::complete_all` calls `OpCell::complete` with panics in user code
//!    contained: the result is stored, the file and the budget are released,
//!    and the future's waker fires.
//! 6. The next poll of the [`Op`] takes the result and the buffer
//!    (`OpCell::poll_done`). Had the future been dropped, the cell would
//!    still hold the buffer until step 5, and drop it then.
//!
//! A [`Port`] differs in steps 3 to 6: the submitting thread puts the
//! operation on the port's own ring and enters the kernel itself
//! (`PortRing::submit`), and whichever worker waits in [`Port::next`] is
//! woken by the kernel and takes the completion (`PortRing::try_take`).
//!
//! ## Lifecycle: an operation outlives whatever started it
//!
//! The rule: **an operation's outcome never depends on the lifetime of the
//! thread that submitted it, the runtime or loop that polled it, or the
//! process copy it runs in.** Once handed to the engine it completes with
//! the kernel's real result (or is refused, before it started, with a typed
//! error), its buffer stays alive until the kernel is done, and its share
//! of the budget is released. How each ring keeps it:
//!
//! | ring | who submits | who reaps it when its owner is gone | submitter exits mid-flight | after `fork` | engine shutdown |
//! | --- | --- | --- | --- | --- | --- |
//! | a thread's own ring ([`block_on`], `.wait()`) | that thread only | nobody needs to: the outermost `block_on` returns, and the thread exits, only once nothing is in flight on it | cannot happen | the child never touches the parent's ring; a new one is made in the child | the threads waiting reap their own; shutdown waits for them |
//! | the engine thread's ring (futures of other executors) | the engine thread | the engine thread, which lives as long as the engine | cannot happen | the engine does not cross `fork` (make a new one in the child) | waits for everything in flight |
//! | [`ReactorRing`] (overlapped-tokio, the Python hub) | the thread inside [`ReactorRing::enter`] | [`ReactorRing::orphan`] hands it to the ring watcher, which also reaps any ring left unreaped for one of its looks (10-100 ms) | Linux cancels (`ECANCELED`) or faults (`EFAULT`) what the thread left: submitted again through the engine's driver | in the child every method leaves the ring alone | shutdown reaps every live ring itself |
//! | a [`Port`]'s ring | any thread | the port's workers (any thread in [`Port::next`]); dropping the port waits | submitted again on the port's ring (the file claimed again first) | the child never drains the parent's ring | waits until the kernel is done with every operation of every port; the completions stay for the workers |
//!
//! The lifecycle matrix (`crates/overlap/tests/matrix.rs`) checks every
//! cell on every driver: front end ([`Op::wait`]/[`block_on`], futures on
//! a foreign executor, [`Port`], [`ReactorRing`]) × event (the submitting
//! thread exits mid-flight; the operation, or its port, is dropped; the
//! executor is dropped; the engine shuts down; the process forks, and
//! parent and child each go on and exit; the operation moves to another
//! thread; several threads append to one file) × operation (direct read,
//! buffered read of uncached data, buffered write, a pipe read that only
//! completes when written to, open): the right result, the budget back, no
//! descriptor or thread left behind, within a time limit. The documented
//! failures: an [`OpenOptions::open`] of an O_DIRECT file in flight at
//! shutdown may end with [`Error::Shutdown`] (it is an open and then a
//! `statx` for the file's alignment, and the engine refuses the second); an operation started after shutdown began is
//! refused with [`Error::Shutdown`]. What waits: shutdown, `.wait()` and a
//! dropped [`Port`] wait as long as the kernel does (for a pipe read, until
//! a writer writes); [`ReactorRing::orphan`] never waits, nor does dropping
//! the last handle of a ring (it orphans a ring with operations in flight).
//!
//! Known limits: in a child after `fork`, a child's copy of an operation
//! whose reactor ring was locked by a parent thread at the instant of the
//! fork stays pending instead of failing with [`Error::Forked`] (the ring is
//! never touched in the child; nothing leaks into the parent). The ring
//! watcher's and ports' timed waits need Linux 5.11 (`IORING_FEAT_EXT_ARG`):
//! an older kernel's io_uring is not used (the engine says so and falls
//! back).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// io_uring's and Linux AIO's state (registered files and buffers, ring
// sizes, a port ring's cell, the worker sampling) is declared for every
// system and used on Linux, where an unused item is still an error.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

mod admit;
mod buf;
mod cell;
mod driver;
mod engine;
mod error;
mod file;
mod future;
mod join;
mod limiter;
mod operation;
pub mod path;
mod port;
mod request;
mod stats;
mod sys;
mod wait;
#[cfg(windows)]
mod windows;

pub use buf::{AlignedBuf, AlignedBufPool, IoBuf, IoBufMut, MAX_ALIGN};
#[cfg(target_os = "linux")]
pub use driver::uring::reactor::ReactorRing;
pub use engine::{
    DriverChoice, DriverInfo, DriverKind, Engine, EngineBuilder, DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_MAX_INFLIGHT_OPS, DEFAULT_POOL_THREADS, DEFAULT_REACTOR_RING_ENTRIES,
    DEFAULT_RING_ENTRIES, DEFAULT_THREAD_RING_ENTRIES, MAX_POOL_THREADS,
};
pub use error::{AlignmentPart, Error, FallbackReason, Result};
pub use file::{Access, Alignment, File, Metadata, OpenOptions, MAX_RW_BYTES};
pub use future::{Op, Task};
pub use join::{join_all, JoinAll};
pub use port::{Batch, Completion, Port, WhenFull};
pub use stats::{KernelWorkers, Stats};
pub use wait::block_on;
#[cfg(windows)]
pub use windows::enable_manage_volume_privilege;
