//! What a driver sees of an operation and of its engine: the operation
//! cell's completion interface ([`Completable`]), the part of the engine's
//! state that drivers use ([`EngineState`]), the way back to the engine's
//! driver for the rare paths that hand an operation over again
//! ([`EngineLink`]), and what a result means ([`to_result`], the results of
//! operations that crossed a `fork`, the fork generation).
//!
//! This module is the bottom of the crate's layering: the drivers
//! (`crate::driver`) depend on it and not on the cell itself
//! (`crate::future::OpCell`), the engine or the front ends, so the import
//! graph flows one way (`scripts/import-graph` checks it).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::{Error, Result};
use crate::operation::OpKind;
use crate::stats::Counters;

/// A ring whose kernel table holds registered descriptors (a port's
/// ring): told before a registered descriptor is closed or given away.
pub(crate) trait FixedFiles: Send + Sync {
    /// Removes `fd` from the table: called before the descriptor is closed
    /// or given away, when no operation of the file is in flight or queued.
    fn forget(&self, fd: i32);
}

/// What a ring needs of a file to register its descriptor
/// (`crate::file::FileInner`).
pub(crate) trait RegisteredFile {
    /// Counts a use in, as an operation does (a close waits for it);
    /// `false` once the file is closed.
    fn claim(&self) -> bool;
    /// Counts the use out.
    fn unclaim(&self);
    /// The descriptor; negative once closed.
    fn descriptor(&self) -> i32;
    /// Lists `ring`, to be told ([`FixedFiles::forget`]) before the
    /// descriptor is closed or given away.
    fn note_ring(&self, ring: Weak<dyn FixedFiles>);
}

/// What a driver sees of an operation.
pub(crate) trait Completable: Send + Sync {
    fn kind(&self) -> &OpKind;
    /// The state of the engine the operation belongs to.
    fn shared(&self) -> &EngineState;
    /// The engine the operation belongs to, for the rare paths that hand
    /// it to the engine's driver again or wake the engine's thread (a
    /// reactor ring's resubmission after its submitter's exit, the ring
    /// watcher).
    fn engine(&self) -> Arc<dyn EngineLink>;
    /// The driver performed the operation: records the kernel's result
    /// (`>= 0`, or `-errno`) and notifies the owner. `inline` says the result
    /// was known when the submitting system call returned.
    ///
    /// Runs user code (wakers, and through released permits and files other
    /// wakers); drivers call it through [`crate::driver::contain`].
    fn complete(&self, res: i64, inline: bool);
    /// The engine refused the operation (it was shutting down): the
    /// operation was not performed, except that a close still closes.
    fn refuse(&self) {
        let res = self.kind().refused();
        self.finish(res, true);
    }
    /// Records the result and notifies the owner, without marking the
    /// operation performed.
    fn finish(&self, res: i64, inline: bool);
    /// The port its completion goes to (the port's address, as an
    /// identity that lasts while the operation holds the port) and its
    /// key: what a driver that cancels by key (IOCP) looks for.
    #[cfg(windows)]
    fn queue_key(&self) -> Option<(usize, u64)> {
        None
    }
}

/// The engine as the drivers' rare paths reach it (implemented by
/// `crate::engine::Shared`): the drivers never name the engine itself.
pub(crate) trait EngineLink: Send + Sync {
    /// The engine's state.
    fn state(&self) -> &EngineState;
    /// Hands `op` to the engine's driver (`urgent`: no thread will wait
    /// for it; see `DriverHandle::submit_as`).
    fn submit_to_driver(&self, op: Arc<dyn Completable>, urgent: bool);
    /// Wakes the engine's thread (io_uring) to look at the reactor rings.
    fn nudge(&self);
}

/// What keeps registered memory allocated: a pool's arena, type-erased
/// (the drivers know only its range).
pub(crate) type Keep = Arc<dyn Send + Sync>;

/// A pool's memory registered with the engine
/// ([`Engine::register_buffers`](crate::Engine::register_buffers)).
pub(crate) struct RegisteredPool {
    pub start: usize,
    pub len: usize,
    pub keep: Keep,
}

/// Pools' arenas freed in this process so far: a ring that registered
/// one sees the count move and empties the slots of the pools that are
/// gone (`driver::uring::ring_buffers`).
static ARENAS_FREED: AtomicU64 = AtomicU64::new(0);

/// Counts an arena freed (`crate::buf`'s `Arena` drop).
pub(crate) fn note_arena_freed() {
    ARENAS_FREED.fetch_add(1, Ordering::Release);
}

/// How many arenas were freed so far.
#[inline]
pub(crate) fn arenas_freed() -> u64 {
    ARENAS_FREED.load(Ordering::Acquire)
}

/// The most pools an engine registers (a ring's table has as many slots).
pub(crate) const MAX_ENGINE_POOLS: usize = 8;

/// The pools registered with an engine, which its own rings (the engine
/// thread's, threads' and reactors') register with the kernel when a
/// buffer of one first reaches them (`driver::uring::ring_buffers`): set
/// once each, in order, never removed (the engine keeps them), so that a
/// ring reads them without a lock.
#[derive(Default)]
pub(crate) struct RegisteredPools {
    slots: [OnceLock<RegisteredPool>; MAX_ENGINE_POOLS],
    /// Slots set, for a ring's one-load check per operation.
    count: AtomicUsize,
    /// Serialises additions.
    adding: Mutex<()>,
}

impl RegisteredPools {
    /// How many are registered (every slot below it is set).
    #[inline]
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// The arena in `slot` (below [`count`](Self::count)).
    pub(crate) fn get(&self, slot: usize) -> Option<&RegisteredPool> {
        self.slots.get(slot)?.get()
    }

    /// Adds `pool`; `Ok(false)` if the same one was added before, `Err`
    /// with the limit once every slot is taken.
    pub(crate) fn add(&self, pool: RegisteredPool) -> Result<bool, usize> {
        let _adding = self.adding.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.count.load(Ordering::Acquire);
        let known = self.slots[..n]
            .iter()
            .filter_map(OnceLock::get)
            .any(|a| std::ptr::addr_eq(Arc::as_ptr(&a.keep), Arc::as_ptr(&pool.keep)));
        if known {
            return Ok(false);
        }
        let Some(slot) = self.slots.get(n) else {
            return Err(MAX_ENGINE_POOLS);
        };
        let set = slot.set(pool).is_ok();
        debug_assert!(set, "slots are set in order, once, under `adding`");
        self.count.store(n + 1, Ordering::Release);
        Ok(true)
    }
}

/// The size of one ring: submission-queue and completion-queue entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingSize {
    pub sq: u32,
    pub cq: u32,
}

/// The most submission-queue entries a ring may ask for (the kernel's
/// `IORING_MAX_ENTRIES`).
pub(crate) const MAX_SQ_ENTRIES: u32 = 32768;
/// The most completion-queue entries a ring may ask for (the kernel's
/// `IORING_MAX_CQ_ENTRIES`).
pub(crate) const MAX_CQ_ENTRIES: u32 = 2 * MAX_SQ_ENTRIES;

/// Completion-queue entries per submission-queue entry of a thread's own
/// ring and of a reactor ring: their submission queues are submitted and
/// refilled when full, so more operations than entries may be in flight.
const CQ_PER_SQ_ENTRY: u32 = 16;

/// Submission-queue entries of a reactor ring unless its engine's builder
/// says otherwise.
pub(crate) const DEFAULT_REACTOR_RING_ENTRIES: u32 = 256;

impl RingSize {
    /// The size of a ring one executor thread fills and reaps (a thread's
    /// own, a reactor's) with `sq` submission-queue entries.
    pub(crate) fn per_thread(sq: u32) -> RingSize {
        RingSize {
            sq,
            cq: sq.saturating_mul(CQ_PER_SQ_ENTRY).min(MAX_CQ_ENTRIES),
        }
    }

    /// Within the kernel's bounds, and with room for at least as many
    /// completions as submissions.
    pub(crate) fn is_valid(self) -> bool {
        (1..=MAX_SQ_ENTRIES).contains(&self.sq) && (self.sq..=MAX_CQ_ENTRIES).contains(&self.cq)
    }
}

/// The size of every kind of ring an engine's operations use, decided once
/// by `EngineBuilder::build` and read from here by whoever makes a ring
/// (`crate::driver::uring` documents each kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingSizes {
    /// The engine thread's ring; a port's ring is the same size.
    pub engine: RingSize,
    /// A thread's own ring (made by the first operation of the engine the
    /// thread waits for).
    pub thread: RingSize,
    /// A reactor ring made for the engine.
    pub reactor: RingSize,
}

/// The part of an engine's state that drivers use (the engine's `Shared`
/// holds it and dereferences to it).
pub(crate) struct EngineState {
    pub counters: Arc<Counters>,
    /// The bound on kernel workers, applied to every ring that submits.
    pub max_kernel_workers: Option<u32>,
    /// The size of every kind of ring of the engine, as `EngineBuilder`
    /// decided them.
    pub rings: RingSizes,
    /// Operations in flight on threads' own rings (see
    /// `crate::driver::uring::thread`) and on reactor rings: what shutdown
    /// waits for, besides the driver and the ports' rings.
    pub own_ring_ops: AtomicUsize,
    /// Pools registered with the engine, for its own rings.
    pub pools: RegisteredPools,
    /// The fork generation that made the engine: in a child after `fork`
    /// it belongs to the parent, and refuses operations.
    pub(crate) generation: u64,
    pub(crate) shut: AtomicBool,
}

impl EngineState {
    pub(crate) fn is_shut(&self) -> bool {
        self.shut.load(Ordering::Acquire)
    }

    /// Counts an operation into `own_ring_ops` before it goes on a thread's
    /// or a reactor's ring; `false` (counting nothing) once shutdown began:
    /// shutdown may already have seen no operation on the rings, so the
    /// caller refuses it through the driver rather than run it after.
    pub(crate) fn admit_to_own_ring(&self) -> bool {
        self.own_ring_ops.fetch_add(1, Ordering::AcqRel);
        if self.is_shut() {
            self.own_ring_ops.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Made before a `fork` this process is the child of.
    pub(crate) fn forked(&self) -> bool {
        self.generation != fork_generation()
    }
}

/// The result of an operation that was in flight when the process forked,
/// as the child's copy of it sees it ([`Error::Forked`]).
pub(crate) const INHERITED_ACROSS_FORK: i64 = i64::MIN;

/// What [`Error::Forked`] says of an operation a child inherited in flight.
pub(crate) const FORKED_OP: &str = "the operation was in flight when this process forked: the \
    kernel completes it in the parent, with the parent's memory; start it again in this process, \
    on an engine made here";

/// The sentinel results, declared beside the operations that return them.
pub(crate) use crate::operation::{ENGINE_ACROSS_FORK, REFUSED_AT_SHUTDOWN};

/// What [`Error::Forked`] says of a port used in a child.
pub(crate) const FORKED_PORT: &str = "the port was made before this process forked and \
    belongs to the parent (its ring or its engine's threads are there); make a new engine and \
    port in this process";

/// What [`Error::Forked`] says of an engine used in a child.
pub(crate) const FORKED_ENGINE: &str = "the engine was made before this process forked and \
    belongs to the parent; make a new engine in this process";

/// Turns a kernel result into a byte count or a typed error.
pub(crate) fn to_result(res: i64) -> Result<usize> {
    if res == INHERITED_ACROSS_FORK {
        return Err(Error::Forked(FORKED_OP));
    }
    if res == ENGINE_ACROSS_FORK {
        return Err(Error::Forked(FORKED_ENGINE));
    }
    if res == REFUSED_AT_SHUTDOWN {
        return Err(Error::Shutdown);
    }
    if res < 0 {
        Err(Error::from_errno((-res) as i32))
    } else {
        Ok(res as usize)
    }
}

/// Incremented in the child of every `fork`, so that a thread ring made
/// before it is recognised without a system call per operation.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The current fork generation (registering the `fork` handler once).
/// Always 0 on Windows, which has no `fork`.
pub(crate) fn fork_generation() -> u64 {
    #[cfg(unix)]
    {
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        REGISTERED.call_once(|| {
            // SAFETY: registers a handler that only touches an atomic, which
            // is async-signal-safe as a child of fork requires.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        });
    }
    FORK_GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::{OpKind, Read};

    /// An operation the engine refused at shutdown reaches its owner as
    /// `Error::Shutdown`, not as the kernel's `ECANCELED` (which a read
    /// racing with `shutdown` would otherwise get); kernel errors stay the kernel's.
    #[test]
    fn a_refused_operation_is_a_shutdown() {
        let read = OpKind::Read(Read {
            fd: 0,
            ptr: std::ptr::null_mut(),
            len: 0,
            offset: 0,
            direct: false,
            #[cfg(windows)]
            synchronous: false,
        });
        assert!(matches!(to_result(read.refused()), Err(Error::Shutdown)));
        #[cfg(target_os = "linux")]
        let canceled_code = libc::ECANCELED;
        #[cfg(windows)]
        let canceled_code = windows_sys::Win32::Foundation::ERROR_OPERATION_ABORTED as i32;
        let canceled = to_result(-i64::from(canceled_code));
        assert_eq!(
            canceled.err().and_then(|e| e.raw_os_error()),
            Some(canceled_code)
        );
    }
}
