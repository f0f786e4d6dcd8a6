//! The pools registered with an engine ([`Engine::register_buffers`]), as
//! one of the engine's own rings registers them with the kernel: the
//! engine thread's, a thread's own, a reactor's ([`super::core::RingCore`]).
//!
//! A ring registers a pool when an operation's buffer first lies in it on
//! that ring (not before: each ring pins the pool's pages again), into a
//! sparse table of [`SLOTS`]. It keeps only a weak link to the pool: while
//! the pool lives (the engine holds it, and so does every buffer cut from
//! it), its range belongs to it and an operation whose buffer lies there is
//! a `READ_FIXED`/`WRITE_FIXED` of that slot; once the pool is gone, the
//! slot is emptied at the ring's next operation (the kernel unpins the
//! pages) and reused. A pool the
//! kernel refuses on this ring (table full, `RLIMIT_MEMLOCK`) is not tried
//! again while it lives.
//!
//! [`Engine::register_buffers`]: crate::Engine::register_buffers

use std::sync::{Arc, Weak};

use io_uring::{squeue, IoUring};

use super::registry::{has_fixed_opcodes, set_buffer_slot};

use crate::cell::{arenas_freed, EngineState, RegisteredPool};
use crate::operation::{Data, OpKind, Opcodes};

/// Slots of a ring's table (the most pools an engine registers, too).
const SLOTS: usize = crate::cell::MAX_ENGINE_POOLS;

struct Slot {
    start: usize,
    end: usize,
    pool: Weak<dyn Send + Sync>,
}

impl Slot {
    fn holds(&self, addr: usize, end: usize) -> bool {
        debug_assert!(self.start <= self.end, "a registered pool is a range");
        addr >= self.start && end <= self.end
    }
}

#[derive(Default)]
pub(crate) struct RingBuffers {
    /// The kernel's sparse table exists.
    table: bool,
    /// Slot `i` is the kernel's buffer index `i`.
    slots: Vec<Option<Slot>>,
    /// Pools the kernel refused on this ring.
    refused: Vec<Weak<dyn Send + Sync>>,
    /// `cell::arenas_freed()` at the last sweep: a sweep is due when it
    /// moves.
    freed_seen: u64,
}

impl RingBuffers {
    /// The entry of `kind` for this ring: fixed when its buffer lies in a
    /// pool registered with its engine (`state`), registering the pool
    /// here first if need be; `None` when the kernel lacks the opcode.
    pub(crate) fn entry(
        &mut self,
        ring: &IoUring,
        kind: &OpKind,
        ops: &Opcodes,
        state: &EngineState,
    ) -> Option<squeue::Entry> {
        debug_assert!(self.slots.len() <= SLOTS, "at most SLOTS slots");
        if self.slots.is_empty() {
            // Nothing registered here, and nothing to register: the common
            // case, one load.
            if state.pools.count() == 0 {
                return kind.entry(ops);
            }
        } else {
            // A pool freed since the last look (any pool of the process:
            // one load of a line that rarely changes).
            let freed = arenas_freed();
            if freed != self.freed_seen {
                self.freed_seen = freed;
                self.sweep(ring);
            }
        }
        let Some(Data { addr, len, .. }) = kind.data() else {
            return kind.entry(ops);
        };
        let Some(end) = addr.checked_add(len) else {
            return kind.entry(ops);
        };
        let index = match self.index_of(addr, end) {
            Some(i) => Some(i),
            None => self.take_up(ring, ops, state, addr, end),
        };
        let Some(index) = index else {
            return kind.entry(ops);
        };
        debug_assert!(index < SLOTS, "a slot of the table");
        debug_assert!(
            has_fixed_opcodes(ops),
            "a pool is registered only on a kernel with READ_FIXED/WRITE_FIXED"
        );
        let sqe = kind.fixed(index as u16)?;
        state
            .counters
            .fixed_buffer_ops
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(sqe)
    }

    /// The slot of a live pool holding `addr..end`. A live pool owns its
    /// range (nothing else is allocated there while it lives), so the
    /// buffer is that pool's.
    fn index_of(&self, addr: usize, end: usize) -> Option<usize> {
        let index = self.slots.iter().position(|s| {
            s.as_ref()
                .is_some_and(|s| s.holds(addr, end) && s.pool.strong_count() > 0)
        });
        debug_assert!(
            index.is_none() || self.table,
            "a pool is registered only in a table that exists"
        );
        index
    }

    /// Registers the engine's pool that holds `addr..end`, if any and if
    /// not refused here before; its slot.
    fn take_up(
        &mut self,
        ring: &IoUring,
        ops: &Opcodes,
        state: &EngineState,
        addr: usize,
        end: usize,
    ) -> Option<usize> {
        debug_assert!(
            self.index_of(addr, end).is_none(),
            "only a buffer in no registered pool takes a pool up"
        );
        let pool = (0..state.pools.count())
            .filter_map(|i| state.pools.get(i))
            .find(|a| addr >= a.start && end <= a.start + a.len)?;
        if self
            .refused
            .iter()
            .any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(&pool.keep)))
        {
            return None;
        }
        match self.register(ring, ops, pool) {
            Some(i) => {
                debug_assert!(
                    self.slots[i].as_ref().is_some_and(|s| s.holds(addr, end)),
                    "the slot taken up holds the buffer"
                );
                Some(i)
            }
            None => {
                self.refused.retain(|w| w.strong_count() > 0);
                self.refused.push(Arc::downgrade(&pool.keep));
                state
                    .counters
                    .buffer_registrations_refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                None
            }
        }
    }

    fn register(&mut self, ring: &IoUring, ops: &Opcodes, pool: &RegisteredPool) -> Option<usize> {
        if !has_fixed_opcodes(ops) {
            return None;
        }
        debug_assert!(
            self.index_of(pool.start, pool.start + pool.len).is_none() || pool.len == 0,
            "a live pool is registered once on a ring"
        );
        let index = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.slots.len() < SLOTS => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => {
                // Full: a slot of a pool that is gone may be free by now.
                self.sweep(ring);
                self.slots.iter().position(Option::is_none)?
            }
        };
        // SAFETY: the pool's memory stays allocated while the pool lives
        // (`pool.keep`, and every buffer cut from it); this ring uses the
        // slot only while the pool lives (`index_of`) and empties it once
        // the pool is gone (`sweep`). The kernel's own page references keep
        // the pages themselves until then.
        unsafe { set_buffer_slot(ring, &mut self.table, SLOTS, index, pool.start, pool.len) }
            .ok()?;
        self.slots[index] = Some(Slot {
            start: pool.start,
            end: pool.start + pool.len,
            pool: Arc::downgrade(&pool.keep),
        });
        debug_assert!(
            self.table && index < SLOTS && self.slots.len() <= SLOTS,
            "a pool is registered in a slot of the kernel's table"
        );
        Some(index)
    }

    /// Empties the slots of pools that are gone (the kernel unpins their
    /// pages; an operation still in flight with one holds the kernel's own
    /// reference to it).
    fn sweep(&mut self, ring: &IoUring) {
        debug_assert!(
            self.table || self.slots.iter().all(Option::is_none),
            "a pool is registered only in a table that exists"
        );
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|s| s.pool.strong_count() == 0) {
                // SAFETY: an empty slot holds no memory.
                if unsafe { set_buffer_slot(ring, &mut self.table, SLOTS, i, 0, 0) }.is_ok() {
                    *slot = None;
                }
            }
        }
        self.refused.retain(|w| w.strong_count() > 0);
    }

    /// Ends every registration (before the ring's descriptor closes: the
    /// kernel would free a closed ring's table later, on its own time).
    pub(crate) fn unregister_all(&mut self, ring: &IoUring) {
        debug_assert!(
            self.table || self.slots.iter().all(Option::is_none),
            "a pool is registered only in a table that exists"
        );
        if self.table {
            let _ = ring.submitter().unregister_buffers();
            self.table = false;
            self.slots.clear();
        }
    }
}
