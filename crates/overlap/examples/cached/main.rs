//! 4 KiB reads from a file that is in the page cache: the engine's fast path
//! (`preadv2(RWF_NOWAIT)` on the caller's thread) against a plain `pread`
//! loop, interleaved in batches, with the layers between (the bare system
//! call, `read_cached_at`, `.wait()`, `.await` in `block_on`).
//! `cargo run --release -p overlapped --example cached -- FILE [reads per way] [way]`
//!
//! `preadv2(RWF_NOWAIT)` is Linux's: elsewhere the example says so and exits.

#[cfg(target_os = "linux")]
mod linux;

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("cached: it compares pread with Linux's preadv2(RWF_NOWAIT), which is Linux's");
}
