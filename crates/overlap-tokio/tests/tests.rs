//! The integration tests of overlap-tokio, one binary (modules below).
//!
//! Every scenario runs on tokio's multi-thread and current-thread runtimes
//! (`rt_tests!`). The driver is the process's: io_uring when the kernel
//! allows it, the engine's thread pool with `OVERLAP_DRIVER=pool`;
//! `scripts/test` runs this binary once each way.
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
mod free;
mod lifecycle;
mod matrix;
mod outside;
mod reactor_ring;
// tokio's own tests of tokio::fs, on overlap_tokio::fs.
mod tokio_fs;
mod torture;
// tower-http's own ServeDir/ServeFile tests on the engine (the feature
// `tower-http` is on for the tests: see the dev-dependencies).
mod tower_http_fs;
