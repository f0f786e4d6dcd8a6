//! [`Geometry`]: how the log's byte stream maps onto segment files, and
//! the segment header it encodes.

use super::{SEGMENT_HEADER, SEG_MAGIC, VERSION};

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
