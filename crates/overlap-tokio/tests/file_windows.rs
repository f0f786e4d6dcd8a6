//! `File` and Windows' handles: `from_std` of a std file (opened again for
//! overlapped I/O, or its own handle adopted, or, with no kernel handle at
//! all, a file whose every use fails), `into_std`, and borrowed handles.

use std::io::SeekFrom;

use overlapped_tokio::fs::File;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::util::tempdir;

rt_tests!(
    std_conversions_keep_the_position,
    from_std_of_an_unshared_file_adopts_its_handle,
    from_std_of_no_kernel_handle_fails_at_use_and_never_panics,
    handles_are_borrowable,
);

/// On Windows a std file's handle is synchronous and the engine's
/// overlapped: `from_std` opens the file again (another handle), and
/// `into_std` too; the position goes along both ways, and the std file
/// reads as std's own (synchronously).
async fn std_conversions_keep_the_position() {
    use std::os::windows::io::AsRawHandle;
    let dir = tempdir();
    let p = dir.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    let mut std_file = std::fs::File::open(&p).unwrap();
    std::io::Seek::seek(&mut std_file, SeekFrom::Start(3)).unwrap();
    let raw = std_file.as_raw_handle();
    let mut f = File::from_std(std_file);
    assert_ne!(f.as_raw_handle(), raw, "opened again for overlapped I/O");
    let mut b = [0u8; 2];
    f.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"34", "from the std file's position");
    let mut std_file = f.into_std().await;
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std_file, &mut s).unwrap();
    assert_eq!(s, "56789", "the std file goes on from here");
    // A file opened for overlapped I/O already is adopted as it is.
    let overlapped = {
        use std::os::windows::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(0x4000_0000) // FILE_FLAG_OVERLAPPED
            .open(&p)
            .unwrap()
    };
    let raw = overlapped.as_raw_handle();
    let mut f = File::from(std::os::windows::io::OwnedHandle::from(overlapped));
    assert_eq!(f.as_raw_handle(), raw);
    f.write_all(b"ab").await.unwrap();
    f.flush().await.unwrap();
    let f = f.try_into_std().expect("nothing in flight");
    let mut s = String::new();
    std::io::Read::read_to_string(&mut &f, &mut s).unwrap();
    assert_eq!(s, "23456789", "a synchronous std file at the position");
    assert_eq!(std::fs::read(&p).unwrap(), b"ab23456789");
}

/// A std file shared with nobody (`share_mode(0)`) cannot be opened again
/// for overlapped I/O: `from_std` adopts its handle itself (reads and
/// writes on the engine's pool), and the file works as any: written at the
/// std file's position, sought, read back, synced; `into_std` gives the
/// same handle back.
async fn from_std_of_an_unshared_file_adopts_its_handle() {
    use std::os::windows::fs::OpenOptionsExt;
    use std::os::windows::io::AsRawHandle;
    let dir = tempdir();
    let p = dir.path().join("f");
    let mut std_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .share_mode(0)
        .open(&p)
        .unwrap();
    std::io::Write::write_all(&mut std_file, b"0123").unwrap();
    let raw = std_file.as_raw_handle();
    let mut f = File::from_std(std_file);
    assert_eq!(f.as_raw_handle(), raw, "the std handle itself");
    f.write_all(b"4567").await.unwrap();
    f.flush().await.unwrap();
    assert_eq!(f.seek(SeekFrom::Start(2)).await.unwrap(), 2);
    let mut s = String::new();
    f.read_to_string(&mut s).await.unwrap();
    assert_eq!(s, "234567");
    let (n, buf) = f.read_at(vec![0u8; 3], 1).await;
    assert_eq!(&buf[..n.unwrap()], b"123");
    f.sync_all().await.unwrap();
    assert_eq!(f.metadata().await.unwrap().len(), 8);
    let shut_out = std::fs::File::open(&p).unwrap_err();
    assert_eq!(shut_out.raw_os_error(), Some(32), "ERROR_SHARING_VIOLATION");
    let std_file = f.into_std().await;
    assert_eq!(std_file.as_raw_handle(), raw, "given back as it was");
    drop(std_file);
    assert_eq!(std::fs::read(&p).unwrap(), b"01234567");
}

/// The handle is borrowable, and a duplicate is the same file.
async fn handles_are_borrowable() {
    use std::os::windows::io::AsHandle;
    let dir = tempdir();
    let p = dir.path().join("f");
    std::fs::write(&p, b"abc").unwrap();
    let f = File::open(&p).await.unwrap();
    let owned = f.as_handle().try_clone_to_owned().unwrap();
    let std_file = std::fs::File::from(owned);
    assert_eq!(std_file.metadata().unwrap().len(), 3);
    let (n, buf) = f.read_at(vec![0u8; 8], 0).await;
    assert_eq!(&buf[..n.unwrap()], b"abc");
    assert!(format!("{f:?}").contains("File"));
}

/// A std file made from a raw value that is no kernel handle cannot be
/// adopted: `from_std` (which cannot fail) gives a file whose every use
/// fails with `ERROR_INVALID_HANDLE`, and the calls made on a duplicate of
/// its handle, and `into_std`, fail or give a std file that fails the same
/// way, without panicking and without lending the process's
/// pseudo-handle (INVALID_HANDLE_VALUE's other meaning) as a file.
async fn from_std_of_no_kernel_handle_fails_at_use_and_never_panics() {
    use std::os::windows::io::{FromRawHandle, RawHandle};
    // A value beyond what a process's handle table gives out (a kernel
    // handle fits 32 bits, sign-extended), which the engine cannot keep.
    let bogus = (1usize << 40) as RawHandle;
    // SAFETY: the value names no handle, so closing it closes nothing of
    // anyone's (the std file is consumed by from_std at once).
    let std_file = unsafe { std::fs::File::from_raw_handle(bogus) };
    let mut f = File::from_std(std_file);
    let (n, _) = f.read_at(vec![0u8; 4], 0).await;
    assert_eq!(
        n.unwrap_err().raw_os_error(),
        Some(6),
        "ERROR_INVALID_HANDLE"
    );
    let e = f.write_all(b"x").await.and(f.flush().await).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(6), "{e}");
    let e = f.set_len(3).await.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(6), "{e}");
    let e = f.try_clone().await.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(6), "{e}");
    // Made on a duplicate of the handle: there is none to duplicate.
    let e = f.metadata().await.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(6), "{e}");
    let e = f.set_times(std::fs::FileTimes::new()).await.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(6), "{e}");
    let std_file = f.into_std().await;
    assert_eq!(
        std::os::windows::io::AsRawHandle::as_raw_handle(&std_file) as isize,
        -1,
        "INVALID_HANDLE_VALUE, not a duplicate of the process's own handle"
    );
    assert!(
        std_file.metadata().is_err(),
        "a std file with no handle fails too"
    );
}
