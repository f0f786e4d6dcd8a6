//! The integration tests of the `overlap` command, one binary (modules
//! below), each running the built binary as a user would.
//!
//! What the modules share (the built binary, fresh directories, its
//! output) is in `util.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

mod util;

// Linux's: they use signals, FIFOs, rlimits, io_uring and Linux AIO.
#[cfg(not(windows))]
mod bench;
mod journal;
#[cfg(not(windows))]
mod probe;
#[cfg(not(windows))]
mod serve;
#[cfg(windows)]
mod windows;
