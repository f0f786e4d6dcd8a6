//! The acknowledged-byte torture suite, the engine's rows (`rust-file`,
//! `rust-port`): `docs/acknowledged-bytes.md`, section 6.
//!
//! Each driver's cells run one after another in a child process of their
//! own (fork needs a process whose threads are known), and print one
//! `torture: FRONT DRIVER SCENARIO outcome` line each; the parent test
//! fails when a cell failed. Every cell has a time limit: a hang fails.

use std::io::Write;
#[cfg(target_os = "linux")]
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use overlapped::{AlignedBuf, Engine, Error, File, OpenOptions, Port};

per_driver!(torture_engine_rows);

const LIMIT: Duration = Duration::from_secs(60);
const BS: usize = 4096;
/// When a pipe read in flight is fed, after the event.
const FEED_AFTER: Duration = Duration::from_millis(150);
/// How long a call that must fail at once may take.
const AT_ONCE: Duration = Duration::from_secs(2);

type Cell = fn(Driver, &Path) -> Result<(), String>;

const SCENARIOS: [(&str, Cell, Cell); 6] = [
    ("drop-behind", file_drop_behind, port_drop_behind),
    ("shared-writers", file_shared_writers, port_shared_writers),
    (
        "close-racing-reads",
        file_close_racing_reads,
        port_close_racing_reads,
    ),
    (
        "shutdown-in-flight",
        file_shutdown_in_flight,
        port_shutdown_in_flight,
    ),
    ("fork-in-flight", file_fork_in_flight, port_fork_in_flight),
    (
        "injected-failure",
        file_injected_failure,
        port_injected_failure,
    ),
];

/// The driver's name in the matrix.
fn matrix_name(d: Driver) -> &'static str {
    match d.name() {
        "aio+pool" => "aio",
        n => n,
    }
}

fn torture_engine_rows(d: Driver) {
    let out = run_child_within(
        "torture_child",
        &[("OVERLAP_TORTURE_DRIVER", matrix_name(d))],
        &[],
        Duration::from_secs(900),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // libtest prints "test NAME ... " before a test's own first line.
    for line in stdout
        .lines()
        .filter_map(|l| l.find("torture: ").map(|i| &l[i..]))
    {
        println!("{line}");
    }
    let failed: Vec<&str> = stdout.lines().filter(|l| l.contains(" FAIL")).collect();
    assert!(failed.is_empty(), "torture cells failed: {failed:#?}");
}

/// The child: every cell of one driver, one after another.
#[test]
fn torture_child() {
    if !is_child("torture_child") {
        return;
    }
    let d = match std::env::var("OVERLAP_TORTURE_DRIVER").as_deref() {
        Ok("uring") => Driver::uring().expect("uring in the child"),
        Ok("aio") => Driver::aio().expect("aio in the child"),
        #[cfg(windows)]
        Ok("iocp") => Driver::iocp(),
        _ => Driver::pool(),
    };
    run_rows(d);
    child_ok("torture_child");
}

fn run_rows(d: Driver) {
    let dir = tempdir();
    for (scenario, file_cell, port_cell) in SCENARIOS {
        for (front, cell) in [("rust-file", file_cell), ("rust-port", port_cell)] {
            let sub = dir.path().join(format!("{front}-{scenario}"));
            std::fs::create_dir_all(&sub).unwrap();
            let res = within(LIMIT, move || {
                std::panic::catch_unwind(|| cell(d, &sub))
                    .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))))
            })
            .and_then(|r| r);
            let outcome = match res {
                Ok(()) => "ok".to_string(),
                Err(why) if why.starts_with("SKIPPED: ") => why,
                Err(why) => format!("FAIL: {why}"),
            };
            println!("torture: {front} {} {scenario} {outcome}", matrix_name(d));
        }
    }
}

// ------------------------------------------------------ shared pieces

/// A direct-I/O file of `blocks` blocks of zeros, open for reading and writing.
fn direct_file(engine: &Engine, path: &Path, blocks: usize) -> File {
    std::fs::write(path, vec![0u8; blocks * BS]).unwrap();
    open_direct(engine, path)
}

/// Block `i` of seed `seed`, aligned for direct I/O.
fn block(seed: u64, i: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(BS, BS).unwrap();
    fill_pattern(&mut b, seed, (i * BS) as u64);
    b
}

/// Checks that every block in `acked` holds its pattern in the file.
fn check_blocks(path: &Path, seed: u64, acked: &[usize]) -> Result<(), String> {
    for &i in acked {
        let got = std_read(path, (i * BS) as u64, BS);
        if got != pattern(seed, (i * BS) as u64, BS) {
            return Err(format!("acknowledged block {i} is not in the file"));
        }
    }
    Ok(())
}

/// A pipe whose read end is an engine `File` and write end a std file.
#[cfg(target_os = "linux")]
fn pipe(engine: &Engine) -> (File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both descriptors were just made and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (File::from_fd(engine, r), std::fs::File::from(w))
}

/// Windows: a named pipe, read through the engine, written with std.
#[cfg(windows)]
fn pipe(engine: &Engine) -> (File, std::fs::File) {
    let (r, name) = named_pipe(engine);
    let w = std::fs::OpenOptions::new().write(true).open(name).unwrap();
    (r, w)
}

/// Writes `data` to `w` after [`FEED_AFTER`], from a thread of its own.
fn feed_later(mut w: std::fs::File, data: Vec<u8>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(FEED_AFTER);
        w.write_all(&data).unwrap();
    })
}

/// The engine's operations and bytes in flight reach zero in time.
fn settles(engine: &Engine) -> Result<(), String> {
    if wait_until(LIMIT, || engine.in_flight() == (0, 0)) {
        Ok(())
    } else {
        Err(format!("still in flight: {:?}", engine.in_flight()))
    }
}

/// `f` fails with `want` (by its `Debug` name) within [`AT_ONCE`].
fn fails_at_once<T: std::fmt::Debug + Send + 'static>(
    what: &str,
    want: fn(&Error) -> bool,
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<(), String> {
    let started = Instant::now();
    match within(AT_ONCE, f)? {
        Err(e) if want(&e) => Ok(()),
        other => Err(format!("{what}: {other:?} after {:?}", started.elapsed())),
    }
}

fn is_shutdown(e: &Error) -> bool {
    matches!(e, Error::Shutdown)
}

#[cfg(target_os = "linux")]
fn is_forked(e: &Error) -> bool {
    matches!(e, Error::Forked(_))
}

fn is_enospc(e: &Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC)
}

/// A small ext4 file system (`scripts/small-fs`), unmounted on drop.
struct SmallFs {
    base: PathBuf,
    mnt: PathBuf,
}

impl SmallFs {
    fn mount(base: &Path, mib: u32) -> Result<SmallFs, String> {
        if cfg!(windows) {
            return Err("SKIPPED: no small file system: scripts/small-fs is Linux's".into());
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/small-fs");
        let out = Command::new(&script)
            .args(["mount", base.to_str().unwrap(), &mib.to_string()])
            .output()
            .map_err(|e| format!("SKIPPED: cannot run {}: {e}", script.display()))?;
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        match out.status.code() {
            Some(0) => Ok(SmallFs {
                base: base.to_path_buf(),
                mnt: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
            }),
            Some(77) => Err(format!("SKIPPED: no small file system: {why}")),
            _ => Err(format!("scripts/small-fs failed: {why}")),
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/small-fs");
        let _ = Command::new(script)
            .args(["umount", self.base.to_str().unwrap()])
            .status();
    }
}

// ------------------------------------------------------------ rust-file

/// Writes in flight whose futures are dropped, writes acknowledged, and
/// then every handle of the file dropped: all of it lands.
fn file_drop_behind(d: Driver, dir: &Path) -> Result<(), String> {
    const N: usize = 64;
    let engine = d.engine();
    let path = dir.join("data");
    let f = direct_file(&engine, &path, N);
    let mut acked = Vec::new();
    let mut dropped = Vec::new();
    for i in 0..N {
        let mut op = f.write_at(block(7, i), (i * BS) as u64);
        if i % 2 == 0 {
            // Submitted, then dropped in flight (or already done).
            let _ = poll_once(&mut op);
            drop(op);
            dropped.push(i);
        } else {
            let (res, _) = op.wait();
            if res.map_err(|e| e.to_string())? == BS {
                acked.push(i);
            }
        }
    }
    let g = f.clone();
    drop(f);
    drop(g);
    settles(&engine)?;
    check_blocks(&path, 7, &acked)?;
    // Operations outlive the futures and the handles that started them.
    check_blocks(&path, 7, &dropped)
}

/// Eight threads write through one file: positional blocks and appended
/// records, every one exactly once.
fn file_shared_writers(d: Driver, dir: &Path) -> Result<(), String> {
    const THREADS: usize = 8;
    const EACH: usize = 100;
    let torn_appends = appends_are_not_atomic_here(dir);
    let engine = d.engine();
    let blocks = dir.join("blocks");
    let f = Arc::new(direct_file(&engine, &blocks, THREADS * EACH));
    let log = dir.join("log");
    let opts = OpenOptions::new().append(true).create(true).clone();
    let a = Arc::new(opts.open(&engine, &log).wait().map_err(|e| e.to_string())?);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (f, a) = (f.clone(), a.clone());
            std::thread::spawn(move || {
                for r in 0..EACH {
                    let i = t * EACH + r;
                    let (res, _) = f.write_all_at(block(9, i), (i * BS) as u64).wait();
                    res.unwrap();
                    let line = format!("{t}:{r}:{}\n", "x".repeat(r % 37));
                    let (res, _) = a.write_all_at(line.into_bytes(), 0).wait();
                    res.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|p| panic_message(&*p))?;
    }
    check_blocks(&blocks, 9, &(0..THREADS * EACH).collect::<Vec<_>>())?;
    if torn_appends {
        return Err(
            "SKIPPED: the log's lines (the blocks are checked): this system's \
                    appends are not atomic, std's own lose lines"
                .into(),
        );
    }
    each_line_once(&std::fs::read_to_string(&log).unwrap(), THREADS, EACH)
}

/// Every record `t:r:x...` of `threads` x `each` appears exactly once.
fn each_line_once(text: &str, threads: usize, each: usize) -> Result<(), String> {
    let mut seen = vec![0u32; threads * each];
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (t, r, pad) = (it.next(), it.next(), it.next());
        let (Some(t), Some(r), Some(pad)) = (t, r, pad) else {
            return Err(format!("torn line {line:?}"));
        };
        let (t, r): (usize, usize) = (t.parse().map_err(|_| line)?, r.parse().map_err(|_| line)?);
        if t >= threads || r >= each || pad != "x".repeat(r % 37) {
            return Err(format!("torn line {line:?}"));
        }
        seen[t * each + r] += 1;
    }
    match seen.iter().position(|&n| n != 1) {
        None => Ok(()),
        Some(i) => Err(format!("record {i} appears {} times", seen[i])),
    }
}

/// `close` while pipe reads are in flight waits for them: each read has its
/// data, and `close` returns only after the last read came back.
fn file_close_racing_reads(d: Driver, _dir: &Path) -> Result<(), String> {
    const N: usize = 4;
    let engine = d.engine();
    let (f, w) = pipe(&engine);
    let reads: Vec<_> = (0..N)
        .map(|_| {
            let f = f.clone();
            watch(move || {
                let (res, buf) = f.read_exact_at(vec![0u8; 8], 0).wait();
                (res.map_err(|e| e.to_string()), buf, Instant::now())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let feeder = feed_later(w, b"readdata".repeat(N));
    let closed = f.close().wait();
    let closed_at = Instant::now();
    feeder.join().unwrap();
    closed.map_err(|e| format!("close: {e}"))?;
    for r in reads {
        let (res, buf, at) = r.wait(Instant::now() + LIMIT)?;
        res?;
        if buf != b"readdata" {
            return Err(format!("a read returned {buf:?}"));
        }
        if at > closed_at + Duration::from_millis(50) {
            return Err("a read came back after close returned".into());
        }
    }
    fails_at_once(
        "a read after close",
        |e| matches!(e, Error::Closed),
        move || f.read_at(vec![0u8; 8], 0).wait().0,
    )
}

/// Shutdown with a pipe read and direct writes in flight: they complete,
/// shutdown waits for them, and every later call fails at once.
fn file_shutdown_in_flight(d: Driver, dir: &Path) -> Result<(), String> {
    const N: usize = 32;
    let engine = d.engine();
    let path = dir.join("data");
    let f = direct_file(&engine, &path, N);
    let (p, w) = pipe(&engine);
    let read = watch(move || p.read_exact_at(vec![0u8; 5], 0).wait());
    let writes: Vec<_> = (0..N)
        .map(|i| {
            let f = f.clone();
            watch(move || (i, f.write_at(block(11, i), (i * BS) as u64).wait().0))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(30));
    let feeder = feed_later(w, b"piped".to_vec());
    engine.shutdown();
    feeder.join().unwrap();
    let (res, buf) = read.wait(Instant::now() + LIMIT)?;
    if res.is_err() || buf != b"piped" {
        return Err(format!("the pipe read in flight: {res:?} {buf:?}"));
    }
    let mut acked = Vec::new();
    for w in writes {
        match w.wait(Instant::now() + LIMIT)? {
            (i, Ok(BS)) => acked.push(i),
            (_, Err(Error::Shutdown)) => {}
            (i, other) => return Err(format!("write {i}: {other:?}")),
        }
    }
    check_blocks(&path, 11, &acked)?;
    fails_at_once("a write after shutdown", is_shutdown, move || {
        f.write_at(block(11, 0), 0).wait().0
    })
}

/// Windows has no fork: both rows say so.
#[cfg(windows)]
fn file_fork_in_flight(_: Driver, _: &Path) -> Result<(), String> {
    Err("SKIPPED: no fork on Windows".into())
}

#[cfg(windows)]
fn port_fork_in_flight(_: Driver, _: &Path) -> Result<(), String> {
    Err("SKIPPED: no fork on Windows".into())
}

/// Forks with a pipe read and direct writes in flight: the parent's
/// complete; the child's calls fail at once and its exit does not hang.
#[cfg(target_os = "linux")]
fn file_fork_in_flight(d: Driver, dir: &Path) -> Result<(), String> {
    const N: usize = 16;
    let engine = d.engine();
    let path = dir.join("data");
    let f = direct_file(&engine, &path, N);
    let (p, w) = pipe(&engine);
    let mut read = p.read_exact_at(vec![0u8; 5], 0);
    let _ = poll_once(&mut read);
    // Submitted (an operation may also be done at once: its result is kept).
    let writes: Vec<_> = (0..N)
        .map(|i| {
            let mut op = f.write_at(block(13, i), (i * BS) as u64);
            match poll_once(&mut op) {
                std::task::Poll::Ready((res, _)) => Err(res),
                std::task::Poll::Pending => Ok(op),
            }
        })
        .collect();
    let child = fork_child(|| {
        let (res, _) = f.write_at(block(13, 0), 0).wait();
        let (res2, _) = p.read_at(vec![0u8; 5], 0).wait();
        // Closing the child's copy fails at once: it must not wait for the
        // parent's operations.
        let closed = f.close().wait();
        res.as_ref().is_err_and(is_forked)
            && res2.as_ref().is_err_and(is_forked)
            && closed.as_ref().is_err_and(is_forked)
    })?;
    let feeder = feed_later(w, b"piped".to_vec());
    let (res, buf) = read.wait();
    feeder.join().unwrap();
    if res.is_err() || buf != b"piped" {
        return Err(format!("the parent's pipe read: {res:?} {buf:?}"));
    }
    let mut acked = Vec::new();
    for (i, op) in writes.into_iter().enumerate() {
        let res = op.map_or_else(|done| done, |op| op.wait().0);
        if res.map_err(|e| format!("parent's write {i}: {e}"))? == BS {
            acked.push(i);
        }
    }
    check_blocks(&path, 13, &acked)?;
    child.wait()
}

/// A forked child running `check` within [`AT_ONCE`] and leaving with
/// `exit` (the process's exit handlers run).
#[cfg(target_os = "linux")]
struct Child(libc::pid_t);

#[cfg(target_os = "linux")]
fn fork_child(check: impl FnOnce() -> bool) -> Result<Child, String> {
    // SAFETY: the child calls only the engine's entry points on the
    // parent's handles (which must fail at once in a child) and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        let started = Instant::now();
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).unwrap_or(false);
        let code = if !ok {
            3
        } else if started.elapsed() > AT_ONCE {
            4
        } else {
            0
        };
        std::process::exit(code);
    }
    Ok(Child(pid))
}

#[cfg(target_os = "linux")]
impl Child {
    fn wait(self) -> Result<(), String> {
        let status = wait_pid_within(self.0, Duration::from_secs(20))?;
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => Ok(()),
            (true, 3) => {
                Err("in the child, a call on the parent's handle did not fail with Forked".into())
            }
            (true, 4) => {
                Err("in the child, a call on the parent's handle did not fail at once".into())
            }
            _ => Err(format!("the child ended with status {status}")),
        }
    }
}

/// Writes 64 KiB blocks into a small file system until it is full: the
/// error is ENOSPC, and every block acknowledged before it is in the file.
fn file_injected_failure(d: Driver, dir: &Path) -> Result<(), String> {
    let fs = SmallFs::mount(dir, 4)?;
    let engine = d.engine();
    let path = fs.mnt.join("data");
    let f = File::create(&engine, &path)
        .wait()
        .map_err(|e| e.to_string())?;
    fill_until_full(&f, &path, 17, |at, chunk| {
        Ok(f.write_at(chunk, at).wait().0)
    })?;
    drop(f);
    settles(&engine)
}

/// Writes `seed`'s pattern in 64 KiB chunks through `write` (the offset,
/// the chunk; the write's result) until a write fails: the error must be
/// ENOSPC, and after a sync every byte acknowledged before it is in the file.
fn fill_until_full(
    f: &File,
    path: &Path,
    seed: u64,
    mut write: impl FnMut(u64, Vec<u8>) -> Result<Result<usize, Error>, String>,
) -> Result<(), String> {
    const CHUNK: usize = 64 << 10;
    let mut acked = 0usize;
    let err = loop {
        if acked > 64 << 20 {
            return Err("64 MiB written to a 4 MiB file system".into());
        }
        let at = acked as u64;
        match write(at, pattern(seed, at, CHUNK))? {
            Ok(n) if n > 0 => acked += n,
            Ok(_) => return Err("a write of 0 bytes".into()),
            Err(e) => break e,
        }
    };
    if !is_enospc(&err) {
        return Err(format!("the write failed with {err:?}, not ENOSPC"));
    }
    f.sync_all()
        .wait()
        .map_err(|e| format!("sync after ENOSPC: {e}"))?;
    if std_read(path, 0, acked) != pattern(seed, 0, acked) {
        return Err(format!(
            "the {acked} acknowledged bytes are not all in the file"
        ));
    }
    Ok(())
}

// ------------------------------------------------------------ rust-port

/// Takes `n` completions within [`LIMIT`].
fn take<B: Send + 'static>(
    port: &Port<B>,
    n: usize,
) -> Result<Vec<overlapped::Completion<B>>, String> {
    let deadline = Instant::now() + LIMIT;
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match port.next_timeout(left) {
            Some(c) => got.push(c),
            None => return Err(format!("{} of {n} completions in time", got.len())),
        }
    }
    Ok(got)
}

/// Queues a direct write of block `i` (key `i`).
fn port_write(port: &Port<AlignedBuf>, f: &File, seed: u64, i: usize) -> Result<(), String> {
    port.write_at(f, block(seed, i), (i * BS) as u64, i as u64)
        .map_err(|(e, _)| format!("write {i} refused: {e}"))
}

/// The keys of completions that succeeded with a whole block.
fn acked_keys(done: &[overlapped::Completion<AlignedBuf>]) -> Result<Vec<usize>, String> {
    let mut keys = Vec::new();
    for c in done {
        match &c.result {
            Ok(BS) => keys.push(c.key as usize),
            Err(Error::Shutdown) => {}
            other => return Err(format!("write {}: {other:?}", c.key)),
        }
    }
    Ok(keys)
}

/// Direct writes in flight; half their completions taken; the port and the
/// file dropped: every write lands.
fn port_drop_behind(d: Driver, dir: &Path) -> Result<(), String> {
    const N: usize = 64;
    let engine = d.engine();
    let path = dir.join("data");
    let f = direct_file(&engine, &path, N);
    let port = Port::new(&engine);
    for i in 0..N {
        port_write(&port, &f, 19, i)?;
    }
    let acked = acked_keys(&take(&port, N / 2)?)?;
    drop(port);
    drop(f);
    settles(&engine)?;
    check_blocks(&path, 19, &acked)?;
    check_blocks(&path, 19, &(0..N).collect::<Vec<_>>())
}

/// Eight threads submit on one port and take any completion: each write
/// completes once, and every block is in the file.
fn port_shared_writers(d: Driver, dir: &Path) -> Result<(), String> {
    const THREADS: usize = 8;
    const EACH: usize = 64;
    let engine = d.engine();
    let path = dir.join("data");
    let f = Arc::new(direct_file(&engine, &path, THREADS * EACH));
    let port: Arc<Port<AlignedBuf>> = Arc::new(Port::new(&engine));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (f, port) = (f.clone(), port.clone());
            std::thread::spawn(move || -> Result<Vec<usize>, String> {
                for r in 0..EACH {
                    port_write(&port, &f, 23, t * EACH + r)?;
                }
                acked_keys(&take(&port, EACH)?)
            })
        })
        .collect();
    let mut seen = vec![0u32; THREADS * EACH];
    for w in workers {
        for k in w.join().map_err(|p| panic_message(&*p))?? {
            seen[k] += 1;
        }
    }
    if let Some(k) = seen.iter().position(|&n| n != 1) {
        return Err(format!("write {k} completed {} times", seen[k]));
    }
    check_blocks(&path, 23, &(0..THREADS * EACH).collect::<Vec<_>>())
}

/// `close` while the port's pipe reads are in flight waits for them; each
/// completion has its data.
fn port_close_racing_reads(d: Driver, _dir: &Path) -> Result<(), String> {
    const N: usize = 4;
    let engine = d.engine();
    let (f, w) = pipe(&engine);
    let port: Port<Vec<u8>> = Port::new(&engine);
    for k in 0..N as u64 {
        port.read_at(&f, vec![0u8; 8], 0, k)
            .map_err(|(e, _)| format!("read refused: {e}"))?;
    }
    std::thread::sleep(Duration::from_millis(50));
    let feeder = feed_later(w, b"readdata".repeat(N));
    f.close().wait().map_err(|e| format!("close: {e}"))?;
    feeder.join().unwrap();
    // close returned: the kernel is done with every buffer.
    if port.outstanding() != N {
        return Err(format!("{} outstanding after close", port.outstanding()));
    }
    for c in take(&port, N)? {
        if !matches!(c.result, Ok(8)) || c.buf != b"readdata" {
            return Err(format!("read {}: {:?} {:?}", c.key, c.result, c.buf));
        }
    }
    match port.read_at(&f, vec![0u8; 8], 0, 99) {
        Err((Error::Closed, _)) => Ok(()),
        Err((e, _)) => Err(format!("a read after close: {e:?}")),
        Ok(()) => match take(&port, 1)?.pop().map(|c| c.result) {
            Some(Err(Error::Closed)) => Ok(()),
            other => Err(format!("a read after close: {other:?}")),
        },
    }
}

/// Shutdown with the port's pipe read and direct writes in flight: they
/// complete; later submissions fail at once.
fn port_shutdown_in_flight(d: Driver, dir: &Path) -> Result<(), String> {
    const N: usize = 32;
    let engine = d.engine();
    let path = dir.join("data");
    let f = direct_file(&engine, &path, N);
    let (p, w) = pipe(&engine);
    let port = Port::new(&engine);
    let reads: Port<Vec<u8>> = Port::new(&engine);
    reads
        .read_at(&p, vec![0u8; 5], 0, 0)
        .map_err(|(e, _)| e.to_string())?;
    for i in 0..N {
        port_write(&port, &f, 29, i)?;
    }
    let feeder = feed_later(w, b"piped".to_vec());
    engine.shutdown();
    feeder.join().unwrap();
    let c = take(&reads, 1)?.remove(0);
    if !matches!(c.result, Ok(5)) || c.buf != b"piped" {
        return Err(format!(
            "the pipe read in flight: {:?} {:?}",
            c.result, c.buf
        ));
    }
    check_blocks(&path, 29, &acked_keys(&take(&port, N)?)?)?;
    fails_at_once("a write after shutdown", is_shutdown, move || {
        port.write_at(&f, block(29, 0), 0, 0).map_err(|(e, _)| e)
    })
}

/// Forks with the port's operations in flight: the parent takes them all;
/// in the child, submitting fails and dropping the port returns at once.
#[cfg(target_os = "linux")]
fn port_fork_in_flight(d: Driver, dir: &Path) -> Result<(), String> {
    const N: usize = 16;
    let engine = d.engine();
    let path = dir.join("data");
    let f = direct_file(&engine, &path, N);
    let (p, w) = pipe(&engine);
    let wslot = std::sync::Mutex::new(Some(Port::<AlignedBuf>::new(&engine)));
    let rslot = std::sync::Mutex::new(Some(Port::<Vec<u8>>::new(&engine)));
    if let (Some(wp), Some(rp)) = (&*wslot.lock().unwrap(), &*rslot.lock().unwrap()) {
        rp.read_at(&p, vec![0u8; 5], 0, 0)
            .map_err(|(e, _)| e.to_string())?;
        for i in 0..N {
            port_write(wp, &f, 31, i)?;
        }
    }
    let child = fork_child(|| {
        let wp = wslot.lock().unwrap().take().unwrap();
        let rp = rslot.lock().unwrap().take().unwrap();
        let refused = matches!(
            wp.write_at(&f, block(31, 0), 0, 0),
            Err((Error::Forked(_), _))
        );
        // The child's copies of the ports are dropped: that must not wait
        // for the parent's operations.
        drop(rp);
        drop(wp);
        refused
    })?;
    let wp = wslot.lock().unwrap().take().unwrap();
    let rp = rslot.lock().unwrap().take().unwrap();
    let feeder = feed_later(w, b"piped".to_vec());
    feeder.join().unwrap();
    child.wait()?;
    let c = take(&rp, 1)?.remove(0);
    if !matches!(c.result, Ok(5)) || c.buf != b"piped" {
        return Err(format!(
            "the parent's pipe read: {:?} {:?}",
            c.result, c.buf
        ));
    }
    check_blocks(&path, 31, &acked_keys(&take(&wp, N)?)?)
}

/// Port writes into a small file system until it is full: the error comes
/// back as a completion, and every acknowledged write is in the file.
fn port_injected_failure(d: Driver, dir: &Path) -> Result<(), String> {
    let fs = SmallFs::mount(dir, 4)?;
    let engine = d.engine();
    let path = fs.mnt.join("data");
    let f = File::create(&engine, &path)
        .wait()
        .map_err(|e| e.to_string())?;
    let port: Port<Vec<u8>> = Port::new(&engine);
    fill_until_full(&f, &path, 37, |at, chunk| {
        port.write_at(&f, chunk, at, at)
            .map_err(|(e, _)| format!("write refused: {e}"))?;
        Ok(take(&port, 1)?.remove(0).result)
    })
}
