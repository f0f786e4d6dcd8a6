//! The torture suite's cells for the journal (`docs/acknowledged-bytes.md`
//! section 6), on each driver: one line per cell, `torture: journal
//! DRIVER SCENARIO ok` (or `FAIL: why`, `SKIPPED: why`). In journal
//! terms, a record is acknowledged when its `wait_blocking(lsn, Durable)`
//! returned `Ok`; every check reopens the journal (a new engine) and reads
//! what it holds.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use overlapped::{DriverChoice, Engine};
use overlapped_journal::{Error, Journal, Level, Options};

fn opts(engine: &Engine) -> Options {
    Options::default()
        .segment_size(1 << 20)
        .buffer_bytes(256 << 10)
        .max_record_bytes(8 << 10)
        .engine(engine.clone())
}

fn payload(tag: u64, i: u64) -> Vec<u8> {
    let mut v = format!("{tag}:{i}:").into_bytes();
    v.resize(40 + (i % 300) as usize, (i % 251) as u8);
    v
}

/// Every record of the journal in `dir` (opened anew on its own engine):
/// LSN to payload; fails on a duplicate LSN.
fn records(dir: &Path) -> BTreeMap<u64, Vec<u8>> {
    let engine = Engine::new().expect("an engine");
    let j = Journal::open(dir, opts(&engine)).expect("the journal reopens");
    let mut out = BTreeMap::new();
    for r in j.read_from(j.start_lsn()).expect("reads") {
        let r = r.expect("a valid record");
        assert!(out.insert(r.lsn.0, r.data).is_none(), "LSN read twice");
    }
    j.close().expect("closes");
    out
}

/// Checks every acknowledged record is there, with its payload.
fn check_acked(dir: &Path, acked: &[(u64, Vec<u8>)]) {
    let got = records(dir);
    for (lsn, data) in acked {
        assert_eq!(got.get(lsn), Some(data), "acknowledged LSN {lsn}");
    }
}

fn dir(driver: &str, scenario: &str) -> PathBuf {
    crate::common::fresh_dir(&format!("torture-{driver}-{scenario}"))
}

/// Dropped with appends accepted and a write in flight, after some were
/// acknowledged: every acknowledged record is there once.
fn drop_behind(engine: &Engine, d: &Path) -> Result<(), String> {
    let j = Journal::open(d, opts(engine)).map_err(|e| e.to_string())?;
    let mut acked = Vec::new();
    for i in 0..2000u64 {
        let p = payload(0, i);
        let lsn = j.append(&p).map_err(|e| e.to_string())?;
        if i % 97 == 0 {
            j.wait_blocking(lsn, Level::Durable)
                .map_err(|e| e.to_string())?;
        }
        acked.push((lsn.0, p));
    }
    drop(j); // the last 2000 % 97 appends were never waited for
    let got = records(d);
    // Dropping writes and syncs everything appended.
    check_acked(d, &acked);
    if got.len() != acked.len() {
        return Err(format!("{} records, {} appended", got.len(), acked.len()));
    }
    Ok(())
}

/// Four threads append through one journal, each waiting for some:
/// every acknowledged record is there exactly once, and nothing else.
fn shared_writers(engine: &Engine, d: &Path) -> Result<(), String> {
    let j = Journal::open(d, opts(engine)).map_err(|e| e.to_string())?;
    let all = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (j, all) = (&j, &all);
            s.spawn(move || {
                let mut mine = Vec::new();
                for i in 0..500u64 {
                    let p = payload(t + 1, i);
                    let lsn = j.append(&p).expect("append");
                    if i % 10 == 9 {
                        j.wait_blocking(lsn, Level::Durable).expect("durable");
                    }
                    mine.push((lsn.0, p));
                }
                all.lock().unwrap().extend(mine);
            });
        }
    });
    j.close().map_err(|e| e.to_string())?;
    let all = all.into_inner().unwrap();
    let got = records(d);
    if got.len() != all.len() {
        return Err(format!(
            "{} records read, {} appended",
            got.len(),
            all.len()
        ));
    }
    for (lsn, p) in &all {
        if got.get(lsn) != Some(p) {
            return Err(format!("LSN {lsn}: not the record appended there"));
        }
    }
    Ok(())
}

/// A tail and a reader iterate while the journal closes: each record they
/// return is the one appended at its LSN; they end (or fail) without
/// hanging. (Records come back in buffers of their own, never the
/// caller's: nothing can change one after it is returned.)
fn close_racing_reads(engine: &Engine, d: &Path) -> Result<(), String> {
    let j = Journal::open(d, opts(engine)).map_err(|e| e.to_string())?;
    let expect = Mutex::new(BTreeMap::new());
    let first = j.append(&payload(9, 0)).map_err(|e| e.to_string())?;
    expect.lock().unwrap().insert(first.0, payload(9, 0));
    j.wait_blocking(first, Level::Written)
        .map_err(|e| e.to_string())?;
    let mut tail = j.tail(first, Level::Written).map_err(|e| e.to_string())?;
    let seen = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut seen = Vec::new();
            for r in tail.by_ref() {
                match r {
                    Ok(r) => seen.push((r.lsn.0, r.data)),
                    Err(Error::Closed) => break,
                    Err(e) => panic!("tail: {e}"),
                }
            }
            seen
        });
        for i in 1..3000u64 {
            let p = payload(9, i);
            let lsn = j.append(&p).expect("append");
            expect.lock().unwrap().insert(lsn.0, p);
            if i % 200 == 0 {
                // A reader from the start, beside the tail.
                let n = j.read_from(first).expect("read_from").take(50).count();
                assert!(n > 0);
            }
        }
        j.close().expect("close");
        reader.join().expect("the tail")
    });
    let expect = expect.into_inner().unwrap();
    for (lsn, data) in &seen {
        if expect.get(lsn) != Some(data) {
            return Err(format!("the tail returned a wrong record at LSN {lsn}"));
        }
    }
    if seen.len() != expect.len() {
        return Err(format!(
            "the tail ended after {} of {} records",
            seen.len(),
            expect.len()
        ));
    }
    Ok(())
}

/// The engine shuts down under the journal with appends in flight: the
/// acknowledged records are there after reopening, and later appends (or
/// their waits) fail at once with an error, never hang.
fn shutdown_in_flight(engine: &Engine, d: &Path) -> Result<(), String> {
    let j = Journal::open(d, opts(engine)).map_err(|e| e.to_string())?;
    let mut acked = Vec::new();
    for i in 0..300u64 {
        let p = payload(3, i);
        let lsn = j.append(&p).map_err(|e| e.to_string())?;
        if i % 50 == 0 {
            j.wait_blocking(lsn, Level::Durable)
                .map_err(|e| e.to_string())?;
            acked.push((lsn.0, p));
        }
    }
    engine.shutdown(); // appends in flight
    let t = Instant::now();
    let mut err = None;
    for i in 0..1000u64 {
        let r = j
            .append(&payload(3, 1000 + i))
            .and_then(|lsn| j.wait_blocking(lsn, Level::Durable));
        if let Err(e) = r {
            err = Some(e);
            break;
        }
    }
    let took = t.elapsed();
    let Some(e) = err else {
        return Err("appends still acknowledged after the engine shut down".into());
    };
    if took > Duration::from_secs(5) {
        return Err(format!("the error took {took:?}"));
    }
    if !e.to_string().contains("shut down") {
        return Err(format!("not the shutdown error: {e}"));
    }
    // At once from now on.
    let t = Instant::now();
    if j.append(b"later").is_ok() || t.elapsed() > Duration::from_secs(1) {
        return Err("a later append did not fail at once".into());
    }
    drop(j);
    check_acked(d, &acked);
    Ok(())
}

/// The process forks with appends in flight: the child's appends, waits
/// and close fail at once with `Error::Forked` (and it exits without
/// hanging); the parent's appends complete and are there after reopening.
#[cfg(target_os = "linux")]
fn fork_in_flight(engine: &Engine, d: &Path) -> Result<(), String> {
    let j = Journal::open(d, opts(engine)).map_err(|e| e.to_string())?;
    let mut appended = Vec::new();
    for i in 0..1000u64 {
        let p = payload(4, i);
        appended.push((j.append(&p).map_err(|e| e.to_string())?, p));
    }
    // SAFETY: the child only calls the journal (which fails at once,
    // without allocating or taking a lock another thread may hold) and
    // `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let a = matches!(j.append(b"child"), Err(Error::Forked));
        let w = matches!(
            j.wait_blocking(appended[999].0, Level::Durable),
            Err(Error::Forked)
        );
        let c = matches!(j.close(), Err(Error::Forked));
        let code = i32::from(!a) | i32::from(!w) << 1 | i32::from(!c) << 2;
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(code) };
    }
    let status = wait_child(pid, Duration::from_secs(10))?;
    let last = appended
        .last()
        .map(|a| a.0)
        .unwrap_or(overlapped_journal::Lsn(0));
    j.wait_blocking(last, Level::Durable)
        .map_err(|e| e.to_string())?;
    j.close().map_err(|e| e.to_string())?;
    if status != 0 {
        return Err(format!(
            "the child's calls did not all fail with Error::Forked (append, wait, close bits: {status:#b})"
        ));
    }
    let acked: Vec<(u64, Vec<u8>)> = appended.into_iter().map(|(l, p)| (l.0, p)).collect();
    check_acked(d, &acked);
    Ok(())
}

/// Waits for child `pid` for at most `limit` (killing it after): its exit
/// code.
#[cfg(target_os = "linux")]
fn wait_child(pid: libc::pid_t, limit: Duration) -> Result<i32, String> {
    let t = Instant::now();
    loop {
        let mut st = 0;
        // SAFETY: waits for our own child; `st` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        if r == pid {
            return if libc::WIFEXITED(st) {
                Ok(libc::WEXITSTATUS(st))
            } else {
                Err(format!("the child ended with status {st:#x}"))
            };
        }
        if t.elapsed() > limit {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut st, 0);
            }
            return Err(format!("the child hung for {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// ENOSPC part-way, on a small ext4: the error reaches the appender, and
/// every record acknowledged before it is there.
#[cfg(target_os = "linux")]
fn injected_failure(engine: &Engine, driver: &str) -> Result<(), String> {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("journal-torture-{driver}"));
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    let mount = match crate::enospc::sized_fs(&base, 8) {
        Ok(m) => m,
        Err(why) => return Err(format!("SKIPPED: cannot make a small file system: {why}")),
    };
    let d = mount.0.join("journal");
    let o = opts(engine).buffer_bytes(256 << 10);
    let j = Journal::open(&d, o.clone()).map_err(|e| e.to_string())?;
    let (mut acked, mut pending) = (Vec::new(), Vec::new());
    let err = loop {
        let p = vec![acked.len() as u8; 4000];
        let lsn = match j.append(&p) {
            Ok(l) => l,
            Err(e) => break e,
        };
        pending.push((lsn.0, p));
        if pending.len() % 16 == 0 {
            if let Err(e) = j.wait_blocking(lsn, Level::Durable) {
                break e;
            }
            acked.append(&mut pending);
        }
        if acked.len() > 10_000 {
            return Err("an 8 MiB file system never filled up".into());
        }
    };
    if err.raw_os_error() != Some(libc::ENOSPC) {
        return Err(format!("not ENOSPC: {err}"));
    }
    drop(j);
    let (_, recs) = overlapped_journal::inspect(&d, &o).map_err(|e| e.to_string())?;
    let got: BTreeMap<u64, Vec<u8>> = recs
        .map(|r| r.map(|r| (r.lsn.0, r.data)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    for (lsn, p) in &acked {
        if got.get(lsn) != Some(p) {
            return Err(format!("acknowledged LSN {lsn} lost"));
        }
    }
    drop(mount);
    Ok(())
}

/// Runs the six scenarios on `choice`, printing one cell each; fails the
/// test if any failed.
fn run(choice: DriverChoice, name: &str) {
    let engine = match overlapped::Engine::builder().driver(choice).build() {
        Ok(e) => e,
        Err(e) => {
            for s in SCENARIOS {
                println!("torture: journal {name} {s} SKIPPED: {e}");
            }
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let mut failed = Vec::new();
    for s in SCENARIOS {
        let res = bounded(Duration::from_secs(120), {
            let (engine, d, name) = (engine.clone(), dir(name, s), name.to_string());
            move || scenario(s, choice, &engine, &d, &name)
        });
        match res {
            Ok(()) => println!("torture: journal {name} {s} ok"),
            Err(why) if why.starts_with("SKIPPED: ") => {
                println!("torture: journal {name} {s} {why}");
                eprintln!("{why}");
            }
            Err(why) => {
                println!("torture: journal {name} {s} FAIL: {why}");
                failed.push(s);
            }
        }
    }
    assert!(failed.is_empty(), "failed on {name}: {failed:?}");
}

/// Runs scenario `s`; its panic is its failure.
fn scenario(
    s: &str,
    choice: DriverChoice,
    engine: &Engine,
    d: &Path,
    name: &str,
) -> Result<(), String> {
    let fresh = || {
        overlapped::Engine::builder()
            .driver(choice)
            .build()
            .expect("engine")
    };
    let res = catch_unwind(AssertUnwindSafe(|| match s {
        "drop-behind" => drop_behind(engine, d),
        "shared-writers" => shared_writers(engine, d),
        "close-racing-reads" => close_racing_reads(engine, d),
        // Its own engine: this one is shut down.
        "shutdown-in-flight" => shutdown_in_flight(&fresh(), d),
        // In a process of its own: the child of a fork holds a copy of
        // every descriptor open at that instant (other tests' journals'
        // locks among them) until it exits.
        #[cfg(target_os = "linux")]
        "fork-in-flight" => fork_in_a_process_of_its_own(name, d),
        #[cfg(target_os = "linux")]
        _ => injected_failure(engine, name),
        #[cfg(not(target_os = "linux"))]
        "fork-in-flight" => Err(format!("SKIPPED: fork is Linux's ({name} has none)")),
        #[cfg(not(target_os = "linux"))]
        _ => Err("SKIPPED: the small file system is an ext4 image on a Linux loop device".into()),
    }));
    res.unwrap_or_else(|p| {
        Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into()))
    })
}

/// Runs `f` on a thread for at most `limit`: a hang is a failure.
fn bounded(
    limit: Duration,
    f: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| Err(format!("still running after {limit:?}")))
}

const SCENARIOS: [&str; 6] = [
    "drop-behind",
    "shared-writers",
    "close-racing-reads",
    "shutdown-in-flight",
    "fork-in-flight",
    "injected-failure",
];

/// Runs the fork scenario in a new process of this test binary (the test
/// `fork_scenario_child`), which prints `FORK-SCENARIO-OK` or the failure.
#[cfg(target_os = "linux")]
fn fork_in_a_process_of_its_own(driver: &str, d: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "torture::fork_scenario_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OVERLAP_JOURNAL_FORK_SCENARIO", driver)
        .env("OVERLAP_JOURNAL_FORK_DIR", d)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("run the fork scenario's process: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.contains("FORK-SCENARIO-OK") {
        return Ok(());
    }
    Err(stdout
        .lines()
        .find_map(|l| {
            l.split_once("FORK-SCENARIO-FAIL: ")
                .map(|(_, why)| why.to_string())
        })
        .unwrap_or_else(|| format!("the fork scenario's process failed: {}", out.status)))
}

/// The fork scenario, in the process `fork_in_a_process_of_its_own` starts.
#[cfg(target_os = "linux")]
#[test]
fn fork_scenario_child() {
    let (Ok(driver), Ok(d)) = (
        std::env::var("OVERLAP_JOURNAL_FORK_SCENARIO"),
        std::env::var("OVERLAP_JOURNAL_FORK_DIR"),
    ) else {
        eprintln!("SKIPPED: fork_scenario_child runs in a process that the torture tests start");
        return;
    };
    let choice = match driver.as_str() {
        "uring" => DriverChoice::Uring,
        "aio" => DriverChoice::Aio,
        _ => DriverChoice::Pool,
    };
    let engine = overlapped::Engine::builder()
        .driver(choice)
        .build()
        .expect("engine");
    match fork_in_flight(&engine, Path::new(&d)) {
        Ok(()) => println!("FORK-SCENARIO-OK"),
        Err(why) => println!("FORK-SCENARIO-FAIL: {why}"),
    }
}

#[test]
#[cfg(target_os = "linux")]
fn torture_uring() {
    run(DriverChoice::Uring, "uring");
}

#[test]
#[cfg(target_os = "linux")]
fn torture_aio() {
    run(DriverChoice::Aio, "aio");
}

#[test]
fn torture_pool() {
    run(DriverChoice::Pool, "pool");
}

#[test]
#[cfg(windows)]
fn torture_iocp() {
    run(DriverChoice::Iocp, "iocp");
}
