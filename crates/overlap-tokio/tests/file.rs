//! `File` against tokio's documented behaviour.

use std::io::{ErrorKind, SeekFrom};
#[cfg(unix)]
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use overlapped_tokio::fs::{self, File, OpenOptions};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::util::{code, data, err_of, eventually, tempdir};

rt_tests!(
    large_write_then_read_back,
    reads_follow_seeks_and_writes,
    write_is_behind_and_its_error_comes_later,
    dropping_a_file_completes_its_write,
    max_buf_size_bounds_each_transfer,
    vectored_writes_gather,
    shutdown_flushes,
    set_len_keeps_the_position,
    try_clone_shares_the_position,
    #[cfg(unix)]
    std_conversions_keep_the_descriptor_and_position,
    seek_while_busy_is_refused,
    #[cfg(unix)]
    descriptors_are_borrowable,
    open_options_follow_std_rules,
    positional_io_beyond_tokio,
    direct_io_with_aligned_buffers,
    #[cfg(unix)]
    times_permissions_and_metadata,
    #[cfg(windows)]
    times_readonly_and_metadata,
    #[cfg(target_os = "linux")]
    write_through_and_access_hints,
    #[cfg(target_os = "linux")]
    a_cancelled_read_loses_no_data,
    clones_writing_in_turn_never_overwrite_each_other,
    clones_writing_at_once_never_overwrite_each_other,
    clones_reading_at_once_read_distinct_bytes,
    clones_see_each_others_seeks,
    appending_tasks_lose_no_line,
    appending_after_a_seek_still_appends,
    set_max_buf_size_zero_panics_as_tokio,
    #[cfg(target_os = "linux")]
    small_writes_behind_a_write_in_flight_return_at_once,
    #[cfg(target_os = "linux")]
    an_error_of_a_write_in_flight_keeps_the_bytes_behind_it,
    write_behind_keeps_positions_and_appends,
    cached_reads_fill_the_callers_buffer_and_keep_the_cursor,
    cached_reads_of_clones_and_appending_files_keep_positions,
);

#[cfg(target_os = "linux")]
/// A FIFO at `dir/name`, its read end (not read yet, so that a write
/// blocks once the pipe is full) and a write end as an overlapped-tokio File.
async fn fifo(dir: &std::path::Path, name: &str) -> (std::fs::File, File) {
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join(name);
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&p)
        .unwrap();
    let writer = OpenOptions::new().write(true).open(&p).await.unwrap();
    (reader, writer)
}

/// Reads `n` bytes from `reader` (made blocking) on a thread of its own.
#[cfg(target_os = "linux")]
fn drain(reader: std::fs::File, n: usize) -> std::thread::JoinHandle<Vec<u8>> {
    use std::io::Read;
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        let fl = libc::fcntl(reader.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    std::thread::spawn(move || {
        let mut got = vec![0u8; n];
        (&reader).read_exact(&mut got).unwrap();
        got
    })
}

/// `io::copy` and a `BufWriter` write 8 KiB at a time; were each write to
/// wait for the one before, every 8 KiB would be a write of its own (an
/// io_uring worker each, on ext4). While a write is in flight, later
/// small writes are taken at once and written after it, as one write.
#[cfg(target_os = "linux")]
async fn small_writes_behind_a_write_in_flight_return_at_once() {
    let dir = tempdir();
    let (reader, mut f) = fifo(dir.path(), "fifo").await;
    // More than the pipe holds: this write stays in flight until read.
    let big = data(1 << 20, 3);
    assert_eq!(f.write(&big).await.unwrap(), big.len());
    let mut want = big.clone();
    for i in 0..100u8 {
        let small = data(100 + i as usize, i);
        tokio::time::timeout(Duration::from_secs(2), f.write_all(&small))
            .await
            .unwrap_or_else(|_| panic!("small write {i} waited for the write in flight"))
            .unwrap();
        want.extend_from_slice(&small);
    }
    let reading = drain(reader, want.len());
    tokio::time::timeout(LIMIT, f.flush())
        .await
        .expect("flush hung")
        .unwrap();
    let got = reading.join().unwrap();
    assert!(got == want, "the bytes behind came after, in order");
}

/// The write in flight fails: the error comes from the next flush (as any
/// write's error), and the bytes the kernel did not take (the rest of that
/// write, the bytes taken behind it) are not dropped: each later flush tries
/// them again, in order.
#[cfg(target_os = "linux")]
async fn an_error_of_a_write_in_flight_keeps_the_bytes_behind_it() {
    let dir = tempdir();
    let (reader, mut f) = fifo(dir.path(), "fifo").await;
    let big = data(1 << 20, 4);
    assert_eq!(f.write(&big).await.unwrap(), big.len());
    tokio::time::timeout(Duration::from_secs(2), f.write_all(b"behind"))
        .await
        .expect("taken behind the write in flight")
        .unwrap();
    // No reader any more: the write in flight fails with EPIPE.
    drop(reader);
    for _ in 0..2 {
        // Reported; then, tried again, EPIPE again (still no reader).
        let e = tokio::time::timeout(LIMIT, f.flush())
            .await
            .expect("flush hung")
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPIPE), "{e:?}");
    }
    // A reader again: the next flush writes what was left, in order.
    let reader = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(dir.path().join("fifo"))
            .unwrap()
    };
    // SAFETY: fcntl on a descriptor this test owns.
    unsafe {
        let fl = libc::fcntl(reader.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    let reading = std::thread::spawn(move || {
        use std::io::Read;
        let mut got = Vec::new();
        (&reader).read_to_end(&mut got).unwrap();
        got
    });
    tokio::time::timeout(LIMIT, f.flush())
        .await
        .expect("flush hung")
        .unwrap();
    drop(f);
    let got = reading.join().unwrap();
    let rest = got.len() - b"behind".len();
    assert!(got.ends_with(b"behind") && rest > 0, "{} bytes", got.len());
    assert!(
        big.ends_with(&got[..rest]),
        "the rest of the failed write, then the bytes behind"
    );
}

/// Many small writes (most of them taken behind one in flight) land at
/// the right offsets; the position, a seek, a read and `O_APPEND` see them
/// all.
async fn write_behind_keeps_positions_and_appends() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&p)
        .await
        .unwrap();
    let mut want = Vec::new();
    for i in 0..3000usize {
        let chunk = data(7 + i % 13, i as u8);
        f.write_all(&chunk).await.unwrap();
        want.extend_from_slice(&chunk);
    }
    // A seek waits for every byte taken.
    assert_eq!(f.stream_position().await.unwrap(), want.len() as u64);
    f.seek(SeekFrom::Start(0)).await.unwrap();
    let mut got = Vec::new();
    f.read_to_end(&mut got).await.unwrap();
    assert!(got == want, "read back after small writes");
    // Overwrite in the middle, then go on writing at the position.
    f.seek(SeekFrom::Start(10)).await.unwrap();
    for _ in 0..100 {
        f.write_all(b"xy").await.unwrap();
    }
    want[10..210].copy_from_slice(&b"xy".repeat(100));
    f.flush().await.unwrap();
    assert!(std::fs::read(&p).unwrap() == want);
    drop(f);

    // Appending: every small write goes to the end, in order.
    let mut a = OpenOptions::new().append(true).open(&p).await.unwrap();
    for i in 0..2000usize {
        let chunk = data(5 + i % 11, i as u8);
        a.write_all(&chunk).await.unwrap();
        want.extend_from_slice(&chunk);
    }
    a.flush().await.unwrap();
    assert!(std::fs::read(&p).unwrap() == want, "appended in order");
    assert_eq!(a.stream_position().await.unwrap(), want.len() as u64);
    // Dropped with bytes behind a write in flight: all of them still land.
    for i in 0..2000usize {
        let chunk = data(3 + i % 5, i as u8);
        a.write_all(&chunk).await.unwrap();
        want.extend_from_slice(&chunk);
    }
    drop(a);
    let len = want.len() as u64;
    let done = eventually(Duration::from_secs(20), || {
        std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0) == len
    })
    .await;
    assert!(done, "the writes behind at drop completed");
    assert!(std::fs::read(&p).unwrap() == want);
}

/// The time any of these scenarios may take before it is called a hang.
const LIMIT: Duration = Duration::from_secs(60);

async fn large_write_then_read_back() {
    let dir = tempdir();
    let p = dir.path().join("big");
    let want = data(5 << 20 | 12345, 3);
    let mut f = File::create(&p).await.unwrap();
    f.write_all(&want).await.unwrap();
    f.flush().await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), want, "what std reads");
    let mut f = File::open(&p).await.unwrap();
    let mut got = Vec::new();
    let n = f.read_to_end(&mut got).await.unwrap();
    assert_eq!(n, want.len());
    assert!(got == want, "what the file reads");
    assert_eq!(f.read(&mut [0u8; 8]).await.unwrap(), 0, "end of file");
}

async fn reads_follow_seeks_and_writes() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let want = data(10_000, 1);
    std::fs::write(&p, &want).unwrap();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .await
        .unwrap();
    let mut b = [0u8; 5];
    f.read_exact(&mut b).await.unwrap();
    assert_eq!(b, want[..5]);
    assert_eq!(f.seek(SeekFrom::Current(3)).await.unwrap(), 8);
    f.read_exact(&mut b).await.unwrap();
    assert_eq!(b, want[8..13]);
    assert_eq!(f.seek(SeekFrom::End(-2)).await.unwrap(), 9998);
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, want[9998..]);
    // A write lands at the position the reads reached, and the next read
    // sees it without a flush.
    f.seek(SeekFrom::Start(100)).await.unwrap();
    f.write_all(b"XYZ").await.unwrap();
    f.seek(SeekFrom::Start(99)).await.unwrap();
    f.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, &[want[99], b'X', b'Y', b'Z', want[103]]);
    // Invalid seeks fail and leave the position.
    let pos = f.stream_position().await.unwrap();
    let e = f.seek(SeekFrom::Current(-1_000_000)).await.unwrap_err();
    assert!(is_negative_seek(&e), "{e:?}");
    assert_eq!(f.stream_position().await.unwrap(), pos);
    let e = f.seek(SeekFrom::Start(u64::MAX)).await.unwrap_err();
    assert!(is_negative_seek(&e), "{e:?}");
}

/// Whether `e` is what a seek before the start fails with, as std's:
/// EINVAL's kind on Linux, ERROR_NEGATIVE_SEEK (131) on Windows.
fn is_negative_seek(e: &std::io::Error) -> bool {
    if cfg!(windows) {
        e.raw_os_error() == Some(131)
    } else {
        e.kind() == ErrorKind::InvalidInput
    }
}

async fn write_is_behind_and_its_error_comes_later() {
    let dir = tempdir();
    let p = dir.path().join("ro");
    std::fs::write(&p, b"content").unwrap();
    let mut f = File::open(&p).await.unwrap();
    // As tokio: the write is accepted, the error comes with the flush.
    assert_eq!(f.write(b"abc").await.unwrap(), 3);
    let e = f.flush().await.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(code::NOT_OPENED), "{e:?}");
    // Unlike tokio's, the bytes are not dropped: the next flush tries them
    // again (and fails again: the file is read-only).
    let e = f.flush().await.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(code::NOT_OPENED), "{e:?}");
    assert_eq!(std::fs::read(&p).unwrap(), b"content");
    // Windows: FileEndOfFileInfo needs write access (ERROR_ACCESS_DENIED).
    #[cfg(windows)]
    assert_eq!(f.set_len(1).await.unwrap_err().raw_os_error(), Some(5));
}

async fn dropping_a_file_completes_its_write() {
    let dir = tempdir();
    let p = dir.path().join("dropped");
    let want = data(6 << 20, 9);
    let mut f = File::create(&p).await.unwrap();
    f.write_all(&want).await.unwrap();
    // The last chunk (up to 2 MiB) may still be in flight here.
    drop(f);
    let done = eventually(Duration::from_secs(20), || {
        std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0) == want.len() as u64
    })
    .await;
    assert!(done, "the write in flight at drop completed");
    assert!(std::fs::read(&p).unwrap() == want);
}

async fn max_buf_size_bounds_each_transfer() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&p)
        .await
        .unwrap();
    assert_eq!(f.max_buf_size(), 2 * 1024 * 1024, "tokio's default");
    f.set_max_buf_size(4);
    assert_eq!(f.write(b"0123456789").await.unwrap(), 4);
    f.write_all(b"456789").await.unwrap();
    f.seek(SeekFrom::Start(0)).await.unwrap();
    let mut b = [0u8; 10];
    assert_eq!(f.read(&mut b).await.unwrap(), 4, "one read, 4 bytes");
    assert_eq!(&b[..4], b"0123");
    let mut s = String::new();
    f.read_to_string(&mut s).await.unwrap();
    assert_eq!(s, "456789");
}

async fn vectored_writes_gather() {
    let dir = tempdir();
    let p = dir.path().join("v");
    let mut f = File::create(&p).await.unwrap();
    assert!(tokio::io::AsyncWrite::is_write_vectored(&f));
    let bufs = [
        std::io::IoSlice::new(b"one "),
        std::io::IoSlice::new(b""),
        std::io::IoSlice::new(b"two "),
        std::io::IoSlice::new(b"three"),
    ];
    assert_eq!(f.write_vectored(&bufs).await.unwrap(), 13);
    f.set_max_buf_size(6);
    assert_eq!(f.write_vectored(&bufs).await.unwrap(), 6, "bounded");
    f.flush().await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"one two threeone tw");
}

async fn shutdown_flushes() {
    let dir = tempdir();
    let p = dir.path().join("s");
    let mut f = File::create(&p).await.unwrap();
    f.write_all(&data(100_000, 2)).await.unwrap();
    f.shutdown().await.unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 100_000);
}

async fn set_len_keeps_the_position() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&p)
        .await
        .unwrap();
    f.write_all(b"0123456789").await.unwrap();
    f.set_len(4).await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"0123");
    assert_eq!(f.stream_position().await.unwrap(), 10);
    f.write_all(b"X").await.unwrap();
    f.flush().await.unwrap();
    assert_eq!(
        std::fs::read(&p).unwrap(),
        b"0123\0\0\0\0\0\0X",
        "a hole of zeros"
    );
    f.set_len(20).await.unwrap();
    assert_eq!(f.metadata().await.unwrap().len(), 20);
    f.sync_all().await.unwrap();
    f.sync_data().await.unwrap();
}

async fn try_clone_shares_the_position() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut a = File::create(&p).await.unwrap();
    let mut b = a.try_clone().await.unwrap();
    #[cfg(unix)]
    assert_ne!(a.as_raw_fd(), b.as_raw_fd());
    #[cfg(windows)]
    assert_ne!(
        std::os::windows::io::AsRawHandle::as_raw_handle(&a),
        std::os::windows::io::AsRawHandle::as_raw_handle(&b)
    );
    a.write_all(b"abc").await.unwrap();
    a.flush().await.unwrap();
    b.write_all(b"def").await.unwrap();
    b.flush().await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"abcdef");
    drop(a);
    b.write_all(b"g").await.unwrap();
    b.flush().await.unwrap();
    assert_eq!(
        std::fs::read(&p).unwrap(),
        b"abcdefg",
        "the clone outlives it"
    );
}

#[cfg(unix)]
async fn std_conversions_keep_the_descriptor_and_position() {
    let dir = tempdir();
    let p = dir.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    let mut std_file = std::fs::File::open(&p).unwrap();
    std::io::Seek::seek(&mut std_file, SeekFrom::Start(3)).unwrap();
    let raw = std_file.as_raw_fd();
    let mut f = File::from_std(std_file);
    assert_eq!(f.as_raw_fd(), raw);
    let mut b = [0u8; 2];
    f.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"34", "from the std file's position");
    let mut std_file = f.into_std().await;
    assert_eq!(std_file.as_raw_fd(), raw);
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std_file, &mut s).unwrap();
    assert_eq!(s, "56789", "the std file goes on from here");
    let f: File = std_file.into();
    let f = f.try_into_std().expect("nothing in flight");
    let f = File::from(std::os::fd::OwnedFd::from(f));
    drop(f);
}

/// A new file at `p` with 5 bytes written and then its times set (which
/// waits for the write: metadata waits for nothing); returns the file, the
/// time set and std's metadata after it, its modification time and length
/// checked.
async fn written_then_timed(
    p: &std::path::Path,
) -> (File, std::time::SystemTime, std::fs::Metadata) {
    use std::time::{Duration, SystemTime};
    let mut f = File::create(p).await.unwrap();
    f.write_all(b"12345").await.unwrap();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    f.set_times(fs::FileTimes::new().set_accessed(when).set_modified(when))
        .await
        .unwrap();
    let m = std::fs::metadata(p).unwrap();
    assert_eq!(m.modified().unwrap(), when);
    assert_eq!(m.len(), 5, "the write before it is done");
    (f, when, m)
}

/// Times, the read-only attribute (Windows' permissions) and metadata.
#[cfg(windows)]
async fn times_readonly_and_metadata() {
    let dir = tempdir();
    let p = dir.path().join("t");
    let (f, when, _) = written_then_timed(&p).await;
    let meta = f.metadata().await.unwrap();
    assert_eq!((meta.len(), meta.modified().unwrap()), (5, when));
    let mut perm = meta.permissions();
    perm.set_readonly(true);
    f.set_permissions(perm.clone()).await.unwrap();
    assert!(std::fs::metadata(&p).unwrap().permissions().readonly());
    perm.set_readonly(false);
    #[allow(clippy::permissions_set_readonly_false)]
    f.set_permissions(perm).await.unwrap();
    assert!(!std::fs::metadata(&p).unwrap().permissions().readonly());
    // FromRawHandle takes ownership as std's does.
    let raw =
        std::os::windows::io::IntoRawHandle::into_raw_handle(std::fs::File::open(&p).unwrap());
    // SAFETY: raw is a handle just opened and owned by nobody else.
    let mut g = unsafe { <File as std::os::windows::io::FromRawHandle>::from_raw_handle(raw) };
    let mut s = String::new();
    g.read_to_string(&mut s).await.unwrap();
    assert_eq!(s, "12345");
}

async fn seek_while_busy_is_refused() {
    use std::pin::Pin;
    use tokio::io::AsyncSeek;
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut f = File::create(&p).await.unwrap();
    f.write_all(&data(1 << 20, 4)).await.unwrap();
    // If the write is still in flight, start_seek is refused as tokio's.
    if let Err(e) = Pin::new(&mut f).start_seek(SeekFrom::Start(0)) {
        assert_eq!(e.kind(), ErrorKind::Other);
        assert!(e.to_string().contains("poll_complete"), "{e}");
    }
    // seek() completes what is pending first.
    assert_eq!(f.seek(SeekFrom::Start(7)).await.unwrap(), 7);
    f.flush().await.unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 1 << 20);
}

#[cfg(unix)]
async fn descriptors_are_borrowable() {
    let dir = tempdir();
    let p = dir.path().join("f");
    std::fs::write(&p, b"abc").unwrap();
    let f = File::open(&p).await.unwrap();
    let owned = f.as_fd().try_clone_to_owned().unwrap();
    let mut std_file = std::fs::File::from(owned);
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std_file, &mut s).unwrap();
    assert_eq!(s, "abc");
    assert!(format!("{f:?}").contains("File"));
}

async fn open_options_follow_std_rules() {
    let dir = tempdir();
    let p = dir.path().join("f");
    // Each combination std refuses is refused the same way.
    let cases: Vec<(&str, std::fs::OpenOptions, OpenOptions)> = vec![
        ("nothing", std::fs::OpenOptions::new(), OpenOptions::new()),
        (
            "create read-only",
            std::fs::OpenOptions::new().read(true).create(true).clone(),
            OpenOptions::new().read(true).create(true).clone(),
        ),
        (
            "append+truncate",
            std::fs::OpenOptions::new()
                .append(true)
                .truncate(true)
                .clone(),
            OpenOptions::new().append(true).truncate(true).clone(),
        ),
        (
            "missing",
            std::fs::OpenOptions::new().read(true).clone(),
            OpenOptions::new().read(true).clone(),
        ),
    ];
    for (name, std_opts, ours) in cases {
        assert_eq!(
            err_of(ours.open(&p).await),
            err_of(std_opts.open(&p)),
            "{name}"
        );
    }
    File::create_new(&p).await.unwrap();
    assert_eq!(
        err_of(File::create_new(&p).await),
        (ErrorKind::AlreadyExists, Some(code::EXISTS))
    );
    // append + create_new is allowed, as in std.
    let q = dir.path().join("g");
    OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(&q)
        .await
        .unwrap();
}

async fn positional_io_beyond_tokio() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&p)
        .await
        .unwrap();
    let (res, _) = f.write_all_at(data(8192, 5), 4096).await;
    res.unwrap();
    let (res, buf) = f.read_exact_at(vec![0u8; 100], 4096 + 50).await;
    res.unwrap();
    assert_eq!(buf, data(8192, 5)[50..150]);
    let (n, buf) = f.read_at(vec![0u8; 100], 4096 + 8192 - 10).await;
    assert_eq!(n.unwrap(), 10, "short at end of file");
    assert_eq!(&buf[..10], &data(8192, 5)[8182..]);
    let (res, _) = f.read_exact_at(vec![0u8; 100], 4096 + 8192 - 10).await;
    assert_eq!(res.unwrap_err().kind(), ErrorKind::UnexpectedEof);
    let (n, _) = f.write_at(b"hi".to_vec(), 0).await;
    assert_eq!(n.unwrap(), 2);
    // The cursor did not move.
    assert_eq!(f.stream_position().await.unwrap(), 0);
    let mut b = [0u8; 2];
    f.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"hi");
    match f.allocate(0, 1 << 20).await {
        // Wine does not implement FileAllocationInfo (ERROR_CALL_NOT_IMPLEMENTED).
        Err(e) if cfg!(windows) && e.raw_os_error() == Some(120) => {
            eprintln!("SKIPPED: allocate: {e} (Wine)");
            return;
        }
        r => r.unwrap(),
    }
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 1 << 20);
    let st = f.statx().await.unwrap();
    assert!(st.is_file());
    assert_eq!(st.len, 1 << 20);
    assert!(st.allocated >= 1 << 20, "space reserved: {}", st.allocated);
    let ro = File::open(&p).await.unwrap();
    let (res, _) = ro.write_at(b"x".to_vec(), 0).await;
    assert_eq!(res.unwrap_err().raw_os_error(), Some(code::NOT_OPENED));
}

async fn direct_io_with_aligned_buffers() {
    let dir = tempdir();
    let p = dir.path().join("direct");
    let f = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .direct(true)
        .open(&p)
        .await
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(code::INVALID) => {
            eprintln!("SKIPPED: O_DIRECT unsupported on this file system");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(f.is_direct());
    let a = f.alignment();
    let len = 4096.max(a.offset as usize);
    let pool = overlapped::AlignedBufPool::new(len, a.memory.max(a.offset) as usize, 2).unwrap();
    let mut buf = pool.get();
    buf.fill(0x5a);
    let (res, _) = f.write_all_at(buf, 0).await;
    res.unwrap();
    let (res, back) = f.read_exact_at(pool.get(), 0).await;
    res.unwrap();
    assert!(back.iter().all(|&b| b == 0x5a));
    // The unaligned AsyncRead buffer is refused as the kernel would.
    let (res, _) = f.read_at(vec![0u8; 3], 1).await;
    assert_eq!(res.unwrap_err().kind(), ErrorKind::InvalidInput);
    let _ = fs::remove_file(&p).await;
}

#[cfg(unix)]
async fn times_permissions_and_metadata() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;
    let dir = tempdir();
    let p = dir.path().join("t");
    let (f, when, m) = written_then_timed(&p).await;
    assert_eq!(m.accessed().unwrap(), when);
    let later = when + Duration::from_secs(60);
    f.set_modified(later).await.unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), later);
    let meta = f.metadata().await.unwrap();
    assert_eq!((meta.len(), meta.modified().unwrap()), (5, later));
    f.set_permissions(std::fs::Permissions::from_mode(0o604))
        .await
        .unwrap();
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o604
    );
    // FromRawFd takes ownership as std's does.
    let raw = std::os::fd::IntoRawFd::into_raw_fd(std::fs::File::open(&p).unwrap());
    // SAFETY: raw is a descriptor just opened and owned by nobody else.
    let mut g = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let mut s = String::new();
    g.read_to_string(&mut s).await.unwrap();
    assert_eq!(s, "12345");
}

#[cfg(target_os = "linux")]
async fn write_through_and_access_hints() {
    let dir = tempdir();
    let p = dir.path().join("dsync");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .write_through(true)
        .access(overlapped::Access::Sequential)
        .open(&p)
        .await
        .unwrap();
    // SAFETY: F_GETFL reads the descriptor's flags; no memory involved.
    let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    assert_eq!(flags & libc::O_DSYNC, libc::O_DSYNC, "O_DSYNC set");
    f.write_all(b"durable").await.unwrap();
    f.flush().await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"durable");
    let plain = File::open(&p).await.unwrap();
    // SAFETY: as above.
    let flags = unsafe { libc::fcntl(plain.as_raw_fd(), libc::F_GETFL) };
    assert_eq!(flags & libc::O_DSYNC, 0);
}

#[cfg(target_os = "linux")]
async fn a_cancelled_read_loses_no_data() {
    // A read future dropped while its read is in flight: the read goes on,
    // and its bytes come to the next reads, as with tokio's background
    // read. A FIFO makes the read wait for data.
    let dir = tempdir();
    let p = dir.path().join("fifo");
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Read and write: opening a FIFO so does not wait for a writer.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .await
        .unwrap();
    let mut big = [0u8; 64];
    {
        let mut read = Box::pin(f.read(&mut big));
        assert!(
            crate::util::poll_once(&mut read).await.is_none(),
            "nothing to read yet"
        );
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .and_then(|mut w| std::io::Write::write_all(&mut w, b"hello world"))
        .unwrap();
    let mut two = [0u8; 2];
    f.read_exact(&mut two).await.unwrap();
    assert_eq!(&two, b"he");
    let mut rest = [0u8; 9];
    f.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest, b"llo world");
}

/// Whether `got` is `half` bytes of one letter followed by `half` of the
/// other, in either order when `either`.
fn halves(got: &[u8], half: usize, either: bool) -> bool {
    let uniform = |s: &[u8], c: u8| s.iter().all(|&x| x == c);
    let ab =
        uniform(&got[..half.min(got.len())], b'a') && uniform(&got[half.min(got.len())..], b'b');
    let ba =
        uniform(&got[..half.min(got.len())], b'b') && uniform(&got[half.min(got.len())..], b'a');
    got.len() == 2 * half && (ab || (either && ba))
}

async fn clones_writing_in_turn_never_overwrite_each_other() {
    // The second clone's write must not land on the first's.
    tokio::time::timeout(LIMIT, async {
        let dir = tempdir();
        let half = 64 << 10;
        for round in 0..30 {
            let p = dir.path().join(format!("r{round}"));
            let mut a = File::create(&p).await.unwrap();
            let mut b = a.try_clone().await.unwrap();
            // Each write awaited, the flushes after both: the second write
            // starts while the first may be in flight, and must start
            // where the first ends.
            let flush_between = round % 3 == 2;
            a.write_all(&vec![b'a'; half]).await.unwrap();
            if flush_between {
                a.flush().await.unwrap();
            }
            b.write_all(&vec![b'b'; half]).await.unwrap();
            a.flush().await.unwrap();
            b.flush().await.unwrap();
            let got = std::fs::read(&p).unwrap();
            assert!(
                halves(&got, half, false),
                "round {round}: {} bytes, the second half not all 'b' or the first not all 'a'",
                got.len()
            );
            assert_eq!(a.stream_position().await.unwrap(), 2 * half as u64);
        }
    })
    .await
    .expect("hung");
}

async fn clones_writing_at_once_never_overwrite_each_other() {
    // As two tokio clones writing at once: each write takes its own range
    // of the shared position (tokio's are one write(2) each on a shared
    // file description).
    tokio::time::timeout(LIMIT, async {
        let dir = tempdir();
        let half = 64 << 10;
        for round in 0..30 {
            let p = dir.path().join(format!("r{round}"));
            let a = File::create(&p).await.unwrap();
            let b = a.try_clone().await.unwrap();
            let tasks: Vec<_> = [(a, b'a'), (b, b'b')]
                .into_iter()
                .map(|(mut f, c)| {
                    tokio::spawn(async move {
                        f.write_all(&vec![c; half]).await.unwrap();
                        f.flush().await.unwrap();
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let got = std::fs::read(&p).unwrap();
            assert!(
                halves(&got, half, true),
                "round {round}: {} bytes",
                got.len()
            );
        }
    })
    .await
    .expect("hung");
}

async fn clones_reading_at_once_read_distinct_bytes() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempdir();
        let half = 64 << 10;
        let p = dir.path().join("f");
        let mut want = vec![b'a'; half];
        want.extend(vec![b'b'; half]);
        std::fs::write(&p, &want).unwrap();
        for round in 0..30 {
            let a = File::open(&p).await.unwrap();
            let b = a.try_clone().await.unwrap();
            let tasks: Vec<_> = [a, b]
                .into_iter()
                .map(|mut f| {
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; half];
                        f.read_exact(&mut buf).await.unwrap();
                        buf
                    })
                })
                .collect();
            let mut got = Vec::new();
            for t in tasks {
                got.push(t.await.unwrap());
            }
            got.sort();
            assert!(
                got.concat() == want,
                "round {round}: both read the same bytes"
            );
        }
    })
    .await
    .expect("hung");
}

async fn clones_see_each_others_seeks() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempdir();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let mut a = File::open(&p).await.unwrap();
        let mut b = a.try_clone().await.unwrap();
        a.seek(SeekFrom::Start(4)).await.unwrap();
        assert_eq!(b.stream_position().await.unwrap(), 4);
        let mut two = [0u8; 2];
        b.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"45");
        a.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"67", "a goes on where b stopped");
        assert_eq!(b.seek(SeekFrom::Current(-3)).await.unwrap(), 5);
        a.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"56");
    })
    .await
    .expect("hung");
}

/// The line task `t` writes as its `i`th, padded so that a torn or
/// overlapping write shows.
fn line(t: usize, i: usize) -> String {
    format!(
        "task {t:02} line {i:02} {}\n",
        "x".repeat(40 + (t * 7 + i) % 50)
    )
}

/// Whether this runs under Wine (its ntdll exports `wine_get_version`),
/// whose `FILE_APPEND_DATA` writes are not atomic at the end of the file
/// as Windows' are: concurrent appends tear there whoever makes them.
#[cfg(windows)]
fn under_wine() -> bool {
    #[link(name = "kernel32")]
    extern "system" {
        fn GetModuleHandleA(name: *const u8) -> *mut std::ffi::c_void;
        fn GetProcAddress(module: *mut std::ffi::c_void, name: *const u8) -> *mut std::ffi::c_void;
    }
    // SAFETY: NUL-terminated names; ntdll is loaded in every process.
    unsafe {
        let ntdll = GetModuleHandleA(c"ntdll.dll".as_ptr().cast());
        !ntdll.is_null() && !GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()).is_null()
    }
}

async fn appending_tasks_lose_no_line() {
    // 50 tasks appending 40 lines each, each line one
    // write_all and a flush: every line lands, whole, at the end.
    tokio::time::timeout(LIMIT, async {
        let dir = tempdir();
        let p = dir.path().join("log");
        std::fs::write(&p, b"").unwrap();
        let tasks: Vec<_> = (0..50)
            .map(|t| {
                let p = p.clone();
                tokio::spawn(async move {
                    let mut f = OpenOptions::new().append(true).open(&p).await.unwrap();
                    for i in 0..40 {
                        f.write_all(line(t, i).as_bytes()).await.unwrap();
                        f.flush().await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let got = std::fs::read_to_string(&p).unwrap();
        let mut got: Vec<&str> = got.split_inclusive('\n').collect();
        got.sort_unstable();
        let mut want: Vec<String> = (0..50)
            .flat_map(|t| (0..40).map(move |i| line(t, i)))
            .collect();
        want.sort_unstable();
        let missing = want.iter().filter(|l| !got.contains(&l.as_str())).count();
        #[cfg(windows)]
        if missing > 0 && under_wine() {
            eprintln!(
                "SKIPPED: {missing} lines torn: Wine's appends are not atomic at the end of the \
                 file (Windows' are)"
            );
            return;
        }
        assert_eq!(got.len(), 2000, "{missing} lines missing or torn");
        assert!(
            got.iter().zip(&want).all(|(g, w)| g == w),
            "{missing} lines missing or torn"
        );
    })
    .await
    .expect("hung");
}

async fn appending_after_a_seek_still_appends() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempdir();
        let p = dir.path().join("log");
        std::fs::write(&p, b"start\n").unwrap();
        let mut f = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&p)
            .await
            .unwrap();
        f.write_all(b"one\n").await.unwrap();
        assert_eq!(f.seek(SeekFrom::Start(0)).await.unwrap(), 0);
        let mut s = [0u8; 5];
        f.read_exact(&mut s).await.unwrap();
        assert_eq!(&s, b"start");
        f.write_all(b"two\n").await.unwrap();
        f.flush().await.unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"start\none\ntwo\n");
        assert_eq!(
            f.stream_position().await.unwrap(),
            14,
            "after the write, at the end"
        );
        f.seek(SeekFrom::Start(2)).await.unwrap();
        f.write_all(b"three\n").await.unwrap();
        f.flush().await.unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"start\none\ntwo\nthree\n");
        // Someone else appends: the next write still goes after it.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .and_then(|mut o| std::io::Write::write_all(&mut o, b"other\n"))
            .unwrap();
        f.seek(SeekFrom::Start(0)).await.unwrap();
        f.write_all(b"four\n").await.unwrap();
        f.flush().await.unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"start\none\ntwo\nthree\nother\nfour\n"
        );
    })
    .await
    .expect("hung");
}

async fn set_max_buf_size_zero_panics_as_tokio() {
    // tokio panics on 0 (documented); so must this.
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut ours = File::create(&p).await.unwrap();
    let mut theirs = tokio::fs::File::open(&p).await.unwrap();
    let msg = |e: Box<dyn std::any::Any + Send>| {
        e.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| e.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    };
    let t = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| theirs.set_max_buf_size(0)));
    let o = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ours.set_max_buf_size(0)));
    let t = msg(t.expect_err("tokio panics"));
    let o = msg(o.expect_err("overlapped-tokio panics as tokio does"));
    assert_eq!(o, t);
    assert_eq!(ours.max_buf_size(), 2 * 1024 * 1024, "unchanged");
}

/// A read the page cache can answer goes straight into the caller's
/// `ReadBuf` (after what it already holds), moves the cursor by what it
/// read, and seeks afterwards start from there.
async fn cached_reads_fill_the_callers_buffer_and_keep_the_cursor() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let content = data(200_000, 7);
    std::fs::write(&p, &content).unwrap(); // just written: in the cache
    let engine = overlapped_tokio::engine();
    let hits = engine.stats().fast_path_hits;
    let mut f = File::open(&p).await.unwrap();

    // A Vec with a prefix: the read appends after it.
    let mut got = b"prefix".to_vec();
    got.reserve(1000);
    let n = f.read_buf(&mut got).await.unwrap();
    assert!(n > 0);
    assert_eq!(&got[..6], b"prefix");
    assert_eq!(&got[6..], &content[..n]);
    assert_eq!(f.stream_position().await.unwrap(), n as u64);

    // Exact reads across the cursor, then relative and absolute seeks.
    let mut buf = vec![0u8; 5000];
    f.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf, content[n..n + 5000]);
    let at = f.seek(SeekFrom::Current(-100)).await.unwrap();
    assert_eq!(at, (n + 4900) as u64);
    f.read_exact(&mut buf[..100]).await.unwrap();
    assert_eq!(&buf[..100], &content[n + 4900..n + 5000]);
    f.seek(SeekFrom::Start(199_990)).await.unwrap();
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).await.unwrap();
    assert_eq!(tail, content[199_990..]);
    assert_eq!(f.read(&mut buf).await.unwrap(), 0, "end of file");
    // Windows has no read of the page cache alone (no fast path there).
    #[cfg(target_os = "linux")]
    assert!(
        engine.stats().fast_path_hits > hits,
        "the cached reads were answered from the page cache"
    );
    #[cfg(not(target_os = "linux"))]
    let _ = hits;
}

/// The page-cache path is taken only with the cursor the file's alone:
/// clones share it (and read distinct bytes in turn), and an O_APPEND file
/// that wrote reads from the end, as std and tokio do.
async fn cached_reads_of_clones_and_appending_files_keep_positions() {
    let dir = tempdir();
    let p = dir.path().join("f");
    let content = data(10_000, 9);
    std::fs::write(&p, &content).unwrap();
    let mut a = File::open(&p).await.unwrap();
    let mut b = a.try_clone().await.unwrap();
    let mut x = vec![0u8; 3000];
    a.read_exact(&mut x).await.unwrap();
    assert_eq!(x, content[..3000]);
    b.read_exact(&mut x).await.unwrap();
    assert_eq!(
        x,
        content[3000..6000],
        "the clone goes on from the shared cursor"
    );
    drop(b);
    a.read_exact(&mut x).await.unwrap();
    assert_eq!(x, content[6000..9000], "and so does the file, alone again");

    let mut w = OpenOptions::new()
        .read(true)
        .append(true)
        .open(&p)
        .await
        .unwrap();
    w.write_all(b"tail").await.unwrap();
    w.flush().await.unwrap();
    let mut rest = Vec::new();
    w.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "after an append the cursor is at the end");
    w.seek(SeekFrom::Start(9_998)).await.unwrap();
    w.read_to_end(&mut rest).await.unwrap();
    assert_eq!(&rest[..2], &content[9_998..]);
    assert_eq!(&rest[2..], b"tail");
}
