//! `IocpDriver::cancel`: a port's reads and writes in flight with a key
//! are stopped with `CancelIoEx`, each still completed exactly once through
//! its packet, its buffer held until then; one asked for before its call
//! was made is cancelled by its issuer once the call pends.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use windows_sys::Win32::Foundation::ERROR_OPERATION_ABORTED;

use super::op::OpBlock;
use super::tests::{block_of, close, harness, pipe, temp_file, write_sync, TestOp};
use super::IocpDriver;
use crate::cell::Completable;
use crate::driver::Driver;
use crate::stats::Counters;

fn driver() -> IocpDriver {
    IocpDriver::start(1, 1, Arc::new(Counters::default())).expect("a completion port")
}

/// A pipe read of `len` bytes standing for the port `port` with `key`.
fn tagged_read(rd: i32, len: usize, port: usize, key: u64) -> Arc<TestOp> {
    let mut op = TestOp::read(&harness(), rd, len, 0);
    Arc::get_mut(&mut op).expect("not shared yet").queue_key = Some((port, key));
    op
}

#[test]
fn cancel_stops_the_ports_calls_with_the_key_only() {
    let d = driver();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let mine = tagged_read(rd, 4, 1, 42);
    let other_key = tagged_read(rd, 4, 1, 7);
    let other_port = tagged_read(rd, 4, 2, 42);
    for op in [&mine, &other_key, &other_port] {
        d.submit(op.clone(), false);
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(d.cancel(1, 42), 1);
    assert_eq!(mine.wait(), -i64::from(ERROR_OPERATION_ABORTED));
    assert_eq!(
        other_key.completions() + other_port.completions(),
        0,
        "not asked"
    );
    assert_eq!(d.cancel(1, 42), 0, "nothing left to ask");
    write_sync(wr, b"abcdefgh");
    assert_eq!(other_key.wait(), 4);
    assert_eq!(other_port.wait(), 4);
    d.shutdown();
    for op in [&mine, &other_key, &other_port] {
        assert_eq!(op.completions(), 1, "completed exactly once");
        assert_eq!(Arc::strong_count(op), 1, "let go after its packet");
    }
    close(wr);
    close(rd);
}

#[test]
fn a_cancel_before_the_call_is_made_by_its_issuer() {
    let d = driver();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let op = tagged_read(rd, 4, 1, 42);
    let call = op
        .kind()
        .overlapped()
        .expect("a read has an overlapped form");
    let block = d
        .inner
        .register(OpBlock::new(op.clone(), call, None))
        .expect("not shutting down");
    // Registered, not issued: marked, found nowhere in the kernel yet.
    assert_eq!(d.cancel(1, 42), 1);
    d.inner.issue(block, None);
    assert_eq!(
        op.wait(),
        -i64::from(ERROR_OPERATION_ABORTED),
        "its issuer cancelled it once it pended"
    );
    d.shutdown();
    assert_eq!(op.completions(), 1);
    assert_eq!(Arc::strong_count(&op), 1);
    close(wr);
    close(rd);
}

#[test]
fn a_cancelled_call_refused_for_resources_is_not_handed_to_the_pool() {
    let counters = Arc::new(Counters::default());
    let d = IocpDriver::start(1, 1, counters.clone()).expect("a completion port");
    let fd = temp_file();
    d.associate(fd).unwrap();
    let mut w = TestOp::write(&harness(), fd, &block_of(9), 0);
    Arc::get_mut(&mut w).expect("not shared yet").queue_key = Some((1, 42));
    let call = w
        .kind()
        .overlapped()
        .expect("a write has an overlapped form");
    let block = d
        .inner
        .register(OpBlock::new(w.clone(), call, None))
        .expect("not shutting down");
    assert_eq!(d.cancel(1, 42), 1);
    // Refused, alone in flight: the pool would take it, but it was asked
    // to stop and the pool could not stop it.
    super::op::tests_busy::set(fd, 1);
    d.inner.issue(block, None);
    assert_eq!(w.wait(), -i64::from(ERROR_OPERATION_ABORTED));
    assert_eq!(counters.pool_submitted.load(Ordering::Relaxed), 0);
    let back = TestOp::read(&harness(), fd, 4096, 0);
    d.submit(back.clone(), false);
    assert_eq!(back.wait(), 0, "nothing was written");
    d.shutdown();
    assert_eq!(w.completions(), 1);
    assert_eq!(Arc::strong_count(&w), 1);
    close(fd);
}
