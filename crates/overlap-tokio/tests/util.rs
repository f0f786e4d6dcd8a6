//! What the tests share: the per-runtime macro, temporary directories, error summaries.
#![allow(dead_code, unused_macros)]

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

/// For each `async fn name()`, the tests `multi_thread::name` and
/// `current_thread::name`.
/// A name may carry attributes (`#[cfg(target_os = "linux")] name`), given
/// to both tests.
macro_rules! rt_tests {
    ($($(#[$m:meta])* $name:ident),+ $(,)?) => {
        mod multi_thread {
            $(
                $(#[$m])*
                #[test]
                fn $name() {
                    crate::util::multi_thread().block_on(super::$name());
                }
            )+
        }
        mod current_thread {
            $(
                $(#[$m])*
                #[test]
                fn $name() {
                    crate::util::current_thread().block_on(super::$name());
                }
            )+
        }
    };
}

pub fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("multi-thread runtime")
}

pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("current-thread runtime")
}

/// A fresh directory under the test target's tmp dir (a real disk).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

/// `n` bytes where each position has a value of its own (mod 251).
pub fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 7 + seed as usize) % 251) as u8)
        .collect()
}

/// The kind and errno of an error result, for comparing with std.
pub fn err_of<T: std::fmt::Debug>(res: io::Result<T>) -> (io::ErrorKind, Option<i32>) {
    match res {
        Err(e) => (e.kind(), e.raw_os_error()),
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
    }
}

/// The system's error codes the tests expect (`raw_os_error`): errno on
/// Linux.
#[cfg(unix)]
pub mod code {
    /// A read or write on a file not opened for it.
    pub const NOT_OPENED: i32 = libc::EBADF;
    /// A file that exists already (`create_new`).
    pub const EXISTS: i32 = libc::EEXIST;
    /// No such file or directory.
    pub const NOT_FOUND: i32 = libc::ENOENT;
    /// An invalid argument.
    pub const INVALID: i32 = libc::EINVAL;
}

/// The system's error codes the tests expect: Win32 errors on Windows.
#[cfg(windows)]
pub mod code {
    /// `ERROR_ACCESS_DENIED`: `ReadFile`/`WriteFile` without the access.
    pub const NOT_OPENED: i32 = 5;
    /// `ERROR_FILE_EXISTS` (`CREATE_NEW`).
    pub const EXISTS: i32 = 80;
    /// `ERROR_FILE_NOT_FOUND`.
    pub const NOT_FOUND: i32 = 2;
    /// `ERROR_INVALID_PARAMETER`.
    pub const INVALID: i32 = 87;
}

/// Polls `cond` until it holds or `limit` passes (yielding to the runtime).
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cond()
}

/// Polls `fut` once; `Some` if it finished.
pub async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut *fut).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// The environment variable that names the test a child process runs.
const CHILD: &str = "OVERLAP_TOKIO_TEST_CHILD";

/// Whether this process is the child running the test `path`
/// (`module::name`).
pub fn is_child(path: &str) -> bool {
    std::env::var(CHILD).as_deref() == Ok(path)
}

/// Runs the test `path` (`module::name`) in a child process with `env`
/// (the process engine, its budget, descriptors and threads are the
/// child's alone), and fails if it fails or has not finished within
/// `limit` (killed: a hang is a failure, never a hung test). Returns the
/// child's stderr.
pub fn in_child(path: &str, env: &[(&str, &str)], limit: Duration) -> String {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", path, "--nocapture", "--test-threads=1"])
        .env(CHILD, path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the child");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap the child");
            panic!(
                "{path}: still running after {limit:?} (hung)\n--- stdout\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("child output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        status.success() && stdout.contains(&format!("CHILD-OK {path}")),
        "{path}: {status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    for l in stderr.lines().filter(|l| l.contains("SKIPPED")) {
        eprintln!("{l} (in child {path})");
    }
    stderr
}

/// In the child: runs `body`; in the parent: runs the child.
pub fn child_test(path: &str, env: &[(&str, &str)], limit: Duration, body: impl FnOnce()) {
    if is_child(path) {
        body();
        println!("CHILD-OK {path}");
    } else {
        in_child(path, env, limit);
    }
}

/// Polls `cond` (sleeping between looks) until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}
