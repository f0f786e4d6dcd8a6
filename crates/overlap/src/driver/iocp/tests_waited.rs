//! `IocpDriver::submit_waited`: a call carrying its waiting thread's event
//! (and no completion packet) is waited for and completed by that thread,
//! whatever else happens to it (data late, a stale signal, shutdown, a
//! refusal for lack of resources, a panic at completion). Pipes make a
//! read pend for sure, even under Wine.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{ERROR_OPERATION_ABORTED, HANDLE};
use windows_sys::Win32::System::Threading::SetEvent;

use super::tests::{block_of, close, harness, pipe, temp_file, write_sync, TestOp, PATIENCE};
use super::IocpDriver;
use crate::driver::Driver;
use crate::stats::Counters;

fn driver() -> (Arc<IocpDriver>, Arc<Counters>) {
    let counters = Arc::new(Counters::default());
    let d = IocpDriver::start(1, 1, counters.clone()).expect("a completion port");
    (Arc::new(d), counters)
}

/// Records the thread that completes `op`.
fn record_thread(op: &TestOp) -> Arc<Mutex<Option<ThreadId>>> {
    let on = Arc::new(Mutex::new(None));
    let seen = on.clone();
    *op.then.lock().unwrap() = Some(Box::new(move || {
        *seen.lock().unwrap() = Some(std::thread::current().id());
    }));
    on
}

/// Waits until an operation is in `d`'s table, then a little more, so
/// that its call has been made (and pends, on a pipe with nothing in it).
fn until_issued(d: &IocpDriver) {
    let t0 = Instant::now();
    while d.inner.lock().flight.is_empty() {
        assert!(t0.elapsed() < PATIENCE, "no operation entered the table");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// Writes `data` to `fd` once an operation of `d` was issued, on a thread
/// of its own.
fn feed_when_issued(
    d: &Arc<IocpDriver>,
    fd: i32,
    data: &'static [u8],
) -> std::thread::JoinHandle<()> {
    let d = d.clone();
    std::thread::spawn(move || {
        until_issued(&d);
        write_sync(fd, data);
    })
}

#[test]
fn a_pending_read_is_completed_by_its_waiter() {
    let (d, counters) = driver();
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let read = TestOp::read(&e, rd, 5, 0);
    let on = record_thread(&read);
    let feed = feed_when_issued(&d, wr, b"hello");
    d.submit_waited(read.clone());
    assert_eq!(
        read.completions(),
        1,
        "completed before submit_waited returned"
    );
    assert_eq!(read.wait(), 5);
    assert_eq!(read.bytes(), b"hello");
    assert!(!read.inline(), "it pended: known only after the call");
    assert_eq!(*on.lock().unwrap(), Some(std::thread::current().id()));
    assert_eq!(counters.iocp_waited_on_caller.load(Ordering::Relaxed), 1);
    assert_eq!(
        Arc::strong_count(&read),
        1,
        "the block let the operation go"
    );
    assert_eq!(d.inner.lock().in_flight(), 0, "out of the table");
    feed.join().unwrap();
    d.shutdown();
    close(wr);
    close(rd);
}

#[test]
fn a_stale_signal_does_not_end_the_wait() {
    let (d, counters) = driver();
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    // The waiting thread's event, signalled by another thread while the
    // call pends, before any data: the wait must go on.
    let ev = crate::sys::with_thread_event(|ev| ev.expect("an event") as usize);
    let poke = {
        let d = d.clone();
        std::thread::spawn(move || {
            until_issued(&d);
            // SAFETY: the waiting thread's event, open while it lives (it
            // is in the call until the data below comes).
            assert_ne!(unsafe { SetEvent(ev as HANDLE) }, 0);
            std::thread::sleep(Duration::from_millis(100));
            write_sync(wr, b"late");
        })
    };
    let read = TestOp::read(&e, rd, 4, 0);
    d.submit_waited(read.clone());
    assert_eq!(read.wait(), 4, "waited until the data came");
    assert_eq!(read.bytes(), b"late");
    poke.join().unwrap();
    // A call that finishes at once signals the event too: the next one
    // still waits for its own data.
    write_sync(wr, b"now");
    let now = TestOp::read(&e, rd, 3, 0);
    d.submit_waited(now.clone());
    assert_eq!(now.bytes(), b"now");
    let feed = feed_when_issued(&d, wr, b"after");
    let after = TestOp::read(&e, rd, 5, 0);
    d.submit_waited(after.clone());
    assert_eq!(after.bytes(), b"after");
    feed.join().unwrap();
    assert!(counters.iocp_waited_on_caller.load(Ordering::Relaxed) >= 2);
    d.shutdown();
    close(wr);
    close(rd);
}

#[test]
fn a_waited_read_is_cancelled_at_shutdown() {
    let (d, _) = driver();
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let read = TestOp::read(&e, rd, 8, 0);
    let waiter = {
        let (d, read) = (d.clone(), read.clone());
        std::thread::spawn(move || d.submit_waited(read))
    };
    until_issued(&d);
    assert_eq!(read.completions(), 0, "nobody wrote to the pipe");
    let began = Instant::now();
    d.shutdown();
    let took = began.elapsed();
    waiter.join().unwrap();
    assert_eq!(read.completions(), 1, "completed once, by its waiter");
    assert_eq!(read.wait(), -i64::from(ERROR_OPERATION_ABORTED));
    assert!(
        took >= super::SHUTDOWN_GRACE,
        "cancelled after the grace: {took:?}"
    );
    assert!(took < PATIENCE, "shutdown ends: {took:?}");
    assert_eq!(
        Arc::strong_count(&read),
        1,
        "the block let the operation go"
    );
    close(wr);
    close(rd);
}

#[test]
fn a_waited_call_refused_for_resources_goes_to_the_pool() {
    let (d, counters) = driver();
    let e = harness();
    let fd = temp_file();
    d.associate(fd).unwrap();
    // Alone in flight: no completion to wait for, so the pool takes it.
    super::op::tests_busy::set(fd, 1);
    let w = TestOp::write(&e, fd, &block_of(3), 0);
    d.submit_waited(w.clone());
    assert_eq!(w.wait(), 4096, "the pool performed it");
    assert_eq!(counters.iocp_busy_retries.load(Ordering::Relaxed), 1);
    assert_eq!(counters.pool_submitted.load(Ordering::Relaxed), 1);
    let back = TestOp::read(&e, fd, 4096, 0);
    d.submit_waited(back.clone());
    assert_eq!(back.wait(), 4096);
    assert!(back.bytes() == block_of(3), "read back as written");
    d.shutdown();
    assert_eq!(w.completions(), 1, "completed exactly once");
    assert_eq!(Arc::strong_count(&w), 1);
    close(fd);
}

#[test]
fn a_panic_at_completion_reaches_the_waiter() {
    let (d, _) = driver();
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let mut op = TestOp::read(&e, rd, 2, 0);
    Arc::get_mut(&mut op).expect("not shared yet").panics = true;
    let feed = feed_when_issued(&d, wr, b"ok");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.submit_waited(op.clone());
    }));
    assert!(caught.is_err(), "the completion's panic is the waiter's");
    feed.join().unwrap();
    assert_eq!(op.completions(), 1);
    assert_eq!(d.inner.lock().in_flight(), 0, "retired despite the panic");
    // The driver goes on.
    let feed = feed_when_issued(&d, wr, b"go");
    let next = TestOp::read(&e, rd, 2, 0);
    d.submit_waited(next.clone());
    assert_eq!(next.bytes(), b"go");
    feed.join().unwrap();
    d.shutdown();
    assert_eq!(
        Arc::strong_count(&op),
        1,
        "the panicking operation was let go"
    );
    close(wr);
    close(rd);
}
