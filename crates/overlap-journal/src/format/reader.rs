//! Decoding records: [`RecordReader`], which validates each record it
//! reads from a [`StreamSource`] and never panics on arbitrary bytes.

use std::io;

use super::{
    align_up, record_crc, u32_at, u64_at, Geometry, FILLER_BYTES, FLAG_BATCH_CONT, FLAG_BATCH_MORE,
    FLAG_FILLER, LSN_MASK, RECORD_ALIGN, RECORD_HEADER,
};
use crate::error::Damage;
/// Where the reader gets the log's bytes.
pub trait StreamSource {
    /// Copies the log bytes at `pos` into `buf`; returns how many exist
    /// (fewer than asked at the end of the data).
    fn read_stream(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<usize>;
}

/// A log image in memory, starting at log position `base`.
#[derive(Debug, Clone)]
pub struct SliceSource<'a> {
    /// The log position of `bytes[0]`.
    pub base: u64,
    /// The bytes.
    pub bytes: &'a [u8],
}

impl StreamSource for SliceSource<'_> {
    fn read_stream(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        let Some(rel) = pos.checked_sub(self.base) else {
            return Ok(0);
        };
        let rel = usize::try_from(rel)
            .unwrap_or(usize::MAX)
            .min(self.bytes.len());
        let n = buf.len().min(self.bytes.len() - rel);
        buf[..n].copy_from_slice(&self.bytes[rel..rel + n]);
        Ok(n)
    }
}

/// What the reader found at its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A valid record: its LSN and payload.
    Record(u64, Vec<u8>),
    /// The log ends here cleanly (zeros, or no more data).
    End,
    /// The bytes here are not a valid record.
    Damaged(Damage),
}

pub(super) const WINDOW: usize = 256 << 10;
/// How far past a clean end the reader looks for stray bytes.
const END_CHECK: u64 = 4096;

/// Where the zeros that make log position `pos` a clean end must reach:
/// the reader takes 8 zero bytes at `pos` for the end of the log only if
/// every byte of `[pos, clean_end(pos))` is zero (at most 8 KiB).
/// Writers into reused space (a recycled segment) zero this much after
/// the end of what they write.
pub fn clean_end(pos: u64) -> u64 {
    let end = align_up(pos + 1, END_CHECK) + END_CHECK;
    debug_assert!(
        end > pos && end - pos <= CLEAN_END_MAX,
        "a clean end reaches past its position, by at most CLEAN_END_MAX"
    );
    end
}

/// The most bytes [`clean_end`] reaches past its position.
pub const CLEAN_END_MAX: u64 = 2 * END_CHECK;

/// Reads records one after another from a [`StreamSource`], validating
/// each. Memory is bounded by the window plus `max_record` bytes, whatever
/// the input.
pub struct RecordReader<S> {
    src: S,
    geo: Geometry,
    max_record: usize,
    pos: u64,
    pub(super) win: Vec<u8>,
    win_pos: u64,
    win_len: usize,
    /// The batch flags of the last record returned.
    last_flags: u64,
}

impl<S: StreamSource> RecordReader<S> {
    /// A reader at log position `pos` (a record boundary).
    pub fn new(src: S, geo: Geometry, max_record: usize, pos: u64) -> Self {
        RecordReader {
            src,
            geo,
            max_record,
            pos,
            win: Vec::new(),
            win_pos: 0,
            win_len: 0,
            last_flags: 0,
        }
    }

    /// Where the last record returned stands in an atomic batch: whether
    /// it continues a batch (is not its first record) and whether more
    /// records of its batch follow it. `(false, false)` for a record
    /// appended on its own.
    pub fn last_batch(&self) -> (bool, bool) {
        (
            self.last_flags & FLAG_BATCH_CONT != 0,
            self.last_flags & FLAG_BATCH_MORE != 0,
        )
    }

    /// The source it reads.
    pub fn source(&self) -> &S {
        &self.src
    }

    /// The source it reads, to change (e.g. to let it read further; bytes
    /// it already holds in its window are not read again).
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.src
    }

    /// The position of the next record.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The bytes at `[pos, pos + n)` (fewer at the end of data).
    fn get(&mut self, pos: u64, n: usize) -> io::Result<&[u8]> {
        let in_win = pos >= self.win_pos
            && pos
                .checked_add(n as u64)
                .is_some_and(|e| e <= self.win_pos + self.win_len as u64);
        if !in_win {
            let want = n.max(WINDOW);
            if self.win.len() < want {
                self.win.resize(want, 0);
            }
            let len = self.win.len();
            self.win_len = self.src.read_stream(pos, &mut self.win[..len])?;
            self.win_pos = pos;
        }
        let start = (pos - self.win_pos) as usize;
        let end = (start + n).min(self.win_len).max(start.min(self.win_len));
        debug_assert!(
            end - start.min(self.win_len) <= n,
            "at most the bytes asked for are handed out"
        );
        Ok(&self.win[start.min(self.win_len)..end])
    }

    /// Moves to log position `pos` (a multiple of [`RECORD_ALIGN`]).
    pub fn seek(&mut self, pos: u64) {
        self.pos = align_up(pos, RECORD_ALIGN);
    }

    /// The first position at or after `from` and below `to` (rounded up
    /// to a multiple of [`RECORD_ALIGN`]) where a valid record of this journal starts, if
    /// any: one whose LSN is its position, whose identity is its segment's
    /// and whose CRC matches (a filler does not count). Stops early where the data ends. The position
    /// is left where it was. Costs one comparison per 8 bytes, plus a full
    /// check where the LSN field matches.
    pub fn find_valid_after(&mut self, from: u64, to: u64) -> io::Result<Option<u64>> {
        let saved = self.pos;
        let mut p = align_up(from, RECORD_ALIGN);
        let mut found = None;
        while p < to {
            if self.get(p, RECORD_HEADER)?.len() < RECORD_HEADER {
                break;
            }
            // Scan the window in place: one comparison per 8 bytes.
            let mut off = (p - self.win_pos) as usize;
            let mut candidate = None;
            while off + RECORD_HEADER <= self.win_len && p < to {
                let field = u64_at(&self.win, off + 8);
                if field & LSN_MASK == p && field & FLAG_FILLER == 0 {
                    candidate = Some(p);
                    break;
                }
                off += RECORD_ALIGN as usize;
                p += RECORD_ALIGN;
            }
            let Some(q) = candidate else {
                continue; // the window is used up: the next get() moves it
            };
            self.pos = q;
            if let Next::Record(..) = self.next_record()? {
                found = Some(q);
                break;
            }
            p = q + RECORD_ALIGN;
        }
        self.pos = saved;
        if let Some(q) = found {
            debug_assert!(
                q >= from && q < to && q % RECORD_ALIGN == 0,
                "a valid record found lies aligned in [from, to)"
            );
        }
        Ok(found)
    }

    /// Decodes the record at the current position and moves past it when
    /// it is valid. After `End` or `Damaged`, the position stays put.
    /// Fillers (see [`FLAG_FILLER`]) are skipped: the record after them is
    /// returned, and the position moves past them even when what follows
    /// is the end or damage.
    pub fn next_record(&mut self) -> io::Result<Next> {
        loop {
            match self.decode()? {
                Decoded::Filler(to) => {
                    debug_assert!(
                        to >= self.pos + RECORD_HEADER as u64,
                        "a filler moves the reader forward by at least a header"
                    );
                    self.pos = to;
                }
                Decoded::Next(n) => return Ok(n),
            }
        }
    }

    fn decode(&mut self) -> io::Result<Decoded> {
        let pos = self.pos;
        let geo = self.geo;
        let max = self.max_record;
        let damaged = |d| Ok(Decoded::Next(Next::Damaged(d)));
        let hdr = self.get(pos, RECORD_HEADER)?;
        if hdr.is_empty() {
            return Ok(Decoded::Next(Next::End));
        }
        if hdr.len() >= 8 && hdr[0..8].iter().all(|&b| b == 0) {
            // Zeros: the end of the log, unless bytes follow nearby.
            let check_end = clean_end(pos);
            let tail = self.get(pos, (check_end - pos) as usize)?;
            if tail.iter().any(|&b| b != 0) {
                return damaged(Damage::GarbageAfterEnd);
            }
            return Ok(Decoded::Next(Next::End));
        }
        if hdr.len() < RECORD_HEADER {
            return damaged(Damage::Truncated);
        }
        let total = u32_at(hdr, 0) as u64;
        if total < RECORD_HEADER as u64 || total > (RECORD_HEADER + max) as u64 {
            return damaged(Damage::BadLength(total));
        }
        let field = u64_at(hdr, 8);
        let (lsn, flags) = (field & LSN_MASK, field & !LSN_MASK);
        let ident = u64_at(hdr, 16);
        let rec = self.get(pos, total as usize)?;
        if (rec.len() as u64) < total {
            return damaged(Damage::Truncated);
        }
        if record_crc(rec) != u32_at(rec, 4) {
            return damaged(Damage::BadCrc);
        }
        if lsn != pos {
            return damaged(Damage::WrongLsn(lsn));
        }
        if ident != geo.segment_ident(geo.segment_of(pos)) {
            return damaged(Damage::WrongSegment(ident));
        }
        if flags & FLAG_FILLER != 0 {
            // A filler of the header alone skips itself (a damaged empty
            // record's stretch); one with a payload skips the span it holds,
            // which is longer than the header alone.
            let span = match total {
                _ if flags != FLAG_FILLER => 0,
                t if t == RECORD_HEADER as u64 => t,
                t if t == FILLER_BYTES as u64 => match u64_at(rec, RECORD_HEADER) {
                    s if s >= FILLER_BYTES as u64 => s,
                    _ => 0,
                },
                _ => 0,
            };
            let fits = pos.checked_add(span).is_some_and(|e| e <= LSN_MASK);
            if span < RECORD_HEADER as u64 || span % RECORD_ALIGN != 0 || !fits {
                return damaged(Damage::BadLength(span));
            }
            return Ok(Decoded::Filler(pos + span));
        }
        let payload = rec[RECORD_HEADER..].to_vec();
        self.last_flags = flags;
        self.pos = pos + align_up(total, RECORD_ALIGN);
        debug_assert!(
            payload.len() <= max && self.pos >= pos + total,
            "a record read is at most max_record bytes, and the position passes it"
        );
        Ok(Decoded::Next(Next::Record(pos, payload)))
    }
}

/// What [`RecordReader::decode`] found: a filler (skip to its end) or what
/// `next_record` returns.
enum Decoded {
    Filler(u64),
    Next(Next),
}
