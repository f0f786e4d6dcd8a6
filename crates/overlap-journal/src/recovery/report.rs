//! What recovery reports: [`RecoveryMode`], [`DroppedStretch`] and
//! [`RecoveryReport`].

use std::sync::Arc;

use serde::Serialize;

use crate::storage::Storage;

/// What recovery does with damage (the rule is in the crate
/// documentation, "Recovery: torn writes and corruption").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecoveryMode {
    /// The default. Damage after the checkpoint's durable point with no
    /// valid record of this journal after it is a torn tail: cut off, and
    /// reported ([`RecoveryReport::truncated_at`],
    /// [`crate::JournalStats::recovery_cuts`]). Damage with valid records
    /// after it is an error ([`crate::Damage::RecordsFollow`]), as is any
    /// damage before the durable point: nothing that may have been
    /// acknowledged is cut.
    #[default]
    TolerateTornTail,
    /// Any damage is an error.
    Strict,
    /// Salvage (what `overlap journal repair` and [`crate::repair`] do):
    /// drop every damaged stretch wherever it is, even before the durable
    /// point, and keep every valid record after it (resynchronising on the
    /// next valid record, as RocksDB's `kSkipAnyCorruptedRecords` does).
    /// What is dropped is listed ([`RecoveryReport::dropped`]) and, when
    /// opening for writing on files, saved to a file in the journal
    /// directory ([`RecoveryReport::dropped_file`]).
    Salvage,
}

/// Most dropped stretches a [`RecoveryReport`] lists (all are counted,
/// saved, and passed to [`crate::repair`]'s callback).
pub const MAX_LISTED: usize = 1000;

/// A stretch of the log that recovery drops: damaged bytes, and the valid
/// records an incomplete atomic batch makes unusable. Its LSNs are never
/// handed out again: when the journal is opened for writing, a *filler*
/// record is written over its start, and readers skip it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DroppedStretch {
    /// Its first LSN: where the damage starts (or the first record of an
    /// incomplete batch).
    pub from: u64,
    /// The LSN after it: the next valid record, or, at the end of the log,
    /// where new records continue (after every byte this journal may have
    /// written there).
    pub to: u64,
    /// What is wrong at `from`.
    pub damage: String,
    /// Valid records inside it (of an incomplete batch), dropped with it.
    pub records: u64,
}

/// What recovery found (and, when opening for writing, did).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The mode used.
    pub mode: RecoveryMode,
    /// Whether the journal was created just now.
    pub created: bool,
    /// Segment files found.
    pub segments: u64,
    /// First LSN of the log.
    pub start_lsn: u64,
    /// Where new records continue: the LSN the next record gets. After a
    /// dropped stretch at the end of the log, this is past every byte the
    /// journal may have written there, so no LSN is handed out twice.
    pub end_lsn: u64,
    /// Valid records kept.
    pub records: u64,
    /// The durable point recorded in the checkpoint: damage before it is
    /// always an error (except in [`RecoveryMode::Salvage`]).
    pub checkpoint_durable_lsn: u64,
    /// Where the first dropped stretch starts, if any: where a damaged
    /// tail was cut off, or (salvage) the first damage skipped.
    pub truncated_at: Option<u64>,
    /// What the damage there was.
    pub damage: Option<String>,
    /// Whether a dropped stretch starts before the checkpoint's durable
    /// point, i.e. it dropped records that were acknowledged durable (only
    /// in [`RecoveryMode::Salvage`]).
    pub cut_acknowledged: bool,
    /// How many stretches were dropped (all of them, however many).
    pub dropped_stretches: u64,
    /// Valid records dropped with them (members of incomplete batches).
    pub dropped_records: u64,
    /// Log bytes of the dropped stretches.
    pub dropped_bytes: u64,
    /// The first [`MAX_LISTED`] dropped stretches, in log order.
    pub dropped: Vec<DroppedStretch>,
    /// Valid records kept after the first dropped stretch (salvaged).
    pub salvaged_records: u64,
    /// Where the dropped stretches' bytes were saved, if they were (a
    /// salvage opening for writing on files; see [`crate::repair`]).
    pub dropped_file: Option<String>,
    /// How the storage writes.
    pub storage: String,
    /// Read while another process appends: only the durable prefix the
    /// checkpoint records was read and judged.
    pub live: bool,
    /// Segments whose bad header a salvage rewrites (its old header block
    /// saved first).
    pub rewritten_headers: Vec<u64>,
    /// Segment files a salvage removes (their bytes saved first): outside
    /// the log, with a bad header or holding data.
    pub removed_segments: Vec<u64>,
}
impl RecoveryReport {
    /// The report before anything is found.
    pub(super) fn new(
        storage: &Arc<dyn Storage>,
        mode: RecoveryMode,
        segments: u64,
        repair: bool,
    ) -> Self {
        RecoveryReport {
            mode,
            created: false,
            segments,
            start_lsn: 0,
            end_lsn: 0,
            records: 0,
            checkpoint_durable_lsn: 0,
            truncated_at: None,
            damage: None,
            cut_acknowledged: false,
            dropped_stretches: 0,
            dropped_records: 0,
            dropped_bytes: 0,
            dropped: Vec::new(),
            salvaged_records: 0,
            dropped_file: None,
            storage: storage.describe(),
            live: !repair && storage.shared_with_writer(),
            rewritten_headers: Vec::new(),
            removed_segments: Vec::new(),
        }
    }

    /// Whether a salvage changes anything: it drops a stretch, rewrites
    /// a header or removes a segment file.
    pub fn changes_anything(&self) -> bool {
        self.dropped_stretches > 0
            || !self.rewritten_headers.is_empty()
            || !self.removed_segments.is_empty()
    }

    /// Counts a dropped stretch (and lists it, up to [`MAX_LISTED`]).
    pub(super) fn count_dropped(&mut self, d: &DroppedStretch, durable_lsn: u64) {
        self.dropped_stretches += 1;
        self.dropped_records += d.records;
        self.dropped_bytes += d.to - d.from;
        self.cut_acknowledged |= d.from < durable_lsn;
        if self.truncated_at.is_none() {
            self.truncated_at = Some(d.from);
            self.damage = Some(d.damage.clone());
        }
        if self.dropped.len() < MAX_LISTED {
            self.dropped.push(d.clone());
        }
    }
}
