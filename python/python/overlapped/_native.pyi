"""Type hints for the extension module behind :mod:`overlap`."""

import asyncio
import sys
from typing import Any, Literal, Optional, Tuple, final

from typing_extensions import Buffer, Self

MAX_RW_BYTES: int
"""Linux never transfers more than this in one read or write."""

@final
class Alignment:
    """The direct-I/O alignment a file requires (``File.alignment``)."""

    memory: int
    """Alignment of buffer addresses, in bytes."""
    offset: int
    """Alignment of file offsets and lengths, in bytes."""
    source: Literal["statx", "block-device", "default"]
    """Where the figures came from."""

@final
class FileStat:
    """What ``File.stat()`` reports (``statx``)."""

    st_size: int
    """Size in bytes."""
    size: int
    """Size in bytes (same as ``st_size``)."""
    is_file: bool
    """Whether it is a regular file."""
    st_blksize: int
    """The file system's preferred I/O size."""
    allocated: int
    """Bytes of storage allocated."""
    alignment: Alignment
    """The direct-I/O alignment."""

@final
class AlignedBuffer:
    """Zeroed memory whose address is aligned for direct I/O, with the buffer
    protocol (``memoryview(buf)``, ``bytes(buf)``, ``readinto_at``,
    ``write_at``).

    The default alignment is the page size, a multiple of the direct-I/O
    memory alignment of every Linux file system; ``alignment`` must be a power
    of two up to 65536. A size that cannot be allocated raises MemoryError.
    """

    def __new__(cls, size: int, alignment: Optional[int] = None) -> "AlignedBuffer": ...
    @property
    def alignment(self) -> int:
        """The address alignment, in bytes."""
    @property
    def address(self) -> int:
        """The address of the first byte."""
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class File:
    """An open file. Every method returns an awaitable (an asyncio future) and
    must be called from a coroutine running on an event loop; the operation is
    submitted at once, so several may be in flight from one task
    (``asyncio.gather``). Cancelling the awaiting task discards the result;
    the buffer stays alive until the kernel is done with it. In a child made
    by ``os.fork`` every call on a file the parent opened raises
    ``RuntimeError`` at once (``close`` returns at once); after
    ``overlapped.shutdown()`` every call raises ``RuntimeError``."""

    @property
    def name(self) -> Any:
        """The path the file was opened with."""
    @property
    def mode(self) -> str:
        """The mode the file was opened with."""
    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
    @property
    def direct(self) -> bool:
        """Whether the file was opened with O_DIRECT."""
    @property
    def append(self) -> bool:
        """Whether the file was opened in append mode ("a"): with O_APPEND,
        so every write lands at the end of the file whatever its offset."""
    @property
    def alignment(self) -> Alignment:
        """The direct-I/O alignment the file requires."""
    def fileno(self) -> int:
        """The descriptor (-1 once closed)."""
    def read_at(self, size: int, offset: int) -> "asyncio.Future[bytes]":
        """Reads up to ``size`` bytes at ``offset`` (fewer near the end of the
        file, ``b""`` past it). On a direct file ``offset`` and ``size`` must be
        multiples of ``alignment.offset``, else ValueError."""
    def readinto_at(self, buffer: Buffer, offset: int) -> "asyncio.Future[int]":
        """Reads into ``buffer`` (writable and contiguous: bytearray,
        memoryview, mmap, AlignedBuffer) at ``offset``; returns the count. The
        buffer is exported (cannot be resized or freed) until the kernel is
        done with it."""
    def write_at(self, data: Buffer, offset: int) -> "asyncio.Future[int]":
        """Writes all of ``data`` at ``offset`` (at the end of the file,
        whatever ``offset``, in append mode); returns ``len(data)`` or
        raises. On a direct file, unaligned memory is copied into aligned
        memory; ``offset`` and the length must be aligned."""
    def write_some_at(self, data: Buffer, offset: int) -> "asyncio.Future[int]":
        """One write of ``data`` at ``offset`` (at the end of the file in
        append mode), as ``os.pwrite``: returns how many bytes the kernel
        wrote, possibly fewer than ``len(data)``."""
    def fsync(self) -> "asyncio.Future[None]":
        """Data and metadata reach stable storage."""
    def fdatasync(self) -> "asyncio.Future[None]":
        """Data (and the metadata needed to read it back) reach stable storage."""
    def allocate(self, offset: int, length: int) -> "asyncio.Future[None]":
        """Reserves ``length`` bytes from ``offset`` (``fallocate`` mode 0)."""
    def truncate(self, length: int) -> "asyncio.Future[None]":
        """Truncates or extends the file to ``length`` bytes."""
    def stat(self) -> "asyncio.Future[FileStat]":
        """Size, block size, allocation and direct-I/O alignment."""
    def close(self) -> "asyncio.Future[None]":
        """Closes the file once the operations in flight on it are done;
        closing again does nothing."""
    def __aenter__(self) -> "asyncio.Future[Self]": ...
    def __aexit__(self, *args: Any) -> "asyncio.Future[None]": ...

@final
class Hub:
    """The completion hub of one event loop (internal: see ``overlapped._loop``)."""

    def __new__(cls) -> "Hub": ...
    @property
    def ring_fd(self) -> int: ...
    @property
    def event_fd(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def wakeups(self) -> Tuple[int, int]: ...
    @property
    def flushes(self) -> int: ...
    @property
    def queued(self) -> int: ...
    def use_loop(self, lp: asyncio.AbstractEventLoop) -> None: ...
    def reap(self) -> int: ...
    def on_event(self) -> None: ...
    def on_threadsafe(self) -> None: ...
    def use_call_soon_threadsafe(self, call_soon_threadsafe: Any, callback: Any) -> None: ...
    def close(self) -> None: ...
    def _forget_after_fork(self) -> None: ...

def _forget_hubs_after_fork() -> None: ...
def open(
    path: bytes,
    mode: str = "rb",
    direct: bool = False,
    write_through: bool = False,
    access: Optional[str] = None,
    name: Optional[Any] = None,
) -> "asyncio.Future[File]": ...
def driver() -> dict: ...
def stats() -> dict: ...
def _stats_fields() -> list[str]: ...
def page_size() -> int: ...
def shutdown() -> None: ...
