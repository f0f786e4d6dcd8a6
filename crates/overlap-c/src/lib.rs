//! liboverlap: the C ABI of the overlap engine (`include/overlap.h`, which
//! cbindgen generates from this crate; `tests/header.rs` checks that the
//! checked-in header is current).
//!
//! The shape follows what databases ask of an asynchronous I/O interface
//! (liburing, libaio, Windows I/O completion ports, MariaDB's tpool,
//! PostgreSQL's AIO, RocksDB's `ReadAsync`/`Poll`): opaque handles,
//! fixed-width integers, no unions or bitfields (Java's FFM binds it
//! directly), a 64-bit user datum per operation, batch submission that says
//! how many it took, a wait for a minimum and a maximum of completions with
//! a timeout from any number of threads, cancellation, posted completions,
//! and errors as `-errno` with a thread-local message.
//!
//! Every exported function runs its body inside `guard` (`error.rs`): a Rust panic
//! never crosses the boundary (it becomes `-EIO` and a message), and every
//! handle is checked for NULL.
#![allow(non_camel_case_types)]
// The exported functions are C entry points: C callers cannot see Rust's
// `unsafe`, and each function's contract for its pointer arguments (valid
// handles, buffers under the buffer rule) is stated in the header. Every
// dereference is in an `unsafe` block with its `// SAFETY:` reason.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![deny(unsafe_op_in_unsafe_fn)]

mod buf;
mod engine;
mod error;
mod file;
mod port;
#[cfg(windows)]
mod win32;
#[cfg(windows)]
mod windows;

pub use engine::*;
pub use error::*;
pub use file::*;
pub use port::*;
#[cfg(windows)]
pub use win32::*;
#[cfg(windows)]
pub use windows::*;

use std::ffi::c_char;

/// The library's version, as a NUL-terminated string (`"0.1.0"`). The
/// pointer is static: never free it.
///
/// Thread safety: any thread, at any time.
#[no_mangle]
pub extern "C" fn overlap_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}
