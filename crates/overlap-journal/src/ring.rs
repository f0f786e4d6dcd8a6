//! The log buffer: a ring of bytes indexed by log position. Appenders
//! reserve disjoint regions with an atomic cursor, copy their payload in,
//! and publish the record with one atomic store of its commit word.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Pads a value to its own cache lines so that hot atomics do not share.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

pub(crate) struct Ring {
    mem: Box<[UnsafeCell<u64>]>,
    cap: u64,
    shift: u32,
}

// SAFETY: the ring's bytes are shared between threads under the protocol
// described on each method: a region is written only by the appender that
// reserved it, and read by the flusher only after the appender's release
// store of the commit word (acquire load); it is reused only after the
// flusher's release store of `released`, which appenders load with acquire.
unsafe impl Sync for Ring {}
// SAFETY: as above; the memory is owned by the ring.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of `cap` bytes (a power of two, at least 64).
    pub(crate) fn new(cap: usize) -> Ring {
        debug_assert!(cap.is_power_of_two() && cap >= 64);
        let mem: Box<[UnsafeCell<u64>]> = (0..cap / 8).map(|_| UnsafeCell::new(0)).collect();
        Ring {
            mem,
            cap: cap as u64,
            shift: cap.trailing_zeros(),
        }
    }

    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }

    fn base(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.mem.as_ptr()).cast::<u8>()
    }

    /// The commit word for a record of `total` bytes at `pos`: the length in
    /// the low half, the ring lap in the high half, so a word left from an
    /// earlier lap never looks committed.
    pub(crate) fn commit_word(&self, pos: u64, total: u32) -> u64 {
        debug_assert!(total != 0, "a zero length reads as not committed");
        ((pos >> self.shift) << 32) | total as u64
    }

    /// The record length committed at `pos` in the current lap, if any.
    pub(crate) fn committed(&self, pos: u64) -> Option<u32> {
        let off = (pos & (self.cap - 1)) as usize;
        debug_assert!(off % 8 == 0);
        // SAFETY: `off` is 8-aligned and inside the allocation, whose
        // elements are u64-aligned; every access to commit words is atomic.
        let w = unsafe { AtomicU64::from_ptr(self.base().add(off).cast::<u64>()) }
            .load(Ordering::Acquire);
        let lap = (pos >> self.shift) as u32;
        let total = w as u32;
        ((w >> 32) as u32 == lap && total != 0).then_some(total)
    }

    /// Publishes the record at `pos` (8-aligned).
    ///
    /// # Safety
    ///
    /// The caller reserved `pos` and wrote the record's payload first.
    pub(crate) unsafe fn publish(&self, pos: u64, word: u64) {
        let off = (pos & (self.cap - 1)) as usize;
        debug_assert!(off % 8 == 0, "records start 8-aligned");
        // SAFETY: as in `committed`; SeqCst pairs with the flusher's SeqCst
        // `sleeping` store so one of the two sees the other.
        unsafe { AtomicU64::from_ptr(self.base().add(off).cast::<u64>()) }
            .store(word, Ordering::SeqCst);
    }

    /// Copies `data` into the ring at log position `pos`, wrapping.
    ///
    /// # Safety
    ///
    /// The caller owns `[pos, pos + data.len())`: it reserved the region and
    /// the flusher has released it (no one else reads or writes it now).
    pub(crate) unsafe fn write(&self, pos: u64, data: &[u8]) {
        let off = (pos & (self.cap - 1)) as usize;
        debug_assert!(
            data.len() as u64 <= self.cap,
            "a region is at most the ring"
        );
        let first = data.len().min(self.cap as usize - off);
        // SAFETY: both ranges lie inside the allocation (off + first <= cap,
        // and the rest starts at 0 and is shorter than cap); the region is
        // exclusively ours per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base().add(off), first);
            std::ptr::copy_nonoverlapping(
                data.as_ptr().add(first),
                self.base(),
                data.len() - first,
            );
        }
    }

    /// Copies the ring's bytes at `[pos, pos + out.len())` into `out`.
    ///
    /// # Safety
    ///
    /// Every record in the range is published (seen through `committed`)
    /// and not yet released.
    pub(crate) unsafe fn read(&self, pos: u64, out: &mut [u8]) {
        let off = (pos & (self.cap - 1)) as usize;
        debug_assert!(out.len() as u64 <= self.cap, "a region is at most the ring");
        let first = out.len().min(self.cap as usize - off);
        // SAFETY: ranges inside the allocation as in `write`; the appenders
        // finished writing them before publishing.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base().add(off), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                self.base(),
                out.as_mut_ptr().add(first),
                out.len() - first,
            );
        }
    }

    /// Zeroes the ring's bytes at `[pos, pos + len)`.
    ///
    /// # Safety
    ///
    /// As for [`Ring::read`]: the range is published and not yet released.
    pub(crate) unsafe fn zero(&self, pos: u64, len: usize) {
        let off = (pos & (self.cap - 1)) as usize;
        debug_assert!(len as u64 <= self.cap, "a region is at most the ring");
        let first = len.min(self.cap as usize - off);
        // SAFETY: ranges inside the allocation as in `write`; only the
        // flusher touches them until it releases them.
        unsafe {
            std::ptr::write_bytes(self.base().add(off), 0, first);
            std::ptr::write_bytes(self.base(), 0, len - first);
        }
    }
}
