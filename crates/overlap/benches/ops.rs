//! Per-operation cost of submit + complete through the engine: a cached
//! 4 KiB buffered read (page-cache fast path on and off) and a minimal
//! operation (a 1-byte read at end of file, which the kernel answers with 0
//! bytes at once), from 1 caller and from 4 callers.
//!
//! `cargo bench -p overlapped --bench ops` (a few seconds per case). For 4
//! callers the time shown is the wall time divided by all the callers'
//! operations, i.e. the cost of one operation at that parallelism.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark: a panic ends the run, with its message"
)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use overlapped::{DriverChoice, Engine, File, OpenOptions};

const FILE_LEN: usize = 1 << 20;
const BS: usize = 4096;

struct Setup {
    _dir: tempfile::TempDir,
    engines: Vec<(String, Engine, File)>,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let path = dir.path().join("data");
    let data: Vec<u8> = (0..FILE_LEN).map(|i| (i % 251 + 1) as u8).collect();
    std::fs::write(&path, &data).expect("write data file");
    // Read it once so that every page is cached.
    let back = std::fs::read(&path).expect("read data file");
    assert_eq!(back.len(), FILE_LEN);
    let mut engines = Vec::new();
    for (driver, dname) in [(DriverChoice::Uring, "uring"), (DriverChoice::Pool, "pool")] {
        for fast in [true, false] {
            let engine = match Engine::builder()
                .driver(driver)
                .cache_fast_path(fast)
                .build()
            {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("SKIPPED: {dname} engine unavailable: {e}");
                    continue;
                }
            };
            let file = OpenOptions::new()
                .read(true)
                .open(&engine, &path)
                .wait()
                .expect("open data file");
            let name = format!("{dname}/fast_path_{}", if fast { "on" } else { "off" });
            engines.push((name, engine, file));
        }
    }
    Setup { _dir: dir, engines }
}

/// One operation: `read` a cached 4 KiB block, or `eof` a 1-byte read at
/// end of file.
fn one(file: &File, kind: &str, i: u64, buf: Vec<u8>) -> Vec<u8> {
    let (res, buf) = if kind == "eof" {
        file.read_at(buf, FILE_LEN as u64).wait()
    } else {
        let off = (i % (FILE_LEN / BS) as u64) * BS as u64;
        file.read_at(buf, off).wait()
    };
    black_box(res.expect("read"));
    buf
}

fn bench(c: &mut Criterion) {
    let s = setup();
    for kind in ["read", "eof"] {
        let mut g = c.benchmark_group(format!("submit_complete/{kind}"));
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .sample_size(20);
        for (name, _engine, file) in &s.engines {
            // The fast path only concerns cached reads; at EOF it answers too,
            // so both settings are kept to show the driver round trip.
            let len = if kind == "eof" { 1 } else { BS };
            g.bench_function(format!("{name}/1_caller"), |b| {
                let mut buf = vec![0u8; len];
                let mut i = 0u64;
                b.iter(|| {
                    buf = one(file, kind, i, std::mem::take(&mut buf));
                    i += 1;
                })
            });
            g.bench_function(format!("{name}/4_callers"), |b| {
                b.iter_custom(|iters| {
                    let gate = Arc::new(Barrier::new(5));
                    let handles: Vec<_> = (0..4u64)
                        .map(|t| {
                            let file = file.clone();
                            let gate = gate.clone();
                            std::thread::spawn(move || {
                                let mut buf = vec![0u8; len];
                                gate.wait();
                                for i in 0..iters {
                                    buf = one(&file, kind, i * 4 + t, buf);
                                }
                            })
                        })
                        .collect();
                    gate.wait();
                    let t0 = Instant::now();
                    for h in handles {
                        h.join().expect("caller thread");
                    }
                    t0.elapsed() / 4
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
