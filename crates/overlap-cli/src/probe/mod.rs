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
//!   are all submitted through a [`Port`](overlapped::Port) before any completion is taken,
//!   in one [`Port::batch`] (32 reads per `io_uring_enter`; the
//!   `submit_syscalls` of the JSON counts them).
//! - **writes**: `--size` bytes written sequentially in 64 KiB chunks with 32
//!   in flight, in the modes {grow, prealloc} × {direct, buffered,
//!   writethrough}.
//!
//! For each mode it records how long submission took (`queue_s`), how long
//! until the last completion (`complete_s`), whether completions came back
//! out of submission order, how many completed inline (synchronously), and
//! how many kernel io_uring worker threads (`iou-wrk`) did work — and turns
//! that into a verdict (see [`verdict`]).
//!
//! The module's parts: [`plan`] (what to measure: the modes, the file, the
//! offsets), [`modes`] (each measurement), [`system`] (the file system, the
//! page cache, kernel workers, cleanup), [`verdict`] (the rules and the
//! explanations, from a table), [`report`] (records, lines, the summary)
//! and [`run()`] (the steps in order).

use std::path::PathBuf;

use anyhow::Result;

mod modes;
mod plan;
mod report;
mod run;
mod system;
mod verdict;

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
    /// Driver: auto (io_uring when the kernel allows it, I/O completion
    /// ports on Windows; obeys OVERLAP_DRIVER), uring (fail if
    /// unavailable), aio (Linux AIO for O_DIRECT, the thread pool for the
    /// rest: aio+pool), iocp (Windows) or pool (threads), as `overlap bench
    /// --driver`.
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
    /// io_uring when available, else Linux AIO beside the thread pool (aio+pool), else the pool (obeys OVERLAP_DRIVER).
    Auto,
    /// io_uring, or an error saying what to change.
    Uring,
    /// The bounded thread pool.
    Pool,
    /// Linux AIO for O_DIRECT transfers, the thread pool for the rest
    /// (`aio+pool`), even where io_uring is available.
    Aio,
    /// Windows' I/O completion ports (Windows only; `auto` chooses it
    /// there).
    Iocp,
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
    match run::probe(args) {
        Err(e) if e.downcast_ref::<StdoutClosed>().is_some() => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
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
}
