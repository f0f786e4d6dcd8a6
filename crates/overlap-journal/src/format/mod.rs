//! The on-disk format: segment headers, the checkpoint, records, and a
//! reader that validates them and never panics on arbitrary bytes.
//!
//! See the crate documentation for the layout.

use std::io;

use crate::error::Damage;

/// Bytes of a record header.
pub const RECORD_HEADER: usize = 24;
/// Records start at positions that are multiples of this.
pub const RECORD_ALIGN: u64 = 8;
/// Bytes of a segment header's meaningful part (the header occupies
/// [`Geometry::header_size`] bytes at the start of each segment file).
pub const SEGMENT_HEADER: usize = 48;
/// Bytes of one checkpoint slot (two slots are kept).
pub const CHECKPOINT_SLOT: usize = 512;

/// The bits of a record header's LSN field that hold the LSN; the three
/// above them are flags ([`FLAG_FILLER`], [`FLAG_BATCH_MORE`],
/// [`FLAG_BATCH_CONT`]). Log positions stay below this.
pub const LSN_MASK: u64 = (1 << 61) - 1;
/// LSN-field flag: the record is a *filler* that `repair` (or recovery
/// cutting a damaged tail) wrote over the start of a damaged stretch. Its
/// 8-byte payload is the stretch's length: the reader skips
/// `[lsn, lsn + length)` and goes on after it.
pub const FLAG_FILLER: u64 = 1 << 63;
/// LSN-field flag: the record belongs to an atomic batch and more records
/// of the batch follow it.
pub const FLAG_BATCH_MORE: u64 = 1 << 62;
/// LSN-field flag: the record belongs to an atomic batch and is not its
/// first record.
pub const FLAG_BATCH_CONT: u64 = 1 << 61;
/// Bytes of a filler record (header and its 8-byte length).
pub const FILLER_BYTES: usize = RECORD_HEADER + 8;

const SEG_MAGIC: &[u8; 8] = b"OVLJSEG1";
const CKP_MAGIC: &[u8; 8] = b"OVLJCKP1";
/// The format version written. Version 2 added the LSN field's flag bits
/// (fillers written by `repair`, atomic batches); a version-1 journal has
/// none and is read as it is, so both are accepted. A build that knows only
/// version 1 refuses a version-2 header instead of misreading its records.
const VERSION: u32 = 2;
/// The oldest format version still read.
const OLDEST_VERSION: u32 = 1;

/// Rounds `x` up to a multiple of `a` (a power of two).
pub(crate) fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}

/// Rounds `x` down to a multiple of `a` (a power of two).
pub(crate) fn align_down(x: u64, a: u64) -> u64 {
    x & !(a - 1)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Whether `b` is at least `len` bytes, starts with `magic` and a version
/// this build reads, and has the CRC-32C of `b[..crc_at]` at `crc_at`.
fn frame_ok(b: &[u8], magic: &[u8; 8], len: usize, crc_at: usize) -> bool {
    b.len() >= len
        && &b[0..8] == magic
        && (OLDEST_VERSION..=VERSION).contains(&u32_at(b, 8))
        && crc32c::crc32c(&b[0..crc_at]) == u32_at(b, crc_at)
}

/// The geometry stored at bytes 12..24 of a segment header or checkpoint
/// slot, with the uuid at `uuid_at`.
fn geometry_at(b: &[u8], uuid_at: usize) -> Geometry {
    Geometry {
        header_size: u32_at(b, 12) as u64,
        segment_size: u64_at(b, 16),
        uuid: u64_at(b, uuid_at),
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How the log's byte stream maps onto segment files. Fixed when a journal
/// is created and recorded in every segment header and in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Size of each segment file in bytes.
    pub segment_size: u64,
    /// Bytes reserved for the header at the start of each segment file (a
    /// multiple of the write block size).
    pub header_size: u64,
    /// The journal's random identity, chosen at creation.
    pub uuid: u64,
}

impl Geometry {
    /// Log bytes per segment (at least 1, so that no geometry, even one
    /// that is not [`valid`](Self::valid), makes the arithmetic below
    /// divide by zero or underflow).
    pub fn data_per_segment(&self) -> u64 {
        self.segment_size.saturating_sub(self.header_size).max(1)
    }

    /// The segment holding log position `pos`.
    pub fn segment_of(&self, pos: u64) -> u64 {
        pos / self.data_per_segment()
    }

    /// The file offset of log position `pos` within its segment.
    pub fn file_offset(&self, pos: u64) -> u64 {
        self.header_size
            .saturating_add(pos % self.data_per_segment())
    }

    /// The first log position of segment `seq`.
    pub fn segment_start(&self, seq: u64) -> u64 {
        seq.saturating_mul(self.data_per_segment())
    }

    /// The identity that records starting in segment `seq` carry: a hash of
    /// the journal's uuid and the segment number, so a record left over from
    /// an earlier use of the space (or from another journal) never matches.
    pub fn segment_ident(&self, seq: u64) -> u64 {
        splitmix64(self.uuid ^ splitmix64(seq))
    }

    /// Checks the values are usable (for geometry read from disk).
    pub fn valid(&self) -> bool {
        self.header_size >= SEGMENT_HEADER as u64
            && self.header_size.is_power_of_two()
            && self.segment_size > self.header_size
            && self.segment_size % self.header_size == 0
            && self.segment_size <= 1 << 40
    }

    /// Encodes segment `seq`'s header (`SEGMENT_HEADER` bytes).
    pub fn encode_segment_header(&self, seq: u64) -> [u8; SEGMENT_HEADER] {
        let mut h = [0u8; SEGMENT_HEADER];
        h[0..8].copy_from_slice(SEG_MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(self.header_size as u32).to_le_bytes());
        h[16..24].copy_from_slice(&self.segment_size.to_le_bytes());
        h[24..32].copy_from_slice(&seq.to_le_bytes());
        h[32..40].copy_from_slice(&self.uuid.to_le_bytes());
        let crc = crc32c::crc32c(&h[0..40]);
        h[40..44].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

impl Geometry {
    /// [`encode_segment_header`](Self::encode_segment_header) for a header
    /// the journal writes: checked in debug builds to decode to this
    /// geometry and `seq`, as recovery will read it.
    pub(crate) fn encode_segment_header_checked(&self, seq: u64) -> [u8; SEGMENT_HEADER] {
        let h = self.encode_segment_header(seq);
        debug_assert_eq!(
            decode_segment_header(&h),
            Some(SegmentHeader {
                geometry: *self,
                seq
            }),
            "a segment header the journal writes reads back"
        );
        h
    }
}

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The geometry it records.
    pub geometry: Geometry,
    /// The segment's number.
    pub seq: u64,
}

/// Decodes a segment header; `None` if it is not valid.
pub fn decode_segment_header(b: &[u8]) -> Option<SegmentHeader> {
    if !frame_ok(b, SEG_MAGIC, SEGMENT_HEADER, 40) {
        return None;
    }
    let geometry = geometry_at(b, 32);
    if !geometry.valid() {
        return None;
    }
    Some(SegmentHeader {
        geometry,
        seq: u64_at(b, 24),
    })
}

/// The checkpoint: what the journal knows for sure, kept in a small side
/// file of two alternating slots (a torn slot write leaves the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// The journal's geometry.
    pub geometry: Geometry,
    /// Incremented on every checkpoint write; the valid slot with the
    /// highest generation wins.
    pub generation: u64,
    /// The first LSN of the log (records before it were retired).
    pub start_lsn: u64,
    /// Every record below this position was acknowledged durable: damage
    /// before it is always an error.
    pub durable_lsn: u64,
    /// The largest record payload the journal may have written (the
    /// reader's length limit, whatever the options of a later open say).
    pub max_record_bytes: u32,
}

impl Checkpoint {
    /// Encodes one slot.
    pub fn encode(&self) -> [u8; CHECKPOINT_SLOT] {
        let mut b = [0u8; CHECKPOINT_SLOT];
        b[0..8].copy_from_slice(CKP_MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(self.geometry.header_size as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.geometry.segment_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.geometry.uuid.to_le_bytes());
        b[32..40].copy_from_slice(&self.generation.to_le_bytes());
        b[40..48].copy_from_slice(&self.start_lsn.to_le_bytes());
        b[48..56].copy_from_slice(&self.durable_lsn.to_le_bytes());
        b[56..60].copy_from_slice(&self.max_record_bytes.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes one slot; `None` if it is not valid.
    pub fn decode(b: &[u8]) -> Option<Checkpoint> {
        if !frame_ok(b, CKP_MAGIC, 64, 60) {
            return None;
        }
        let geometry = geometry_at(b, 24);
        let c = Checkpoint {
            geometry,
            generation: u64_at(b, 32),
            start_lsn: u64_at(b, 40),
            durable_lsn: u64_at(b, 48),
            max_record_bytes: u32_at(b, 56),
        };
        let ok = geometry.valid()
            && c.start_lsn <= c.durable_lsn
            && (1..=1 << 30).contains(&c.max_record_bytes);
        ok.then_some(c)
    }

    /// [`encode`](Self::encode) for a checkpoint the journal writes:
    /// checked in debug builds to decode to itself (valid geometry, start
    /// at or before the durable point, a record limit in range), as the
    /// next open will read it.
    pub(crate) fn encode_checked(&self) -> [u8; CHECKPOINT_SLOT] {
        let b = self.encode();
        debug_assert_eq!(
            Checkpoint::decode(&b),
            Some(*self),
            "a checkpoint the journal writes reads back"
        );
        b
    }

    /// The newest valid checkpoint in a file image of two slots.
    pub fn decode_file(b: &[u8]) -> Option<Checkpoint> {
        let a = Checkpoint::decode(b.get(..CHECKPOINT_SLOT).unwrap_or(b));
        let c = b.get(CHECKPOINT_SLOT..).and_then(Checkpoint::decode);
        match (a, c) {
            (Some(a), Some(c)) => Some(if c.generation > a.generation { c } else { a }),
            (a, c) => a.or(c),
        }
    }
}

/// The padded size a record of `payload` bytes occupies in the log.
pub fn record_span(payload: usize) -> u64 {
    align_up((RECORD_HEADER + payload) as u64, RECORD_ALIGN)
}

/// Fills in the header of the record at log position `lsn` whose payload
/// already follows it in `rec` (`rec.len()` = header + payload).
///
/// The flag bits of the LSN field (above [`LSN_MASK`]) already in `rec`
/// are kept: an appender of a batch puts them there.
pub fn seal_record(geo: &Geometry, lsn: u64, rec: &mut [u8]) {
    let total = rec.len() as u32;
    rec[0..4].copy_from_slice(&total.to_le_bytes());
    let flags = u64_at(rec, 8) & !LSN_MASK;
    rec[8..16].copy_from_slice(&(lsn | flags).to_le_bytes());
    let ident = geo.segment_ident(geo.segment_of(lsn));
    rec[16..24].copy_from_slice(&ident.to_le_bytes());
    let crc = record_crc(rec);
    rec[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// CRC32C over the header (less its CRC field) and the payload.
fn record_crc(rec: &[u8]) -> u32 {
    let c = crc32c::crc32c(&rec[0..4]);
    crc32c::crc32c_append(c, &rec[8..])
}

/// Whether the sealed record `rec` passes, at `lsn`, the checks
/// [`RecordReader`] makes of a record (length, CRC, LSN, segment identity,
/// not a filler): behind the flusher's `debug_assert!` that what it seals
/// is what a reader accepts. (Not through a `RecordReader`, whose window
/// of 256 KiB per call would make every debug append slow.)
pub(crate) fn reads_back(geo: &Geometry, lsn: u64, rec: &[u8]) -> bool {
    if rec.len() < RECORD_HEADER {
        return false;
    }
    let field = u64_at(rec, 8);
    u32_at(rec, 0) as usize == rec.len()
        && record_crc(rec) == u32_at(rec, 4)
        && field & LSN_MASK == lsn
        && field & FLAG_FILLER == 0
        && u64_at(rec, 16) == geo.segment_ident(geo.segment_of(lsn))
}

/// Whether the filler `f` at `lsn` reads back as one that skips to
/// `lsn + span`.
pub(crate) fn filler_reads_back(geo: &Geometry, lsn: u64, span: u64, f: &[u8]) -> bool {
    let src = SliceSource {
        base: lsn,
        bytes: f,
    };
    let mut r = RecordReader::new(src, *geo, RECORD_HEADER, lsn);
    matches!(r.next_record(), Ok(Next::End)) && r.position() == lsn + span
}

/// Encodes a complete record (for tests and tools).
pub fn encode_record(geo: &Geometry, lsn: u64, payload: &[u8]) -> Vec<u8> {
    let mut rec = vec![0u8; RECORD_HEADER + payload.len()];
    rec[RECORD_HEADER..].copy_from_slice(payload);
    seal_record(geo, lsn, &mut rec);
    rec
}

/// Encodes a filler record at log position `lsn` covering
/// `[lsn, lsn + span)` (`span` a multiple of [`RECORD_ALIGN`], at least
/// [`RECORD_HEADER`]): readers skip the stretch. A stretch of
/// [`RECORD_HEADER`] bytes (a damaged empty record) gets a filler of the
/// header alone, whose length is its span; any longer one a filler of
/// [`FILLER_BYTES`] holding its span.
pub fn encode_filler(geo: &Geometry, lsn: u64, span: u64) -> Vec<u8> {
    debug_assert!(
        span >= RECORD_HEADER as u64 && span % RECORD_ALIGN == 0,
        "a filler covers at least a header, in whole record units: {span}"
    );
    let short = span < FILLER_BYTES as u64;
    let mut rec = vec![0u8; if short { RECORD_HEADER } else { FILLER_BYTES }];
    rec[8..16].copy_from_slice(&FLAG_FILLER.to_le_bytes());
    if !short {
        rec[RECORD_HEADER..].copy_from_slice(&span.to_le_bytes());
    }
    seal_record(geo, lsn, &mut rec);
    rec
}

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

const WINDOW: usize = 256 << 10;
/// How far past a clean end the reader looks for stray bytes.
const END_CHECK: u64 = 4096;

/// Where the zeros that make log position `pos` a clean end must reach:
/// the reader takes 8 zero bytes at `pos` for the end of the log only if
/// every byte of `[pos, clean_end(pos))` is zero (at most 8 KiB).
/// Writers into reused space (a recycled segment) zero this much after
/// the end of what they write.
pub fn clean_end(pos: u64) -> u64 {
    align_up(pos + 1, END_CHECK) + END_CHECK
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
    win: Vec<u8>,
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
                Decoded::Filler(to) => self.pos = to,
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
        Ok(Decoded::Next(Next::Record(pos, payload)))
    }
}

/// What [`RecordReader::decode`] found: a filler (skip to its end) or what
/// `next_record` returns.
enum Decoded {
    Filler(u64),
    Next(Next),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            segment_size: 1 << 16,
            header_size: 4096,
            uuid: 42,
        }
    }

    fn image(recs: &[&[u8]]) -> Vec<u8> {
        let g = geo();
        let mut out = Vec::new();
        for r in recs {
            let lsn = out.len() as u64;
            out.extend_from_slice(&encode_record(&g, lsn, r));
            out.resize(align_up(out.len() as u64, RECORD_ALIGN) as usize, 0);
        }
        out
    }

    fn read_all(bytes: &[u8]) -> (Vec<(u64, Vec<u8>)>, Next) {
        let mut r = RecordReader::new(SliceSource { base: 0, bytes }, geo(), 1 << 20, 0);
        let mut out = Vec::new();
        loop {
            match r.next_record().unwrap() {
                Next::Record(l, p) => out.push((l, p)),
                other => return (out, other),
            }
        }
    }

    /// A segment header of another format version, its CRC made right.
    fn header_of_version(version: u32) -> [u8; SEGMENT_HEADER] {
        let mut h = geo().encode_segment_header(7);
        h[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&h[0..40]);
        h[40..44].copy_from_slice(&crc.to_le_bytes());
        h
    }

    #[test]
    fn reads_format_versions_1_and_2_only() {
        assert_eq!(u32_at(&geo().encode_segment_header(7), 8), 2, "writes 2");
        for v in [1, 2] {
            let h = decode_segment_header(&header_of_version(v)).expect("read");
            assert_eq!((h.seq, h.geometry), (7, geo()), "version {v}");
        }
        for v in [0, 3] {
            assert!(decode_segment_header(&header_of_version(v)).is_none());
        }
    }

    #[test]
    fn round_trip() {
        let img = image(&[b"hello", b"", b"world!!!"]);
        let (recs, end) = read_all(&img);
        assert_eq!(end, Next::End);
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0], (0, b"hello".to_vec()));
        assert_eq!(recs[1].1, b"");
        assert_eq!(recs[2].1, b"world!!!");
        assert_eq!(recs[1].0, record_span(5));
    }

    #[test]
    fn reads_back_agrees_with_the_reader() {
        let g = geo();
        let rec = encode_record(&g, 64, b"payload");
        assert!(reads_back(&g, 64, &rec));
        let mut r = RecordReader::new(
            SliceSource {
                base: 64,
                bytes: &rec,
            },
            g,
            64,
            64,
        );
        assert_eq!(
            r.next_record().unwrap(),
            Next::Record(64, b"payload".to_vec())
        );
        assert!(!reads_back(&g, 72, &rec), "another position");
        for i in 0..rec.len() {
            let mut bad = rec.clone();
            bad[i] ^= 1;
            assert!(!reads_back(&g, 64, &bad), "byte {i} flipped");
        }
        let f = encode_filler(&g, 64, 128);
        assert!(!reads_back(&g, 64, &f), "a filler is not a record");
        assert!(filler_reads_back(&g, 64, 128, &f));
        assert!(!filler_reads_back(&g, 64, 136, &f));
        // A damaged empty record's stretch (24 bytes): the header alone.
        let short = encode_filler(&g, 64, 24);
        assert_eq!(short.len(), RECORD_HEADER);
        assert!(filler_reads_back(&g, 64, 24, &short));
        assert!(!filler_reads_back(&g, 64, 32, &short));
        // A filler with a payload never claims less than itself.
        let mut f24 = encode_filler(&g, 64, 128);
        f24[RECORD_HEADER..].copy_from_slice(&24u64.to_le_bytes());
        seal_record(&g, 64, &mut f24);
        assert!(!filler_reads_back(&g, 64, 24, &f24));
    }

    #[test]
    fn detects_damage() {
        let img = image(&[b"hello", b"world"]);
        let second = record_span(5) as usize;
        let mut bad = img.clone();
        bad[second + 26] ^= 1;
        assert_eq!(read_all(&bad).1, Next::Damaged(Damage::BadCrc));
        let (recs, _) = read_all(&bad);
        assert_eq!(recs.len(), 1);
        // Truncated record.
        assert_eq!(
            read_all(&img[..img.len() - 4]).1,
            Next::Damaged(Damage::Truncated)
        );
        // A valid record with the wrong LSN (moved).
        let mut moved = image(&[b"hello"]);
        moved.extend_from_slice(&img[..second]);
        assert!(matches!(
            read_all(&moved).1,
            Next::Damaged(Damage::WrongLsn(0))
        ));
        // Another journal's record.
        let other = Geometry { uuid: 7, ..geo() };
        let foreign = encode_record(&other, 0, b"x");
        assert!(matches!(
            read_all(&foreign).1,
            Next::Damaged(Damage::WrongSegment(_))
        ));
        // Zeros then garbage.
        let mut g = image(&[b"a"]);
        g.extend_from_slice(&[0u8; 100]);
        g.push(1);
        assert_eq!(read_all(&g).1, Next::Damaged(Damage::GarbageAfterEnd));
    }

    #[test]
    fn fillers_are_skipped_and_batch_flags_read() {
        let g = geo();
        let mut img = image(&[b"first"]);
        let filler_at = img.len() as u64;
        // A filler over 96 bytes of garbage, then a record of a batch.
        img.extend_from_slice(&encode_filler(&g, filler_at, 128));
        img.extend((0..96).map(|i| i as u8 | 0x80));
        let at = img.len() as u64;
        let mut rec = vec![0u8; RECORD_HEADER + 3];
        rec[8..16].copy_from_slice(&(FLAG_BATCH_CONT | FLAG_BATCH_MORE).to_le_bytes());
        rec[RECORD_HEADER..].copy_from_slice(b"mid");
        seal_record(&g, at, &mut rec);
        img.extend_from_slice(&rec);
        img.resize(align_up(img.len() as u64, RECORD_ALIGN) as usize, 0);
        let mut r = RecordReader::new(
            SliceSource {
                base: 0,
                bytes: &img,
            },
            g,
            1 << 20,
            0,
        );
        assert_eq!(r.next_record().unwrap(), Next::Record(0, b"first".to_vec()));
        assert_eq!(r.last_batch(), (false, false));
        assert_eq!(r.next_record().unwrap(), Next::Record(at, b"mid".to_vec()));
        assert_eq!(r.last_batch(), (true, true));
        assert_eq!(r.next_record().unwrap(), Next::End);
        // A filler is not where a search for valid records stops.
        assert_eq!(
            r.find_valid_after(filler_at, img.len() as u64).unwrap(),
            Some(at)
        );
        // A filler whose length is not a multiple of 8, or too short, is damage.
        for bad in [100u64, 8] {
            let mut img = encode_filler(&g, 0, 128);
            img[RECORD_HEADER..].copy_from_slice(&bad.to_le_bytes());
            seal_record(&g, 0, &mut img);
            assert!(matches!(
                read_all(&img).1,
                Next::Damaged(Damage::BadLength(_))
            ));
        }
    }

    #[test]
    fn headers_round_trip() {
        let g = geo();
        let h = g.encode_segment_header(9);
        assert_eq!(
            decode_segment_header(&h),
            Some(SegmentHeader {
                geometry: g,
                seq: 9
            })
        );
        let mut bad = h;
        bad[30] ^= 1;
        assert_eq!(decode_segment_header(&bad), None);
        let c = Checkpoint {
            geometry: g,
            generation: 3,
            start_lsn: 8,
            durable_lsn: 800,
            max_record_bytes: 4096,
        };
        let mut file = vec![0u8; 2 * CHECKPOINT_SLOT];
        file[CHECKPOINT_SLOT..].copy_from_slice(&c.encode());
        let older = Checkpoint { generation: 2, ..c };
        file[..CHECKPOINT_SLOT].copy_from_slice(&older.encode());
        assert_eq!(Checkpoint::decode_file(&file), Some(c));
        file[CHECKPOINT_SLOT + 40] ^= 1;
        assert_eq!(Checkpoint::decode_file(&file), Some(older));
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let valid = image(&[b"one", b"two", b"three"]);
        for i in 0..20_000 {
            let len = rng.random_range(0..600);
            let mut bytes: Vec<u8> = if i % 2 == 0 {
                (0..len).map(|_| rng.random()).collect()
            } else {
                // Mutations of a valid image reach deeper into the decoder.
                let mut v = valid.clone();
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..v.len());
                    v[at] = rng.random();
                }
                v.truncate(rng.random_range(0..=v.len()));
                v
            };
            if i % 3 == 0 && bytes.len() >= 4 {
                // A huge length must not make the reader allocate it.
                bytes[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
            let mut r = RecordReader::new(
                SliceSource {
                    base: 0,
                    bytes: &bytes,
                },
                geo(),
                4096,
                0,
            );
            let mut steps = 0;
            while let Next::Record(..) = r.next_record().unwrap() {
                steps += 1;
                assert!(steps <= bytes.len() / RECORD_HEADER);
            }
            assert!(r.win.capacity() <= WINDOW + 4096 + RECORD_HEADER);
        }
    }
}
