// tokio 1.54.1 tests/fs_file.rs (MIT, LICENSE.tokio beside it), run against
// overlapped_tokio::fs: `tokio::fs` renamed; changes marked "overlapped-tokio:".

use super::tokio_test::task;
use futures::future::FutureExt;
use overlapped_tokio::fs::File;
use std::io::prelude::*;
use std::io::IoSlice;
use tempfile::NamedTempFile;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader, SeekFrom};

const HELLO: &[u8] = b"hello world...";

#[tokio::test]
async fn basic_read() {
    let mut tempfile = tempfile();
    tempfile.write_all(HELLO).unwrap();

    let mut file = File::open(tempfile.path()).await.unwrap();

    let mut buf = [0; 1024];
    let n = file.read(&mut buf).await.unwrap();

    assert_eq!(n, HELLO.len());
    assert_eq!(&buf[..n], HELLO);
}

#[tokio::test]
async fn basic_write() {
    let tempfile = tempfile();

    let mut file = File::create(tempfile.path()).await.unwrap();

    file.write_all(HELLO).await.unwrap();
    file.flush().await.unwrap();

    let file = std::fs::read(tempfile.path()).unwrap();
    assert_eq!(file, HELLO);
}

#[tokio::test]
async fn basic_write_and_shutdown() {
    let tempfile = tempfile();

    let mut file = File::create(tempfile.path()).await.unwrap();

    file.write_all(HELLO).await.unwrap();
    file.shutdown().await.unwrap();

    let file = std::fs::read(tempfile.path()).unwrap();
    assert_eq!(file, HELLO);
}

#[tokio::test]
async fn write_vectored() {
    let tempfile = tempfile();

    let mut file = File::create(tempfile.path()).await.unwrap();

    let ret = file
        .write_vectored(&[IoSlice::new(HELLO), IoSlice::new(HELLO)])
        .await
        .unwrap();
    assert_eq!(ret, HELLO.len() * 2);
    file.flush().await.unwrap();

    let file = std::fs::read(tempfile.path()).unwrap();
    assert_eq!(file, [HELLO, HELLO].concat());
}

#[tokio::test]
async fn write_vectored_and_shutdown() {
    let tempfile = tempfile();

    let mut file = File::create(tempfile.path()).await.unwrap();

    let ret = file
        .write_vectored(&[IoSlice::new(HELLO), IoSlice::new(HELLO)])
        .await
        .unwrap();
    assert_eq!(ret, HELLO.len() * 2);
    file.shutdown().await.unwrap();

    let file = std::fs::read(tempfile.path()).unwrap();
    assert_eq!(file, [HELLO, HELLO].concat());
}

#[tokio::test]
async fn rewind_seek_position() {
    let tempfile = tempfile();

    let mut file = File::create(tempfile.path()).await.unwrap();

    file.seek(SeekFrom::Current(10)).await.unwrap();

    file.rewind().await.unwrap();

    assert_eq!(file.stream_position().await.unwrap(), 0);
}

#[tokio::test]
async fn buf_reader_seek_after_write() {
    for (seek, expected) in [
        (SeekFrom::Start(0), 0),
        (SeekFrom::End(-2), HELLO.len() - 2),
        (SeekFrom::Current(-2), HELLO.len() - 2),
    ] {
        let file = File::from_std(tempfile().into_file());
        let mut reader = BufReader::new(file);

        reader.write_all(HELLO).await.unwrap();
        assert_eq!(reader.seek(seek).await.unwrap(), expected as u64);

        let mut contents = Vec::new();
        reader.read_to_end(&mut contents).await.unwrap();
        assert_eq!(contents, &HELLO[expected..]);
    }
}

#[tokio::test]
async fn coop() {
    let mut tempfile = tempfile();
    tempfile.write_all(HELLO).unwrap();

    let mut task = task::spawn(async {
        let mut file = File::open(tempfile.path()).await.unwrap();

        let mut buf = [0; 1024];

        loop {
            let _ = file.read(&mut buf).await.unwrap();
            file.seek(std::io::SeekFrom::Start(0)).await.unwrap();
        }
    });

    for _ in 0..1_000 {
        if task.poll().is_pending() {
            return;
        }
    }

    panic!("did not yield");
}

#[tokio::test]
#[cfg_attr(
    target_os = "emscripten",
    ignore = "emscripten libc does not implement dup()/try_clone()"
)]
async fn write_to_clone() {
    let tempfile = tempfile();

    let file = File::create(tempfile.path()).await.unwrap();
    let mut clone = file.try_clone().await.unwrap();

    clone.write_all(HELLO).await.unwrap();
    clone.flush().await.unwrap();

    let contents = std::fs::read(tempfile.path()).unwrap();
    assert_eq!(contents, HELLO);
}

#[tokio::test]
async fn write_into_std() {
    let tempfile = tempfile();

    let file = File::create(tempfile.path()).await.unwrap();
    let mut std_file = file.into_std().await;

    std_file.write_all(HELLO).unwrap();

    let contents = std::fs::read(tempfile.path()).unwrap();
    assert_eq!(contents, HELLO);
}

#[tokio::test]
async fn write_into_std_immediate() {
    let tempfile = tempfile();

    let file = File::create(tempfile.path()).await.unwrap();
    let mut std_file = file.try_into_std().unwrap();

    std_file.write_all(HELLO).unwrap();

    let contents = std::fs::read(tempfile.path()).unwrap();
    assert_eq!(contents, HELLO);
}

#[tokio::test]
async fn read_file_from_std() {
    let mut tempfile = tempfile();
    tempfile.write_all(HELLO).unwrap();

    let std_file = std::fs::File::open(tempfile.path()).unwrap();
    let mut file = File::from(std_file);

    let mut buf = [0; 1024];
    let n = file.read(&mut buf).await.unwrap();
    assert_eq!(n, HELLO.len());
    assert_eq!(&buf[..n], HELLO);
}

#[tokio::test]
async fn empty_read() {
    let mut tempfile = tempfile();
    tempfile.write_all(HELLO).unwrap();

    let mut file = File::open(tempfile.path()).await.unwrap();

    // Perform an empty read and get a length of zero.
    assert!(matches!(file.read(&mut []).now_or_never(), Some(Ok(0))));

    // Check that we don't get EOF on the next read.
    let mut buf = [0; 1024];
    let n = file.read(&mut buf).await.unwrap();

    assert_eq!(n, HELLO.len());
    assert_eq!(&buf[..n], HELLO);
}

#[cfg_attr(miri, ignore)]
#[tokio::test]
async fn set_times() {
    use std::time::{Duration, SystemTime};

    let tempfile = tempfile();

    let file = File::create(tempfile.path()).await.unwrap();

    // Whole seconds to avoid filesystem timestamp precision loss.
    let accessed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let times = overlapped_tokio::fs::FileTimes::new()
        .set_accessed(accessed)
        .set_modified(modified);

    file.set_times(times).await.unwrap();

    let metadata = file.metadata().await.unwrap();
    assert_eq!(metadata.accessed().unwrap(), accessed);
    assert_eq!(metadata.modified().unwrap(), modified);
}

fn tempfile() -> NamedTempFile {
    NamedTempFile::new().unwrap()
}

#[tokio::test]
async fn set_max_buf_size_read() {
    let mut tempfile = tempfile();
    tempfile.write_all(HELLO).unwrap();
    let mut file = File::open(tempfile.path()).await.unwrap();
    let mut buf = [0; 1024];
    file.set_max_buf_size(1);

    // A single read operation reads a maximum of 1 byte.
    assert_eq!(file.read(&mut buf).await.unwrap(), 1);
}

#[tokio::test]
async fn set_max_buf_size_write() {
    let tempfile = tempfile();
    let mut file = File::create(tempfile.path()).await.unwrap();
    file.set_max_buf_size(1);

    // A single write operation writes a maximum of 1 byte.
    assert_eq!(file.write(HELLO).await.unwrap(), 1);
}

#[tokio::test]
#[should_panic(expected = "`max_buf_size` must be greater than 0")]
async fn set_max_buf_size_panics_on_zero() {
    let tempfile = tempfile();
    let mut file = File::open(tempfile.path()).await.unwrap();
    file.set_max_buf_size(0);
}

#[tokio::test]
#[cfg_attr(miri, ignore)]
#[cfg(unix)]
async fn file_debug_fmt() {
    let tempfile = tempfile();

    let file = File::open(tempfile.path()).await.unwrap();

    // overlapped-tokio: its own type name, and the engine's file inside (with
    // its descriptor) where tokio's shows its std file.
    let s = format!("{file:?}");
    assert!(s.starts_with("overlapped_tokio::fs::File { file: "), "{s}");
    assert!(
        s.contains(&format!("{}", std::os::fd::AsRawFd::as_raw_fd(&file))),
        "{s}"
    );
}

#[tokio::test]
#[cfg(windows)]
async fn file_debug_fmt() {
    let tempfile = tempfile();

    let file = File::open(tempfile.path()).await.unwrap();

    // overlapped-tokio: its own type name, and the engine's file inside where
    // tokio's shows its std file (tokio's slice, [0..37], fits its name).
    let s = format!("{:?}", file);
    assert!(s.starts_with("overlapped_tokio::fs::File { file: "), "{s}");
}

#[tokio::test]
#[cfg(unix)]
async fn unix_fd_is_valid() {
    use std::os::unix::io::AsRawFd;
    let tempfile = tempfile();

    let file = File::create(tempfile.path()).await.unwrap();
    assert!(file.as_raw_fd() as u64 > 0);
}

#[tokio::test]
#[cfg(unix)]
async fn read_file_from_unix_fd() {
    use std::os::unix::io::{FromRawFd, IntoRawFd};

    let mut tempfile = tempfile();
    tempfile.write_all(HELLO).unwrap();

    let file1 = File::open(tempfile.path()).await.unwrap();
    let raw_fd = file1.into_std().await.into_raw_fd();
    assert!(raw_fd > 0);

    // overlapped-tokio: the safety comment the workspace's lints ask for.
    // SAFETY: `raw_fd` is an open descriptor whose ownership `into_raw_fd`
    // gave up; nothing else closes it.
    let mut file2 = unsafe { File::from_raw_fd(raw_fd) };

    let mut buf = [0; 1024];
    let n = file2.read(&mut buf).await.unwrap();
    assert_eq!(n, HELLO.len());
    assert_eq!(&buf[..n], HELLO);
}

#[tokio::test]
#[cfg(windows)]
async fn windows_handle() {
    use std::os::windows::io::AsRawHandle;
    let tempfile = tempfile();

    let file = File::create(tempfile.path()).await.unwrap();
    assert!(file.as_raw_handle() as u64 > 0);
}
