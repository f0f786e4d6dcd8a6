//! overlapped-tokio's rows of the lifecycle matrix (`docs/acknowledged-bytes.md`;
//! the engine's rows are `crates/overlap/tests/matrix.rs`): every front end, through
//! every event that may befall the task that started an operation, for
//! every kind of operation, on the process's driver (`scripts/test` runs
//! it on io_uring and with `OVERLAP_DRIVER=pool`; crates/no-uring runs it
//! where io_uring is refused).
//!
//! - Front ends: a multi-thread runtime (2 workers), a current-thread
//!   runtime.
//! - Events: the task's worker thread ends mid-flight (`block_in_place`,
//!   then a short `thread_keep_alive`); the runtime is dropped mid-flight
//!   (the thread lives on); `shutdown_timeout(100 ms)` mid-flight; the task
//!   is aborted mid-flight; the task moves between workers mid-flight;
//!   `spawn_blocking` + `Handle::block_on` threads end mid-flight; two
//!   current-thread runtimes on one thread; a runtime without `enable_io`;
//!   `fork` mid-flight (parent and child each go on and exit); several
//!   tasks append to one file.
//! - Operations: a direct read, a buffered read of data not in the page
//!   cache, a buffered write, a FIFO read that completes only once written
//!   to (~120 ms after the cell starts), an open.
//!
//! For every cell: the right result (a task dropped with its runtime, or
//! aborted, is not observed: its operation runs to completion unobserved,
//! and a write's data is checked in the file); the budget released
//! (`engine().in_flight() == (0, 0)`); no descriptor, io_uring instance or
//! thread left behind; all within the cell's limit. A cell that does not
//! apply says why.
//!
//! The whole matrix runs in one child process (the process engine is
//! global; counting descriptors and threads needs a process of its own),
//! one cell after another; the child prints the table, the parent copies
//! it to stderr.
//!
//! What a forked child can do (only the forking thread is copied): the
//! parent's engine and every ring belong to the parent, and the child's
//! copy of an operation the parent had in flight is never completed in the
//! child. On a fresh thread with a new runtime, `overlapped_tokio::fs` works
//! on every driver (`overlapped_tokio::engine()` makes the child an engine of
//! its own on first use), and so does a new `overlapped::Engine` through
//! `overlapped_tokio::on_ring`; then the child leaves with `_exit`. The cell
//! checks all of that.

use std::future::Future;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use overlapped::AlignedBuf;
use overlapped_tokio::fs;
use tokio::runtime::Runtime;

const CELL_LIMIT: Duration = Duration::from_secs(20);
/// When the FIFO is written to, after the cell starts.
const FEED_AFTER: Duration = Duration::from_millis(120);
/// tokio's blocking threads (and a worker turned blocking) end after this.
const KEEP_ALIVE: Duration = Duration::from_millis(20);
const BS: usize = 4096;
const BLOCKS: u64 = 64;
const SEED: u64 = 33;
const NAME: &str = "matrix::lifecycle_matrix";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    MultiThread,
    CurrentThread,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    WorkerExits,
    RuntimeDropped,
    ShutdownTimeout,
    Aborted,
    Moved,
    BlockingThreads,
    TwoRuntimes,
    NoIo,
    Fork,
    Appenders,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Direct,
    Uncached,
    Write,
    Pipe,
    Open,
}

const FRONTS: [Front; 2] = [Front::MultiThread, Front::CurrentThread];
const EVENTS: [Event; 10] = [
    Event::WorkerExits,
    Event::RuntimeDropped,
    Event::ShutdownTimeout,
    Event::Aborted,
    Event::Moved,
    Event::BlockingThreads,
    Event::TwoRuntimes,
    Event::NoIo,
    Event::Fork,
    Event::Appenders,
];
const KINDS: [Kind; 5] = [
    Kind::Direct,
    Kind::Uncached,
    Kind::Write,
    Kind::Pipe,
    Kind::Open,
];

/// Why a cell does not apply, or `None` if it does.
fn not_applicable(direct: bool, front: Front, event: Event, kind: Kind) -> Option<&'static str> {
    use Event::*;
    match (front, event, kind) {
        (_, Appenders, k) if k != Kind::Write => Some("appending is a write"),
        (_, _, Kind::Direct) if !direct => Some("the file system refuses O_DIRECT"),
        (Front::CurrentThread, WorkerExits, _) => Some(
            "a current-thread runtime has no worker thread: its tasks run on the thread in \
             `block_on`, which outlives the runtime (RuntimeDropped), and `block_in_place` \
             panics there",
        ),
        (Front::CurrentThread, Moved, _) => {
            Some("a current-thread runtime runs every task on one thread")
        }
        (Front::MultiThread, TwoRuntimes, _) => {
            Some("two runtimes on one thread are current-thread ones (a worker cannot block_on)")
        }
        _ => None,
    }
}

/// Byte `p` of the data file (at offset `p`).
fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((off + i) * 7 + seed) as u8 % 251)
        .collect()
}

fn unique() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// What one cell needs: the files.
struct Env {
    data: PathBuf,
    dir: PathBuf,
    fifo: PathBuf,
    /// Keeps a writer present, so that opening the FIFO never blocks.
    fifo_keep: std::fs::File,
}

impl Env {
    fn new(dir: &Path, data: &Path) -> Env {
        use std::os::unix::fs::OpenOptionsExt;
        let fifo = dir.join(format!("fifo-{}", unique()));
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let fifo_keep = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        Env {
            data: data.to_path_buf(),
            dir: dir.to_path_buf(),
            fifo,
            fifo_keep,
        }
    }

    /// Writes the FIFO after [`FEED_AFTER`], from a thread of its own.
    fn feeder(&self) -> std::thread::JoinHandle<()> {
        let mut w = self.fifo_keep.try_clone().unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(FEED_AFTER);
            w.write_all(b"piped").unwrap();
        })
    }

    fn evict(&self) {
        let f = std::fs::File::open(&self.data).unwrap();
        // SAFETY: plain descriptor call on a live descriptor.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
    }

    fn target(&self, slot: u64) -> PathBuf {
        self.dir.join(format!("w-{slot}"))
    }
}

type Checked = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// What an operation needs opened before it starts (so that the cell's
/// event meets the operation itself in flight).
enum Prepared {
    Read(fs::File, u64, bool),
    Write(fs::File, u64),
    Pipe(fs::File),
    Open(PathBuf),
}

async fn prepare(env: &Env, kind: Kind, slot: u64) -> Prepared {
    match kind {
        Kind::Direct => {
            let f = fs::OpenOptions::new()
                .read(true)
                .direct(true)
                .open(&env.data)
                .await
                .unwrap();
            Prepared::Read(f, (slot % BLOCKS) * BS as u64, true)
        }
        Kind::Uncached => {
            let f = fs::OpenOptions::new()
                .read(true)
                .access(overlapped::Access::Random)
                .open(&env.data)
                .await
                .unwrap();
            env.evict();
            Prepared::Read(f, (slot * 7 % BLOCKS) * BS as u64, false)
        }
        Kind::Write => Prepared::Write(fs::File::create(env.target(slot)).await.unwrap(), slot),
        Kind::Pipe => Prepared::Pipe(fs::File::open(&env.fifo).await.unwrap()),
        Kind::Open => Prepared::Open(env.data.clone()),
    }
}

/// The operation, as a future that checks its own result.
fn run(p: Prepared) -> Checked {
    match p {
        Prepared::Read(f, off, true) => Box::pin(async move {
            let (res, buf) = f.read_at(AlignedBuf::new(BS, BS).unwrap(), off).await;
            check_read(res, &buf[..], off)
        }),
        Prepared::Read(f, off, false) => Box::pin(async move {
            let (res, buf) = f.read_at(vec![0u8; BS], off).await;
            check_read(res, &buf, off)
        }),
        Prepared::Write(f, slot) => Box::pin(async move {
            let (res, _) = f.write_all_at(pattern(slot, 0, BS), 0).await;
            res.map_err(|e| format!("write: {e}"))
        }),
        Prepared::Pipe(mut f) => Box::pin(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 5];
            match f.read(&mut buf).await {
                Ok(5) if &buf == b"piped" => Ok(()),
                other => Err(format!("pipe read: {other:?} {buf:?}")),
            }
        }),
        Prepared::Open(path) => Box::pin(async move {
            let f = fs::File::open(&path)
                .await
                .map_err(|e| format!("open: {e}"))?;
            let (res, buf) = f.read_at(vec![0u8; BS], 0).await;
            check_read(res, &buf, 0)
        }),
    }
}

fn check_read(res: std::io::Result<usize>, buf: &[u8], off: u64) -> Result<(), String> {
    match res {
        Ok(n) if n == BS && buf == &pattern(SEED, off, BS)[..] => Ok(()),
        Ok(n) => Err(format!("read at {off}: {n} bytes, or not the file's")),
        Err(e) => Err(format!("read at {off}: {e}")),
    }
}

/// What a write left in its file, once the engine is done.
fn check_written(env: &Env, kind: Kind, slot: u64) -> Result<(), String> {
    if kind != Kind::Write {
        return Ok(());
    }
    let got = std::fs::read(env.target(slot)).map_err(|e| e.to_string())?;
    if got == pattern(slot, 0, BS) {
        Ok(())
    } else {
        Err(format!("the write left {} bytes, not its data", got.len()))
    }
}

fn runtime(front: Front, io: bool) -> Runtime {
    let mut b = match front {
        Front::MultiThread => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
        Front::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    b.thread_keep_alive(KEEP_ALIVE).enable_time();
    if io {
        b.enable_io();
    }
    b.build().unwrap()
}

fn in_flight() -> (usize, usize) {
    overlapped_tokio::engine().in_flight()
}

type Task = tokio::task::JoinHandle<Result<(), String>>;

/// Runs `rt` until the task's operation is in flight (or the task is done).
fn settle(rt: &Runtime, task: &Task) {
    rt.block_on(async {
        let end = Instant::now() + Duration::from_secs(5);
        while in_flight().0 == 0 && !task.is_finished() && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
}

/// The task's result, within the cell's limit.
fn join(rt: &Runtime, task: Task) -> Result<(), String> {
    rt.block_on(async {
        match tokio::time::timeout(CELL_LIMIT, task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("the task failed: {e}")),
            Err(_) => Err("hung".into()),
        }
    })
}

/// An operation polled once: done already, or in flight.
enum Started {
    Done(Result<(), String>),
    InFlight(Checked),
}

async fn start(mut fut: Checked) -> Started {
    match crate::util::poll_once(&mut fut).await {
        Some(r) => Started::Done(r),
        None => Started::InFlight(fut),
    }
}

/// Runs one cell; `Err` says what went wrong.
fn run_cell(front: Front, event: Event, kind: Kind, env: Env) -> Result<(), String> {
    let feeder = (kind == Kind::Pipe).then(|| env.feeder());
    let slot = unique();
    let res = cell(front, event, kind, &env, slot);
    if let Some(f) = feeder {
        f.join().map_err(|_| "the feeder panicked".to_string())?;
    }
    res?;
    if !crate::util::wait_until(CELL_LIMIT, || in_flight() == (0, 0)) {
        return Err(format!("budget not released: {:?} in flight", in_flight()));
    }
    if event != Event::Appenders {
        check_written(&env, kind, slot)?;
    }
    Ok(())
}

// Long on purpose: one short arm per `Event`, the matrix's events side by side.
fn cell(front: Front, event: Event, kind: Kind, env: &Env, slot: u64) -> Result<(), String> {
    let rt = runtime(front, event != Event::NoIo);
    let op = |rt: &Runtime| run(rt.block_on(prepare(env, kind, slot)));
    match event {
        Event::WorkerExits => {
            let fut = op(&rt);
            let task = rt.spawn(async move {
                let fut = match start(fut).await {
                    Started::Done(r) => return r,
                    Started::InFlight(fut) => fut,
                };
                let submitter = tid();
                // The worker hands its core to another thread; this one
                // ends as a blocking thread after its keep-alive.
                tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(5)));
                let r = fut.await;
                // A pipe read is in flight for ~120 ms, far past the
                // keep-alive: its submitting thread ended before it
                // completed.
                if kind == Kind::Pipe && alive(submitter) {
                    return Err("the submitting thread did not end mid-flight".into());
                }
                r
            });
            join(&rt, task)
        }
        Event::RuntimeDropped => {
            let task = rt.spawn(op(&rt));
            settle(&rt, &task);
            // This thread lives on; the task is dropped with the runtime.
            drop(rt);
            Ok(())
        }
        Event::ShutdownTimeout => {
            let task = rt.spawn(op(&rt));
            settle(&rt, &task);
            let t = Instant::now();
            rt.shutdown_timeout(Duration::from_millis(100));
            match t.elapsed() {
                took if took > Duration::from_secs(1) => {
                    Err(format!("shutdown_timeout(100 ms) took {took:?}"))
                }
                _ => Ok(()),
            }
        }
        Event::Aborted => {
            let task = rt.spawn(op(&rt));
            settle(&rt, &task);
            task.abort();
            match join(&rt, task) {
                Err(e) if e.contains("cancelled") => Ok(()),
                other => other,
            }
        }
        Event::Moved => {
            let fut = op(&rt);
            let task = rt.spawn(async move {
                let fut = match start(fut).await {
                    Started::Done(r) => return r,
                    Started::InFlight(fut) => fut,
                };
                // Another worker may poll it from here on.
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
                fut.await
            });
            // Work for both workers, so that the task may be stolen.
            let busy: Vec<_> = (0..4)
                .map(|_| rt.spawn_blocking(|| std::thread::sleep(Duration::from_millis(2))))
                .collect();
            let r = join(&rt, task);
            for b in busy {
                let _ = rt.block_on(b);
            }
            r
        }
        Event::BlockingThreads => {
            let fut = op(&rt);
            let started = rt.block_on(rt.spawn_blocking(move || {
                (
                    tid(),
                    tokio::runtime::Handle::current().block_on(start(fut)),
                )
            }));
            let (submitter, started) =
                started.map_err(|e| format!("the blocking task failed: {e}"))?;
            // The blocking thread that submitted it ends.
            if !crate::util::wait_until(Duration::from_secs(2), || !alive(submitter)) {
                return Err("the blocking thread did not end".into());
            }
            match started {
                Started::Done(r) => r,
                Started::InFlight(fut) => {
                    let task = rt.spawn(fut);
                    join(&rt, task)
                }
            }
        }
        Event::TwoRuntimes => {
            let rt2 = runtime(front, true);
            let task = rt.spawn(op(&rt));
            settle(&rt, &task);
            // The second runtime works while the first one's is in flight.
            let got = rt2
                .block_on(fs::read(&env.data))
                .map_err(|e| format!("the second runtime's read: {e}"))?;
            if got != pattern(SEED, 0, BS * BLOCKS as usize) {
                return Err("the second runtime's read: not the file's data".into());
            }
            let r = join(&rt, task);
            drop(rt2);
            r
        }
        Event::NoIo => {
            let task = rt.spawn(op(&rt));
            join(&rt, task)
        }
        Event::Fork => {
            let task = rt.spawn(op(&rt));
            settle(&rt, &task);
            fork_child_goes_on(&env.data)?;
            join(&rt, task)
        }
        Event::Appenders => appenders(&rt, env),
    }
}

/// Forks; the child (only this thread is copied) does its operations on a
/// fresh thread with a new runtime, and leaves with `_exit`. Returns once
/// the child has ended, or an error if it failed or hung.
fn fork_child_goes_on(data: &Path) -> Result<(), String> {
    let data = data.to_path_buf();
    // SAFETY: the child touches nothing of the parent's other threads: it
    // makes a thread, a runtime and an engine of its own, and leaves with
    // `_exit` (no exit handlers, no destructors of the parent's state).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        let code = std::thread::spawn(move || child_ops(&data))
            .join()
            .unwrap_or(10);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
                (true, 0) => {
                    CHILD_FS.store(1, Ordering::Relaxed);
                    Ok(())
                }
                (true, 1) => Err("in the child, overlapped_tokio::fs was refused with \
                                  Error::Forked: the child has no engine of its own"
                    .into()),
                (true, 2) => {
                    Err("in the child, overlapped_tokio::fs neither worked nor said Forked".into())
                }
                (true, 3) => Err("in the child, a new engine's read failed".into()),
                _ => Err(format!("the child ended with status {status:#x}")),
            };
        }
        if start.elapsed() > Duration::from_secs(10) {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return Err("the child hung".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What `overlapped_tokio::fs` did in the last forked child: 1 worked, 2
/// refused with `Error::Forked`.
static CHILD_FS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// In a forked child: what it can do (see the module docs). 0 if all went
/// as documented.
fn child_ops(data: &Path) -> i32 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The process engine is the child's own, made on first use here.
    let inherited = rt.block_on(fs::read(data));
    let refused = match &inherited {
        Err(e) if e.to_string().contains("forked") => true,
        Ok(v) if v == &pattern(SEED, 0, BS * BLOCKS as usize) => false,
        _ => return 2,
    };
    let Ok(engine) = overlapped::Engine::new() else {
        return 3;
    };
    let ok = rt.block_on(async {
        let f = overlapped::File::open(&engine, data).await.ok()?;
        let (res, buf) = overlapped_tokio::on_ring(f.read_at(vec![0u8; BS], 0)).await;
        Some(res.ok()? == BS && buf == pattern(SEED, 0, BS))
    });
    match (ok, refused) {
        (Some(true), false) => 0,
        (Some(true), true) => 1,
        _ => 3,
    }
}

/// Four tasks each append 50 lines of their own to one file, each through
/// a handle opened with `append(true)`; every line must be there, whole.
fn appenders(rt: &Runtime, env: &Env) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    let path = env.dir.join(format!("append-{}", unique()));
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            rt.spawn(async move {
                let mut f = fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)
                    .await
                    .map_err(|e| e.to_string())?;
                for i in 0..50 {
                    let line = format!("appender {t} line {i:03}\n");
                    f.write_all(line.as_bytes())
                        .await
                        .map_err(|e| e.to_string())?;
                    f.flush().await.map_err(|e| e.to_string())?;
                    tokio::task::yield_now().await;
                }
                Ok(())
            })
        })
        .collect();
    for t in tasks {
        join(rt, t)?;
    }
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    let mut want: Vec<String> = (0..4)
        .flat_map(|t| (0..50).map(move |i| format!("appender {t} line {i:03}")))
        .collect();
    want.sort();
    if lines == want.iter().map(String::as_str).collect::<Vec<_>>() {
        Ok(())
    } else {
        Err(format!("{} of 200 lines kept whole", lines.len()))
    }
}

/// This thread's id.
fn tid() -> libc::pid_t {
    // SAFETY: gettid takes no argument and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

/// Whether the thread `tid` of this process still runs.
fn alive(tid: libc::pid_t) -> bool {
    Path::new(&format!("/proc/self/task/{tid}")).exists()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The io_uring instances this process has open.
fn rings_open() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("io_uring"))
        .count()
}

/// The threads of this process that a cell must not leave behind: all but
/// - the kernel's io-wq workers (`iou-wrk-TID`), which serve the io_uring
///   requests of the thread TID; the last of them lives as long as that
///   thread does, and they end with it (the thread itself is counted);
/// - the process engine's pool workers (`overlap-pool-N`), started on
///   demand up to the engine's bound and kept for the engine's life (the
///   process's): checked against that bound instead ([`pool_threads`]).
fn threads() -> usize {
    thread_names().len()
}

fn all_thread_names() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    v.sort();
    v
}

/// The names of the threads [`threads`] counts.
fn thread_names() -> Vec<String> {
    all_thread_names()
        .into_iter()
        .filter(|s| !s.starts_with("iou-wrk-") && !s.starts_with("overlap-pool-"))
        .collect()
}

/// The process engine's pool workers.
fn pool_threads() -> usize {
    all_thread_names()
        .iter()
        .filter(|s| s.starts_with("overlap-pool-"))
        .count()
}

/// Runs the cell on a thread of its own, within its limit.
fn run_cell_within(front: Front, event: Event, kind: Kind, env: Env) -> Result<(), String> {
    let t = std::thread::spawn(move || run_cell(front, event, kind, env));
    let deadline = Instant::now() + CELL_LIMIT * 2;
    while !t.is_finished() {
        if Instant::now() > deadline {
            return Err("hung".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    t.join().map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("panicked: {msg}")
    })?
}

/// Runs every cell, in this process, and prints the table (to stderr).
fn run_matrix() {
    let driver = overlapped_tokio::engine().driver().kind;
    let dir = crate::util::tempdir();
    let data = dir.path().join("data");
    std::fs::write(&data, pattern(SEED, 0, BS * BLOCKS as usize)).unwrap();
    std::fs::File::open(&data).unwrap().sync_all().unwrap();
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&data)
            .is_ok()
    };
    // Warm-up: the process's lazily made state (the engine, its threads).
    for front in FRONTS {
        let rt = runtime(front, true);
        rt.block_on(async { fs::read(&data).await.unwrap() });
    }
    std::thread::sleep(Duration::from_millis(300));
    let (mut passed, mut na, mut failed) = (0, 0, Vec::new());
    let mut reasons: Vec<&str> = Vec::new();
    let started_all = Instant::now();
    eprintln!("lifecycle matrix (overlapped-tokio, {driver}):");
    for front in FRONTS {
        for event in EVENTS {
            let mut row = format!("  {front:?} x {event:?}:");
            for kind in KINDS {
                if let Some(why) = not_applicable(direct, front, event, kind) {
                    na += 1;
                    if !reasons.contains(&why) {
                        reasons.push(why);
                    }
                    row += &format!(" {kind:?}=n/a");
                    continue;
                }
                let (fd0, ring0, th0) = (fds(), rings_open(), threads());
                let names0 = thread_names();
                let env = Env::new(dir.path(), &data);
                let started = Instant::now();
                let mut res = run_cell_within(front, event, kind, env);
                let wait = Duration::from_secs(5);
                if res.is_ok() && !crate::util::wait_until(wait, || rings_open() <= ring0) {
                    res = Err(format!("io_uring: {} after, {ring0} before", rings_open()));
                }
                if res.is_ok() && !crate::util::wait_until(wait, || fds() <= fd0) {
                    res = Err(format!("descriptors: {} after, {fd0} before", fds()));
                }
                if res.is_ok() && !crate::util::wait_until(wait, || threads() <= th0) {
                    res = Err(format!(
                        "threads: {:?} after, {names0:?} before",
                        thread_names()
                    ));
                }
                if res.is_ok() && pool_threads() > overlapped::DEFAULT_POOL_THREADS {
                    res = Err(format!(
                        "{} pool threads, more than the engine's bound",
                        pool_threads()
                    ));
                }
                match res {
                    Ok(()) => {
                        passed += 1;
                        row += &format!(" {kind:?}=ok({}ms)", started.elapsed().as_millis());
                    }
                    Err(e) => {
                        row += &format!(" {kind:?}=FAILED");
                        failed.push(format!("{front:?} x {event:?} x {kind:?}: {e}"));
                    }
                }
            }
            eprintln!("{row}");
        }
    }
    eprintln!("  n/a: {}", reasons.join("; "));
    eprintln!(
        "  fork: in the child, overlapped_tokio::fs on a new runtime on a fresh thread {}",
        match CHILD_FS.load(Ordering::Relaxed) {
            1 => "worked",
            2 => "was refused with Error::Forked (the parent's engine driver)",
            _ => "was not tried",
        }
    );
    for f in &failed {
        eprintln!("  FAILED {f}");
    }
    eprintln!(
        "lifecycle matrix (overlapped-tokio, {driver}): {passed} passed, {} failed, {na} not \
         applicable ({:.1} s)",
        failed.len(),
        started_all.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "failed cells:\n{}", failed.join("\n"));
}

#[test]
fn lifecycle_matrix() {
    if crate::util::is_child(NAME) {
        run_matrix();
        println!("CHILD-OK {NAME}");
        return;
    }
    let stderr = crate::util::in_child(NAME, &[], Duration::from_secs(300));
    for l in stderr
        .lines()
        .filter(|l| l.contains("lifecycle matrix") || l.starts_with("  "))
    {
        eprintln!("{l}");
    }
}
