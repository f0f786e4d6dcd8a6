//! Shared helpers for the integration tests: the per-driver macro, test
//! files under `CARGO_TARGET_TMPDIR`, patterned data, a buffer that counts
//! itself, and child processes for tests that need a process of their own.
#![allow(dead_code, unused_macros)]

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};

use overlap::{DriverChoice, Engine, EngineBuilder, Error, IoBuf, IoBufMut, OpenOptions};

/// Generates, for each scenario `fn name(d: Driver)`, the tests
/// `uring::name` and `pool::name`. The uring variant skips loudly when the
/// kernel does not allow io_uring.
macro_rules! per_driver {
    ($($name:ident),+ $(,)?) => {
        mod uring {
            $(
                #[test]
                fn $name() {
                    if let Some(d) = crate::common::Driver::uring() {
                        super::$name(d);
                    }
                }
            )+
        }
        mod pool {
            $(
                #[test]
                fn $name() {
                    super::$name(crate::common::Driver::pool());
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

    pub fn pool() -> Driver {
        Driver {
            choice: DriverChoice::Pool,
        }
    }

    pub fn is_uring(&self) -> bool {
        self.choice == DriverChoice::Uring
    }

    /// A builder forced to this driver (an explicit choice overrides
    /// `OVERLAP_DRIVER`).
    pub fn builder(&self) -> EngineBuilder {
        Engine::builder().driver(self.choice)
    }

    pub fn engine(&self) -> Engine {
        let e = self.builder().build().expect("engine builds");
        assert_eq!(
            e.driver().kind.as_str(),
            if self.is_uring() { "uring" } else { "pool" }
        );
        e
    }
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
pub fn open_direct(engine: &Engine, path: impl AsRef<Path>) -> overlap::File {
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
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).expect("std open");
    let mut v = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = f
            .read_at(&mut v[done..], offset + done as u64)
            .expect("pread");
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

/// A window `[shift, shift + len)` of an [`overlap::AlignedBuf`]: a buffer
/// whose address is deliberately off the allocation's alignment.
pub struct Shifted {
    pub inner: overlap::AlignedBuf,
    pub shift: usize,
    pub len: usize,
}

impl Shifted {
    pub fn new(len: usize, align: usize, shift: usize) -> Shifted {
        let inner = overlap::AlignedBuf::new(len + shift, align).expect("aligned buf");
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
        eprintln!("SKIPPED: {name} is a helper that its parent test runs in a child process");
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
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        name,
        "--nocapture",
        "--include-ignored",
        "--test-threads=1",
    ])
    .env(CHILD_MARKER, name);
    for k in remove {
        cmd.env_remove(k);
    }
    for (k, v) in set {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
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

/// The process umask, from /proc (reading it with umask(2) would race with
/// other threads creating files).
pub fn umask() -> u32 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0o022)
}

/// `fcntl(F_GETFL)` of a descriptor.
pub fn fd_flags(fd: i32) -> i32 {
    // SAFETY: F_GETFL reads the descriptor's status flags; no memory involved.
    let r = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert!(r >= 0, "fcntl(F_GETFL) failed");
    r
}
