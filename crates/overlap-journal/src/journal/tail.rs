//! Following the log as it grows: [`Tail`].

use std::future::Future;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::Poll;

use super::bell::Bell;
use super::options::*;
use super::reader::{Record, RecordIter};
use super::shared::*;
use crate::error::Result;

/// A reader that follows the log as records reach a level (from
/// [`crate::Journal::tail`]). As an [`Iterator`] it blocks for the next
/// record; [`next_async`](Self::next_async) waits asynchronously. Both end
/// with `None` once the journal is closed and everything that reached the
/// level was read; after an error (the journal failed, or a damaged
/// record) they return it once, then `None`.
///
/// Resume after the last record processed with
/// [`Record::next_lsn`](crate::Record::next_lsn).
pub struct Tail {
    sh: Arc<Shared>,
    iter: RecordIter,
    level: Level,
    done: bool,
}

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tail")
            .field("level", &self.level)
            .field("iter", &self.iter)
            .finish()
    }
}

/// What [`Tail::step`] found.
enum Step {
    Item(Result<Record>),
    Done,
    Wait,
}

impl Tail {
    pub(super) fn new(sh: Arc<Shared>, iter: RecordIter, level: Level) -> Tail {
        debug_assert!(
            level != Level::Accepted,
            "a tail follows written or durable records"
        );
        Tail {
            sh,
            iter,
            level,
            done: false,
        }
    }

    /// The level it follows.
    pub fn level(&self) -> Level {
        self.level
    }

    fn bell(&self) -> &Bell {
        match self.level {
            Level::Durable => &self.sh.durable_bell,
            _ => &self.sh.written_bell,
        }
    }

    /// The next record if one has reached the level, the end, or `Wait`.
    fn step(&mut self) -> Step {
        loop {
            if self.done {
                return Step::Done;
            }
            if let Some(r) = self.iter.next() {
                self.done = r.is_err();
                return Step::Item(r);
            }
            // Read `finished` before the watermark: once it is set, the
            // watermark read after it is final.
            let finished = self.sh.finished.load(SeqCst);
            let mark = self.sh.watermark(self.level);
            if mark > self.iter.end() {
                self.iter.extend_to(mark);
                continue;
            }
            let state = self.sh.reserve.load(SeqCst);
            if state & DEAD != 0 {
                self.done = true;
                return Step::Item(Err(self.sh.fail_error(state)));
            }
            if finished {
                self.done = true;
                return Step::Done;
            }
            return Step::Wait;
        }
    }

    /// The next record, waiting asynchronously until one reaches the
    /// level; `None` at the end (see [`Tail`]).
    pub fn next_async(&mut self) -> impl Future<Output = Option<Result<Record>>> + '_ {
        std::future::poll_fn(move |cx| {
            let mut registered = false;
            loop {
                match self.step() {
                    Step::Item(r) => return Poll::Ready(Some(r)),
                    Step::Done => return Poll::Ready(None),
                    Step::Wait if registered => return Poll::Pending,
                    Step::Wait => {
                        // Woken when the level's watermark passes what was
                        // read, or when the journal closes or fails; then
                        // check once more, in case it moved meanwhile.
                        let lsn = self.iter.end();
                        let mut w = self.sh.waiters.lock().unwrap_or_else(|p| p.into_inner());
                        let known = w.iter().any(|x| {
                            x.lsn == lsn && x.level == self.level && x.waker.will_wake(cx.waker())
                        });
                        if !known {
                            w.push(Waiter {
                                lsn,
                                level: self.level,
                                waker: cx.waker().clone(),
                            });
                            self.sh.waiting.store(w.len(), SeqCst);
                        }
                        registered = true;
                    }
                }
            }
        })
    }
}

impl Iterator for Tail {
    type Item = Result<Record>;

    /// Blocks until the next record reaches the level; `None` at the end
    /// (see [`Tail`]).
    fn next(&mut self) -> Option<Result<Record>> {
        loop {
            // Read the bell's word before looking: a move after the look
            // changes it, and the sleep then returns at once.
            let seen = self.bell().seen();
            match self.step() {
                Step::Item(r) => return Some(r),
                Step::Done => return None,
                Step::Wait => {
                    self.bell().sleep(seen);
                }
            }
        }
    }
}
