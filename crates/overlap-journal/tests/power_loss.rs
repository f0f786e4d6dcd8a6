//! Simulated power loss and injected I/O errors, through the
//! fault-injecting storage.

use std::sync::Arc;

use overlapped_journal::fault::{Fault, FaultStorage, Loss};
use overlapped_journal::format;
use overlapped_journal::{Damage, Error, Journal, Level, Lsn, Options, RecoveryMode, Storage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn opts() -> Options {
    Options::default()
        .segment_size(16 << 10)
        .buffer_bytes(16 << 10)
        .max_record_bytes(2 << 10)
}

fn read_all(j: &Journal) -> Vec<(Lsn, Vec<u8>)> {
    j.read_from(j.start_lsn())
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.lsn, r.data)
        })
        .collect()
}

/// Appends random records, waiting for `Durable` at random points; returns
/// everything appended and how many records are acknowledged durable.
fn workload(j: &Journal, rng: &mut StdRng, n: usize, tag: u64) -> (Vec<(Lsn, Vec<u8>)>, usize) {
    let mut appended = Vec::new();
    let mut acked = 0;
    for i in 0..n {
        let len = rng.random_range(0..1500);
        let mut data = format!("{tag}-{i}-").into_bytes();
        data.extend((0..len).map(|_| rng.random::<u8>()));
        let lsn = j.append(&data).unwrap();
        appended.push((lsn, data));
        match rng.random_range(0..10) {
            0 => {
                j.wait_blocking(lsn, Level::Durable).unwrap();
                acked = appended.len();
            }
            1 => j.wait_blocking(lsn, Level::Written).unwrap(),
            _ => {}
        }
    }
    if rng.random_bool(0.5) {
        // Leave written but unsynced data for the crash to play with.
        j.wait_blocking(appended.last().unwrap().0, Level::Written)
            .unwrap();
    }
    (appended, acked)
}

/// What a salvage keeps: records appended, in order, every acknowledged
/// one among them (the valid records after a hole are kept too).
fn check_salvaged(got: &[(Lsn, Vec<u8>)], appended: &[(Lsn, Vec<u8>)], acked: usize, what: &str) {
    let mut it = appended.iter();
    for g in got {
        assert!(
            it.any(|a| a == g),
            "{what}: invented or reordered {:?}",
            g.0
        );
    }
    for a in &appended[..acked] {
        assert!(
            got.contains(a),
            "{what}: lost acknowledged record {:?}",
            a.0
        );
    }
}

fn check_prefix(got: &[(Lsn, Vec<u8>)], appended: &[(Lsn, Vec<u8>)], acked: usize, what: &str) {
    assert!(
        got.len() >= acked,
        "{what}: lost acknowledged records: recovered {} of {acked} acknowledged",
        got.len()
    );
    assert!(got.len() <= appended.len(), "{what}: invented records");
    assert_eq!(got, &appended[..got.len()], "{what}: not a prefix");
}

/// Opens the crashed storage. Where a power loss persisted a torn write's
/// sectors out of order, valid records follow a hole and the default mode
/// refuses (it cannot tell this from corruption); salvage then drops the
/// damage, keeps the valid records after it, and must not have dropped
/// anything acknowledged (checked by the caller).
fn reopen(s: &FaultStorage, what: &str) -> (Journal, bool) {
    match Journal::open_with_storage(Arc::new(s.clone()), opts()) {
        Ok(j) => (j, false),
        Err(Error::Corrupt {
            damage: Damage::RecordsFollow { .. },
            ..
        }) => {
            let j = Journal::open_with_storage(
                Arc::new(s.clone()),
                opts().recovery(RecoveryMode::Salvage),
            )
            .unwrap_or_else(|e| panic!("{what}: salvage failed: {e}"));
            let r = j.recovery_report();
            assert!(
                !r.cut_acknowledged && r.dropped_stretches > 0 && r.salvaged_records > 0,
                "{what}: {r:?}"
            );
            (j, true)
        }
        Err(e) => panic!("{what}: recovery failed: {e}"),
    }
}

#[test]
fn power_loss_keeps_a_prefix_with_everything_durable() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let (mut torn, mut lost_unacked, mut refused) = (0, 0, 0);
    for iter in 0..150 {
        let loss = [Loss::DropAll, Loss::Torn, Loss::Reorder][iter % 3];
        // Every other round, writes are durable on completion (O_DSYNC).
        let storage = if iter % 2 == 0 {
            FaultStorage::new(512)
        } else {
            FaultStorage::with_dsync(512)
        };
        let j = Journal::open_with_storage(Arc::new(storage.clone()), opts()).unwrap();
        let n = rng.random_range(1..60);
        let (mut appended, acked) = workload(&j, &mut rng, n, 1);
        let crashed = storage.crash(loss, &mut rng);
        drop(j);
        let (j, stopped) = reopen(&crashed, &format!("iteration {iter} ({loss:?})"));
        assert!(!(stopped && loss == Loss::DropAll), "iteration {iter}");
        refused += stopped as u32;
        let got = read_all(&j);
        let what = format!("iteration {iter} {loss:?}");
        if stopped {
            check_salvaged(&got, &appended, acked, &what);
        } else {
            check_prefix(&got, &appended, acked, &what);
        }
        torn += j.recovery_report().truncated_at.is_some() as u32;
        lost_unacked += (got.len() < appended.len()) as u32;
        // No LSN is handed out twice: the next record goes after every
        // record appended, or after every byte the crash left.
        let resumed = j.recovery_report().end_lsn;
        let kept_end = got
            .last()
            .map_or(0, |(l, d)| l.0 + format::record_span(d.len()));
        assert!(
            resumed >= kept_end,
            "{what}: resumes at {resumed} before {kept_end}"
        );
        // A second life on the recovered log, then another crash: stale
        // bytes of the first life must never come back.
        appended = got.clone();
        let base = appended.len();
        let n2 = rng.random_range(1..30);
        let (more, acked2) = workload(&j, &mut rng, n2, 2);
        appended.extend(more);
        let acked = if acked2 > 0 { base + acked2 } else { base };
        let crashed2 = crashed.crash(loss, &mut rng);
        drop(j);
        let (j, stopped) = reopen(
            &crashed2,
            &format!("iteration {iter} ({loss:?}), second crash"),
        );
        refused += stopped as u32;
        let got = read_all(&j);
        let what = format!("iteration {iter} {loss:?} second life");
        if stopped {
            check_salvaged(&got, &appended, acked, &what);
        } else {
            check_prefix(&got, &appended, acked, &what);
        }
    }
    // The crashes really did damage: torn tails were cut, unacknowledged
    // records were lost.
    assert!(
        torn > 5 && lost_unacked > 20,
        "torn {torn}, lost {lost_unacked}"
    );
    eprintln!(
        "power loss: {torn} torn tails cut, {refused} out-of-order tears refused then salvaged"
    );
}

/// The OS error numbers the faults carry: `EIO` and `ENOSPC`, on Windows
/// `ERROR_IO_DEVICE` and `ERROR_DISK_FULL`.
#[cfg(not(windows))]
const EIO: i32 = libc::EIO;
#[cfg(not(windows))]
const ENOSPC: i32 = libc::ENOSPC;
#[cfg(windows)]
const EIO: i32 = 1117;
#[cfg(windows)]
const ENOSPC: i32 = 112;

fn poisoned_with(e: &Error, errno: Option<i32>) -> bool {
    matches!(e, Error::Poisoned(_)) && (errno.is_none() || e.raw_os_error() == errno)
}

fn error_case(fault: Fault, on_sync: bool, errno: Option<i32>) {
    assert_eq!(fault.os_error(), errno, "the fault's own OS error number");
    let storage = FaultStorage::new(512);
    let j = Journal::open_with_storage(Arc::new(storage.clone()), opts()).unwrap();
    let mut appended = Vec::new();
    for i in 0..20u32 {
        let d = i.to_le_bytes().repeat(50);
        appended.push((j.append(&d).unwrap(), d));
    }
    j.wait_blocking(appended.last().unwrap().0, Level::Durable)
        .unwrap();
    let acked = appended.len();
    let durable_before = j.watermark(Level::Durable);
    if on_sync {
        storage.fail_sync(0, fault);
    } else {
        storage.fail_write(0, fault);
    }
    let lsn = j.append(b"doomed").unwrap();
    appended.push((lsn, b"doomed".to_vec()));
    let err = j.wait_blocking(lsn, Level::Durable).unwrap_err();
    assert!(
        poisoned_with(&err, errno),
        "{fault:?} on {}: {err}",
        if on_sync { "sync" } else { "write" }
    );
    assert!(storage.fault_fired());
    // Fail-stop: nothing acknowledged after the failure, every caller gets
    // the error, and the failed sync is not retried.
    let (_, syncs) = storage.counts();
    assert_eq!(j.watermark(Level::Durable), durable_before);
    assert!(poisoned_with(&j.append(b"later").unwrap_err(), errno));
    assert!(poisoned_with(
        &j.wait_blocking(lsn, Level::Written).unwrap_err(),
        errno
    ));
    assert!(matches!(j.try_append(b"x"), Err(Error::Poisoned(_))));
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(storage.counts().1, syncs, "a failed sync was retried");
    assert!(j.close().is_err());
    // What reached the disk is recovered: everything acknowledged, a prefix.
    let mut rng = StdRng::seed_from_u64(7);
    let j = Journal::open_with_storage(Arc::new(storage.crash(Loss::DropAll, &mut rng)), opts())
        .unwrap();
    let got = read_all(&j);
    check_prefix(&got, &appended, acked, &format!("{fault:?}"));
}

#[test]
fn eio_on_write_is_fail_stop() {
    error_case(Fault::Eio, false, Some(EIO));
}

#[test]
fn enospc_on_write_is_fail_stop() {
    error_case(Fault::Enospc, false, Some(ENOSPC));
}

#[test]
fn short_write_is_fail_stop() {
    error_case(Fault::ShortWrite, false, None);
}

#[test]
fn eio_on_sync_is_fail_stop() {
    error_case(Fault::Eio, true, Some(EIO));
}

#[test]
fn pending_waiters_all_get_the_error() {
    let storage = FaultStorage::new(512);
    let j = Arc::new(Journal::open_with_storage(Arc::new(storage.clone()), opts()).unwrap());
    storage.fail_sync(0, Fault::Eio);
    let waiters: Vec<_> = (0..8)
        .map(|i| {
            let j = j.clone();
            std::thread::spawn(move || {
                let lsn = j.append(format!("w{i}").as_bytes())?;
                j.wait_blocking(lsn, Level::Durable)
            })
        })
        .collect();
    for w in waiters {
        let r = w.join().unwrap();
        assert!(matches!(r, Err(Error::Poisoned(_))), "{r:?}");
    }
    assert_eq!(j.watermark(Level::Durable), Lsn(0));
    assert!(storage.list_segments().unwrap().contains(&0));
}

#[test]
fn durable_point_is_recorded_in_the_checkpoint() {
    for storage in [FaultStorage::new(512), FaultStorage::with_dsync(512)] {
        let j = Journal::open_with_storage(Arc::new(storage.clone()), opts()).unwrap();
        let mut last = Lsn(0);
        for i in 0..50u32 {
            last = j.append(&i.to_le_bytes()).unwrap();
        }
        j.wait_blocking(last, Level::Durable).unwrap();
        // The flusher records the durable point at the latest when it goes
        // idle; recovery then treats damage before it as corruption.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let (rep, _) =
                overlapped_journal::inspect_storage(Arc::new(storage.clone()), &opts()).unwrap();
            if rep.checkpoint_durable_lsn > last.0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "durable point {} never recorded (want > {})",
                rep.checkpoint_durable_lsn,
                last.0
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Damage an acknowledged record: even Tolerate refuses.
        storage.with_segment(0, |b| b[4096 + 40] ^= 1).unwrap();
        drop(j);
        let mut rng = StdRng::seed_from_u64(3);
        let crashed = storage.crash(Loss::DropAll, &mut rng);
        assert!(matches!(
            Journal::open_with_storage(Arc::new(crashed), opts()),
            Err(Error::Corrupt { .. })
        ));
    }
}
