//! The design the engine did *not* choose, kept so the choice can be
//! re-measured: callers submit directly into a shared ring (under a mutex,
//! one `io_uring_enter` per submission) and a reaper thread waits for
//! completions and hands them to the requester through a condvar.
//!
//! Same workload as `randread`: random 4 KiB O_DIRECT reads at a fixed
//! queue depth. Compare with
//! `cargo run --release -p overlapped --example randread -- FILE 32 200000`.
//!
//! `cargo run --release -p overlapped --example design_b -- FILE [depth] [reads] [coop]`
//!
//! io_uring is Linux's: elsewhere the example says so and exits.

#[cfg(target_os = "linux")]
mod linux;

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("design_b: the design it measures is built on io_uring, which is Linux's");
}
