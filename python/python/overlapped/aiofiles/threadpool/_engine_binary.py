# overlap's own (MIT OR Apache-2.0, as the rest of overlap), on aiofiles' classes.
# What in overlapped.aiofiles is whose: the top of ../__init__.py.
"""Binary files on the engine (see ``engine`` for what differs from
aiofiles' thread-pool objects)."""

from __future__ import annotations

import asyncio
import errno
import io
import os
import weakref

from ... import _loop

from ._serial import SerialLock, serialised, serialised_close
from .binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO

CHUNK = io.DEFAULT_BUFFER_SIZE  # 8 KiB: the read-ahead of readline and text reads
BIG_CHUNK = 1 << 20  # read(-1) reads in pieces of this size at most


def _unsupported(what: str) -> io.UnsupportedOperation:
    return io.UnsupportedOperation(what)


@serialised
async def _readlines(self, hint=-1):
    """Lines to the end of the file (or until ``hint`` bytes): binary and
    text files alike, through their own ``readline``."""
    lines = []
    total = 0
    while True:
        line = await self.readline()
        if not line:
            break
        lines.append(line)
        total += len(line)
        if hint is not None and 0 < hint <= total:
            break
    return lines


class _EngineBinary:
    """The binary file on the engine (mixed into the aiofiles classes)."""

    def __init__(
        self, nf, mode: str, name, *, readable, writable, append, bufsize, loop, executor
    ):
        self._nf = nf
        # Writes are gathered in user space up to bufsize bytes (0: every
        # write goes to the file at once), as io.BufferedWriter does.
        self._bufsize = bufsize
        self._wbuf = bytearray()
        self._wbuf_pos = 0
        self._detached = False
        self._mode = mode
        self._name = name
        self._readable = readable
        self._writable = writable
        self._append = append
        self._pos = 0
        # Read-ahead for readline/peek: bytes of the file from _rbuf_pos.
        self._rbuf = b""
        self._rbuf_pos = 0
        self._executor = executor
        self._ref_loop = loop
        self._file = nf  # what aiofiles' repr shows
        # Every operation runs under this lock, one at a time (see
        # _serial.py), as io.BufferedWriter's calls do under its lock.
        self._lock = SerialLock()
        self._serial_pid = os.getpid()
        # The engine write of gathered bytes in flight: (future, count).
        self._inflight = None
        # The loop of the last write gathered (weakly): when it ends, what
        # is gathered is written (_write_behind_at_loop_end).
        self._wbuf_loop = None

    @property
    def _serial(self):
        return self._lock

    def _settle_orphans(self):
        """Takes in the result of a write of gathered bytes whose task left
        (cancelled): done, though its loop has not run the callback that
        takes it in (``_flushed``; the loop stopped or closed first); or
        never to be reported, as its loop closed before it completed (the
        engine completes it on a thread of its own, and its bytes are the
        kernel's). Either way the bytes leave the buffer, so that nothing
        writes them again."""
        inflight = self._inflight
        if inflight is None:
            return
        if inflight[0].done():
            self._flushed(inflight[0])
        elif inflight[0].get_loop().is_closed():
            self._inflight = None
            self._trim(inflight[1])

    # -- private methods

    def _check_open(self):
        if self._detached:
            raise ValueError("raw stream has been detached")
        if self._nf.closed:
            raise ValueError("I/O operation on closed file.")

    async def _before_read(self):
        self._check_readable()
        if self._wbuf:
            await self._flush_wbuf()

    async def _flush_wbuf(self):
        """Writes the gathered bytes (an engine write; more after a short
        one; at the end of the file in append mode). The buffer loses
        exactly what the kernel wrote, when it reports it: bytes it did not
        write stay gathered, and a later flush writes them."""
        await self._after_inflight()
        wrote = False
        while self._wbuf:
            data = bytes(self._wbuf)
            # In append mode the file has O_APPEND: the kernel writes at the
            # end whatever the offset, in one step with other appenders.
            fut = self._nf.write_some_at(data, self._wbuf_pos)
            self._inflight = (fut, len(data))
            try:
                n = await asyncio.shield(fut)
            except asyncio.CancelledError:
                if fut.done():
                    self._flushed(fut)
                else:
                    # The engine goes on with the write: the lock stays
                    # held until _flushed took its result in.
                    fut.add_done_callback(self._flushed)
                    self._lock.hold(fut)
                raise
            except Exception:
                # Not written: the bytes stay gathered for the next flush.
                self._inflight = None
                raise
            self._inflight = None
            if n == 0:
                raise OSError(errno.EIO, "the kernel wrote nothing")
            self._trim(n)
            wrote = True
        if wrote and self._append:
            await self._after_append()

    async def _after_inflight(self):
        """Waits for the engine write of gathered bytes that a cancelled
        flush of this task left in flight (a task that caught its
        CancelledError and flushes again), so that its bytes are trimmed,
        not written twice."""
        inflight = self._inflight
        while inflight is not None and not inflight[0].done():
            if inflight[0].get_loop() is not asyncio.get_running_loop():
                self._settle_orphans()
                return
            await asyncio.wait((inflight[0],))
            await asyncio.sleep(0)  # _flushed runs first
            inflight = self._inflight

    def _flushed(self, fut):
        """The engine write of gathered bytes whose task was cancelled
        completed: trims what it wrote (on the loop's thread, the lock
        still held for it)."""
        if self._inflight is None or self._inflight[0] is not fut:
            return  # settled as orphaned
        self._inflight = None
        if fut.cancelled():
            return
        if fut.exception() is None:
            self._trim(fut.result())

    def _trim(self, n):
        """``n`` gathered bytes reached the file."""
        assert 0 <= n <= len(self._wbuf), (n, len(self._wbuf))
        del self._wbuf[:n]
        self._wbuf_pos += n

    async def _after_append(self):
        """The position after an append: the file's size (an engine
        ``statx``), as a Python file's ``tell`` reports after the kernel
        appended."""
        self._pos = await self._size()

    def _check_readable(self):
        self._check_open()
        if not self._readable:
            raise _unsupported("read")

    def _check_writable(self):
        self._check_open()
        if not self._writable:
            raise _unsupported("write")

    def _drop_readahead(self):
        self._rbuf = b""
        self._rbuf_pos = 0

    def _buffered(self) -> bytes:
        """Read-ahead bytes at the current position."""
        if self._rbuf and self._rbuf_pos <= self._pos < self._rbuf_pos + len(self._rbuf):
            return self._rbuf[self._pos - self._rbuf_pos :]
        return b""

    async def _size(self) -> int:
        return (await self._nf.stat()).st_size

    # -- reading

    @serialised
    async def read(self, size=-1):
        """Reads up to ``size`` bytes (all to the end if negative or None):
        engine reads at the current position."""
        if not self._rbuf and not self._wbuf and size is not None and size >= 0:
            # The common case, kept short: one engine read at the position.
            self._check_readable()
            data = await self._nf.read_at(size, self._pos)
            self._pos += len(data)
            return data
        await self._before_read()
        if size is None or size < 0:
            return await self.readall()
        have = self._buffered()
        if len(have) >= size:
            self._pos += size
            return bytes(have[:size])
        data = await self._nf.read_at(size - len(have), self._pos + len(have))
        out = have + data
        self._pos += len(out)
        return out

    @serialised
    async def readall(self):
        """Reads to the end of the file (engine reads, sized by ``statx``)."""
        await self._before_read()
        start = self._pos
        try:
            return await self._readall()
        except asyncio.CancelledError:
            # A cancelled read consumes nothing (see the module's notes).
            self._pos = start
            raise

    async def _readall(self):
        parts = []
        have = self._buffered()
        if have:
            parts.append(have)
            self._pos += len(have)
        size = await self._size()
        while True:
            want = max(size - self._pos, 0)
            want = min(max(want, CHUNK), BIG_CHUNK)
            data = await self._nf.read_at(want, self._pos)
            if not data:
                break
            parts.append(data)
            self._pos += len(data)
            if len(data) < want and self._pos >= size:
                # Short read at the size we saw: one more read confirms EOF.
                continue
        return b"".join(parts)

    @serialised
    async def read1(self, size=-1):
        """At most one engine read of up to ``size`` bytes (``CHUNK`` if
        negative)."""
        await self._before_read()
        if size is None or size < 0:
            size = CHUNK
        have = self._buffered()
        if have:
            out = bytes(have[:size])
            self._pos += len(out)
            return out
        data = await self._nf.read_at(size, self._pos)
        self._pos += len(data)
        return data

    @serialised
    async def readinto(self, b):
        """Reads into the writable buffer ``b`` (an engine read straight into
        it); returns the count."""
        await self._before_read()
        mv = memoryview(b).cast("B")
        have = self._buffered()
        n = 0
        if have:
            n = min(len(have), len(mv))
            mv[:n] = have[:n]
            self._pos += n
            if n == len(mv):
                return n
        got = await self._nf.readinto_at(mv[n:], self._pos)
        self._pos += got
        return n + got

    @serialised
    async def readinto1(self, b):
        """As ``readinto`` (one engine read)."""
        return await self.readinto(b)

    @serialised
    async def peek(self, size=0):
        """Bytes at the current position without moving it (one engine read
        of ``CHUNK`` bytes when nothing is buffered)."""
        await self._before_read()
        have = self._buffered()
        if not have:
            self._rbuf = await self._nf.read_at(max(size, CHUNK), self._pos)
            self._rbuf_pos = self._pos
            have = self._rbuf
        return bytes(have)

    @serialised
    async def readline(self, size=-1):
        """Reads up to and including ``b"\\n"`` (engine reads of ``CHUNK``
        bytes, the surplus kept for the next call)."""
        await self._before_read()
        if size is None:
            size = -1
        start = self._pos
        try:
            return await self._readline(size)
        except asyncio.CancelledError:
            # A cancelled read consumes nothing; what it read ahead stays
            # buffered for the next call.
            self._pos = start
            raise

    async def _readline(self, size):
        parts = []
        total = 0
        while size < 0 or total < size:
            have = self._buffered()
            if not have:
                self._rbuf = await self._nf.read_at(CHUNK, self._pos)
                self._rbuf_pos = self._pos
                have = self._rbuf
                if not have:
                    break
            limit = len(have) if size < 0 else min(len(have), size - total)
            nl = have.find(b"\n", 0, limit)
            take = nl + 1 if nl >= 0 else limit
            parts.append(have[:take])
            total += take
            self._pos += take
            if nl >= 0:
                break
        return b"".join(parts)

    # Overrides the executor-delegating readlines of the aiofiles class.
    readlines = _readlines

    # -- writing

    @serialised
    async def write(self, b):
        """Writes ``b``; returns ``len(b)``. Up to the buffer size (the file
        system's block size, or ``buffering``) it is gathered in user space
        and written by ``flush``, ``close``, a read or a seek, as
        ``io.BufferedWriter`` does; larger writes (and ``buffering=0``) are
        one engine write at once, at the position (the end of the file in
        append mode)."""
        self._check_writable()
        if isinstance(b, str):
            raise TypeError("a bytes-like object is required, not 'str'")
        mv = memoryview(b).cast("B")
        n = len(mv)
        self._drop_readahead()
        if self._bufsize == 0 or n >= self._bufsize:
            await self._flush_wbuf()
            fut = self._nf.write_at(mv, self._pos)
            try:
                written = await asyncio.shield(fut)
            except asyncio.CancelledError:
                # The engine completes a write it has started: the bytes
                # land, and the position moves past them (as aiofiles',
                # whose thread finishes the write); the next operation
                # waits for it.
                if not fut.done():
                    self._lock.hold(fut)
                if not self._append:
                    self._pos += n
                raise
            if self._append:
                await self._after_append()
            else:
                self._pos += written
            return written
        if not self._wbuf:
            self._wbuf_pos = self._pos
        self._wbuf += mv
        self._pos += n
        self._wbuf_loop = weakref.ref(asyncio.get_running_loop())
        _BEHIND.add(self)
        if len(self._wbuf) >= self._bufsize:
            await self._flush_wbuf()
        return n

    @serialised
    async def writelines(self, lines):
        """Writes each item of ``lines``."""
        self._check_writable()
        for x in lines:
            await self.write(x)

    @serialised
    async def flush(self):
        """Writes what ``write`` gathered (an engine write): then it is in
        the file (the page cache; durable only after an fsync)."""
        self._check_open()
        await self._flush_wbuf()

    @serialised
    async def truncate(self, size=None):
        """Truncates (or extends) the file to ``size`` bytes, the position
        if None (an engine ``ftruncate``); returns the new size."""
        self._check_writable()
        if size is None:
            size = self._pos
        if size < 0:
            raise ValueError(f"negative size value {size}")
        await self._flush_wbuf()
        self._drop_readahead()
        await self._nf.truncate(size)
        return size

    # -- position

    @serialised
    async def seek(self, offset, whence=os.SEEK_SET):
        """Moves the position; ``SEEK_END`` asks the kernel for the size
        (an engine ``statx``). Returns the new position."""
        self._check_open()
        if self._wbuf:
            await self._flush_wbuf()
        if whence == os.SEEK_SET:
            if offset < 0:
                raise ValueError(f"negative seek position {offset}")
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = max(self._pos + offset, 0) if offset >= 0 else self._pos + offset
        elif whence == os.SEEK_END:
            pos = await self._size() + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, "Invalid argument")
        self._pos = pos
        return pos

    @serialised
    async def tell(self):
        """The position."""
        self._check_open()
        return self._pos

    async def seekable(self):
        self._check_open()
        return True

    async def writable(self):
        self._check_open()
        return self._writable

    def readable(self):
        self._check_open()
        return self._readable

    async def isatty(self):
        """False: a regular file (no system call)."""
        self._check_open()
        return False

    @serialised_close
    async def close(self):
        """Writes what is gathered, then closes the file (an engine
        ``close``, after the operations in flight on it). Closing again does
        nothing. In a child made by ``os.fork`` it returns at once: the
        gathered bytes are the parent's, which writes them."""
        if self._detached:
            raise ValueError("raw stream has been detached")
        try:
            if not self._nf.closed:
                await self._flush_wbuf()
        finally:
            await self._nf.close()

    async def _close_forked(self):
        await self._nf.close()  # returns at once in the child

    def _flush_sync(self):
        """Last resort for a file dropped unclosed: a blocking pwrite of what
        is gathered, as io's files flush when collected."""
        if self._serial_pid != os.getpid():
            return  # a child made by fork: the parent writes these bytes
        self._settle_orphans()
        if self._inflight is not None:
            # Collected with a write in flight (its loop gone): those bytes
            # are the engine's; the rest follows them.
            self._trim(self._inflight[1])
            self._inflight = None
        if self._wbuf and not self._nf.closed and not self._detached:
            fd = self._nf.fileno()
            while self._wbuf:
                # (In append mode O_APPEND writes at the end.) What a write
                # took leaves the buffer at once: after a failure part-way
                # (ENOSPC) the rest stays, and nothing is written twice.
                n = os.pwrite(fd, self._wbuf, self._wbuf_pos)
                if n == 0:
                    raise OSError(errno.EIO, "the kernel wrote nothing")
                self._trim(n)

    def __del__(self):
        try:
            self._flush_sync()
        except Exception:
            pass

    def fileno(self):
        self._check_open()
        return self._nf.fileno()

    def detach(self):
        """Returns a plain ``io.FileIO`` on a duplicate of the descriptor, at
        this position (after a blocking write of what is gathered), and
        leaves this object unusable, as ``io.BufferedReader.detach`` does."""
        self._check_open()
        self._flush_sync()
        fd = os.dup(self._nf.fileno())
        raw = io.FileIO(fd, self._mode.replace("b", "") or "r", closefd=True)
        raw.seek(self._pos)
        self._detached = True
        self._close_soon()
        return raw

    def _close_soon(self):
        try:
            self._nf.close()  # started now; nothing waits for it
        except RuntimeError:
            pass  # no running loop: the descriptor closes when collected

    @property
    def closed(self):
        return self._nf.closed

    @property
    def name(self):
        return self._name

    @property
    def mode(self):
        return self._mode

    @property
    def raw(self):
        return self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


# The file objects that gathered bytes (weakly): the candidates for
# _write_behind_at_loop_end.
_BEHIND: "weakref.WeakSet[_EngineBinary]" = weakref.WeakSet()


def _write_behind_at_loop_end(loop) -> None:
    """A loop ended (``loop``, or None: one collected unclosed): the bytes
    that file objects gathered on it and still hold are written now (a
    blocking ``pwrite``, as a file collected unclosed writes them), so that
    a file left open, unflushed, when its loop ends still gets every
    acknowledged byte while the process lives on. An object in use by
    another task at that moment (its lock held) is left to it."""
    for f in list(_BEHIND):
        gathered_on = f._wbuf_loop() if f._wbuf_loop is not None else None
        if f._serial_pid != os.getpid():
            continue  # the parent's (see _flush_sync)
        if not f._wbuf:
            _BEHIND.discard(f)
            continue
        if gathered_on is not loop or not f._lock.try_acquire():
            continue
        try:
            f._flush_sync()
        except OSError:
            pass  # still gathered: the next flush reports it
        finally:
            f._lock.release()
        if not f._wbuf:
            _BEHIND.discard(f)


_loop.at_loop_end(_write_behind_at_loop_end)


class EngineBufferedReader(_EngineBinary, AsyncBufferedReader):
    """A binary file opened for reading ("rb", "r+b", "w+b", ...), on the
    engine; what aiofiles returns as ``AsyncBufferedReader``."""


class EngineBufferedWriter(_EngineBinary, AsyncBufferedIOBase):
    """A binary file opened for writing only ("wb", "ab", "xb"), on the
    engine; what aiofiles returns as ``AsyncBufferedIOBase``."""


class EngineFileIO(_EngineBinary, AsyncFileIO):
    """An unbuffered binary file (``buffering=0``), on the engine; what
    aiofiles returns as ``AsyncFileIO``."""
