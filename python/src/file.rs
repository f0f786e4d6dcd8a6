//! `overlapped.File` and `overlapped._native.open`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use overlapped::{Access, OpenOptions, MAX_RW_BYTES};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::buffer::{page_size, Mem, PyBufMut, PyBufRef, MAX_ALIGN};
use crate::errors::to_pyerr;
use crate::hub::{spawn, BoxFut, Resolve};

/// What a mode string asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub create_new: bool,
    pub truncate: bool,
    pub append: bool,
}

/// Parses a binary mode as Python's `open` does ("rb", "wb", "ab", "xb",
/// each with an optional "+"; letters in any order).
pub fn parse_mode(mode: &str) -> PyResult<Mode> {
    let invalid = || PyValueError::new_err(format!("invalid mode: '{mode}'"));
    let (mut r, mut w, mut a, mut x, mut plus, mut b, mut t) = (0u8, 0u8, 0u8, 0u8, 0u8, 0u8, 0u8);
    for c in mode.chars() {
        let slot = match c {
            'r' => &mut r,
            'w' => &mut w,
            'a' => &mut a,
            'x' => &mut x,
            '+' => &mut plus,
            'b' => &mut b,
            't' => &mut t,
            _ => return Err(invalid()),
        };
        *slot += 1;
        if *slot > 1 {
            return Err(invalid());
        }
    }
    if r + w + a + x != 1 {
        return Err(PyValueError::new_err(
            "must have exactly one of create/read/write/append mode",
        ));
    }
    if t == 1 && b == 1 {
        return Err(PyValueError::new_err(
            "can't have text and binary mode at once",
        ));
    }
    if b == 0 {
        return Err(PyValueError::new_err(format!(
            "overlapped.open is binary only, got mode '{mode}': add 'b' (e.g. 'rb'), or use overlapped.aiofiles for text files"
        )));
    }
    let plus = plus == 1;
    let m = Mode {
        read: r == 1 || plus,
        write: w == 1 || a == 1 || x == 1 || plus,
        create: w == 1 || a == 1,
        create_new: x == 1,
        truncate: w == 1,
        append: a == 1,
    };
    debug_assert!(
        (m.read || m.write)
            && !(m.create && m.create_new)
            && (m.write || !(m.append || m.truncate || m.create || m.create_new)),
        "a mode reads or writes; only a writing mode creates, truncates or appends: {m:?}"
    );
    Ok(m)
}

fn parse_access(access: Option<&str>) -> PyResult<Access> {
    Ok(match access {
        None | Some("normal") => Access::Normal,
        Some("sequential") => Access::Sequential,
        Some("random") => Access::Random,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "access must be None, 'normal', 'sequential' or 'random', got '{other}'"
            )))
        }
    })
}

pub fn check_offset(offset: i64) -> PyResult<u64> {
    u64::try_from(offset).map_err(|_| PyValueError::new_err(format!("negative offset {offset}")))
}

fn check_len(what: &str, len: i64) -> PyResult<u64> {
    u64::try_from(len).map_err(|_| PyValueError::new_err(format!("negative {what} {len}")))
}

/// Direct-I/O alignment of a file: `File.alignment`.
#[pyclass(module = "overlapped", name = "Alignment", frozen, get_all)]
#[derive(Clone)]
pub struct PyAlignment {
    /// Alignment of buffer addresses, in bytes.
    pub memory: u32,
    /// Alignment of file offsets and lengths, in bytes.
    pub offset: u32,
    /// Where the figures came from: "statx", "block-device" or "default".
    pub source: &'static str,
}

#[pymethods]
impl PyAlignment {
    fn __repr__(&self) -> String {
        format!(
            "Alignment(memory={}, offset={}, source='{}')",
            self.memory, self.offset, self.source
        )
    }
}

impl From<overlapped::Alignment> for PyAlignment {
    fn from(a: overlapped::Alignment) -> Self {
        PyAlignment {
            memory: a.memory,
            offset: a.offset,
            source: a.source,
        }
    }
}

/// What `File.stat()` reports (`statx`).
#[pyclass(module = "overlapped", name = "FileStat", frozen, get_all)]
pub struct FileStat {
    /// Size in bytes.
    pub st_size: u64,
    /// Whether it is a regular file.
    pub is_file: bool,
    /// The file system's preferred I/O size.
    pub st_blksize: u32,
    /// Bytes of storage allocated.
    pub allocated: u64,
    /// The direct-I/O alignment.
    pub alignment: PyAlignment,
}

#[pymethods]
impl FileStat {
    /// Size in bytes (same as `st_size`).
    #[getter]
    fn size(&self) -> u64 {
        self.st_size
    }
    fn __repr__(&self) -> String {
        format!(
            "FileStat(st_size={}, is_file={}, st_blksize={}, allocated={}, alignment={})",
            self.st_size,
            if self.is_file { "True" } else { "False" },
            self.st_blksize,
            self.allocated,
            self.alignment.__repr__()
        )
    }
}

/// An open file. Every method returns an awaitable (an asyncio future);
/// operations run on the engine (io_uring or its thread pool) while the
/// event loop goes on.
#[pyclass(module = "overlapped", name = "File", frozen)]
pub struct PyFile {
    file: overlapped::File,
    name: Py<PyAny>,
    mode: String,
    append: bool,
    closed: AtomicBool,
    /// The process that opened it: in a child made by `fork` the file is the
    /// parent's (its engine, its operations in flight).
    pid: u32,
}

fn ok_none() -> Resolve {
    Box::new(|py| Ok(py.None()))
}

fn boxed(fut: impl std::future::Future<Output = Resolve> + Send + 'static) -> BoxFut {
    Box::pin(fut)
}

impl PyFile {
    /// `RuntimeError` in a child made by `fork`: every call on a file the
    /// child inherited fails at once, before it reaches an engine (the
    /// parent's, whose threads are not in the child).
    fn not_forked(&self) -> PyResult<()> {
        if std::process::id() == self.pid {
            return Ok(());
        }
        Err(PyRuntimeError::new_err(
            "overlap: this file was opened before os.fork() and belongs to the parent \
             process: open it again in the child",
        ))
    }

    /// A buffer suited to a direct read: page-aligned at least, so ext4 does
    /// not treat it as unaligned I/O.
    fn read_buffer(&self, size: usize) -> PyResult<Mem> {
        let align = if self.file.is_direct() {
            let a = self.file.alignment();
            (a.memory as usize)
                .max(a.offset as usize)
                .max(page_size())
                .min(MAX_ALIGN)
        } else {
            8
        };
        Mem::new(size, align)
    }
}

#[pymethods]
impl PyFile {
    /// Reads up to `size` bytes at `offset`; fewer near the end of the
    /// file, `b""` at or past it. On a direct file, `offset` and `size` must
    /// be multiples of `alignment.offset` (the buffer is aligned for you).
    fn read_at<'py>(&self, py: Python<'py>, size: i64, offset: i64) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let size = check_len("size", size)?.min(MAX_RW_BYTES as u64) as usize;
        let offset = check_offset(offset)?;
        let mem = self.read_buffer(size)?;
        debug_assert_eq!(
            mem.as_slice().len(),
            size,
            "the read's buffer holds the bytes asked for"
        );
        let file = self.file.clone();
        spawn(
            py,
            boxed(async move {
                let (res, mem) = file.read_at(mem, offset).await;
                Box::new(move |py: Python<'_>| {
                    let n = res.map_err(|e| to_pyerr(e, None))?;
                    debug_assert!(
                        n <= mem.as_slice().len(),
                        "a read returns at most the bytes asked for"
                    );
                    Ok(PyBytes::new(py, &mem.as_slice()[..n]).into_any().unbind())
                }) as Resolve
            }),
        )
    }

    /// Reads into `buffer` (any writable, contiguous bytes-like object:
    /// bytearray, memoryview, mmap, AlignedBuffer) at `offset`; returns the
    /// number of bytes read. The buffer is held (exported) until the kernel
    /// is done with it, even if the awaiting task is cancelled.
    fn readinto_at<'py>(
        &self,
        py: Python<'py>,
        buffer: &Bound<'py, PyAny>,
        offset: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let offset = check_offset(offset)?;
        let buf = PyBufMut::get(buffer)?;
        let file = self.file.clone();
        spawn(
            py,
            boxed(async move {
                let (res, buf) = file.read_at(buf, offset).await;
                Box::new(move |py: Python<'_>| {
                    let lent = overlapped::IoBuf::bytes_len(&buf);
                    drop(buf);
                    let n = res.map_err(|e| to_pyerr(e, None))?;
                    debug_assert!(n <= lent, "a read returns at most the buffer's length");
                    Ok(n.into_pyobject(py)?.into_any().unbind())
                }) as Resolve
            }),
        )
    }

    /// Writes all of `data` (any bytes-like object) at `offset` (at the end
    /// of the file, whatever `offset`, in append mode); returns `len(data)`,
    /// or raises. The buffer is held until the write is done.
    /// On a direct file a source whose address is not aligned is copied
    /// into aligned memory first; `offset` and the length must be aligned.
    fn write_at<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        offset: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let offset = check_offset(offset)?;
        let src = PyBufRef::get(data)?;
        let len = overlapped::IoBuf::bytes_len(&src);
        let file = self.file.clone();
        let misaligned = file.is_direct()
            && len > 0
            && (overlapped::IoBuf::stable_ptr(&src) as usize)
                % (file.alignment().memory.max(1) as usize)
                != 0;
        let fut = if misaligned {
            let mut mem = self.read_buffer(len)?;
            let bytes = src.as_slice(py);
            debug_assert!(
                bytes.len() == len && overlapped::IoBuf::bytes_len(&mem) == len,
                "the copy's source and destination both hold len bytes"
            );
            // SAFETY: `mem` was just allocated with `len` bytes and is not
            // shared with anyone yet.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    overlapped::IoBufMut::stable_mut_ptr(&mut mem),
                    len,
                )
            };
            drop(src);
            boxed(async move {
                let (res, _mem) = file.write_all_at(mem, offset).await;
                Box::new(move |py: Python<'_>| {
                    res.map_err(|e| to_pyerr(e, None))?;
                    Ok(len.into_pyobject(py)?.into_any().unbind())
                }) as Resolve
            })
        } else {
            boxed(async move {
                let (res, src) = file.write_all_at(src, offset).await;
                Box::new(move |py: Python<'_>| {
                    drop(src);
                    res.map_err(|e| to_pyerr(e, None))?;
                    Ok(len.into_pyobject(py)?.into_any().unbind())
                }) as Resolve
            })
        };
        spawn(py, fut)
    }

    /// One write of `data` at `offset` (at the end of the file in append
    /// mode), as `os.pwrite` does: returns how many bytes the kernel wrote,
    /// which may be fewer than `len(data)` (a disk that fills part-way
    /// through writes a prefix, and the next write raises). For a buffered
    /// writer that must know exactly which bytes reached the file. The
    /// buffer is held until the write is done. On a direct file the
    /// memory must be aligned (else `ValueError`).
    fn write_some_at<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        offset: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let offset = check_offset(offset)?;
        let src = PyBufRef::get(data)?;
        let file = self.file.clone();
        if file.is_direct()
            && (overlapped::IoBuf::stable_ptr(&src) as usize)
                % (file.alignment().memory.max(1) as usize)
                != 0
        {
            return Err(PyValueError::new_err(
                "write_some_at on a direct file needs aligned memory (overlapped.AlignedBuffer)",
            ));
        }
        spawn(
            py,
            boxed(async move {
                let (res, src) = file.write_at(src, offset).await;
                Box::new(move |py: Python<'_>| {
                    let lent = overlapped::IoBuf::bytes_len(&src);
                    drop(src);
                    let n = res.map_err(|e| to_pyerr(e, None))?;
                    debug_assert!(n <= lent, "a write takes at most the buffer's length");
                    Ok(n.into_pyobject(py)?.into_any().unbind())
                }) as Resolve
            }),
        )
    }

    /// `fsync`: data and metadata reach stable storage.
    fn fsync<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let t = self.file.sync_all();
        spawn(py, boxed(async move { unit(t.await) }))
    }

    /// `fdatasync`: data (and the metadata needed to read it back) reach
    /// stable storage.
    fn fdatasync<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let t = self.file.sync_data();
        spawn(py, boxed(async move { unit(t.await) }))
    }

    /// Reserves `length` bytes from `offset` (`fallocate` mode 0): the file
    /// grows if needed and the new range reads as zeros.
    fn allocate<'py>(
        &self,
        py: Python<'py>,
        offset: i64,
        length: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let offset = check_offset(offset)?;
        let length = check_len("length", length)?;
        let t = self.file.allocate(offset, length);
        spawn(py, boxed(async move { unit(t.await) }))
    }

    /// Truncates or extends the file to `length` bytes (`ftruncate`).
    fn truncate<'py>(&self, py: Python<'py>, length: i64) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let length = check_len("length", length)?;
        let t = self.file.set_len(length);
        spawn(py, boxed(async move { unit(t.await) }))
    }

    /// Size, block size, allocation and direct-I/O alignment (`statx`).
    fn stat<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.not_forked()?;
        let t = self.file.metadata();
        spawn(
            py,
            boxed(async move {
                let res = t.await;
                Box::new(move |py: Python<'_>| {
                    let m = res.map_err(|e| to_pyerr(e, None))?;
                    let st = FileStat {
                        st_size: m.len,
                        is_file: m.is_file,
                        st_blksize: m.block_size,
                        allocated: m.allocated,
                        alignment: m.alignment.into(),
                    };
                    Ok(Py::new(py, st)?.into_any())
                }) as Resolve
            }),
        )
    }

    /// Closes the file once the operations in flight on it are done.
    /// Closing a closed file does nothing.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.closed.swap(true, Ordering::AcqRel) || self.not_forked().is_err() {
            // Closed already; or, in a child made by `fork`, the parent's:
            // closed here at once, without touching the parent's engine.
            return spawn(py, boxed(async { ok_none() }));
        }
        let t = self.file.close();
        spawn(
            py,
            boxed(async move {
                let res = t.await;
                Box::new(move |py: Python<'_>| match res {
                    Ok(()) | Err(overlapped::Error::Closed) => Ok(py.None()),
                    Err(e) => Err(to_pyerr(e, None)),
                }) as Resolve
            }),
        )
    }

    /// The path the file was opened with.
    #[getter]
    fn name(&self, py: Python<'_>) -> Py<PyAny> {
        self.name.clone_ref(py)
    }

    /// The mode the file was opened with.
    #[getter]
    fn mode(&self) -> &str {
        &self.mode
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether the file was opened with O_DIRECT.
    #[getter]
    fn direct(&self) -> bool {
        self.file.is_direct()
    }

    /// Whether the file was opened in append mode ("a"): with O_APPEND,
    /// so every write lands at the end of the file whatever its offset.
    #[getter]
    fn append(&self) -> bool {
        self.append
    }

    /// The direct-I/O alignment the file requires.
    #[getter]
    fn alignment(&self) -> PyAlignment {
        self.file.alignment().into()
    }

    /// The descriptor (-1 once closed).
    fn fileno(&self) -> i32 {
        self.file.as_raw_fd()
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.into_any().unbind();
        spawn(
            py,
            boxed(async move { Box::new(move |_py: Python<'_>| Ok(me)) as Resolve }),
        )
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let name = self
            .name
            .bind(py)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_default();
        format!(
            "<overlapped.File name={name} mode='{}' direct={}{}>",
            self.mode,
            if self.file.is_direct() {
                "True"
            } else {
                "False"
            },
            if self.closed() { " closed" } else { "" }
        )
    }
}

fn unit(res: overlapped::Result<()>) -> Resolve {
    Box::new(move |py: Python<'_>| {
        res.map_err(|e| to_pyerr(e, None))?;
        Ok(py.None())
    })
}

/// `_native.open(path, mode, direct, write_through, access, name)`: the
/// future of an open `File`. `path` is the file-system encoded path.
#[pyfunction]
#[pyo3(signature = (path, mode="rb", direct=false, write_through=false, access=None, name=None))]
pub fn open<'py>(
    py: Python<'py>,
    path: &[u8],
    mode: &str,
    direct: bool,
    write_through: bool,
    access: Option<&str>,
    name: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let m = parse_mode(mode)?;
    let access = parse_access(access)?;
    if path.contains(&0) {
        return Err(PyValueError::new_err("embedded null byte"));
    }
    let engine = crate::engine()?;
    let path_buf = PathBuf::from(OsStr::from_bytes(path));
    let name = match name {
        Some(n) => n,
        None => PyBytes::new(py, path).into_any().unbind(),
    };
    let mut opts = OpenOptions::new();
    opts.read(m.read)
        .write(m.write)
        .append(m.append)
        .create(m.create)
        .create_new(m.create_new)
        .truncate(m.truncate)
        .direct(direct)
        .write_through(write_through)
        .access(access);
    let task = opts.open(&engine, path_buf);
    let mode = mode.to_string();
    spawn(
        py,
        boxed(async move {
            let res = task.await;
            Box::new(move |py: Python<'_>| {
                let file = res.map_err(|e| to_pyerr(e, Some(&name)))?;
                let f = PyFile {
                    file,
                    name,
                    mode,
                    append: m.append,
                    closed: AtomicBool::new(false),
                    pid: std::process::id(),
                };
                Ok(Py::new(py, f)?.into_any())
            }) as Resolve
        }),
    )
}
