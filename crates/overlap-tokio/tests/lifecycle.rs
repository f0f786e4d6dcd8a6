//! Operations outlive the runtime and the thread that polled them
//! (overlapped-tokio's rows of the lifecycle matrix): a runtime dropped or
//! shut down with operations in flight, threads of the blocking pool that
//! end, a runtime nobody runs, two runtimes on one thread, a runtime
//! without its I/O driver.
//!
//! Each scenario runs in a child process of its own (the process engine,
//! its budget, its descriptors and threads are the child's alone), killed
//! and failed if it has not finished within its limit: a hang is a failure,
//! never a hung test. Pipe reads stand for the operations that never
//! complete on their own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use overlapped::DriverKind;
use overlapped_tokio::fs;

/// Runs the test `lifecycle::name` in a child process (see
/// [`crate::util::in_child`]).
fn in_child(name: &str, env: &[(&str, &str)], limit: Duration) -> String {
    crate::util::in_child(&format!("lifecycle::{name}"), env, limit)
}

fn child_test(name: &str, env: &[(&str, &str)], limit: Duration, body: impl FnOnce()) {
    crate::util::child_test(&format!("lifecycle::{name}"), env, limit, body)
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// A FIFO, and a read-write end of it that keeps a writer present (so that
/// opening it for reading never blocks) and writes to it.
fn fifo(dir: &Path) -> (PathBuf, std::fs::File) {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("fifo");
    mkfifo(&path);
    let keep = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    (path, keep)
}

/// The io_uring instances this process has open.
fn rings_open() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("io_uring"))
        .count()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn uring() -> bool {
    overlapped_tokio::engine().driver().kind == DriverKind::Uring
}

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Starts `n` tasks on `rt`, each reading the pipe at `fifo` (nothing is
/// written yet), and returns once all are in flight.
fn start_pipe_reads(rt: &tokio::runtime::Runtime, fifo: &Path, n: usize) {
    let before = overlapped_tokio::engine().in_flight().0;
    for _ in 0..n {
        let fifo = fifo.to_path_buf();
        rt.spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut f = fs::File::open(&fifo).await.unwrap();
            let mut buf = [0u8; 4];
            let _ = f.read(&mut buf).await;
        });
    }
    let engine = overlapped_tokio::engine();
    assert!(
        wait_until(Duration::from_secs(10), || engine.in_flight().0
            >= before + n),
        "the reads went in flight: {:?}",
        engine.in_flight()
    );
}

/// A current-thread runtime dropped with reads in flight, on a
/// thread that lives on. The reads complete when the pipe is written, their
/// budget is released, and a later operation is not stuck behind them.
#[test]
fn runtime_dropped_with_reads_in_flight() {
    child_test(
        "runtime_dropped_with_reads_in_flight",
        &[("OVERLAP_MAX_INFLIGHT_OPS", "4")],
        Duration::from_secs(60),
        || {
            let dir = tempdir();
            let (path, mut writer) = fifo(dir.path());
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            for _ in 0..4 {
                let path = path.clone();
                rt.spawn(async move {
                    use tokio::io::AsyncReadExt;
                    let mut f = fs::File::open(&path).await.unwrap();
                    let mut buf = [0u8; 4];
                    let _ = f.read(&mut buf).await;
                });
            }
            let engine = overlapped_tokio::engine();
            rt.block_on(async {
                while engine.in_flight().0 < 4 {
                    tokio::task::yield_now().await;
                }
            });
            drop(rt);
            // The thread lives on; the pipe is written only now.
            writer.write_all(&[7u8; 16]).unwrap();
            assert!(
                wait_until(Duration::from_secs(10), || engine.in_flight() == (0, 0)),
                "the reads of the dropped runtime completed and released their budget: {:?}",
                engine.in_flight()
            );
            // Another thread's write is not stuck behind them.
            let other = dir.path().join("other");
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(fs::write(&other, b"written")).unwrap();
            })
            .join()
            .unwrap();
        },
    );
}

/// Every blocking-pool thread that polls an overlapped-tokio future
/// (`spawn_blocking` + `Handle::block_on`) leaves no ring behind once it
/// has ended.
#[test]
fn blocking_threads_leave_no_ring_behind() {
    child_test(
        "blocking_threads_leave_no_ring_behind",
        &[],
        Duration::from_secs(120),
        || {
            let dir = tempdir();
            let path = dir.path().join("f");
            std::fs::write(&path, vec![3u8; 8192]).unwrap();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_keep_alive(Duration::from_millis(50))
                .enable_all()
                .build()
                .unwrap();
            // The workers' rings, made first.
            rt.block_on(async {
                let mut v = Vec::new();
                for _ in 0..8 {
                    v.push(tokio::spawn(fs::read(path.clone())));
                }
                for h in v {
                    h.await.unwrap().unwrap();
                }
            });
            let base = rings_open();
            let base_threads = threads();
            for _ in 0..5 {
                rt.block_on(async {
                    let mut v = Vec::new();
                    for _ in 0..8 {
                        let path = path.clone();
                        v.push(tokio::task::spawn_blocking(move || {
                            let h = tokio::runtime::Handle::current();
                            h.block_on(fs::read(&path)).unwrap().len()
                        }));
                    }
                    for h in v {
                        assert_eq!(h.await.unwrap(), 8192);
                    }
                });
                std::thread::sleep(Duration::from_millis(150));
            }
            let ok = wait_until(Duration::from_secs(10), || rings_open() <= base + 1);
            assert!(
                ok,
                "rings open: {} after 40 blocking threads came and went, {base} before \
                 (threads {} now, {base_threads} before)",
                rings_open(),
                threads()
            );
        },
    );
}

/// `Handle::block_on` on a current-thread runtime that nobody runs
/// completes, as tokio::fs does.
#[test]
fn handle_block_on_of_a_runtime_nobody_runs() {
    child_test(
        "handle_block_on_of_a_runtime_nobody_runs",
        &[],
        Duration::from_secs(60),
        || {
            let dir = tempdir();
            let path = dir.path().join("f");
            std::fs::write(&path, b"not run").unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let h = rt.handle().clone();
            let got = std::thread::spawn(move || {
                let mut v = Vec::new();
                for _ in 0..5 {
                    v.push(h.block_on(fs::read(&path)).unwrap());
                }
                v
            })
            .join()
            .unwrap();
            assert!(got.iter().all(|v| v == b"not run"));
            drop(rt);
        },
    );
}

/// Two live current-thread runtimes on one thread, each running
/// file operations in turn.
#[test]
fn two_current_thread_runtimes_on_one_thread() {
    child_test(
        "two_current_thread_runtimes_on_one_thread",
        &[],
        Duration::from_secs(60),
        || {
            let dir = tempdir();
            let path = dir.path().join("f");
            std::fs::write(&path, b"two").unwrap();
            let rt = |_| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
            };
            let (rt1, rt2) = (rt(1), rt(2));
            for _ in 0..3 {
                assert_eq!(rt1.block_on(fs::read(&path)).unwrap(), b"two");
                assert_eq!(rt2.block_on(fs::read(&path)).unwrap(), b"two");
                let p = path.clone();
                let t = rt2.block_on(async move { tokio::spawn(fs::read(p)).await.unwrap() });
                assert_eq!(t.unwrap(), b"two");
            }
        },
    );
}

/// A runtime built without its I/O driver. overlapped-tokio works on
/// it, as tokio::fs does, and prints nothing (tokio's panic is kept off
/// stderr).
#[test]
fn a_runtime_without_io() {
    let name = "a_runtime_without_io";
    if crate::util::is_child(&format!("lifecycle::{name}")) {
        let dir = tempdir();
        let path = dir.path().join("f");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(fs::write(&path, b"no io")).unwrap();
        assert_eq!(rt.block_on(fs::read(&path)).unwrap(), b"no io");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let p = path.clone();
        let got = rt.block_on(async move { tokio::spawn(fs::read(p)).await.unwrap() });
        assert_eq!(got.unwrap(), b"no io");
        println!("CHILD-OK lifecycle::{name}");
        return;
    }
    let stderr = in_child(name, &[], Duration::from_secs(60));
    assert!(
        !stderr.contains("panicked") && !stderr.contains("IO is disabled"),
        "nothing is printed:\n{stderr}"
    );
}

/// A runtime without its I/O driver under `panic = "abort"`: the example
/// `no_io_runtime`, built with the workspace's `panic-abort` profile (every
/// crate compiled to abort), uses overlapped_tokio::fs on runtimes without an
/// I/O driver. A panic in the registration would end such a process (exit
/// 134); it must exit 0 and print nothing on stderr. (`OVERLAP_TOKIO_RINGS=always`, which asks for
/// the rings anyway, brings the abort back: the check can fail.)
#[test]
fn a_runtime_without_io_under_panic_abort() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().expect("the target directory");
    let built = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--profile",
            "panic-abort",
            "-p",
            "overlapped-tokio",
            "--example",
            "no_io_runtime",
        ])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(built.success(), "building the example with panic = abort");
    let exe = target.join("panic-abort/examples/no_io_runtime");
    let dir = tempdir();
    let out = std::process::Command::new(&exe)
        .arg(dir.path())
        .output()
        .expect("the example runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the panic = abort program failed ({}):\n{stderr}",
        out.status
    );
    assert!(stdout.contains("panic strategy abort"), "{stdout}");
    assert!(stderr.is_empty(), "nothing on stderr:\n{stderr}");
}

/// `shutdown_timeout` with reads in flight that never complete on
/// their own returns within its timeout and leaves no worker thread behind
/// (the watcher completes the reads once the pipe is written).
#[test]
fn shutdown_timeout_with_reads_in_flight() {
    child_test(
        "shutdown_timeout_with_reads_in_flight",
        &[],
        Duration::from_secs(60),
        || {
            if !uring() {
                eprintln!(
                    "SKIPPED: shutdown_timeout_with_reads_in_flight: the engine is not on \
                     io_uring (its pool thread blocks in a pipe read, as tokio's would)"
                );
                return;
            }
            let dir = tempdir();
            let (path, mut writer) = fifo(dir.path());
            let base_threads = threads();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            start_pipe_reads(&rt, &path, 8);
            let start = Instant::now();
            rt.shutdown_timeout(Duration::from_millis(100));
            let took = start.elapsed();
            assert!(
                took < Duration::from_millis(1000),
                "shutdown_timeout(100 ms) took {took:?}"
            );
            assert!(
                wait_until(Duration::from_secs(5), || threads() <= base_threads + 1),
                "threads: {} after shutdown, {base_threads} before",
                threads()
            );
            writer.write_all(&[1u8; 64]).unwrap();
            let engine = overlapped_tokio::engine();
            assert!(
                wait_until(Duration::from_secs(10), || engine.in_flight() == (0, 0)),
                "the reads completed after the shutdown: {:?}",
                engine.in_flight()
            );
        },
    );
}
