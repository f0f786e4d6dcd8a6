//! The cached-read comparison on Linux (see `main.rs`).

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use overlapped::{Engine, File, OpenOptions};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The ways of reading 4 KiB of the page cache that are compared.
const WAYS: [&str; 5] = [
    "pread",
    "preadv2 RWF_NOWAIT",
    "File::read_cached_at",
    "File::read_at().wait()",
    "File::read_at().await",
];

/// The offsets of one batch: 4 KiB-aligned, uniformly random (xorshift).
fn offsets(seed: &mut u64, blocks: u64, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (*seed % blocks) * 4096
        })
        .collect()
}

/// One batch read the way `way` names; returns its time.
fn batch(way: usize, std_file: &std::fs::File, file: &File, offs: &[u64]) -> Result<Duration> {
    let mut buf = vec![0u8; 4096];
    let t0 = Instant::now();
    match way {
        0 => {
            for &o in offs {
                std_file.read_at(&mut buf, o)?;
            }
        }
        1 => bare_nowait(std_file, &mut buf, offs)?,
        2 => {
            for &o in offs {
                if file.read_cached_at(&mut buf, o)?.is_none() {
                    std_file.read_at(&mut buf, o)?;
                }
            }
        }
        3 => {
            for &o in offs {
                let (res, back) = file.read_at(buf, o).wait();
                res?;
                buf = back;
            }
        }
        _ => overlapped::block_on(async {
            for &o in offs {
                let (res, back) = file.read_at(buf, o).await;
                res?;
                buf = back;
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        })?,
    }
    Ok(t0.elapsed())
}

/// The floor: the fast path's system call alone.
fn bare_nowait(std_file: &std::fs::File, buf: &mut [u8], offs: &[u64]) -> Result<()> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(std_file);
    for &o in offs {
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: iov describes `buf`, valid for its length.
        let r = unsafe { libc::preadv2(fd, &iov, 1, o as i64, libc::RWF_NOWAIT) };
        if r != buf.len() as isize {
            // Evicted meanwhile (EAGAIN): read it the blocking way.
            std_file.read_at(buf, o)?;
        }
    }
    Ok(())
}

pub fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: cached FILE [reads per way] [way, 0-4: only that one, for a profile]")?;
    let reads: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2_000_000);
    let only: Option<usize> = args.next().map(|s| s.parse()).transpose()?;
    let std_file = std::fs::File::open(&path)?;
    let len = std_file.metadata()?.len().min(256 << 20);
    let blocks = len / 4096;
    let mut buf = vec![0u8; 4096];
    for b in 0..blocks {
        std_file.read_at(&mut buf, b * 4096)?; // warm the cache
    }
    let engine = Engine::new()?;
    let file = OpenOptions::new().read(true).open(&engine, &path).wait()?;
    // Interleaved in batches of 20,000 (A B C D E A B ...), each way
    // reading the same offsets in its turn: the machine's drift falls on
    // all alike.
    const BATCH: usize = 20_000;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
    for _ in 0..reads.div_ceil(BATCH) {
        let offs = offsets(&mut seed, blocks, BATCH);
        for (way, v) in ns.iter_mut().enumerate() {
            if only.is_some_and(|o| o != way) {
                continue;
            }
            let t = batch(way, &std_file, &file, &offs)?;
            v.push(t.as_nanos() as f64 / BATCH as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    if let Some(o) = only {
        let m = median(&mut ns[o]);
        println!("{:<24} {m:7.1} ns per read (median)", WAYS[o]);
        return Ok(());
    }
    let pread = median(&mut ns[0].clone());
    for (way, v) in ns.iter_mut().enumerate() {
        let m = median(v);
        println!(
            "{:<24} {m:7.1} ns per read (median of {} batches), {:.3}x pread's reads/s",
            WAYS[way],
            v.len(),
            pread / m
        );
    }
    println!("{:?}", engine.stats());
    Ok(())
}
