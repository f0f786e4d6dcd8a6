//! The lifecycle matrix (`docs/acknowledged-bytes.md`): every front end of the engine, on every
//! driver, through every event that may befall the code that started an
//! operation, for every kind of operation.
//!
//! - Front ends: `.wait()` (a thread's `block_on`), futures on a foreign
//!   executor, a `Port`, a `ReactorRing` driven as an executor drives it.
//!   (overlapped-tokio and the Python package run their own rows.)
//! - Events: the submitting thread exits mid-flight; the operation (its
//!   future, or its port) is dropped mid-flight; the executor is dropped
//!   mid-flight; the engine shuts down mid-flight; the process forks with
//!   the operation in flight (parent and child each go on and exit); the
//!   operation moves to another thread mid-flight; several appenders write
//!   at once.
//! - Operations: a direct read, a buffered read of data not in the page
//!   cache, a buffered write, a pipe read that completes only when written
//!   to, an open.
//!
//! For every cell: the operation completes with the right result (a
//! dropped one runs to completion unobserved); its budget is released; no
//! descriptor or thread is left behind; and it finishes within its limit.
//! A cell that does not apply says why in the table the test prints.
//!
//! Each driver's matrix runs in a child process of its own, one cell after
//! another, so that descriptors and threads can be counted.
//!
//! On Windows the IOCP and pool drivers run it, with a named pipe for the
//! pipe read, the process's handles and threads counted, and no fork (nor
//! reactor rings, which are io_uring's).

use std::future::Future;
use std::io::Write;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::common::*;
#[cfg(target_os = "linux")]
use overlapped::ReactorRing;
use overlapped::{AlignedBuf, Engine, File, OpenOptions, Port};

/// Windows has no reactor rings (io_uring's): a type of which no value
/// exists, for the signatures that take one.
#[cfg(windows)]
enum ReactorRing {}

#[cfg(windows)]
impl ReactorRing {
    fn enter<R>(&self, _: impl FnOnce() -> R) -> R {
        match *self {}
    }
    fn reap(&self) {
        match *self {}
    }
}

const CELL_LIMIT: Duration = Duration::from_secs(30);
/// When the pipe is written to, after the event.
const FEED_AFTER: Duration = Duration::from_millis(120);
const BS: usize = 4096;
const BLOCKS: u64 = 64;
const SEED: u64 = 33;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    Wait,
    Foreign,
    Port,
    Reactor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    SubmitterExits,
    Dropped,
    ExecutorDropped,
    Shutdown,
    Fork,
    Moved,
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

const FRONTS: [Front; 4] = [Front::Wait, Front::Foreign, Front::Port, Front::Reactor];
const EVENTS: [Event; 7] = [
    Event::SubmitterExits,
    Event::Dropped,
    Event::ExecutorDropped,
    Event::Shutdown,
    Event::Fork,
    Event::Moved,
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
fn not_applicable(d: Driver, front: Front, event: Event, kind: Kind) -> Option<&'static str> {
    use Event::*;
    match (front, event, kind) {
        (_, Fork, _) if cfg!(windows) => Some("no fork on Windows"),
        (Front::Port, _, Kind::Open) => Some("a port reads and writes only"),
        (_, Appenders, k) if k != Kind::Write => Some("appending is a write"),
        (_, Appenders, _) if torn_appends() => {
            Some("this system's appends are not atomic (std's own lose lines)")
        }
        (Front::Wait, SubmitterExits | Moved, _) => {
            Some("`.wait()` returns only once its operations completed")
        }
        (Front::Wait | Front::Port, ExecutorDropped, _) => Some("no executor"),
        (Front::Port, Moved, _) => Some("a port's operations belong to no thread"),
        (Front::Reactor, _, _) if !d.is_uring() => Some("reactor rings need io_uring"),
        _ => None,
    }
}

/// Whether this system's own appenders lose lines (probed once; never on
/// Linux).
fn torn_appends() -> bool {
    static TORN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TORN.get_or_init(|| appends_are_not_atomic_here(tempdir().path()))
}

/// What one cell needs: an engine of the driver, the files.
struct Env {
    engine: Engine,
    data: PathBuf,
    dir: PathBuf,
    #[cfg(target_os = "linux")]
    fifo: PathBuf,
    /// Keeps a writer present, so that opening the FIFO never blocks.
    fifo_keep: std::fs::File,
    /// Windows: the named pipe's reading end, adopted by the engine, for
    /// the cell's pipe read.
    #[cfg(windows)]
    pipe: std::sync::Mutex<Option<File>>,
}

impl Env {
    #[cfg(windows)]
    fn new(d: Driver, dir: &Path, data: &Path) -> Env {
        let engine = d.engine();
        let (pipe, name) = named_pipe(&engine);
        let fifo_keep = std::fs::OpenOptions::new().write(true).open(name).unwrap();
        Env {
            engine,
            data: data.to_path_buf(),
            dir: dir.to_path_buf(),
            fifo_keep,
            pipe: std::sync::Mutex::new(Some(pipe)),
        }
    }

    /// The file to read the pipe through (the cell's only pipe read).
    #[cfg(windows)]
    fn pipe_file(&self) -> File {
        let mut slot = self.pipe.lock().unwrap_or_else(|p| p.into_inner());
        slot.take().expect("one pipe read per cell")
    }

    #[cfg(target_os = "linux")]
    fn pipe_file(&self) -> File {
        OpenOptions::new()
            .read(true)
            .open(&self.engine, &self.fifo)
            .wait()
            .unwrap()
    }

    #[cfg(target_os = "linux")]
    fn new(d: Driver, dir: &Path, data: &Path) -> Env {
        use std::os::unix::fs::OpenOptionsExt;
        let fifo = dir.join(format!("fifo-{}", unique()));
        mkfifo(&fifo);
        let fifo_keep = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        Env {
            engine: d.engine(),
            data: data.to_path_buf(),
            dir: dir.to_path_buf(),
            fifo,
            fifo_keep,
        }
    }

    /// Writes the pipe after [`FEED_AFTER`], from a thread of its own.
    fn feeder(&self) -> std::thread::JoinHandle<()> {
        let mut w = self.fifo_keep.try_clone().unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(FEED_AFTER);
            w.write_all(b"piped").unwrap();
        })
    }

    /// Windows: nothing evicts the file from the system's cache; the read
    /// is an ordinary buffered one.
    #[cfg(windows)]
    fn evict(&self) {}

    #[cfg(target_os = "linux")]
    fn evict(&self) {
        let f = std::fs::File::open(&self.data).unwrap();
        // SAFETY: plain descriptor call.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
    }

    fn target(&self, slot: u64) -> PathBuf {
        self.dir.join(format!("w-{slot}"))
    }
}

fn unique() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

type Checked = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// The operation of `kind` as a future that checks its own result.
fn op(env: &Env, kind: Kind, slot: u64) -> Checked {
    let engine = env.engine.clone();
    match kind {
        Kind::Direct => {
            let f = OpenOptions::new()
                .read(true)
                .direct(true)
                .open(&engine, &env.data)
                .wait()
                .unwrap();
            let off = (slot % BLOCKS) * BS as u64;
            Box::pin(async move {
                let (res, buf) = f.read_at(AlignedBuf::new(BS, BS).unwrap(), off).await;
                check_read(res, &buf[..], off)
            })
        }
        Kind::Uncached => {
            env.evict();
            let f = OpenOptions::new()
                .read(true)
                .access(overlapped::Access::Random)
                .open(&engine, &env.data)
                .wait()
                .unwrap();
            let off = (slot * 7 % BLOCKS) * BS as u64;
            Box::pin(async move {
                let (res, buf) = f.read_at(vec![0u8; BS], off).await;
                check_read(res, &buf, off)
            })
        }
        Kind::Write => {
            let f = File::create(&engine, env.target(slot)).wait().unwrap();
            Box::pin(async move {
                let (res, _) = f.write_all_at(pattern(slot, 0, BS), 0).await;
                res.map_err(|e| format!("write: {e}"))
            })
        }
        Kind::Pipe => {
            let f = env.pipe_file();
            Box::pin(async move {
                let (res, buf) = f.read_at(vec![0u8; 5], 0).await;
                match res {
                    Ok(5) if &buf[..] == b"piped" => Ok(()),
                    other => Err(format!("pipe read: {other:?} {buf:?}")),
                }
            })
        }
        Kind::Open => {
            let path = env.data.clone();
            Box::pin(async move {
                let f = OpenOptions::new()
                    .read(true)
                    .open(&engine, &path)
                    .await
                    .map_err(|e| format!("open: {e}"))?;
                // Checked with a plain `pread`: the engine may be shut
                // down by now (the cell's event), the descriptor not.
                #[cfg(target_os = "linux")]
                {
                    let mut buf = vec![0u8; BS];
                    // SAFETY: reads into a live buffer of BS bytes from a
                    // descriptor the file keeps open.
                    let n = unsafe { libc::pread(f.as_raw_fd(), buf.as_mut_ptr().cast(), BS, 0) };
                    check_read(
                        usize::try_from(n).map_err(|_| std::io::Error::last_os_error().into()),
                        &buf,
                        0,
                    )
                }
                // Windows: a `ReadFile` of the handle, off the completion port.
                #[cfg(windows)]
                match overlapped_read(f.as_raw_handle(), BS, 0) {
                    Ok(buf) => check_read(Ok(buf.len()), &buf, 0),
                    Err(e) => check_read(Err(e.into()), &[], 0),
                }
            })
        }
    }
}

fn check_read(res: overlapped::Result<usize>, buf: &[u8], off: u64) -> Result<(), String> {
    match res {
        Ok(n) if n == BS && buf == &pattern(SEED, off, BS)[..] => Ok(()),
        Ok(n) => Err(format!("read at {off}: {n} bytes, or not the file's")),
        Err(e) => Err(format!("read at {off}: {e}")),
    }
}

/// What a write left in its file, once the engine is done.
fn check_written(env_dir: &Path, kind: Kind, slot: u64) -> Result<(), String> {
    if kind != Kind::Write {
        return Ok(());
    }
    let got = std::fs::read(env_dir.join(format!("w-{slot}"))).map_err(|e| e.to_string())?;
    if got == pattern(slot, 0, BS) {
        Ok(())
    } else {
        Err(format!("the write left {} bytes, not its data", got.len()))
    }
}

/// Records whether it was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An operation polled once: done already, or in flight.
enum Started {
    Done(Result<(), String>),
    InFlight(Checked),
}

/// Polls `fut` once (inside `ring`'s `enter` if given): what submits it.
fn start(ring: Option<&ReactorRing>, mut fut: Checked) -> Started {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let polled = match ring {
        Some(r) => r.enter(|| fut.as_mut().poll(&mut cx)),
        None => fut.as_mut().poll(&mut cx),
    };
    match polled {
        Poll::Ready(r) => Started::Done(r),
        Poll::Pending => Started::InFlight(fut),
    }
}

/// Finishes what [`start`] started.
fn finish(ring: Option<&ReactorRing>, started: Started) -> Result<(), String> {
    match started {
        Started::Done(r) => r,
        Started::InFlight(fut) => finish_on(ring, fut),
    }
}

/// Polls `fut` to completion, reaping `ring` between polls as its
/// executor would.
fn finish_on(ring: Option<&ReactorRing>, mut fut: Checked) -> Result<(), String> {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + CELL_LIMIT;
    loop {
        flag.0.store(false, Ordering::SeqCst);
        let polled = match ring {
            Some(r) => r.enter(|| fut.as_mut().poll(&mut cx)),
            None => fut.as_mut().poll(&mut cx),
        };
        if let Poll::Ready(v) = polled {
            return v;
        }
        while !flag.0.load(Ordering::SeqCst) {
            if Instant::now() > deadline {
                return Err("never completed".into());
            }
            if let Some(r) = ring {
                r.reap();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Windows has no fork (its cells are not applicable there).
#[cfg(windows)]
fn fork_child_goes_on(_: Driver, _: &Path) -> Result<(), String> {
    Err("no fork on Windows".into())
}

/// Forks; the child makes an engine of its own, reads with it, and exits
/// normally (`exit`, which runs the process's exit handlers). Returns once
/// the child has ended, or an error if it failed or hung.
#[cfg(target_os = "linux")]
fn fork_child_goes_on(d: Driver, data: &Path) -> Result<(), String> {
    let data = data.to_path_buf();
    // SAFETY: the child uses only what a fresh engine needs and leaves with
    // `exit`; nothing of the parent's threads is touched.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| {
            let engine = d.engine();
            let f = File::open(&engine, &data).wait().unwrap();
            let (res, buf) = f.read_at(vec![0u8; BS], 0).wait();
            res.is_ok() && buf == pattern(SEED, 0, BS)
        })
        .unwrap_or(false);
        std::process::exit(if ok { 0 } else { 3 });
    }
    let status = wait_pid_within(pid, Duration::from_secs(20))?;
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("the child ended with status {status}"))
    }
}

/// Runs one cell; `Err` says what went wrong.
fn run_cell(d: Driver, front: Front, event: Event, kind: Kind, env: Env) -> Result<(), String> {
    let feeder = (kind == Kind::Pipe).then(|| env.feeder());
    let slot = unique();
    let engine = env.engine.clone();
    let res = match front {
        Front::Wait => wait_cell(d, event, kind, &env, slot),
        Front::Foreign => foreign_cell(d, event, kind, &env, slot),
        Front::Port => port_cell(d, event, kind, &env, slot),
        Front::Reactor => reactor_cell(d, event, kind, &env, slot),
    };
    if let Some(f) = feeder {
        f.join().map_err(|_| "the feeder panicked".to_string())?;
    }
    // An open (without O_DIRECT) is one operation: in flight when the
    // engine shuts down, it completes with its file.
    res?;
    if !wait_until(CELL_LIMIT, || engine.in_flight() == (0, 0)) {
        return Err(format!(
            "budget not released: {:?} in flight",
            engine.in_flight()
        ));
    }
    let dir = env.dir.clone();
    drop(env);
    drop(engine);
    if event != Event::Appenders {
        check_written(&dir, kind, slot)?;
    }
    Ok(())
}

fn wait_cell(d: Driver, event: Event, kind: Kind, env: &Env, slot: u64) -> Result<(), String> {
    match event {
        Event::Dropped => {
            // A `block_on` whose future drops the operation mid-flight
            // returns only once the operation completed.
            let mut fut = op(env, kind, slot);
            overlapped::block_on(std::future::poll_fn(|cx| {
                let _ = fut.as_mut().poll(cx);
                Poll::Ready(())
            }));
            drop(fut);
            Ok(())
        }
        Event::Shutdown => {
            let fut = op(env, kind, slot);
            let t = std::thread::spawn(move || overlapped::block_on(fut));
            std::thread::sleep(Duration::from_millis(20));
            env.engine.shutdown();
            join_within(t)?
        }
        Event::Fork => {
            let fut = op(env, kind, slot);
            let t = std::thread::spawn(move || overlapped::block_on(fut));
            std::thread::sleep(Duration::from_millis(10));
            fork_child_goes_on(d, &env.data)?;
            join_within(t)?
        }
        Event::Appenders => appenders(env, |f, line| {
            let (res, _) = f.write_all_at(line, 0).wait();
            res.map_err(|e| e.to_string())
        }),
        _ => unreachable!("not applicable"),
    }
}

fn join_within<T>(t: std::thread::JoinHandle<T>) -> Result<T, String> {
    let deadline = Instant::now() + CELL_LIMIT;
    while !t.is_finished() {
        if Instant::now() > deadline {
            return Err("hung".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    t.join()
        .map_err(|p| format!("panicked: {}", panic_message(&*p)))
}

fn foreign_cell(d: Driver, event: Event, kind: Kind, env: &Env, slot: u64) -> Result<(), String> {
    match event {
        Event::SubmitterExits => {
            let fut = op(env, kind, slot);
            let started = std::thread::spawn(move || start(None, fut)).join().unwrap();
            finish(None, started)
        }
        Event::Moved => {
            let (tx, rx) = std::sync::mpsc::channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let fut = op(env, kind, slot);
            let t = std::thread::spawn(move || {
                tx.send(start(None, fut)).unwrap();
                // Alive while another thread finishes it.
                let _ = done_rx.recv();
            });
            let r = finish(None, rx.recv().unwrap());
            done_tx.send(()).unwrap();
            t.join().unwrap();
            r
        }
        Event::Dropped => {
            drop(start(None, op(env, kind, slot)));
            Ok(())
        }
        Event::ExecutorDropped => {
            use futures::task::LocalSpawnExt;
            let mut pool = futures::executor::LocalPool::new();
            let fut = op(env, kind, slot);
            pool.spawner()
                .spawn_local(async move {
                    let _ = fut.await;
                })
                .unwrap();
            pool.run_until_stalled();
            drop(pool);
            Ok(())
        }
        Event::Shutdown => {
            let started = start(None, op(env, kind, slot));
            env.engine.shutdown();
            finish(None, started)
        }
        Event::Fork => {
            let started = start(None, op(env, kind, slot));
            fork_child_goes_on(d, &env.data)?;
            finish(None, started)
        }
        Event::Appenders => appenders(env, |f, line| {
            let (res, _) = futures::executor::block_on(f.write_all_at(line, 0));
            res.map_err(|e| e.to_string())
        }),
    }
}

fn port_op(env: &Env, port: &Port<Vec<u8>>, kind: Kind, slot: u64) -> Result<(), String> {
    let engine = &env.engine;
    let sub = match kind {
        Kind::Direct => {
            // A port's buffers are of one type: direct I/O needs aligned
            // memory, so this cell reads through a port of its own.
            return Err("direct".into());
        }
        Kind::Uncached => {
            env.evict();
            let f = OpenOptions::new()
                .read(true)
                .access(overlapped::Access::Random)
                .open(engine, &env.data)
                .wait()
                .unwrap();
            let off = (slot * 7 % BLOCKS) * BS as u64;
            port.read_at(&f, vec![0u8; BS], off, off)
        }
        Kind::Write => {
            let f = File::create(engine, env.target(slot)).wait().unwrap();
            port.write_at(&f, pattern(slot, 0, BS), 0, u64::MAX)
        }
        Kind::Pipe => {
            let f = env.pipe_file();
            port.read_at(&f, vec![0u8; 5], 0, u64::MAX - 1)
        }
        Kind::Open => unreachable!("not applicable"),
    };
    sub.map_err(|(e, _)| e.to_string())
}

fn port_check(c: overlapped::Completion<Vec<u8>>) -> Result<(), String> {
    match c.key {
        u64::MAX => c.result.map(|_| ()).map_err(|e| format!("write: {e}")),
        k if k == u64::MAX - 1 => match c.result {
            Ok(5) if c.buf == b"piped" => Ok(()),
            other => Err(format!("pipe read: {other:?}")),
        },
        off => check_read(c.result, &c.buf, off),
    }
}

fn port_cell(d: Driver, event: Event, kind: Kind, env: &Env, slot: u64) -> Result<(), String> {
    if kind == Kind::Direct {
        return direct_port_cell(d, event, env, slot);
    }
    let port: Port<Vec<u8>> = Port::new(&env.engine);
    match event {
        Event::SubmitterExits => {
            std::thread::scope(|s| s.spawn(|| port_op(env, &port, kind, slot)).join().unwrap())?;
            port_check(port.next_timeout(CELL_LIMIT).ok_or("no completion")?)
        }
        Event::Dropped => {
            port_op(env, &port, kind, slot)?;
            drop(port);
            Ok(())
        }
        Event::Shutdown => {
            port_op(env, &port, kind, slot)?;
            env.engine.shutdown();
            port_check(port.next_timeout(CELL_LIMIT).ok_or("no completion")?)
        }
        Event::Fork => {
            port_op(env, &port, kind, slot)?;
            fork_child_goes_on(d, &env.data)?;
            port_check(port.next_timeout(CELL_LIMIT).ok_or("no completion")?)
        }
        Event::Appenders => appenders(env, |f, line| {
            let port: Port<Vec<u8>> = Port::new(f.engine());
            port.write_at(f, line, 0, 0)
                .map_err(|(e, _)| e.to_string())?;
            let c = port.next_timeout(CELL_LIMIT).ok_or("no completion")?;
            c.result.map(|_| ()).map_err(|e| e.to_string())
        }),
        _ => unreachable!("not applicable"),
    }
}

/// The direct-read cells of a port: a port of aligned buffers.
fn direct_port_cell(d: Driver, event: Event, env: &Env, slot: u64) -> Result<(), String> {
    let port: Port<AlignedBuf> = Port::new(&env.engine);
    let f = OpenOptions::new()
        .read(true)
        .direct(true)
        .open(&env.engine, &env.data)
        .wait()
        .unwrap();
    let off = (slot % BLOCKS) * BS as u64;
    let submit = || {
        port.read_at(&f, AlignedBuf::new(BS, BS).unwrap(), off, off)
            .map_err(|(e, _)| e.to_string())
    };
    let check = |c: Option<overlapped::Completion<AlignedBuf>>| {
        let c = c.ok_or("no completion")?;
        check_read(c.result, &c.buf[..], off)
    };
    match event {
        Event::SubmitterExits => {
            std::thread::scope(|s| s.spawn(submit).join().unwrap())?;
            check(port.next_timeout(CELL_LIMIT))
        }
        Event::Dropped => {
            submit()?;
            drop(port);
            Ok(())
        }
        Event::Shutdown => {
            submit()?;
            env.engine.shutdown();
            check(port.next_timeout(CELL_LIMIT))
        }
        Event::Fork => {
            submit()?;
            fork_child_goes_on(d, &env.data)?;
            check(port.next_timeout(CELL_LIMIT))
        }
        _ => unreachable!("not applicable"),
    }
}

/// Windows has no reactor rings (their cells are not applicable there).
#[cfg(windows)]
fn reactor_cell(_: Driver, _: Event, _: Kind, _: &Env, _: u64) -> Result<(), String> {
    Err("no reactor rings on Windows".into())
}

#[cfg(target_os = "linux")]
fn reactor_cell(d: Driver, event: Event, kind: Kind, env: &Env, slot: u64) -> Result<(), String> {
    let ring = ReactorRing::new().map_err(|e| format!("no reactor ring: {e}"))?;
    let res = match event {
        Event::SubmitterExits => {
            let started = std::thread::spawn({
                let (ring, fut) = (ring.clone(), op(env, kind, slot));
                move || start(Some(&ring), fut)
            })
            .join()
            .unwrap();
            finish(Some(&ring), started)
        }
        Event::Moved => {
            let (tx, rx) = std::sync::mpsc::channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let (r2, fut) = (ring.clone(), op(env, kind, slot));
            let t = std::thread::spawn(move || {
                tx.send(start(Some(&r2), fut)).unwrap();
                let _ = done_rx.recv();
            });
            let r = finish(Some(&ring), rx.recv().unwrap());
            done_tx.send(()).unwrap();
            t.join().unwrap();
            r
        }
        Event::Dropped => {
            drop(start(Some(&ring), op(env, kind, slot)));
            // The executor goes on reaping.
            let deadline = Instant::now() + CELL_LIMIT;
            while ring.in_flight() > 0 && Instant::now() < deadline {
                ring.reap();
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        }
        Event::ExecutorDropped => {
            let started = start(Some(&ring), op(env, kind, slot));
            // Nobody reaps it any more: the watcher completes the operation
            // and wakes its future.
            ring.orphan();
            finish(None, started)
        }
        Event::Shutdown => {
            let started = start(Some(&ring), op(env, kind, slot));
            env.engine.shutdown();
            finish(Some(&ring), started)
        }
        Event::Fork => {
            let started = start(Some(&ring), op(env, kind, slot));
            fork_child_goes_on(d, &env.data)?;
            finish(Some(&ring), started)
        }
        Event::Appenders => appenders(env, |f, line| {
            let ring = ReactorRing::new().map_err(|e| e.to_string())?;
            let fut: Checked = Box::pin({
                let f = f.clone();
                async move {
                    let (res, _) = f.write_all_at(line, 0).await;
                    res.map_err(|e| e.to_string())
                }
            });
            let r = finish_on(Some(&ring), fut);
            ring.orphan();
            r
        }),
    };
    ring.orphan();
    res
}

/// Four threads each append 50 lines of their own to one file opened with
/// `append(true)` (each line at offset 0: O_APPEND puts it at the end);
/// every line must be there, whole.
fn appenders(
    env: &Env,
    write: impl Fn(&File, Vec<u8>) -> Result<(), String> + Sync,
) -> Result<(), String> {
    let path = env.dir.join(format!("append-{}", unique()));
    let f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&env.engine, &path)
        .wait()
        .map_err(|e| e.to_string())?;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let (f, write) = (&f, &write);
                s.spawn(move || {
                    for i in 0..50 {
                        write(f, format!("appender {t} line {i:03}\n").into_bytes())?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        hs.into_iter()
            .try_for_each(|h| h.join().map_err(|_| "an appender panicked".to_string())?)
    })?;
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

#[cfg(target_os = "linux")]
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Windows: the process's open handles (`GetProcessHandleCount`).
#[cfg(windows)]
fn fds() -> usize {
    process_handles()
}

/// Windows: the process's threads.
#[cfg(windows)]
fn threads() -> usize {
    process_threads()
}

/// Threads of this process, less the kernel's io-wq workers (`iou-wrk-*`):
/// they belong to a live thread's io_uring and linger idle for seconds.
#[cfg(target_os = "linux")]
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .map(|c| !c.starts_with("iou-wrk"))
                .unwrap_or(true)
        })
        .count()
}

/// Runs every cell for `d`, in this process, and prints the table.
fn run_matrix(d: Driver) {
    let dir = tempdir();
    let data = dir.path().join("data");
    std_create_pattern(&data, SEED, BLOCKS as usize * BS);
    // (Windows flushes only through a handle that may write.)
    std::fs::OpenOptions::new()
        .read(true)
        .write(cfg!(windows))
        .open(&data)
        .unwrap()
        .sync_all()
        .unwrap();
    // Warm-up: this thread's own ring, the process's lazily made state (a
    // direct read: no cached answer on this thread, it waits on the ring).
    {
        let env = Env::new(d, dir.path(), &data);
        let _ = OpenOptions::new()
            .read(true)
            .direct(true)
            .open(&env.engine, &data)
            .wait()
            .unwrap()
            .read_at(AlignedBuf::new(BS, BS).unwrap(), 0)
            .wait();
    }
    let (mut passed, mut na, mut failed) = (0, 0, Vec::new());
    let mut reasons: Vec<&str> = Vec::new();
    println!("lifecycle matrix on {}:", d.name());
    for front in FRONTS {
        for event in EVENTS {
            let mut row = format!("  {front:?} x {event:?}:");
            for kind in KINDS {
                if let Some(why) = not_applicable(d, front, event, kind) {
                    na += 1;
                    if !reasons.contains(&why) {
                        reasons.push(why);
                    }
                    row += &format!(" {kind:?}=n/a");
                    continue;
                }
                let (fd0, th0) = (fds(), threads());
                let env = Env::new(d, dir.path(), &data);
                let started = Instant::now();
                let mut res = run_cell(d, front, event, kind, env);
                if res.is_ok() && !wait_until(Duration::from_secs(5), || fds() <= fd0) {
                    res = Err(format!("descriptors: {} after, {fd0} before", fds()));
                }
                if res.is_ok() && !wait_until(Duration::from_secs(5), || threads() <= th0) {
                    res = Err(format!("threads: {} after, {th0} before", threads()));
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
            println!("{row}");
        }
    }
    println!("  n/a: {}", reasons.join("; "));
    println!(
        "lifecycle matrix on {}: {passed} passed, {} failed, {na} not applicable",
        d.name(),
        failed.len()
    );
    assert!(failed.is_empty(), "failed cells:\n{}", failed.join("\n"));
}

fn in_child_per_driver(name: &str, d: Option<Driver>) {
    let Some(d) = d else { return };
    if is_child(name) {
        run_matrix(d);
        child_ok(name);
        return;
    }
    let out = run_child_within(name, &[], &[], Duration::from_secs(600));
    for l in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("lifecycle matrix") || l.starts_with("  "))
    {
        eprintln!("{l}");
    }
}

#[cfg(windows)]
#[test]
fn lifecycle_matrix_iocp() {
    in_child_per_driver("lifecycle_matrix_iocp", Some(Driver::iocp()));
}

#[cfg(target_os = "linux")]
#[test]
fn lifecycle_matrix_uring() {
    in_child_per_driver("lifecycle_matrix_uring", Driver::uring());
}

#[cfg(target_os = "linux")]
#[test]
fn lifecycle_matrix_aio() {
    in_child_per_driver("lifecycle_matrix_aio", Driver::aio());
}

#[test]
fn lifecycle_matrix_pool() {
    in_child_per_driver("lifecycle_matrix_pool", Some(Driver::pool()));
}
