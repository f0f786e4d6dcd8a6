//! The recovery rule: a record that may have been
//! acknowledged is never cut silently. The durable point in the checkpoint
//! lags the acknowledgements, so damage past it with valid records after it
//! is refused in the default mode, and only `Salvage` drops it, keeping
//! every valid record after it and reporting what it dropped.

use std::fs::OpenOptions as FsOpen;
use std::path::PathBuf;

use overlapped_journal::format::{Checkpoint, Geometry, CHECKPOINT_SLOT};
use overlapped_journal::{verify, Damage, Error, Journal, Level, Lsn, Options, RecoveryMode};

use crate::common::FileExt;

fn opts() -> Options {
    Options::default()
        .segment_size(64 << 10)
        .buffer_bytes(64 << 10)
        .max_record_bytes(4 << 10)
}

struct Log {
    dir: PathBuf,
    geo: Geometry,
    lsns: Vec<u64>,
    end: u64,
}

/// 200 records of 1000 bytes, all acknowledged durable (they span four
/// 64 KiB segments); then the checkpoint's durable point is set back to
/// record `durable_at`, as a lagging checkpoint leaves it.
fn build(name: &str, durable_at: usize) -> Log {
    let dir = crate::common::fresh_dir(&format!("rule-{name}"));
    let j = Journal::open(&dir, opts()).unwrap();
    let mut lsns = Vec::new();
    for i in 0..200u32 {
        let lsn = j.append(&[i as u8; 1000]).unwrap();
        j.wait_blocking(lsn, Level::Durable).unwrap();
        lsns.push(lsn.0);
    }
    let geo = j.geometry();
    let end = j.watermark(Level::Durable).0;
    j.close().unwrap();
    let log = Log {
        dir,
        geo,
        lsns,
        end,
    };
    log.set_durable(log.lsns[durable_at]);
    log
}

impl Log {
    fn set_durable(&self, durable: u64) {
        let path = self.dir.join("checkpoint");
        let c = Checkpoint::decode_file(&std::fs::read(&path).unwrap()).unwrap();
        let c = Checkpoint {
            durable_lsn: durable,
            reserved_lsn: durable,
            generation: c.generation + 1,
            ..c
        };
        let f = FsOpen::new().write(true).open(&path).unwrap();
        f.write_all_at(&c.encode(), 0).unwrap();
        f.write_all_at(&c.encode(), CHECKPOINT_SLOT as u64).unwrap();
        f.sync_all().unwrap();
    }

    fn write(&self, pos: u64, bytes: &[u8]) {
        let seq = self.geo.segment_of(pos);
        let f = FsOpen::new()
            .write(true)
            .open(crate::common::seg_path(&self.dir, seq))
            .unwrap();
        f.write_all_at(bytes, self.geo.file_offset(pos)).unwrap();
        f.sync_all().unwrap();
    }

    fn records(&self) -> Vec<Vec<u8>> {
        let j = Journal::open(&self.dir, opts().recovery(RecoveryMode::Strict)).unwrap();
        let got = j.read_from(Lsn(0)).unwrap().map(|r| r.unwrap().data);
        got.collect()
    }
}

fn refused(r: Result<impl std::fmt::Debug, Error>, at: u64, what: &str) -> Damage {
    match r {
        Err(Error::Corrupt { lsn, damage }) => {
            assert_eq!(lsn, at, "{what}");
            damage
        }
        other => panic!("{what}: expected corruption at {at}, got {other:?}"),
    }
}

#[test]
fn damage_with_records_after_it_is_refused_not_cut() {
    // Two damaged bytes in an acknowledged record past the (lagging)
    // durable point, intact records after it. A recovery that cut at the
    // first damage would have said ok in verify and cut 150 acknowledged
    // records at the next open without a word.
    let l = build("two-bytes", 10);
    let victim = l.lsns[50];
    l.write(victim + 40, &[0xde, 0xad]);
    for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::Strict] {
        let o = opts().recovery(mode);
        let d = refused(verify(&l.dir, &o), victim, "verify");
        assert!(
            matches!(&d, Damage::RecordsFollow { first, next }
                if **first == Damage::BadCrc && *next == l.lsns[51]),
            "{d:?}"
        );
        assert!(d.to_string().contains("repair"), "{d}");
        refused(Journal::open(&l.dir, o), victim, "open");
    }
    // Refusing changed nothing: still 200 records behind the damage's back.
    let d = refused(verify(&l.dir, &opts()), victim, "verify again");
    assert!(matches!(d, Damage::RecordsFollow { .. }));

    // Salvage drops the damaged record only, keeps the 149 intact records
    // after it (it does not cut them all), and says what it dropped.
    let rep = verify(&l.dir, &opts().recovery(RecoveryMode::Salvage)).unwrap();
    assert_eq!(rep.truncated_at, Some(victim));
    assert_eq!(rep.records, 199);
    let j = Journal::open(&l.dir, opts().recovery(RecoveryMode::Salvage)).unwrap();
    let r = j.recovery_report().clone();
    assert_eq!(r.truncated_at, Some(victim));
    assert_eq!(r.records, 199);
    assert_eq!(r.salvaged_records, 149);
    assert_eq!(r.dropped_records, 0);
    assert_eq!(r.dropped_stretches, 1);
    assert_eq!((r.dropped[0].from, r.dropped[0].to), (victim, l.lsns[51]));
    assert_eq!(r.dropped_bytes, l.lsns[51] - victim);
    assert!(r.dropped_file.is_some(), "{r:?}");
    assert!(!r.cut_acknowledged);
    let s = j.stats();
    assert_eq!((s.recovery_cuts, s.recovery_cut_lsn), (1, Some(victim)));
    // The salvaged journal goes on after its last record (no LSN is handed
    // out twice), and is clean.
    assert_eq!(r.end_lsn, l.end);
    assert_eq!(j.append(b"after repair").unwrap().0, l.end);
    j.close().unwrap();
    let got = l.records();
    assert_eq!(got.len(), 200);
    assert_eq!(got[49], [49u8; 1000]);
    assert_eq!(got[50], [51u8; 1000]);
    assert_eq!(got[199], b"after repair");
}

#[test]
fn a_hole_of_zeros_with_records_after_it_is_refused() {
    // A whole acknowledged record zeroed: it reads like the end of the log,
    // but the records after it are there.
    let l = build("hole", 10);
    let victim = l.lsns[120];
    l.write(victim, &[0u8; 1024]);
    let d = refused(verify(&l.dir, &opts()), victim, "verify");
    assert!(
        matches!(&d, Damage::RecordsFollow { first, next }
            if matches!(**first, Damage::Zeros | Damage::GarbageAfterEnd)
                && *next == l.lsns[121]),
        "{d:?}"
    );
    refused(Journal::open(&l.dir, opts()), victim, "open");
}

#[test]
fn records_in_a_later_segment_are_found() {
    // Damage at the very end of a segment, the next valid record in the
    // next segment file.
    let l = build("next-segment", 10);
    let first_of_seg1 = *l.lsns.iter().find(|&&p| l.geo.segment_of(p) == 1).unwrap();
    let idx = l.lsns.iter().position(|&p| p == first_of_seg1).unwrap();
    let victim = l.lsns[idx - 1];
    // Damage the last record starting in segment 0 and every record after
    // it in segment 1 except the last: the scan must reach segment 1's end.
    for &p in &l.lsns[idx - 1..199] {
        l.write(p + 30, &[0xff]);
    }
    let d = refused(verify(&l.dir, &opts()), victim, "verify");
    assert!(
        matches!(&d, Damage::RecordsFollow { next, .. } if *next == l.lsns[199]),
        "{d:?}"
    );
}

#[test]
fn a_torn_tail_is_cut_and_reported() {
    let l = build("torn", 190);
    let victim = l.lsns[199];
    l.write(victim + 60, &[0x01, 0x02]);
    let rep = verify(&l.dir, &opts()).unwrap();
    assert_eq!(rep.truncated_at, Some(victim));
    assert_eq!(rep.dropped_records, 0);
    let j = Journal::open(&l.dir, opts()).unwrap();
    let s = j.stats();
    assert_eq!((s.recovery_cuts, s.recovery_cut_lsn), (1, Some(victim)));
    assert!(j
        .recovery_report()
        .damage
        .as_deref()
        .unwrap()
        .contains("CRC"));
    drop(j);
    // A clean open reports no cut.
    let j = Journal::open(&l.dir, opts()).unwrap();
    assert_eq!(j.stats().recovery_cuts, 0);
    assert_eq!(j.recovery_report().truncated_at, None);
    assert!(l.end > victim);
}

#[test]
fn a_torn_tail_s_lsns_are_not_handed_out_again() {
    // The torn record's bytes are on disk (and may have been read at
    // `Written`): new records go after them.
    let l = build("torn-no-reuse", 190);
    let victim = l.lsns[199];
    l.write(victim + 60, &[0x01, 0x02]);
    let j = Journal::open(&l.dir, opts()).unwrap();
    let r = j.recovery_report().clone();
    assert_eq!(r.truncated_at, Some(victim));
    assert!(r.end_lsn >= l.end, "{} < {}", r.end_lsn, l.end);
    let lsn = j.append(b"next").unwrap();
    assert!(
        lsn.0 >= l.end,
        "LSN {} reused (the torn record ended at {})",
        lsn.0,
        l.end
    );
    j.close().unwrap();
    let got = l.records();
    assert_eq!(got.len(), 200);
    assert_eq!(got[199], b"next");
}

#[test]
fn salvage_drops_before_the_durable_point_and_says_so() {
    let l = build("before-durable", 199);
    let victim = l.lsns[30];
    l.write(victim + 40, &[0xde, 0xad]);
    refused(verify(&l.dir, &opts()), victim, "verify");
    let j = Journal::open(&l.dir, opts().recovery(RecoveryMode::Salvage)).unwrap();
    let r = j.recovery_report();
    assert_eq!(r.truncated_at, Some(victim));
    assert!(r.cut_acknowledged);
    assert_eq!(r.records, 199);
    drop(j);
    assert_eq!(l.records().len(), 199);
}

#[test]
fn salvage_reads_through_a_bad_segment_header_and_rewrites_it() {
    let l = build("bad-header", 10);
    // Segment 1's header is damaged.
    let f = FsOpen::new()
        .write(true)
        .open(crate::common::seg_path(&l.dir, 1))
        .unwrap();
    f.write_all_at(&[0xff; 8], 0).unwrap();
    drop(f);
    assert!(matches!(
        verify(&l.dir, &opts()),
        Err(Error::Corrupt {
            damage: Damage::BadSegmentHeader(1),
            ..
        })
    ));
    let j = Journal::open(&l.dir, opts().recovery(RecoveryMode::Salvage)).unwrap();
    assert_eq!(j.recovery_report().records, 200);
    j.append(b"on").unwrap();
    j.close().unwrap();
    // Strict opens it: the header was written anew.
    let got = l.records();
    assert_eq!(got.len(), 201);
    assert_eq!(got.last().unwrap(), b"on");
}
