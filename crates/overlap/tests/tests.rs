//! The engine's integration tests: one binary, one module per subject.
//!
//! soundness.rs is a binary of its own: it installs a `#[global_allocator]`.
//! Tests that need a process of their own (an environment variable, a
//! seccomp filter, counting process-wide threads, fork) run this binary
//! again for one test (`common::run_child`).
//!
//! What the modules share (`per_driver!`, test files, patterned data,
//! counting and panicking buffers, child processes, deadlines) is in
//! `common/mod.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

#[macro_use]
mod common;

#[cfg(target_os = "linux")]
mod aio;
mod backpressure;
mod batching;
mod cached;
mod cancel;
mod driver_choice;
mod errors;
mod lifecycle;
mod matrix;
mod ops;
mod paths;
mod port;
mod port_batch;
#[cfg(target_os = "linux")]
mod registered;
mod runtimes;
mod stats;
mod taskrun;
mod thread_exit;
mod torture;
mod waiting;
