//! Decoding segment headers and encoding and decoding the [`Checkpoint`].

use super::{
    frame_ok, u32_at, u64_at, Geometry, CHECKPOINT_SLOT, CKP_MAGIC, SEGMENT_HEADER, SEG_MAGIC,
    VERSION,
};

/// The geometry stored at bytes 12..24 of a segment header or checkpoint
/// slot, with the uuid at `uuid_at`.
fn geometry_at(b: &[u8], uuid_at: usize) -> Geometry {
    Geometry {
        header_size: u32_at(b, 12) as u64,
        segment_size: u64_at(b, 16),
        uuid: u64_at(b, uuid_at),
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
    /// The floor: the end of every record ever acknowledged durable is at
    /// or below it (format version 3; a checkpoint of an older version
    /// reads as `durable_lsn`). The journal writes it, synced, ahead of
    /// the acknowledgements it covers, so that damage to the segments
    /// cannot take it: `repair` continues at or above it when records
    /// are missing, and never hands out an acknowledged LSN again.
    pub reserved_lsn: u64,
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
        b[60..68].copy_from_slice(&self.reserved_lsn.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..68]);
        b[68..72].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes one slot; `None` if it is not valid.
    pub fn decode(b: &[u8]) -> Option<Checkpoint> {
        // Versions 1 and 2 end with the CRC at 60; version 3 adds the
        // floor at 60 and moves the CRC to 68.
        let v3 = b.len() >= 12 && u32_at(b, 8) >= 3;
        let (len, crc_at) = if v3 { (72, 68) } else { (64, 60) };
        if !frame_ok(b, CKP_MAGIC, len, crc_at) {
            return None;
        }
        let geometry = geometry_at(b, 24);
        let durable_lsn = u64_at(b, 48);
        let c = Checkpoint {
            geometry,
            generation: u64_at(b, 32),
            start_lsn: u64_at(b, 40),
            durable_lsn,
            reserved_lsn: if v3 { u64_at(b, 60) } else { durable_lsn },
            max_record_bytes: u32_at(b, 56),
        };
        let ok = geometry.valid()
            && c.start_lsn <= c.durable_lsn
            && c.durable_lsn <= c.reserved_lsn
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

    /// The LSN new records continue at or above when records are missing
    /// after the valid end: past every record ever acknowledged.
    pub fn floor(&self) -> u64 {
        self.durable_lsn.max(self.reserved_lsn)
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
