//! The driver on real files and pipes, through a minimal operation of its
//! own (`TestOp`): results, exactly-once completion, shutdown, the exit of
//! the submitting thread. Whether a call completed at once is the system's
//! choice (Wine's, under the cross-build), never asserted.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_INVALID_HANDLE, ERROR_OPERATION_ABORTED, GENERIC_READ, GENERIC_WRITE,
    HANDLE, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, WriteFile, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, FILE_ATTRIBUTE_TEMPORARY,
    FILE_FLAG_DELETE_ON_CLOSE, FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_FLAG_OVERLAPPED,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING, PIPE_ACCESS_INBOUND,
};
use windows_sys::Win32::System::Pipes::{
    CreateNamedPipeW, PIPE_READMODE_BYTE, PIPE_TYPE_BYTE, PIPE_WAIT,
};

use super::IocpDriver;
use crate::cell::{fork_generation, Completable, EngineLink, EngineState, RingSize, RingSizes};
use crate::driver::Driver;
use crate::operation::{Nop, OpKind, Read, Write, REFUSED_AT_SHUTDOWN};
use crate::stats::Counters;

/// How long a test waits for a completion before it fails.
pub(super) const PATIENCE: Duration = Duration::from_secs(20);

/// The engine an operation belongs to, as far as the driver looks.
pub(super) struct Harness {
    state: EngineState,
}

impl EngineLink for Harness {
    fn state(&self) -> &EngineState {
        &self.state
    }
    fn submit_to_driver(&self, _op: Arc<dyn Completable>, _urgent: bool) {
        unreachable!("the IOCP driver never hands an operation back to its engine");
    }
    fn nudge(&self) {}
}

pub(super) fn harness() -> Arc<Harness> {
    let ring = RingSize { sq: 1, cq: 1 };
    Arc::new(Harness {
        state: EngineState {
            counters: Arc::new(Counters::default()),
            max_kernel_workers: None,
            rings: RingSizes {
                engine: ring,
                thread: ring,
                reactor: ring,
            },
            own_ring_ops: AtomicUsize::new(0),
            pools: Default::default(),
            generation: fork_generation(),
            shut: AtomicBool::new(false),
        },
    })
}

/// A read or a write owning its buffer, recording every completion.
pub(super) struct TestOp {
    kind: OpKind,
    engine: Arc<Harness>,
    /// The buffer (`Box<[u8]>` given up), freed with the operation.
    buf: *mut u8,
    len: usize,
    results: Mutex<Vec<(i64, bool)>>,
    cv: Condvar,
    /// Completion panics (user code at completion, a waker, may).
    pub(super) panics: bool,
    /// User code run at completion, once.
    pub(super) then: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// The port and key it stands for (`Completable::queue_key`).
    pub(super) queue_key: Option<(usize, u64)>,
}

// SAFETY: the buffer is reached through `buf` only by the kernel while the
// operation is in flight, and by `bytes` once it completed.
unsafe impl Send for TestOp {}
// SAFETY: as above.
unsafe impl Sync for TestOp {}

impl Drop for TestOp {
    fn drop(&mut self) {
        // SAFETY: `buf`/`len` come from `Box::into_raw` of a boxed slice;
        // the operation's last reference goes only once its block is freed.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.buf, self.len)) });
    }
}

impl Completable for TestOp {
    fn kind(&self) -> &OpKind {
        &self.kind
    }
    fn shared(&self) -> &EngineState {
        &self.engine.state
    }
    fn engine(&self) -> Arc<dyn EngineLink> {
        self.engine.clone()
    }
    fn complete(&self, res: i64, inline: bool) {
        self.finish(res, inline);
    }
    fn queue_key(&self) -> Option<(usize, u64)> {
        self.queue_key
    }
    fn finish(&self, res: i64, inline: bool) {
        self.results.lock().unwrap().push((res, inline));
        self.cv.notify_all();
        let then = self.then.lock().unwrap().take();
        if let Some(f) = then {
            f();
        }
        if self.panics {
            panic!("a completion's user code panics");
        }
    }
}

impl TestOp {
    fn new(
        engine: &Arc<Harness>,
        data: Vec<u8>,
        make: impl FnOnce(*mut u8, u32) -> OpKind,
    ) -> Arc<TestOp> {
        let len = data.len();
        let buf = Box::into_raw(data.into_boxed_slice()).cast::<u8>();
        Arc::new(TestOp {
            kind: make(buf, len as u32),
            engine: engine.clone(),
            buf,
            len,
            results: Mutex::new(Vec::new()),
            cv: Condvar::new(),
            panics: false,
            then: Mutex::new(None),
            queue_key: None,
        })
    }

    pub(super) fn read(engine: &Arc<Harness>, fd: i32, len: usize, offset: u64) -> Arc<TestOp> {
        TestOp::new(engine, vec![0; len], |ptr, len| {
            OpKind::Read(Read {
                fd,
                ptr,
                len,
                offset,
                direct: false,
                synchronous: false,
            })
        })
    }

    pub(super) fn write(engine: &Arc<Harness>, fd: i32, data: &[u8], offset: u64) -> Arc<TestOp> {
        TestOp::new(engine, data.to_vec(), |ptr, len| {
            OpKind::Write(Write {
                fd,
                ptr,
                len,
                offset,
                direct: false,
                synchronous: false,
            })
        })
    }

    fn nop(engine: &Arc<Harness>) -> Arc<TestOp> {
        TestOp::new(engine, Vec::new(), |_, _| OpKind::Nop(Nop { res: 0 }))
    }

    /// The result, once it came (fails the test after `PATIENCE`).
    pub(super) fn wait(&self) -> i64 {
        let deadline = Instant::now() + PATIENCE;
        let mut r = self.results.lock().unwrap();
        while r.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no completion within {PATIENCE:?}");
            r = self.cv.wait_timeout(r, left).unwrap().0;
        }
        r[0].0
    }

    /// Whether the first completion was known within the submitting call.
    pub(super) fn inline(&self) -> bool {
        self.results.lock().unwrap()[0].1
    }

    pub(super) fn completions(&self) -> usize {
        self.results.lock().unwrap().len()
    }

    /// The buffer's bytes (after completion).
    pub(super) fn bytes(&self) -> Vec<u8> {
        assert_eq!(self.completions(), 1, "read back once completed");
        // SAFETY: the operation completed: the kernel no longer writes it.
        unsafe { std::slice::from_raw_parts(self.buf, self.len) }.to_vec()
    }
}

fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(Some(0)).collect()
}

fn fd_of(h: HANDLE) -> i32 {
    assert!(
        h != INVALID_HANDLE_VALUE && !h.is_null(),
        "{}",
        std::io::Error::last_os_error()
    );
    let v = h as isize;
    assert!(
        (0..=i32::MAX as isize).contains(&v),
        "a handle fits an i32: {v}"
    );
    v as i32
}

pub(super) fn close(fd: i32) {
    // SAFETY: the test's own handle, closed once.
    assert_ne!(unsafe { CloseHandle(super::handle_of(fd)) }, 0);
}

static NAMES: AtomicUsize = AtomicUsize::new(0);

fn unique(what: &str) -> String {
    format!(
        "overlap-iocp-{what}-{}-{}",
        std::process::id(),
        NAMES.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new empty file opened for overlapped I/O, deleted when closed.
pub(super) fn temp_file() -> i32 {
    let path = std::env::temp_dir().join(unique("file"));
    let path = wide(&path.to_string_lossy());
    // SAFETY: `path` is a NUL-terminated UTF-16 string that outlives the call.
    let h = unsafe {
        CreateFileW(
            path.as_ptr(),
            GENERIC_READ | GENERIC_WRITE,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            std::ptr::null(),
            CREATE_ALWAYS,
            FILE_ATTRIBUTE_TEMPORARY | FILE_FLAG_OVERLAPPED | FILE_FLAG_DELETE_ON_CLOSE,
            std::ptr::null_mut(),
        )
    };
    fd_of(h)
}

/// A named pipe: its reading end (overlapped, for the driver) and its
/// writing end (synchronous, for the test).
pub(super) fn pipe() -> (i32, i32) {
    let name = wide(&format!(r"\\.\pipe\{}", unique("pipe")));
    // SAFETY: `name` is a NUL-terminated UTF-16 string that outlives the call.
    let server = unsafe {
        CreateNamedPipeW(
            name.as_ptr(),
            PIPE_ACCESS_INBOUND | FILE_FLAG_OVERLAPPED | FILE_FLAG_FIRST_PIPE_INSTANCE,
            PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT,
            1,
            4096,
            4096,
            0,
            std::ptr::null(),
        )
    };
    let server = fd_of(server);
    // SAFETY: as above.
    let client = unsafe {
        CreateFileW(
            name.as_ptr(),
            GENERIC_WRITE,
            0,
            std::ptr::null(),
            OPEN_EXISTING,
            FILE_ATTRIBUTE_NORMAL,
            std::ptr::null_mut(),
        )
    };
    (server, fd_of(client))
}

pub(super) fn write_sync(fd: i32, data: &[u8]) {
    let mut n = 0;
    // SAFETY: `data` and `n` outlive the call; the handle is synchronous.
    let ok = unsafe {
        WriteFile(
            super::handle_of(fd),
            data.as_ptr(),
            data.len() as u32,
            &mut n,
            std::ptr::null_mut(),
        )
    };
    assert_ne!(ok, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(n as usize, data.len());
}

fn driver(threads: usize) -> IocpDriver {
    IocpDriver::start(threads, 2, Arc::new(Counters::default())).expect("a completion port")
}

pub(super) fn block_of(i: usize) -> Vec<u8> {
    (0..4096).map(|j| (i * 31 + j * 7) as u8).collect()
}

#[test]
fn writes_in_flight_read_back_identical() {
    for threads in [1, 2] {
        let d = driver(threads);
        let e = harness();
        let fd = temp_file();
        d.associate(fd).unwrap();
        let writes: Vec<_> = (0..32)
            .map(|i| TestOp::write(&e, fd, &block_of(i), i as u64 * 4096))
            .collect();
        for w in &writes {
            d.submit(w.clone(), false);
        }
        for w in &writes {
            assert_eq!(w.wait(), 4096);
        }
        let reads: Vec<_> = (0..32)
            .map(|i| TestOp::read(&e, fd, 4096, i as u64 * 4096))
            .collect();
        for r in &reads {
            d.submit(r.clone(), false);
        }
        for (i, r) in reads.iter().enumerate() {
            assert_eq!(r.wait(), 4096);
            assert!(r.bytes() == block_of(i), "block {i} reads back as written");
        }
        d.shutdown();
        for op in writes.iter().chain(&reads) {
            assert_eq!(op.completions(), 1, "completed exactly once");
            assert_eq!(Arc::strong_count(op), 1, "the driver let the operation go");
        }
        close(fd);
    }
}

#[test]
fn read_at_end_of_file() {
    let d = driver(1);
    let e = harness();
    let fd = temp_file();
    d.associate(fd).unwrap();
    let w = TestOp::write(&e, fd, b"0123456789", 0);
    d.submit(w.clone(), false);
    assert_eq!(w.wait(), 10);
    let past = TestOp::read(&e, fd, 100, 10);
    d.submit(past.clone(), false);
    assert_eq!(
        past.wait(),
        0,
        "a read at the end of the file reads nothing"
    );
    let beyond = TestOp::read(&e, fd, 100, 1 << 20);
    d.submit(beyond.clone(), false);
    assert_eq!(beyond.wait(), 0, "a read past the end reads nothing");
    let tail = TestOp::read(&e, fd, 100, 4);
    d.submit(tail.clone(), false);
    assert_eq!(tail.wait(), 6, "a read across the end stops there");
    assert_eq!(&tail.bytes()[..6], b"456789");
    d.shutdown();
    close(fd);
}

/// A handle value no test opens (handles are small multiples of 4).
const NOT_A_HANDLE: i32 = 0x3fff_fff0;

#[test]
fn invalid_handle_is_an_error() {
    let d = driver(1);
    let e = harness();
    let err = d
        .associate(NOT_A_HANDLE)
        .expect_err("an invalid handle cannot be associated");
    assert_eq!(
        err.raw_os_error(),
        Some(ERROR_INVALID_HANDLE as i32),
        "{err}"
    );
    let r = TestOp::read(&e, NOT_A_HANDLE, 16, 0);
    d.submit(r.clone(), false);
    assert_eq!(r.wait(), -i64::from(ERROR_INVALID_HANDLE));
    let w = TestOp::write(&e, NOT_A_HANDLE, b"x", 0);
    d.submit(w.clone(), false);
    assert_eq!(w.wait(), -i64::from(ERROR_INVALID_HANDLE));
    let msg = std::io::Error::from_raw_os_error(-w.wait() as i32).to_string();
    assert!(
        msg.to_lowercase().contains("handle"),
        "a clear message: {msg}"
    );
    d.shutdown();
    assert_eq!(r.completions() + w.completions(), 2);
}

#[test]
fn operation_outlives_its_thread() {
    let d = Arc::new(driver(1));
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let file = temp_file();
    d.associate(file).unwrap();
    let (read, write) = {
        let (d, e) = (d.clone(), e.clone());
        std::thread::spawn(move || {
            let read = TestOp::read(&e, rd, 64, 0);
            d.submit(read.clone(), false);
            let write = TestOp::write(&e, file, &block_of(3), 0);
            d.submit(write.clone(), false);
            (read, write)
        })
        .join()
        .unwrap()
    };
    // The submitting thread is gone; the pipe's read is still waiting.
    assert_eq!(read.completions(), 0, "nothing was written to the pipe yet");
    write_sync(wr, b"after the thread");
    assert_eq!(read.wait(), 16);
    assert_eq!(&read.bytes()[..16], b"after the thread");
    assert_eq!(write.wait(), 4096);
    let back = TestOp::read(&e, file, 4096, 0);
    d.submit(back.clone(), false);
    assert_eq!(back.wait(), 4096);
    assert!(back.bytes() == block_of(3));
    d.shutdown();
    close(wr);
    close(rd);
    close(file);
}

#[test]
fn shutdown_completes_everything_in_flight_once() {
    let d = driver(2);
    let e = harness();
    let fd = temp_file();
    d.associate(fd).unwrap();
    let writes: Vec<_> = (0..32)
        .map(|i| TestOp::write(&e, fd, &block_of(i), i as u64 * 4096))
        .collect();
    for w in &writes {
        d.submit(w.clone(), false);
    }
    d.shutdown();
    for w in &writes {
        assert_eq!(
            w.completions(),
            1,
            "completed before shutdown returned, once"
        );
        assert_eq!(w.wait(), 4096);
        assert_eq!(Arc::strong_count(w), 1, "the driver let the operation go");
    }
    let late = TestOp::write(&e, fd, b"late", 0);
    d.submit(late.clone(), false);
    assert_eq!(late.completions(), 1, "refused at once");
    assert_eq!(late.wait(), REFUSED_AT_SHUTDOWN);
    d.shutdown();
    close(fd);
}

#[test]
fn pipe_read_cancelled_at_shutdown() {
    let d = driver(1);
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let read = TestOp::read(&e, rd, 64, 0);
    d.submit(read.clone(), false);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(read.completions(), 0, "nobody wrote to the pipe");
    assert_eq!(
        Arc::strong_count(&read),
        2,
        "the block holds the operation and its buffer"
    );
    let began = Instant::now();
    d.shutdown();
    let took = began.elapsed();
    assert_eq!(read.completions(), 1, "completed before shutdown returned");
    assert_eq!(read.wait(), -i64::from(ERROR_OPERATION_ABORTED));
    assert_eq!(
        Arc::strong_count(&read),
        1,
        "the block went only with its packet"
    );
    assert!(
        took >= super::SHUTDOWN_GRACE,
        "cancelled after the grace only: {took:?}"
    );
    assert!(took < PATIENCE, "shutdown ends: {took:?}");
    close(wr);
    close(rd);
}

#[test]
fn the_pool_takes_what_has_no_overlapped_form() {
    let counters = Arc::new(Counters::default());
    let d = IocpDriver::start(1, 1, counters.clone()).expect("a completion port");
    let e = harness();
    let fd = temp_file();
    d.associate(fd).unwrap();
    let nop = TestOp::nop(&e);
    assert!(
        d.pool_takes(nop.kind()),
        "an operation without an overlapped form goes to the pool"
    );
    let w = TestOp::write(&e, fd, b"abc", 0);
    assert!(!d.pool_takes(w.kind()), "a write goes to the kernel");
    d.submit(nop.clone(), false);
    d.submit(w.clone(), false);
    assert_eq!(nop.wait(), 0);
    assert_eq!(w.wait(), 3);
    d.shutdown();
    assert_eq!(counters.pool_submitted.load(Ordering::Relaxed), 1);
    assert_eq!(counters.iocp_submitted.load(Ordering::Relaxed), 1);
    assert_eq!(
        counters.submit_syscalls.load(Ordering::Relaxed),
        2,
        "one call each"
    );
    assert_eq!(counters.iocp_busy_retries.load(Ordering::Relaxed), 0);
    close(fd);
}

#[test]
fn a_panic_at_completion_is_contained() {
    let d = driver(1);
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let mut op = TestOp::read(&e, rd, 8, 0);
    Arc::get_mut(&mut op).expect("not shared yet").panics = true;
    d.submit(op.clone(), false);
    write_sync(wr, b"12345678");
    assert_eq!(op.wait(), 8);
    // The completion thread lives on: a second read completes.
    let next = TestOp::read(&e, rd, 8, 0);
    d.submit(next.clone(), false);
    write_sync(wr, b"abcdefgh");
    assert_eq!(next.wait(), 8);
    assert_eq!(next.bytes(), b"abcdefgh");
    d.shutdown();
    assert_eq!(op.completions(), 1);
    assert_eq!(
        Arc::strong_count(&op),
        1,
        "the panicking operation was let go"
    );
    close(wr);
    close(rd);
}

#[test]
fn many_submitters_at_once() {
    let d = Arc::new(driver(2));
    let e = harness();
    let fd = temp_file();
    d.associate(fd).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (d, e) = (d.clone(), e.clone());
            std::thread::spawn(move || {
                let ops: Vec<_> = (0..64)
                    .map(|i| {
                        let n = t * 64 + i;
                        let w = TestOp::write(&e, fd, &block_of(n), n as u64 * 4096);
                        d.submit(w.clone(), false);
                        w
                    })
                    .collect();
                ops.iter().map(|w| w.wait()).collect::<Vec<_>>()
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap().iter().all(|&r| r == 4096));
    }
    let reads: Vec<_> = (0..256)
        .map(|n| TestOp::read(&e, fd, 4096, n as u64 * 4096))
        .collect();
    for r in &reads {
        d.submit(r.clone(), false);
    }
    for (n, r) in reads.iter().enumerate() {
        assert_eq!(r.wait(), 4096);
        assert!(r.bytes() == block_of(n), "block {n} reads back as written");
    }
    d.shutdown();
    close(fd);
}

#[test]
fn shutdown_from_a_completion() {
    let d = Arc::new(driver(1));
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let read = TestOp::read(&e, rd, 8, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let on_completion = d.clone();
    *read.then.lock().unwrap() = Some(Box::new(move || {
        // On the completion thread: shuts down without joining itself.
        on_completion.shutdown();
        tx.send(()).unwrap();
    }));
    d.submit(read.clone(), false);
    write_sync(wr, b"shutdown");
    rx.recv_timeout(PATIENCE)
        .expect("the shutdown at completion returned");
    assert_eq!(read.wait(), 8);
    let late = TestOp::read(&e, rd, 8, 0);
    d.submit(late.clone(), false);
    assert_eq!(
        late.wait(),
        REFUSED_AT_SHUTDOWN,
        "refused once shutdown began"
    );
    // Joins the completion thread, which ended on its own.
    d.shutdown();
    close(wr);
    close(rd);
}

#[test]
fn too_many_outstanding_waits_and_retries() {
    let counters = Arc::new(Counters::default());
    let d = IocpDriver::start(1, 1, counters.clone()).expect("a completion port");
    let e = harness();
    let (rd, wr) = pipe();
    d.associate(rd).unwrap();
    let fd = temp_file();
    d.associate(fd).unwrap();
    // Something in flight to wait for: a pipe read nobody feeds yet.
    let read = TestOp::read(&e, rd, 4, 0);
    d.submit(read.clone(), false);
    super::op::tests_busy::set(fd, 3);
    let w = TestOp::write(&e, fd, &block_of(5), 0);
    d.submit(w.clone(), false);
    assert_eq!(w.wait(), 4096, "refused three times, then done on the port");
    assert_eq!(counters.iocp_busy_retries.load(Ordering::Relaxed), 3);
    assert_eq!(counters.pool_submitted.load(Ordering::Relaxed), 0);
    // Alone in flight, a refused call goes to the pool instead of waiting.
    write_sync(wr, b"done");
    assert_eq!(read.wait(), 4);
    // The read's waiter is woken before its completion retires: wait
    // until nothing is counted in flight.
    let t0 = Instant::now();
    while d.inner.lock().in_flight() > 0 {
        assert!(t0.elapsed() < PATIENCE, "the read never retired");
        std::thread::yield_now();
    }
    super::op::tests_busy::set(fd, 1);
    let alone = TestOp::write(&e, fd, &block_of(6), 4096);
    d.submit(alone.clone(), false);
    assert_eq!(alone.wait(), 4096, "the pool performed it");
    assert_eq!(counters.iocp_busy_retries.load(Ordering::Relaxed), 4);
    assert_eq!(counters.pool_submitted.load(Ordering::Relaxed), 1);
    let back = TestOp::read(&e, fd, 8192, 0);
    d.submit(back.clone(), false);
    assert_eq!(back.wait(), 8192);
    assert!(back.bytes()[..4096] == block_of(5)[..] && back.bytes()[4096..] == block_of(6)[..]);
    d.shutdown();
    assert_eq!(
        Arc::strong_count(&w) + Arc::strong_count(&alone),
        2,
        "all let go"
    );
    close(wr);
    close(rd);
    close(fd);
}
