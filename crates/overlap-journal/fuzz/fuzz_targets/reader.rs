//! Fuzz target: the record reader on arbitrary bytes never panics, always
//! terminates, and never holds more than its window plus one record; the
//! recovery scan for valid records after the end of the log
//! (`find_valid_after`) agrees with the reader on what it finds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use overlapped_journal::format::{Geometry, Next, RecordReader, SliceSource, RECORD_HEADER};

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
    let len = bytes.len() as u64;
    let mut reader = RecordReader::new(SliceSource { base: 0, bytes }, geo, max_record, 0);
    let mut records = 0usize;
    while let Ok(Next::Record(lsn, payload)) = reader.next_record() {
        assert!(payload.len() <= max_record);
        assert!(lsn < len);
        records += 1;
        assert!(records <= bytes.len() / RECORD_HEADER);
    }
    // What recovery does at the end: look for valid records after it.
    let end = reader.position();
    let mut from = end + 8;
    let mut islands = 0usize;
    while let Ok(Some(q)) = reader.find_valid_after(from, len) {
        assert!(q >= from && q < len && q % 8 == 0);
        assert_eq!(reader.position(), end, "the scan moved the reader");
        reader.seek(q);
        match reader.next_record() {
            Ok(Next::Record(lsn, _)) => assert_eq!(lsn, q),
            other => panic!("found a record at {q} the reader rejects: {other:?}"),
        }
        from = reader.position();
        assert!(from > q);
        reader.seek(end);
        islands += 1;
        assert!(islands <= bytes.len() / RECORD_HEADER);
    }
});
