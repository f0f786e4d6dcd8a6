//! # overlap
//!
//! File I/O on Linux that is really asynchronous, bounded in memory, and
//! honest about what the kernel did.
//!
//! - [`Engine`] runs operations on **io_uring** when the kernel allows it,
//!   and otherwise on a bounded thread pool, and records which and why
//!   ([`Engine::driver`]).
//! - [`File`] operations take their buffer by value and return it with the
//!   result: `(Result<usize>, B)`. A dropped future never lets the kernel
//!   touch freed memory: the engine owns in-flight buffers until completion.
//! - Every operation is a plain [`Future`](std::future::Future) (tokio, smol,
//!   any executor) with a blocking `.wait()`.
//! - [`Port`] delivers completions to any number of worker threads.
//! - The in-flight budget (operations and bytes) applies backpressure.
//! - [`Engine::stats`] says how many operations completed inline
//!   (synchronously) and how many really overlapped, and how many kernel
//!   worker threads the kernel used for work it could not do asynchronously.
//!
//! ```
//! use overlap::{AlignedBufPool, Engine, OpenOptions};
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
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod buf;
mod driver;
mod engine;
mod error;
mod file;
mod limiter;
mod op;
mod ops;
mod port;
mod stats;
mod sys;
mod wait;

pub use buf::{AlignedBuf, AlignedBufPool, IoBuf, IoBufMut, MAX_ALIGN};
pub use engine::{
    DriverChoice, DriverInfo, DriverKind, Engine, EngineBuilder, DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_MAX_INFLIGHT_OPS, DEFAULT_POOL_THREADS, DEFAULT_RING_ENTRIES, MAX_POOL_THREADS,
};
pub use error::{AlignmentPart, Error, FallbackReason, Result};
pub use file::{Access, Alignment, File, Metadata, OpenOptions, MAX_RW_BYTES};
pub use op::{Op, Task};
pub use port::{Completion, Port};
pub use stats::{KernelWorkers, Stats};
pub use wait::block_on;
