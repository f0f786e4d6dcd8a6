//! The operating system's layer under the operations and the files: what
//! differs between Linux (`linux.rs`) and Windows (`windows.rs`), behind one
//! set of names, and what both share (the page-cache fast path's miss
//! history, which only Linux's fast path consults).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

/// What the page-cache fast path and the dentry-cache `statx` count, in
/// the engine's counters (`crate::stats::Counters` implements it): the OS
/// layer names no layer above it.
pub(crate) trait Tally {
    /// A read answered whole from the page cache, of `bytes`.
    fn fast_hit(&self, bytes: u64);
    /// A read the page cache could not answer whole.
    fn fast_miss(&self);
    /// A read that skipped the page cache after a streak of misses.
    fn fast_skipped(&self);
    /// An operation answered on the calling thread (`error`: it failed).
    fn inline_done(&self, error: bool);
}

/// After this many consecutive misses the fast path is skipped: on a miss the
/// kernel starts the disk read on the calling thread, which is exactly the
/// blocking that asynchronous I/O should spare it.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const MISS_STREAK: u32 = 4;
/// While skipping, one read in this many still tries the page cache, so a
/// file that becomes cached gets the fast path back.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const RETRY_EVERY: u32 = 32;
/// A streak is forgotten once the last miss is this old: the file may have
/// been read into the cache meanwhile.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const STREAK_EXPIRES_NS: u64 = 10_000_000;

/// A file's recent page-cache fast-path misses: after a streak of them the
/// fast path is skipped for a while (see the constants above).
#[derive(Default)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct MissHistory {
    /// Consecutive misses.
    streak: AtomicU32,
    /// Reads that skipped the fast path because of the streak.
    skipped: AtomicU32,
    /// When the last miss happened (ns on CLOCK_MONOTONIC).
    last_ns: AtomicU64,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl MissHistory {
    /// Whether a buffered read of this file should try the page cache first.
    pub(crate) fn worth_trying(&self) -> bool {
        if self.streak.load(Ordering::Relaxed) < MISS_STREAK {
            return true;
        }
        let since_miss = monotonic_ns().saturating_sub(self.last_ns.load(Ordering::Relaxed));
        since_miss > STREAK_EXPIRES_NS
            || self.skipped.fetch_add(1, Ordering::Relaxed) % RETRY_EVERY == RETRY_EVERY - 1
    }

    /// Records the outcome of a fast-path attempt.
    pub(crate) fn record(&self, hit: bool) {
        if hit {
            if self.streak.load(Ordering::Relaxed) != 0 {
                self.streak.store(0, Ordering::Relaxed);
            }
        } else {
            self.streak.fetch_add(1, Ordering::Relaxed);
            self.last_ns.store(monotonic_ns(), Ordering::Relaxed);
        }
    }
}
