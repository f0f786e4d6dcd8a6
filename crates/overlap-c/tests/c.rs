//! The C test suite (`tests/c/*.c`) and the C examples (`examples/c/` at
//! the repository's root), compiled with the system's C compiler against
//! the liboverlap this build made, and run on every driver (io_uring,
//! Linux AIO beside the pool, the pool: `OVERLAP_DRIVER`):
//!
//! 1. linked with the shared library, run as they are;
//! 2. linked with the static library and built with AddressSanitizer
//!    (`-fsanitize=address`, leak detection on), run again.
//!
//! `tests/c/torture.c` is the acknowledged-byte torture suite
//! (docs/acknowledged-bytes.md): its `torture: c DRIVER SCENARIO ...` lines
//! are printed here, for `--show-output` and the torture matrix.
//!
//! A driver the machine does not allow is a loud skip (the C program exits
//! 77 with a `SKIPPED:` line); so is AddressSanitizer when the compiler
//! cannot build with it. Under `crates/no-uring` io_uring is refused, so the
//! uring runs skip and the rest run.

#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

const DRIVERS: [&str; 3] = ["uring", "aio", "pool"];

/// The longest one C program may run.
const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Where cargo put liboverlap_c.{so,a}: beside this test's binary.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    for dir in [deps.clone(), deps.parent().unwrap().to_path_buf()] {
        if dir.join("liboverlap_c.a").exists() && dir.join("liboverlap_c.so").exists() {
            return dir;
        }
    }
    panic!(
        "liboverlap_c.so/.a not found beside {}: build the crate first (cargo build -p overlapped-c)",
        deps.display()
    );
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn out_dir() -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("overlap-c-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A directory with the shared library under its installed names
/// (`liboverlap.so` -> `liboverlap.so.0` -> the built file), as
/// scripts/install-liboverlap lays it out: the soname is
/// `liboverlap.so.0`. Made once per test process: the tests run in
/// parallel, and two of them removing and re-making the same links raced
/// (one's `symlink` found the other's link: `EEXIST`).
fn installed_layout() -> PathBuf {
    static LAYOUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LAYOUT
        .get_or_init(|| {
            let dir = out_dir().join("lib");
            std::fs::create_dir_all(&dir).unwrap();
            let so = lib_dir().join("liboverlap_c.so");
            for name in ["liboverlap.so.0", "liboverlap.so"] {
                let link = dir.join(name);
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&so, &link).unwrap();
            }
            dir
        })
        .clone()
}

/// How a program is linked.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    Shared,
    /// Static, with AddressSanitizer.
    Asan,
}

/// Compiles `src` into `out`; panics with the compiler's output on error.
fn compile(src: &Path, out: &Path, link: Link) {
    let lib = lib_dir();
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread",
    ])
    .arg("-I")
    .arg(manifest_dir().join("include"))
    .arg("-I")
    .arg(manifest_dir().join("tests/c"))
    .arg(src)
    .arg("-o")
    .arg(out);
    match link {
        Link::Shared => {
            let lib = installed_layout();
            cmd.arg(format!("-L{}", lib.display()))
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-loverlap");
        }
        Link::Asan => {
            cmd.args(["-fsanitize=address", "-fno-omit-frame-pointer"])
                .arg(lib.join("liboverlap_c.a"))
                .args(["-ldl", "-lm", "-lrt", "-lgcc_s"]);
        }
    }
    cmd.arg("-lm");
    let o = cmd.output().expect("run the C compiler");
    assert!(
        o.status.success(),
        "compiling {} failed:\n{}{}",
        src.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Why AddressSanitizer cannot be used here, if it cannot.
fn asan_unavailable() -> Option<String> {
    let dir = out_dir();
    let src = dir.join("asan-probe.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let exe = dir.join("asan-probe");
    let o = Command::new(cc())
        .args(["-fsanitize=address"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output();
    match o {
        Err(e) => Some(format!("{}: {e}", cc())),
        Ok(o) if !o.status.success() => Some(String::from_utf8_lossy(&o.stderr).into_owned()),
        Ok(_) => match Command::new(&exe).output() {
            Ok(r) if r.status.success() => None,
            Ok(r) => Some(format!(
                "an empty program built with it fails: {}",
                String::from_utf8_lossy(&r.stderr)
            )),
            Err(e) => Some(e.to_string()),
        },
    }
}

/// Runs `exe args` on `driver`; returns its stdout. Exit 77 prints its
/// SKIPPED line; anything but 0 or 77 fails the test.
fn run(exe: &Path, args: &[&str], driver: &str, link: Link) -> String {
    run_with(exe, args, driver, link, &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// As [`run`], with more environment variables, and a failure returned
/// (its stdout printed first, so that its lines reach the test log).
fn run_with(
    exe: &Path,
    args: &[&str],
    driver: &str,
    link: Link,
    envs: &[(&str, String)],
) -> Result<String, String> {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .env("OVERLAP_DRIVER", driver);
    let (o, took) = run_bounded(cmd);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let tag = if link == Link::Asan { " (ASan)" } else { "" };
    match o.status.code() {
        Some(0) => {
            println!(
                "{} on {driver}{tag}: ok in {took:.2?}\n{stdout}",
                exe.display()
            );
        }
        Some(77) => {
            // The SKIPPED line, for scripts/test's summary.
            println!("{}", stdout.trim());
        }
        // An example (no test harness) whose driver cannot run here.
        Some(2) if stderr.contains("is unavailable") => {
            let what = if driver == "uring" {
                "io_uring"
            } else {
                "Linux AIO"
            };
            println!(
                "SKIPPED: {what} unavailable: {} on {driver}: {}",
                exe.display(),
                stderr.trim()
            );
            return Ok(format!("SKIPPED: {stderr}"));
        }
        _ => {
            println!("{stdout}");
            return Err(format!(
                "{} {args:?} on {driver}{tag} failed ({}{}):\n{stdout}\n{stderr}",
                exe.display(),
                o.status,
                if took > TIME_LIMIT {
                    ", killed at the time limit"
                } else {
                    ""
                }
            ));
        }
    }
    Ok(stdout)
}

/// Runs `cmd` (in the test directory's environment, output collected) for
/// at most [`TIME_LIMIT`]: a hang is a failure with the output so far, not
/// a stuck run.
fn run_bounded(mut cmd: Command) -> (std::process::Output, std::time::Duration) {
    let started = std::time::Instant::now();
    let mut child = cmd
        .env("OVERLAP_TEST_DIR", out_dir())
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:exitcode=66",
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the C program");
    while child.try_wait().expect("wait for the C program").is_none() {
        if started.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child
        .wait_with_output()
        .expect("collect the C program's output");
    (o, started.elapsed())
}

/// The torture suite (`tests/c/torture.c`) on every driver, each run with
/// a fresh small ext4 (`scripts/small-fs`) for its injected ENOSPC, or the
/// reason there is none. Every driver runs even when one fails; its
/// `torture:` lines are printed either way.
fn torture(exe: &Path, link: Link) {
    let script = manifest_dir().join("../../scripts/small-fs");
    let mut failures = Vec::new();
    for d in DRIVERS {
        let fs_dir = out_dir().join(format!("small-fs-{}-{d}", link as u8));
        let mount = Command::new(&script)
            .arg("mount")
            .arg(&fs_dir)
            .arg("8")
            .output();
        let env = match &mount {
            Ok(o) if o.status.success() => (
                "OVERLAP_SMALL_FS",
                String::from_utf8_lossy(&o.stdout).trim().to_string(),
            ),
            Ok(o) => (
                "OVERLAP_SMALL_FS_SKIPPED",
                format!(
                    "scripts/small-fs: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            ),
            Err(e) => ("OVERLAP_SMALL_FS_SKIPPED", format!("scripts/small-fs: {e}")),
        };
        let r = run_with(exe, &[], d, link, &[env]);
        if mount.is_ok_and(|o| o.status.success()) {
            let _ = Command::new(&script).arg("umount").arg(&fs_dir).status();
        }
        if let Err(e) = r {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn suite(link: Link) {
    let dir = out_dir();
    for name in ["api", "threads", "fork", "torture"] {
        let exe = dir.join(format!("{name}-{}", link as u8));
        compile(
            &manifest_dir().join(format!("tests/c/{name}.c")),
            &exe,
            link,
        );
        if name == "torture" {
            torture(&exe, link);
            continue;
        }
        for d in DRIVERS {
            run(&exe, &[], d, link);
        }
    }
}

#[test]
fn c_tests_on_every_driver() {
    suite(Link::Shared);
}

#[test]
fn c_tests_under_address_sanitizer() {
    if let Some(why) = asan_unavailable() {
        println!("SKIPPED: AddressSanitizer unavailable: {why}");
        return;
    }
    suite(Link::Asan);
}

/// The examples compile and run briefly (small operation counts), so that
/// they keep working; their output has the shape the README shows.
#[test]
fn c_examples_build_and_run() {
    let dir = out_dir();
    let examples = manifest_dir().join("../../examples/c");
    let data = dir.join("example-data");
    {
        // 4 MiB of data for the examples to read.
        let block: Vec<u8> = (0..1u32 << 20).map(|i| (i * 13) as u8).collect();
        let mut all = Vec::new();
        for _ in 0..4 {
            all.extend_from_slice(&block);
        }
        std::fs::write(&data, all).unwrap();
    }
    let data = data.to_str().unwrap();
    for name in ["asynchio", "bench", "hello"] {
        let exe = dir.join(format!("example-{name}"));
        compile(&examples.join(format!("{name}.c")), &exe, Link::Shared);
        for d in DRIVERS {
            let out = match name {
                "asynchio" => {
                    asynchio_explains_dirty_pages(&exe, d);
                    run(&exe, &[data, "64"], d, Link::Shared)
                }
                "bench" => run(&exe, &[data, "2000", "4"], d, Link::Shared),
                _ => run(&exe, &[data], d, Link::Shared),
            };
            if out.starts_with("SKIPPED") {
                continue;
            }
            match name {
                "asynchio" => assert!(out.contains("verdict:"), "{out}"),
                "bench" => {
                    assert!(out.contains("W2") && out.contains("W3"), "{out}");
                    assert!(
                        out.contains("reads/s") && out.contains("CPU us/read"),
                        "{out}"
                    );
                }
                _ => assert!(out.contains("read 4096 bytes"), "{out}"),
            }
        }
    }
}

/// 4 MiB written to a new file at `path` (a new inode: ext4 flushes a file
/// truncated and written again at close), synced or left dirty.
fn write_data(path: &Path, sync: bool) {
    let _ = std::fs::remove_file(path);
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7) as u8).collect();
    let mut f = std::fs::File::create(path).unwrap();
    std::io::Write::write_all(&mut f, &data).unwrap();
    if sync {
        f.sync_all().unwrap();
    }
}

/// Dirty plus under-writeback pages in asynchio's `page cache` line, or
/// None when the kernel could not tell (no cachestat before Linux 6.5).
fn unwritten_pages(out: &str) -> Option<u64> {
    let line = out
        .lines()
        .find(|l| l.starts_with("page cache before the reads: "))
        .unwrap_or_else(|| panic!("asynchio does not report the page cache:\n{out}"));
    if line.contains("unknown") {
        return None;
    }
    let num = |word: &str| -> u64 {
        let before = line.split(word).next().unwrap();
        before.rsplit(' ').next().unwrap().parse().unwrap()
    };
    Some(num(" dirty") + num(" under writeback"))
}

/// asynchio on a file just written (its pages dirty: an O_DIRECT read must
/// wait until the kernel writes them back, which io_uring hands to kernel
/// workers) says so in its verdict; on a synced file it does not.
fn asynchio_explains_dirty_pages(exe: &Path, driver: &str) {
    let path = out_dir().join(format!("asynchio-dirty-{driver}"));
    let path_s = path.to_str().unwrap();
    write_data(&path, false);
    let out = run(exe, &[path_s, "64"], driver, Link::Shared);
    if out.starts_with("SKIPPED") {
        return;
    }
    let verdict = out.lines().find(|l| l.starts_with("verdict:")).unwrap();
    match unwritten_pages(&out) {
        None => println!("SKIPPED: asynchio's dirty-page reason: cachestat(2) unavailable:\n{out}"),
        Some(0) => panic!("a file just written had no dirty page before the reads:\n{out}"),
        Some(_) if out.contains("(O_DIRECT)") => assert!(
            verdict.contains("dirty pages") && verdict.contains("written them back"),
            "the verdict does not say that the dirty pages had to be written back:\n{out}"
        ),
        Some(_) => {}
    }
    write_data(&path, true);
    let out = run(exe, &[path_s, "64"], driver, Link::Shared);
    let verdict = out.lines().find(|l| l.starts_with("verdict:")).unwrap();
    assert!(matches!(unwritten_pages(&out), None | Some(0)), "{out}");
    assert!(!verdict.contains("dirty"), "{out}");
    let _ = std::fs::remove_file(&path);
}

/// The README's C example is examples/c/hello.c, which the test above
/// compiles and runs; the link line it shows is pkg-config's.
#[test]
fn readme_c_example_is_hello_c() {
    let root = manifest_dir().join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let hello = std::fs::read_to_string(root.join("examples/c/hello.c")).unwrap();
    let section = readme
        .split("## C: liboverlap")
        .nth(1)
        .expect("the README has a C section");
    let block = section
        .split("```c\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the C section has a C block");
    assert_eq!(
        block, hello,
        "README.md's C example differs from examples/c/hello.c"
    );
    assert!(
        section.contains("cc examples/c/hello.c $(pkg-config --cflags --libs overlap) -o hello")
    );
    assert!(hello.lines().count() <= 26, "a short example");
}
