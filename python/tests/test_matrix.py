"""The lifecycle matrix, Python asyncio rows (``docs/acknowledged-bytes.md``).

The engine's matrix (``crates/overlap/tests/matrix.rs``) runs the Rust
front ends; these are the Python package's: every front end (the native
API, ``overlapped.aiofiles``) through every event that may befall the code
that started an operation, for every kind of operation.

- Events: the loop is closed mid-flight (after the task that started the
  operation returned; after it was cancelled); the task is cancelled
  mid-flight; two loops alive on one thread; loops on two threads at once;
  the thread that ran a loop exits mid-flight; ``os.fork`` with the
  operation in flight (parent and child each go on and exit); concurrent
  appenders (tasks, threads, processes) on one file opened "ab".
- Operations: a direct read, a buffered read of data not in the page
  cache, a buffered write, a FIFO read that completes only once written to
  (~120 ms after the event), an open.

For every cell: the right result (an operation nobody awaits any more runs
to completion unobserved, and releases its buffer, which then holds the
data); the in-flight budget back to nothing; no descriptor or thread left
behind; within a time limit. Cells that do not apply say why.

Each front end's cells run one after another in one subprocess (so that
descriptors and threads can be counted, and a hang kills only it), which
prints its rows; the test prints the table and the counts to stderr.
"""

import itertools
import sys

import pytest

import overlapped
from overlap_test_helpers import run_script

SCRIPT = r'''
import asyncio, faulthandler, gc, os, re, signal, sys, threading, time, traceback, weakref
import overlapped
import overlapped.aiofiles

D, FRONT = sys.argv[1], sys.argv[2]
# A fatal signal prints the Python stacks (a hung child is killed with
# SIGABRT: its stack says where it hung).
faulthandler.enable()
LABEL = FRONT + (f" (budget {os.environ['OVERLAP_MAX_INFLIGHT_OPS']})"
                 if os.environ.get("OVERLAP_MAX_INFLIGHT_OPS") else "")
CELL_LIMIT = 20.0          # seconds, per cell (faulthandler kills the process)
FEED_AFTER = 0.12          # the FIFO is written to this long after the event
BS, BLOCKS = 4096, 16
SIZE = BS * BLOCKS

def pattern(size, seed):
    out = bytearray(size)
    for i in range(0, size, 4):
        out[i:i + 4] = ((i * 2654435761 + seed) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(out)

DATA = os.path.join(D, "data.bin")
CONTENT = pattern(SIZE, 7)
with open(DATA, "wb") as g:
    g.write(CONTENT)
    g.flush()
    os.fsync(g.fileno())
OTHER = os.path.join(D, "other.bin")
with open(OTHER, "wb") as g:
    g.write(b"other file")

_slot = [0]
def fresh(prefix):
    _slot[0] += 1
    return os.path.join(D, f"{prefix}-{_slot[0]}")

def fd_count():
    return len(os.listdir("/proc/self/fd"))

def fd_names():
    out = {}
    for f in os.listdir("/proc/self/fd"):
        try:
            out[f] = os.readlink(f"/proc/self/fd/{f}")
        except OSError:
            pass
    return out

def threads():
    """This process's threads but io_uring's kernel workers (iou-wrk, idle
    ones linger for seconds), as {tid: name}."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as c:
                comm = c.read().strip()
        except OSError:
            continue
        if not comm.startswith("iou-wrk"):
            out[t] = comm
    return out

def thread_count():
    """Threads but the engine's pool workers, which the process-wide engine
    keeps (they grow on demand up to the pool's size, checked below)."""
    return sum(1 for n in threads().values() if not n.startswith("overlap-pool"))

def pool_threads():
    return sum(1 for n in threads().values() if n.startswith("overlap-pool"))

_m = re.search(r"up to (\d+) threads", str(overlapped.driver().get("detail")))
POOL_MAX = int(_m.group(1)) if _m else None

def inflight():
    s = overlapped.stats()
    return s["in_flight_ops"], s["in_flight_bytes"]

def wait_until(pred, limit):
    deadline = time.monotonic() + limit
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True

def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)

class Fifo:
    """A FIFO written to FEED_AFTER after ``feed_later()``."""
    def __init__(self):
        self.path = fresh("fifo")
        os.mkfifo(self.path)
        self.data = pattern(BS, 11)
        self.timer = None
    def feed_now(self):
        w = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # a reader is open
        try:
            os.write(w, self.data)
        finally:
            os.close(w)
    def feed_later(self, after=FEED_AFTER):
        self.timer = threading.Timer(after, self.feed_now)
        self.timer.start()
    def join(self):
        if self.timer is not None:
            self.timer.join()
            self.timer = None

def buffer_released(buf, limit=10.0):
    """Whether ``buf`` (a bytearray) is no longer exported within ``limit``:
    resizing raises BufferError while it is."""
    deadline = time.monotonic() + limit
    while True:
        try:
            buf.append(0)
            buf.pop()
            return True
        except BufferError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)

class NA(Exception):
    pass

class ChildExit(BaseException):
    """A forked child leaves the matrix, to exit normally."""

# ---------------------------------------------------------------- operations
#
# An Op starts one operation of a kind from a coroutine (``start``, which
# returns an awaitable in flight: a future of the native API, a task of
# aiofiles'), then checks its result (``check``), or, when nobody awaited
# it, that it ran to completion unobserved (``check_unobserved``).

class Op:
    def __init__(self, kind):
        self.kind = kind
        self.fifo = None
        self.buf = None
        self.files = []      # native files to close afterwards
        self.target = None
        self.data = None

    def prepare(self):
        """Outside any loop: what the operation needs."""
        if self.kind == "direct":
            self.buf = overlapped.AlignedBuffer(SIZE)
        elif self.kind == "uncached":
            evict(DATA)
            self.buf = bytearray(SIZE)
        elif self.kind == "write":
            self.target = fresh("w")
            self.data = pattern(SIZE, _slot[0])
        elif self.kind == "pipe":
            self.fifo = Fifo()
            self.buf = bytearray(BS)

    async def start(self):
        if FRONT == "native":
            return await self._start_native()
        return await self._start_aiofiles()

    async def _start_native(self):
        k = self.kind
        if k == "direct":
            try:
                f = await overlapped.open(DATA, "rb", direct=True)
            except OSError as e:
                raise NA(f"O_DIRECT refused here: {e}")
            self.files.append(f)
            return f.readinto_at(self.buf, 0)
        if k == "uncached":
            f = await overlapped.open(DATA, "rb")
            self.files.append(f)
            return f.readinto_at(self.buf, 0)
        if k == "write":
            f = await overlapped.open(self.target, "wb")
            self.files.append(f)
            return f.write_at(self.data, 0)
        if k == "pipe":
            f = await overlapped.open(self.fifo.path, "r+b")  # r+: never blocks
            self.files.append(f)
            return f.readinto_at(self.buf, 0)
        if k == "open":
            return overlapped.open(DATA, "rb")._start()
        raise AssertionError(k)

    async def _start_aiofiles(self):
        # The file is opened first; the operation in flight at the event is
        # the task's read or write (or, for "open", the open itself).
        k = self.kind
        if k == "open":
            async def go():
                f = await overlapped.aiofiles.open(DATA, "rb")
                self.files.append(f)
                return f
            t = asyncio.ensure_future(go())
        elif k == "uncached":
            f = await overlapped.aiofiles.open(DATA, "rb")
            self.files.append(f)
            t = asyncio.ensure_future(f.readinto(self.buf))
        elif k == "write":
            f = await overlapped.aiofiles.open(self.target, "wb")
            self.files.append(f)
            t = asyncio.ensure_future(f.write(self.data))
        else:
            raise AssertionError(k)
        await asyncio.sleep(0)  # the task submits its operation
        return t

    def after_event(self):
        """The event happened: the FIFO is written to a little later."""
        if self.fifo is not None:
            self.fifo.feed_later()

    async def check(self, res):
        k = self.kind
        if k in ("direct", "uncached"):
            assert res == SIZE, res
            assert bytes(self.buf) == CONTENT, "wrong bytes"
        elif k == "write":
            assert res == SIZE, res
            with open(self.target, "rb") as g:
                assert g.read() == self.data, "wrong file contents"
        elif k == "pipe":
            assert res == BS, res
            assert bytes(self.buf) == self.fifo.data, "wrong bytes"
        elif k == "open":
            if FRONT == "native":
                assert isinstance(res, overlapped.File), res
                assert await res.read_at(10, 0) == CONTENT[:10]
                await res.close()
            else:
                assert await res.read(10) == CONTENT[:10]
                await res.close()

    def check_unobserved(self):
        """Nobody awaits the operation any more (its loop closed, or its
        task was cancelled): it still runs to completion, releases its
        buffer, and its effect is there."""
        k = self.kind
        if self.fifo is not None:
            self.fifo.join()
        if k in ("uncached", "pipe"):
            assert buffer_released(self.buf), "the read's buffer is still exported"
            want = CONTENT if k == "uncached" else self.fifo.data
            # (aiofiles' cancelled readinto may have been cancelled before
            # its read started: then nothing was read.)
            if not (FRONT == "aiofiles" and not any(self.buf)):
                assert bytes(self.buf) == want, "the read's buffer lacks the data"
        elif k == "direct":
            assert wait_until(lambda: bytes(self.buf) == CONTENT, 10), "the direct read did not land"
        elif k == "write":
            def landed():
                try:
                    with open(self.target, "rb") as g:
                        return g.read() == self.data
                except FileNotFoundError:
                    return False
            if FRONT == "native":
                assert wait_until(landed, 10), "the write did not land"

    async def cleanup(self):
        for f in self.files:
            await f.close()
        self.files.clear()

    def cleanup_sync(self):
        """Closes files from outside any loop."""
        if self.files:
            asyncio.run(self.cleanup())
        if self.fifo is not None:
            self.fifo.join()

async def read_other():
    async with overlapped.open(OTHER, "rb") as f:
        return await f.read_at(100, 0)

def later_io_works():
    """A later operation, on a new loop, completes (the budget is back)."""
    assert asyncio.run(asyncio.wait_for(read_other(), 10)) == b"other file"

# -------------------------------------------------------------------- events

def ev_loop_closed(kind, cancelled):
    op = Op(kind)
    op.prepare()
    loop = asyncio.new_event_loop()
    async def starter():
        fut = await op.start()
        if cancelled:
            await fut  # cancelled below
        # else: returns with the operation in flight
    async def first():
        t = asyncio.ensure_future(starter())
        await asyncio.sleep(0.02)
        if cancelled:
            t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            pass
    try:
        loop.run_until_complete(first())
    finally:
        loop.close()
    op.after_event()
    op.check_unobserved()
    loop_ref = weakref.ref(loop)
    del loop
    op.cleanup_sync()  # (an aiofiles file refers to its loop)
    # Nothing of overlap's keeps the closed loop alive.
    gc.collect()
    assert loop_ref() is None, "the closed loop is still referenced"
    later_io_works()

def ev_task_cancelled(kind):
    op = Op(kind)
    op.prepare()
    async def main():
        fut = await op.start()
        async def waiter():
            return await fut
        t = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.01)
        t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            pass
        op.after_event()
        # The loop goes on; the operation completes unobserved.
        await asyncio.get_running_loop().run_in_executor(None, op.check_unobserved)
        await op.cleanup()
        assert await read_other() == b"other file"
    asyncio.run(asyncio.wait_for(main(), CELL_LIMIT))

def ev_two_loops_one_thread(kind):
    a, b, c, d = Op(kind), Op(kind), Op(kind), Op(kind)
    l1, l2 = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        # Loop 1 starts an operation and stops running, not closed.
        a.prepare()
        fa = l1.run_until_complete(a.start())
        a.after_event()
        # Loop 2 runs one to completion meanwhile.
        b.prepare()
        async def whole(op):
            fut = await op.start()
            op.after_event()
            await op.check(await fut)
            await op.cleanup()
        l2.run_until_complete(whole(b))
        b.cleanup_sync()
        # Back to loop 1: its operation completed while it was not running.
        async def finish(op, fut):
            await op.check(await asyncio.wait_for(fut, 10))
            await op.cleanup()
        l1.run_until_complete(finish(a, fa))
        # Both: each starts one, and each loop completes its own in turn.
        c.prepare()
        d.prepare()
        fc = l1.run_until_complete(c.start())
        c.after_event()  # (with a budget of 1, d waits for c's share)
        fd = l2.run_until_complete(d.start())
        d.after_event()
        l2.run_until_complete(finish(d, fd))
        l1.run_until_complete(finish(c, fc))
    finally:
        l1.close()
        l2.close()
    for op in (a, b, c, d):
        op.cleanup_sync()

def ev_two_threads(kind):
    errors = []
    ops = [Op(kind), Op(kind)]
    for op in ops:
        op.prepare()
    go = threading.Barrier(2)
    def body(op):
        try:
            async def main():
                go.wait(5)
                fut = await op.start()
                op.after_event()
                await op.check(await asyncio.wait_for(fut, 10))
                await op.cleanup()
            asyncio.run(main())
        except BaseException:
            errors.append(traceback.format_exc())
    ts = [threading.Thread(target=body, args=(op,)) for op in ops]
    for t in ts:
        t.start()
    for t in ts:
        t.join(CELL_LIMIT)
        assert not t.is_alive(), "a loop's thread did not finish"
    for op in ops:
        op.cleanup_sync()
    assert not errors, errors[0]

def ev_thread_exits(kind):
    op = Op(kind)
    op.prepare()
    box = {}
    def body():
        loop = asyncio.new_event_loop()
        box["loop"] = loop
        box["fut"] = loop.run_until_complete(op.start())
        # The thread exits, its loop not closed, the operation in flight.
    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert not t.is_alive()
    op.after_event()
    # Another thread's loop does I/O meanwhile.
    later_io_works()
    # The loop the thread left runs here and gets the right result.
    loop, fut = box.pop("loop"), box.pop("fut")
    try:
        async def finish():
            await op.check(await asyncio.wait_for(fut, 10))
            await op.cleanup()
        loop.run_until_complete(finish())
    finally:
        loop.close()
    op.cleanup_sync()

def ev_fork(kind):
    op = Op(kind)
    op.prepare()
    loop = asyncio.new_event_loop()
    try:
        fut = loop.run_until_complete(op.start())
        faulthandler.cancel_dump_traceback_later()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                faulthandler.dump_traceback_later(CELL_LIMIT, exit=True)
                # The child goes on: a fresh operation of the kind, on a
                # loop of its own, then exits normally.
                child = Op(kind)
                child.prepare()
                async def main():
                    f2 = await child.start()
                    child.after_event()
                    await child.check(await asyncio.wait_for(f2, 10))
                    await child.cleanup()
                asyncio.run(main())
                if child.fifo is not None:
                    child.fifo.join()
            except NA:
                pass
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            if code:
                os._exit(code)
            raise ChildExit  # then a normal exit: atexit handlers, finalizers
        faulthandler.dump_traceback_later(CELL_LIMIT, exit=True)
        # The child exits while the parent's operation may be in flight.
        deadline = time.monotonic() + 5
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGABRT)  # its stack, on stderr
                time.sleep(0.5)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError("the child did not exit")
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(status) == 0, f"child: {status}"
        op.after_event()
        async def finish():
            await op.check(await asyncio.wait_for(fut, 10))
            await op.cleanup()
        loop.run_until_complete(finish())
    finally:
        loop.close()
    op.cleanup_sync()

RECORD = 512
def records(who, n):
    return [(f"{who:>8}:{i:>6}:".encode() * RECORD)[:RECORD - 1] + b"\n" for i in range(n)]

async def append_records(path, recs):
    if FRONT == "native":
        async with overlapped.open(path, "ab") as f:
            for r in recs:
                assert await f.write_at(r, 0) == len(r)
    else:
        async with overlapped.aiofiles.open(path, "ab", buffering=0) as f:
            for r in recs:
                assert await f.write(r) == len(r)

def check_appended(path, expected):
    with open(path, "rb") as g:
        got = g.read()
    assert len(got) == RECORD * len(expected), (len(got), RECORD * len(expected))
    lines = [got[i:i + RECORD] for i in range(0, len(got), RECORD)]
    assert sorted(lines) == sorted(expected), "records torn, lost or doubled"

def ev_appenders(how):
    path = fresh("append")
    N, PER = 4, 32
    expected = []
    if how == "tasks":
        async def main():
            await asyncio.gather(*(append_records(path, records(i, PER)) for i in range(N)))
        asyncio.run(asyncio.wait_for(main(), CELL_LIMIT))
        expected = [r for i in range(N) for r in records(i, PER)]
    elif how == "threads":
        errors = []
        def body(i):
            try:
                asyncio.run(append_records(path, records(i, PER)))
            except BaseException:
                errors.append(traceback.format_exc())
        ts = [threading.Thread(target=body, args=(i,)) for i in range(N)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(CELL_LIMIT)
            assert not t.is_alive()
        assert not errors, errors[0]
        expected = [r for i in range(N) for r in records(i, PER)]
    else:  # processes, the parent one of them
        faulthandler.cancel_dump_traceback_later()
        pids = []
        for i in range(1, N):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    faulthandler.dump_traceback_later(CELL_LIMIT, exit=True)
                    asyncio.run(append_records(path, records(i, PER)))
                except BaseException:
                    traceback.print_exc()
                    code = 1
                os._exit(code)
            pids.append(pid)
        faulthandler.dump_traceback_later(CELL_LIMIT, exit=True)
        asyncio.run(append_records(path, records(0, PER)))
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, f"appender child: {status}"
        expected = [r for i in range(N) for r in records(i, PER)]
    check_appended(path, expected)

# --------------------------------------------------------------------- table

KINDS = ["direct", "uncached", "write", "pipe", "open"]
EVENTS = [
    ("loop-closed-returned", lambda k: ev_loop_closed(k, cancelled=False)),
    ("loop-closed-cancelled", lambda k: ev_loop_closed(k, cancelled=True)),
    ("task-cancelled", ev_task_cancelled),
    ("two-loops-one-thread", ev_two_loops_one_thread),
    ("loops-on-two-threads", ev_two_threads),
    ("loop-thread-exits", ev_thread_exits),
    ("fork", ev_fork),
    ("appenders-tasks", lambda k: ev_appenders("tasks")),
    ("appenders-threads", lambda k: ev_appenders("threads")),
    ("appenders-processes", lambda k: ev_appenders("processes")),
]

def not_applicable(event, kind):
    if event.startswith("appenders") and kind != "write":
        return "appending is a write"
    if FRONT == "aiofiles":
        if kind == "direct":
            return "aiofiles has no O_DIRECT"
        if kind == "pipe":
            return "aiofiles opens a FIFO with the thread pool, as aiofiles does (no engine operation)"
    return None

def warm_up():
    """The process's lazily made state (the engine, its threads, the
    default executor's) exists before the first count."""
    async def main():
        assert await read_other() == b"other file"
        async with overlapped.aiofiles.open(OTHER, "rb") as f:
            await f.read()
        await asyncio.get_running_loop().run_in_executor(None, lambda: None)
    asyncio.run(main())

def main():
    warm_up()
    passed, failed, na = 0, [], 0
    reasons = []
    only = os.environ.get("OVERLAP_MATRIX_ONLY")  # an event's name, to debug it
    for event, run in EVENTS:
        if only and event != only:
            continue
        row = f"  {LABEL} x {event}:"
        for kind in KINDS:
            why = not_applicable(event, kind)
            if why is not None:
                na += 1
                if why not in reasons:
                    reasons.append(why)
                row += f" {kind}=n/a"
                continue
            gc.collect()
            fd0, th0, inf0 = fd_count(), thread_count(), inflight()
            started = time.monotonic()
            faulthandler.dump_traceback_later(CELL_LIMIT, exit=True)
            err = None
            try:
                run(kind)
            except ChildExit:
                raise
            except NA as e:
                err = e
            except BaseException:
                err = traceback.format_exc()
            faulthandler.cancel_dump_traceback_later()
            if isinstance(err, NA):
                na += 1
                if str(err) not in reasons:
                    reasons.append(str(err))
                row += f" {kind}=n/a"
                continue
            gc.collect()
            if err is None and not wait_until(lambda: inflight() == (0, 0), 5):
                err = f"budget: {inflight()} in flight after, {inf0} before"
            if err is None and not wait_until(lambda: fd_count() <= fd0, 5):
                err = f"descriptors: {fd_count()} after, {fd0} before: {fd_names()}"
            if err is None and not wait_until(lambda: thread_count() <= th0, 5):
                err = f"threads: {thread_count()} after, {th0} before: {sorted(threads().values())}"
            if err is None and POOL_MAX is not None and pool_threads() > POOL_MAX:
                err = f"pool threads: {pool_threads()}, more than the pool's {POOL_MAX}"
            if err is None:
                passed += 1
                row += f" {kind}=ok({int((time.monotonic() - started) * 1000)}ms)"
            else:
                row += f" {kind}=FAILED"
                err = str(err).strip()
                failed.append(f"{LABEL} x {event} x {kind}: {err.splitlines()[-1]}")
                print(f"{LABEL} x {event} x {kind}: {err}", file=sys.stderr, flush=True)
        print(row, flush=True)
    print(f"  n/a: {'; '.join(reasons)}")
    for f in failed:
        print(f"FAILED {f}")
    print(f"COUNTS {passed} {len(failed)} {na}", flush=True)

try:
    main()
except ChildExit:
    sys.exit(0)
'''

FRONTS = ["native", "aiofiles"]
# Each front end runs twice: with the default in-flight budget, and with a
# budget of one operation, where an operation that kept its share after
# its loop closed, its task was cancelled or its thread exited would make
# every later one wait (a hang, caught by the time limit).
BUDGETS = [None, 1]


def test_lifecycle_matrix(tmp_path, capsys):
    driver = overlapped.driver()["kind"]
    lines, counts, failures, details = [], [0, 0, 0], [], []
    for budget, front in itertools.product(BUDGETS, FRONTS):
        d = tmp_path / f"{front}-{budget}"
        d.mkdir()
        env = {"OVERLAP_MAX_INFLIGHT_OPS": str(budget)} if budget else {}
        out, err = run_script(SCRIPT, tmp_path, d, front, timeout=300, env=env)
        for line in out.splitlines():
            if line.startswith("COUNTS "):
                for i, n in enumerate(line.split()[1:]):
                    counts[i] += int(n)
            else:
                lines.append(line)
                if line.startswith("FAILED "):
                    failures.append(line)
        if err.strip():
            details.append(err)
    passed, failed, na = counts
    table = "\n".join(
        [f"lifecycle matrix (python, {driver}):", *lines,
         f"lifecycle matrix (python, {driver}): {passed} passed, {failed} failed, {na} not applicable"]
    )
    # On the terminal whether the test passes or not (and in the failure).
    with capsys.disabled():
        print("\n" + table, file=sys.__stderr__, flush=True)
    assert passed > 0, table
    assert not failures, table + "\n\n" + "\n".join(details)


FORK_WHILE_COMPLETING = r'''
import asyncio, os, sys, time
import overlapped

# Operations complete on the engine's threads (the pool's workers) while
# the loop's thread forks again and again: a child must never inherit a
# lock of its hub held by one of those threads (they are not in the child).
# Each child exits at once (after overlap's at-fork hook ran); one that
# does not exit within its limit hung in that hook.
PATH, FORKS = sys.argv[1], int(sys.argv[2])
with open(PATH, "wb") as g:
    g.write(b"x" * 4096)

async def main():
    stop = False
    async def churn():
        # Opens (an open, then a statx) go to the engine's threads.
        while not stop:
            fs = await asyncio.gather(*(overlapped.open(PATH, "rb") for _ in range(8)))
            await asyncio.gather(*(f.close() for f in fs))
    workers = [asyncio.ensure_future(churn()) for _ in range(2)]
    await asyncio.sleep(0.05)
    for i in range(FORKS):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        deadline = time.monotonic() + 2
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                print(f"child {i} hung after fork", flush=True)
                sys.exit(3)
            await asyncio.sleep(0.001)
        assert os.waitstatus_to_exitcode(status) == 0, status
    stop = True
    await asyncio.gather(*workers)

asyncio.run(main())
print("ok")
'''


def test_fork_while_operations_complete_on_engine_threads(tmp_path):
    """The lifecycle matrix's fork row, made to hit its race: hundreds of
    forks while the pool's workers complete operations."""
    out, _ = run_script(
        FORK_WHILE_COMPLETING, tmp_path, tmp_path / "f.bin", 400,
        timeout=60, env={"OVERLAP_DRIVER": "pool"},
    )
    assert out.strip() == "ok"
