//! Buffers registered with a port's ring (`Port::register_buffers`,
//! io_uring's `READ_FIXED`/`WRITE_FIXED`): the bytes are right both ways,
//! only buffers inside the registered pool go fixed (counted in
//! `Stats::fixed_buffer_ops`), the port keeps the pool's memory after the
//! pool and its buffers are gone, and bad pools are refused with a typed
//! error. On the drivers without a port ring, registering says so
//! (`Ok(false)`) and the same reads work unregistered.

use crate::common::*;
use overlap::{AlignedBuf, AlignedBufPool, Error, Port};

per_driver!(
    registered_buffers_read_and_write_the_right_bytes,
    only_buffers_inside_the_pool_go_fixed,
    the_port_keeps_a_registered_pool_alive,
    bad_pools_are_refused,
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
