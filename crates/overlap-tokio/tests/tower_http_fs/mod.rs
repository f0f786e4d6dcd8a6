//! tower-http 0.7's `ServeDir` and `ServeFile` on the engine (feature
//! `tower-http`).
//!
//! - `serve_dir` and `serve_file` are tower-http's own tests (from its
//!   crates.io package, MIT licence in `LICENSE.tower-http`), with every
//!   `ServeDir` built on `OverlapBackend` and every `ServeFile` being
//!   `overlapped_tokio::tower_http::serve_file`; their fixtures are in
//!   `fixtures/` (tower-http's `test-files` and README).
//! - `backend` checks what those cannot see: that the requests really go
//!   through the engine, symbolic links, nanosecond modification times in
//!   `ETag`, large files, ranges and read sizes.

mod backend;
mod helpers;
mod serve_dir;
mod serve_file;
