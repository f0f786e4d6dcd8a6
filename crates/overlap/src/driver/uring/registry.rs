//! What a port's ring registers with the kernel: memory (io_uring's
//! registered buffers, for `READ_FIXED`/`WRITE_FIXED`: no page pinning per
//! operation) and descriptors (registered files, `FIXED_FILE`: no
//! descriptor lookup per operation). [`Registry::entry`] builds an
//! operation's entry with whatever of it is registered.
//!
//! Memory: at most [`MAX_REGIONS`] ranges, each kept allocated for as long
//! as the ring lives (a pool's arena by its `Arc`, a caller's range by the
//! caller's promise). Descriptors: the kernel slot of descriptor `fd` is
//! `fd` itself, so an entry built with the descriptor becomes the registered
//! file by its flag alone; a file tells the ring ([`FixedFiles::forget`])
//! before its descriptor is closed or given away, and the ring's drop ends
//! every registration ([`Registry::unregister_all`]) before its descriptor
//! closes (the kernel frees a closed ring's tables later, asynchronously).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use io_uring::{opcode, squeue, IoUring};

use crate::cell::{FixedFiles, RegisteredFile};
use crate::error::Error;
use crate::operation::{Data, OpKind, Opcodes};
use crate::stats::Counters;

pub(crate) use crate::cell::Keep;

/// The most pools or ranges a port registers (the kernel's table is made
/// this size at the first registration).
const MAX_REGIONS: usize = 8;

/// The most bytes one registered range holds: the kernel takes no larger
/// buffer (`io_buffer_validate`: 1 GiB).
const MAX_REGION_BYTES: usize = 1 << 30;

/// The most descriptors a port's file table has slots for (fewer when
/// `RLIMIT_NOFILE` is lower: the kernel refuses a larger table).
const FILE_SLOTS: u32 = 4096;

// A region's index is the entry's 16-bit `buf_index`.
const _: () = assert!(MAX_REGIONS <= 1 << 16);

/// A pool's arena, or memory a caller owns, registered as one buffer.
struct Region {
    start: usize,
    end: usize,
    /// The pool's memory (`crate::buf`'s arena), kept alive; `None` for a
    /// caller's range (the caller keeps it).
    arena: Option<Keep>,
}

/// The registered descriptors, a bit each, with the table's size.
struct FileTable {
    slots: u32,
    bits: Box<[AtomicU64]>,
}

impl FileTable {
    fn has(&self, fd: i32) -> bool {
        debug_assert_eq!(
            self.bits.len() as u32,
            self.slots.div_ceil(64),
            "the table has a bit for every slot"
        );
        let Ok(fd) = u32::try_from(fd) else {
            return false;
        };
        fd < self.slots
            && self.bits[(fd / 64) as usize].load(Ordering::Acquire) & (1 << (fd % 64)) != 0
    }

    fn set(&self, fd: u32, on: bool) {
        debug_assert!(fd < self.slots, "a slot of the table");
        let bit = 1u64 << (fd % 64);
        let word = &self.bits[(fd / 64) as usize];
        if on {
            let before = word.fetch_or(bit, Ordering::AcqRel);
            debug_assert!(before & bit == 0, "a descriptor is registered once");
        } else {
            let before = word.fetch_and(!bit, Ordering::AcqRel);
            debug_assert!(
                before & bit != 0,
                "a descriptor is removed once, after it was registered"
            );
        }
    }
}

/// A port ring's registrations (module docs). Every method takes the ring
/// they belong to; the caller checks that the ring is its process's own
/// (not a parent's, after `fork`).
pub(crate) struct Registry {
    /// Registered memory in the order registered: slot `i` is the kernel's
    /// buffer index `i`. Set once each and never removed, so that a read
    /// needs no lock.
    regions: [OnceLock<Region>; MAX_REGIONS],
    /// Serialises registrations of memory: whether the kernel's (sparse)
    /// buffer table exists, and how many slots of `regions` are set.
    regions_made: Mutex<(bool, usize)>,
    /// Made at the first file registration.
    files: OnceLock<FileTable>,
    /// Serialises registrations and removals of files.
    files_lock: Mutex<()>,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            regions: Default::default(),
            regions_made: Mutex::new((false, 0)),
            files: OnceLock::new(),
            files_lock: Mutex::new(()),
        }
    }

    /// The entry of `kind` for the ring: `READ_FIXED`/`WRITE_FIXED` for a
    /// read or write whose buffer lies in a registered range, with
    /// `FIXED_FILE` when its descriptor is registered (each counted in
    /// `counters`); `None` when the kernel lacks the opcode.
    pub(crate) fn entry(
        &self,
        kind: &OpKind,
        ops: &Opcodes,
        counters: &Counters,
    ) -> Option<squeue::Entry> {
        let Some(Data { fd, addr, len }) = kind.data() else {
            return kind.entry(ops);
        };
        let fixed = self
            .region_of(addr, len)
            .and_then(|index| kind.fixed(index));
        if fixed.is_some() {
            debug_assert!(
                has_fixed_opcodes(ops),
                "memory is registered only on a kernel with READ_FIXED/WRITE_FIXED"
            );
            counters.fixed_buffer_ops.fetch_add(1, Ordering::Relaxed);
        }
        let sqe = fixed.or_else(|| kind.entry(ops))?;
        if !self.files.get().is_some_and(|t| t.has(fd)) {
            return Some(sqe);
        }
        // The kernel's slot `fd` holds the same file.
        counters.fixed_file_ops.fetch_add(1, Ordering::Relaxed);
        Some(sqe.flags(squeue::Flags::FIXED_FILE))
    }

    /// The kernel's index of the registered range holding `len` bytes at
    /// `addr`.
    fn region_of(&self, addr: usize, len: usize) -> Option<u16> {
        // One load on a ring that registered nothing.
        self.regions[0].get()?;
        let end = addr.checked_add(len)?;
        let index = self
            .regions
            .iter()
            .map_while(OnceLock::get)
            .position(|r| addr >= r.start && end <= r.end)?;
        Some(index as u16)
    }

    /// Registers `len` bytes at `start` as one buffer; registering the same
    /// pool (or the same caller's range) again does nothing.
    ///
    /// # Safety
    ///
    /// `start..start + len` stays allocated until the ring is dropped
    /// (`keep` holds it, or the caller promises it).
    pub(crate) unsafe fn register_region(
        &self,
        ring: &IoUring,
        ops: &Opcodes,
        start: usize,
        len: usize,
        keep: Option<Keep>,
    ) -> Result<(), Error> {
        let Some(end) = start.checked_add(len).filter(|_| len > 0 && start > 0) else {
            return Err(Error::InvalidInput(format!(
                "memory to register: {len} bytes at {start:#x} is not a range"
            )));
        };
        let mut guard = self.regions_made.lock().unwrap_or_else(|p| p.into_inner());
        let (table, count) = &mut *guard;
        debug_assert!(
            self.regions
                .iter()
                .enumerate()
                .all(|(i, r)| r.get().is_some() == (i < *count)),
            "the slots below the count are set, the others not"
        );
        let known = self.regions[..*count]
            .iter()
            .filter_map(OnceLock::get)
            .any(|r| match (&r.arena, &keep) {
                (Some(a), Some(k)) => std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(k)),
                (None, None) => r.start == start && r.end == end,
                _ => false,
            });
        if known {
            return Ok(());
        }
        if *count == MAX_REGIONS {
            return Err(Error::InvalidInput(format!(
                "a port registers at most {MAX_REGIONS} pools or ranges"
            )));
        }
        if len > MAX_REGION_BYTES {
            return Err(Error::InvalidInput(format!(
                "a registered pool or range holds at most {MAX_REGION_BYTES} bytes (the kernel's \
                 limit for one registered buffer); this one holds {len}"
            )));
        }
        if !has_fixed_opcodes(ops) {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this kernel has no READ_FIXED/WRITE_FIXED",
            )));
        }
        // SAFETY: the range stays allocated for as long as the ring lives
        // (this function's contract): the kernel never reaches memory this
        // process freed through the registration.
        unsafe { set_buffer_slot(ring, table, MAX_REGIONS, *count, start, len) }?;
        let set = self.regions[*count]
            .set(Region {
                start,
                end,
                arena: keep,
            })
            .is_ok();
        debug_assert!(set, "slots are set in order, once, under regions_made");
        *count += 1;
        debug_assert!(
            *table && *count <= MAX_REGIONS,
            "a region is set in the kernel's table, which has a slot for it"
        );
        Ok(())
    }

    /// Registers the file's descriptor in the slot of the same number.
    /// `Ok(false)` on a kernel that releases a removed file late, or for a
    /// descriptor beyond the table. `ring_ref` is told
    /// ([`FixedFiles::forget`]) before the descriptor is closed or given
    /// away.
    pub(crate) fn register_file(
        &self,
        ring: &IoUring,
        file: &dyn RegisteredFile,
        ring_ref: Weak<dyn FixedFiles>,
    ) -> Result<bool, Error> {
        // Counted in like an operation, so that a close waits for the
        // registration to be listed on the file before it tells the rings.
        if !file.claim() {
            return Err(Error::Closed);
        }
        struct Claim<'a>(&'a dyn RegisteredFile);
        impl Drop for Claim<'_> {
            fn drop(&mut self) {
                self.0.unclaim();
            }
        }
        let _claim = Claim(file);
        let fd = file.descriptor();
        let Ok(slot) = u32::try_from(fd) else {
            return Err(Error::Closed);
        };
        if !removal_is_prompt() {
            return Ok(false);
        }
        let _g = self.files_lock.lock().unwrap_or_else(|p| p.into_inner());
        let submitter = ring.submitter();
        let table = match self.files.get() {
            Some(t) => t,
            None => {
                let slots = FILE_SLOTS.min(nofile_limit());
                submitter.register_files_sparse(slots)?;
                self.files.get_or_init(|| FileTable {
                    slots,
                    bits: (0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
                })
            }
        };
        if slot >= table.slots {
            return Ok(false);
        }
        if table.has(fd) {
            return Ok(true);
        }
        submitter.register_files_update(slot, &[fd])?;
        table.set(slot, true);
        file.note_ring(ring_ref);
        Ok(true)
    }

    /// Removes `fd` from the file table (`FixedFiles::forget`).
    pub(crate) fn forget(&self, ring: &IoUring, fd: i32) {
        let Ok(slot) = u32::try_from(fd) else { return };
        let _g = self.files_lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(table) = self.files.get() else {
            return;
        };
        if !table.has(fd) {
            return;
        }
        table.set(slot, false);
        // The kernel drops its reference to the file once no request uses
        // it (none is in flight or queued: the file's close waited).
        if let Err(e) = ring.submitter().register_files_update(slot, &[-1]) {
            let _ = writeln!(
                std::io::stderr(),
                "overlap: removing descriptor {fd} from a port's file table failed: {e}"
            );
        }
    }

    /// Ends every registration, before the ring's descriptor closes: the
    /// kernel frees a closed ring's tables later, asynchronously, which
    /// would keep registered files open (their locks held) and registered
    /// memory pinned past the port's drop.
    pub(crate) fn unregister_all(&mut self, ring: &IoUring) {
        debug_assert!(
            self.regions_made
                .get_mut()
                .map_or(true, |(table, count)| *count == 0 || *table),
            "a region is registered only in a table that exists"
        );
        let submitter = ring.submitter();
        if self.files.get().is_some() {
            let _ = submitter.unregister_files();
        }
        let buffers = self
            .regions_made
            .get_mut()
            .map_or(true, |(table, _)| *table);
        if buffers {
            let _ = submitter.unregister_buffers();
        }
    }
}

/// Whether the kernel has `READ_FIXED` and `WRITE_FIXED`.
pub(crate) fn has_fixed_opcodes(ops: &Opcodes) -> bool {
    ops.has(opcode::ReadFixed::CODE) && ops.has(opcode::WriteFixed::CODE)
}

/// Puts `len` bytes at `start` in slot `index` of `ring`'s table of
/// registered buffers (`start` and `len` 0: empties the slot, and the
/// kernel unpins what it held), making the sparse table of `slots` entries
/// first unless `*table` says it is made.
///
/// # Safety
///
/// A range put in a slot stays allocated until the slot is emptied or the
/// ring's buffers are unregistered: the kernel keeps its pages pinned, and
/// an operation on that slot goes to them.
pub(crate) unsafe fn set_buffer_slot(
    ring: &IoUring,
    table: &mut bool,
    slots: usize,
    index: usize,
    start: usize,
    len: usize,
) -> std::io::Result<()> {
    debug_assert!(index < slots, "a slot of the table");
    debug_assert!(
        len <= MAX_REGION_BYTES,
        "a registered range is within the kernel's 1 GiB (checked by the registrations)"
    );
    debug_assert!(
        len == 0 || start != 0,
        "a range put in a slot is memory, not the null page"
    );
    let submitter = ring.submitter();
    if !*table {
        submitter.register_buffers_sparse(slots as u32)?;
        *table = true;
    }
    let iov = libc::iovec {
        iov_base: start as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the caller's contract above.
    unsafe { submitter.register_buffers_update(index as u32, &[iov], None) }.map(|_| ())
}

/// Whether this kernel releases a file removed from a ring's table at
/// once when no request uses it (Linux 6.13's resource rework). Before it,
/// a removed file waited for delayed work (up to a second) or for every
/// earlier request of the ring that used a registered resource, so a
/// `close` would return with the file still open (its locks held, an
/// unlinked file's blocks not freed): ports register no files there.
fn removal_is_prompt() -> bool {
    static PROMPT: OnceLock<bool> = OnceLock::new();
    *PROMPT.get_or_init(|| kernel_version().is_some_and(|v| v >= (6, 13)))
}

/// The running kernel's major and minor version (`uname`).
fn kernel_version() -> Option<(u32, u32)> {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let release: String = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// `RLIMIT_NOFILE`'s soft limit, which bounds a registered file table.
fn nofile_limit() -> u32 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 1024;
    }
    u32::try_from(rl.rlim_cur).unwrap_or(u32::MAX)
}
