//! The integration tests of overlapped-tokio, one binary (modules below).
//!
//! Every scenario runs on tokio's multi-thread and current-thread runtimes
//! (`rt_tests!`). The driver is the process's: io_uring when the kernel
//! allows it, the engine's thread pool with `OVERLAP_DRIVER=pool`;
//! `scripts/test` runs this binary once each way. On Windows the driver is
//! the I/O completion port one (`OVERLAP_DRIVER=pool`: the pool), and the
//! modules about what only Linux has (fork, FIFOs, `/proc`, io_uring's
//! rings) are left out.
//!
//! What the modules share (`rt_tests!`, runtimes, temporary directories,
//! data, error summaries, child processes) is in `util.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

#[macro_use]
mod util;

mod coop;
mod drop_file;
mod dropin;
mod engine;
mod file;
// Handles and std conversions: Windows'.
#[cfg(windows)]
mod file_windows;
mod free;
// FIFOs, /proc/self/{fd,task}: Linux's.
#[cfg(target_os = "linux")]
mod lifecycle;
// fork, FIFOs, O_DIRECT by custom flags, /proc: Linux's.
#[cfg(target_os = "linux")]
mod matrix;
mod outside;
// io_uring rings registered with tokio's reactor: Linux's.
#[cfg(target_os = "linux")]
mod reactor_ring;
// tokio's own tests of tokio::fs, on overlapped_tokio::fs.
mod tokio_fs;
// fork, FIFOs, ENOSPC on a small tmpfs: Linux's.
#[cfg(target_os = "linux")]
mod torture;
// tower-http's own ServeDir/ServeFile tests on the engine (the feature
// `tower-http` is on for the tests: see the dev-dependencies).
mod tower_http_fs;
