//! Linux's side of the OS layer: the page-cache fast path
//! (`preadv2(RWF_NOWAIT)` on the caller's thread), the dentry-cache `statx`
//! and the local file systems it trusts, the dentry-cache open, `statx` of
//! a descriptor, the page size.

use std::sync::atomic::Ordering;

use super::MissHistory;

/// What `statx` fills: the raw metadata the engine turns into
/// [`Metadata`](crate::Metadata) and [`Stat`](crate::path::Stat).
pub(crate) type RawStat = libc::statx;

/// A path as the system calls take it: NUL-terminated bytes.
pub(crate) type NativePath = std::ffi::CString;

/// `STATX_DIOALIGN` (Linux 6.1), which the libc crate may not name yet.
pub(crate) const STATX_DIOALIGN: u32 = 0x2000;
/// What `statx` is asked for.
pub(crate) const STATX_MASK: u32 = libc::STATX_BASIC_STATS | libc::STATX_BTIME | STATX_DIOALIGN;

/// One attempt of the cache fast path on the calling thread, counted: the
/// byte count when the kernel answered the whole range from the page cache
/// (or the file ended within it), else `None` (a partial answer is dropped:
/// the caller reads the whole range another way; or recent misses on
/// `file` made it skip the attempt, counted as skipped).
///
/// # Safety
///
/// `ptr` must be writable for `len` bytes for the duration of the call, and
/// `fd` an open descriptor that stays open during it.
pub(crate) unsafe fn nowait_into(
    counters: &impl super::Tally,
    file: Option<&MissHistory>,
    fd: i32,
    ptr: *mut u8,
    len: usize,
    offset: u64,
) -> Option<usize> {
    if file.is_some_and(|f| !f.worth_trying()) {
        counters.fast_skipped();
        return None;
    }
    let iov = libc::iovec {
        iov_base: ptr.cast(),
        iov_len: len,
    };
    // SAFETY: the caller guarantees the memory and the descriptor.
    let r = unsafe { preadv2_nowait(fd, &iov, offset) };
    if r >= 0 && (r as u64 == len as u64 || at_or_past_eof(fd, offset + r as u64)) {
        // A hit counts as submitted, completed and inline through
        // `fast_hits` (see `Counters::snapshot`): two atomics, not five.
        counters.fast_hit(r as u64);
        if let Some(f) = file {
            f.record(true);
        }
        debug_assert!(
            r as usize <= len,
            "a read returns at most the bytes asked for"
        );
        return Some(r as usize);
    }
    counters.fast_miss();
    if let Some(f) = file {
        f.record(false);
    }
    None
}

/// `preadv2(fd, iov, 1, offset, RWF_NOWAIT)` as a raw system call: glibc's
/// wrapper makes it a thread-cancellation point, switching the cancellation
/// state around the call, which costs more than the rest of the fast path.
///
/// # Safety
///
/// `iov` must describe memory writable for `iov_len` bytes.
unsafe fn preadv2_nowait(fd: i32, iov: &libc::iovec, offset: u64) -> isize {
    #[cfg(target_pointer_width = "64")]
    {
        // SAFETY: the caller guarantees the iovec; on 64-bit kernels the
        // offset is passed whole as the low half, the high half is 0.
        unsafe {
            libc::syscall(
                libc::SYS_preadv2,
                fd as libc::c_long,
                iov as *const libc::iovec,
                1 as libc::c_long,
                offset as libc::c_long,
                0 as libc::c_long,
                libc::RWF_NOWAIT as libc::c_long,
            ) as isize
        }
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        // SAFETY: as above, through glibc's wrapper.
        unsafe { libc::preadv2(fd, iov, 1, offset as libc::off_t, libc::RWF_NOWAIT) }
    }
}

fn at_or_past_eof(fd: i32, offset: u64) -> bool {
    // SAFETY: fstat writes into a local stat struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid, writable stat buffer.
    unsafe { libc::fstat(fd, &mut st) == 0 && offset >= st.st_size as u64 }
}

/// The dentry-cache fast path of `statx` by path, on the caller's thread:
/// io_uring hands every `IORING_OP_STATX` to a kernel worker (a thread
/// wake-up and a switch each), though a path whose every component is in
/// the dentry cache, on a local file system, is answered from memory.
///
/// `openat2(path, O_PATH, RESOLVE_CACHED)` walks the path only through the
/// dentry cache (`EAGAIN` when a component would have to be read from the
/// device, or revalidated: a network file system); `statx` of that
/// descriptor with `AT_STATX_DONT_SYNC` reads the in-memory inode, which on
/// the local file systems listed in [`is_local_fs`] is what a synced
/// `statx` gives too. Which file system that is comes from the mount's
/// superblock in memory (`statmount`, Linux 6.8), never from `fstatfs`,
/// which asks the file system itself (an RPC on NFS, a request to the
/// daemon on FUSE). Returns `None` (the caller goes through the driver)
/// for anything else: not cached, another kind of file system, an error
/// other than "does not exist", or a kernel without `RESOLVE_CACHED`,
/// `STATX_MNT_ID_UNIQUE` or `statmount` (before 6.8), or a sandbox
/// refusing one of them (then never tried again). An answer is counted as
/// an operation submitted and completed inline.
///
/// Before Linux 6.5, closing the `O_PATH` descriptor raised an fsnotify
/// close event (`IN_CLOSE_NOWRITE`) that a plain `statx` does not: an
/// inotify watcher on the directory sees one per call.
pub(crate) fn statx_cached(
    counters: &impl super::Tally,
    path: &std::ffi::CStr,
    flags: i32,
) -> Option<std::result::Result<libc::statx, i32>> {
    debug_assert_eq!(
        flags & !libc::AT_SYMLINK_NOFOLLOW,
        0,
        "statx_cached takes AT_SYMLINK_NOFOLLOW only"
    );
    if !CACHED_STATX_WORKS.load(Ordering::Relaxed) {
        return None;
    }
    let fd = match open_cached(path, flags) {
        Ok(fd) => fd,
        Err(errno) => {
            return match errno {
                // Absent, with every component that says so in the cache: as
                // statx itself would answer.
                libc::ENOENT | libc::ENOTDIR => {
                    count_inline(counters, true);
                    Some(Err(errno))
                }
                libc::ENOSYS | libc::EINVAL | libc::EPERM | libc::E2BIG => {
                    CACHED_STATX_WORKS.store(false, Ordering::Relaxed);
                    None
                }
                _ => None, // EAGAIN (not all cached), or for the driver to report
            };
        }
    };
    let st = statx_in_memory(&fd)?;
    if st.stx_mask & STATX_MNT_ID_UNIQUE == 0 {
        // Before 6.8: no way to name the file system without asking it.
        CACHED_STATX_WORKS.store(false, Ordering::Relaxed);
        return None;
    }
    if !is_local_fs(st.stx_mnt_id) {
        return None;
    }
    count_inline(counters, false);
    Some(Ok(st))
}

/// `openat2(path, O_PATH, RESOLVE_CACHED)`: the descriptor of `path` found
/// through the dentry cache alone, or the errno (`flags`: of `statx`).
fn open_cached(
    path: &std::ffi::CStr,
    flags: i32,
) -> std::result::Result<std::os::fd::OwnedFd, i32> {
    let mut open_flags = libc::O_PATH | libc::O_CLOEXEC;
    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        // O_PATH | O_NOFOLLOW opens a final symbolic link itself.
        open_flags |= libc::O_NOFOLLOW;
    }
    openat2_cached(path, open_flags)
}

/// `openat2(path, flags, RESOLVE_CACHED)` relative to the working
/// directory: the descriptor, or the errno (`EAGAIN` when a component of
/// the path is not in the dentry cache, or would be revalidated).
fn openat2_cached(
    path: &std::ffi::CStr,
    flags: i32,
) -> std::result::Result<std::os::fd::OwnedFd, i32> {
    /// `RESOLVE_CACHED` (linux/openat2.h; Linux 5.12).
    const RESOLVE_CACHED: u64 = 0x20;
    /// `struct open_how` (linux/openat2.h): extensible, 24 bytes in 5.6+.
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    debug_assert_eq!(
        flags & libc::O_CREAT,
        0,
        "no mode: the open creates nothing"
    );
    let how = OpenHow {
        flags: flags as u32 as u64,
        mode: 0,
        resolve: RESOLVE_CACHED,
    };
    // SAFETY: `path` is NUL-terminated and `how` a valid open_how whose size
    // is passed; the kernel only reads both.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD as libc::c_long,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: `openat2` just returned this descriptor to us alone.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// `statx` of `fd` with `AT_STATX_DONT_SYNC` (the in-memory inode), asking
/// for the mount's unique id too; `None` when the call fails.
fn statx_in_memory(fd: &std::os::fd::OwnedFd) -> Option<libc::statx> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable for the call; the empty path with
    // AT_EMPTY_PATH names `fd`, open for the call.
    let r = unsafe {
        libc::statx(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            STATX_MASK | STATX_MNT_ID_UNIQUE,
            &mut st,
        )
    };
    if r != 0 {
        return None;
    }
    Some(st)
}

/// An open on the calling thread, as io_uring's own first attempt at an
/// `IORING_OP_OPENAT` at submission (`io_openat2` with
/// `IO_URING_F_NONBLOCK`): `openat2` with `RESOLVE_CACHED` (the path walked
/// through the dentry cache alone) and `O_NONBLOCK` (no wait for a FIFO's
/// other end, a lease or a device), never for an open that may create or
/// truncate (nor an `O_PATH` one, which `openat2` refuses with
/// `O_NONBLOCK`). `O_NONBLOCK` is cleared afterwards unless `flags` asked for
/// it, as io_uring clears it. The descriptor, or the errno the open
/// failed with; `None` (the caller goes through the driver, where the open
/// may wait) when it would have waited (`EAGAIN`), for flags `openat2`
/// refuses and `openat` takes (`EINVAL`), when a sandbox refuses it, or
/// on a kernel without `openat2` (then never tried again). An answer is
/// counted as an operation submitted and completed inline.
///
/// The file system's own open runs on the calling thread, as it does in
/// the thread that submits to io_uring: a FUSE file system's open asks its
/// daemon, and a fanotify permission watcher (an antivirus) is asked too,
/// before either returns.
pub(crate) fn open_inline(
    counters: &impl super::Tally,
    path: &std::ffi::CStr,
    flags: i32,
) -> Option<std::result::Result<i32, i32>> {
    /// `__O_TMPFILE`: `O_TMPFILE` without its `O_DIRECTORY` bit.
    const TMPFILE: i32 = libc::O_TMPFILE & !libc::O_DIRECTORY;
    if flags & (libc::O_CREAT | libc::O_TRUNC | TMPFILE | libc::O_PATH) != 0
        || !INLINE_OPEN_WORKS.load(Ordering::Relaxed)
    {
        return None;
    }
    let fd = match openat2_cached(path, flags | libc::O_NONBLOCK) {
        Ok(fd) => fd,
        Err(libc::ENOSYS) => {
            INLINE_OPEN_WORKS.store(false, Ordering::Relaxed);
            return None;
        }
        Err(libc::EAGAIN | libc::EINVAL | libc::EPERM | libc::E2BIG) => return None,
        Err(errno) => {
            count_inline(counters, true);
            return Some(Err(errno));
        }
    };
    if flags & libc::O_NONBLOCK == 0 {
        // The status flags `F_SETFL` sets, as the open just set them, less
        // O_NONBLOCK.
        let keep = flags & (libc::O_APPEND | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME);
        // SAFETY: sets the status flags of a descriptor we own.
        if unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&fd), libc::F_SETFL, keep) } != 0 {
            return None; // `fd` is closed; the driver opens the file.
        }
    }
    count_inline(counters, false);
    Some(Ok(std::os::fd::IntoRawFd::into_raw_fd(fd)))
}

/// Cleared when the kernel has no `openat2`: [`open_inline`] is then never
/// tried again.
static INLINE_OPEN_WORKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// `STATX_MNT_ID_UNIQUE` (linux/stat.h; Linux 6.8): `stx_mnt_id` is the
/// mount's unique id, never reused while the system runs.
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

/// Cleared when the kernel (or a sandbox) refused a call the dentry-cache
/// `statx` needs: it is then never tried again.
static CACHED_STATX_WORKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

use std::os::fd::FromRawFd;

fn count_inline(counters: &impl super::Tally, error: bool) {
    counters.inline_done(error);
}

/// Magic numbers (`statfs.f_type`, `statmount.sb_magic`) of the file
/// systems whose in-memory attributes are what a synced `statx` returns:
/// local ones, whose inode is the truth, not a cache of a server's. Not
/// overlayfs: it passes `AT_STATX_DONT_SYNC` on to its layers, which may
/// be a network file system.
const LOCAL_FS_MAGIC: &[u32] = &[
    0xEF53,      // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0x0102_1994, // tmpfs
    0x8584_58F6, // ramfs
    0xF2F5_2010, // f2fs
    0x2FC1_2FC1, // zfs
    0xCA45_1A4E, // bcachefs
    0x7371_7368, // squashfs
    0xE0F5_E1E2, // erofs
    0x4D44,      // vfat, msdos
    0x2011_BAB0, // exfat
    0x7366_746E, // ntfs3
    0x9660,      // iso9660
];

/// Whether `magic` names a file system in [`LOCAL_FS_MAGIC`].
fn is_local_magic(magic: u64) -> bool {
    u32::try_from(magic).is_ok_and(|m| LOCAL_FS_MAGIC.contains(&m))
}

/// Whether the mount whose unique id (`STATX_MNT_ID_UNIQUE`, never reused
/// while the system runs) is `mnt_id` holds a local file system, by the
/// magic number of its superblock as `statmount(STATMOUNT_SB_BASIC)` reads
/// it from memory. Remembered in a small direct-mapped cache, so a mount
/// costs one `statmount` until another mount takes its slot.
fn is_local_fs(mnt_id: u64) -> bool {
    use std::sync::atomic::AtomicU64;
    const SLOTS: usize = 64;
    /// 0: empty; else `(mnt_id << 1 | local) + 1`.
    static KNOWN: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
    // Unique ids count up from 2^32; the shift below keeps 63 bits.
    let cacheable = mnt_id < 1 << 62;
    let slot = &KNOWN[(mnt_id as usize).wrapping_mul(0x9E37_79B9) % SLOTS];
    if cacheable {
        let v = slot.load(Ordering::Relaxed);
        if v != 0 && (v - 1) >> 1 == mnt_id {
            return (v - 1) & 1 == 1;
        }
    }
    let Some(local) = statmount_is_local(mnt_id) else {
        return false;
    };
    if cacheable {
        slot.store(((mnt_id << 1) | u64::from(local)) + 1, Ordering::Relaxed);
    }
    local
}

/// Whether the mount `mnt_id` holds a local file system, by
/// `statmount(STATMOUNT_SB_BASIC)`; `None` (and the dentry-cache `statx`
/// turned off) when the kernel or a sandbox has no `statmount`.
fn statmount_is_local(mnt_id: u64) -> Option<bool> {
    /// `statmount` (Linux 6.8): 457 on every architecture with the unified
    /// system call table (all but alpha and mips).
    const SYS_STATMOUNT: libc::c_long = 457;
    const STATMOUNT_SB_BASIC: u64 = 0x1;
    /// `struct mnt_id_req`, version 0 (linux/mount.h).
    #[repr(C)]
    struct MntIdReq {
        size: u32,
        spare: u32,
        mnt_id: u64,
        param: u64,
    }
    /// `struct statmount` up to `sb_magic`, padded to the 512 bytes of
    /// its version 0 (the kernel writes no more than the size given).
    #[repr(C)]
    struct StatMount {
        size: u32,
        spare1: u32,
        mask: u64,
        sb_dev_major: u32,
        sb_dev_minor: u32,
        sb_magic: u64,
        rest: [u64; 60],
    }
    const _: () = assert!(std::mem::size_of::<StatMount>() == 512);
    let req = MntIdReq {
        size: std::mem::size_of::<MntIdReq>() as u32,
        spare: 0,
        mnt_id,
        param: STATMOUNT_SB_BASIC,
    };
    // SAFETY: StatMount is plain old data; all-zero is a valid value.
    let mut sm: StatMount = unsafe { std::mem::zeroed() };
    // SAFETY: `req` is a valid mnt_id_req the kernel only reads; `sm` is
    // writable for the size passed.
    let r = unsafe {
        libc::syscall(
            SYS_STATMOUNT,
            &req as *const MntIdReq,
            &mut sm as *mut StatMount,
            std::mem::size_of::<StatMount>(),
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        return Some(sm.mask & STATMOUNT_SB_BASIC != 0 && is_local_magic(sm.sb_magic));
    }
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if matches!(errno, libc::ENOSYS | libc::EINVAL) {
        // No statmount (before 6.8), or a sandbox refusing it.
        CACHED_STATX_WORKS.store(false, Ordering::Relaxed);
        return None;
    }
    // EPERM (a mount outside the caller's root: chroot, /proc/PID/root),
    // ENOENT (another namespace's, or unmounted meanwhile), a security
    // module's refusal: this mount is not answered here; others are.
    Some(false)
}

/// `statx(fd, "", AT_EMPTY_PATH | flags, STATX_MASK, buf)` as a blocking
/// call: 0 or `-errno`. The empty path with AT_EMPTY_PATH names `fd` itself.
///
/// # Safety
///
/// `buf` must point to a writable `statx` for the duration of the call.
pub(crate) unsafe fn statx_fd(fd: i32, flags: i32, buf: *mut libc::statx) -> i64 {
    // SAFETY: the caller gives a writable buf; the path is a NUL-terminated
    // empty string, as AT_EMPTY_PATH requires.
    let r = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | flags,
            STATX_MASK,
            buf,
        )
    };
    if r < 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        return -i64::from(errno);
    }
    0
}

/// The metadata of `fd` as the kernel holds it in memory, on the calling
/// thread (`statx` with `AT_STATX_DONT_SYNC`): 0 or `-errno`.
///
/// # Safety
///
/// `buf` must point to a writable `statx` for the duration of the call.
pub(crate) unsafe fn stat_in_memory(fd: i32, buf: *mut RawStat) -> i64 {
    // SAFETY: as the caller guarantees.
    unsafe { statx_fd(fd, libc::AT_STATX_DONT_SYNC, buf) }
}

/// Closes a descriptor the engine owns, ignoring the result (a drop's
/// close: nobody is there to be told).
pub(crate) fn close_quietly(fd: i32) {
    debug_assert!(fd >= 0, "closing an open descriptor");
    // SAFETY: the caller owns `fd` and gives it up here.
    unsafe { libc::close(fd) };
}

/// The memory page size (4096 where the kernel will not say).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// The largest error number of a result (`-errno`).
pub(crate) const MAX_ERROR_CODE: i64 = 4095;

/// The `statx` flag of a path's metadata that does not follow a final
/// symbolic link.
pub(crate) const STAT_NOFOLLOW: i32 = libc::AT_SYMLINK_NOFOLLOW;

/// A duplicate of `fd` (`fcntl(F_DUPFD_CLOEXEC)`): the new descriptor, or
/// `-errno`.
pub(crate) fn duplicate(fd: i32) -> i64 {
    // SAFETY: a plain descriptor call; a new descriptor comes back.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        return -i64::from(errno);
    }
    i64::from(dup)
}

/// `CLOCK_MONOTONIC` in nanoseconds (the vDSO's clock: no system call).
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: clock_gettime writes into the local timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local timespec; CLOCK_MONOTONIC always exists.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert!(
        r == 0 && ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec),
        "the monotonic clock reads a time since boot"
    );
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
