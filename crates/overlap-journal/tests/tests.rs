//! The journal's integration tests: one binary, one module per subject.

mod basic;
mod corrupt_tail;
mod enospc;
mod kill9;
mod power_loss;
mod recovery_rule;
mod recycle;
mod wal;
