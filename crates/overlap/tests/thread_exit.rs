//! Operations submitted from a thread that exits right away still complete,
//! on both drivers: through a port, through futures polled once and
//! dropped, and through futures polled once and handed to another thread.

use std::sync::mpsc;

use crate::common::*;
use overlapped::{Engine, File, OpenOptions, Port};

per_driver!(
    port_writes_from_an_exiting_thread_complete,
    futures_polled_once_then_dropped_by_an_exiting_thread_complete,
    futures_polled_once_then_handed_over_complete,
);

const SLOT: u64 = 4096;
const N: u64 = 500;

fn port_writes_from_an_exiting_thread_complete(d: Driver) {
    let dir = tempdir();
    let path = dir.path().join("port");
    // The thread builds the engine too, and everything outlives it.
    let (engine, port, file) = {
        let path = path.clone();
        std::thread::spawn(move || {
            let engine = d.engine();
            let file = File::create(&engine, &path).wait().unwrap();
            let port: Port<Vec<u8>> = Port::new(&engine);
            for i in 0..N {
                port.write_at(&file, pattern(80, i * SLOT, SLOT as usize), i * SLOT, i)
                    .unwrap_or_else(|(e, _)| panic!("{e}"));
            }
            (engine, port, file)
        })
        .join()
        .unwrap()
    };
    let mut keys = Vec::new();
    while let Some(c) = port.next() {
        assert_eq!(c.result.unwrap(), SLOT as usize, "key {}", c.key);
        keys.push(c.key);
    }
    keys.sort();
    assert_eq!(keys, (0..N).collect::<Vec<_>>());
    drop(file);
    engine.shutdown();
    assert_eq!(std_len(&path), N * SLOT);
    assert_pattern(&std_read(&path, 0, (N * SLOT) as usize), 80, 0);
}

fn open_rw(engine: &Engine, path: &std::path::Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(engine, path)
        .wait()
        .unwrap()
}

fn futures_polled_once_then_dropped_by_an_exiting_thread_complete(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("dropped");
    let file = open_rw(&engine, &path);
    let submitted = {
        let file = file.clone();
        std::thread::spawn(move || {
            let mut submitted = 0;
            for i in 0..N {
                let mut op = file.write_at(pattern(81, i * SLOT, SLOT as usize), i * SLOT);
                match poll_once(&mut op) {
                    std::task::Poll::Ready((res, _)) => {
                        res.unwrap();
                    }
                    std::task::Poll::Pending => {
                        assert!(stage(&op).contains("in flight"), "{}", stage(&op));
                    }
                }
                submitted += 1;
                drop(op);
            }
            submitted
        })
        .join()
        .unwrap()
    };
    assert_eq!(submitted, N);
    // The thread is gone; shutting down waits for what it left in flight.
    engine.shutdown();
    let s = engine.stats();
    assert_eq!(s.completed, s.submitted);
    assert_eq!(s.bytes_written, N * SLOT);
    drop(file);
    assert_eq!(std_len(&path), N * SLOT);
    assert_pattern(&std_read(&path, 0, (N * SLOT) as usize), 81, 0);
}

fn futures_polled_once_then_handed_over_complete(d: Driver) {
    let engine = d.engine();
    let dir = tempdir();
    let path = dir.path().join("handed");
    let file = open_rw(&engine, &path);
    let (tx, rx) = mpsc::channel();
    {
        let file = file.clone();
        std::thread::spawn(move || {
            for i in 0..N {
                let mut op = file.write_at(pattern(82, i * SLOT, SLOT as usize), i * SLOT);
                let first = poll_once(&mut op);
                tx.send((i, op, first)).unwrap();
            }
        })
        .join()
        .unwrap();
    }
    // Finish half on a tokio runtime (detached tasks), half with block_on.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for (i, op, first) in rx.iter() {
        let fut = async move {
            let (res, buf) = match first {
                std::task::Poll::Ready(r) => r,
                std::task::Poll::Pending => op.await,
            };
            (i, res, buf)
        };
        if i % 2 == 0 {
            tasks.push(rt.spawn(fut));
        } else {
            let (i, res, buf) = futures::executor::block_on(fut);
            assert_eq!(res.unwrap(), SLOT as usize, "op {i}");
            assert_pattern(&buf, 82, i * SLOT);
        }
    }
    for t in tasks {
        let (i, res, buf) = rt.block_on(t).unwrap();
        assert_eq!(res.unwrap(), SLOT as usize, "op {i}");
        assert_pattern(&buf, 82, i * SLOT);
    }
    assert_pattern(&std_read(&path, 0, (N * SLOT) as usize), 82, 0);
}
