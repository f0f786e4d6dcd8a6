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
        let left = Leftover(Some(fut), false);
        match tokio::runtime::Handle::try_current() {
            // tokio's blocking pool: a runtime's end (drop, `shutdown_timeout`,
            // the end of `#[tokio::main]`) never drops a task that has
            // started there, and dropping the runtime waits for it, as for
            // `tokio::fs`'s own writes. Never a runtime task, which
            // shutdown would drop with the bytes behind still unwritten.
            Ok(handle) => drop(handle.spawn_blocking(move || left.finish())),
            // Outside a runtime: a thread of its own.
            Err(_) => {
                let _ = std::thread::Builder::new()
                    .name("overlapped-tokio-drop".into())
                    .spawn(move || left.finish());
            }
        }
    }
}

/// The operation of a dropped file, run to its end by [`finish`]
/// (Self::finish) off any runtime task: the rest of a write (a write cut
/// short, one waiting for the engine's budget, the bytes behind it). The
/// engine completes what it has submitted whatever happens; the rest needs
/// this. Should the closure that owns it be dropped unrun (a blocking task
/// refused or cancelled at a runtime's shutdown, no thread to be had), its
/// drop hands it to a thread of its own (the dropping thread is a runtime's,
/// maybe in its shutdown: it must not wait), or, with no thread to be had,
/// runs it there and then (the second field).
struct Leftover(Option<OpFuture>, bool);

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
        let Some(fut) = self.0.take() else {
            return;
        };
        if self.1 {
            self.0 = Some(fut);
            self.run();
            return;
        }
        let mut rest = Leftover(Some(fut), true);
        let spawned = std::thread::Builder::new()
            .name("overlapped-tokio-drop".into())
            .spawn(move || rest.run());
        // Not spawned: the closure, and with it `rest`, was dropped, which
        // ran it here (its second field).
        drop(spawned);
    }
}
