//! Counters and histograms.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of a histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// How many values.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

impl Summary {
    fn of(h: &Histogram<u64>) -> Summary {
        let s = Summary {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        };
        debug_assert!(s.p50 <= s.p99, "quantiles rise with the quantile");
        s
    }
}

/// A snapshot of a journal's statistics (all since it was opened).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct JournalStats {
    /// Records accepted into the log buffer (counted by the flusher as it
    /// takes them, so the appenders' path stays free of shared counters).
    pub appends: u64,
    /// Payload bytes of those records.
    pub payload_bytes: u64,
    /// Log bytes (headers, payload, padding) of those records.
    pub log_bytes: u64,
    /// Batches the flusher wrote (each one or more writes).
    pub batches: u64,
    /// Records per batch.
    pub batch_records: Summary,
    /// Log bytes per batch.
    pub batch_bytes: Summary,
    /// Write system calls (one per segment piece of a batch).
    pub writes: u64,
    /// Records per write: the records a write completed, for each write
    /// that ends on a record boundary (a write cut at a segment's end
    /// counts its records with the next one).
    pub write_records: Summary,
    /// Records per group commit: how many records each advance of the
    /// durable watermark covered (one per `fdatasync` round, or per O_DSYNC
    /// write).
    pub sync_records: Summary,
    /// Group-commit size seen by each record: the distribution over
    /// records (not over commits) of the size of the group commit that
    /// made it durable. With one record per committer, this is the batch a
    /// typical commit rode in.
    pub commit_batch_records: Summary,
    /// Waiters for `Durable` woken per group commit.
    pub sync_waiters: Summary,
    /// Times a thread blocked in `wait_blocking` woke without its wait
    /// being decided (the watermark moved, but not past its record), and
    /// slept again.
    pub spurious_wakeups: u64,
    /// Batch writes the flusher found complete by a look that did not
    /// sleep, polling because many committers were waiting
    /// ([`Options::spin_committers`](crate::Options::spin_committers)).
    pub polled_writes: u64,
    /// Turns of the flusher, with a write in flight, in which its policy
    /// was to poll for it rather than sleep: more committers waited on the
    /// last group commit than
    /// [`Options::spin_committers`](crate::Options::spin_committers), and
    /// the write was younger than twice the recent write latency. (A turn
    /// that found new records looks at the ring without sleeping anyway.)
    pub poll_turns: u64,
    /// Write latency in microseconds.
    pub write_latency_us: Summary,
    /// Syncs (group commits).
    pub syncs: u64,
    /// Sync latency in microseconds.
    pub sync_latency_us: Summary,
    /// Times an `append` found the buffer full and waited.
    pub full_waits: u64,
    /// `try_append` calls refused with `Full`.
    pub full_refusals: u64,
    /// Time appenders spent waiting for buffer space, in microseconds.
    pub full_wait_us: Summary,
    /// Segments created (preallocated).
    pub segments_created: u64,
    /// Segment files the storage made (the first one at open included,
    /// unlike `segments_created`) with their full size but without their
    /// space reserved, because the file system reserves none (never on Linux,
    /// where `fallocate` reserves or fails; on Windows where
    /// `FileAllocationInformation` is refused, as by Wine or FAT, the size
    /// is set alone with `SetEndOfFile`). Also said in the storage's note.
    pub segments_unreserved: u64,
    /// Segments retired by `truncate_before`.
    pub segments_retired: u64,
    /// Segments made by reusing a retired segment's file (not counted in
    /// `segments_created`).
    pub segments_recycled: u64,
    /// Whether recovery dropped anything when the journal was opened (0
    /// or 1): a torn tail cut off, or (in salvage mode) damaged stretches
    /// dropped. Never silent: also in
    /// [`crate::RecoveryReport::truncated_at`] and `dropped_stretches`.
    pub recovery_cuts: u64,
    /// Where the first thing recovery dropped starts, if it dropped any.
    pub recovery_cut_lsn: Option<u64>,
    /// Valid records recovery dropped with incomplete atomic batches.
    pub recovery_dropped_records: u64,
    /// Next LSN to be handed out (the end of all reserved records).
    pub reserved_lsn: u64,
    /// Every record below this LSN is in the journal's memory.
    pub accepted_lsn: u64,
    /// Every record below this LSN has been handed to the OS.
    pub written_lsn: u64,
    /// Every record below this LSN is on stable storage.
    pub durable_lsn: u64,
}

pub(crate) struct Hists {
    pub batch_records: Histogram<u64>,
    pub batch_bytes: Histogram<u64>,
    pub write_us: Histogram<u64>,
    pub write_records: Histogram<u64>,
    pub sync_records: Histogram<u64>,
    pub commit_batch_records: Histogram<u64>,
    pub sync_waiters: Histogram<u64>,
    pub sync_us: Histogram<u64>,
    pub full_wait_us: Histogram<u64>,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub appends: AtomicU64,
    pub payload_bytes: AtomicU64,
    pub log_bytes: AtomicU64,
    pub batches: AtomicU64,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
    pub full_waits: AtomicU64,
    pub full_refusals: AtomicU64,
    pub segments_created: AtomicU64,
    pub segments_retired: AtomicU64,
    pub segments_recycled: AtomicU64,
    pub spurious_wakeups: AtomicU64,
    pub polled_writes: AtomicU64,
    pub poll_turns: AtomicU64,
    pub hists: Mutex<Option<Hists>>,
}

fn hist() -> Histogram<u64> {
    Histogram::new(3).unwrap_or_else(|e| unreachable!("3 significant digits is valid: {e}"))
}

impl Counters {
    pub(crate) fn new() -> Counters {
        let c = Counters::default();
        *c.hists.lock().unwrap_or_else(|p| p.into_inner()) = Some(Hists {
            batch_records: hist(),
            batch_bytes: hist(),
            write_us: hist(),
            write_records: hist(),
            sync_records: hist(),
            commit_batch_records: hist(),
            sync_waiters: hist(),
            sync_us: hist(),
            full_wait_us: hist(),
        });
        c
    }

    pub(crate) fn with(&self, f: impl FnOnce(&mut Hists)) {
        if let Some(h) = self
            .hists
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            f(h);
        }
    }

    pub(crate) fn add(c: &AtomicU64, n: u64) {
        let before = c.fetch_add(n, Relaxed);
        debug_assert!(before.checked_add(n).is_some(), "a counter never wraps");
    }

    pub(crate) fn snapshot(&self) -> JournalStats {
        let mut s = JournalStats {
            appends: self.appends.load(Relaxed),
            payload_bytes: self.payload_bytes.load(Relaxed),
            log_bytes: self.log_bytes.load(Relaxed),
            batches: self.batches.load(Relaxed),
            writes: self.writes.load(Relaxed),
            syncs: self.syncs.load(Relaxed),
            full_waits: self.full_waits.load(Relaxed),
            full_refusals: self.full_refusals.load(Relaxed),
            segments_created: self.segments_created.load(Relaxed),
            segments_retired: self.segments_retired.load(Relaxed),
            segments_recycled: self.segments_recycled.load(Relaxed),
            spurious_wakeups: self.spurious_wakeups.load(Relaxed),
            polled_writes: self.polled_writes.load(Relaxed),
            poll_turns: self.poll_turns.load(Relaxed),
            ..JournalStats::default()
        };
        self.with(|h| {
            s.batch_records = Summary::of(&h.batch_records);
            s.batch_bytes = Summary::of(&h.batch_bytes);
            s.write_latency_us = Summary::of(&h.write_us);
            s.write_records = Summary::of(&h.write_records);
            s.sync_records = Summary::of(&h.sync_records);
            s.commit_batch_records = Summary::of(&h.commit_batch_records);
            s.sync_waiters = Summary::of(&h.sync_waiters);
            s.sync_latency_us = Summary::of(&h.sync_us);
            s.full_wait_us = Summary::of(&h.full_wait_us);
        });
        s
    }
}
