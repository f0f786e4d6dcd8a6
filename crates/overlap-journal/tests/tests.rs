//! The journal's integration tests: one binary, one module per subject.
//! What more than one module uses (the test's directory, segment file
//! names) is in `common/mod.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

mod common;

mod basic;
mod corrupt_tail;
// An ext4 image on a loop device, mounted as root.
#[cfg(target_os = "linux")]
mod enospc;
mod kill9;
mod power_loss;
mod recovery_rule;
mod recycle;
mod repair;
mod repair_props;
mod torture;
mod wal;
