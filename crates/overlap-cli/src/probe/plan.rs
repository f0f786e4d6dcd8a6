//! The plan: what the probe measures. The modes, and the file and offsets
//! they share, resolved from the options and checked against the
//! directory's free space before anything is created.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use rand::SeedableRng;

use super::system::{fs_info, FsInfo};
use super::{ProbeArgs, CHUNK, DEFAULT_REQUESTS, MIN_CHUNKS, SPACE_MARGIN};
use crate::size::fmt_bytes;

/// How a read mode submits: through the engine, or blocking `pread`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    Async,
    Sync,
}

/// What a read mode reads: O_DIRECT, an evicted file, a cached file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadKind {
    Direct,
    Cold,
    Cached,
}

/// Whether a write mode grows the file, writes into preallocated space,
/// or (Windows) into space whose valid data length was moved beforehand
/// (`SetFileValidData`, the KB's way to make extending writes
/// asynchronous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Alloc {
    Grow,
    Prealloc,
    #[cfg_attr(
        all(not(windows), not(test)),
        expect(dead_code, reason = "valid data length is Windows' notion")
    )]
    ValidData,
}

/// How a write mode writes: O_DIRECT, buffered, or write-through (O_DSYNC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteKind {
    Direct,
    Buffered,
    WriteThrough,
}

/// One measurement the probe makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Read(Api, ReadKind),
    Write(Alloc, WriteKind),
}

impl Mode {
    /// The mode's name in the output (`async-direct`, ...).
    pub(super) fn name(self) -> String {
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
                    Alloc::ValidData => "validdata",
                },
                match kind {
                    WriteKind::Direct => "direct",
                    WriteKind::Buffered => "buffered",
                    WriteKind::WriteThrough => "writethrough",
                }
            ),
        }
    }

    /// Whether the mode uses O_DIRECT.
    pub(super) fn is_direct(self) -> bool {
        matches!(
            self,
            Mode::Read(_, ReadKind::Direct) | Mode::Write(_, WriteKind::Direct)
        )
    }
}

/// The width of the column of mode names in the human output: the longest
/// name and a space.
#[cfg(not(windows))]
pub(super) const NAME_WIDTH: usize = 28;
/// The width of the column of mode names in the human output: the longest
/// name (`async-validdata-writethrough`) and a space.
#[cfg(windows)]
pub(super) const NAME_WIDTH: usize = 29;

/// The read modes, in the order they run.
pub(super) const READ_MODES: [Mode; 6] = [
    Mode::Read(Api::Async, ReadKind::Direct),
    Mode::Read(Api::Async, ReadKind::Cold),
    Mode::Read(Api::Async, ReadKind::Cached),
    Mode::Read(Api::Sync, ReadKind::Direct),
    Mode::Read(Api::Sync, ReadKind::Cold),
    Mode::Read(Api::Sync, ReadKind::Cached),
];

/// The write modes, in the order they run.
#[cfg(not(windows))]
pub(super) const WRITE_MODES: &[Mode] = &[
    Mode::Write(Alloc::Grow, WriteKind::Direct),
    Mode::Write(Alloc::Prealloc, WriteKind::Direct),
    Mode::Write(Alloc::Grow, WriteKind::Buffered),
    Mode::Write(Alloc::Prealloc, WriteKind::Buffered),
    Mode::Write(Alloc::Grow, WriteKind::WriteThrough),
    Mode::Write(Alloc::Prealloc, WriteKind::WriteThrough),
];

/// The write modes, in the order they run: Windows adds the writes into
/// space whose valid data length was set (`SetFileValidData`).
#[cfg(windows)]
pub(super) const WRITE_MODES: &[Mode] = &[
    Mode::Write(Alloc::Grow, WriteKind::Direct),
    Mode::Write(Alloc::Prealloc, WriteKind::Direct),
    Mode::Write(Alloc::ValidData, WriteKind::Direct),
    Mode::Write(Alloc::Grow, WriteKind::Buffered),
    Mode::Write(Alloc::Prealloc, WriteKind::Buffered),
    Mode::Write(Alloc::ValidData, WriteKind::Buffered),
    Mode::Write(Alloc::Grow, WriteKind::WriteThrough),
    Mode::Write(Alloc::Prealloc, WriteKind::WriteThrough),
    Mode::Write(Alloc::ValidData, WriteKind::WriteThrough),
];

/// What one run of the probe measures.
pub(super) struct Plan {
    /// The directory for the files (resolved).
    pub(super) dir: PathBuf,
    /// The file system holding it.
    pub(super) fs: FsInfo,
    /// Bytes of the data file and of each file written.
    pub(super) size: u64,
    /// Reads per read mode.
    pub(super) requests: u64,
    /// The seed of the read offsets.
    pub(super) seed: u64,
    /// The read offsets: distinct 64 KiB chunks, in submission order.
    pub(super) offsets: Vec<u64>,
}

impl Plan {
    /// Resolves the options, refusing what cannot run here (no directory,
    /// too many requests for the file, not enough free space).
    pub(super) fn new(args: &ProbeArgs) -> Result<Plan> {
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
        check_space(&dir, &fs, size)?;
        let seed = args.seed.unwrap_or_else(rand::random);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // Distinct chunks, in random order (the order they are submitted in).
        let offsets: Vec<u64> =
            rand::seq::index::sample(&mut rng, chunks as usize, requests as usize)
                .into_iter()
                .map(|i| i as u64 * CHUNK)
                .collect();
        Ok(Plan {
            dir,
            fs,
            size,
            requests,
            seed,
            offsets,
        })
    }

    /// Bytes read by one read mode.
    pub(super) fn read_bytes(&self) -> u64 {
        self.requests * CHUNK
    }
}

/// The data file and one written file exist at the same time: refuses a
/// directory without room for both (and some slack).
fn check_space(dir: &std::path::Path, fs: &FsInfo, size: u64) -> Result<()> {
    let needed = size
        .checked_mul(2)
        .and_then(|n| n.checked_add(SPACE_MARGIN))
        .ok_or_else(|| anyhow!("--size {size} is too large"))?;
    if fs.available >= needed {
        return Ok(());
    }
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
