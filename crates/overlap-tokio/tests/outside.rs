//! Every function of `overlapped_tokio::fs` polled outside any tokio runtime
//! (`overlapped::block_on` on a plain thread): a library call never panics for
//! want of a runtime. What tokio would run on its blocking pool runs on a
//! thread of its own then.

use std::io::SeekFrom;
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use overlapped::block_on;
use overlapped_tokio::fs;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::util::tempdir;

/// Runs `f` on a thread of its own, outside any runtime, and waits at
/// most a minute for it; a panic or a hang fails the test.
fn outside(name: &str, f: impl FnOnce() + Send + 'static) {
    assert!(tokio::runtime::Handle::try_current().is_err());
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{name}: hung"),
        Err(mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => panic!("{name}: ended without a result"),
        },
    }
}

#[test]
fn free_functions_work_outside_a_runtime() {
    outside("free functions", || {
        block_on(async {
            let dir = tempdir();
            let d = dir.path();
            let f = d.join("f");
            fs::write(&f, b"12345").await.expect("write");
            assert_eq!(fs::read(&f).await.expect("read"), b"12345");
            assert_eq!(
                fs::read_to_string(&f).await.expect("read_to_string"),
                "12345"
            );
            assert_eq!(fs::copy(&f, d.join("g")).await.expect("copy"), 5);
            assert_eq!(std::fs::read(d.join("g")).unwrap(), b"12345");
            assert!(fs::metadata(&f).await.expect("metadata").is_file());
            assert_eq!(fs::statx(&f).await.expect("statx").len, 5);
            assert!(fs::try_exists(&f).await.expect("try_exists"));
            #[cfg(unix)]
            {
                fs::symlink("f", d.join("s")).await.expect("symlink");
                assert!(fs::symlink_metadata(d.join("s"))
                    .await
                    .expect("symlink_metadata")
                    .is_symlink());
                assert!(fs::symlink_statx(d.join("s"))
                    .await
                    .expect("symlink_statx")
                    .is_symlink());
                assert_eq!(
                    fs::canonicalize(d.join("s")).await.expect("canonicalize"),
                    std::fs::canonicalize(&f).unwrap()
                );
                assert_eq!(
                    fs::read_link(d.join("s")).await.expect("read_link"),
                    std::path::Path::new("f")
                );
                fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640))
                    .await
                    .expect("set_permissions");
                assert_eq!(
                    std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
                    0o640
                );
            }
            #[cfg(windows)]
            {
                assert!(!fs::symlink_metadata(&f)
                    .await
                    .expect("symlink_metadata")
                    .is_symlink());
                assert_eq!(
                    fs::canonicalize(&f).await.expect("canonicalize"),
                    std::fs::canonicalize(&f).unwrap()
                );
                let mut perm = std::fs::metadata(&f).unwrap().permissions();
                perm.set_readonly(true);
                fs::set_permissions(&f, perm)
                    .await
                    .expect("set_permissions");
                assert!(std::fs::metadata(&f).unwrap().permissions().readonly());
                let mut perm = std::fs::metadata(&f).unwrap().permissions();
                #[allow(clippy::permissions_set_readonly_false)]
                perm.set_readonly(false);
                std::fs::set_permissions(&f, perm).unwrap();
            }
            fs::hard_link(&f, d.join("h")).await.expect("hard_link");
            fs::rename(d.join("h"), d.join("h2")).await.expect("rename");
            fs::remove_file(d.join("h2")).await.expect("remove_file");
            fs::create_dir(d.join("a")).await.expect("create_dir");
            fs::create_dir_all(d.join("a/b/c"))
                .await
                .expect("create_dir_all");
            fs::DirBuilder::new()
                .recursive(true)
                .create(d.join("a/b/d"))
                .await
                .expect("DirBuilder::create");
            fs::remove_dir(d.join("a/b/d")).await.expect("remove_dir");
            let mut rd = fs::read_dir(d.join("a/b")).await.expect("read_dir");
            let e = rd
                .next_entry()
                .await
                .expect("next_entry")
                .expect("an entry");
            assert_eq!(e.file_name(), "c");
            assert!(e.file_type().await.expect("file_type").is_dir());
            assert!(e.metadata().await.expect("DirEntry::metadata").is_dir());
            assert!(rd.next_entry().await.expect("next_entry").is_none());
            fs::remove_dir_all(d.join("a"))
                .await
                .expect("remove_dir_all");
            assert!(!d.join("a").exists());
        })
    });
}

#[test]
fn file_methods_work_outside_a_runtime() {
    outside("File", || {
        block_on(async {
            let dir = tempdir();
            let p = dir.path().join("f");
            let mut f = fs::File::create(&p).await.expect("create");
            f.write_all(b"hello world").await.expect("write_all");
            f.flush().await.expect("flush");
            f.sync_all().await.expect("sync_all");
            f.sync_data().await.expect("sync_data");
            assert_eq!(f.metadata().await.expect("metadata").len(), 11);
            let perm = f.metadata().await.expect("metadata").permissions();
            f.set_permissions(perm).await.expect("set_permissions");
            let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
            f.set_times(fs::FileTimes::new().set_modified(when))
                .await
                .expect("set_times");
            f.set_modified(when).await.expect("set_modified");
            assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), when);
            f.set_len(5).await.expect("set_len");
            let g = f.try_clone().await.expect("try_clone");
            drop(g);
            let mut r = fs::OpenOptions::new()
                .read(true)
                .open(&p)
                .await
                .expect("OpenOptions::open");
            r.seek(SeekFrom::Start(1)).await.expect("seek");
            let mut s = String::new();
            r.read_to_string(&mut s).await.expect("read_to_string");
            assert_eq!(s, "ello");
            let (n, buf) = r.read_at(vec![0u8; 5], 0).await;
            assert_eq!(&buf[..n.expect("read_at")], b"hello");
            assert_eq!(r.statx().await.expect("statx").len, 5);
            let _std = r.into_std().await;
            let n = fs::File::create_new(dir.path().join("new"))
                .await
                .expect("create_new");
            // A write in flight when the file is dropped still completes.
            let mut n = n;
            n.write_all(&vec![7u8; 1 << 20]).await.expect("write_all");
            drop(n);
            let o = fs::File::open(&p).await.expect("open");
            drop(o.into_std().await);
        })
    });
}
