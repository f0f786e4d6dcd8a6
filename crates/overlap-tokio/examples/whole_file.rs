//! Whole-file throughput, `tokio::fs` against `overlap_tokio::fs`, in one
//! run and interleaved (A B A B): `fs::read` of the file, and
//! `tokio::io::copy` from the file into a new file beside it (then
//! `sync_all`). The file is evicted from the page cache before every
//! measurement, as a cold read would find it.
//!
//! ```sh
//! cargo run --release -p overlap-tokio --example whole_file -- FILE [ROUNDS]
//! ```
//!
//! FILE is read, never written; the copy goes to `FILE.copy`, removed at
//! the end (it needs as much free space as FILE is large).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Writes back and drops the file's cached pages.
fn evict(path: &Path) -> std::io::Result<()> {
    let f = std::fs::File::open(path)?;
    f.sync_data()?;
    // SAFETY: a valid descriptor; no memory is passed.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Sys {
    Tokio,
    Overlap,
}

async fn read(sys: Sys, path: &Path) -> std::io::Result<usize> {
    Ok(match sys {
        Sys::Tokio => tokio::fs::read(path).await?.len(),
        Sys::Overlap => overlap_tokio::fs::read(path).await?.len(),
    })
}

async fn copy(sys: Sys, from: &Path, to: &Path) -> std::io::Result<u64> {
    Ok(match sys {
        Sys::Tokio => {
            let mut src = tokio::fs::File::open(from).await?;
            let mut dst = tokio::fs::File::create(to).await?;
            let n = tokio::io::copy(&mut src, &mut dst).await?;
            dst.sync_all().await?;
            n
        }
        Sys::Overlap => {
            let mut src = overlap_tokio::fs::File::open(from).await?;
            let mut dst = overlap_tokio::fs::File::create(to).await?;
            let n = tokio::io::copy(&mut src, &mut dst).await?;
            dst.sync_all().await?;
            n
        }
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().ok_or("usage: whole_file FILE [ROUNDS]")?);
    let rounds: usize = args.next().map_or(Ok(3), |r| r.parse())?;
    let copy_to = path.with_extension("copy");
    let len = std::fs::metadata(&path)?.len() as f64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut times: Vec<(&str, Sys, Duration)> = Vec::new();
    for round in 0..rounds {
        // Alternate which system goes first.
        let order = if round % 2 == 0 {
            [Sys::Tokio, Sys::Overlap]
        } else {
            [Sys::Overlap, Sys::Tokio]
        };
        for sys in order {
            evict(&path)?;
            let t = Instant::now();
            let n = rt.block_on(read(sys, &path))?;
            times.push(("read", sys, t.elapsed()));
            assert_eq!(n as f64, len, "fs::read returned the whole file");
            evict(&path)?;
            let t = Instant::now();
            let n = rt.block_on(copy(sys, &path, &copy_to))?;
            times.push(("copy", sys, t.elapsed()));
            assert_eq!(n as f64, len, "io::copy copied the whole file");
            std::fs::remove_file(&copy_to)?;
        }
    }
    println!(
        "{:<6} {:>12} {:>12} {:>8}",
        "op", "tokio MB/s", "overlap MB/s", "ratio"
    );
    for op in ["read", "copy"] {
        let median = |sys: Sys| {
            let mut v: Vec<f64> = times
                .iter()
                .filter(|(o, s, _)| *o == op && *s == sys)
                .map(|(_, _, d)| len / d.as_secs_f64() / 1e6)
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (t, o) = (median(Sys::Tokio), median(Sys::Overlap));
        println!("{op:<6} {t:>12.0} {o:>12.0} {:>7.2}x", o / t);
    }
    Ok(())
}
