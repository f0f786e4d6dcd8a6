//! Helpers: the per-runtime macro, temporary directories, error summaries.
#![allow(dead_code, unused_macros)]

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

/// For each `async fn name()`, the tests `multi_thread::name` and
/// `current_thread::name`.
macro_rules! rt_tests {
    ($($name:ident),+ $(,)?) => {
        mod multi_thread {
            $(
                #[test]
                fn $name() {
                    crate::util::multi_thread().block_on(super::$name());
                }
            )+
        }
        mod current_thread {
            $(
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
