//! What every `--io` of `overlap serve` serves: regular files (and
//! directories, for their `index.html`), never a FIFO, socket or device,
//! whose open or read could wait for ever (a FIFO's open waits for a
//! writer; `/dev/zero` never ends). Such a path is `NotFound` (a 404), for
//! its metadata as for its open, so that `HEAD` and `GET` agree.

use std::fs::{File, Metadata};
use std::io;
use std::path::Path;

/// The error for a path that is not served.
pub fn not_served() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        "not a regular file (a FIFO, socket or device is not served)",
    )
}

fn check(meta: Metadata) -> io::Result<Metadata> {
    if meta.is_file() || meta.is_dir() {
        Ok(meta)
    } else {
        Err(not_served())
    }
}

/// `std::fs::metadata`, `NotFound` for what is not served.
pub fn metadata(path: &Path) -> io::Result<Metadata> {
    check(std::fs::metadata(path)?)
}

/// Opens `path` for reading if it is served, without waiting
/// ([`crate::sys::open_no_wait`]: on Linux a FIFO's open would wait for a
/// writer); the type is then checked on the open file (no race with a
/// rename). A socket (whose open fails) is not served either.
pub fn open(path: &Path) -> io::Result<File> {
    let file = crate::sys::open_no_wait(path)?.ok_or_else(not_served)?;
    check(file.metadata()?)?;
    crate::sys::clear_no_wait(&file)?;
    Ok(file)
}
