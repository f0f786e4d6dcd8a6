//! The kill -9 loop: a child process (this test binary, re-executed)
//! appends and waits for `Durable` at random points, printing each
//! acknowledged record; the parent kills it at random moments and checks
//! that recovery returns every acknowledged record, byte for byte and in
//! order, and nothing that was never appended.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use overlapped_journal::{Journal, Level, Options, SyncMethod};
use rand::{Rng, SeedableRng};

const DIR_ENV: &str = "OVERLAP_JOURNAL_KILL_DIR";

const SYNC_ENV: &str = "OVERLAP_JOURNAL_KILL_FDATASYNC";

/// Set in some rounds: the child also retires what is durable every few
/// hundred records, so segment files are recycled (and killed mid-way).
const RETIRE_ENV: &str = "OVERLAP_JOURNAL_KILL_RETIRE";

fn opts() -> Options {
    // Alternate rounds use fdatasync per group commit instead of the
    // default (O_DSYNC where direct I/O works).
    let sync = if std::env::var_os(SYNC_ENV).is_some() {
        SyncMethod::Fdatasync
    } else {
        SyncMethod::Auto
    };
    Options::default()
        .sync(sync)
        .segment_size(128 << 10)
        .buffer_bytes(64 << 10)
        .max_record_bytes(8 << 10)
}

/// The payload of the `i`-th record ever appended: recognisable, of
/// varying length.
fn payload(i: u64) -> Vec<u8> {
    let len = (i.wrapping_mul(2654435761) % 2000) as usize;
    let mut v = format!("rec-{i}:").into_bytes();
    v.extend((0..len).map(|k| (i as usize).wrapping_mul(131).wrapping_add(k) as u8));
    v
}

/// The index `i` of a record made by [`payload`].
fn index_of(data: &[u8]) -> u64 {
    let s = &data[4..data.iter().position(|&b| b == b':').unwrap()];
    std::str::from_utf8(s).unwrap().parse().unwrap()
}

/// The child: appends forever until killed.
#[test]
#[ignore = "run by kill9_loop as its child process"]
fn kill_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        eprintln!("SKIPPED: kill_child only runs as the child of kill9_loop");
        return;
    };
    let j = Journal::open(&dir, opts()).expect("child open");
    let mut next = j
        .read_from(j.start_lsn())
        .unwrap()
        .last()
        .map_or(0, |r| index_of(&r.unwrap().data) + 1);
    let retire = std::env::var_os(RETIRE_ENV).is_some();
    let mut last_acked = None;
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let out = std::io::stdout();
    loop {
        let lsn = j.append(&payload(next)).unwrap();
        if rng.random_range(0..8) == 0 {
            j.wait_blocking(lsn, Level::Durable).unwrap();
            let mut o = out.lock();
            writeln!(o, "ACK {next} {}", lsn.0).unwrap();
            o.flush().unwrap();
            last_acked = Some(lsn);
        }
        // Retire up to the last acknowledged record (keeping it, so the
        // next life knows where the numbering stands).
        if let Some(lsn) = last_acked.filter(|_| retire && next % 300 == 0) {
            j.truncate_before(lsn).unwrap();
        }
        next += 1;
    }
}

#[test]
fn kill9_loop() {
    let dir = crate::common::fresh_dir("kill9");
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let mut max_acked: Option<(u64, u64)> = None;
    let mut total_acks = 0;
    let mut lives_with_progress = 0;
    let mut saw_free = false;
    for round in 0..50 {
        let acks = kill_a_child(&exe, &dir, round, &mut rng);
        total_acks += acks.len();
        if let Some(&last) = acks.last() {
            if max_acked.is_none_or(|m| last.0 > m.0) {
                lives_with_progress += 1;
            }
            max_acked = Some(last);
        }
        // Recovery.
        let j = Journal::open(&dir, opts())
            .unwrap_or_else(|e| panic!("round {round}: recovery failed: {e}"));
        let got: Vec<_> = j
            .read_from(j.start_lsn())
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        // Records before the start were retired: indices count from the
        // first one kept.
        let start = j.start_lsn().0;
        let base = got.first().map_or(0, |r| index_of(&r.data));
        for (k, r) in got.iter().enumerate() {
            let i = base + k as u64;
            assert_eq!(
                r.data,
                payload(i),
                "round {round}: record {i} is not what was appended"
            );
        }
        for &(i, lsn) in acks.iter().filter(|&&(_, lsn)| lsn >= start) {
            let r = got.get(i.wrapping_sub(base) as usize).unwrap_or_else(|| {
                panic!(
                    "round {round}: acknowledged record {i} lost ({} recovered)",
                    got.len()
                )
            });
            assert_eq!(r.lsn.0, lsn, "round {round}: record {i} moved");
        }
        if let Some((i, _)) = max_acked.filter(|&(_, lsn)| lsn >= start) {
            assert!(
                base + got.len() as u64 > i,
                "round {round}: lost record {i}"
            );
        }
        drop(j);
        saw_free |= std::fs::read_dir(&dir)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".free"));
    }
    assert!(saw_free, "no segment file was ever kept for reuse");
    assert!(
        total_acks > 50 && lives_with_progress >= 45,
        "the children made too little progress to test anything: {total_acks} acks, {lives_with_progress} lives with progress"
    );
}

/// One life of the child: starts it, lets it acknowledge something, kills
/// it (SIGKILL) at a random moment; returns what it acknowledged.
fn kill_a_child(
    exe: &Path,
    dir: &Path,
    round: u32,
    rng: &mut rand::rngs::StdRng,
) -> Vec<(u64, u64)> {
    let mut cmd = Command::new(exe);
    if round % 2 == 1 {
        cmd.env(SYNC_ENV, "1");
    }
    if round % 4 >= 2 {
        cmd.env(RETIRE_ENV, "1");
    }
    let mut child = cmd
        .args(["--ignored", "--exact", "kill9::kill_child", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let acks = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().unwrap();
    let sink = acks.clone();
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("ACK ") {
                let mut it = rest.split(' ').map(|s| s.parse::<u64>().unwrap());
                let (i, lsn) = (it.next().unwrap(), it.next().unwrap());
                sink.lock().unwrap().push((i, lsn));
                let _ = first_tx.send(());
            }
        }
    });
    // Let the child acknowledge something, then kill it at a random
    // moment of its run.
    let started = first_rx.recv_timeout(Duration::from_secs(10)).is_ok();
    std::thread::sleep(Duration::from_millis(rng.random_range(0..100)));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    let acks = acks.lock().unwrap().clone();
    assert!(
        started,
        "round {round}: the child acknowledged nothing in 10 s"
    );
    acks
}
