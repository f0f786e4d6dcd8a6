//! No runtime lock-in, on both drivers: the same write/read scenario under
//! tokio (multi-thread), smol, `futures::executor` and blocking `.wait()`
//! from plain threads, and one engine shared by many threads at once.

use std::sync::{Arc, Barrier};

use crate::common::*;
use futures::future::join_all;
use overlapped::{Engine, File, Op, OpenOptions, Port, Task};

per_driver!(
    under_tokio_multi_thread,
    under_smol,
    under_futures_executor,
    blocking_wait_from_plain_threads,
    one_engine_from_many_threads_and_runtimes_at_once,
    a_future_moves_between_threads_and_wakers,
);

// Engine, File and Port are Clone + Send + Sync; operations are Send.
const _: fn() = || {
    fn shared<T: Clone + Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    shared::<Engine>();
    shared::<File>();
    shared::<Port<Vec<u8>>>();
    shared::<OpenOptions>();
    send::<Op<Vec<u8>>>();
    send::<Task<overlapped::Result<()>>>();
    send::<Task<(overlapped::Result<()>, Vec<u8>)>>();
};

const CHUNK: usize = 64 << 10;

/// Task `t`: open its own file, write, sync, read back, check, close.
async fn scenario(engine: Engine, dir: std::path::PathBuf, t: u64) {
    let path = dir.join(format!("task-{t}"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&engine, &path)
        .await
        .unwrap();
    let writes = (0..4u64).map(|k| {
        let off = k * CHUNK as u64;
        file.write_all_at(pattern(90 + t, off, CHUNK), off)
    });
    for (res, _) in join_all(writes).await {
        res.unwrap();
    }
    file.sync_data().await.unwrap();
    let (res, buf) = file.read_exact_at(vec![0u8; 4 * CHUNK], 0).await;
    res.unwrap();
    assert_pattern(&buf, 90 + t, 0);
    let (res, buf) = file.read_at(vec![0u8; 100], 4 * CHUNK as u64 - 10).await;
    assert_eq!(res.unwrap(), 10);
    assert_pattern(&buf[..10], 90 + t, 4 * CHUNK as u64 - 10);
    assert_eq!(file.metadata().await.unwrap().len, 4 * CHUNK as u64);
    file.close().await.unwrap();
    assert_pattern(&std_read(&path, 0, 4 * CHUNK), 90 + t, 0);
}

fn under_tokio_multi_thread(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|t| tokio::spawn(scenario(engine.clone(), dir.path().to_path_buf(), t)))
            .collect();
        let all = async {
            for t in tasks {
                t.await.unwrap();
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), all)
            .await
            .expect("tokio tasks finished");
    });
    let s = engine.stats();
    assert_eq!(s.completed, s.submitted);
    assert_eq!(s.bytes_written, 32 * 4 * CHUNK as u64);
}

fn under_smol(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    smol::block_on(async {
        let tasks: Vec<_> = (0..16)
            .map(|t| smol::spawn(scenario(engine.clone(), dir.path().to_path_buf(), t)))
            .collect();
        for t in tasks {
            t.await;
        }
        // And directly on the block_on thread.
        scenario(engine.clone(), dir.path().to_path_buf(), 100).await;
    });
}

fn under_futures_executor(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    futures::executor::block_on(join_all(
        (0..16).map(|t| scenario(engine.clone(), dir.path().to_path_buf(), t)),
    ));
    let mut pool = futures::executor::LocalPool::new();
    let e = engine.clone();
    let p = dir.path().to_path_buf();
    pool.run_until(scenario(e, p, 200));
}

fn blocking_wait_from_plain_threads(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("shared");
    let file = File::create(&engine, &path).wait().unwrap();
    let threads = 8u64;
    let per = 32u64;
    let barrier = Arc::new(Barrier::new(threads as usize));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (file, barrier) = (file.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for k in 0..per {
                    let off = (t * per + k) * 4096;
                    let (res, _) = file.write_all_at(pattern(95, off, 4096), off).wait();
                    res.unwrap();
                    let (res, buf) = file.read_at(vec![0u8; 4096], off).wait();
                    assert_eq!(res.unwrap(), 4096);
                    assert_pattern(&buf, 95, off);
                }
                file.sync_data().wait().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(std_len(&path), threads * per * 4096);
    assert_pattern(&std_read(&path, 0, (threads * per * 4096) as usize), 95, 0);
}

fn one_engine_from_many_threads_and_runtimes_at_once(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let p = dir.path().to_path_buf();
    let barrier = Arc::new(Barrier::new(4));
    let mut handles = Vec::new();
    {
        let (e, p, b) = (engine.clone(), p.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .unwrap();
            b.wait();
            rt.block_on(async {
                let ts: Vec<_> = (0..8)
                    .map(|t| tokio::spawn(scenario(e.clone(), p.clone(), 300 + t)))
                    .collect();
                for t in ts {
                    t.await.unwrap();
                }
            });
        }));
    }
    {
        let (e, p, b) = (engine.clone(), p.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            b.wait();
            smol::block_on(join_all(
                (0..8).map(|t| scenario(e.clone(), p.clone(), 400 + t)),
            ));
        }));
    }
    {
        let (e, p, b) = (engine.clone(), p.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            b.wait();
            futures::executor::block_on(join_all(
                (0..8).map(|t| scenario(e.clone(), p.clone(), 500 + t)),
            ));
        }));
    }
    {
        let (e, p, b) = (engine.clone(), p.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            b.wait();
            for t in 0..8 {
                scenario_blocking(&e, &p, 600 + t);
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let s = engine.stats();
    assert_eq!(s.completed, s.submitted);
    assert_eq!(s.bytes_written, 32 * 4 * CHUNK as u64);
    assert_eq!(engine.in_flight(), (0, 0));
}

/// The scenario for a thread that is not async: `.wait()` on everything.
fn scenario_blocking(engine: &Engine, dir: &std::path::Path, t: u64) {
    let path = dir.join(format!("task-{t}"));
    let file = File::create(engine, &path).wait().unwrap();
    for k in 0..4u64 {
        let off = k * CHUNK as u64;
        let (res, _) = file.write_all_at(pattern(90 + t, off, CHUNK), off).wait();
        res.unwrap();
    }
    file.sync_data().wait().unwrap();
    let (res, buf) = file.read_exact_at(vec![0u8; 4 * CHUNK], 0).wait();
    res.unwrap();
    assert_pattern(&buf, 90 + t, 0);
    file.close().wait().unwrap();
}

fn a_future_moves_between_threads_and_wakers(d: Driver) {
    let engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("moves");
    std_create_pattern(&path, 96, 8 << 20);
    let file = File::open(&engine, &path).wait().unwrap();
    // Polled once on this thread with a no-op waker, then finished on a
    // tokio worker, with smol, and with .wait() on another thread.
    let mut ops: Vec<_> = (0..12u64)
        .map(|i| file.read_at(vec![0u8; 512 << 10], i * (512 << 10)))
        .collect();
    let mut early = Vec::new();
    for (i, op) in ops.iter_mut().enumerate() {
        if let std::task::Poll::Ready(r) = poll_once(op) {
            early.push((i, r)); // done already: must not be polled again
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut handles = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        let off = i as u64 * (512 << 10);
        if let Some(pos) = early.iter().position(|(j, _)| *j == i) {
            let r = early.swap_remove(pos).1;
            handles.push(std::thread::spawn(move || (off, r)));
            continue;
        }
        match i % 3 {
            0 => {
                let h = rt.spawn(op);
                handles.push(std::thread::spawn(move || {
                    (off, futures::executor::block_on(h).unwrap())
                }));
            }
            1 => handles.push(std::thread::spawn(move || (off, smol::block_on(op)))),
            _ => handles.push(std::thread::spawn(move || (off, op.wait()))),
        }
    }
    for h in handles {
        let (off, (res, buf)) = h.join().unwrap();
        assert_eq!(res.unwrap(), 512 << 10);
        assert_pattern(&buf, 96, off);
    }
}
