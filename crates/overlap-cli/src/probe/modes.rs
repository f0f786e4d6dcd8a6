//! The measurements: each mode's reads or writes, timed, with completion
//! order, inline completions, kernel workers and the engine's counters.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;
use overlapped::{
    Access, AlignedBuf, AlignedBufPool, Engine, File, KernelWorkers, OpenOptions, Port, Stats,
};

use super::system::{advise_random, quiet_workers};
use super::{CHUNK, WRITE_DEPTH};

// ---------------------------------------------------------------------------
// Data and its check: each 64 KiB chunk starts with its own offset.
// ---------------------------------------------------------------------------

pub(super) fn fill_pattern(buf: &mut [u8], seed: u64) {
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

pub(super) fn stamp(buf: &mut [u8], offset: u64) {
    buf[..8].copy_from_slice(&offset.to_le_bytes());
}

pub(super) fn check_stamp(buf: &[u8], offset: u64) -> Result<()> {
    let Some(&head) = buf.first_chunk::<8>() else {
        bail!("data check failed: a read at offset {offset} is shorter than its 8-byte stamp");
    };
    let got = u64::from_le_bytes(head);
    if got != offset {
        bail!(
            "data check failed: the 64 KiB read at offset {offset} holds the chunk written at \
             offset {got}"
        );
    }
    Ok(())
}

/// What one mode did.
#[derive(Debug, Default, Clone)]
pub(super) struct Measurement {
    pub(super) requests: u64,
    pub(super) bytes: u64,
    pub(super) queue: Duration,
    pub(super) complete: Duration,
    /// Completions that arrived after one of a later-submitted request.
    pub(super) out_of_order: u64,
    pub(super) inline: u64,
    pub(super) kernel_workers: u64,
    /// Engine counters over the mode.
    pub(super) fast_path_hits: u64,
    pub(super) fast_path_misses: u64,
    pub(super) fast_path_skipped: u64,
    pub(super) submit_syscalls: u64,
    /// Writes: the final fdatasync.
    pub(super) fsync: Option<Duration>,
    /// Reads: share of the requested pages in the page cache before the mode.
    pub(super) cached_before: Option<f64>,
    /// Reads: requested pages dirty or under writeback before the mode
    /// (`cachestat`; `None` where the kernel cannot tell).
    pub(super) dirty_before: Option<u64>,
    /// async-buffered-cold: the same reads again on an engine without the
    /// page-cache fast path (queue, complete, inline).
    pub(super) fast_path_off: Option<(Duration, Duration, u64)>,
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

/// All reads submitted through a port, in one batch (32 per system call on
/// io_uring), before any is taken.
pub(super) fn async_reads(
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
    // In one batch: the reads reach the kernel 32 per system call, as a
    // program that queues many reads before it waits would submit them.
    port.batch(|port| -> Result<()> {
        for (i, (buf, &off)) in bufs.into_iter().zip(offsets).enumerate() {
            port.read_at(file, buf, off, i as u64)
                .map_err(|(e, _)| e)
                .with_context(|| format!("queueing read {i} at offset {off}"))?;
        }
        Ok(())
    })?;
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
pub(super) fn fast_path_off_reads(
    builder: &overlapped::EngineBuilder,
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
pub(super) fn sync_reads(
    path: &Path,
    direct: bool,
    align: usize,
    offsets: &[u64],
    pb: &ProgressBar,
) -> Result<Measurement> {
    let f = crate::sys::direct(std::fs::OpenOptions::new().read(true), direct)
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
        let got = crate::sys::read_at(&f, &mut buf, off)
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
pub(super) fn async_writes(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
