"""aiofiles' file objects with their reads and writes on the overlap engine.

``overlap.aiofiles.open`` returns these for regular files opened by path:
every read, write, truncate, flush-to-disk, stat and close is an engine
operation (io_uring, or the engine's bounded pool where io_uring is
blocked), awaited on the event loop with no thread per call. They subclass
aiofiles' classes (``AsyncBufferedReader``, ``AsyncBufferedIOBase``,
``AsyncFileIO``, ``AsyncTextIOWrapper``), so ``isinstance`` checks in
existing code hold, and have the same methods and properties.

Differences from the thread-pool objects, all documented per method:

- Writes are gathered in user space up to the buffer size, as
  ``io.BufferedWriter`` does, and written by ``flush``, ``close``, a read or
  a seek with one engine write. A file dropped without ``close`` writes
  what is gathered with a blocking ``pwrite`` when collected (as ``io``'s
  files do); close your files.
- The position is kept here and every transfer is positional (``pread``/
  ``pwrite`` shaped). In append mode ("a") each write first asks the
  kernel for the file's size (``statx``, an engine operation) and writes
  there; unlike O_APPEND it is not atomic against other processes
  appending at the same moment.
- ``fileno()`` is the engine's descriptor; ``raw`` is the binary object
  itself and a text file's ``buffer`` is its binary object (there is no
  separate ``io`` layer underneath); a binary ``detach()`` returns a plain
  ``io.FileIO`` on a duplicate of the descriptor.
- Text ``tell()`` returns the byte position (exact for stateless encodings
  such as UTF-8 and Latin-1), and ``seek`` accepts it.
"""

from __future__ import annotations

import codecs
import io
import warnings
import locale
import os

from ... import _native
from .binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO
from .text import AsyncTextIOWrapper

CHUNK = io.DEFAULT_BUFFER_SIZE  # 8 KiB: the read-ahead of readline and text reads
BIG_CHUNK = 1 << 20  # read(-1) reads in pieces of this size at most


def _unsupported(what: str) -> io.UnsupportedOperation:
    return io.UnsupportedOperation(what)


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

    # -- helpers

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
        """Writes the gathered bytes (one engine write; at the end of the
        file in append mode)."""
        if not self._wbuf:
            return
        data = bytes(self._wbuf)
        off = await self._size() if self._append else self._wbuf_pos
        await self._nf.write_at(data, off)
        del self._wbuf[: len(data)]
        if self._append:
            self._pos = off + len(data)

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

    async def readall(self):
        """Reads to the end of the file (engine reads, sized by ``statx``)."""
        await self._before_read()
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

    async def readinto1(self, b):
        """As ``readinto`` (one engine read)."""
        return await self.readinto(b)

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

    async def readline(self, size=-1):
        """Reads up to and including ``b"\\n"`` (engine reads of ``CHUNK``
        bytes, the surplus kept for the next call)."""
        await self._before_read()
        if size is None:
            size = -1
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
            off = await self._size() if self._append else self._pos
            written = await self._nf.write_at(mv, off)
            self._pos = off + written
            return written
        if not self._wbuf:
            self._wbuf_pos = self._pos
        self._wbuf += mv
        self._pos += n
        if len(self._wbuf) >= self._bufsize:
            await self._flush_wbuf()
        return n

    async def writelines(self, lines):
        """Writes each item of ``lines``."""
        self._check_writable()
        for x in lines:
            await self.write(x)

    async def flush(self):
        """Writes what ``write`` gathered (an engine write): then it is in
        the file (the page cache; durable only after an fsync)."""
        self._check_open()
        await self._flush_wbuf()

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

    async def close(self):
        """Writes what is gathered, then closes the file (an engine
        ``close``, after the operations in flight on it). Closing again does
        nothing."""
        if self._detached:
            raise ValueError("raw stream has been detached")
        try:
            if not self._nf.closed:
                await self._flush_wbuf()
        finally:
            await self._nf.close()

    def _flush_sync(self):
        """Last resort for a file dropped unclosed: a blocking pwrite of what
        is gathered, as io's files flush when collected."""
        if self._wbuf and not self._nf.closed and not self._detached:
            fd = self._nf.fileno()
            off = os.fstat(fd).st_size if self._append else self._wbuf_pos
            data = bytes(self._wbuf)
            while data:
                n = os.pwrite(fd, data, off)
                data, off = data[n:], off + n
            self._wbuf.clear()

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


class _Detached:
    """What a detached text file has left underneath."""

    def __getattr__(self, name):
        raise ValueError("underlying buffer has been detached")


class EngineBufferedReader(_EngineBinary, AsyncBufferedReader):
    """A binary file opened for reading ("rb", "r+b", "w+b", ...), on the
    engine; what aiofiles returns as ``AsyncBufferedReader``."""


class EngineBufferedWriter(_EngineBinary, AsyncBufferedIOBase):
    """A binary file opened for writing only ("wb", "ab", "xb"), on the
    engine; what aiofiles returns as ``AsyncBufferedIOBase``."""


class EngineFileIO(_EngineBinary, AsyncFileIO):
    """An unbuffered binary file (``buffering=0``), on the engine; what
    aiofiles returns as ``AsyncFileIO``."""


class EngineTextIOWrapper(AsyncTextIOWrapper):
    """A text file on the engine: bytes read and written by the engine, then
    decoded and encoded here (with Python's codecs and newline rules)."""

    def __init__(
        self, binary, mode, encoding, errors, newline, *, line_buffering=False, loop, executor
    ):
        self._bin = binary
        self._line_buffering = line_buffering
        self._text_mode = mode
        self._encoding = encoding
        self._errors = errors
        self._newline = newline
        self._executor = executor
        self._ref_loop = loop
        self._file = binary._nf
        self._encoder = None
        self._reset_decoder()

    # -- decoding state

    def _reset_decoder(self):
        dec = self._new_decoder()
        self._decoder = dec
        self._text = ""  # decoded, not yet consumed
        self._snap_pos = self._bin._pos  # file position where decoding began
        self._snap_state = dec.getstate()
        self._fed = b""  # bytes fed since the snapshot
        self._eof = False
        self._consumed = 0  # characters consumed since the snapshot

    async def _fill(self, size=CHUNK) -> bool:
        """Decodes one more chunk; False at the end of the file."""
        if self._eof:
            return False
        if not self._text:
            # Everything decoded so far was consumed: start the mapping from
            # characters back to bytes (for tell) here.
            self._snap_pos = self._bin._pos
            self._snap_state = self._decoder.getstate()
            self._fed = b""
            self._consumed = 0
        data = await self._bin._nf.read_at(size, self._bin._pos)
        self._bin._pos += len(data)
        final = not data
        self._text += self._decoder.decode(data, final=final)
        self._fed += data
        if final:
            self._eof = True
        return not final

    async def _fill_to_end(self):
        """As ``_fill(BIG_CHUNK)`` until the end of the file, joining the
        pieces once at the end (appending each to ``_text`` and ``_fed``
        would copy everything read so far at every piece)."""
        texts, feds = [self._text], [self._fed]
        try:
            while True:
                data = await self._bin._nf.read_at(BIG_CHUNK, self._bin._pos)
                self._bin._pos += len(data)
                final = not data
                texts.append(self._decoder.decode(data, final=final))
                feds.append(data)
                if final:
                    self._eof = True
                    return
        finally:
            self._text = "".join(texts)
            self._fed = b"".join(feds)

    def _take(self, n):
        out, self._text = self._text[:n], self._text[n:]
        self._consumed += len(out)
        return out


    # -- reading

    async def read(self, size=-1):
        """Reads up to ``size`` characters (all if negative or None)."""
        await self._bin._before_read()
        if size is None or size < 0:
            if await self._fill(BIG_CHUNK):
                await self._fill_to_end()
            return self._take(len(self._text))
        while len(self._text) < size and await self._fill():
            pass
        return self._take(size)

    def _find_line_end(self, start=0):
        t = self._text
        nl = self._newline
        if nl is None or nl == "\n":
            i = t.find("\n", start)
            return -1 if i < 0 else i + 1
        if nl == "":
            # Any of \r\n, \r, \n ends a line (untranslated).
            for i in range(start, len(t)):
                c = t[i]
                if c == "\n":
                    return i + 1
                if c == "\r":
                    if i + 1 < len(t):
                        return i + 2 if t[i + 1] == "\n" else i + 1
                    if self._eof:
                        return i + 1
                    return -2  # need one more character
            return -1
        i = t.find(nl, start)
        return -1 if i < 0 else i + len(nl)

    async def readline(self, size=-1):
        """Reads one line (line endings as ``newline`` says)."""
        await self._bin._before_read()
        if size is None:
            size = -1
        while True:
            end = self._find_line_end()
            if end >= 0:
                if 0 <= size < end:
                    return self._take(size)
                return self._take(end)
            if 0 <= size <= len(self._text):
                return self._take(size)
            if not await self._fill():
                if end == -2:
                    continue
                return self._take(len(self._text))

    readlines = _readlines

    # -- writing

    async def write(self, s):
        """Encodes ``s`` (translating ``"\\n"`` as ``newline`` says) and
        writes it with one engine write; returns ``len(s)``."""
        self._bin._check_writable()
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        nl = self._newline
        if nl is None:
            nl = os.linesep
        if nl not in ("", "\n"):
            s = s.replace("\n", nl)
        await self._sync_position()
        if self._bin._append:
            self._bin._pos = await self._bin._size()
        if self._encoder is None:
            self._encoder = codecs.getincrementalencoder(self._encoding)(self._errors)
            if self._bin._pos != 0:
                # Not at the start: no byte-order mark (as io.TextIOWrapper).
                self._encoder.setstate(0)
        data = self._encoder.encode(s)
        await self._bin.write(data)
        if self._line_buffering and ("\n" in s or "\r" in s):
            await self._bin.flush()
        return n

    async def writelines(self, lines):
        await self.write("".join(lines))

    async def _sync_position(self):
        """Moves the binary position back to the text position (unread
        decoded text is dropped), as a text file does before writing."""
        if self._text or self._fed:
            self._bin._pos = self._text_state()[0]
        self._reset_decoder()

    def _new_decoder(self):
        dec = codecs.getincrementaldecoder(self._encoding)(self._errors)
        if self._newline is None or self._newline == "":
            dec = io.IncrementalNewlineDecoder(dec, translate=self._newline is None)
        return dec

    def _text_state(self):
        """(byte position of the next character, decoder flags there)."""
        if not self._text and not self._fed:
            return self._bin._pos, self._decoder.getstate()[1]
        if not self._text:
            # Everything decoded was consumed: bytes the decoder still holds
            # (a split character) are not consumed.
            pending, flags = self._decoder.getstate()
            return self._bin._pos - len(pending), flags
        if not self._consumed:
            return self._snap_pos - len(self._snap_state[0]), self._snap_state[1]
        # Find how many of the fed bytes produced the consumed characters.
        dec = self._new_decoder()
        dec.setstate(self._snap_state)
        chars = 0
        for i in range(len(self._fed)):
            chars += len(dec.decode(self._fed[i : i + 1]))
            if chars >= self._consumed:
                return self._snap_pos + i + 1, dec.getstate()[1]
        return self._snap_pos + len(self._fed), dec.getstate()[1]

    def _text_position(self) -> int:
        """A ``tell`` cookie: the byte position, with the decoder's flags
        (e.g. UTF-16's byte order) above bit 64, as CPython packs them."""
        pos, flags = self._text_state()
        return pos | (flags << 64)

    async def flush(self):
        """Writes what is gathered (see the binary ``write``)."""
        await self._bin.flush()

    async def truncate(self, size=None):
        """Truncates the file to ``size`` bytes (the position if None)."""
        await self._sync_position()
        return await self._bin.truncate(size)

    # -- position

    async def tell(self):
        """The byte position of the next character (a cookie ``seek``
        accepts, as Python's text files)."""
        self._bin._check_open()
        return self._text_position()

    async def seek(self, cookie, whence=os.SEEK_SET):
        """``seek(tell_value)``, ``seek(0, SEEK_CUR)`` or ``seek(0, SEEK_END)``,
        as Python's text files allow."""
        self._bin._check_open()
        if whence == os.SEEK_CUR:
            if cookie != 0:
                raise io.UnsupportedOperation("can't do nonzero cur-relative seeks")
            cookie = self._text_position()
            whence = os.SEEK_SET
        if whence == os.SEEK_END:
            if cookie != 0:
                raise io.UnsupportedOperation("can't do nonzero end-relative seeks")
            pos = await self._bin.seek(0, os.SEEK_END)
            self._reset_decoder()
            self._encoder = None
            return pos
        if whence != os.SEEK_SET:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if cookie < 0:
            raise ValueError(f"negative seek position {cookie}")
        pos, flags = cookie & ((1 << 64) - 1), cookie >> 64
        self._bin._pos = pos
        self._reset_decoder()
        if flags or pos:
            self._decoder.setstate((b"", flags))
            self._snap_state = self._decoder.getstate()
        self._encoder = None
        return cookie

    async def seekable(self):
        return await self._bin.seekable()

    async def writable(self):
        return await self._bin.writable()

    async def readable(self):
        return self._bin.readable()

    async def isatty(self):
        return await self._bin.isatty()

    async def close(self):
        """Closes the file (an engine ``close``)."""
        await self._bin.close()

    def fileno(self):
        return self._bin.fileno()

    def detach(self):
        """Returns a plain (synchronous) ``io`` binary file on a duplicate of
        the descriptor at this position, and leaves this object unusable, as
        ``io.TextIOWrapper.detach`` (which aiofiles proxies directly) does."""
        b = self._bin
        b._check_open()
        if self._text or self._fed:
            b._pos = self._text_state()[0]
        b._flush_sync()
        fd = os.dup(b._nf.fileno())
        raw_mode = b._mode if "+" in b._mode else b._mode[0] + "b"
        out = io.open(fd, raw_mode.replace("a", "r+") if "a" in raw_mode else raw_mode)
        out.seek(b._pos)
        b._detached = True
        b._close_soon()
        self._bin = _Detached()
        return out

    @property
    def buffer(self):
        return self._bin

    @property
    def closed(self):
        return self._bin.closed

    @property
    def encoding(self):
        return self._encoding

    @property
    def errors(self):
        return self._errors

    @property
    def line_buffering(self):
        return self._line_buffering

    @property
    def newlines(self):
        return getattr(self._decoder, "newlines", None)

    @property
    def name(self):
        return self._bin.name

    @property
    def mode(self):
        return self._text_mode

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


# ------------------------------------------------------------------ opening


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
