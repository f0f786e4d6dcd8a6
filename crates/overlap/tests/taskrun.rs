//! Completions are reaped promptly under a constant stream of submissions.
//!
//! With `IORING_SETUP_DEFER_TASKRUN`, completion work runs only when the
//! ring's owner enters the kernel with `IORING_ENTER_GETEVENTS`. An engine
//! thread that keeps finding new operations and submits them with
//! submit-only `io_uring_enter` calls never runs it, so while submissions
//! keep coming, every asynchronous completion waits (beside two streaming
//! threads, a direct read's median goes from 45 us to 7 ms). The test keeps
//! the engine thread's queue busy from two threads and checks that direct
//! reads beside them still complete, in time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use overlapped::{AlignedBufPool, Engine, File};

/// How long the two streams run.
const STREAM: Duration = Duration::from_millis(1500);
/// A direct read of one cached-free block takes well under a millisecond on
/// any disk this runs on; starved, it waits for the end of the stream.
const MEDIAN_BOUND: Duration = Duration::from_millis(50);

#[test]
fn completions_are_reaped_under_a_constant_stream_of_submissions() {
    let Some(d) = Driver::uring() else { return };
    let _heavy = heavy();
    // The fast path would answer the streaming reads on the caller's
    // thread; without it they all go through the engine thread.
    let engine: Engine = d.builder().cache_fast_path(false).build().unwrap();
    let dir = tempdir();
    let path = dir.path().join("stream");
    std_create_pattern(&path, 81, 16 << 20);
    let cached = File::open(&engine, &path).wait().unwrap();
    let direct = open_direct(&engine, &path);
    let pool = AlignedBufPool::for_file(&direct, 4096, 4).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let mut streams = Vec::new();
    for t in 0..2u64 {
        let (file, stop) = (cached.clone(), stop.clone());
        streams.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Fire and forget: poll once (submitted, or refused by a
                // full budget) and drop. Cached reads complete inline, so
                // the stream never waits for itself.
                let mut op = file.read_at(vec![0u8; 1], ((n * 2 + t) * 4096) % (16 << 20));
                let _ = poll_once(&mut op);
                n += 1;
            }
            n
        }));
    }

    // Direct reads beside the stream, polled by another executor (so they
    // go through the engine thread too), one at a time.
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut i = 0u64;
    while start.elapsed() < STREAM {
        let t = Instant::now();
        let (res, _buf) =
            futures::executor::block_on(direct.read_at(pool.get(), (i * 7919 % 4096) * 4096));
        res.unwrap();
        if start.elapsed() < STREAM {
            latencies.push(t.elapsed());
        }
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let submitted: u64 = streams.into_iter().map(|t| t.join().unwrap()).sum();
    latencies.sort();
    let median = latencies.get(latencies.len() / 2).copied();
    eprintln!(
        "{} direct reads beside {submitted} streamed submissions in {STREAM:?}; median {median:?}",
        latencies.len()
    );
    assert!(
        latencies.len() >= 10,
        "only {} direct reads completed while the stream ran: completions are starved",
        latencies.len()
    );
    let median = median.unwrap_or(STREAM);
    assert!(
        median < MEDIAN_BOUND,
        "a direct read's median latency beside the stream was {median:?} (bound {MEDIAN_BOUND:?})"
    );
}
