//! Whole-file and streamed reads, `tokio::fs` against `overlapped_tokio::fs`,
//! in one program and interleaved (each round runs every measurement once
//! per system, the first system alternating between rounds).
//!
//! | workload | what each of the C tasks does, file after file |
//! | --- | --- |
//! | `fs::read` | `fs::read` of the whole file |
//! | `read_to_end` | `File::open`, then `read_to_end` into a new `Vec` |
//! | `ReaderStream` | `File::open`, then `tokio_util::io::ReaderStream::new(file)` (4 KiB chunks) consumed to the end, counting bytes: what tower-http and axum file servers do |
//!
//! Each row is one workload at one file size, cache state and task count
//! C. The C tasks take file indices from a shared counter until the
//! measurement's reads are done; the time is from spawning them to the
//! last one's end. The cache states:
//!
//! - `cached`: every file of the set is read once (with `std::fs`) right
//!   before the measurement, so all of it is in the page cache;
//! - `evicted`: every file of the set is dropped from the page cache
//!   (`POSIX_FADV_DONTNEED`) right before the measurement.
//!
//! Both happen outside the timing. Each size has a set of files
//! (`wf-<size>-<n>` in DIR, made once, removed at the end) of
//! min(FILES, TOTAL_MIB / size) files, at least one; a measurement reads
//! each of them once, or, where there are fewer files than tasks and
//! TOTAL_MIB leaves room, C reads over the files round-robin (evicted, a
//! file read twice is cached the second time). So a measurement reads at
//! most TOTAL_MIB (or one file) and at 16 MiB with the defaults 16 files:
//! tasks past the `reads` column have nothing to do. Each read is checked:
//! its length, and its first and last 8 bytes, which encode the file's
//! index and size.
//!
//! ```sh
//! cargo run --release -p overlapped-tokio --example whole_file -- DIR [ROUNDS] [SIZES] [TASKS] [CACHE] [--json] [--total-mib N] [--files N]
//! # the defaults:
//! cargo run --release -p overlapped-tokio --example whole_file -- DIR 3 4k,64k,1m,16m 1,4,16,64,256,1024 cached,evicted
//! ```
//!
//! DIR is a directory on the disk to measure (not a tmpfs: eviction means
//! nothing there). SIZES take a `k`, `m` or `g` suffix (binary units).
//! `--total-mib` bounds each measurement's data (default 256), `--files`
//! each size's file count (default 4096, at least the largest C). One
//! multi-thread runtime per system (the default worker count, one per CPU),
//! built once; each system runs on its own.
//!
//! Prints per row the median MB/s (1 MB = 10^6 bytes) and files/s of each
//! system and the ratio overlap / tokio (above 1: overlap is faster); per
//! system the process CPU time (user + system, from `getrusage`, so the
//! kernel's side of the reads and any kernel io_uring workers included)
//! per MB read over all rounds, and the threads of that system at the end
//! of the measurement (the largest over the rounds: the main thread, its
//! runtime's workers and blocking threads, and for overlap the engine's
//! threads and the kernel's io_uring workers). The runtimes live through
//! the whole run, as a server's would, so an idle blocking thread stays
//! for tokio's keep-alive (10 s) and a row's count can include threads the
//! rows before it made. `--json` also prints one JSON line per
//! measurement on stdout (the lines starting with `{`). A quick check:
//! `DIR 1 4k,1m 1,4 cached,evicted --total-mib 16`.

use std::error::Error;
use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};

const USAGE: &str =
    "usage: whole_file DIR [ROUNDS] [SIZES] [TASKS] [CACHE] [--json] [--total-mib N] [--files N]
  e.g. whole_file DIR 3 4k,64k,1m,16m 1,4,16,64,256,1024 cached,evicted";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Sys {
    Tokio,
    Overlap,
}

const SYSTEMS: [Sys; 2] = [Sys::Tokio, Sys::Overlap];

impl Sys {
    fn name(self) -> &'static str {
        match self {
            Sys::Tokio => "tokio::fs",
            Sys::Overlap => "overlapped_tokio::fs",
        }
    }

    fn index(self) -> usize {
        match self {
            Sys::Tokio => 0,
            Sys::Overlap => 1,
        }
    }

    /// Its runtime's thread name (at most 15 bytes, the kernel's limit).
    fn thread_name(self) -> &'static str {
        match self {
            Sys::Tokio => "wf-rt-tokio",
            Sys::Overlap => "wf-rt-overlap",
        }
    }

    /// Whether a thread of this name is the other system's.
    fn is_others(self, comm: &str) -> bool {
        match self {
            Sys::Tokio => {
                comm.starts_with(Sys::Overlap.thread_name())
                    || comm.starts_with("overlap-")
                    || comm.starts_with("iou-")
            }
            Sys::Overlap => comm.starts_with(Sys::Tokio.thread_name()),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Work {
    FsRead,
    ReadToEnd,
    ReaderStream,
}

const WORKS: [Work; 3] = [Work::FsRead, Work::ReadToEnd, Work::ReaderStream];

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::FsRead => "fs::read",
            Work::ReadToEnd => "read_to_end",
            Work::ReaderStream => "ReaderStream",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Cache {
    Cached,
    Evicted,
}

impl Cache {
    fn name(self) -> &'static str {
        match self {
            Cache::Cached => "cached",
            Cache::Evicted => "evicted",
        }
    }
}

struct Config {
    dir: PathBuf,
    rounds: usize,
    sizes: Vec<usize>,
    tasks: Vec<usize>,
    caches: Vec<Cache>,
    json: bool,
    total: usize,
    files: usize,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("bad size {s:?} (e.g. 4k, 64k, 1m, 16m)"))?;
    let size = n
        .checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| format!("size {s:?} is too large"))?;
    if size < 16 {
        return Err(format!(
            "size {s:?}: at least 16 bytes (each file's first and last 8 bytes are checked)"
        ));
    }
    Ok(size)
}

fn size_label(size: usize) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
        if size >= 1 << shift && size % (1 << shift) == 0 {
            return format!("{}{unit}", size >> shift);
        }
    }
    format!("{size}B")
}

fn parse_list<T>(
    s: &str,
    what: &str,
    one: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let v = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(one)
        .collect::<Result<Vec<T>, String>>()?;
    if v.is_empty() {
        return Err(format!("no {what} in {s:?}"));
    }
    Ok(v)
}

fn parse_count(s: &str, what: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("bad {what} {s:?} (a positive integer)")),
    }
}

impl Config {
    /// The arguments; `None` after `--help` (the usage printed).
    fn parse() -> Result<Option<Config>, String> {
        let mut positional = Vec::new();
        let mut json = false;
        let mut total_mib = 256;
        let mut files = None;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let (flag, inline) = match a.split_once('=') {
                Some((f, v)) if a.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (a.clone(), None),
            };
            let mut value = |name: &str| {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                "-h" | "--help" => {
                    println!("{USAGE}");
                    return Ok(None);
                }
                "--json" => json = true,
                "--total-mib" => total_mib = parse_count(&value("--total-mib")?, "--total-mib")?,
                "--files" => files = Some(parse_count(&value("--files")?, "--files")?),
                f if f.starts_with("--") => return Err(format!("unknown option {f}\n{USAGE}")),
                _ => positional.push(a),
            }
        }
        if positional.len() > 5 {
            return Err(format!("too many arguments\n{USAGE}"));
        }
        let mut positional = positional.into_iter();
        let dir = PathBuf::from(positional.next().ok_or(USAGE)?);
        let rounds = positional
            .next()
            .map_or(Ok(3), |a| parse_count(&a, "ROUNDS"))?;
        let sizes = parse_list(
            &positional
                .next()
                .unwrap_or_else(|| "4k,64k,1m,16m".to_string()),
            "sizes",
            parse_size,
        )?;
        let tasks = parse_list(
            &positional
                .next()
                .unwrap_or_else(|| "1,4,16,64,256,1024".to_string()),
            "task counts",
            |s| parse_count(s, "task count"),
        )?;
        let caches = parse_list(
            &positional
                .next()
                .unwrap_or_else(|| "cached,evicted".to_string()),
            "cache states",
            |s| match s.trim() {
                "cached" | "warm" => Ok(Cache::Cached),
                "evicted" | "cold" => Ok(Cache::Evicted),
                _ => Err(format!("bad cache state {s:?} (cached or evicted)")),
            },
        )?;
        let most_tasks = tasks.iter().copied().max().unwrap_or(1);
        let total = total_mib
            .checked_mul(1 << 20)
            .ok_or("--total-mib is too large")?;
        Ok(Some(Config {
            dir,
            rounds,
            sizes,
            tasks,
            caches,
            json,
            total,
            files: files.unwrap_or(4096.max(most_tasks)),
        }))
    }
}

/// The files of one size; file `k` begins with `head(k)` and ends with
/// `tail(k, size)`.
struct FileSet {
    size: usize,
    paths: Vec<PathBuf>,
}

impl FileSet {
    /// The reads of a measurement with `tasks` tasks: each file once, or
    /// `tasks` reads round-robin where there are fewer files than tasks
    /// and `total` leaves room.
    fn reads(&self, tasks: usize, total: usize) -> usize {
        let fit = (total / self.size).max(1);
        self.paths.len().max(tasks.min(fit))
    }
}

fn head(k: usize) -> [u8; 8] {
    (k as u64).to_le_bytes()
}

fn tail(k: usize, size: usize) -> [u8; 8] {
    ((k as u64) ^ ((size as u64) << 20) ^ 0x5746_0000_0000_0000).to_le_bytes()
}

/// Removes the files it was given when dropped (at the end, or on an
/// error or panic).
#[derive(Default)]
struct Cleanup {
    paths: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn make_set(dir: &Path, size: usize, count: usize, cleanup: &mut Cleanup) -> io::Result<FileSet> {
    let mut buf: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let mut paths = Vec::with_capacity(count);
    for k in 0..count {
        let p = dir.join(format!(
            "wf-{}-{k:05}",
            size_label(size).to_ascii_lowercase()
        ));
        cleanup.paths.push(p.clone());
        buf[..8].copy_from_slice(&head(k));
        buf[size - 8..].copy_from_slice(&tail(k, size));
        std::fs::write(&p, &buf)
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", p.display())))?;
        paths.push(p);
    }
    Ok(FileSet { size, paths })
}

/// Writes back what is dirty on DIR's file system (once, after the files
/// are made, so that eviction need not and no writeback runs later).
fn syncfs(dir: &Path) -> io::Result<()> {
    let d = std::fs::File::open(dir)?;
    // SAFETY: a valid descriptor.
    #[cfg(target_os = "linux")]
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[cfg(not(target_os = "linux"))]
    drop(d);
    Ok(())
}

/// Writes back and drops the file's cached pages.
fn evict(path: &Path) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    f.sync_data()?;
    // The measurement of uncached reads is Linux's (page cache eviction by
    // advice); elsewhere the file stays cached.
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a valid descriptor; no memory is passed.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
    }
    Ok(())
}

/// Reads every file of the set once, so that it is in the page cache.
fn warm(set: &FileSet) -> io::Result<()> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(set.size + 1);
    for p in &set.paths {
        buf.clear();
        std::fs::File::open(p)?.read_to_end(&mut buf)?;
    }
    Ok(())
}

/// What a read returned: its length, first and last 8 bytes.
#[derive(Default)]
struct Seen {
    len: usize,
    head: [u8; 8],
    tail: [u8; 8],
}

impl Seen {
    fn of(data: &[u8]) -> Seen {
        let mut s = Seen::default();
        s.add(data);
        s
    }

    fn add(&mut self, chunk: &[u8]) {
        if self.len < 8 {
            let n = (8 - self.len).min(chunk.len());
            self.head[self.len..self.len + n].copy_from_slice(&chunk[..n]);
        }
        if chunk.len() >= 8 {
            self.tail.copy_from_slice(&chunk[chunk.len() - 8..]);
        } else {
            self.tail.rotate_left(chunk.len());
            self.tail[8 - chunk.len()..].copy_from_slice(chunk);
        }
        self.len += chunk.len();
    }

    fn check(&self, k: usize, size: usize) -> Result<(), String> {
        if self.len != size {
            return Err(format!("{} bytes, expected {size}", self.len));
        }
        if self.head != head(k) || self.tail != tail(k, size) {
            return Err(format!(
                "wrong content: first bytes {:02x?}, last {:02x?}, expected {:02x?} and {:02x?}",
                self.head,
                self.tail,
                head(k),
                tail(k, size)
            ));
        }
        Ok(())
    }
}

async fn stream<R: AsyncRead + Unpin>(file: R) -> io::Result<Seen> {
    let mut s = tokio_util::io::ReaderStream::new(file);
    let mut seen = Seen::default();
    while let Some(chunk) = s.next().await {
        seen.add(&chunk?);
    }
    Ok(seen)
}

async fn read_to_end<R: AsyncRead + Unpin>(mut file: R) -> io::Result<Seen> {
    let mut v = Vec::new();
    file.read_to_end(&mut v).await?;
    Ok(Seen::of(&v))
}

async fn read_one(sys: Sys, work: Work, p: &Path) -> io::Result<Seen> {
    match (work, sys) {
        (Work::FsRead, Sys::Tokio) => Ok(Seen::of(&tokio::fs::read(p).await?)),
        (Work::FsRead, Sys::Overlap) => Ok(Seen::of(&overlapped_tokio::fs::read(p).await?)),
        (Work::ReadToEnd, Sys::Tokio) => read_to_end(tokio::fs::File::open(p).await?).await,
        (Work::ReadToEnd, Sys::Overlap) => {
            read_to_end(overlapped_tokio::fs::File::open(p).await?).await
        }
        (Work::ReaderStream, Sys::Tokio) => stream(tokio::fs::File::open(p).await?).await,
        (Work::ReaderStream, Sys::Overlap) => {
            stream(overlapped_tokio::fs::File::open(p).await?).await
        }
    }
}

/// One task: reads files until `reads` are taken; returns the bytes read.
async fn task(
    sys: Sys,
    work: Work,
    set: Arc<FileSet>,
    next: Arc<AtomicUsize>,
    reads: usize,
) -> io::Result<usize> {
    let mut bytes = 0;
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= reads {
            return Ok(bytes);
        }
        let k = i % set.paths.len();
        let p = &set.paths[k];
        let seen = read_one(sys, work, p)
            .await
            .and_then(|s| s.check(k, set.size).map(|()| s).map_err(io::Error::other))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{} by {}: {}: {e}", work.name(), sys.name(), p.display()),
                )
            })?;
        bytes += seen.len;
    }
}

/// The process's user + system CPU time: not measured off Linux (0).
#[cfg(not(target_os = "linux"))]
fn cpu_time() -> Duration {
    Duration::ZERO
}

/// The process's user + system CPU time.
#[cfg(target_os = "linux")]
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The process's threads, less those of the other system's.
fn threads_of(sys: Sys) -> usize {
    // `/proc` is Linux's: elsewhere the count is 0.
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| !sys.is_others(comm.trim_end()))
        .count()
}

struct Measured {
    took: Duration,
    cpu: Duration,
    bytes: usize,
    reads: usize,
    threads: usize,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    sys: Sys,
    work: Work,
    set: &Arc<FileSet>,
    tasks: usize,
    cache: Cache,
    total: usize,
) -> io::Result<Measured> {
    match cache {
        Cache::Cached => warm(set)?,
        Cache::Evicted => {
            for p in &set.paths {
                evict(p)?;
            }
        }
    }
    let reads = set.reads(tasks, total);
    let next = Arc::new(AtomicUsize::new(0));
    let cpu = cpu_time();
    let (took, bytes) = rt.block_on(async {
        let t = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|_| tokio::spawn(task(sys, work, set.clone(), next.clone(), reads)))
            .collect();
        let mut bytes = 0;
        let mut failed = None;
        for h in handles {
            match h.await.map_err(io::Error::other).and_then(|r| r) {
                Ok(n) => bytes += n,
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok((t.elapsed(), bytes)),
        }
    })?;
    let cpu = cpu_time().saturating_sub(cpu);
    let threads = threads_of(sys);
    if bytes != reads * set.size {
        return Err(io::Error::other(format!(
            "{} by {}: read {bytes} bytes in all, expected {}",
            work.name(),
            sys.name(),
            reads * set.size
        )));
    }
    Ok(Measured {
        took,
        cpu,
        bytes,
        reads,
        threads,
    })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One row: a workload at one size, cache state and task count.
struct Row {
    size: usize,
    cache: Cache,
    tasks: usize,
    work: Work,
    reads: usize,
    /// Per system: the times, the CPU time and bytes over all rounds, the
    /// most threads seen.
    took: [Vec<Duration>; 2],
    cpu: [Duration; 2],
    bytes: [usize; 2],
    threads: [usize; 2],
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("whole_file: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let Some(cfg) = Config::parse()? else {
        return Ok(());
    };
    if !cfg.dir.is_dir() {
        return Err(format!("{} is not a directory\n{USAGE}", cfg.dir.display()).into());
    }
    let mut cleanup = Cleanup::default();
    let mut sets = Vec::new();
    for &size in &cfg.sizes {
        let count = (cfg.total / size).clamp(1, cfg.files);
        eprintln!(
            "making {count} files of {} in {}",
            size_label(size),
            cfg.dir.display()
        );
        sets.push(Arc::new(make_set(&cfg.dir, size, count, &mut cleanup)?));
    }
    syncfs(&cfg.dir)?;
    let runtime = |sys: Sys| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name(sys.thread_name())
            .enable_all()
            .build()
    };
    let rts = [runtime(Sys::Tokio)?, runtime(Sys::Overlap)?];
    // Untimed: the first use of each system (the engine, a ring), one
    // read of each workload, one task (no blocking threads made ahead).
    for sys in SYSTEMS {
        let set = &sets[0];
        rts[sys.index()].block_on(async {
            for work in WORKS {
                read_one(sys, work, &set.paths[0])
                    .await?
                    .check(0, set.size)
                    .map_err(io::Error::other)?;
            }
            Ok::<_, io::Error>(())
        })?;
    }
    let mut rows = rows(&cfg, &sets);
    for round in 0..cfg.rounds {
        let order = if round % 2 == 0 {
            [Sys::Tokio, Sys::Overlap]
        } else {
            [Sys::Overlap, Sys::Tokio]
        };
        for row in rows.iter_mut() {
            let set = sets
                .iter()
                .find(|s| s.size == row.size)
                .ok_or("no file set")?;
            for sys in order {
                let m = measure(
                    &rts[sys.index()],
                    sys,
                    row.work,
                    set,
                    row.tasks,
                    row.cache,
                    cfg.total,
                )?;
                print_measurement(&cfg, round, row, sys, set, &m);
                let i = sys.index();
                row.took[i].push(m.took);
                row.cpu[i] += m.cpu;
                row.bytes[i] += m.bytes;
                row.threads[i] = row.threads[i].max(m.threads);
            }
        }
    }
    drop(rts);
    drop(cleanup);
    print_medians(&cfg, &sets, rows);
    Ok(())
}

/// Prints one measurement as it is made (and as JSON with `--json`).
fn print_measurement(cfg: &Config, round: usize, row: &Row, sys: Sys, set: &FileSet, m: &Measured) {
    let secs = m.took.as_secs_f64().max(1e-9);
    let (mbs, fps) = (m.bytes as f64 / secs / 1e6, m.reads as f64 / secs);
    eprintln!(
        "round {round}: {:>4} {:<7} C={:<4} {:<12} {:<17} {:>9.1} MB/s {:>9.0} files/s",
        size_label(row.size),
        row.cache.name(),
        row.tasks,
        row.work.name(),
        sys.name(),
        mbs,
        fps
    );
    if cfg.json {
        println!(
            "{{\"round\":{round},\"workload\":\"{}\",\"system\":\"{}\",\"size\":{},\"cache\":\"{}\",\"tasks\":{},\"files\":{},\"reads\":{},\"bytes\":{},\"secs\":{:.6},\"mb_per_s\":{:.3},\"files_per_s\":{:.3},\"cpu_secs\":{:.6},\"threads\":{}}}",
            row.work.name(),
            sys.name(),
            row.size,
            row.cache.name(),
            row.tasks,
            set.paths.len(),
            m.reads,
            m.bytes,
            m.took.as_secs_f64(),
            mbs,
            fps,
            m.cpu.as_secs_f64(),
            m.threads
        );
    }
}

/// One row for each size, cache state, task count and workload, nothing
/// measured yet.
fn rows(cfg: &Config, sets: &[Arc<FileSet>]) -> Vec<Row> {
    let mut rows = Vec::new();
    for set in sets {
        for &cache in &cfg.caches {
            for &tasks in &cfg.tasks {
                for work in WORKS {
                    rows.push(Row {
                        size: set.size,
                        cache,
                        tasks,
                        work,
                        reads: set.reads(tasks, cfg.total),
                        took: [Vec::new(), Vec::new()],
                        cpu: [Duration::ZERO; 2],
                        bytes: [0; 2],
                        threads: [0; 2],
                    });
                }
            }
        }
    }
    rows
}

/// Prints the medians over the rounds, one table row per [`Row`].
fn print_medians(cfg: &Config, sets: &[Arc<FileSet>], rows: Vec<Row>) {
    println!(
        "{} rounds, medians; each measurement at most {} MiB (files per size: {})",
        cfg.rounds,
        cfg.total >> 20,
        sets.iter()
            .map(|s| format!("{} {}", size_label(s.size), s.paths.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| size | cache | C | reads | workload | tokio MB/s | tokio files/s | overlap MB/s | overlap files/s | overlap / tokio | CPU us/MB tokio | CPU us/MB overlap | threads tokio | threads overlap |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for row in rows {
        let per_sec = |i: usize| {
            let secs = median(row.took[i].clone()).as_secs_f64().max(1e-9);
            (
                (row.reads * row.size) as f64 / secs / 1e6,
                row.reads as f64 / secs,
            )
        };
        let cpu_per_mb =
            |i: usize| row.cpu[i].as_secs_f64() * 1e6 / (row.bytes[i] as f64 / 1e6).max(1e-9);
        let ((tm, tf), (om, of)) = (per_sec(0), per_sec(1));
        println!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.0} | {:.2}x | {:.0} | {:.0} | {} | {} |",
            size_label(row.size),
            row.cache.name(),
            row.tasks,
            row.reads,
            row.work.name(),
            tm,
            tf,
            om,
            of,
            om / tm.max(1e-9),
            cpu_per_mb(0),
            cpu_per_mb(1),
            row.threads[0],
            row.threads[1]
        );
    }
}
