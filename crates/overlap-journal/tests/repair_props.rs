//! The rules of `repair`, checked on journals damaged at random (flipped
//! bytes, files cut short, zeroed ranges, deleted, duplicated and
//! renumbered segments) and with an error injected at each step of its
//! application:
//!
//! - the dry run changes nothing and promises what the repair does;
//! - every byte the repair rewrites or deletes was saved first, to a
//!   `dropped-N.bin`;
//! - the checkpoint's durable point and floor (`reserved_lsn`, past
//!   every record ever acknowledged) are never lowered, and no LSN below
//!   the floor (nor any LSN a record held) is handed out again;
//! - the repaired journal opens, holds only records that were appended
//!   (each at its LSN), and keeps every record of segments no damage
//!   touched;
//! - an error at any step leaves a journal that a repair takes up again.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use overlapped::AlignedBuf;
use overlapped_journal::format::{record_span, Checkpoint};
use overlapped_journal::{
    repair, repair_storage, FsStorage, Journal, Level, Lsn, Storage, SyncMethod, WriteFuture,
};
use proptest::prelude::*;

use crate::common::copy_dir;
use crate::repair::{checkpoint, opts};

/// A damaged journal's state: each file's name and bytes.
type Snapshot = BTreeMap<String, Vec<u8>>;

fn snapshot(d: &Path) -> Snapshot {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn seq_of(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".seg")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// The bytes saved in every `dropped-*.bin` of a snapshot: (segment, file
/// offset) to byte.
fn saved(s: &Snapshot) -> BTreeMap<(u64, u64), u8> {
    let mut out = BTreeMap::new();
    for (name, b) in s {
        if !(name.starts_with("dropped-") && name.ends_with(".bin")) {
            continue;
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        assert_eq!(&b[..8], b"OVLJDROP", "{name}");
        let mut at = 24;
        while at < b.len() {
            at += match &b[at..at + 8] {
                b"STRETCH2" => 32 + u32_at(at + 24),
                b"SEGMENT2" => 24,
                other => panic!("{name}: {other:?} at {at}"),
            };
            loop {
                let n = u32_at(at);
                at += 4;
                if n == 0 {
                    break;
                }
                let (seq, off) = (u64_at(at), u64_at(at + 8));
                for i in 0..n {
                    out.insert((seq, off + i as u64), b[at + 16 + i]);
                }
                at += 16 + n;
            }
        }
    }
    out
}

/// Every byte of a segment file in `before` that `after` no longer holds
/// (rewritten, cut or deleted) is saved in `after`'s dropped files (a
/// zero byte may have been a hole, which reads as zeros unsaved).
fn check_saved(before: &Snapshot, after: &Snapshot) {
    let saved = saved(after);
    for (name, old) in before {
        let Some(seq) = seq_of(name) else { continue };
        let new = after.get(name).map(Vec::as_slice).unwrap_or(&[]);
        for (i, &b) in old.iter().enumerate() {
            if new.get(i) == Some(&b) || b == 0 {
                continue;
            }
            assert_eq!(
                saved.get(&(seq, i as u64)),
                Some(&b),
                "segment {seq} byte {i} ({b:#x}) changed or deleted, not saved"
            );
        }
    }
}

/// A fresh journal of records of varied sizes over several segments:
/// its directory and its records (LSN to payload).
fn build(name: &str, n: u64) -> (PathBuf, BTreeMap<u64, Vec<u8>>) {
    let dir = crate::common::fresh_dir(name);
    let j = Journal::open(&dir, opts()).unwrap();
    let mut recs = BTreeMap::new();
    let mut last = Lsn(0);
    for i in 0..n {
        let mut p = format!("r{i}:").into_bytes();
        p.resize(20 + (i * 37 % 700) as usize, (i % 249) as u8 + 1);
        last = j.append(&p).unwrap();
        recs.insert(last.0, p);
    }
    j.wait_blocking(last, Level::Durable).unwrap();
    j.close().unwrap();
    (dir, recs)
}

fn segs(d: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = snapshot(d).keys().filter_map(|n| seq_of(n)).collect();
    v.sort();
    v
}

/// One kind of damage; indices pick among the segments that exist.
#[derive(Debug, Clone)]
enum Harm {
    Flip(usize, u64, u8),
    Cut(usize, u64),
    Zero(usize, u64, u64),
    Delete(usize),
    Duplicate(usize, u64),
    Renumber(usize, u64),
}

fn harm() -> impl Strategy<Value = Harm> {
    let off = 0u64..(64 << 10);
    prop_oneof![
        (any::<usize>(), off.clone(), 1u8..=255).prop_map(|(s, o, x)| Harm::Flip(s, o, x)),
        (any::<usize>(), off.clone()).prop_map(|(s, o)| Harm::Cut(s, o)),
        (any::<usize>(), off.clone(), 1u64..20000).prop_map(|(s, o, l)| Harm::Zero(s, o, l)),
        any::<usize>().prop_map(Harm::Delete),
        (any::<usize>(), 0u64..40).prop_map(|(s, t)| Harm::Duplicate(s, t)),
        (any::<usize>(), 0u64..40).prop_map(|(s, t)| Harm::Renumber(s, t)),
    ]
}

/// Applies `h` to the journal in `d`; returns the segments it touched
/// (their records may be lost).
fn apply(d: &Path, h: &Harm) -> Vec<u64> {
    use crate::common::FileExt;
    let list = segs(d);
    if list.is_empty() {
        return Vec::new();
    }
    let path = |s: u64| crate::common::seg_path(d, s);
    let pick = |i: usize| list[i % list.len()];
    let open = |s: u64| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path(s))
            .unwrap()
    };
    match *h {
        Harm::Flip(i, off, x) => {
            let s = pick(i);
            let mut b = [0u8];
            let f = std::fs::File::open(path(s)).unwrap();
            if f.read_at(&mut b, off).unwrap() == 1 {
                open(s).write_all_at(&[b[0] ^ x], off).unwrap();
            }
            vec![s]
        }
        Harm::Cut(i, len) => {
            let s = pick(i);
            open(s).set_len(len).unwrap();
            vec![s]
        }
        Harm::Zero(i, off, len) => {
            let s = pick(i);
            open(s).write_all_at(&vec![0u8; len as usize], off).unwrap();
            vec![s]
        }
        Harm::Delete(i) => {
            let s = pick(i);
            std::fs::remove_file(path(s)).unwrap();
            vec![s]
        }
        Harm::Duplicate(i, to) | Harm::Renumber(i, to) => {
            let s = pick(i);
            if to == s {
                return Vec::new();
            }
            std::fs::copy(path(s), path(to)).unwrap();
            if matches!(h, Harm::Renumber(..)) {
                std::fs::remove_file(path(s)).unwrap();
            }
            vec![s, to]
        }
    }
}

/// The checks after a repair of `d`, whose state before it was `before`
/// with floor `floor` (`Checkpoint::floor`); `orig` are the records appended and
/// `intact` those that no damage touched.
fn check_repaired(
    d: &Path,
    before: &Snapshot,
    floor: u64,
    orig: &BTreeMap<u64, Vec<u8>>,
    intact: &BTreeSet<u64>,
) {
    let after = snapshot(d);
    check_saved(before, &after);
    assert!(checkpoint(d).floor() >= floor, "the floor was lowered");
    assert!(
        checkpoint(d).durable_lsn >= before_durable(before),
        "the durable point was lowered"
    );
    let j = Journal::open(d, opts()).expect("the repaired journal opens");
    let mut got = BTreeMap::new();
    for r in j.read_from(j.start_lsn()).unwrap() {
        let r = r.unwrap();
        assert_eq!(
            orig.get(&r.lsn.0),
            Some(&r.data),
            "LSN {} is no record appended",
            r.lsn.0
        );
        got.insert(r.lsn.0, r.data);
    }
    for lsn in intact {
        assert!(
            got.contains_key(lsn),
            "the intact record at LSN {lsn} was dropped"
        );
    }
    let next = j.append(b"after").unwrap().0;
    assert!(next >= floor, "LSN {next} is below the floor {floor}");
    assert!(got.keys().all(|&l| l < next), "LSN {next} handed out again");
    j.close().unwrap();
    let again = repair(d, &opts(), false, &mut |_| {}).unwrap();
    assert!(
        !again.changes_anything(),
        "not clean after repair: {again:?}"
    );
}

/// The checkpoint's durable point in the state `s`.
fn before_durable(s: &Snapshot) -> u64 {
    let b = s.get("checkpoint").expect("a checkpoint");
    Checkpoint::decode_file(b)
        .expect("a valid checkpoint")
        .durable_lsn
}

/// The records lying wholly in segments none of `touched`.
fn intact(d: &Path, recs: &BTreeMap<u64, Vec<u8>>, touched: &BTreeSet<u64>) -> BTreeSet<u64> {
    let geo = checkpoint(d).geometry;
    recs.iter()
        .filter(|(&l, p)| {
            let (a, b) = (
                geo.segment_of(l),
                geo.segment_of(l + record_span(p.len()) - 1),
            );
            (a..=b).all(|s| !touched.contains(&s))
        })
        .map(|(&l, _)| l)
        .collect()
}

static CASE: AtomicU64 = AtomicU64::new(0);

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn repair_keeps_its_rules_on_randomly_damaged_journals(harms in prop::collection::vec(harm(), 1..4)) {
        let n = CASE.fetch_add(1, Ordering::Relaxed);
        let (d, recs) = build(&format!("props-{n}"), 300);
        let floor = checkpoint(&d).floor();
        let mut touched = BTreeSet::new();
        for h in &harms {
            touched.extend(apply(&d, h));
        }
        let keep = intact(&d, &recs, &touched);
        let before = snapshot(&d);
        let dry = repair(&d, &opts(), true, &mut |_| {}).expect("a dry run");
        prop_assert_eq!(&snapshot(&d), &before, "the dry run changed files");
        let r = repair(&d, &opts(), false, &mut |_| {}).expect("repair");
        prop_assert_eq!(dry.records, r.records);
        prop_assert_eq!(dry.end_lsn, r.end_lsn);
        prop_assert_eq!(dry.dropped_stretches, r.dropped_stretches);
        prop_assert_eq!(&dry.removed_segments, &r.removed_segments);
        prop_assert_eq!(&dry.rewritten_headers, &r.rewritten_headers);
        check_repaired(&d, &before, floor, &recs, &keep);
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// A storage that fails its `at`-th change (write, sync, segment made or
/// removed, zeroing, the checkpoint, the file of dropped bytes) with EIO,
/// and every change after it: a crash at that step.
struct FailAt {
    inner: Arc<dyn Storage>,
    n: AtomicU64,
    at: u64,
}

impl FailAt {
    fn step(&self) -> io::Result<()> {
        if self.n.fetch_add(1, Ordering::SeqCst) >= self.at {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
    fn fired(&self) -> bool {
        self.n.load(Ordering::SeqCst) > self.at
    }
}

impl Storage for FailAt {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn buffer_align(&self) -> usize {
        self.inner.buffer_align()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn list_segments(&self) -> io::Result<Vec<u64>> {
        self.inner.list_segments()
    }
    fn create_segment(&self, seq: u64, size: u64, header: &[u8]) -> io::Result<()> {
        self.step()?;
        self.inner.create_segment(seq, size, header)
    }
    fn write(&self, seq: u64, offset: u64, buf: AlignedBuf) -> (io::Result<()>, AlignedBuf) {
        match self.step() {
            Ok(()) => self.inner.write(seq, offset, buf),
            Err(e) => (Err(e), buf),
        }
    }
    fn write_async(&self, seq: u64, offset: u64, buf: AlignedBuf) -> WriteFuture {
        let r = self.write(seq, offset, buf);
        Box::pin(std::future::ready(r))
    }
    fn sync(&self, seq: u64) -> io::Result<()> {
        self.step()?;
        self.inner.sync(seq)
    }
    fn read(&self, seq: u64, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(seq, offset, buf)
    }
    fn zero(&self, seq: u64, offset: u64, len: u64) -> io::Result<()> {
        self.step()?;
        self.inner.zero(seq, offset, len)
    }
    fn remove_segment(&self, seq: u64) -> io::Result<()> {
        self.step()?;
        self.inner.remove_segment(seq)
    }
    fn data_after(&self, seq: u64, offset: u64) -> io::Result<Option<(u64, u64)>> {
        self.inner.data_after(seq, offset)
    }
    fn create_aside(&self, name: &str) -> io::Result<Option<(PathBuf, std::fs::File)>> {
        self.step()?;
        self.inner.create_aside(name)
    }
    fn read_checkpoint(&self) -> io::Result<Option<Vec<u8>>> {
        self.inner.read_checkpoint()
    }
    fn write_checkpoint(&self, offset: u64, data: &[u8], sync: bool) -> io::Result<()> {
        self.step()?;
        self.inner.write_checkpoint(offset, data, sync)
    }
}

/// An error at each step of a repair's application (a bad record with
/// records after it and a bad header, with a lost acknowledged tail or
/// with a stray segment after the end): each leaves a journal that a
/// repair takes up again, ending where a repair without error ends, with
/// every changed byte saved.
#[test]
fn an_error_at_any_step_of_a_repair_leaves_a_journal_that_repairs() {
    for lost_tail in [true, false] {
        steps(lost_tail);
    }
}

fn steps(lost_tail: bool) {
    use crate::common::FileExt;
    let (d, recs) = build(&format!("props-steps-{lost_tail}"), 300);
    let floor = checkpoint(&d).floor();
    let geo = checkpoint(&d).geometry;
    let lsns: Vec<u64> = recs.keys().copied().collect();
    let seg = |s: u64| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(crate::common::seg_path(&d, s))
            .unwrap()
    };
    seg(geo.segment_of(lsns[20]))
        .write_all_at(&[0xee; 4], geo.file_offset(lsns[20]) + 30)
        .unwrap();
    seg(1).write_all_at(b"BADHDR!!", 24).unwrap();
    let last = geo.segment_of(*lsns.last().unwrap());
    if lost_tail {
        seg(last).set_len(geo.file_offset(lsns[280])).unwrap();
    } else {
        std::fs::write(crate::common::seg_path(&d, last + 3), vec![0x5a; 20000]).unwrap();
    }
    let pristine = snapshot(&d);
    let touched = [1, last, geo.segment_of(lsns[20])].into_iter().collect();
    let keep = intact(&d, &recs, &touched);
    let expect = {
        let w = d.with_extension("expect");
        copy_dir(&d, &w);
        let r = repair(&w, &opts(), false, &mut |_| {}).unwrap();
        assert_eq!(r.removed_segments.is_empty(), lost_tail, "{r:?}");
        assert!(!r.rewritten_headers.is_empty(), "{r:?}");
        r
    };
    let engine = overlapped::Engine::new().unwrap();
    for at in 0.. {
        assert!(
            at < 1000,
            "a repair of this journal makes fewer than 1000 changes"
        );
        let w = d.with_extension(format!("step{at}"));
        copy_dir(&d, &w);
        let fs = FsStorage::open(&engine, &w, true, SyncMethod::Auto).unwrap();
        let s = Arc::new(FailAt {
            inner: Arc::new(fs),
            n: AtomicU64::new(0),
            at,
        });
        let res = repair_storage(s.clone(), &opts(), false, &mut |_| {});
        let fired = s.fired();
        drop(s);
        if !fired {
            res.unwrap();
            check_repaired(&w, &pristine, floor, &recs, &keep);
            eprintln!(
                "an error injected at each of the {at} steps of the repair (lost tail: \
                 {lost_tail}) left a journal that repairs"
            );
            let _ = std::fs::remove_dir_all(&w);
            break;
        }
        assert!(
            res.is_err(),
            "step {at}: the injected error was not reported"
        );
        // Taken up again: the same outcome, every changed byte saved.
        let r =
            repair(&w, &opts(), false, &mut |_| {}).unwrap_or_else(|e| panic!("step {at}: {e}"));
        assert_eq!(r.end_lsn, expect.end_lsn, "step {at}");
        check_repaired(&w, &pristine, floor, &recs, &keep);
        let _ = std::fs::remove_dir_all(&w);
    }
}
