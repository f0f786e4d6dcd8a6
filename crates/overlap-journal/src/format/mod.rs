//! The on-disk format: segment headers, the checkpoint, records, and a
//! reader that validates them and never panics on arbitrary bytes.
//!
//! See the crate documentation for the layout.

mod geometry;
mod header;
mod reader;
mod record;
#[cfg(test)]
mod tests;

pub use geometry::Geometry;
pub use header::{decode_segment_header, Checkpoint, SegmentHeader};
pub use reader::{clean_end, Next, RecordReader, SliceSource, StreamSource, CLEAN_END_MAX};
pub use record::{encode_filler, encode_record, record_span, seal_record};
pub(crate) use record::{filler_reads_back, reads_back};

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
/// Version 3 added the checkpoint's floor ([`Checkpoint::reserved_lsn`]);
/// segment headers and records are as in version 2.
const VERSION: u32 = 3;
/// The oldest format version still read.
const OLDEST_VERSION: u32 = 1;

/// Rounds `x` up to a multiple of `a` (a power of two).
pub(crate) fn align_up(x: u64, a: u64) -> u64 {
    debug_assert!(a.is_power_of_two(), "alignments are powers of two: {a}");
    (x + a - 1) & !(a - 1)
}

/// Rounds `x` down to a multiple of `a` (a power of two).
pub(crate) fn align_down(x: u64, a: u64) -> u64 {
    debug_assert!(a.is_power_of_two(), "alignments are powers of two: {a}");
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

/// CRC32C over the header (less its CRC field) and the payload.
fn record_crc(rec: &[u8]) -> u32 {
    let c = crc32c::crc32c(&rec[0..4]);
    crc32c::crc32c_append(c, &rec[8..])
}
