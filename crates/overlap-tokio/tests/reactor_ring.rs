//! Completions through tokio's reactor: operations polled on tokio threads
//! go on those threads' rings and complete without the engine's thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use overlapped::{DriverChoice, DriverKind, Engine, OpenOptions};
use overlapped_tokio::on_ring;

const BLOCK: usize = 4096;
const BLOCKS: usize = 256;

fn runtimes() -> Vec<(&'static str, tokio::runtime::Runtime)> {
    vec![
        (
            "current_thread",
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
        (
            "multi_thread",
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        ),
    ]
}

/// A file of `BLOCKS` blocks, block `i` filled with byte `i`.
fn make_file(engine: &Engine, dir: &std::path::Path) -> overlapped::File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(engine, dir.join("data"))
        .wait()
        .unwrap();
    let mut all = Vec::with_capacity(BLOCK * BLOCKS);
    for i in 0..BLOCKS {
        all.extend(std::iter::repeat_n(i as u8, BLOCK));
    }
    let (res, _) = file.write_all_at(all, 0).wait();
    res.unwrap();
    file
}

/// The file `make_file` wrote, opened again with O_DIRECT (the page cache,
/// and so the engine's fast path, answers nothing); `None` after a SKIPPED
/// line where the file system refuses O_DIRECT.
fn reopen_direct(engine: &Engine, dir: &std::path::Path) -> Option<Arc<overlapped::File>> {
    match OpenOptions::new()
        .read(true)
        .direct(true)
        .open(engine, dir.join("data"))
        .wait()
    {
        Ok(f) => Some(Arc::new(f)),
        Err(e) => {
            eprintln!("SKIPPED: O_DIRECT refused by this file system: {e}");
            None
        }
    }
}

fn uses_rings(engine: &Engine) -> bool {
    engine.driver().kind == DriverKind::Uring
}

/// An engine on each driver this machine has (io_uring skipped loudly
/// where the kernel refuses it), each of its own: other tests run beside.
fn engines() -> Vec<Engine> {
    let mut v = Vec::new();
    if overlapped_tokio::engine().driver().kind != DriverKind::Uring {
        // Threads make no reactor rings while the process's engine is on
        // the pool (`OVERLAP_DRIVER=pool`, the suite's second run).
        eprintln!("SKIPPED: reactor rings with the process engine on the pool");
    } else {
        match Engine::builder().driver(DriverChoice::Uring).build() {
            Ok(e) => v.push(e),
            Err(e) => eprintln!("SKIPPED: io_uring unavailable: {e}"),
        }
    }
    v.push(
        Engine::builder()
            .driver(DriverChoice::Pool)
            .build()
            .unwrap(),
    );
    v
}

#[test]
fn concurrent_reads_complete_through_the_reactor() {
    for engine in &engines() {
        concurrent_reads(engine);
    }
}

fn concurrent_reads(engine: &Engine) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = Arc::new(make_file(engine, dir.path()));
    for (name, rt) in runtimes() {
        let before = engine.stats();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..BLOCKS {
                let file = file.clone();
                tasks.push(tokio::spawn(async move {
                    let off = (i * BLOCK) as u64;
                    let (res, buf) = on_ring(file.read_at(vec![0u8; BLOCK], off)).await;
                    assert_eq!(res.unwrap(), BLOCK);
                    assert!(buf.iter().all(|&b| b == i as u8), "block {i} read wrong");
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let after = engine.stats();
        let on_rings = after.submitted_on_reactor_rings - before.submitted_on_reactor_rings;
        if uses_rings(engine) {
            // The cache fast path may answer some reads on the spot; every
            // read that reached the driver went on a reactor ring.
            let fast = after.fast_path_hits - before.fast_path_hits;
            assert_eq!(
                on_rings + fast,
                BLOCKS as u64,
                "{name}: every read on a tokio thread's ring"
            );
        } else {
            assert_eq!(on_rings, 0, "{name}: a pool engine ignores reactor rings");
        }
    }
}

#[test]
fn direct_reads_complete_asynchronously_through_the_reactor() {
    for engine in &engines() {
        direct_reads(engine);
    }
}

fn direct_reads(engine: &Engine) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    drop(make_file(engine, dir.path()));
    let Some(file) = reopen_direct(engine, dir.path()) else {
        return; // SKIPPED printed
    };
    let pool = overlapped::AlignedBufPool::for_file(&file, BLOCK, 64).unwrap();
    for (name, rt) in runtimes() {
        let before = engine.stats();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..16 {
                let file = file.clone();
                let pool = pool.clone();
                tasks.push(tokio::spawn(async move {
                    for k in 0..16 {
                        let i = (t * 16 + k) % BLOCKS;
                        let (res, buf) =
                            on_ring(file.read_at(pool.get(), (i * BLOCK) as u64)).await;
                        assert_eq!(res.unwrap(), BLOCK);
                        assert!(buf.iter().all(|&b| b == i as u8));
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let after = engine.stats();
        let expected = if uses_rings(engine) { 256 } else { 0 };
        assert_eq!(
            after.submitted_on_reactor_rings - before.submitted_on_reactor_rings,
            expected,
            "{name}"
        );
        assert_eq!(after.errors, before.errors, "{name}");
    }
}

/// A runtime dropped while its tasks' reads are in flight: the reads still
/// complete (the thread drains its ring), nothing hangs, and the next
/// runtime on the same thread gets a working ring.
#[test]
fn runtime_dropped_with_reads_in_flight() {
    let engine = overlapped_tokio::engine();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = Arc::new(make_file(engine, dir.path()));
    for round in 0..3 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            for i in 0..64 {
                let file = file.clone();
                tokio::spawn(async move {
                    let _ = on_ring(file.read_at(vec![0u8; BLOCK], (i * BLOCK) as u64)).await;
                });
            }
            // Let the tasks submit, then leave with their reads in flight.
            tokio::task::yield_now().await;
        });
        drop(rt);
        let deadline = Instant::now() + Duration::from_secs(10);
        // The old ring is drained by the next use on this thread.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (res, buf) = rt.block_on(on_ring(file.read_at(vec![0u8; BLOCK], 0)));
        assert_eq!(res.unwrap(), BLOCK, "round {round}");
        assert!(buf.iter().all(|&b| b == 0));
        while engine.in_flight().0 > 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: operations never completed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A runtime without its I/O driver cannot host a ring: operations go
/// through the engine's driver instead, and still complete.
#[test]
fn runtime_without_io_driver_falls_back() {
    let engine = overlapped_tokio::engine();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = Arc::new(make_file(engine, dir.path()));
    // A thread of its own: rings are per thread, and this one must not have
    // one from another test.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let before = overlapped_tokio::engine().stats();
        let (res, buf) = rt.block_on(on_ring(file.read_at(vec![0u8; BLOCK], BLOCK as u64)));
        assert_eq!(res.unwrap(), BLOCK);
        assert!(buf.iter().all(|&b| b == 1));
        let after = overlapped_tokio::engine().stats();
        assert_eq!(
            after.submitted_on_reactor_rings,
            before.submitted_on_reactor_rings
        );
    })
    .join()
    .unwrap();
}

/// Shutting an engine down from inside a current-thread runtime while its
/// operations are in flight on that thread's ring: the shutdown reaps the
/// ring itself (the runtime's reaper cannot run while it blocks).
#[test]
fn shutdown_inside_the_runtime_does_not_deadlock() {
    let Some(engine) = engines().into_iter().find(uses_rings) else {
        return; // SKIPPED printed by engines()
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = Arc::new(make_file(&engine, dir.path()));
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut ops = Vec::new();
            for i in 0..32 {
                let file = file.clone();
                ops.push(tokio::spawn(async move {
                    on_ring(file.sync_all()).await.ok();
                    on_ring(file.read_at(vec![0u8; BLOCK], (i * BLOCK) as u64))
                        .await
                        .0
                        .ok()
                }));
            }
            tokio::task::yield_now().await;
            engine.shutdown();
            let (res, _) = file.read_at(vec![0u8; BLOCK], 0).await;
            assert!(matches!(res, Err(overlapped::Error::Shutdown)), "{res:?}");
        });
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("engine shutdown inside a current-thread runtime hung");
    t.join().unwrap();
}

/// A read buffer whose `Drop` panics (once).
struct PanicOnDrop {
    buf: Vec<u8>,
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !self.dropped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            panic!("deliberate panic in a buffer's Drop");
        }
    }
}

// SAFETY: the bytes live in the Vec's heap allocation, which does not move
// with the value and is never reallocated.
unsafe impl overlapped::IoBuf for PanicOnDrop {
    fn stable_ptr(&self) -> *const u8 {
        self.buf.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.buf.len()
    }
}

// SAFETY: as above; every byte of the Vec is initialised.
unsafe impl overlapped::IoBufMut for PanicOnDrop {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.buf.as_mut_ptr()
    }
}

/// A FIFO to gate reads: a read of it stays in flight until data is
/// written. Returns the engine's read end and the writer.
fn fifo_gate(
    engine: &Engine,
    dir: &std::path::Path,
    name: &str,
) -> (overlapped::File, std::fs::File) {
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = dir.join(name);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let end = |write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap()
    };
    // A reader first, so that the non-blocking writer may open; the
    // writer then lets the engine's blocking open return. The extra reader
    // is leaked with the test (it must outlive the writes).
    std::mem::forget(end(false));
    let writer = end(true);
    let gated = OpenOptions::new()
        .read(true)
        .open(engine, &fifo)
        .wait()
        .unwrap();
    (gated, writer)
}

/// User code that panics when a completion is reaped (the buffer of a read
/// whose future was dropped) does not kill the ring's reaper: a read that
/// completes afterwards, while nothing else is polled on that thread, is
/// still delivered.
#[test]
fn a_panic_in_user_code_on_the_reaper_is_contained() {
    let Some(engine) = engines().into_iter().find(uses_rings) else {
        return; // SKIPPED printed by engines()
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (gated1, mut writer1) = fifo_gate(&engine, dir.path(), "gate1");
    let (gated2, mut writer2) = fifo_gate(&engine, dir.path(), "gate2");
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async move {
            let buf = PanicOnDrop {
                buf: vec![0u8; 16],
                dropped: dropped.clone(),
            };
            {
                let mut op = std::pin::pin!(on_ring(gated1.read_at(buf, 0)));
                let polled = futures_poll_once(op.as_mut()).await;
                assert!(polled.is_pending(), "the gated read completed at once");
                // Dropped in flight: the engine keeps the buffer until the
                // completion and drops it (panicking) where it reaps.
            }
            let later = tokio::spawn(on_ring(async move {
                let (res, buf) = gated2.read_at(vec![0u8; 16], 0).await;
                (res.ok(), buf)
            }));
            tokio::task::yield_now().await; // let it submit
            std::io::Write::write_all(&mut writer1, b"first").unwrap();
            while !dropped.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            std::io::Write::write_all(&mut writer2, b"second").unwrap();
            tokio::time::timeout(Duration::from_secs(5), later).await
        });
        let _ = tx.send(got.map(|r| r.map(|(n, buf)| (n, buf[..5].to_vec()))));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the runtime thread hung");
    let (n, head) = got
        .expect("the read completed after the panic was never delivered")
        .expect("the reading task failed");
    assert_eq!(n, Some(6));
    assert_eq!(head, b"secon");
}

/// Polls `fut` once, from inside a task (so with a tokio waker).
async fn futures_poll_once<F: std::future::Future + ?Sized>(
    fut: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    let mut fut = Some(fut);
    std::future::poll_fn(move |cx| {
        let f = fut.take().expect("polled once");
        let mut f = f;
        std::task::Poll::Ready(f.as_mut().poll(cx))
    })
    .await
}

/// Many tasks submitting at once on one thread: their entries are queued
/// and handed to the kernel in batches by the ring's flusher, not one
/// system call each (`OVERLAP_SUBMIT_BATCH=1` turns batching off).
///
/// The reads are of an empty pipe, so every one stays in flight until the
/// pipe's last writer closes it, whatever the machine's speed (reads of a
/// disk file were answered within their submitting call on some virtual
/// disks, and then nothing stayed in flight to batch).
#[test]
fn submissions_of_ready_tasks_are_batched() {
    const READS: usize = 64;
    let Some(engine) = engines().into_iter().find(uses_rings) else {
        return; // SKIPPED printed by engines()
    };
    if std::env::var("OVERLAP_SUBMIT_BATCH").is_ok_and(|v| v.trim() == "1") {
        eprintln!("SKIPPED: submission batching turned off by OVERLAP_SUBMIT_BATCH=1");
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (file, writer) = fifo_gate(&engine, dir.path(), "fifo");
    let file = Arc::new(file);
    let warm = make_file(&engine, dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The thread's ring and its flusher start with the first operation.
    let (res, _) = rt.block_on(on_ring(warm.read_at(vec![0u8; BLOCK], 0)));
    res.unwrap();
    let before = engine.stats();
    let counts = rt.block_on(async {
        let tasks: Vec<_> = (0..READS)
            .map(|_| {
                let file = file.clone();
                tokio::spawn(on_ring(
                    async move { file.read_at(vec![0u8; 16], 0).await.0 },
                ))
            })
            .collect();
        while engine.in_flight().0 < READS {
            tokio::task::yield_now().await;
        }
        let mid = engine.stats();
        drop(writer); // the last writer: every read in flight ends at EOF
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), 0, "a read of a closed pipe");
        }
        mid
    });
    let ops = counts.submitted_on_reactor_rings - before.submitted_on_reactor_rings;
    let calls = counts.submit_syscalls - before.submit_syscalls;
    assert_eq!(ops, READS as u64);
    eprintln!("{ops} pipe reads in flight at once: {calls} submitting calls");
    assert!(
        calls * 4 <= ops,
        "{ops} reads took {calls} submitting system calls: not batched"
    );
}

/// `overlapped_tokio::fs` polls its engine operations on the tokio thread's
/// ring (other tests share the process engine, so this is a lower bound).
#[test]
fn fs_operations_go_through_reactor_rings() {
    let engine = overlapped_tokio::engine();
    if engine.driver().kind != DriverKind::Uring {
        eprintln!("SKIPPED: reactor rings with the process engine on the pool");
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("f");
    for (name, rt) in runtimes() {
        let before = engine.stats().submitted_on_reactor_rings;
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut f = overlapped_tokio::fs::File::create(&path).await.unwrap();
            for _ in 0..10 {
                f.write_all(&[7u8; 4096]).await.unwrap();
                f.flush().await.unwrap();
            }
            f.sync_all().await.unwrap();
            drop(f);
            let mut f = overlapped_tokio::fs::File::open(&path).await.unwrap();
            let mut back = Vec::new();
            f.read_to_end(&mut back).await.unwrap();
            assert_eq!(back.len(), 40960, "{name}");
        });
        let on_rings = engine.stats().submitted_on_reactor_rings - before;
        // The create, ten writes and a sync (the open of a cached path and
        // reads of the cached file may be answered on the calling thread
        // without a submission).
        assert!(
            on_rings >= 12,
            "{name}: only {on_rings} operations on reactor rings"
        );
    }
}

/// Entries queued for the flusher when the runtime goes away are still
/// submitted: an engine shut down afterwards does not wait forever for
/// operations that never reached the kernel.
#[test]
fn queued_submissions_are_not_stranded_by_a_dropped_runtime() {
    let Some(engine) = engines().into_iter().find(uses_rings) else {
        return; // SKIPPED printed by engines()
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    drop(make_file(&engine, dir.path()));
    let Some(file) = reopen_direct(&engine, dir.path()) else {
        return; // SKIPPED printed
    };
    let pool = overlapped::AlignedBufPool::for_file(&file, BLOCK, BLOCKS + 1).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..20 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // The ring and its flusher exist from the first operation on.
            let (res, _) = rt.block_on(on_ring(file.read_at(pool.get(), 0)));
            res.unwrap();
            rt.block_on(async {
                for i in 0..BLOCKS {
                    let file = file.clone();
                    let buf = pool.get();
                    tokio::spawn(on_ring(async move {
                        let _ = file.read_at(buf, (i * BLOCK) as u64).await;
                    }));
                }
                // Every task submits (most only queue), then the runtime
                // goes with the flusher not yet run.
                tokio::task::yield_now().await;
            });
            drop(rt);
        }
        engine.shutdown();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("shutdown waited forever for operations queued on a reactor ring");
}

/// Buffers registered with the engine (`Engine::register_buffers`) go
/// fixed on the tokio threads' rings too: each ring registers the pool on
/// its first operation, on either flavour of runtime.
#[test]
fn registered_buffers_go_fixed_on_reactor_rings() {
    for engine in &engines() {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        drop(make_file(engine, dir.path()));
        let Some(file) = reopen_direct(engine, dir.path()) else {
            return;
        };
        // One buffer per read: every read is into the registered arena.
        let pool = overlapped::AlignedBufPool::contiguous(BLOCK, BLOCK, BLOCKS).unwrap();
        let registered = engine.register_buffers(&pool).unwrap();
        assert_eq!(registered, uses_rings(engine));
        for (name, rt) in runtimes() {
            let before = engine.stats();
            rt.block_on(async {
                let mut tasks = Vec::new();
                for i in 0..BLOCKS {
                    let (file, pool) = (file.clone(), pool.clone());
                    tasks.push(tokio::spawn(async move {
                        let off = (i * BLOCK) as u64;
                        let (res, buf) = on_ring(file.read_at(pool.get(), off)).await;
                        assert_eq!(res.unwrap(), BLOCK);
                        assert!(buf.iter().all(|&b| b == i as u8), "block {i} read wrong");
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            });
            let after = engine.stats();
            let fixed = after.fixed_buffer_ops - before.fixed_buffer_ops;
            if registered {
                let on_rings = after.submitted_on_reactor_rings - before.submitted_on_reactor_rings;
                assert_eq!(
                    on_rings, BLOCKS as u64,
                    "{name}: every read on a reactor ring"
                );
                assert_eq!(fixed, BLOCKS as u64, "{name}: every read went fixed");
            } else {
                assert_eq!(fixed, 0, "{name}: no ring, nothing registered");
            }
        }
    }
}
