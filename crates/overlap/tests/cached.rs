//! What the engine answers from the kernel's caches on the calling thread,
//! with no trip through the driver: the metadata of a path the dentry
//! cache holds, and the open of one (io_uring's own first attempt at an
//! open, made without the ring). Each gives what the driver gives.

use std::io::ErrorKind;

use crate::common::*;
use crate::paths::{assert_errno, kind_of};
use overlapped::path;
use overlapped::OpenOptions;

per_driver!(
    #[cfg(target_os = "linux")]
    metadata_of_a_cached_path_is_answered_on_the_caller,
    #[cfg(target_os = "linux")]
    opening_a_cached_path_on_io_uring_skips_the_ring,
    #[cfg(target_os = "linux")]
    an_inline_open_waits_for_nothing_io_uring_would_not,
);

/// `metadata` of a path the dentry cache holds, on a local file system, is
/// answered on the calling thread (`openat2(RESOLVE_CACHED)` + `statx`),
/// not by a kernel worker: counted as one operation completed inline, with
/// the same answer as with the fast path off; what it cannot answer (a
/// file system not known to be local: /proc) goes through the driver.
#[cfg(target_os = "linux")]
fn metadata_of_a_cached_path_is_answered_on_the_caller(d: Driver) {
    let dir = tempdir(); // on the repository's file system (ext4 here)
    let f = dir.path().join("f");
    std::fs::write(&f, vec![1u8; 5000]).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink("f", &link).unwrap();
    let std_meta = std::fs::metadata(&f).unwrap();
    // Walked once, so that every component is in the dentry cache.
    let on = d.engine();
    let off = d.builder().cache_fast_path(false).build().unwrap();

    let before = on.stats();
    let fast = path::metadata(&on, &f).wait().unwrap();
    let after = on.stats();
    // Local by the fast path's list (a few of them), on a kernel naming the
    // file system without asking it (statmount and STATX_MNT_ID_UNIQUE:
    // 6.8).
    let local = matches!(
        nix_fs_type(dir.path()),
        0xEF53 | 0x5846_5342 | 0x9123_683E | 0x0102_1994 | 0xF2F5_2010
    ) && kernel_at_least(6, 8);
    assert_eq!(after.submitted - before.submitted, 1);
    assert_eq!(after.completed - before.completed, 1);
    if local {
        assert_eq!(
            after.completed_inline - before.completed_inline,
            1,
            "a cached path on a local file system is answered inline"
        );
    } else {
        eprintln!(
            "SKIPPED (partly): {} is not a file system the fast path knows as local, \
             or the kernel is older than 6.8",
            dir.path().display()
        );
    }
    let slow = path::metadata(&off, &f).wait().unwrap();
    assert_eq!(fast.len, 5000);
    assert_eq!(
        (fast.ino, fast.dev, fast.len),
        (slow.ino, slow.dev, slow.len)
    );
    assert_eq!(fast.modified, Some(std_meta.modified().unwrap()));
    assert_eq!(fast.modified, slow.modified);

    // A symbolic link: followed by metadata, itself by symlink_metadata.
    assert!(path::metadata(&on, &link).wait().unwrap().is_file());
    let itself = path::symlink_metadata(&on, &link).wait().unwrap();
    assert!(itself.is_symlink());
    assert_eq!(itself.len, 1);

    // Absent: ENOENT (and ENOTDIR below a file), as the kernel's statx says;
    // looked up once first, so that the dentry cache holds the absence.
    assert!(std::fs::metadata(dir.path().join("absent")).is_err());
    let before = on.stats();
    assert_errno(
        path::metadata(&on, dir.path().join("absent")).wait(),
        libc::ENOENT,
        ErrorKind::NotFound,
    );
    let absent_inline = on.stats().completed_inline - before.completed_inline;
    assert_errno(
        path::metadata(&on, f.join("below")).wait(),
        libc::ENOTDIR,
        kind_of(libc::ENOTDIR),
    );
    let after = on.stats();
    assert_eq!(after.completed - before.completed, 2);
    assert_eq!(after.errors - before.errors, 2);
    if local {
        assert_eq!(
            absent_inline, 1,
            "an absent path the dentry cache knows is answered inline"
        );
    }

    // /proc is not a file system the fast path trusts: the driver answers
    // (io_uring's kernel worker: not inline; the pool's may be).
    let before = on.stats();
    let proc = path::metadata(&on, "/proc/self/status").wait().unwrap();
    let after = on.stats();
    assert!(proc.is_file());
    assert_eq!(after.completed - before.completed, 1);
    if on.driver().kind == overlapped::DriverKind::Uring {
        assert_eq!(
            after.completed_inline, before.completed_inline,
            "/proc is answered by the driver, not from the caller's cache"
        );
    }
}

/// Whether the running kernel is `major.minor` or later (`uname`).
#[cfg(target_os = "linux")]
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is writable.
    assert_eq!(unsafe { libc::uname(&mut u) }, 0);
    // SAFETY: uname NUL-terminates `release`.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// The file system type (`statfs.f_type`, a 32-bit magic number) of `p`.
#[cfg(target_os = "linux")]
fn nix_fs_type(p: &std::path::Path) -> u32 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs is plain old data; `c` is NUL-terminated.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut s) }, 0);
    #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
    let t = s.f_type as u32;
    t
}

/// On io_uring, the open of a path the dentry cache holds, that creates
/// and truncates nothing, is made on the calling thread (one operation,
/// counted as completed inline, with no system call to submit it) and
/// gives the file the driver would: its
/// access mode, its status flags (no `O_NONBLOCK` left unless asked for),
/// its errors with their errno. An open that creates or truncates, or
/// with the fast path off, goes through the driver.
#[cfg(target_os = "linux")]
fn opening_a_cached_path_on_io_uring_skips_the_ring(d: Driver) {
    if let Some(why) = no_resolve_cached() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = tempdir();
    let f = dir.path().join("f");
    std::fs::write(&f, b"cached bytes").unwrap();
    assert!(std::fs::metadata(&f).is_ok()); // every component now cached
    let on = d.engine();
    let uring = on.driver().kind == overlapped::DriverKind::Uring;
    // The open's result, and whether it was made on the calling thread.
    let inline_of = |open: &dyn Fn() -> overlapped::Result<overlapped::File>| {
        let before = on.stats();
        let res = open();
        let after = on.stats();
        assert_eq!(after.completed - before.completed, 1, "one operation");
        let submitted = after.submit_syscalls - before.submit_syscalls;
        if submitted == 0 {
            assert_eq!(after.completed_inline - before.completed_inline, 1);
        }
        (res, submitted == 0)
    };
    let (file, inline) = inline_of(&|| overlapped::File::open(&on, &f).wait());
    let file = file.unwrap();
    assert_eq!(inline, uring, "inline on io_uring only");
    let (n, buf) = file.read_at(vec![0u8; 64], 0).wait();
    assert_eq!(&buf[..n.unwrap()], b"cached bytes");
    assert_eq!(
        status_flags(&file) & libc::O_NONBLOCK,
        0,
        "O_NONBLOCK cleared"
    );
    let (res, _) = file.write_at(b"x".to_vec(), 0).wait();
    assert!(res.is_err(), "read-only");

    // O_NONBLOCK asked for stays; O_APPEND too.
    let (app, _) = inline_of(&|| {
        OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&on, &f)
            .wait()
    });
    let app = app.unwrap();
    let flags = status_flags(&app);
    assert_ne!(flags & libc::O_NONBLOCK, 0);
    assert_ne!(flags & libc::O_APPEND, 0);
    let (res, _) = app.write_all_at(b"!".to_vec(), 0).wait();
    res.unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"cached bytes!");

    // Errors: as the kernel's open says, inline or not.
    assert!(std::fs::metadata(dir.path().join("absent")).is_err());
    let (res, inline) =
        inline_of(&|| overlapped::File::open(&on, dir.path().join("absent")).wait());
    assert_errno(res, libc::ENOENT, ErrorKind::NotFound);
    assert_eq!(inline, uring, "an absence the cache holds is inline");
    let (res, _) = inline_of(&|| overlapped::File::open(&on, f.join("below")).wait());
    assert_errno(res, libc::ENOTDIR, kind_of(libc::ENOTDIR));
    let (res, _) = inline_of(&|| OpenOptions::new().write(true).open(&on, dir.path()).wait());
    assert_errno(res, libc::EISDIR, kind_of(libc::EISDIR));

    // Creating or truncating: the driver's.
    let (res, inline) = inline_of(&|| {
        OpenOptions::new()
            .write(true)
            .create(true)
            .open(&on, dir.path().join("new"))
            .wait()
    });
    res.unwrap();
    assert!(!inline, "an open that creates goes through the driver");
    let (res, inline) = inline_of(&|| {
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&on, &f)
            .wait()
    });
    res.unwrap();
    assert!(!inline, "an open that truncates goes through the driver");
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 0);

    let off = d.builder().cache_fast_path(false).build().unwrap();
    let before = off.stats();
    overlapped::File::open(&off, dir.path().join("new"))
        .wait()
        .unwrap();
    assert!(
        off.stats().submit_syscalls > before.submit_syscalls,
        "with the fast path off, the driver opens"
    );
}

/// The inline open waits for nothing: a FIFO opened for reading with no
/// writer opens at once, as io_uring's open does (which is why it is
/// inline on io_uring only: the pool's open waits for a writer), and a
/// FIFO opened for writing with no reader fails with `ENXIO`, as
/// io_uring's does.
#[cfg(target_os = "linux")]
fn an_inline_open_waits_for_nothing_io_uring_would_not(d: Driver) {
    let engine = d.engine();
    if engine.driver().kind != overlapped::DriverKind::Uring {
        eprintln!("SKIPPED: the pool's open of a FIFO waits for the other end, by design");
        return;
    }
    if let Some(why) = no_resolve_cached() {
        eprintln!("SKIPPED: {why} (the driver's open of the FIFO would wait for a writer)");
        return;
    }
    let dir = tempdir();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let before = engine.stats();
    let r = overlapped::File::open(&engine, &fifo)
        .wait()
        .expect("no writer needed");
    assert_eq!(
        engine.stats().submit_syscalls,
        before.submit_syscalls,
        "inline"
    );
    assert_eq!(status_flags(&r) & libc::O_NONBLOCK, 0, "reads of it wait");
    drop(r);
    let w = OpenOptions::new().write(true).open(&engine, &fifo).wait();
    assert_errno(w, libc::ENXIO, kind_of(libc::ENXIO));
}

/// Why the open on the calling thread cannot be made here, if it cannot:
/// `openat2` with `RESOLVE_CACHED` needs Linux 5.12.
#[cfg(target_os = "linux")]
fn no_resolve_cached() -> Option<String> {
    /// `RESOLVE_CACHED` (linux/openat2.h).
    const RESOLVE_CACHED: u64 = 0x20;
    // `struct open_how`: flags, mode, resolve.
    let how = [
        libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64,
        0,
        RESOLVE_CACHED,
    ];
    // SAFETY: a NUL-terminated path and an open_how of three u64s, only
    // read by the kernel; the descriptor returned is closed below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    };
    if fd < 0 {
        return Some(format!(
            "openat2(RESOLVE_CACHED) refused ({}): Linux 5.12 or later needed",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the descriptor was just returned to us alone.
    unsafe { libc::close(fd as i32) };
    None
}

/// The status flags (`F_GETFL`) of `file`'s descriptor.
#[cfg(target_os = "linux")]
fn status_flags(file: &overlapped::File) -> i32 {
    // SAFETY: reads the flags of a descriptor the file keeps open.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    assert!(flags >= 0);
    flags
}
