//! The engine: one per process is the normal case. It picks a driver,
//! enforces the in-flight budget and keeps the statistics.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
#[cfg(target_os = "linux")]
use std::sync::{Mutex, Weak};

use crate::cell::{fork_generation, Completable, EngineLink, EngineState};
use crate::cell::{RingSize, RingSizes, MAX_CQ_ENTRIES, MAX_SQ_ENTRIES};
#[cfg(target_os = "linux")]
use crate::driver::aio::AioDriver;
use crate::driver::handle::DriverHandle;
use crate::driver::pool::PoolDriver;
#[cfg(target_os = "linux")]
use crate::driver::uring::engine_thread::{RingConfig, UringDriver};
#[cfg(target_os = "linux")]
use crate::driver::uring::port::Settle;
use crate::error::{Error, FallbackReason, Result};
use crate::limiter::Limiter;
use crate::stats::{Counters, Stats};

/// Which driver to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DriverChoice {
    /// `OVERLAP_DRIVER` if set, else io_uring when the kernel allows it,
    /// else Linux AIO with the thread pool beside it (`aio+pool`), else the
    /// thread pool.
    #[default]
    Auto,
    /// io_uring, or an error saying what to change.
    Uring,
    /// The bounded thread pool.
    Pool,
    /// Linux AIO for O_DIRECT reads, writes and syncs, the thread pool for
    /// the rest (`aio+pool`), even where io_uring is available; an error
    /// when `io_setup` fails.
    Aio,
    /// Windows' I/O completion ports for reads and writes, the thread pool
    /// for the rest (`iocp`); an error on another system.
    Iocp,
}

/// The driver an engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DriverKind {
    /// Linux io_uring: the kernel performs the I/O asynchronously.
    Uring,
    /// A bounded pool of threads doing blocking system calls.
    Pool,
    /// Linux AIO (`io_submit`) for O_DIRECT reads, writes and syncs, which
    /// the kernel performs asynchronously; the thread pool for the rest.
    #[serde(rename = "aio+pool")]
    Aio,
    /// Windows' I/O completion ports: overlapped `ReadFile` and
    /// `WriteFile`, completions taken with `GetQueuedCompletionStatusEx`;
    /// the thread pool for what has no overlapped form.
    Iocp,
}

impl DriverKind {
    /// `"uring"`, `"pool"`, `"aio+pool"` or `"iocp"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DriverKind::Uring => "uring",
            DriverKind::Pool => "pool",
            DriverKind::Aio => "aio+pool",
            DriverKind::Iocp => "iocp",
        }
    }
}

impl std::fmt::Display for DriverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What runs and why: returned by [`Engine::driver`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverInfo {
    /// The driver in use.
    pub kind: DriverKind,
    /// Why io_uring is not in use, when it is not.
    pub fallback: Option<FallbackReason>,
    /// For io_uring, the setup flags that the kernel accepted
    /// (e.g. `SINGLE_ISSUER|DEFER_TASKRUN`) and the kernel worker limits in
    /// force; for the pool, its thread limit; for `aio+pool`, the AIO
    /// context's size and the pool's limit.
    pub detail: String,
    /// Why Linux AIO is not in use either, when the engine fell back to
    /// the plain pool (e.g. `io_setup` failing with `fs.aio-max-nr`
    /// exhausted).
    pub aio_unavailable: Option<String>,
}

impl std::fmt::Display for DriverInfo {
    /// One line: the driver, then why the system's own (io_uring, and
    /// AIO; on Windows I/O completion ports) is not in use, e.g.
    /// `aio+pool (io_uring: io_uring_setup failed with EPERM: ...)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind.as_str())?;
        // The system's own driver, the one a fallback stands in for.
        let native = if cfg!(windows) { "iocp" } else { "io_uring" };
        match (&self.fallback, &self.aio_unavailable) {
            (None, _) => Ok(()),
            (Some(r), None) => write!(f, " ({native}: {r})"),
            (Some(r), Some(a)) => write!(f, " ({native}: {r}; AIO: {a})"),
        }
    }
}

/// Default limit on operations in flight.
pub const DEFAULT_MAX_INFLIGHT_OPS: usize = 4096;
/// Default limit on bytes in flight (64 MiB).
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 64 << 20;
/// Default number of threads for the pool driver.
pub const DEFAULT_POOL_THREADS: usize = 32;
/// Hard ceiling on pool threads, whatever the builder asks.
pub const MAX_POOL_THREADS: usize = 1024;
/// Default io_uring submission-queue size.
pub const DEFAULT_RING_ENTRIES: u32 = 256;
/// Default submission-queue entries of a thread's own ring
/// ([`EngineBuilder::thread_ring_entries`]).
pub const DEFAULT_THREAD_RING_ENTRIES: u32 = 64;
/// Default submission-queue entries of a reactor ring
/// ([`EngineBuilder::reactor_ring_entries`]).
pub const DEFAULT_REACTOR_RING_ENTRIES: u32 = crate::cell::DEFAULT_REACTOR_RING_ENTRIES;

/// Configures an [`Engine`].
///
/// ```
/// use overlapped::{Engine, DriverChoice};
/// let engine = Engine::builder()
///     .driver(DriverChoice::Auto)
///     .max_inflight_bytes(16 << 20)
///     .build()
///     .unwrap();
/// println!("running on {}", engine.driver().kind);
/// ```
#[derive(Debug, Clone)]
pub struct EngineBuilder {
    driver: DriverChoice,
    max_inflight_ops: usize,
    max_inflight_bytes: usize,
    pool_threads: usize,
    ring_entries: u32,
    thread_ring_entries: u32,
    reactor_ring_entries: u32,
    fast_path: bool,
    use_env: bool,
    max_kernel_workers: Option<u32>,
    submit_chunk: usize,
    waits_on_caller: bool,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            driver: DriverChoice::Auto,
            max_inflight_ops: DEFAULT_MAX_INFLIGHT_OPS,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            pool_threads: DEFAULT_POOL_THREADS,
            ring_entries: DEFAULT_RING_ENTRIES,
            thread_ring_entries: DEFAULT_THREAD_RING_ENTRIES,
            reactor_ring_entries: DEFAULT_REACTOR_RING_ENTRIES,
            fast_path: true,
            use_env: true,
            max_kernel_workers: None,
            submit_chunk: 0,
            waits_on_caller: false,
        }
    }
}

impl EngineBuilder {
    /// Chooses the driver. An explicit `Uring` or `Pool` overrides
    /// `OVERLAP_DRIVER`; `Auto` obeys it.
    pub fn driver(mut self, choice: DriverChoice) -> Self {
        self.driver = choice;
        self
    }
    /// Ignore the `OVERLAP_DRIVER` environment variable.
    pub fn ignore_env(mut self) -> Self {
        self.use_env = false;
        self
    }
    /// Most operations in flight at once (default 4096). At most
    /// 16,777,215: a larger value means that (the budget keeps operations
    /// and bytes in one atomic word).
    pub fn max_inflight_ops(mut self, n: usize) -> Self {
        self.max_inflight_ops = n;
        self
    }
    /// Most bytes in flight at once (default 64 MiB; at most 1 TiB, a larger
    /// value means that). A single request larger than this is admitted
    /// only while nothing else is in flight.
    pub fn max_inflight_bytes(mut self, n: usize) -> Self {
        self.max_inflight_bytes = n;
        self
    }
    /// Threads of the pool driver (default 32, at most 1024). They are started
    /// on demand.
    pub fn pool_threads(mut self, n: usize) -> Self {
        self.pool_threads = n;
        self
    }
    /// io_uring submission-queue entries of the engine thread's ring and of
    /// each port's ring (default 256, at most 32768; rounded up to a power
    /// of two by the kernel). Their completion queues hold
    /// `max_inflight_ops`, at least twice this and at most 65,536.
    pub fn ring_entries(mut self, n: u32) -> Self {
        self.ring_entries = n;
        self
    }
    /// io_uring submission-queue entries of each thread's own ring, made by
    /// the thread's first `.wait()` or [`block_on`](crate::block_on) of an
    /// operation of this engine (default 64, at most 32768; its completion
    /// queue holds 16 times as many). A thread has one such ring for every
    /// engine: the first engine it waits for sizes it.
    pub fn thread_ring_entries(mut self, n: u32) -> Self {
        self.thread_ring_entries = n;
        self
    }
    /// io_uring submission-queue entries of each reactor ring made for this
    /// engine ([`Engine::reactor_ring`]; default 256, at most 32768; its
    /// completion queue holds 16 times as many).
    pub fn reactor_ring_entries(mut self, n: u32) -> Self {
        self.reactor_ring_entries = n;
        self
    }
    /// Try `preadv2(RWF_NOWAIT)` on the caller's thread before queueing a
    /// buffered read (default on). A page-cache hit then costs one system call
    /// and no thread hand-off. On a miss the kernel starts the disk read on
    /// the calling thread, so after 4 consecutive misses on a file the fast
    /// path is skipped for that file, and retried on one read in 32 or once
    /// the last miss is 10 ms old. It also governs `path::metadata` and
    /// `path::symlink_metadata` of paths the dentry cache holds (answered on
    /// the caller: see [`crate::path::metadata`]).
    pub fn cache_fast_path(mut self, on: bool) -> Self {
        self.fast_path = on;
        self
    }

    /// Make the system call of an operation waited for with
    /// [`Op::wait`](crate::Op::wait) on the waiting thread, as `pread` does,
    /// whatever the driver (default off: on io_uring the thread's own ring
    /// takes it, on Linux AIO `io_submit`; the pool driver always runs it on
    /// the waiting thread). A thread that blocks until the result gains
    /// nothing from the kernel's asynchrony, and a ring's request costs CPU:
    /// with 64 threads each blocking on 4 KiB O_DIRECT reads, fio's own
    /// io_uring at depth 1 takes about 15% more CPU per read than its
    /// `pread` (BENCHMARKS.md, the C section). Turn it on for a program whose
    /// threads mostly block on one operation at a time; futures, ports and
    /// [`block_on`](crate::block_on) of several operations are unaffected
    /// (and a wait on a thread whose own ring holds operations still goes
    /// through that ring, which submits them). An operation so run is
    /// counted in [`Stats::ran_on_caller`](crate::Stats::ran_on_caller),
    /// `submit_syscalls` and as inline. As on the pool driver, a shutdown
    /// does not wait for a call in progress on a waiting thread (the
    /// caller's buffer is the caller's until it returns).
    pub fn waits_on_caller(mut self, on: bool) -> Self {
        self.waits_on_caller = on;
        self
    }

    /// At most `n` kernel worker threads (io_uring's `iou-wrk`) for work the
    /// kernel cannot do asynchronously, in each of io-wq's two classes
    /// (default: the kernel's, which for file I/O is the smaller of the ring
    /// size and 4 per CPU). The limits in force are reported in
    /// [`DriverInfo::detail`].
    pub fn max_kernel_workers(mut self, n: u32) -> Self {
        self.max_kernel_workers = Some(n);
        self
    }

    /// io_uring: hand the kernel at most `n` operations per `io_uring_enter`
    /// (0, the default, adapts: an eighth of the operations in flight, 4 to
    /// 64). The kernel holds back every request of a submission until all
    /// are issued, so on shallow queues small chunks give more IOPS for a
    /// little more CPU; large ones suit devices that like big batches.
    pub fn submit_chunk(mut self, n: usize) -> Self {
        self.submit_chunk = n;
        self
    }

    /// Starts the engine.
    pub fn build(self) -> Result<Engine> {
        self.validate()?;
        let (choice, forced_by) = self.resolve_choice()?;
        let counters = Arc::new(Counters::default());
        let limiter = Arc::new(Limiter::new(
            self.max_inflight_ops,
            self.max_inflight_bytes,
            counters.clone(),
        ));
        let rings = self.ring_sizes();
        let (driver, info) = self.start_driver(choice, forced_by, rings.engine, &counters)?;
        let shared = Arc::new(Shared {
            state: EngineState {
                counters,
                max_kernel_workers: self.max_kernel_workers,
                rings,
                own_ring_ops: AtomicUsize::new(0),
                pools: Default::default(),
                generation: fork_generation(),
                shut: AtomicBool::new(false),
            },
            driver,
            limiter,
            fast_path: self.fast_path,
            waits_on_caller: self.waits_on_caller,
            info,
            #[cfg(target_os = "linux")]
            port_rings: Mutex::new(Vec::new()),
        });
        Ok(Engine {
            inner: Arc::new(EngineInner { shared }),
        })
    }

    /// Rejects limits out of their ranges, with the range in the message.
    fn validate(&self) -> Result<()> {
        if self.max_inflight_ops == 0 || self.max_inflight_bytes == 0 {
            return Err(Error::InvalidInput(
                "in-flight limits must be at least 1".into(),
            ));
        }
        if self.pool_threads == 0 || self.pool_threads > MAX_POOL_THREADS {
            return Err(Error::InvalidInput(format!(
                "pool_threads must be between 1 and {MAX_POOL_THREADS}, got {}",
                self.pool_threads
            )));
        }
        for (what, n) in [
            ("ring_entries", self.ring_entries),
            ("thread_ring_entries", self.thread_ring_entries),
            ("reactor_ring_entries", self.reactor_ring_entries),
        ] {
            if !(1..=MAX_SQ_ENTRIES).contains(&n) {
                return Err(Error::InvalidInput(format!(
                    "{what} must be between 1 and {MAX_SQ_ENTRIES}, got {n}"
                )));
            }
        }
        if let Some(n) = self.max_kernel_workers.filter(|n| !(1..=4096).contains(n)) {
            return Err(Error::InvalidInput(format!(
                "max_kernel_workers must be between 1 and 4096, got {n}"
            )));
        }
        Ok(())
    }

    /// The size of every kind of ring, from the builder's settings (which
    /// `validate` checked): the one place ring sizes are decided.
    fn ring_sizes(&self) -> RingSizes {
        let ops = u32::try_from(self.max_inflight_ops).unwrap_or(u32::MAX);
        let sizes = RingSizes {
            engine: RingSize {
                sq: self.ring_entries,
                cq: ops.clamp(self.ring_entries * 2, MAX_CQ_ENTRIES),
            },
            thread: RingSize::per_thread(self.thread_ring_entries),
            reactor: RingSize::per_thread(self.reactor_ring_entries),
        };
        debug_assert!(
            sizes.engine.is_valid() && sizes.thread.is_valid() && sizes.reactor.is_valid(),
            "validated settings give sizes the kernel takes"
        );
        sizes
    }

    /// The driver to start and who chose it: the builder's choice, or
    /// `OVERLAP_DRIVER` when the choice is `Auto` and the environment counts.
    fn resolve_choice(&self) -> Result<(DriverChoice, String)> {
        let mut choice = self.driver;
        let mut forced_by = "the engine builder".to_string();
        if choice == DriverChoice::Auto && self.use_env {
            if let Ok(v) = std::env::var("OVERLAP_DRIVER") {
                forced_by = format!("OVERLAP_DRIVER={v}");
                choice = match v.trim() {
                    "uring" | "io_uring" => DriverChoice::Uring,
                    "pool" => DriverChoice::Pool,
                    "aio" | "aio+pool" => DriverChoice::Aio,
                    "iocp" => DriverChoice::Iocp,
                    "" | "auto" => DriverChoice::Auto,
                    other => {
                        return Err(Error::InvalidInput(format!(
                            "OVERLAP_DRIVER={other}: expected uring, aio, iocp, pool or auto"
                        )))
                    }
                };
            }
        }
        Ok((choice, forced_by))
    }

    /// Starts the driver `choice` names and describes it: I/O completion
    /// ports (`Auto` falls back to the pool, and says why, when the port
    /// cannot be made), or the pool; io_uring and Linux AIO are errors that
    /// say why.
    #[cfg(windows)]
    fn start_driver(
        &self,
        choice: DriverChoice,
        forced_by: String,
        _ring: RingSize,
        counters: &Arc<Counters>,
    ) -> Result<(DriverHandle, DriverInfo)> {
        use crate::driver::iocp::{IocpDriver, MAX_THREADS};
        let fallback = match choice {
            DriverChoice::Uring => {
                return Err(Error::UringUnavailable {
                    reason: FallbackReason::OtherSystem,
                })
            }
            DriverChoice::Aio => {
                return Err(Error::AioUnavailable {
                    reason: "Linux AIO is Linux's, and this system is not Linux".to_string(),
                })
            }
            DriverChoice::Pool => FallbackReason::Forced(forced_by),
            DriverChoice::Iocp | DriverChoice::Auto => {
                let threads = std::thread::available_parallelism()
                    .map_or(1, |n| n.get())
                    .clamp(1, MAX_THREADS);
                match IocpDriver::start(threads, self.pool_threads, counters.clone()) {
                    Ok(d) => {
                        let info = DriverInfo {
                            kind: DriverKind::Iocp,
                            fallback: None,
                            detail: format!(
                                "one completion port, {threads} completion threads; pool of {} for the rest",
                                self.pool_detail()
                            ),
                            aio_unavailable: None,
                        };
                        return Ok((DriverHandle::Iocp(d), info));
                    }
                    Err(e) if choice == DriverChoice::Auto => {
                        // Said where the driver is described: no port, so
                        // the pool runs everything.
                        let why = format!("CreateIoCompletionPort failed: {e}");
                        return Ok(self.start_pool(
                            FallbackReason::OtherSystem,
                            Some(why),
                            counters,
                        ));
                    }
                    Err(e) => {
                        return Err(Error::IocpUnavailable {
                            reason: format!("CreateIoCompletionPort failed: {e}"),
                        })
                    }
                }
            }
        };
        Ok(self.start_pool(fallback, None, counters))
    }

    /// Starts the driver `choice` names and describes it: the pool, as
    /// asked, or by `Auto` on a system whose own driver the engine does not
    /// have; io_uring and Linux AIO are errors that say why.
    #[cfg(not(any(target_os = "linux", windows)))]
    fn start_driver(
        &self,
        choice: DriverChoice,
        forced_by: String,
        _ring: RingSize,
        counters: &Arc<Counters>,
    ) -> Result<(DriverHandle, DriverInfo)> {
        let fallback = match choice {
            DriverChoice::Uring => {
                return Err(Error::UringUnavailable {
                    reason: FallbackReason::OtherSystem,
                })
            }
            DriverChoice::Aio => {
                return Err(Error::AioUnavailable {
                    reason: "Linux AIO is Linux's, and this system is not Linux".to_string(),
                })
            }
            DriverChoice::Iocp => {
                return Err(Error::IocpUnavailable {
                    reason: "I/O completion ports are Windows', and this system is not Windows"
                        .to_string(),
                })
            }
            DriverChoice::Pool => FallbackReason::Forced(forced_by),
            DriverChoice::Auto => FallbackReason::OtherSystem,
        };
        Ok(self.start_pool(fallback, None, counters))
    }

    /// Starts the driver `choice` names and describes it; `Auto` falls back
    /// from io_uring to AIO with the pool beside it, else to the pool alone.
    #[cfg(target_os = "linux")]
    fn start_driver(
        &self,
        choice: DriverChoice,
        forced_by: String,
        ring: RingSize,
        counters: &Arc<Counters>,
    ) -> Result<(DriverHandle, DriverInfo)> {
        Ok(match choice {
            DriverChoice::Iocp => {
                return Err(Error::IocpUnavailable {
                    reason: "I/O completion ports are Windows', and this system is not Windows"
                        .to_string(),
                })
            }
            DriverChoice::Pool => {
                self.start_pool(FallbackReason::Forced(forced_by), None, counters)
            }
            DriverChoice::Aio => {
                let (d, info) = self.start_aio_or_pool(FallbackReason::Forced(forced_by), counters);
                if let Some(reason) = info.aio_unavailable {
                    d.shutdown();
                    return Err(Error::AioUnavailable { reason });
                }
                (d, info)
            }
            DriverChoice::Uring | DriverChoice::Auto => {
                let config = RingConfig {
                    size: ring,
                    max_kernel_workers: self.max_kernel_workers,
                    submit_chunk: self.submit_chunk,
                };
                match UringDriver::start(config, counters.clone()) {
                    Ok((d, flags)) => (
                        DriverHandle::Uring(d),
                        DriverInfo {
                            kind: DriverKind::Uring,
                            fallback: None,
                            detail: flags,
                            aio_unavailable: None,
                        },
                    ),
                    Err(reason) if choice == DriverChoice::Auto => {
                        self.start_aio_or_pool(reason, counters)
                    }
                    Err(reason) => return Err(Error::UringUnavailable { reason }),
                }
            }
        })
    }

    /// AIO with the pool beside it, else the pool alone and why.
    #[cfg(target_os = "linux")]
    fn start_aio_or_pool(
        &self,
        fallback: FallbackReason,
        counters: &Arc<Counters>,
    ) -> (DriverHandle, DriverInfo) {
        let aio_events = self
            .max_inflight_ops
            .min(crate::driver::aio::MAX_AIO_EVENTS);
        let pool = PoolDriver::start(self.pool_threads, counters.clone());
        match AioDriver::start(aio_events, pool, counters.clone()) {
            Ok(d) => (
                DriverHandle::Aio(d),
                DriverInfo {
                    kind: DriverKind::Aio,
                    fallback: Some(fallback),
                    detail: format!(
                        "AIO context of {aio_events} events for O_DIRECT reads, writes and syncs; pool of {} for the rest",
                        self.pool_detail()
                    ),
                    aio_unavailable: None,
                },
            ),
            Err((why, pool)) => (
                DriverHandle::Pool(pool),
                DriverInfo {
                    kind: DriverKind::Pool,
                    fallback: Some(fallback),
                    detail: self.pool_detail(),
                    aio_unavailable: Some(why),
                },
            ),
        }
    }

    /// The pool as the engine's driver, described: `fallback` says why not
    /// the system's own driver, `why` what failed, if anything.
    fn start_pool(
        &self,
        fallback: FallbackReason,
        why: Option<String>,
        counters: &Arc<Counters>,
    ) -> (DriverHandle, DriverInfo) {
        let d = PoolDriver::start(self.pool_threads, counters.clone());
        let detail = match why {
            Some(why) => format!("{}; {why}", self.pool_detail()),
            None => self.pool_detail(),
        };
        debug_assert!(!detail.is_empty(), "a driver is described");
        let info = DriverInfo {
            kind: DriverKind::Pool,
            fallback: Some(fallback),
            detail,
            aio_unavailable: None,
        };
        (DriverHandle::Pool(d), info)
    }

    /// The pool's limit as [`DriverInfo::detail`] states it.
    fn pool_detail(&self) -> String {
        format!("up to {} threads", self.pool_threads)
    }
}

/// State shared by the engine's handles, its files and its in-flight
/// operations. What the drivers use of it is its [`EngineState`], to which
/// it dereferences.
pub(crate) struct Shared {
    pub driver: DriverHandle,
    pub limiter: Arc<Limiter>,
    pub fast_path: bool,
    /// [`EngineBuilder::waits_on_caller`].
    pub waits_on_caller: bool,
    pub info: DriverInfo,
    /// The rings of this engine's ports, which shutdown settles.
    #[cfg(target_os = "linux")]
    port_rings: Mutex<Vec<Weak<dyn Settle>>>,
    /// The counters, the ring sizes, the operations on threads' and
    /// reactors' rings, the fork generation, the shutdown flag.
    pub state: EngineState,
}

impl std::ops::Deref for Shared {
    type Target = EngineState;
    #[inline]
    fn deref(&self) -> &EngineState {
        &self.state
    }
}

impl EngineLink for Shared {
    fn state(&self) -> &EngineState {
        &self.state
    }

    fn submit_to_driver(&self, op: Arc<dyn Completable>, urgent: bool) {
        self.driver.submit_as(op, urgent);
    }

    fn nudge(&self) {
        self.driver.nudge();
    }
}

impl Shared {
    /// Keeps a port's ring for shutdown to settle.
    #[cfg(target_os = "linux")]
    pub(crate) fn register_port_ring(&self, ring: Weak<dyn Settle>) {
        let mut rings = self.port_rings.lock().unwrap_or_else(|p| p.into_inner());
        rings.retain(|w| w.strong_count() > 0);
        rings.push(ring);
    }

    fn shutdown(&self) {
        if self.forked() {
            // A child's copy of a parent's engine: its threads, its rings
            // and the operations counted in flight are the parent's. Refuse
            // what comes; wait for and join nothing (leaked, not freed).
            self.shut.store(true, Ordering::Release);
            return;
        }
        if !self.shut.swap(true, Ordering::AcqRel) {
            #[cfg(target_os = "linux")]
            self.settle_rings();
            self.driver.shutdown();
        }
    }

    /// Waits until the kernel is done with what this engine has on rings
    /// other than its driver's. Operations on threads' own rings are reaped
    /// by the threads waiting for them; the calling thread reaps its own.
    /// Reactor rings are reaped here too: the executor task that would reap
    /// them may be the one blocked in this call. Ports' rings are settled:
    /// their completions are taken into each port's stash, for its workers.
    #[cfg(target_os = "linux")]
    fn settle_rings(&self) {
        crate::driver::uring::thread::drain_current_thread();
        loop {
            crate::driver::uring::reactor::reap_all();
            let ports: Vec<_> = self
                .port_rings
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter_map(Weak::upgrade)
                .collect();
            let mut settled = true;
            for p in ports {
                settled &= p.settle();
            }
            if settled && self.own_ring_ops.load(Ordering::Acquire) == 0 {
                crate::driver::uring::reactor::release_idle_orphans();
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

struct EngineInner {
    shared: Arc<Shared>,
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        if self.shared.forked() {
            // A parent's engine in a forked child: nothing of its driver
            // (threads, rings, AIO context) may be torn down here.
            std::mem::forget(Arc::clone(&self.shared));
        }
        self.shared.shutdown();
    }
}

/// The I/O engine. Cheap to clone; `Send + Sync`; usable from any thread and
/// any executor (tokio, smol, `futures::executor`, or plain threads with
/// `.wait()`).
///
/// Dropping the last handle (files and ports hold one) shuts the engine down:
/// it waits for every operation in flight to complete before returning, so
/// nothing is freed while the kernel may touch it.
///
/// An engine does not cross `fork`: a child process gets none of its
/// threads, and an io_uring or AIO context belongs to the process that made
/// it. Make a new engine in the child (threads' own rings notice a fork and
/// are made anew; an inherited engine's other paths are not usable there).
///
/// ```
/// use overlapped::{Engine, OpenOptions};
/// let engine = Engine::new().unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let file = OpenOptions::new().read(true).write(true).create(true)
///     .open(&engine, dir.path().join("f")).wait().unwrap();
/// let (res, _buf) = file.write_all_at(b"hello".to_vec(), 0).wait();
/// res.unwrap();
/// let (res, buf) = file.read_at(vec![0u8; 5], 0).wait();
/// assert_eq!(res.unwrap(), 5);
/// assert_eq!(&buf, b"hello");
/// ```
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("driver", &self.inner.shared.info)
            .finish()
    }
}

impl Engine {
    /// An engine with default settings (see [`EngineBuilder`]).
    pub fn new() -> Result<Engine> {
        EngineBuilder::default().build()
    }

    /// A builder for an engine with other settings.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The driver in use, and why io_uring is not, when it is not
    /// (`format!("{}", engine.driver())` says both on one line).
    pub fn driver(&self) -> &DriverInfo {
        &self.inner.shared.info
    }

    /// A [`ReactorRing`](crate::ReactorRing) of the size this engine's
    /// builder set ([`EngineBuilder::reactor_ring_entries`]), for an
    /// executor thread that polls this engine's futures; the reason
    /// io_uring cannot be used otherwise (on an engine whose driver is not
    /// io_uring too: its operations never reach the ring).
    #[cfg(target_os = "linux")]
    pub fn reactor_ring(&self) -> std::result::Result<crate::ReactorRing, FallbackReason> {
        if self.driver().kind != DriverKind::Uring {
            return Err(FallbackReason::Other(format!(
                "the engine runs on {}, not io_uring",
                self.driver().kind
            )));
        }
        crate::ReactorRing::with_size(self.inner.shared.rings.reactor)
    }

    /// Registers the memory of `pool`, a contiguous pool
    /// ([`AlignedBufPool::contiguous`](crate::AlignedBufPool::contiguous)),
    /// with the kernel for this engine's own rings: the engine thread's,
    /// each thread's own ring (`.wait()`, [`block_on`](crate::block_on))
    /// and the reactor rings of executors (overlapped-tokio). From then on
    /// their reads and writes into the pool's buffers go as io_uring's
    /// `READ_FIXED` and `WRITE_FIXED`, which skip pinning the buffer's pages
    /// for every operation (on a fast device, several percent of a read's
    /// CPU; counted in [`Stats::fixed_buffer_ops`](crate::Stats)). Nothing
    /// changes for other buffers. Ports register their own
    /// ([`Port::register_buffers`](crate::Port::register_buffers)).
    ///
    /// The engine keeps the pool's memory allocated until it is dropped.
    /// Each ring registers the pool when a buffer of it first reaches that
    /// ring (one system call; the kernel pins the pool's pages once per
    /// ring), and lets go of it at its next operation once the pool is gone
    /// (the engine dropped, and every buffer of the pool). A ring that
    /// cannot register it (the
    /// kernel's table of 8 is full, or `RLIMIT_MEMLOCK` is too low for a
    /// process without `CAP_IPC_LOCK`) goes on with plain reads and writes
    /// into it, and counts the refusal in
    /// [`Stats::buffer_registrations_refused`](crate::Stats).
    ///
    /// Returns `Ok(false)` on the thread-pool and AIO drivers, which have no
    /// ring: operations work as before. Errors ([`Error::InvalidInput`]): a
    /// pool that is not contiguous, holds more than 1 GiB (the kernel's
    /// limit for one registered buffer), or is a ninth pool. Registering a
    /// pool again does nothing.
    pub fn register_buffers(&self, pool: &crate::AlignedBufPool) -> Result<bool> {
        let Some(arena) = pool.arena() else {
            return Err(Error::InvalidInput(
                "register_buffers takes a pool made with AlignedBufPool::contiguous".into(),
            ));
        };
        if arena.len() > 1 << 30 {
            return Err(Error::InvalidInput(format!(
                "a registered pool holds at most 1 GiB (the kernel's limit for one registered \
                 buffer); this one holds {}",
                arena.len()
            )));
        }
        if self.inner.shared.info.kind != DriverKind::Uring {
            return Ok(false);
        }
        let keep: crate::cell::Keep = arena.clone();
        let added = crate::cell::RegisteredPool {
            start: arena.start(),
            len: arena.len(),
            keep,
        };
        match self.inner.shared.pools.add(added) {
            Ok(_) => Ok(true),
            Err(max) => Err(Error::InvalidInput(format!(
                "an engine registers at most {max} pools"
            ))),
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.shared.counters;
        if self.inner.shared.info.kind == DriverKind::Uring {
            c.workers.lock().unwrap_or_else(|p| p.into_inner()).sample();
        }
        c.snapshot()
    }

    /// Operations and bytes in flight right now.
    pub fn in_flight(&self) -> (usize, usize) {
        self.inner.shared.limiter.in_flight()
    }

    /// Whether this process is a `fork` of the one that made the engine.
    /// Such an engine belongs to the parent: its threads are not in this
    /// process, operations that would need them fail with
    /// [`Error::Forked`](crate::Error::Forked), and it must not be shut
    /// down here (forget it, and make a new engine in this process).
    pub fn is_forked_copy(&self) -> bool {
        self.inner.shared.forked()
    }

    /// The in-flight budget: (operations, bytes).
    pub fn limits(&self) -> (usize, usize) {
        (
            self.inner.shared.limiter.max_ops(),
            self.inner.shared.limiter.max_bytes(),
        )
    }

    /// Stops accepting operations, waits for those in flight to complete, and
    /// stops the driver's threads. Later operations fail with
    /// [`Error::Shutdown`]. Dropping the last handle does the same.
    pub fn shutdown(&self) {
        self.inner.shared.shutdown();
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }
}
