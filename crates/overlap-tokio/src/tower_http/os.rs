//! What the backend asks of the system: how a file to serve is opened, read-ahead
//! advice, and whether the page cache holds a range (Linux); Windows has
//! no counterpart of these, and a file there is opened as it is.

#[cfg(target_os = "linux")]
pub(super) use linux::*;
#[cfg(windows)]
pub(super) use windows::*;

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, RawFd};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use crate::fs::{File, OpenOptions};

    /// Only regular files are served. O_NONBLOCK lets the open of a FIFO
    /// return at once (without it the open waits for a writer, holding the
    /// request, and where the engine runs on its thread pool a pool
    /// thread, as with tower-http's default backend); the type is then
    /// checked on the open file (no race with a rename).
    pub(in crate::tower_http) fn open_options() -> OpenOptions {
        let mut o = OpenOptions::new();
        o.read(true).custom_flags(libc::O_NONBLOCK);
        o
    }

    /// A socket's open fails with ENXIO: not served either.
    pub(in crate::tower_http) fn not_served(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::ENXIO)
    }

    /// Clears O_NONBLOCK before any read: io_uring fails a read of uncached
    /// data from a file open with O_NONBLOCK (EAGAIN) instead of waiting
    /// for the device.
    pub(in crate::tower_http) fn opened(file: &File) -> io::Result<()> {
        // SAFETY: sets the status flags of a descriptor this file owns; of
        // those F_SETFL sets (O_APPEND, O_ASYNC, O_DIRECT, O_NOATIME,
        // O_NONBLOCK) this read-only open set O_NONBLOCK only.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// No kernel read-ahead for `file`.
    pub(in crate::tower_http) fn advise_random(file: &File) {
        // SAFETY: advice on a descriptor this file owns; no memory.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    }

    /// Starts the kernel reading `len` bytes at `from` of `file`.
    pub(in crate::tower_http) fn advise_willneed(file: &File, from: u64, len: u64) {
        debug_assert!(len > 0, "advice for a range of some bytes");
        // SAFETY: advice on a descriptor this file owns; no memory.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                from as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
    }

    /// Whether the page cache holds every page of `len` bytes at `offset`
    /// of `file` (see `cachestat_all`).
    pub(in crate::tower_http) fn all_cached(file: &File, offset: u64, len: u64) -> bool {
        cachestat_all(file.as_raw_fd(), offset, len)
    }

    /// The system's page size.
    fn page_size() -> u64 {
        static PAGE: AtomicU64 = AtomicU64::new(0);
        match PAGE.load(Ordering::Relaxed) {
            0 => {
                // SAFETY: sysconf reads a constant of the system.
                let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
                let p = u64::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096);
                debug_assert!(p.is_power_of_two(), "a page is a power of two bytes");
                PAGE.store(p, Ordering::Relaxed);
                p
            }
            p => p,
        }
    }

    /// Whether the page cache holds every page of `len` bytes at `offset` of
    /// `fd` (`cachestat`, Linux 6.5: asks the page cache only, starts no
    /// read-ahead). `false` where the kernel lacks it, and for a file the
    /// caller could not write and does not own (the kernel's rule for
    /// `cachestat`): then a read of it waits for a permit whenever none is
    /// left, cached or not.
    fn cachestat_all(fd: RawFd, offset: u64, len: u64) -> bool {
        /// `cachestat` (Linux 6.5): 451 on every architecture with the unified
        /// system call table (all but alpha and mips).
        const SYS_CACHESTAT: libc::c_long = 451;
        static WORKS: AtomicBool = AtomicBool::new(true);
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct CacheStat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        if len == 0 {
            return true;
        }
        if !WORKS.load(Ordering::Relaxed) {
            return false;
        }
        let range = Range { off: offset, len };
        let mut st = CacheStat::default();
        // SAFETY: `range` is read and `st` written by the kernel during the
        // call only; both are live locals of the sizes the kernel expects.
        let r = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                fd as libc::c_long,
                &range as *const Range,
                &mut st as *mut CacheStat,
                0 as libc::c_uint,
            )
        };
        if r != 0 {
            // ENOSYS: before 6.5 (or a sandbox): never asked again. EPERM: the
            // kernel answers only for files the caller could write (or owns),
            // and a server reads others' files: "not known to be cached".
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                WORKS.store(false, Ordering::Relaxed);
            }
            return false;
        }
        let page = page_size();
        let pages = (offset + len).div_ceil(page) - offset / page;
        debug_assert!(pages > 0, "a range of bytes lies on one page at least");
        st.nr_cache >= pages
    }
}

#[cfg(windows)]
mod windows {
    use std::io;

    use crate::fs::{File, OpenOptions};

    /// A file to serve is opened for reading; a directory's open fails
    /// (std's rule, no `FILE_FLAG_BACKUP_SEMANTICS`), and no FIFO can be
    /// named by a path below a directory served.
    pub(in crate::tower_http) fn open_options() -> OpenOptions {
        let mut o = OpenOptions::new();
        o.read(true);
        o
    }

    /// Every open error is reported as it is.
    pub(in crate::tower_http) fn not_served(_: &io::Error) -> bool {
        false
    }

    /// Nothing to undo after the open.
    pub(in crate::tower_http) fn opened(_: &File) -> io::Result<()> {
        Ok(())
    }

    /// No advice: Windows has no per-handle read-ahead advice after open.
    pub(in crate::tower_http) fn advise_random(_: &File) {}

    /// No advice (see [`advise_random`]).
    pub(in crate::tower_http) fn advise_willneed(_: &File, _: u64, _: u64) {}

    /// Windows cannot tell whether the cache holds a range without reading
    /// it: "not known to be cached", so a read waits for a permit whenever
    /// the backend's limit of uncached reads says so.
    pub(in crate::tower_http) fn all_cached(_: &File, _: u64, len: u64) -> bool {
        len == 0
    }
}
