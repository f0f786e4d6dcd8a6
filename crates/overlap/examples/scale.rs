//! Independent requesters, each with one random 4 KiB O_DIRECT read in
//! flight, as tokio tasks on a multi-thread runtime (one worker per core):
//! does throughput stay flat from 4 to 1024 requesters?
//!
//! `cargo run --release -p overlapped --example scale -- FILE [reads_per_level]`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an example: a failure ends it, with its message"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use overlapped::{AlignedBufPool, Engine, OpenOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: scale FILE [reads_per_level]")?;
    let per_level: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let engine = Engine::new()?;
    let file = OpenOptions::new()
        .read(true)
        .direct(true)
        .open(&engine, &path)
        .wait()?;
    let blocks = file.metadata().wait()?.len / 4096;
    for level in [4usize, 16, 64, 256, 1024] {
        let pool = AlignedBufPool::for_file(&file, 4096, level)?;
        let left = Arc::new(AtomicU64::new(per_level));
        let t0 = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..level)
                .map(|i| {
                    let (file, pool, left) = (file.clone(), pool.clone(), left.clone());
                    tokio::spawn(async move {
                        let mut x = 0x9E37_79B9_7F4A_7C15u64
                            ^ (i as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
                        let mut buf = pool.get();
                        while left.fetch_sub(1, Ordering::Relaxed) as i64 > 0 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let (res, b) = file.read_at(buf, (x % blocks) * 4096).await;
                            res.expect("read");
                            buf = b;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        println!("{} requesters: {:.0} IOPS", level, per_level as f64 / secs);
    }
    println!("{:?}", engine.stats());
    Ok(())
}
