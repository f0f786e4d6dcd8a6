//! The completion port: submit with a key, take completions from any number
//! of worker threads (Windows' I/O completion port, MariaDB's lesson: any
//! worker can take any completion, so load balances and nothing is tied to
//! the thread that submitted).
//!
//! On an io_uring engine a port has a ring of its own (`crate::driver::uring::port`): submitters
//! hand operations to the kernel themselves and workers sleep in the kernel
//! on that ring, which wakes them. Elsewhere (the thread pool, Linux AIO,
//! or where no ring could be made) the engine's driver delivers completions
//! to a queue (`queue`); on Linux AIO a worker that waits reaps the
//! context's events itself when no other thread does.

pub(crate) mod queue;
pub use queue::Completion;
mod registered;

use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use crate::admit::Verdict;
use crate::admit::{Admission, Admitted, FastPath, Gate, Outcome, Running};
use crate::buf::{IoBuf, IoBufMut};
use crate::cell::{to_result, FORKED_PORT};
use crate::driver::caller::Route;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::file::{File, Prepared};
#[cfg(target_os = "linux")]
use crate::future::OpCell;
use crate::future::{submit, Target};
#[cfg(target_os = "linux")]
use crate::limiter::Permit;
use crate::operation::{Nop, OpKind};
use crate::request::{Owner, Request};
use crate::wait::block_on;

/// Admits a port's request: waiting for budget in the calling thread
/// (`wait`) or refusing with [`Error::WouldBlock`] when it is full.
fn admit<B, G: Gate>(req: Request<B>, fast: FastPath, wait: bool, gate: &G) -> Outcome<B> {
    if wait {
        let mut adm = Admission::new(req, fast);
        block_on(std::future::poll_fn(|cx| adm.poll(cx, gate)))
    } else {
        Admission::now(req, fast, gate)
    }
}

pub(crate) use queue::Queue as PortShared;
/// A port's own ring, holding the port's operation cells.
#[cfg(target_os = "linux")]
type PortRing<B> = crate::driver::uring::port::PortRing<OpCell<B>>;

/// The cell of a port's operation on its ring: written into a cell the ring
/// kept from a completed operation when it has one (no allocation at steady
/// state), else a new one.
#[cfg(target_os = "linux")]
fn ring_cell<B: Send + 'static>(
    ring: &PortRing<B>,
    req: Request<B>,
    key: u64,
    permit: Option<Permit>,
) -> Arc<OpCell<B>> {
    if let Some(mut cell) = ring.take_spare() {
        if let Some(c) = Arc::get_mut(&mut cell) {
            // The previous operation's cell (done, emptied) is dropped in
            // place; its memory holds the new one.
            *c = OpCell::value(req, Target::Ring(key), permit, None);
            return cell;
        }
    }
    OpCell::new(req, Target::Ring(key), permit, None)
}

/// A port's ring admits an operation by counting it in
/// ([`PortRing::admit`](crate::driver::uring::port::PortRing::admit)).
#[cfg(target_os = "linux")]
impl<B: Send + 'static> Gate for PortRing<B> {
    #[inline]
    fn admits(&self, shared: &crate::engine::Shared) -> bool {
        self.admit(shared)
    }
}

enum Mode<B: Send + 'static> {
    #[cfg(target_os = "linux")]
    Ring(Arc<PortRing<B>>),
    Queue(Arc<PortShared<B>>),
}

struct Inner<B: Send + 'static> {
    mode: Mode<B>,
    engine: Engine,
    /// Made by [`Port::cancellable`].
    cancellable: bool,
}

impl<B: Send + 'static> Drop for Inner<B> {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Mode::Ring(ring) = &self.mode {
            // The ring holds the cells of operations in flight: wait for
            // them before it goes.
            ring.drain();
        }
    }
}

/// A completion port for operations whose buffers are of type `B`.
///
/// Submission returns as soon as the operation is queued (waiting only when
/// the engine's in-flight budget is full); completions are taken with
/// [`next`](Port::next) from any thread.
///
/// A completion holds its share of the in-flight budget until a worker
/// takes it, so completions nobody collects cannot pile up without bound.
/// The consequence: a thread that both submits and collects must not block
/// in [`read_at`](Port::read_at)/[`write_at`](Port::write_at) while its own
/// uncollected completions fill the budget, for it would wait for itself.
/// Such a thread submits through a handle that fails instead of waiting
/// ([`with_when_full`](Port::with_when_full)`(`[`WhenFull::Fail`]`)`) and,
/// on [`Error::WouldBlock`], takes completions before retrying; or it
/// leaves collecting to other threads.
///
/// ```
/// use overlapped::{Engine, File, Port};
/// let engine = Engine::new().unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let file = File::create(&engine, dir.path().join("f")).wait().unwrap();
/// let port: Port<Vec<u8>> = Port::new(&engine);
/// for i in 0..4u64 {
///     port.write_at(&file, vec![i as u8; 512], i * 512, i).unwrap();
/// }
/// let mut keys: Vec<u64> = std::iter::from_fn(|| port.next()).map(|c| c.key).collect();
/// keys.sort();
/// assert_eq!(keys, [0, 1, 2, 3]);
/// ```
pub struct Port<B: Send + 'static> {
    inner: Arc<Inner<B>>,
    /// What this handle's submissions do on a full budget.
    when_full: WhenFull,
}

/// What a [`Port`]'s submissions do while the engine's in-flight budget is
/// full: every submitting method of a handle ([`read_at`](Port::read_at),
/// [`write_at`](Port::write_at), [`sync_all`](Port::sync_all),
/// [`sync_data`](Port::sync_data), [`allocate`](Port::allocate)) follows its
/// handle's mode ([`Port::with_when_full`]), as a C port follows
/// `OVERLAP_PORT_NONBLOCK`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhenFull {
    /// Wait until an operation in flight completes and frees room (the
    /// default).
    #[default]
    Wait,
    /// Fail at once with [`Error::WouldBlock`], giving the buffer back.
    Fail,
}

impl<B: Send + 'static> Clone for Port<B> {
    fn clone(&self) -> Self {
        Port {
            inner: self.inner.clone(),
            when_full: self.when_full,
        }
    }
}

impl<B: Send + 'static> std::fmt::Debug for Port<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (mode, ready) = match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(_) => ("ring", None),
            Mode::Queue(q) => ("queue", Some(q.ready_len())),
        };
        f.debug_struct("Port")
            .field("mode", &mode)
            .field("outstanding", &self.outstanding())
            .field("ready", &ready)
            .finish()
    }
}

impl<B: Send + 'static> Port<B> {
    /// A new port on `engine`. On io_uring the port gets a ring of its own,
    /// on which its workers wait. Its operations cannot be cancelled
    /// ([`cancellable`](Self::cancellable) makes a port that can).
    pub fn new(engine: &Engine) -> Port<B> {
        Self::make(engine, false)
    }

    /// As [`new`](Self::new), for a port whose operations
    /// [`cancel`](Self::cancel) can stop. Such a port keeps a map from each
    /// operation in flight to its key, which costs a lock and two map
    /// updates per operation on io_uring: a port that never cancels is
    /// made with `new`.
    pub fn cancellable(engine: &Engine) -> Port<B> {
        Self::make(engine, true)
    }

    fn make(engine: &Engine, cancellable: bool) -> Port<B> {
        #[cfg(target_os = "linux")]
        let shared = engine.shared();
        #[cfg(target_os = "linux")]
        let ring = if shared.driver.is_uring() {
            PortRing::new(shared, cancellable)
        } else {
            None
        };
        #[cfg(not(target_os = "linux"))]
        let ring: Option<std::convert::Infallible> = None;
        let mode = match ring {
            #[cfg(target_os = "linux")]
            Some(r) => {
                let r = Arc::new(r);
                // Engine shutdown waits for the kernel to be done with the
                // port's operations (`Shared::shutdown`).
                let settle: Arc<dyn crate::driver::uring::port::Settle> = r.clone();
                shared.register_port_ring(Arc::downgrade(&settle));
                Mode::Ring(r)
            }
            #[cfg(not(target_os = "linux"))]
            Some(never) => match never {},
            None => Mode::Queue(Arc::new(PortShared::new())),
        };
        Port {
            inner: Arc::new(Inner {
                mode,
                engine: engine.clone(),
                cancellable,
            }),
            when_full: WhenFull::Wait,
        }
    }

    /// A handle on this same port (its operations, completions, budget and
    /// ring) whose submissions do `when_full` while the engine's in-flight
    /// budget is full. Handles made by [`new`](Self::new),
    /// [`cancellable`](Self::cancellable) and `clone` wait.
    ///
    /// ```
    /// use overlapped::{Engine, Error, File, Port, WhenFull};
    /// let engine = Engine::builder().max_inflight_ops(1).build().unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let file = File::create(&engine, dir.path().join("f")).wait().unwrap();
    /// let port: Port<Vec<u8>> = Port::new(&engine).with_when_full(WhenFull::Fail);
    /// port.write_at(&file, vec![1; 512], 0, 1).unwrap();
    /// // The one operation the budget allows holds it until it is taken.
    /// match port.write_at(&file, vec![2; 512], 512, 2) {
    ///     Err((Error::WouldBlock, buf)) => assert_eq!(buf, vec![2; 512]),
    ///     other => panic!("{other:?}"),
    /// }
    /// assert_eq!(port.next().map(|c| c.key), Some(1));
    /// ```
    pub fn with_when_full(&self, when_full: WhenFull) -> Port<B> {
        Port {
            inner: self.inner.clone(),
            when_full,
        }
    }

    /// What this handle's submissions do while the budget is full.
    pub fn when_full(&self) -> WhenFull {
        self.when_full
    }

    /// Whether this handle's submissions wait for room in the budget.
    fn waits(&self) -> bool {
        self.when_full == WhenFull::Wait
    }

    fn check_engine(&self, file: &File) -> Result<()> {
        if !Arc::ptr_eq(self.inner.engine.shared(), file.engine().shared()) {
            return Err(Error::InvalidInput(
                "the file belongs to another engine than the port".into(),
            ));
        }
        Ok(())
    }

    fn launch(&self, prepared: Prepared<B>, key: u64) -> std::result::Result<(), (Error, B)> {
        let wait = self.waits();
        let req: Request<B> = match prepared {
            Prepared::Done(Err(e), buf) => return Err((e, buf)),
            Prepared::Done(_, buf) if self.inner.engine.shared().forked() => {
                return Err((Error::Forked(FORKED_PORT), buf));
            }
            Prepared::Req(req) if self.inner.engine.shared().forked() => {
                return Err((Error::Forked(FORKED_PORT), req.buf));
            }
            Prepared::Done(Ok(n), buf) => {
                self.launch_done(n, buf, key);
                return Ok(());
            }
            Prepared::Req(req) => req,
        };
        // The one admission path (`crate::admit`), as a future's, with the
        // fast path where a port needs it: on its ring not at all (the
        // kernel tries a buffered read against the page cache during
        // submission and completes it inline on a hit, so the caller-side
        // try would only add a system call); on its queue after the budget
        // (a hit is a completion that holds its budget until a worker
        // takes it). The ring's gate also counts the operation in for
        // shutdown to wait for, unless shutdown already began.
        match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(ring) => Self::launch_on_ring(ring, req, key, wait),
            Mode::Queue(q) => Self::launch_on_queue(q, req, key, wait),
        }
    }

    /// Delivers the result `n` of a request done without the kernel as the
    /// completion of `key`.
    #[inline]
    fn launch_done(&self, n: usize, buf: B, key: u64) {
        match &self.inner.mode {
            Mode::Queue(q) => q.push_immediate(key, n, buf, None),
            // The result travels through the ring like any other, so
            // that a worker asleep in it sees it. Like the queue's, it
            // needs no budget.
            #[cfg(target_os = "linux")]
            Mode::Ring(ring) => {
                let req = Request {
                    owner: Owner::Engine(self.inner.engine.shared().clone()),
                    buf,
                    kind: OpKind::Nop(Nop { res: n as i64 }),
                    bytes: 0,
                    fast_path: false,
                };
                ring.submit(ring_cell(ring, req, key, None));
            }
        }
    }

    /// Admits `req` (with no fast path) and submits it to the port's ring.
    #[cfg(target_os = "linux")]
    #[inline]
    fn launch_on_ring(
        ring: &Arc<PortRing<B>>,
        req: Request<B>,
        key: u64,
        wait: bool,
    ) -> std::result::Result<(), (Error, B)> {
        // In place first: the request moves once, into its cell; a
        // full budget is waited out (`admit`) unless the caller
        // does not wait.
        let mut req = req;
        let permit = match crate::admit::now_in_place(&mut req, FastPath::Never, &**ring) {
            Verdict::Go(permit) => permit,
            Verdict::Full if wait => match admit(req, FastPath::Never, true, &**ring)? {
                Admitted::Go(admitted, permit) => {
                    req = admitted;
                    permit
                }
                Admitted::Cached(..) => {
                    debug_assert!(false, "a port's ring takes no fast path");
                    return Ok(());
                }
            },
            Verdict::Full => return Err((Error::WouldBlock, req.buf)),
            Verdict::Refused(e) => return Err((e, req.buf)),
            Verdict::Cached(..) => {
                debug_assert!(false, "a port's ring takes no fast path");
                return Ok(());
            }
        };
        ring.submit_admitted(ring_cell(ring, req, key, Some(permit)));
        Ok(())
    }

    /// Admits `req` (the fast path after the budget) and hands it to the
    /// driver, or queues its cached result, for the port's queue.
    #[inline]
    fn launch_on_queue(
        q: &Arc<PortShared<B>>,
        req: Request<B>,
        key: u64,
        wait: bool,
    ) -> std::result::Result<(), (Error, B)> {
        match admit(req, FastPath::AfterBudget, wait, &Running)? {
            Admitted::Go(req, permit) => {
                // Counted before the driver can complete it (`take`
                // decrements).
                q.add_outstanding();
                submit(
                    req,
                    Target::Port(q.clone(), key),
                    Some(permit),
                    Route::Driver,
                    None,
                );
            }
            Admitted::Cached(n, buf, permit) => q.push_immediate(key, n, buf, permit),
        }
        Ok(())
    }

    /// Queues a read of up to `buf.len()` bytes at `offset`; its completion
    /// carries `key`. While the
    /// in-flight budget is full it waits, or fails with
    /// [`Error::WouldBlock`], as this handle's [`WhenFull`] says.
    /// Invalid requests are refused at once with the buffer given back.
    pub fn read_at(
        &self,
        file: &File,
        buf: B,
        offset: u64,
        key: u64,
    ) -> std::result::Result<(), (Error, B)>
    where
        B: IoBufMut,
    {
        self.submit(file, buf, key, |f, b| f.prepare_read(b, 0, offset))
    }

    /// Queues a write of `buf` at `offset`; its completion carries `key`.
    /// As [`read_at`](Self::read_at) on a full budget and invalid requests.
    pub fn write_at(
        &self,
        file: &File,
        buf: B,
        offset: u64,
        key: u64,
    ) -> std::result::Result<(), (Error, B)>
    where
        B: IoBuf,
    {
        self.submit(file, buf, key, |f, b| f.prepare_write(b, 0, offset))
    }

    /// Operations submitted to this port and not yet taken.
    pub fn outstanding(&self) -> usize {
        match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(r) => r.outstanding(),
            Mode::Queue(q) => q.outstanding(),
        }
    }

    fn take(&self, deadline: Option<Instant>) -> Option<Completion<B>> {
        match &self.inner.mode {
            Mode::Queue(q) => q.take(
                deadline,
                true,
                false,
                self.inner.engine.shared().driver.aio(),
            ),
            #[cfg(target_os = "linux")]
            Mode::Ring(r) => loop {
                if let Some(c) = r.try_take() {
                    return Some(c);
                }
                if r.outstanding() == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                    return None;
                }
                r.wait(deadline);
            },
        }
    }

    /// Runs `f`, in which the operations this thread queues on the port
    /// reach the kernel together: one `io_uring_enter` for every 32 queued
    /// and one for the rest when `f` returns, instead of one each. What is
    /// queued is submitted before the thread waits anywhere in the engine
    /// (taking a completion from a port, [`wait`](crate::Op::wait),
    /// [`block_on`](crate::block_on), waiting for the budget) but not
    /// before it blocks elsewhere: inside `f`, block only through the
    /// engine, or an operation may sit unsubmitted until `f` returns.
    /// Other threads submit as usual. Without a ring of its own (the port
    /// of an `aio+pool` or `pool` engine) it just runs `f`.
    ///
    /// ```
    /// # let engine = overlapped::Engine::new()?;
    /// # let dir = std::env::temp_dir().join(format!("overlap-doc-batch-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// # let path = dir.join("f");
    /// # std::fs::write(&path, vec![7u8; 64 * 4096])?;
    /// let file = overlapped::File::open(&engine, &path).wait()?;
    /// let port: overlapped::Port<Vec<u8>> = overlapped::Port::new(&engine);
    /// port.batch(|port| {
    ///     for i in 0..64u64 {
    ///         port.read_at(&file, vec![0; 4096], i * 4096, i)
    ///             .map_err(|(e, _)| e)?;
    ///     }
    ///     Ok::<_, overlapped::Error>(())
    /// })?;
    /// let mut bytes = 0;
    /// while let Some(c) = port.next() {
    ///     bytes += c.result?;
    /// }
    /// assert_eq!(bytes, 64 * 4096);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn batch<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        let _submits_at_the_end = self.begin_batch();
        f(self)
    }

    /// [`batch`](Self::batch) as a guard, for a caller that cannot pass a
    /// closure (a C caller's begin and end calls): until the returned
    /// [`Batch`] is dropped, on this thread, what the thread queues on the
    /// port reaches the kernel together, under `batch`'s rules (submitted
    /// before the thread waits anywhere in the engine, every 32 entries,
    /// and when the guard drops). `None` where there is nothing to batch (no
    /// ring of its own) or the thread already batches on this port.
    pub fn begin_batch(&self) -> Option<Batch> {
        match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(r) => {
                let ring: Arc<dyn crate::driver::uring::thread::Deferred> = r.clone();
                crate::driver::uring::thread::defer(ring).map(|g| Batch { _guard: g })
            }
            Mode::Queue(_) => None::<Batch>,
        }
    }

    /// Submits what any thread queued on the port inside a batch
    /// ([`batch`](Self::batch), [`begin_batch`](Self::begin_batch)) and has
    /// not submitted yet: for a thread that watches over batching threads
    /// which may be blocked outside the engine (a wait in the port submits
    /// nothing but the waiting thread's own). No system call when no batch
    /// queued anything since the last submission.
    pub fn flush(&self) {
        #[cfg(target_os = "linux")]
        if let Mode::Ring(r) = &self.inner.mode {
            r.flush();
        }
    }

    /// Waits for the next completion, from any operation of this port.
    /// Returns `None` when nothing is outstanding (so a worker loop ends
    /// instead of waiting forever).
    ///
    /// On io_uring the worker sleeps in the kernel on the port's ring and
    /// the completion wakes it; on Linux AIO a worker reaps the context's
    /// events itself when no other thread does. Elsewhere (the pool), a
    /// waiting worker is woken at the first completion: a ready completion
    /// never waits for others.
    pub fn next(&self) -> Option<Completion<B>> {
        self.take(None)
    }

    /// As [`next`](Self::next), giving up after `timeout`.
    pub fn next_timeout(&self, timeout: Duration) -> Option<Completion<B>> {
        self.take(Some(Instant::now() + timeout))
    }

    /// A completion if one is ready now.
    pub fn try_next(&self) -> Option<Completion<B>> {
        match &self.inner.mode {
            Mode::Queue(q) => q.take(None, false, false, None),
            #[cfg(target_os = "linux")]
            Mode::Ring(r) => r.try_take(),
        }
    }

    /// Queues an `fsync` of `file` (data and metadata to stable storage);
    /// its completion carries `key` and `B::default()`. While the in-flight
    /// budget is full it waits, or fails with
    /// [`Error::WouldBlock`], as this handle's [`WhenFull`] says.
    pub fn sync_all(&self, file: &File, key: u64) -> Result<()>
    where
        B: Default,
    {
        self.plain(file, key, |f, b| f.prepare_sync(b, false))
    }

    /// Queues an `fdatasync` of `file`; as [`sync_all`](Self::sync_all).
    pub fn sync_data(&self, file: &File, key: u64) -> Result<()>
    where
        B: Default,
    {
        self.plain(file, key, |f, b| f.prepare_sync(b, true))
    }

    /// Queues `fallocate(mode, offset, len)` on `file` (mode 0 reserves the
    /// range, growing the file; `FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE`
    /// and the rest as the kernel takes them); its completion carries `key`
    /// and `B::default()`. A zero `len` or a range past the largest file
    /// offset is refused at once.
    pub fn allocate(&self, file: &File, mode: i32, offset: u64, len: u64, key: u64) -> Result<()>
    where
        B: Default,
    {
        self.plain(file, key, |f, b| f.prepare_allocate(b, mode, offset, len))
    }

    fn plain(
        &self,
        file: &File,
        key: u64,
        prepare: impl FnOnce(&File, B) -> Prepared<B>,
    ) -> Result<()>
    where
        B: Default,
    {
        self.submit(file, B::default(), key, prepare)
            .map_err(|(e, _)| e)
    }

    /// The one path of every submission: the file's engine checked, the
    /// operation built and checked by the file (`prepare`), then admitted
    /// and submitted as this handle's [`WhenFull`] says.
    fn submit(
        &self,
        file: &File,
        buf: B,
        key: u64,
        prepare: impl FnOnce(&File, B) -> Prepared<B>,
    ) -> std::result::Result<(), (Error, B)> {
        if let Err(e) = self.check_engine(file) {
            return Err((e, buf));
        }
        self.launch(prepare(file, buf), key)
    }

    /// Asks that every operation of this port with `key`, submitted and
    /// not yet taken, be stopped; returns how many were asked. Each of them
    /// still completes exactly once, with `-ECANCELED`
    /// ([`std::io::ErrorKind`] `Other`, raw OS error `ECANCELED`) if it was
    /// stopped in time, else with its own result, and its buffer is the
    /// kernel's until then.
    ///
    /// io_uring and Windows' completion ports can stop an operation: one
    /// waiting in the kernel (a read of a pipe with nothing in it, work
    /// queued for a kernel worker) stops; a read or write the device
    /// already has does not. On Windows a stopped one completes with
    /// `ERROR_OPERATION_ABORTED` (raw OS error 995) instead of
    /// `ECANCELED`, and only reads and writes can be asked (the rest runs
    /// on the pool). On the thread pool (a blocking system call) and Linux
    /// AIO (whose `io_cancel` stops no file I/O) nothing can be asked, and
    /// this returns 0.
    ///
    /// [`Error::InvalidInput`] on a port not made with
    /// [`cancellable`](Self::cancellable).
    pub fn cancel(&self, key: u64) -> Result<usize> {
        if !self.inner.cancellable {
            return Err(Error::InvalidInput(
                "cancel on a port made without cancellation: make it with Port::cancellable".into(),
            ));
        }
        Ok(match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(r) => r.cancel(key),
            // IOCP cancels the port's calls in flight (`CancelIoEx`).
            #[cfg(windows)]
            Mode::Queue(q) => self
                .inner
                .engine
                .shared()
                .driver
                .cancel_queue_key(crate::future::port_id(q), key),
            // Nothing to stop: operations run to their end (the key is
            // delivered with its completion).
            #[cfg(not(windows))]
            Mode::Queue(_) => {
                let _ = key;
                0
            }
        })
    }

    /// Whether the port was made with [`cancellable`](Self::cancellable).
    pub fn is_cancellable(&self) -> bool {
        self.inner.cancellable
    }

    /// Posts a completion of no operation, with `key`, `result` (a byte
    /// count `>= 0`, or a negated `errno` from -4095 to -1, delivered as
    /// [`Error::Io`]) and `buf`: the completion port's wake-up
    /// (`PostQueuedCompletionStatus`). A worker waiting in
    /// [`next_batch`](Self::next_batch) takes it like any other.
    ///
    /// A posted completion holds a share of the in-flight budget (one
    /// operation, no bytes) until it is taken, so posting is bounded:
    /// [`Error::WouldBlock`] when the budget is full, never a wait.
    /// [`Error::Shutdown`] once the engine shut down.
    pub fn post(&self, key: u64, result: i64, buf: B) -> std::result::Result<(), (Error, B)> {
        let shared = self.inner.engine.shared();
        if result < -4095 {
            return Err((
                Error::InvalidInput(format!(
                    "a posted result is a count >= 0 or a negated errno (-4095..-1), got {result}"
                )),
                buf,
            ));
        }
        if shared.forked() {
            return Err((Error::Forked(FORKED_PORT), buf));
        }
        let req = Request {
            owner: Owner::Engine(shared.clone()),
            buf,
            kind: OpKind::Nop(Nop { res: result }),
            bytes: 0,
            fast_path: false,
        };
        // The one admission path (`crate::admit`), never waiting.
        match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(ring) => {
                if let Admitted::Go(req, permit) = Admission::now(req, FastPath::Never, &**ring)? {
                    ring.submit_admitted(ring_cell(ring, req, key, Some(permit)));
                }
            }
            Mode::Queue(q) => {
                if let Admitted::Go(req, permit) = Admission::now(req, FastPath::Never, &Running)? {
                    let completion = Completion {
                        key,
                        result: to_result(result),
                        buf: req.buf,
                        inline: true,
                    };
                    q.push(completion, Some(permit), true);
                }
            }
        }
        Ok(())
    }

    /// Takes completions into `out`: waits until at least `min` were taken
    /// (or `timeout` passes; `None` waits as long as it takes), then takes
    /// whatever else is ready, up to `max` in all; returns how many it
    /// appended. `min` = 0 never waits. (`io_getevents`' and
    /// `GetQueuedCompletionStatusEx`'s contract.)
    ///
    /// Unlike [`next`](Self::next), it waits even when nothing is
    /// outstanding: another thread may submit, or [`post`](Self::post) a
    /// wake-up. Any number of threads may wait at once; each completion
    /// goes to exactly one of them.
    pub fn next_batch(
        &self,
        out: &mut Vec<Completion<B>>,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> usize {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let forever = timeout.is_some() && deadline.is_none();
        let deadline = if forever { None } else { deadline };
        let min = min.min(max);
        let mut n = 0;
        while n < max {
            if let Some(c) = self.try_next() {
                out.push(c);
                n += 1;
                continue;
            }
            if n >= min {
                break;
            }
            match self.take_idle(deadline) {
                Some(c) => {
                    out.push(c);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// The next completion, waiting until `deadline` even while nothing is
    /// outstanding.
    fn take_idle(&self, deadline: Option<Instant>) -> Option<Completion<B>> {
        if self.inner.engine.shared().forked() {
            // The port's completions are the parent's: none will come.
            return None;
        }
        match &self.inner.mode {
            Mode::Queue(q) => q.take(
                deadline,
                true,
                true,
                self.inner.engine.shared().driver.aio(),
            ),
            #[cfg(target_os = "linux")]
            Mode::Ring(r) => loop {
                if let Some(c) = r.try_take() {
                    return Some(c);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return None;
                }
                r.wait(deadline);
            },
        }
    }
}

/// A thread's batch on a port ([`Port::begin_batch`]): dropping it submits
/// what the thread queued. It stays on the thread that began it.
pub struct Batch {
    #[cfg(target_os = "linux")]
    _guard: crate::driver::uring::thread::DeferGuard,
    /// A batch stays on the thread that began it.
    #[cfg(not(target_os = "linux"))]
    _thread: std::marker::PhantomData<*const ()>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Batch")
    }
}
