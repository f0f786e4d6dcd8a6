//! The free functions, `DirBuilder` and `ReadDir` against tokio's
//! documented behaviour (beyond what the drop-in program compares).

use std::io::ErrorKind;
#[cfg(unix)]
use std::os::unix::fs::MetadataExt;
#[cfg(target_os = "linux")]
use std::os::unix::fs::PermissionsExt;

use overlapped_tokio::fs;

use crate::util::{code, data, err_of, tempdir};

rt_tests!(
    read_and_write_whole_files,
    #[cfg(target_os = "linux")]
    read_sees_a_file_longer_than_its_size_hint,
    #[cfg(target_os = "linux")]
    copy_copies_contents_and_permissions,
    #[cfg(target_os = "linux")]
    copy_uses_copy_file_range_and_falls_back,
    create_dir_all_creates_every_level,
    #[cfg(target_os = "linux")]
    dir_builder_modes_and_recursion,
    read_dir_lists_every_entry_in_chunks,
    read_dir_stream_as_tokio_streams,
    #[cfg(target_os = "linux")]
    links_and_metadata,
    try_exists_tells_not_found_apart,
    rename_replaces,
    #[cfg(target_os = "linux")]
    arguments_live_until_the_future_completes,
);

async fn read_and_write_whole_files() {
    let dir = tempdir();
    let p = dir.path().join("f");
    for len in [
        0usize,
        1,
        4095,
        4096,
        65_537,
        3 << 20,
        (8 << 20) - 1,
        8 << 20,
        17 << 20 | 5,
    ] {
        let want = data(len, len as u8);
        fs::write(&p, &want).await.unwrap();
        assert!(std::fs::read(&p).unwrap() == want, "write {len}");
        assert!(fs::read(&p).await.unwrap() == want, "read {len}");
    }
    // write truncates a longer file.
    fs::write(&p, b"short").await.unwrap();
    assert_eq!(fs::read_to_string(&p).await.unwrap(), "short");
    assert_eq!(
        err_of(fs::read(dir.path().join("missing")).await),
        (ErrorKind::NotFound, Some(code::NOT_FOUND))
    );
}

#[cfg(target_os = "linux")]
async fn read_sees_a_file_longer_than_its_size_hint() {
    // A FIFO reports size 0 yet has data: read goes on to the end.
    let dir = tempdir();
    let p = dir.path().join("fifo");
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let want = data(200_000, 8);
    let writer = {
        let (p, want) = (p.clone(), want.clone());
        std::thread::spawn(move || std::fs::write(p, want).unwrap())
    };
    let got = fs::read(&p).await.unwrap();
    writer.join().unwrap();
    assert!(got == want, "{} of {} bytes", got.len(), want.len());
}

#[cfg(target_os = "linux")]
async fn copy_copies_contents_and_permissions() {
    let dir = tempdir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let want = data(3 << 20 | 7, 6);
    std::fs::write(&a, &want).unwrap();
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o751)).unwrap();
    std::fs::write(&b, data(10 << 20, 1)).unwrap();
    assert_eq!(fs::copy(&a, &b).await.unwrap(), want.len() as u64);
    assert!(std::fs::read(&b).unwrap() == want, "truncated and replaced");
    assert_eq!(std::fs::metadata(&b).unwrap().mode() & 0o7777, 0o751);
    assert_eq!(
        err_of(fs::copy(dir.path().join("missing"), &b).await),
        (ErrorKind::NotFound, Some(code::NOT_FOUND))
    );
    assert_eq!(
        err_of(fs::copy(dir.path(), &b).await).0,
        ErrorKind::InvalidInput
    );
}

/// `copy` moves the bytes with `copy_file_range` (as std's, so
/// tokio's), and falls back to reads and writes where the kernel refuses.
#[cfg(target_os = "linux")]
async fn copy_uses_copy_file_range_and_falls_back() {
    let dir = tempdir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // Sizes 0, 1 and 1 MiB + odd; the copy's mode is the source's.
    for (len, mode) in [(0usize, 0o600), (1, 0o644), ((1 << 20) + 13, 0o751)] {
        let want = data(len, len as u8);
        std::fs::write(&a, &want).unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(mode)).unwrap();
        let r = fs::copy_reporting(&a, &b).await.unwrap();
        assert_eq!(r.bytes, len as u64, "{r:?}");
        assert!(std::fs::read(&b).unwrap() == want, "content of {len}");
        assert_eq!(std::fs::metadata(&b).unwrap().mode() & 0o7777, mode);
        if len > 0 {
            assert_eq!(r.by_copy_file_range, len as u64, "{len}: {r:?}");
            assert_eq!(r.by_read_write, 0, "{r:?}");
        } else {
            // An empty source: copy_file_range copies nothing, which may
            // be a /proc file, so one read confirms the end.
            assert_eq!(r.by_copy_file_range + r.by_read_write, 0, "{r:?}");
        }
    }
    // A sparse file: holes read back as zeros.
    let sparse = std::fs::File::create(&a).unwrap();
    sparse.set_len(6 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    sparse.write_all_at(b"island one", 1 << 20).unwrap();
    sparse.write_all_at(b"island two", (5 << 20) + 3).unwrap();
    drop(sparse);
    let r = fs::copy_reporting(&a, &b).await.unwrap();
    assert_eq!(r.bytes, 6 << 20);
    assert_eq!(r.by_copy_file_range, 6 << 20, "{r:?}");
    assert!(std::fs::read(&b).unwrap() == std::fs::read(&a).unwrap());

    // The fallback, forced by a source the kernel will not copy from: a
    // /proc file (another file system, and a size of 0 although it has
    // content).
    let proc_file = std::path::Path::new("/proc/version");
    if proc_file.exists() {
        let r = fs::copy_reporting(proc_file, &b).await.unwrap();
        let want = std::fs::read(proc_file).unwrap();
        assert!(!want.is_empty());
        assert_eq!(r.by_copy_file_range, 0, "{r:?}");
        assert_eq!(r.by_read_write, want.len() as u64, "{r:?}");
        assert!(std::fs::read(&b).unwrap() == want);
    } else {
        eprintln!("SKIPPED: no /proc here: the /proc fallback of copy is not checked");
    }
    // The fallback across file systems (EXDEV before Linux 5.19 for any
    // pair, and since then for file systems of different types), with a
    // size that takes several reads and writes.
    let shm = std::path::Path::new("/dev/shm");
    let same_fs = |p: &std::path::Path| {
        std::fs::metadata(p).map(|m| m.dev()).ok()
            == std::fs::metadata(dir.path()).map(|m| m.dev()).ok()
    };
    let want = data((3 << 20) + 5, 9);
    match tempfile::tempdir_in(shm) {
        Ok(other) if !same_fs(other.path()) => {
            let src = other.path().join("src");
            std::fs::write(&src, &want).unwrap();
            std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
            let r = fs::copy_reporting(&src, &b).await.unwrap();
            assert_eq!(r.bytes, want.len() as u64);
            assert!(std::fs::read(&b).unwrap() == want, "{r:?}");
            assert_eq!(std::fs::metadata(&b).unwrap().mode() & 0o7777, 0o640);
            // Which way depends on the kernel and the two file systems:
            // both are right, and the report adds up.
            assert_eq!(r.by_copy_file_range + r.by_read_write, r.bytes, "{r:?}");
        }
        _ => eprintln!(
            "SKIPPED: no /dev/shm on another file system: copy across file systems is not checked"
        ),
    }
}

async fn create_dir_all_creates_every_level() {
    let dir = tempdir();
    let deep = dir.path().join("a/b/c/d");
    fs::create_dir_all(&deep).await.unwrap();
    assert!(std::fs::metadata(&deep).unwrap().is_dir());
    fs::create_dir_all(&deep).await.unwrap();
    fs::create_dir_all(dir.path().join("a/b/./c/../c/e"))
        .await
        .unwrap();
    assert!(dir.path().join("a/b/c/e").is_dir());
    fs::create_dir_all("").await.unwrap();
    std::fs::write(dir.path().join("file"), b"").unwrap();
    let std_err = std::fs::create_dir_all(dir.path().join("file/x")).unwrap_err();
    let ours = err_of(fs::create_dir_all(dir.path().join("file/x")).await);
    assert_eq!(ours, (std_err.kind(), std_err.raw_os_error()));
    assert_eq!(
        err_of(fs::create_dir_all(dir.path().join("file")).await).0,
        ErrorKind::AlreadyExists
    );
    // Many tasks creating the same tree at once all succeed.
    let tree = dir.path().join("x/y/z");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let t = tree.join(format!("leaf{}", i % 2));
            tokio::spawn(async move { fs::create_dir_all(t).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert!(tree.join("leaf0").is_dir() && tree.join("leaf1").is_dir());
}

#[cfg(target_os = "linux")]
async fn dir_builder_modes_and_recursion() {
    let dir = tempdir();
    let umask = {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .unwrap_or(0o022)
    };
    let p = dir.path().join("m");
    fs::DirBuilder::new().mode(0o751).create(&p).await.unwrap();
    assert_eq!(
        std::fs::metadata(&p).unwrap().mode() & 0o777,
        0o751 & !umask
    );
    assert_eq!(
        err_of(
            fs::DirBuilder::new()
                .create(dir.path().join("no/parent"))
                .await
        ),
        (ErrorKind::NotFound, Some(code::NOT_FOUND))
    );
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.path().join("r/s/t"))
        .await
        .unwrap();
    for sub in ["r", "r/s", "r/s/t"] {
        assert_eq!(
            std::fs::metadata(dir.path().join(sub)).unwrap().mode() & 0o777,
            0o700 & !umask,
            "{sub}: parents get the mode too"
        );
    }
    fs::DirBuilder::new()
        .recursive(true)
        .create(dir.path().join("r/s/t"))
        .await
        .unwrap();
}

async fn read_dir_lists_every_entry_in_chunks() {
    let dir = tempdir();
    let mut want = Vec::new();
    for i in 0..100 {
        let name = format!("f{i:03}");
        std::fs::write(dir.path().join(&name), vec![0u8; i]).unwrap();
        want.push(name);
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    want.push("sub".into());
    let mut rd = fs::read_dir(dir.path()).await.unwrap();
    let mut got = Vec::new();
    while let Some(e) = rd.next_entry().await.unwrap() {
        let name = e.file_name().into_string().unwrap();
        let std_meta = std::fs::symlink_metadata(e.path()).unwrap();
        #[cfg(unix)]
        assert_eq!(e.ino(), std_meta.ino(), "{name}");
        assert_eq!(e.file_type().await.unwrap().is_dir(), name == "sub");
        assert_eq!(e.metadata().await.unwrap().len(), std_meta.len());
        got.push(name);
    }
    assert!(rd.next_entry().await.unwrap().is_none(), "stays at the end");
    got.sort();
    assert_eq!(got, want);
    assert_eq!(
        err_of(fs::read_dir(dir.path().join("missing")).await),
        err_of(std::fs::read_dir(dir.path().join("missing")))
    );
}

/// `tokio_stream::wrappers::ReadDirStream::new(rd)` takes
/// tokio's `ReadDir`; `overlapped_tokio::wrappers::ReadDirStream` is the same
/// for overlap's, used the same way.
async fn read_dir_stream_as_tokio_streams() {
    use futures::{StreamExt, TryStreamExt};
    use overlapped_tokio::wrappers::ReadDirStream;
    let dir = tempdir();
    let mut want: Vec<String> = (0..70).map(|i| format!("e{i:02}")).collect();
    for n in &want {
        std::fs::write(dir.path().join(n), b"").unwrap();
    }
    let stream = ReadDirStream::new(fs::read_dir(dir.path()).await.unwrap());
    let mut got: Vec<String> = stream
        .map_ok(|e| e.file_name().into_string().unwrap())
        .try_collect()
        .await
        .unwrap();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // next() one at a time, then the end, stays ended; into_inner gives
    // the ReadDir back.
    let mut s = ReadDirStream::new(fs::read_dir(dir.path()).await.unwrap());
    let first = s.next().await.unwrap().unwrap();
    assert!(want.contains(&first.file_name().into_string().unwrap()));
    let _: &fs::ReadDir = s.as_ref();
    let mut rd = s.into_inner();
    let mut rest = 0;
    while rd.next_entry().await.unwrap().is_some() {
        rest += 1;
    }
    assert_eq!(rest, want.len() - 1);
    let mut s = ReadDirStream::new(rd);
    assert!(s.next().await.is_none());
    assert!(s.next().await.is_none());
}

#[cfg(target_os = "linux")]
async fn links_and_metadata() {
    let dir = tempdir();
    let f = dir.path().join("f");
    std::fs::write(&f, b"12345").unwrap();
    fs::symlink("f", dir.path().join("s")).await.unwrap();
    fs::hard_link(&f, dir.path().join("h")).await.unwrap();
    let m = fs::metadata(dir.path().join("s")).await.unwrap();
    assert!(m.is_file());
    assert_eq!(m.len(), 5);
    assert!(fs::symlink_metadata(dir.path().join("s"))
        .await
        .unwrap()
        .is_symlink());
    assert_eq!(fs::metadata(&f).await.unwrap().nlink(), 2);
    assert_eq!(
        fs::read_link(dir.path().join("s")).await.unwrap(),
        std::path::Path::new("f")
    );
    assert_eq!(
        err_of(fs::read_link(&f).await),
        (ErrorKind::InvalidInput, Some(libc::EINVAL))
    );
    assert_eq!(
        fs::canonicalize(dir.path().join("s")).await.unwrap(),
        std::fs::canonicalize(&f).unwrap()
    );
    // statx through the engine agrees with std's metadata.
    let st = fs::statx(dir.path().join("s")).await.unwrap();
    let link = fs::symlink_statx(dir.path().join("s")).await.unwrap();
    assert_eq!((st.len, st.ino), (5, m.ino()));
    assert!(link.is_symlink());
    fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400))
        .await
        .unwrap();
    assert!(std::fs::metadata(&f).unwrap().permissions().readonly());
    fs::remove_file(dir.path().join("s")).await.unwrap();
    assert!(f.exists(), "removing a link leaves its target");
}

async fn try_exists_tells_not_found_apart() {
    let dir = tempdir();
    let f = dir.path().join("f");
    assert!(!fs::try_exists(&f).await.unwrap());
    std::fs::write(&f, b"").unwrap();
    assert!(fs::try_exists(&f).await.unwrap());
    // A file where a directory should be: std cannot tell either.
    let std_res = std::fs::exists(f.join("below"));
    let ours = fs::try_exists(f.join("below")).await;
    match (std_res, ours) {
        (Err(s), Err(o)) => assert_eq!((s.kind(), s.raw_os_error()), (o.kind(), o.raw_os_error())),
        (s, o) => assert_eq!(s.ok(), o.ok()),
    }
}

async fn rename_replaces() {
    let dir = tempdir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"new").unwrap();
    std::fs::write(&b, b"old").unwrap();
    fs::rename(&a, &b).await.unwrap();
    assert_eq!(std::fs::read(&b).unwrap(), b"new");
    assert!(!a.exists());
    std::fs::create_dir(dir.path().join("d")).unwrap();
    fs::rename(dir.path().join("d"), dir.path().join("e"))
        .await
        .unwrap();
    assert!(dir.path().join("e").is_dir());
    fs::remove_dir(dir.path().join("e")).await.unwrap();
    assert!(!dir.path().join("e").exists());
}

/// A path that removes what it names when dropped, as
/// `tempfile::NamedTempFile` and `TempDir` do: given by value to a
/// function, it must live until that function's future completes, as in
/// tokio.
#[cfg(target_os = "linux")]
struct Doomed(std::path::PathBuf);

#[cfg(target_os = "linux")]
impl AsRef<std::path::Path> for Doomed {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(target_os = "linux")]
impl Drop for Doomed {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.0) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&self.0);
            }
            _ => {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }
}

#[cfg(target_os = "linux")]
async fn arguments_live_until_the_future_completes() {
    // A NamedTempFile given by value must not be dropped (and its file
    // deleted) before the open runs.
    let dir = tempdir();
    let file = |name: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, b"12345").unwrap();
        Doomed(p)
    };
    let subdir = |name: &str| {
        let p = dir.path().join(name);
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("inside"), b"").unwrap();
        Doomed(p)
    };
    let tmp = tempfile::NamedTempFile::new_in(dir.path()).unwrap();
    fs::OpenOptions::new()
        .read(true)
        .open(tmp)
        .await
        .expect("OpenOptions::open(NamedTempFile)");
    fs::OpenOptions::new()
        .read(true)
        .open(file("o"))
        .await
        .expect("OpenOptions::open");
    fs::File::open(file("fo")).await.expect("File::open");
    let mut f = fs::File::create(file("fc")).await.expect("File::create");
    tokio::io::AsyncWriteExt::write_all(&mut f, b"x")
        .await
        .unwrap();
    assert_eq!(fs::read(file("r")).await.expect("read"), b"12345");
    assert_eq!(
        fs::read_to_string(file("rs"))
            .await
            .expect("read_to_string"),
        "12345"
    );
    fs::write(file("w"), b"abc").await.expect("write");
    let dst = dir.path().join("copied");
    assert_eq!(fs::copy(file("c"), &dst).await.expect("copy"), 5);
    fs::copy(&dst, file("c2")).await.expect("copy to");
    fs::remove_file(file("rm")).await.expect("remove_file");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fs::remove_dir(Doomed(empty)).await.expect("remove_dir");
    fs::remove_dir_all(subdir("rmall"))
        .await
        .expect("remove_dir_all");
    fs::rename(file("mv"), dir.path().join("moved"))
        .await
        .expect("rename");
    assert_eq!(std::fs::read(dir.path().join("moved")).unwrap(), b"12345");
    fs::hard_link(file("hl"), dir.path().join("hard"))
        .await
        .expect("hard_link");
    assert_eq!(std::fs::read(dir.path().join("hard")).unwrap(), b"12345");
    fs::metadata(file("m")).await.expect("metadata");
    fs::symlink_metadata(file("sm"))
        .await
        .expect("symlink_metadata");
    fs::statx(file("st")).await.expect("statx");
    fs::symlink_statx(file("sst")).await.expect("symlink_statx");
    assert!(fs::try_exists(file("te")).await.expect("try_exists"));
    fs::canonicalize(file("can")).await.expect("canonicalize");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink("target", &link).unwrap();
    assert_eq!(
        fs::read_link(Doomed(link)).await.expect("read_link"),
        std::path::Path::new("target")
    );
    fs::set_permissions(file("perm"), std::fs::Permissions::from_mode(0o600))
        .await
        .expect("set_permissions");
    let mut rd = fs::read_dir(subdir("rd")).await.expect("read_dir");
    assert_eq!(
        rd.next_entry()
            .await
            .unwrap()
            .expect("one entry")
            .file_name(),
        "inside"
    );
    fs::create_dir_all(subdir("cda"))
        .await
        .expect("create_dir_all");
    fs::DirBuilder::new()
        .recursive(true)
        .create(subdir("db"))
        .await
        .expect("DirBuilder::create");
}
