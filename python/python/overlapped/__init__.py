"""overlap: file I/O for asyncio that is truly asynchronous.

Operations go to the kernel through io_uring (or, where io_uring is
blocked, a bounded thread pool, and :func:`driver` says why), and their
completions reach the event loop through its own selector: no thread per
operation, no GIL held while the kernel works, and a bounded amount of
memory and operations in flight.

>>> async def main():
...     async with overlapped.open("data.bin", "w+b") as f:
...         await f.write_at(b"hello", 0)
...         assert await f.read_at(5, 0) == b"hello"

``overlapped.aiofiles`` is a drop-in for the aiofiles package.

Each event loop gets a completion hub on first use, closed with the loop
(``loop.close()``, which ``asyncio.run`` calls): operations still in flight
then complete on a thread of the engine, which releases their buffers and
in-flight budget; nobody awaits their results any more. After
``os.fork()`` the child gets an engine and hubs of its own on first use;
an operation it inherited in flight belongs to the parent, and awaiting it
in the child raises ``RuntimeError`` at once, and so does every call on a
file the child inherited (``overlapped.aiofiles`` files too).

Every byte a write acknowledged reaches the file, whatever happens to the
task, the loop or the file object afterwards, while the process lives on:
the contract is ``docs/acknowledged-bytes.md`` in the repository.
"""

from __future__ import annotations

import os
from typing import Any, Generator, Optional, Union

from . import _native
from ._native import MAX_RW_BYTES, Alignment, AlignedBuffer, File, FileStat

__all__ = [
    "open",
    "File",
    "FileStat",
    "Alignment",
    "AlignedBuffer",
    "driver",
    "stats",
    "page_size",
    "shutdown",
    "MAX_RW_BYTES",
]

__version__ = "0.1.0"

StrPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def driver() -> dict:
    """Which driver the engine runs and why.

    Keys: ``kind`` (``"uring"``: io_uring; ``"aio+pool"``: Linux AIO for
    O_DIRECT reads, writes and syncs, with the thread pool for the rest,
    where io_uring is blocked; ``"pool"``: the bounded thread pool),
    ``fallback`` (why io_uring is not in use, or None), ``hint`` (what to
    change to get it), ``detail`` (the ring's setup flags and kernel worker
    limits, or the pool's size), ``max_in_flight_ops`` and
    ``max_in_flight_bytes`` (the in-flight budget; the earlier
    ``max_inflight_*`` spellings still work, deprecated). The environment variable
    ``OVERLAP_DRIVER=uring|aio|pool`` chooses, and
    ``OVERLAP_MAX_INFLIGHT_OPS`` / ``OVERLAP_MAX_INFLIGHT_BYTES`` set the
    budget (operations beyond it wait for a share), read when the engine
    starts (on first use; a forked child starts its own).
    """
    return _Renamed(_native.driver())


#: Earlier names of keys of :func:`stats` and :func:`driver`, still
#: answered (with a ``DeprecationWarning``) but not listed: every key about
#: what is in flight is now spelled ``in_flight``.
_DEPRECATED_KEYS = {
    "inflight_ops_high_water": "in_flight_ops_high_water",
    "inflight_bytes_high_water": "in_flight_bytes_high_water",
    "max_inflight_ops": "max_in_flight_ops",
    "max_inflight_bytes": "max_in_flight_bytes",
}


class _Renamed(dict):
    """The dict :func:`stats` and :func:`driver` return: their keys, plus
    the deprecated spellings of :data:`_DEPRECATED_KEYS` as aliases."""

    def _alias(self, key: Any) -> Any:
        new = _DEPRECATED_KEYS.get(key) if isinstance(key, str) else None
        if new is None or dict.__contains__(self, key):
            return key
        import warnings

        warnings.warn(
            f"overlap key {key!r} is deprecated: use {new!r}",
            DeprecationWarning,
            stacklevel=3,
        )
        return new

    def __getitem__(self, key: Any) -> Any:
        return dict.__getitem__(self, self._alias(key))

    def get(self, key: Any, default: Any = None) -> Any:
        return dict.get(self, self._alias(key), default)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (
            key in _DEPRECATED_KEYS and dict.__contains__(self, _DEPRECATED_KEYS[key])
        )


def stats() -> dict:
    """The engine's counters since it started, one key per counter of the
    Rust engine's ``overlapped::Stats`` (whose documentation says what each
    counts; the dict is built from that struct, so it has every one):
    ``submitted``, ``completed``,
    ``completed_inline`` (synchronous: page-cache hits, or done when the
    submitting call returned) vs ``completed_async`` (really overlapped),
    ``kernel_workers_seen`` (io_uring worker threads that had to do blocking
    work), ``submitted_on_reactor_rings`` (operations submitted by the event
    loop's thread on its own ring), ``submit_syscalls`` (system calls that
    handed operations to the kernel: once a few operations are in flight,
    the tasks of one loop iteration share one; ``OVERLAP_SUBMIT_BATCH=1``
    turns that off), bytes, errors, the operations and bytes in flight now
    (``in_flight_ops``, ``in_flight_bytes``) and their high-water marks
    (``in_flight_ops_high_water``, ``in_flight_bytes_high_water``).

    Every key about what is in flight is spelled ``in_flight_*``; the
    earlier ``inflight_ops_high_water`` and ``inflight_bytes_high_water``
    still work as deprecated aliases (``DeprecationWarning``)."""
    return _Renamed(_native.stats())


def page_size() -> int:
    """The memory page size: the default alignment of :class:`AlignedBuffer`."""
    return _native.page_size()


def shutdown() -> None:
    """Shuts the process's engine down: waits (without the GIL) until the
    operations in flight are complete; their results reach their awaiting
    tasks when their loops run next. Every operation started afterwards
    raises ``RuntimeError`` at once, on any loop; bytes that an
    ``overlapped.aiofiles`` file still holds then stay there (its ``flush``
    raises, and tries them again when called again). Calling it again does
    nothing. The contract it keeps: ``docs/acknowledged-bytes.md``."""
    global _shut_down_in
    _shut_down_in = os.getpid()
    _native.shutdown()


#: The process whose engine :func:`shutdown` shut down (a child made by
#: ``fork`` has an engine of its own).
_shut_down_in: Optional[int] = None


def _check_running() -> None:
    """``RuntimeError`` once :func:`shutdown` began in this process."""
    if _shut_down_in is not None and _shut_down_in == os.getpid():
        raise RuntimeError("overlap: the engine has been shut down")


class _Opening:
    """What :func:`open` returns: await it for the :class:`File`, or use it
    as an async context manager that closes the file on exit."""

    __slots__ = ("_args", "_file")

    def __init__(self, args: tuple) -> None:
        self._args = args
        self._file: Optional[File] = None

    def _start(self) -> Any:
        path, mode, direct, write_through, access, name = self._args
        return _native.open(path, mode, direct, write_through, access, name)

    def __await__(self) -> Generator[Any, None, File]:
        return self._start().__await__()

    async def __aenter__(self) -> File:
        self._file = await self._start()
        return self._file

    async def __aexit__(self, *exc: Any) -> None:
        f, self._file = self._file, None
        if f is not None:
            await f.close()


def open(
    path: StrPath,
    mode: str = "rb",
    *,
    direct: bool = False,
    write_through: bool = False,
    access: Optional[str] = None,
) -> _Opening:
    """Opens ``path`` for asynchronous I/O; await the result, or use it with
    ``async with``.

    ``mode`` is a binary mode as for Python's :func:`open`: "rb", "wb", "ab",
    "xb", "r+b", "w+b", "a+b", "x+b". Reads and writes are positional
    (``read_at``/``write_at`` take an offset) in every mode; "a" creates the
    file if needed, keeps its contents and opens it with O_APPEND, as
    Python's :func:`open` does: every write lands at the end of the file
    whatever its offset, in one step with respect to other appenders (tasks,
    threads, processes).

    ``direct=True`` opens with O_DIRECT (no page cache): offsets and lengths
    must be multiples of ``File.alignment.offset`` and buffers aligned
    (:class:`AlignedBuffer`), else ``ValueError`` names the alignment.
    ``write_through=True`` opens with O_DSYNC: a write completes once its data
    is on stable storage. ``access`` is read-ahead advice: None, "normal",
    "sequential" or "random".

    Errors are the usual ones: ``FileNotFoundError``, ``PermissionError``,
    ``FileExistsError`` ("x"), ``IsADirectoryError``, ``OSError`` with errno.
    """
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    name = path
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(
            f"expected str, bytes or os.PathLike object, not {type(path).__name__}"
        )
    fs_path = os.fsencode(path)
    if access is not None and not isinstance(access, str):
        raise TypeError("access must be None or a str")
    return _Opening((fs_path, mode, bool(direct), bool(write_through), access, name))
