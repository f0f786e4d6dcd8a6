//! What a port registers with the kernel (io_uring's registered buffers
//! and files): the front of `crate::driver::uring::registry`, which holds
//! them on the port's ring.

use super::{Mode, Port};
use crate::error::{Error, Result};
use crate::file::File;

impl<B: Send + 'static> Port<B> {
    /// Registers the memory of `pool`, a contiguous pool
    /// ([`AlignedBufPool::contiguous`](crate::AlignedBufPool::contiguous)),
    /// with the kernel for this port: from now on its reads and writes into
    /// the pool's buffers go to the kernel as io_uring's `READ_FIXED` and
    /// `WRITE_FIXED`, which skip pinning the buffer's pages for every
    /// operation (on a fast device, several percent of a read's CPU;
    /// counted in [`Stats::fixed_buffer_ops`](crate::Stats)). Nothing
    /// changes for other buffers. The port keeps the pool's memory
    /// allocated until it is dropped.
    ///
    /// Returns `Ok(false)` where the port has no ring of its own (the
    /// thread-pool and AIO drivers): its operations work as before. Errors:
    /// [`Error::InvalidInput`] for a pool that is not contiguous, holds
    /// more than 1 GiB (the kernel's limit for one registered buffer), or is
    /// a ninth pool; [`Error::Io`] when the kernel refuses (`ENOMEM` when the pages
    /// exceed `RLIMIT_MEMLOCK` for a process without `CAP_IPC_LOCK`).
    /// Registering a pool again does nothing.
    pub fn register_buffers(&self, pool: &crate::AlignedBufPool) -> Result<bool> {
        let Some(arena) = pool.arena() else {
            return Err(Error::InvalidInput(
                "register_buffers takes a pool made with AlignedBufPool::contiguous".into(),
            ));
        };
        match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(ring) => ring
                .register_arena(arena.start(), arena.len(), arena.clone())
                .map(|()| true),
            Mode::Queue(_) => {
                let _ = arena;
                Ok(false)
            }
        }
    }

    /// Registers `len` bytes of memory at `ptr`, which the caller owns (a
    /// buffer pool allocated once, as a database keeps), with the kernel for
    /// this port, as [`register_buffers`](Self::register_buffers) does a
    /// pool's: reads and writes whose buffers lie inside it go as
    /// `READ_FIXED`/`WRITE_FIXED`. Same results and errors (at most 1 GiB,
    /// 8 pools or ranges a port).
    ///
    /// # Safety
    ///
    /// The memory must stay allocated, neither freed nor unmapped, until the
    /// port is dropped: the kernel keeps its pages pinned, and an operation
    /// into an address of the range goes to those pages (after an unmap
    /// and a new mapping at the same address, to the old ones).
    pub unsafe fn register_memory(&self, ptr: *mut u8, len: usize) -> Result<bool> {
        match &self.inner.mode {
            // SAFETY: the caller's contract above, for as long as the port
            // (and so its ring) lives.
            #[cfg(target_os = "linux")]
            Mode::Ring(ring) => unsafe { ring.register_memory(ptr as usize, len) }.map(|()| true),
            Mode::Queue(_) => {
                let _ = (ptr, len);
                Ok(false)
            }
        }
    }

    /// Registers `file`'s descriptor with the kernel for this port: from
    /// now on the port's reads and writes of it skip the kernel's lookup of
    /// the descriptor for every operation (io_uring's registered files;
    /// counted in [`Stats::fixed_file_ops`](crate::Stats)). The registration
    /// ends by itself when the file is closed, dropped or given away with
    /// [`File::into_fd`] (the kernel's table would otherwise keep the file
    /// open), or when the port is dropped.
    ///
    /// Returns `Ok(false)` where the port has no ring of its own (the
    /// thread-pool and AIO drivers), on kernels before 6.13 (which release a
    /// file removed from the table late, so a `close` would return with the
    /// file still open), and for a descriptor number beyond the port's table
    /// (4096 slots, or `RLIMIT_NOFILE` if lower): its operations work as
    /// before. Errors: [`Error::InvalidInput`] for a file
    /// of another engine, [`Error::Closed`] for a closed file,
    /// [`Error::Io`] when the kernel refuses. Registering again does
    /// nothing. The descriptor must only be closed through the engine (as
    /// for any [`File`]): one closed behind its back stays open in the
    /// port's table under its number.
    pub fn register_file(&self, file: &File) -> Result<bool> {
        self.check_engine(file)?;
        match &self.inner.mode {
            #[cfg(target_os = "linux")]
            Mode::Ring(ring) => ring.register_file(&**file.shared_inner()),
            Mode::Queue(_) => Ok(false),
        }
    }
}
