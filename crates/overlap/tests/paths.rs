//! Path operations (`overlapped::path`) and descriptor conversions
//! (`File::from_fd`, `into_fd`, `try_clone`), on both drivers: each does
//! what its system call does, goes through the engine (counted in its
//! statistics), and reports kernel errors with their errno and refuses bad
//! paths before submission.

use std::io::ErrorKind;
#[cfg(target_os = "linux")]
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use crate::common::*;
use overlapped::path::{self, FileKind};
use overlapped::{Error, File, OpenOptions};

per_driver!(
    rename_moves_and_replaces,
    remove_file_and_remove_dir,
    create_dir_with_mode,
    hard_and_symbolic_links,
    metadata_agrees_with_std,
    try_exists_tells_missing_from_present,
    nul_paths_are_refused_before_submission,
    path_ops_go_through_the_engine,
    #[cfg(target_os = "linux")]
    from_fd_reads_the_access_mode,
    #[cfg(windows)]
    from_handle_reads_the_access_mode,
    #[cfg(target_os = "linux")]
    into_fd_only_when_alone_and_idle,
    #[cfg(windows)]
    into_handle_only_when_alone_and_idle,
    try_clone_duplicates_the_descriptor,
    append_writes_go_to_the_end,
    #[cfg(target_os = "linux")]
    reads_and_writes_on_a_pipe_ignore_the_offset,
    #[cfg(windows)]
    reads_and_writes_on_a_named_pipe_ignore_the_offset,
    dropped_path_operations_still_complete,
);

/// The error each refusal below is, from the system: an errno on Linux, a
/// Win32 error on Windows (where the names differ, Windows' own word).
#[cfg(target_os = "linux")]
mod os {
    pub const NOT_FOUND: i32 = libc::ENOENT;
    /// A missing directory on the way.
    pub const PATH_NOT_FOUND: i32 = libc::ENOENT;
    pub const EXISTS: i32 = libc::EEXIST;
    pub const NOT_EMPTY: i32 = libc::ENOTEMPTY;
    /// Renaming a directory onto a non-empty one.
    pub const ONTO_NON_EMPTY: i32 = libc::ENOTEMPTY;
    /// Removing a directory as a file.
    pub const IS_A_DIRECTORY: i32 = libc::EISDIR;
    /// Removing a file as a directory.
    pub const NOT_A_DIRECTORY: i32 = libc::ENOTDIR;
}

#[cfg(windows)]
mod os {
    pub const NOT_FOUND: i32 = 2; // ERROR_FILE_NOT_FOUND
    pub const PATH_NOT_FOUND: i32 = 3; // ERROR_PATH_NOT_FOUND
    pub const EXISTS: i32 = 183; // ERROR_ALREADY_EXISTS
    pub const NOT_EMPTY: i32 = 145; // ERROR_DIR_NOT_EMPTY
    pub const ONTO_NON_EMPTY: i32 = 5; // ERROR_ACCESS_DENIED
    pub const IS_A_DIRECTORY: i32 = 5; // ERROR_ACCESS_DENIED
    pub const NOT_A_DIRECTORY: i32 = 267; // ERROR_DIRECTORY
}

/// The kind std gives an errno (named kinds newer than the MSRV included).
pub(crate) fn kind_of(errno: i32) -> ErrorKind {
    std::io::Error::from_raw_os_error(errno).kind()
}

#[track_caller]
pub(crate) fn assert_errno(
    res: overlapped::Result<impl std::fmt::Debug>,
    errno: i32,
    kind: ErrorKind,
) {
    match res {
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(errno), "{e:?}");
            assert_eq!(e.kind(), kind, "{e:?}");
            let io: std::io::Error = e.into();
            assert_eq!(io.raw_os_error(), Some(errno), "io::Error keeps the errno");
            assert_eq!(io.kind(), kind);
        }
        Ok(v) => panic!("expected errno {errno}, got Ok({v:?})"),
    }
}

fn rename_moves_and_replaces(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"first").unwrap();
    path::rename(&engine, &a, &b).wait().unwrap();
    assert!(!a.exists());
    assert_eq!(std::fs::read(&b).unwrap(), b"first");
    // Onto an existing file: replaced.
    std::fs::write(&a, b"second").unwrap();
    path::rename(&engine, &a, &b).wait().unwrap();
    assert_eq!(std::fs::read(&b).unwrap(), b"second");
    // A missing source.
    assert_errno(
        path::rename(&engine, &a, &b).wait(),
        os::NOT_FOUND,
        ErrorKind::NotFound,
    );
    assert_eq!(std::fs::read(&b).unwrap(), b"second", "untouched");
    // A directory onto a non-empty directory.
    let (d1, d2) = (dir.path().join("d1"), dir.path().join("d2"));
    std::fs::create_dir(&d1).unwrap();
    std::fs::create_dir(&d2).unwrap();
    std::fs::write(d2.join("x"), b"x").unwrap();
    assert_errno(
        path::rename(&engine, &d1, &d2).wait(),
        os::ONTO_NON_EMPTY,
        kind_of(os::ONTO_NON_EMPTY),
    );
}

fn remove_file_and_remove_dir(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let f = dir.path().join("f");
    let sub = dir.path().join("sub");
    std::fs::write(&f, b"x").unwrap();
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("inner"), b"y").unwrap();

    assert_errno(
        path::remove_file(&engine, &sub).wait(),
        os::IS_A_DIRECTORY,
        kind_of(os::IS_A_DIRECTORY),
    );
    assert_errno(
        path::remove_dir(&engine, &f).wait(),
        os::NOT_A_DIRECTORY,
        kind_of(os::NOT_A_DIRECTORY),
    );
    assert_errno(
        path::remove_dir(&engine, &sub).wait(),
        os::NOT_EMPTY,
        kind_of(os::NOT_EMPTY),
    );
    path::remove_file(&engine, &f).wait().unwrap();
    assert!(!f.exists());
    assert_errno(
        path::remove_file(&engine, &f).wait(),
        os::NOT_FOUND,
        ErrorKind::NotFound,
    );
    path::remove_file(&engine, sub.join("inner"))
        .wait()
        .unwrap();
    path::remove_dir(&engine, &sub).wait().unwrap();
    assert!(!sub.exists());
}

fn create_dir_with_mode(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let sub = dir.path().join("sub");
    path::create_dir(&engine, &sub, 0o750).wait().unwrap();
    let meta = std::fs::metadata(&sub).unwrap();
    assert!(meta.is_dir());
    // (Windows has no mode bits: a directory is made with the default
    // security.)
    #[cfg(target_os = "linux")]
    assert_eq!(meta.permissions().mode() & 0o777, 0o750 & !umask());
    assert_errno(
        path::create_dir(&engine, &sub, 0o755).wait(),
        os::EXISTS,
        ErrorKind::AlreadyExists,
    );
    assert_errno(
        path::create_dir(&engine, dir.path().join("no/such/parent"), 0o755).wait(),
        os::PATH_NOT_FOUND,
        ErrorKind::NotFound,
    );
}

fn hard_and_symbolic_links(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let orig = dir.path().join("orig");
    std::fs::write(&orig, b"linked data").unwrap();

    let hard = dir.path().join("hard");
    path::hard_link(&engine, &orig, &hard).wait().unwrap();
    #[cfg(target_os = "linux")]
    {
        let (m1, m2) = (
            std::fs::metadata(&orig).unwrap(),
            std::fs::metadata(&hard).unwrap(),
        );
        assert_eq!(m1.ino(), m2.ino(), "the same inode");
        assert_eq!(m1.nlink(), 2);
    }
    // Windows: the same file index on the same volume, two links (std's
    // counterparts of `ino` and `nlink` are unstable: the engine's own).
    #[cfg(windows)]
    {
        let m1 = path::metadata(&engine, &orig).wait().unwrap();
        let m2 = path::metadata(&engine, &hard).wait().unwrap();
        assert_eq!((m1.dev, m1.ino), (m2.dev, m2.ino), "the same file");
        assert_eq!(m1.nlink, 2);
    }
    assert_eq!(std::fs::read(&hard).unwrap(), b"linked data");
    assert_errno(
        path::hard_link(&engine, &orig, &hard).wait(),
        os::EXISTS,
        ErrorKind::AlreadyExists,
    );

    let soft = dir.path().join("soft");
    if !symlink_made(&path::symlink(&engine, "orig", &soft).wait(), &soft) {
        return;
    }
    assert_eq!(std::fs::read_link(&soft).unwrap(), PathBuf::from("orig"));
    assert_eq!(std::fs::read(&soft).unwrap(), b"linked data");
    let followed = path::metadata(&engine, &soft).wait().unwrap();
    assert_eq!(followed.kind, FileKind::File);
    assert_eq!(followed.len, 11);
    let itself = path::symlink_metadata(&engine, &soft).wait().unwrap();
    assert!(itself.is_symlink());
    // (On Windows a link is a reparse point with no data: its size is 0.)
    #[cfg(target_os = "linux")]
    assert_eq!(itself.len, 4, "a link's size is its target's length");

    // A dangling link: the link exists, its target does not.
    let dangling = dir.path().join("dangling");
    path::symlink(&engine, dir.path().join("nowhere"), &dangling)
        .wait()
        .unwrap();
    assert!(path::symlink_metadata(&engine, &dangling)
        .wait()
        .unwrap()
        .is_symlink());
    assert_errno(
        path::metadata(&engine, &dangling).wait(),
        os::NOT_FOUND,
        ErrorKind::NotFound,
    );
}

/// Whether the symbolic link `link` was made (`made` is what the engine
/// said). On Windows, a loud no where the system refuses to make one
/// (without the privilege or developer mode), or says it made one that is
/// not there (Wine 8's `CreateSymbolicLinkW` does nothing); any other
/// error fails.
#[track_caller]
fn symlink_made(made: &overlapped::Result<()>, link: &std::path::Path) -> bool {
    #[cfg(windows)]
    match made {
        // ERROR_PRIVILEGE_NOT_HELD, ERROR_NOT_SUPPORTED, ERROR_INVALID_FUNCTION
        Err(e) if matches!(e.raw_os_error(), Some(1314 | 50 | 1)) => {
            eprintln!("SKIPPED (partly): this system makes no symbolic links: {e}");
            return false;
        }
        Ok(()) if std::fs::symlink_metadata(link).is_err() => {
            eprintln!(
                "SKIPPED (partly): this system said it made the symbolic link {} but there \
                 is none",
                link.display()
            );
            return false;
        }
        _ => {}
    }
    let _ = link;
    made.as_ref().expect("symlink");
    true
}

fn metadata_agrees_with_std(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let f = dir.path().join("f");
    std::fs::write(&f, vec![7u8; 12345]).unwrap();
    #[cfg(target_os = "linux")]
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    // Windows' only permission bit: read-only (0o444 then, else 0o666).
    #[cfg(windows)]
    {
        let mut p = std::fs::metadata(&f).unwrap().permissions();
        p.set_readonly(true);
        std::fs::set_permissions(&f, p).unwrap();
    }
    let ours = path::metadata(&engine, &f).wait().unwrap();
    let std = std::fs::metadata(&f).unwrap();
    assert!(ours.is_file() && !ours.is_dir() && !ours.is_symlink());
    assert_eq!(ours.len, std.len());
    #[cfg(target_os = "linux")]
    {
        assert_eq!(ours.permissions, 0o640);
        assert_eq!(ours.mode, std.mode());
        assert_eq!(ours.ino, std.ino());
        assert_eq!(ours.dev, std.dev());
        assert_eq!(ours.nlink as u64, std.nlink());
        assert_eq!((ours.uid, ours.gid), (std.uid(), std.gid()));
    }
    #[cfg(windows)]
    {
        assert!(std.permissions().readonly());
        assert_eq!(ours.permissions, 0o444);
        assert_eq!(ours.mode, 0o100444, "a regular file's type bits");
        assert_eq!(ours.nlink, 1);
    }
    assert_eq!(ours.modified, Some(std.modified().unwrap()));
    assert_eq!(ours.accessed, Some(std.accessed().unwrap()));
    assert_eq!(ours.created, std.created().ok());

    let d_meta = path::metadata(&engine, dir.path()).wait().unwrap();
    assert!(d_meta.is_dir());

    // The same through an open file.
    let file = File::open(&engine, &f).wait().unwrap();
    let by_fd = file.stat().wait().unwrap();
    assert_eq!(by_fd, ours);
    // And from the attributes the kernel holds, on this thread, with no
    // operation through the engine.
    let before = engine.stats();
    let cached = file.stat_cached().unwrap();
    assert_eq!(engine.stats().submitted, before.submitted);
    assert_eq!(cached.len, ours.len);
    assert_eq!(cached.modified, ours.modified);
    assert_eq!((cached.ino, cached.mode), (ours.ino, ours.mode));
    // It follows a change at once (the inode is the one in memory).
    #[cfg(windows)]
    {
        let mut p = std::fs::metadata(&f).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false, reason = "undoing it")]
        p.set_readonly(false);
        std::fs::set_permissions(&f, p).unwrap();
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .and_then(|mut w| std::io::Write::write_all(&mut w, b"more"))
        .unwrap();
    assert_eq!(file.stat_cached().unwrap().len, ours.len + 4);
    file.close().wait().unwrap();
    assert!(matches!(file.stat_cached(), Err(Error::Closed)));
}

fn try_exists_tells_missing_from_present(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let f = dir.path().join("f");
    assert!(!path::try_exists(&engine, &f).wait().unwrap());
    std::fs::write(&f, b"").unwrap();
    assert!(path::try_exists(&engine, &f).wait().unwrap());
    // A "directory" on the way that is a file: cannot tell (as std).
    #[cfg(target_os = "linux")]
    assert_errno(
        path::try_exists(&engine, f.join("below")).wait(),
        libc::ENOTDIR,
        kind_of(libc::ENOTDIR),
    );
    // Windows says that the path is not found there (ERROR_PATH_NOT_FOUND):
    // it does not exist, as std says too.
    #[cfg(windows)]
    {
        let below = f.join("below");
        assert_eq!(below.try_exists().ok(), Some(false));
        assert!(!path::try_exists(&engine, &below).wait().unwrap());
    }
}

fn nul_paths_are_refused_before_submission(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let good = dir.path().join("good");
    std::fs::write(&good, b"keep").unwrap();
    let bad = PathBuf::from("bad\0name");
    let before = engine.stats();
    let errors = [
        path::rename(&engine, &good, &bad).wait().err(),
        path::rename(&engine, &bad, &good).wait().err(),
        path::remove_file(&engine, &bad).wait().err(),
        path::remove_dir(&engine, &bad).wait().err(),
        path::create_dir(&engine, &bad, 0o755).wait().err(),
        path::hard_link(&engine, &good, &bad).wait().err(),
        path::symlink(&engine, &bad, &good).wait().err(),
        path::metadata(&engine, &bad).wait().err(),
        path::symlink_metadata(&engine, &bad).wait().err(),
        path::try_exists(&engine, &bad).wait().err(),
    ];
    for (i, e) in errors.into_iter().enumerate() {
        match e {
            Some(e @ Error::InvalidInput(_)) => assert_eq!(e.kind(), ErrorKind::InvalidInput),
            other => panic!("case {i}: expected InvalidInput, got {other:?}"),
        }
    }
    assert_eq!(engine.stats().submitted, before.submitted);
    assert_eq!(std::fs::read(&good).unwrap(), b"keep");
}

/// Every path operation is the engine's and counted by it (`metadata` of a
/// cached path may be answered on the caller: still counted, as inline).
fn path_ops_go_through_the_engine(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let before = engine.stats();
    let sub = dir.path().join("sub");
    let f = sub.join("f");
    path::create_dir(&engine, &sub, 0o755).wait().unwrap();
    std::fs::write(&f, b"x").unwrap();
    path::metadata(&engine, &f).wait().unwrap();
    path::hard_link(&engine, &f, sub.join("h")).wait().unwrap();
    let made = path::symlink(&engine, &f, sub.join("s")).wait();
    // Where the system makes no symbolic links, there is none to remove (a
    // refusal is counted as an error).
    let link = symlink_made(&made, &sub.join("s"));
    path::rename(&engine, sub.join("h"), sub.join("h2"))
        .wait()
        .unwrap();
    path::remove_file(&engine, sub.join("h2")).wait().unwrap();
    if link {
        path::remove_file(&engine, sub.join("s")).wait().unwrap();
    }
    path::remove_file(&engine, &f).wait().unwrap();
    path::remove_dir(&engine, &sub).wait().unwrap();
    let after = engine.stats();
    let ops = if link { 9 } else { 8 };
    assert_eq!(after.submitted - before.submitted, ops);
    assert_eq!(after.completed - before.completed, ops);
    assert_eq!(after.errors - before.errors, u64::from(made.is_err()));
}

#[cfg(target_os = "linux")]
fn from_fd_reads_the_access_mode(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let p = dir.path().join("f");
    std::fs::write(&p, b"hello").unwrap();
    let ro = File::from_fd(&engine, std::fs::File::open(&p).unwrap().into());
    let (n, buf) = ro.read_at(vec![0u8; 5], 0).wait();
    assert_eq!(&buf[..n.unwrap()], b"hello");
    let (res, _) = ro.write_at(b"x".to_vec(), 0).wait();
    assert!(matches!(res, Err(Error::NotOpenedFor("write"))), "{res:?}");
    assert!(!ro.is_append());

    let app = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    let app = File::from_fd(&engine, app.into());
    assert!(app.is_append());
    let (res, _) = app.write_all_at(b" world".to_vec(), 0).wait();
    res.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"hello world");
}

#[cfg(target_os = "linux")]
fn into_fd_only_when_alone_and_idle(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let p = dir.path().join("f");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&engine, &p)
        .wait()
        .unwrap();
    let other = file.clone();
    let file = file.into_fd().expect_err("another handle exists");
    drop(other);
    // An operation not yet completed holds the file.
    let mut op = file.write_at(b"abc".to_vec(), 0);
    let polled = poll_once(&mut op);
    let file = match polled {
        std::task::Poll::Pending => {
            let file = file.into_fd().expect_err("an operation is in flight");
            let (res, _) = op.wait();
            res.unwrap();
            file
        }
        std::task::Poll::Ready((res, _)) => {
            res.unwrap();
            file
        }
    };
    let fd = file.into_fd().expect("alone and idle");
    let mut std_file = std::fs::File::from(fd);
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std_file, &mut s).unwrap();
    assert_eq!(
        s, "abc",
        "the descriptor still works after the engine let go"
    );

    // A closed file gives no descriptor.
    let closed = File::open(&engine, &p).wait().unwrap();
    closed.close().wait().unwrap();
    assert!(closed.into_fd().is_err());
}

fn try_clone_duplicates_the_descriptor(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let p = dir.path().join("f");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&engine, &p)
        .wait()
        .unwrap();
    let clone = file.try_clone().unwrap();
    assert_ne!(clone.as_raw_fd(), file.as_raw_fd());
    #[cfg(target_os = "linux")]
    {
        // SAFETY: F_GETFD reads the descriptor's flags; no memory involved.
        let fd_flags = unsafe { libc::fcntl(clone.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(
            fd_flags & libc::FD_CLOEXEC,
            libc::FD_CLOEXEC,
            "close-on-exec"
        );
    }
    // Windows: a duplicate that child processes do not inherit, with the
    // same access.
    #[cfg(windows)]
    {
        let (h, orig) = (
            handle_info(clone.as_raw_fd()),
            handle_info(file.as_raw_fd()),
        );
        assert!(!h.inherit, "not inherited");
        assert_eq!(h.access, orig.access);
    }
    file.close().wait().unwrap();
    // The duplicate outlives the original's close.
    let (res, _) = clone.write_all_at(b"still open".to_vec(), 0).wait();
    res.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"still open");
    assert!(matches!(file.try_clone(), Err(Error::Closed)));
}

fn append_writes_go_to_the_end(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let p = dir.path().join("log");
    std::fs::write(&p, b"one\n").unwrap();
    let file = OpenOptions::new()
        .append(true)
        .open(&engine, &p)
        .wait()
        .unwrap();
    assert!(file.is_append());
    let (res, _) = file.write_all_at(b"two\n".to_vec(), 0).wait();
    res.unwrap();
    let (res, _) = file.write_all_at(b"three\n".to_vec(), 0).wait();
    res.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"one\ntwo\nthree\n");
    // std's rules: append with truncate (without create_new) is refused.
    assert!(matches!(
        OpenOptions::new()
            .append(true)
            .truncate(true)
            .open(&engine, &p)
            .wait(),
        Err(Error::InvalidInput(_))
    ));
}

#[cfg(target_os = "linux")]
fn reads_and_writes_on_a_pipe_ignore_the_offset(d: Driver) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let engine = d.engine();
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are new and owned here alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let (r, w) = (File::from_fd(&engine, r), File::from_fd(&engine, w));
    // io_uring ignores the offset of a stream; the pool's pwrite/pread get
    // ESPIPE and use write/read instead.
    let (res, _) = w.write_all_at(b"through the pipe".to_vec(), 12345).wait();
    res.unwrap();
    let (n, buf) = r.read_at(vec![0u8; 64], 999).wait();
    assert_eq!(&buf[..n.unwrap()], b"through the pipe");
}

fn dropped_path_operations_still_complete(d: Driver) {
    // The paths (and statx's buffer) belong to the operation, not to the
    // future: dropping the future after submission is safe, and the
    // operation still runs.
    let engine = d.engine();
    let dir = tempdir();
    let n = 64;
    for i in 0..n {
        std::fs::write(dir.path().join(format!("a{i}")), b"x").unwrap();
    }
    let mut pending = 0;
    for i in 0..n {
        let mut rename = path::rename(
            &engine,
            dir.path().join(format!("a{i}")),
            dir.path().join(format!("b{i}")),
        );
        let mut stat = path::metadata(&engine, dir.path());
        if poll_once(&mut rename).is_pending() {
            pending += 1;
        }
        let _ = poll_once(&mut stat);
        drop(rename);
        drop(stat);
    }
    let all = wait_until(std::time::Duration::from_secs(10), || {
        (0..n).all(|i| dir.path().join(format!("b{i}")).exists())
    });
    assert!(
        all,
        "every rename ran ({pending} were in flight when dropped)"
    );
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        let s = engine.stats();
        s.completed == s.submitted
    }));
}

/// Windows' counterpart of `from_fd`: a handle opened for overlapped I/O
/// is adopted with the access it was opened with (read-only refuses
/// writes; append writes at the end); one opened for synchronous I/O is
/// refused with a clear error.
#[cfg(windows)]
fn from_handle_reads_the_access_mode(d: Driver) {
    use std::os::windows::fs::OpenOptionsExt;
    const FILE_FLAG_OVERLAPPED: u32 = 0x4000_0000;
    let engine = d.engine();
    let dir = tempdir();
    let p = dir.path().join("f");
    std::fs::write(&p, b"hello").unwrap();
    let overlapped = |o: &mut std::fs::OpenOptions| {
        let f = o.custom_flags(FILE_FLAG_OVERLAPPED).open(&p).unwrap();
        File::from_handle(&engine, f.into()).expect("adopt an overlapped handle")
    };
    let ro = overlapped(std::fs::OpenOptions::new().read(true));
    let (n, buf) = ro.read_at(vec![0u8; 5], 0).wait();
    assert_eq!(&buf[..n.unwrap()], b"hello");
    let (res, _) = ro.write_at(b"x".to_vec(), 0).wait();
    assert!(matches!(res, Err(Error::NotOpenedFor("write"))), "{res:?}");
    assert!(!ro.is_append());

    let app = overlapped(std::fs::OpenOptions::new().append(true));
    assert!(app.is_append());
    let (res, _) = app.write_all_at(b" world".to_vec(), 0).wait();
    res.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"hello world");

    let sync = std::fs::File::open(&p).unwrap();
    match File::from_handle(&engine, sync.into()) {
        Err(e @ Error::InvalidInput(_)) => {
            assert!(e.to_string().contains("FILE_FLAG_OVERLAPPED"), "{e}")
        }
        other => panic!("a synchronous handle was adopted: {other:?}"),
    }
}

/// `into_fd`'s counterpart: the handle comes back only from the file's
/// last handle with nothing in flight, and still works.
#[cfg(windows)]
fn into_handle_only_when_alone_and_idle(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let p = dir.path().join("f");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&engine, &p)
        .wait()
        .unwrap();
    let other = file.clone();
    let file = file.into_handle().expect_err("another handle exists");
    drop(other);
    // An operation not yet completed holds the file.
    let mut op = file.write_at(b"abc".to_vec(), 0);
    let file = match poll_once(&mut op) {
        std::task::Poll::Pending => {
            let file = file.into_handle().expect_err("an operation is in flight");
            let (res, _) = op.wait();
            res.unwrap();
            file
        }
        std::task::Poll::Ready((res, _)) => {
            res.unwrap();
            file
        }
    };
    let h = file.into_handle().expect("alone and idle");
    use std::os::windows::io::AsRawHandle;
    assert_eq!(
        overlapped_read(h.as_raw_handle(), 3, 0).unwrap(),
        b"abc",
        "the handle still works after the engine let go"
    );

    // A closed file gives no handle.
    let closed = File::open(&engine, &p).wait().unwrap();
    closed.close().wait().unwrap();
    assert!(closed.into_handle().is_err());
}

/// A named pipe's reads and writes ignore the offset (ReadFile and
/// WriteFile on a pipe): what is written through the engine at one offset
/// is read through it at another.
#[cfg(windows)]
fn reads_and_writes_on_a_named_pipe_ignore_the_offset(d: Driver) {
    let engine = d.engine();
    let (r, name) = named_pipe(&engine);
    let w = OpenOptions::new()
        .write(true)
        .open(&engine, &name)
        .wait()
        .expect("open the pipe's other end");
    let (res, _) = w.write_all_at(b"through the pipe".to_vec(), 12345).wait();
    res.unwrap();
    let (n, buf) = r.read_at(vec![0u8; 64], 999).wait();
    assert_eq!(&buf[..n.unwrap()], b"through the pipe");
    // The writer gone, a read is at the end of the pipe: 0 bytes, not an
    // error (ERROR_BROKEN_PIPE), as a Linux pipe's read and std's say.
    w.close().wait().unwrap();
    let (n, _) = r.read_at(vec![0u8; 64], 0).wait();
    assert_eq!(n.expect("the end of the pipe"), 0);
}
