//! What a WAL user meets: `repair` that salvages and never
//! hands out an LSN twice, `read_from` in the middle of a record, a second
//! open in the same process, `wait(Accepted)` without the flusher, the LSN
//! after a record, atomic batches, and a tailing reader.

use std::fs::OpenOptions as FsOpen;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use overlapped::AlignedBuf;
use overlapped_journal::fault::{FaultStorage, Loss};
use overlapped_journal::format::{record_span, Geometry};
use overlapped_journal::{
    verify, Damage, DroppedStretch, Error, Journal, Level, Lsn, Options, RecoveryMode, Storage,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::FileExt;

fn dir(name: &str) -> PathBuf {
    crate::common::fresh_dir(&format!("wal-{name}"))
}

fn opts() -> Options {
    Options::default()
        .segment_size(64 << 10)
        .buffer_bytes(64 << 10)
        .max_record_bytes(4 << 10)
}

fn payload(i: usize) -> Vec<u8> {
    let mut v = format!("record {i} ").into_bytes();
    v.resize(100 + i % 300, b'a' + (i % 26) as u8);
    v
}

/// `n` records, all durable, in a closed journal; their LSNs, the
/// geometry and the end of the log.
fn build(d: &Path, n: usize) -> (Vec<u64>, Geometry, u64) {
    let j = Journal::open(d, opts()).unwrap();
    let mut lsns = Vec::new();
    for i in 0..n {
        lsns.push(j.append(&payload(i)).unwrap().0);
    }
    j.wait_blocking(Lsn(*lsns.last().unwrap()), Level::Durable)
        .unwrap();
    let geo = j.geometry();
    let end = j.watermark(Level::Durable).0;
    j.close().unwrap();
    (lsns, geo, end)
}

fn poke(d: &Path, geo: &Geometry, pos: u64, bytes: &[u8]) {
    let seq = geo.segment_of(pos);
    let f = FsOpen::new()
        .write(true)
        .open(crate::common::seg_path(d, seq))
        .unwrap();
    f.write_all_at(bytes, geo.file_offset(pos)).unwrap();
    f.sync_all().unwrap();
}

/// Every file of the directory and its bytes.
fn snapshot(d: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn records(j: &Journal) -> Vec<(u64, Vec<u8>)> {
    j.read_from(j.start_lsn())
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.lsn.0, r.data)
        })
        .collect()
}

/// The stretches saved in a file of dropped bytes: (from, to, damage,
/// bytes, their pieces concatenated); the entries of segments' bytes are
/// skipped.
fn parse_dropped(bytes: &[u8]) -> Vec<(u64, u64, String, Vec<u8>)> {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!(&bytes[..8], b"OVLJDROP");
    assert_eq!(u32_at(8), 2, "version");
    let mut at = 24;
    let mut out = Vec::new();
    while at < bytes.len() {
        let magic = &bytes[at..at + 8];
        let stretch = magic == b"STRETCH2";
        assert!(stretch || magic == b"SEGMENT2", "{magic:?}");
        let (from, to, damage) = if stretch {
            let dlen = u32_at(at + 24) as usize;
            let damage = String::from_utf8(bytes[at + 32..at + 32 + dlen].to_vec()).unwrap();
            let r = (u64_at(at + 8), u64_at(at + 16), damage);
            at += 32 + dlen;
            r
        } else {
            at += 24;
            (0, 0, String::new())
        };
        let mut data = Vec::new();
        loop {
            let n = u32_at(at) as usize;
            at += 4;
            if n == 0 {
                break;
            }
            data.extend_from_slice(&bytes[at + 16..at + 16 + n]);
            at += 16 + n;
        }
        if stretch {
            out.push((from, to, damage, data));
        }
    }
    out
}

#[test]
fn repair_salvages_every_intact_record_and_never_reuses_an_lsn() {
    let d = dir("repair");
    let (lsns, geo, end) = build(&d, 300);
    // Three damaged records: two in the middle, and the last one.
    let victims = [40usize, 200, 299];
    for &v in &victims {
        poke(&d, &geo, lsns[v] + 30, &[0xde, 0xad, 0xbe, 0xef]);
    }
    let originals: Vec<Vec<u8>> = victims
        .iter()
        .map(|&v| {
            let seq = geo.segment_of(lsns[v]);
            let file = std::fs::read(crate::common::seg_path(&d, seq)).unwrap();
            let off = geo.file_offset(lsns[v]) as usize;
            let to = if v + 1 < lsns.len() { lsns[v + 1] } else { end };
            file[off..off + (to - lsns[v]) as usize].to_vec()
        })
        .collect();
    assert!(matches!(verify(&d, &opts()), Err(Error::Corrupt { .. })));

    // A dry run lists everything and changes nothing.
    let before = snapshot(&d);
    let mut listed = Vec::new();
    let dry = overlapped_journal::repair(&d, &opts(), true, &mut |s: &DroppedStretch| {
        listed.push(s.clone())
    })
    .unwrap();
    assert_eq!(snapshot(&d), before, "the dry run changed files");
    assert_eq!(dry.dropped_file, None);
    let spans: Vec<(u64, u64)> = listed.iter().map(|s| (s.from, s.to)).collect();
    assert_eq!(spans[..2], [(lsns[40], lsns[41]), (lsns[200], lsns[201])]);
    assert_eq!(spans[2].0, lsns[299]);
    assert!(spans[2].1 >= end, "the damaged tail reaches past {end}");
    assert_eq!(dry.dropped_stretches, 3);
    assert_eq!(dry.records, 297);
    assert_eq!(dry.salvaged_records, 297 - 40);

    // The repair itself: the same, and the dropped bytes saved first.
    let mut again = Vec::new();
    let r = overlapped_journal::repair(&d, &opts(), false, &mut |s: &DroppedStretch| {
        again.push(s.clone())
    })
    .unwrap();
    assert_eq!(again, listed);
    assert_eq!(r.records, 297);
    let saved = std::fs::read(r.dropped_file.as_deref().unwrap()).unwrap();
    let saved = parse_dropped(&saved);
    assert_eq!(saved.len(), 3);
    for (k, (from, to, damage, data)) in saved.iter().enumerate() {
        assert_eq!((*from, *to), spans[k]);
        assert!(damage.contains("CRC"), "{damage}");
        assert_eq!(
            &data[..originals[k].len()],
            &originals[k][..],
            "stretch {k}"
        );
    }

    // Every intact record is there, in order; new records go after every
    // LSN the log ever held; the log is clean (Strict opens it).
    let j = Journal::open(&d, opts().recovery(RecoveryMode::Strict)).unwrap();
    let got = records(&j);
    let want: Vec<(u64, Vec<u8>)> = (0..300)
        .filter(|i| !victims.contains(i))
        .map(|i| (lsns[i], payload(i)))
        .collect();
    assert_eq!(got, want);
    let next = j.append(b"new").unwrap();
    assert!(
        next.0 >= end,
        "LSN {} handed out again (log ended at {end})",
        next.0
    );
    assert!(!lsns.contains(&next.0));
    j.wait_blocking(next, Level::Durable).unwrap();
    j.close().unwrap();
    let j = Journal::open(&d, opts().recovery(RecoveryMode::Strict)).unwrap();
    let got = records(&j);
    assert_eq!(got.len(), 298);
    assert_eq!(got.last().unwrap(), &(next.0, b"new".to_vec()));
    assert_eq!(j.recovery_report().truncated_at, None);
    drop(j);
    let r = overlapped_journal::repair(&d, &opts(), false, &mut |_: &DroppedStretch| {}).unwrap();
    assert_eq!(r.dropped_stretches, 0);
}

/// A damaged empty record spans 24 bytes, less than a filler with a
/// length (32): repair covers it with the header-alone filler, and the
/// record right after it survives, intact, and the log is clean.
#[test]
fn repair_of_a_damaged_empty_record_keeps_the_next_record() {
    let d = dir("repair-empty");
    let j = Journal::open(&d, opts()).unwrap();
    let a = j.append(b"first").unwrap();
    let e = j.append(b"").unwrap();
    let n = j.append(b"next record").unwrap();
    let last = j.append(b"after").unwrap();
    j.wait_blocking(last, Level::Durable).unwrap();
    let geo = j.geometry();
    j.close().unwrap();
    assert_eq!(n.0 - e.0, 24, "an empty record spans 24 bytes");
    poke(&d, &geo, e.0 + 4, &[0xde, 0xad]); // its CRC
    let mut listed = Vec::new();
    let r = overlapped_journal::repair(&d, &opts(), false, &mut |s: &DroppedStretch| {
        listed.push((s.from, s.to))
    })
    .unwrap();
    assert_eq!(listed, [(e.0, n.0)]);
    assert_eq!(r.records, 3);
    let j = Journal::open(&d, opts().recovery(RecoveryMode::Strict)).unwrap();
    assert_eq!(
        records(&j),
        [
            (a.0, b"first".to_vec()),
            (n.0, b"next record".to_vec()),
            (last.0, b"after".to_vec())
        ]
    );
    drop(j);
    let r = overlapped_journal::repair(&d, &opts(), false, &mut |_: &DroppedStretch| {}).unwrap();
    assert_eq!(r.dropped_stretches, 0);
}

#[test]
fn repair_lists_every_dropped_stretch_not_only_the_first_thousand() {
    let d = dir("repair-many");
    let j = Journal::open(&d, opts().segment_size(1 << 20)).unwrap();
    let mut lsns = Vec::new();
    for i in 0..3000u32 {
        lsns.push(j.append(&i.to_le_bytes()).unwrap().0);
    }
    j.wait_blocking(Lsn(*lsns.last().unwrap()), Level::Durable)
        .unwrap();
    let geo = j.geometry();
    j.close().unwrap();
    // Every other record damaged: 1500 stretches that do not touch.
    let seg = FsOpen::new()
        .read(true)
        .write(true)
        .open(crate::common::seg_path(&d, 0))
        .unwrap();
    for &l in lsns.iter().step_by(2) {
        seg.write_all_at(&[0xff], geo.file_offset(l) + 25).unwrap();
    }
    seg.sync_all().unwrap();
    drop(seg);
    let mut n = 0u64;
    let mut last = 0;
    let r = overlapped_journal::repair(&d, &opts(), false, &mut |s: &DroppedStretch| {
        n += 1;
        last = s.from;
    })
    .unwrap();
    assert_eq!(n, 1500);
    assert_eq!(last, lsns[2998]);
    assert_eq!(r.dropped_stretches, 1500);
    assert_eq!(r.dropped.len(), overlapped_journal::MAX_LISTED);
    assert_eq!(r.records, 1500);
    let saved = std::fs::read(r.dropped_file.unwrap()).unwrap();
    assert_eq!(parse_dropped(&saved).len(), 1500);
}

#[test]
fn read_from_the_middle_of_a_record_is_a_caller_mistake() {
    let d = dir("mid-record");
    let j = Journal::open(&d, opts()).unwrap();
    let a = j.append(&[1u8; 200]).unwrap();
    let b = j.append(&[2u8; 200]).unwrap();
    j.wait_blocking(b, Level::Written).unwrap();
    for lsn in [a.0 + 8, a.0 + 64, a.0 + 3, b.0 - 8] {
        match j.read_from(Lsn(lsn)) {
            Err(Error::InvalidInput(m)) => {
                assert!(m.contains("not the start of a record"), "{m}")
            }
            other => panic!("read_from({lsn}): {:?}", other.map(|_| ())),
        }
    }
    assert_eq!(j.read_from(b).unwrap().count(), 1);
}

/// A storage whose segment writes wait while its gate is closed: the
/// flusher stops inside a write.
struct Gated {
    inner: FaultStorage,
    gate: Mutex<(bool, u32)>,
    cv: Condvar,
}

impl Gated {
    fn set(&self, open: bool) {
        self.gate.lock().unwrap().0 = open;
        self.cv.notify_all();
    }
    fn stalled(&self) -> u32 {
        self.gate.lock().unwrap().1
    }
}

impl Storage for Gated {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn describe(&self) -> String {
        "gated".into()
    }
    fn list_segments(&self) -> std::io::Result<Vec<u64>> {
        self.inner.list_segments()
    }
    fn create_segment(&self, seq: u64, size: u64, header: &[u8]) -> std::io::Result<()> {
        self.inner.create_segment(seq, size, header)
    }
    fn write(&self, seq: u64, off: u64, buf: AlignedBuf) -> (std::io::Result<()>, AlignedBuf) {
        let mut g = self.gate.lock().unwrap();
        g.1 += 1;
        while !g.0 {
            g = self.cv.wait(g).unwrap();
        }
        g.1 -= 1;
        drop(g);
        self.inner.write(seq, off, buf)
    }
    fn sync(&self, seq: u64) -> std::io::Result<()> {
        self.inner.sync(seq)
    }
    fn read(&self, seq: u64, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(seq, off, buf)
    }
    fn zero(&self, seq: u64, off: u64, len: u64) -> std::io::Result<()> {
        self.inner.zero(seq, off, len)
    }
    fn remove_segment(&self, seq: u64) -> std::io::Result<()> {
        self.inner.remove_segment(seq)
    }
    fn read_checkpoint(&self) -> std::io::Result<Option<Vec<u8>>> {
        self.inner.read_checkpoint()
    }
    fn write_checkpoint(&self, off: u64, data: &[u8], sync: bool) -> std::io::Result<()> {
        self.inner.write_checkpoint(off, data, sync)
    }
}

#[test]
fn waiting_for_accepted_needs_no_turn_of_the_flusher() {
    // It took a turn of the flusher (130 us at the median, and forever
    // while the flusher is busy in a write), although an appended record
    // is in the journal's memory when `append` returns.
    let g = Arc::new(Gated {
        inner: FaultStorage::new(512),
        gate: Mutex::new((true, 0)),
        cv: Condvar::new(),
    });
    let j = Arc::new(Journal::open_with_storage(g.clone(), opts()).unwrap());
    g.set(false);
    j.append(b"first").unwrap();
    let t = std::time::Instant::now();
    while g.stalled() == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "no write started");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The flusher is stuck in the first record's write.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let j = j.clone();
        std::thread::spawn(move || {
            let mut lsns = Vec::new();
            for i in 0..100u32 {
                let lsn = j.append(&i.to_le_bytes()).unwrap();
                j.wait_blocking(lsn, Level::Accepted).unwrap();
                lsns.push(lsn);
            }
            futures::executor::block_on(j.wait(lsns[99], Level::Accepted)).unwrap();
            tx.send(lsns.len()).unwrap();
        })
    };
    let got = rx.recv_timeout(Duration::from_secs(5));
    g.set(true);
    waiter.join().unwrap();
    assert_eq!(got, Ok(100), "wait(Accepted) waited for the flusher");
}

#[test]
fn the_lsn_after_a_record_resumes_reading() {
    let d = dir("next-lsn");
    let j = Journal::open(&d, opts()).unwrap();
    let lsns: Vec<Lsn> = (0..10).map(|i| j.append(&payload(i)).unwrap()).collect();
    j.wait_blocking(lsns[9], Level::Durable).unwrap();
    let all: Vec<_> = j.read_from(lsns[0]).unwrap().map(|r| r.unwrap()).collect();
    for k in 0..9 {
        assert_eq!(all[k].next_lsn(), lsns[k + 1]);
        // Resume after record k: the rest, from record k + 1.
        let rest: Vec<_> = j
            .read_from(all[k].next_lsn())
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(rest, all[k + 1..]);
    }
    // After the last record: nothing yet, and the next record later.
    let after = all[9].next_lsn();
    assert_eq!(j.read_from(after).unwrap().count(), 0);
    let next = j.append(b"later").unwrap();
    assert_eq!(next, after);
    j.wait_blocking(next, Level::Written).unwrap();
    let r: Vec<_> = j.read_from(after).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].data, b"later");
    assert_eq!(r[0].next_lsn().0, next.0 + record_span(5));
}

#[test]
fn a_batch_is_all_or_nothing_after_a_power_loss() {
    let opts = || {
        Options::default()
            .segment_size(16 << 10)
            .buffer_bytes(16 << 10)
            .max_record_bytes(2 << 10)
    };
    let mut rng = StdRng::seed_from_u64(0xba7c);
    let (mut partial_dropped, mut batches_lost) = (0u64, 0u64);
    for iter in 0..120 {
        let loss = [Loss::DropAll, Loss::Torn, Loss::Reorder][iter % 3];
        let storage = if iter % 2 == 0 {
            FaultStorage::new(512)
        } else {
            FaultStorage::with_dsync(512)
        };
        let j = Journal::open_with_storage(Arc::new(storage.clone()), opts()).unwrap();
        // Batches of 2 to 5 records, each batch tagged; some acknowledged.
        let mut batches: Vec<Vec<(Lsn, Vec<u8>)>> = Vec::new();
        let mut acked = 0;
        for b in 0..rng.random_range(1..25) {
            let n = rng.random_range(2..6);
            let recs: Vec<Vec<u8>> = (0..n)
                .map(|k| {
                    let mut v = format!("{iter}-{b}-{k}-").into_bytes();
                    v.extend((0..rng.random_range(0..350)).map(|_| rng.random::<u8>()));
                    v
                })
                .collect();
            let lsns = j.append_batch(&recs).unwrap();
            assert!(lsns.windows(2).all(|w| w[0] < w[1]));
            if rng.random_range(0..6) == 0 {
                j.wait_blocking(*lsns.last().unwrap(), Level::Durable)
                    .unwrap();
                acked = batches.len() + 1;
            }
            batches.push(lsns.into_iter().zip(recs).collect());
        }
        if rng.random_bool(0.5) {
            let last = batches.last().unwrap().last().unwrap().0;
            j.wait_blocking(last, Level::Written).unwrap();
        }
        let crashed = storage.crash(loss, &mut rng);
        drop(j);
        let j = match Journal::open_with_storage(Arc::new(crashed.clone()), opts()) {
            Ok(j) => j,
            Err(Error::Corrupt {
                damage: Damage::RecordsFollow { .. },
                ..
            }) => Journal::open_with_storage(
                Arc::new(crashed),
                opts().recovery(RecoveryMode::Salvage),
            )
            .unwrap(),
            Err(e) => panic!("iteration {iter}: {e}"),
        };
        partial_dropped += j.recovery_report().dropped_records;
        let got: Vec<(Lsn, Vec<u8>)> = j
            .read_from(j.start_lsn())
            .unwrap()
            .map(|r| {
                let r = r.unwrap();
                (r.lsn, r.data)
            })
            .collect();
        for (b, batch) in batches.iter().enumerate() {
            let present = batch.iter().filter(|r| got.contains(r)).count();
            assert!(
                present == 0 || present == batch.len(),
                "iteration {iter} ({loss:?}): {present} of batch {b}'s {} records",
                batch.len()
            );
            if b < acked {
                assert_eq!(
                    present,
                    batch.len(),
                    "iteration {iter}: lost acknowledged batch {b}"
                );
            }
            batches_lost += (present == 0) as u64;
        }
        // Every record is of a batch.
        let all: usize = batches.iter().map(|b| b.len()).sum();
        assert!(got.len() <= all);
    }
    // The crashes did leave batches in part on disk, and recovery dropped
    // what was there of them.
    assert!(
        partial_dropped > 0 && batches_lost > 0,
        "dropped {partial_dropped}, lost {batches_lost}"
    );
}

#[test]
fn a_batch_is_bounded_and_not_empty() {
    let d = dir("batch-limits");
    let j = Journal::open(&d, opts()).unwrap();
    let empty: [&[u8]; 0] = [];
    assert!(matches!(
        j.append_batch(&empty),
        Err(Error::InvalidInput(_))
    ));
    let big = vec![vec![0u8; 3000], vec![0u8; 3000]];
    assert!(matches!(j.append_batch(&big), Err(Error::TooLarge { .. })));
    let one = j.append_batch(&[b"alone"]).unwrap();
    let two = j.append_batch(&[b"a".as_slice(), b"b".as_slice()]).unwrap();
    assert_eq!(two[0].0, one[0].0 + record_span(5));
    // Accepted as a whole at once (before the flusher takes it).
    j.wait_blocking(two[1], Level::Accepted).unwrap();
    j.wait_blocking(two[1], Level::Durable).unwrap();
    j.close().unwrap();
    let j = Journal::open(&d, opts().recovery(RecoveryMode::Strict)).unwrap();
    let got: Vec<_> = records(&j).into_iter().map(|(_, d)| d).collect();
    assert_eq!(got, [b"alone".to_vec(), b"a".to_vec(), b"b".to_vec()]);
}

/// Starts a thread that reads `tail` to its end.
fn read_tail(tail: overlapped_journal::Tail) -> std::thread::JoinHandle<Vec<(Lsn, Vec<u8>)>> {
    std::thread::spawn(move || {
        tail.map(|r| {
            let r = r.unwrap();
            (r.lsn, r.data)
        })
        .collect()
    })
}

#[test]
fn a_tail_follows_appends_and_ends_when_the_journal_closes() {
    for level in [Level::Written, Level::Durable] {
        let d = dir(&format!("tail-{level}"));
        let j = Journal::open(&d, opts()).unwrap();
        let first: Vec<Lsn> = (0..3).map(|i| j.append(&payload(i)).unwrap()).collect();
        j.wait_blocking(first[2], Level::Durable).unwrap();
        let reader = read_tail(j.tail(first[0], level).unwrap());
        // It read what was there and waits for more.
        std::thread::sleep(Duration::from_millis(50));
        assert!(!reader.is_finished());
        // Records appended after it started reach it as they reach the
        // level; it goes on waiting while the journal is open.
        let more: Vec<Lsn> = (3..6).map(|i| j.append(&payload(i)).unwrap()).collect();
        j.wait_blocking(more[2], Level::Durable).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !reader.is_finished(),
            "{level}: ended while the journal is open"
        );
        // Closing makes the rest durable and ends it.
        j.append(&payload(6)).unwrap();
        j.close().unwrap();
        let got = reader.join().unwrap();
        assert_eq!(got.len(), 7, "{level}");
        for (i, (_, data)) in got.iter().enumerate() {
            assert_eq!(data, &payload(i), "{level}: record {i}");
        }
        assert_eq!(got[3].0, more[0]);
    }
}

#[test]
fn an_async_tail_wakes_for_new_records_and_at_close() {
    let d = dir("tail-async");
    let j = Journal::open(&d, opts()).unwrap();
    let a = j.append(b"one").unwrap();
    j.wait_blocking(a, Level::Written).unwrap();
    let mut tail = j.tail(a, Level::Written).unwrap();
    let reader = std::thread::spawn(move || {
        futures::executor::block_on(async {
            let mut got = Vec::new();
            while let Some(r) = tail.next_async().await {
                got.push(r.unwrap().data);
            }
            got
        })
    });
    std::thread::sleep(Duration::from_millis(30));
    let b = j.append(b"two").unwrap();
    j.wait_blocking(b, Level::Written).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert!(!reader.is_finished());
    j.append(b"three").unwrap();
    j.close().unwrap();
    let got = reader.join().unwrap();
    assert_eq!(got, [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
}

#[test]
fn a_tail_starts_at_a_record_or_the_end() {
    let d = dir("tail-args");
    let j = Journal::open(&d, opts()).unwrap();
    let a = j.append(&[5u8; 100]).unwrap();
    j.wait_blocking(a, Level::Written).unwrap();
    assert!(matches!(
        j.tail(Lsn(a.0 + 16), Level::Written),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        j.tail(a, Level::Accepted),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        j.tail(Lsn(1 << 40), Level::Written),
        Err(Error::InvalidInput(_))
    ));
    // From the end: only what comes later.
    let end = j.watermark(Level::Written);
    let mut t = j.tail(end, Level::Written).unwrap();
    let b = j.append(b"b").unwrap();
    assert_eq!(t.next().unwrap().unwrap().lsn, b);
}
