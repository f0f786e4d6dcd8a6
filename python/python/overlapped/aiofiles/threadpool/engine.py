# overlap's own (MIT OR Apache-2.0, as the rest of overlap), on aiofiles' classes.
# What in overlapped.aiofiles is whose: the top of ../__init__.py.
"""aiofiles' file objects with their reads and writes on the overlap engine.

``overlapped.aiofiles.open`` returns these for regular files opened by path:
every read, write, truncate, flush-to-disk, stat and close is an engine
operation (io_uring, or the engine's bounded pool where io_uring is
blocked), awaited on the event loop with no thread per call. They subclass
aiofiles' classes (``AsyncBufferedReader``, ``AsyncBufferedIOBase``,
``AsyncFileIO``, ``AsyncTextIOWrapper``), so ``isinstance`` checks in
existing code hold, and have the same methods and properties.

One file object may be used by many tasks at once, on one loop or on
loops of several threads: its operations run one at a time, in the order
they were called (a FIFO lock per object, ``_serial.py``, as
``io.BufferedWriter`` serialises its calls with its lock). So many tasks
doing ``await f.write(line); await f.flush()`` (a logging handler's way)
put every line in the file exactly once, whole: a flush writes what was
gathered when it began and drops from the buffer exactly what the kernel
wrote; a write that arrives meanwhile waits and is kept. A task cancelled
while the engine writes gathered bytes leaves; the write completes, and the
object's next operation waits for it and sees its result. A write of
gathered bytes that fails (``ENOSPC``) raises from ``flush``/``close`` and
the bytes the kernel did not take stay gathered: the next ``flush`` writes
them. In a child made by ``os.fork`` every call on a file object the parent
opened raises ``RuntimeError`` at once, ``close`` returns at once, and the
child never writes the parent's gathered bytes; after
``overlapped.shutdown()`` every call raises ``RuntimeError`` (gathered bytes
stay, and are written when the object is collected). The contract:
``docs/acknowledged-bytes.md`` in the repository.

Differences from the thread-pool objects, all documented per method:

- Writes are gathered in user space up to the buffer size, as
  ``io.BufferedWriter`` does, and written by ``flush``, ``close``, a read or
  a seek with one engine write. A file dropped without ``close`` writes
  what is gathered with a blocking ``pwrite`` when collected (as ``io``'s
  files do), also when its loop closed first (an engine write still in
  flight then completes on the engine's thread, and its bytes are not
  written again); close your files.
- The position is kept here and every transfer is positional (``pread``/
  ``pwrite`` shaped). In append mode ("a", "ab", "a+", "a+b") the file is
  opened with O_APPEND, as Python's ``open`` does: the kernel writes each
  write at the end of the file, in one step with respect to every other
  appender (tasks, threads, processes); after it the position is the
  file's size (an engine ``statx``), what ``tell`` gives on Python's files.
- ``fileno()`` is the engine's descriptor; ``raw`` is the binary object
  itself and a text file's ``buffer`` is its binary object (there is no
  separate ``io`` layer underneath); a binary ``detach()`` returns a plain
  ``io.FileIO`` on a duplicate of the descriptor.
- Text ``tell()`` returns the byte position (exact for stateless encodings
  such as UTF-8 and Latin-1), and ``seek`` accepts it.
- A cancelled read consumes nothing: ``tell()`` stays where it was and the
  next read returns the same bytes (``read``, ``read1``, ``readinto``,
  ``readline`` and ``readall``/``read()`` alike, however far a ``readall``
  had got). aiofiles' thread finishes a read its task no longer waits for,
  so there the position moves past bytes nobody received (after a
  cancelled 32 MiB read, ``tell()`` is 33554432, or 0 if the thread had not
  started): data lost, at a position that depends on timing. A cancelled
  write is the other way round, as in aiofiles: the kernel has it and
  completes it, so the position moves past it (in append mode the next
  write goes to the end anyway).
"""

from __future__ import annotations

import codecs
import io
import warnings
import locale
import os

from ... import _native
from ._engine_binary import (
    EngineBufferedReader,
    EngineBufferedWriter,
    EngineFileIO,
    _EngineBinary,  # noqa: F401 (the binary base, imported from here by the tests)
)
from ._engine_text import EngineTextIOWrapper


def parse_mode(mode: str):
    """Checks ``mode`` as ``io.open`` does; returns (text, binary mode for
    the engine, readable, writable, append)."""
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    modes = set(mode)
    if modes - set("axrwb+t") or len(mode) > len(modes):
        raise ValueError(f"invalid mode: '{mode}'")
    creating = "x" in modes
    reading = "r" in modes
    writing = "w" in modes
    appending = "a" in modes
    updating = "+" in modes
    text = "t" in modes
    binary = "b" in modes
    if text and binary:
        raise ValueError("can't have text and binary mode at once")
    if creating + reading + writing + appending > 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if not (creating or reading or writing or appending):
        raise ValueError(
            "Must have exactly one of create/read/write/append mode and at most one plus"
        )
    letter = "x" if creating else "r" if reading else "w" if writing else "a"
    raw_mode = letter + ("+" if updating else "") + "b"
    return (
        not binary,
        raw_mode,
        reading or updating,
        writing or appending or creating or updating,
        appending,
    )


def text_encoding(encoding):
    if encoding is None or encoding == "locale":
        return locale.getpreferredencoding(False)
    return encoding


async def engine_open(file, mode, buffering, encoding, errors, newline, loop, executor):
    """Opens a regular file on the engine; None if ``file`` is not a regular
    file (the caller then uses the thread pool, as aiofiles does)."""
    text, raw_mode, readable, writable, append = parse_mode(mode)
    if not text:
        if encoding is not None:
            raise ValueError("binary mode doesn't take an encoding argument")
        if errors is not None:
            raise ValueError("binary mode doesn't take an errors argument")
        if newline is not None:
            raise ValueError("binary mode doesn't take a newline argument")
    elif buffering == 0:
        raise ValueError("can't have unbuffered text I/O")
    if newline is not None and newline not in ("", "\n", "\r", "\r\n"):
        raise ValueError(f"illegal newline value: {newline}")
    if text:
        encoding = text_encoding(encoding)
        codecs.lookup(encoding)  # LookupError now, as open() raises
        if errors is None:
            errors = "strict"
    fs_path = os.fsencode(file)
    nf = await _native.open(fs_path, raw_mode, False, False, None, os.fspath(file))
    try:
        st = await nf.stat()
    except BaseException:
        await nf.close()
        raise
    if not st.is_file:
        await nf.close()
        return None
    # Binary files report the canonical mode, as io.FileIO does.
    letter, plus = raw_mode[0], "+" in raw_mode
    if letter == "w" and plus:
        canonical = "rb+"
    else:
        canonical = letter + "b" + ("+" if plus else "")
    if buffering == 1 and not text:
        warnings.warn(
            "line buffering (buffering=1) isn't supported in binary mode, "
            "the default buffer size will be used",
            RuntimeWarning,
            2,
        )
    if buffering == 0:
        bufsize = 0
    elif buffering is None or buffering < 0 or buffering == 1:
        bufsize = st.st_blksize if st.st_blksize > 1 else io.DEFAULT_BUFFER_SIZE
    else:
        bufsize = buffering
    kw = dict(
        readable=readable,
        writable=writable,
        append=append,
        bufsize=bufsize,
        loop=loop,
        executor=executor,
    )
    if text:
        b = EngineBufferedReader(nf, canonical, os.fspath(file), **kw)
        if append:
            b._pos = st.st_size
        return EngineTextIOWrapper(
            b,
            mode,
            encoding,
            errors,
            newline,
            line_buffering=buffering == 1,
            loop=loop,
            executor=executor,
        )
    if buffering == 0:
        f = EngineFileIO(nf, canonical, os.fspath(file), **kw)
    elif readable:
        f = EngineBufferedReader(nf, canonical, os.fspath(file), **kw)
    else:
        f = EngineBufferedWriter(nf, canonical, os.fspath(file), **kw)
    if append:
        f._pos = st.st_size
    return f
