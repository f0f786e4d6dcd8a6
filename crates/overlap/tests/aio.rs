//! The Linux AIO driver (`aio+pool`): which operations it hands to the
//! kernel, the errors it reports, and what a dropped future leaves behind.
//! Every test skips loudly where `io_setup` fails (the per-driver scenarios
//! of the other files run on it too).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use crate::common::*;
use futures::future::{self as future, join_all, Either};
use overlapped::{AlignedBufPool, AlignmentPart, DriverKind, Engine, Error, OpenOptions};

fn aio_engine() -> Option<Engine> {
    let d = Driver::aio()?;
    let e = d.engine();
    assert_eq!(e.driver().kind, DriverKind::Aio);
    Some(e)
}

/// A file of `blocks` 4 KiB blocks of pattern `seed`, opened with O_DIRECT.
fn direct_file(
    engine: &Engine,
    dir: &tempfile::TempDir,
    seed: u64,
    blocks: usize,
) -> overlapped::File {
    let path = dir.path().join(format!("direct-{seed}"));
    std_create_pattern(&path, seed, blocks * 4096);
    open_direct(engine, &path)
}

#[test]
fn direct_reads_writes_and_syncs_go_to_aio_buffered_ones_to_the_pool() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = direct_file(&engine, &dir, 201, 64);
    let pool = AlignedBufPool::for_file(&file, 4096, 64).unwrap();
    let s0 = engine.stats();
    // 64 reads in flight together: all through io_submit.
    let reads = (0..64u64).map(|i| file.read_at(pool.get(), i * 4096));
    for (i, (res, buf)) in futures::executor::block_on(join_all(reads))
        .into_iter()
        .enumerate()
    {
        assert_eq!(res.unwrap(), 4096);
        assert_pattern(&buf, 201, i as u64 * 4096);
    }
    // Writes through AIO land where they should.
    let writes = (0..16u64).map(|i| {
        let mut b = pool.get();
        fill_pattern(&mut b, 202, i * 4096);
        file.write_all_at(b, i * 4096)
    });
    for (res, _) in futures::executor::block_on(join_all(writes)) {
        res.unwrap();
    }
    file.sync_data().wait().unwrap();
    file.sync_all().wait().unwrap();
    let s1 = engine.stats();
    let aio = s1.submitted_aio - s0.submitted_aio;
    // 64 reads + 16 writes, and the two syncs unless this kernel lacks
    // IOCB_CMD_FSYNC/FDSYNC (before 4.18), when they went to the pool.
    assert!(aio == 80 || aio == 82, "{s1:?}");
    assert_eq!(s1.errors, s0.errors);
    assert_pattern(
        &std_read(file_path(&dir, 201).as_path(), 0, 16 * 4096),
        202,
        0,
    );
    // Every operation is counted once, inline or async. Which one a direct
    // read is depends on the machine: the device usually answers after
    // `io_submit` returned (async), but when the completion interrupt wakes
    // the reaper and it runs before the submitter, preempted on its way
    // back from the call, has recorded the return, the read counts as
    // inline (seen on a loaded CI machine). So only the sum is asserted.
    let inline = s1.completed_inline - s0.completed_inline;
    let asynchronous = s1.completed_async - s0.completed_async;
    assert_eq!(s1.completed - s0.completed, 64 + 16 + 2, "{s1:?}");
    assert_eq!(inline + asynchronous, 64 + 16 + 2, "{s1:?}");
    eprintln!("aio: {asynchronous} completions async, {inline} inline");

    // A buffered file goes to the pool; `.wait()` runs it on this thread.
    let path = dir.path().join("buffered");
    std_create_pattern(&path, 203, 1 << 16);
    let buffered = OpenOptions::new()
        .read(true)
        .open(&engine, &path)
        .wait()
        .unwrap();
    let s2 = engine.stats();
    let (res, buf) = buffered.read_at(vec![0u8; 4096], 8192).wait();
    assert_eq!(res.unwrap(), 4096);
    assert_pattern(&buf, 203, 8192);
    let s3 = engine.stats();
    assert_eq!(
        s3.submitted_aio, s2.submitted_aio,
        "buffered I/O never goes to AIO"
    );
    assert_eq!(s3.completed - s2.completed, 1);
}

fn file_path(dir: &tempfile::TempDir, seed: u64) -> std::path::PathBuf {
    dir.path().join(format!("direct-{seed}"))
}

#[test]
fn a_misaligned_buffer_is_refused_before_submission() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = direct_file(&engine, &dir, 204, 4);
    let a = file.alignment();
    let s0 = engine.stats();
    if a.memory > 1 {
        let (res, back) = file.read_at(Shifted::new(4096, 4096, 1), 0).wait();
        match res {
            Err(Error::Misaligned { part, .. }) => assert_eq!(part, AlignmentPart::Buffer),
            other => panic!("expected Misaligned buffer, got {other:?}"),
        }
        assert_eq!(back.len, 4096, "the buffer comes back");
    } else {
        eprintln!("SKIPPED: this file system needs no memory alignment for O_DIRECT");
    }
    let pool = AlignedBufPool::for_file(&file, 4096, 1).unwrap();
    let (res, _) = file.read_at(pool.get(), a.offset as u64 / 2).wait();
    match res {
        Err(Error::Misaligned { part, .. }) => assert_eq!(part, AlignmentPart::Offset),
        other => panic!("expected Misaligned offset, got {other:?}"),
    }
    assert_eq!(engine.stats().submitted_aio, s0.submitted_aio);
}

#[test]
fn reads_at_and_past_the_end_of_file() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let path = dir.path().join("tail");
    // 3 blocks and a half: the last direct read is short.
    std_create_pattern(&path, 205, 3 * 4096 + 2048);
    let file = open_direct(&engine, &path);
    let pool = AlignedBufPool::for_file(&file, 8192, 4).unwrap();
    let s0 = engine.stats();
    let (res, buf) = file.read_at(pool.get(), 2 * 4096).wait();
    let n = res.unwrap();
    assert_eq!(n, 4096 + 2048, "a short read at the tail");
    assert_pattern(&buf[..n], 205, 2 * 4096);
    let (res, _) = file.read_at(pool.get(), 16 * 4096).wait();
    assert_eq!(res.unwrap(), 0, "past the end of file: 0 bytes");
    let (res, _) = file.read_exact_at(pool.get(), 2 * 4096).wait();
    match res {
        Err(Error::UnexpectedEof { read, wanted }) => {
            assert_eq!((read, wanted), (4096 + 2048, 8192));
        }
        other => panic!("expected UnexpectedEof, got {other:?}"),
    }
    assert!(engine.stats().submitted_aio - s0.submitted_aio >= 3);
}

#[test]
fn a_kernel_error_comes_back_through_the_completion_event() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = direct_file(&engine, &dir, 206, 1);
    let pool = AlignedBufPool::for_file(&file, 4096, 1).unwrap();
    let s0 = engine.stats();
    // Beyond the largest file this file system allows (ext4: 16 TiB, xfs:
    // 8 EiB - 1 would pass, so 2^62 is past every one's limit minus ours).
    let offset = 1u64 << 62;
    let (res, _) = file.write_at(pool.get(), offset).wait();
    let err = res.expect_err("a write at 4 EiB fails");
    let errno = err.raw_os_error();
    assert!(
        errno == Some(libc::EFBIG) || errno == Some(libc::EINVAL),
        "EFBIG (or EINVAL) from the kernel: {err:?}"
    );
    let s1 = engine.stats();
    assert_eq!(s1.errors - s0.errors, 1, "{s1:?}");
    assert_eq!(
        s1.submitted_aio - s0.submitted_aio,
        1,
        "the write went to AIO: {s1:?}"
    );
}

#[test]
fn o_direct_on_a_file_system_without_it_is_einval() {
    let Some(engine) = aio_engine() else { return };
    // procfs has no direct I/O: the kernel refuses O_DIRECT at open.
    let res = OpenOptions::new()
        .read(true)
        .direct(true)
        .open(&engine, "/proc/self/status")
        .wait();
    match res {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e:?}"),
        Ok(_) => panic!("O_DIRECT on procfs opened"),
    }
}

#[test]
fn dropped_futures_keep_their_buffers_until_the_kernel_is_done() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = direct_file(&engine, &dir, 207, 256);
    let pool = AlignedBufPool::for_file(&file, 4096, 0).unwrap();
    let yard: Yard = Arc::new(Mutex::new(Vec::new()));
    let s0 = engine.stats();
    let n = 256u64;
    let submitted = n as usize;
    let mut dropped_in_flight = 0;
    for i in 0..n {
        let mut op = file.read_at(KeptBuf::new(pool.get(), &yard), i * 4096);
        // The reaper may complete a fast read before the first poll ends.
        match poll_once(&mut op) {
            Poll::Ready((res, _)) => assert_eq!(res.unwrap(), 4096),
            Poll::Pending => dropped_in_flight += 1,
        }
        drop(op); // in flight: the engine keeps the buffer
    }
    eprintln!("{dropped_in_flight} of {n} reads dropped in flight");
    assert!(wait_until(Duration::from_secs(20), || engine.in_flight() == (0, 0)));
    // Every buffer was freed (it reached the yard) once its read completed,
    // and none was written after it was dropped.
    assert!(wait_until(Duration::from_secs(5), || yard
        .lock()
        .unwrap()
        .len()
        == submitted));
    assert_eq!(written_after_drop(&yard), 0);
    let s1 = engine.stats();
    assert_eq!(s1.submitted_aio - s0.submitted_aio, n);
    assert_eq!(s1.completed - s0.completed, n);
    // Dropping the engine with operations in flight waits for them.
    let mut ops: Vec<_> = (0..n)
        .map(|i| file.read_at(KeptBuf::new(pool.get(), &yard), i * 4096))
        .collect();
    for op in &mut ops {
        let _ = poll_once(op);
    }
    drop(ops);
    drop(file);
    drop(engine);
    assert_eq!(
        yard.lock().unwrap().len(),
        2 * submitted,
        "shutdown completed everything"
    );
    assert_eq!(written_after_drop(&yard), 0);
}

/// A panic in user code on the reaper thread (a dropped write's buffer
/// whose `Drop` panics, a waker that panics) is contained: the reaper goes
/// on, and later operations complete.
#[test]
fn panics_in_user_code_on_the_reaper_are_contained() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = direct_file(&engine, &dir, 208, 16);
    let pool = AlignedBufPool::for_file(&file, 4096, 4).unwrap();
    let mut provoked = (false, false);
    // A fast device may complete the write before its first poll returns
    // (then the culprit runs here, quietly): try again.
    for _ in 0..200 {
        if !provoked.0 {
            let wire = Arc::new(Tripwire::default());
            let buf = PanicOnDrop::new(overlapped::AlignedBuf::new(4096, 4096).unwrap(), &wire);
            let pending = poll_once(&mut file.write_at(buf, 0)).is_pending();
            if pending {
                assert!(wait_until(Duration::from_secs(10), || wire.ran()));
                provoked.0 = wire.fired();
            }
        }
        if !provoked.1 {
            let wire = Arc::new(Tripwire::default());
            let waker = std::task::Waker::from(Arc::new(PanicWaker::new(&wire)));
            let mut op = file.read_at(pool.get(), 4096);
            let poll =
                std::pin::Pin::new(&mut op).poll(&mut std::task::Context::from_waker(&waker));
            if poll.is_pending() {
                assert!(wait_until(Duration::from_secs(10), || wire.ran()));
                provoked.1 = wire.fired();
            }
            drop(op);
        }
        if provoked == (true, true) {
            break;
        }
    }
    if provoked != (true, true) {
        eprintln!("SKIPPED: could not get a panic onto the reaper thread (every operation completed at its first poll): {provoked:?}");
    }
    // The engine goes on.
    let reads: Vec<_> = (0..16u64)
        .map(|i| file.read_at(pool.get(), i * 4096))
        .collect();
    let done = within(Duration::from_secs(20), move || {
        futures::executor::block_on(join_all(reads))
            .into_iter()
            .map(|(r, _)| r.map_err(|e| e.to_string()))
            .collect::<Vec<_>>()
    });
    for r in done.expect("reads after the panics complete") {
        assert_eq!(r.unwrap(), 4096);
    }
    assert_eq!(engine.in_flight(), (0, 0));
}

// ------------------------------------------- the thread that waits reaps

/// Sixteen threads wait on one AIO engine at once (twelve in `.wait()`,
/// four draining ports of their own at depth 8): one of them at a time
/// reaps (leader/follower) and completes the others' reads too, and every
/// completion reaches its owner (each thread checks the data of its own
/// offsets). A lost promotion leaves followers asleep with nobody reaping:
/// the deadline fails the test instead of hanging it.
#[test]
fn many_threads_waiting_on_one_engine_each_get_their_own_completions() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let blocks = 256u64;
    let file = Arc::new(direct_file(&engine, &dir, 210, blocks as usize));
    let pool = AlignedBufPool::for_file(&file, 4096, 64).unwrap();
    let s0 = engine.stats();
    let per_thread = 200u64;
    let waiters: Vec<_> = (0..12u64)
        .map(|t| {
            let (file, pool) = (file.clone(), pool.clone());
            watch(move || {
                for i in 0..per_thread {
                    let off = ((t * 31 + i * 7) % blocks) * 4096;
                    let (res, buf) = file.read_at(pool.get(), off).wait();
                    assert_eq!(res.unwrap(), 4096);
                    assert_pattern(&buf, 210, off);
                }
            })
        })
        .collect();
    let porters: Vec<_> = (0..4u64)
        .map(|t| {
            let (file, pool, engine) = (file.clone(), pool.clone(), engine.clone());
            watch(move || {
                let port: overlapped::Port<overlapped::AlignedBuf> = overlapped::Port::new(&engine);
                let mut next = 0u64;
                let mut done = 0u64;
                let key_off = |k: u64| ((t * 53 + k * 11) % blocks) * 4096;
                while done < per_thread {
                    while next < per_thread && port.outstanding() < 8 {
                        port.with_when_full(overlapped::WhenFull::Fail)
                            .read_at(&file, pool.get(), key_off(next), next)
                            .map_err(|(e, _)| e)
                            .unwrap();
                        next += 1;
                    }
                    let c = port.next().expect("a completion is outstanding");
                    assert_eq!(c.result.unwrap(), 4096, "key {}", c.key);
                    assert_pattern(&c.buf, 210, key_off(c.key));
                    done += 1;
                }
                assert!(port.next().is_none());
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for w in waiters.into_iter().chain(porters) {
        w.wait(deadline).unwrap();
    }
    let s1 = engine.stats();
    let n = 16 * per_thread;
    assert_eq!(s1.completed - s0.completed, n, "{s1:?}");
    assert_eq!(s1.submitted_aio - s0.submitted_aio, n, "{s1:?}");
    assert!(
        s1.aio_reaped_by_waiters > s0.aio_reaped_by_waiters,
        "waiting threads reaped: {s1:?}"
    );
    eprintln!(
        "{} of {n} completions reaped by waiting threads",
        s1.aio_reaped_by_waiters - s0.aio_reaped_by_waiters
    );
    assert_eq!(engine.in_flight(), (0, 0));
}

/// A thread in `block_on` submits a large read, hands the in-flight future
/// to another thread's executor (`futures::executor`), and waits for small
/// reads of its own: it leads, and leaves with the large read still in
/// flight. The reaper must take over, even though it had gone to sleep
/// without a timeout (nothing was in flight for 100 ms before), or the
/// other executor's future never completes.
#[test]
fn a_waiter_leaving_with_operations_in_flight_hands_over_to_the_reaper() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let big = 16usize << 20;
    let path = dir.path().join("big");
    std_create_pattern(&path, 211, big);
    let file = Arc::new(open_direct(&engine, &path));
    let pool = AlignedBufPool::for_file(&file, big, 1).unwrap();
    let small = AlignedBufPool::for_file(&file, 4096, 1).unwrap();
    let mut exercised = 0;
    for _ in 0..20 {
        // Nothing in flight for a while: the reaper sleeps without a timeout.
        std::thread::sleep(Duration::from_millis(100));
        let (tx, rx) = std::sync::mpsc::channel();
        let f = file.clone();
        let (res, buf) = overlapped::block_on(async {
            let mut large = f.read_at(pool.get(), 0);
            // Submitted by this thread's block_on, then moved away in flight
            // (or, should it have completed within its first poll (io_submit
            // may block until the device answers), its result moved away).
            match futures::poll!(&mut large) {
                Poll::Pending => tx.send(Either::Left(large)).unwrap(),
                Poll::Ready(out) => tx.send(Either::Right(future::ready(out))).unwrap(),
            }
            f.read_at(small.get(), 4096).await
        });
        assert_eq!(res.unwrap(), 4096);
        assert_pattern(&buf, 211, 4096);
        let in_flight = engine.in_flight().0 > 0;
        let large = rx.recv().unwrap();
        let done = within(Duration::from_secs(20), move || {
            let (res, buf) = futures::executor::block_on(large);
            assert_eq!(res.unwrap(), big);
            assert_pattern(&buf, 211, 0);
        });
        done.expect("the other executor's read completes");
        if in_flight {
            exercised += 1;
            if exercised >= 3 {
                break;
            }
        }
    }
    if exercised == 0 {
        eprintln!("SKIPPED: the large read always completed before the waiter left");
    }
    assert_eq!(engine.in_flight(), (0, 0));
}

/// A waker that records the name of the thread it is woken on, then
/// panics.
struct NamedPanicWaker(Mutex<Option<String>>);

impl std::task::Wake for NamedPanicWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        *self.0.lock().unwrap() = Some(name);
        panic!("deliberate panic in a waker");
    }
}

/// A waker that panics, of a read that a waiting thread reaps: the panic is
/// contained on that thread (reported, not unwound into its `block_on`),
/// the thread's own reads complete, and the engine goes on. (Should the
/// waiting thread be descheduled past the reaper's grace, the reaper reaps
/// the read instead: the test tries again.)
#[test]
fn a_panicking_waker_reaped_by_a_waiting_thread_is_contained() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = Arc::new(direct_file(&engine, &dir, 212, 64));
    let pool = AlignedBufPool::for_file(&file, 4096, 4).unwrap();
    let s0 = engine.stats();
    let mut on_waiter = false;
    for _ in 0..20 {
        let woken = Arc::new(NamedPanicWaker(Mutex::new(None)));
        let waker = std::task::Waker::from(woken.clone());
        let (f, p, w) = (file.clone(), pool.clone(), woken.clone());
        let waiter = watch(move || {
            overlapped::block_on(async move {
                let mut victim = f.read_at(p.get(), 0);
                // Submitted as this thread's (it waits, and reaps), then its
                // waker replaced by the panicking one. (Done within its first
                // poll, as io_submit may block until the device answers: no
                // waker to run, try again.)
                if futures::poll!(&mut victim).is_ready() {
                    return;
                }
                let cx = &mut std::task::Context::from_waker(&waker);
                let _ = std::pin::Pin::new(&mut victim).poll(cx);
                let mut reads = 0u64;
                // Keep waiting (and reaping) until the victim's waker ran.
                while w.0.lock().unwrap().is_none() && reads < 100_000 {
                    let off = (1 + reads % 63) * 4096;
                    let (res, buf) = f.read_at(p.get(), off).await;
                    assert_eq!(res.unwrap(), 4096);
                    assert_pattern(&buf, 212, off);
                    reads += 1;
                }
                drop(victim);
            })
        });
        waiter
            .wait(std::time::Instant::now() + Duration::from_secs(30))
            .expect("the waiting thread survives the panic");
        let name = woken.0.lock().unwrap().clone();
        eprintln!("the panicking waker ran on {name:?}");
        if name.as_deref() == Some("watched") {
            on_waiter = true;
            break;
        }
    }
    assert!(on_waiter, "the waiting thread never reaped the victim");
    let s1 = engine.stats();
    assert!(
        s1.aio_reaped_by_waiters > s0.aio_reaped_by_waiters,
        "{s1:?}"
    );
    // The engine goes on, on a waiting thread and on another executor.
    let (res, _) = file.read_at(pool.get(), 0).wait();
    assert_eq!(res.unwrap(), 4096);
    let (res, _) = futures::executor::block_on(file.read_at(pool.get(), 4096));
    assert_eq!(res.unwrap(), 4096);
    assert_eq!(engine.in_flight(), (0, 0));
}

/// Shutdown while eight threads wait on their reads (some with reads of
/// theirs dropped in flight): every thread returns (a result, or
/// `Error::Shutdown`), shutdown returns only once nothing is in flight,
/// and no buffer was written after it was dropped.
#[test]
fn shutdown_while_threads_wait_completes_everything() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = Arc::new(direct_file(&engine, &dir, 213, 256));
    let pool = AlignedBufPool::for_file(&file, 4096, 0).unwrap();
    let yard: Yard = Arc::new(Mutex::new(Vec::new()));
    let started = Arc::new(std::sync::Barrier::new(9));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (file, pool, yard, started) =
                (file.clone(), pool.clone(), yard.clone(), started.clone());
            watch(move || {
                started.wait();
                let mut ok = 0u64;
                for i in 0.. {
                    let off = ((t * 17 + i) % 256) * 4096;
                    let res = overlapped::block_on(async {
                        let mut dropped = file.read_at(KeptBuf::new(pool.get(), &yard), off);
                        let _ = futures::poll!(&mut dropped);
                        drop(dropped); // in flight: the engine keeps it
                        file.read_at(KeptBuf::new(pool.get(), &yard), off).await.0
                    });
                    match res {
                        Ok(n) => {
                            assert_eq!(n, 4096);
                            ok += 1;
                        }
                        Err(Error::Shutdown) => return ok,
                        Err(e) => panic!("{e}"),
                    }
                    assert!(i < 1_000_000, "never saw the shutdown");
                }
                ok
            })
        })
        .collect();
    started.wait();
    std::thread::sleep(Duration::from_millis(50));
    engine.shutdown();
    assert_eq!(
        engine.in_flight(),
        (0, 0),
        "shutdown returned with operations in flight"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut total = 0;
    for t in threads {
        total += t.wait(deadline).expect("a waiting thread returns");
    }
    assert!(total > 0, "reads completed before the shutdown");
    assert_eq!(written_after_drop(&yard), 0);
    let (res, _) = file.read_at(pool.get(), 0).wait();
    assert!(matches!(res, Err(Error::Shutdown)), "{res:?}");
}

/// A thread waits on a large read while another, waiting on small reads,
/// holds the reaping role; the small reader stops first, leaving the large
/// read in flight with its owner asleep as a follower. The leaving leader
/// must promote it (the reaper leaves the role to threads that wait), or
/// the large read is never reaped.
#[test]
fn a_leader_leaving_promotes_a_follower() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let big = 8usize << 20;
    let path = dir.path().join("promote");
    std_create_pattern(&path, 214, big);
    let file = Arc::new(open_direct(&engine, &path));
    let large = AlignedBufPool::for_file(&file, big, 1).unwrap();
    let small = AlignedBufPool::for_file(&file, 4096, 1).unwrap();
    for round in 0..20 {
        let go = Arc::new(std::sync::Barrier::new(2));
        let (f, p, g) = (file.clone(), small.clone(), go.clone());
        let leader = watch(move || {
            let mut reads = 0u64;
            let (res, _) = f.read_at(p.get(), 0).wait();
            res.unwrap();
            g.wait();
            // Keep leading for a little while after the large read started.
            for i in 0..16u64 {
                let off = (1 + i) * 4096;
                let (res, buf) = f.read_at(p.get(), off).wait();
                assert_eq!(res.unwrap(), 4096);
                assert_pattern(&buf, 214, off);
                reads += 1;
            }
            reads
        });
        let (f, p, g) = (file.clone(), large.clone(), go.clone());
        let follower = watch(move || {
            g.wait();
            let (res, buf) = f.read_at(p.get(), 0).wait();
            assert_eq!(res.unwrap(), big);
            assert_pattern(&buf, 214, 0);
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        leader.wait(deadline).unwrap();
        follower
            .wait(deadline)
            .unwrap_or_else(|e| panic!("round {round}: the large read's owner: {e}"));
    }
    assert_eq!(engine.in_flight(), (0, 0));
}

/// A port's worker that takes one completion at a time while another
/// thread waits on the same engine (and so often holds the reaping role
/// and reaps the port's reads): the worker must not sleep on its port when
/// the other thread has taken its event out of the context but not yet
/// delivered it (its look at the context then finds nothing in flight).
#[test]
fn a_port_worker_is_woken_for_events_another_waiter_reaped() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = Arc::new(direct_file(&engine, &dir, 215, 64));
    let pool = AlignedBufPool::for_file(&file, 4096, 8).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (f, p, s) = (file.clone(), pool.clone(), stop.clone());
    let other = watch(move || {
        let mut n = 0u64;
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let off = (n % 64) * 4096;
            let (res, _) = f.read_at(p.get(), off).wait();
            assert_eq!(res.unwrap(), 4096);
            n += 1;
        }
        n
    });
    let (f, p, e) = (file.clone(), pool.clone(), engine.clone());
    let worker = watch(move || {
        let port: overlapped::Port<overlapped::AlignedBuf> = overlapped::Port::new(&e);
        for i in 0..5_000u64 {
            let off = (i % 64) * 4096;
            port.read_at(&f, p.get(), off, i)
                .map_err(|(e, _)| e)
                .unwrap();
            let c = port.next().expect("one outstanding");
            assert_eq!(c.key, i);
            assert_eq!(c.result.unwrap(), 4096);
            assert_pattern(&c.buf, 215, off);
        }
    });
    let res = worker.wait(std::time::Instant::now() + Duration::from_secs(60));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    res.expect("the port's worker got every completion");
    let n = other
        .wait(std::time::Instant::now() + Duration::from_secs(20))
        .unwrap();
    eprintln!("the other thread read {n} blocks meanwhile");
    assert_eq!(engine.in_flight(), (0, 0));
}

/// Threads that wait in `block_on` for something other than I/O (here a
/// channel), after reading once on the engine, sleep as followers when the
/// AIO context is busy and another thread holds the reaping role. When the
/// leader leaves with nothing in flight it promotes nobody, and those
/// followers stay registered: a read polled afterwards by another executor
/// must still be reaped (by the reaper or a promoted follower), not left in
/// the context until a follower wakes for its own reason.
#[test]
fn reads_are_reaped_while_followers_sleep_for_something_else() {
    let Some(engine) = aio_engine() else { return };
    let res = within(Duration::from_secs(60), move || {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        let dir = tempdir();
        let file = Arc::new(direct_file(&engine, &dir, 216, 64));
        let pool = AlignedBufPool::for_file(&file, 4096, 8).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        // Another executor's reads keep the context busy.
        let (f, p, s) = (file.clone(), pool.clone(), stop.clone());
        let busy = watch(move || {
            let mut n = 0u64;
            while !s.load(Relaxed) {
                let reads = (0..8u64).map(|i| f.read_at(p.get(), ((n + i) % 64) * 4096));
                for (res, _) in futures::executor::block_on(join_all(reads)) {
                    assert_eq!(res.unwrap(), 4096);
                }
                n += 8;
            }
            n
        });
        // Threads that read once (so that they wait on this context), then
        // wait on a channel.
        let mut senders = Vec::new();
        let mut sleepers = Vec::new();
        for t in 0..4u64 {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            senders.push(tx);
            let (f, p) = (file.clone(), pool.clone());
            sleepers.push(watch(move || {
                overlapped::block_on(async move {
                    let (res, _) = f.read_at(p.get(), t * 4096).await;
                    assert_eq!(res.unwrap(), 4096);
                    let _ = rx.await;
                })
            }));
        }
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Relaxed);
        let busy = busy.wait(std::time::Instant::now() + Duration::from_secs(10));
        let (f, p) = (file.clone(), pool.clone());
        let lone = within(Duration::from_secs(10), move || {
            futures::executor::block_on(f.read_at(p.get(), 0))
                .0
                .unwrap()
        });
        // Wake the sleepers (which lets them reap whatever was left).
        for tx in senders {
            let _ = tx.send(());
        }
        for s in sleepers {
            s.wait(std::time::Instant::now() + Duration::from_secs(20))
                .unwrap();
        }
        let n = busy.expect("the other executor's reads complete while threads sleep");
        eprintln!("the other executor read {n} blocks");
        assert_eq!(
            lone.expect("a lone read of another executor completes"),
            4096
        );
        assert_eq!(engine.in_flight(), (0, 0));
    });
    res.unwrap();
}
/// A waker that, woken, blocks on a read of the same engine (user code run
/// on whichever thread reaps the operation it belongs to).
struct BlockingWaker {
    file: Arc<overlapped::File>,
    pool: AlignedBufPool,
    done: Mutex<Option<(String, usize)>>,
}

impl std::task::Wake for BlockingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let (res, _) = self.file.read_at(self.pool.get(), 4096).wait();
        *self.done.lock().unwrap() = Some((name, res.unwrap()));
    }
}

/// User code run at completion on a thread holding the reaping role (a
/// waker, or the `Drop` of a dropped future's buffer) that itself blocks on
/// a read of the same engine: that nested wait must reap (the thread holds
/// the role, nobody else will), not sleep as a follower of itself.
#[test]
fn a_nested_wait_on_the_thread_holding_the_role_reaps() {
    let Some(engine) = aio_engine() else { return };
    let dir = tempdir();
    let file = Arc::new(direct_file(&engine, &dir, 217, 64));
    let pool = AlignedBufPool::for_file(&file, 4096, 4).unwrap();
    let woken = Arc::new(BlockingWaker {
        file: file.clone(),
        pool: pool.clone(),
        done: Mutex::new(None),
    });
    let (f, p, w) = (file.clone(), pool.clone(), woken.clone());
    let waiter = watch(move || {
        let waker = std::task::Waker::from(w.clone());
        overlapped::block_on(async move {
            // A read in flight after its first poll (one done within it, as
            // io_submit may block until the device answers, has no waker to
            // run: another is tried).
            let mut tries = 0;
            let mut victim = loop {
                let mut victim = f.read_at(p.get(), 0);
                if futures::poll!(&mut victim).is_pending() {
                    break victim;
                }
                tries += 1;
                if tries == 100 {
                    return false;
                }
            };
            let cx = &mut std::task::Context::from_waker(&waker);
            let _ = std::pin::Pin::new(&mut victim).poll(cx);
            let mut reads = 0u64;
            while w.done.lock().unwrap().is_none() && reads < 100_000 {
                let off = (1 + reads % 63) * 4096;
                let (res, _) = f.read_at(p.get(), off).await;
                assert_eq!(res.unwrap(), 4096);
                reads += 1;
            }
            drop(victim);
            true
        })
    });
    let res = waiter.wait(std::time::Instant::now() + Duration::from_secs(20));
    let done = woken.done.lock().unwrap().clone();
    if res.is_err() {
        // Hung: the engine cannot shut down (its reaper waits for the
        // stranded reads); leave it rather than hang the test binary.
        std::mem::forget(file);
        std::mem::forget(pool);
        std::mem::forget(woken);
        std::mem::forget(engine);
        panic!("the thread that reaped the victim hung: {res:?} (done: {done:?})");
    }
    if res == Ok(false) {
        eprintln!("SKIPPED: 100 direct reads in a row completed within their first poll");
        return;
    }
    eprintln!("the blocking waker ran on {done:?}");
    assert_eq!(done.map(|d| d.1), Some(4096));
    assert_eq!(engine.in_flight(), (0, 0));
}
