"""One ``overlapped.aiofiles`` file object shared by many tasks (what a logging
handler such as aiologger's does: ``await f.write(line); await f.flush()``
per record, from many tasks), on loops of several threads, and with tasks
cancelled mid-flush: every line acknowledged lands exactly once, whole, and
nothing else does (``docs/acknowledged-bytes.md``, section 4)."""

import asyncio
import os
import random
import threading

import pytest

import overlapped.aiofiles

MODES = ["w", "wb", "a", "ab", "r+", "rb+"]
LIMIT = 120.0  # seconds: a hang is a failure


def line(task: int, i: int) -> str:
    # Lengths vary, so that lines straddle the buffer's boundaries.
    return f"{task:04d}:{i:06d}:" + "x" * ((task * 7 + i * 13) % 90) + "\n"


def encode(mode: str, s: str):
    return s.encode() if "b" in mode else s


def prepare(path, mode: str, prefix: bytes = b"") -> None:
    # "r+" needs the file; "a" keeps what is there.
    if "r" in mode or "a" in mode:
        path.write_bytes(prefix)


def check_lines(path, expected, may=(), prefix: bytes = b"") -> None:
    """The file holds ``prefix``, then each of ``expected`` exactly once and
    each of ``may`` at most once, whole, in any order; nothing else."""
    got = path.read_bytes()
    assert got.startswith(prefix)
    got = got[len(prefix):]
    assert b"\0" not in got, "NUL bytes: a hole where bytes were never written"
    assert got == b"" or got.endswith(b"\n"), f"torn last line: {got[-80:]!r}"
    lines = got.split(b"\n")[:-1]
    want = {s.encode() for s in expected}
    optional = {s.encode() for s in may}
    seen = set()
    for ln in lines:
        ln = ln + b"\n"
        assert ln not in seen, f"written twice: {ln!r}"
        assert ln in want or ln in optional, f"torn or foreign line: {ln[:80]!r}"
        seen.add(ln)
    missing = want - seen
    assert not missing, f"{len(missing)} acknowledged lines missing, e.g. {sorted(missing)[0]!r}"


async def write_lines(f, mode: str, task: int, count: int, acked: list, flush=True) -> None:
    for i in range(count):
        s = line(task, i)
        await f.write(encode(mode, s))
        acked.append(s)
        if flush:
            await f.flush()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("buffering", [-1, 64])
def test_many_tasks_write_and_flush_one_object(tmp_path, mode, buffering):
    path = tmp_path / "shared.log"
    prefix = b"kept\n" if "a" in mode else b""
    prepare(path, mode, prefix)
    tasks, per = 30, 100
    acked: list = []

    async def main():
        async with overlapped.aiofiles.open(path, mode, buffering=buffering) as f:
            await asyncio.gather(*(write_lines(f, mode, t, per, acked) for t in range(tasks)))
            if "a" not in mode:
                # The position is the file's end: every write moved it once.
                assert await f.tell() == sum(len(s.encode()) for s in acked)

    asyncio.run(asyncio.wait_for(main(), LIMIT))
    assert len(acked) == tasks * per
    check_lines(path, acked, prefix=prefix)


@pytest.mark.parametrize("mode", MODES)
def test_tasks_cancelled_mid_flush_lose_and_double_nothing(tmp_path, mode):
    """Tasks are cancelled at random while they write and flush: a write
    acknowledged is in the file once, a write not acknowledged at most once
    (its bytes may have been gathered already), and none is torn."""
    path = tmp_path / "cancelled.log"
    prepare(path, mode)
    tasks, per = 24, 60
    acked: list = []
    rng = random.Random(1234)

    async def main():
        async with overlapped.aiofiles.open(path, mode, buffering=128) as f:
            ts = [asyncio.ensure_future(write_lines(f, mode, t, per, acked)) for t in range(tasks)]
            for _ in range(40):
                await asyncio.sleep(rng.random() * 0.002)
                rng.choice(ts).cancel()
            await asyncio.gather(*ts, return_exceptions=True)
            # The file object is still consistent: one more line, flushed.
            await f.write(encode(mode, line(9999, 0)))
            await f.flush()
            acked.append(line(9999, 0))

    asyncio.run(asyncio.wait_for(main(), LIMIT))
    every = [line(t, i) for t in range(tasks) for i in range(per)]
    check_lines(path, acked, may=every)


@pytest.mark.parametrize("mode", ["w", "ab"])
def test_loops_on_several_threads_share_one_object(tmp_path, mode):
    """One file object, used at once by loops on three threads."""
    path = tmp_path / "threads.log"
    prepare(path, mode)
    acked: list = []
    errors: list = []
    box = {}

    async def opener():
        box["f"] = await overlapped.aiofiles.open(path, mode)

    asyncio.run(opener())
    f = box["f"]
    go = threading.Barrier(3)

    def body(t):
        try:
            async def main():
                go.wait(10)
                await write_lines(f, mode, t, 200, acked)
            asyncio.run(asyncio.wait_for(main(), LIMIT))
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    ts = [threading.Thread(target=body, args=(t,)) for t in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(LIMIT)
        assert not t.is_alive(), "a thread's loop hung"
    assert not errors, errors
    asyncio.run(asyncio.wait_for(f.close(), LIMIT))
    check_lines(path, acked)


def test_reads_seeks_and_tells_between_writers_stay_consistent(tmp_path):
    """A task that seeks, tells and reads on the object the writers use
    sees a position consistent with the file (never behind what reached
    it), reads nothing past the end, and the writers lose nothing."""
    path = tmp_path / "mixed.log"
    path.write_bytes(b"")
    acked: list = []

    async def prober(f, stop):
        probes = 0
        while not stop.is_set() or probes == 0:
            end = await f.seek(0, os.SEEK_END)
            assert end >= 0
            on_disk = os.stat(path).st_size
            assert on_disk <= await f.tell()
            assert await f.read(16) == b""
            probes += 1
            await asyncio.sleep(0)

    async def main():
        async with overlapped.aiofiles.open(path, "rb+") as f:
            stop = asyncio.Event()
            p = asyncio.ensure_future(prober(f, stop))
            await asyncio.gather(*(write_lines(f, "rb+", t, 50, acked) for t in range(10)))
            stop.set()
            await p

    asyncio.run(asyncio.wait_for(main(), LIMIT))
    check_lines(path, acked)


@pytest.mark.parametrize("mode", ["w", "ab"])
def test_object_outlives_the_loop_of_a_cancelled_flush(tmp_path, mode):
    """A flush cancelled on a loop that then closes (its write perhaps still
    in flight), and the object used on the next loop: no hang, and every
    acknowledged line once."""
    path = tmp_path / "outlives.log"
    prepare(path, mode)
    acked: list = []
    box = {}

    async def opener():
        box["f"] = await overlapped.aiofiles.open(path, mode, buffering=1 << 16)

    asyncio.run(opener())
    f = box["f"]
    for round_ in range(100):
        loop = asyncio.new_event_loop()

        async def cancelled_flush():
            await write_lines(f, mode, round_, 50, acked, flush=False)
            t = asyncio.ensure_future(f.flush())
            await asyncio.sleep(0)
            t.cancel()

        try:
            loop.run_until_complete(cancelled_flush())
        finally:
            loop.close()

    async def finish():
        await write_lines(f, mode, 999, 10, acked)
        await f.close()

    asyncio.run(asyncio.wait_for(finish(), LIMIT))
    check_lines(path, acked)


@pytest.mark.parametrize("mode", ["w", "ab"])
def test_a_task_that_swallows_its_cancellation_flushes_nothing_twice(tmp_path, mode):
    path = tmp_path / "swallow.log"
    prepare(path, mode)
    acked: list = []

    async def main():
        async with overlapped.aiofiles.open(path, mode, buffering=1 << 16) as f:
            for r in range(30):
                await write_lines(f, mode, r, 20, acked, flush=False)
                task = asyncio.current_task()
                asyncio.get_running_loop().call_soon(task.cancel)
                try:
                    await f.flush()
                except asyncio.CancelledError:
                    task.uncancel() if hasattr(task, "uncancel") else None
                await f.flush()

    asyncio.run(asyncio.wait_for(main(), LIMIT))
    check_lines(path, acked)


@pytest.mark.parametrize("mode", MODES)
def test_bytes_behind_reach_the_file_when_the_loop_ends(tmp_path, mode):
    """A file object left open and unflushed, still referenced, when its
    loop closes: what ``write`` acknowledged is in the file once the loop
    closed, while the process lives on (and a later flush writes nothing
    twice)."""
    path = tmp_path / "loop-end.log"
    prepare(path, mode)
    acked: list = []
    loop = asyncio.new_event_loop()

    async def main():
        f = await overlapped.aiofiles.open(path, mode, buffering=1 << 20)
        await write_lines(f, mode, 0, 300, acked, flush=False)
        return f

    try:
        f = loop.run_until_complete(asyncio.wait_for(main(), LIMIT))
    finally:
        loop.close()
    check_lines(path, acked)

    async def later():
        await write_lines(f, mode, 1, 10, acked)
        await f.close()

    asyncio.run(asyncio.wait_for(later(), LIMIT))
    check_lines(path, acked)
