//! Finding, validating and repairing the log when a journal is opened.

use std::io;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Damage, Error, Result};
use crate::format::{
    align_down, decode_segment_header, Checkpoint, Geometry, Next, RecordReader, StreamSource,
    CHECKPOINT_SLOT, SEGMENT_HEADER,
};
use crate::storage::Storage;

/// What recovery does with damage after the durable point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecoveryMode {
    /// An incomplete or corrupt tail after the durable point is cut off
    /// (the default: it holds only records never acknowledged durable).
    #[default]
    TolerateTornTail,
    /// Any damage is an error.
    Strict,
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
    /// How the storage writes.
    pub storage: String,
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
        storage: storage.describe(),
    };
    let Some(ckpt) = ckpt else {
        if !segs.is_empty() {
            return Err(corrupt(0, Damage::BadCheckpoint));
        }
        if !repair {
            return Err(Error::InvalidInput("no journal here".into()));
        }
        // A new journal.
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
        storage.write_checkpoint(CHECKPOINT_SLOT as u64, &c.encode(), true)?;
        storage.create_segment(0, geo.segment_size, &geo.encode_segment_header(0))?;
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
    // Validate the segment headers.
    let mut hdr = [0u8; SEGMENT_HEADER];
    for &seq in &segs {
        let n = storage.read(seq, 0, &mut hdr)?;
        let ok =
            decode_segment_header(&hdr[..n]).is_some_and(|h| h.geometry == geo && h.seq == seq);
        if !ok {
            return Err(corrupt(
                geo.segment_start(seq),
                Damage::BadSegmentHeader(seq),
            ));
        }
    }
    // Scan the records.
    let src = StorageSource {
        storage: storage.clone(),
        geo,
        end: u64::MAX,
    };
    // Records as large as any open of this journal allowed may be there.
    let read_limit = max_record.max(ckpt.max_record_bytes as usize);
    let mut reader = RecordReader::new(src, geo, read_limit, ckpt.start_lsn);
    let mut records = 0u64;
    let damage = loop {
        match reader.next_record()? {
            Next::Record(..) => records += 1,
            Next::End => break None,
            Next::Damaged(d) => break Some(d),
        }
    };
    let end = reader.position();
    report.records = records;
    report.end_lsn = end;
    if end < ckpt.durable_lsn {
        // A segment that must hold acknowledged records is gone.
        let missing =
            (start_seq..=geo.segment_of(ckpt.durable_lsn)).find(|s| segs.binary_search(s).is_err());
        if let Some(seq) = missing {
            return Err(corrupt(
                geo.segment_start(seq).max(end),
                Damage::MissingSegment(seq),
            ));
        }
    }
    if end < ckpt.durable_lsn {
        // Records acknowledged durable are gone: never silently skipped.
        return Err(corrupt(end, damage.unwrap_or(Damage::Truncated)));
    }
    if let Some(d) = damage {
        if mode == RecoveryMode::Strict {
            return Err(corrupt(end, d));
        }
        report.truncated_at = Some(end);
        report.damage = Some(d.to_string());
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
        first_seq = start_seq;
        // Segments after the end's hold nothing acknowledged: remove them.
        for &seq in segs.iter().filter(|&&s| s > end_seq) {
            storage.remove_segment(seq)?;
        }
        if segs.binary_search(&end_seq).is_err() {
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
        // Everything up to the end is now made durable.
        for seq in geo.segment_of(ckpt.durable_lsn).max(first_seq)..=end_seq {
            storage.sync(seq)?;
        }
        checkpoint = Checkpoint {
            generation: ckpt.generation + 1,
            durable_lsn: end,
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
