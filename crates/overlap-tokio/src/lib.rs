//! # overlapped-tokio
//!
//! A drop-in for [`tokio::fs`] whose file operations are truly
//! asynchronous: replace `use tokio::fs` with `use overlapped_tokio::fs`.
//!
//! Operations with an io_uring opcode go through the [`overlapped`] engine,
//! and their completions reach tokio through its own reactor: each tokio
//! worker thread submits on a ring of its own, registered with tokio's
//! I/O driver, so the kernel wakes the worker and no thread of overlap's
//! stands in between (see [`on_ring`]). Operations that
//! have no opcode run on tokio's blocking pool, as in tokio; the [`fs`]
//! module's documentation has the table of which is which.
//!
//! ```
//! use overlapped_tokio::fs; // instead of `use tokio::fs;`
//! use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("hello.txt");
//! let mut file = fs::File::create(&path).await?;
//! file.write_all(b"hello, world").await?;
//! file.flush().await?;
//!
//! let mut file = fs::File::open(&path).await?;
//! file.seek(std::io::SeekFrom::Start(7)).await?;
//! let mut s = String::new();
//! file.read_to_string(&mut s).await?;
//! assert_eq!(s, "world");
//! println!("{:?}", overlapped_tokio::engine().stats());
//! # Ok::<(), std::io::Error>(()) })?;
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod fs;
mod global;
mod reactor;
#[cfg(feature = "tower-http")]
pub mod tower_http;
#[cfg(feature = "stream")]
pub mod wrappers;

pub use global::{engine, set_engine};
pub use reactor::{on_ring, OnRing};
