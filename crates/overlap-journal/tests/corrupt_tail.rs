//! The corrupt-tail matrix, on real files: each kind of damage to the last
//! record, with the durable point before it (damage in the torn tail) and
//! after it (damage to acknowledged data), in both recovery modes.

use std::fs::OpenOptions as FsOpen;
use std::path::{Path, PathBuf};

use overlapped_journal::format::{encode_record, Checkpoint, Geometry, CHECKPOINT_SLOT};
use overlapped_journal::{verify, Damage, Error, Journal, Level, Lsn, Options, RecoveryMode};

use crate::common::FileExt;

fn opts() -> Options {
    Options::default()
        .segment_size(64 << 10)
        .buffer_bytes(64 << 10)
        .max_record_bytes(16 << 10)
}

struct Layout {
    dir: PathBuf,
    geo: Geometry,
    /// LSN of the last record, whose header straddles a 4 KiB block.
    last: u64,
    end: u64,
    records: u64,
}

fn build(name: &str) -> Layout {
    let dir = crate::common::fresh_dir(&format!("corrupt-{name}"));
    let j = Journal::open(&dir, opts()).unwrap();
    let mut lsn = Lsn(0);
    for i in 0..20u32 {
        lsn = j.append(&i.to_le_bytes().repeat(70)).unwrap();
    }
    j.wait_blocking(lsn, Level::Written).unwrap();
    // A filler so that the last record starts 16 bytes before a 4 KiB
    // boundary: its header is split across two blocks.
    let e = j.watermark(Level::Accepted).0;
    let target = (e + 24 + 16).div_ceil(4096) * 4096 - 16;
    j.append(&vec![0xAB; (target - e - 24) as usize]).unwrap();
    let last = j.append(&[0x5A; 300]).unwrap();
    assert_eq!(last.0, target);
    j.wait_blocking(last, Level::Durable).unwrap();
    let geo = j.geometry();
    let end = j.watermark(Level::Durable).0;
    j.close().unwrap();
    Layout {
        dir,
        geo,
        last: last.0,
        end,
        records: 22,
    }
}

impl Layout {
    fn seg_file(&self, pos: u64) -> (std::fs::File, u64) {
        let seq = self.geo.segment_of(pos);
        let f = FsOpen::new()
            .read(true)
            .write(true)
            .open(crate::common::seg_path(&self.dir, seq))
            .unwrap();
        (f, self.geo.file_offset(pos))
    }

    fn write(&self, pos: u64, bytes: &[u8]) {
        let (f, off) = self.seg_file(pos);
        f.write_all_at(bytes, off).unwrap();
    }

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
    }
}

/// What a case should do when the damage is after the durable point.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tail {
    /// Indistinguishable from never written: both modes open cleanly.
    CleanEnd,
    /// Tolerate cuts it off; Strict refuses.
    Torn,
}

fn check(name: &str, damage: impl Fn(&Layout), expect: Tail, want: fn(&Damage) -> bool) {
    for durable_after in [false, true] {
        for mode in [RecoveryMode::Strict, RecoveryMode::TolerateTornTail] {
            let l = build(name);
            damage(&l);
            l.set_durable(if durable_after { l.end } else { l.last });
            let o = opts().recovery(mode);
            let what = format!(
                "{name}, durable point {}, {mode:?}",
                if durable_after {
                    "after the damage"
                } else {
                    "before it"
                }
            );
            let verified = verify(&l.dir, &o);
            let opened = Journal::open(&l.dir, o.clone());
            let must_fail = durable_after || (mode == RecoveryMode::Strict && expect == Tail::Torn);
            if must_fail {
                for r in [verified.map(|_| ()), opened.map(|_| ())] {
                    match r {
                        Err(Error::Corrupt { lsn, damage }) => {
                            assert_eq!(lsn, l.last, "{what}");
                            assert!(
                                want(&damage) || matches!(damage, Damage::Truncated),
                                "{what}: {damage:?}"
                            );
                        }
                        other => panic!("{what}: expected corruption, got {other:?}"),
                    }
                }
                continue;
            }
            let mut report = verified.unwrap_or_else(|e| panic!("{what}: verify: {e}"));
            let j = opened.unwrap_or_else(|e| panic!("{what}: open: {e}"));
            report.storage = j.recovery_report().storage.clone();
            assert_eq!(report, *j.recovery_report(), "{what}");
            assert_eq!(report.records, l.records - 1, "{what}");
            match expect {
                Tail::CleanEnd => {
                    assert_eq!(report.truncated_at, None, "{what}");
                    assert_eq!(report.end_lsn, l.last, "{what}");
                }
                Tail::Torn => {
                    assert_eq!(report.truncated_at, Some(l.last), "{what}");
                    // The damaged record's bytes are on disk: its LSN is
                    // not handed out again (no LSN is handed out twice).
                    assert!(report.end_lsn > l.last, "{what}");
                }
            }
            // The journal goes on after the cut, and the repaired log is
            // clean even for Strict.
            let lsn = j.append(b"new life").unwrap();
            assert_eq!(lsn.0, report.end_lsn, "{what}");
            j.wait_blocking(lsn, Level::Durable).unwrap();
            drop(j);
            let j = Journal::open(&l.dir, opts().recovery(RecoveryMode::Strict))
                .unwrap_or_else(|e| panic!("{what}: reopen after repair: {e}"));
            let got: Vec<_> = j.read_from(Lsn(0)).unwrap().map(|r| r.unwrap()).collect();
            assert_eq!(got.len() as u64, l.records, "{what}");
            assert_eq!(got.last().unwrap().data, b"new life", "{what}");
        }
    }
}

#[test]
fn zeroed_tail() {
    check(
        "zeroed",
        |l| l.write(l.last, &vec![0u8; (l.end - l.last) as usize]),
        Tail::CleanEnd,
        |_| true,
    );
}

#[test]
fn zeroed_payload() {
    check(
        "zeroed-payload",
        |l| l.write(l.last + 100, &[0u8; 64]),
        Tail::Torn,
        |d| matches!(d, Damage::BadCrc),
    );
}

#[test]
fn truncated_length() {
    check(
        "length",
        |l| l.write(l.last, &0xFFFF_FF00u32.to_le_bytes()),
        Tail::Torn,
        |d| matches!(d, Damage::BadLength(_)),
    );
}

#[test]
fn cut_short_file() {
    check(
        "cut-short",
        |l| {
            let (f, off) = l.seg_file(l.last);
            f.set_len(off + 100).unwrap();
        },
        Tail::Torn,
        |d| matches!(d, Damage::Truncated),
    );
}

#[test]
fn bad_crc() {
    check(
        "crc",
        |l| l.write(l.last + 200, &[0xFF]),
        Tail::Torn,
        |d| matches!(d, Damage::BadCrc),
    );
}

#[test]
fn stale_record_from_earlier_use() {
    // A valid record of this journal, but written for another position.
    check(
        "stale-lsn",
        |l| l.write(l.last, &encode_record(&l.geo, 0, &[0x5A; 300])),
        Tail::Torn,
        |d| matches!(d, Damage::WrongLsn(0)),
    );
    // A record for this position, but from another journal (or an earlier
    // one that used the same directory).
    check(
        "stale-ident",
        |l| {
            let other = Geometry {
                uuid: l.geo.uuid ^ 1,
                ..l.geo
            };
            l.write(l.last, &encode_record(&other, l.last, &[0x5A; 300]));
        },
        Tail::Torn,
        |d| matches!(d, Damage::WrongSegment(_)),
    );
}

#[test]
fn header_split_across_blocks_torn() {
    // The second block of the split header never reached the disk.
    check(
        "split",
        |l| l.write(l.last + 16, &vec![0u8; (l.end - l.last - 16) as usize]),
        Tail::Torn,
        |d| matches!(d, Damage::BadCrc),
    );
}

#[test]
fn verify_changes_nothing() {
    let l = build("verify");
    l.write(l.last + 200, &[0xFF]);
    l.set_durable(l.last);
    let before = std::fs::read(crate::common::seg_path(&l.dir, l.geo.segment_of(l.last))).unwrap();
    let rep = verify(&l.dir, &opts()).unwrap();
    assert_eq!(rep.truncated_at, Some(l.last));
    let after = std::fs::read(crate::common::seg_path(&l.dir, l.geo.segment_of(l.last))).unwrap();
    assert!(before == after);
    assert!(matches!(
        verify(&l.dir, &opts().recovery(RecoveryMode::Strict)),
        Err(Error::Corrupt { .. })
    ));
    let _ = Path::new(&l.dir);
}
