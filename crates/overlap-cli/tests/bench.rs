//! `overlap bench`: option parsing, the JSON schema, and a tiny run of each
//! preset (correctness, not speed: no figure is asserted beyond sanity).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::util::{fresh_dir, overlap, stderr, stdout};

fn bin() -> Command {
    overlap()
}

/// A fresh directory under the integration-test temp dir.
fn scratch(name: &str) -> PathBuf {
    fresh_dir(&format!("bench-{name}"))
}

fn run(args: &[&str]) -> Output {
    bin().arg("bench").args(args).output().expect("run overlap")
}

/// Runs a bench expected to succeed with --json; returns the result lines.
fn run_json(dir: &Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json", "--dir", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = run(&all);
    assert!(
        o.status.success(),
        "overlap bench {all:?} failed: {}",
        stderr(&o)
    );
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    assert_no_leftovers(dir);
    lines
}

fn assert_no_leftovers(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("overlap-bench-"))
        .collect();
    assert!(left.is_empty(), "data files left behind: {left:?}");
}

/// Whether this kernel lets the engine use io_uring; says so loudly if not.
fn uring_available(dir: &Path) -> bool {
    let o = run(&[
        "--dir",
        dir.to_str().unwrap(),
        "--size",
        "64k",
        "--ops",
        "4",
        "--driver",
        "uring",
        "--json",
    ]);
    if o.status.success() {
        return true;
    }
    let e = stderr(&o);
    assert!(
        e.contains("io_uring is unavailable"),
        "unexpected failure: {e}"
    );
    eprintln!("SKIPPED: io_uring unavailable here: {e}");
    false
}

fn expect_error(args: &[&str], needle: &str) {
    let o = run(args);
    assert!(
        !o.status.success(),
        "overlap bench {args:?} should have failed"
    );
    let e = stderr(&o);
    assert!(
        e.contains(needle),
        "overlap bench {args:?}: expected `{needle}` in the error, got: {e}"
    );
}

#[test]
fn bad_values_are_rejected_with_clear_messages() {
    expect_error(&["--bs", "4q"], "unknown size unit `q`");
    expect_error(&["--bs", "abc"], "is not a size");
    expect_error(&["--size", "0"], "at least 1 byte");
    expect_error(&["--iodepth", "0"], "out of range");
    expect_error(&["--iodepth", "4,x"], "`x` is not a whole number");
    expect_error(&["--concurrency", "100000000"], "out of range");
    expect_error(&["--driver", "uring,floppy"], "invalid value 'floppy'");
    expect_error(&["--rw", "readwrite"], "invalid value 'readwrite'");
    expect_error(&["--preset", "nope"], "invalid value 'nope'");
    expect_error(&["--ops", "10", "--runtime", "1s"], "cannot be used with");
    expect_error(&["--runtime", "5 parsecs"], "unknown time unit");
    expect_error(&["--ops", "0"], "must be at least 1");
    expect_error(&["--max-kernel-workers", "0"], "must be at least 1");
    expect_error(&["--max-kernel-workers", "99999999999"], "too large");
    expect_error(&["--plot", "chart.txt"], "must end in .svg or .png");
    expect_error(&["--direct", "--bs", "1000"], "multiples");
    expect_error(&["--direct=maybe"], "expected 1 or 0");
    expect_error(&["--warm", "--direct"], "contradict");
    expect_error(&["--size", "4k", "--bs", "8k"], "larger than --size");
    expect_error(&["--prealloc"], "only applies to write jobs");
    expect_error(
        &[
            "--driver",
            "sync",
            "--iodepth",
            "128",
            "--concurrency",
            "64",
        ],
        "threads; at most",
    );
    expect_error(&["--allow-write"], "--file");
}

#[test]
fn missing_or_too_small_directories_are_refused() {
    let dir = scratch("dirs");
    let missing = dir.join("missing");
    let o = run(&[
        "--dir",
        missing.to_str().unwrap(),
        "--size",
        "1M",
        "--ops",
        "4",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no such directory"), "{}", stderr(&o));
    assert!(!missing.exists(), "the directory must not be created");
    let o = run(&[
        "--dir",
        dir.to_str().unwrap(),
        "--size",
        "1000T",
        "--ops",
        "4",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(" free; the data file needs "),
        "{}",
        stderr(&o)
    );
    assert_no_leftovers(&dir);
}

#[test]
fn write_jobs_refuse_a_given_file_unless_allowed() {
    let dir = scratch("refuse");
    let f = dir.join("precious");
    std::fs::write(&f, vec![7u8; 1 << 16]).unwrap();
    let o = run(&["--rw", "write", "--file", f.to_str().unwrap(), "--ops", "4"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--allow-write"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&f).unwrap(), vec![7u8; 1 << 16]);
}

#[test]
fn read_jobs_never_write_a_given_file() {
    let dir = scratch("given");
    if !uring_available(&dir) {
        return;
    }
    let f = dir.join("input");
    let data: Vec<u8> = (0..(256u32 << 10)).map(|i| (i % 253) as u8 + 1).collect();
    std::fs::write(&f, &data).unwrap();
    let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
    for driver in ["uring", "pool", "sync"] {
        let o = run(&[
            "--file",
            f.to_str().unwrap(),
            "--driver",
            driver,
            "--ops",
            "300",
            "--json",
        ]);
        assert!(o.status.success(), "{driver}: {}", stderr(&o));
        let r: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(r["ops"], 300);
        assert_eq!(r["file_size"], 256 << 10);
    }
    assert_eq!(std::fs::read(&f).unwrap(), data);
    assert_eq!(std::fs::metadata(&f).unwrap().modified().unwrap(), mtime);
    assert!(f.exists(), "a given file is never removed");
}

/// Every key of the JSON schema of `overlap bench`, with its JSON type.
const SCHEMA: &[(&str, &str)] = &[
    ("system", "string"),
    ("driver", "string"),
    ("rw", "string"),
    ("bs", "integer"),
    ("iodepth", "integer"),
    ("concurrency", "integer"),
    ("direct", "bool"),
    ("ops", "integer"),
    ("iops", "number"),
    ("mb_s", "number"),
    ("lat_us_p50", "number"),
    ("lat_us_p99", "number"),
    ("lat_us_p999", "number"),
    ("cpu_us_per_op", "number"),
    ("ctx_switches", "integer"),
    ("threads_peak", "integer"),
    ("kernel_workers", "integer"),
    ("rss_peak_bytes", "integer"),
    ("runtime_s", "number"),
    ("lat_us_mean", "number"),
];

fn check_schema(r: &Value) {
    for (key, ty) in SCHEMA {
        let v = r
            .get(key)
            .unwrap_or_else(|| panic!("key `{key}` missing from {r}"));
        let ok = match *ty {
            "string" => v.is_string(),
            "integer" => v.is_u64(),
            "number" => v.is_number(),
            "bool" => v.is_boolean(),
            _ => unreachable!(),
        };
        assert!(ok, "key `{key}` should be a {ty}, got {v} in {r}");
    }
    let ops = r["ops"].as_u64().unwrap();
    let f = |k: &str| r[k].as_f64().unwrap();
    assert!(ops > 0);
    assert!(f("iops") > 0.0);
    let mb = f("iops") * r["bs"].as_f64().unwrap() / 1e6;
    assert!(
        (f("mb_s") - mb).abs() <= mb * 0.01 + 1e-6,
        "mb_s {} should be iops × bs / 10^6 = {mb}",
        f("mb_s")
    );
    assert!(f("lat_us_p50") > 0.0);
    assert!(f("lat_us_p50") <= f("lat_us_p99"));
    assert!(f("lat_us_p99") <= f("lat_us_p999"));
    assert!(f("cpu_us_per_op") >= 0.0);
    if r["system"] == "overlap" {
        assert!(r["threads_peak"].as_u64().unwrap() >= 2);
        assert!(r["rss_peak_bytes"].as_u64().unwrap() > 0);
    }
}

#[test]
fn json_schema_and_sweeps() {
    let dir = scratch("schema");
    if !uring_available(&dir) {
        return;
    }
    let lines = run_json(
        &dir,
        &[
            "--size",
            "1M",
            "--bs",
            "4k,8k",
            "--iodepth",
            "1,4",
            "--driver",
            "uring,sync",
            "--ops",
            "64",
        ],
    );
    assert_eq!(lines.len(), 8, "2 drivers × 2 bs × 2 depths");
    for r in &lines {
        check_schema(r);
        assert_eq!(r["system"], "overlap");
        assert_eq!(r["rw"], "randread");
        assert_eq!(r["ops"], 64);
        assert_eq!(r["direct"], false);
    }
    let mut combos: Vec<(String, u64, u64)> = lines
        .iter()
        .map(|r| {
            (
                r["driver"].as_str().unwrap().to_string(),
                r["bs"].as_u64().unwrap(),
                r["iodepth"].as_u64().unwrap(),
            )
        })
        .collect();
    combos.sort();
    let mut want = Vec::new();
    for d in ["sync", "uring"] {
        for bs in [4096, 8192] {
            for depth in [1, 4] {
                want.push((d.to_string(), bs, depth));
            }
        }
    }
    want.sort();
    assert_eq!(combos, want);
}

#[test]
fn a_small_in_flight_budget_throttles_without_deadlock() {
    let dir = scratch("budget");
    if !uring_available(&dir) {
        return;
    }
    // 64 requests of 64 KiB against a 256 KiB budget: at most 4 in flight.
    // With a port, completions hold budget until taken: the requester must
    // collect before it can submit more, not wait for budget in submission.
    for requester in ["port", "futures"] {
        let mut child = bin()
            .args([
                "bench",
                "--json",
                "--dir",
                dir.to_str().unwrap(),
                "--rw",
                "write",
                "--bs",
                "64k",
                "--iodepth",
                "64",
                "--size",
                "4M",
                "--direct",
                "--prealloc",
                "--max-inflight-bytes",
                "256k",
                "--requester",
                requester,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("--requester {requester} with a small budget hung");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{requester}: {}", stderr(&o));
        let r: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        check_schema(&r);
        assert_eq!(r["ops"], 64);
        assert_eq!(r["requester"], requester);
        let hw = r["engine"]["inflight_ops_high_water"].as_u64().unwrap();
        assert!(
            hw <= 4,
            "{requester}: {hw} operations in flight with a 256 KiB budget"
        );
        assert_no_leftovers(&dir);
    }
}

#[test]
fn an_interrupted_run_removes_its_data_file_even_with_stderr_closed() {
    let dir = scratch("interrupt");
    let mut child = bin()
        .args([
            "bench",
            "--json",
            "--dir",
            dir.to_str().unwrap(),
            "--size",
            "16M",
            "--runtime",
            "60s",
            "--driver",
            "sync",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let data_file = || {
        std::fs::read_dir(&dir).unwrap().flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("overlap-bench-")
        })
    };
    while !data_file() {
        assert!(t0.elapsed().as_secs() < 30, "the data file never appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(child.stderr.take()); // nobody reads stderr any more
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let t1 = std::time::Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if t1.elapsed().as_secs() > 20 {
            let _ = child.kill();
            panic!("the bench did not stop on SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(code, Some(130), "exit status 128 + SIGINT");
    assert_no_leftovers(&dir);
}

#[test]
fn runtime_bounds_a_run_by_time() {
    let dir = scratch("runtime");
    if !uring_available(&dir) {
        return;
    }
    let lines = run_json(
        &dir,
        &["--size", "1M", "--runtime", "300ms", "--iodepth", "2"],
    );
    assert_eq!(lines.len(), 1);
    let r = &lines[0];
    check_schema(r);
    let t = r["runtime_s"].as_f64().unwrap();
    assert!((0.25..5.0).contains(&t), "ran {t} s for a 300 ms runtime");
}

#[test]
fn preset_asynchio() {
    let dir = scratch("asynchio");
    if !uring_available(&dir) {
        return;
    }
    let lines = run_json(&dir, &["--preset", "asynchio", "--size", "8M"]);
    assert_eq!(lines.len(), 1);
    let r = &lines[0];
    check_schema(r);
    assert_eq!(r["ops"], 500);
    assert_eq!(r["bs"], 65536);
    assert_eq!(r["iodepth"], 500);
    assert_eq!(r["direct"], true);
    assert_eq!(r["preset"], "asynchio");
}

/// Without --driver the bench runs what the engine chose and says so;
/// `OVERLAP_DRIVER` is obeyed.
#[test]
fn the_default_driver_is_the_engines_choice_and_is_said() {
    let dir = scratch("default-driver");
    let args = [
        "--json",
        "--dir",
        dir.to_str().unwrap(),
        "--size",
        "1M",
        "--ops",
        "200",
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("no --driver given: the engine chose "), "{e}");
    let line: Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    let driver = line["driver"].as_str().unwrap();
    assert!(["uring", "aio", "pool"].contains(&driver), "{driver}");
    let o = bin()
        .arg("bench")
        .args(args)
        .env("OVERLAP_DRIVER", "pool")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the engine chose pool"),
        "{}",
        stderr(&o)
    );
    let line: Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(line["driver"], "pool");
}

#[test]
fn preset_randread() {
    let dir = scratch("randread");
    if !uring_available(&dir) {
        // The sweep runs without the unavailable driver, and says so.
        let mut all = vec!["--json", "--dir", dir.to_str().unwrap()];
        all.extend_from_slice(&["--preset", "randread", "--size", "8M", "--ops", "2000"]);
        let o = run(&all);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("skipped --driver uring: "),
            "{}",
            stderr(&o)
        );
        let drivers: Vec<String> = stdout(&o)
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["driver"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(drivers, ["pool", "sync"]);
        return;
    }
    let lines = run_json(
        &dir,
        &["--preset", "randread", "--size", "8M", "--ops", "2000"],
    );
    let drivers: Vec<&str> = lines
        .iter()
        .map(|r| r["driver"].as_str().unwrap())
        .collect();
    assert_eq!(drivers, ["uring", "pool", "sync"]);
    for r in &lines {
        check_schema(r);
        assert_eq!(r["ops"], 2000);
        assert_eq!(r["iodepth"], 32);
        assert_eq!(r["bs"], 4096);
        assert_eq!(r["direct"], true);
    }
    // The sync baseline runs iodepth threads (as fio's psync numjobs).
    assert!(lines[2]["threads_peak"].as_u64().unwrap() >= 32);
}

#[test]
fn preset_scale() {
    let dir = scratch("scale");
    if !uring_available(&dir) {
        return;
    }
    let lines = run_json(
        &dir,
        &["--preset", "scale", "--size", "8M", "--ops", "2000"],
    );
    let levels: Vec<u64> = lines
        .iter()
        .map(|r| r["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(levels, [4, 16, 64, 256, 1024]);
    for r in &lines {
        check_schema(r);
        assert_eq!(r["ops"], 2000);
        assert_eq!(r["iodepth"], 1);
    }
}

#[test]
fn preset_append() {
    let dir = scratch("append");
    if !uring_available(&dir) {
        return;
    }
    // One pass over an 8 MiB file: 128 writes of 64 KiB each.
    let lines = run_json(&dir, &["--preset", "append", "--size", "8M"]);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["prealloc"], false);
    assert_eq!(lines[1]["prealloc"], true);
    for r in &lines {
        check_schema(r);
        assert_eq!(r["rw"], "write");
        assert_eq!(r["ops"], 128);
        assert_eq!(r["bs"], 65536);
        assert_eq!(r["direct"], true);
    }
}

#[test]
fn preset_cached() {
    let dir = scratch("cached");
    if !uring_available(&dir) {
        return;
    }
    let lines = run_json(
        &dir,
        &["--preset", "cached", "--size", "8M", "--ops", "2000"],
    );
    let drivers: Vec<&str> = lines
        .iter()
        .map(|r| r["driver"].as_str().unwrap())
        .collect();
    assert_eq!(drivers, ["uring", "sync"]);
    for r in &lines {
        check_schema(r);
        assert_eq!(r["direct"], false);
        assert_eq!(r["ops"], 2000);
    }
    // Reads of a cached file are answered by the page-cache fast path.
    let engine = &lines[0]["engine"];
    assert!(engine["fast_path_hits"].as_u64().unwrap() > 0, "{engine}");
}

#[test]
fn the_table_explains_its_terse_columns() {
    let dir = scratch("legend");
    let o = run(&[
        "--dir",
        dir.to_str().unwrap(),
        "--size",
        "64k",
        "--ops",
        "4",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("system"), "{out}");
    let legend = lines.next().unwrap_or_default();
    for col in ["req:", "thr:", "kw:", "dio:", "rss_MiB:"] {
        assert!(
            legend.starts_with('#') && legend.contains(col),
            "{col} not explained: {out}"
        );
    }
    assert_no_leftovers(&dir);
}

#[test]
fn table_and_plots() {
    let dir = scratch("plot");
    if !uring_available(&dir) {
        return;
    }
    for ext in ["svg", "png"] {
        let plot = dir.join(format!("depth.{ext}"));
        let o = run(&[
            "--dir",
            dir.to_str().unwrap(),
            "--size",
            "1M",
            "--ops",
            "200",
            "--iodepth",
            "1,2,4",
            "--plot",
            plot.to_str().unwrap(),
        ]);
        let e = stderr(&o);
        if !o.status.success() && e.contains("needs a TrueType font") {
            eprintln!("SKIPPED: no font for plotting: {e}");
            return;
        }
        assert!(o.status.success(), "{e}");
        let out = stdout(&o);
        assert!(out.contains("system") && out.contains("p99_us"), "{out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("overlap")).count(), 3);
        let bytes = std::fs::read(&plot).unwrap();
        if ext == "svg" {
            let s = String::from_utf8_lossy(&bytes);
            assert!(s.contains("<svg") && s.contains("IOPS"), "not a chart");
        } else {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        }
        assert_no_leftovers(&dir);
    }
}

#[test]
fn compare_fio_prints_both_systems_and_ratios() {
    let dir = scratch("fio");
    if !uring_available(&dir) {
        return;
    }
    let has_fio = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fio").is_file()));
    let o = run(&[
        "--dir",
        dir.to_str().unwrap(),
        "--preset",
        "randread",
        "--driver",
        "uring",
        "--size",
        "8M",
        "--ops",
        "2000",
        "--compare-fio",
    ]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{err}");
    if !has_fio {
        assert!(err.contains("fio not found") && err.contains("apt-get install fio"));
        eprintln!("SKIPPED: fio is not installed; only the message was checked");
        return;
    }
    assert!(out.contains("\nfio      io_uring"), "{out}");
    assert!(out.contains("overlap / fio"), "{out}");
    assert!(
        out.contains("overlap uring/port    vs fio io_uring"),
        "{out}"
    );
    assert_no_leftovers(&dir);

    // The same in JSON: one fio line with the schema.
    let lines = run_json(
        &dir,
        &[
            "--preset",
            "randread",
            "--driver",
            "sync",
            "--size",
            "8M",
            "--ops",
            "2000",
            "--compare-fio",
        ],
    );
    assert_eq!(lines.len(), 2);
    check_schema(&lines[1]);
    assert_eq!(lines[1]["system"], "fio");
    assert_eq!(lines[1]["driver"], "psync");
    let cmd = lines[1]["fio_command"].as_str().unwrap();
    assert!(
        cmd.contains("--ioengine=psync") && cmd.contains("--numjobs=32"),
        "{cmd}"
    );
    assert!(lines[0]["fio_command"].is_null());
    assert_eq!(lines[1]["concurrency"], 32);
    // fio splits the operations over its 32 jobs, rounding up.
    let ops = lines[1]["ops"].as_u64().unwrap();
    assert!((2000..2032).contains(&ops), "fio did {ops} operations");
}

/// `--disable-lat` times nothing (the latency fields are null, and `-` in
/// the table) but still counts every operation, in every requester shape,
/// and passes fio its own `disable_lat`.
#[test]
fn disable_lat_times_nothing_and_counts_every_operation() {
    let dir = scratch("nolat");
    let untimed = |r: &Value| {
        assert_eq!(r["ops"], 300, "{r}");
        assert!(r["iops"].as_f64().unwrap() > 0.0, "{r}");
        for k in [
            "lat_us_mean",
            "lat_us_p50",
            "lat_us_p99",
            "lat_us_p999",
            "lat_us_max",
        ] {
            assert!(r[k].is_null(), "`{k}` should be null: {r}");
        }
    };
    // A port and a one-loop requester on the pool, threads in `pread`,
    // tokio tasks, several loops of one requester (their histogram shared),
    // threads in `.wait()`, and tokio's own baselines: (options, results).
    let shapes: [(&[&str], usize); 5] = [
        (&["--driver", "pool,sync", "--iodepth", "1,4"], 4),
        (&["--driver", "pool", "--concurrency", "4"], 1),
        (
            &[
                "--driver",
                "pool",
                "--requester",
                "futures",
                "--iodepth",
                "4",
            ],
            1,
        ),
        (
            &[
                "--driver",
                "pool",
                "--requester",
                "threads",
                "--concurrency",
                "2",
            ],
            1,
        ),
        (
            &["--driver", "spawn-blocking,tokio-fs", "--concurrency", "2"],
            2,
        ),
    ];
    let untimed_args = |more: &[&'static str]| {
        let mut all = vec!["--size", "2M", "--ops", "300", "--disable-lat"];
        all.extend_from_slice(more);
        all
    };
    for (args, results) in shapes {
        let all = untimed_args(args);
        let lines = run_json(&dir, &all);
        assert_eq!(lines.len(), results, "{args:?}");
        lines.iter().for_each(untimed);
    }
    let mut table = vec!["--dir", dir.to_str().unwrap()];
    table.extend(untimed_args(&["--driver", "sync"]));
    let o = run(&table);
    assert!(o.status.success(), "{}", stderr(&o));
    let row = stdout(&o)
        .lines()
        .find(|l| l.starts_with("overlap"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(row.contains(" - "), "latency columns shown as `-`: {row}");

    let has_fio = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fio").is_file()));
    if !has_fio {
        eprintln!("SKIPPED (fio part): fio is not installed");
        return;
    }
    let lines = run_json(&dir, &untimed_args(&["--driver", "sync", "--compare-fio"]));
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["system"], "fio");
    let cmd = lines[1]["fio_command"].as_str().unwrap();
    assert!(cmd.contains("--disable_lat=1"), "{cmd}");
    assert!(lines[1]["lat_us_p50"].is_null(), "{}", lines[1]);
    assert!(lines[1]["ops"].as_u64().unwrap() >= 300);
}

#[test]
fn requester_threads_options() {
    // One operation in flight per thread: a depth above 1 is refused, also
    // when a preset sets it, and in a sweep.
    expect_error(
        &["--requester", "threads", "--iodepth", "4"],
        "--requester threads keeps one operation in flight per thread: --iodepth 4 is refused",
    );
    expect_error(
        &[
            "--requester",
            "threads",
            "--iodepth",
            "1,2",
            "--concurrency",
            "4",
        ],
        "--iodepth 2 is refused",
    );
    expect_error(
        &["--requester", "threads", "--preset", "randread"],
        "--iodepth 32 (set by --preset randread) is refused",
    );
    expect_error(
        &[
            "--requester",
            "threads",
            "--driver",
            "sync",
            "--iodepth",
            "8",
        ],
        "--iodepth 8 is refused",
    );
    expect_error(
        &["--requester", "threads", "--concurrency", "5000"],
        "would start 5000 threads; at most 4096",
    );
    expect_error(&["--requester", "thread"], "invalid value 'thread'");
    let help = stdout(&bin().args(["bench", "--help"]).output().unwrap());
    assert!(help.contains("threads:"), "{help}");
}

/// A tiny run of `--requester threads --concurrency 4` on the engine (both
/// drivers): N threads each waiting on one operation with `.wait()`.
#[test]
fn requester_threads_runs_on_uring_and_pool() {
    let dir = scratch("threads");
    if !uring_available(&dir) {
        return;
    }
    for driver in ["uring", "pool"] {
        let lines = run_json(
            &dir,
            &[
                "--driver",
                driver,
                "--requester",
                "threads",
                "--concurrency",
                "4",
                "--ops",
                "2000",
                "--size",
                "8M",
                "--direct",
            ],
        );
        assert_eq!(lines.len(), 1, "{driver}");
        let r = &lines[0];
        check_schema(r);
        assert_eq!(r["system"], "overlap");
        assert_eq!(r["driver"], driver);
        assert_eq!(r["requester"], "threads", "{r}");
        assert_eq!(r["concurrency"], 4);
        assert_eq!(r["iodepth"], 1);
        assert_eq!(r["ops"], 2000, "the claims hand out exactly --ops");
        assert_eq!(r["direct"], true);
        // The 4 requester threads, the main thread and the sampler at least.
        let threads = r["threads_peak"].as_u64().unwrap();
        assert!(threads >= 6, "{driver}: {threads} threads at most");
        // Each thread has one operation in flight at a time.
        let hw = r["engine"]["inflight_ops_high_water"].as_u64().unwrap();
        assert!(
            (1..=4).contains(&hw),
            "{driver}: {hw} operations in flight with 4 threads"
        );
    }
}

#[test]
fn requester_threads_sweeps_and_the_sync_alias() {
    let dir = scratch("threads-sweep");
    if !uring_available(&dir) {
        return;
    }
    let lines = run_json(
        &dir,
        &[
            "--driver",
            "uring,sync",
            "--requester",
            "threads",
            "--concurrency",
            "4,16",
            "--ops",
            "400",
            "--size",
            "4M",
        ],
    );
    let got: Vec<(&str, u64)> = lines
        .iter()
        .map(|r| {
            (
                r["driver"].as_str().unwrap(),
                r["concurrency"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("uring", 4), ("uring", 16), ("sync", 4), ("sync", 16)]
    );
    for r in &lines {
        check_schema(r);
        assert_eq!(r["requester"], "threads");
        assert_eq!(r["iodepth"], 1);
        assert_eq!(r["ops"], 400);
    }
    // With --driver sync, `threads` is what sync does anyway: no engine.
    assert!(lines[2]["engine"].is_null());
    assert!(lines[3]["threads_peak"].as_u64().unwrap() >= 16);
}

#[test]
fn compare_fio_pairs_threads_with_psync_numjobs_first() {
    let dir = scratch("threads-fio");
    if !uring_available(&dir) {
        return;
    }
    let has_fio = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fio").is_file()));
    if !has_fio {
        eprintln!("SKIPPED: fio is not installed");
        return;
    }
    let args = [
        "--driver",
        "uring",
        "--requester",
        "threads",
        "--concurrency",
        "4",
        "--direct",
        "--size",
        "8M",
        "--ops",
        "400",
        "--compare-fio",
    ];
    let mut all = vec!["--dir", dir.to_str().unwrap()];
    all.extend_from_slice(&args);
    let o = run(&all);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{err}");
    let table_row = out
        .lines()
        .find(|l| l.starts_with("overlap"))
        .unwrap_or_else(|| panic!("no overlap row: {out}"));
    assert!(table_row.contains(" threads "), "{table_row}");
    let psync = out
        .find("overlap uring/threads vs fio psync    randread bs=4 KiB in_flight=4: iops ")
        .unwrap_or_else(|| panic!("no ratio against fio psync: {out}"));
    let uring = out
        .find("overlap uring/threads vs fio io_uring randread bs=4 KiB in_flight=4: iops ")
        .unwrap_or_else(|| panic!("no ratio against fio io_uring: {out}"));
    assert!(
        psync < uring,
        "psync numjobs=4 is the first comparison: {out}"
    );
    assert_no_leftovers(&dir);

    let lines = run_json(&dir, &args);
    assert_eq!(lines.len(), 3, "overlap, fio psync, fio io_uring");
    assert_eq!(lines[0]["requester"], "threads");
    let fio: Vec<(&str, u64, u64)> = lines[1..]
        .iter()
        .map(|r| {
            check_schema(r);
            assert_eq!(r["system"], "fio");
            (
                r["driver"].as_str().unwrap(),
                r["iodepth"].as_u64().unwrap(),
                r["concurrency"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(fio, [("psync", 1, 4), ("io_uring", 4, 1)]);
    let cmd = lines[1]["fio_command"].as_str().unwrap();
    assert!(
        cmd.contains("--ioengine=psync")
            && cmd.contains("--numjobs=4")
            && cmd.contains("--iodepth=1"),
        "{cmd}"
    );
}

#[test]
fn a_fifo_is_refused_before_open_blocks() {
    // `bench --file FIFO` hung forever in open().
    let dir = scratch("fifo");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut child = bin()
        .args(["bench", "--file", fifo.to_str().unwrap(), "--ops", "4"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed().as_secs() > 20 {
            let _ = child.kill();
            panic!("bench --file FIFO still blocked after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
}

#[test]
fn a_block_device_is_read_and_written_only_when_allowed() {
    // `--file /dev/loop0` was refused as "not a regular file". Needs root
    // and a free loop device; skipped loudly otherwise.
    let dir = scratch("blockdev");
    let img = dir.join("dev.img");
    std::fs::write(&img, vec![5u8; 4 << 20]).unwrap();
    let out = Command::new("losetup")
        .args(["-f", "--show", img.to_str().unwrap()])
        .output();
    let dev = match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_string(),
        Ok(o) => {
            eprintln!(
                "SKIPPED: no loop device: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!("SKIPPED: no loop device: losetup: {e}");
            return;
        }
    };
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let _detach = Detach(dev.clone());
    let o = run(&["--file", &dev, "--ops", "50", "--json", "--driver", "pool"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(r["file_size"], 4 << 20, "the size comes from the device");
    // Writing is refused without --allow-write, and the device untouched.
    let o = run(&["--file", &dev, "--rw", "write", "--ops", "4"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--allow-write"), "{}", stderr(&o));
    let o = run(&[
        "--file",
        &dev,
        "--rw",
        "randwrite",
        "--ops",
        "8",
        "--allow-write",
        "--driver",
        "pool",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(img.exists());
    assert_eq!(
        std::fs::metadata(&img).unwrap().len(),
        4 << 20,
        "grew past the device"
    );
}

/// The table shows each result as soon as it is known: a sweep interrupted
/// in its second job has printed the first one's row (it printed nothing
/// before the end of the whole sweep).
#[test]
fn each_row_is_printed_when_its_job_is_done() {
    use std::io::BufRead;
    let dir = scratch("rows");
    let mut child = bin()
        .args([
            "bench",
            "--dir",
            dir.to_str().unwrap(),
            "--size",
            "16M",
            "--driver",
            "sync",
            "--concurrency",
            "1,2",
            "--runtime",
            "8s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Each job runs 8 s: the first row is due after about 8 s, and the
    // sweep ends after about 16 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(13);
    let row = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("overlap ") => break line,
            Ok(_) => continue,
            Err(_) => {
                let _ = child.kill();
                panic!("no row appeared while the sweep was still running");
            }
        }
    };
    assert!(child.try_wait().unwrap().is_none(), "the sweep ended early");
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let _ = child.wait();
    assert!(row.contains(" sync "), "{row}");
    assert_no_leftovers(&dir);
}

/// `--driver tokio-fs` gives every task a file of its own: with a
/// `try_clone` of one file each, tasks would seek and read on each other's
/// shared position ("early eof" at valid offsets about one run in two at
/// 64 tasks). `--driver spawn-blocking` reads positionally (`pread`).
/// Several runs, since such a race shows only in some.
#[test]
fn tokio_baselines_at_concurrency_64_read_every_byte() {
    let dir = scratch("tokio-baselines");
    for round in 0..4 {
        for rw in ["randread", "read"] {
            let lines = run_json(
                &dir,
                &[
                    "--driver",
                    "tokio-fs,spawn-blocking",
                    "--rw",
                    rw,
                    "--concurrency",
                    "64",
                    "--size",
                    "1M",
                    "--bs",
                    "4k",
                    "--ops",
                    "1000",
                ],
            );
            assert_eq!(lines.len(), 2, "round {round} {rw}");
            for r in &lines {
                check_schema(r);
                assert!(
                    ["tokio-fs", "spawn-blocking"].contains(&r["driver"].as_str().unwrap()),
                    "{r}"
                );
                assert_eq!(r["concurrency"], 64);
                assert_eq!(r["ops"], 1000, "round {round} {rw}: {r}");
                assert_eq!(r["bs"], 4096);
            }
        }
    }
}
