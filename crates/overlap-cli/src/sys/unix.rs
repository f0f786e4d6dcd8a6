//! Linux's side of [`crate::sys`].

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::OnceLock;

/// What a file system answers when it refuses direct I/O at open.
pub(crate) const DIRECT_REFUSED: i32 = libc::EINVAL;

/// [`DIRECT_REFUSED`]'s name, for messages.
pub(crate) const DIRECT_REFUSED_NAME: &str = "EINVAL";

/// The system's own asynchronous driver, for messages.
pub(crate) const NATIVE_DRIVER: &str = "io_uring";

/// The system's words for direct I/O, for messages.
pub(crate) const DIRECT_NAME: &str = "O_DIRECT";

/// The call that makes data durable, for messages.
pub(crate) const SYNC_NAME: &str = "fdatasync";

/// The flag of write-through opens, for messages.
pub(crate) const WRITE_THROUGH_NAME: &str = "O_DSYNC";

/// The call that preallocates, for messages.
pub(crate) const ALLOCATE_NAME: &str = "fallocate";

/// Whether `code` says that the file system cannot preallocate at all
/// (`EOPNOTSUPP`), rather than that this call failed.
pub(crate) fn allocation_unsupported(code: i32) -> bool {
    code == libc::EOPNOTSUPP
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} contains a NUL byte", path.display()),
        )
    })
}

/// Bytes free to an unprivileged user on the file system holding `dir`
/// (`statvfs`: available blocks × fragment size).
pub(crate) fn free_bytes(dir: &Path) -> io::Result<u64> {
    let c = c_path(dir)?;
    // SAFETY: statvfs is plain data; all-zero is a valid value.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `vfs` is a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut vfs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64))
}

/// The type of the file system holding `dir` (`ext4`, `xfs`, ...).
pub(crate) fn fs_kind(dir: &Path) -> String {
    let Ok(c) = c_path(dir) else {
        return "unknown".to_string();
    };
    // SAFETY: statfs is plain data; all-zero is a valid value.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `sfs` is a writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut sfs) } == 0 {
        fs_name(sfs.f_type as u64)
    } else {
        "unknown".to_string()
    }
}

fn fs_name(magic: u64) -> String {
    match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0xCA45_1A4E => "bcachefs",
        0x6969 => "nfs",
        0x794C_7630 => "overlayfs",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p",
        _ => return format!("file system 0x{magic:x}"),
    }
    .to_string()
}

/// `posix_fadvise(advice)` over the whole of `file`.
fn fadvise(file: &File, advice: libc::c_int) -> io::Result<()> {
    fadvise_range(file.as_fd(), 0, 0, advice)
}

/// Starts the kernel reading the `len` bytes at `off` of `fd` into the
/// page cache (`posix_fadvise(WILLNEED)`: waits for no read).
pub(crate) fn advise_willneed(fd: std::os::fd::BorrowedFd<'_>, off: u64, len: u64) {
    let _ = fadvise_range(fd, off, len, libc::POSIX_FADV_WILLNEED);
}

/// `posix_fadvise(advice)` over the `len` bytes at `off` of `fd` (0: to
/// the end).
fn fadvise_range(
    fd: std::os::fd::BorrowedFd<'_>,
    off: u64,
    len: u64,
    advice: libc::c_int,
) -> io::Result<()> {
    let (off, len) = (off as libc::off_t, len as libc::off_t);
    // SAFETY: plain descriptor call on a descriptor the caller holds open;
    // advice only.
    let r = unsafe { libc::posix_fadvise(fd.as_raw_fd(), off, len, advice) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// Drops the file's clean pages from the page cache
/// (`posix_fadvise(DONTNEED)`; dirty pages stay: sync first).
pub(crate) fn drop_cache(file: &File) -> io::Result<()> {
    fadvise(file, libc::POSIX_FADV_DONTNEED)
}

/// The words of [`drop_cache`], for messages.
pub(crate) const DROP_CACHE_NAME: &str = "posix_fadvise(DONTNEED)";

/// Tells the kernel that `file` is read at random (no read-ahead).
pub(crate) fn advise_random(file: &File) {
    let _ = fadvise(file, libc::POSIX_FADV_RANDOM);
}

/// Opens with direct I/O (`O_DIRECT`) when `direct`.
pub(crate) fn direct(o: &mut OpenOptions, direct: bool) -> &mut OpenOptions {
    o.custom_flags(if direct { libc::O_DIRECT } else { 0 })
}

/// `pread`.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.read_at(buf, offset)
}

/// `pwrite`.
pub(crate) fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<usize> {
    file.write_at(buf, offset)
}

/// `pwrite` until all of `buf` is written.
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    file.write_all_at(buf, offset)
}

/// Reserves `size` bytes from the start of `file`, growing it to `size`
/// (`fallocate` mode 0).
pub(crate) fn allocate(file: &File, size: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "size too large"))?;
    // SAFETY: plain descriptor call on a file we hold open.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The size of the memory page, in bytes.
pub(crate) fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    // SAFETY: sysconf has no memory arguments.
    *PAGE
        .get_or_init(|| u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096))
}

/// Which pages of the first `len` bytes of `file` are in the page cache
/// (`mincore` on a read-only mapping that is never touched). `None` when
/// the kernel will not tell.
pub(crate) fn residency(file: &File, len: u64) -> Option<Vec<bool>> {
    let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
    let page = usize::try_from(page_size()).ok().filter(|&p| p > 0)?;
    // SAFETY: maps `len` bytes of our own descriptor read-only and shared at
    // an address the kernel picks; nothing dereferences the mapping, which is
    // unmapped below before the function returns.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return None;
    }
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: addr..addr+len is the mapping made above; `vec` has one byte
    // per page of it, as mincore requires.
    let r = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(addr, len) };
    if r != 0 {
        return None;
    }
    Some(vec.into_iter().map(|b| b & 1 != 0).collect())
}

/// Why [`residency`] may answer `None`, for messages.
pub(crate) const RESIDENCY_UNKNOWN: &str = "mincore failed";

/// `cachestat(2)` (Linux 6.5), the same number on every architecture; the
/// libc crate does not name it everywhere.
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range`: the bytes asked about.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat`: what the kernel answers, in pages.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    cache: u64,
    dirty: u64,
    writeback: u64,
    evicted: u64,
    recently_evicted: u64,
}

/// Pages of the `chunk`-byte ranges at `offsets` of `file` that are dirty
/// or under writeback in the page cache (written, not yet on the device).
/// `None` when the kernel cannot tell (no `cachestat` before Linux 6.5).
pub(crate) fn unwritten_pages(file: &File, offsets: &[u64], chunk: u64) -> Option<u64> {
    let mut total = 0u64;
    for &off in offsets {
        let st = cachestat(file.as_raw_fd(), off, chunk)?;
        total = total.saturating_add(st.dirty.saturating_add(st.writeback));
    }
    Some(total)
}

/// Whether the page cache holds every page of the `len` bytes at `off` of
/// `fd` (`cachestat`: asks the page cache only, reads nothing); `false`
/// when the kernel cannot tell (before Linux 6.5, or a file the caller
/// could not write and does not own: the kernel's rule for `cachestat`).
pub(crate) fn all_cached(fd: std::os::fd::BorrowedFd<'_>, off: u64, len: u64) -> bool {
    let Some(st) = cachestat(fd.as_raw_fd(), off, len) else {
        return false;
    };
    let page = page_size();
    st.cache >= (off + len).div_ceil(page) - off / page
}

/// `cachestat(fd, off, len)`; `None` when the call fails.
fn cachestat(fd: i32, off: u64, len: u64) -> Option<Cachestat> {
    let range = CachestatRange { off, len };
    let mut st = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes `st`, both live and of the
    // kernel's layout; the descriptor is the caller's; flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const CachestatRange,
            &mut st as *mut Cachestat,
            0u32,
        )
    };
    (r == 0).then_some(st)
}

/// CPU seconds (user + system) of every thread of the process, and its
/// context switches (voluntary + involuntary) where the system counts them
/// (`getrusage(RUSAGE_SELF)`).
pub(crate) fn cpu_and_switches() -> (f64, Option<u64>) {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (
        secs(ru.ru_utime) + secs(ru.ru_stime),
        Some((ru.ru_nvcsw + ru.ru_nivcsw) as u64),
    )
}

/// The soft `RLIMIT_NOFILE`, if there is one.
pub(crate) fn open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// The name of the open-files limit, for messages.
pub(crate) const OPEN_FILES_LIMIT_NAME: &str = "RLIMIT_NOFILE";

/// Whether accepting failed on a protocol error of the connection (not
/// the listener's).
pub(crate) fn is_protocol_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EPROTO)
}

/// Stops the process `pid` (a child of ours) at once (`SIGKILL`).
pub(crate) fn kill(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: signals our own child process, by its id.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// What a file type is when it is neither a regular file, a directory nor
/// a block device (`a FIFO (named pipe)`, ...), for messages.
pub(crate) fn special_kind(t: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() {
        Some("a character device")
    } else {
        None
    }
}

/// Whether the type is a block device.
pub(crate) fn is_block_device(t: &std::fs::FileType) -> bool {
    std::os::unix::fs::FileTypeExt::is_block_device(t)
}

/// The size of an open block device, in bytes (`BLKGETSIZE64`).
pub(crate) fn device_size(f: &File) -> io::Result<u64> {
    // _IOR(0x12, 114, u64): the device's size in bytes.
    const BLKGETSIZE64: u64 = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: the ioctl writes one u64 through a pointer to a live u64, on
    // a descriptor we hold open.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// Opens `path` for reading without waiting: `O_NONBLOCK` makes the open
/// of a FIFO return at once (without it, it waits for a writer). A
/// socket's open fails with `ENXIO`: `None` then. Call [`clear_no_wait`]
/// once the type is checked.
pub(crate) fn open_no_wait(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Clears the `O_NONBLOCK` of [`open_no_wait`].
pub(crate) fn clear_no_wait(file: &File) -> io::Result<()> {
    // SAFETY: sets the status flags of a descriptor `file` owns; of those
    // F_SETFL sets, a read-only open made by open_no_wait set O_NONBLOCK only.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Calls `on_interrupt(exit_code)` on a thread of its own when the process
/// is asked to stop (SIGINT, SIGTERM, SIGHUP; the code is 128 + the
/// signal), instead of the default end. The signals are blocked in this
/// thread and every thread started after it (the mask is inherited) and
/// one thread waits for them. `false` if that could not be set up (the
/// signals then end the process as usual).
pub(crate) fn on_interrupt(on_interrupt: fn(i32)) -> bool {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned by this frame; blocking the
    // signals only defers their delivery to the sigwait below.
    let blocked = unsafe {
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0
    };
    if !blocked {
        return false;
    }
    let spawned = std::thread::Builder::new()
        .name("overlap-signals".into())
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: a valid set moved into this thread and a valid out-pointer.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                on_interrupt(128 + sig);
            }
        });
    if spawned.is_err() {
        // SAFETY: as above, on the same valid set.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        return false;
    }
    true
}
