# Adapted from aiofiles 25.1.0 (Apache License 2.0, Copyright the aiofiles authors):
# the same names and behaviour, so that overlap.aiofiles is a drop-in.
"""A drop-in for aiofiles 25.1: ``import overlap.aiofiles as aiofiles``.

The same public names, submodules and behaviour as aiofiles (``open`` with
its full signature, binary and text files with every method and async
iteration, ``os``, ``ospath``, ``tempfile``, ``threadpool``, the stdio
objects), with the reads and writes of regular files on the overlap engine
(io_uring, or its bounded pool where io_uring is blocked) instead of a
thread per call.

What uses a thread (the event loop's executor, as in aiofiles), and why:

=============================================  ==============================================
call                                           how
=============================================  ==============================================
``open(path, ...)`` of a regular file          engine: ``openat`` + ``statx``; no thread
its ``read``, ``read1``, ``readall``,          engine reads at the file's position; no thread
``readinto``, ``readline``, ``readlines``,
``peek``, ``async for``
its ``write``, ``writelines``, ``flush``       gathered up to the buffer size as io does, then
                                               engine writes; no thread
its ``truncate``, ``seek(.., SEEK_END)``       engine ``ftruncate`` / ``statx``; no thread
its ``tell``, ``seek``,                        no system call at all
``isatty``, ``seekable``, ``fileno``, ...
its ``close`` and ``async with`` exit          engine ``close``; no thread
``open`` of a descriptor, with an ``opener``,  thread pool, as aiofiles (the engine opens by
``closefd=False``, or with ``threadpool.       path, and positional I/O needs a regular file);
sync_open`` replaced (tests do); of a pipe,    the file's methods then use the thread pool too
device, directory or other non-regular file
``tempfile.*``                                 thread pool, as aiofiles (the standard library
                                               creates the file); the file's methods too
``os.*``, ``ospath.*``                         thread pool, as aiofiles (no asynchronous
                                               kernel path for them in the engine)
``stdin``, ``stdout``, ``stderr`` and          thread pool, as aiofiles (terminals and pipes)
their ``*_bytes``
=============================================  ==============================================

See ``overlap.aiofiles.threadpool.engine`` for how the engine's files
differ from the thread pool's (no user-space write buffer, append mode,
text ``tell`` cookies).
"""

from . import tempfile
from .threadpool import (
    open,
    stderr,
    stderr_bytes,
    stdin,
    stdin_bytes,
    stdout,
    stdout_bytes,
)

__all__ = [
    "open",
    "tempfile",
    "stdin",
    "stdout",
    "stderr",
    "stdin_bytes",
    "stdout_bytes",
    "stderr_bytes",
]
