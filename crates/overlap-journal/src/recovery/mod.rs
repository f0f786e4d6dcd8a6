//! Finding, validating and repairing the log when a journal is opened.

use std::io;
use std::sync::Arc;

use crate::error::{Damage, Error, Result};
use crate::format::{decode_segment_header, Checkpoint, Geometry, StreamSource, SEGMENT_HEADER};
use crate::storage::Storage;

mod aside;
mod repair;
mod report;
mod salvage;
mod scan;

use repair::{create, repair_log};
pub use report::{DroppedStretch, RecoveryMode, RecoveryReport, MAX_LISTED};
pub(crate) use salvage::salvage;
use scan::{Scan, Scanned};

/// The log bytes of a [`Storage`], limited to positions below `end`.
pub(crate) struct StorageSource {
    pub storage: Arc<dyn Storage>,
    pub geo: Geometry,
    pub end: u64,
}

impl StreamSource for StorageSource {
    fn read_stream(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut done = 0usize;
        let end = self.end.min(pos.saturating_add(buf.len() as u64));
        let mut at = pos;
        while at < end {
            let seq = self.geo.segment_of(at);
            let seg_end = self.geo.segment_start(seq + 1);
            let n = (end.min(seg_end) - at) as usize;
            let got = self
                .storage
                .read(seq, self.geo.file_offset(at), &mut buf[done..done + n])?;
            done += got;
            at += got as u64;
            if got < n {
                break;
            }
        }
        Ok(done)
    }
}

/// The state a journal continues from.
pub(crate) struct Recovered {
    pub geo: Geometry,
    pub checkpoint: Checkpoint,
    /// Where new records continue.
    pub end: u64,
    /// Where the valid records readers can see end: `end`, except when
    /// nothing was repaired and a stretch is dropped (its start).
    pub read_end: u64,
    /// The bytes of the block holding `end`, before `end` (when repairing).
    pub tail: Vec<u8>,
    /// Lowest and highest segment that exist.
    pub first_seq: u64,
    pub last_seq: u64,
    /// The record length limit for reading this journal.
    pub read_limit: usize,
    pub report: RecoveryReport,
}

fn corrupt(lsn: u64, damage: Damage) -> Error {
    Error::Corrupt { lsn, damage }
}

/// Receives every dropped stretch, as recovery finds it.
pub(crate) type OnDropped<'a> = &'a mut dyn FnMut(&DroppedStretch) -> Result<()>;

/// Recovers the journal in `storage`. With `repair`, the storage is made
/// ready for appending (new journal created, dropped stretches covered by
/// fillers, damaged tail zeroed, state synced); without, nothing is
/// changed (`verify`, `dump`, `repair --dry-run`). `on_dropped` sees every
/// dropped stretch.
pub(crate) fn recover(
    storage: &Arc<dyn Storage>,
    mode: RecoveryMode,
    segment_size: u64,
    max_record: usize,
    repair: bool,
    on_dropped: Option<OnDropped<'_>>,
) -> Result<Recovered> {
    if mode == RecoveryMode::Salvage && repair {
        return salvage_then_open(storage, segment_size, max_record, on_dropped);
    }
    let ckpt = storage
        .read_checkpoint()?
        .map(|b| Checkpoint::decode_file(&b).ok_or(corrupt(0, Damage::BadCheckpoint)))
        .transpose()?;
    let segs = storage.list_segments()?;
    let mut report = RecoveryReport::new(storage, mode, segs.len() as u64, repair);
    let Some(ckpt) = ckpt else {
        return create(storage, &segs, segment_size, max_record, repair, report);
    };
    let geo = ckpt.geometry;
    report.start_lsn = ckpt.start_lsn;
    report.checkpoint_durable_lsn = ckpt.durable_lsn;
    let bad_headers = check_segment_headers(storage, &segs, geo, mode)?;
    // A writer is appending after the durable point: read up to it.
    let limit = if report.live {
        ckpt.durable_lsn
    } else {
        u64::MAX
    };
    // Records as large as any open of this journal allowed may be there.
    let read_limit = max_record.max(ckpt.max_record_bytes as usize);
    let scan = Scan {
        storage,
        segs: &segs,
        geo,
        read_limit,
        start: ckpt.start_lsn,
        durable: ckpt.durable_lsn,
        floor: ckpt.durable_lsn, // at the valid end, as after a crash
        limit,
        // Valid records after the end are looked for up to the end of the
        // last segment file.
        scan_to: segs
            .last()
            .map_or(0, |&s| geo.segment_start(s + 1))
            .min(limit),
        mode,
    };
    let scanned = find_dropped(&scan, &ckpt, on_dropped, &mut report)?;
    let start_seq = geo.segment_of(ckpt.start_lsn);
    let end_seq = geo.segment_of(scanned.end);
    let mut recovered = Recovered {
        geo,
        checkpoint: ckpt,
        end: scanned.end,
        read_end: scanned.read_end,
        tail: Vec::new(),
        first_seq: segs.first().copied().unwrap_or(start_seq).min(start_seq),
        last_seq: segs.last().copied().unwrap_or(end_seq),
        read_limit,
        report,
    };
    if repair {
        repair_log(&scan, &scanned, &bad_headers, &mut recovered)?;
    }
    Ok(recovered)
}

/// Salvages (plan, then apply), then opens what it left for appending.
fn salvage_then_open(
    storage: &Arc<dyn Storage>,
    segment_size: u64,
    max_record: usize,
    on_dropped: Option<OnDropped<'_>>,
) -> Result<Recovered> {
    let report = salvage(storage, max_record, true, on_dropped)?;
    let mut rec = recover(
        storage,
        RecoveryMode::TolerateTornTail,
        segment_size,
        max_record,
        true,
        None,
    )?;
    rec.report = report;
    Ok(rec)
}

/// Validates the segment headers; returns the bad ones. Salvage reads
/// through a bad one (the records in it are checked one by one: LSN,
/// identity, CRC) and, when repairing, writes it anew; any other mode
/// fails on it.
fn check_segment_headers(
    storage: &Arc<dyn Storage>,
    segs: &[u64],
    geo: Geometry,
    mode: RecoveryMode,
) -> Result<Vec<u64>> {
    let mut hdr = [0u8; SEGMENT_HEADER];
    let mut bad_headers = Vec::new();
    for &seq in segs {
        let n = storage.read(seq, 0, &mut hdr)?;
        let ok =
            decode_segment_header(&hdr[..n]).is_some_and(|h| h.geometry == geo && h.seq == seq);
        if !ok {
            if mode != RecoveryMode::Salvage {
                return Err(corrupt(
                    geo.segment_start(seq),
                    Damage::BadSegmentHeader(seq),
                ));
            }
            bad_headers.push(seq);
        }
    }
    Ok(bad_headers)
}

/// The first pass of the scan: finds what is dropped, counts it in
/// `report` and passes it to `on_dropped`. Nothing in the log is changed.
fn find_dropped(
    scan: &Scan<'_>,
    ckpt: &Checkpoint,
    mut on_dropped: Option<OnDropped<'_>>,
    report: &mut RecoveryReport,
) -> Result<Scanned> {
    let scanned = {
        let report = &mut *report;
        let mut first = |d: &DroppedStretch| -> Result<()> {
            report.count_dropped(d, ckpt.durable_lsn);
            if let Some(f) = on_dropped.as_mut() {
                f(d)?;
            }
            Ok(())
        };
        scan.run(&mut first)?
    };
    report.records = scanned.records;
    report.salvaged_records = scanned.salvaged;
    report.end_lsn = scanned.end;
    Ok(scanned)
}
