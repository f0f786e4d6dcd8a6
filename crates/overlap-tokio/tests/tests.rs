//! The integration tests of overlap-tokio, one binary (modules below).
//!
//! Every scenario runs on tokio's multi-thread and current-thread runtimes
//! (`rt_tests!`). The driver is the process's: io_uring when the kernel
//! allows it, the engine's thread pool with `OVERLAP_DRIVER=pool`;
//! `scripts/test` runs this binary once each way.

#[macro_use]
mod util;

mod dropin;
mod engine;
mod file;
mod free;
mod lifecycle;
mod matrix;
mod outside;
mod reactor_ring;
#[cfg(feature = "tower-http")]
mod tower_http_fs;

/// Said when the feature is off, so that a run without it shows that
/// tower-http's tests did not run (`scripts/test` turns it on).
#[cfg(not(feature = "tower-http"))]
#[test]
fn tower_http_tests_need_the_feature() {
    println!("SKIPPED: tower-http's ServeDir/ServeFile tests need `--features tower-http`");
}
