//! Bad input and kernel errors, on both drivers: each comes back as its typed
//! variant, loses nothing (the buffer always comes back, the file is left as
//! it was) and, when refused before submission, never reaches the driver.

use std::io::ErrorKind;

use crate::common::*;
use overlapped::{
    AlignedBuf, AlignmentPart, Engine, Error, File, IoBuf, OpenOptions, Port, MAX_POOL_THREADS,
};

per_driver!(
    misaligned_direct_io_is_refused_before_submission,
    read_at_or_past_end_of_file,
    read_at_or_past_end_of_file_direct,
    write_to_read_only_and_read_from_write_only,
    zero_length_operations,
    zero_length_operations_direct,
    offsets_that_overflow,
    use_after_close_and_close_twice,
    opening_a_missing_file,
    invalid_open_options,
    operations_after_shutdown,
    an_operation_waiting_for_the_budget_at_shutdown_fails_with_shutdown,
    kernel_errors_are_typed_and_counted,
    invalid_builder_settings,
    port_refuses_a_file_of_another_engine,
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

#[track_caller]
fn assert_misaligned(err: &Error, part: AlignmentPart, required: u32, value: u64) {
    match err {
        Error::Misaligned {
            part: p,
            required: r,
            value: v,
        } => {
            assert_eq!((*p, *r, *v), (part, required, value), "{err}");
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            let msg = err.to_string();
            assert!(
                msg.contains(&required.to_string()),
                "message names the alignment: {msg}"
            );
        }
        other => panic!("expected Misaligned {{ {part:?}, {required}, {value} }}, got {other:?}"),
    }
}

fn misaligned_direct_io_is_refused_before_submission(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("misaligned");
    let file = open_direct(&engine, &path);
    let a = file.alignment();
    let (mem, off) = (a.memory, a.offset);
    let big = mem.max(off) as usize;
    // Known contents, written around the engine.
    std::fs::write(&path, pattern(20, 0, 4 * big)).unwrap();
    let before = engine.stats();
    let port: Port<Shifted> = Port::new(&engine);
    let aport: Port<AlignedBuf> = Port::new(&engine);

    // 1. The buffer address.
    if mem > 1 {
        let shift = (mem / 2) as usize;
        let mk = || {
            let mut s = Shifted::new(off as usize, big, shift);
            let seed_bytes = pattern(21, 0, off as usize);
            let (b, l) = (s.shift, s.len);
            s.inner[b..b + l].copy_from_slice(&seed_bytes);
            s
        };
        let buf = mk();
        let addr = buf.stable_ptr() as u64;
        let (res, back) = file.write_at(buf, 0).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Buffer, mem, addr);
        assert_eq!(back.stable_ptr() as u64, addr, "the same buffer comes back");
        assert_pattern(back.bytes(), 21, 0);
        let (res, back) = file.write_all_at(back, 0).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Buffer, mem, addr);
        let (res, back) = file.read_at(back, 0).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Buffer, mem, addr);
        assert_pattern(back.bytes(), 21, 0);
        let (res, back) = file.read_exact_at(back, 0).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Buffer, mem, addr);
        assert_pattern(back.bytes(), 21, 0);
        let (err, back) = port.write_at(&file, back, 0, 1).unwrap_err();
        assert_misaligned(&err, AlignmentPart::Buffer, mem, addr);
        let (err, back) = port
            .with_when_full(overlapped::WhenFull::Fail)
            .write_at(&file, back, 0, 1)
            .unwrap_err();
        assert_misaligned(&err, AlignmentPart::Buffer, mem, addr);
        let (err, back) = port.read_at(&file, back, 0, 1).unwrap_err();
        assert_misaligned(&err, AlignmentPart::Buffer, mem, addr);
        assert_pattern(back.bytes(), 21, 0);
    } else {
        eprintln!("SKIPPED: misaligned buffer case: the file system needs no memory alignment (dio_mem_align = {mem})");
    }

    // 2. The file offset.
    if off > 1 {
        let bad = (off / 2) as u64;
        let mut buf = AlignedBuf::new(off as usize, big).unwrap();
        fill_pattern(&mut buf, 22, 0);
        let ptr = buf.as_ptr();
        let (res, buf) = file.write_at(buf, bad).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Offset, off, bad);
        assert_eq!(buf.as_ptr(), ptr);
        assert_pattern(&buf, 22, 0);
        let (res, buf) = file.write_all_at(buf, bad + off as u64).wait();
        assert_misaligned(
            &res.unwrap_err(),
            AlignmentPart::Offset,
            off,
            bad + off as u64,
        );
        let (res, buf) = file.read_at(buf, bad).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Offset, off, bad);
        assert_pattern(&buf, 22, 0);
        let (res, buf) = file.read_exact_at(buf, bad).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Offset, off, bad);
        let (err, buf) = aport
            .with_when_full(overlapped::WhenFull::Fail)
            .write_at(&file, buf, bad, 2)
            .unwrap_err();
        assert_misaligned(&err, AlignmentPart::Offset, off, bad);
        let (err, buf) = aport.read_at(&file, buf, bad, 2).unwrap_err();
        assert_misaligned(&err, AlignmentPart::Offset, off, bad);
        assert_pattern(&buf, 22, 0);

        // 3. The length.
        let short = (off / 2) as usize;
        let mut buf = AlignedBuf::new(short, big).unwrap();
        fill_pattern(&mut buf, 23, 0);
        let (res, buf) = file.write_at(buf, 0).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Length, off, short as u64);
        assert_pattern(&buf, 23, 0);
        let (res, buf) = file.write_all_at(buf, 0).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Length, off, short as u64);
        let (res, buf) = file.read_at(buf, 0).wait();
        assert_misaligned(&res.unwrap_err(), AlignmentPart::Length, off, short as u64);
        let (err, buf) = aport.write_at(&file, buf, 0, 3).unwrap_err();
        assert_misaligned(&err, AlignmentPart::Length, off, short as u64);
        assert_pattern(&buf, 23, 0);
        let mut longer = AlignedBuf::new(off as usize + 1, big).unwrap();
        longer[0] = 1;
        let (res, _) = file.write_at(longer, 0).wait();
        assert_misaligned(
            &res.unwrap_err(),
            AlignmentPart::Length,
            off,
            off as u64 + 1,
        );
    } else {
        eprintln!(
            "SKIPPED: misaligned offset/length cases: the file system needs no offset alignment"
        );
    }

    // Nothing reached the driver and nothing changed on disk.
    let after = engine.stats();
    assert_eq!(
        after.submitted, before.submitted,
        "refused before submission"
    );
    assert_eq!(after.errors, before.errors);
    assert_eq!(port.outstanding() + aport.outstanding(), 0);
    assert_eq!(std_len(&path), 4 * big as u64);
    assert_pattern(&std_read(&path, 0, 4 * big), 20, 0);

    // The well-aligned request goes through.
    let mut ok = AlignedBuf::new(off as usize, big).unwrap();
    fill_pattern(&mut ok, 24, off as u64);
    let (res, _) = file.write_at(ok, off as u64).wait();
    assert_eq!(res.unwrap(), off as usize);
    assert_pattern(&std_read(&path, off as u64, off as usize), 24, off as u64);
}

fn eof_cases(engine: &Engine, path: &std::path::Path) {
    let file = File::open(engine, path).wait().unwrap();
    // Exactly at the end, and far past it: 0, not an error.
    let (res, buf) = file.read_at(vec![0xEEu8; 4096], 1000).wait();
    assert_eq!(res.unwrap(), 0);
    assert_eq!(buf.len(), 4096);
    assert!(
        buf.iter().all(|&b| b == 0xEE),
        "nothing was written into the buffer"
    );
    let (res, _) = file.read_at(vec![0u8; 4096], 1 << 40).wait();
    assert_eq!(res.unwrap(), 0);
    // Straddling the end: a short count.
    let (res, buf) = file.read_at(vec![0u8; 4096], 900).wait();
    assert_eq!(res.unwrap(), 100);
    assert_pattern(&buf[..100], 30, 900);
    // read_exact_at: typed UnexpectedEof with what it did read.
    let (res, buf) = file.read_exact_at(vec![0u8; 4096], 0).wait();
    match res {
        Err(Error::UnexpectedEof { read, wanted }) => assert_eq!((read, wanted), (1000, 4096)),
        other => panic!("expected UnexpectedEof, got {other:?}"),
    }
    assert_eq!(buf.len(), 4096, "the buffer comes back whole");
    assert_pattern(&buf[..1000], 30, 0);
    let (res, _) = file.read_exact_at(vec![0u8; 10], 995).wait();
    match res {
        Err(e @ Error::UnexpectedEof { .. }) => {
            assert!(
                matches!(
                    e,
                    Error::UnexpectedEof {
                        read: 5,
                        wanted: 10
                    }
                ),
                "{e:?}"
            );
            assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
        }
        other => panic!("expected UnexpectedEof, got {other:?}"),
    }
    let (res, _) = file.read_exact_at(vec![0u8; 10], 5000).wait();
    assert!(
        matches!(
            res,
            Err(Error::UnexpectedEof {
                read: 0,
                wanted: 10
            })
        ),
        "{res:?}"
    );
    // An exact read that ends exactly at the end succeeds.
    let (res, buf) = file.read_exact_at(vec![0u8; 1000], 0).wait();
    res.unwrap();
    assert_pattern(&buf, 30, 0);
}

fn read_at_or_past_end_of_file(d: Driver) {
    let dir = tempdir();
    let path = dir.path().join("eof");
    std_create_pattern(&path, 30, 1000);
    // With the page-cache fast path and without it (then the driver answers).
    for fast_path in [true, false] {
        let engine = d.builder().cache_fast_path(fast_path).build().unwrap();
        let before = engine.stats();
        eof_cases(&engine, &path);
        let after = engine.stats();
        assert_eq!(after.errors, before.errors, "end of file is not an error");
        if !fast_path {
            assert_eq!(after.fast_path_hits, 0);
        }
    }
    // An empty file.
    let engine = d.engine();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let f = File::open(&engine, &empty).wait().unwrap();
    let (res, _) = f.read_at(vec![0u8; 512], 0).wait();
    assert_eq!(res.unwrap(), 0);
}

fn read_at_or_past_end_of_file_direct(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("eof-direct");
    let file = open_direct(&engine, &path);
    let blk = file.alignment().offset.max(file.alignment().memory) as usize;
    let align = blk;
    let mut w = AlignedBuf::new(3 * blk, align).unwrap();
    fill_pattern(&mut w, 31, 0);
    let (res, _) = file.write_all_at(w, 0).wait();
    res.unwrap();
    let (res, buf) = file
        .read_at(AlignedBuf::new(2 * blk, align).unwrap(), 2 * blk as u64)
        .wait();
    assert_eq!(res.unwrap(), blk, "short read at the end");
    assert_pattern(&buf[..blk], 31, 2 * blk as u64);
    let (res, _) = file
        .read_at(AlignedBuf::new(blk, align).unwrap(), 3 * blk as u64)
        .wait();
    assert_eq!(res.unwrap(), 0);
    let (res, _) = file
        .read_at(AlignedBuf::new(blk, align).unwrap(), 100 * blk as u64)
        .wait();
    assert_eq!(res.unwrap(), 0);
    let (res, _) = file
        .read_exact_at(AlignedBuf::new(4 * blk, align).unwrap(), 0)
        .wait();
    assert!(
        matches!(res, Err(Error::UnexpectedEof { read, wanted }) if read == 3 * blk && wanted == 4 * blk),
        "{res:?}"
    );
}

fn write_to_read_only_and_read_from_write_only(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("modes");
    std_create_pattern(&path, 32, 8192);
    let before = engine.stats();

    let ro = File::open(&engine, &path).wait().unwrap();
    let data = pattern(33, 0, 4096);
    let (res, back) = ro.write_at(data.clone(), 0).wait();
    let err = res.unwrap_err();
    assert!(matches!(err, Error::NotOpenedFor("write")), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    assert!(err.to_string().contains("write(true)"), "{err}");
    assert_eq!(back, data, "the buffer comes back");
    let (res, back) = ro.write_all_at(back, 100).wait();
    assert!(matches!(res, Err(Error::NotOpenedFor("write"))));
    assert_eq!(back, data);
    assert!(matches!(
        ro.set_len(0).wait(),
        Err(Error::NotOpenedFor("write"))
    ));
    assert!(matches!(
        ro.allocate(0, 1 << 20).wait(),
        Err(Error::NotOpenedFor("write"))
    ));
    let port: Port<Vec<u8>> = Port::new(&engine);
    let (err, back) = port.write_at(&ro, back, 0, 1).unwrap_err();
    assert!(matches!(err, Error::NotOpenedFor("write")));
    let (err, back) = port
        .with_when_full(overlapped::WhenFull::Fail)
        .write_at(&ro, back, 0, 1)
        .unwrap_err();
    assert!(matches!(err, Error::NotOpenedFor("write")));
    assert_eq!(back, data);
    // Reading it is fine.
    let (res, buf) = ro.read_exact_at(vec![0; 8192], 0).wait();
    res.unwrap();
    assert_pattern(&buf, 32, 0);

    let wo = OpenOptions::new()
        .write(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    let (res, back) = wo.read_at(vec![7u8; 100], 0).wait();
    assert!(matches!(res, Err(Error::NotOpenedFor("read"))), "{res:?}");
    assert_eq!(back, vec![7u8; 100]);
    let (res, back) = wo.read_exact_at(back, 0).wait();
    assert!(matches!(res, Err(Error::NotOpenedFor("read"))));
    let (err, back) = port.read_at(&wo, back, 0, 2).unwrap_err();
    assert!(matches!(err, Error::NotOpenedFor("read")));
    let (err, back) = port
        .with_when_full(overlapped::WhenFull::Fail)
        .read_at(&wo, back, 0, 2)
        .unwrap_err();
    assert!(matches!(err, Error::NotOpenedFor("read")));
    assert_eq!(back, vec![7u8; 100], "nothing was read into it");
    assert_eq!(port.outstanding(), 0);

    // The file is untouched, and the refusals never reached the kernel.
    assert_eq!(std_len(&path), 8192);
    assert_pattern(&std_read(&path, 0, 8192), 32, 0);
    let after = engine.stats();
    assert_eq!(after.errors, before.errors);
    assert_eq!(after.bytes_written, before.bytes_written);
}

fn zero_length_operations(d: Driver) {
    let engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("zero");
    let file = rw(&engine, &path);
    let (res, buf) = file.read_at(Vec::new(), 0).wait();
    assert_eq!(res.unwrap(), 0);
    assert!(buf.is_empty());
    let (res, _) = file.write_at(Vec::new(), 0).wait();
    assert_eq!(res.unwrap(), 0);
    // A zero-length write past the end does not extend the file.
    let (res, _) = file.write_at(Vec::new(), 1 << 20).wait();
    assert_eq!(res.unwrap(), 0);
    let (res, _) = file.write_at(Box::<[u8]>::default(), 5).wait();
    assert_eq!(res.unwrap(), 0);
    let (res, _) = file.write_all_at(Vec::new(), 1 << 30).wait();
    res.unwrap();
    let (res, _) = file.read_exact_at(Vec::new(), 1 << 30).wait();
    res.unwrap();
    let (res, _) = file.read_at(AlignedBuf::new(0, 4096).unwrap(), 0).wait();
    assert_eq!(res.unwrap(), 0);
    assert_eq!(std_len(&path), 0);
    assert_eq!(file.metadata().wait().unwrap().len, 0);
    // Through a port: a completion with 0.
    let port: Port<Vec<u8>> = Port::new(&engine);
    port.write_at(&file, Vec::new(), 0, 7).unwrap();
    port.with_when_full(overlapped::WhenFull::Fail)
        .read_at(&file, Vec::new(), 0, 8)
        .unwrap();
    let mut keys = Vec::new();
    while let Some(c) = port.next() {
        assert_eq!(c.result.unwrap(), 0);
        keys.push(c.key);
    }
    keys.sort();
    assert_eq!(keys, [7, 8]);
    assert_eq!(std_len(&path), 0);
}

fn zero_length_operations_direct(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("zero-direct");
    let file = open_direct(&engine, &path);
    let align = file.alignment().memory.max(file.alignment().offset) as usize;
    let (res, _) = file.read_at(AlignedBuf::new(0, align).unwrap(), 0).wait();
    assert_eq!(res.unwrap(), 0);
    let (res, _) = file.write_at(AlignedBuf::new(0, align).unwrap(), 0).wait();
    assert_eq!(res.unwrap(), 0);
    // An empty Vec has no real address; zero bytes need no alignment (the
    // kernel itself returns 0 for them).
    let (res, _) = file.write_at(Vec::new(), 0).wait();
    assert_eq!(res.unwrap(), 0, "zero-length direct write");
    let (res, _) = file.read_at(Vec::new(), 0).wait();
    assert_eq!(res.unwrap(), 0, "zero-length direct read");
    assert_eq!(std_len(&path), 0);
}

#[track_caller]
fn assert_overflow<T: std::fmt::Debug>(res: Result<T, Error>, offset: u64, len: u64) {
    match res {
        Err(e @ Error::OffsetOverflow { .. }) => {
            assert!(
                matches!(e, Error::OffsetOverflow { offset: o, len: l } if o == offset && l == len),
                "{e:?} (wanted offset {offset}, len {len})"
            );
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
        }
        other => panic!("expected OffsetOverflow {{ {offset}, {len} }}, got {other:?}"),
    }
}

fn offsets_that_overflow(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("overflow");
    let file = rw(&engine, &path);
    let max = i64::MAX as u64;
    let before = engine.stats();
    for (offset, len) in [
        (u64::MAX, 10usize),
        (max, 10),
        (max - 5, 10),
        (u64::MAX, 0),
        (max + 1, 0),
    ] {
        let data = pattern(40, 0, len);
        let (res, back) = file.write_at(data.clone(), offset).wait();
        assert_overflow(res, offset, len as u64);
        assert_eq!(back, data);
        let (res, back) = file.read_at(vec![9u8; len], offset).wait();
        assert_overflow(res, offset, len as u64);
        assert_eq!(back, vec![9u8; len]);
    }
    let (res, _) = file.write_all_at(vec![1u8; 100], u64::MAX).wait();
    assert_overflow(res, u64::MAX, 100);
    let (res, _) = file.read_exact_at(vec![1u8; 100], max).wait();
    assert_overflow(res, max, 100);
    assert_overflow(file.set_len(u64::MAX).wait(), u64::MAX, 0);
    assert_overflow(file.set_len(max + 1).wait(), max + 1, 0);
    assert_overflow(file.allocate(u64::MAX, 1).wait(), u64::MAX, 1);
    assert_overflow(file.allocate(max, 1).wait(), max, 1);
    assert_overflow(file.allocate(1, u64::MAX).wait(), 1, u64::MAX);
    let port: Port<Vec<u8>> = Port::new(&engine);
    let (err, back) = port.write_at(&file, vec![3u8; 8], u64::MAX, 1).unwrap_err();
    assert_overflow::<()>(Err(err), u64::MAX, 8);
    assert_eq!(back, vec![3u8; 8]);
    let (err, _) = port
        .with_when_full(overlapped::WhenFull::Fail)
        .read_at(&file, vec![3u8; 8], max, 1)
        .unwrap_err();
    assert_overflow::<()>(Err(err), max, 8);
    // The largest offset that fits is handed to the kernel, which refuses
    // it with its own (typed) error, or reads nothing.
    let (res, _) = file.read_at(vec![0u8; 1], max - 1).wait();
    match res {
        Ok(n) => assert_eq!(n, 0),
        Err(Error::Io(e)) => assert!(e.raw_os_error().is_some(), "{e:?}"),
        Err(e) => panic!("unexpected {e:?}"),
    }
    let after = engine.stats();
    assert!(
        after.submitted - before.submitted <= 1,
        "overflows are refused before submission"
    );
    assert_eq!(std_len(&path), 0, "nothing was written");
}

fn use_after_close_and_close_twice(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("closed");
    let file = rw(&engine, &path);
    let (res, _) = file.write_all_at(pattern(41, 0, 4096), 0).wait();
    res.unwrap();
    let other = file.clone();
    file.close().wait().unwrap();
    let before = engine.stats();

    let data = pattern(42, 0, 512);
    let (res, back) = other.write_at(data.clone(), 0).wait();
    assert!(matches!(res, Err(Error::Closed)), "{res:?}");
    assert_eq!(back, data, "the buffer comes back");
    let (res, back) = other.read_at(vec![5u8; 512], 0).wait();
    assert!(matches!(res, Err(Error::Closed)));
    assert_eq!(back, vec![5u8; 512]);
    let (res, _) = other.read_exact_at(vec![0u8; 512], 0).wait();
    assert!(matches!(res, Err(Error::Closed)));
    let (res, _) = other.write_all_at(vec![0u8; 512], 0).wait();
    assert!(matches!(res, Err(Error::Closed)));
    assert!(matches!(other.sync_all().wait(), Err(Error::Closed)));
    assert!(matches!(other.sync_data().wait(), Err(Error::Closed)));
    assert!(matches!(other.metadata().wait(), Err(Error::Closed)));
    assert!(matches!(other.set_len(0).wait(), Err(Error::Closed)));
    assert!(matches!(other.allocate(0, 4096).wait(), Err(Error::Closed)));
    let port: Port<Vec<u8>> = Port::new(&engine);
    let (err, back) = port.write_at(&other, data.clone(), 0, 1).unwrap_err();
    assert!(matches!(err, Error::Closed));
    assert_eq!(back, data);
    let (err, _) = port
        .with_when_full(overlapped::WhenFull::Fail)
        .read_at(&other, vec![0u8; 8], 0, 1)
        .unwrap_err();
    assert!(matches!(err, Error::Closed));
    assert_eq!(Error::Closed.kind(), ErrorKind::NotConnected);

    // Closing again, through either handle.
    assert!(matches!(other.close().wait(), Err(Error::Closed)));
    assert!(matches!(file.close().wait(), Err(Error::Closed)));

    let after = engine.stats();
    assert_eq!(
        after.submitted, before.submitted,
        "nothing was submitted on a closed file"
    );
    assert_pattern(&std_read(&path, 0, 4096), 41, 0);
    assert_eq!(std_len(&path), 4096);
}

/// A missing file, and a missing directory on its path: `ENOENT` both on
/// Linux; `ERROR_FILE_NOT_FOUND` and `ERROR_PATH_NOT_FOUND` on Windows.
#[cfg(target_os = "linux")]
const NOT_FOUND: i32 = libc::ENOENT;
#[cfg(target_os = "linux")]
const PATH_NOT_FOUND: i32 = libc::ENOENT;
#[cfg(windows)]
const NOT_FOUND: i32 = 2;
#[cfg(windows)]
const PATH_NOT_FOUND: i32 = 3;

fn opening_a_missing_file(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let missing = dir.path().join("does-not-exist");
    for opts in [
        OpenOptions::new().read(true).clone(),
        OpenOptions::new().read(true).write(true).clone(),
        OpenOptions::new().write(true).truncate(true).clone(),
    ] {
        match opts.open(&engine, &missing).wait() {
            Err(Error::Io(e)) => {
                assert_eq!(e.kind(), ErrorKind::NotFound);
                assert_eq!(e.raw_os_error(), Some(NOT_FOUND));
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
    }
    match File::open(&engine, dir.path().join("no/such/dir/file")).wait() {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::NotFound);
            assert_eq!(e.raw_os_error(), Some(PATH_NOT_FOUND));
        }
        Ok(_) => panic!("opened a missing file"),
    }
    assert!(!missing.exists(), "no file was created");
}

fn invalid_open_options(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("invalid");
    std::fs::write(&path, b"keep me").unwrap();
    let before = engine.stats();
    let cases: Vec<(&str, OpenOptions)> = vec![
        ("neither read nor write", OpenOptions::new()),
        (
            "create without write",
            OpenOptions::new().read(true).create(true).clone(),
        ),
        (
            "create_new without write",
            OpenOptions::new().read(true).create_new(true).clone(),
        ),
        (
            "truncate without write",
            OpenOptions::new().read(true).truncate(true).clone(),
        ),
        ("only create", OpenOptions::new().create(true).clone()),
    ];
    for (name, opts) in cases {
        match opts.open(&engine, &path).wait() {
            Err(e @ Error::InvalidInput(_)) => assert_eq!(e.kind(), ErrorKind::InvalidInput),
            other => panic!("{name}: expected InvalidInput, got {other:?}"),
        }
    }
    // A path with a NUL byte.
    let nul = std::path::PathBuf::from("bad\0name");
    assert!(matches!(
        OpenOptions::new().read(true).open(&engine, nul).wait(),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(
        engine.stats().submitted,
        before.submitted,
        "refused before submission"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"keep me",
        "the file was not touched"
    );
}

fn operations_after_shutdown(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("shutdown");
    let file = rw(&engine, &path);
    let (res, _) = file.write_all_at(pattern(43, 0, 4096), 0).wait();
    res.unwrap();
    let port: Port<Vec<u8>> = Port::new(&engine);
    engine.shutdown();
    engine.shutdown(); // idempotent
    let data = pattern(44, 0, 100);
    let (res, back) = file.write_at(data.clone(), 0).wait();
    assert!(matches!(res, Err(Error::Shutdown)), "{res:?}");
    assert_eq!(back, data);
    let (res, back) = file.read_at(vec![1u8; 100], 0).wait();
    assert!(matches!(res, Err(Error::Shutdown)), "{res:?}");
    assert_eq!(back, vec![1u8; 100]);
    assert!(matches!(file.sync_all().wait(), Err(Error::Shutdown)));
    assert!(matches!(file.metadata().wait(), Err(Error::Shutdown)));
    assert!(matches!(
        File::open(&engine, &path).wait(),
        Err(Error::Shutdown)
    ));
    let (err, back) = port.write_at(&file, data.clone(), 0, 1).unwrap_err();
    assert!(matches!(err, Error::Shutdown), "{err:?}");
    assert_eq!(back, data);
    assert_eq!(port.outstanding(), 0);
    assert_eq!(Error::Shutdown.kind(), ErrorKind::NotConnected);
    drop(file);
    assert_pattern(&std_read(&path, 0, 4096), 43, 0);
}

#[cfg(target_os = "linux")]
fn kernel_errors_are_typed_and_counted(d: Driver) {
    let engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let before = engine.stats();
    assert!(File::open(&engine, dir.path().join("missing"))
        .wait()
        .is_err());
    // A directory opens read-only, but reading it is EISDIR from the kernel.
    let d_file = File::open(&engine, dir.path()).wait().unwrap();
    assert!(!d_file.metadata().wait().unwrap().is_file);
    let (res, back) = d_file.read_at(vec![4u8; 64], 0).wait();
    match res {
        Err(Error::Io(e)) => assert_eq!(e.raw_os_error(), Some(libc::EISDIR)),
        other => panic!("expected EISDIR, got {other:?}"),
    }
    assert_eq!(back, vec![4u8; 64], "the buffer comes back");
    // Through a port too: the error arrives as a completion with the buffer.
    let port: Port<Vec<u8>> = Port::new(&engine);
    port.read_at(&d_file, vec![6u8; 32], 0, 99).unwrap();
    let c = port.next().expect("a completion");
    assert_eq!(c.key, 99);
    assert_eq!(c.result.unwrap_err().raw_os_error(), Some(libc::EISDIR));
    assert_eq!(c.buf, vec![6u8; 32]);
    let after = engine.stats();
    assert_eq!(after.errors - before.errors, 3, "{after:?}");
    assert_eq!(after.completed, after.submitted);
}

/// Windows' form: a directory does not open as a file
/// (`ERROR_ACCESS_DENIED`), and writing to a pipe whose reader has gone
/// is a broken pipe from the system (`ERROR_NO_DATA` or
/// `ERROR_BROKEN_PIPE`), through `.wait()` and through a port, with the
/// buffer back; each is counted as an error.
#[cfg(windows)]
fn kernel_errors_are_typed_and_counted(d: Driver) {
    const ERROR_ACCESS_DENIED: i32 = 5;
    #[track_caller]
    fn assert_broken_pipe(e: &Error) {
        assert!(matches!(e.raw_os_error(), Some(232 | 109)), "{e:?}");
        assert_eq!(e.kind(), ErrorKind::BrokenPipe, "{e:?}");
    }
    let engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let (reader, name) = named_pipe(&engine);
    let pipe = OpenOptions::new()
        .write(true)
        .open(&engine, &name)
        .wait()
        .unwrap();
    reader.close().wait().unwrap();
    let before = engine.stats();
    assert!(File::open(&engine, dir.path().join("missing"))
        .wait()
        .is_err());
    match File::open(&engine, dir.path()).wait() {
        Err(Error::Io(e)) => {
            assert_eq!(e.raw_os_error(), Some(ERROR_ACCESS_DENIED), "{e}");
            assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        }
        other => panic!("expected ERROR_ACCESS_DENIED, got {other:?}"),
    }
    let (res, back) = pipe.write_at(vec![4u8; 64], 0).wait();
    assert_broken_pipe(&res.unwrap_err());
    assert_eq!(back, vec![4u8; 64], "the buffer comes back");
    // Through a port too: the error arrives as a completion with the buffer.
    let port: Port<Vec<u8>> = Port::new(&engine);
    port.write_at(&pipe, vec![6u8; 32], 0, 99).unwrap();
    let c = port
        .next_timeout(std::time::Duration::from_secs(30))
        .expect("a completion");
    assert_eq!(c.key, 99);
    assert_broken_pipe(&c.result.unwrap_err());
    assert_eq!(c.buf, vec![6u8; 32]);
    let after = engine.stats();
    assert_eq!(after.errors - before.errors, 4, "{after:?}");
    assert_eq!(after.completed, after.submitted);
}

fn invalid_builder_settings(d: Driver) {
    let cases: Vec<(&str, overlapped::EngineBuilder)> = vec![
        ("max_inflight_ops 0", d.builder().max_inflight_ops(0)),
        ("max_inflight_bytes 0", d.builder().max_inflight_bytes(0)),
        ("pool_threads 0", d.builder().pool_threads(0)),
        (
            "pool_threads too many",
            d.builder().pool_threads(MAX_POOL_THREADS + 1),
        ),
        ("ring_entries 0", d.builder().ring_entries(0)),
        ("ring_entries huge", d.builder().ring_entries(1 << 20)),
        ("thread_ring_entries 0", d.builder().thread_ring_entries(0)),
        (
            "thread_ring_entries huge",
            d.builder().thread_ring_entries(32769),
        ),
        (
            "reactor_ring_entries 0",
            d.builder().reactor_ring_entries(0),
        ),
        (
            "reactor_ring_entries huge",
            d.builder().reactor_ring_entries(1 << 20),
        ),
    ];
    for (name, b) in cases {
        match b.build() {
            Err(e @ Error::InvalidInput(_)) => {
                assert_eq!(e.kind(), ErrorKind::InvalidInput);
            }
            other => panic!("{name}: expected InvalidInput, got {other:?}"),
        }
    }
    // The limits that are accepted are the limits that apply.
    let e = d
        .builder()
        .max_inflight_ops(7)
        .max_inflight_bytes(12345)
        .build()
        .unwrap();
    assert_eq!(e.limits(), (7, 12345));
    let e = d.engine();
    assert_eq!(
        e.limits(),
        (
            overlapped::DEFAULT_MAX_INFLIGHT_OPS,
            overlapped::DEFAULT_MAX_INFLIGHT_BYTES
        )
    );
}

fn port_refuses_a_file_of_another_engine(d: Driver) {
    let a = d.engine();
    let b = d.engine();
    let dir = tempdir();
    let file = rw(&a, &dir.path().join("mine"));
    let port: Port<Vec<u8>> = Port::new(&b);
    let (err, back) = port.write_at(&file, vec![1, 2, 3], 0, 1).unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(back, vec![1, 2, 3]);
    let (err, _) = port
        .with_when_full(overlapped::WhenFull::Fail)
        .read_at(&file, vec![0; 3], 0, 1)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)));
    assert_eq!(port.outstanding(), 0);
    assert!(port.next().is_none());
}

fn an_operation_waiting_for_the_budget_at_shutdown_fails_with_shutdown(d: Driver) {
    let engine = d.builder().max_inflight_bytes(4096).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("waiting");
    let file = rw(&engine, &path);
    // An uncollected port completion holds the whole budget.
    let port: Port<Vec<u8>> = Port::new(&engine);
    port.write_at(&file, pattern(45, 0, 4096), 0, 1).unwrap();
    let data = pattern(46, 0, 4096);
    let mut op = file.write_at(data.clone(), 4096);
    assert!(poll_once(&mut op).is_pending());
    assert!(stage(&op).contains("waiting"), "{}", stage(&op));
    engine.shutdown();
    // The budget comes free after the shutdown: the waiting write must not
    // be submitted to a stopped driver, and says why.
    assert_eq!(port.next().unwrap().key, 1);
    let (res, back) = futures::executor::block_on(op);
    assert!(matches!(res, Err(Error::Shutdown)), "{res:?}");
    assert_eq!(back, data, "the buffer comes back");
    assert_eq!(
        std_len(&path),
        4096,
        "the refused write did not reach the file"
    );
    let s = engine.stats();
    assert_eq!(s.completed, s.submitted);
    assert_eq!(s.errors, 0, "refused, not failed in the kernel");

    // A port submitter blocked on the budget is refused the same way.
    let engine = d.builder().max_inflight_bytes(4096).build().unwrap();
    let file = rw(&engine, &path);
    let port: Port<Vec<u8>> = Port::new(&engine);
    port.write_at(&file, pattern(47, 0, 4096), 0, 1).unwrap();
    let blocked = {
        let (port, file) = (port.clone(), file.clone());
        std::thread::spawn(move || port.write_at(&file, pattern(48, 0, 4096), 4096, 2))
    };
    std::thread::sleep(std::time::Duration::from_millis(30));
    engine.shutdown();
    assert_eq!(port.next().unwrap().key, 1);
    match blocked.join().unwrap() {
        Err((Error::Shutdown, back)) => assert_pattern(&back, 48, 0),
        Err((e, _)) => panic!("expected Shutdown, got {e:?}"),
        Ok(()) => panic!("a write over a full budget was admitted after shutdown"),
    }
    assert!(port.next().is_none());
}
