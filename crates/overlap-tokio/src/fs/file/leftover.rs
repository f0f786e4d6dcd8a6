//! What becomes of a dropped [`File`](super::File)'s operation in flight:
//! a write (with the bytes behind it) runs to its end off any runtime task.

use super::stream::{lock, Buf, Inner, OpFuture, Operation, State};

impl Drop for Inner {
    fn drop(&mut self) {
        // The file is dropped. An operation in flight (a write above all,
        // with the bytes behind it) is finished, not abandoned: see
        // `Leftover`.
        let State::Busy(fut) = std::mem::replace(&mut self.state, State::Idle(Buf::default()))
        else {
            let b = lock(&self.behind);
            if !b.data.is_empty() {
                // A failed write's bytes, its error reported (or kept for
                // the next call, which will not come).
                eprintln!(
                    "overlapped-tokio: a file dropped after a failed write: {} bytes not written",
                    b.data.len()
                );
            }
            return;
        };
        if !self.busy_writing {
            return;
        }
        let left = Leftover(Some(fut));
        match tokio::runtime::Handle::try_current() {
            // tokio's blocking pool: a runtime's end (drop, `shutdown_timeout`,
            // the end of `#[tokio::main]`) waits for a task that has started
            // there, as for `tokio::fs`'s own writes. Never a runtime task,
            // which shutdown would drop with the bytes behind still
            // unwritten.
            Ok(handle) => drop(handle.spawn_blocking(move || left.finish())),
            // Outside a runtime: here, as `std::fs::File`'s drop closes. A
            // thread of its own would be joined by no one, and a process
            // that ends would take the bytes with it.
            Err(_) => left.finish(),
        }
    }
}

/// The operation of a dropped file, run to its end by [`finish`]
/// (Self::finish) off any runtime task: the rest of a write (a write cut
/// short, one waiting for the engine's budget, the bytes behind it). The
/// engine completes what it has submitted whatever happens; the rest needs
/// this. Should the closure that owns it be dropped unrun, its drop runs it
/// there and then. That happens on a thread the runtime's end waits for:
/// tokio's blocking pool cancels the tasks still queued when the runtime
/// shuts down, on its own threads, and refuses new ones, which leaves the
/// drop to the thread that spawned (a worker dropping its tasks in the
/// shutdown). Dropping the runtime joins both kinds of thread, so the end of
/// `#[tokio::main]` cannot end the process before the bytes are written, as
/// it would with a thread of the file's own (no one joins that one);
/// `shutdown_timeout` waits for them up to its limit. `tokio::fs` keeps its
/// writes the same way (its blocking tasks are mandatory, run even in the
/// shutdown).
struct Leftover(Option<OpFuture>);

impl Leftover {
    fn finish(mut self) {
        self.run();
    }
    fn run(&mut self) {
        if let Some(fut) = self.0.take() {
            // Off the runtime's rings (whose reaper is a task that shutdown
            // drops) and outside tokio's budget (this thread's may be spent:
            // the future would never get on).
            let (op, _) = crate::reactor::off_ring(|| {
                overlapped::block_on(tokio::task::coop::unconstrained(fut))
            });
            if let Operation::Write(Err(e)) = op {
                // No caller is left to tell.
                eprintln!("overlapped-tokio: the write of a dropped file failed: {e}");
            }
        }
    }
}

impl Drop for Leftover {
    fn drop(&mut self) {
        // Unrun (see above): here and now. After `run`, nothing is left.
        self.run();
    }
}
