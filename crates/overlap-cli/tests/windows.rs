//! The `overlap` command on Windows (run under Wine in CI): the probe runs
//! the KB's experiment and gives a verdict and a Windows explanation for
//! every mode it can run (saying why it skips the others), `bench`
//! measures on IOCP and on the pool with the data checked, and `serve`
//! answers files, `/health` and a missing path. Timings and whether a
//! request completed at once are Wine's, not Windows': nothing here
//! asserts "asynchronous".

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{fresh_dir, overlap, stderr, stdout};

/// Every mode the probe may run on Windows.
const MODES: [&str; 15] = [
    "async-direct",
    "async-buffered-cold",
    "async-buffered-cached",
    "sync-direct",
    "sync-buffered-cold",
    "sync-buffered-cached",
    "async-grow-direct",
    "async-prealloc-direct",
    "async-validdata-direct",
    "async-grow-buffered",
    "async-prealloc-buffered",
    "async-validdata-buffered",
    "async-grow-writethrough",
    "async-prealloc-writethrough",
    "async-validdata-writethrough",
];

/// Runs the probe on `driver` with `--json`; returns its lines and stderr.
fn probe_json(driver: &str) -> (Vec<Value>, String) {
    let dir = fresh_dir(&format!("win-probe-{driver}"));
    let o = overlap()
        .args(["probe", "--dir", dir.to_str().unwrap()])
        .args(["--size", "8M", "--requests", "32", "--seed", "3", "--json"])
        .args(["--driver", driver])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "probe --driver {driver} failed: {err}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "the probe left {left:?}");
    let lines = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (lines, err)
}

/// One probe line: a known mode, this driver, a verdict the rule allows
/// without kernel workers, and an explanation in Windows' words.
fn check_mode(v: &Value, kind: &str) {
    let mode = v["mode"].as_str().unwrap();
    assert!(MODES.contains(&mode), "{v}");
    assert_eq!(v["driver"], kind, "{v}");
    assert_eq!(v["kernel_workers"], 0, "{v}");
    let verdict = v["verdict"].as_str().unwrap();
    assert!(["async", "sync"].contains(&verdict), "{v}");
    let requests = v["requests"].as_u64().unwrap();
    assert_eq!(v["bytes"].as_u64().unwrap(), requests * (64 << 10), "{v}");
    assert!(v["inline"].as_u64().unwrap() <= requests, "{v}");
    let e = v["explanation"].as_str().unwrap();
    assert!(
        e.contains("ReadFile") || e.contains("WriteFile") || e.contains("system cache"),
        "{mode}: not in Windows' terms: {e}"
    );
    for linux in ["preadv2", "O_DIRECT", "io_uring", "fallocate"] {
        assert!(!e.contains(linux), "{mode}: {linux}: {e}");
    }
    if mode.starts_with("sync-") {
        assert_eq!(verdict, "sync", "{v}");
        assert_eq!(v["inline"].as_u64(), Some(requests), "{v}");
    }
}

#[test]
fn the_probe_gives_a_verdict_for_every_mode_it_can_run_and_says_why_not() {
    for (driver, kind) in [("iocp", "iocp"), ("pool", "pool")] {
        let (lines, err) = probe_json(driver);
        for v in &lines {
            check_mode(v, kind);
        }
        let ran: BTreeSet<&str> = lines.iter().map(|v| v["mode"].as_str().unwrap()).collect();
        assert_eq!(ran.len(), lines.len(), "one line per mode: {ran:?}");
        // Every read mode and every growing write runs; a mode left out is
        // named on stderr with its reason.
        for mode in MODES {
            let always = !mode.contains("prealloc") && !mode.contains("validdata");
            if ran.contains(mode) {
                continue;
            }
            assert!(!always, "{driver}: {mode} did not run: {err}");
            assert!(
                err.contains(&format!("{mode} skipped: ")),
                "{driver}: {mode} neither ran nor was said skipped: {err}"
            );
            println!("SKIPPED ({driver}): {mode}, as the probe said on stderr");
        }
        println!("probe --driver {driver}: {} modes ran", ran.len());
    }
}

#[test]
fn the_probe_prints_its_verdicts_and_a_summary() {
    let dir = fresh_dir("win-probe-human");
    let o = overlap()
        .args(["probe", "--dir", dir.to_str().unwrap()])
        .args(["--size", "4M", "--requests", "16", "--seed", "5"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    println!("{out}");
    assert!(out.contains("driver:    iocp"), "{out}");
    for mode in &MODES[..6] {
        assert!(out.contains(mode), "{mode} missing: {out}");
    }
    assert!(out.contains("verdicts:"), "{out}");
    assert!(
        ["async", "sync"].iter().any(|v| out.contains(v)),
        "no verdict: {out}"
    );
}

/// A tiny bench run on `driver`: every read checked, the data file removed.
fn bench(driver: &str, rw: &str, extra: &[&str]) -> Value {
    let dir = fresh_dir(&format!("win-bench-{driver}-{rw}"));
    let o = overlap()
        .args(["bench", "--json", "--dir", dir.to_str().unwrap()])
        .args(["--driver", driver, "--rw", rw, "--bs", "4k", "--size", "4M"])
        .args(["--ops", "2000", "--iodepth", "16"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "bench {driver} {rw}: {}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "bench left {left:?}");
    serde_json::from_str(stdout(&o).trim()).unwrap()
}

#[test]
fn bench_runs_on_iocp_and_on_the_pool() {
    for driver in ["iocp", "pool"] {
        for (rw, extra) in [("randread", &[][..]), ("randwrite", &["--direct"][..])] {
            let r = bench(driver, rw, extra);
            assert_eq!(r["ops"], 2000, "{r}");
            assert_eq!(r["driver"], driver, "{r}");
            assert!(r["iops"].as_f64().unwrap() > 0.0, "{r}");
            println!(
                "bench --driver {driver} --rw {rw}: {} IOPS under Wine",
                r["iops"]
            );
        }
    }
}

/// One HTTP/1.1 request; the status line and the body.
fn get(addr: &str, path: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let status = head.lines().next().unwrap().to_string();
    (status, all[end..].to_vec())
}

#[test]
fn serve_answers_a_file_health_and_a_missing_path() {
    let dir = fresh_dir("win-serve");
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("data.bin"), &body).unwrap();
    let mut child = overlap()
        .arg("serve")
        .arg(&dir)
        .args(["--port", "0", "--threads", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut out = child.stdout.take().unwrap();
    let t0 = Instant::now();
    let mut byte = [0u8; 1];
    while !first.ends_with('\n') && t0.elapsed() < Duration::from_secs(30) {
        if out.read(&mut byte).unwrap() == 0 {
            break;
        }
        first.push(byte[0] as char);
    }
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let (status, got) = get(&url, "/data.bin");
    let (health, _) = get(&url, "/health");
    let (missing, _) = get(&url, "/nothing-here");
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.contains("200"), "{status}");
    assert!(got == body, "the served bytes differ from the file's");
    assert!(health.contains("200"), "{health}");
    assert!(missing.contains("404"), "{missing}");
}

/// Ctrl-Break (a console's control event, as Ctrl-C in its own process
/// group) ends the probe through its handler: its files are removed and it
/// exits with `STATUS_CONTROL_C_EXIT`.
#[test]
fn ctrl_break_removes_the_probe_files() {
    use std::os::windows::process::CommandExt;
    use windows_sys::Win32::System::Console::{GenerateConsoleCtrlEvent, CTRL_BREAK_EVENT};
    use windows_sys::Win32::System::Threading::CREATE_NEW_PROCESS_GROUP;
    let dir = fresh_dir("win-probe-ctrl");
    let mut child = overlap()
        .args(["probe", "--dir", dir.to_str().unwrap(), "--size", "256M"])
        .creation_flags(CREATE_NEW_PROCESS_GROUP)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&dir).unwrap().next().is_none() {
        assert!(
            Instant::now() < deadline,
            "the probe never created its file"
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the probe ended before it could be interrupted: {status}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: no memory arguments; the group is the child's own.
    let sent = unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, child.id()) };
    if sent == 0 {
        let _ = child.kill();
        let _ = child.wait();
        println!(
            "SKIPPED: Ctrl-Break cleanup: GenerateConsoleCtrlEvent failed here ({}; Wine without \
             a terminal has no console to send it through)",
            std::io::Error::last_os_error()
        );
        return;
    }
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        println!("SKIPPED: the probe finished before the event arrived");
    } else {
        assert_eq!(
            out.status.code().map(|c| c as u32),
            Some(0xC000_013A),
            "{}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "the probe left {left:?}");
}
