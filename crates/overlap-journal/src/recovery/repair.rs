//! Making the log ready for appending: creating a new journal, covering
//! dropped stretches with fillers, zeroing after the end, and the
//! checkpoint that commits the repair.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use super::scan::{Scan, Scanned};
use super::{corrupt, DroppedStretch, Recovered, RecoveryReport, StorageSource};
use crate::error::{Damage, Error, Result};
use crate::format::{
    align_down, align_up, encode_filler, filler_reads_back, Checkpoint, Geometry, StreamSource,
    CHECKPOINT_SLOT,
};
use crate::storage::Storage;

/// No checkpoint: a new journal when repairing (after removing what an
/// interrupted creation left), an error otherwise.
pub(super) fn create(
    storage: &Arc<dyn Storage>,
    segs: &[u64],
    segment_size: u64,
    max_record: usize,
    repair: bool,
    mut report: RecoveryReport,
) -> Result<Recovered> {
    let bs = storage.block_size() as u64;
    // Segment 0 alone and empty, without a checkpoint: the creation of
    // a journal was interrupted (the checkpoint is written last, once
    // the segment exists).
    let interrupted = segs == [0] && segment_is_empty(storage, bs)?;
    if !segs.is_empty() && !interrupted {
        return Err(corrupt(0, Damage::BadCheckpoint));
    }
    if !repair {
        return Err(Error::InvalidInput("no journal here".into()));
    }
    if interrupted {
        storage.remove_segment(0)?;
    }
    // A new journal. Its settings are persisted (in the checkpoint)
    // only once its first segment exists: a segment that cannot be
    // made leaves nothing behind, and a retry may choose another size.
    let header_size = bs.max(4096);
    let geo = Geometry {
        segment_size,
        header_size,
        uuid: rand::random::<u64>() | 1,
    };
    if !geo.valid() {
        return Err(Error::InvalidInput(format!(
            "segment size {segment_size} must be a multiple of {header_size} and larger than it"
        )));
    }
    let c = Checkpoint {
        geometry: geo,
        generation: 1,
        start_lsn: 0,
        durable_lsn: 0,
        reserved_lsn: 0,
        max_record_bytes: max_record as u32,
    };
    storage.create_segment(0, geo.segment_size, &geo.encode_segment_header_checked(0))?;
    storage.write_checkpoint(CHECKPOINT_SLOT as u64, &c.encode_checked(), true)?;
    report.created = true;
    report.segments = 1;
    Ok(Recovered {
        geo,
        checkpoint: c,
        end: 0,
        read_end: 0,
        tail: Vec::new(),
        first_seq: 0,
        last_seq: 0,
        read_limit: max_record,
        report,
    })
}
/// Makes the log `scanned` found ready for appending at `r.end`: removes
/// the segments outside it, rewrites bad headers, covers the dropped
/// stretches with fillers, prepares the end's block, syncs, and writes the
/// next checkpoint into `r`.
pub(super) fn repair_log(
    scan: &Scan<'_>,
    scanned: &Scanned,
    bad_headers: &[u64],
    r: &mut Recovered,
) -> Result<()> {
    let (storage, segs, geo) = (scan.storage, scan.segs, scan.geo);
    let ckpt = r.checkpoint;
    let end = r.end;
    let start_seq = geo.segment_of(ckpt.start_lsn);
    let end_seq = geo.segment_of(end);
    // Segments below the start: a retirement was interrupted.
    for &seq in segs.iter().filter(|&&s| s < start_seq) {
        storage.remove_segment(seq)?;
    }
    r.first_seq = start_seq;
    let mut touched = BTreeSet::new();
    for &seq in bad_headers
        .iter()
        .filter(|&&s| s >= start_seq && s <= end_seq)
    {
        let mut b = overlapped::AlignedBuf::new(storage.block_size(), storage.buffer_align())?;
        let h = geo.encode_segment_header_checked(seq);
        b[..h.len()].copy_from_slice(&h);
        let (res, _) = storage.write(seq, 0, b);
        res?;
        touched.insert(seq);
    }
    if scanned.stretches > 0 {
        cover_dropped(scan, scanned, &mut touched)?;
    }
    // Segments after the end's hold nothing acknowledged: remove them.
    for &seq in segs.iter().filter(|&&s| s > end_seq) {
        storage.remove_segment(seq)?;
    }
    let missing = segs.binary_search(&end_seq).is_err() && !touched.contains(&end_seq);
    // The log ends exactly where a segment that does not exist would
    // start (it stopped when that segment could not be made, e.g. for
    // lack of space): leave it to the preallocator, so that the journal
    // opens (and reads) on a full file system.
    let defer = missing && end == geo.segment_start(end_seq) && end_seq > r.first_seq;
    if defer {
        r.last_seq = end_seq - 1;
    } else {
        if missing {
            storage.create_segment(
                end_seq,
                geo.segment_size,
                &geo.encode_segment_header_checked(end_seq),
            )?;
        }
        r.last_seq = end_seq;
        r.tail = zero_after_end(storage, geo, end)?;
        touched.insert(end_seq);
    }
    debug_assert!(
        ckpt.start_lsn <= end && r.first_seq <= r.last_seq,
        "the repaired log ends at or after its start and keeps a segment"
    );
    r.checkpoint = commit(storage, segs, &ckpt, r, touched)?;
    r.read_end = end;
    Ok(())
}

/// The second pass of the scan, the same as the first: a filler over the
/// start of each dropped stretch (what it overwrites was saved by the
/// first), so that readers skip it and its LSNs are never handed out
/// again.
fn cover_dropped(scan: &Scan<'_>, scanned: &Scanned, touched: &mut BTreeSet<u64>) -> Result<()> {
    let (storage, segs, geo) = (scan.storage, scan.segs, scan.geo);
    let mut fill = |d: &DroppedStretch| -> Result<()> {
        let f = encode_filler(&geo, d.from, d.to - d.from);
        debug_assert!(
            filler_reads_back(&geo, d.from, d.to - d.from, &f),
            "a filler covers its stretch exactly: {d:?}"
        );
        write_log(storage, segs, geo, d.from, &f, touched)
    };
    let again = scan.run(&mut fill)?;
    if again.end != scanned.end || again.stretches != scanned.stretches {
        return Err(Error::Io(Arc::new(io::Error::other(
            "the log changed while it was being repaired",
        ))));
    }
    Ok(())
}

/// Zeroes everything after `end` in its segment, so that no stale byte
/// there is ever read as part of the log again; returns the bytes of the
/// block holding `end`, before `end`.
fn zero_after_end(storage: &Arc<dyn Storage>, geo: Geometry, end: u64) -> Result<Vec<u8>> {
    let bs = storage.block_size() as u64;
    let end_seq = geo.segment_of(end);
    let tail_start = align_down(end, bs);
    let mut tail = vec![0u8; (end - tail_start) as usize];
    debug_assert!(
        (tail.len() as u64) < bs,
        "the tail is the part of one block before the end"
    );
    let mut src = StorageSource {
        storage: storage.clone(),
        geo,
        end,
    };
    // Bytes past the end of a file cut short read as zeros: they lie in a
    // stretch a filler skips (the scan found no record there).
    src.read_stream(tail_start, &mut tail)?;
    let block_off = geo.file_offset(tail_start);
    let mut zeroes = overlapped::AlignedBuf::new(bs as usize, storage.buffer_align())?;
    zeroes[..tail.len()].copy_from_slice(&tail);
    let (res, _) = storage.write(end_seq, block_off, zeroes);
    res?;
    storage.zero(
        end_seq,
        block_off + bs,
        geo.segment_size.saturating_sub(block_off + bs),
    )?;
    Ok(tail)
}

/// Makes everything up to `r.end` durable (the segments from the old
/// durable point's, and those `touched`), then writes the next checkpoint
/// (in the other slot) and returns it.
fn commit(
    storage: &Arc<dyn Storage>,
    segs: &[u64],
    ckpt: &Checkpoint,
    r: &Recovered,
    mut touched: BTreeSet<u64>,
) -> Result<Checkpoint> {
    let (first_seq, last_seq) = (r.first_seq, r.last_seq);
    // The segments that exist (never every number in the range: segments
    // may be missing between the durable point and the end).
    let from = r.geo.segment_of(ckpt.durable_lsn).max(first_seq);
    touched.extend(segs.iter().copied().filter(|&s| s >= from && s <= last_seq));
    for &seq in touched.iter().filter(|&&s| s >= first_seq && s <= last_seq) {
        storage.sync(seq)?;
    }
    let durable_lsn = r.end.max(ckpt.start_lsn).max(ckpt.durable_lsn);
    let checkpoint = Checkpoint {
        generation: ckpt.generation + 1,
        // Never lowered: no LSN at or below it is handed out again.
        durable_lsn,
        // Nor the floor: records acknowledged past the end (lost to
        // damage that reads as a clean end) stay below it.
        reserved_lsn: ckpt.reserved_lsn.max(durable_lsn),
        max_record_bytes: r.read_limit as u32,
        ..*ckpt
    };
    storage.write_checkpoint(
        (checkpoint.generation % 2) * CHECKPOINT_SLOT as u64,
        &checkpoint.encode_checked(),
        true,
    )?;
    Ok(checkpoint)
}

/// Whether segment 0 holds no record (its first log bytes are zeros).
fn segment_is_empty(storage: &Arc<dyn Storage>, bs: u64) -> Result<bool> {
    let mut b = vec![0u8; (bs.max(4096) + 8) as usize];
    let n = storage.read(0, 0, &mut b)?;
    Ok(b[..n].iter().skip(bs.max(4096) as usize).all(|&x| x == 0))
}

/// Writes `bytes` at log position `pos` (reading and rewriting the blocks
/// around them), creating a segment that does not exist; notes the
/// segments written in `touched` (not synced here).
pub(super) fn write_log(
    storage: &Arc<dyn Storage>,
    segs: &[u64],
    geo: Geometry,
    pos: u64,
    bytes: &[u8],
    touched: &mut BTreeSet<u64>,
) -> Result<()> {
    let bs = storage.block_size() as u64;
    let (mut p, mut done) = (pos, 0usize);
    while done < bytes.len() {
        let seq = geo.segment_of(p);
        let n = ((bytes.len() - done) as u64).min(geo.segment_start(seq + 1) - p) as usize;
        debug_assert!(
            n > 0 && geo.segment_of(p + n as u64 - 1) == seq,
            "each piece makes progress and stays in its segment"
        );
        if segs.binary_search(&seq).is_err() && !touched.contains(&seq) {
            storage.create_segment(
                seq,
                geo.segment_size,
                &geo.encode_segment_header_checked(seq),
            )?;
        }
        let off = geo.file_offset(p);
        let b0 = align_down(off, bs);
        let b1 = align_up(off + n as u64, bs);
        let mut buf = overlapped::AlignedBuf::new((b1 - b0) as usize, storage.buffer_align())?;
        storage.read(seq, b0, &mut buf)?;
        let at = (off - b0) as usize;
        buf[at..at + n].copy_from_slice(&bytes[done..done + n]);
        let (res, _) = storage.write(seq, b0, buf);
        res?;
        touched.insert(seq);
        p += n as u64;
        done += n;
    }
    Ok(())
}
