//! What the integration tests share: the per-driver macro, test
//! files under `CARGO_TARGET_TMPDIR`, patterned data, a buffer that counts
//! itself, a buffer that is never freed (to see writes after its drop), user
//! code that panics off its thread, child processes for tests that need a
//! process of their own, deadlines, and descriptors open on a file.
#![allow(dead_code, unused_macros)]

use std::any::Any;
use std::future::Future;
use std::io::Read;
use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Wake};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use overlapped::{DriverChoice, Engine, EngineBuilder, Error, IoBuf, IoBufMut, OpenOptions};

/// Generates, for each scenario `fn name(d: Driver)`, the tests
/// `uring::name`, `aio::name` (Linux AIO for direct I/O, the pool for the
/// rest) and `pool::name`. The uring and aio variants skip loudly when the
/// kernel (or a seccomp filter) does not allow them. On Windows they are
/// `iocp::name` and `pool::name`, each bounded in time: a scenario still
/// running after [`SCENARIO_LIMIT`] fails (hung). A name may carry
/// attributes (`#[cfg(target_os = "linux")] name`): its tests get them.
macro_rules! per_driver {
    ($($(#[$m:meta])* $name:ident),+ $(,)?) => {
        #[cfg(target_os = "linux")]
        mod uring {
            $(
                $(#[$m])*
                #[test]
                fn $name() {
                    if let Some(d) = crate::common::Driver::uring() {
                        super::$name(d);
                    }
                }
            )+
        }
        #[cfg(target_os = "linux")]
        mod aio {
            $(
                $(#[$m])*
                #[test]
                fn $name() {
                    if let Some(d) = crate::common::Driver::aio() {
                        super::$name(d);
                    }
                }
            )+
        }
        #[cfg(windows)]
        mod iocp {
            $(
                $(#[$m])*
                #[test]
                fn $name() {
                    crate::common::bounded(stringify!($name), move || {
                        super::$name(crate::common::Driver::iocp())
                    });
                }
            )+
        }
        mod pool {
            $(
                $(#[$m])*
                #[test]
                fn $name() {
                    #[cfg(not(windows))]
                    super::$name(crate::common::Driver::pool());
                    #[cfg(windows)]
                    crate::common::bounded(stringify!($name), move || {
                        super::$name(crate::common::Driver::pool())
                    });
                }
            )+
        }
    };
}

/// The driver a scenario runs on.
#[derive(Debug, Clone, Copy)]
pub struct Driver {
    pub choice: DriverChoice,
}

impl Driver {
    /// The io_uring driver, or `None` (after printing a SKIPPED line) when
    /// the kernel does not allow it.
    pub fn uring() -> Option<Driver> {
        match uring_unavailable() {
            Some(reason) => {
                eprintln!("SKIPPED: io_uring unavailable: {reason}");
                None
            }
            None => Some(Driver {
                choice: DriverChoice::Uring,
            }),
        }
    }

    /// Windows' I/O completion ports.
    #[cfg(windows)]
    pub fn iocp() -> Driver {
        Driver {
            choice: DriverChoice::Iocp,
        }
    }

    pub fn pool() -> Driver {
        Driver {
            choice: DriverChoice::Pool,
        }
    }

    /// Linux AIO beside the pool, or `None` (after printing a SKIPPED
    /// line) when `io_setup` fails here.
    pub fn aio() -> Option<Driver> {
        match aio_unavailable() {
            Some(reason) => {
                eprintln!("SKIPPED: Linux AIO unavailable: {reason}");
                None
            }
            None => Some(Driver {
                choice: DriverChoice::Aio,
            }),
        }
    }

    pub fn is_uring(&self) -> bool {
        self.choice == DriverChoice::Uring
    }

    pub fn is_aio(&self) -> bool {
        self.choice == DriverChoice::Aio
    }

    /// Windows' I/O completion ports (never on Linux).
    pub fn is_iocp(&self) -> bool {
        #[cfg(windows)]
        return self.choice == DriverChoice::Iocp;
        #[cfg(not(windows))]
        false
    }

    /// The name `Engine::driver().kind` reports for this driver.
    pub fn name(&self) -> &'static str {
        match self.choice {
            DriverChoice::Uring => "uring",
            DriverChoice::Aio => "aio+pool",
            #[cfg(windows)]
            DriverChoice::Iocp => "iocp",
            _ => "pool",
        }
    }

    /// A builder forced to this driver (an explicit choice overrides
    /// `OVERLAP_DRIVER`).
    pub fn builder(&self) -> EngineBuilder {
        Engine::builder().driver(self.choice)
    }

    pub fn engine(&self) -> Engine {
        let e = self.builder().build().expect("engine builds");
        assert_eq!(e.driver().kind.as_str(), self.name());
        e
    }
}

/// Why Linux AIO cannot be used here, probed once per test binary.
pub fn aio_unavailable() -> Option<String> {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            match Engine::builder()
                .driver(DriverChoice::Aio)
                .ignore_env()
                .build()
            {
                Ok(_) => None,
                Err(e @ Error::AioUnavailable { .. }) => Some(e.to_string()),
                Err(e) => panic!("unexpected error probing Linux AIO: {e}"),
            }
        })
        .clone()
}

/// Why io_uring cannot be used here, probed once per test binary.
pub fn uring_unavailable() -> Option<String> {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            match Engine::builder()
                .driver(DriverChoice::Uring)
                .ignore_env()
                .build()
            {
                Ok(_) => None,
                Err(e @ Error::UringUnavailable { .. }) => Some(e.to_string()),
                Err(e) => panic!("unexpected error probing io_uring: {e}"),
            }
        })
        .clone()
}

/// A fresh directory under the test target's tmp dir (a real disk, not tmpfs).
/// Opens (creating) `path` for reading and writing with O_DIRECT.
pub fn open_direct(engine: &Engine, path: impl AsRef<Path>) -> overlapped::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .direct(true)
        .open(engine, path)
        .wait()
        .unwrap()
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

/// Serialises the heavy tests of one test binary (disk and memory hungry).
pub fn heavy() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------- patterns

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(seed: u64, w: u64) -> u64 {
    mix(seed.wrapping_mul(0x100_0000_01B3) ^ w)
}

/// The byte that file position `pos` holds in pattern `seed`. Every position
/// has its own value, so a block at the wrong offset does not match.
pub fn pattern_byte(seed: u64, pos: u64) -> u8 {
    (word(seed, pos >> 3) >> ((pos & 7) * 8)) as u8
}

/// Fills `buf` with pattern `seed` as it would sit at file offset `offset`.
pub fn fill_pattern(buf: &mut [u8], seed: u64, offset: u64) {
    let mut i = 0usize;
    let mut p = offset;
    while i < buf.len() {
        let bytes = word(seed, p >> 3).to_le_bytes();
        let start = (p & 7) as usize;
        let n = (8 - start).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&bytes[start..start + n]);
        i += n;
        p += n as u64;
    }
}

/// `len` bytes of pattern `seed` at file offset `offset`.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_pattern(&mut v, seed, offset);
    v
}

/// Asserts that `buf` holds pattern `seed` as at file offset `offset`,
/// naming the first differing position.
#[track_caller]
pub fn assert_pattern(buf: &[u8], seed: u64, offset: u64) {
    let want = pattern(seed, offset, buf.len());
    if buf != &want[..] {
        let i = buf.iter().zip(&want).position(|(a, b)| a != b).unwrap();
        panic!(
            "data mismatch at file offset {} (buffer index {i} of {}): got {:#04x}, want {:#04x}",
            offset + i as u64,
            buf.len(),
            buf[i],
            want[i]
        );
    }
}

/// Reads `len` bytes at `offset` with std (independent of the engine).
pub fn std_read(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    #[cfg(unix)]
    use std::os::unix::fs::FileExt;
    #[cfg(windows)]
    use std::os::windows::fs::FileExt;
    let f = std::fs::File::open(path).expect("std open");
    let mut v = vec![0u8; len];
    let mut done = 0;
    while done < len {
        #[cfg(unix)]
        let n = f.read_at(&mut v[done..], offset + done as u64);
        #[cfg(windows)]
        let n = f.seek_read(&mut v[done..], offset + done as u64);
        let n = n.expect("pread");
        if n == 0 {
            break;
        }
        done += n;
    }
    v.truncate(done);
    v
}

pub fn std_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("std metadata").len()
}

/// Writes pattern `seed` over `len` bytes of a new file with std.
pub fn std_create_pattern(path: &Path, seed: u64, len: usize) {
    std::fs::write(path, pattern(seed, 0, len)).expect("std write");
}

// ------------------------------------------------------------ buffers

/// Live-buffer accounting for [`CountingBuf`].
#[derive(Debug, Default)]
pub struct Live {
    pub bufs: AtomicIsize,
    pub bytes: AtomicIsize,
}

impl Live {
    pub fn bufs(&self) -> isize {
        self.bufs.load(Ordering::SeqCst)
    }
    pub fn bytes(&self) -> isize {
        self.bytes.load(Ordering::SeqCst)
    }
}

/// A heap buffer that counts itself in a [`Live`] while it exists.
#[derive(Debug)]
pub struct CountingBuf {
    data: Vec<u8>,
    live: Arc<Live>,
}

impl CountingBuf {
    pub fn new(live: &Arc<Live>, data: Vec<u8>) -> CountingBuf {
        live.bufs.fetch_add(1, Ordering::SeqCst);
        live.bytes.fetch_add(data.len() as isize, Ordering::SeqCst);
        CountingBuf {
            data,
            live: live.clone(),
        }
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for CountingBuf {
    fn drop(&mut self) {
        // Poison the memory first: a kernel write after this would be a bug
        // the pattern checks could notice in a reused allocation.
        self.data.fill(0xDB);
        self.live.bufs.fetch_sub(1, Ordering::SeqCst);
        self.live
            .bytes
            .fetch_sub(self.data.len() as isize, Ordering::SeqCst);
    }
}

// SAFETY: the bytes live in the Vec's heap allocation, which does not move
// when the CountingBuf moves and is never resized while the buffer exists.
unsafe impl IoBuf for CountingBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.data.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.data.len()
    }
}
// SAFETY: as above; any byte is a valid u8.
unsafe impl IoBufMut for CountingBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.data.as_mut_ptr()
    }
}

/// Byte that a dropped [`KeptBuf`] is filled with.
pub const KEPT_POISON: u8 = 0xDB;

/// Where dropped [`KeptBuf`]s go.
pub type Yard = Arc<Mutex<Vec<overlapped::AlignedBuf>>>;

/// A buffer that, when dropped, is poisoned and kept in its [`Yard`]
/// instead of being freed: a kernel write after the drop (a use after free)
/// then shows as changed bytes, deterministically, instead of as heap
/// corruption somewhere else later.
pub struct KeptBuf {
    buf: Option<overlapped::AlignedBuf>,
    yard: Yard,
}

impl KeptBuf {
    pub fn new(buf: overlapped::AlignedBuf, yard: &Yard) -> KeptBuf {
        KeptBuf {
            buf: Some(buf),
            yard: yard.clone(),
        }
    }
    fn inner(&self) -> &overlapped::AlignedBuf {
        self.buf.as_ref().expect("present until dropped")
    }
}

impl Drop for KeptBuf {
    fn drop(&mut self) {
        if let Some(mut b) = self.buf.take() {
            b.fill(KEPT_POISON);
            self.yard.lock().unwrap_or_else(|p| p.into_inner()).push(b);
        }
    }
}

/// How many of the yard's buffers were written after they were dropped.
pub fn written_after_drop(yard: &Yard) -> usize {
    let yard = yard.lock().unwrap_or_else(|p| p.into_inner());
    yard.iter()
        .filter(|b| b.iter().any(|&x| x != KEPT_POISON))
        .count()
}

// SAFETY: the bytes live in the AlignedBuf's heap allocation, which does not
// move with the value and is never freed (the yard keeps it).
unsafe impl IoBuf for KeptBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.inner().as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.inner().len()
    }
}
// SAFETY: as above; any byte is a valid u8.
unsafe impl IoBufMut for KeptBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.buf
            .as_mut()
            .expect("present until dropped")
            .as_mut_ptr()
    }
}

/// A window `[shift, shift + len)` of an [`overlapped::AlignedBuf`]: a buffer
/// whose address is deliberately off the allocation's alignment.
pub struct Shifted {
    pub inner: overlapped::AlignedBuf,
    pub shift: usize,
    pub len: usize,
}

impl Shifted {
    pub fn new(len: usize, align: usize, shift: usize) -> Shifted {
        let inner = overlapped::AlignedBuf::new(len + shift, align).expect("aligned buf");
        Shifted { inner, shift, len }
    }
    pub fn bytes(&self) -> &[u8] {
        &self.inner[self.shift..self.shift + self.len]
    }
}

// SAFETY: points into the AlignedBuf's heap allocation, which holds at least
// shift + len initialised bytes and does not move with the value.
unsafe impl IoBuf for Shifted {
    fn stable_ptr(&self) -> *const u8 {
        self.inner.as_ptr().wrapping_add(self.shift)
    }
    fn bytes_len(&self) -> usize {
        self.len
    }
}
// SAFETY: as above; any byte is a valid u8.
unsafe impl IoBufMut for Shifted {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.inner.as_mut_ptr().wrapping_add(self.shift)
    }
}

// ------------------------------------------------ user code that panics

/// Records that user code ran, and whether it ran (and panicked) on another
/// thread than the one that armed it: a driver thread, say.
#[derive(Debug, Default)]
pub struct Tripwire {
    fired: AtomicBool,
    ran: AtomicBool,
}

impl Tripwire {
    /// Whether the user code ran, on any thread.
    pub fn ran(&self) -> bool {
        self.ran.load(Ordering::SeqCst)
    }
    /// Whether it ran (and panicked) off its owner's thread.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
    fn trip(&self, owner: ThreadId, what: &str) {
        let here = std::thread::current();
        if here.id() != owner {
            self.fired.store(true, Ordering::SeqCst);
        }
        self.ran.store(true, Ordering::SeqCst);
        if here.id() != owner && !std::thread::panicking() {
            panic!("deliberate panic in user code: {what} on {:?}", here.name());
        }
    }
}

/// A write buffer whose `Drop` panics when it runs off the thread that made
/// it (quietly records it otherwise).
pub struct PanicOnDrop {
    buf: overlapped::AlignedBuf,
    owner: ThreadId,
    wire: Arc<Tripwire>,
}

impl PanicOnDrop {
    pub fn new(buf: overlapped::AlignedBuf, wire: &Arc<Tripwire>) -> PanicOnDrop {
        PanicOnDrop {
            buf,
            owner: std::thread::current().id(),
            wire: wire.clone(),
        }
    }
}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        self.wire.trip(self.owner, "a buffer's Drop");
    }
}

// SAFETY: the bytes live in the AlignedBuf's heap allocation, which does not
// move with the value.
unsafe impl IoBuf for PanicOnDrop {
    fn stable_ptr(&self) -> *const u8 {
        self.buf.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.buf.len()
    }
}

/// A waker that panics when woken off the thread that made it.
pub struct PanicWaker {
    owner: ThreadId,
    wire: Arc<Tripwire>,
}

impl PanicWaker {
    pub fn new(wire: &Arc<Tripwire>) -> PanicWaker {
        PanicWaker {
            owner: std::thread::current().id(),
            wire: wire.clone(),
        }
    }
}

impl Wake for PanicWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wire.trip(self.owner, "Waker::wake");
    }
}

// ------------------------------------------------------------ polling

/// Polls `fut` once with a waker that does nothing.
pub fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    Pin::new(fut).poll(&mut cx)
}

/// The stage an `Op` reports through `Debug` ("in flight", ...).
pub fn stage<T: std::fmt::Debug>(op: &T) -> String {
    format!("{op:?}")
}

// ------------------------------------------------------------ children

/// Environment variable that marks a child process started by a parent test.
pub const CHILD_MARKER: &str = "OVERLAP_TEST_CHILD";

/// In a child test: true when this process was started for `name`. When not,
/// prints why it does nothing (the test only makes sense in a child).
pub fn is_child(name: &str) -> bool {
    if std::env::var(CHILD_MARKER).as_deref() == Ok(name) {
        true
    } else {
        eprintln!("SKIPPED: {name} runs only as the child process of its parent test");
        false
    }
}

/// Marks a child test's success on stdout, for the parent to see.
pub fn child_ok(name: &str) {
    println!("CHILD-OK {name}");
}

/// Runs the test `name` of this test binary in a child process with the
/// given environment changes, and asserts that it ran and passed.
pub fn run_child(name: &str, set: &[(&str, &str)], remove: &[&str]) -> Output {
    run_child_within(name, set, remove, Duration::from_secs(600))
}

/// As [`run_child`], killing the child (and failing) if it has not finished
/// within `limit`: a hung child is a failure, never a hung test.
pub fn run_child_within(
    name: &str,
    set: &[(&str, &str)],
    remove: &[&str],
    limit: Duration,
) -> Output {
    let exe = std::env::current_exe().expect("current_exe");
    let full = full_test_name(&exe, name);
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        &full,
        "--nocapture",
        "--include-ignored",
        "--test-threads=1",
    ])
    .env(CHILD_MARKER, name)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for k in remove {
        cmd.env_remove(k);
    }
    for (k, v) in set {
        cmd.env(k, v);
    }
    let mut child = retry_spawn(|| cmd.spawn()).expect("spawn child test process");
    // Drain both pipes on threads of their own, so a chatty child never
    // blocks on a full pipe while we wait for it.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out_reader = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let err_reader = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + limit;
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break (status, false);
        }
        if Instant::now() >= deadline {
            let _ = child.kill(); // our own child, by its pid
            break (child.wait().expect("reap the killed child"), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !timed_out,
        "child test {name} (env {set:?}) was still running after {limit:?} and was killed (hung)\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD-OK {name}")),
        "child test {name} (env {set:?}) failed: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // Pass the child's own SKIPPED lines on, so a skip is never silent.
    for line in stderr
        .lines()
        .filter(|l| l.contains("SKIPPED") || l.starts_with("child:"))
    {
        eprintln!("{line} (in child {name})");
    }
    out
}

/// Starts a process with `start`. On Windows, a failure is tried again a
/// few times, said on stderr: Wine at times fails to create a process
/// under load (ERROR_INTERNAL_ERROR) where a second try succeeds.
fn retry_spawn<T>(mut start: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    #[cfg(windows)]
    for attempt in 1..3 {
        match start() {
            Ok(v) => return Ok(v),
            Err(e) => {
                eprintln!("starting a child process failed ({e}), attempt {attempt}: trying again");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    start()
}

/// The full name of the test `name` of the test binary `exe`: `name` in a
/// binary of one file, `module::name` in one of modules (tests/tests.rs).
fn full_test_name(exe: &Path, name: &str) -> String {
    let mut list = Command::new(exe);
    list.arg("--list").stdin(Stdio::null());
    let out = retry_spawn(|| list.output()).expect("list the tests of this binary");
    let listed = String::from_utf8_lossy(&out.stdout);
    let suffix = format!("::{name}");
    let found: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|t| *t == name || t.ends_with(&suffix))
        .collect();
    assert_eq!(found.len(), 1, "child test {name}: found {found:?}");
    found[0].to_string()
}

// ------------------------------------------------------------ deadlines

/// Work running on a thread of its own, awaited with a deadline.
pub struct Watched<T> {
    rx: mpsc::Receiver<T>,
    handle: JoinHandle<()>,
}

/// Starts `f` on a thread of its own; [`Watched::wait`] gives its result or
/// says that it hung or panicked.
pub fn watch<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Watched<T> {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("watched".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn a watched thread");
    Watched { rx, handle }
}

impl<T> Watched<T> {
    /// The result, or why there is none by `deadline`. A thread still
    /// running then is left behind: it is hung, and the caller fails.
    pub fn wait(self, deadline: Instant) -> Result<T, String> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(v) => {
                let _ = self.handle.join();
                Ok(v)
            }
            Err(RecvTimeoutError::Timeout) => Err("did not finish in time (hung)".into()),
            Err(RecvTimeoutError::Disconnected) => Err(match self.handle.join() {
                Err(p) => format!("panicked: {}", panic_message(&*p)),
                Ok(()) => "ended without a result".into(),
            }),
        }
    }
}

/// Runs `f` on a thread of its own and waits at most `limit` for it.
pub fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    watch(f)
        .wait(Instant::now() + limit)
        .map_err(|e| format!("{e} (limit {limit:?})"))
}

/// Polls `cond` every 2 ms until it holds or `limit` has passed; returns
/// whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How long one scenario of `per_driver!` may run on Windows.
#[cfg(windows)]
pub const SCENARIO_LIMIT: Duration = Duration::from_secs(180);

/// Runs scenario `name` on a thread of its own and fails if it panics or
/// has not finished within [`SCENARIO_LIMIT`] (a hang is a failure, never
/// a hung test binary).
#[cfg(windows)]
pub fn bounded(name: &str, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = within(SCENARIO_LIMIT, f) {
        panic!("{name}: {e}");
    }
}

/// The message of a panic payload.
pub fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(not a string)".into()
    }
}

// ------------------------------------------------------------ descriptors

#[cfg(unix)]
/// This process's descriptors open on the file at `path` (same device and
/// inode), from /proc/self/fd. Unlike a count of all descriptors, or a test
/// of one descriptor number, this cannot be fooled by other threads (other
/// tests) opening and closing descriptors at the same time.
pub fn fds_open_on(path: &Path) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let want = std::fs::metadata(path).expect("stat the file");
    let mut fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| {
            let e = e.ok()?;
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            // stat follows the link to the open file; a descriptor closed
            // meanwhile simply fails.
            let m = std::fs::metadata(e.path()).ok()?;
            (m.dev() == want.dev() && m.ino() == want.ino()).then_some(fd)
        })
        .collect();
    fds.sort_unstable();
    fds
}

#[cfg(unix)]
/// The process umask, from /proc (reading it with umask(2) would race with
/// other threads creating files).
pub fn umask() -> u32 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0o022)
}

#[cfg(unix)]
/// Creates a FIFO (named pipe) at `path`.
pub fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in path");
    // SAFETY: c is a valid NUL-terminated path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(
        r,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

#[cfg(unix)]
/// `fcntl(F_GETFL)` of a descriptor.
pub fn fd_flags(fd: i32) -> i32 {
    // SAFETY: F_GETFL reads the descriptor's status flags; no memory involved.
    let r = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert!(r >= 0, "fcntl(F_GETFL) failed");
    r
}

#[cfg(unix)]
/// Waits for our child `pid` (a `fork` of this test) to end; kills it and
/// says so if it has not within `limit`. The raw wait status otherwise.
pub fn wait_pid_within(pid: libc::pid_t, limit: Duration) -> Result<i32, String> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child; writes one int.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Ok(status);
        }
        if start.elapsed() > limit {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: reaps our own (killed) child; writes one int.
            let _ = unsafe { libc::waitpid(pid, &mut status, 0) };
            return Err(format!(
                "the child was still running after {limit:?} (hung)"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(windows)]
/// What the system says of an open handle: the access it was granted
/// (`FILE_READ_DATA`, `FILE_WRITE_DATA`, `FILE_APPEND_DATA`, ...), its
/// mode (`FILE_NO_INTERMEDIATE_BUFFERING`, `FILE_WRITE_THROUGH`, the
/// synchronous-I/O bits) and whether a child process inherits it: the
/// counterparts of `fcntl(F_GETFL)` and `FD_CLOEXEC`.
#[derive(Debug, Clone, Copy)]
pub struct HandleInfo {
    pub access: u32,
    pub mode: u32,
    pub inherit: bool,
}

#[cfg(windows)]
pub mod win {
    //! Bits of `HandleInfo` (ntifs.h, winnt.h).
    pub const FILE_READ_DATA: u32 = 0x1;
    pub const FILE_WRITE_DATA: u32 = 0x2;
    pub const FILE_APPEND_DATA: u32 = 0x4;
    pub const FILE_WRITE_THROUGH: u32 = 0x2;
    pub const FILE_SEQUENTIAL_ONLY: u32 = 0x4;
    pub const FILE_NO_INTERMEDIATE_BUFFERING: u32 = 0x8;
    pub const FILE_SYNCHRONOUS_IO: u32 = 0x10 | 0x20;
    pub const FILE_RANDOM_ACCESS: u32 = 0x800;
}

#[cfg(windows)]
/// [`HandleInfo`] of the engine's descriptor `fd` (`NtQueryInformationFile`
/// and `GetHandleInformation`).
pub fn handle_info(fd: i32) -> HandleInfo {
    use windows_sys::Wdk::Storage::FileSystem::{
        FileAccessInformation, FileModeInformation, NtQueryInformationFile,
        FILE_ACCESS_INFORMATION, FILE_MODE_INFORMATION,
    };
    use windows_sys::Win32::Foundation::{GetHandleInformation, HANDLE, HANDLE_FLAG_INHERIT};
    use windows_sys::Win32::System::IO::IO_STATUS_BLOCK;
    let h = fd as isize as HANDLE;
    fn query<T>(h: HANDLE, class: i32, info: &mut T) {
        // SAFETY: IO_STATUS_BLOCK is plain old data; all-zero is valid.
        let mut iosb: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is the writable structure `class` names, of its size.
        let status = unsafe {
            NtQueryInformationFile(
                h,
                &mut iosb,
                (info as *mut T).cast(),
                std::mem::size_of::<T>() as u32,
                class,
            )
        };
        assert!(status >= 0, "NtQueryInformationFile({class}): {status:#x}");
    }
    let mut access = FILE_ACCESS_INFORMATION { AccessFlags: 0 };
    query(h, FileAccessInformation, &mut access);
    let mut mode = FILE_MODE_INFORMATION { Mode: 0 };
    query(h, FileModeInformation, &mut mode);
    let mut flags = 0u32;
    // SAFETY: reads the handle's flags into a local.
    let ok = unsafe { GetHandleInformation(h, &mut flags) };
    assert_ne!(
        ok,
        0,
        "GetHandleInformation: {}",
        std::io::Error::last_os_error()
    );
    HandleInfo {
        access: access.AccessFlags,
        mode: mode.Mode,
        inherit: flags & HANDLE_FLAG_INHERIT != 0,
    }
}

#[cfg(windows)]
/// A new named pipe, inbound, opened for overlapped I/O and adopted by
/// `engine` as its reading end (`File::from_handle`), and its name, for a
/// writer to open (with std, or through an engine). Byte mode: a read
/// returns what is there, and waits while nothing is.
pub fn named_pipe(engine: &Engine) -> (overlapped::File, String) {
    use std::os::windows::io::{FromRawHandle, OwnedHandle};
    use std::sync::atomic::AtomicU64;
    use windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE;
    use windows_sys::Win32::System::Pipes::CreateNamedPipeW;
    const PIPE_ACCESS_INBOUND: u32 = 0x1;
    const FILE_FLAG_OVERLAPPED: u32 = 0x4000_0000;
    /// PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT.
    const BYTE_MODE: u32 = 0;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        r"\\.\pipe\overlap-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let wide: Vec<u16> = name.encode_utf16().chain([0]).collect();
    // SAFETY: `wide` is NUL-terminated; no security attributes.
    let h = unsafe {
        CreateNamedPipeW(
            wide.as_ptr(),
            PIPE_ACCESS_INBOUND | FILE_FLAG_OVERLAPPED,
            BYTE_MODE,
            1,
            4096,
            4096,
            0,
            std::ptr::null(),
        )
    };
    assert_ne!(
        h,
        INVALID_HANDLE_VALUE,
        "CreateNamedPipeW: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a new handle, owned here alone.
    let h = unsafe { OwnedHandle::from_raw_handle(h) };
    let file = overlapped::File::from_handle(engine, h).expect("adopt the pipe's handle");
    (file, name)
}

// ------------------------------------------------------------ appends

/// The line thread `t` appends as its `i`th, of a length of its own so that
/// a torn or overlapping write shows.
pub fn append_line(t: usize, i: usize) -> String {
    format!(
        "thread {t} line {i:03} {}\n",
        "y".repeat(30 + (t * 11 + i) % 60)
    )
}

/// Whether this system's own appends lose data: 4 threads, each with a
/// std file of its own opened with `append(true)`, write 500 lines each,
/// up to three times over. Never on Linux (O_APPEND is atomic); Windows'
/// `FILE_APPEND_DATA` writes are atomic too, but Wine's are not (std's
/// appenders lose lines there): said loudly.
pub fn appends_are_not_atomic_here(dir: &std::path::Path) -> bool {
    if cfg!(target_os = "linux") {
        return false;
    }
    let want: usize = (0..4)
        .flat_map(|t| (0..500).map(move |i| append_line(t, i).len()))
        .sum();
    for round in 0..3 {
        let path = dir.join(format!("std-log-{round}"));
        let got = std_appenders(&path);
        let whole = got
            .split_inclusive('\n')
            .filter(|l| l.starts_with("thread ") && l.ends_with("y\n"))
            .count();
        if whole != 2000 || got.len() != want {
            eprintln!(
                "SKIPPED: appends are not atomic on this system: std's own 4 appenders kept \
                 {whole} of 2000 lines whole, {} of {want} bytes",
                got.len()
            );
            return true;
        }
    }
    false
}

/// What 4 std appenders of 500 lines each leave in the new file `path`.
fn std_appenders(path: &std::path::Path) -> String {
    use std::io::Write;
    std::fs::write(path, b"").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = path.to_path_buf();
            watch(move || {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .unwrap();
                for i in 0..500 {
                    f.write_all(append_line(t, i).as_bytes()).unwrap();
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for t in threads {
        t.wait(deadline).unwrap();
    }
    std::fs::read_to_string(path).unwrap()
}

#[cfg(windows)]
/// Reads up to `len` bytes at `offset` from the handle `h`, opened for
/// overlapped I/O and perhaps associated with a completion port: the
/// event's low bit is set, so that no packet goes to the port. What the
/// engine's own blocking reads do, written here independently of it.
pub fn overlapped_read(
    h: std::os::windows::io::RawHandle,
    len: usize,
    offset: u64,
) -> std::io::Result<Vec<u8>> {
    use windows_sys::Win32::Foundation::{CloseHandle, GetLastError, ERROR_IO_PENDING, HANDLE};
    use windows_sys::Win32::Storage::FileSystem::ReadFile;
    use windows_sys::Win32::System::Threading::CreateEventW;
    use windows_sys::Win32::System::IO::{GetOverlappedResult, OVERLAPPED};
    let h = h as HANDLE;
    let mut buf = vec![0u8; len];
    // SAFETY: a new unnamed manual-reset event, not signalled.
    let event = unsafe { CreateEventW(std::ptr::null(), 1, 0, std::ptr::null()) };
    if event.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: OVERLAPPED is plain old data; all-zero is valid.
    let mut ov: OVERLAPPED = unsafe { std::mem::zeroed() };
    ov.Anonymous.Anonymous.Offset = offset as u32;
    ov.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    ov.hEvent = (event as usize | 1) as HANDLE;
    let mut n = 0u32;
    // SAFETY: `buf` and `ov` outlive the read: GetOverlappedResult waits
    // for it to complete before either goes.
    let res = unsafe {
        let started = ReadFile(
            h,
            buf.as_mut_ptr(),
            len as u32,
            std::ptr::null_mut(),
            &mut ov,
        );
        if started == 0 && GetLastError() != ERROR_IO_PENDING {
            Err(std::io::Error::last_os_error())
        } else if GetOverlappedResult(h, &ov, &mut n, 1) == 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: the event is ours and nothing uses it any more.
    unsafe { CloseHandle(event) };
    res?;
    buf.truncate(n as usize);
    Ok(buf)
}

#[cfg(windows)]
/// The handles this process has open (`GetProcessHandleCount`).
pub fn process_handles() -> usize {
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, GetProcessHandleCount};
    let mut n = 0u32;
    // SAFETY: writes one u32 for the current process's pseudo-handle.
    let ok = unsafe { GetProcessHandleCount(GetCurrentProcess(), &mut n) };
    assert_ne!(
        ok,
        0,
        "GetProcessHandleCount: {}",
        std::io::Error::last_os_error()
    );
    n as usize
}

#[cfg(windows)]
/// The threads of this process (a Toolhelp snapshot).
pub fn process_threads() -> usize {
    use windows_sys::Win32::Foundation::{CloseHandle, INVALID_HANDLE_VALUE};
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
    };
    use windows_sys::Win32::System::Threading::GetCurrentProcessId;
    // SAFETY: a snapshot of the system's threads, closed below.
    let snap = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    assert_ne!(snap, INVALID_HANDLE_VALUE, "CreateToolhelp32Snapshot");
    // SAFETY: THREADENTRY32 is plain old data; all-zero is valid.
    let mut e: THREADENTRY32 = unsafe { std::mem::zeroed() };
    e.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
    // SAFETY: reads our own process id.
    let me = unsafe { GetCurrentProcessId() };
    let mut n = 0;
    // SAFETY: `e` is a THREADENTRY32 with its size set; `snap` is open.
    let mut more = unsafe { Thread32First(snap, &mut e) } != 0;
    while more {
        n += usize::from(e.th32OwnerProcessID == me);
        // SAFETY: as above.
        more = unsafe { Thread32Next(snap, &mut e) } != 0;
    }
    // SAFETY: the snapshot is ours.
    unsafe { CloseHandle(snap) };
    n
}
