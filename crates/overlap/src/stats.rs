//! Statistics that tell the truth: what completed inline and what really
//! overlapped, and how often the kernel handed work to its blocking workers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

mod fields;

/// A snapshot of an engine's counters. All counts are since the engine started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Operations accepted (including those answered by the cache fast path).
    pub submitted: u64,
    /// Operations whose result is known.
    pub completed: u64,
    /// Completions that were synchronous: answered by the fast path on the
    /// caller's thread, or already complete when the submitting system call
    /// returned. On Linux AIO, whose `io_submit` never returns a result, a
    /// completion reaped before the submitter has recorded that its call
    /// returned counts here too: a device that answers while the submitter
    /// is preempted on its way back makes a direct read inline.
    pub completed_inline: u64,
    /// Completions that really overlapped with the caller.
    pub completed_async: u64,
    /// Operations that ended with an error.
    pub errors: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Highest number of operations in flight at once.
    pub inflight_ops_high_water: u64,
    /// Highest number of bytes in flight at once.
    pub inflight_bytes_high_water: u64,
    /// System calls made to submit work (`io_uring_enter` with submissions,
    /// or one per operation for the thread pool).
    pub submit_syscalls: u64,
    /// Buffered reads answered from the page cache by `preadv2(RWF_NOWAIT)`.
    pub fast_path_hits: u64,
    /// Buffered reads the fast path tried and sent on to the driver.
    pub fast_path_misses: u64,
    /// Buffered reads that went straight to the driver because the fast
    /// path had missed repeatedly on that file (a miss makes the kernel
    /// start the disk read on the calling thread).
    pub fast_path_skipped: u64,
    /// Times a submitter had to wait for the in-flight budget.
    pub backpressure_waits: u64,
    /// Operations submitted again because the thread that submitted them
    /// on a port's or a reactor's ring exited while they were in flight:
    /// Linux cancels the queued kernel-worker work of an exiting thread
    /// (`ECANCELED`) and finishes its buffered reads without the process's
    /// memory (`EFAULT`), in both cases unperformed. Their callers see only
    /// the result of the second submission.
    pub resubmitted_after_exit: u64,
    /// Operations submitted on the ring of the thread waiting for them
    /// (`.wait()`, [`block_on`](crate::block_on)).
    pub submitted_on_thread_rings: u64,
    /// Operations submitted on an executor's reactor ring
    /// ([`ReactorRing`](crate::ReactorRing): the tokio integration's path).
    /// The rest of `submitted` went through the engine's driver (its thread,
    /// or the pool), a port's ring, or the fast path.
    pub submitted_on_reactor_rings: u64,
    /// Operations completed by the engine's ring watcher, or by an engine
    /// shutting down, rather than by their reactor ring's executor: the
    /// ring was orphaned, or nobody reaped it for a look of the watcher
    /// (see [`ReactorRing`](crate::ReactorRing)).
    pub reaped_by_watcher: u64,
    /// Operations a thread blocked in `.wait()` ran itself as a blocking
    /// system call: on a thread-pool engine, on the pool side of the AIO
    /// driver, or on any engine built with
    /// [`waits_on_caller`](crate::EngineBuilder::waits_on_caller). Counted in
    /// `completed_inline` and `submit_syscalls` too.
    pub ran_on_caller: u64,
    /// Operations handed to the kernel through Linux AIO (`io_submit`):
    /// O_DIRECT reads and writes, and syncs where the kernel has them, on the
    /// `aio+pool` driver.
    pub submitted_aio: u64,
    /// Operations given to the thread pool's workers.
    pub submitted_pool: u64,
    /// Reads and writes issued as overlapped `ReadFile`/`WriteFile` on the
    /// `iocp` driver's completion port (Windows), whether they completed
    /// within the call (`completed_inline`) or through the port.
    pub submitted_iocp: u64,
    /// Overlapped calls Windows refused for lack of resources
    /// (`ERROR_INVALID_USER_BUFFER`, `ERROR_NOT_ENOUGH_MEMORY`: too many
    /// requests outstanding, KB 156932) and the `iocp` driver issued again
    /// once others completed (or handed to its pool): backpressure, never
    /// an error.
    pub iocp_busy_retries: u64,
    /// Overlapped calls that did not finish within the call, for a thread
    /// waiting on them alone (`.wait()`) on the `iocp` driver: issued with
    /// that thread's event and no completion packet, so that the
    /// completion woke the waiter itself and no completion thread took
    /// part (counted in `submitted_iocp` and `completed_async` too).
    pub iocp_waited_on_caller: u64,
    /// Linux AIO completions reaped by a thread waiting on the engine (a
    /// port's worker, a thread in `.wait()` or [`block_on`](crate::block_on))
    /// in `io_getevents` itself, rather than by the engine's reaper thread
    /// and handed over.
    pub aio_reaped_by_waiters: u64,
    /// Distinct kernel io_uring worker threads (`iou-wrk`) seen doing work:
    /// operations the kernel could not do asynchronously and handed to
    /// blocking workers. Counts every ring of the process.
    pub kernel_workers_seen: u64,
    /// Reads and writes submitted as `READ_FIXED`/`WRITE_FIXED`, into memory
    /// registered with the kernel, by a port
    /// ([`Port::register_buffers`](crate::Port::register_buffers)) or by one
    /// of the engine's own rings
    /// ([`Engine::register_buffers`](crate::Engine::register_buffers)): the
    /// kernel did not pin the buffer's pages for each of them.
    pub fixed_buffer_ops: u64,
    /// Reads and writes a port submitted by a registered file
    /// ([`Port::register_file`](crate::Port::register_file)): the kernel
    /// skipped looking the descriptor up for each of them.
    pub fixed_file_ops: u64,
    /// Times one of the engine's own rings could not register a pool
    /// registered with the engine
    /// ([`Engine::register_buffers`](crate::Engine::register_buffers)): the
    /// kernel refused it there (`ENOMEM`: the pinned pages would pass
    /// `RLIMIT_MEMLOCK`, for a process without `CAP_IPC_LOCK`), or lacks
    /// `READ_FIXED`. That ring's reads and writes into the pool went as plain
    /// ones, correct but with the pages pinned for each; it does not try the
    /// pool again while the pool lives. (A port's refusal is the error of
    /// its own `register_buffers`.)
    pub buffer_registrations_refused: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub submitted: AtomicU64,
    pub completed: AtomicU64,
    pub inline: AtomicU64,
    pub errors: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub ops_hwm: AtomicUsize,
    pub bytes_hwm: AtomicUsize,
    pub submit_syscalls: AtomicU64,
    /// Reads answered by the fast path; they are counted in `submitted`,
    /// `completed`, `inline` and `bytes_read` only when a snapshot is taken.
    pub fast_hits: AtomicU64,
    pub fast_bytes: AtomicU64,
    pub fast_skipped: AtomicU64,
    pub fast_misses: AtomicU64,
    pub backpressure_waits: AtomicU64,
    pub resubmitted: AtomicU64,
    pub thread_ring_submitted: AtomicU64,
    pub reactor_submitted: AtomicU64,
    pub watcher_reaped: AtomicU64,
    pub ran_on_caller: AtomicU64,
    pub aio_submitted: AtomicU64,
    pub pool_submitted: AtomicU64,
    /// Reads and writes issued on the IOCP driver's port (pending or done at once).
    pub iocp_submitted: AtomicU64,
    /// Overlapped calls the kernel refused for lack of resources and the IOCP driver tried again.
    pub iocp_busy_retries: AtomicU64,
    /// Pending IOCP calls whose waiting thread was woken by their completion itself.
    pub iocp_waited_on_caller: AtomicU64,
    pub aio_reaped_by_waiters: AtomicU64,
    pub fixed_buffer_ops: AtomicU64,
    pub fixed_file_ops: AtomicU64,
    pub buffer_registrations_refused: AtomicU64,
    pub workers: Mutex<WorkerTracker>,
    /// When (`monotonic_ns`) the next look for kernel workers is due:
    /// before it, `sample_workers_maybe` takes no lock.
    pub next_worker_sample_ns: AtomicU64,
}

impl Counters {
    pub(crate) fn note_inflight(&self, ops: usize, bytes: usize) {
        // A load first: at steady state the marks do not move, and a load
        // leaves the shared cache line alone.
        if ops > self.ops_hwm.load(Ordering::Relaxed) {
            self.ops_hwm.fetch_max(ops, Ordering::Relaxed);
        }
        if bytes > self.bytes_hwm.load(Ordering::Relaxed) {
            self.bytes_hwm.fetch_max(bytes, Ordering::Relaxed);
        }
    }

    /// Counts a completion from a driver (fast-path hits are counted apart).
    pub(crate) fn record(&self, kind: &crate::operation::OpKind, res: i64, inline: bool) {
        use crate::operation::Transfer;
        self.completed.fetch_add(1, Ordering::Relaxed);
        if inline {
            self.inline.fetch_add(1, Ordering::Relaxed);
        }
        match kind.transfer() {
            _ if res < 0 => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
            Transfer::Read(span) => {
                debug_assert!(
                    res as u64 <= span.len as u64,
                    "a read moves at most its span's bytes"
                );
                self.bytes_read.fetch_add(res as u64, Ordering::Relaxed);
            }
            Transfer::Write(span) => {
                debug_assert!(
                    res as u64 <= span.len as u64,
                    "a write moves at most its span's bytes"
                );
                self.bytes_written.fetch_add(res as u64, Ordering::Relaxed);
            }
            Transfer::None => {}
        }
    }

    /// Looks for kernel workers that did work, at most every
    /// [`WorkerTracker::PERIOD`]; called after reaping a batch of completions.
    pub(crate) fn sample_workers_maybe(&self) {
        let now = monotonic_ns();
        if now < self.next_worker_sample_ns.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(mut w) = self.workers.try_lock() {
            self.next_worker_sample_ns.store(
                now + WorkerTracker::PERIOD.as_nanos() as u64,
                Ordering::Relaxed,
            );
            w.sample();
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let hits = self.fast_hits.load(Ordering::Relaxed);
        let completed = self.completed.load(Ordering::Relaxed) + hits;
        let inline = self.inline.load(Ordering::Relaxed) + hits;
        Stats {
            submitted: self.submitted.load(Ordering::Relaxed) + hits,
            completed,
            completed_inline: inline,
            completed_async: completed.saturating_sub(inline),
            errors: self.errors.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed)
                + self.fast_bytes.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            inflight_ops_high_water: self.ops_hwm.load(Ordering::Relaxed) as u64,
            inflight_bytes_high_water: self.bytes_hwm.load(Ordering::Relaxed) as u64,
            submit_syscalls: self.submit_syscalls.load(Ordering::Relaxed),
            fast_path_hits: self.fast_hits.load(Ordering::Relaxed),
            fast_path_misses: self.fast_misses.load(Ordering::Relaxed),
            fast_path_skipped: self.fast_skipped.load(Ordering::Relaxed),
            backpressure_waits: self.backpressure_waits.load(Ordering::Relaxed),
            resubmitted_after_exit: self.resubmitted.load(Ordering::Relaxed),
            submitted_on_thread_rings: self.thread_ring_submitted.load(Ordering::Relaxed),
            submitted_on_reactor_rings: self.reactor_submitted.load(Ordering::Relaxed),
            reaped_by_watcher: self.watcher_reaped.load(Ordering::Relaxed),
            ran_on_caller: self.ran_on_caller.load(Ordering::Relaxed),
            submitted_aio: self.aio_submitted.load(Ordering::Relaxed),
            aio_reaped_by_waiters: self.aio_reaped_by_waiters.load(Ordering::Relaxed),
            submitted_pool: self.pool_submitted.load(Ordering::Relaxed),
            submitted_iocp: self.iocp_submitted.load(Ordering::Relaxed),
            iocp_busy_retries: self.iocp_busy_retries.load(Ordering::Relaxed),
            iocp_waited_on_caller: self.iocp_waited_on_caller.load(Ordering::Relaxed),
            kernel_workers_seen: self
                .workers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .seen
                .len() as u64,
            fixed_buffer_ops: self.fixed_buffer_ops.load(Ordering::Relaxed),
            fixed_file_ops: self.fixed_file_ops.load(Ordering::Relaxed),
            buffer_registrations_refused: self.buffer_registrations_refused.load(Ordering::Relaxed),
        }
    }
}

/// Keeps the set of `iou-wrk` threads that have done work, sampled at most
/// every [`WorkerTracker::PERIOD`] (`Counters::sample_workers_maybe`).
#[derive(Default)]
pub(crate) struct WorkerTracker {
    baseline: HashMap<u32, u64>,
    seen: HashSet<u32>,
    /// Threads of this process known not to be kernel workers, so that a
    /// sample reads one file per worker instead of one per thread (a
    /// thread-per-request server has thousands). A thread id leaves the set
    /// when its thread is gone from `/proc/self/task`.
    others: HashSet<u32>,
}

impl WorkerTracker {
    /// Idle io-wq workers live for seconds, so a slow sample misses none;
    /// a fast one costs a few system calls per worker and one directory
    /// listing.
    const PERIOD: Duration = Duration::from_millis(50);

    pub(crate) fn init(&mut self) {
        self.baseline = KernelWorkers::scan(Some(&mut self.others)).runtime_ns;
    }

    pub(crate) fn sample(&mut self) {
        for (tid, ns) in KernelWorkers::scan(Some(&mut self.others)).runtime_ns {
            let before = self.baseline.insert(tid, ns);
            if before != Some(ns) {
                self.seen.insert(tid);
            }
        }
    }
}

/// The kernel io_uring worker threads (`iou-wrk-*`) of this process at one
/// moment, with how much CPU time each had used. Two snapshots tell how many
/// workers did work in between: the honest sign that the kernel could not
/// perform an operation asynchronously and handed it to a blocking thread.
///
/// ```
/// use overlapped::KernelWorkers;
/// let before = KernelWorkers::snapshot();
/// // ... run some I/O ...
/// let after = KernelWorkers::snapshot();
/// println!("{} kernel workers did work", after.active_since(&before));
/// ```
#[derive(Debug, Clone, Default)]
pub struct KernelWorkers {
    runtime_ns: HashMap<u32, u64>,
}

impl KernelWorkers {
    /// Reads `/proc/self/task`. Returns an empty snapshot where `/proc` is
    /// not mounted.
    pub fn snapshot() -> KernelWorkers {
        KernelWorkers::scan(None)
    }

    /// As [`snapshot`](Self::snapshot), skipping the threads in `others`
    /// (known not to be workers) and adding to it those found not to be;
    /// threads that have gone leave it.
    ///
    /// A thread's name cannot turn into `iou-wrk-*`: the kernel names its
    /// workers when it creates them. A thread id the kernel reuses (after
    /// its thread exited and before this saw it gone) would be skipped;
    /// Linux hands out ids cyclically up to `pid_max`, so that takes the
    /// id counter wrapping around between two samples.
    pub(crate) fn scan(mut others: Option<&mut HashSet<u32>>) -> KernelWorkers {
        let mut runtime_ns = HashMap::new();
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return KernelWorkers { runtime_ns };
        };
        let mut alive = Vec::new();
        for entry in dir.flatten() {
            let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if others.is_some() {
                alive.push(tid);
            }
            if others.as_ref().is_some_and(|o| o.contains(&tid)) {
                continue;
            }
            let path = entry.path();
            let mut name = [0u8; 32];
            let Some(name) = read_small(&path.join("comm"), &mut name) else {
                continue;
            };
            if !name.starts_with(b"iou-wrk") {
                if let Some(o) = others.as_mut() {
                    o.insert(tid);
                }
                continue;
            }
            // schedstat: "<ns on cpu> <ns waiting> <timeslices>"; a worker
            // that ran has a larger first field.
            let mut stat = [0u8; 96];
            let ns = read_small(&path.join("schedstat"), &mut stat)
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
                .unwrap_or(0);
            runtime_ns.insert(tid, ns);
        }
        if let Some(o) = others {
            if o.len() + runtime_ns.len() > alive.len() {
                alive.sort_unstable();
                o.retain(|t| alive.binary_search(t).is_ok());
            }
            debug_assert!(
                runtime_ns.keys().all(|t| !o.contains(t)),
                "a thread is a kernel worker or an ordinary thread, not both"
            );
        }
        KernelWorkers { runtime_ns }
    }

    /// Number of worker threads alive at the snapshot.
    pub fn alive(&self) -> usize {
        self.runtime_ns.len()
    }

    /// Workers that appeared or used CPU time since `before`.
    pub fn active_since(&self, before: &KernelWorkers) -> usize {
        self.runtime_ns
            .iter()
            .filter(|(tid, ns)| before.runtime_ns.get(tid) != Some(ns))
            .count()
    }
}

/// Reads a small `/proc` file into `buf` with one `read` (open, read, close:
/// no `statx` for a size hint, no allocation); `None` if it cannot be read.
fn read_small<'a>(path: &std::path::Path, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    use std::io::Read;
    let n = std::fs::File::open(path).ok()?.read(buf).ok()?;
    buf.get(..n)
}

pub(crate) use crate::sys::monotonic_ns;

impl crate::sys::Tally for Counters {
    // A hit counts as submitted, completed and inline through `fast_hits`
    // (see `Counters::snapshot`): two atomics, not five.
    fn fast_hit(&self, bytes: u64) {
        self.fast_hits.fetch_add(1, Ordering::Relaxed);
        self.fast_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    fn fast_miss(&self) {
        self.fast_misses.fetch_add(1, Ordering::Relaxed);
    }
    fn fast_skipped(&self) {
        self.fast_skipped.fetch_add(1, Ordering::Relaxed);
    }
    fn inline_done(&self, error: bool) {
        self.submitted.fetch_add(1, Ordering::Relaxed);
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.inline.fetch_add(1, Ordering::Relaxed);
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn gettid() -> u32 {
        // SAFETY: no arguments; gettid cannot fail.
        unsafe { libc::gettid() as u32 }
    }

    /// The tracker reads each ordinary thread's name once, and forgets a
    /// thread once it is gone (so that a reused id would be looked at again).
    #[test]
    fn ordinary_threads_are_classified_once_and_forgotten_when_gone() {
        if std::fs::read_dir("/proc/self/task").is_err() {
            eprintln!("SKIPPED: /proc is not mounted");
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            let _ = stop_rx.recv();
        });
        let other = rx.recv().unwrap();
        let mut others = HashSet::new();
        let first = KernelWorkers::scan(Some(&mut others));
        assert!(others.contains(&gettid()) && others.contains(&other));
        assert!(first.runtime_ns.keys().all(|t| !others.contains(t)));
        // Same workers with or without the cache.
        let cached = KernelWorkers::scan(Some(&mut others));
        let plain = KernelWorkers::snapshot();
        let mut a: Vec<_> = cached.runtime_ns.keys().collect();
        let mut b: Vec<_> = plain.runtime_ns.keys().collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
        stop_tx.send(()).unwrap();
        t.join().unwrap();
        // `join` returns when the thread clears its tid (before the kernel
        // releases the task): wait for its /proc entry to go, as a later
        // sample would find it gone.
        let gone = std::path::PathBuf::from(format!("/proc/self/task/{other}"));
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while gone.exists() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        KernelWorkers::scan(Some(&mut others));
        assert!(
            !others.contains(&other),
            "an exited thread's id stays cached: a reused id would never be looked at"
        );
        assert!(others.contains(&gettid()));
    }
}
