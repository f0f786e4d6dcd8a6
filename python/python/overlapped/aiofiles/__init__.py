# overlapped.aiofiles: what is whose.
#
# The API is aiofiles' (https://github.com/Tinche/aiofiles, by Tin Tvrtkovic
# and the aiofiles contributors, under the Apache License 2.0): the same
# modules, names, signatures and behaviour, so that
# `import overlapped.aiofiles as aiofiles` is a drop-in for aiofiles 25.1.
# Code from the aiofiles 25.1.0 release (its PyPI sdist, aiofiles-25.1.0.tar.gz,
# sha256 a8d728f0a29de45dc521f18f07297428d56992a742f0cd2701ba86e44d23d5b2):
#
# - copied unchanged (a header added; tempfile/'s two with LF line endings
#   for upstream's CRLF): os.py, ospath.py, tempfile/__init__.py,
#   tempfile/temptypes.py, threadpool/binary.py, threadpool/text.py,
#   threadpool/utils.py;
# - copied and changed by overlap, each saying how: base.py (an engine file's
#   `async with` exit is an engine close), threadpool/__init__.py (`open` of a
#   regular file by path goes to the engine), this file (aiofiles' exports,
#   with overlap's documentation);
# - overlap's own (MIT OR Apache-2.0, as the rest of overlap): the file objects
#   on the engine, threadpool/engine.py, _engine_binary.py and _engine_text.py,
#   which subclass aiofiles' classes.
#
# aiofiles' licence and NOTICE are beside this file (LICENSE-aiofiles,
# NOTICE-aiofiles) and ship with the package. aiofiles' own test suite, run
# against this module, is python/tests/aiofiles_upstream/ in overlap's
# repository (copied unchanged from the same release, with its licence).
"""A drop-in for aiofiles 25.1: ``import overlapped.aiofiles as aiofiles``.

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

See ``overlapped.aiofiles.threadpool.engine`` for how the engine's files
differ from the thread pool's (no user-space write buffer, append mode,
text ``tell`` cookies).

The API, and the code of the modules that use the thread pool, are
aiofiles' (by Tin Tvrtkovic and its contributors, Apache License 2.0; the
licence and NOTICE ship beside this module); the engine's file objects are
overlap's. The comment at the top of this file's source says which file is
whose.
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
