//! The file offset a [`File`](super::File) and its clones share, and the
//! turns operations take on it once shared.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::fs::support::{code, engine_err};
use crate::reactor::on_ring;

/// The file offset that reads and writes use, shared by a file and its
/// [`File::try_clone`] copies as the kernel's offset is shared by duplicated
/// descriptors. Reads and writes are positional (`read_at`/`write_at`
/// through the engine), so the offset lives here and no `lseek` is made.
///
/// As the kernel's, the offset moves atomically with each operation: a
/// write takes its range `[pos, pos + len)` when it starts (before
/// `poll_write` returns), so that a later write, by this file or a clone,
/// starts after it even while it is in flight. Once the cursor is shared,
/// operations on it take turns as the kernel's `f_pos_lock` makes them: a
/// read holds the turn until it knows how far it got; a write only while it
/// takes its range (unless appending: then until the kernel has put it at
/// the end). An unshared cursor needs no turns: the file runs one operation
/// at a time.
#[derive(Debug)]
pub(super) struct Cursor {
    pos: AtomicU64,
    /// Set by `try_clone`, never cleared.
    shared: AtomicBool,
    pub(super) turn: tokio::sync::Mutex<()>,
}

/// The cursor after a write to a file opened for appending: the end of the
/// file, whatever its length now is (resolved with `statx` when needed).
pub(super) const AT_END: u64 = u64::MAX;

/// This operation's turn on a shared cursor (`None`: not shared, no turn
/// needed). A macro, not an `async fn`: an unshared cursor, the common
/// case, then costs one load and no nested future.
macro_rules! turn {
    ($cursor:expr) => {
        if $cursor.is_shared() {
            Some($cursor.turn.lock().await)
        } else {
            None
        }
    };
}

impl Cursor {
    pub(super) fn new(pos: u64) -> Cursor {
        Cursor {
            pos: AtomicU64::new(pos),
            shared: AtomicBool::new(false),
            turn: tokio::sync::Mutex::new(()),
        }
    }
    pub(super) fn get(&self) -> u64 {
        self.pos.load(Ordering::Acquire)
    }
    pub(super) fn set(&self, pos: u64) {
        self.pos.store(pos, Ordering::Release);
    }
    /// Marks the cursor shared (by a clone): operations take turns from now.
    pub(super) fn share(&self) {
        self.shared.store(true, Ordering::Release);
    }
    /// Whether a clone shares the cursor (operations then take turns).
    #[inline]
    pub(super) fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Acquire)
    }
    /// Moves the cursor back over `n` bytes read ahead but not consumed
    /// (relative, as tokio's `lseek(SEEK_CUR, -n)`).
    pub(super) fn unread(&self, n: usize) {
        if n == 0 {
            return;
        }
        let _ = self
            .pos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |pos| {
                (pos != AT_END).then(|| pos.saturating_sub(n as u64))
            });
    }
    /// The offset, asking the kernel for the file's length when it is the
    /// end of the file.
    pub(super) async fn resolve(&self, file: &overlapped::File) -> io::Result<u64> {
        let pos = self.get();
        if pos != AT_END {
            return Ok(pos);
        }
        let len = on_ring(file.stat())
            .await
            .map_err(|e| engine_err(e, code::NOT_OPENED))?
            .len;
        // Unless someone moved it meanwhile (an unshared cursor's reader
        // giving back read-ahead).
        let _ = self
            .pos
            .compare_exchange(AT_END, len, Ordering::AcqRel, Ordering::Acquire);
        let pos = self.get();
        debug_assert_ne!(
            pos, AT_END,
            "a resolved offset is a number (only an append, in its turn, puts it at the end)"
        );
        Ok(pos)
    }
    /// Takes `len` bytes from the cursor: returns where they start, the
    /// cursor now past them.
    pub(super) async fn take(&self, file: &overlapped::File, len: u64) -> io::Result<u64> {
        loop {
            let pos = self.resolve(file).await?;
            let end = pos.checked_add(len).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "file position overflows")
            })?;
            if self
                .pos
                .compare_exchange(pos, end, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(pos);
            }
        }
    }
    /// Gives back the unused tail `[used, taken)` of a range taken, unless
    /// the cursor has moved since.
    pub(super) fn give_back(&self, taken: u64, used: u64) {
        debug_assert!(used <= taken, "what was used lies in the range taken");
        if used < taken {
            let _ = self
                .pos
                .compare_exchange(taken, used, Ordering::AcqRel, Ordering::Acquire);
        }
    }
    /// Moves the cursor back over `n` unread bytes, in this operation's turn.
    pub(super) async fn unread_in_turn(&self, n: usize) {
        if n > 0 {
            let _turn = turn!(self);
            self.unread(n);
        }
    }
}
