//! `overlap journal`, run as the built binary: a shell pipeline into a
//! durable journal, dump (text and JSON, UTF-8 and binary), verify on a
//! clean and a corrupt journal, repair, partial ingest, error texts, and
//! `journal bench` (JSON keys, cleanup on signals, argument checks).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::util::{fresh_dir, overlap, stderr};

fn scratch(name: &str) -> PathBuf {
    fresh_dir(&format!("journal-cli-{name}"))
}

fn journal(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = overlap()
        .arg("journal")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run overlap");
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        // A command refused for its arguments exits without reading its
        // input: the pipe may be closed under the write.
        if let Err(e) = input.write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn append_dump_verify() {
    let d = scratch("pipeline").join("j");
    let dir = d.to_str().unwrap();
    let small = ["--segment-mib", "1", "--buffer-mib", "1"];
    let mut args = vec!["append", dir];
    args.extend_from_slice(&small);
    let out = ok(&journal(&args, Some(b"hello\nworld\n\xff\xfe\n")));
    let lsns: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(lsns.len(), 3);
    assert!(lsns.windows(2).all(|w| w[0] < w[1]));
    let mut args = vec!["append", dir, "--level", "written"];
    args.extend_from_slice(&small);
    let out = ok(&journal(&args, Some(b"last line without newline")));
    assert_eq!(out.lines().count(), 1);

    let text = ok(&journal(&["dump", dir], None));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("{}\thello", lsns[0]));
    // Binary is quoted with escapes: never mistaken for a text record.
    assert_eq!(lines[2], format!("{}\t\"\\xff\\xfe\"", lsns[2]));
    assert!(lines[3].ends_with("\tlast line without newline"));

    let json = ok(&journal(&["dump", dir, "--json"], None));
    let objs: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objs.len(), 4);
    assert_eq!(objs[1]["lsn"], lsns[1]);
    assert_eq!(objs[1]["data"], "world");
    assert_eq!(objs[2]["data_b64"], "//4=");
    assert!(objs[2].get("data").is_none());

    let v = ok(&journal(&["verify", dir, "--json"], None));
    let rep: Value = serde_json::from_str(v.trim()).unwrap();
    assert_eq!(rep["records"], 4);
    assert_eq!(rep["truncated_at"], Value::Null);

    // Damage an acknowledged record: verify fails, in both modes.
    let seg = d.join("0000000000000000.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = 4096 + lsns[1] as usize + 26;
    bytes[at] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    for strict in [false, true] {
        let mut args = vec!["verify", dir];
        if strict {
            args.push("--strict");
        }
        let o = journal(&args, None);
        assert!(!o.status.success(), "verify passed a corrupt journal");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("corrupt"), "{err}");
    }
}

#[test]
fn bench_json_keys() {
    let d = scratch("bench");
    let o = Command::new(env!("CARGO_BIN_EXE_overlap"))
        .args(["journal", "bench", "--scenario", "custom", "--json"])
        .args([
            "--duration",
            "0.2",
            "--threads",
            "2",
            "--record-bytes",
            "512",
        ])
        .args([
            "--level",
            "durable",
            "--segment-mib",
            "4",
            "--buffer-mib",
            "1",
        ])
        .arg("--dir")
        .arg(&d)
        .output()
        .unwrap();
    let out = ok(&o);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    for key in [
        "scenario",
        "record_bytes",
        "threads",
        "level",
        "records_per_s",
        "append_ns_p50",
        "append_ns_p99",
        "append_ns_p999",
        "commits_per_s",
        "baseline_commits_per_s",
        "write_records_p50",
        "write_records_p99",
        "write_records_max",
        "sync_records_p50",
        "sync_records_p99",
        "sync_records_max",
        "commit_batch_records_p50",
        "commit_batch_records_p99",
        "commit_batch_records_max",
        "sync_waiters_p50",
        "segments_created",
        "segments_recycled",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    // Commits happened, so group commits of at least one record did, and
    // no write covered more records than there are committers.
    assert!(v["commit_batch_records_p50"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["write_records_max"].as_u64().unwrap() <= 2, "{v}");
    assert_eq!(v["record_bytes"], 512);
    assert!(v["records"].as_u64().unwrap() > 0);
    // The scratch journal is removed.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
}

#[test]
fn plain_dump_never_confuses_text_and_binary() {
    let d = scratch("quoting").join("j");
    let dir = d.to_str().unwrap();
    let input: &[u8] = b"base64://4=\n\xff\xfe\n\"quoted\"\ntab\there\nplain text\n";
    ok(&journal(
        &["append", dir, "--segment-mib", "1"],
        Some(input),
    ));
    let text = ok(&journal(&["dump", dir], None));
    let payloads: Vec<&str> = text
        .lines()
        .map(|l| l.split_once('\t').unwrap().1)
        .collect();
    assert_eq!(
        payloads,
        [
            "base64://4=",
            r#""\xff\xfe""#,
            r#""\"quoted\"""#,
            r#""tab\there""#,
            "plain text"
        ]
    );
}

#[test]
fn append_fails_when_stdout_goes_away() {
    // `seq 1 100000 | overlap journal append DIR | head -1` exited 0 with
    // part of the input appended and most LSNs never reported.
    let d = scratch("closed-stdout").join("j");
    let mut child = Command::new(env!("CARGO_BIN_EXE_overlap"))
        .args([
            "journal",
            "append",
            d.to_str().unwrap(),
            "--segment-mib",
            "8",
        ])
        .args(["--level", "written"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..100_000 {
            if writeln!(input, "{i}").is_err() {
                break;
            }
        }
    });
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 2];
    std::io::Read::read_exact(&mut out, &mut first).unwrap();
    drop(out); // as `head -1` does
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(!o.status.success(), "exit 0 after a partial ingest");
    let err = stderr(&o);
    assert!(err.contains("standard output failed"), "{err}");
    assert!(err.contains("acknowledged"), "{err}");
}

#[test]
fn append_to_a_full_stdout_says_it_is_stdout() {
    let d = scratch("full-stdout").join("j");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_overlap"))
        .args([
            "journal",
            "append",
            d.to_str().unwrap(),
            "--segment-mib",
            "1",
        ])
        .stdin(Stdio::piped())
        .stdout(full)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a\nb\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("standard output failed"), "{err}");
    assert!(err.contains("the journal is fine"), "{err}");
}

#[test]
fn errors_are_not_printed_twice() {
    // `Error::Io` printed its cause in its text and again as its source.
    let d = scratch("doubled");
    let file = d.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let j = file.join("j");
    let o = journal(&["append", j.to_str().unwrap()], Some(b"x\n"));
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}

#[test]
fn bad_arguments_leave_nothing_and_say_what_is_wrong() {
    let d = scratch("args");
    // --segment-mib 0 left a directory holding only LOCK.
    let j = d.join("j");
    let o = journal(
        &["append", j.to_str().unwrap(), "--segment-mib", "0"],
        Some(b"x\n"),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--segment-mib"), "{}", stderr(&o));
    assert!(!j.exists(), "a failed append left {}", j.display());
    // --duration 0 said "must be between 0 and 3600".
    let o = journal(
        &["bench", "--duration", "0", "--dir", d.to_str().unwrap()],
        None,
    );
    assert!(!o.status.success());
    assert!(!stderr(&o).contains("between 0"), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than 0"), "{}", stderr(&o));
    // --record-bytes 100000000 gave an internal message.
    let o = journal(
        &[
            "bench",
            "--record-bytes",
            "100000000",
            "--dir",
            d.to_str().unwrap(),
        ],
        None,
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--record-bytes"), "{}", stderr(&o));
    // --dir /nonexistent created the path.
    let missing = d.join("missing").join("deeper");
    let o = journal(
        &[
            "bench",
            "--duration",
            "0.1",
            "--dir",
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert!(!o.status.success());
    assert!(!d.join("missing").exists());
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
}

#[test]
#[cfg(not(windows))]
fn journal_bench_cleans_up_on_sigterm_and_sigint() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let d = scratch(&format!("bench-signal-{sig}"));
        let child = Command::new(env!("CARGO_BIN_EXE_overlap"))
            .args(["journal", "bench", "--duration", "30", "--segment-mib", "8"])
            .arg("--dir")
            .arg(&d)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the scratch journal exists and holds segments.
        let t0 = std::time::Instant::now();
        loop {
            let segs = std::fs::read_dir(&d)
                .unwrap()
                .filter_map(|e| std::fs::read_dir(e.unwrap().path()).ok())
                .flatten()
                .count();
            if segs >= 2 {
                break;
            }
            assert!(t0.elapsed().as_secs() < 20, "no scratch journal appeared");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // SAFETY: signals our own child process, by its id.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&o.status),
            None,
            "killed by the signal instead of cleaning up"
        );
        assert_eq!(o.status.code(), Some(128 + sig));
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

/// Every file in `d` and its bytes.
fn snapshot(d: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn repair_salvages_and_lists_what_it_dropped() {
    use overlapped_journal::format::{Checkpoint, CHECKPOINT_SLOT};
    let d = scratch("repair").join("j");
    let dir = d.to_str().unwrap();
    let lines: String = (0..50).map(|i| format!("record {i}\n")).collect();
    let out = ok(&journal(
        &["append", dir, "--segment-mib", "1"],
        Some(lines.as_bytes()),
    ));
    let lsns: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    // A checkpoint lagging the acknowledgements (as after a crash), and two
    // damaged bytes in acknowledged record 20, with records after it.
    let ck = d.join("checkpoint");
    let c = Checkpoint::decode_file(&std::fs::read(&ck).unwrap()).unwrap();
    let c = Checkpoint {
        durable_lsn: lsns[10],
        generation: c.generation + 1,
        ..c
    };
    let f = std::fs::OpenOptions::new().write(true).open(&ck).unwrap();
    crate::util::write_all_at(&f, &c.encode(), 0);
    crate::util::write_all_at(&f, &c.encode(), CHECKPOINT_SLOT as u64);
    let seg = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("0000000000000000.seg"))
        .unwrap();
    crate::util::write_all_at(&seg, &[0xde, 0xad], 4096 + lsns[20] + 26);
    drop((f, seg));
    // verify refuses (rather than saying "ok"), append refuses (rather than
    // cutting 29 acknowledged records silently and handing out their LSNs
    // again).
    let v = journal(&["verify", dir], None);
    assert!(!v.status.success());
    assert!(stderr(&v).contains("repair"), "{}", stderr(&v));
    let a = journal(&["append", dir], Some(b"new\n"));
    assert!(
        !a.status.success(),
        "{}",
        String::from_utf8_lossy(&a.stdout)
    );
    assert!(!journal(&["dump", dir], None).status.success());
    // A dry run says what a repair would do, and changes no byte.
    let before = snapshot(&d);
    let r = ok(&journal(&["repair", dir, "--dry-run"], None));
    assert_eq!(snapshot(&d), before, "the dry run changed files");
    let listed = format!("dropped\t{}\t{}\t", lsns[20], lsns[21]);
    assert!(r.contains(&listed), "{r}");
    assert!(r.contains("would drop 1 damaged stretch"), "{r}");
    assert!(
        r.contains("would keep 49 record(s), 29 of them after"),
        "{r}"
    );
    assert!(r.contains("nothing was changed"), "{r}");
    // repair drops the damaged record only (it dropped the 29 after it),
    // saves its bytes, and says all of it.
    let r = ok(&journal(&["repair", dir], None));
    assert!(r.contains(&listed), "{r}");
    assert_eq!(r.matches("dropped\t").count(), 1, "{r}");
    assert!(r.contains("keep 49 record(s), 29 of them after"), "{r}");
    let saved = d.join(
        r.lines()
            .find_map(|l| l.strip_prefix("saved the dropped, rewritten and removed bytes to "))
            .unwrap_or_else(|| panic!("{r}")),
    );
    let bytes = std::fs::read(&saved).unwrap();
    assert!(bytes.starts_with(b"OVLJDROP"));
    assert!(
        contains(&bytes, b"re\xde\xadrd 20"),
        "the dropped record's bytes"
    );
    let dumped = ok(&journal(&["dump", dir], None));
    assert_eq!(dumped.lines().count(), 49);
    assert!(!dumped.contains("record 20\n"));
    assert!(dumped.ends_with("record 49\n"));
    // New records never get a dropped LSN (nor any other used one).
    let a = ok(&journal(&["append", dir], Some(b"after repair\n")));
    let next: u64 = a.trim().parse().unwrap();
    assert!(next > lsns[49], "{next}");
    let r = ok(&journal(&["repair", dir], None));
    assert!(r.starts_with("nothing to repair"), "{r}");
    // JSON: one line per dropped stretch, then the report.
    let j = ok(&journal(&["repair", dir, "--json", "--dry-run"], None));
    let rep: Value = serde_json::from_str(j.lines().last().unwrap()).unwrap();
    assert_eq!(rep["records"], 50);
}

/// Appends `n` lines through the CLI (1 MiB segments); their LSNs.
fn appended(dir: &str, n: usize) -> Vec<u64> {
    let lines: String = (0..n).map(|i| format!("record {i}\n")).collect();
    let out = ok(&journal(
        &["append", dir, "--segment-mib", "1"],
        Some(lines.as_bytes()),
    ));
    out.lines().map(|l| l.parse().unwrap()).collect()
}

/// The acknowledged tail is gone (the segment file cut short): repair
/// says which acknowledged records were lost and exits 1 (it said
/// "nothing to repair" and exited 0), and the next append gets an LSN
/// above every acknowledged one (it got an acknowledged LSN again).
#[test]
fn repair_of_a_lost_acknowledged_tail_says_so_and_never_reuses_an_lsn() {
    use overlapped_journal::format::Checkpoint;
    let d = scratch("repair-lost-tail").join("j");
    let dir = d.to_str().unwrap();
    let lsns = appended(dir, 60);
    let ck = Checkpoint::decode_file(&std::fs::read(d.join("checkpoint")).unwrap()).unwrap();
    let durable = ck.durable_lsn;
    assert!(durable > lsns[59], "{durable}");
    let seg = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("0000000000000000.seg"))
        .unwrap();
    seg.set_len(4096 + lsns[40]).unwrap();
    drop(seg);
    let r = journal(&["repair", dir], None);
    assert!(
        !r.status.success(),
        "{}",
        String::from_utf8_lossy(&r.stdout)
    );
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(!out.contains("nothing to repair"), "{out}");
    let err = stderr(&r);
    let lost = format!(
        "acknowledged durable were lost: LSN {}..{durable}",
        lsns[40]
    );
    assert!(err.contains(&lost), "{err}");
    let ck = Checkpoint::decode_file(&std::fs::read(d.join("checkpoint")).unwrap()).unwrap();
    assert!(ck.durable_lsn >= durable, "lowered to {}", ck.durable_lsn);
    let next = appended(dir, 1)[0];
    assert!(
        next >= durable,
        "LSN {next} handed out again (durable {durable})"
    );
    let dumped = ok(&journal(&["dump", dir], None));
    assert_eq!(dumped.lines().count(), 41, "{dumped}");
}

/// A bad segment header and a 1 MiB stray segment: repair lists both,
/// saves their bytes to `dropped-N.bin` before it rewrites the one and
/// removes the other, and does not say "nothing to repair" (it did, and
/// saved neither).
#[test]
fn repair_saves_and_lists_a_rewritten_header_and_a_removed_stray() {
    let d = scratch("repair-header-stray").join("j");
    let dir = d.to_str().unwrap();
    appended(dir, 30);
    let seg = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("0000000000000000.seg"))
        .unwrap();
    crate::util::write_all_at(&seg, b"BADHDR!!", 24);
    drop(seg);
    let stray: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8 | 1).collect();
    std::fs::write(d.join("0000000000000007.seg"), &stray).unwrap();
    let dry = ok(&journal(&["repair", dir, "--dry-run"], None));
    assert!(dry.contains("rewrite-header\t0\t"), "{dry}");
    assert!(dry.contains("remove-segment\t7\t"), "{dry}");
    assert!(d.join("0000000000000007.seg").exists());
    let r = ok(&journal(&["repair", dir], None));
    assert!(!r.contains("nothing to repair"), "{r}");
    assert!(r.contains("rewrite-header\t0\t"), "{r}");
    assert!(r.contains("remove-segment\t7\t"), "{r}");
    let saved = d.join(
        r.lines()
            .find_map(|l| l.strip_prefix("saved the dropped, rewritten and removed bytes to "))
            .unwrap_or_else(|| panic!("{r}")),
    );
    let bytes = std::fs::read(&saved).unwrap();
    assert!(contains(&bytes, b"BADHDR!!"), "the old header");
    assert!(contains(&bytes, &stray[4096..8192]), "the stray segment");
    assert!(!d.join("0000000000000007.seg").exists());
    assert_eq!(ok(&journal(&["dump", dir], None)).lines().count(), 30);
    let again = ok(&journal(&["repair", dir], None));
    assert!(again.starts_with("nothing to repair"), "{again}");
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `overlap journal ARGS` with `OVERLAP_DRIVER` set to `driver` (or
/// removed).
#[cfg(not(windows))]
fn journal_on(driver: Option<&str>, args: &[&str], stdin: &[u8]) -> Output {
    let mut c = overlap();
    c.arg("journal").args(args).stdin(Stdio::piped());
    match driver {
        Some(d) => c.env("OVERLAP_DRIVER", d),
        None => c.env_remove("OVERLAP_DRIVER"),
    };
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run overlap");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// Whether the engine runs on the system's own driver here (io_uring, not
/// under a seccomp filter that blocks it, nor with `OVERLAP_DRIVER` set;
/// I/O completion ports on Windows).
fn on_uring() -> bool {
    overlapped::Engine::new().is_ok_and(|e| e.driver().fallback.is_none())
}

#[test]
fn the_engine_driver_is_said_only_with_v() {
    let d = scratch("verbose").join("j");
    let dir = d.to_str().unwrap();
    let quiet = journal(&["append", dir, "--segment-mib", "1"], Some(b"a\n"));
    ok(&quiet);
    // io_uring is said only with -v; a fallback always (see below).
    assert_eq!(
        stderr(&quiet).contains("the engine chose"),
        !on_uring(),
        "{}",
        stderr(&quiet)
    );
    for args in [
        ["-v", "append", dir, "--segment-mib", "1"],
        ["append", dir, "--segment-mib", "1", "-v"],
    ] {
        let loud = journal(&args, Some(b"b\n"));
        ok(&loud);
        assert_eq!(
            stderr(&loud)
                .matches("overlap journal: engine driver")
                .count(),
            1,
            "{}",
            stderr(&loud)
        );
    }
}

/// A driver other than io_uring (forced here with `OVERLAP_DRIVER`, as
/// a seccomp filter forces it in a container; `./scripts/test` runs this
/// again under one) is said once on stderr, with the reason, without
/// `-v`; `-q` silences it.
#[test]
#[cfg(not(windows))]
fn a_fallback_from_io_uring_is_said_once_unless_quiet() {
    let d = scratch("fallback").join("j");
    let dir = d.to_str().unwrap();
    for driver in ["pool", "aio"] {
        let o = journal_on(
            Some(driver),
            &["append", dir, "--segment-mib", "1"],
            b"a\nb\n",
        );
        if driver == "aio" && !o.status.success() && stderr(&o).contains("AIO") {
            println!("SKIPPED: Linux AIO unavailable here: {}", stderr(&o).trim());
            continue;
        }
        ok(&o);
        let err = stderr(&o);
        assert_eq!(
            err.matches("the engine chose").count(),
            1,
            "{driver}: {err}"
        );
        assert!(err.contains("not on io_uring"), "{driver}: {err}");
        assert!(
            err.contains("OVERLAP_DRIVER"),
            "{driver}: the reason: {err}"
        );
        let q = journal_on(
            Some(driver),
            &["-q", "append", dir, "--segment-mib", "1"],
            b"c\n",
        );
        ok(&q);
        assert_eq!(stderr(&q), "", "{driver}: -q");
    }
    // The engine's own choice: said exactly when it is not io_uring.
    let o = journal_on(None, &["append", dir, "--segment-mib", "1"], b"d\n");
    ok(&o);
    let said = stderr(&o).matches("the engine chose").count();
    assert_eq!(said, usize::from(!on_uring()), "{}", stderr(&o));
}

#[test]
fn dump_and_verify_read_while_an_appender_runs() {
    let d = scratch("live").join("j");
    let dir = d.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_overlap"))
        .args(["journal", "append", dir, "--segment-mib", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"one\ntwo\n").unwrap();
    input.flush().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..2 {
        line.clear();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    }
    // Both are durable; the appender still holds the journal. The
    // checkpoint catches up when the flusher goes idle.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let dumped = journal(&["dump", dir], None);
    let v = journal(&["verify", dir], None);
    let second = journal(&["append", dir], Some(b"x\n"));
    drop(input);
    let _ = child.wait();
    let text = ok(&dumped);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.ends_with("\ttwo\n"), "{text}");
    assert!(
        stderr(&dumped).contains("another process"),
        "{}",
        stderr(&dumped)
    );
    assert!(ok(&v).contains("ok: 2 records"));
    assert!(!second.status.success());
    assert!(
        stderr(&second).contains("locked by another process"),
        "{}",
        stderr(&second)
    );
}

#[test]
fn help_explains_levels_limit_and_preallocation() {
    let o = Command::new(env!("CARGO_BIN_EXE_overlap"))
        .args(["journal", "append", "--help"])
        .output()
        .unwrap();
    let h = ok(&o);
    for word in [
        "accepted",
        "written",
        "durable",
        "1 MiB",
        "preallocated",
        "128 MiB",
    ] {
        assert!(h.contains(word), "--help lacks {word:?}: {h}");
    }
}

#[test]
#[cfg(not(windows))]
fn on_ramfs_the_error_names_fallocate_and_nothing_is_left() {
    // ramfs has no fallocate: the journal said "Operation not supported
    // (os error 95)" without naming it and left a half-made directory.
    let base = scratch("ramfs");
    let mnt = base.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "ramfs", "ramfs", mnt.to_str().unwrap()])
        .output();
    match mounted {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "SKIPPED: cannot mount ramfs: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!("SKIPPED: cannot mount ramfs: {e}");
            return;
        }
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let j = mnt.join("j");
    let o = journal(&["append", j.to_str().unwrap()], Some(b"x\n"));
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("fallocate"), "{err}");
    assert!(
        !j.exists(),
        "left behind: {:?}",
        std::fs::read_dir(&j).map(|d| d.count())
    );
}

#[test]
fn a_cut_torn_tail_is_reported_on_stderr() {
    use overlapped_journal::format::{Checkpoint, CHECKPOINT_SLOT};
    let d = scratch("cut-note").join("j");
    let dir = d.to_str().unwrap();
    let out = ok(&journal(
        &["append", dir, "--segment-mib", "1"],
        Some(b"a\nb\nc\n"),
    ));
    let lsns: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    // The last record torn, the durable point before it.
    let ck = d.join("checkpoint");
    let c = Checkpoint::decode_file(&std::fs::read(&ck).unwrap()).unwrap();
    let c = Checkpoint {
        durable_lsn: lsns[2],
        generation: c.generation + 1,
        ..c
    };
    let f = std::fs::OpenOptions::new().write(true).open(&ck).unwrap();
    crate::util::write_all_at(&f, &c.encode(), 0);
    crate::util::write_all_at(&f, &c.encode(), CHECKPOINT_SLOT as u64);
    let seg = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("0000000000000000.seg"))
        .unwrap();
    crate::util::write_all_at(&seg, &[0x77], 4096 + lsns[2] + 24);
    drop((f, seg));
    let o = journal(&["append", dir], Some(b"d\n"));
    let out = ok(&o);
    let next: u64 = out.trim().parse().unwrap();
    assert!(
        next > lsns[2],
        "the cut LSN {} is handed out again ({next})",
        lsns[2]
    );
    let err = stderr(&o);
    assert!(
        err.contains(&format!("recovery cut {dir} at LSN {}", lsns[2])),
        "{err}"
    );
    assert!(
        err.contains(&format!("new records continue at LSN {next}")),
        "{err}"
    );
}
