//! Salvage (`repair`) as a plan, then its application.
//!
//! The plan is computed first, from the bytes alone, changing nothing:
//! the stretches to drop (each covered by a filler), the segment headers
//! to rewrite, the segment files to remove, and where new records
//! continue. A dry run stops there. Applying it goes step by step, each
//! leaving a journal that a repair can take up again and that opens once
//! the fillers are written: (1) everything the later steps drop, rewrite
//! or remove is saved to a new `dropped-<N>.bin` and synced; (2) bad
//! headers are rewritten; (3) fillers are written; (4) the segments
//! written (and those from the old durable point to the end) are synced;
//! (5) the segment files outside the log are removed; (6) the checkpoint
//! is written, its durable point and floor never lowered (new records
//! continue at or above the floor: past every record ever acknowledged). The work is bounded by
//! the files that exist, never by segment numbers or LSN distances.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::aside::{Aside, SegmentFate};
use super::repair::write_log;
use super::scan::Scan;
use super::{
    check_segment_headers, corrupt, DroppedStretch, OnDropped, RecoveryMode, RecoveryReport,
};
use crate::error::{Damage, Error, Result};
use crate::format::{encode_filler, Checkpoint, Geometry, CHECKPOINT_SLOT};
use crate::storage::Storage;

/// What a salvage does.
struct Plan {
    /// Every dropped stretch, in log order.
    stretches: Vec<DroppedStretch>,
    /// Segments in the log's range whose bad header is rewritten.
    headers: Vec<u64>,
    /// Segment files removed: outside the log, with a bad header or data.
    removed: Vec<u64>,
    /// Where new records continue.
    end: u64,
}

/// Salvages the journal in `storage`: computes the plan (reported, every
/// dropped stretch passed to `on_dropped`) and, when `apply`, applies it.
pub(crate) fn salvage(
    storage: &Arc<dyn Storage>,
    max_record: usize,
    apply: bool,
    mut on_dropped: Option<OnDropped<'_>>,
) -> Result<RecoveryReport> {
    let Some(bytes) = storage.read_checkpoint()? else {
        return Err(Error::InvalidInput(
            "no journal here (no checkpoint)".into(),
        ));
    };
    let ckpt = Checkpoint::decode_file(&bytes).ok_or(corrupt(0, Damage::BadCheckpoint))?;
    let geo = ckpt.geometry;
    let segs = storage.list_segments()?;
    let mode = RecoveryMode::Salvage;
    let mut report = RecoveryReport::new(storage, mode, segs.len() as u64, apply);
    report.start_lsn = ckpt.start_lsn;
    report.checkpoint_durable_lsn = ckpt.durable_lsn;
    let bad = check_segment_headers(storage, &segs, geo, mode)?;
    let read_limit = max_record.max(ckpt.max_record_bytes as usize);
    let scan = Scan {
        storage,
        segs: &segs,
        geo,
        read_limit,
        start: ckpt.start_lsn,
        durable: ckpt.durable_lsn,
        floor: ckpt.floor(),
        limit: u64::MAX,
        scan_to: segs.last().map_or(0, |&s| geo.segment_start(s + 1)),
        mode,
    };
    let mut stretches = Vec::new();
    let scanned = scan.run(&mut |d: &DroppedStretch| {
        report.count_dropped(d, ckpt.durable_lsn);
        stretches.push(d.clone());
        on_dropped.as_mut().map_or(Ok(()), |f| f(d))
    })?;
    report.records = scanned.records;
    report.salvaged_records = scanned.salvaged;
    report.end_lsn = scanned.end;
    let (headers, removed) = segments_to_fix(storage, &segs, geo, &bad, &ckpt, scanned.end)?;
    report.rewritten_headers = headers.clone();
    report.removed_segments = removed.clone();
    let plan = Plan {
        stretches,
        headers,
        removed,
        end: scanned.end,
    };
    debug_assert!(
        plan.end >= ckpt.floor(),
        "salvage continues at or above the floor"
    );
    let empty = plan.stretches.is_empty() && plan.headers.is_empty() && plan.removed.is_empty();
    if apply && !empty {
        apply_plan(storage, &segs, &ckpt, read_limit, &plan, &mut report)?;
    }
    Ok(report)
}

/// The bad headers to rewrite (in the log's range) and the segment files
/// to remove: after the end's segment, those with a bad header or any
/// data after the header (an empty one made ahead is left to the next
/// open); before the start's, those with a bad header (which no open
/// reads past).
fn segments_to_fix(
    storage: &Arc<dyn Storage>,
    segs: &[u64],
    geo: Geometry,
    bad: &[u64],
    ckpt: &Checkpoint,
    end: u64,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let (start_seq, end_seq) = (geo.segment_of(ckpt.start_lsn), geo.segment_of(end));
    let in_range = |s: u64| s >= start_seq && s <= end_seq;
    let headers: Vec<u64> = bad.iter().copied().filter(|&s| in_range(s)).collect();
    let mut removed = Vec::new();
    for &seq in segs {
        let is_bad = bad.binary_search(&seq).is_ok();
        let stray =
            seq > end_seq && (is_bad || has_data(storage, seq, geo.header_size, geo.segment_size)?);
        if stray || (seq < start_seq && is_bad) {
            removed.push(seq);
        }
    }
    Ok((headers, removed))
}

/// Whether segment `seq` holds a non-zero byte at or after file offset
/// `from`. Reads up to the end of the file; past `size` (the segment
/// size), a storage whose reads never end (reading as zeros) ends at the
/// first megabyte of zeros.
fn has_data(storage: &Arc<dyn Storage>, seq: u64, from: u64, size: u64) -> Result<bool> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = from;
    while let Some((r0, r1)) = storage.data_after(seq, at)? {
        let mut p = r0.max(at);
        while p < r1 {
            let want = ((r1 - p) as usize).min(buf.len());
            let n = storage.read(seq, p, &mut buf[..want])?;
            if buf[..n].iter().any(|&b| b != 0) {
                return Ok(true);
            }
            if n < want || p >= size {
                return Ok(false); // the end of the file
            }
            p += n as u64;
        }
        at = r1;
    }
    Ok(false)
}

/// Applies `plan` in the order the module documentation gives.
fn apply_plan(
    storage: &Arc<dyn Storage>,
    segs: &[u64],
    ckpt: &Checkpoint,
    read_limit: usize,
    plan: &Plan,
    report: &mut RecoveryReport,
) -> Result<()> {
    let geo = ckpt.geometry;
    // 1. Save everything the next steps change or remove.
    if let Some(mut aside) = Aside::create(storage, ckpt)? {
        for d in &plan.stretches {
            aside.save_stretch(storage, segs, geo, d)?;
        }
        for &seq in &plan.headers {
            let fate = SegmentFate::HeaderRewritten;
            aside.save_segment(storage, seq, fate, geo.header_size)?;
        }
        for &seq in &plan.removed {
            aside.save_segment(storage, seq, SegmentFate::Removed, geo.segment_size)?;
        }
        report.dropped_file = Some(aside.finish()?);
    }
    // 2. Headers; 3. fillers.
    let mut touched = BTreeSet::new();
    for &seq in &plan.headers {
        let mut b = overlapped::AlignedBuf::new(storage.block_size(), storage.buffer_align())?;
        let h = geo.encode_segment_header_checked(seq);
        b[..h.len()].copy_from_slice(&h);
        let (res, _) = storage.write(seq, 0, b);
        res?;
        touched.insert(seq);
    }
    for d in &plan.stretches {
        let f = encode_filler(&geo, d.from, d.to - d.from);
        write_log(storage, segs, geo, d.from, &f, &mut touched)?;
    }
    // 4. Sync what was written, and the records from the old durable
    // point to the end (the new durable point).
    let (from_seq, end_seq) = (geo.segment_of(ckpt.durable_lsn), geo.segment_of(plan.end));
    let removed = |s: &u64| plan.removed.binary_search(s).is_ok();
    let range = segs
        .iter()
        .copied()
        .filter(|&s| s >= from_seq && s <= end_seq);
    let to_sync: BTreeSet<u64> = range.chain(touched).filter(|s| !removed(s)).collect();
    for &seq in &to_sync {
        storage.sync(seq)?;
    }
    // 5. Remove; 6. the checkpoint.
    for &seq in &plan.removed {
        storage.remove_segment(seq)?;
    }
    let durable_lsn = plan.end.max(ckpt.durable_lsn);
    let c = Checkpoint {
        generation: ckpt.generation + 1,
        durable_lsn,
        reserved_lsn: ckpt.reserved_lsn.max(durable_lsn),
        max_record_bytes: read_limit.min(u32::MAX as usize) as u32,
        ..*ckpt
    };
    let slot = (c.generation % 2) * CHECKPOINT_SLOT as u64;
    storage.write_checkpoint(slot, &c.encode_checked(), true)?;
    Ok(())
}
