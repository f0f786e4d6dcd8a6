# overlap's own (MIT OR Apache-2.0, as the rest of overlap), on aiofiles' classes.
# What in overlapped.aiofiles is whose: the top of ../__init__.py.
"""Text files on the engine: a decoder over a binary engine file (see
``engine`` for what differs from aiofiles' thread-pool objects)."""

from __future__ import annotations

import codecs
import io
import os

from ._serial import serialised, serialised_close
from .text import AsyncTextIOWrapper
from ._engine_binary import BIG_CHUNK, CHUNK, _readlines


class _Detached:
    """What a detached text file has left underneath."""

    def __getattr__(self, name):
        raise ValueError("underlying buffer has been detached")


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

    # -- serialisation: the binary file's lock (see _serial.py), reentrant
    # for the task that holds it (a text write calls the binary write).

    @property
    def _serial(self):
        return self._bin._lock

    @property
    def _serial_pid(self):
        return self._bin._serial_pid

    def _settle_orphans(self):
        self._bin._settle_orphans()

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

    @serialised
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

    @serialised
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

    @serialised
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

    @serialised
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

    @serialised
    async def flush(self):
        """Writes what is gathered (see the binary ``write``)."""
        await self._bin.flush()

    @serialised
    async def truncate(self, size=None):
        """Truncates the file to ``size`` bytes (the position if None)."""
        await self._sync_position()
        return await self._bin.truncate(size)

    # -- position

    @serialised
    async def tell(self):
        """The byte position of the next character (a cookie ``seek``
        accepts, as Python's text files)."""
        self._bin._check_open()
        return self._text_position()

    @serialised
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

    @serialised_close
    async def close(self):
        """Closes the file (an engine ``close``)."""
        await self._bin.close()

    async def _close_forked(self):
        await self._bin._close_forked()

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
