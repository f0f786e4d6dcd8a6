//! `overlap probe`: the KB 156932 `asynchio` experiment, run on the user's
//! own disk and explained.
//!
//! Microsoft's article shows that "asynchronous" I/O is often not: a read
//! served from the cache completes synchronously, a write that extends a file
//! is done synchronously, and the only proof is to measure. This module does
//! the Linux version of that measurement with the `overlap` engine:
//!
//! - **reads**: `--requests` (500) reads of 64 KiB at scattered, distinct,
//!   64 KiB-aligned offsets of a `--size` (1 GiB) file, in the modes
//!   {async, sync} × {direct, buffered-cold, buffered-cached}. Async reads
//!   are all submitted through a [`Port`] before any completion is taken.
//! - **writes**: `--size` bytes written sequentially in 64 KiB chunks with 32
//!   in flight, in the modes {grow, prealloc} × {direct, buffered,
//!   writethrough}.
//!
//! For each mode it records how long submission took (`queue_s`), how long
//! until the last completion (`complete_s`), whether completions came back
//! out of submission order, how many completed inline (synchronously), and
//! how many kernel io_uring worker threads (`iou-wrk`) did work — and turns
//! that into a verdict (see [`verdict`]).

use std::fmt::Write as _;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use overlap::{
    Access, AlignedBuf, AlignedBufPool, DriverChoice, DriverKind, Engine, File, KernelWorkers,
    OpenOptions, Port, Stats,
};
use rand::SeedableRng;

use crate::size::fmt_bytes;
use serde::Serialize;

/// Size of every request: 64 KiB, as in the KB article's experiment.
const CHUNK: u64 = 64 << 10;
/// The smallest file the probe accepts, in chunks (4 MiB).
const MIN_CHUNKS: u64 = 64;
/// The largest `--size` accepted (1 PiB): far beyond any real run, and small
/// enough that the free-space arithmetic cannot overflow.
const MAX_SIZE: u64 = 1 << 50;
/// Writes kept in flight by the write modes.
const WRITE_DEPTH: u64 = 32;
/// Reads per read mode unless `--requests` says otherwise (as in the article).
const DEFAULT_REQUESTS: u64 = 500;
/// The most reads per read mode (all of them are in flight at once).
const MAX_REQUESTS: u64 = 4096;
/// Free space required beyond the two files (file-system metadata, slack).
const SPACE_MARGIN: u64 = 16 << 20;
/// The share (9/10) of requests completing inline, or of the completion
/// time spent queueing, at or above which the verdict is "sync".
const SYNC_SHARE: (u128, u128) = (9, 10);

/// `part` is at least [`SYNC_SHARE`] of `whole` (exact integer arithmetic).
fn most_of(part: u128, whole: u128) -> bool {
    part * SYNC_SHARE.1 >= whole * SYNC_SHARE.0
}

/// Options of `overlap probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// Directory in which the probe creates its files (named
    /// overlap-probe-*); they are removed at the end, also on error and
    /// Ctrl-C.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Size of the data file and of each file written: 1G, 64M, 512K or a
    /// number of bytes (K, M, G, T are binary: KiB, MiB, ...). A multiple of
    /// 64 KiB, at least 4 MiB. About twice this much free space is needed.
    #[arg(long, value_name = "BYTES", default_value = "1G", value_parser = parse_size)]
    pub size: u64,
    /// Write one JSON object per line and mode on stdout, and nothing else.
    #[arg(long)]
    pub json: bool,
    /// Driver: auto (io_uring when the kernel allows it; obeys
    /// OVERLAP_DRIVER), uring (fail if unavailable) or pool (threads).
    #[arg(long, value_enum, default_value_t = DriverArg::Auto)]
    pub driver: DriverArg,
    /// Reads of 64 KiB per read mode, all in flight at once (1 to 4096, and
    /// at most one per 64 KiB of the file) [default: 500, or one per 64 KiB
    /// of a smaller file].
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS))]
    pub requests: Option<u64>,
    /// Seed for the read offsets (default: random; printed, so that a run can
    /// be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// `--driver`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverArg {
    /// io_uring when available, else the thread pool (obeys OVERLAP_DRIVER).
    Auto,
    /// io_uring, or an error saying what to change.
    Uring,
    /// The bounded thread pool.
    Pool,
}

/// Parses `--size` with the CLI's size parser ([`crate::size::parse`]) and
/// checks that the result suits the probe: a multiple of 64 KiB, at least
/// 4 MiB, at most 1 PiB.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let bytes = match crate::size::parse(s) {
        Err(crate::size::SizeError::TooLarge { .. }) => u64::MAX,
        other => other.map_err(|e| e.to_string())?,
    };
    let bytes = crate::size::at_most(s, bytes, MAX_SIZE).map_err(|e| e.to_string())?;
    if bytes % CHUNK != 0 {
        let down = bytes / CHUNK * CHUNK;
        return Err(format!(
            "{s:?} ({bytes} bytes) is not a multiple of 64 KiB (65536 bytes), the request size; \
             try {}K",
            down.max(MIN_CHUNKS * CHUNK) >> 10
        ));
    }
    if bytes < MIN_CHUNKS * CHUNK {
        return Err(format!(
            "{s:?} ({bytes} bytes) is too small: the probe needs at least 4M \
             ({MIN_CHUNKS} requests of 64 KiB)"
        ));
    }
    Ok(bytes)
}

// ---------------------------------------------------------------------------
// Cleanup: the probe's files go away on success, error, panic and Ctrl-C.
// ---------------------------------------------------------------------------

/// Owns the probe's files: removes them when dropped, and on SIGINT, SIGTERM
/// or SIGHUP (see [`crate::cleanup::install`]).
struct Cleanup;

impl Cleanup {
    fn install() -> Cleanup {
        crate::cleanup::install("probe", None);
        Cleanup
    }

    /// Creates `path` with `create`, recorded for removal. The registry's
    /// lock is held meanwhile, so that an interruption either sees the file
    /// registered or stops its creation.
    fn create<T>(&self, path: &Path, create: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut list = crate::cleanup::registry();
        list.push(path.to_path_buf());
        create()
    }

    /// Removes `path` now and forgets it.
    fn remove(&self, path: &Path) -> Result<()> {
        let mut list = crate::cleanup::registry();
        let removed =
            std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()));
        list.retain(|p| p != path);
        removed
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        crate::cleanup::remove_all();
    }
}

// ---------------------------------------------------------------------------
// The file system: free space, type, page-cache residency.
// ---------------------------------------------------------------------------

struct FsInfo {
    available: u64,
    kind: String,
}

fn fs_info(dir: &Path) -> Result<FsInfo> {
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
        .map_err(|_| anyhow!("{} contains a NUL byte", dir.display()))?;
    let available =
        crate::util::free_bytes(&c).with_context(|| format!("statvfs {}", dir.display()))?;
    // SAFETY: statfs is plain data; all-zero is a valid value.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `sfs` is a writable statfs.
    let kind = if unsafe { libc::statfs(c.as_ptr(), &mut sfs) } == 0 {
        fs_name(sfs.f_type as u64)
    } else {
        "unknown".to_string()
    };
    Ok(FsInfo { available, kind })
}

fn fs_name(magic: u64) -> String {
    match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0xCA45_1A4E => "bcachefs",
        0x6969 => "nfs",
        0x794C_7630 => "overlayfs",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p",
        _ => return format!("file system 0x{magic:x}"),
    }
    .to_string()
}

/// Which pages of the first `len` bytes of `file` are in the page cache
/// (`mincore` on a read-only mapping that is never touched). `None` when
/// the kernel will not tell.
fn residency(file: &std::fs::File, len: u64) -> Option<Vec<bool>> {
    let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
    // SAFETY: sysconf has no memory arguments.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)?;
    // SAFETY: maps `len` bytes of our own descriptor read-only and shared at
    // an address the kernel picks; nothing dereferences the mapping, which is
    // unmapped below before the function returns.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return None;
    }
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: addr..addr+len is the mapping made above; `vec` has one byte
    // per page of it, as mincore requires.
    let r = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(addr, len) };
    if r != 0 {
        return None;
    }
    Some(vec.into_iter().map(|b| b & 1 != 0).collect())
}

/// Share of the pages covering `offsets` (64 KiB each) that are cached.
fn cached_share(pages: &[bool], offsets: &[u64]) -> f64 {
    if pages.is_empty() || offsets.is_empty() {
        return 0.0;
    }
    // SAFETY: sysconf has no memory arguments.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let per_chunk = (CHUNK / page_size).max(1) as usize;
    let mut hit = 0usize;
    let mut all = 0usize;
    for &off in offsets {
        let first = (off / page_size) as usize;
        for p in pages.iter().skip(first).take(per_chunk) {
            all += 1;
            hit += usize::from(*p);
        }
    }
    if all == 0 {
        0.0
    } else {
        hit as f64 / all as f64
    }
}

fn whole_share(pages: &[bool]) -> f64 {
    if pages.is_empty() {
        return 0.0;
    }
    pages.iter().filter(|p| **p).count() as f64 / pages.len() as f64
}

/// Drops `file` from the page cache: its dirty pages are written first
/// (fdatasync), then `posix_fadvise(DONTNEED)` over the whole file.
fn evict(file: &std::fs::File) -> Result<()> {
    file.sync_data().context("fdatasync before eviction")?;
    crate::util::fadvise(file, libc::POSIX_FADV_DONTNEED)
        .context("posix_fadvise(DONTNEED) to evict the file from the page cache")
}

/// Reads the whole file once (buffered) so that it is in the page cache.
fn warm(path: &Path, pb: &ProgressBar) -> Result<()> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .context("reading the file into the page cache")?;
        if n == 0 {
            return Ok(());
        }
        pb.inc(n as u64);
    }
}

fn advise_random(file: &std::fs::File) {
    let _ = crate::util::fadvise(file, libc::POSIX_FADV_RANDOM);
}

// ---------------------------------------------------------------------------
// Data and its check: each 64 KiB chunk starts with its own offset.
// ---------------------------------------------------------------------------

fn fill_pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for b in buf.chunks_mut(8) {
        // xorshift64: incompressible-looking bytes, cheaply.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        b.copy_from_slice(&bytes[..b.len()]);
    }
}

fn stamp(buf: &mut [u8], offset: u64) {
    buf[..8].copy_from_slice(&offset.to_le_bytes());
}

fn check_stamp(buf: &[u8], offset: u64) -> Result<()> {
    let got = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    if got != offset {
        bail!(
            "data check failed: the 64 KiB read at offset {offset} holds the chunk written at \
             offset {got}"
        );
    }
    Ok(())
}

/// Kernel-worker snapshot taken once workers have gone quiet (none used CPU
/// for 5 ms; at most 250 ms of waiting), so that the tail of the previous
/// step (opening a file, fallocate, fsync: io_uring always hands those to
/// workers) is not charged to the next mode.
fn quiet_workers() -> KernelWorkers {
    let deadline = Instant::now() + Duration::from_millis(250);
    let mut prev = KernelWorkers::snapshot();
    loop {
        std::thread::sleep(Duration::from_millis(5));
        let now = KernelWorkers::snapshot();
        if now.active_since(&prev) == 0 || Instant::now() >= deadline {
            return now;
        }
        prev = now;
    }
}

// ---------------------------------------------------------------------------
// Measurements.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Async,
    Sync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadKind {
    Direct,
    Cold,
    Cached,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alloc {
    Grow,
    Prealloc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    Direct,
    Buffered,
    WriteThrough,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read(Api, ReadKind),
    Write(Alloc, WriteKind),
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Read(api, kind) => format!(
                "{}-{}",
                match api {
                    Api::Async => "async",
                    Api::Sync => "sync",
                },
                match kind {
                    ReadKind::Direct => "direct",
                    ReadKind::Cold => "buffered-cold",
                    ReadKind::Cached => "buffered-cached",
                }
            ),
            Mode::Write(alloc, kind) => format!(
                "async-{}-{}",
                match alloc {
                    Alloc::Grow => "grow",
                    Alloc::Prealloc => "prealloc",
                },
                match kind {
                    WriteKind::Direct => "direct",
                    WriteKind::Buffered => "buffered",
                    WriteKind::WriteThrough => "writethrough",
                }
            ),
        }
    }

    fn is_direct(self) -> bool {
        matches!(
            self,
            Mode::Read(_, ReadKind::Direct) | Mode::Write(_, WriteKind::Direct)
        )
    }
}

const READ_MODES: [Mode; 6] = [
    Mode::Read(Api::Async, ReadKind::Direct),
    Mode::Read(Api::Async, ReadKind::Cold),
    Mode::Read(Api::Async, ReadKind::Cached),
    Mode::Read(Api::Sync, ReadKind::Direct),
    Mode::Read(Api::Sync, ReadKind::Cold),
    Mode::Read(Api::Sync, ReadKind::Cached),
];

const WRITE_MODES: [Mode; 6] = [
    Mode::Write(Alloc::Grow, WriteKind::Direct),
    Mode::Write(Alloc::Prealloc, WriteKind::Direct),
    Mode::Write(Alloc::Grow, WriteKind::Buffered),
    Mode::Write(Alloc::Prealloc, WriteKind::Buffered),
    Mode::Write(Alloc::Grow, WriteKind::WriteThrough),
    Mode::Write(Alloc::Prealloc, WriteKind::WriteThrough),
];

/// What one mode did.
#[derive(Debug, Default, Clone)]
struct Measurement {
    requests: u64,
    bytes: u64,
    queue: Duration,
    complete: Duration,
    /// Completions that arrived after one of a later-submitted request.
    out_of_order: u64,
    inline: u64,
    kernel_workers: u64,
    /// Engine counters over the mode.
    fast_path_hits: u64,
    fast_path_misses: u64,
    fast_path_skipped: u64,
    submit_syscalls: u64,
    /// Writes: the final fdatasync.
    fsync: Option<Duration>,
    /// Reads: share of the requested pages in the page cache before the mode.
    cached_before: Option<f64>,
    /// async-buffered-cold: the same reads again on an engine without the
    /// page-cache fast path (queue, complete, inline).
    fast_path_off: Option<(Duration, Duration, u64)>,
}

/// Completion order bookkeeping: a completion is out of order when a
/// request submitted after it completed before it.
#[derive(Default)]
struct Order {
    max_key: Option<u64>,
    late: u64,
}

impl Order {
    fn see(&mut self, key: u64) {
        match self.max_key {
            Some(m) if key < m => self.late += 1,
            _ => self.max_key = Some(key),
        }
    }
}

fn stats_delta(before: &Stats, after: &Stats, m: &mut Measurement) {
    m.fast_path_hits = after.fast_path_hits.saturating_sub(before.fast_path_hits);
    m.fast_path_misses = after
        .fast_path_misses
        .saturating_sub(before.fast_path_misses);
    m.fast_path_skipped = after
        .fast_path_skipped
        .saturating_sub(before.fast_path_skipped);
    m.submit_syscalls = after.submit_syscalls.saturating_sub(before.submit_syscalls);
}

/// All reads submitted through a port before any is taken.
fn async_reads(
    engine: &Engine,
    file: &File,
    offsets: &[u64],
    pb: &ProgressBar,
) -> Result<Measurement> {
    let n = offsets.len();
    let pool = AlignedBufPool::for_file(file, CHUNK as usize, n)?;
    let mut bufs: Vec<AlignedBuf> = (0..n).map(|_| pool.get()).collect();
    for b in &mut bufs {
        b.fill(0xA5); // fault the pages in now, not during the measurement
    }
    let port: Port<AlignedBuf> = Port::new(engine);
    let stats0 = engine.stats();
    let workers0 = quiet_workers();
    let t0 = Instant::now();
    for (i, (buf, &off)) in bufs.into_iter().zip(offsets).enumerate() {
        port.read_at(file, buf, off, i as u64)
            .map_err(|(e, _)| e)
            .with_context(|| format!("queueing read {i} at offset {off}"))?;
    }
    let queue = t0.elapsed();
    let mut m = Measurement {
        requests: n as u64,
        queue,
        ..Measurement::default()
    };
    let mut order = Order::default();
    while let Some(c) = port.next() {
        m.complete = t0.elapsed();
        let off = offsets[c.key as usize];
        let got = c
            .result
            .with_context(|| format!("read of 64 KiB at offset {off}"))?;
        if got as u64 != CHUNK {
            bail!("short read at offset {off}: {got} of {CHUNK} bytes");
        }
        check_stamp(&c.buf, off)?;
        m.bytes += got as u64;
        m.inline += u64::from(c.inline);
        order.see(c.key);
        pb.inc(CHUNK);
    }
    m.kernel_workers = KernelWorkers::snapshot().active_since(&workers0) as u64;
    m.out_of_order = order.late;
    stats_delta(&stats0, &engine.stats(), &mut m);
    Ok(m)
}

/// The async buffered reads again, on a second engine built like the first
/// but without the page-cache fast path.
fn fast_path_off_reads(
    builder: &overlap::EngineBuilder,
    path: &Path,
    offsets: &[u64],
    pb: &ProgressBar,
) -> Result<Measurement> {
    let engine = builder
        .clone()
        .cache_fast_path(false)
        .build()
        .context("starting a second engine without the fast path")?;
    let file = OpenOptions::new()
        .read(true)
        .access(Access::Random)
        .open(&engine, path)
        .wait()
        .with_context(|| format!("opening {}", path.display()))?;
    let m = async_reads(&engine, &file, offsets, pb)?;
    file.close().wait().context("closing the data file")?;
    Ok(m)
}

/// The same reads one after another with plain blocking `pread` on this
/// thread (the baseline: queue time is completion time, all inline).
fn sync_reads(
    path: &Path,
    direct: bool,
    align: usize,
    offsets: &[u64],
    pb: &ProgressBar,
) -> Result<Measurement> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    let f = o
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    advise_random(&f);
    let mut buf = AlignedBuf::new(CHUNK as usize, align)?;
    buf.fill(0xA5);
    let workers0 = quiet_workers();
    let mut m = Measurement {
        requests: offsets.len() as u64,
        ..Measurement::default()
    };
    let t0 = Instant::now();
    for &off in offsets {
        let got = f
            .read_at(&mut buf, off)
            .with_context(|| format!("pread of 64 KiB at offset {off}"))?;
        if got as u64 != CHUNK {
            bail!("short read at offset {off}: {got} of {CHUNK} bytes");
        }
        check_stamp(&buf, off)?;
        m.bytes += CHUNK;
        pb.inc(CHUNK);
    }
    m.complete = t0.elapsed();
    m.queue = m.complete;
    m.inline = m.requests;
    m.kernel_workers = KernelWorkers::snapshot().active_since(&workers0) as u64;
    Ok(m)
}

/// Writes `size` bytes sequentially in 64 KiB chunks through a port, keeping
/// `WRITE_DEPTH` in flight. `queue` is the time spent inside submit calls.
/// Does not sync.
fn async_writes(
    engine: &Engine,
    file: &File,
    size: u64,
    seed: u64,
    pb: &ProgressBar,
) -> Result<Measurement> {
    let chunks = size / CHUNK;
    let depth = WRITE_DEPTH.min(chunks) as usize;
    let pool = AlignedBufPool::for_file(file, CHUNK as usize, depth)?;
    let mut bufs: Vec<AlignedBuf> = (0..depth).map(|_| pool.get()).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        fill_pattern(b, seed ^ i as u64);
    }
    let port: Port<AlignedBuf> = Port::new(engine);
    let stats0 = engine.stats();
    let workers0 = quiet_workers();
    let mut m = Measurement {
        requests: chunks,
        ..Measurement::default()
    };
    let mut next = 0u64;
    let t0 = Instant::now();
    let submit = |mut buf: AlignedBuf, m: &mut Measurement, next: &mut u64| -> Result<()> {
        let off = *next * CHUNK;
        stamp(&mut buf, off);
        let s = Instant::now();
        let r = port.write_at(file, buf, off, *next);
        m.queue += s.elapsed();
        r.map_err(|(e, _)| e)
            .with_context(|| format!("queueing a 64 KiB write at offset {off}"))?;
        *next += 1;
        Ok(())
    };
    for buf in bufs {
        submit(buf, &mut m, &mut next)?;
    }
    let mut order = Order::default();
    loop {
        let Some(c) = port.next() else { break };
        m.complete = t0.elapsed();
        let off = c.key * CHUNK;
        let got = c
            .result
            .with_context(|| format!("write of 64 KiB at offset {off}"))?;
        if got as u64 != CHUNK {
            bail!("short write at offset {off}: {got} of {CHUNK} bytes");
        }
        m.bytes += CHUNK;
        m.inline += u64::from(c.inline);
        order.see(c.key);
        pb.inc(CHUNK);
        if next < chunks {
            submit(c.buf, &mut m, &mut next)?;
        }
    }
    m.kernel_workers = KernelWorkers::snapshot().active_since(&workers0) as u64;
    m.out_of_order = order.late;
    stats_delta(&stats0, &engine.stats(), &mut m);
    Ok(m)
}

// ---------------------------------------------------------------------------
// Verdicts and explanations.
// ---------------------------------------------------------------------------

/// The three answers to "did it overlap?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// The submitter went on while the kernel did the I/O.
    Async,
    /// The work was done before (or while) submission returned: nothing was
    /// left to overlap with.
    Sync,
    /// The submitter went on, but only because the kernel handed the
    /// operations to its blocking worker threads (`iou-wrk`): the I/O was
    /// done synchronously, by threads, inside the kernel.
    KernelWorkers,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Async => "async",
            Verdict::Sync => "sync",
            Verdict::KernelWorkers => "kernel-workers",
        }
    }
}

/// The verdict rules, applied in this order:
///
/// 1. **kernel-workers** if any `iou-wrk` thread appeared or used CPU during
///    the mode. io_uring first tries every operation without blocking; a
///    worker runs only when the file system said "would block" (or cannot
///    say), so one active worker proves that some requests were performed
///    synchronously by a kernel thread. This outranks the timings, which
///    look asynchronous from user space in that case.
/// 2. **sync** if at least 90% of the requests completed inline (already done
///    when submission returned: the page-cache fast path, or a completion
///    found in the ring right after the submitting system call), or if
///    queueing took at least 90% of the time to the last completion: either
///    way the submitter had (almost) nothing left to overlap with — KB
///    156932's "asynchronous I/O appears synchronous".
/// 3. **async** otherwise: requests were queued quickly and completed later,
///    with no kernel worker involved.
///
/// The 90% thresholds leave room for noise (a few requests may hit the
/// cache, a timer is never exact) while still calling a mostly synchronous
/// mode what it is.
fn verdict(m: &Measurement) -> Verdict {
    if m.kernel_workers > 0 {
        return Verdict::KernelWorkers;
    }
    let complete = m.complete.as_nanos();
    if most_of(m.inline.into(), m.requests.max(1).into())
        || (complete > 0 && most_of(m.queue.as_nanos(), complete))
    {
        return Verdict::Sync;
    }
    Verdict::Async
}

fn pct(x: f64) -> String {
    if x > 0.0 && x < 0.01 {
        "<1%".into()
    } else if x > 0.99 && x < 1.0 {
        // Never round a shortfall up to "100%".
        format!("{:.1}%", (x * 1000.0).floor() / 10.0)
    } else {
        format!("{:.0}%", x * 100.0)
    }
}

/// Facts about the run that explanations need.
struct Facts {
    driver: DriverKind,
    fs: String,
    /// For prealloc modes: the grow mode's kernel workers (same kind).
    grow_workers: Option<u64>,
}

/// "; without the fast path ...", when that comparison was measured.
fn fast_path_off(m: &Measurement) -> String {
    match m.fast_path_off {
        Some((q, c, inline)) => format!(
            "; without the fast path (EngineBuilder::cache_fast_path(false)) the same reads \
             were queued in {:.3} s and completed in {:.3} s, {inline} inline",
            q.as_secs_f64(),
            c.as_secs_f64()
        ),
        None => String::new(),
    }
}

fn workers_phrase(n: u64) -> String {
    format!(
        "handed to kernel workers ({n} iou-wrk thread{})",
        if n == 1 { "" } else { "s" }
    )
}

fn explain(mode: Mode, v: Verdict, m: &Measurement, cx: &Facts) -> String {
    let ratio = if m.complete.as_secs_f64() > 0.0 {
        m.queue.as_secs_f64() / m.complete.as_secs_f64()
    } else {
        1.0
    };
    // On aio+pool only O_DIRECT transfers go to the kernel (Linux AIO);
    // buffered ones run on the pool's threads.
    let direct = matches!(
        mode,
        Mode::Read(_, ReadKind::Direct) | Mode::Write(_, WriteKind::Direct)
    );
    let pool = cx.driver == DriverKind::Pool || (cx.driver == DriverKind::Aio && !direct);
    let order = if m.out_of_order > 0 {
        format!("{} completed out of submission order", m.out_of_order)
    } else {
        "they completed in submission order".into()
    };
    let fsync = m
        .fsync
        .map(|d| format!("{:.3} s", d.as_secs_f64()))
        .unwrap_or_else(|| "?".into());
    let cached = m
        .cached_before
        .map(pct)
        .unwrap_or_else(|| "an unknown share".into());
    match (mode, v) {
        // --- the synchronous baseline ---------------------------------------
        (Mode::Read(Api::Sync, kind), _) => {
            let cached_anyway = m.cached_before.is_some_and(|c| c > 0.5);
            let why = match kind {
                ReadKind::Direct => "each read went to the device (O_DIRECT)",
                ReadKind::Cold if cached_anyway => {
                    "page cache: the eviction did not work, so each read was a memory copy"
                }
                ReadKind::Cold => "each read waited for the disk (file not in the page cache)",
                ReadKind::Cached => "page cache: each read was a memory copy",
            };
            format!(
                "completed synchronously ({why}): the baseline, plain blocking pread one after \
                 another on the calling thread, nothing overlaps"
            )
        }
        // --- async reads ----------------------------------------------------
        (Mode::Read(Api::Async, kind), Verdict::Async) => {
            let what = match kind {
                ReadKind::Direct => "O_DIRECT reads bypass the page cache".to_string(),
                ReadKind::Cold => {
                    let mut w = format!(
                        "the file was evicted ({cached} of the requested pages cached), so the \
                         reads went to the disk"
                    );
                    if m.fast_path_misses > 0 {
                        let _ = write!(
                            w,
                            "; {} reads tried the page cache on the calling thread first \
                             (preadv2 RWF_NOWAIT) and missed, and on a miss the kernel starts \
                             the disk read right there, which is what queueing cost; after \
                             that streak of misses the engine sent {} reads straight to {}{}",
                            m.fast_path_misses,
                            m.fast_path_skipped,
                            if pool { "the thread pool" } else { "the ring" },
                            fast_path_off(m)
                        );
                    }
                    w
                }
                ReadKind::Cached => format!(
                    "only {} of {} were answered from the page cache",
                    m.fast_path_hits, m.requests
                ),
            };
            if pool {
                format!(
                    "asynchronous by threads: queued in {} of the completion time, {order}; \
                     {what}; the overlap comes from the pool driver's threads doing blocking \
                     preads, not from the kernel",
                    pct(ratio)
                )
            } else {
                format!(
                    "truly asynchronous: all {} were queued in {} of the time they took to \
                     complete and {order}; {what}",
                    m.requests,
                    pct(ratio)
                )
            }
        }
        (Mode::Read(Api::Async, kind), Verdict::Sync) => {
            let why = if most_of(m.fast_path_hits.into(), m.requests.into()) {
                format!(
                    "page cache: {} of {} were answered from memory by preadv2(RWF_NOWAIT) on \
                     the calling thread, as fast as a plain pread, so there was nothing to \
                     overlap",
                    m.fast_path_hits, m.requests
                )
            } else if kind == ReadKind::Cold
                && most_of(m.fast_path_misses.into(), m.requests.into())
            {
                format!(
                    "page-cache misses: each read first tried the page cache on the calling \
                     thread (preadv2 RWF_NOWAIT); on a miss the kernel starts the disk read \
                     right there, on the calling thread, and may wait for the device, so \
                     queueing took {} of the time to the last completion and {} of {} reads \
                     were already done when the ring got them{}",
                    pct(ratio),
                    m.inline,
                    m.requests,
                    fast_path_off(m)
                )
            } else if kind == ReadKind::Cached {
                format!(
                    "page cache: {} of {} were answered from memory by preadv2(RWF_NOWAIT) on \
                     the calling thread and {} more completed as soon as the ring saw them; \
                     {cached} of the requested pages were cached",
                    m.fast_path_hits,
                    m.requests,
                    m.inline.saturating_sub(m.fast_path_hits)
                )
            } else if kind == ReadKind::Cold {
                format!(
                    "{} of {} inline, queueing took {} of the completion time; {cached} of \
                     the requested pages were cached after the eviction",
                    m.inline,
                    m.requests,
                    pct(ratio)
                )
            } else {
                format!(
                    "{} of {} inline, queueing took {} of the completion time",
                    m.inline,
                    m.requests,
                    pct(ratio)
                )
            };
            format!("completed synchronously ({why})")
        }
        (Mode::Read(Api::Async, _), Verdict::KernelWorkers) => format!(
            "{}: the file system could not start these reads without blocking, so kernel \
             threads performed them synchronously",
            workers_phrase(m.kernel_workers)
        ),
        // --- writes ---------------------------------------------------------
        (Mode::Write(alloc, kind), v) => {
            let tail = match kind {
                WriteKind::Direct => String::new(),
                WriteKind::Buffered => format!(
                    "; a buffered write completes once it is copied into RAM: not durable \
                     until fsync (the final fsync took {fsync})"
                ),
                WriteKind::WriteThrough => format!(
                    "; write-through (O_DSYNC): each write completed only once durable (the \
                     final fsync took {fsync})"
                ),
            };
            let head = match (v, alloc, kind) {
                (Verdict::KernelWorkers, Alloc::Grow, WriteKind::Direct) => format!(
                    "{}: the file grew with each write, and extending a file takes an \
                     exclusive lock and a metadata update that {} will not do without \
                     blocking; fix: preallocate (File::allocate)",
                    workers_phrase(m.kernel_workers),
                    if cx.fs == "ext4" {
                        "ext4"
                    } else {
                        "the file system"
                    }
                ),
                (Verdict::KernelWorkers, Alloc::Prealloc, WriteKind::Direct) => format!(
                    "{} although the space was preallocated (fallocate): {} could not write \
                     into the preallocated (unwritten) extents without blocking{}; a \
                     zero-filled preallocation (writing the file once) leaves no unwritten \
                     extents",
                    workers_phrase(m.kernel_workers),
                    cx.fs,
                    if cx.fs == "ext4" {
                        " (ext4 does so when a buffer is not aligned to the file-system block)"
                    } else {
                        ""
                    }
                ),
                (Verdict::KernelWorkers, alloc, _) => {
                    let prealloc_note = match (alloc, cx.grow_workers) {
                        (Alloc::Prealloc, Some(g)) if g > 0 => {
                            "; preallocating did not help (the growing file needed workers too)"
                        }
                        _ => "",
                    };
                    let why = if cx.fs == "ext4" {
                        "ext4 offers io_uring no non-blocking buffered writes (it does not set \
                         FMODE_BUF_WASYNC), so io_uring hands every buffered write to a worker \
                         thread without trying it inline"
                    } else {
                        "the file system could not perform these buffered writes without \
                         blocking, so io_uring handed them to worker threads"
                    };
                    format!("{}: {why}{prealloc_note}", workers_phrase(m.kernel_workers))
                }
                (Verdict::Sync, _, kind) => {
                    if most_of(m.inline.into(), m.requests.max(1).into()) {
                        let how = if kind == WriteKind::Direct {
                            "done while they were being submitted"
                        } else {
                            "done while they were being submitted (page cache: memory copies)"
                        };
                        format!(
                            "completed synchronously ({} of {} writes were {how})",
                            m.inline, m.requests
                        )
                    } else {
                        format!(
                            "completed synchronously (queueing took {} of the time to the last \
                             completion: the writes finished about as fast as they could be \
                             submitted, leaving nothing to overlap)",
                            pct(ratio)
                        )
                    }
                }
                (Verdict::Async, alloc, kind) => {
                    let why = match (alloc, kind) {
                        (Alloc::Prealloc, WriteKind::Direct) => {
                            ": the space was preallocated, so no write had to grow the file"
                        }
                        (Alloc::Grow, WriteKind::Direct) => " even though the file grew",
                        _ => "",
                    };
                    if pool {
                        format!(
                            "asynchronous by threads{why}; the overlap comes from the pool \
                             driver's threads doing blocking pwrites, not from the kernel"
                        )
                    } else {
                        format!("truly asynchronous{why}")
                    }
                }
            };
            format!("{head}{tail}")
        }
    }
}

// ---------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct Record {
    driver: &'static str,
    fallback_reason: Option<String>,
    op: &'static str,
    mode: String,
    requests: u64,
    bytes: u64,
    queue_s: f64,
    complete_s: f64,
    out_of_order: bool,
    out_of_order_count: u64,
    inline: u64,
    kernel_workers: u64,
    verdict: &'static str,
    explanation: String,
    mb_s: f64,
    /// Writes: the final fdatasync, in seconds.
    fsync_s: Option<f64>,
    /// Reads: share of the requested pages in the page cache before the mode.
    cached_before: Option<f64>,
    /// async-buffered-cold: the same reads on an engine without the
    /// page-cache fast path, for comparison.
    fast_path_off_queue_s: Option<f64>,
    /// As `fast_path_off_queue_s`, the time to the last completion.
    fast_path_off_complete_s: Option<f64>,
    /// The seed of the read offsets (`--seed` repeats a run).
    seed: u64,
    /// Buffered reads answered by the page-cache fast path.
    fast_path_hits: u64,
    /// Buffered reads the fast path tried and sent on to the driver.
    fast_path_misses: u64,
    /// Buffered reads sent straight to the driver after a streak of misses.
    fast_path_skipped: u64,
    /// System calls the engine made to submit the mode's requests.
    submit_syscalls: u64,
}

struct Out {
    json: bool,
    pb: ProgressBar,
}

impl Out {
    /// Writes a line to stdout, around the progress bar.
    fn line(&self, s: &str) -> Result<()> {
        self.pb
            .suspend(|| {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{s}").and_then(|_| out.flush())
            })
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    anyhow::Error::new(StdoutClosed)
                } else {
                    anyhow::Error::new(e).context("writing to stdout")
                }
            })
    }

    fn human(&self, s: &str) -> Result<()> {
        if self.json {
            Ok(())
        } else {
            self.line(s)
        }
    }

    fn record(&self, r: &Record) -> Result<()> {
        if self.json {
            return self.line(&serde_json::to_string(r)?);
        }
        let order = if r.out_of_order {
            "out of order"
        } else {
            "in order"
        };
        let mut first = format!(
            "{:<28}{} requests queued in {:.3} s, completed in {:.3} s; {order}; inline {}/{}; \
             kernel workers {}",
            r.mode, r.requests, r.queue_s, r.complete_s, r.inline, r.requests, r.kernel_workers
        );
        let _ = write!(first, "; {:.0} MB/s", r.mb_s);
        self.line(&first)?;
        self.line(&format!("{:<28}-> {}", "", r.explanation))
    }
}

fn progress(json: bool, total: u64) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:<27} [{wide_bar}] {bytes:>10}/{total_bytes} {elapsed:>3}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

// ---------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------

/// Stdout was closed (`overlap probe | head`): the probe stops quietly,
/// removing its files on the way out.
#[derive(Debug)]
struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Runs `overlap probe`.
pub fn run(args: ProbeArgs) -> Result<()> {
    match probe(args) {
        Err(e) if e.downcast_ref::<StdoutClosed>().is_some() => Ok(()),
        other => other,
    }
}

fn probe(args: ProbeArgs) -> Result<()> {
    let meta = std::fs::metadata(&args.dir)
        .with_context(|| format!("directory {} is not usable", args.dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", args.dir.display());
    }
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("resolving {}", args.dir.display()))?;
    let fs = fs_info(&dir)?;
    let size = args.size;
    let chunks = size / CHUNK;
    let requests = match args.requests {
        None => DEFAULT_REQUESTS.min(chunks),
        Some(n) if n > chunks => bail!(
            "--requests {n} is more than the file has 64 KiB chunks ({chunks} in {}): use a \
             larger --size or fewer --requests",
            fmt_bytes(size)
        ),
        Some(n) => n,
    };
    // The data file and one written file exist at the same time.
    let needed = size
        .checked_mul(2)
        .and_then(|n| n.checked_add(SPACE_MARGIN))
        .ok_or_else(|| anyhow!("--size {size} is too large"))?;
    if fs.available < needed {
        let fits = fs.available.saturating_sub(SPACE_MARGIN) / 2 / CHUNK * CHUNK;
        let advice = if fits >= MIN_CHUNKS * CHUNK {
            format!("use a smaller --size (at most {}K fits)", fits >> 10)
        } else {
            "free some space".to_string()
        };
        bail!(
            "not enough free space in {}: the probe needs {} (a {} data file, a {} file \
             written next to it, and {} of slack) but only {} is available; {advice} or use \
             another --dir",
            dir.display(),
            fmt_bytes(needed),
            fmt_bytes(size),
            fmt_bytes(size),
            fmt_bytes(SPACE_MARGIN),
            fmt_bytes(fs.available)
        );
    }

    // Signals are blocked from here on, in this thread and all later ones.
    let cleanup = Cleanup::install();

    let choice = match args.driver {
        DriverArg::Auto => DriverChoice::Auto,
        DriverArg::Uring => DriverChoice::Uring,
        DriverArg::Pool => DriverChoice::Pool,
    };
    let read_bytes = requests * CHUNK;
    let engine_builder = Engine::builder()
        .driver(choice)
        // Every read of a read mode is in flight at once.
        .max_inflight_ops((requests as usize).max(overlap::DEFAULT_MAX_INFLIGHT_OPS))
        .max_inflight_bytes((read_bytes as usize).max(overlap::DEFAULT_MAX_INFLIGHT_BYTES));
    let engine = engine_builder
        .clone()
        .build()
        .context("starting the I/O engine")?;
    let info = engine.driver().clone();
    let driver = info.kind.as_str();
    let fallback = info.fallback.as_ref().map(|r| r.to_string());
    let seed = args.seed.unwrap_or_else(rand::random);

    // Progress: create + 6 read modes (+ 1 without the fast path) + 2
    // warm-ups + 6 writes.
    let total = size + 7 * read_bytes + 2 * size + 6 * size;
    let pb = progress(args.json, total);
    let out = Out {
        json: args.json,
        pb: pb.clone(),
    };

    out.human("overlap probe: does asynchronous file I/O really overlap here? (the KB 156932 `asynchio` experiment)")?;
    match &info.fallback {
        None => out.human(&format!("driver:    {driver} ({})", info.detail))?,
        Some(r) => out.human(&format!(
            "driver:    {driver} ({}); fallback: {r}; to use io_uring: {}",
            info.detail,
            r.hint()
        ))?,
    }
    out.human(&format!(
        "directory: {} ({}, {} free)",
        dir.display(),
        fs.kind,
        fmt_bytes(fs.available)
    ))?;

    let prefix = format!("overlap-probe-{}", std::process::id());
    let data_path = dir.join(format!("{prefix}-data"));
    let write_path = dir.join(format!("{prefix}-write"));

    // --- the data file, written with the engine and synced -----------------
    pb.set_message("creating the data file");
    let (file, direct_ok) = cleanup.create(&data_path, || {
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .direct(true)
            .open(&engine, &data_path)
            .wait();
        match direct {
            Ok(f) => Ok((f, true)),
            // The file system refuses O_DIRECT: go on without the direct modes.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let _ = std::fs::remove_file(&data_path);
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&engine, &data_path)
                    .wait()
                    .with_context(|| format!("creating {}", data_path.display()))?;
                Ok((f, false))
            }
            Err(e) => Err(e).with_context(|| format!("creating {}", data_path.display())),
        }
    })?;
    let align = file.alignment();
    let buf_align = AlignedBufPool::for_file(&file, CHUNK as usize, 0)?.align();
    if direct_ok {
        out.human(&format!(
            "alignment: direct I/O needs buffers aligned to {} bytes and offsets/lengths to {} \
             bytes (from {}); the probe's buffers (AlignedBufPool::for_file) are aligned to {}",
            align.memory, align.offset, align.source, buf_align
        ))?;
    } else {
        out.human(&format!(
            "alignment: {} refuses O_DIRECT here (EINVAL); the direct modes are skipped",
            fs.kind
        ))?;
    }
    out.human(&format!(
        "plan:      reads: {} x 64 KiB at random distinct offsets of a {} file (seed {seed}); \
         writes: {} in 64 KiB chunks, {WRITE_DEPTH} in flight",
        requests,
        fmt_bytes(size),
        fmt_bytes(size)
    ))?;
    file.allocate(0, size)
        .wait()
        .context("preallocating the data file")?;
    async_writes(&engine, &file, size, seed, &pb).context("writing the data file")?;
    file.sync_all().wait().context("syncing the data file")?;
    file.close().wait().context("closing the data file")?;

    let record = |mode: Mode, m: &Measurement, cx: &Facts| -> Record {
        let v = verdict(m);
        let complete_s = m.complete.as_secs_f64();
        Record {
            driver,
            fallback_reason: fallback.clone(),
            op: if matches!(mode, Mode::Read(..)) {
                "read"
            } else {
                "write"
            },
            mode: mode.name(),
            requests: m.requests,
            bytes: m.bytes,
            queue_s: m.queue.as_secs_f64(),
            complete_s,
            out_of_order: m.out_of_order > 0,
            out_of_order_count: m.out_of_order,
            inline: m.inline,
            kernel_workers: m.kernel_workers,
            verdict: v.as_str(),
            explanation: explain(mode, v, m, cx),
            mb_s: if complete_s > 0.0 {
                m.bytes as f64 / complete_s / 1e6
            } else {
                0.0
            },
            fsync_s: m.fsync.map(|d| d.as_secs_f64()),
            cached_before: m.cached_before,
            fast_path_off_queue_s: m.fast_path_off.map(|(q, _, _)| q.as_secs_f64()),
            fast_path_off_complete_s: m.fast_path_off.map(|(_, c, _)| c.as_secs_f64()),
            seed,
            fast_path_hits: m.fast_path_hits,
            fast_path_misses: m.fast_path_misses,
            fast_path_skipped: m.fast_path_skipped,
            submit_syscalls: m.submit_syscalls,
        }
    };
    let mut records: Vec<Record> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    // --- reads ---------------------------------------------------------------
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Distinct chunks, in random order (the order they are submitted in).
    let offsets: Vec<u64> = rand::seq::index::sample(&mut rng, chunks as usize, requests as usize)
        .into_iter()
        .map(|i| i as u64 * CHUNK)
        .collect();

    let std_file = std::fs::File::open(&data_path)
        .with_context(|| format!("opening {}", data_path.display()))?;
    let direct_file = if direct_ok {
        Some(
            OpenOptions::new()
                .read(true)
                .direct(true)
                .open(&engine, &data_path)
                .wait()
                .with_context(|| format!("opening {} with O_DIRECT", data_path.display()))?,
        )
    } else {
        None
    };
    let buffered_file = OpenOptions::new()
        .read(true)
        .access(Access::Random)
        .open(&engine, &data_path)
        .wait()
        .with_context(|| format!("opening {}", data_path.display()))?;

    out.human("")?;
    out.human(&format!(
        "reads: {} x 64 KiB at scattered offsets, all queued before any completion is taken",
        requests
    ))?;
    let cx = Facts {
        driver: info.kind,
        fs: fs.kind.clone(),
        grow_workers: None,
    };
    for mode in READ_MODES {
        let Mode::Read(api, kind) = mode else {
            unreachable!()
        };
        pb.set_message(mode.name());
        if kind == ReadKind::Direct && !direct_ok {
            out.human(&format!(
                "{:<28}skipped: no O_DIRECT on {}",
                mode.name(),
                fs.kind
            ))?;
            pb.inc(read_bytes);
            continue;
        }
        let mut cached_before = None;
        match kind {
            ReadKind::Direct => {
                cached_before = residency(&std_file, size).map(|p| cached_share(&p, &offsets));
            }
            ReadKind::Cold => {
                evict(&std_file)?;
                if let Some(pages) = residency(&std_file, size) {
                    let share = cached_share(&pages, &offsets);
                    cached_before = Some(share);
                    if share > 0.0 {
                        let why = if fs.kind == "tmpfs" {
                            "tmpfs keeps its files in memory: they cannot be evicted"
                        } else {
                            "is the file mapped or in use by another process?"
                        };
                        notes.push(format!(
                            "{}: the eviction did not fully work: {} of the requested pages \
                             ({} of the file) were still in the page cache ({why})",
                            mode.name(),
                            pct(share),
                            pct(whole_share(&pages))
                        ));
                    }
                } else {
                    notes.push(format!(
                        "{}: could not verify the eviction (mincore failed)",
                        mode.name()
                    ));
                }
            }
            ReadKind::Cached => {
                pb.set_message(format!("{} (warm-up)", mode.name()));
                warm(&data_path, &pb)?;
                pb.set_message(mode.name());
                if let Some(pages) = residency(&std_file, size) {
                    let share = cached_share(&pages, &offsets);
                    cached_before = Some(share);
                    if share < 1.0 {
                        notes.push(format!(
                            "{}: only {} of the requested pages stayed in the page cache after \
                             reading the file (too little free memory for a {} file?)",
                            mode.name(),
                            pct(share),
                            fmt_bytes(size)
                        ));
                    }
                }
            }
        }
        let mut m = match api {
            Api::Async => {
                let f = match kind {
                    ReadKind::Direct => direct_file.as_ref().expect("direct_ok"),
                    _ => &buffered_file,
                };
                async_reads(&engine, f, &offsets, &pb)
            }
            Api::Sync => sync_reads(
                &data_path,
                kind == ReadKind::Direct,
                buf_align,
                &offsets,
                &pb,
            ),
        }
        .with_context(|| format!("mode {}", mode.name()))?;
        m.cached_before = cached_before;
        if mode == Mode::Read(Api::Async, ReadKind::Cold) {
            // The fast path tried every read on this thread first: measure
            // the same reads without it, for the explanation.
            evict(&std_file)?;
            let alt = fast_path_off_reads(&engine_builder, &data_path, &offsets, &pb)
                .context("mode async-buffered-cold without the fast path")?;
            m.fast_path_off = Some((alt.queue, alt.complete, alt.inline));
        }
        let r = record(mode, &m, &cx);
        out.record(&r)?;
        records.push(r);
    }
    drop(std_file);
    if let Some(f) = direct_file {
        f.close().wait().context("closing the data file")?;
    }
    buffered_file
        .close()
        .wait()
        .context("closing the data file")?;
    cleanup.remove(&data_path)?;

    // --- writes --------------------------------------------------------------
    out.human("")?;
    out.human(&format!(
        "writes: {} sequentially in 64 KiB chunks, {WRITE_DEPTH} in flight, to a new file",
        fmt_bytes(size)
    ))?;
    let mut grow_workers: [Option<u64>; 3] = [None; 3];
    for mode in WRITE_MODES {
        let Mode::Write(alloc, kind) = mode else {
            unreachable!()
        };
        pb.set_message(mode.name());
        if mode.is_direct() && !direct_ok {
            out.human(&format!(
                "{:<28}skipped: no O_DIRECT on {}",
                mode.name(),
                fs.kind
            ))?;
            pb.inc(size);
            continue;
        }
        let file = cleanup.create(&write_path, || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .direct(kind == WriteKind::Direct)
                .write_through(kind == WriteKind::WriteThrough)
                .open(&engine, &write_path)
                .wait()
                .with_context(|| format!("creating {}", write_path.display()))
        })?;
        if alloc == Alloc::Prealloc {
            file.allocate(0, size)
                .wait()
                .with_context(|| format!("preallocating {} (fallocate)", fmt_bytes(size)))?;
        }
        let mut m = async_writes(&engine, &file, size, seed ^ 0x5eed, &pb)
            .with_context(|| format!("mode {}", mode.name()))?;
        let t = Instant::now();
        file.sync_data()
            .wait()
            .with_context(|| format!("mode {}: fdatasync", mode.name()))?;
        m.fsync = Some(t.elapsed());
        file.close()
            .wait()
            .with_context(|| format!("mode {}: closing", mode.name()))?;
        cleanup.remove(&write_path)?;
        let k = kind as usize;
        let cx = Facts {
            driver: info.kind,
            fs: fs.kind.clone(),
            grow_workers: grow_workers[k],
        };
        if alloc == Alloc::Grow {
            grow_workers[k] = Some(m.kernel_workers);
        }
        let r = record(mode, &m, &cx);
        out.record(&r)?;
        records.push(r);
    }
    pb.finish_and_clear();

    if args.json {
        for n in &notes {
            eprintln!("note: {n}");
        }
        return Ok(());
    }
    if !notes.is_empty() {
        out.line("")?;
        for n in &notes {
            out.line(&format!("note: {n}"))?;
        }
    }
    out.line("")?;
    out.line(&summary(&records, info.kind, &fs.kind))?;
    drop(cleanup);
    Ok(())
}

/// The closing paragraph, built from the verdicts.
fn summary(records: &[Record], driver: DriverKind, fs: &str) -> String {
    let get = |name: &str| records.iter().find(|r| r.mode == name);
    let ratio = |r: &Record| {
        if r.complete_s > 0.0 {
            r.queue_s / r.complete_s
        } else {
            1.0
        }
    };
    // On aio+pool, only the O_DIRECT modes went to the kernel (Linux AIO).
    let by_threads = |r: &Record| {
        driver == DriverKind::Pool || (driver == DriverKind::Aio && !r.mode.contains("direct"))
    };
    let plain = |r: &Record| match r.verdict {
        "async" if by_threads(r) => "asynchronous (by threads)",
        "async" => "truly asynchronous",
        "sync" => "synchronous",
        _ => "handed to kernel workers",
    };
    let mut s = format!("Summary ({} on {fs}): ", driver.as_str());
    if driver == DriverKind::Aio {
        s.push_str(
            "io_uring is unavailable, so O_DIRECT reads and writes went through Linux AIO, which \
             the kernel performs asynchronously; buffered ones went to the thread pool, so \
             whatever of them overlapped did so because threads made blocking system calls. ",
        );
    }
    if driver == DriverKind::Pool {
        s.push_str(
            "the thread-pool driver is in use, so whatever overlapped did so because up to 32 \
             threads made blocking system calls at once, not because the kernel did the I/O \
             asynchronously. ",
        );
    }
    if let Some(r) = get("async-direct") {
        let _ = write!(
            s,
            "{} direct reads were queued in {:.3} s, {} of the {:.3} s they took to complete, \
             and came back {}: {}",
            r.requests,
            r.queue_s,
            pct(ratio(r)),
            r.complete_s,
            if r.out_of_order {
                "out of order"
            } else {
                "in submission order"
            },
            plain(r)
        );
        match get("sync-direct") {
            Some(sd) if r.complete_s > 0.0 => {
                let _ = write!(
                    s,
                    " (one after another they took {:.3} s, {:.1}x as long). ",
                    sd.complete_s,
                    sd.complete_s / r.complete_s
                );
            }
            _ => s.push_str(". "),
        }
    }
    if let Some(r) = get("async-buffered-cold") {
        let _ = write!(
            s,
            "Buffered reads of an evicted file: {}, queueing took {} of the time",
            plain(r),
            pct(ratio(r))
        );
        match (r.fast_path_off_queue_s, r.fast_path_off_complete_s) {
            (Some(q), Some(c)) if r.fast_path_misses > 0 && ratio(r) >= 0.2 => {
                let _ = write!(
                    s,
                    ", because the page-cache fast path tried each read on the calling thread \
                     first and a miss starts the disk read there (without the fast path: \
                     queued in {q:.3} s, completed in {c:.3} s). "
                );
            }
            (Some(q), Some(c)) => {
                let _ = write!(
                    s,
                    " (without the page-cache fast path: queued in {q:.3} s, completed in \
                     {c:.3} s). "
                );
            }
            _ => s.push_str(". "),
        }
    }
    if let Some(r) = get("async-buffered-cached") {
        let _ = write!(
            s,
            "Buffered reads of a cached file: {}, {} of {} inline; as KB 156932 says of the \
             Windows cache, a cache hit completes at once, so asynchronous submission buys \
             nothing there. ",
            plain(r),
            r.inline,
            r.requests
        );
    }
    if let (Some(g), Some(p)) = (get("async-grow-direct"), get("async-prealloc-direct")) {
        let _ = write!(
            s,
            "Direct writes that grew the file: {} ({} kernel workers, {:.0} MB/s); into \
             preallocated space: {} ({} kernel workers, {:.0} MB/s). ",
            plain(g),
            g.kernel_workers,
            g.mb_s,
            plain(p),
            p.kernel_workers,
            p.mb_s
        );
    }
    let pair = |a: &str, b: &str| match (get(a), get(b)) {
        (Some(g), Some(p)) if g.verdict == p.verdict => Some(format!(
            "{} whether or not the file was preallocated",
            plain(g)
        )),
        (Some(g), Some(p)) => Some(format!(
            "{} when the file grew, {} when it was preallocated",
            plain(g),
            plain(p)
        )),
        _ => None,
    };
    if let Some(b) = pair("async-grow-buffered", "async-prealloc-buffered") {
        let _ = write!(
            s,
            "Buffered writes: {b}; they complete once in RAM and are not durable until fsync. "
        );
    }
    if let Some(w) = pair("async-grow-writethrough", "async-prealloc-writethrough") {
        let _ = write!(
            s,
            "Write-through (O_DSYNC) writes: {w}; each is durable when it completes."
        );
    }
    s.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_shortfall_is_never_rounded_to_100_percent() {
        assert_eq!(super::pct(0.996), "99.6%");
        assert_eq!(super::pct(0.9999), "99.9%");
        assert_eq!(super::pct(1.0), "100%");
        assert_eq!(super::pct(0.5), "50%");
        assert_eq!(super::pct(0.001), "<1%");
    }

    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64mib"), Ok(64 << 20));
        assert_eq!(parse_size(" 4096K "), Ok(4 << 20));
        assert_eq!(parse_size("4194304"), Ok(4 << 20));
        assert_eq!(parse_size("1P"), Ok(MAX_SIZE));
    }

    #[test]
    fn bad_sizes_say_why() {
        let err = |s: &str| parse_size(s).unwrap_err();
        assert!(err("").contains("not a size"));
        assert!(err("G").contains("not a size"));
        assert!(err("-1G").contains("not a size"));
        assert!(err("1.5G").contains("not a size"));
        assert!(err("64Q").contains("unknown size unit"));
        assert!(err("512K").contains("too small"));
        assert!(err("4000000").contains("multiple of 64 KiB"));
        assert!(err("2P").contains("too large"));
        assert!(err("99999999999999999999").contains("too large"));
        assert!(err("18446744073709551615K").contains("too large"));
    }

    fn m(requests: u64, queue_ms: u64, complete_ms: u64, inline: u64, workers: u64) -> Measurement {
        Measurement {
            requests,
            queue: Duration::from_millis(queue_ms),
            complete: Duration::from_millis(complete_ms),
            inline,
            kernel_workers: workers,
            ..Measurement::default()
        }
    }

    #[test]
    fn verdict_rules() {
        // Kernel workers outrank timings that look asynchronous.
        assert_eq!(verdict(&m(500, 1, 100, 0, 3)), Verdict::KernelWorkers);
        assert_eq!(verdict(&m(500, 100, 100, 500, 1)), Verdict::KernelWorkers);
        // 90% inline, or queueing 90% of the completion time: synchronous.
        assert_eq!(verdict(&m(500, 1, 100, 450, 0)), Verdict::Sync);
        assert_eq!(verdict(&m(500, 1, 100, 449, 0)), Verdict::Async);
        assert_eq!(verdict(&m(500, 90, 100, 0, 0)), Verdict::Sync);
        assert_eq!(verdict(&m(500, 89, 100, 0, 0)), Verdict::Async);
        assert_eq!(verdict(&m(500, 4, 180, 0, 0)), Verdict::Async);
    }

    #[test]
    fn out_of_order_counts_completions_overtaken_by_later_requests() {
        let count = |keys: &[u64]| {
            let mut o = Order::default();
            keys.iter().for_each(|&k| o.see(k));
            o.late
        };
        assert_eq!(count(&[0, 1, 2, 3]), 0);
        assert_eq!(count(&[1, 0, 2, 3]), 1);
        assert_eq!(count(&[3, 2, 1, 0]), 3);
        assert_eq!(count(&[0, 2, 1, 3]), 1);
    }

    #[test]
    fn the_data_check_catches_a_misplaced_chunk() {
        let mut buf = vec![0u8; CHUNK as usize];
        fill_pattern(&mut buf, 42);
        stamp(&mut buf, 5 * CHUNK);
        assert!(check_stamp(&buf, 5 * CHUNK).is_ok());
        let err = check_stamp(&buf, 6 * CHUNK).unwrap_err().to_string();
        assert!(err.contains("data check failed"), "{err}");
    }

    #[test]
    fn page_residency_is_measured() {
        // Next to the test binary, inside cargo's target directory: neither a
        // tmpfs (which cannot evict) nor the source tree.
        struct Remove(PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let exe = std::env::current_exe().unwrap();
        let path = exe
            .parent()
            .unwrap()
            .join(format!("overlap-probe-unit-{}", std::process::id()));
        let _remove = Remove(path.clone());
        std::fs::write(&path, vec![1u8; 4 * CHUNK as usize]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let pages = residency(&f, 4 * CHUNK).expect("mincore");
        // Just written: in the page cache.
        assert!(whole_share(&pages) > 0.99, "{}", whole_share(&pages));
        assert!(cached_share(&pages, &[0, 2 * CHUNK]) > 0.99);
        evict(&f).unwrap();
        let after = residency(&f, 4 * CHUNK).expect("mincore");
        assert!(whole_share(&after) < whole_share(&pages));
        assert!(cached_share(&after, &[0, 2 * CHUNK]) < 0.99);
    }
}
