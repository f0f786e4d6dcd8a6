//! Owned buffers. An operation takes its buffer by value and gives it back
//! with the result, so the memory the kernel writes into belongs to the
//! engine for exactly as long as the kernel may touch it.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// A buffer whose bytes can be written to a file.
///
/// # Safety
///
/// Implementors promise that [`stable_ptr`](IoBuf::stable_ptr) points to
/// [`bytes_len`](IoBuf::bytes_len) initialised bytes that live on the heap (or
/// in static memory), not inside the value itself: the pointer must stay valid
/// and unchanged when the value is moved, until the value is dropped or
/// mutated through `&mut`.
pub unsafe trait IoBuf: Send + 'static {
    /// Address of the first byte.
    fn stable_ptr(&self) -> *const u8;
    /// Number of bytes available at [`stable_ptr`](IoBuf::stable_ptr).
    fn bytes_len(&self) -> usize;
}

/// A buffer that can receive bytes read from a file.
///
/// Reads fill the buffer from its start, up to [`IoBuf::bytes_len`] bytes,
/// like `pread` into a slice; the number of bytes read is returned with it.
///
/// # Safety
///
/// As for [`IoBuf`]; in addition the memory at
/// [`stable_mut_ptr`](IoBufMut::stable_mut_ptr) must be writable for
/// `bytes_len()` bytes, and any byte pattern written there must be valid.
pub unsafe trait IoBufMut: IoBuf {
    /// Mutable address of the first byte.
    fn stable_mut_ptr(&mut self) -> *mut u8;
}

// SAFETY: a Vec's elements live in its heap allocation, which does not move
// when the Vec value moves; `len` bytes are initialised.
unsafe impl IoBuf for Vec<u8> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
// SAFETY: as above; u8 accepts any byte.
unsafe impl IoBufMut for Vec<u8> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}
// SAFETY: a boxed slice owns a heap allocation that does not move with the box.
unsafe impl IoBuf for Box<[u8]> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
// SAFETY: as above; u8 accepts any byte.
unsafe impl IoBufMut for Box<[u8]> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}
// SAFETY: static memory never moves or goes away.
unsafe impl IoBuf for &'static [u8] {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}

/// The largest alignment [`AlignedBuf`] accepts (a huge page would be larger,
/// but no file system asks for more than a page).
pub const MAX_ALIGN: usize = 1 << 16;

/// A zero-initialised heap buffer whose address is aligned, for direct I/O.
///
/// ```
/// use overlapped::AlignedBuf;
/// let buf = AlignedBuf::new(8192, 4096).unwrap();
/// assert_eq!(buf.as_ptr() as usize % 4096, 0);
/// assert_eq!(buf.len(), 8192);
/// ```
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
    home: Option<Arc<PoolShared>>,
    /// A slice of its pool's [`Arena`] (which frees the memory), not an
    /// allocation of its own.
    in_arena: bool,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to `align` (a power of two, at most
    /// [`MAX_ALIGN`]). The capacity is rounded up to a multiple of `align`.
    pub fn new(len: usize, align: usize) -> Result<AlignedBuf> {
        if !align.is_power_of_two() || align > MAX_ALIGN {
            return Err(Error::InvalidInput(format!(
                "alignment {align} is not a power of two up to {MAX_ALIGN}"
            )));
        }
        let cap = len
            .max(1)
            .checked_next_multiple_of(align)
            .ok_or_else(|| Error::InvalidInput(format!("buffer length {len} is too large")))?;
        let layout = Layout::from_size_align(cap, align)
            .map_err(|e| Error::InvalidInput(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (cap >= align >= 1).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        debug_assert!(
            ptr.as_ptr() as usize % align == 0 && len <= cap,
            "the allocation is aligned and holds len bytes"
        );
        Ok(AlignedBuf {
            ptr,
            len,
            layout,
            home: None,
            in_arena: false,
        })
    }

    /// The address alignment this buffer was allocated with.
    pub fn align(&self) -> usize {
        self.layout.align()
    }

    /// How many bytes the allocation holds; [`set_len`](Self::set_len) may
    /// grow the visible length up to this.
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// Changes the visible length, keeping the contents. Fails if `len`
    /// exceeds [`capacity`](Self::capacity).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::InvalidInput(format!(
                "length {len} exceeds the buffer's capacity {}",
                self.capacity()
            )));
        }
        self.len = len;
        Ok(())
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        debug_assert!(
            self.len <= self.layout.size(),
            "len never exceeds the capacity"
        );
        // SAFETY: ptr is valid for capacity >= len initialised (zeroed) bytes,
        // uniquely owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        debug_assert!(
            self.len <= self.layout.size(),
            "len never exceeds the capacity"
        );
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align())
            .finish()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        debug_assert!(
            !self.in_arena || self.home.is_some(),
            "a slice of an arena belongs to the arena's pool"
        );
        if let Some(home) = self.home.take() {
            // A slice of the arena always goes back (the arena frees it); a
            // buffer of its own is kept within `max_idle`, except by a pool
            // with an arena, which gives the arena's slices out first.
            if self.in_arena || home.arena.is_none() {
                let mut free = home.free.lock().unwrap_or_else(|p| p.into_inner());
                if self.in_arena || free.len() < home.max_idle {
                    free.push(RawBuf {
                        ptr: self.ptr,
                        layout: self.layout,
                        in_arena: self.in_arena,
                    });
                    debug_assert!(
                        free.len() <= home.max_idle,
                        "a pool keeps at most max_idle free buffers (a contiguous one, its count)"
                    );
                    return;
                }
            }
        }
        if self.in_arena {
            // Unreachable (asserted above): the arena frees its memory.
            return;
        }
        // SAFETY: ptr was allocated by alloc_zeroed with this exact layout and
        // has not been freed or handed elsewhere.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: the allocation is on the heap and does not move with the value.
unsafe impl IoBuf for AlignedBuf {
    fn stable_ptr(&self) -> *const u8 {
        debug_assert!(
            self.ptr.as_ptr() as usize % self.layout.align() == 0,
            "the memory handed to the kernel is aligned as allocated"
        );
        self.ptr.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        debug_assert!(
            self.len <= self.layout.size(),
            "the kernel is given no more bytes than the allocation holds"
        );
        self.len
    }
}
// SAFETY: as above; any byte is a valid u8.
unsafe impl IoBufMut for AlignedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        debug_assert!(
            self.ptr.as_ptr() as usize % self.layout.align() == 0,
            "the memory handed to the kernel is aligned as allocated"
        );
        self.ptr.as_ptr()
    }
}

struct RawBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    /// A slice of the pool's arena (never freed by itself).
    in_arena: bool,
}
// SAFETY: a RawBuf is an owned, currently unused allocation.
unsafe impl Send for RawBuf {}

struct PoolShared {
    free: Mutex<Vec<RawBuf>>,
    max_idle: usize,
    /// The one allocation a contiguous pool's buffers are slices of.
    arena: Option<Arc<Arena>>,
}

impl Drop for PoolShared {
    fn drop(&mut self) {
        let free = self.free.get_mut().unwrap_or_else(|p| p.into_inner());
        debug_assert!(
            free.len() <= self.max_idle,
            "a pool keeps at most max_idle free buffers"
        );
        for raw in free.drain(..) {
            if raw.in_arena {
                continue; // the arena's own memory (`Arena`'s drop)
            }
            // SAFETY: each RawBuf came from an AlignedBuf's allocation with
            // this layout, and only the pool holds it now.
            unsafe { alloc::dealloc(raw.ptr.as_ptr(), raw.layout) }
        }
    }
}

/// The one allocation a contiguous pool ([`AlignedBufPool::contiguous`])
/// carves its buffers from. A port that registered it with the kernel
/// (`READ_FIXED`) holds it too, so the memory the kernel pinned stays this
/// process's for as long as the kernel may use it.
pub(crate) struct Arena {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the arena owns its allocation; its slices are handed out one
// owner at a time (`AlignedBuf`), and the arena itself only gives its range.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// The arena's first byte's address.
    pub(crate) fn start(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated by alloc_zeroed with this layout in
        // `AlignedBufPool::contiguous`; every slice's owner (a buffer or the
        // pool's free list) holds the pool, which holds this arena.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        // Rings that registered it let go of it at their next operation.
        crate::cell::note_arena_freed();
    }
}

/// A pool of equally sized [`AlignedBuf`]s. A dropped buffer returns to the
/// pool (up to `max_idle` are kept), so steady-state direct I/O allocates
/// nothing.
///
/// ```
/// use overlapped::AlignedBufPool;
/// let pool = AlignedBufPool::new(4096, 512, 8).unwrap();
/// let a = pool.get();
/// let addr = a.as_ptr();
/// drop(a);
/// assert_eq!(pool.get().as_ptr(), addr); // reused
/// ```
#[derive(Clone)]
pub struct AlignedBufPool {
    shared: Arc<PoolShared>,
    len: usize,
    align: usize,
}

impl fmt::Debug for AlignedBufPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBufPool")
            .field("len", &self.len)
            .field("align", &self.align)
            .field("max_idle", &self.shared.max_idle)
            .finish()
    }
}

impl AlignedBufPool {
    /// A pool of `len`-byte buffers aligned to `align`, keeping at most
    /// `max_idle` free buffers.
    pub fn new(len: usize, align: usize, max_idle: usize) -> Result<AlignedBufPool> {
        // Validate once by building (and immediately pooling) a buffer.
        let probe = AlignedBuf::new(len, align)?;
        let pool = AlignedBufPool {
            shared: Arc::new(PoolShared {
                free: Mutex::new(Vec::new()),
                max_idle,
                arena: None,
            }),
            len,
            align,
        };
        drop(probe);
        Ok(pool)
    }

    /// A pool of `count` buffers of `len` bytes aligned to `align`, carved
    /// from one allocation of `count` times `len` (rounded up to `align`),
    /// page-aligned and zeroed, which a port can register with the kernel
    /// ([`Port::register_buffers`](crate::Port::register_buffers)) so that
    /// its reads and writes into these buffers skip pinning their pages each
    /// time (io_uring's `READ_FIXED`/`WRITE_FIXED`). The allocation is made
    /// now and freed when the pool and every buffer from it are gone (and
    /// every port that registered it). With all `count` buffers in use,
    /// [`get`](Self::get) makes a buffer of its own, which works as any
    /// other but is not registered, and is freed when dropped.
    ///
    /// ```
    /// use overlapped::AlignedBufPool;
    /// let pool = AlignedBufPool::contiguous(4096, 4096, 4).unwrap();
    /// let (a, b) = (pool.get(), pool.get());
    /// assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 4096);
    /// ```
    pub fn contiguous(len: usize, align: usize, count: usize) -> Result<AlignedBufPool> {
        let probe = AlignedBuf::new(len, align)?; // validates len and align
        let cap = probe.capacity();
        drop(probe);
        if count == 0 {
            return Err(Error::InvalidInput(
                "a contiguous pool needs at least one buffer".into(),
            ));
        }
        let total = cap
            .checked_mul(count)
            .filter(|&t| t <= isize::MAX as usize / 2)
            .ok_or_else(|| {
                Error::InvalidInput(format!("{count} buffers of {len} bytes are too many"))
            })?;
        let layout = Layout::from_size_align(total, align.max(page_size().min(MAX_ALIGN)))
            .map_err(|e| Error::InvalidInput(format!("{count} buffers of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (count >= 1, cap >= 1).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        let arena = Arc::new(Arena { ptr, layout });
        let slice = Layout::from_size_align(cap, align)
            .map_err(|e| Error::InvalidInput(format!("buffer of {len} bytes: {e}")))?;
        // Reversed, so that `get` hands out the lowest addresses first.
        let free = (0..count)
            .rev()
            .map(|i| {
                debug_assert!((i + 1) * cap <= total, "each slice lies inside the arena");
                RawBuf {
                    // SAFETY: i * cap + cap <= total: inside the allocation.
                    ptr: unsafe { NonNull::new_unchecked(ptr.as_ptr().add(i * cap)) },
                    layout: slice,
                    in_arena: true,
                }
            })
            .collect();
        debug_assert!(
            ptr.as_ptr() as usize % align == 0 && cap % align == 0,
            "the arena and each slice's size keep every slice aligned"
        );
        Ok(AlignedBufPool {
            shared: Arc::new(PoolShared {
                free: Mutex::new(free),
                max_idle: count,
                arena: Some(arena),
            }),
            len,
            align,
        })
    }

    /// The arena of a contiguous pool.
    pub(crate) fn arena(&self) -> Option<&Arc<Arena>> {
        self.shared.arena.as_ref()
    }

    /// The length of each buffer.
    pub fn buf_len(&self) -> usize {
        self.len
    }

    /// The address alignment of each buffer.
    pub fn align(&self) -> usize {
        self.align
    }

    /// A buffer from the pool, or a new one if none is free. Its contents are
    /// whatever the previous user left (zeroes for a new one).
    pub fn get(&self) -> AlignedBuf {
        let reused = self
            .shared
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let mut buf = match reused {
            // Only this pool's buffers come home to it, all allocated by
            // `AlignedBuf::new(self.len, self.align)`.
            Some(raw) => AlignedBuf {
                ptr: raw.ptr,
                len: self.len,
                layout: raw.layout,
                home: None,
                in_arena: raw.in_arena,
            },
            // The parameters were validated in `new`, so this cannot fail.
            None => AlignedBuf::new(self.len, self.align).unwrap_or_else(|e| unreachable!("{e}")),
        };
        debug_assert!(
            buf.capacity() >= self.len && buf.align() == self.align,
            "a pooled buffer has the pool's size and alignment"
        );
        buf.home = Some(self.shared.clone());
        buf
    }

    /// How many free buffers the pool holds now.
    pub fn idle(&self) -> usize {
        let n = self
            .shared
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        debug_assert!(
            n <= self.shared.max_idle,
            "a pool keeps at most max_idle free buffers"
        );
        n
    }
}

/// The memory page size (4096 where the system will not say).
pub(crate) fn page_size() -> usize {
    crate::sys::page_size()
}
