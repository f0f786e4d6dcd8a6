//! tokio's cooperative budget: a read answered on the calling thread (the
//! page cache) takes a unit of it, as `tokio::fs`'s reads do, so that a task
//! reading cached data in a loop yields to the others; and a runtime shut
//! down while such tasks run leaves no worker thread spinning behind it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use overlapped_tokio::fs;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::util::{data, tempdir};

rt_tests!(
    a_timer_fires_beside_loops_of_cached_reads,
    a_loop_of_whole_file_reads_yields,
);

/// A warm file of `len` bytes (read once, so that its pages are cached).
fn warm_file(dir: &std::path::Path, len: usize) -> std::path::PathBuf {
    let p = dir.join("warm");
    std::fs::write(&p, data(len, 3)).unwrap();
    assert_eq!(std::fs::read(&p).unwrap().len(), len);
    p
}

/// Reads `path` from start to end over and over through one `File` (its
/// reads come from the page cache) until `stop` is set or `limit` passes;
/// returns whether `stop` ended it.
async fn read_in_a_loop(path: std::path::PathBuf, stop: Arc<AtomicBool>, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut f = fs::File::open(&path).await.unwrap();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        if f.read(&mut buf).await.unwrap() == 0 {
            f.seek(std::io::SeekFrom::Start(0)).await.unwrap();
        }
    }
}

/// Two tasks read a warm file in a loop, never waiting for the disk; a
/// 300 ms sleep beside them must end (tokio's timer runs only when a task
/// yields). Without the budget it never did: the loops here stop after 10 s
/// by themselves, and the test fails.
async fn a_timer_fires_beside_loops_of_cached_reads() {
    let dir = tempdir();
    let p = warm_file(dir.path(), 4 << 20);
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(read_in_a_loop(
                p.clone(),
                stop.clone(),
                Duration::from_secs(10),
            ))
        })
        .collect();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slept = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        assert!(
            l.await.unwrap(),
            "the 300 ms sleep ended only after the loops of cached reads gave up ({slept:?}): \
             they never yielded"
        );
    }
}

/// `fs::read` of a cached file in a loop, polled by hand within the test's
/// task: it must return `Pending` once the task's budget is spent (as
/// `tokio::fs::read`, a blocking-pool task, does), long before 20,000 reads.
async fn a_loop_of_whole_file_reads_yields() {
    let dir = tempdir();
    let p = warm_file(dir.path(), 4096);
    let reads = Arc::new(AtomicU64::new(0));
    let counted = reads.clone();
    let mut task = std::pin::pin!(async move {
        for _ in 0..20_000 {
            assert_eq!(fs::read(&p).await.unwrap().len(), 4096);
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    let first = task.as_mut().poll(&mut cx);
    assert!(
        first.is_pending(),
        "20,000 cached fs::read calls ran without yielding once"
    );
    assert!(reads.load(Ordering::Relaxed) < 20_000);
}

#[cfg(target_os = "linux")]
/// The tokio worker threads of this process (named `tokio-rt-worker`).
fn workers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "tokio-rt-worker")
        .count()
}

#[cfg(target_os = "linux")]
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[cfg(target_os = "linux")]
/// What this process's descriptors are (`/proc/self/fd`'s links).
fn fd_targets() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .collect()
}

#[cfg(target_os = "linux")]
/// The threads of this process that are running (state R) right now.
fn running_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // pid (comm) S ...: the state follows the last ')'.
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            let name = stat[..stat.find(')')? + 1].to_string();
            (state == 'R').then_some(name)
        })
        .collect()
}

/// A multi-thread runtime ended with `shutdown_timeout` (and one dropped)
/// while two tasks read cached data in a loop: its workers must end, not
/// spin on for ever inside the loops, and its descriptors (the workers'
/// rings) must be closed. In a child process: its threads and descriptors
/// are its own.
#[test]
#[cfg(target_os = "linux")]
fn a_runtime_ended_beside_loops_of_cached_reads_leaves_nothing_behind() {
    crate::util::child_test(
        "coop::a_runtime_ended_beside_loops_of_cached_reads_leaves_nothing_behind",
        &[],
        Duration::from_secs(60),
        || {
            let dir = tempdir();
            let p = warm_file(dir.path(), 4 << 20);
            // The engine first: it stays (its threads, which the thread-pool
            // driver adds on demand, are not the runtime's).
            let _ = overlapped_tokio::engine();
            // And tokio's process-wide state: a runtime with its drivers
            // made once (with tokio's `signal` feature, which the workspace
            // enables for the CLI, the first one opens a socket pair that
            // lives as long as the process).
            drop(crate::util::multi_thread());
            let base_fds = fds();
            let base_targets = fd_targets();
            for timeout in [true, false] {
                let rt = crate::util::multi_thread();
                let stop = Arc::new(AtomicBool::new(false));
                for _ in 0..2 {
                    // No limit: only the runtime's end stops them.
                    rt.spawn(read_in_a_loop(
                        p.clone(),
                        stop.clone(),
                        Duration::from_secs(3600),
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
                if timeout {
                    rt.shutdown_timeout(Duration::from_millis(100));
                } else {
                    drop(rt);
                }
                let gone = crate::util::wait_until(Duration::from_secs(10), || {
                    workers() == 0 && fds() <= base_fds
                });
                assert!(
                    gone,
                    "after the runtime's end (shutdown_timeout: {timeout}): {} tokio workers \
                     left, {} descriptors ({base_fds} before: {base_targets:?}): {:?}; running \
                     threads: {:?}",
                    workers(),
                    fds(),
                    fd_targets(),
                    running_threads()
                );
            }
        },
    );
}
