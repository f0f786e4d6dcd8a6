//! Finding, validating and repairing the log when a journal is opened.

use std::io;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Damage, Error, Result};
use crate::format::{
    align_down, decode_segment_header, Checkpoint, Geometry, Next, RecordReader, StreamSource,
    CHECKPOINT_SLOT, RECORD_ALIGN, SEGMENT_HEADER,
};
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
    /// Salvage (what `overlap journal repair` does): cut the log at the
    /// first damage wherever it is, even before the durable point or with
    /// valid records after it, and report what was dropped
    /// ([`RecoveryReport::dropped_records`]). Their LSNs are handed out
    /// again afterwards.
    Salvage,
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
    /// The end of the valid log: the LSN the next record gets.
    pub end_lsn: u64,
    /// Valid records found.
    pub records: u64,
    /// The durable point recorded in the checkpoint: damage before it is
    /// always an error.
    pub checkpoint_durable_lsn: u64,
    /// Where a damaged tail was cut off, if one was.
    pub truncated_at: Option<u64>,
    /// What the damage was.
    pub damage: Option<String>,
    /// Whether the cut is before the checkpoint's durable point, i.e. it
    /// dropped records that were acknowledged durable (only in
    /// [`RecoveryMode::Salvage`]).
    pub cut_acknowledged: bool,
    /// Valid records found after the cut, which it drops (only in
    /// [`RecoveryMode::Salvage`]; in the other modes such records make
    /// recovery refuse instead).
    pub dropped_records: u64,
    /// Payload bytes of those records.
    pub dropped_bytes: u64,
    /// The LSNs of the first of those records (at most 1000), for the
    /// report `repair` prints.
    pub dropped_lsns: Vec<u64>,
    /// How the storage writes.
    pub storage: String,
    /// Read while another process appends: only the durable prefix the
    /// checkpoint records was read and judged.
    pub live: bool,
}

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
    pub end: u64,
    /// The bytes of the block holding `end`, before `end`.
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

/// Recovers the journal in `storage`. With `repair`, the storage is made
/// ready for appending (new journal created, damaged tail zeroed, state
/// synced); without, nothing is changed (`verify`, `dump`).
pub(crate) fn recover(
    storage: &Arc<dyn Storage>,
    mode: RecoveryMode,
    segment_size: u64,
    max_record: usize,
    repair: bool,
) -> Result<Recovered> {
    let bs = storage.block_size() as u64;
    let ckpt = storage
        .read_checkpoint()?
        .map(|b| Checkpoint::decode_file(&b).ok_or(corrupt(0, Damage::BadCheckpoint)))
        .transpose()?;
    let segs = storage.list_segments()?;
    let mut report = RecoveryReport {
        mode,
        created: false,
        segments: segs.len() as u64,
        start_lsn: 0,
        end_lsn: 0,
        records: 0,
        checkpoint_durable_lsn: 0,
        truncated_at: None,
        damage: None,
        cut_acknowledged: false,
        dropped_records: 0,
        dropped_bytes: 0,
        dropped_lsns: Vec::new(),
        storage: storage.describe(),
        live: !repair && storage.shared_with_writer(),
    };
    let Some(ckpt) = ckpt else {
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
            max_record_bytes: max_record as u32,
        };
        storage.create_segment(0, geo.segment_size, &geo.encode_segment_header(0))?;
        storage.write_checkpoint(CHECKPOINT_SLOT as u64, &c.encode(), true)?;
        report.created = true;
        report.segments = 1;
        return Ok(Recovered {
            geo,
            checkpoint: c,
            end: 0,
            tail: Vec::new(),
            first_seq: 0,
            last_seq: 0,
            read_limit: max_record,
            report,
        });
    };
    let geo = ckpt.geometry;
    report.start_lsn = ckpt.start_lsn;
    report.checkpoint_durable_lsn = ckpt.durable_lsn;
    let start_seq = geo.segment_of(ckpt.start_lsn);
    // Validate the segment headers. Salvage cuts the log at the first bad
    // one instead of refusing.
    let mut hdr = [0u8; SEGMENT_HEADER];
    let mut limit = u64::MAX;
    let mut bad_headers = Vec::new();
    for &seq in &segs {
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
            if seq >= start_seq {
                limit = limit.min(geo.segment_start(seq));
            }
        }
    }
    if report.live {
        // A writer is appending after the durable point: read up to it.
        limit = limit.min(ckpt.durable_lsn);
    }
    // Scan the records.
    let src = StorageSource {
        storage: storage.clone(),
        geo,
        end: limit,
    };
    // Records as large as any open of this journal allowed may be there.
    let read_limit = max_record.max(ckpt.max_record_bytes as usize);
    let mut reader = RecordReader::new(src, geo, read_limit, ckpt.start_lsn);
    let mut records = 0u64;
    let mut damage = loop {
        match reader.next_record()? {
            Next::Record(..) => records += 1,
            Next::End => break None,
            Next::Damaged(d) => break Some(d),
        }
    };
    let end = reader.position();
    if end == limit && damage.is_none() && limit != u64::MAX && !report.live {
        damage = Some(Damage::BadSegmentHeader(geo.segment_of(limit)));
    }
    report.records = records;
    report.end_lsn = end;
    let salvage = mode == RecoveryMode::Salvage;
    if end < ckpt.durable_lsn && !salvage {
        // A segment that must hold acknowledged records is gone.
        let missing =
            (start_seq..=geo.segment_of(ckpt.durable_lsn)).find(|s| segs.binary_search(s).is_err());
        if let Some(seq) = missing {
            return Err(corrupt(
                geo.segment_start(seq).max(end),
                Damage::MissingSegment(seq),
            ));
        }
        // Records acknowledged durable are gone: never silently skipped.
        return Err(corrupt(end, damage.unwrap_or(Damage::Truncated)));
    }
    // Valid records after the end mean the end is not the torn tail of a
    // log written in order (see the crate documentation).
    let scan_to = segs
        .last()
        .map_or(0, |&s| geo.segment_start(s + 1))
        .min(limit);
    let mut dropped = Dropped::default();
    scan_after(&mut reader, &segs, geo, end, scan_to, salvage, &mut dropped)?;
    if let Some(next) = dropped.first {
        let first = Box::new(damage.take().unwrap_or(Damage::Zeros));
        let d = Damage::RecordsFollow { first, next };
        if !salvage {
            return Err(corrupt(end, d));
        }
        damage = Some(d);
    }
    if let Some(d) = damage {
        if mode == RecoveryMode::Strict {
            return Err(corrupt(end, d));
        }
        report.truncated_at = Some(end);
        report.damage = Some(d.to_string());
        report.cut_acknowledged = end < ckpt.durable_lsn;
        report.dropped_records = dropped.records;
        report.dropped_bytes = dropped.bytes;
        report.dropped_lsns = dropped.lsns;
    }
    let end_seq = geo.segment_of(end);
    let mut first_seq = segs.first().copied().unwrap_or(start_seq).min(start_seq);
    let mut last_seq = segs.last().copied().unwrap_or(end_seq);
    let tail_start = align_down(end, bs);
    let mut tail = vec![0u8; (end - tail_start) as usize];
    let mut src = StorageSource {
        storage: storage.clone(),
        geo,
        end,
    };
    if src.read_stream(tail_start, &mut tail)? != tail.len() {
        return Err(corrupt(tail_start, Damage::Truncated));
    }
    let mut checkpoint = ckpt;
    if repair {
        // Segments below the start: a retirement was interrupted.
        for &seq in segs.iter().filter(|&&s| s < start_seq) {
            storage.remove_segment(seq)?;
        }
        // A bad header where the log now ends (salvage): made anew below.
        if bad_headers.contains(&end_seq) {
            storage.remove_segment(end_seq)?;
        }
        first_seq = start_seq;
        // Segments after the end's hold nothing acknowledged: remove them.
        for &seq in segs.iter().filter(|&&s| s > end_seq) {
            storage.remove_segment(seq)?;
        }
        let missing = segs.binary_search(&end_seq).is_err() || bad_headers.contains(&end_seq);
        // The log ends exactly where a segment that does not exist would
        // start (it stopped when that segment could not be made, e.g. for
        // lack of space): leave it to the preallocator, so that the journal
        // opens (and reads) on a full file system.
        let defer = missing && end == geo.segment_start(end_seq) && end_seq > first_seq;
        if defer {
            last_seq = end_seq - 1;
        } else {
            if missing {
                storage.create_segment(
                    end_seq,
                    geo.segment_size,
                    &geo.encode_segment_header(end_seq),
                )?;
            }
            last_seq = end_seq;
            // Zero everything after the end in its segment, so that no stale
            // byte there is ever read as part of the log again.
            let block_off = geo.file_offset(tail_start);
            let mut zeroes = overlap::AlignedBuf::new(bs as usize, storage.buffer_align())?;
            zeroes[..tail.len()].copy_from_slice(&tail);
            let (res, _) = storage.write(end_seq, block_off, zeroes);
            res?;
            storage.zero(
                end_seq,
                block_off + bs,
                geo.segment_size.saturating_sub(block_off + bs),
            )?;
        }
        // Everything up to the end is now made durable.
        for seq in geo.segment_of(ckpt.durable_lsn).max(first_seq)..=last_seq {
            storage.sync(seq)?;
        }
        checkpoint = Checkpoint {
            generation: ckpt.generation + 1,
            durable_lsn: end.max(ckpt.start_lsn),
            max_record_bytes: read_limit as u32,
            ..ckpt
        };
        storage.write_checkpoint(
            (checkpoint.generation % 2) * CHECKPOINT_SLOT as u64,
            &checkpoint.encode(),
            true,
        )?;
    }
    Ok(Recovered {
        geo,
        checkpoint,
        end,
        tail,
        first_seq,
        last_seq,
        read_limit,
        report,
    })
}

/// Whether segment 0 holds no record (its first log bytes are zeros).
fn segment_is_empty(storage: &Arc<dyn Storage>, bs: u64) -> Result<bool> {
    let mut b = vec![0u8; (bs.max(4096) + 8) as usize];
    let n = storage.read(0, 0, &mut b)?;
    Ok(b[..n].iter().skip(bs.max(4096) as usize).all(|&x| x == 0))
}

/// Valid records found after the end of the log.
#[derive(Default)]
struct Dropped {
    first: Option<u64>,
    records: u64,
    bytes: u64,
    lsns: Vec<u64>,
}

/// Looks for valid records of this journal after `end`, below `to`,
/// segment by segment (skipping missing ones). Stops at the first one
/// unless `all`; with `all`, counts every record that follows a valid one
/// and every later island of them.
fn scan_after(
    reader: &mut RecordReader<StorageSource>,
    segs: &[u64],
    geo: Geometry,
    end: u64,
    to: u64,
    all: bool,
    out: &mut Dropped,
) -> Result<()> {
    let saved = reader.position();
    let mut from = end + RECORD_ALIGN;
    for &seq in segs {
        let seg_start = geo.segment_start(seq);
        let seg_end = geo.segment_start(seq + 1).min(to);
        if seg_end <= from {
            continue;
        }
        from = from.max(seg_start);
        while from < seg_end {
            // Skip what was never written (preallocated space): a valid
            // record was written, so it starts in a stretch that may hold
            // data.
            let off = geo.file_offset(from);
            let Some((d0, d1)) = reader.source().storage.data_after(seq, off)? else {
                break;
            };
            let region_start = seg_start + d0.saturating_sub(geo.header_size);
            let region_end = seg_start
                .saturating_add(d1.saturating_sub(geo.header_size))
                .min(seg_end);
            from = from.max(align_down(region_start, RECORD_ALIGN));
            if from >= region_end {
                if d1 == u64::MAX || region_end >= seg_end {
                    break;
                }
                from = region_end;
                continue;
            }
            let Some(q) = reader.find_valid_after(from, region_end)? else {
                from = region_end;
                continue;
            };
            out.first.get_or_insert(q);
            if !all {
                reader.seek(saved);
                return Ok(());
            }
            reader.seek(q);
            while let Next::Record(lsn, data) = reader.next_record()? {
                out.records += 1;
                out.bytes += data.len() as u64;
                if out.lsns.len() < 1000 {
                    out.lsns.push(lsn);
                }
            }
            from = reader.position() + RECORD_ALIGN;
        }
    }
    reader.seek(saved);
    Ok(())
}
