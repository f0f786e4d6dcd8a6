//! Operations a thread queues before it waits reach the kernel together
//! (as KB 156932's probe queues them): on a thread's own ring (`block_on`) and in
//! a port's [`Port::batch`], at most one submitting system call per 16
//! operations, counted in `submit_syscalls`; one operation waited for alone
//! still takes one call; and what a batch queued is submitted before its
//! thread blocks, so that nothing waits for an operation never submitted.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::mpsc;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::common::*;
use overlapped::{AlignedBuf, AlignedBufPool, Engine, File, Port};

per_driver!(
    reads_awaited_together_on_a_thread_ring_share_submit_calls,
    one_read_waited_for_alone_is_one_submit_call,
    a_port_batch_submits_sixteen_reads_per_call,
    a_port_batch_submits_when_it_fills_and_when_it_ends,
    a_port_batch_submits_before_its_thread_waits_in_block_on,
    a_port_batch_submits_before_its_thread_polls_the_port,
    a_port_batch_waiting_for_budget_does_not_hang,
    a_batch_guard_submits_when_it_drops,
    another_thread_flushes_a_batch_whose_thread_blocks_elsewhere,
    #[cfg(target_os = "linux")]
    a_forked_child_does_not_submit_the_parents_batch,
);

const N: u64 = 64;
/// The acceptance bound: one submitting call per 16 operations queued.
const PER_CALL: u64 = 16;
/// A port's batch submits when this many are queued (`driver::uring::thread::DEFER_BATCH`).
const BATCH: u64 = 32;

/// A direct file of `N` blocks, each holding its pattern, on a real disk.
fn direct_file(engine: &Engine, dir: &tempfile::TempDir) -> (File, AlignedBufPool) {
    let file = open_direct(engine, dir.path().join("batched"));
    let pool = AlignedBufPool::for_file(&file, 4096, N as usize).unwrap();
    let blen = pool.buf_len() as u64;
    for i in 0..N {
        let mut b = pool.get();
        fill_pattern(&mut b, 124, i * blen);
        let (res, _) = file.write_all_at(b, i * blen).wait();
        res.unwrap();
    }
    (file, pool)
}

fn take_all(port: &Port<AlignedBuf>, blen: u64, n: u64) {
    let mut seen = 0;
    while let Some(c) = port.next() {
        assert_eq!(c.result.unwrap(), blen as usize);
        assert_pattern(&c.buf, 124, c.key * blen);
        seen += 1;
    }
    assert_eq!(seen, n, "every queued read completed once");
}

/// Polls every future with `block_on`'s own waker until all are done.
/// (`join_all` of more than 30 futures wraps each one's waker: its
/// operations would go to the engine's driver, not to this thread's ring.)
async fn join_here<F: Future + Unpin>(mut futs: Vec<F>) -> Vec<F::Output> {
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                if let Poll::Ready(v) = Pin::new(f).poll(cx) {
                    *o = Some(v);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            Poll::Ready(out.iter_mut().filter_map(Option::take).collect())
        } else {
            Poll::Pending
        }
    })
    .await
}

fn reads_awaited_together_on_a_thread_ring_share_submit_calls(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let before = engine.stats();
    let reads = (0..N).map(|i| file.read_at(pool.get(), i * blen)).collect();
    for (i, (res, buf)) in overlapped::block_on(join_here(reads))
        .into_iter()
        .enumerate()
    {
        assert_eq!(res.unwrap(), blen as usize);
        assert_pattern(&buf, 124, i as u64 * blen);
    }
    let after = engine.stats();
    let calls = after.submit_syscalls - before.submit_syscalls;
    eprintln!("{N} direct reads awaited in block_on: {calls} submit system calls");
    if !d.is_uring() {
        return;
    }
    assert_eq!(
        after.submitted_on_thread_rings - before.submitted_on_thread_rings,
        N,
        "the reads went to this thread's own ring"
    );
    assert!(
        (1..=N / PER_CALL).contains(&calls),
        "{N} reads queued before the thread waits reach the kernel together: \
         {calls} submit calls (at most {})",
        N / PER_CALL
    );
}

fn one_read_waited_for_alone_is_one_submit_call(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    for i in [0, N / 2, N - 1] {
        let before = engine.stats();
        let (res, buf) = file.read_at(pool.get(), i * blen).wait();
        assert_eq!(res.unwrap(), blen as usize);
        assert_pattern(&buf, 124, i * blen);
        let calls = engine.stats().submit_syscalls - before.submit_syscalls;
        if d.is_uring() {
            assert_eq!(calls, 1, "one read, one submitting call");
        }
    }
}

fn a_port_batch_submits_sixteen_reads_per_call(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);

    // Without a batch: one call each (what the probe measured before).
    let before = engine.stats();
    for i in 0..N {
        port.read_at(&file, pool.get(), i * blen, i)
            .unwrap_or_else(|(e, _)| panic!("{e}"));
    }
    take_all(&port, blen, N);
    let unbatched = engine.stats().submit_syscalls - before.submit_syscalls;

    let before = engine.stats();
    let n = port.batch(|port| {
        for i in 0..N {
            port.read_at(&file, pool.get(), i * blen, i)
                .unwrap_or_else(|(e, _)| panic!("{e}"));
        }
        N
    });
    take_all(&port, blen, n);
    let batched = engine.stats().submit_syscalls - before.submit_syscalls;
    eprintln!("{N} direct reads on a port: {unbatched} submit calls, {batched} in a batch");
    if d.is_uring() {
        assert_eq!(
            unbatched, N,
            "outside a batch each read is submitted at once"
        );
        assert_eq!(
            batched,
            N / BATCH,
            "in a batch, one submit call per {BATCH} reads"
        );
    }
}

fn a_port_batch_submits_when_it_fills_and_when_it_ends(d: Driver) {
    if !d.is_uring() {
        eprintln!("SKIPPED: only a port's own ring (io_uring) defers submission");
        return;
    }
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);
    let calls_since = |s: &overlapped::Stats| engine.stats().submit_syscalls - s.submit_syscalls;
    let before = engine.stats();
    port.batch(|port| {
        for i in 0..BATCH - 1 {
            port.read_at(&file, pool.get(), i * blen, i)
                .unwrap_or_else(|(e, _)| panic!("{e}"));
        }
        assert_eq!(calls_since(&before), 0, "31 reads stay queued");
        port.read_at(&file, pool.get(), (BATCH - 1) * blen, BATCH - 1)
            .unwrap_or_else(|(e, _)| panic!("{e}"));
        assert_eq!(calls_since(&before), 1, "the 32nd submits the batch");
        port.read_at(&file, pool.get(), BATCH * blen, BATCH)
            .unwrap_or_else(|(e, _)| panic!("{e}"));
        assert_eq!(calls_since(&before), 1, "the 33rd waits for the next");
    });
    assert_eq!(calls_since(&before), 2, "the batch's end submits the rest");
    take_all(&port, blen, BATCH + 1);
}

fn a_port_batch_submits_before_its_thread_waits_in_block_on(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);
    let r = within(Duration::from_secs(20), move || {
        let (tx, rx) = futures::channel::oneshot::channel();
        // Another thread takes the completion without entering the
        // kernel (it only looks at the ring): only this thread's flush
        // before it sleeps puts the read in the kernel.
        let taker = {
            let port = port.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    if let Some(c) = port.try_next() {
                        let _ = tx.send(c.key);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let got = port.batch(|port| {
            port.read_at(&file, pool.get(), 3 * blen, 3)
                .unwrap_or_else(|(e, _)| panic!("{e}"));
            overlapped::block_on(rx)
        });
        taker.join().unwrap();
        got
    });
    assert_eq!(
        r.expect("the batched read completes"),
        Ok(3),
        "the read queued in the batch was submitted while its thread waited"
    );
}

fn a_port_batch_submits_before_its_thread_polls_the_port(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);
    let r = within(Duration::from_secs(20), move || {
        port.batch(|port| {
            port.read_at(&file, pool.get(), 5 * blen, 5)
                .unwrap_or_else(|(e, _)| panic!("{e}"));
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Some(c) = port.try_next() {
                    return Some(c.key);
                }
                std::thread::yield_now();
            }
            None
        })
    });
    assert_eq!(
        r.expect("no hang"),
        Some(5),
        "polling the port submits what the batch queued"
    );
}

fn a_port_batch_waiting_for_budget_does_not_hang(d: Driver) {
    let engine = d.builder().max_inflight_ops(4).build().unwrap();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);
    let (tx, rx) = mpsc::channel();
    let taker = {
        let port = port.clone();
        std::thread::spawn(move || {
            let mut keys = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(15);
            while keys.len() < N as usize && Instant::now() < deadline {
                if let Some(c) = port.next_timeout(Duration::from_millis(50)) {
                    assert_eq!(c.result.unwrap(), blen as usize);
                    keys.push(c.key);
                }
            }
            let _ = tx.send(keys);
        })
    };
    let r = within(Duration::from_secs(20), move || {
        port.batch(|port| {
            // More than the budget: the fifth waits until a completion is
            // taken, which needs the first four in the kernel.
            for i in 0..N {
                port.read_at(&file, pool.get(), i * blen, i)
                    .unwrap_or_else(|(e, _)| panic!("{e}"));
            }
        })
    });
    r.expect("queueing past the budget inside a batch does not hang");
    let mut keys = rx.recv().unwrap();
    taker.join().unwrap();
    keys.sort_unstable();
    assert_eq!(keys, (0..N).collect::<Vec<_>>());
}

fn a_batch_guard_submits_when_it_drops(d: Driver) {
    if !d.is_uring() {
        eprintln!("SKIPPED: only a port's own ring (io_uring) defers submission");
        let engine = d.engine();
        let port: Port<AlignedBuf> = Port::new(&engine);
        assert!(
            port.begin_batch().is_none(),
            "nothing to batch without a ring"
        );
        return;
    }
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);
    let calls_since = |s: &overlapped::Stats| engine.stats().submit_syscalls - s.submit_syscalls;
    let before = engine.stats();
    let batch = port.begin_batch().expect("a ring's port batches");
    assert!(
        port.begin_batch().is_none(),
        "a thread has one batch per port at a time"
    );
    for i in 0..4 {
        port.read_at(&file, pool.get(), i * blen, i)
            .unwrap_or_else(|(e, _)| panic!("{e}"));
    }
    assert_eq!(calls_since(&before), 0, "four reads stay queued");
    drop(batch);
    assert_eq!(
        calls_since(&before),
        1,
        "the guard's drop submits them, at once"
    );
    take_all(&port, blen, 4);
}

fn another_thread_flushes_a_batch_whose_thread_blocks_elsewhere(d: Driver) {
    if !d.is_uring() {
        eprintln!("SKIPPED: only a port's own ring (io_uring) defers submission");
        return;
    }
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);
    let r = within(Duration::from_secs(20), move || {
        let (queued_tx, queued_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        // The batching thread queues a read, then blocks outside the
        // engine (a channel) until the read's completion was seen.
        let batcher = {
            let port = port.clone();
            std::thread::spawn(move || {
                let _batch = port.begin_batch().expect("a ring's port batches");
                port.read_at(&file, pool.get(), 7 * blen, 7)
                    .unwrap_or_else(|(e, _)| panic!("{e}"));
                queued_tx.send(()).unwrap();
                done_rx.recv_timeout(Duration::from_secs(15)).is_ok()
            })
        };
        queued_rx.recv().unwrap();
        // Looking at the ring enters no system call: the read is not in
        // the kernel yet.
        std::thread::sleep(Duration::from_millis(50));
        assert!(port.try_next().is_none(), "a queued read is not submitted");
        port.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = None;
        while got.is_none() && Instant::now() < deadline {
            got = port.try_next().map(|c| c.key);
            std::thread::yield_now();
        }
        let _ = done_tx.send(());
        assert!(batcher.join().unwrap(), "the batching thread was released");
        got
    });
    assert_eq!(
        r.expect("no hang"),
        Some(7),
        "the other thread's flush submitted the read"
    );
}

/// After `fork`, the child's copy of a batch is the parent's: ending it in
/// the child (or any wait there) must not submit the parent's queued read,
/// which the kernel would then perform into the child's copy of the
/// buffer, leaving the parent a completion with unchanged bytes.
#[cfg(target_os = "linux")]
fn a_forked_child_does_not_submit_the_parents_batch(d: Driver) {
    if !d.is_uring() {
        eprintln!("SKIPPED: only a port's own ring (io_uring) defers submission");
        return;
    }
    let engine = d.engine();
    let dir = tempdir();
    let (file, pool) = direct_file(&engine, &dir);
    let blen = pool.buf_len() as u64;
    let port: Port<AlignedBuf> = Port::new(&engine);
    let r = within(Duration::from_secs(30), move || {
        let mut buf = pool.get();
        buf.fill(0xAA);
        let batch = port.begin_batch().expect("a ring's port batches");
        port.read_at(&file, buf, 3 * blen, 3)
            .unwrap_or_else(|(e, _)| panic!("{e}"));
        // SAFETY: the child only drops the batch (the ring's calls return
        // at once in a child) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            drop(batch);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        let status = wait_pid_within(pid, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("the child: {e}"));
        assert!(libc::WIFEXITED(status), "child status {status}");
        drop(batch);
        let c = port.next().expect("the parent's read completes");
        (c.result.map_err(|e| e.to_string()), c.buf)
    });
    let (res, buf) = r.expect("no hang");
    assert_eq!(res, Ok(blen as usize));
    assert_pattern(&buf, 124, 3 * blen);
}
