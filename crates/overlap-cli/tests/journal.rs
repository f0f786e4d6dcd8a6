//! `overlap journal`, run as the built binary: a shell pipeline into a
//! durable journal, dump (text and JSON, UTF-8 and binary), verify on a
//! clean and a corrupt journal, and a tiny bench run's JSON keys.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("journal-cli-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn journal(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_overlap"))
        .arg("journal")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run overlap");
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        input.write_all(bytes).unwrap();
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
    assert_eq!(lines[2], format!("{}\tbase64://4=", lsns[2]));
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
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["record_bytes"], 512);
    assert!(v["records"].as_u64().unwrap() > 0);
    // The scratch journal is removed.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
}
