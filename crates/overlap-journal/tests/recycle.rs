//! Segment recycling: retired segment files are reused for new segments
//! (their space was written before), and the old records they still hold
//! are never taken for live ones.

use std::path::{Path, PathBuf};

use overlapped_journal::format::{encode_record, record_span, Geometry};
use overlapped_journal::{Error, Journal, Level, Lsn, Options, RecoveryMode};

use crate::common::{files_ending, seg_path};

use crate::common::FileExt;

fn opts() -> Options {
    Options::default()
        .segment_size(64 << 10)
        .buffer_bytes(64 << 10)
        .max_record_bytes(4 << 10)
}

fn dir(name: &str) -> PathBuf {
    crate::common::fresh_dir(&format!("recycle-{name}"))
}

/// A recognisable record of about 1000 bytes: `r<round>-<i>-` and filler.
fn payload(round: u32, i: u32) -> Vec<u8> {
    let mut v = format!("r{round}-{i}-").into_bytes();
    v.resize(1000, b'a' + (i % 26) as u8);
    v
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Round 0 fills five 64 KiB segments and is retired; round 1 appends
/// until its tail is well into a segment made from a retired file. Returns
/// the journal's geometry, round 1's LSNs and the tail.
fn build(d: &Path) -> (Geometry, Vec<Lsn>, u64) {
    let j = Journal::open(d, opts()).unwrap();
    let geo = j.geometry();
    let mut last = Lsn(0);
    for i in 0..300 {
        last = j.append(&payload(0, i)).unwrap();
    }
    j.wait_blocking(last, Level::Durable).unwrap();
    let retire_seq = geo.segment_of(j.watermark(Level::Durable).0);
    assert!(retire_seq >= 4);
    j.truncate_before(j.watermark(Level::Durable)).unwrap();
    // The segment after the current one already exists (made ahead);
    // the one after that is made from a retired file.
    let target = retire_seq + 2;
    let mut lsns = Vec::new();
    let mut i = 0;
    loop {
        let lsn = j.append(&payload(1, i)).unwrap();
        lsns.push(lsn);
        i += 1;
        if geo.segment_of(lsn.0) == target && lsn.0 - geo.segment_start(target) > 10_000 {
            break;
        }
    }
    j.wait_blocking(*lsns.last().unwrap(), Level::Durable)
        .unwrap();
    let tail = lsns.last().unwrap().0 + record_span(1000);
    j.close().unwrap();
    (geo, lsns, tail)
}

#[test]
fn reused_segment_keeps_old_records_and_recovery_stops_at_the_tail() {
    let d = dir("stale");
    let (geo, lsns, tail) = build(&d);
    let seq = geo.segment_of(tail);
    // The tail's segment is a reused file: past the tail it still holds
    // round 0's records (a fresh, preallocated segment would read as zeros).
    let file = std::fs::read(seg_path(&d, seq)).unwrap();
    let after = geo.file_offset(tail) as usize + 8192;
    assert!(
        contains(&file[after..], b"r0-"),
        "segment {seq} holds no old record past the tail: it was not reused"
    );
    // Recovery, even strict, ends exactly at the tail: the zeros written
    // after it make a clean end, and the old records after them (and in
    // the segment made ahead) carry the LSNs and segment identities of
    // their first use, so none is taken for a record of this log.
    let j = Journal::open(&d, opts().recovery(RecoveryMode::Strict)).unwrap();
    assert_eq!(j.recovery_report().truncated_at, None);
    check(&j, &lsns, tail);
    j.close().unwrap();

    // A crash can lose the zeros after the tail: then a record of the
    // file's earlier use, valid in every other respect, sits exactly at
    // the tail. It carries the LSN of its old position, so the default
    // recovery cuts there (a torn tail: nothing valid follows) and keeps
    // every record; strict recovery names the damage. New records continue
    // after the old bytes (recovery cannot tell them from bytes this life
    // wrote, whose LSNs must not be handed out again), and the log is
    // clean afterwards.
    let d = dir("stale-crash");
    let (geo, lsns, tail) = build(&d);
    let seq = geo.segment_of(tail);
    let old_seq = 0;
    let old_lsn = geo.segment_start(old_seq) + (tail - geo.segment_start(seq));
    let stale = encode_record(&geo, old_lsn, &payload(0, 999));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(seg_path(&d, seq))
        .unwrap();
    f.write_all_at(&stale, geo.file_offset(tail)).unwrap();
    drop(f);
    match overlapped_journal::verify(&d, &opts().recovery(RecoveryMode::Strict)) {
        Err(Error::Corrupt { lsn, .. }) => assert_eq!(lsn, tail),
        other => panic!("strict recovery should refuse the stale record: {other:?}"),
    }
    let j = Journal::open(&d, opts()).unwrap();
    assert_eq!(j.recovery_report().truncated_at, Some(tail));
    assert_eq!(j.recovery_report().dropped_records, 0);
    assert!(j.recovery_report().end_lsn > tail);
    check(&j, &lsns, j.recovery_report().end_lsn);
    let next = j.append(b"next").unwrap();
    assert_eq!(next.0, j.recovery_report().end_lsn);
    j.close().unwrap();
    let j = Journal::open(&d, opts().recovery(RecoveryMode::Strict)).unwrap();
    let got: Vec<_> = j.read_from(lsns[0]).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), lsns.len() + 1);
    assert_eq!(got.last().unwrap().lsn, next);
}

/// Recovery ended at `tail` and kept exactly round 1's records.
fn check(j: &Journal, lsns: &[Lsn], tail: u64) {
    assert_eq!(j.recovery_report().end_lsn, tail);
    let got: Vec<_> = j.read_from(lsns[0]).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), lsns.len());
    for (k, r) in got.iter().enumerate() {
        assert_eq!(r.lsn, lsns[k]);
        assert_eq!(r.data, payload(1, k as u32));
    }
}

#[test]
fn retired_files_kept_for_reuse_are_bounded() {
    let d = dir("bounded");
    let j = Journal::open(&d, opts().recycle_segments(2)).unwrap();
    let mut n = 0u32;
    let mut first = None;
    for round in 0..12 {
        let mut last = Lsn(0);
        for _ in 0..120 {
            last = j.append(&payload(round, n)).unwrap();
            first.get_or_insert(last);
            n += 1;
        }
        j.wait_blocking(last, Level::Durable).unwrap();
        if round % 3 == 2 {
            j.truncate_before(last).unwrap();
            first = Some(last);
        }
        assert!(files_ending(&d, ".free") <= 2, "round {round}");
        // The live segments (at most 4 rounds of 2 segments), the one made
        // ahead, and at most 2 kept for reuse.
        assert!(files_ending(&d, ".seg") <= 10, "round {round}");
    }
    let s = j.stats();
    assert!(s.segments_recycled >= 4, "{s:?}");
    assert!(s.segments_retired >= s.segments_recycled, "{s:?}");
    // Fresh segments: the first few, and those needed while the pool was
    // empty; far fewer than the ~25 the log used.
    assert!(s.segments_created + s.segments_recycled >= 20, "{s:?}");
    let first = first.unwrap();
    let before: Vec<_> = j.read_from(first).unwrap().map(|r| r.unwrap()).collect();
    j.close().unwrap();
    let j = Journal::open(&d, opts().recovery(RecoveryMode::Strict)).unwrap();
    let after: Vec<_> = j.read_from(first).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(before, after);
    assert_eq!(j.recovery_report().truncated_at, None);
    j.close().unwrap();
    // Without reuse, retired files are removed.
    let d = dir("no-reuse");
    let j = Journal::open(&d, opts().recycle_segments(0)).unwrap();
    let mut last = Lsn(0);
    for i in 0..400 {
        last = j.append(&payload(0, i)).unwrap();
    }
    j.wait_blocking(last, Level::Durable).unwrap();
    j.truncate_before(last).unwrap();
    assert_eq!(files_ending(&d, ".free"), 0);
    assert_eq!(j.stats().segments_recycled, 0);
}
