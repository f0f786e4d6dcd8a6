//! Encoding records: sealing a record's header, fillers, and the checks
//! that what is sealed reads back.

use super::{
    align_up, record_crc, u32_at, u64_at, Geometry, FILLER_BYTES, FLAG_FILLER, LSN_MASK,
    RECORD_ALIGN, RECORD_HEADER,
};
use super::{Next, RecordReader, SliceSource};

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
