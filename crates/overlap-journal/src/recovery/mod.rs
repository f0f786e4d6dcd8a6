//! Finding, validating and repairing the log when a journal is opened.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Damage, Error, Result};
use crate::format::{
    align_down, align_up, decode_segment_header, encode_filler, filler_reads_back, Checkpoint,
    Geometry, Next, RecordReader, StreamSource, CHECKPOINT_SLOT, FILLER_BYTES, RECORD_ALIGN,
    SEGMENT_HEADER,
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
        limit,
        // Valid records after the end are looked for up to the end of the
        // last segment file.
        scan_to: segs
            .last()
            .map_or(0, |&s| geo.segment_start(s + 1))
            .min(limit),
        mode,
    };
    let scanned = find_dropped(&scan, &ckpt, repair, on_dropped, &mut report)?;
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

impl RecoveryReport {
    /// The report before anything is found.
    fn new(storage: &Arc<dyn Storage>, mode: RecoveryMode, segments: u64, repair: bool) -> Self {
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
        }
    }

    /// Counts a dropped stretch (and lists it, up to [`MAX_LISTED`]).
    fn count_dropped(&mut self, d: &DroppedStretch, durable_lsn: u64) {
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

/// No checkpoint: a new journal when repairing (after removing what an
/// interrupted creation left), an error otherwise.
fn create(
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
/// `report`, saves it (a salvage opening for writing) and passes it to
/// `on_dropped`. Nothing in the log is changed.
fn find_dropped(
    scan: &Scan<'_>,
    ckpt: &Checkpoint,
    repair: bool,
    mut on_dropped: Option<OnDropped<'_>>,
    report: &mut RecoveryReport,
) -> Result<Scanned> {
    let storage = scan.storage;
    let save = repair && scan.mode == RecoveryMode::Salvage;
    let mut aside: Option<Aside> = None;
    let scanned = {
        let report = &mut *report;
        let aside = &mut aside;
        let mut first = |d: &DroppedStretch| -> Result<()> {
            report.count_dropped(d, ckpt.durable_lsn);
            if save {
                if aside.is_none() {
                    *aside = Aside::create(storage, ckpt)?;
                }
                if let Some(a) = aside.as_mut() {
                    a.save(storage, scan.geo, d)?;
                }
            }
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
    if let Some(a) = aside.take() {
        report.dropped_file = Some(a.finish()?);
    }
    Ok(scanned)
}

/// Makes the log `scanned` found ready for appending at `r.end`: removes
/// the segments outside it, rewrites bad headers, covers the dropped
/// stretches with fillers, prepares the end's block, syncs, and writes the
/// next checkpoint into `r`.
fn repair_log(
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
        let mut b = overlap::AlignedBuf::new(storage.block_size(), storage.buffer_align())?;
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
    }
    r.checkpoint = commit(storage, &ckpt, r, touched)?;
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
    let mut src = StorageSource {
        storage: storage.clone(),
        geo,
        end,
    };
    if src.read_stream(tail_start, &mut tail)? != tail.len() {
        return Err(corrupt(tail_start, Damage::Truncated));
    }
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
    Ok(tail)
}

/// Makes everything up to `r.end` durable (the segments from the old
/// durable point's, and those `touched`), then writes the next checkpoint
/// (in the other slot) and returns it.
fn commit(
    storage: &Arc<dyn Storage>,
    ckpt: &Checkpoint,
    r: &Recovered,
    mut touched: BTreeSet<u64>,
) -> Result<Checkpoint> {
    let (first_seq, last_seq) = (r.first_seq, r.last_seq);
    for seq in r.geo.segment_of(ckpt.durable_lsn).max(first_seq)..=last_seq {
        touched.remove(&seq);
        storage.sync(seq)?;
    }
    for &seq in touched.iter().filter(|&&s| s >= first_seq && s <= last_seq) {
        storage.sync(seq)?;
    }
    let checkpoint = Checkpoint {
        generation: ckpt.generation + 1,
        durable_lsn: r.end.max(ckpt.start_lsn),
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
fn write_log(
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
        let mut buf = overlap::AlignedBuf::new((b1 - b0) as usize, storage.buffer_align())?;
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

/// The file a salvage saves what it drops to (format in the crate
/// documentation, "Repair").
struct Aside {
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

/// The first bytes of a file of dropped stretches.
pub(crate) const ASIDE_MAGIC: &[u8; 8] = b"OVLJDROP";
/// The first bytes of each stretch in it.
pub(crate) const STRETCH_MAGIC: &[u8; 8] = b"STRETCH1";

impl Aside {
    fn create(storage: &Arc<dyn Storage>, ckpt: &Checkpoint) -> Result<Option<Aside>> {
        // Named after the generation the repair's checkpoint will have: a
        // repair interrupted before its checkpoint is written runs again
        // with the same name and rewrites the file.
        let name = format!("dropped-{}.bin", ckpt.generation + 1);
        let Some((path, file)) = storage.create_aside(&name)? else {
            return Ok(None);
        };
        let mut file = std::io::BufWriter::new(file);
        file.write_all(ASIDE_MAGIC)?;
        file.write_all(&1u32.to_le_bytes())?;
        file.write_all(&0u32.to_le_bytes())?;
        file.write_all(&ckpt.geometry.uuid.to_le_bytes())?;
        Ok(Some(Aside { path, file }))
    }

    /// Appends the stretch: its header, then its bytes as the storage has
    /// them (read in pieces of at most 1 MiB).
    fn save(
        &mut self,
        storage: &Arc<dyn Storage>,
        geo: Geometry,
        d: &DroppedStretch,
    ) -> Result<()> {
        let mut src = StorageSource {
            storage: storage.clone(),
            geo,
            end: d.to,
        };
        // How many bytes exist (a missing segment reads as none).
        let mut chunk = vec![0u8; (d.to - d.from).min(1 << 20) as usize];
        let mut saved = Vec::new();
        let mut at = d.from;
        while at < d.to {
            let want = ((d.to - at) as usize).min(chunk.len());
            let n = src.read_stream(at, &mut chunk[..want])?;
            saved.push((at, n as u64));
            at += want as u64;
        }
        let total: u64 = saved.iter().map(|&(_, n)| n).sum();
        let f = &mut self.file;
        f.write_all(STRETCH_MAGIC)?;
        f.write_all(&d.from.to_le_bytes())?;
        f.write_all(&d.to.to_le_bytes())?;
        f.write_all(&total.to_le_bytes())?;
        f.write_all(&(d.damage.len() as u32).to_le_bytes())?;
        f.write_all(&(d.records.min(u32::MAX as u64) as u32).to_le_bytes())?;
        f.write_all(d.damage.as_bytes())?;
        for (at, n) in saved {
            let n = n as usize;
            if src.read_stream(at, &mut chunk[..n])? != n {
                return Err(Error::Io(Arc::new(io::Error::other(
                    "the log changed while it was being saved",
                ))));
            }
            f.write_all(&chunk[..n])?;
        }
        Ok(())
    }

    /// Makes the file durable; returns its path.
    fn finish(self) -> Result<String> {
        let file = self
            .file
            .into_inner()
            .map_err(|e| Error::from(io::Error::new(e.error().kind(), e.error().to_string())))?;
        file.sync_all()?;
        Ok(self.path.display().to_string())
    }
}

/// The result of [`Scan::run`].
struct Scanned {
    /// Where new records continue.
    end: u64,
    /// Where the valid records end before the first dropped stretch.
    read_end: u64,
    records: u64,
    salvaged: u64,
    stretches: u64,
}

/// The scan of the log from its start: every record is checked, damage
/// is judged by the recovery mode (see the crate documentation), and
/// every dropped stretch is passed on, adjacent ones merged. The same
/// scan runs twice when repairing (to save, then to cover what it drops):
/// it depends only on bytes at or after where it stands.
struct Scan<'a> {
    storage: &'a Arc<dyn Storage>,
    segs: &'a [u64],
    geo: Geometry,
    read_limit: usize,
    start: u64,
    durable: u64,
    limit: u64,
    scan_to: u64,
    mode: RecoveryMode,
}

/// A dropped stretch not passed on yet: the next may continue it.
struct Pending<'f> {
    open: Option<DroppedStretch>,
    out: &'f mut dyn FnMut(&DroppedStretch) -> Result<()>,
    count: u64,
}

impl Pending<'_> {
    fn push(&mut self, d: DroppedStretch) -> Result<()> {
        debug_assert!(d.from < d.to, "a dropped stretch is not empty: {d:?}");
        debug_assert!(
            self.open.as_ref().is_none_or(|o| o.to <= d.from),
            "dropped stretches come in log order, apart"
        );
        if let Some(o) = self.open.as_mut() {
            if o.to == d.from {
                o.to = d.to;
                o.records += d.records;
                return Ok(());
            }
        }
        self.flush()?;
        self.open = Some(d);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if let Some(d) = self.open.take() {
            self.count += 1;
            (self.out)(&d)?;
        }
        Ok(())
    }
}

/// What a [`Scan`] has counted so far.
#[derive(Default)]
struct Tally {
    records: u64,
    salvaged: u64,
    /// Where the first dropped stretch starts, once there is one.
    read_end: Option<u64>,
    /// The open batch: its first LSN and how many of its records were
    /// read. A batch is kept only when its last record is there.
    batch: Option<(u64, u64)>,
}

impl Tally {
    /// Keeps `n` valid records (salvaged, after a dropped stretch).
    fn keep(&mut self, n: u64) {
        self.records += n;
        if self.read_end.is_some() {
            self.salvaged += n;
        }
    }

    /// Drops `d`: the first dropped stretch is where the valid records
    /// readers see end.
    fn drop_stretch(&mut self, pending: &mut Pending<'_>, d: DroppedStretch) -> Result<()> {
        self.read_end.get_or_insert(d.from);
        pending.push(d)
    }
}

impl Scan<'_> {
    fn run(&self, out: &mut dyn FnMut(&DroppedStretch) -> Result<()>) -> Result<Scanned> {
        let src = StorageSource {
            storage: self.storage.clone(),
            geo: self.geo,
            end: self.limit,
        };
        let mut reader = RecordReader::new(src, self.geo, self.read_limit, self.start);
        let mut pending = Pending {
            open: None,
            out,
            count: 0,
        };
        let mut t = Tally::default();
        let mut first = true;
        let end = loop {
            let found = reader.next_record()?;
            let at_start = std::mem::take(&mut first);
            let pos = reader.position();
            let damage = match found {
                Next::Record(lsn, _) => {
                    let flags = reader.last_batch();
                    self.on_record(&mut t, &mut pending, lsn, pos, flags, at_start)?;
                    continue;
                }
                Next::End => None,
                Next::Damaged(d) => Some(d),
            };
            if let Some(end) = self.on_end(&mut t, &mut pending, &mut reader, pos, damage)? {
                break end;
            }
        };
        pending.flush()?;
        Ok(Scanned {
            end,
            read_end: t.read_end.unwrap_or(end),
            records: t.records,
            salvaged: t.salvaged,
            stretches: pending.count,
        })
    }

    /// A valid record at `lsn`, the next one at `pos`, with its batch flags
    /// `(cont, more)` (see [`RecordReader::last_batch`]): kept, or part of
    /// an incomplete batch, which salvage drops and any other mode refuses.
    fn on_record(
        &self,
        t: &mut Tally,
        pending: &mut Pending<'_>,
        lsn: u64,
        pos: u64,
        (cont, more): (bool, bool),
        at_start: bool,
    ) -> Result<()> {
        let salvage = self.mode == RecoveryMode::Salvage;
        match t.batch {
            // The log may start inside a batch (retired up to
            // one of its records).
            None if cont && !at_start => {
                // A batch's later record without its first.
                if !salvage {
                    return Err(corrupt(lsn, Damage::IncompleteBatch));
                }
                return t.drop_stretch(
                    pending,
                    DroppedStretch {
                        from: lsn,
                        to: pos,
                        damage: Damage::IncompleteBatch.to_string(),
                        records: 1,
                    },
                );
            }
            Some((from, n)) if !cont => {
                // A new record while a batch is open: the
                // batch's last records are missing.
                let d = Damage::RecordsFollow {
                    first: Box::new(Damage::IncompleteBatch),
                    next: lsn,
                };
                if !salvage {
                    return Err(corrupt(from, d));
                }
                t.drop_stretch(
                    pending,
                    DroppedStretch {
                        from,
                        to: lsn,
                        damage: Damage::IncompleteBatch.to_string(),
                        records: n,
                    },
                )?;
                t.batch = None;
            }
            _ => {}
        }
        match (t.batch.as_mut(), more) {
            (Some(b), true) => b.1 += 1,
            (Some(b), false) => {
                let n = b.1 + 1;
                t.batch = None;
                t.keep(n);
            }
            (None, true) => t.batch = Some((lsn, 1)),
            (None, false) => t.keep(1),
        }
        Ok(())
    }

    /// The log ends at `pos`, or is damaged there: judged by the mode.
    /// Returns where new records continue, or `None` when valid records
    /// follow and the scan goes on from the next (the reader is there).
    fn on_end(
        &self,
        t: &mut Tally,
        pending: &mut Pending<'_>,
        reader: &mut RecordReader<StorageSource>,
        pos: u64,
        damage: Option<Damage>,
    ) -> Result<Option<u64>> {
        let geo = self.geo;
        let salvage = self.mode == RecoveryMode::Salvage;
        // A batch still open goes with it.
        let (from, in_batch) = match t.batch.take() {
            Some((from, n)) => (from, n),
            None => (pos, 0),
        };
        let damage = match (damage, in_batch) {
            (Some(d), _) => Some(d),
            (None, 0) => None,
            (None, _) => Some(Damage::IncompleteBatch),
        };
        if from < self.durable && !salvage {
            // A segment that must hold acknowledged records is gone.
            let first_missing = (geo.segment_of(self.start)..=geo.segment_of(self.durable))
                .find(|s| self.segs.binary_search(s).is_err());
            if let Some(seq) = first_missing {
                return Err(corrupt(
                    geo.segment_start(seq).max(from),
                    Damage::MissingSegment(seq),
                ));
            }
            // Records acknowledged durable are gone: never silently skipped.
            return Err(corrupt(from, damage.unwrap_or(Damage::Truncated)));
        }
        // Valid records after it mean it is not the torn tail of a log
        // written in order (see the crate documentation).
        if let Some(next) = find_next(reader, self.segs, geo, pos, self.scan_to)? {
            let first = damage.unwrap_or(Damage::Zeros);
            if !salvage {
                let d = Damage::RecordsFollow {
                    first: Box::new(first),
                    next,
                };
                return Err(corrupt(from, d));
            }
            t.drop_stretch(
                pending,
                DroppedStretch {
                    from,
                    to: next,
                    damage: first.to_string(),
                    records: in_batch,
                },
            )?;
            reader.seek(next);
            return Ok(None);
        }
        let Some(d) = damage else {
            return Ok(Some(from)); // a clean end
        };
        if self.mode == RecoveryMode::Strict {
            return Err(corrupt(from, d));
        }
        // A damaged tail: dropped up to past every byte written there,
        // where new records then continue (never reusing an LSN that
        // names bytes on disk).
        let to = data_end(self.storage, self.segs, geo, pos, self.scan_to)?
            .max(from + FILLER_BYTES as u64);
        t.drop_stretch(
            pending,
            DroppedStretch {
                from,
                to,
                damage: d.to_string(),
                records: in_batch,
            },
        )?;
        Ok(Some(to))
    }
}

/// The first valid record of this journal after `pos`, below `to`,
/// segment by segment (skipping missing ones and space never written).
fn find_next(
    reader: &mut RecordReader<StorageSource>,
    segs: &[u64],
    geo: Geometry,
    pos: u64,
    to: u64,
) -> Result<Option<u64>> {
    let mut from = pos + RECORD_ALIGN;
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
            let Some((region_start, region_end)) =
                data_region(reader.source(), geo, seq, from, seg_end)?
            else {
                break;
            };
            from = from.max(align_down(region_start, RECORD_ALIGN));
            if let Some(q) = reader.find_valid_after(from, region_end)? {
                return Ok(Some(q));
            }
            from = region_end;
        }
    }
    Ok(None)
}

/// The next stretch of log positions `[start, end)` in segment `seq`, at
/// or after `from` and below `seg_end`, that may hold data; `None` when
/// nothing there does.
fn data_region(
    src: &StorageSource,
    geo: Geometry,
    seq: u64,
    from: u64,
    seg_end: u64,
) -> Result<Option<(u64, u64)>> {
    let seg_start = geo.segment_start(seq);
    let Some((d0, d1)) = src.storage.data_after(seq, geo.file_offset(from))? else {
        return Ok(None);
    };
    let start = (seg_start + d0.saturating_sub(geo.header_size)).max(from);
    let end = seg_start
        .saturating_add(d1.saturating_sub(geo.header_size))
        .min(seg_end);
    Ok((start < end).then_some((start, end)))
}

/// Where the bytes this journal may have written after `pos` end: past
/// the last non-zero 8-byte word at or after `pos` and below `to` (space
/// never written is skipped), or `pos` if there is none. Reads in pieces
/// of 1 MiB.
fn data_end(
    storage: &Arc<dyn Storage>,
    segs: &[u64],
    geo: Geometry,
    pos: u64,
    to: u64,
) -> Result<u64> {
    let mut src = StorageSource {
        storage: storage.clone(),
        geo,
        end: to,
    };
    let mut last = pos;
    let mut buf = vec![0u8; 1 << 20];
    let mut from = align_down(pos, RECORD_ALIGN);
    for &seq in segs {
        let seg_end = geo.segment_start(seq + 1).min(to);
        if seg_end <= from {
            continue;
        }
        from = from.max(geo.segment_start(seq));
        while from < seg_end {
            let Some((r0, r1)) = data_region(&src, geo, seq, from, seg_end)? else {
                break;
            };
            let mut at = align_down(r0, RECORD_ALIGN);
            while at < r1 {
                let want = ((r1 - at) as usize).min(buf.len());
                let n = src.read_stream(at, &mut buf[..want])?;
                if let Some(i) = buf[..n].chunks(8).rposition(|w| w.iter().any(|&b| b != 0)) {
                    last = last.max(at + (i as u64 + 1) * RECORD_ALIGN);
                }
                if n < want {
                    break;
                }
                at += n as u64;
            }
            from = r1;
        }
    }
    Ok(align_up(last, RECORD_ALIGN))
}
