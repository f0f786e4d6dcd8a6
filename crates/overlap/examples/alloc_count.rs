//! Heap allocations per read at steady state, counted by a global allocator
//! that wraps the system's: the check of "zero heap allocations per read
//! on the port path". Counts, not times: the numbers
//! repeat on a busy machine.
//!
//! Four paths, each warmed up first, then `reads` reads counted:
//! - `port`: a completion port kept `depth` deep, buffers recycled
//!   (the `randread` example's loop);
//! - `block_on`: `depth` futures on the calling thread's ring, each a loop
//!   of reads (`overlapped::block_on` of a `join_all`);
//! - `wait`: `Op::wait`, one read at a time (the C ABI's `overlap_pread`);
//! - `wait-cached`: the same on a file in the page cache (the fast path).
//!
//! `cargo run --release -p overlapped --example alloc_count -- FILE [depth] [reads]`
//! (FILE: at least 1 MiB, read with O_DIRECT for the first three paths.)
#![allow(
    clippy::expect_used,
    reason = "a failed read ends the measurement: it says which and stops"
)]
use overlapped::{AlignedBufPool, Engine, OpenOptions, Port};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
/// While a counted run is on: every allocation calls [`counted_alloc`] (a
/// place for a debugger's breakpoint: `break alloc_count::counted_alloc`
/// shows where each allocation of the hot path comes from).
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[inline(never)]
fn counted_alloc(size: usize) {
    std::hint::black_box(size);
}

// SAFETY: every method forwards to `System` with the caller's arguments, so
// `System` upholds GlobalAlloc's contract; the counters have no effect on
// the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            counted_alloc(layout.size());
        }
        ALLOCS.fetch_add(1, Relaxed);
        ALLOC_BYTES.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded as is (see the impl's comment).
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc`/`realloc` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        ALLOC_BYTES.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        ALLOC_BYTES.fetch_add(new_size as u64, Relaxed);
        // SAFETY: forwarded as is; `ptr` and `layout` are the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes allocated (by every thread) while `f` runs.
fn counted(f: impl FnOnce()) -> (u64, u64) {
    let (a0, b0) = (ALLOCS.load(Relaxed), ALLOC_BYTES.load(Relaxed));
    COUNTING.store(true, Relaxed);
    f();
    COUNTING.store(false, Relaxed);
    (ALLOCS.load(Relaxed) - a0, ALLOC_BYTES.load(Relaxed) - b0)
}

struct Offsets {
    x: u64,
    blocks: u64,
}

impl Offsets {
    fn next(&mut self) -> u64 {
        self.x ^= self.x << 13;
        self.x ^= self.x >> 7;
        self.x ^= self.x << 17;
        (self.x % self.blocks) * 4096
    }
}

fn port_reads(
    port: &Port<overlapped::AlignedBuf>,
    file: &overlapped::File,
    pool: &AlignedBufPool,
    depth: usize,
    reads: u64,
    offs: &mut Offsets,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut submitted = 0u64;
    while submitted < depth as u64 && submitted < reads {
        port.read_at(file, pool.get(), offs.next(), submitted)
            .map_err(|(e, _)| e)?;
        submitted += 1;
    }
    while let Some(c) = port.next() {
        assert_eq!(c.result?, 4096);
        if submitted < reads {
            port.read_at(file, c.buf, offs.next(), submitted)
                .map_err(|(e, _)| e)?;
            submitted += 1;
        }
    }
    Ok(())
}

fn block_on_reads(file: &overlapped::File, pool: &AlignedBufPool, depth: usize, reads: u64) {
    let per = reads / depth as u64;
    overlapped::block_on(futures::future::join_all((0..depth as u64).map(|t| {
        let mut offs = Offsets {
            x: 0x9E37_79B9_7F4A_7C15 ^ (t + 1),
            blocks: (file_blocks(file)).max(1),
        };
        async move {
            let mut buf = pool.get();
            for _ in 0..per {
                let (res, b) = file.read_at(buf, offs.next()).await;
                assert_eq!(res.expect("a read"), 4096);
                buf = b;
            }
        }
    })));
}

fn wait_reads(file: &overlapped::File, pool: &AlignedBufPool, reads: u64, offs: &mut Offsets) {
    let mut buf = pool.get();
    for _ in 0..reads {
        let (res, b) = file.read_at(buf, offs.next()).wait();
        assert_eq!(res.expect("a read"), 4096);
        buf = b;
    }
}

fn file_blocks(file: &overlapped::File) -> u64 {
    file.stat_cached().map(|m| m.len / 4096).unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: alloc_count FILE [depth] [reads]")?;
    let depth: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(256);
    let reads: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let engine = Engine::new()?;
    let direct = OpenOptions::new()
        .read(true)
        .direct(true)
        .open(&engine, &path)
        .wait()?;
    let blocks = file_blocks(&direct);
    if blocks < 256 {
        return Err("FILE must hold at least 1 MiB".into());
    }
    let pool = AlignedBufPool::for_file(&direct, 4096, depth)?;
    let mut offs = Offsets {
        x: 0x9E37_79B9_7F4A_7C15,
        blocks,
    };
    println!(
        "driver {}, depth {depth}, {reads} reads counted per path after a warm-up",
        engine.driver().kind
    );
    let report = |name: &str, (a, b): (u64, u64), s0: overlapped::Stats, s1: overlapped::Stats| {
        println!(
            "{name:<12} allocs_per_read {:.4}  alloc_bytes_per_read {:.1}  submit_syscalls_per_read {:.4}",
            a as f64 / reads as f64,
            b as f64 / reads as f64,
            (s1.submit_syscalls - s0.submit_syscalls) as f64 / reads as f64,
        );
    };

    let port: Port<overlapped::AlignedBuf> = Port::new(&engine);
    port_reads(&port, &direct, &pool, depth, 20_000, &mut offs)?;
    let s0 = engine.stats();
    let mut res = Ok(());
    let c = counted(|| res = port_reads(&port, &direct, &pool, depth, reads, &mut offs));
    res?;
    report("port", c, s0, engine.stats());

    block_on_reads(&direct, &pool, depth, 20_000);
    let s0 = engine.stats();
    let c = counted(|| block_on_reads(&direct, &pool, depth, reads));
    report("block_on", c, s0, engine.stats());

    wait_reads(&direct, &pool, 2_000, &mut offs);
    let s0 = engine.stats();
    let c = counted(|| wait_reads(&direct, &pool, reads, &mut offs));
    report("wait", c, s0, engine.stats());

    // The first 1 MiB, read once into the page cache, then read again.
    let cached = OpenOptions::new().read(true).open(&engine, &path).wait()?;
    let mut small = Offsets {
        x: 0x9E37_79B9_7F4A_7C15,
        blocks: 256,
    };
    wait_reads(&cached, &pool, 2_000, &mut small);
    let s0 = engine.stats();
    let c = counted(|| wait_reads(&cached, &pool, reads, &mut small));
    report("wait-cached", c, s0, engine.stats());
    Ok(())
}
