//! The state a file's handles share: its descriptor, the operations in
//! flight on it (so that close waits for them), and the page-cache fast
//! path's miss streak.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::Waker;

use super::Alignment;
use crate::cell::{FixedFiles, RegisteredFile};
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::sys::MissHistory;

pub(super) const CLOSED: usize = 1 << (usize::BITS - 1);

pub(crate) struct FileInner {
    pub(super) fd: AtomicI32,
    /// Opened with O_APPEND.
    pub(super) append: bool,
    /// Operations in flight on this file, with the CLOSED bit.
    pub(super) state: AtomicUsize,
    pub(super) close_waker: Mutex<Option<Waker>>,
    /// The engine's state, not an `Engine` handle: operations in flight hold
    /// this, and must not keep the engine alive once the user has dropped
    /// every handle (dropping the last one waits for them instead).
    pub(super) shared: Arc<Shared>,
    pub(super) readable: bool,
    pub(super) writable: bool,
    pub(super) direct: bool,
    /// The handle was opened for synchronous I/O and adopted as such
    /// (`File::from_synchronous_handle`): its reads and writes run on the
    /// pool, and it is not associated with a completion port.
    #[cfg(windows)]
    pub(super) synchronous: bool,
    /// Set once, right after opening, from `statx`.
    pub(super) align: OnceLock<Alignment>,
    /// The page-cache fast path's recent misses on this file.
    pub(crate) misses: MissHistory,
    /// The port rings that registered the descriptor with the kernel
    /// (`Port::register_file`): each is told before the descriptor is closed
    /// or given away, since a registered file stays open in the ring's table.
    pub(crate) registered: Mutex<Vec<Weak<dyn FixedFiles>>>,
}

/// What a descriptor was opened for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mode {
    pub readable: bool,
    pub writable: bool,
    /// Every write goes to the end of the file (O_APPEND; on Windows
    /// `FILE_APPEND_DATA` without `FILE_WRITE_DATA`).
    pub append: bool,
    /// The page cache is bypassed (O_DIRECT; `FILE_FLAG_NO_BUFFERING`).
    pub direct: bool,
}

#[cfg(target_os = "linux")]
impl Mode {
    /// The mode of a descriptor opened with `open(2)` flags `flags`.
    pub(super) fn from_flags(flags: i32) -> Mode {
        let acc = flags & libc::O_ACCMODE;
        Mode {
            readable: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            writable: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            append: flags & libc::O_APPEND != 0,
            direct: flags & libc::O_DIRECT != 0,
        }
    }
}

impl FileInner {
    /// The state of a descriptor this engine now owns, opened as `mode`.
    pub(super) fn new(fd: i32, shared: Arc<Shared>, mode: Mode) -> FileInner {
        debug_assert!(fd >= 0, "a file is made from an open descriptor");
        FileInner {
            fd: AtomicI32::new(fd),
            append: mode.append,
            state: AtomicUsize::new(0),
            misses: MissHistory::default(),
            close_waker: Mutex::new(None),
            shared,
            readable: mode.readable,
            writable: mode.writable,
            direct: mode.direct,
            #[cfg(windows)]
            synchronous: false,
            align: OnceLock::new(),
            registered: Mutex::new(Vec::new()),
        }
    }

    /// The state of a file without a descriptor, as one after `close`:
    /// every operation on it is refused as closed.
    #[cfg(windows)]
    pub(super) fn closed(shared: Arc<Shared>) -> FileInner {
        let none = Mode {
            readable: false,
            writable: false,
            append: false,
            direct: false,
        };
        let inner = FileInner::new(0, shared, none);
        // Never used: no operation starts on a file marked closed, and
        // dropping one with -1 closes nothing.
        inner.fd.store(-1, Ordering::Release);
        inner.state.store(CLOSED, Ordering::Release);
        inner
    }

    /// Tells every ring that registered the descriptor to drop it from its
    /// table (`FixedFiles::forget`), before `fd` is closed or given away.
    pub(crate) fn forget_registrations(&self, fd: i32) {
        debug_assert!(
            fd >= 0,
            "registrations are forgotten for the descriptor they name"
        );
        let rings = std::mem::take(&mut *self.registered.lock().unwrap_or_else(|p| p.into_inner()));
        for ring in rings {
            if let Some(ring) = ring.upgrade() {
                ring.forget(fd);
            }
        }
    }

    pub(super) fn align(&self) -> Alignment {
        self.align.get().copied().unwrap_or(Alignment {
            memory: 512,
            offset: 512,
            source: "default",
        })
    }

    /// Counts an operation in, unless the file is closed.
    pub(crate) fn try_start(&self) -> bool {
        let prev = self.state.fetch_add(1, Ordering::AcqRel);
        debug_assert!(
            (prev & !CLOSED) + 1 < CLOSED,
            "the count of operations on a file never reaches its closed bit"
        );
        if prev & CLOSED != 0 {
            self.finish();
            return false;
        }
        true
    }

    pub(crate) fn finish(&self) {
        if let Some(w) = self.finish_quietly() {
            w.wake();
        }
    }

    /// [`finish`](Self::finish), giving back the waker of a close that
    /// waited for this operation instead of waking it (for a caller that
    /// holds a lock: it wakes it after).
    pub(crate) fn finish_quietly(&self) -> Option<std::task::Waker> {
        let prev = self.state.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(
            prev & !CLOSED > 0,
            "an operation counted out of a file was counted in"
        );
        if prev == CLOSED | 1 {
            self.close_waker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        } else {
            None
        }
    }

    pub(crate) fn fd(&self) -> i32 {
        self.fd.load(Ordering::Acquire)
    }
}

impl Drop for FileInner {
    fn drop(&mut self) {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            self.forget_registrations(fd);
            // We own fd, and no operation holds this FileInner any more.
            crate::sys::close_quietly(fd);
        }
    }
}

impl RegisteredFile for FileInner {
    fn claim(&self) -> bool {
        self.try_start()
    }
    fn unclaim(&self) {
        self.finish();
    }
    fn descriptor(&self) -> i32 {
        self.fd()
    }
    fn note_ring(&self, ring: Weak<dyn FixedFiles>) {
        let mut rings = self.registered.lock().unwrap_or_else(|p| p.into_inner());
        // Rings dropped since need no word at close.
        rings.retain(|w| w.strong_count() > 0);
        rings.push(ring);
    }
}

/// An operation's claim on a file: keeps the descriptor open and counted
/// as in use until the operation is done.
pub(crate) struct FileRef {
    inner: Arc<FileInner>,
    started: bool,
}

impl FileRef {
    pub(crate) fn inner(&self) -> &FileInner {
        &self.inner
    }

    /// The state of the engine the file was opened on.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn new(inner: Arc<FileInner>) -> FileRef {
        FileRef {
            inner,
            started: false,
        }
    }
    /// Counts the operation out (as dropping it would) but keeps the file:
    /// [`start`](Self::start) may count it in again. Gives back the waker
    /// of a close that waited for it, to be woken by the caller
    /// ([`FileInner::finish_quietly`]).
    #[must_use = "a close waiting for this operation must be woken"]
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn release(&mut self) -> Option<std::task::Waker> {
        if self.started {
            self.started = false;
            self.inner.finish_quietly()
        } else {
            None
        }
    }

    /// Counts the operation in; fails if the file was closed.
    pub(crate) fn start(&mut self) -> Result<()> {
        if !self.started {
            if !self.inner.try_start() {
                return Err(Error::Closed);
            }
            self.started = true;
        }
        Ok(())
    }
}

impl Drop for FileRef {
    fn drop(&mut self) {
        if self.started {
            self.inner.finish();
        }
    }
}
