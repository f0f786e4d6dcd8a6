//! The cached-read comparison on Linux (see `main.rs`).

use std::os::unix::fs::FileExt;
use std::time::Instant;

use overlapped::{Engine, OpenOptions};

pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: cached FILE [reads]")?;
    let reads: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let std_file = std::fs::File::open(&path)?;
    let len = std_file.metadata()?.len().min(256 << 20);
    let blocks = len / 4096;
    let mut buf = vec![0u8; 4096];
    for b in 0..blocks {
        std_file.read_at(&mut buf, b * 4096)?; // warm the cache
    }
    let engine = Engine::new()?;
    let file = OpenOptions::new().read(true).open(&engine, &path).wait()?;
    for round in 0..3 {
        let t0 = Instant::now();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..reads {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            std_file.read_at(&mut buf, (x % blocks) * 4096)?;
        }
        let pread_s = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut b = vec![0u8; 4096];
        for _ in 0..reads {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (res, back) = file.read_at(b, (x % blocks) * 4096).wait();
            res?;
            b = back;
        }
        let engine_s = t0.elapsed().as_secs_f64();
        // The floor: the fast path's system call alone.
        let t0 = Instant::now();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&std_file);
        for _ in 0..reads {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: 4096,
            };
            // SAFETY: iov describes `buf`, valid for 4096 bytes.
            let r = unsafe {
                libc::preadv2(fd, &iov, 1, ((x % blocks) * 4096) as i64, libc::RWF_NOWAIT)
            };
            if r != 4096 {
                // Evicted meanwhile (EAGAIN): read it the blocking way.
                std_file.read_at(&mut buf, (x % blocks) * 4096)?;
            }
        }
        let nowait_s = t0.elapsed().as_secs_f64();
        println!(
            "round {round}: pread {:.0} reads/s, overlap {:.0} reads/s, ratio {:.3} \
             (bare preadv2 RWF_NOWAIT: {:.0} reads/s, ratio {:.3})",
            reads as f64 / pread_s,
            reads as f64 / engine_s,
            pread_s / engine_s,
            reads as f64 / nowait_s,
            pread_s / nowait_s
        );
    }
    println!("{:?}", engine.stats());
    Ok(())
}
