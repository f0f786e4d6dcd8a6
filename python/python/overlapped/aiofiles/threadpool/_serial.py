# overlap's own (MIT OR Apache-2.0, as the rest of overlap).
# What in overlapped.aiofiles is whose: the top of ../__init__.py.
"""The lock that serialises the operations of one file object, as the lock
of Python's ``io.BufferedWriter`` serialises its calls from many threads.

An engine file object keeps state in user space (the position, the bytes
gathered by ``write``, the read-ahead): two tasks that change it at once
would write the same gathered bytes twice or drop bytes never written. So
every operation of the object runs under this lock, one at a time, in the
order the tasks asked for it (FIFO).

What ``asyncio.Lock`` does not do, and this lock does:

- Loops and threads: a file object may be used from several event loops,
  on one thread or on several (``asyncio.run`` twice, or one loop per
  thread). A waiter's future belongs to its own loop, and the lock is handed
  to it on that loop's thread (``call_soon_threadsafe`` from another).
- Reentrance by the task that holds it: a text file's ``write`` holds the
  lock and calls its binary file's ``write``, which takes it again.
- Engine writes that outlive their task: a task cancelled while the engine
  writes bytes it took from the buffer leaves; the engine completes the
  write anyway. The lock then stays held for that write (``hold``) and is
  released when it completes, after the object's state took its result in:
  no other operation sees the buffer while the engine's write of it is
  undecided. A held write whose loop closed before it completed is never
  reported to Python (the engine completes it on a thread of its own, and
  its bytes are the kernel's), and one that completed on a loop that then
  stopped waits for that loop to run its callbacks: a waiter then takes
  the lock over, and the object takes the write's result in itself.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import threading

import overlapped as _overlap

# How often a waiter looks whether the lock is held for an engine write
# whose loop closed (the only case nobody will release it).
_ORPHAN_CHECK = 0.5


class _Waiter:
    __slots__ = ("loop", "fut", "task", "granted")

    def __init__(self, loop, fut, task):
        self.loop = loop
        self.fut = fut
        self.task = task
        self.granted = False


class _EngineHold:
    """The owner of the lock while engine writes its task left go on."""

    __slots__ = ()


def _wake(fut):
    if not fut.done():
        fut.set_result(None)


class SerialLock:
    """A FIFO lock for tasks on any loop and thread (see the module docs)."""

    def __init__(self):
        self._mutex = threading.Lock()
        self._owner = None  # a task, an _EngineHold, or None when free
        self._depth = 0
        self._waiters: collections.deque = collections.deque()
        self._held: list = []  # engine futures the lock waits for

    def locked(self) -> bool:
        return self._owner is not None

    async def acquire(self) -> None:
        task = asyncio.current_task()
        with self._mutex:
            if task is not None and self._owner is task:
                self._depth += 1
                return
            self._take_over_orphans()
            if self._owner is None and not self._waiters:
                self._owner, self._depth = task or _EngineHold(), 1
                return
            loop = asyncio.get_running_loop()
            w = _Waiter(loop, loop.create_future(), task)
            self._waiters.append(w)
        try:
            while True:
                done, _ = await asyncio.wait((w.fut,), timeout=_ORPHAN_CHECK)
                if done:
                    return
                with self._mutex:
                    if self._take_over_orphans():
                        self._grant_next()
        except BaseException:
            w.fut.cancel()
            with self._mutex:
                if w.granted:
                    # Handed over as the task was cancelled: pass it on.
                    self._depth = 0
                    self._release_now()
                else:
                    try:
                        self._waiters.remove(w)
                    except ValueError:
                        pass
            raise

    def try_acquire(self) -> bool:
        """Takes the lock if it is free, without waiting (outside any task:
        the owner is an anonymous holder); ``release`` gives it back."""
        with self._mutex:
            self._take_over_orphans()
            if self._owner is not None or self._waiters:
                return False
            self._owner, self._depth = _EngineHold(), 1
            return True

    def release(self) -> None:
        with self._mutex:
            assert self._depth > 0, "release of a lock not held"
            self._depth -= 1
            if self._depth == 0:
                self._release_now()

    def hold(self, fut) -> None:
        """Keeps the lock held, after its task released it, until the
        engine future ``fut`` is done and its done callbacks (added before
        this call) have run."""
        with self._mutex:
            self._held.append(fut)
        fut.add_done_callback(self._held_done)

    def _held_done(self, fut) -> None:
        with self._mutex:
            try:
                self._held.remove(fut)
            except ValueError:
                return  # taken over (its loop closed)
            if isinstance(self._owner, _EngineHold) and not self._held:
                self._owner = None
                self._grant_next()

    def _release_now(self) -> None:
        # Under the mutex.
        if self._held:
            self._owner, self._depth = _EngineHold(), 0
            return
        self._owner = None
        self._grant_next()

    def _take_over_orphans(self) -> bool:
        """Under the mutex: forgets held engine writes that are done (their
        loop may not run their callbacks soon, or ever) or whose loop closed
        (they complete unreported); the object takes their results in
        (``_settle_orphans``). True if that freed the lock."""
        if not self._held:
            return False
        self._held = [
            f for f in self._held if not (f.done() or f.get_loop().is_closed())
        ]
        if not self._held and isinstance(self._owner, _EngineHold):
            self._owner = None
            return True
        return False

    def _grant_next(self) -> None:
        # Under the mutex, with the lock free: hands it to the first waiter
        # still waiting, on its loop's thread.
        while self._owner is None and self._waiters:
            w = self._waiters.popleft()
            if w.fut.done():
                continue  # cancelled meanwhile
            try:
                if _running_loop() is w.loop:
                    w.loop.call_soon(_wake, w.fut)
                else:
                    w.loop.call_soon_threadsafe(_wake, w.fut)
            except RuntimeError:
                continue  # its loop is closed
            w.granted = True
            self._owner, self._depth = w.task or _EngineHold(), 1

    async def __aenter__(self):
        await self.acquire()
        return self

    async def __aexit__(self, *exc):
        self.release()


def _running_loop():
    return asyncio._get_running_loop()


def serialised(method):
    """Runs the async method under its object's ``_serial`` lock (see the
    module docs), after the object settled engine writes whose loop closed
    (``_settle_orphans``). In a child made by ``os.fork`` the object is the
    parent's: every call raises ``RuntimeError`` at once; so does every call
    after ``overlapped.shutdown()``."""

    @functools.wraps(method)
    async def locked(self, *args, **kwargs):
        lock = self._serial
        check_fork(self._serial_pid)
        await lock.acquire()
        try:
            _overlap._check_running()
            self._settle_orphans()
            return await method(self, *args, **kwargs)
        finally:
            lock.release()

    return locked


def check_fork(pid: int) -> None:
    """Raises ``RuntimeError`` in a child made by ``os.fork`` (``pid`` is the
    process that made the file object): its state, the bytes it gathered and
    the engine writes in flight are the parent's, which writes them."""
    if pid != os.getpid():
        raise RuntimeError(
            "overlap: this file was opened before os.fork() and belongs to the parent "
            "process: open it again in the child"
        )


def serialised_close(method):
    """``serialised`` for ``close``: in a child made by ``os.fork`` closing
    the parent's file returns at once (``_close_forked``), leaving the bytes
    it gathered and its operations in flight to the parent."""
    locked = serialised(method)

    @functools.wraps(method)
    async def close(self, *args, **kwargs):
        if self._serial_pid != os.getpid():
            return await self._close_forked()
        return await locked(self, *args, **kwargs)

    return close
