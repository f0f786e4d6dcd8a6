//! Regression tests for five soundness defects:
//!
//! 1. A panic in user code (a buffer's `Drop`, a `Waker`) on the engine's
//!    own thread unwinds it: the ring and every in-flight operation's buffer
//!    are freed while the device may still write them, and every later
//!    operation hangs. Both drivers (the pool loses its worker).
//! 2. A pool worker lost to such a panic is never replaced.
//! 3. An `open` future dropped after submission leaks the descriptor.
//! 4. `File::close` waiting for budget loses the descriptor if it is
//!    dropped, or if the engine shuts down.
//! 5. At shutdown the io_uring driver frees its eventfd read's buffer while
//!    that read may still be armed in the kernel.
//!
//! Futures are polled by hand or on `futures::executor`, never by
//! `overlapped::block_on`, so that they reach the engine's own thread. Every
//! wait has a deadline; scenarios that can corrupt memory or leave hung
//! threads run in a child process.

// The allocator's checks run where the engine's io_uring and AIO paths
// are (its scenarios speak Linux's calls).
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

#[macro_use]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use common::*;
use overlapped::{AlignedBuf, DriverChoice, DriverKind, Engine, File, Op, OpenOptions, Port, Task};

per_driver!(
    panic_in_buffer_drop_on_the_engine_thread_is_contained,
    panic_in_waker_on_the_engine_thread_is_contained,
    dropped_open_futures_leave_no_descriptor_open,
    close_dropped_while_waiting_for_budget_still_closes_the_descriptor,
    close_waiting_for_budget_at_shutdown_still_closes_the_descriptor,
);

/// How long a later operation may take after a panic: "a few seconds".
const LIMIT: Duration = Duration::from_secs(5);
/// Child processes are killed (and fail) after this.
const CHILD_LIMIT: Duration = Duration::from_secs(120);
/// Names the scenario a child process runs: `scenario:driver`.
const CASE: &str = "OVERLAP_SOUNDNESS_CASE";

/// The entry point of the child processes; does nothing in a normal run.
#[test]
fn child() {
    if !is_child("child") {
        return;
    }
    let case = std::env::var(CASE).expect("OVERLAP_SOUNDNESS_CASE");
    let (scenario, driver) = case.split_once(':').expect("scenario:driver");
    // A quick hook: one capturing a backtrace (RUST_BACKTRACE=1) takes long
    // enough for the device to finish every read before the engine thread
    // unwinds, which would hide the use after free.
    std::panic::set_hook(Box::new(|info| eprintln!("child: {info}")));
    let d = match driver {
        "uring" => Driver::uring().expect("the parent found io_uring usable"),
        _ => Driver::pool(),
    };
    match scenario {
        "buffer-drop" => engine_thread_panic(d, Culprit::BufferDrop),
        "waker" => engine_thread_panic(d, Culprit::Waker),
        "eventfd" => eventfd_shutdown_stress(),
        other => panic!("unknown scenario {other}"),
    }
    child_ok("child");
}

fn run_case(scenario: &str, d: Driver, set: &[(&str, &str)], remove: &[&str]) {
    let case = format!("{scenario}:{}", if d.is_uring() { "uring" } else { "pool" });
    let mut env = vec![(CASE, case.as_str())];
    env.extend_from_slice(set);
    run_child_within("child", &env, remove, CHILD_LIMIT);
}

// ------------------------------------------------- user code that panics

#[derive(Debug, Clone, Copy)]
enum Culprit {
    BufferDrop,
    Waker,
}

/// Holds the provoking write back until opened. Without it, the driver
/// thread that the submission wakes may preempt this one (2 vCPUs: it
/// often does) and complete the write before its future is dropped or its
/// waker registered. io_uring: the write goes to a FIFO whose pipe is full
/// until drained. Pool (one thread): the worker is stuck opening a FIFO for
/// reading until a writer opens it, and the write waits behind it.
struct Gate {
    engine: Engine,
    fifo: PathBuf,
    target: File,
    reader: Option<std::fs::File>,
    writer: Option<std::fs::File>,
    blocker: Option<Task<overlapped::Result<File>>>,
}

fn gate(engine: &Engine, dir: &std::path::Path) -> Gate {
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = dir.join("gate");
    mkfifo(&fifo);
    let end = |write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap()
    };
    let (target, reader, writer) = if engine.driver().kind == DriverKind::Uring {
        let reader = end(false);
        let target = OpenOptions::new().write(true).open(engine, &fifo).wait();
        (target.unwrap(), Some(reader), Some(end(true)))
    } else {
        let target = File::create(engine, dir.join("scratch")).wait().unwrap();
        (target, None, None)
    };
    Gate {
        engine: engine.clone(),
        fifo,
        target,
        reader,
        writer,
        blocker: None,
    }
}

impl Gate {
    fn close(&mut self) {
        use std::io::Write;
        match (&self.reader, &mut self.writer) {
            (Some(_), Some(w)) => while w.write(&[0u8; 65536]).is_ok() {}, // io_uring: fill
            _ => {
                self.writer = None;
                let mut open = OpenOptions::new().read(true).open(&self.engine, &self.fifo);
                assert!(poll_once(&mut open).is_pending(), "the gate's open waits");
                self.blocker = Some(open);
            }
        }
    }

    fn open(&mut self) {
        use std::io::Read;
        match &mut self.reader {
            Some(r) => while r.read(&mut [0u8; 65536]).is_ok_and(|n| n > 0) {},
            // O_RDWR never blocks, and lets the worker's open through.
            None => {
                self.writer = Some(
                    std::fs::File::options()
                        .read(true)
                        .write(true)
                        .open(&self.fifo)
                        .unwrap(),
                )
            }
        }
    }
}

/// Makes user code panic on the driver thread that completes a write: a
/// write dropped in flight whose buffer panics in `Drop`, or one polled
/// with a waker that panics (its future kept in `keep`).
fn provoke(gate: &mut Gate, culprit: Culprit, keep: &mut Vec<Op<Vec<u8>>>) -> Result<(), String> {
    let wire = Arc::new(Tripwire::default());
    gate.close();
    let pending = match culprit {
        Culprit::BufferDrop => {
            let buf = PanicOnDrop::new(AlignedBuf::new(4096, 4096).unwrap(), &wire);
            poll_once(&mut gate.target.write_at(buf, 0)).is_pending()
        }
        Culprit::Waker => {
            let waker = Waker::from(Arc::new(PanicWaker::new(&wire)));
            let mut op = gate.target.write_at(vec![1u8; 4096], 0);
            let poll = Pin::new(&mut op).poll(&mut Context::from_waker(&waker));
            keep.push(op);
            poll.is_pending()
        }
    };
    gate.open();
    if !pending {
        return Err("the gated write completed at its first poll".into());
    }
    if !wait_until(Duration::from_secs(30), || wire.ran()) {
        return Err("the provoking write did not complete within 30 s".into());
    }
    match wire.fired() {
        true => Ok(()),
        false => Err("the user code ran on this thread, not on a driver thread".into()),
    }
}

// ------------------------------------------- 1. panics on the engine thread

const READS: usize = 1000;
const READ_LEN: usize = 64 << 10;

fn panic_in_buffer_drop_on_the_engine_thread_is_contained(d: Driver) {
    let _heavy = heavy();
    run_case("buffer-drop", d, &[], &[]);
}

fn panic_in_waker_on_the_engine_thread_is_contained(d: Driver) {
    let _heavy = heavy();
    run_case("waker", d, &[], &[]);
}

/// In a child: ~1000 64 KiB O_DIRECT reads in flight (futures dropped, so
/// only the engine owns the buffers: [`KeptBuf`]s, never really freed),
/// then user code panics on the driver thread. Afterwards later operations
/// must complete (Ok or an error) within a few seconds, the engine must shut
/// down, and no read buffer may be written after the engine dropped it
/// (really freeing them gave glibc's `malloc(): unsorted double linked list
/// corrupted` in the original report). The pool gets one thread, so that
/// losing it is visible.
fn engine_thread_panic(d: Driver, culprit: Culprit) {
    let engine = d
        .builder()
        .pool_threads(1)
        .max_inflight_bytes(128 << 20)
        .build()
        .unwrap();
    let dir = tempdir();
    let data = dir.path().join("data");
    std::fs::write(&data, vec![0x5A; READS * READ_LEN]).unwrap();
    std::fs::File::open(&data).unwrap().sync_all().unwrap();
    let file = open_direct(&engine, &data);
    let mut gate = gate(&engine, dir.path());
    let align = (file.alignment().memory as usize).max(4096);
    let yard = Yard::default();
    // Buffers first, so that the reads go out back to back.
    let bufs: Vec<KeptBuf> = (0..READS)
        .map(|_| KeptBuf::new(AlignedBuf::new(READ_LEN, align).unwrap(), &yard))
        .collect();
    for (i, buf) in bufs.into_iter().enumerate() {
        let _ = poll_once(&mut file.read_at(buf, (i * READ_LEN) as u64));
    }
    eprintln!(
        "child: in flight before the panic: {:?}",
        engine.in_flight()
    );
    let mut keep = Vec::new();
    let mut failures = Vec::new();
    if let Err(e) = provoke(&mut gate, culprit, &mut keep) {
        failures.push(format!("provoking the panic: {e}"));
    }

    let deadline = Instant::now() + LIMIT;
    let (f1, f2) = (file.clone(), file.clone());
    let (b1, b2) = (
        AlignedBuf::new(READ_LEN, align),
        AlignedBuf::new(READ_LEN, align),
    );
    let by_wait = watch(move || f1.read_at(b1.unwrap(), 0).wait().0);
    let by_executor = watch(move || futures::executor::block_on(f2.read_at(b2.unwrap(), 0)).0);
    for (what, w) in [
        ("a later read with .wait()", by_wait),
        ("a later read on futures::executor", by_executor),
    ] {
        match w.wait(deadline) {
            Ok(res) => eprintln!("child: {what}: {res:?}"),
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    let e = engine.clone();
    if let Err(e) = within(Duration::from_secs(10), move || e.shutdown()) {
        failures.push(format!("engine.shutdown(): {e}"));
    }
    let written = written_after_drop(&yard);
    if written > 0 {
        failures.push(format!(
            "{written} of {READS} read buffers were written after the engine dropped them: \
             freed while the kernel still owned them"
        ));
    }
    assert!(
        failures.is_empty(),
        "after a panic in {culprit:?} on the {} driver's thread, with {READS} reads in flight:\n  {}",
        engine.driver().kind,
        failures.join("\n  ")
    );
}

// ------------------------------------------- 2. pool workers lost to panics

#[test]
fn pool_worker_lost_to_a_panicking_buffer_drop_is_replaced() {
    pool_worker_is_replaced(Culprit::BufferDrop);
}

#[test]
fn pool_worker_lost_to_a_panicking_waker_is_replaced() {
    pool_worker_is_replaced(Culprit::Waker);
}

/// A one-thread pool: after each of two panics on its worker, later
/// operations (foreign executor and `.wait()`) complete within the limit.
fn pool_worker_is_replaced(culprit: Culprit) {
    let engine = Engine::builder()
        .driver(DriverChoice::Pool)
        .pool_threads(1)
        .build()
        .unwrap();
    let dir = tempdir();
    let mut gate = gate(&engine, dir.path());
    let mut keep = Vec::new();
    for round in 1..=2 {
        if let Err(e) = provoke(&mut gate, culprit, &mut keep) {
            panic!("round {round}: provoking a panic in {culprit:?} on the pool's worker: {e}");
        }
        let (f1, f2) = (gate.target.clone(), gate.target.clone());
        let deadline = Instant::now() + LIMIT;
        let a = watch(move || futures::executor::block_on(f1.write_at(vec![2u8; 512], 0)).0);
        let b = watch(move || f2.write_at(vec![3u8; 512], 512).wait().0);
        for (what, w) in [("on futures::executor", a), ("with .wait()", b)] {
            if let Err(e) = w.wait(deadline) {
                panic!(
                    "round {round}: after a panic in {culprit:?} on the only pool worker, \
                     a later write {what} {e}: the worker was not replaced"
                );
            }
        }
    }
    drop(keep);
    let e = engine.clone();
    within(LIMIT, move || e.shutdown()).expect("engine.shutdown()");
}

// ------------------------------------------------ 3. dropped open futures

const OPENS: usize = 200;

fn dropped_open_futures_leave_no_descriptor_open(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("target");
    std::fs::write(&path, b"opened and abandoned").unwrap();
    assert!(fds_open_on(&path).is_empty());
    for _ in 0..OPENS {
        let mut open = OpenOptions::new().read(true).open(&engine, &path);
        let _ = poll_once(&mut open); // submits the openat; dropped after
    }
    assert!(
        wait_until(Duration::from_secs(10), || engine.in_flight() == (0, 0)),
        "still in flight 10 s after the opens were dropped: {:?}",
        engine.in_flight()
    );
    // An engine may close abandoned descriptors asynchronously: a moment.
    wait_until(Duration::from_secs(2), || fds_open_on(&path).is_empty());
    let e = engine.clone();
    within(LIMIT, move || e.shutdown()).expect("engine.shutdown()");
    let left = fds_open_on(&path);
    assert!(
        left.is_empty(),
        "{} of {OPENS} open() futures dropped after their first poll left the descriptor the \
         kernel returned open (leaked), e.g. fds {:?}",
        left.len(),
        &left[..left.len().min(8)]
    );
}

// ------------------------------------------- 4. close() waiting for budget

/// An engine whose budget of one operation is held by a port completion
/// nobody takes, and a file whose `close()` has been polled once and waits
/// for that budget.
struct CloseWaiting {
    engine: Engine,
    port: Port<Vec<u8>>,
    file: File,
    close: Task<overlapped::Result<()>>,
    path: PathBuf,
    fd: i32,
    _dir: tempfile::TempDir,
}

fn close_waiting_for_budget(d: Driver) -> CloseWaiting {
    let engine = d.builder().max_inflight_ops(1).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("closing");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    let filler = File::create(&engine, dir.path().join("filler"))
        .wait()
        .unwrap();
    let port = Port::new(&engine);
    if let Err((e, _)) = port.write_at(&filler, vec![7u8; 512], 0, 0) {
        panic!("port write: {e}");
    }
    assert_eq!(
        engine.in_flight().0,
        1,
        "the port's completion holds the budget"
    );
    let fd = file.as_raw_fd();
    assert_eq!(fds_open_on(&path), [fd]);
    let mut close = file.close();
    assert!(
        poll_once(&mut close).is_pending(),
        "close() waits for the budget"
    );
    CloseWaiting {
        engine,
        port,
        file,
        close,
        path,
        fd,
        _dir: dir,
    }
}

fn close_dropped_while_waiting_for_budget_still_closes_the_descriptor(d: Driver) {
    let s = close_waiting_for_budget(d);
    drop(s.close);
    drop(s.file);
    drop(s.port); // the budget comes free
    assert!(
        wait_until(LIMIT, || fds_open_on(&s.path).is_empty()),
        "descriptor {} stays open: its close() was dropped while waiting for budget, then the \
         file and the port were dropped too (leaked)",
        s.fd
    );
    let e = s.engine.clone();
    within(LIMIT, move || e.shutdown()).expect("engine.shutdown()");
}

fn close_waiting_for_budget_at_shutdown_still_closes_the_descriptor(d: Driver) {
    let s = close_waiting_for_budget(d);
    let e = s.engine.clone();
    within(LIMIT, move || e.shutdown()).expect("engine.shutdown()");
    drop(s.port); // the budget comes free
    let close = s.close;
    let res = within(LIMIT, move || futures::executor::block_on(close))
        .unwrap_or_else(|e| panic!("close() after shutdown: {e}"));
    drop(s.file);
    assert!(
        wait_until(LIMIT, || fds_open_on(&s.path).is_empty()),
        "close() was waiting for budget when the engine shut down; it returned {res:?}, but \
         descriptor {} stays open (leaked)",
        s.fd
    );
}

// ------------------------------------- 5. the eventfd buffer at shutdown

/// A quarantine for freed 8-byte blocks, the size of the io_uring driver's
/// eventfd read buffer (`Box<u64>`): while on (only in the eventfd child),
/// such blocks are poisoned and never given back to malloc, so an 8-byte
/// write by the kernel after the free shows as a changed block.
struct Quarantine;

#[global_allocator]
static ALLOC: Quarantine = Quarantine;
static QUARANTINE_ON: AtomicBool = AtomicBool::new(false);
const SLOTS: usize = 1 << 16;
static HELD: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static NEXT: AtomicUsize = AtomicUsize::new(0);
const FREED: u64 = 0xF3EE_D0F3_EED0_F3EE;

// SAFETY: forwards to the system allocator; a quarantined block is simply
// never freed.
unsafe impl GlobalAlloc for Quarantine {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() == 8 && layout.align() == 8 && QUARANTINE_ON.load(SeqCst) {
            let i = NEXT.fetch_add(1, SeqCst);
            if i < SLOTS {
                // SAFETY: the block is 8 bytes, aligned, and ours from now on.
                unsafe { ptr.cast::<u64>().write_volatile(FREED) };
                HELD[i].store(ptr as usize, SeqCst);
                return;
            }
        }
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours (a realloc'd block is not quarantined).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Quarantined blocks that no longer hold the poison: (address, value).
fn quarantine_changes() -> Vec<(usize, u64)> {
    HELD[..NEXT.load(SeqCst).min(SLOTS)]
        .iter()
        .map(|h| h.load(SeqCst))
        .filter(|&p| p != 0)
        // SAFETY: quarantined blocks are never freed: valid, aligned u64s.
        .map(|p| (p, unsafe { (p as *const u64).read_volatile() }))
        .filter(|&(_, v)| v != FREED)
        .collect()
}

/// End to end, through real engine shutdowns. On Linux 6.18 this never
/// failed, even without the cancellation in `drain`: once its ring is closed,
/// the kernel cancels the pending read's task work instead of running it
/// (its `io_should_terminate_tw` checks for a dying ring).
/// The regression test that does fail without it is the driver's unit
/// test `after_drain_the_kernel_no_longer_writes_the_eventfd_buffer`
/// (`src/driver/uring/core.rs`), which checks the rule where the buffer is freed.
#[test]
fn shutdown_never_lets_the_kernel_write_a_freed_eventfd_buffer() {
    let Some(d) = Driver::uring() else { return };
    let _heavy = heavy(); // its spinning threads would slow the others
                          // Each setup the driver can fall back to: task work runs differently.
    run_case("eventfd", d, &[], &["OVERLAP_URING_SETUP"]);
    run_case("eventfd", d, &[("OVERLAP_URING_SETUP", "coop")], &[]);
    run_case("eventfd", d, &[("OVERLAP_URING_SETUP", "none")], &[]);
}

/// In a child: engines created and shut down in a loop, idle (the engine
/// thread parked with its eventfd read armed, which shutdown wakes and then
/// writes the eventfd) or with another thread submitting, while two threads
/// spin to vary the interleavings; the quarantine catches the kernel's
/// 8-byte eventfd read landing in a freed block.
fn eventfd_shutdown_stress() {
    QUARANTINE_ON.store(true, SeqCst);
    self_check_quarantine();
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let secs = std::env::var("OVERLAP_SOUNDNESS_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut engines = 0usize;
    while Instant::now() < end && NEXT.load(SeqCst) < SLOTS * 3 / 4 {
        let engine = Engine::builder()
            .driver(DriverChoice::Uring)
            .cache_fast_path(false)
            .build()
            .unwrap();
        if engines == 0 {
            eprintln!("child: ring setup: {}", engine.driver().detail);
        }
        // The first operation hands the armed eventfd read to the kernel.
        let zero = futures::executor::block_on(File::open(&engine, "/dev/zero")).unwrap();
        let submitter = (engines % 2 == 1).then(|| {
            let zero = zero.clone();
            std::thread::spawn(move || {
                while futures::executor::block_on(zero.read_at(vec![0u8; 64], 0))
                    .0
                    .is_ok()
                {}
            })
        });
        std::thread::sleep(Duration::from_micros((engines % 7) as u64 * 50));
        let e = engine.clone();
        within(LIMIT, move || e.shutdown()).expect("engine.shutdown()");
        if let Some(t) = submitter {
            t.join().unwrap();
        }
        engines += 1;
    }
    stop.store(true, SeqCst);
    for s in spinners {
        s.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(100)); // late kernel work
    let changed = quarantine_changes();
    eprintln!(
        "child: {engines} engines shut down, {} freed 8-byte blocks watched",
        NEXT.load(SeqCst).min(SLOTS)
    );
    assert!(
        changed.is_empty(),
        "after {engines} engine shutdowns, {} freed 8-byte blocks were written afterwards \
         (the eventfd read buffer): {:x?}",
        changed.len(),
        &changed[..changed.len().min(8)]
    );
}

/// The quarantine sees an 8-byte kernel write (`read(2)` from an eventfd,
/// as io_uring's eventfd read does) into a freed `Box<u64>`.
fn self_check_quarantine() {
    let b = std::hint::black_box(Box::new(0u64));
    let addr = &*b as *const u64 as usize;
    drop(b);
    assert!(
        HELD.iter().any(|h| h.load(SeqCst) == addr),
        "a freed Box<u64> is quarantined"
    );
    // SAFETY: eventfd takes no pointers; the result is checked.
    let efd = unsafe { libc::eventfd(3, 0) };
    assert!(efd >= 0, "eventfd");
    // SAFETY: the quarantined block is 8 writable bytes that are never freed.
    let n = unsafe { libc::read(efd, addr as *mut libc::c_void, 8) };
    // SAFETY: our descriptor.
    unsafe { libc::close(efd) };
    assert_eq!(n, 8);
    assert_eq!(quarantine_changes(), [(addr, 3)], "the quarantine sees it");
    // SAFETY: as above; restore the poison.
    unsafe { (addr as *mut u64).write_volatile(FREED) };
}
