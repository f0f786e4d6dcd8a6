//! Fuzz target: the record reader on arbitrary bytes never panics, always
//! terminates, and never holds more than its window plus one record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use overlap_journal::format::{Geometry, Next, RecordReader, SliceSource, RECORD_HEADER};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    // The first bytes choose the geometry and the record limit.
    let geo = Geometry {
        segment_size: 4096 << (data[0] % 8),
        header_size: 4096,
        uuid: data[1] as u64,
    };
    let max_record = 64 << (data[0] % 12);
    let bytes = &data[2..];
    let mut reader = RecordReader::new(SliceSource { base: 0, bytes }, geo, max_record, 0);
    let mut records = 0usize;
    while let Ok(Next::Record(lsn, payload)) = reader.next_record() {
        assert!(payload.len() <= max_record);
        assert!(lsn < bytes.len() as u64);
        records += 1;
        assert!(records <= bytes.len() / RECORD_HEADER);
    }
});
