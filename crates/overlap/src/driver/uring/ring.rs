//! The owner of one io_uring, of every kind (the engine thread's, a
//! thread's own, a reactor's, a port's): the ring itself, what its kernel
//! can do, the fork generation that made it, the one `io_uring_enter` every
//! ring submits and waits with, and the one teardown.
//!
//! What is in flight on a ring, and who submits and reaps, is its user's:
//! [`RingCore`](super::core::RingCore) for the rings one thread (or one lock)
//! drives, [`PortRing`](super::port::PortRing) for a port's, which any thread
//! enters. Both hold a [`Ring`] and nothing else of the kernel's.

use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::IoUring;

use crate::cell::fork_generation;
use crate::operation::Opcodes;

/// `IORING_ENTER_GETEVENTS` (the io-uring crate keeps its constants private).
const IORING_ENTER_GETEVENTS: u32 = 1;
/// `IORING_ENTER_EXT_ARG`: the argument is an `io_uring_getevents_arg`.
const IORING_ENTER_EXT_ARG: u32 = 8;

/// The kernel's `struct io_uring_getevents_arg` (Linux 5.11).
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// The kernel's `struct __kernel_timespec`.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

// The kernel's layouts (include/uapi/linux/io_uring.h, time_types.h).
const _: () = {
    assert!(std::mem::size_of::<GeteventsArg>() == 24);
    assert!(std::mem::size_of::<KernelTimespec>() == 16);
    assert!(IORING_ENTER_GETEVENTS & IORING_ENTER_EXT_ARG == 0);
};

/// How a ring's life ends ([`Ring::close`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Life {
    Open,
    /// Registrations ended, descriptor closed, mappings gone.
    Closed,
    /// Kept for ever: the kernel may still write into memory its entries
    /// point at, so neither the ring nor that memory may go.
    Leaked,
}

/// One io_uring and what its kernel can do.
pub(crate) struct Ring {
    // Dropped only by `close` with nothing in flight; otherwise leaked.
    io: ManuallyDrop<IoUring>,
    ops: Opcodes,
    /// The fork generation that made the ring: in a child after `fork` the
    /// ring (its operations, its registrations) is the parent's.
    generation: u64,
    life: Life,
}

impl Ring {
    pub(crate) fn new(io: IoUring, ops: Opcodes) -> Ring {
        debug_assert!(
            ops.has(io_uring::opcode::Nop::CODE),
            "every ring's kernel has the NOP of the markers and wake-ups (probed)"
        );
        debug_assert!(
            io.params().is_feature_ext_arg(),
            "every ring waits with a timeout through EXT_ARG (checked at setup)"
        );
        debug_assert!(
            io.params().cq_entries() >= io.params().sq_entries(),
            "a ring has room for a completion of every entry it takes"
        );
        Ring {
            io: ManuallyDrop::new(io),
            ops,
            generation: fork_generation(),
            life: Life::Open,
        }
    }

    pub(crate) fn io(&self) -> &IoUring {
        debug_assert_eq!(self.life, Life::Open, "a closed ring is never used");
        &self.io
    }

    pub(crate) fn io_mut(&mut self) -> &mut IoUring {
        debug_assert_eq!(self.life, Life::Open, "a closed ring is never used");
        &mut self.io
    }

    /// The opcodes this ring's kernel supports.
    pub(crate) fn ops(&self) -> &Opcodes {
        &self.ops
    }

    pub(crate) fn fd(&self) -> RawFd {
        let fd = self.io.as_raw_fd();
        debug_assert!(fd >= 0, "an open ring has a descriptor");
        fd
    }

    /// In a child after `fork`: the ring, its operations and its
    /// registrations are the parent's, and the child submits nothing on it.
    #[inline]
    pub(crate) fn inherited(&self) -> bool {
        self.generation != fork_generation()
    }

    /// One `io_uring_enter` with `IORING_ENTER_GETEVENTS`: hands the kernel
    /// `to_submit` queued entries, runs the calling thread's completion
    /// work, and waits until `want` completions are in the ring or, with a
    /// `timeout`, until it passes. Every ring's waits go through it.
    ///
    /// An interrupted call that waited for nothing is made again; any other
    /// interruption, the timeout, and a full completion queue (`EBUSY`,
    /// `EAGAIN`: reaping makes room) return, for the caller to reap and
    /// look again. Returns how many entries the kernel took (0 then).
    ///
    /// # Safety
    /// The `to_submit` entries at the head of the submission queue must be
    /// valid: their pointers into memory that outlives the operations.
    pub(crate) unsafe fn enter(
        &self,
        to_submit: u32,
        want: u32,
        timeout: Option<std::time::Duration>,
    ) -> usize {
        debug_assert!(!self.inherited(), "a child never enters its parent's ring");
        debug_assert!(
            to_submit <= self.io().params().sq_entries(),
            "at most a full submission queue is handed over"
        );
        // A timeout bounds a wait only (with nothing wanted the call
        // returns at once).
        let timeout = timeout.filter(|_| want > 0);
        loop {
            // SAFETY: the caller vouches for the entries.
            let r = unsafe { self.enter_once(to_submit, want, timeout) };
            let e = match r {
                Ok(n) => {
                    debug_assert!(
                        n <= to_submit as usize,
                        "the kernel takes at most the entries it was handed"
                    );
                    return n;
                }
                Err(e) => e,
            };
            match e.raw_os_error() {
                Some(libc::EINTR) if want == 0 => continue,
                Some(libc::EINTR | libc::ETIME | libc::EBUSY | libc::EAGAIN) => return 0,
                _ => {
                    // Should not happen with a valid ring; do not spin.
                    // Not eprintln!: it panics on a closed stderr pipe.
                    let _ = writeln!(std::io::stderr(), "overlap: io_uring_enter failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    return 0;
                }
            }
        }
    }

    /// # Safety
    /// As [`enter`](Self::enter).
    unsafe fn enter_once(
        &self,
        to_submit: u32,
        want: u32,
        timeout: Option<std::time::Duration>,
    ) -> std::io::Result<usize> {
        debug_assert!(
            timeout.is_none() || want > 0,
            "a timeout bounds a wait only"
        );
        let Some(t) = timeout else {
            // SAFETY: no argument but the flag; the caller vouches for the
            // entries.
            return unsafe {
                self.io().submitter().enter::<libc::sigset_t>(
                    to_submit,
                    want,
                    IORING_ENTER_GETEVENTS,
                    None,
                )
            };
        };
        let ts = KernelTimespec {
            tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(t.subsec_nanos()),
        };
        debug_assert!(
            (0..1_000_000_000).contains(&ts.tv_nsec),
            "the kernel takes a normalised timespec"
        );
        let arg = GeteventsArg {
            sigmask: 0,
            sigmask_sz: 0,
            min_wait_usec: 0,
            ts: &ts as *const KernelTimespec as u64,
        };
        // SAFETY: `arg` is the kernel's `io_uring_getevents_arg` (EXT_ARG
        // with its size), its `ts` points at `ts`; both outlive the call.
        // The caller vouches for the entries.
        unsafe {
            self.io().submitter().enter(
                to_submit,
                want,
                IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                Some(&arg),
            )
        }
    }

    /// The one teardown of every ring. `idle`: the kernel holds no pointer
    /// into memory of the ring's user (nothing in flight, no read armed).
    /// Then the registrations end (`unregister`: the kernel frees a closed
    /// ring's tables later, on its own time, so the pools' pages are
    /// unpinned now), the descriptor closes and the mappings go. In a child
    /// after `fork` the registrations are the parent's and stay, and only
    /// the child's descriptor and mappings go. A busy ring (only an
    /// unwinding user leaves one) is leaked, never freed under the kernel:
    /// its user leaks the memory the entries point at too.
    pub(crate) fn close(&mut self, idle: bool, unregister: impl FnOnce(&IoUring)) {
        assert_eq!(self.life, Life::Open, "a ring is closed once");
        let inherited = self.inherited();
        if !idle && !inherited {
            self.life = Life::Leaked;
            return;
        }
        if !inherited {
            unregister(&self.io);
        }
        self.life = Life::Closed;
        // SAFETY: the kernel holds no pointer into this process's memory
        // through the ring (idle, or a child's copy, on which nothing was
        // submitted), and `life` keeps it from being used or dropped again.
        unsafe { ManuallyDrop::drop(&mut self.io) };
    }
}

impl Drop for Ring {
    /// A ring its user did not close is leaked: the user was unwinding,
    /// and the kernel may still write into memory its entries point at.
    fn drop(&mut self) {
        debug_assert!(
            self.life != Life::Open || std::thread::panicking() || self.inherited(),
            "every ring is closed by its user (`Ring::close`), or leaked by an unwinding one"
        );
    }
}
