//! Every file operation on real files, on both drivers: open options, reads
//! and writes with each owned buffer type, the `exact`/`all` forms, syncs,
//! allocate, set_len, metadata and close (and Windows' set_valid_data). Data is patterned so that a block
//! at the wrong offset is caught, and checked against std's view of the file.

#[cfg(target_os = "linux")]
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::common::*;
use futures::future::join_all;
use overlapped::{Access, AlignedBuf, AlignedBufPool, Engine, Error, File, OpenOptions, Task};

per_driver!(
    roundtrip_every_buffer_type,
    open_options_reach_the_kernel,
    create_new_truncate_and_existing,
    #[cfg(target_os = "linux")]
    mode_sets_permissions,
    access_hints_open_and_read,
    exact_and_all_large_transfers,
    direct_io_with_aligned_pool,
    direct_write_through,
    sync_all_and_sync_data,
    allocate_reserves_space_as_zeros,
    allocate_never_exposes_stale_data,
    set_len_shrinks_and_grows,
    metadata_matches_the_kernel,
    close_waits_for_operations_in_flight,
    many_operations_in_flight_out_of_order,
    file_open_and_create,
    a_tiny_ring_and_one_thread_still_take_many_operations,
    appenders_on_threads_lose_no_line,
    direct_appenders_on_threads_lose_no_block,
    #[cfg(target_os = "linux")]
    xattr_set_and_get_on_a_real_file,
    #[cfg(windows)]
    xattrs_are_refused_with_the_buffer_back,
    #[cfg(windows)]
    set_valid_data_within_the_size,
    #[cfg(windows)]
    a_synchronous_handle_is_adopted_onto_the_pool,
);

fn rw(engine: &Engine, path: &std::path::Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(engine, path)
        .wait()
        .expect("open read+write")
}

fn roundtrip_every_buffer_type(d: Driver) {
    static STATIC_BYTES: &[u8] = b"overlap: a &'static [u8] written straight from static memory";
    for fast_path in [true, false] {
        let engine = d.builder().cache_fast_path(fast_path).build().unwrap();
        let dir = tempdir();
        let path = dir.path().join("buffers");
        let file = rw(&engine, &path);
        let seed = 11;

        // Vec<u8> at 0.
        let v = pattern(seed, 0, 10_000);
        let (res, back) = file.write_at(v.clone(), 0).wait();
        assert_eq!(res.unwrap(), 10_000);
        assert_eq!(back, v, "the Vec comes back unchanged");

        // Box<[u8]> right after.
        let b: Box<[u8]> = pattern(seed, 10_000, 5_000).into_boxed_slice();
        let (res, back) = file.write_at(b, 10_000).wait();
        assert_eq!(res.unwrap(), 5_000);
        assert_pattern(&back, seed, 10_000);

        // AlignedBuf at an odd offset (buffered I/O does not need alignment).
        let mut a = AlignedBuf::new(3_001, 512).unwrap();
        fill_pattern(&mut a, seed, 15_000);
        let (res, _) = file.write_at(a, 15_000).wait();
        assert_eq!(res.unwrap(), 3_001);

        // &'static [u8].
        let (res, back) = file.write_at(STATIC_BYTES, 18_001).wait();
        assert_eq!(res.unwrap(), STATIC_BYTES.len());
        assert_eq!(back.as_ptr(), STATIC_BYTES.as_ptr());
        let end = 18_001 + STATIC_BYTES.len() as u64;

        // Read everything back with each mutable buffer type.
        let (res, v) = file.read_at(vec![0u8; 10_000], 0).wait();
        assert_eq!(res.unwrap(), 10_000);
        assert_pattern(&v, seed, 0);
        let (res, b) = file
            .read_at(vec![0u8; 5_000].into_boxed_slice(), 10_000)
            .wait();
        assert_eq!(res.unwrap(), 5_000);
        assert_pattern(&b, seed, 10_000);
        let (res, a) = file
            .read_at(AlignedBuf::new(3_001, 4096).unwrap(), 15_000)
            .wait();
        assert_eq!(res.unwrap(), 3_001);
        assert_pattern(&a, seed, 15_000);
        let (res, s) = file.read_at(vec![0u8; STATIC_BYTES.len()], 18_001).wait();
        assert_eq!(res.unwrap(), STATIC_BYTES.len());
        assert_eq!(&s[..], STATIC_BYTES);

        // std sees the same bytes.
        assert_eq!(std_len(&path), end);
        let all = std_read(&path, 0, end as usize);
        assert_pattern(&all[..18_001], seed, 0);
        assert_eq!(&all[18_001..], STATIC_BYTES);

        // A read into the middle of a larger buffer returns the prefix only.
        let (res, big) = file.read_at(vec![0xEEu8; 100], 17_990).wait();
        let n = (end - 17_990) as usize;
        assert_eq!(res.unwrap(), n, "a short count at the end of the file");
        assert_pattern(&big[..11], seed, 17_990);
        assert_eq!(&big[11..n], STATIC_BYTES);
        assert!(
            big[n..].iter().all(|&b| b == 0xEE),
            "bytes past the count untouched"
        );
        file.close().wait().unwrap();
    }
}

fn open_options_reach_the_kernel(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("flags");
    std_create_pattern(&path, 3, 8192);
    // (name, options, readable, writable, direct)
    let cases: &[(&str, OpenOptions, bool, bool, bool)] = &[
        (
            "read",
            OpenOptions::new().read(true).clone(),
            true,
            false,
            false,
        ),
        (
            "write",
            OpenOptions::new().write(true).clone(),
            false,
            true,
            false,
        ),
        (
            "read+write",
            OpenOptions::new().read(true).write(true).clone(),
            true,
            true,
            false,
        ),
        (
            "direct",
            OpenOptions::new().read(true).direct(true).clone(),
            true,
            false,
            true,
        ),
        (
            "write_through",
            OpenOptions::new().write(true).write_through(true).clone(),
            false,
            true,
            false,
        ),
    ];
    for (name, opts, read, write, direct) in cases {
        let f = opts
            .open(&engine, &path)
            .wait()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(f.is_direct(), *direct, "{name}: is_direct");
        assert_open_flags(&f, name, (*read, *write), *direct, *name == "write_through");
        f.close().wait().unwrap();
    }

    // Write-through writes land like any other.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .write_through(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    let (res, _) = f.write_all_at(pattern(4, 1000, 3000), 1000).wait();
    res.unwrap();
    assert_pattern(&std_read(&path, 1000, 3000), 4, 1000);
    assert_pattern(&std_read(&path, 0, 1000), 3, 0);
    assert_pattern(&std_read(&path, 4000, 4192), 3, 4000);
}

/// What the kernel holds for `f`'s descriptor: its access mode (readable,
/// writable), O_DIRECT, O_DSYNC (write-through) and close-on-exec.
#[cfg(target_os = "linux")]
#[track_caller]
fn assert_open_flags(f: &File, name: &str, rw: (bool, bool), direct: bool, dsync: bool) {
    let accmode = match rw {
        (true, false) => libc::O_RDONLY,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDWR,
    };
    let fl = fd_flags(f.as_raw_fd());
    assert_eq!(fl & libc::O_ACCMODE, accmode, "{name}: access mode");
    assert_eq!(fl & libc::O_DIRECT != 0, direct, "{name}: O_DIRECT");
    assert_eq!(fl & libc::O_DSYNC != 0, dsync, "{name}: O_DSYNC");
    // O_CLOEXEC is a descriptor flag.
    // SAFETY: F_GETFD reads the descriptor flags.
    let fdfl = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFD) };
    assert!(fdfl & libc::FD_CLOEXEC != 0, "{name}: close-on-exec");
}

/// What Windows holds for `f`'s handle: the data access it was granted
/// (read, write), `FILE_NO_INTERMEDIATE_BUFFERING` (direct),
/// `FILE_WRITE_THROUGH`, overlapped (no synchronous-I/O mode) and not
/// inherited by child processes.
#[cfg(windows)]
#[track_caller]
fn assert_open_flags(f: &File, name: &str, rw: (bool, bool), direct: bool, dsync: bool) {
    let h = handle_info(f.as_raw_fd());
    let read = h.access & win::FILE_READ_DATA != 0;
    let write = h.access & win::FILE_WRITE_DATA != 0;
    assert_eq!((read, write), rw, "{name}: access {:#x}", h.access);
    let no_buffering = h.mode & win::FILE_NO_INTERMEDIATE_BUFFERING != 0;
    assert_eq!(no_buffering, direct, "{name}: mode {:#x}", h.mode);
    let through = h.mode & win::FILE_WRITE_THROUGH != 0;
    assert_eq!(through, dsync, "{name}: write-through, mode {:#x}", h.mode);
    assert_eq!(h.mode & win::FILE_SYNCHRONOUS_IO, 0, "{name}: overlapped");
    assert!(!h.inherit, "{name}: not inherited");
}

fn create_new_truncate_and_existing(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("new");

    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&engine, &path)
        .wait()
        .expect("create_new on a missing file");
    let (res, _) = f.write_all_at(pattern(5, 0, 8192), 0).wait();
    res.unwrap();
    f.close().wait().unwrap();

    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&engine, &path)
        .wait()
    {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists),
        other => panic!("create_new on an existing file: {other:?}"),
    }

    // create without truncate keeps the contents.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    assert_eq!(f.metadata().wait().unwrap().len, 8192);
    let (res, buf) = f.read_exact_at(vec![0; 8192], 0).wait();
    res.unwrap();
    assert_pattern(&buf, 5, 0);
    f.close().wait().unwrap();

    // truncate empties it.
    let f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    assert_eq!(f.metadata().wait().unwrap().len, 0);
    assert_eq!(std_len(&path), 0);
    f.close().wait().unwrap();
}

#[cfg(target_os = "linux")]
fn mode_sets_permissions(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    for mode in [0o600u32, 0o640, 0o755] {
        let path = dir.path().join(format!("mode-{mode:o}"));
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .mode(mode)
            .open(&engine, &path)
            .wait()
            .unwrap();
        f.close().wait().unwrap();
        let got = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            got,
            mode & !umask(),
            "mode {mode:o} less umask {:o}",
            umask()
        );
    }
    // The default is 0o666 less the umask, as std does.
    let path = dir.path().join("mode-default");
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    drop(f);
    let got = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(got, 0o666 & !umask());
}

fn access_hints_open_and_read(d: Driver) {
    let engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("hints");
    std_create_pattern(&path, 6, 256 << 10);
    for access in [Access::Normal, Access::Sequential, Access::Random] {
        let f = OpenOptions::new()
            .read(true)
            .access(access)
            .open(&engine, &path)
            .wait()
            .unwrap_or_else(|e| panic!("{access:?}: {e}"));
        for off in [0u64, 100_000, 200_000] {
            let (res, buf) = f.read_exact_at(vec![0; 50_000], off).wait();
            res.unwrap();
            assert_pattern(&buf, 6, off);
        }
        f.close().wait().unwrap();
    }
}

fn exact_and_all_large_transfers(d: Driver) {
    for fast_path in [true, false] {
        let engine = d.builder().cache_fast_path(fast_path).build().unwrap();
        let dir = tempdir();
        let path = dir.path().join("large");
        let file = rw(&engine, &path);
        let len = (6 << 20) + 123;
        let off = 4097;
        let (res, back) = file.write_all_at(pattern(7, off, len), off).wait();
        res.unwrap();
        assert_eq!(back.len(), len);
        assert_eq!(file.metadata().wait().unwrap().len, off + len as u64);
        let (res, buf) = file.read_exact_at(vec![0u8; len], off).wait();
        res.unwrap();
        assert_pattern(&buf, 7, off);
        // The hole before `off` reads back as zeros.
        let (res, head) = file.read_exact_at(vec![0xFFu8; off as usize], 0).wait();
        res.unwrap();
        assert!(head.iter().all(|&b| b == 0));
        assert_pattern(&std_read(&path, off, len), 7, off);
    }
}

fn direct_io_with_aligned_pool(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("direct");
    let file = open_direct(&engine, &path);
    assert!(file.is_direct());
    let a = file.alignment();
    assert!(
        a.memory.is_power_of_two() && a.offset.is_power_of_two(),
        "{a:?}"
    );
    let pool = AlignedBufPool::for_file(&file, 60_000, 4).unwrap();
    assert_eq!(pool.buf_len() % a.offset as usize, 0, "length rounded up");
    assert!(pool.buf_len() >= 60_000);
    assert_eq!(pool.align() % a.memory as usize, 0);
    let n = 16u64;
    let blen = pool.buf_len() as u64;
    let seed = 8;

    let writes = (0..n).rev().map(|i| {
        let mut b = pool.get();
        assert_eq!(b.as_ptr() as usize % a.memory as usize, 0);
        fill_pattern(&mut b, seed, i * blen);
        file.write_all_at(b, i * blen)
    });
    let results = futures::executor::block_on(join_all(writes));
    for (res, _) in results {
        res.unwrap();
    }
    assert!(pool.idle() > 0, "written buffers went back to the pool");
    assert!(pool.idle() <= 4, "at most max_idle are kept");

    let reads = (0..n).map(|i| file.read_at(pool.get(), i * blen));
    let results = futures::executor::block_on(join_all(reads));
    for (i, (res, buf)) in results.into_iter().enumerate() {
        assert_eq!(res.unwrap(), blen as usize);
        assert_pattern(&buf, seed, i as u64 * blen);
    }
    // A plain AlignedBuf works too, with read_exact_at.
    let (res, buf) = file
        .read_exact_at(
            AlignedBuf::new(2 * blen as usize, a.memory.max(a.offset) as usize).unwrap(),
            blen,
        )
        .wait();
    res.unwrap();
    assert_pattern(&buf, seed, blen);
    assert_eq!(std_len(&path), n * blen);
    assert_pattern(&std_read(&path, 0, (n * blen) as usize), seed, 0);
    // allocate and set_len move no data: they need no alignment, even here.
    let end = n * blen;
    if allocated(file.allocate(end + 100, 1000).wait()) {
        assert_eq!(file.metadata().wait().unwrap().len, end + 1100);
    }
    file.set_len(end + 1).wait().unwrap();
    assert_eq!(std_len(&path), end + 1);
    file.sync_data().wait().unwrap();
    file.close().wait().unwrap();
}

fn direct_write_through(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("direct-dsync");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .direct(true)
        .write_through(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    assert_open_flags(&file, "direct+write_through", (true, true), true, true);
    let pool = AlignedBufPool::for_file(&file, 16 << 10, 2).unwrap();
    let mut b = pool.get();
    fill_pattern(&mut b, 9, 0);
    let (res, _) = file.write_all_at(b, 0).wait();
    res.unwrap();
    let (res, b) = file.read_exact_at(pool.get(), 0).wait();
    res.unwrap();
    assert_pattern(&b, 9, 0);
}

fn sync_all_and_sync_data(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("sync");
    let file = rw(&engine, &path);
    let before = engine.stats();
    let (res, _) = file.write_all_at(pattern(10, 0, 1 << 20), 0).wait();
    res.unwrap();
    file.sync_data().wait().unwrap();
    let (res, _) = file
        .write_all_at(pattern(10, 1 << 20, 4096), 1 << 20)
        .wait();
    res.unwrap();
    file.sync_all().wait().unwrap();
    let after = engine.stats();
    // Two writes and two syncs reached the driver and completed without error.
    assert!(after.completed - before.completed >= 4);
    assert_eq!(after.errors, before.errors);
    // Syncing a read-only descriptor is allowed too.
    let ro = File::open(&engine, &path).wait().unwrap();
    #[cfg(target_os = "linux")]
    {
        ro.sync_all().wait().unwrap();
        ro.sync_data().wait().unwrap();
    }
    // Not on Windows: FlushFileBuffers needs write access, and says so
    // (ERROR_ACCESS_DENIED), as it does to std's `sync_all`.
    #[cfg(windows)]
    for res in [ro.sync_all().wait(), ro.sync_data().wait()] {
        match res {
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(5), "{e}");
                assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
            }
            Ok(()) => panic!("a read-only handle was flushed"),
        }
    }
    assert_pattern(&std_read(&path, 0, (1 << 20) + 4096), 10, 0);
}

/// Whether `allocate` did it: `Ok`, or on Windows a loud skip where the
/// file system has no allocation call (`ERROR_INVALID_FUNCTION`, Wine's
/// `ERROR_CALL_NOT_IMPLEMENTED`: refused before anything changed); any
/// other error fails.
#[track_caller]
fn allocated(res: overlapped::Result<()>) -> bool {
    #[cfg(windows)]
    if let Err(e) = &res {
        if matches!(e.raw_os_error(), Some(1 | 120)) {
            eprintln!("SKIPPED (partly): this file system reserves no space: {e}");
            return false;
        }
    }
    res.unwrap();
    true
}

fn allocate_reserves_space_as_zeros(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("alloc");
    let file = rw(&engine, &path);
    let m0 = file.metadata().wait().unwrap();
    assert_eq!((m0.len, m0.allocated), (0, 0));

    let mib = 1u64 << 20;
    if !allocated(file.allocate(0, mib).wait()) {
        return;
    }
    let m1 = file.metadata().wait().unwrap();
    assert_eq!(m1.len, mib, "the file grows to the allocated range");
    assert!(m1.allocated >= mib, "space is reserved: {m1:?}");
    assert_eq!(std_len(&path), mib);
    let (res, buf) = file.read_exact_at(vec![0xAAu8; mib as usize], 0).wait();
    res.unwrap();
    assert!(buf.iter().all(|&b| b == 0), "reserved space reads as zeros");

    // A range past the end grows the file, leaving a hole in between.
    file.allocate(4 * mib, 64 << 10).wait().unwrap();
    let m2 = file.metadata().wait().unwrap();
    assert_eq!(m2.len, 4 * mib + (64 << 10));
    assert!(m2.allocated >= mib + (64 << 10), "{m2:?}");
    // (A file that is not sparse, as NTFS makes them, has no holes.)
    #[cfg(target_os = "linux")]
    assert!(m2.allocated < m2.len, "the gap stays a hole: {m2:?}");

    // Allocating over written data keeps it and does not change the size.
    let (res, _) = file.write_all_at(pattern(12, 0, 64 << 10), 0).wait();
    res.unwrap();
    file.allocate(0, 64 << 10).wait().unwrap();
    assert_eq!(file.metadata().wait().unwrap().len, m2.len);
    assert_pattern(&std_read(&path, 0, 64 << 10), 12, 0);

    // Writes into the preallocated range do not extend the file.
    let (res, _) = file
        .write_all_at(pattern(12, mib / 2, 4096), mib / 2)
        .wait();
    res.unwrap();
    assert_eq!(std_len(&path), m2.len);
    #[cfg(target_os = "linux")]
    assert_eq!(
        std::fs::metadata(&path).unwrap().blocks() * 512,
        file.metadata().wait().unwrap().allocated
    );
}

fn allocate_never_exposes_stale_data(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("stale");
    let file = rw(&engine, &path);
    let len = 1usize << 20;
    let (res, _) = file.write_all_at(pattern(13, 0, len), 0).wait();
    res.unwrap();
    file.sync_all().wait().unwrap();
    file.set_len(0).wait().unwrap();
    if !allocated(file.allocate(0, len as u64).wait()) {
        return;
    }
    let (res, buf) = file.read_exact_at(vec![0x55u8; len], 0).wait();
    res.unwrap();
    assert!(buf.iter().all(|&b| b == 0), "old data must never come back");

    // Through O_DIRECT as well (unwritten extents read as zeros).
    let direct = OpenOptions::new()
        .read(true)
        .direct(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    let pool = AlignedBufPool::for_file(&direct, 64 << 10, 1).unwrap();
    let mut b = pool.get();
    b.fill(0x77);
    let (res, b) = direct.read_exact_at(b, 0).wait();
    res.unwrap();
    assert!(b.iter().all(|&x| x == 0));
}

fn set_len_shrinks_and_grows(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("setlen");
    let file = rw(&engine, &path);
    let (res, _) = file.write_all_at(pattern(14, 0, 10_000), 0).wait();
    res.unwrap();
    file.set_len(4_000).wait().unwrap();
    assert_eq!(file.metadata().wait().unwrap().len, 4_000);
    assert_eq!(std_len(&path), 4_000);
    let (res, buf) = file.read_at(vec![0u8; 10_000], 0).wait();
    assert_eq!(res.unwrap(), 4_000, "reads stop at the new end");
    assert_pattern(&buf[..4_000], 14, 0);

    file.set_len(20_000).wait().unwrap();
    assert_eq!(file.metadata().wait().unwrap().len, 20_000);
    let (res, buf) = file.read_exact_at(vec![0xFFu8; 20_000], 0).wait();
    res.unwrap();
    assert_pattern(&buf[..4_000], 14, 0);
    assert!(
        buf[4_000..].iter().all(|&b| b == 0),
        "the extension reads as zeros"
    );
    file.set_len(0).wait().unwrap();
    assert_eq!(std_len(&path), 0);
}

fn metadata_matches_the_kernel(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("meta");
    let file = rw(&engine, &path);
    let (res, _) = file.write_all_at(pattern(15, 0, 12_345), 0).wait();
    res.unwrap();
    file.sync_all().wait().unwrap();
    let m = file.metadata().wait().unwrap();
    let s = std::fs::metadata(&path).unwrap();
    assert_eq!(m.len, 12_345);
    assert_eq!(m.len, s.len());
    assert!(m.is_file);
    assert_eq!(m.alignment, file.alignment(), "alignment cached at open");
    assert_alignment_source(&m, &s, &path);
    // Metadata works on read-only and write-only handles alike.
    let wo = OpenOptions::new()
        .write(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    assert_eq!(wo.metadata().wait().unwrap().len, 12_345);
}

/// The block size, the allocation and the direct-I/O alignment agree with
/// the kernel's own `stat` and `statx(STATX_DIOALIGN)`.
#[cfg(target_os = "linux")]
fn assert_alignment_source(
    m: &overlapped::Metadata,
    s: &std::fs::Metadata,
    path: &std::path::Path,
) {
    assert_eq!(m.block_size as u64, s.blksize());
    assert_eq!(m.allocated, s.blocks() * 512);

    // Compare the alignment with our own statx(STATX_DIOALIGN).
    const STATX_DIOALIGN: u32 = 0x2000;
    let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: an all-zero statx is a valid value to be filled in.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid NUL-terminated path and a writable statx buffer.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            cpath.as_ptr(),
            0,
            libc::STATX_BASIC_STATS | STATX_DIOALIGN,
            &mut stx,
        )
    };
    assert_eq!(r, 0);
    let a = m.alignment;
    if stx.stx_mask & STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0 {
        assert_eq!(a.source, "statx");
        assert_eq!(a.memory, stx.stx_dio_mem_align);
        assert_eq!(a.offset, stx.stx_dio_offset_align);
    } else {
        eprintln!(
            "note: the file system does not report STATX_DIOALIGN; alignment from {}",
            a.source
        );
        assert!(a.source == "block-device" || a.source == "default", "{a:?}");
    }
    assert!(a.memory.is_power_of_two() && a.offset.is_power_of_two());
}

/// Windows has no `stat` blocks: the allocation covers the length, the
/// block size and the alignment (`FileStorageInfo`'s sectors, or the
/// default) are powers of two.
#[cfg(windows)]
fn assert_alignment_source(m: &overlapped::Metadata, s: &std::fs::Metadata, _: &std::path::Path) {
    assert!(s.is_file());
    assert!(m.allocated >= m.len, "{m:?}");
    assert!(m.block_size.is_power_of_two(), "{m:?}");
    let a = m.alignment;
    assert!(a.source == "storage-info" || a.source == "default", "{a:?}");
    assert!(a.memory.is_power_of_two() && a.offset.is_power_of_two());
    assert!(a.memory >= a.offset, "{a:?}");
}

fn close_waits_for_operations_in_flight(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("close");
    let file = rw(&engine, &path);
    let other = file.clone();
    let len = 8 << 20;
    let mut op = other.write_at(pattern(16, 0, len), 0);
    // Submit it (first poll), then close through the other handle.
    let first = poll_once(&mut op);
    if first.is_pending() {
        assert!(stage(&op).contains("in flight"), "{}", stage(&op));
    }
    file.close()
        .wait()
        .expect("close succeeds after the write finishes");
    assert_eq!(file.as_raw_fd(), -1);
    assert_eq!(other.as_raw_fd(), -1, "closing one handle closes all");
    let (res, buf) = match first {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => futures::executor::block_on(op),
    };
    assert_eq!(res.unwrap(), len, "the write in flight completed normally");
    assert_eq!(buf.len(), len);
    assert_eq!(std_len(&path), len as u64);
    assert_pattern(&std_read(&path, 0, len), 16, 0);
}

fn many_operations_in_flight_out_of_order(d: Driver) {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("many");
    let file = rw(&engine, &path);
    let n = 512u64;
    let slot = 4096u64;
    let mut order: Vec<u64> = (0..n).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    order.shuffle(&mut rng);
    let writes = order
        .iter()
        .map(|&i| file.write_at(pattern(17, i * slot, slot as usize), i * slot));
    for (res, _) in futures::executor::block_on(join_all(writes)) {
        assert_eq!(res.unwrap(), slot as usize);
    }
    order.shuffle(&mut rng);
    let reads = order.iter().map(|&i| {
        let f = file.read_at(vec![0u8; slot as usize], i * slot);
        async move { (i, f.await) }
    });
    for (i, (res, buf)) in futures::executor::block_on(join_all(reads)) {
        assert_eq!(res.unwrap(), slot as usize);
        assert_pattern(&buf, 17, i * slot);
    }
    let s = engine.stats();
    assert!(
        s.inflight_ops_high_water >= 2,
        "operations overlapped: {s:?}"
    );
    assert_eq!(engine.in_flight(), (0, 0));
    assert_pattern(&std_read(&path, 0, (n * slot) as usize), 17, 0);
}

fn file_open_and_create(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("open-create");
    std::fs::write(&path, b"old contents that create() must truncate").unwrap();
    let f = File::create(&engine, &path).wait().unwrap();
    assert_eq!(f.metadata().wait().unwrap().len, 0);
    assert_access(&f, "create", (true, true));
    let (res, _) = f.write_all_at(b"fresh".to_vec(), 0).wait();
    res.unwrap();
    assert_eq!(f.engine().driver(), engine.driver());
    f.close().wait().unwrap();

    let r = File::open(&engine, &path).wait().unwrap();
    assert_access(&r, "open", (true, false));
    let (res, buf) = r.read_at(vec![0u8; 16], 0).wait();
    assert_eq!(res.unwrap(), 5);
    assert_eq!(&buf[..5], b"fresh");
    // Task and Op are ordinary futures too.
    let t: Task<overlapped::Result<overlapped::Metadata>> = r.metadata();
    let m = futures::executor::block_on(t).unwrap();
    assert_eq!(m.len, 5);
}

/// The access mode the kernel holds for `f` (readable, writable).
#[track_caller]
fn assert_access(f: &File, name: &str, rw: (bool, bool)) {
    #[cfg(target_os = "linux")]
    {
        let accmode = match rw {
            (true, false) => libc::O_RDONLY,
            (false, true) => libc::O_WRONLY,
            _ => libc::O_RDWR,
        };
        assert_eq!(fd_flags(f.as_raw_fd()) & libc::O_ACCMODE, accmode, "{name}");
    }
    #[cfg(windows)]
    {
        let h = handle_info(f.as_raw_fd());
        let read = h.access & win::FILE_READ_DATA != 0;
        let write = h.access & win::FILE_WRITE_DATA != 0;
        assert_eq!((read, write), rw, "{name}: access {:#x}", h.access);
    }
}

fn a_tiny_ring_and_one_thread_still_take_many_operations(d: Driver) {
    // Two submission entries (io_uring) or one thread (pool), a thousand
    // operations in flight: the submission queue fills and drains.
    let engine = d
        .builder()
        .ring_entries(2)
        .pool_threads(1)
        .cache_fast_path(false)
        .build()
        .unwrap();
    let dir = tempdir();
    let path = dir.path().join("tiny");
    let file = rw(&engine, &path);
    let n = 1000u64;
    let writes = (0..n).map(|i| file.write_at(pattern(18, i * 1024, 1024), i * 1024));
    for (res, _) in futures::executor::block_on(join_all(writes)) {
        assert_eq!(res.unwrap(), 1024);
    }
    let reads = (0..n).map(|i| {
        let f = file.read_at(vec![0u8; 1024], i * 1024);
        async move { (i, f.await) }
    });
    for (i, (res, buf)) in futures::executor::block_on(join_all(reads)) {
        assert_eq!(res.unwrap(), 1024);
        assert_pattern(&buf, 18, i * 1024);
    }
    let s = engine.stats();
    assert_eq!(s.completed, s.submitted);
    assert_pattern(&std_read(&path, 0, (n * 1024) as usize), 18, 0);
}

/// O_APPEND means what it means to the kernel: 4 threads, each with a file
/// of its own opened with `append(true)`, write 500 lines each with
/// `write_all_at` at offset 0 (ignored under O_APPEND) and `write_at`: every
/// line lands at the end, whole.
fn appenders_on_threads_lose_no_line(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    if appends_are_not_atomic_here(dir.path()) {
        return;
    }
    let path = dir.path().join("log");
    std::fs::write(&path, b"").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (engine, path) = (engine.clone(), path.clone());
            watch(move || {
                let file = OpenOptions::new()
                    .append(true)
                    .open(&engine, &path)
                    .wait()
                    .expect("open for appending");
                assert!(file.is_append());
                for i in 0..500 {
                    let line = append_line(t, i).into_bytes();
                    if i % 2 == 0 {
                        let (res, _) = file.write_all_at(line, 0).wait();
                        res.expect("write_all_at");
                    } else {
                        let len = line.len();
                        let (res, _) = file.write_at(line, 0).wait();
                        assert_eq!(res.expect("write_at"), len, "a short append");
                    }
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for t in threads {
        t.wait(deadline).unwrap();
    }
    let got = std::fs::read_to_string(&path).unwrap();
    let mut got: Vec<&str> = got.split_inclusive('\n').collect();
    got.sort_unstable();
    let mut want: Vec<String> = (0..4)
        .flat_map(|t| (0..500).map(move |i| append_line(t, i)))
        .collect();
    want.sort_unstable();
    let missing = want.iter().filter(|l| !got.contains(&l.as_str())).count();
    assert_eq!(got.len(), 2000, "{missing} lines missing or torn");
    assert!(
        got.iter().zip(&want).all(|(g, w)| g == w),
        "{missing} lines missing or torn"
    );
}

/// As above with O_DIRECT (Linux AIO's case on the aio driver): 4 threads
/// append 50 aligned blocks each, every block tagged with its writer and
/// number; every block lands at the end, whole.
fn direct_appenders_on_threads_lose_no_block(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    if appends_are_not_atomic_here(dir.path()) {
        return;
    }
    let path = dir.path().join("direct-log");
    std::fs::write(&path, b"").unwrap();
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let (engine, path) = (engine.clone(), path.clone());
            watch(move || {
                let file = OpenOptions::new()
                    .append(true)
                    .direct(true)
                    .open(&engine, &path)
                    .wait()
                    .expect("open for appending, O_DIRECT");
                let block = file.alignment().offset.max(4096) as usize;
                let pool = AlignedBufPool::for_file(&file, block, 2).unwrap();
                for i in 0..50u8 {
                    let mut b = pool.get();
                    b.fill(t * 64 + i);
                    let (res, _) = file.write_all_at(b, 0).wait();
                    res.expect("write_all_at");
                }
                block
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut block = 0;
    for t in threads {
        block = t.wait(deadline).unwrap();
    }
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), 200 * block, "blocks missing");
    let mut tags: Vec<u8> = got
        .chunks(block)
        .map(|c| {
            assert!(c.iter().all(|&x| x == c[0]), "a torn block");
            c[0]
        })
        .collect();
    tags.sort_unstable();
    let mut want: Vec<u8> = (0..4u8)
        .flat_map(|t| (0..50u8).map(move |i| t * 64 + i))
        .collect();
    want.sort_unstable();
    assert_eq!(tags, want, "every block once");
}

/// The kernel's view of an extended attribute of `path` (`getxattr(2)`):
/// its bytes, or the errno.
#[cfg(target_os = "linux")]
fn kernel_xattr(path: &std::path::Path, name: &str) -> Result<Vec<u8>, i32> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated; buf is writable for its length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

#[cfg(target_os = "linux")]
fn xattr_set_and_get_on_a_real_file(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("xattr");
    let file = rw(&engine, &path);
    let name = "user.overlap.origin";
    let value = b"written through the engine".to_vec();

    let (res, back) = file.set_xattr(name, value.clone()).wait();
    if let Err(e) = &res {
        if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
            println!("SKIPPED: the file system under {dir:?} keeps no user.* attributes");
            return;
        }
    }
    res.expect("set_xattr");
    assert_eq!(back, value, "the value comes back unchanged");
    assert_eq!(
        kernel_xattr(&path, name),
        Ok(value.clone()),
        "the kernel holds it"
    );

    // Read back into a larger buffer: the length, and the bytes at the start.
    let (res, buf) = file.get_xattr(name, vec![0u8; 100]).wait();
    assert_eq!(res.expect("get_xattr"), value.len());
    assert_eq!(&buf[..value.len()], &value[..]);
    assert!(
        buf[value.len()..].iter().all(|&b| b == 0),
        "nothing past the value"
    );

    // An empty buffer asks for the length alone.
    let (res, _) = file.get_xattr(name, Vec::new()).wait();
    assert_eq!(res.expect("the length"), value.len());

    // Replacing it; a too-small buffer is ERANGE.
    let (res, _) = file.set_xattr(name, &b"v2"[..]).wait();
    res.expect("replace");
    assert_eq!(kernel_xattr(&path, name), Ok(b"v2".to_vec()));
    let (res, _) = file.get_xattr(name, vec![0u8; 1]).wait();
    assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::ERANGE));

    // A name the file does not have is ENODATA, given back with the buffer.
    let (res, buf) = file.get_xattr("user.overlap.absent", vec![7u8; 8]).wait();
    assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::ENODATA));
    assert_eq!(buf, vec![7u8; 8]);

    // Invalid names are refused before the kernel sees them.
    let (res, _) = file.get_xattr("user.a\0b", vec![0u8; 8]).wait();
    assert!(matches!(res, Err(Error::InvalidInput(_))), "{res:?}");
    let (res, _) = file.set_xattr("user.a\0b", vec![1u8]).wait();
    assert!(matches!(res, Err(Error::InvalidInput(_))), "{res:?}");

    // Many at once, in flight together, each on its own name.
    let sets =
        (0..16u8).map(|i| file.set_xattr(format!("user.overlap.n{i}"), vec![i; i as usize + 1]));
    for (res, _) in futures::executor::block_on(join_all(sets)) {
        res.expect("set in flight with others");
    }
    let gets = (0..16u8).map(|i| file.get_xattr(format!("user.overlap.n{i}"), vec![0u8; 32]));
    for (i, (res, buf)) in futures::executor::block_on(join_all(gets))
        .into_iter()
        .enumerate()
    {
        assert_eq!(res.expect("get in flight with others"), i + 1);
        assert!(buf[..=i].iter().all(|&b| b == i as u8));
    }

    // A closed file refuses both.
    file.close().wait().unwrap();
    let (res, _) = file.get_xattr(name, vec![0u8; 8]).wait();
    assert!(matches!(res, Err(Error::Closed)), "{res:?}");
    let (res, _) = file.set_xattr(name, vec![1u8]).wait();
    assert!(matches!(res, Err(Error::Closed)), "{res:?}");
}

/// Windows' handles keep no extended attributes: both calls are refused
/// before submission with `Error::Unsupported`, the buffer given back.
#[cfg(windows)]
fn xattrs_are_refused_with_the_buffer_back(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let file = rw(&engine, &dir.path().join("xattr"));
    let before = engine.stats();
    let (res, back) = file
        .set_xattr("user.overlap.origin", vec![1u8, 2, 3])
        .wait();
    assert!(matches!(res, Err(Error::Unsupported(_))), "{res:?}");
    assert_eq!(back, vec![1u8, 2, 3]);
    let (res, back) = file.get_xattr("user.overlap.origin", vec![7u8; 8]).wait();
    assert!(matches!(res, Err(Error::Unsupported(_))), "{res:?}");
    assert_eq!(back, vec![7u8; 8]);
    assert_eq!(engine.stats().submitted, before.submitted);
}

/// Windows' `SetFileValidData` through the engine, on its pool whatever the
/// driver: within the file's size the valid data length moves, the size
/// stays and writes there read back; or a loud skip where the token lacks
/// the privilege or the system the call. A length of 0, a file not opened
/// for writing, a length beyond the size and a closed file are typed
/// errors.
#[cfg(windows)]
fn set_valid_data_within_the_size(d: Driver) {
    const MIB: u64 = 1 << 20;
    let enabled = overlapped::enable_manage_volume_privilege();
    // Wine 8's token holds every privilege: Ok(true) there.
    println!("SeManageVolumePrivilege enabled: {enabled:?}");
    let enabled = enabled.expect("the process's token can be opened and adjusted");
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("log");
    let file = rw(&engine, &path);
    file.set_len(MIB).wait().unwrap();
    let res = file.set_valid_data(0).wait();
    assert!(matches!(res, Err(Error::InvalidInput(_))), "{res:?}");
    let res = file.set_valid_data(u64::MAX).wait();
    assert!(matches!(res, Err(Error::OffsetOverflow { .. })), "{res:?}");
    let reader = File::open(&engine, &path).wait().unwrap();
    let res = reader.set_valid_data(MIB).wait();
    assert!(matches!(res, Err(Error::NotOpenedFor("write"))), "{res:?}");

    let before = engine.stats();
    let res = file.set_valid_data(MIB).wait();
    let after = engine.stats();
    // One operation, never an overlapped call: the pool's, or the waiting
    // thread's own on the pool driver.
    assert_eq!(after.submitted_iocp, before.submitted_iocp);
    let on_pool = |s: &overlapped::Stats| s.submitted_pool + s.ran_on_caller;
    assert_eq!(on_pool(&after) - on_pool(&before), 1, "{after:?}");
    match res {
        Ok(()) => valid_data_set(&file, &path, MIB),
        Err(e @ Error::PrivilegeNotHeld { .. }) => {
            assert!(!enabled, "refused although enabled: {e}");
            println!("SKIPPED: set_valid_data: {e} (the process lacks SeManageVolumePrivilege)");
        }
        Err(e) if e.raw_os_error() == Some(120) => {
            println!("SKIPPED: set_valid_data: SetFileValidData is not implemented here ({e})");
        }
        Err(e) => panic!("set_valid_data(1 MiB) of a 1 MiB file: {e:?}"),
    }
    file.close().wait().unwrap();
    let res = file.set_valid_data(MIB).wait();
    assert!(matches!(res, Err(Error::Closed)), "{res:?}");
}

/// After a successful `set_valid_data(len)` of a `len`-byte file: beyond
/// the size is refused, writes within it read back, the size stays.
#[cfg(windows)]
fn valid_data_set(file: &File, path: &std::path::Path, len: u64) {
    // Windows and Wine alike: ERROR_INVALID_PARAMETER, in words.
    let res = file.set_valid_data(2 * len).wait();
    match &res {
        Err(Error::InvalidInput(m)) => assert!(m.contains("ERROR_INVALID_PARAMETER"), "{m}"),
        other => panic!("set_valid_data beyond the size: {other:?}"),
    }
    let tail = len - 4096;
    let (res, _) = file.write_all_at(pattern(21, tail, 4096), tail).wait();
    res.unwrap();
    let (res, _) = file.write_all_at(pattern(21, 0, 4096), 0).wait();
    res.unwrap();
    for at in [0, tail] {
        let (res, back) = file.read_exact_at(vec![0u8; 4096], at).wait();
        res.unwrap();
        assert_pattern(&back, 21, at);
    }
    assert_eq!(file.metadata().wait().unwrap().len, len, "the size stays");
    assert_eq!(std_len(path), len);
}

/// A std file (opened for synchronous I/O, std's default) is refused by
/// `from_handle` and adopted by `from_synchronous_handle`: 32 concurrent
/// writes of distinct 64 KiB chunks, each a pool submission (never an
/// overlapped call), read back identical, concurrently too; then
/// `sync_all`, a clone that is synchronous as well, and `close`. A file
/// made closed refuses everything.
#[cfg(windows)]
fn a_synchronous_handle_is_adopted_onto_the_pool(d: Driver) {
    const CHUNK: usize = 64 << 10;
    const N: u64 = 32;
    let engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("sync");
    let std_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let refused = File::from_handle(&engine, std_file.try_clone().unwrap().into());
    assert!(
        matches!(refused, Err(Error::InvalidInput(_))),
        "{refused:?}"
    );
    let file = File::from_synchronous_handle(&engine, std_file.into()).unwrap();
    assert!(file.is_synchronous() && !file.is_direct());
    let on_pool = |s: &overlapped::Stats| s.submitted_pool + s.ran_on_caller;
    let before = engine.stats();
    let at = |i: u64| i * CHUNK as u64;
    let writes = (0..N)
        .rev()
        .map(|i| file.write_at(pattern(23, at(i), CHUNK), at(i)));
    for (res, _) in futures::executor::block_on(join_all(writes)) {
        assert_eq!(res.unwrap(), CHUNK);
    }
    let after = engine.stats();
    assert_eq!(after.submitted_iocp, before.submitted_iocp, "{after:?}");
    assert_eq!(on_pool(&after) - on_pool(&before), N, "{after:?}");
    let reads = (0..N).map(|i| {
        let f = file.read_exact_at(vec![0u8; CHUNK], at(i));
        async move { (i, f.await) }
    });
    for (i, (res, buf)) in futures::executor::block_on(join_all(reads)) {
        res.unwrap();
        assert_pattern(&buf, 23, at(i));
    }
    file.sync_all().wait().unwrap();
    assert_eq!(file.metadata().wait().unwrap().len, at(N));
    let clone = file.try_clone().unwrap();
    assert!(clone.is_synchronous());
    let (n, _) = clone.read_at(vec![0u8; 16], at(N)).wait();
    assert_eq!(n.unwrap(), 0, "end of file");
    drop(clone);
    file.close().wait().unwrap();
    assert!(matches!(file.close().wait(), Err(Error::Closed)));
    assert_eq!(engine.in_flight(), (0, 0));
    assert_pattern(&std_read(&path, 0, at(N) as usize), 23, 0);
    let closed = File::closed(&engine);
    let (res, _) = closed.read_at(vec![0u8; 4], 0).wait();
    assert!(matches!(res, Err(Error::Closed)), "{res:?}");
    assert!(matches!(closed.sync_all().wait(), Err(Error::Closed)));
}
