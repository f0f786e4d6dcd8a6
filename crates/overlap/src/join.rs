//! [`join_all`]: many futures driven together, polling only those woken.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use crate::driver::caller;

/// Runs `futures` together and returns their outputs in order, polling on
/// each wake-up only the futures that were woken.
///
/// What `futures::future::join_all` does, for many operations in flight
/// from one thread:
/// - **Cost by completion, not by count.** A combinator that polls every
///   unfinished future on each wake-up (`join!`, a small `join_all`) does
///   work in proportion to how many are in flight, at each wake-up: with
///   1,024 reads in flight that was most of the CPU a read cost. Here each
///   future has a waker of its own, and a wake-up polls only the futures
///   whose wakers were woken since the last.
/// - **The thread's own ring.** Inside [`block_on`](crate::block_on) (and
///   `.wait()`), an operation goes on the calling thread's own ring only
///   when polled with `block_on`'s waker, because a foreign combinator's
///   waker cannot be told from a nested executor's that would park the
///   thread without reaping its ring (`FuturesUnordered`'s operations go
///   through the engine's thread). The wakers this combinator gives its
///   futures are trusted there: it never parks, it returns to `block_on`,
///   which waits on the ring. So its operations complete where the thread
///   sleeps, as `join!`'s do.
///
/// Any executor may poll it (tokio, [`block_on`](crate::block_on), ...); the
/// futures run on the thread that polls it, as with any combinator. It
/// allocates once per future when made, nothing per wake-up at steady state.
///
/// ```
/// # fn main() -> overlapped::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let engine = overlapped::Engine::builder().build()?;
/// let path = dir.path().join("f");
/// std::fs::write(&path, b"0123456789abcdef")?;
/// let file = overlapped::OpenOptions::new().read(true).open(&engine, &path).wait()?;
/// let reads = (0..4).map(|i| file.read_at(vec![0u8; 4], i * 4));
/// let done = overlapped::block_on(overlapped::join_all(reads));
/// let texts: Vec<Vec<u8>> = done.into_iter().map(|(n, buf)| buf[..n.unwrap()].to_vec()).collect();
/// assert_eq!(texts, [b"0123".to_vec(), b"4567".to_vec(), b"89ab".to_vec(), b"cdef".to_vec()]);
/// # Ok(())
/// # }
/// ```
pub fn join_all<I>(futures: I) -> JoinAll<I::Item>
where
    I: IntoIterator,
    I::Item: Future,
{
    let futures: Vec<_> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let n = futures.len();
    let shared = Arc::new(Shared {
        // Set until the first poll, which polls every future: a wake-up
        // before it has nothing to add.
        woken: (0..n).map(|_| AtomicBool::new(true)).collect(),
        ready: Mutex::new(Vec::with_capacity(n)),
        parent: Mutex::new(None),
        notified: AtomicBool::new(false),
    });
    let wakers = (0..n)
        .map(|index| {
            Waker::from(Arc::new(Child {
                shared: shared.clone(),
                index,
            }))
        })
        .collect();
    JoinAll {
        outputs: (0..n).map(|_| None).collect(),
        remaining: n,
        futures,
        wakers,
        shared,
        started: false,
        finished: false,
        batch: Vec::with_capacity(n),
    }
}

/// The future of [`join_all`].
///
/// # Panics
///
/// Polled again after it returned its outputs (as [`Op`](crate::Op)). A
/// joined future's panic reaches the caller of `poll`; a caller that
/// catches it and polls again finds the other futures still driven.
#[must_use = "futures do nothing unless polled"]
pub struct JoinAll<F: Future> {
    /// `None` once finished.
    futures: Vec<Option<Pin<Box<F>>>>,
    outputs: Vec<Option<F::Output>>,
    /// Each future's own waker, made once.
    wakers: Vec<Waker>,
    shared: Arc<Shared>,
    remaining: usize,
    started: bool,
    /// Returned its outputs.
    finished: bool,
    /// The woken indices being polled (swapped with `Shared::ready`, so
    /// neither list is reallocated at steady state).
    batch: Vec<usize>,
}

/// A poll's pass over the woken futures. If a future's poll panics, the
/// ones after it in the pass are listed again (their flags are still set,
/// so their wake-ups would add nothing): a caller that catches the panic
/// and polls again polls them.
struct Pass<'a> {
    shared: &'a Shared,
    batch: Vec<usize>,
    /// Position in `batch` of the next future to poll.
    next: usize,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if let Some(rest) = self.batch.get(self.next..).filter(|r| !r.is_empty()) {
            lock(&self.shared.ready).extend_from_slice(rest);
        }
    }
}

// The futures are boxed and the outputs are never pinned: moving the
// combinator moves neither.
impl<F: Future> Unpin for JoinAll<F> {}

/// What the futures' wakers reach from any thread.
struct Shared {
    /// Set when a future's waker is woken, cleared before it is polled: a
    /// wake-up of a future already listed adds nothing.
    woken: Box<[AtomicBool]>,
    /// Futures woken since the last poll took the list.
    ready: Mutex<Vec<usize>>,
    /// The waker of whoever polls the combinator.
    parent: Mutex<Option<Waker>>,
    /// Set once a wake-up since the last poll woke `parent`: the others
    /// only list their future.
    notified: AtomicBool,
}

struct Child {
    shared: Arc<Shared>,
    index: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Wake for Child {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let s = &self.shared;
        // AcqRel: the poll's `swap(false)` that reads this synchronises
        // with it, so the future's poll sees what preceded the wake-up.
        if s.woken[self.index].swap(true, Ordering::AcqRel) {
            return;
        }
        lock(&s.ready).push(self.index);
        if !s.notified.swap(true, Ordering::AcqRel) {
            // Cloned, then woken outside the lock: a waker is user code.
            let parent = lock(&s.parent).clone();
            if let Some(w) = parent {
                w.wake();
            }
        }
    }
}

impl<F: Future> Future for JoinAll<F> {
    type Output = Vec<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<F::Output>> {
        let this = self.get_mut();
        // As every future: polling it again after `Ready` is a bug of the
        // caller's (`Op` panics too).
        assert!(!this.finished, "JoinAll polled after completion");
        {
            let mut parent = lock(&this.shared.parent);
            if !parent.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *parent = Some(cx.waker().clone());
            }
        }
        // After the parent is stored: a wake-up from here on wakes it (or
        // lists its future for the pass below).
        this.shared.notified.store(false, Ordering::SeqCst);
        let mut pass = Pass {
            shared: &this.shared,
            batch: std::mem::take(&mut this.batch),
            next: 0,
        };
        pass.batch.clear();
        if this.started {
            std::mem::swap(&mut pass.batch, &mut *lock(&this.shared.ready));
        } else {
            this.started = true;
            pass.batch.extend(0..this.futures.len());
        }
        // Polled with `block_on`'s own context: the futures' wakers are
        // trusted with the thread's own ring (see `join_all`).
        let trusted = caller::polled_by_block_on(cx.waker());
        while let Some(&i) = pass.batch.get(pass.next) {
            // Counted before the poll: a future that panics is not polled
            // again; the ones after it are listed again (`Pass`).
            pass.next += 1;
            pass.shared.woken[i].swap(false, Ordering::AcqRel);
            let Some(fut) = this.futures[i].as_mut() else {
                continue;
            };
            let waker = &this.wakers[i];
            let _scope = trusted.then(|| caller::JoinedScope::enter(waker));
            if let Poll::Ready(out) = fut.as_mut().poll(&mut Context::from_waker(waker)) {
                this.futures[i] = None;
                this.outputs[i] = Some(out);
                debug_assert!(this.remaining > 0, "a future finishes once");
                this.remaining -= 1;
            }
        }
        this.batch = std::mem::take(&mut pass.batch);
        drop(pass);
        if this.remaining > 0 {
            return Poll::Pending;
        }
        this.finished = true;
        let outputs = std::mem::take(&mut this.outputs);
        debug_assert!(outputs.iter().all(Option::is_some), "every future finished");
        Poll::Ready(outputs.into_iter().flatten().collect())
    }
}

impl<F: Future> std::fmt::Debug for JoinAll<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinAll")
            .field("futures", &self.futures.len())
            .field("remaining", &self.remaining)
            .finish()
    }
}
