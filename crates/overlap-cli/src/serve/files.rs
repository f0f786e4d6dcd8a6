//! What every `--io` of `overlap serve` serves: regular files (and
//! directories, for their `index.html`), never a FIFO, socket or device,
//! whose open or read could wait for ever (a FIFO's open waits for a
//! writer; `/dev/zero` never ends). Such a path is `NotFound` (a 404), for
//! its metadata as for its open, so that `HEAD` and `GET` agree.

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
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

/// Opens `path` for reading if it is served. `O_NONBLOCK` makes the open
/// of a FIFO return at once (without it, it waits for a writer); the type
/// is then checked on the open file (no race with a rename), and the flag
/// cleared. A socket (whose open fails with `ENXIO`) is not served either.
pub fn open(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // A socket's open.
            Some(libc::ENXIO) => not_served(),
            _ => e,
        })?;
    check(file.metadata()?)?;
    // SAFETY: sets the status flags of a descriptor `file` owns; of those
    // F_SETFL sets, this read-only open set O_NONBLOCK only.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}
