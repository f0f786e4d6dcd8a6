//! Memory the kernel reads or writes: aligned allocations owned by Rust
//! ([`Mem`], behind [`AlignedBuffer`]) and Python buffers held for the
//! duration of an operation ([`PyBufMut`], [`PyBufRef`]).

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::ptr::NonNull;

use overlapped::{IoBuf, IoBufMut};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

/// The largest alignment accepted (as the engine's [`overlapped::MAX_ALIGN`]).
pub const MAX_ALIGN: usize = overlapped::MAX_ALIGN;

/// The memory page size (4096 where the kernel will not say).
pub fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// A zeroed heap allocation aligned to a power of two. Unlike the engine's
/// `AlignedBuf`, a failed allocation is an error (Python's `MemoryError`),
/// not an abort of the interpreter.
pub struct Mem {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: `Mem` uniquely owns its allocation, like `Box<[u8]>`.
unsafe impl Send for Mem {}
// SAFETY: shared access only reads the pointer and length fields.
unsafe impl Sync for Mem {}

impl Mem {
    /// `len` zeroed bytes aligned to `align`.
    pub fn new(len: usize, align: usize) -> PyResult<Mem> {
        if !align.is_power_of_two() || align > MAX_ALIGN {
            return Err(PyValueError::new_err(format!(
                "alignment {align} is not a power of two up to {MAX_ALIGN}"
            )));
        }
        let cap = len
            .max(1)
            .checked_next_multiple_of(align)
            .filter(|&c| c <= isize::MAX as usize - align)
            .ok_or_else(|| PyMemoryError::new_err(format!("cannot allocate {len} bytes")))?;
        let layout = Layout::from_size_align(cap, align)
            .map_err(|e| PyValueError::new_err(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (cap >= 1).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| PyMemoryError::new_err(format!("cannot allocate {len} bytes")))?;
        debug_assert!(
            ptr.as_ptr() as usize % align == 0 && len <= cap,
            "the allocation is aligned and holds len bytes"
        );
        Ok(Mem { ptr, len, layout })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        debug_assert!(
            self.len <= self.layout.size(),
            "len never exceeds the capacity"
        );
        // SAFETY: `ptr` is valid for `layout.size() >= len` initialised
        // (zeroed) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The address alignment.
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_zeroed` with exactly this layout, and
        // freed only here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: the allocation is on the heap and does not move with the value;
// `len` bytes are initialised.
unsafe impl IoBuf for Mem {
    fn stable_ptr(&self) -> *const u8 {
        debug_assert!(
            self.ptr.as_ptr() as usize % self.layout.align() == 0,
            "the memory lent is aligned as allocated"
        );
        self.ptr.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        debug_assert!(
            self.len <= self.layout.size(),
            "the bytes lent lie in the allocation"
        );
        self.len
    }
}
// SAFETY: as above; any byte is a valid u8.
unsafe impl IoBufMut for Mem {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        debug_assert!(
            self.ptr.as_ptr() as usize % self.layout.align() == 0,
            "the memory lent is aligned as allocated"
        );
        self.ptr.as_ptr()
    }
}

/// A Python object's buffer, exported for as long as this value lives: the
/// exporter (bytearray, mmap, memoryview, AlignedBuffer, ...) can neither
/// free nor resize the memory while an export is held, so the kernel may
/// write into it until the operation is done. Dropping it releases the
/// export (under the GIL).
pub struct PyBufMut {
    buf: PyBuffer<u8>,
}

impl PyBufMut {
    /// Exports `obj`'s buffer for writing; a read-only or non-contiguous
    /// buffer is a `TypeError`, as for `io.RawIOBase.readinto`.
    pub fn get(obj: &Bound<'_, PyAny>) -> PyResult<PyBufMut> {
        let buf = PyBuffer::<u8>::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "readinto_at() argument must be a writable bytes-like object of unsigned bytes, not {}",
                type_name(obj)
            ))
        })?;
        if buf.readonly() {
            return Err(PyTypeError::new_err(format!(
                "readinto_at() argument must be read-write bytes-like object, not {} (read-only)",
                type_name(obj)
            )));
        }
        if !buf.is_c_contiguous() {
            return Err(PyBufferError::new_err(
                "readinto_at() needs a contiguous buffer",
            ));
        }
        Ok(PyBufMut { buf })
    }
}

// SAFETY: the exported memory belongs to the exporter, which keeps it at
// the same address and size while the export (held by `self.buf`) lives;
// moving `self` does not move it. `len_bytes` bytes are valid.
unsafe impl IoBuf for PyBufMut {
    fn stable_ptr(&self) -> *const u8 {
        self.buf.buf_ptr() as *const u8
    }
    fn bytes_len(&self) -> usize {
        self.buf.len_bytes()
    }
}
// SAFETY: as above; the buffer was checked writable, and any byte is valid.
unsafe impl IoBufMut for PyBufMut {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.buf.buf_ptr() as *mut u8
    }
}

/// A Python object's buffer held for reading (a write's source).
pub struct PyBufRef {
    buf: PyBuffer<u8>,
}

impl PyBufRef {
    /// Exports `obj`'s buffer (any bytes-like object).
    pub fn get(obj: &Bound<'_, PyAny>) -> PyResult<PyBufRef> {
        let buf = PyBuffer::<u8>::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "a bytes-like object of unsigned bytes is required, not {}",
                type_name(obj)
            ))
        })?;
        if !buf.is_c_contiguous() {
            return Err(PyBufferError::new_err(
                "write_at() needs a contiguous buffer",
            ));
        }
        Ok(PyBufRef { buf })
    }

    /// The bytes, for copying. Only while the GIL is held.
    pub fn as_slice<'a>(&'a self, _py: Python<'a>) -> &'a [u8] {
        let len = self.buf.len_bytes();
        if len == 0 {
            return &[];
        }
        // SAFETY: the export keeps `len` bytes valid at `buf_ptr`; the GIL
        // (witnessed by `_py`) is held for the slice's lifetime. Python code
        // could change the bytes of a mutable exporter concurrently only
        // with the GIL, which the caller holds.
        unsafe { std::slice::from_raw_parts(self.buf.buf_ptr() as *const u8, len) }
    }
}

// SAFETY: as for `PyBufMut`: the exporter keeps the memory in place while
// the export lives.
unsafe impl IoBuf for PyBufRef {
    fn stable_ptr(&self) -> *const u8 {
        self.buf.buf_ptr() as *const u8
    }
    fn bytes_len(&self) -> usize {
        self.buf.len_bytes()
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

/// `AlignedBuffer(size, alignment=None)`: zeroed memory whose address is
/// aligned for direct I/O, with the buffer protocol (use it with
/// `memoryview`, `bytes(...)`, `readinto_at`, `write_at`).
///
/// The default alignment is the page size, a multiple of the direct-I/O
/// memory alignment of every file system Linux has (`File.alignment` gives a
/// file's own figures).
#[pyclass(module = "overlapped", name = "AlignedBuffer", frozen, weakref)]
pub struct AlignedBuffer {
    mem: UnsafeCell<Mem>,
}

// SAFETY: the memory is only reached through raw pointers handed to Python's
// buffer protocol (as a bytearray's) and to the kernel; Rust never forms a
// `&mut` to it, and the allocation itself never changes after creation.
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    fn mem(&self) -> &Mem {
        // SAFETY: the `Mem` value itself (pointer, length, layout) is never
        // mutated after construction; only the bytes it points to are.
        unsafe { &*self.mem.get() }
    }
}

#[pymethods]
impl AlignedBuffer {
    #[new]
    #[pyo3(signature = (size, alignment=None))]
    fn new(size: i64, alignment: Option<i64>) -> PyResult<Self> {
        if size < 0 {
            return Err(PyValueError::new_err(format!(
                "size must be at least 0, got {size}"
            )));
        }
        let align = match alignment {
            None => page_size(),
            Some(a) if a > 0 && (a as u64).is_power_of_two() && a as usize <= MAX_ALIGN => {
                a as usize
            }
            Some(a) => {
                return Err(PyValueError::new_err(format!(
                    "alignment must be a power of two from 1 to {MAX_ALIGN}, got {a}"
                )))
            }
        };
        let size = usize::try_from(size)
            .map_err(|_| PyMemoryError::new_err(format!("cannot allocate {size} bytes")))?;
        let mem = Mem::new(size, align)?;
        debug_assert!(
            mem.len == size && mem.align() == align,
            "the buffer has the size and alignment asked for"
        );
        Ok(AlignedBuffer {
            mem: UnsafeCell::new(mem),
        })
    }

    /// The address alignment, in bytes.
    #[getter]
    fn alignment(&self) -> usize {
        self.mem().align()
    }

    /// The memory address of the first byte (for checks and diagnostics).
    #[getter]
    fn address(&self) -> usize {
        self.mem().ptr.as_ptr() as usize
    }

    fn __len__(&self) -> usize {
        self.mem().len
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, self.mem().as_slice())
    }

    fn __repr__(&self) -> String {
        format!(
            "AlignedBuffer(size={}, alignment={})",
            self.mem().len,
            self.mem().align()
        )
    }

    /// # Safety
    /// Called by Python with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("View is null"));
        }
        let (ptr, len) = {
            let this = slf.get();
            (this.mem().ptr.as_ptr(), this.mem().len)
        };
        let len = isize::try_from(len).map_err(|_| PyBufferError::new_err("buffer too large"))?;
        // SAFETY: `view` is valid (checked non-null, provided by Python);
        // `ptr` is valid for `len` writable bytes for as long as `slf`
        // lives, and the view holds a reference to `slf` (FillInfo increfs
        // it) until it is released.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr.cast(), len, 0, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// # Safety
    /// Called by Python with the view it got from `__getbuffer__`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
