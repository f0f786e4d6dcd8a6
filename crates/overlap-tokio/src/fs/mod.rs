//! Filesystem operations: the names of `tokio::fs`, with the same
//! signatures and behaviour, so that `use overlapped_tokio::fs;` replaces
//! `use tokio::fs;`.
//!
//! What has an io_uring opcode is an operation of the [`overlapped`] engine
//! (io_uring where the kernel allows it, else the engine's bounded thread
//! pool; an opcode missing on an older kernel falls back to its system call
//! by itself). What has none runs on tokio's blocking pool
//! (`spawn_blocking`), as in tokio:
//!
//! | item | runs on | how |
//! | --- | --- | --- |
//! | [`File::open`], [`File::create`], [`File::create_new`], [`OpenOptions::open`] | engine | `openat` (with O_DIRECT, then `statx` for the alignment) |
//! | `File` as `AsyncRead` | engine | `read` at the file's own cursor (positional, no `lseek`) |
//! | `File` as `AsyncWrite` (also vectored), `flush`, `shutdown` | engine | `write` at the cursor (`O_APPEND`: at the end); writes made while one is in flight are taken at once and written after it as one `write` (write-behind, below) |
//! | `File` as `AsyncSeek` | engine / none | `SeekFrom::End` asks `statx`; `Start` and `Current` need no system call |
//! | [`File::sync_all`], [`File::sync_data`] | engine | `fsync`, `fdatasync` |
//! | [`File::set_len`] | engine | `ftruncate` (Linux 6.9; the system call before) |
//! | [`File::try_clone`] | calling thread | `fcntl(F_DUPFD_CLOEXEC)` (does no I/O) |
//! | [`File::from_std`], [`File::into_std`], [`File::try_into_std`] | calling thread | `fcntl(F_GETFL)`, `lseek` (no I/O; `from_std` of an O_DIRECT file also `statx` for its alignment) |
//! | [`File::metadata`] | blocking pool | `fstat`: a `std::fs::Metadata` can only come from std ([`File::statx`] uses the engine) |
//! | [`File::set_permissions`], [`File::set_times`] | blocking pool | `fchmod`, `utimensat`: no opcode |
//! | [`read`], [`read_to_string`] | engine (+ calling thread) | `openat`, `read`s; the size hint by `statx(AT_STATX_DONT_SYNC)` of the open file on the calling thread (in-memory attributes, no I/O) |
//! | [`write()`] | engine | `openat`, `write`s |
//! | [`copy`], [`copy_reporting`] | blocking pool (+ engine) | one task as std's copy, which tokio's runs there: `openat`, `fstat`, `openat`, `copy_file_range` (io_uring has no opcode for it), `fchmod`; where the kernel refuses `copy_file_range`, `read`s and `write`s through the engine, then `fchmod` |
//! | [`create_dir`], [`create_dir_all`], [`DirBuilder::create`] | engine | `mkdirat` (and `statx` to tell an existing directory) |
//! | [`remove_file`], [`remove_dir`] | engine | `unlinkat` |
//! | [`rename`] | engine | `renameat` |
//! | [`hard_link`], [`symlink`] | engine | `linkat`, `symlinkat` |
//! | [`try_exists`] | engine (or calling thread) | `statx`; of a path the dentry cache holds, on a local file system, on the calling thread from memory (see `overlapped::path::metadata`) |
//! | [`metadata`], [`symlink_metadata`] | blocking pool | `statx` by std: a `std::fs::Metadata` can only come from std ([`statx`], [`symlink_statx`] use the engine) |
//! | [`read_dir`], [`ReadDir`], [`DirEntry::metadata`], [`DirEntry::file_type`] | blocking pool | `getdents64`: no opcode |
//! | [`remove_dir_all`] | blocking pool | std's (it guards against symbolic-link races with `openat` and `unlinkat` relative to directory descriptors) |
//! | [`canonicalize`], [`read_link`], [`set_permissions`] | blocking pool | `realpath`, `readlink`, `chmod`: no opcode |
//!
//! # Where writes and copies run, and why
//!
//! - A **buffered write** is an engine `write`. io_uring first tries it
//!   without blocking on file systems that allow that (XFS, btrfs: the
//!   write is a memory copy into the page cache, done inline); ext4 offers
//!   io_uring no non-blocking buffered writes, so there each write goes to
//!   a kernel worker (`iou-wrk`), a thread hand-off as tokio's
//!   `spawn_blocking` is. A `pwritev2(RWF_NOWAIT)` on the calling thread,
//!   as reads do, would not help: ext4 refuses `RWF_NOWAIT` for buffered
//!   writes (`EOPNOTSUPP`) and the others already complete inline. What
//!   costs is the number of hand-offs: `tokio::io::copy` and a `BufWriter`
//!   write 8 KiB at a time. So `File` writes **behind**: the first write
//!   starts at once (as tokio's), and while it is in flight later
//!   `poll_write`s are copied into a second buffer (up to
//!   [`File::max_buf_size`], 2 MiB) and return at once; that buffer is
//!   written, as one `write`, as soon as the one in flight completes.
//!   Many 8 KiB writes become a few of up to 2 MiB, one hand-off each.
//!   Positions, `flush` (it waits for every byte taken), `O_APPEND` (each
//!   write at the end, in order) and errors (the first error ends the
//!   chain and comes from the next write or `flush`, as any write's; the
//!   bytes not written stay behind, see below) are as without it. Not for
//!   clones sharing a position (each write takes its range when it
//!   starts), nor O_DIRECT files (the caller aligns each transfer).
//!   Memory: at most two buffers of `max_buf_size` per file.
//! - [`write()`] writes the whole contents in pieces of up to 8 MiB, each
//!   one engine `write`.
//! - [`copy`] runs as one task on the blocking pool, as tokio's (std's
//!   `fs::copy`): `copy_file_range` moves the bytes inside the kernel (no
//!   copy through user space; a reflink where the file system shares
//!   extents). io_uring has no `copy_file_range` opcode (its `splice`
//!   needs a pipe between two files), and for a small file the hand-offs,
//!   not the bytes, are the cost, so one task does the opens, the copy and
//!   the `fchmod`. Where the kernel refuses `copy_file_range` (another
//!   file system type, `/proc`), reads and writes through the engine.
//!   `crates/overlap-tokio/examples/write_copy.rs` measures each of these
//!   against `tokio::fs`.
//!
//! Errors are `std::io::Error`s with the kinds tokio's have, and with the
//! kernel's errno (`raw_os_error`) when it came from the kernel.
//!
//! As in tokio, a function's arguments live until its future completes (a
//! `tempfile::NamedTempFile` given by value keeps its file until then).
//! Unlike tokio's, every function also works when its future is polled
//! outside a tokio runtime (`futures::executor::block_on`,
//! [`overlapped::block_on`]): what would run on tokio's blocking pool then runs
//! on a thread of its own.
//!
//! # Differences from `tokio::fs`
//!
//! - `metadata`, `symlink_metadata`, `File::metadata` and
//!   `DirEntry::metadata` return `std::fs::Metadata`, which only std can
//!   make, so they run on the blocking pool; [`statx`], [`symlink_statx`]
//!   and [`File::statx`] give the same facts through the engine.
//! - `File` reads and writes at a position of its own (shared with its
//!   [`File::try_clone`] copies as tokio's clones share theirs, each read,
//!   write and seek moving it atomically for all; a write takes its range
//!   when it starts), not at the descriptor's offset: another
//!   descriptor for the same open file made outside this crate (a `dup`
//!   kept before [`File::from_std`]) does not see the position move. The
//!   descriptor's offset is set when the file goes back to std.
//! - [`File::into_std`] leaves the std file at the position the reader has
//!   reached; tokio's leaves it after the bytes it had read ahead.
//! - After a write to a file opened for appending, the position is the end
//!   of the file as `statx` reports it when next needed, not the end of
//!   that write taken atomically (they differ only if someone else appends
//!   meanwhile).
//! - A write's error reported later (at the next write or `flush`) keeps
//!   its errno; tokio's keeps only its kind.
//! - A write made while another is in flight returns at once (taken behind
//!   it, see above) where tokio's waits for the one in flight.
//! - A write that fails (ENOSPC, EIO, ...) reports its error from the next
//!   write or `flush`, as tokio's, but its bytes are not dropped: what the
//!   kernel did not take, and the bytes taken behind it, stay behind, and
//!   each later `flush` (or write) tries them again first, in order. tokio's
//!   drops them. (A seek in between moves where they land: they are
//!   written at the position of the retry.)
//!
//! # Windows
//!
//! The table above is Linux's. On Windows every engine operation goes to
//! the engine's I/O completion port driver (reads and writes as overlapped
//! `ReadFile`/`WriteFile`, the rest on its threads), with no reactor ring:
//! the completion port's threads wake the task. What differs follows
//! `tokio::fs` on Windows: `symlink_file` and `symlink_dir` (std's, on
//! the blocking pool) instead of `symlink`; [`OpenOptions`] has
//! `share_mode`, `custom_flags` and `attributes` instead of `mode` and
//! `custom_flags(i32)`; `DirBuilder::mode` and `DirEntry::ino` are Unix's;
//! [`copy`] is std's (`CopyFileExW`) on the blocking pool. A std file's
//! handle is synchronous and the engine's overlapped, a property of the
//! open file: [`File::from_std`] opens the file again for overlapped I/O
//! (`ReOpenFile`, same access) and closes the std handle, and
//! [`File::into_std`] opens it again for synchronous I/O; the position goes
//! along. Errors the engine finds before any system call carry the Win32
//! code std would give (`ERROR_ACCESS_DENIED` for a read or write without
//! the access, `ERROR_INVALID_HANDLE` for a closed file).
//!
//! # Acknowledged bytes: drop, the runtime's end, the budget
//!
//! This module keeps overlap's contract, "An acknowledged byte is never
//! lost" (`docs/acknowledged-bytes.md` in overlap's repository): a byte
//! `write` acknowledged (`Ok(n)`), in the file or still behind, reaches the
//! file.
//!
//! - A [`File`] dropped without `flush`, with a write in flight and bytes
//!   behind it, finishes them on tokio's blocking pool (on a thread of its
//!   own outside a runtime), never as a runtime task: a runtime dropped or
//!   ended with `shutdown_timeout` right after does not cut them short.
//!   Dropping a runtime waits for its blocking pool, so when the runtime's
//!   drop returns (the end of `#[tokio::main]` too, before the process
//!   exits) the bytes are written, as `tokio::fs`'s are; after
//!   `shutdown_timeout` they are written while the process lives on. Only
//!   the process's end before that (`exit`, a signal) can lose them. A
//!   dropped file's write that fails, with no caller left to tell, is
//!   written to stderr.
//! - The engine's shutdown (`overlapped_tokio::engine().shutdown()`) waits for
//!   the operations in flight; later calls fail at once with the engine's
//!   shutdown error (`io::ErrorKind::NotConnected`, "the engine has been
//!   shut down"), and so does the write of bytes still behind (the next
//!   `flush` reports it). In a child made by `fork`, a copy of the parent's
//!   file fails at once with the forked error (`io::ErrorKind::Other`,
//!   naming the fork).
//! - Concurrent tasks share a `File` as with tokio (`Arc<Mutex<File>>`):
//!   each `write_all` lands whole at the position, in the order the lock
//!   gives; a `flush` writes every byte acknowledged before it. Positional
//!   writes ([`File::write_all_at`]) through an `Arc<File>` need no lock.
//! - tokio's cooperative budget: every operation through the engine, and
//!   every read answered on the calling thread from the page cache, takes a
//!   unit of the task's budget as `tokio::fs`'s operations do; a task whose
//!   budget is spent gets `Pending` (and is woken at once), so a task
//!   reading cached data in a loop lets the others (timers included) run,
//!   and a runtime's shutdown can stop it.
//! - There is no `From<std::fs::OpenOptions>` for [`OpenOptions`] (std's
//!   options cannot be read back).
//! - `tokio_stream::wrappers::ReadDirStream::new` takes tokio's `ReadDir`
//!   and so not this one: with the feature `stream`,
//!   `overlapped_tokio::wrappers::ReadDirStream` is the same wrapper (`new`,
//!   `into_inner`, `Stream<Item = io::Result<DirEntry>>`) for [`ReadDir`];
//!   switch its `use` line as this module's.
//! - On an O_DIRECT file (by [`OpenOptions::direct`] or `custom_flags`),
//!   an `AsyncRead`/`AsyncWrite` transfer whose buffer, offset or length is
//!   not aligned (the internal buffer is a `Vec`, aligned only by chance)
//!   fails with `InvalidInput` before any system call, where std's would
//!   get `EINVAL` from the kernel; use [`File::read_at`] and
//!   [`File::write_all_at`] with `overlapped::AlignedBuf`s.

mod copy;
mod create_dir;
mod file;
mod link;
mod metadata;
mod open_options;
mod read;
mod read_dir;
mod remove;
pub(crate) mod support;
mod write;

pub use copy::{copy, copy_reporting, CopyReport};
pub use create_dir::{create_dir, create_dir_all, DirBuilder};
pub use file::File;
#[cfg(unix)]
pub use link::symlink;
pub use link::{canonicalize, hard_link, read_link, rename};
#[cfg(windows)]
pub use link::{symlink_dir, symlink_file};
pub use metadata::{metadata, set_permissions, statx, symlink_metadata, symlink_statx, try_exists};
pub use open_options::OpenOptions;
pub use read::{read, read_to_string};
pub use read_dir::{read_dir, DirEntry, ReadDir};
pub use remove::{remove_dir, remove_dir_all, remove_file};
pub use std::fs::FileTimes;
pub use write::write;
