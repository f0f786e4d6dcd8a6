//! The preallocator: creates segment files ahead of need on its own
//! thread.

use std::collections::BTreeSet;
use std::io;
use std::sync::Mutex;

use super::shared::*;
use crate::format::CLEAN_END_MAX;
use crate::stats::Counters;

/// Creates (preallocates) segment files ahead of need on its own thread,
/// so that the flusher does not stall on `fallocate` and the fsyncs of a
/// new file and its directory.
pub(super) struct Prealloc {
    pub(super) st: Mutex<PreallocState>,
    pub(super) cv: std::sync::Condvar,
}

pub(super) struct PreallocState {
    /// Create segments up to here.
    pub(super) want: u64,
    /// Segments up to here exist.
    pub(super) created: u64,
    pub(super) error: Option<io::Error>,
    pub(super) stop: bool,
    /// Segments made from recycled files (not yet written past): their
    /// space holds old bytes, so the flusher zeroes after what it writes.
    pub(super) recycled: BTreeSet<u64>,
    /// A durable point the flusher wants recorded in the checkpoint, and
    /// the last one written.
    pub(super) ckpt_want: u64,
    pub(super) ckpt_done: u64,
}

impl Prealloc {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, PreallocState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn run(&self, sh: &Shared) {
        let geo = sh.geo;
        let mut st = self.lock();
        loop {
            if st.stop || st.error.is_some() {
                return;
            }
            if st.ckpt_want > st.ckpt_done {
                match self.write_checkpoint(sh, st) {
                    Some(next) => st = next,
                    None => return,
                }
                continue;
            }
            if st.created >= st.want {
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let seq = st.created + 1;
            drop(st);
            let header = geo.encode_segment_header_checked(seq);
            // A retired file first: its space was written before, so
            // O_DSYNC writes into it need no extent conversion (no
            // file-system journal commit per write).
            let res = sh
                .storage
                .reuse_segment(seq, &header, geo.header_size + CLEAN_END_MAX)
                .and_then(|reused| {
                    if !reused {
                        sh.storage.create_segment(seq, geo.segment_size, &header)?;
                    }
                    Ok(reused)
                });
            st = self.lock();
            match res {
                Ok(reused) => {
                    debug_assert_eq!(
                        st.created + 1,
                        seq,
                        "segments are created one after the other, by this thread alone"
                    );
                    st.created = seq;
                    if reused {
                        st.recycled.insert(seq);
                        Counters::add(&sh.stats.segments_recycled, 1);
                    } else {
                        Counters::add(&sh.stats.segments_created, 1);
                    }
                }
                Err(e) => st.error = Some(e),
            }
            self.cv.notify_all();
        }
    }

    /// Writes the checkpoint asked for (`ckpt_want`), without the lock;
    /// `None` once it failed (fail-stop, as when the flusher writes it: the
    /// flusher's next `ensure` sees the error too).
    fn write_checkpoint<'a>(
        &'a self,
        sh: &Shared,
        st: std::sync::MutexGuard<'a, PreallocState>,
    ) -> Option<std::sync::MutexGuard<'a, PreallocState>> {
        let durable = st.ckpt_want;
        drop(st);
        let res = sh.write_checkpoint(|c| c.durable_lsn = c.durable_lsn.max(durable), false);
        let mut st = self.lock();
        match res {
            Ok(()) => {
                debug_assert!(
                    st.ckpt_done <= durable && durable <= st.ckpt_want,
                    "the checkpointed durable point moves forward, up to the one asked for"
                );
                st.ckpt_done = durable;
                Some(st)
            }
            Err(e) => {
                st.error = Some(crate::error::copy_io(&e));
                self.cv.notify_all();
                drop(st);
                sh.poison(e);
                None
            }
        }
    }

    /// Raises the target to `seq` (under the lock `st` holds).
    pub(super) fn want(&self, st: &mut PreallocState, seq: u64) {
        if seq > st.want {
            st.want = seq;
            self.cv.notify_all();
        }
    }

    /// Asks for segments up to `seq`, without waiting.
    pub(super) fn request(&self, seq: u64) {
        self.want(&mut self.lock(), seq);
    }

    /// Waits until segment `seq` exists; says whether it was made from a
    /// recycled file.
    pub(super) fn ensure(&self, seq: u64) -> io::Result<bool> {
        let mut st = self.lock();
        self.want(&mut st, seq);
        while st.created < seq {
            if let Some(e) = &st.error {
                return Err(crate::error::copy_io(e));
            }
            if st.stop {
                return Err(io::Error::other("journal closing"));
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        // Segments the log has left behind are no longer asked about.
        while st.recycled.first().is_some_and(|&s| s < seq) {
            st.recycled.pop_first();
        }
        Ok(st.recycled.contains(&seq))
    }

    /// Asks for `durable` to be recorded in the checkpoint, without
    /// waiting.
    pub(super) fn checkpoint(&self, durable: u64) {
        let mut st = self.lock();
        if durable > st.ckpt_want {
            st.ckpt_want = durable;
            self.cv.notify_all();
        }
    }

    pub(super) fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }
}
