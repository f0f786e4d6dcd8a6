//! # overlap-tokio
//!
//! A drop-in for [`tokio::fs`] whose file operations are truly
//! asynchronous: replace `use tokio::fs` with `use overlap_tokio::fs`.
//!
//! Operations with an io_uring opcode go through the [`overlap`] engine,
//! and their completions reach tokio through its own reactor: each tokio
//! worker thread submits on a ring of its own, registered with tokio's
//! I/O driver, so the kernel wakes the worker and no thread of overlap's
//! stands in between (see [`on_ring`]).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod fs;
mod global;
mod reactor;

pub use global::{engine, set_engine};
pub use reactor::{on_ring, OnRing};
