//! The completion port: submit with a key, take completions from any number
//! of worker threads (Windows' I/O completion port, MariaDB's lesson: any
//! worker can take any completion, so load balances and nothing is tied to
//! the thread that submitted).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use crate::buf::{IoBuf, IoBufMut};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::file::{File, Prepared};
use crate::limiter::Permit;
use crate::op::{block_on, submit, to_result, Request, Target};

/// A finished operation taken from a [`Port`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Completion<B> {
    /// The key given at submission.
    pub key: u64,
    /// Bytes transferred, or the error.
    pub result: Result<usize>,
    /// The buffer, given back.
    pub buf: B,
    /// Whether the operation completed synchronously (page-cache fast path,
    /// or already done when the submitting system call returned).
    pub inline: bool,
}

struct Delivered<B> {
    completion: Completion<B>,
    /// Held until a worker takes the completion, so that completions nobody
    /// collects still count against the in-flight budget.
    _permit: Option<Permit>,
}

pub(crate) struct PortShared<B> {
    st: Mutex<PortState<B>>,
    cv: Condvar,
}

struct PortState<B> {
    ready: VecDeque<Delivered<B>>,
    /// Submitted and not yet taken.
    outstanding: usize,
    /// Threads blocked in `next`; a completion wakes one only if there is
    /// one (a futex wake is a system call even with nobody waiting).
    waiting: usize,
}

impl<B> PortShared<B> {
    fn lock(&self) -> std::sync::MutexGuard<'_, PortState<B>> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<B: Send + 'static> PortShared<B> {
    pub(crate) fn deliver(
        self: &Arc<Self>,
        key: u64,
        res: i64,
        buf: B,
        permit: Option<Permit>,
        inline: bool,
    ) {
        let result = to_result(res);
        self.push(
            Completion {
                key,
                result,
                buf,
                inline,
            },
            permit,
        );
    }

    /// Queues a completion and wakes a waiting worker if there is one that
    /// the completions already queued will not satisfy. On the engine
    /// thread the wake-up is deferred to the end of the batch of
    /// completions, so a worker is woken once per batch, not per completion.
    fn push(self: &Arc<Self>, completion: Completion<B>, permit: Option<Permit>) {
        self.push_counted(completion, permit, false);
    }

    /// As [`push`](Self::push) for a completion known at submission, which
    /// is counted as outstanding under the same lock.
    fn push_immediate(self: &Arc<Self>, completion: Completion<B>, permit: Option<Permit>) {
        self.push_counted(completion, permit, true);
    }

    fn push_counted(
        self: &Arc<Self>,
        completion: Completion<B>,
        permit: Option<Permit>,
        new: bool,
    ) {
        let mut st = self.lock();
        if new {
            st.outstanding += 1;
        }
        st.ready.push_back(Delivered {
            completion,
            _permit: permit,
        });
        let wake = st.waiting >= st.ready.len();
        drop(st);
        if wake {
            crate::driver::wake(Waker::from(self.clone()));
        }
    }
}

impl<B: Send + 'static> Wake for PortShared<B> {
    fn wake(self: Arc<Self>) {
        self.cv.notify_one();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.cv.notify_one();
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
/// Such a thread uses [`try_read_at`](Port::try_read_at)/
/// [`try_write_at`](Port::try_write_at) and, on [`Error::WouldBlock`],
/// takes completions before retrying; or it leaves collecting to other
/// threads.
///
/// ```
/// use overlap::{Engine, File, Port};
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
pub struct Port<B> {
    shared: Arc<PortShared<B>>,
    engine: Engine,
}

impl<B> Clone for Port<B> {
    fn clone(&self) -> Self {
        Port {
            shared: self.shared.clone(),
            engine: self.engine.clone(),
        }
    }
}

impl<B> std::fmt::Debug for Port<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Port")
            .field("outstanding", &st.outstanding)
            .field("ready", &st.ready.len())
            .finish()
    }
}

impl<B: Send + 'static> Port<B> {
    /// A new port on `engine`.
    pub fn new(engine: &Engine) -> Port<B> {
        Port {
            shared: Arc::new(PortShared {
                st: Mutex::new(PortState {
                    ready: VecDeque::new(),
                    outstanding: 0,
                    waiting: 0,
                }),
                cv: Condvar::new(),
            }),
            engine: engine.clone(),
        }
    }

    fn check_engine(&self, file: &File) -> Result<()> {
        if !Arc::ptr_eq(self.engine.shared(), file.engine().shared()) {
            return Err(Error::InvalidInput(
                "the file belongs to another engine than the port".into(),
            ));
        }
        Ok(())
    }

    fn launch(
        &self,
        prepared: Prepared<B>,
        key: u64,
        wait: bool,
    ) -> std::result::Result<(), (Error, B)> {
        let mut req: Request<B> = match prepared {
            Prepared::Done(Err(e), buf) => return Err((e, buf)),
            Prepared::Done(Ok(n), buf) => {
                self.shared.push_immediate(
                    Completion {
                        key,
                        result: Ok(n),
                        buf,
                        inline: true,
                    },
                    None,
                );
                return Ok(());
            }
            Prepared::Req(req) => req,
        };
        if let Err(e) = req.start() {
            return Err((e, req.buf));
        }
        let limiter = req.shared.limiter.clone();
        let permit = if wait {
            block_on(limiter.acquire(req.bytes))
        } else {
            match limiter.try_acquire(req.bytes) {
                Some(p) => p,
                None => return Err((Error::WouldBlock, req.buf)),
            }
        };
        if req.shared.is_shut() {
            // The engine stopped while this waited for budget.
            drop(permit);
            return Err((Error::Shutdown, req.buf));
        }
        if let Some(n) = crate::sys::read_nowait(&mut req) {
            self.shared.push_immediate(
                Completion {
                    key,
                    result: Ok(n),
                    buf: req.buf,
                    inline: true,
                },
                Some(permit),
            );
            return Ok(());
        }
        // Counted before the driver can complete it (`take` decrements).
        self.shared.lock().outstanding += 1;
        submit(
            req,
            Target::Port {
                port: self.shared.clone(),
                key,
            },
            Some(permit),
        );
        Ok(())
    }

    /// Queues a read of up to `buf.len()` bytes at `offset`; its completion
    /// carries `key`. Waits only while the in-flight budget is full. Invalid
    /// requests are refused at once with the buffer given back.
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
        if let Err(e) = self.check_engine(file) {
            return Err((e, buf));
        }
        self.launch(file.prepare_read(buf, 0, offset), key, true)
    }

    /// As [`read_at`](Self::read_at), but fails with [`Error::WouldBlock`]
    /// instead of waiting for the budget.
    pub fn try_read_at(
        &self,
        file: &File,
        buf: B,
        offset: u64,
        key: u64,
    ) -> std::result::Result<(), (Error, B)>
    where
        B: IoBufMut,
    {
        if let Err(e) = self.check_engine(file) {
            return Err((e, buf));
        }
        self.launch(file.prepare_read(buf, 0, offset), key, false)
    }

    /// Queues a write of `buf` at `offset`; its completion carries `key`.
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
        if let Err(e) = self.check_engine(file) {
            return Err((e, buf));
        }
        self.launch(file.prepare_write(buf, 0, offset), key, true)
    }

    /// As [`write_at`](Self::write_at), but fails with [`Error::WouldBlock`]
    /// instead of waiting for the budget.
    pub fn try_write_at(
        &self,
        file: &File,
        buf: B,
        offset: u64,
        key: u64,
    ) -> std::result::Result<(), (Error, B)>
    where
        B: IoBuf,
    {
        if let Err(e) = self.check_engine(file) {
            return Err((e, buf));
        }
        self.launch(file.prepare_write(buf, 0, offset), key, false)
    }

    /// Operations submitted to this port and not yet taken.
    pub fn outstanding(&self) -> usize {
        self.shared.lock().outstanding
    }

    fn take(&self, deadline: Option<Instant>) -> Option<Completion<B>> {
        let mut st = self.shared.lock();
        loop {
            if let Some(d) = st.ready.pop_front() {
                st.outstanding -= 1;
                if st.outstanding == 0 && st.waiting > 0 {
                    // Wake workers waiting for completions that will not come.
                    self.shared.cv.notify_all();
                }
                drop(st);
                return Some(d.completion); // the permit is released here
            }
            if st.outstanding == 0 {
                return None;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            st.waiting += 1;
            st = match deadline {
                None => self.shared.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    self.shared
                        .cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
            st.waiting -= 1;
        }
    }

    /// Waits for the next completion, from any operation of this port.
    /// Returns `None` when nothing is outstanding (so a worker loop ends
    /// instead of waiting forever).
    pub fn next(&self) -> Option<Completion<B>> {
        self.take(None)
    }

    /// As [`next`](Self::next), giving up after `timeout`.
    pub fn next_timeout(&self, timeout: Duration) -> Option<Completion<B>> {
        self.take(Some(Instant::now() + timeout))
    }

    /// A completion if one is ready now.
    pub fn try_next(&self) -> Option<Completion<B>> {
        let mut st = self.shared.lock();
        let d = st.ready.pop_front()?;
        st.outstanding -= 1;
        if st.outstanding == 0 && st.waiting > 0 {
            self.shared.cv.notify_all();
        }
        Some(d.completion)
    }
}
