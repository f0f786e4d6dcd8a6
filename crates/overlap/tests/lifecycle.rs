//! Operations outlive the thread, the executor and the process copy that
//! started them: the engine's side of the lifecycle matrix.
//!
//! Each scenario runs with a time limit (`within`): a hang is a failure,
//! never a hung test. Operations on pipes stand for the reads that never
//! complete on their own; evicted files for buffered reads that the kernel
//! finishes with task work on the submitting thread.

#[cfg(target_os = "linux")]
use std::future::Future;
use std::io::Write;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::path::Path;
#[cfg(target_os = "linux")]
use std::path::PathBuf;
#[cfg(target_os = "linux")]
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(target_os = "linux")]
use std::sync::mpsc;
use std::sync::Arc;
#[cfg(target_os = "linux")]
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::common::*;
#[cfg(target_os = "linux")]
use overlapped::{DriverKind, Engine, File, ReactorRing};
use overlapped::{OpenOptions, Port};

per_driver!(
    port_buffered_reads_of_an_exiting_submitter_complete,
    shutdown_waits_for_a_ports_operation_in_flight,
);

const LIMIT: Duration = Duration::from_secs(60);

/// A file of `len` bytes of pattern `seed`, written, synced and evicted
/// from the page cache (a loud skip if the kernel keeps it resident).
#[cfg(target_os = "linux")]
fn evicted_file(path: &Path, seed: u64, len: usize) -> bool {
    std_create_pattern(path, seed, len);
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: plain descriptor call.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise");
    let resident = resident_pages(&f, len);
    if resident > len / 4096 / 4 {
        eprintln!("SKIPPED: {resident} pages stayed in the page cache after POSIX_FADV_DONTNEED");
        return false;
    }
    true
}

/// Windows: the file written and synced; nothing evicts it from the
/// system's file cache, so the reads may be served from memory (said).
#[cfg(windows)]
fn evicted_file(path: &Path, seed: u64, len: usize) -> bool {
    std_create_pattern(path, seed, len);
    // (Flushing needs write access on Windows.)
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.sync_all().unwrap();
    eprintln!("note: on Windows the file stays in the system's file cache (no eviction)");
    true
}

#[cfg(target_os = "linux")]
fn resident_pages(f: &std::fs::File, len: usize) -> usize {
    // SAFETY: maps the file read-only, asks which pages are resident, and
    // unmaps it; every pointer is checked or local.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        let mut v = vec![0u8; len.div_ceil(4096)];
        assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0);
        libc::munmap(p, len);
        v.iter().filter(|b| **b & 1 == 1).count()
    }
}

/// A thread submits buffered reads of uncached data through a port
/// and exits at once. Linux finishes such a read with task work on the
/// submitter; once it has exited, on a kernel worker without the process's
/// memory (`EFAULT`). Every read must still come back with its data.
fn port_buffered_reads_of_an_exiting_submitter_complete(d: Driver) {
    const N: u64 = 2560;
    const BS: usize = 4096;
    // Reads 4 KiB of every 16 KiB, in a scattered order, with readahead
    // off: each one waits for the disk.
    const STRIDE: u64 = 4 * BS as u64;
    let at = |i: u64| (i * 997 % N) * STRIDE;
    let dir = tempdir();
    let path = dir.path().join("evicted");
    if !evicted_file(&path, 21, (N * STRIDE) as usize) {
        return;
    }
    let engine = d.engine();
    let file = OpenOptions::new()
        .read(true)
        .access(overlapped::Access::Random)
        .open(&engine, &path)
        .wait()
        .unwrap();
    let port: Port<Vec<u8>> = Port::new(&engine);
    let keys = within(LIMIT, {
        let (port, file) = (port.clone(), file.clone());
        move || {
            let (p2, f2) = (port.clone(), file.clone());
            std::thread::spawn(move || {
                let (port, file) = (p2, f2);
                for i in 0..N {
                    port.read_at(&file, vec![0u8; BS], at(i), i)
                        .unwrap_or_else(|(e, _)| panic!("{e}"));
                }
                // Exits with the reads in flight.
            })
            .join()
            .unwrap();
            let mut keys = Vec::new();
            while let Some(c) = port.next() {
                let n = c
                    .result
                    .unwrap_or_else(|e| panic!("read {} failed: {e}", c.key));
                assert_eq!(n, BS, "read {}", c.key);
                assert_pattern(&c.buf, 21, at(c.key));
                keys.push(c.key);
            }
            keys
        }
    })
    .unwrap_or_else(|e| panic!("{}: {e}", d.name()));
    assert_eq!(keys.len() as u64, N, "every read completed");
    eprintln!(
        "{}: resubmitted after the submitter exited: {}",
        d.name(),
        engine.stats().resubmitted_after_exit
    );
}

/// Opens a FIFO for reading through the engine without blocking (a writer
/// end is opened first), and returns the engine's file and the writer.
#[cfg(target_os = "linux")]
fn fifo_pair(engine: &Engine, dir: &Path, name: &str) -> (File, std::fs::File, PathBuf) {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    mkfifo(&path);
    // O_RDWR on a FIFO never blocks (Linux), and keeps a writer present.
    let keep = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    let file = OpenOptions::new()
        .read(true)
        .open(engine, &path)
        .wait()
        .unwrap();
    (file, keep, path)
}

/// `n` FIFOs opened for reading through the engine, with their writers.
#[cfg(target_os = "linux")]
fn fifo_pairs(engine: &Engine, dir: &Path, n: usize) -> (Vec<File>, Vec<std::fs::File>) {
    (0..n)
        .map(|i| {
            let (fifo, writer, _) = fifo_pair(engine, dir, &format!("fifo{i}"));
            (fifo, writer)
        })
        .unzip()
}

/// `Engine::shutdown` waits for an operation of a port that is in
/// flight (a read of a pipe nobody has written yet), as it does on the
/// pool; the completion is then there for the port's workers.
fn shutdown_waits_for_a_ports_operation_in_flight(d: Driver) {
    let dir = tempdir();
    let engine = d.engine();
    #[cfg(target_os = "linux")]
    let (file, mut writer, _path) = fifo_pair(&engine, dir.path(), "fifo");
    // Windows: a named pipe, read through the engine; std writes to it.
    #[cfg(windows)]
    let (file, mut writer) = {
        let _ = &dir;
        let (file, name) = named_pipe(&engine);
        let writer = std::fs::OpenOptions::new().write(true).open(name).unwrap();
        (file, writer)
    };
    let port: Port<Vec<u8>> = Port::new(&engine);
    port.read_at(&file, vec![0u8; 5], 0, 7)
        .unwrap_or_else(|(e, _)| panic!("{e}"));
    let returned = Arc::new(AtomicBool::new(false));
    let shut = {
        let (engine, returned) = (engine.clone(), returned.clone());
        watch(move || {
            engine.shutdown();
            returned.store(true, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !returned.load(Ordering::SeqCst),
        "{}: shutdown returned while the port's read was in flight",
        d.name()
    );
    writer.write_all(b"hello").unwrap();
    shut.wait(Instant::now() + LIMIT)
        .unwrap_or_else(|e| panic!("{}: shutdown: {e}", d.name()));
    let c = port
        .next_timeout(Duration::from_secs(10))
        .expect("the completion is there after shutdown");
    assert_eq!(c.key, 7);
    assert_eq!(c.result.unwrap(), 5);
    assert_eq!(&c.buf, b"hello");
}

// ------------------------------------------------------------ reactor rings

/// A waker that records that it fired.
#[cfg(target_os = "linux")]
struct Flag(AtomicBool);

#[cfg(target_os = "linux")]
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[cfg(target_os = "linux")]
fn uring_engine() -> Option<Engine> {
    let d = Driver::uring()?;
    let e = d.engine();
    (e.driver().kind == DriverKind::Uring).then_some(e)
}

#[cfg(target_os = "linux")]
fn ring_or_skip() -> Option<ReactorRing> {
    match ReactorRing::new() {
        Ok(r) => Some(r),
        Err(why) => {
            eprintln!("SKIPPED: io_uring unavailable: no reactor ring: {why}");
            None
        }
    }
}

#[cfg(target_os = "linux")]
type Read = Pin<Box<dyn Future<Output = (overlapped::Result<usize>, Vec<u8>)> + Send>>;

/// Polls `fut` until it is ready, reaping `ring` between polls (as an
/// executor's reaper would), or only waiting for a wake-up when `reap` is
/// false (nobody reaps the ring: the watcher must).
#[cfg(target_os = "linux")]
fn finish(
    mut fut: Read,
    ring: Option<&ReactorRing>,
    limit: Duration,
) -> (overlapped::Result<usize>, Vec<u8>) {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + limit;
    loop {
        flag.0.store(false, Ordering::SeqCst);
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        while !flag.0.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the operation never completed (hung)"
            );
            if let Some(r) = ring {
                r.reap();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A thread submits on a reactor ring (here through `flush`, as a
/// reaper task on another worker would) and exits. Linux cancels its pipe
/// read (`ECANCELED`) and faults its buffered reads of uncached data
/// (`EFAULT`); whoever reaps the ring submits them again through the
/// engine's driver, so they complete with their data.
#[cfg(target_os = "linux")]
#[test]
fn reactor_ring_operations_of_an_exiting_submitter_complete() {
    let Some(engine) = uring_engine() else { return };
    let Some(ring) = ring_or_skip() else { return };
    let dir = tempdir();
    let (fifo, mut writer, _p) = fifo_pair(&engine, dir.path(), "fifo");
    let path = dir.path().join("evicted");
    const N: u64 = 64;
    if !evicted_file(&path, 5, N as usize * 4096) {
        return;
    }
    let file = File::open(&engine, &path).wait().unwrap();
    let (tx, rx) = mpsc::channel::<Read>();
    {
        let (ring, fifo, file) = (ring.clone(), fifo.clone(), file.clone());
        std::thread::spawn(move || {
            let waker = &futures::task::noop_waker();
            let mut cx = Context::from_waker(waker);
            let mut pipe: Read = Box::pin(fifo.read_at(vec![0u8; 5], 0));
            assert!(ring.enter(|| pipe.as_mut().poll(&mut cx)).is_pending());
            tx.send(pipe).unwrap();
            for i in 0..N {
                let mut r: Read = Box::pin(file.read_at(vec![0u8; 4096], i * 4096));
                if ring.enter(|| r.as_mut().poll(&mut cx)).is_pending() {
                    tx.send(r).unwrap();
                }
            }
            ring.flush();
        })
        .join()
        .unwrap();
    }
    let reads: Vec<Read> = rx.into_iter().collect();
    let mut reads = reads.into_iter();
    let pipe = reads.next().unwrap();
    let rest: Vec<Read> = reads.collect();
    for (i, r) in rest.into_iter().enumerate() {
        let (res, buf) = finish(r, Some(&ring), LIMIT);
        assert_eq!(res.unwrap_or_else(|e| panic!("read {i}: {e}")), 4096);
        let _ = buf;
    }
    writer.write_all(b"hello").unwrap();
    let (res, buf) = finish(pipe, Some(&ring), LIMIT);
    assert_eq!(res.expect("the pipe read of an exited thread"), 5);
    assert_eq!(&buf[..5], b"hello");
    assert!(
        engine.stats().resubmitted_after_exit >= 1,
        "the pipe read was cancelled at the thread's exit and submitted again"
    );
}

/// A pipe read of `len` bytes polled once inside a fresh reactor ring's
/// `enter` (pending: nothing written yet), with what the test needs to go
/// on: the engine, the ring, the pipe's writer and the read's future.
#[cfg(target_os = "linux")]
struct PipeOnRing {
    engine: Engine,
    ring: ReactorRing,
    writer: std::fs::File,
    read: Read,
    _dir: tempfile::TempDir,
}

#[cfg(target_os = "linux")]
fn pipe_read_on_a_ring(len: usize) -> Option<PipeOnRing> {
    let engine = uring_engine()?;
    let ring = ring_or_skip()?;
    let dir = tempdir();
    let (fifo, writer, _p) = fifo_pair(&engine, dir.path(), "fifo");
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    let mut read: Read = Box::pin(fifo.read_at(vec![0u8; len], 0));
    assert!(ring.enter(|| read.as_mut().poll(&mut cx)).is_pending());
    Some(PipeOnRing {
        engine,
        ring,
        writer,
        read,
        _dir: dir,
    })
}

/// An orphaned ring: the watcher completes what is in flight on it (a pipe
/// read written to later) and wakes its future; operations polled inside
/// its `enter` afterwards go to the engine's driver.
#[cfg(target_os = "linux")]
#[test]
fn an_orphaned_ring_completes_its_operations() {
    let Some(PipeOnRing {
        engine,
        ring,
        mut writer,
        read: pipe,
        _dir: dir,
    }) = pipe_read_on_a_ring(5)
    else {
        return;
    };
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    assert_eq!(ring.in_flight(), 1);
    ring.orphan();
    assert!(ring.is_orphaned());
    let before = engine.stats().submitted_on_reactor_rings;
    let path = dir.path().join("f");
    std_create_pattern(&path, 3, 4096);
    let file = File::open(&engine, &path).wait().unwrap();
    let mut later: Read = Box::pin(file.read_at(vec![0u8; 4096], 0));
    let res = match ring.enter(|| later.as_mut().poll(&mut cx)) {
        Poll::Ready((res, _)) => res,
        Poll::Pending => finish(later, None, LIMIT).0,
    };
    assert_eq!(res.unwrap(), 4096);
    assert_eq!(
        engine.stats().submitted_on_reactor_rings,
        before,
        "nothing goes on an orphaned ring"
    );
    writer.write_all(b"later").unwrap();
    // Nobody reaps the ring but the watcher.
    let (res, buf) = finish(pipe, None, LIMIT);
    assert_eq!(res.unwrap(), 5);
    assert_eq!(&buf[..5], b"later");
    assert!(wait_until(LIMIT, || ring.in_flight() == 0));
}

/// Dropping the last handle of a ring with a pipe read in flight, without
/// orphaning it first: the drop returns at once (rather than waiting for
/// the read, forever if nobody writes), and the watcher completes the read.
#[cfg(target_os = "linux")]
#[test]
fn dropping_the_last_handle_of_a_busy_ring_does_not_block() {
    // The engine is kept to the end: dropping its last handle is a
    // shutdown, which waits for the pipe read in flight.
    let Some(PipeOnRing {
        engine: _engine,
        ring,
        mut writer,
        read: pipe,
        _dir,
    }) = pipe_read_on_a_ring(4)
    else {
        return;
    };
    let clone = ring.clone();
    drop(ring);
    assert!(!clone.is_orphaned(), "a handle is left: the ring is live");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(clone);
        let _ = tx.send(());
    });
    rx.recv_timeout(LIMIT)
        .expect("dropping the last handle blocked on the pipe read");
    writer.write_all(b"drop").unwrap();
    let (res, buf) = finish(pipe, None, LIMIT);
    assert_eq!(res.unwrap(), 4);
    assert_eq!(&buf[..4], b"drop");
}

/// A ring whose executor stops reaping it (a runtime that is not being
/// run): the watcher completes its operations, late but not lost.
#[cfg(target_os = "linux")]
#[test]
fn an_unreaped_ring_is_reaped_by_the_watcher() {
    let Some(engine) = uring_engine() else { return };
    let Some(ring) = ring_or_skip() else { return };
    let dir = tempdir();
    let (fifo, mut writer, _p) = fifo_pair(&engine, dir.path(), "fifo");
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    let mut r: Read = Box::pin(fifo.read_at(vec![0u8; 5], 0));
    let polled = ring.enter(|| r.as_mut().poll(&mut cx));
    assert!(polled.is_pending(), "nothing to read yet");
    writer.write_all(b"watch").unwrap();
    let start = Instant::now();
    let (res, buf) = finish(r, None, LIMIT);
    assert_eq!(res.unwrap(), 5);
    assert_eq!(&buf[..5], b"watch");
    eprintln!("completed by the watcher after {:?}", start.elapsed());
    assert!(engine.stats().reaped_by_watcher >= 1);
}

/// Reactor rings made and dropped one after another, while the engine's
/// thread watches them: it must hear every wake-up. (A wake-up that came
/// while it made a watcher's pass, followed by the last ring's drop, left
/// it asleep with no timeout and marked awake, so that every later wake-up
/// passed it by: operations handed to it, and the rings it should have
/// watched, waited for ever. tokio's `set_max_buf_size_write`, ported,
/// hung that way under load.)
#[cfg(target_os = "linux")]
#[test]
fn the_engine_thread_hears_every_wake_up_while_rings_come_and_go() {
    let engine = match Engine::builder()
        .driver(overlapped::DriverChoice::Uring)
        .cache_fast_path(false)
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("SKIPPED: io_uring unavailable: {e}");
            return;
        }
    };
    let dir = tempdir();
    let path = dir.path().join("f");
    std_create_pattern(&path, 9, 4096);
    let file = File::open(&engine, &path).wait().unwrap();
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    let end = Instant::now() + Duration::from_secs(3);
    let mut rounds = 0u64;
    while Instant::now() < end {
        let Some(ring) = ring_or_skip() else { return };
        // On the ring: its first submission nudges the engine's thread.
        let mut r: Read = Box::pin(file.read_at(vec![0u8; 16], 0));
        if ring.enter(|| r.as_mut().poll(&mut cx)).is_pending() {
            assert_eq!(finish(r, Some(&ring), LIMIT).0.unwrap(), 16);
        }
        drop(ring);
        // Through the engine's thread (a waker not of `block_on`).
        let d: Read = Box::pin(file.read_at(vec![0u8; 16], 0));
        let (res, _) = finish(d, None, Duration::from_secs(10));
        assert_eq!(res.unwrap(), 16, "round {rounds}");
        rounds += 1;
    }
    eprintln!("{rounds} rounds of a ring made, used and dropped");
    assert!(engine.stats().submitted_on_reactor_rings > 0);
}

/// An io_uring engine and a reactor ring for a test that counts how
/// submissions are batched; `None` (skipped, saying why) without io_uring
/// or when `OVERLAP_SUBMIT_BATCH` (which `why` the test cannot run with)
/// is set.
#[cfg(target_os = "linux")]
fn batching_ring(why: &str) -> Option<(Engine, ReactorRing)> {
    let engine = uring_engine()?;
    let ring = ring_or_skip()?;
    if std::env::var_os("OVERLAP_SUBMIT_BATCH").is_some() {
        eprintln!("SKIPPED: OVERLAP_SUBMIT_BATCH {why}");
        return None;
    }
    Some((engine, ring))
}

/// A ring with a flusher, whose reap has just woken many futures: their
/// next submissions are all queued for the flusher, which submits them in
/// one call, even while few are in flight yet. (Counting only what was in
/// flight, the first 8 each entered the kernel alone: a busy executor whose
/// ring had run low went on at one read per system call.) Once the flusher
/// has run, a lone read goes in at once again.
#[cfg(target_os = "linux")]
#[test]
fn submissions_after_a_reap_that_woke_many_futures_go_in_together() {
    let Some((engine, ring)) = batching_ring("sets the batch this test counts on") else {
        return;
    };
    /// More than the 8 in flight from which submissions wait for the flusher.
    const K: usize = 16;
    let dir = tempdir();
    let flusher = Arc::new(Flag(AtomicBool::new(false)));
    ring.set_flusher(&Waker::from(flusher.clone()));
    let (fifos, mut writers) = fifo_pairs(&engine, dir.path(), K);
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    let calls = || engine.stats().submit_syscalls;
    // Polls a read of every FIFO, then flushes as the flusher would; gives
    // the reads and the submitting calls the polls made. (The engine's
    // ring watcher may submit what is queued too, and does not count it:
    // only the polls' calls are exact.)
    let start_reads = |cx: &mut Context<'_>| -> (Vec<Read>, u64) {
        let before = calls();
        flusher.0.store(false, Ordering::SeqCst);
        let reads = fifos
            .iter()
            .map(|fifo| {
                let mut r: Read = Box::pin(fifo.read_at(vec![0u8; 5], 0));
                assert!(ring.enter(|| r.as_mut().poll(cx)).is_pending());
                r
            })
            .collect();
        let by_polls = calls() - before;
        assert!(
            flusher.0.load(Ordering::SeqCst),
            "the first entry queued for the flusher woke it"
        );
        let before_flush = calls();
        ring.flush();
        assert_eq!(ring.queued(), 0, "the flush submitted what was queued");
        assert!(calls() - before_flush <= 1, "one call for the flush");
        (reads, by_polls)
    };
    let complete = |reads: Vec<Read>, writers: &mut [std::fs::File]| {
        for writer in writers.iter_mut() {
            writer.write_all(b"hello").unwrap();
        }
        for r in reads {
            let (res, buf) = finish(r, Some(&ring), LIMIT);
            assert_eq!(res.unwrap(), 5);
            assert_eq!(&buf[..5], b"hello");
        }
    };
    // Nothing reaped yet: the first 8 go in at once, one call each; the
    // rest wait for the flush.
    let (first, cold) = start_reads(&mut cx);
    complete(first, &mut writers);
    // The reaps woke K futures: all K of their next reads wait for it.
    let (second, after_reap) = start_reads(&mut cx);
    eprintln!("{K} reads: {cold} calls by the polls before a reap, {after_reap} after one");
    assert_eq!(cold, 8);
    assert_eq!(
        after_reap, 0,
        "{K} reads after a reap entered the kernel alone"
    );
    complete(second, &mut writers);
    // The flush forgot the woken futures that never submitted again: one
    // read at a time goes in at once (after at most one more deferral,
    // which the flusher submits).
    for i in 0..20 {
        let mut r: Read = Box::pin(fifos[0].read_at(vec![0u8; 5], 0));
        assert!(ring.enter(|| r.as_mut().poll(&mut cx)).is_pending());
        if ring.queued() > 0 {
            assert_eq!(i, 0, "read {i}, alone in flight, waited for the flusher");
            ring.flush();
        }
        complete(vec![r], &mut writers[..1]);
    }
}

/// A ring's own batch limit (`set_batch_limit`, an asyncio hub's 16):
/// after a reap that woke many futures, their reads wait for the flusher
/// only until a batch is full, whose last entry submits it; the default
/// (32) would have held all 16.
#[cfg(target_os = "linux")]
#[test]
fn a_rings_batch_limit_submits_each_full_batch_at_once() {
    let Some((engine, ring)) = batching_ring("overrides the ring's batch limit") else {
        return;
    };
    const K: usize = 16;
    const BATCH: usize = 4;
    let dir = tempdir();
    ring.set_flusher(&Waker::from(Arc::new(Flag(AtomicBool::new(false)))));
    ring.set_batch_limit(BATCH);
    let (fifos, mut writers) = fifo_pairs(&engine, dir.path(), K);
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    let mut round = |cx: &mut Context<'_>| -> u64 {
        let before = engine.stats().submit_syscalls;
        let reads: Vec<Read> = fifos
            .iter()
            .map(|fifo| {
                let mut r: Read = Box::pin(fifo.read_at(vec![0u8; 5], 0));
                assert!(ring.enter(|| r.as_mut().poll(cx)).is_pending());
                r
            })
            .collect();
        let by_polls = engine.stats().submit_syscalls - before;
        ring.flush();
        for writer in writers.iter_mut() {
            writer.write_all(b"hello").unwrap();
        }
        for r in reads {
            let (res, buf) = finish(r, Some(&ring), LIMIT);
            assert_eq!(res.unwrap(), 5);
            assert_eq!(&buf[..5], b"hello");
        }
        by_polls
    };
    // The first round reaps K: the second's reads are all deferred, in
    // batches of BATCH.
    round(&mut cx);
    let calls = round(&mut cx);
    eprintln!("{K} reads after a reap, batches of {BATCH}: {calls} calls by the polls");
    assert_eq!(calls, (K / BATCH) as u64, "one call per full batch");
}

/// Two rings of one engine (a multi-thread runtime's workers): with more
/// than 8 of the engine's reads in flight on one ring, a read polled on the
/// other, idle one waits for that ring's flusher. (Counting only its own
/// ring, it entered the kernel alone: at 64 tokio tasks on two workers,
/// whose tasks move between the rings, 0.43 system calls per read.)
#[cfg(target_os = "linux")]
#[test]
fn a_shallow_ring_defers_while_the_engine_has_many_in_flight_on_another() {
    let Some(engine) = uring_engine() else { return };
    let (Some(deep), Some(shallow)) = (ring_or_skip(), ring_or_skip()) else {
        return;
    };
    if std::env::var_os("OVERLAP_SUBMIT_BATCH").is_some() {
        eprintln!("SKIPPED: OVERLAP_SUBMIT_BATCH sets the batching this test counts on");
        return;
    }
    const K: usize = 12;
    let dir = tempdir();
    let flag = |ring: &ReactorRing| {
        let f = Arc::new(Flag(AtomicBool::new(false)));
        ring.set_flusher(&Waker::from(f.clone()));
        f
    };
    let (_deep_flusher, shallow_flusher) = (flag(&deep), flag(&shallow));
    let (fifos, mut writers) = fifo_pairs(&engine, dir.path(), K + 1);
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    // Polls a read on `ring`; gives it with the submitting calls the poll
    // made (exact: the engine's ring watcher, which may submit what is
    // queued, does not count its calls).
    let mut start = |ring: &ReactorRing, fifo: &File| -> (Read, u64) {
        let before = engine.stats().submit_syscalls;
        let mut r: Read = Box::pin(fifo.read_at(vec![0u8; 5], 0));
        assert!(ring.enter(|| r.as_mut().poll(&mut cx)).is_pending());
        (r, engine.stats().submit_syscalls - before)
    };
    // The first 8 go in at once, one call each.
    let (mut reads, calls): (Vec<(Read, bool)>, Vec<u64>) = fifos[..K]
        .iter()
        .map(|f| {
            let (r, calls) = start(&deep, f);
            ((r, true), calls)
        })
        .unzip();
    assert_eq!(calls[..8], [1; 8]);
    deep.flush();
    assert_eq!(deep.in_flight(), K);
    let (lone, calls) = start(&shallow, &fifos[K]);
    assert_eq!(
        calls, 0,
        "a read on an idle ring entered the kernel alone while the engine had {K} in flight"
    );
    assert!(
        shallow_flusher.0.load(Ordering::SeqCst),
        "its flusher was woken"
    );
    shallow.flush();
    assert_eq!(shallow.queued(), 0);
    reads.push((lone, false));
    for ((r, on_deep), w) in reads.into_iter().zip(&mut writers) {
        w.write_all(b"hello").unwrap();
        let ring = if on_deep { &deep } else { &shallow };
        let (res, buf) = finish(r, Some(ring), LIMIT);
        assert_eq!((res.unwrap(), &buf[..5]), (5, &b"hello"[..]));
    }
}

/// After `fork` (the engine's part), the child drops, drains and
/// orphans a reactor ring made by the parent without touching it: the
/// child exits at once, and the parent's pipe read completes in the parent
/// with the parent's data.
#[cfg(target_os = "linux")]
#[test]
fn a_forked_child_leaves_the_parents_ring_alone() {
    let Some(engine) = uring_engine() else { return };
    let Some(ring) = ring_or_skip() else { return };
    let dir = tempdir();
    let (fifo, mut writer, _p) = fifo_pair(&engine, dir.path(), "fifo");
    let waker = &futures::task::noop_waker();
    let mut cx = Context::from_waker(waker);
    let mut pipe: Read = Box::pin(fifo.read_at(vec![0u8; 6], 0));
    assert!(ring.enter(|| pipe.as_mut().poll(&mut cx)).is_pending());
    // SAFETY: the child only touches the ring's handle (no allocation on a
    // lock another thread may hold is needed for that: the calls return at
    // once in a child) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // The child's copy of the read fails with a clear error once the
        // child touches the ring; the parent's engine refuses work here.
        let code = if ring.in_flight() == 0 && ring.reap() == 0 {
            ring.flush();
            ring.drain();
            ring.orphan();
            let inherited = matches!(
                pipe.as_mut().poll(&mut cx),
                Poll::Ready((Err(overlapped::Error::Forked(_)), _))
            );
            // Through the engine's driver (its thread is the parent's):
            // refused with what to do.
            let refused = matches!(
                futures::executor::block_on(File::open(&engine, dir.path().join("any"))),
                Err(overlapped::Error::Forked(_))
            );
            drop(ring);
            if inherited && refused {
                0
            } else {
                4
            }
        } else {
            3
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let status = wait_pid_within(pid, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("on the parent's ring: {e}"));
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
    writer.write_all(b"parent").unwrap();
    let (res, buf) = finish(pipe, Some(&ring), LIMIT);
    assert_eq!(res.unwrap(), 6);
    assert_eq!(&buf[..6], b"parent");
}
