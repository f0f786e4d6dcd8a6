//! `repair` on real files: it never lowers the checkpoint's durable point
//! nor hands out an acknowledged LSN again when the acknowledged tail is
//! gone, it works (in bounded time) when valid records sit after missing
//! segments, and it saves every byte it rewrites or deletes (a bad
//! segment header, a stray segment) and says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use overlapped_journal::format::{
    encode_record, record_span, Checkpoint, Geometry, CHECKPOINT_SLOT,
};
use overlapped_journal::{repair, verify, Journal, Level, Options, RecoveryReport};

use crate::common::{copy_dir, fresh_dir, seg_path};

use crate::common::FileExt;

pub fn opts() -> Options {
    Options::default()
        .segment_size(64 << 10)
        .buffer_bytes(64 << 10)
        .max_record_bytes(4 << 10)
}

/// A journal of `n` records of 200 bytes (durable, closed): its directory,
/// geometry and the records' LSNs and payloads.
pub fn build(name: &str, n: u32) -> (PathBuf, Geometry, Vec<(u64, Vec<u8>)>) {
    let dir = fresh_dir(&format!("repair-{name}"));
    let j = Journal::open(&dir, opts()).unwrap();
    let mut recs = Vec::new();
    for i in 0..n {
        let p = format!("record {i:05} ").into_bytes().repeat(13);
        recs.push((j.append(&p).unwrap().0, p));
    }
    j.wait_blocking(
        overlapped_journal::Lsn(recs.last().unwrap().0),
        Level::Durable,
    )
    .unwrap();
    let geo = j.geometry();
    j.close().unwrap();
    (dir, geo, recs)
}

pub fn checkpoint(dir: &Path) -> Checkpoint {
    Checkpoint::decode_file(&std::fs::read(dir.join("checkpoint")).unwrap()).unwrap()
}

/// Rewrites the checkpoint (both slots) with durable point `lsn`.
pub fn set_durable(dir: &Path, lsn: u64) {
    let c = checkpoint(dir);
    let c = Checkpoint {
        durable_lsn: lsn,
        reserved_lsn: lsn,
        generation: c.generation + 1,
        ..c
    };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("checkpoint"))
        .unwrap();
    f.write_all_at(&c.encode(), 0).unwrap();
    f.write_all_at(&c.encode(), CHECKPOINT_SLOT as u64).unwrap();
}

/// Runs `f` on a thread, failing the test if it takes longer than `limit`.
pub fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("still running after {limit:?}"))
}

fn run_repair(dir: &Path, dry_run: bool) -> overlapped_journal::Result<RecoveryReport> {
    let dir = dir.to_path_buf();
    bounded(Duration::from_secs(60), move || {
        repair(&dir, &opts(), dry_run, &mut |_| {})
    })
}

/// Appends one record after reopening; returns its LSN.
fn append_one(dir: &Path) -> u64 {
    let j = Journal::open(dir, opts()).unwrap();
    let lsn = j.append(b"after repair").unwrap();
    j.wait_blocking(lsn, Level::Durable).unwrap();
    j.close().unwrap();
    lsn.0
}

/// The acknowledged tail is gone: the segment file cut short, or its
/// blocks read back as zeros. Repair reports the lost records (rather than
/// "nothing to repair"), keeps the checkpoint's durable point (never lowers
/// it), and the next append gets an LSN above every acknowledged one (never
/// an acknowledged record's LSN again).
#[test]
fn a_lost_acknowledged_tail_never_lowers_the_durable_point() {
    for how in ["cut", "zeroed"] {
        let (dir, geo, recs) = build(&format!("lost-tail-{how}"), 150);
        let durable = checkpoint(&dir).durable_lsn;
        let last = recs.last().unwrap();
        let last_end = last.0 + record_span(last.1.len());
        assert!(durable >= last_end, "{how}: {durable} < {last_end}");
        let lost = recs[100].0;
        assert_eq!(geo.segment_of(lost), geo.segment_of(durable - 1), "{how}");
        let seg = seg_path(&dir, geo.segment_of(lost));
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        let off = geo.file_offset(lost);
        if how == "cut" {
            f.set_len(off).unwrap();
        } else {
            f.write_all_at(&vec![0u8; (geo.segment_size - off) as usize], off)
                .unwrap();
        }
        drop(f);
        // Opening refuses: acknowledged records are gone.
        assert!(Journal::open(&dir, opts()).is_err(), "{how}");
        let r = run_repair(&dir, false).unwrap();
        assert_eq!(r.truncated_at, Some(lost), "{how}: {r:?}");
        assert!(r.cut_acknowledged, "{how}: {r:?}");
        assert!(r.dropped_stretches >= 1, "{how}: {r:?}");
        assert!(r.end_lsn >= durable, "{how}: {r:?}");
        let after = checkpoint(&dir).durable_lsn;
        assert!(
            after >= durable,
            "{how}: durable point {durable} lowered to {after}"
        );
        let next = append_one(&dir);
        assert!(
            next >= durable,
            "{how}: LSN {next} handed out again (durable {durable})"
        );
        // The records before the damage are all there.
        let rep = verify(&dir, &opts()).unwrap();
        assert_eq!(rep.records, 101, "{how}: {rep:?}");
    }
}

/// The checkpoint's durable point lags the last acknowledgement (it is
/// written at most once a millisecond under load, and not synced on its
/// own: a power loss may keep an older one), and media damage destroys the
/// records acknowledged after it: the segment file cut short, or its
/// blocks zeroed, from there. Repair continues above the checkpoint's
/// floor (written, synced, before those acknowledgements), and the next
/// append, after repair and after the open that follows, gets an LSN above
/// every acknowledged one (never a lost record's LSN again).
#[test]
fn records_lost_past_a_lagging_durable_point_keep_their_lsns() {
    for how in ["cut", "zeroed"] {
        let dir = fresh_dir(&format!("repair-lagging-{how}"));
        let image = fresh_dir(&format!("repair-lagging-{how}-image"));
        let j = Journal::open(&dir, opts()).unwrap();
        let mut acked = Vec::new();
        let mut old_checkpoint = Vec::new();
        for i in 0..150u32 {
            let p = format!("record {i:05} ").into_bytes().repeat(13);
            let lsn = j.append(&p).unwrap();
            j.wait_blocking(lsn, Level::Durable).unwrap();
            acked.push(lsn.0);
            if i == 100 {
                old_checkpoint = std::fs::read(dir.join("checkpoint")).unwrap();
            }
        }
        // The files as a power loss now may leave them: the records
        // (synced) and the checkpoint as it was after record 100.
        copy_dir(&dir, &image);
        j.close().unwrap();
        std::fs::write(image.join("checkpoint"), &old_checkpoint).unwrap();
        let c = checkpoint(&image);
        let (geo, last, lost) = (c.geometry, *acked.last().unwrap(), acked[101]);
        assert!(c.durable_lsn <= lost, "{how}: {c:?}");
        let seg = seg_path(&image, geo.segment_of(lost));
        assert_eq!(geo.segment_of(lost), geo.segment_of(last), "{how}");
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        let off = geo.file_offset(lost);
        if how == "cut" {
            f.set_len(off).unwrap();
        } else {
            f.write_all_at(&vec![0u8; (geo.segment_size - off) as usize], off)
                .unwrap();
        }
        drop(f);
        let r = run_repair(&image, false).unwrap();
        assert!(r.end_lsn > last, "{how}: {r:?}");
        // At a segment's start: the segment is left to the preallocator.
        assert_eq!(r.end_lsn % geo.data_per_segment(), 0, "{how}: {r:?}");
        let after = checkpoint(&image);
        assert!(after.durable_lsn > last, "{how}: {after:?}");
        let next = append_one(&image);
        assert!(
            next > last,
            "{how}: LSN {next} handed out again (last acknowledged {last})"
        );
        let again = append_one(&image);
        assert!(again > next, "{how}: {again} after {next}");
        // The records before the damage are all there.
        let rep = verify(&image, &opts()).unwrap();
        assert_eq!(rep.records, 101 + 2, "{how}: {rep:?}");
    }
}

/// A valid record in a segment after missing segments: the dry run and
/// the repair agree, the repair completes (rather than failing half-way
/// with "segment 2 does not exist", leaving a journal that neither opens
/// nor repairs), keeps the records after the gap, and the journal appends.
#[test]
fn valid_records_after_missing_segments_are_kept() {
    let (dir, geo, recs) = build("missing-middle", 1200);
    let last_seq = geo.segment_of(recs.last().unwrap().0);
    assert!(last_seq >= 3, "{last_seq}");
    std::fs::remove_file(seg_path(&dir, 1)).unwrap();
    std::fs::remove_file(seg_path(&dir, 2)).unwrap();
    // The checkpoint lags, as after a crash: its durable point in
    // segment 0, before the gap.
    set_durable(&dir, recs[5].0);
    let dry = run_repair(&dir, true).unwrap();
    let r = run_repair(&dir, false).unwrap();
    assert_eq!(dry.records, r.records);
    assert_eq!(dry.end_lsn, r.end_lsn);
    let kept = recs
        .iter()
        .filter(|(l, _)| ![1, 2].contains(&geo.segment_of(*l)))
        .filter(|(l, p)| geo.segment_of(l + record_span(p.len()) - 1) == geo.segment_of(*l))
        .count() as u64;
    assert!(r.records >= kept, "{r:?} kept {kept}");
    let j = Journal::open(&dir, opts()).unwrap();
    let back: Vec<_> = j
        .read_from(overlapped_journal::Lsn(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for rec in &back {
        let orig = recs.iter().find(|(l, _)| *l == rec.lsn.0).unwrap();
        assert_eq!(orig.1, rec.data);
    }
    assert_eq!(back.last().unwrap().lsn.0, recs.last().unwrap().0);
    let next = j.append(b"x").unwrap();
    assert!(next.0 > recs.last().unwrap().0);
    j.close().unwrap();
    // Nothing left to repair.
    assert_eq!(run_repair(&dir, false).unwrap().dropped_stretches, 0);
}

/// A crafted segment number far away, holding a valid record: the gap is
/// not saved byte by byte (that took about 10 s per TiB), and repair ends
/// in seconds.
#[test]
fn a_far_segment_costs_no_work_proportional_to_its_number() {
    let (dir, geo, recs) = build("far-segment", 20);
    let seq = 1u64 << 28; // 2^28 segments of 60 KiB: 15 TiB of gap
    let pos = geo.segment_start(seq);
    let mut file = vec![0u8; geo.header_size as usize];
    file[..48].copy_from_slice(&geo.encode_segment_header(seq));
    file.extend_from_slice(&encode_record(&geo, pos, b"far away"));
    file.resize(geo.segment_size as usize, 0);
    std::fs::write(seg_path(&dir, seq), &file).unwrap();
    let r = run_repair(&dir, false).unwrap();
    assert_eq!(r.records, 21, "{r:?}");
    assert!(r.end_lsn > pos, "{r:?}");
    let j = Journal::open(&dir, opts()).unwrap();
    let next = j.append(b"next").unwrap();
    assert!(next.0 > pos);
    let all: Vec<_> = j
        .read_from(overlapped_journal::Lsn(0))
        .unwrap()
        .map(|r| r.unwrap().lsn.0)
        .collect();
    assert_eq!(all.len(), 21);
    assert_eq!(all[19], recs[19].0);
    j.close().unwrap();
    // Retiring the log up to the far record removes the files below it,
    // not every segment number below it (one removal and directory sync
    // per number: days).
    let d = dir.clone();
    bounded(Duration::from_secs(60), move || {
        let j = Journal::open(&d, opts()).unwrap();
        j.truncate_before(next).unwrap();
        assert_eq!(j.read_from(next).unwrap().count(), 1);
        j.close().unwrap();
    });
    assert!(!seg_path(&dir, 0).exists());
    assert_eq!(checkpoint(&dir).start_lsn, next.0);
}

/// Every `dropped-*.bin` in `dir`, concatenated.
pub fn dropped_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("dropped-") && name.ends_with(".bin") {
            out.extend(std::fs::read(e.path()).unwrap());
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A bad segment header and a stray segment of garbage after the end:
/// repair rewrites the one and removes the other only after saving both
/// to `dropped-N.bin`, and does not say "nothing to repair" (it said so,
/// and saved neither).
#[test]
fn a_rewritten_header_and_a_removed_stray_are_saved_and_reported() {
    let (dir, geo, _recs) = build("header-stray", 100);
    // Segment 0's header: its seq field damaged.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(seg_path(&dir, 0))
        .unwrap();
    f.write_all_at(b"BADHDR!!", 24).unwrap();
    drop(f);
    // A stray segment of garbage well after the end.
    let stray: Vec<u8> = (0..geo.segment_size)
        .map(|i| (i * 7 + 3) as u8 | 1)
        .collect();
    std::fs::write(seg_path(&dir, 9), &stray).unwrap();
    let r = run_repair(&dir, false).unwrap();
    assert!(!seg_path(&dir, 9).exists() || std::fs::read(seg_path(&dir, 9)).unwrap() != stray);
    let saved = dropped_bytes(&dir);
    assert!(
        contains(&saved, b"BADHDR!!"),
        "the old header was not saved"
    );
    assert!(
        contains(&saved, &stray[4096..4096 + 4096]),
        "the stray segment was not saved"
    );
    assert!(r.dropped_file.is_some(), "{r:?}");
    let rep = verify(&dir, &opts()).unwrap();
    assert_eq!(rep.records, 100, "{rep:?}");
}

/// Closing records the durable watermark in the checkpoint, also when the
/// last update was handed to the preallocator, which stops at close
/// before writing it (the checkpoint then lagged the acknowledged records,
/// and a repair of a lost tail could not know how far they went).
#[test]
fn closing_records_every_acknowledged_record_in_the_checkpoint() {
    for round in 0..40 {
        let name = format!("close-ckpt-{round}");
        let (dir, _, recs) = build(&name, 100 + round);
        let (l, p) = recs.last().unwrap();
        let end = l + record_span(p.len());
        let durable = checkpoint(&dir).durable_lsn;
        assert_eq!(durable, end, "round {round}: the checkpoint lags");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
