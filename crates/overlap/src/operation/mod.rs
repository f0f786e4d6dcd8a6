//! The operations. Each one is a type whose io_uring entry and blocking
//! system call stand side by side (compio's model): a driver asks
//! [`OpKind::entry`] for the submission entry, and when this kernel lacks the
//! opcode it gets `None` and runs [`OpKind::blocking`] instead, with no
//! special case in the driver loop.
//!
//! Adding an operation is one declaration: a type, in `file.rs` (operations
//! on a descriptor) or `path.rs` (operations on paths and attributes), its
//! [`Operation`] implementation (opcode, name, io_uring entry, blocking call, what it
//! transfers, what its result is; every one of them required, so a
//! forgotten one does not compile), and its name in the [`operations!`]
//! list below, which generates [`OpKind`] and its dispatch (no wildcard arm that a
//! new operation could fall through). Then its public method, in `file/` or
//! `path.rs`, builds it.
//!
//! The raw pointers an operation carries point into memory owned by the same
//! operation cell (its buffer), or into the operation itself (a path), so
//! they stay valid until the cell is dropped, which no driver does before the
//! kernel has reported completion.

use io_uring::squeue;

/// `STATX_DIOALIGN` (Linux 6.1), which the libc crate may not name yet.
pub(crate) const STATX_DIOALIGN: u32 = 0x2000;
/// What `statx` is asked for.
pub(crate) const STATX_MASK: u32 = libc::STATX_BASIC_STATS | libc::STATX_BTIME | STATX_DIOALIGN;

/// The result of an operation that a child after `fork` handed to the
/// parent's engine's driver (whose threads are not in the child).
pub(crate) const ENGINE_ACROSS_FORK: i64 = i64::MIN + 1;

/// The result of an operation the engine refused because it was shutting
/// down ([`Error::Shutdown`](crate::Error::Shutdown)): not performed. Apart
/// from a kernel's `-ECANCELED`, which a caller may see for other reasons
/// (a port's cancellation, a submitter's exit).
pub(crate) const REFUSED_AT_SHUTDOWN: i64 = i64::MIN + 2;

/// One operation of the kernel interface. The required items are what every
/// operation must say; the provided ones are for an operation that owns a
/// resource before it runs (a close owns its descriptor) or knows its result
/// before submission (a no-op).
pub(crate) trait Operation {
    /// The io_uring opcode; where this kernel lacks it, drivers call
    /// [`blocking`](Self::blocking) instead of [`entry`](Self::entry).
    const CODE: u8;
    /// What a successful result is.
    const RETURNS: Returns;
    /// Short name for messages.
    fn name(&self) -> &'static str;
    /// The submission entry (without user data).
    fn entry(&self) -> squeue::Entry;
    /// The same operation as a blocking system call: the result, or `-errno`.
    fn blocking(&self) -> i64;
    /// The file data a successful result moved, if any (the byte counters,
    /// the AIO driver and the resubmission after a submitter's exit go by it).
    fn transfer(&self) -> Transfer;

    /// The operation's result from its completion entry's `res`.
    fn result(&self, cqe_res: i32) -> i64 {
        cqe_res as i64
    }
    /// Called once a driver has performed the operation (kernel or system
    /// call).
    fn performed(&self) {}
    /// The result to report when the engine refuses the operation (it shut
    /// down first): not performed, [`Error::Shutdown`](crate::Error::Shutdown)
    /// to its owner.
    fn refused(&self) -> i64 {
        REFUSED_AT_SHUTDOWN
    }
    /// The result to report when a forked child hands the operation to its
    /// parent's engine (whose threads are not in the child): not performed.
    fn refused_in_child(&self) -> i64 {
        ENGINE_ACROSS_FORK
    }
    /// The descriptor and memory of an operation that moves file data
    /// through a buffer: what a ring's registered buffers (its
    /// [`fixed`](Self::fixed) form) and registered files go by. `None` for
    /// the rest.
    fn data(&self) -> Option<Data> {
        None
    }
    /// The same operation on registered buffer `index` (io_uring's
    /// `READ_FIXED`, `WRITE_FIXED`), where there is such a form.
    fn fixed(&self, _index: u16) -> Option<squeue::Entry> {
        None
    }
    /// The Linux AIO command that performs it, if there is one.
    fn aio(&self) -> Option<AioCommand> {
        None
    }
}

/// What an operation that moves file data through a buffer works on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Data {
    pub fd: i32,
    /// The buffer's address and length.
    pub addr: usize,
    pub len: usize,
}

/// An operation as Linux AIO performs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AioCommand {
    pub code: AioCode,
    pub fd: i32,
    /// Whether the file is O_DIRECT (AIO is asynchronous for data only then).
    pub direct: bool,
}

/// The AIO commands the engine uses (`IOCB_CMD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AioCode {
    Pread,
    Pwrite,
    Fsync,
    Fdsync,
}

impl AioCode {
    /// A sync rather than a data transfer.
    pub(crate) fn is_sync(self) -> bool {
        matches!(self, AioCode::Fsync | AioCode::Fdsync)
    }
}

/// What a successful result (`>= 0`) of an operation is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Returns {
    /// A byte count or a status: nothing to release.
    Value,
    /// A new descriptor, which the engine closes if nobody takes the result.
    Descriptor,
}

/// A read's or write's memory, file offset and length.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    pub addr: usize,
    pub offset: u64,
    pub len: usize,
}

/// The file data an operation moves: which byte counter a successful result
/// adds to, and where.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Transfer {
    /// File data into memory.
    Read(Span),
    /// Memory into the file.
    Write(Span),
    /// No file data (a sync, metadata, a path, an attribute).
    None,
}

/// The result of a raw libc call as `>= 0` or `-errno`.
fn ret(r: i64) -> i64 {
    if r < 0 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as i64)
    } else {
        r
    }
}

mod file;
mod path;

pub(crate) use file::*;
pub(crate) use path::*;

/// Lists every operation once: generates [`OpKind`], one variant per
/// operation type (named as the type), a `From` for each, and [`OpKind`]'s
/// dispatch to [`Operation`], one exhaustive match per item.
macro_rules! operations {
    ($($op:ident),+ $(,)?) => {
        /// Every operation the engine performs.
        #[derive(Debug)]
        pub(crate) enum OpKind {
            $($op($op),)+
        }

        $(impl From<$op> for OpKind {
            fn from(op: $op) -> OpKind {
                OpKind::$op(op)
            }
        })+

        impl OpKind {
            /// The io_uring entry, or `None` when this kernel lacks the
            /// opcode (the driver then calls [`blocking`](Self::blocking)).
            #[inline]
            pub(crate) fn entry(&self, ops: &Opcodes) -> Option<squeue::Entry> {
                match self {
                    $(OpKind::$op(op) => ops.has(<$op as Operation>::CODE).then(|| op.entry()),)+
                }
            }

            /// One blocking attempt (`-EINTR` included).
            fn blocking_once(&self) -> i64 {
                match self {
                    $(OpKind::$op(op) => op.blocking(),)+
                }
            }

            /// Short name for messages.
            pub(crate) fn name(&self) -> &'static str {
                match self {
                    $(OpKind::$op(op) => op.name(),)+
                }
            }

            /// The file data a successful result moved.
            #[inline]
            pub(crate) fn transfer(&self) -> Transfer {
                match self {
                    $(OpKind::$op(op) => op.transfer(),)+
                }
            }

            /// What a successful result is.
            fn returns(&self) -> Returns {
                match self {
                    $(OpKind::$op(_) => <$op as Operation>::RETURNS,)+
                }
            }

            /// The operation's result from its completion entry's `res`.
            #[inline]
            pub(crate) fn result(&self, cqe_res: i32) -> i64 {
                match self {
                    $(OpKind::$op(op) => op.result(cqe_res),)+
                }
            }

            /// Called once a driver has performed the operation (kernel or
            /// system call): a close no longer owns its descriptor.
            #[inline]
            pub(crate) fn performed(&self) {
                match self {
                    $(OpKind::$op(op) => op.performed(),)+
                }
            }

            /// The result to report when the engine refuses the operation
            /// (it shut down first). A close still closes: the descriptor
            /// must not leak.
            pub(crate) fn refused(&self) -> i64 {
                match self {
                    $(OpKind::$op(op) => op.refused(),)+
                }
            }

            /// The result to report in a forked child that handed the
            /// operation to its parent's engine (a close still closes the
            /// child's copy of its descriptor).
            pub(crate) fn refused_in_child(&self) -> i64 {
                match self {
                    $(OpKind::$op(op) => op.refused_in_child(),)+
                }
            }

            /// What a data operation works on (see [`Operation::data`]).
            #[inline]
            pub(crate) fn data(&self) -> Option<Data> {
                match self {
                    $(OpKind::$op(op) => op.data(),)+
                }
            }

            /// The registered-buffer form (see [`Operation::fixed`]).
            pub(crate) fn fixed(&self, index: u16) -> Option<squeue::Entry> {
                match self {
                    $(OpKind::$op(op) => op.fixed(index),)+
                }
            }

            /// The Linux AIO command (see [`Operation::aio`]).
            pub(crate) fn aio(&self) -> Option<AioCommand> {
                match self {
                    $(OpKind::$op(op) => op.aio(),)+
                }
            }
        }
    };
}

operations! {
    Read,
    Write,
    Fsync,
    Fallocate,
    Ftruncate,
    Statx,
    Close,
    Open,
    StatxPath,
    Rename,
    Unlink,
    Mkdir,
    Link,
    Symlink,
    SetXattr,
    GetXattr,
    Nop,
}

// SAFETY: the raw pointers point into memory owned by the same operation
// cell (module docs); they are dereferenced only by the kernel or by the one
// thread that performs the operation.
unsafe impl Send for OpKind {}
// SAFETY: shared access only reads addresses; the one mutable part (Close's
// descriptor) is atomic.
unsafe impl Sync for OpKind {}

/// The opcodes this kernel's io_uring has (`IORING_REGISTER_PROBE`).
pub(crate) struct Opcodes {
    supported: [bool; 256],
}

impl Opcodes {
    pub(crate) fn from_probe(probe: &io_uring::Probe) -> Opcodes {
        let mut supported = [false; 256];
        for (code, s) in supported.iter_mut().enumerate() {
            *s = probe.is_supported(code as u8);
        }
        Opcodes { supported }
    }

    pub(crate) fn has(&self, code: u8) -> bool {
        self.supported[code as usize]
    }
}

impl OpKind {
    /// Performs the operation with a blocking system call; EINTR is retried.
    pub(crate) fn blocking(&self) -> i64 {
        loop {
            let r = self.blocking_once();
            if r != -(libc::EINTR as i64) {
                return r;
            }
        }
    }

    /// Releases what a result owns when nobody took it (the future was
    /// dropped): an opened descriptor is closed.
    pub(crate) fn unclaimed(&self, res: i64) {
        if res >= 0 && self.returns() == Returns::Descriptor {
            // SAFETY: the kernel returned this descriptor to us and no one
            // else ever saw it.
            unsafe { libc::close(res as i32) };
        }
    }

    /// Whether a result of this operation on a port's or a reactor's ring
    /// means that Linux failed it, unperformed, because the thread that
    /// submitted it exited: `-ECANCELED` (its queued io-wq work or armed
    /// poll dropped) or `-EFAULT` (a buffered read finished on a kernel
    /// worker without the process's memory; every buffer is the engine's).
    /// Only reads and writes are submitted again for it.
    pub(crate) fn failed_by_submitter_exit(&self, res: i64) -> bool {
        Self::may_have_failed_by_submitter_exit(res) && !matches!(self.transfer(), Transfer::None)
    }

    /// Whether `res` is one of the results an exiting submitter leaves
    /// (see [`failed_by_submitter_exit`](Self::failed_by_submitter_exit)),
    /// whatever the operation.
    #[inline]
    pub(crate) fn may_have_failed_by_submitter_exit(res: i64) -> bool {
        res == -i64::from(libc::ECANCELED) || res == -i64::from(libc::EFAULT)
    }

    /// A read's or write's memory, file offset and length.
    #[inline]
    pub(crate) fn span(&self) -> Option<Span> {
        match self.transfer() {
            Transfer::Read(s) | Transfer::Write(s) => Some(s),
            Transfer::None => None,
        }
    }
}
