//! tokio's own `tokio::fs` tests (tokio 1.54.1, `tests/fs*.rs`; MIT,
//! `LICENSE.tokio`) run against `overlapped_tokio::fs`: each file is tokio's
//! with `tokio::fs` renamed, and the few changes each marked
//! "overlapped-tokio:" with its reason. tokio's `io_uring` tests
//! (`fs_uring*.rs`) test tokio's own io_uring driver and its internals;
//! `fs_symlink_*_windows.rs` are Windows' (`symlink_windows.rs` here, both);
//! `fs_open_options_windows.rs` checks the `Debug` form of std's Windows
//! options, which this crate's `OpenOptions` (the engine's) does not print.
//!
//! `tokio_test` (tokio's test helpers, not a dependency here) is replaced
//! by the few items these files use, below.

#![allow(
    clippy::bool_assert_comparison,
    reason = "tokio's tests, kept as they are"
)]

mod fs;
mod fs_canonicalize_dir;
mod fs_copy;
mod fs_dir;
mod fs_file;
mod fs_file_join_error;
mod fs_link;
mod fs_open_options;
mod fs_remove_dir_all;
mod fs_remove_file;
mod fs_rename;
#[cfg(windows)]
mod fs_symlink_windows;
mod fs_try_exists;
mod fs_write;

/// What these tests use of `tokio_test`, with its meaning.
#[allow(unused_imports, unused_macros)]
pub(crate) mod tokio_test {
    /// `tokio_test::assert_ok!`: the value inside `Ok`, or a panic.
    macro_rules! assert_ok {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => panic!("assertion failed: Err({:?})", e),
            }
        };
    }
    /// `tokio_test::assert_err!`: the error inside `Err`, or a panic.
    macro_rules! assert_err {
        ($e:expr) => {
            match $e {
                Ok(v) => panic!("assertion failed: Ok({:?})", v),
                Err(e) => e,
            }
        };
    }
    /// `tokio_test::assert_pending!`.
    macro_rules! assert_pending {
        ($e:expr) => {
            match $e {
                std::task::Poll::Pending => {}
                std::task::Poll::Ready(v) => panic!("ready; value = {:?}", v),
            }
        };
    }
    pub(crate) use {assert_err, assert_ok, assert_pending};

    /// `tokio_test::task`: a future polled by hand, as a task of its own
    /// would be, inside the caller's runtime context.
    pub(crate) mod task {
        use std::future::Future;
        use std::pin::Pin;
        use std::task::{Context, Poll};

        pub(crate) struct Spawn<F> {
            fut: Pin<Box<F>>,
        }

        pub(crate) fn spawn<F: Future>(fut: F) -> Spawn<F> {
            Spawn { fut: Box::pin(fut) }
        }

        impl<F: Future> Spawn<F> {
            pub(crate) fn poll(&mut self) -> Poll<F::Output> {
                let mut cx = Context::from_waker(futures::task::noop_waker_ref());
                self.fut.as_mut().poll(&mut cx)
            }
        }
    }
}
