//! Completions through tokio's reactor. (Being built: for now operations
//! go through the engine's own driver.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Polls an engine future so that the operations it submits go on the
/// current tokio worker's ring.
pub(crate) fn on_ring<F: Future>(fut: F) -> OnRing<F> {
    OnRing { fut }
}

/// See [`on_ring`].
pub(crate) struct OnRing<F> {
    fut: F,
}

impl<F: Future> Future for OnRing<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: structural pinning of the only field; it is never moved.
        let fut = unsafe { self.map_unchecked_mut(|s| &mut s.fut) };
        fut.poll(cx)
    }
}
