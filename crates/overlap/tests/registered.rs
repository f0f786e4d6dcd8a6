//! Buffers and files registered with a port's ring.
//!
//! Buffers (`Port::register_buffers`, io_uring's `READ_FIXED`/`WRITE_FIXED`):
//! the bytes are right both ways, only buffers inside the registered pool
//! go fixed (counted in `Stats::fixed_buffer_ops`), the port keeps the
//! pool's memory after the pool and its buffers are gone, and bad pools are
//! refused with a typed error.
//!
//! Files (`Port::register_file`): the bytes are right, the operations go by
//! the registered file (`Stats::fixed_file_ops`), and closing, dropping or
//! giving away the file really releases it (its `flock` goes with the last
//! reference to the open file, which the ring's table would otherwise
//! keep); a file opened later under the same descriptor number is read as
//! itself.
//!
//! Buffers registered with an engine (`Engine::register_buffers`) go fixed
//! on its own rings: each thread's (`.wait()`, `block_on`, `join_all`),
//! the engine thread's, each registering the pool on its first operation.
//! Where the kernel refuses to pin a pool (`RLIMIT_MEMLOCK` without
//! `CAP_IPC_LOCK`), a ring reads into it plainly and counts the refusal
//! once (`Stats::buffer_registrations_refused`); a port says `ENOMEM`.
//!
//! On the drivers without a ring, registering says so (`Ok(false)`) and
//! the same operations work unregistered.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use overlapped::{AlignedBuf, AlignedBufPool, Engine, Error, File, IoBuf, IoBufMut, Port};

per_driver!(
    registered_buffers_read_and_write_the_right_bytes,
    only_buffers_inside_the_pool_go_fixed,
    the_port_keeps_a_registered_pool_alive,
    bad_pools_are_refused,
    registered_files_read_and_write_the_right_bytes,
    closing_a_registered_file_releases_it,
    dropping_a_registered_file_releases_it,
    giving_away_a_registered_file_releases_it,
    dropping_the_port_first_releases_its_files,
    bad_files_are_refused,
    a_pool_too_large_to_register_leaves_the_port_usable,
    a_batch_larger_than_the_submission_queue_completes,
    registered_memory_of_the_callers_own_is_read_into,
    engine_registered_buffers_go_fixed_on_its_own_rings,
    an_engine_refuses_bad_pools,
    engines_made_one_after_another_each_get_their_pool_registered,
);

const BLK: usize = 4096;

/// Takes every completion, checking each wrote or read `BLK` bytes; the
/// buffers, by key.
fn drain(port: &Port<AlignedBuf>, n: usize) -> Vec<(u64, AlignedBuf)> {
    let mut out = Vec::new();
    while let Some(c) = port.next() {
        assert_eq!(c.result.expect("the operation succeeds"), BLK);
        out.push((c.key, c.buf));
    }
    assert_eq!(out.len(), n, "every operation completes once");
    out
}

fn registered_buffers_read_and_write_the_right_bytes(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 11, 16 * BLK);
    let file = open_direct(&engine, &path);
    let pool = AlignedBufPool::contiguous(BLK, BLK, 8).unwrap();
    let port: Port<AlignedBuf> = Port::new(&engine);
    let registered = port.register_buffers(&pool).unwrap();
    assert_eq!(
        registered,
        d.is_uring(),
        "a port has a ring of its own on io_uring only"
    );
    let s0 = engine.stats().fixed_buffer_ops;
    // Reads of blocks 15, 13, ..., 1 into pool buffers.
    for i in 0..8u64 {
        let block = 15 - 2 * i;
        port.read_at(&file, pool.get(), block * BLK as u64, block)
            .unwrap();
    }
    for (block, buf) in drain(&port, 8) {
        assert_pattern(&buf, 11, block * BLK as u64);
    }
    // Writes of a second pattern over blocks 0..8 from pool buffers.
    for block in 0..8u64 {
        let mut b = pool.get();
        fill_pattern(&mut b, 12, block * BLK as u64);
        port.write_at(&file, b, block * BLK as u64, block).unwrap();
    }
    drain(&port, 8);
    assert_eq!(std_read(&path, 0, 8 * BLK), pattern(12, 0, 8 * BLK));
    assert_eq!(
        std_read(&path, 8 * BLK as u64, 8 * BLK),
        pattern(11, 8 * BLK as u64, 8 * BLK)
    );
    let fixed = engine.stats().fixed_buffer_ops - s0;
    assert_eq!(
        fixed,
        if registered { 16 } else { 0 },
        "operations submitted as READ_FIXED/WRITE_FIXED"
    );
}

fn only_buffers_inside_the_pool_go_fixed(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 21, 8 * BLK);
    let file = open_direct(&engine, &path);
    let pool = AlignedBufPool::contiguous(BLK, BLK, 2).unwrap();
    let port: Port<AlignedBuf> = Port::new(&engine);
    let registered = port.register_buffers(&pool).unwrap();
    let s0 = engine.stats().fixed_buffer_ops;
    // Two from the arena, a third the exhausted pool makes of its own, and
    // one from no pool at all.
    let (a, b, c) = (pool.get(), pool.get(), pool.get());
    let arena_end = b.as_ptr() as usize + BLK;
    assert_eq!(
        b.as_ptr() as usize - a.as_ptr() as usize,
        BLK,
        "adjacent slices of one allocation"
    );
    assert!(
        c.as_ptr() as usize >= arena_end || (c.as_ptr() as usize) + BLK <= a.as_ptr() as usize,
        "the third buffer lies outside the arena"
    );
    let bufs = [a, b, c, AlignedBuf::new(BLK, BLK).unwrap()];
    for (i, buf) in bufs.into_iter().enumerate() {
        port.read_at(&file, buf, i as u64 * BLK as u64, i as u64)
            .unwrap();
    }
    for (i, buf) in drain(&port, 4) {
        assert_pattern(&buf, 21, i * BLK as u64);
    }
    let fixed = engine.stats().fixed_buffer_ops - s0;
    assert_eq!(
        fixed,
        if registered { 2 } else { 0 },
        "only the arena's two buffers"
    );
    // The arena's slices came back to the pool; the extra one was freed.
    assert_eq!(pool.idle(), 2);
}

fn the_port_keeps_a_registered_pool_alive(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 31, 64 * BLK);
    let file = open_direct(&engine, &path);
    let port: Port<AlignedBuf> = Port::new(&engine);
    let (start, end, registered) = {
        let pool = AlignedBufPool::contiguous(BLK, BLK, 32).unwrap();
        let registered = port.register_buffers(&pool).unwrap();
        let bufs: Vec<AlignedBuf> = (0..32).map(|_| pool.get()).collect();
        let start = bufs.iter().map(|b| b.as_ptr() as usize).min().unwrap();
        (start, start + 32 * BLK, registered)
        // The pool and its buffers are dropped here; a port that registered
        // them holds the memory the kernel pinned.
    };
    let s0 = engine.stats().fixed_buffer_ops;
    // New allocations of the same size: none may land in the registered
    // range while the port lives (a fixed read there would go to the pages
    // the kernel pinned, not to the new buffer). Where nothing was
    // registered, the allocator does reuse the freed range (seen here on the
    // pool and AIO drivers), which is what gives this check its teeth.
    let fresh: Vec<AlignedBuf> = (0..64)
        .map(|_| AlignedBuf::new(BLK, BLK).unwrap())
        .collect();
    let reused = fresh
        .iter()
        .map(|b| b.as_ptr() as usize)
        .filter(|&p| p + BLK > start && p < end)
        .count();
    if registered {
        assert_eq!(reused, 0, "new buffers inside the registered range");
    }
    for (i, buf) in fresh.into_iter().enumerate() {
        port.read_at(&file, buf, i as u64 * BLK as u64, i as u64)
            .unwrap();
    }
    for (i, buf) in drain(&port, 64) {
        assert_pattern(&buf, 31, i * BLK as u64);
    }
    assert_eq!(
        engine.stats().fixed_buffer_ops - s0,
        0,
        "buffers from no registered pool"
    );
}

fn bad_pools_are_refused(d: Driver) {
    let engine = d.engine();
    let port: Port<AlignedBuf> = Port::new(&engine);
    let plain = AlignedBufPool::new(BLK, BLK, 4).unwrap();
    assert!(
        matches!(port.register_buffers(&plain), Err(Error::InvalidInput(_))),
        "a pool of separate allocations cannot be registered"
    );
    assert!(matches!(
        AlignedBufPool::contiguous(BLK, BLK, 0),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        AlignedBufPool::contiguous(BLK, 3, 4),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        AlignedBufPool::contiguous(usize::MAX / 2, BLK, 4),
        Err(Error::InvalidInput(_))
    ));
    let pools: Vec<AlignedBufPool> = (0..9)
        .map(|_| AlignedBufPool::contiguous(BLK, BLK, 1).unwrap())
        .collect();
    let uring = d.is_uring();
    for p in &pools[..8] {
        assert_eq!(port.register_buffers(p).unwrap(), uring);
        // Again: nothing more is registered.
        assert_eq!(port.register_buffers(p).unwrap(), uring);
    }
    let ninth = port.register_buffers(&pools[8]);
    if uring {
        assert!(
            matches!(ninth, Err(Error::InvalidInput(_))),
            "a ninth pool: {ninth:?}"
        );
    } else {
        assert!(matches!(ninth, Ok(false)));
    }
}

/// Whether another open file description of `path` can take an exclusive
/// `flock` now (it cannot while any reference to the first one's open file
/// holds its lock).
fn lock_is_free(path: &Path) -> bool {
    let other = std::fs::File::open(path).expect("open the path again");
    // SAFETY: flock on a descriptor this function owns.
    let r = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    r == 0
}

/// A file opened through `engine`, holding an exclusive `flock`, registered
/// with `port` (when the port has a ring); read once through the port.
fn locked_registered_file(
    engine: &Engine,
    port: &Port<AlignedBuf>,
    path: &Path,
    d: Driver,
) -> File {
    std_create_pattern(path, 41, 4 * BLK);
    let file = open_direct(engine, path);
    // SAFETY: flock on the file's descriptor, which it keeps open.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
    assert!(!lock_is_free(path), "the lock holds while the file is open");
    assert_eq!(port.register_file(&file).unwrap(), d.is_uring());
    port.read_at(&file, AlignedBuf::new(BLK, BLK).unwrap(), 0, 0)
        .unwrap();
    for (_, buf) in drain(port, 1) {
        assert_pattern(&buf, 41, 0);
    }
    file
}

fn registered_files_read_and_write_the_right_bytes(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 51, 16 * BLK);
    let file = open_direct(&engine, &path);
    let port: Port<AlignedBuf> = Port::new(&engine);
    let registered = port.register_file(&file).unwrap();
    assert_eq!(registered, d.is_uring());
    assert_eq!(
        port.register_file(&file).unwrap(),
        registered,
        "again: nothing changes"
    );
    // With registered buffers too, for half of the operations.
    let pool = AlignedBufPool::contiguous(BLK, BLK, 4).unwrap();
    port.register_buffers(&pool).unwrap();
    let s0 = engine.stats();
    for block in 0..8u64 {
        let buf = if block % 2 == 0 {
            pool.get()
        } else {
            AlignedBuf::new(BLK, BLK).unwrap()
        };
        port.read_at(&file, buf, block * BLK as u64, block).unwrap();
    }
    for (block, buf) in drain(&port, 8) {
        assert_pattern(&buf, 51, block * BLK as u64);
    }
    for block in 8..16u64 {
        let mut b = AlignedBuf::new(BLK, BLK).unwrap();
        fill_pattern(&mut b, 52, block * BLK as u64);
        port.write_at(&file, b, block * BLK as u64, block).unwrap();
    }
    drain(&port, 8);
    assert_eq!(
        std_read(&path, 8 * BLK as u64, 8 * BLK),
        pattern(52, 8 * BLK as u64, 8 * BLK)
    );
    let s1 = engine.stats();
    let (files, bufs) = if registered { (16, 4) } else { (0, 0) };
    assert_eq!(
        s1.fixed_file_ops - s0.fixed_file_ops,
        files,
        "by the registered file"
    );
    assert_eq!(
        s1.fixed_buffer_ops - s0.fixed_buffer_ops,
        bufs,
        "into registered buffers"
    );
}

fn closing_a_registered_file_releases_it(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    let port: Port<AlignedBuf> = Port::new(&engine);
    let file = locked_registered_file(&engine, &port, &path, d);
    file.close().wait().unwrap();
    assert!(lock_is_free(&path), "closed: no table keeps the file open");
    // A new file, probably under the same descriptor number, is itself.
    let other = dir.path().join("g");
    std_create_pattern(&other, 42, 4 * BLK);
    let f2 = open_direct(&engine, &other);
    let s0 = engine.stats().fixed_file_ops;
    port.read_at(&f2, AlignedBuf::new(BLK, BLK).unwrap(), BLK as u64, 1)
        .unwrap();
    for (_, buf) in drain(&port, 1) {
        assert_pattern(&buf, 42, BLK as u64);
    }
    assert_eq!(
        engine.stats().fixed_file_ops - s0,
        0,
        "the new file is not registered"
    );
}

fn dropping_a_registered_file_releases_it(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    let port: Port<AlignedBuf> = Port::new(&engine);
    let file = locked_registered_file(&engine, &port, &path, d);
    drop(file);
    assert!(lock_is_free(&path), "dropped: no table keeps the file open");
}

fn giving_away_a_registered_file_releases_it(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    let port: Port<AlignedBuf> = Port::new(&engine);
    let file = locked_registered_file(&engine, &port, &path, d);
    let fd = file.into_fd().map_err(|_| "into_fd").unwrap();
    assert!(
        !lock_is_free(&path),
        "the caller's descriptor holds the lock"
    );
    drop(fd);
    assert!(
        lock_is_free(&path),
        "the caller closed it: no table keeps the file open"
    );
}

fn bad_files_are_refused(d: Driver) {
    let engine = d.engine();
    let other_engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 61, BLK);
    let port: Port<AlignedBuf> = Port::new(&engine);
    let foreign = open_direct(&other_engine, &path);
    assert!(matches!(
        port.register_file(&foreign),
        Err(Error::InvalidInput(_))
    ));
    let file = open_direct(&engine, &path);
    file.close().wait().unwrap();
    let r = port.register_file(&file);
    if d.is_uring() {
        assert!(matches!(r, Err(Error::Closed)), "a closed file: {r:?}");
    } else {
        assert!(matches!(r, Ok(false)), "no ring: {r:?}");
    }
}

fn dropping_the_port_first_releases_its_files(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    let port: Port<AlignedBuf> = Port::new(&engine);
    let file = locked_registered_file(&engine, &port, &path, d);
    // The port's table goes with the port, before the ring closes (the
    // kernel frees a closed ring's tables later, asynchronously).
    drop(port);
    file.close().wait().unwrap();
    assert!(
        lock_is_free(&path),
        "the dropped port's table keeps the file open"
    );
}

fn a_pool_too_large_to_register_leaves_the_port_usable(d: Driver) {
    let engine = d.engine();
    let port: Port<AlignedBuf> = Port::new(&engine);
    // 1 GiB and 1 MiB: more than the kernel takes as one registered buffer
    // (allocated lazily by the system: untouched pages cost nothing).
    let big = AlignedBufPool::contiguous(1 << 20, BLK, 1025).unwrap();
    let r = port.register_buffers(&big);
    if d.is_uring() {
        assert!(matches!(r, Err(Error::InvalidInput(_))), "too large: {r:?}");
    } else {
        assert!(matches!(r, Ok(false)));
    }
    drop(big);
    let small = AlignedBufPool::contiguous(BLK, BLK, 4).unwrap();
    assert_eq!(
        port.register_buffers(&small).unwrap(),
        d.is_uring(),
        "the next pool registers"
    );
}

fn a_batch_larger_than_the_submission_queue_completes(d: Driver) {
    let engine = d.builder().ring_entries(8).build().expect("engine builds");
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 71, 32 * BLK);
    let file = open_direct(&engine, &path);
    // 20 reads in one batch through an 8-entry queue: pushing the ninth
    // submits the queue first, which must not wait on the pusher's own lock.
    let r = within(Duration::from_secs(60), move || {
        let port: Port<AlignedBuf> = Port::new(&engine);
        port.batch(|p| {
            for i in 0..20u64 {
                p.read_at(&file, AlignedBuf::new(BLK, BLK).unwrap(), i * BLK as u64, i)
                    .unwrap();
            }
        });
        let mut got = drain(&port, 20);
        got.sort_by_key(|(k, _)| *k);
        for (i, buf) in got {
            assert_pattern(&buf, 71, i * BLK as u64);
        }
    });
    r.expect("a batch of 20 through 8 submission entries");
}

/// A slice of memory the test owns, as a C caller's buffer: the operation
/// gets its address and length, not the memory.
struct Slice {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the test keeps the memory alive and untouched while the slice is
// in flight (it owns the backing buffer past every completion).
unsafe impl Send for Slice {}
// SAFETY: as above; the pointer does not move.
unsafe impl IoBuf for Slice {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr
    }
    fn bytes_len(&self) -> usize {
        self.len
    }
}
// SAFETY: as above; any byte is a valid u8.
unsafe impl IoBufMut for Slice {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

fn registered_memory_of_the_callers_own_is_read_into(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 81, 8 * BLK);
    let file = open_direct(&engine, &path);
    let mut backing = AlignedBuf::new(8 * BLK, BLK).unwrap();
    let base = backing.as_mut_ptr();
    let port: Port<Slice> = Port::new(&engine);
    // SAFETY: `backing` outlives the port (dropped after it, below).
    let registered = unsafe { port.register_memory(base, 8 * BLK) }.unwrap();
    assert_eq!(registered, d.is_uring());
    // SAFETY: as above.
    let again = unsafe { port.register_memory(base, 8 * BLK) };
    assert_eq!(again.unwrap(), registered);
    if registered {
        // SAFETY: nothing is registered: the range is refused first.
        let empty = unsafe { port.register_memory(base, 0) };
        assert!(matches!(empty, Err(Error::InvalidInput(_))), "{empty:?}");
    }
    let s0 = engine.stats().fixed_buffer_ops;
    for i in 0..8u64 {
        // SAFETY: inside `backing`, one block each.
        let ptr = unsafe { base.add(i as usize * BLK) };
        let slice = Slice { ptr, len: BLK };
        port.read_at(&file, slice, (7 - i) * BLK as u64, i)
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let mut n = 0;
    while let Some(c) = port.next() {
        assert_eq!(c.result.unwrap(), BLK);
        n += 1;
    }
    assert_eq!(n, 8);
    for i in 0..8u64 {
        let at = i as usize * BLK;
        assert_pattern(&backing[at..at + BLK], 81, (7 - i) * BLK as u64);
    }
    let fixed = engine.stats().fixed_buffer_ops - s0;
    assert_eq!(fixed, if registered { 8 } else { 0 });
    drop(port);
    drop(backing);
}

/// `Engine::register_buffers`: reads and writes into the pool's buffers go
/// fixed on every ring of the engine's that carries them: this thread's
/// (`.wait()`, and `join_all` in `block_on`), another thread's (which
/// registers the pool on its first operation and unregisters it when it
/// exits), and the engine thread's (a future driven by a foreign
/// executor); a buffer from outside the pool does not. A pool made after
/// a registered one was dropped is not taken for it.
fn engine_registered_buffers_go_fixed_on_its_own_rings(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 31, 16 * BLK);
    let file = open_direct(&engine, &path);
    let pool = AlignedBufPool::contiguous(BLK, BLK, 8).unwrap();
    let registered = engine.register_buffers(&pool).unwrap();
    assert_eq!(
        registered,
        d.is_uring(),
        "an engine has rings on io_uring only"
    );
    assert!(
        engine.register_buffers(&pool).unwrap() == registered,
        "again: nothing new"
    );
    let s0 = engine.stats().fixed_buffer_ops;
    // This thread's ring: four reads waited for, then four joined.
    for block in 0..4u64 {
        let (res, buf) = file.read_at(pool.get(), block * BLK as u64).wait();
        assert_eq!(res.unwrap(), BLK);
        assert_pattern(&buf, 31, block * BLK as u64);
    }
    let joined = overlapped::block_on(overlapped::join_all(
        (4..8u64).map(|block| file.read_at(pool.get(), block * BLK as u64)),
    ));
    for (i, (res, buf)) in joined.into_iter().enumerate() {
        assert_eq!(res.unwrap(), BLK);
        assert_pattern(&buf, 31, (4 + i as u64) * BLK as u64);
    }
    // A write from the pool, waited for.
    let mut b = pool.get();
    fill_pattern(&mut b, 32, 0);
    assert_eq!(file.write_at(b, 0).wait().0.unwrap(), BLK);
    assert_eq!(std_read(&path, 0, BLK), pattern(32, 0, BLK));
    // Another thread's ring, gone when the thread exits.
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let (res, buf) = file.read_at(pool.get(), 9 * BLK as u64).wait();
            assert_eq!(res.unwrap(), BLK);
            assert_pattern(&buf, 31, 9 * BLK as u64);
        });
    });
    // The engine thread's ring: a foreign executor's future.
    let (res, buf) = futures::executor::block_on(file.read_at(pool.get(), 10 * BLK as u64));
    assert_eq!(res.unwrap(), BLK);
    assert_pattern(&buf, 31, 10 * BLK as u64);
    // Not from the pool.
    let (res, buf) = file
        .read_at(AlignedBuf::new(BLK, BLK).unwrap(), 11 * BLK as u64)
        .wait();
    assert_eq!(res.unwrap(), BLK);
    assert_pattern(&buf, 31, 11 * BLK as u64);
    let fixed = engine.stats().fixed_buffer_ops - s0;
    assert_eq!(
        fixed,
        if registered { 11 } else { 0 },
        "every operation into the pool, on each ring, went fixed"
    );
    // The pool and its buffers gone (the rings keep its memory): a new
    // pool's buffers are read into as themselves, not as registered ones.
    drop((buf, pool));
    let other = AlignedBufPool::contiguous(BLK, BLK, 4).unwrap();
    let s1 = engine.stats().fixed_buffer_ops;
    for block in 12..16u64 {
        let (res, buf) = file.read_at(other.get(), block * BLK as u64).wait();
        assert_eq!(res.unwrap(), BLK);
        assert_pattern(&buf, 31, block * BLK as u64);
    }
    assert_eq!(
        engine.stats().fixed_buffer_ops,
        s1,
        "the new pool is not registered"
    );
    engine.shutdown();
}

/// An engine takes only contiguous pools, of at most 1 GiB, and at most 8.
fn an_engine_refuses_bad_pools(d: Driver) {
    let engine = d.engine();
    let loose = AlignedBufPool::new(BLK, BLK, 2).unwrap();
    assert!(
        matches!(engine.register_buffers(&loose), Err(Error::InvalidInput(_))),
        "a pool that is not contiguous"
    );
    let pools: Vec<_> = (0..9)
        .map(|_| AlignedBufPool::contiguous(BLK, BLK, 1).unwrap())
        .collect();
    for p in &pools[..8] {
        assert_eq!(engine.register_buffers(p).unwrap(), d.is_uring());
    }
    let ninth = engine.register_buffers(&pools[8]);
    if d.is_uring() {
        assert!(matches!(ninth, Err(Error::InvalidInput(_))), "{ninth:?}");
    } else {
        assert!(
            !ninth.unwrap(),
            "no ring: nothing registered, nothing refused"
        );
    }
    // Registered again: nothing new, no error.
    assert_eq!(engine.register_buffers(&pools[0]).unwrap(), d.is_uring());
    engine.shutdown();
}

/// Engines and pools made and dropped one after another on one thread:
/// its ring lets go of a pool that is gone (a table of 8 slots), so each
/// new engine's pool goes fixed there too, and the ring does not take a
/// new engine for an old one at the same address.
fn engines_made_one_after_another_each_get_their_pool_registered(d: Driver) {
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 41, 4 * BLK);
    for round in 0..12u64 {
        let engine = d.engine();
        let file = open_direct(&engine, &path);
        let pool = AlignedBufPool::contiguous(BLK, BLK, 2).unwrap();
        let registered = engine.register_buffers(&pool).unwrap();
        let s0 = engine.stats().fixed_buffer_ops;
        let off = (round % 4) * BLK as u64;
        let (res, buf) = file.read_at(pool.get(), off).wait();
        assert_eq!(res.unwrap(), BLK);
        assert_pattern(&buf, 41, off);
        let fixed = engine.stats().fixed_buffer_ops - s0;
        assert_eq!(fixed, u64::from(registered), "round {round}");
        drop((buf, pool, file));
        engine.shutdown();
    }
}

/// Pinned memory of the process, from `/proc/self/status` (`VmPin`, kB).
fn vm_pin_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmPin:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmPin in /proc/self/status")
}

/// The child process of `a_ring_unpins_a_pool_once_it_is_gone` (alone in
/// its process: `VmPin` counts the whole process).
#[test]
fn unpin_child() {
    if !is_child("unpin_child") {
        return;
    }
    let d = Driver::uring().expect("the parent found io_uring usable");
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 51, 4 * BLK);
    let base = vm_pin_kb();
    {
        let engine = d.engine();
        let file = open_direct(&engine, &path);
        // 4 MiB, registered by this thread's ring at the first read into it.
        let pool = AlignedBufPool::contiguous(BLK, BLK, 1024).unwrap();
        assert!(engine.register_buffers(&pool).unwrap());
        assert_eq!(
            vm_pin_kb(),
            base,
            "nothing pinned before a buffer reaches a ring"
        );
        let (res, buf) = file.read_at(pool.get(), 0).wait();
        assert_eq!(res.unwrap(), BLK);
        assert_pattern(&buf, 51, 0);
        assert!(
            vm_pin_kb() >= base + 4096,
            "the ring pinned the pool: {} kB over {base}",
            vm_pin_kb() - base
        );
        drop((buf, pool, file));
        engine.shutdown();
    }
    // The engine and the pool are gone; the next operation on this
    // thread's ring (another engine's) lets go of it.
    let engine = d.engine();
    let file = open_direct(&engine, &path);
    let (res, buf) = file
        .read_at(AlignedBuf::new(BLK, BLK).unwrap(), BLK as u64)
        .wait();
    assert_eq!(res.unwrap(), BLK);
    assert_pattern(&buf, 51, BLK as u64);
    assert_eq!(vm_pin_kb(), base, "the pool's pages unpinned");
    engine.shutdown();
    child_ok("unpin_child");
}

/// A thread's ring pins a registered pool's pages when a buffer of it
/// first reaches the ring, and unpins them at its next operation once the
/// pool is gone (engine and buffers dropped), not at the thread's exit.
#[test]
fn a_ring_unpins_a_pool_once_it_is_gone() {
    if Driver::uring().is_none() {
        eprintln!("SKIPPED: io_uring unavailable here");
        return;
    }
    run_child_within("unpin_child", &[], &[], Duration::from_secs(60));
}

/// Takes `CAP_IPC_LOCK` out of this thread's effective and permitted sets
/// (threads made after inherit it) and sets `RLIMIT_MEMLOCK` to `limit`
/// bytes: the kernel then counts registered buffers against the limit, as
/// for any unprivileged process. `Err` with why when it cannot.
fn without_ipc_lock(limit: u64) -> Result<(), String> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_IPC_LOCK: u32 = 14;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes two `Data` (version 3) into `data`, which has
    // room for them; `header` is a valid version-3 header.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(format!("capget: {}", std::io::Error::last_os_error()));
    }
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    data[0].permitted &= !(1 << CAP_IPC_LOCK);
    // SAFETY: as above; capset only reads them.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `now`.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut now) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    if now.rlim_max < limit {
        return Err(format!(
            "RLIMIT_MEMLOCK's hard limit is {} bytes, below {limit}",
            now.rlim_max
        ));
    }
    let new = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit reads one `rlimit`.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &new) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The child process of `a_pool_the_kernel_refuses_is_read_into_plainly`
/// (alone in its process: it gives up `CAP_IPC_LOCK`).
#[test]
fn memlock_child() {
    if !is_child("memlock_child") {
        return;
    }
    if let Err(why) = without_ipc_lock(1 << 20) {
        println!("SKIPPED: cannot limit locked memory here: {why}");
        child_ok("memlock_child");
        return;
    }
    let d = Driver::uring().expect("the parent found io_uring usable");
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 61, 8 * BLK);
    let engine = d.engine();
    let file = open_direct(&engine, &path);
    // 4 MiB: more than the 1 MiB this process may now pin.
    let big = AlignedBufPool::contiguous(BLK, BLK, 1024).unwrap();
    assert!(
        engine.register_buffers(&big).unwrap(),
        "the engine takes the pool: each ring asks the kernel itself"
    );
    let s0 = engine.stats();
    for block in 0..3u64 {
        let (res, buf) = file.read_at(big.get(), block * BLK as u64).wait();
        assert_eq!(res.unwrap(), BLK);
        assert_pattern(&buf, 61, block * BLK as u64);
    }
    let s1 = engine.stats();
    assert_eq!(
        s1.fixed_buffer_ops - s0.fixed_buffer_ops,
        0,
        "refused by the kernel: the reads went plain"
    );
    assert_eq!(
        s1.buffer_registrations_refused - s0.buffer_registrations_refused,
        1,
        "this thread's ring asked once, and not again for the same pool"
    );
    // 64 KiB fits under the limit: the same ring registers it.
    let small = AlignedBufPool::contiguous(BLK, BLK, 16).unwrap();
    assert!(engine.register_buffers(&small).unwrap());
    let (res, buf) = file.read_at(small.get(), 3 * BLK as u64).wait();
    assert_eq!(res.unwrap(), BLK);
    assert_pattern(&buf, 61, 3 * BLK as u64);
    let s2 = engine.stats();
    assert_eq!(
        s2.fixed_buffer_ops - s1.fixed_buffer_ops,
        1,
        "the small pool went fixed"
    );
    assert_eq!(
        s2.buffer_registrations_refused,
        s1.buffer_registrations_refused
    );
    // A port gets the kernel's refusal as its error, and works on.
    let port: Port<AlignedBuf> = Port::new(&engine);
    let r = port.register_buffers(&big);
    assert!(
        matches!(&r, Err(Error::Io(e)) if e.raw_os_error() == Some(libc::ENOMEM)),
        "the kernel's ENOMEM: {r:?}"
    );
    for block in 4..8u64 {
        port.read_at(&file, big.get(), block * BLK as u64, block)
            .unwrap();
    }
    for (block, buf) in drain(&port, 4) {
        assert_pattern(&buf, 61, block * BLK as u64);
    }
    drop(port);
    engine.shutdown();
    child_ok("memlock_child");
}

/// A pool the kernel will not pin (`RLIMIT_MEMLOCK`, without
/// `CAP_IPC_LOCK`): the engine's ring reads into it plainly, counts the
/// refusal once, and registers a pool that fits; a port says `ENOMEM`.
#[test]
fn a_pool_the_kernel_refuses_is_read_into_plainly() {
    if Driver::uring().is_none() {
        eprintln!("SKIPPED: io_uring unavailable here");
        return;
    }
    run_child_within("memlock_child", &[], &[], Duration::from_secs(60));
}
