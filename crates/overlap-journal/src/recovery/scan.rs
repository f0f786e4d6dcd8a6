//! The scan of the log: every record checked, damage judged by the
//! recovery mode, dropped stretches found and merged, and the search for
//! valid records and data after damage.

use std::sync::Arc;

use super::{corrupt, DroppedStretch, RecoveryMode, StorageSource};
use crate::error::{Damage, Error, Result};
use crate::format::{
    align_down, align_up, Geometry, Next, RecordReader, StreamSource, FILLER_BYTES, RECORD_ALIGN,
};
use crate::storage::Storage;

/// The result of [`Scan::run`].
pub(super) struct Scanned {
    /// Where new records continue.
    pub(super) end: u64,
    /// Where the valid records end before the first dropped stretch.
    pub(super) read_end: u64,
    pub(super) records: u64,
    pub(super) salvaged: u64,
    pub(super) stretches: u64,
}

/// The scan of the log from its start: every record is checked, damage
/// is judged by the recovery mode (see the crate documentation), and
/// every dropped stretch is passed on, adjacent ones merged. The same
/// scan runs twice when repairing (to save, then to cover what it drops):
/// it depends only on bytes at or after where it stands.
pub(super) struct Scan<'a> {
    pub(super) storage: &'a Arc<dyn Storage>,
    pub(super) segs: &'a [u64],
    pub(super) geo: Geometry,
    pub(super) read_limit: usize,
    pub(super) start: u64,
    pub(super) durable: u64,
    /// Where a salvage continues when the log ends before it: past every
    /// record ever acknowledged ([`Checkpoint::floor`]); the durable
    /// point for any other mode.
    ///
    /// [`Checkpoint::floor`]: crate::format::Checkpoint::floor
    pub(super) floor: u64,
    pub(super) limit: u64,
    pub(super) scan_to: u64,
    pub(super) mode: RecoveryMode,
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
        debug_assert!(
            self.salvaged <= self.records,
            "records salvaged are among the records kept"
        );
    }

    /// Drops `d`: the first dropped stretch is where the valid records
    /// readers see end.
    fn drop_stretch(&mut self, pending: &mut Pending<'_>, d: DroppedStretch) -> Result<()> {
        let read_end = *self.read_end.get_or_insert(d.from);
        debug_assert!(
            read_end <= d.from,
            "readers stop at the first dropped stretch"
        );
        pending.push(d)
    }
}

impl Scan<'_> {
    pub(super) fn run(
        &self,
        out: &mut dyn FnMut(&DroppedStretch) -> Result<()>,
    ) -> Result<Scanned> {
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
        debug_assert!(
            t.read_end.is_none_or(|r| r <= end),
            "what readers see ends at or before where new records go"
        );
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
        debug_assert!(lsn < pos, "the reader's position is past the record read");
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
        debug_assert!(
            from <= pos,
            "a batch in progress starts at or before the reader's position"
        );
        let damage = match (damage, in_batch) {
            (Some(d), _) => Some(d),
            (None, 0) => None,
            (None, _) => Some(Damage::IncompleteBatch),
        };
        if from < self.durable && !salvage {
            return Err(self.durable_gone(from, damage));
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
        let d = match damage {
            Some(d) => d,
            // Salvage: acknowledged records are gone (zeros, a file cut
            // short, a missing segment): dropped up to the durable point,
            // and on to the floor (records acknowledged after the
            // checkpoint's durable point was written may have been there).
            None if from < self.durable.max(self.floor) => self.lost_at(from)?,
            None => return Ok(Some(from)), // a clean end
        };
        if self.mode == RecoveryMode::Strict {
            return Err(corrupt(from, d));
        }
        self.drop_tail(t, pending, (from, pos), d, in_batch)
            .map(Some)
    }

    /// The error for a log that ends (or is damaged) at `from`, before the
    /// durable point, outside salvage: a missing segment, or `damage`.
    fn durable_gone(&self, from: u64, damage: Option<Damage>) -> Error {
        let geo = self.geo;
        // A segment that must hold acknowledged records is gone.
        let first_missing = (geo.segment_of(self.start)..=geo.segment_of(self.durable))
            .find(|s| self.segs.binary_search(s).is_err());
        if let Some(seq) = first_missing {
            return corrupt(
                geo.segment_start(seq).max(from),
                Damage::MissingSegment(seq),
            );
        }
        // Records acknowledged durable are gone: never silently skipped.
        corrupt(from, damage.unwrap_or(Damage::Truncated))
    }

    /// Drops a damaged tail from `from` (the scan stopped at `pos`): up to
    /// past every byte written there and past the durable point (and the
    /// floor), where
    /// new records then continue (never reusing an LSN that names bytes
    /// on disk or was acknowledged). Returns where they continue.
    fn drop_tail(
        &self,
        t: &mut Tally,
        pending: &mut Pending<'_>,
        (from, pos): (u64, u64),
        d: Damage,
        in_batch: u64,
    ) -> Result<u64> {
        let to = data_end(self.storage, self.segs, self.geo, pos, self.scan_to)?
            .max(from + FILLER_BYTES as u64)
            .max(self.durable)
            .max(self.floor);
        t.drop_stretch(
            pending,
            DroppedStretch {
                from,
                to,
                damage: d.to_string(),
                records: in_batch,
            },
        )?;
        Ok(to)
    }
}

impl Scan<'_> {
    /// What is wrong at `from`, where the log ends before the durable
    /// point: its segment is missing, its file ends there, or it reads as
    /// zeros.
    fn lost_at(&self, from: u64) -> Result<Damage> {
        let seq = self.geo.segment_of(from);
        if self.segs.binary_search(&seq).is_err() {
            return Ok(Damage::MissingSegment(seq));
        }
        let mut b = [0u8; 8];
        let n = self.storage.read(seq, self.geo.file_offset(from), &mut b)?;
        Ok(if n < b.len() {
            Damage::Truncated
        } else {
            Damage::Zeros
        })
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
                debug_assert!(
                    q > pos && q < to,
                    "the next valid record lies after the damage, before the scan's end"
                );
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
