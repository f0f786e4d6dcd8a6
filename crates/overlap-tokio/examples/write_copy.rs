//! Writes and copies, `tokio::fs` against `overlapped_tokio::fs`, interleaved
//! (each round runs every workload once per system, the first system
//! alternating between rounds): the writes table of BENCHMARKS.md.
//!
//! | workload | what |
//! | --- | --- |
//! | `io::copy warm` | `tokio::io::copy` (its 8 KiB buffer) from a file in the page cache into a new file |
//! | `io::copy cold` | the same, the source evicted from the page cache first |
//! | `BufWriter 8K` | SIZE bytes in 256-byte records through a `tokio::io::BufWriter` of 8 KiB |
//! | `BufWriter 64K` | the same through a `BufWriter` of 64 KiB |
//! | `fs::copy warm` | `fs::copy` of the cached source |
//! | `tree copy cold` | `read_dir`, `create_dir_all` and `fs::copy` of a tree of TREE_FILES small files (1-16 KiB, 30 directories), evicted first |
//!
//! Each writing workload ends when the writer is flushed (the data is in
//! the page cache; no `fsync`), and the file written is removed before the
//! next measurement (outside the timing).
//!
//! ```sh
//! cargo run --release -p overlapped-tokio --example write_copy -- DIR [SIZE_MIB] [ROUNDS] [TREE_FILES]
//! ```
//!
//! DIR is a directory on the disk to measure (files named `wc-*` are made
//! there and removed at the end); SIZE_MIB the source and written size
//! (default 8), ROUNDS (default 3), TREE_FILES (default 300). BENCHMARKS.md's
//! table: `DIR 1024 5 3000` for the copies, `DIR 512` for the BufWriter
//! rows. `WC_WORKS` (a comma-separated list of the workload names above,
//! e.g. `WC_WORKS="fs::copy warm,tree copy cold"`) runs only those. Prints
//! the median of each system, the ratio of the medians tokio / overlap
//! (above 1: overlap is faster) and the median of the per-round ratios
//! with their range (each round's pair ran back to back).

#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Writes back and drops the file's cached pages.
fn evict(path: &Path) -> std::io::Result<()> {
    let f = std::fs::File::open(path)?;
    f.sync_data()?;
    // The measurement of uncached reads is Linux's (page cache eviction by
    // advice); elsewhere the file stays cached.
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a valid descriptor; no memory is passed.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
    }
    Ok(())
}

fn evict_tree(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            evict_tree(&e.path())?;
        } else {
            evict(&e.path())?;
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Sys {
    Tokio,
    Overlap,
}

impl Sys {
    fn name(self) -> &'static str {
        match self {
            Sys::Tokio => "tokio::fs",
            Sys::Overlap => "overlapped_tokio::fs",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Work {
    IoCopyWarm,
    IoCopyCold,
    BufWriter8K,
    BufWriter64K,
    FsCopyWarm,
    TreeCopyCold,
}

const WORKS: [Work; 6] = [
    Work::IoCopyWarm,
    Work::IoCopyCold,
    Work::BufWriter8K,
    Work::BufWriter64K,
    Work::FsCopyWarm,
    Work::TreeCopyCold,
];

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::IoCopyWarm => "io::copy 8K warm",
            Work::IoCopyCold => "io::copy 8K cold",
            Work::BufWriter8K => "BufWriter 8K",
            Work::BufWriter64K => "BufWriter 64K",
            Work::FsCopyWarm => "fs::copy warm",
            Work::TreeCopyCold => "tree copy cold",
        }
    }
}

type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

async fn open(sys: Sys, p: &Path) -> std::io::Result<Reader> {
    Ok(match sys {
        Sys::Tokio => Box::new(tokio::fs::File::open(p).await?),
        Sys::Overlap => Box::new(overlapped_tokio::fs::File::open(p).await?),
    })
}

async fn create(sys: Sys, p: &Path) -> std::io::Result<Writer> {
    Ok(match sys {
        Sys::Tokio => Box::new(tokio::fs::File::create(p).await?),
        Sys::Overlap => Box::new(overlapped_tokio::fs::File::create(p).await?),
    })
}

async fn fs_copy(sys: Sys, from: &Path, to: &Path) -> std::io::Result<u64> {
    match sys {
        Sys::Tokio => tokio::fs::copy(from, to).await,
        Sys::Overlap => overlapped_tokio::fs::copy(from, to).await,
    }
}

async fn create_dir_all(sys: Sys, p: &Path) -> std::io::Result<()> {
    match sys {
        Sys::Tokio => tokio::fs::create_dir_all(p).await,
        Sys::Overlap => overlapped_tokio::fs::create_dir_all(p).await,
    }
}

/// The entries of `dir`: (path, is a directory).
async fn list(sys: Sys, dir: &Path) -> std::io::Result<Vec<(PathBuf, bool)>> {
    let mut out = Vec::new();
    match sys {
        Sys::Tokio => {
            let mut rd = tokio::fs::read_dir(dir).await?;
            while let Some(e) = rd.next_entry().await? {
                out.push((e.path(), e.file_type().await?.is_dir()));
            }
        }
        Sys::Overlap => {
            let mut rd = overlapped_tokio::fs::read_dir(dir).await?;
            while let Some(e) = rd.next_entry().await? {
                out.push((e.path(), e.file_type().await?.is_dir()));
            }
        }
    }
    Ok(out)
}

/// Copies the tree `from` to `to`, one file after another (as a simple
/// tool would); returns the files copied.
async fn copy_tree(sys: Sys, from: &Path, to: &Path) -> std::io::Result<usize> {
    let mut files = 0;
    let mut todo = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = todo.pop() {
        create_dir_all(sys, &dst).await?;
        for (p, is_dir) in list(sys, &src).await? {
            let target = dst.join(p.file_name().unwrap_or_default());
            if is_dir {
                todo.push((p, target));
            } else {
                fs_copy(sys, &p, &target).await?;
                files += 1;
            }
        }
    }
    Ok(files)
}

struct Setup {
    src: PathBuf,
    out: PathBuf,
    tree: PathBuf,
    tree_out: PathBuf,
    size: usize,
}

async fn run(sys: Sys, work: Work, s: &Setup) -> std::io::Result<Duration> {
    match work {
        Work::IoCopyWarm | Work::FsCopyWarm => {
            // Warm: read once, so that it is cached.
            std::fs::read(&s.src)?;
        }
        Work::IoCopyCold => evict(&s.src)?,
        Work::TreeCopyCold => evict_tree(&s.tree)?,
        Work::BufWriter8K | Work::BufWriter64K => {}
    }
    let t = Instant::now();
    let bytes = match work {
        Work::IoCopyWarm | Work::IoCopyCold => {
            let mut r = open(sys, &s.src).await?;
            let mut w = create(sys, &s.out).await?;
            let n = tokio::io::copy(&mut r, &mut w).await?;
            w.flush().await?;
            n as usize
        }
        Work::BufWriter8K | Work::BufWriter64K => {
            let cap = if work == Work::BufWriter8K {
                8 << 10
            } else {
                64 << 10
            };
            let mut w = tokio::io::BufWriter::with_capacity(cap, create(sys, &s.out).await?);
            let record = [b'r'; 256];
            let mut n = 0;
            while n < s.size {
                w.write_all(&record).await?;
                n += record.len();
            }
            w.flush().await?;
            n
        }
        Work::FsCopyWarm => fs_copy(sys, &s.src, &s.out).await? as usize,
        Work::TreeCopyCold => copy_tree(sys, &s.tree, &s.tree_out).await?,
    };
    let took = t.elapsed();
    // Checked, then removed outside the timing.
    match work {
        Work::TreeCopyCold => std::fs::remove_dir_all(&s.tree_out)?,
        _ => {
            let len = std::fs::metadata(&s.out)?.len() as usize;
            if len != bytes
                || (work != Work::BufWriter8K && work != Work::BufWriter64K && len != s.size)
            {
                return Err(std::io::Error::other(format!(
                    "{} by {}: wrote {len} bytes, expected {bytes}",
                    work.name(),
                    sys.name()
                )));
            }
            std::fs::remove_file(&s.out)?;
        }
    }
    Ok(took)
}

fn make_tree(root: &Path, files: usize) -> std::io::Result<()> {
    for i in 0..files {
        let d = root.join(format!("d{:02}", i % 30));
        std::fs::create_dir_all(&d)?;
        let len = 1024 + (i * 7919) % (15 * 1024);
        std::fs::write(d.join(format!("f{i:05}")), vec![(i % 251) as u8; len])?;
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: write_copy DIR [SIZE_MIB] [ROUNDS] [TREE_FILES]")?,
    );
    let size_mib: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let tree_files: usize = args.next().map_or(Ok(300), |a| a.parse())?;
    if rounds == 0 {
        return Err("ROUNDS must be at least 1".into());
    }
    let s = Setup {
        src: dir.join("wc-src"),
        out: dir.join("wc-out"),
        tree: dir.join("wc-tree"),
        tree_out: dir.join("wc-tree-out"),
        size: size_mib << 20,
    };
    let src: Vec<u8> = (0..s.size).map(|i| (i % 251) as u8).collect();
    std::fs::write(&s.src, &src)?;
    drop(src);
    let _ = std::fs::remove_dir_all(&s.tree);
    make_tree(&s.tree, tree_files)?;
    let works: Vec<Work> = match std::env::var("WC_WORKS") {
        Ok(list) => {
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            for n in &names {
                if !WORKS.iter().any(|w| w.name() == *n) {
                    return Err(format!("WC_WORKS: no workload named {n:?}").into());
                }
            }
            WORKS
                .into_iter()
                .filter(|w| names.contains(&w.name()))
                .collect()
        }
        Err(_) => WORKS.to_vec(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let mut times: Vec<(Work, Sys, Duration)> = Vec::new();
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [Sys::Tokio, Sys::Overlap]
            } else {
                [Sys::Overlap, Sys::Tokio]
            };
            for &work in &works {
                for sys in order {
                    let took = run(sys, work, &s).await?;
                    eprintln!(
                        "round {round}: {:<17} {:<18} {:.3} s",
                        work.name(),
                        sys.name(),
                        took.as_secs_f64()
                    );
                    times.push((work, sys, took));
                }
            }
        }
        Ok::<_, std::io::Error>(times)
    });
    let _ = std::fs::remove_file(&s.src);
    let _ = std::fs::remove_file(&s.out);
    let _ = std::fs::remove_dir_all(&s.tree);
    let _ = std::fs::remove_dir_all(&s.tree_out);
    let times = result?;
    println!(
        "{} MiB, {} files in the tree, {} rounds, medians:",
        size_mib, tree_files, rounds
    );
    println!(
        "| workload | tokio::fs | overlapped_tokio::fs | tokio / overlap | per round: median (range) |\n| --- | --- | --- | --- | --- |"
    );
    for &work in &works {
        let of = |sys| {
            median(
                times
                    .iter()
                    .filter(|(w, s, _)| *w == work && *s == sys)
                    .map(|t| t.2)
                    .collect(),
            )
        };
        let (t, o) = (of(Sys::Tokio), of(Sys::Overlap));
        let of_round = |sys| {
            times
                .iter()
                .filter(move |(w, s, _)| *w == work && *s == sys)
                .map(|t| t.2.as_secs_f64())
        };
        let mut ratios: Vec<f64> = of_round(Sys::Tokio)
            .zip(of_round(Sys::Overlap))
            .map(|(t, o)| t / o.max(1e-9))
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "| {} | {:.3} s | {:.3} s | {:.2}x | {:.2}x ({:.2}-{:.2}) |",
            work.name(),
            t.as_secs_f64(),
            o.as_secs_f64(),
            t.as_secs_f64() / o.as_secs_f64().max(1e-9),
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
    Ok(())
}
