"""The acknowledged-byte torture suite, Python rows (``docs/acknowledged-bytes.md``,
section 6): the package's ``File`` (FRONT ``python-file``) and
``overlapped.aiofiles`` in each write mode (``python-aiofiles-MODE``), through
the six scenarios, on the driver this run's engine uses.

Each cell runs in a fresh interpreter (``run_script``: a hang kills it and
fails the cell) and prints one line at the start of a line of the test log,
with pytest's capture off so that ``pytest -q`` shows it:

    torture: FRONT DRIVER SCENARIO ok | FAIL: why | n/a: why | SKIPPED: why
"""

import os
import subprocess
from pathlib import Path

import pytest

import overlapped
from overlap_test_helpers import run_script

REPO = Path(__file__).resolve().parents[2]
FRONTS = ["python-file"] + [
    f"python-aiofiles-{m}" for m in ["w", "wb", "a", "ab", "r+", "rb+"]
]
SCENARIOS = [
    "drop-behind",
    "shared-writers",
    "close-racing-reads",
    "shutdown-in-flight",
    "fork-in-flight",
    "injected-failure",
]


def driver_name() -> str:
    kind = overlapped.driver()["kind"]
    return {"uring": "uring", "aio+pool": "aio", "pool": "pool"}.get(kind, kind)


# What every scenario script shares: the checks, and the lines the writers
# write (lengths vary, so that lines straddle buffer boundaries).
COMMON = r'''
import asyncio, errno, gc, os, sys, time
import overlapped
import overlapped.aiofiles

FRONT, D = sys.argv[1], sys.argv[2]
MODE = FRONT[len("python-aiofiles-"):] if FRONT.startswith("python-aiofiles-") else None
BINARY = MODE is not None and "b" in MODE

def line(task, i, pad=None):
    n = (task * 7 + i * 13) % 90 if pad is None else pad
    return f"{task:04d}:{i:06d}:" + "x" * n + "\n"

def enc(s):
    return s.encode() if BINARY else s

# What an appending mode must keep of the file's earlier contents.
PFX = b"earlier\n" if MODE and "a" in MODE else b""

def prepare(path, prefix=b""):
    if MODE and ("r" in MODE or "a" in MODE):
        with open(path, "wb") as g:
            g.write(prefix)

def check_lines(path, acked, may=(), prefix=b""):
    """prefix, then every acked line exactly once and every ``may`` line at
    most once, whole, in any order; nothing else."""
    with open(path, "rb") as g:
        got = g.read()
    assert got.startswith(prefix), "the file's earlier contents changed"
    got = got[len(prefix):]
    assert b"\0" not in got, "NUL bytes: a hole where bytes were never written"
    assert got == b"" or got.endswith(b"\n"), f"torn last line {got[-60:]!r}"
    want = {s.encode() for s in acked}
    optional = {s.encode() for s in may}
    seen = set()
    for ln in got.split(b"\n")[:-1]:
        ln += b"\n"
        assert ln not in seen, f"written twice: {ln[:60]!r}"
        assert ln in want or ln in optional, f"torn or foreign line {ln[:60]!r}"
        seen.add(ln)
    missing = want - seen
    assert not missing, f"{len(missing)} of {len(want)} acknowledged lines missing"

def wait_idle(limit=10.0):
    deadline = time.monotonic() + limit
    while overlapped.stats()["in_flight_ops"]:
        assert time.monotonic() < deadline, "operations still in flight"
        time.sleep(0.005)

async def write_lines(f, task, count, acked, flush=True):
    for i in range(count):
        s = line(task, i)
        await f.write(enc(s))
        acked.append(s)
        if flush:
            await f.flush()

def record(i, size=4096):
    return bytes([(i * 31 + k) % 251 + 1 for k in range(251)]) * (size // 251) + b"\n" * (size % 251)

def na(why):
    print("n/a:", why)
    sys.exit(0)
'''

DROP_BEHIND = r'''
def aiofiles_cell():
    behind, inflight = os.path.join(D, "behind.log"), os.path.join(D, "inflight.log")
    prepare(behind, PFX)
    prepare(inflight, PFX)
    acked_b, acked_i, queued = [], [], []
    loop = asyncio.new_event_loop()
    async def main():
        # Bytes behind: gathered in a large buffer, never flushed.
        f = await overlapped.aiofiles.open(behind, MODE, buffering=1 << 20)
        await write_lines(f, 0, 300, acked_b, flush=False)
        # A flush in flight, with writers queued behind it (not acknowledged).
        g = await overlapped.aiofiles.open(inflight, MODE, buffering=1 << 16)
        await write_lines(g, 1, 300, acked_i, flush=False)
        asyncio.ensure_future(g.flush())
        for t in range(2, 6):
            queued.extend(line(t, i) for i in range(5))
            asyncio.ensure_future(write_lines(g, t, 5, []))
        await asyncio.sleep(0)
        return f, g
    f, g = loop.run_until_complete(main())
    loop.close()  # the flush's write in flight, its tasks never finished
    del f, g
    gc.collect()
    wait_idle()
    gc.collect()
    check_lines(behind, acked_b, prefix=PFX)
    check_lines(inflight, acked_i, may=queued, prefix=PFX)

def file_cell():
    path = os.path.join(D, "native.bin")
    loop = asyncio.new_event_loop()
    acked, started = [], []
    async def main():
        f = await overlapped.open(path, "wb")
        for i in range(32):
            await f.write_at(record(i), i * 4096)
            acked.append(i)
        for i in range(32, 96):
            f.write_at(record(i), i * 4096)  # in flight, never awaited
            started.append(i)
        return f
    f = loop.run_until_complete(main())
    loop.close()
    del f
    gc.collect()
    wait_idle()
    with open(path, "rb") as g:
        got = g.read()
    for i in acked:
        assert got[i * 4096:(i + 1) * 4096] == record(i), f"acknowledged record {i} lost"
    for i in started:
        # Started writes complete on the engine's threads.
        assert got[i * 4096:(i + 1) * 4096] == record(i), f"started record {i} missing"

aiofiles_cell() if MODE else file_cell()
print("ok")
'''

SHARED = r'''
def aiofiles_cell():
    path = os.path.join(D, "shared.log")
    prepare(path, PFX)
    acked = []
    async def main():
        async with overlapped.aiofiles.open(path, MODE) as f:
            await asyncio.gather(*(write_lines(f, t, 60, acked) for t in range(40)))
    asyncio.run(asyncio.wait_for(main(), 60))
    assert len(acked) == 40 * 60
    check_lines(path, acked, prefix=PFX)

def file_cell():
    path = os.path.join(D, "shared.bin")
    async def writer(f, t):
        for i in range(16):
            k = t * 16 + i
            assert await f.write_at(record(k), k * 4096) == 4096
    async def appender(f, t, acked):
        for i in range(16):
            s = line(t, i)
            assert await f.write_at(s.encode(), 0) == len(s)
            acked.append(s)
    async def main():
        async with overlapped.open(path, "wb") as f:
            await asyncio.gather(*(writer(f, t) for t in range(32)))
        acked = []
        async with overlapped.open(path + ".log", "ab") as f:
            await asyncio.gather(*(appender(f, t, acked) for t in range(32)))
        return acked
    acked = asyncio.run(asyncio.wait_for(main(), 60))
    with open(path, "rb") as g:
        got = g.read()
    assert len(got) == 32 * 16 * 4096
    for k in range(32 * 16):
        assert got[k * 4096:(k + 1) * 4096] == record(k), f"record {k} wrong"
    check_lines(path + ".log", acked)

aiofiles_cell() if MODE else file_cell()
print("ok")
'''

CLOSE_RACING = r'''
SIZE = 1 << 20
CONTENT = b"".join(line(7, i, pad=63).encode() for i in range(SIZE // 64))[:SIZE]
path = os.path.join(D, "data.bin")
with open(path, "wb") as g:
    g.write(CONTENT)

def check_reports(reports):
    """No buffer changed after its read reported (the engine idle now)."""
    wait_idle()
    for buf, snapshot in reports:
        assert bytes(buf) == snapshot, "a buffer changed after its read reported"

def binary_cell():
    reports, closed_errors = [], []
    async def reader(f, views):
        buf = bytearray(b"\xee" * 4096)
        try:
            n = await f.readinto(memoryview(buf) if views else buf)
        except ValueError:
            closed_errors.append(1)
            reports.append((buf, bytes(buf)))
            assert buf == bytearray(b"\xee" * 4096), "a closed read touched the buffer"
            return None
        reports.append((buf, bytes(buf)))
        return bytes(buf[:n])
    async def main():
        f = await overlapped.aiofiles.open(path, MODE)
        ts = [asyncio.ensure_future(reader(f, k % 2)) for k in range(64)]
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(f.close())
        ts += [asyncio.ensure_future(reader(f, k % 2)) for k in range(64)]
        out = await asyncio.gather(*ts)
        await closing
        return out
    chunks = asyncio.run(asyncio.wait_for(main(), 60))
    got = [c for c in chunks if c is not None]
    # Reads on one object are serialised: each got the next 4096 bytes.
    offsets = set()
    for c in got:
        off = CONTENT.find(c)
        assert off >= 0 and off % 4096 == 0 and len(c) == 4096, "a read returned wrong bytes"
        offsets.add(off)
    assert len(offsets) == len(got), "two reads got the same bytes"
    assert closed_errors, "close did not race the reads (none saw it)"
    check_reports(reports)

def text_cell():
    results = []
    async def reader(f):
        try:
            results.append(await f.read(64))
        except ValueError:
            results.append(None)
    async def main():
        f = await overlapped.aiofiles.open(path, MODE)
        ts = [asyncio.ensure_future(reader(f)) for _ in range(64)]
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(f.close())
        ts += [asyncio.ensure_future(reader(f)) for _ in range(64)]
        await asyncio.gather(*ts)
        await closing
        assert overlapped.stats()["in_flight_ops"] == 0, "close did not wait for the reads"
    asyncio.run(asyncio.wait_for(main(), 60))
    got = [r for r in results if r is not None]
    assert got and None in results, "close did not race the reads"
    text = CONTENT.decode()
    assert "".join(got) == text[:64 * len(got)], "the reads' results are wrong"

def file_cell():
    reports, outcomes = [], []
    async def reader(f, k, views):
        buf = bytearray(b"\xee" * 4096)
        target = memoryview(buf) if views else buf
        try:
            n = await f.readinto_at(target, k * 4096)
        except ValueError:
            reports.append((buf, bytes(buf)))
            outcomes.append("closed")
            return
        reports.append((buf, bytes(buf)))
        assert n == 4096 and bytes(buf) == CONTENT[k * 4096:(k + 1) * 4096], f"read {k} wrong"
        outcomes.append("data")
    async def main():
        f = await overlapped.open(path, "rb")
        ts = [asyncio.ensure_future(reader(f, k, k % 2)) for k in range(128)]
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(f.close())
        ts += [asyncio.ensure_future(reader(f, k, k % 2)) for k in range(128, 256)]
        await closing
        assert overlapped.stats()["in_flight_ops"] == 0, "close did not wait for the reads"
        await asyncio.gather(*ts)
        try:
            await f.readinto_at(bytearray(16), 0)
        except ValueError:
            pass
        else:
            raise AssertionError("a read after close succeeded")
    asyncio.run(asyncio.wait_for(main(), 60))
    assert "data" in outcomes and "closed" in outcomes, outcomes
    check_reports(reports)

if MODE is None:
    file_cell()
elif MODE in ("w", "wb", "a", "ab"):
    na(f"mode {MODE!r} opens the file write-only: there are no reads to race with close")
elif BINARY:
    binary_cell()
else:
    text_cell()
print("ok")
'''

SHUTDOWN = r'''
def aiofiles_cell():
    path, other = os.path.join(D, "shutdown.log"), os.path.join(D, "behind.log")
    prepare(path, PFX)
    prepare(other, PFX)
    acked, behind, late = [], [], []
    async def main():
        f = await overlapped.aiofiles.open(path, MODE, buffering=1 << 16)
        g = await overlapped.aiofiles.open(other, MODE, buffering=1 << 20)
        await write_lines(f, 0, 200, acked)                  # flushed
        await write_lines(f, 1, 100, acked, flush=False)
        await write_lines(g, 1, 100, behind, flush=False)    # behind, in g
        fl = asyncio.ensure_future(f.flush())
        queued = [asyncio.ensure_future(write_lines(f, t, 20, late, flush=False))
                  for t in range(2, 6)]                      # waiting behind the flush
        await asyncio.sleep(0)
        # Shut down with the flush's write in flight: it completes.
        overlapped.shutdown()
        try:
            await fl
        except RuntimeError:
            # Append modes ask the kernel for the position after the write
            # (a statx), which shutdown refused: the write itself landed.
            assert "a" in MODE, "the flush in flight at shutdown failed"
        for r in await asyncio.gather(*queued, return_exceptions=True):
            assert r is None or isinstance(r, RuntimeError), r
        t0 = time.monotonic()
        for call in (lambda: f.write(enc("later\n")), f.flush, g.flush, f.close,
                     lambda: overlapped.aiofiles.open(path + ".new", "wb")):
            try:
                await call()
            except RuntimeError:
                pass
            else:
                raise AssertionError("a call after shutdown succeeded")
        assert (g._wbuf if BINARY else g.buffer._wbuf), "bytes behind were dropped"
        assert time.monotonic() - t0 < 2.0, "calls after shutdown did not fail at once"
        return f, g
    f, g = asyncio.run(asyncio.wait_for(main(), 60))
    # The bytes behind were not dropped: still gathered after the calls
    # that failed, and written when the loop ended (a blocking pwrite, the
    # engine being shut down), while the process lives on.
    check_lines(other, behind, prefix=PFX)
    del f, g
    gc.collect()
    check_lines(path, acked + late, prefix=PFX)
    check_lines(other, behind, prefix=PFX)

def file_cell():
    path = os.path.join(D, "shutdown.bin")
    async def main():
        f = await overlapped.open(path, "w+b")
        await f.write_at(record(0), 0)
        futs = [f.write_at(record(i), i * 4096) for i in range(1, 64)]
        overlapped.shutdown()  # waits for the writes in flight
        for i, fut in enumerate(futs, 1):
            assert await fut == 4096, f"write {i} in flight at shutdown failed"
        t0 = time.monotonic()
        for call in (lambda: f.write_at(b"x", 0), lambda: f.read_at(1, 0),
                     lambda: overlapped.open(path + ".new", "wb")):
            try:
                await call()
            except RuntimeError:
                pass
            else:
                raise AssertionError("a call after shutdown succeeded")
        assert time.monotonic() - t0 < 2.0, "calls after shutdown did not fail at once"
    asyncio.run(asyncio.wait_for(main(), 60))
    with open(path, "rb") as g:
        got = g.read()
    assert got == b"".join(record(i) for i in range(64)), "acknowledged bytes missing"

aiofiles_cell() if MODE else file_cell()
print("ok")
'''

FORK = r'''
import signal, traceback

def wait_child(pid, limit=10.0):
    deadline = time.monotonic() + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the child's exit hung")
        time.sleep(0.01)

async def child_calls(calls, closing):
    # Every call on the parent's objects fails at once with RuntimeError;
    # closing the parent's file returns at once.
    if closing is not None:
        t0 = time.monotonic()
        await asyncio.wait_for(closing(), 5)
        assert time.monotonic() - t0 < 1.0, "close in the child did not return at once"
    for call in calls:
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(call(), 5)
        except RuntimeError as e:
            assert "fork" in str(e), e
        else:
            raise AssertionError("a call on the parent's file succeeded in the child")
        assert time.monotonic() - t0 < 1.0, "a call in the child did not fail at once"

def fork_and_check(calls, closing=None):
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            asyncio.run(child_calls(calls, closing))
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        if code:
            os._exit(code)
        sys.exit(0)  # a normal exit: atexit handlers, finalizers, collection
    code = wait_child(pid)
    assert code == 0, f"child exited with {code}"

def aiofiles_cell():
    path = os.path.join(D, "fork.log")
    prepare(path, PFX)
    acked = []
    loop = asyncio.new_event_loop()
    async def start():
        f = await overlapped.aiofiles.open(path, MODE, buffering=1 << 16)
        await write_lines(f, 0, 100, acked)
        await write_lines(f, 1, 200, acked, flush=False)
        fl = asyncio.ensure_future(f.flush())                # in flight at the fork
        behind = asyncio.ensure_future(write_lines(f, 2, 50, acked, flush=False))
        await asyncio.sleep(0)
        return f, fl, behind
    try:
        f, fl, behind = loop.run_until_complete(start())
        fork_and_check([lambda: f.write(enc("child\n")), f.flush, f.tell],
                       closing=f.close)
        async def finish():
            await fl
            await behind
            await f.close()
        loop.run_until_complete(asyncio.wait_for(finish(), 30))
    finally:
        loop.close()
    check_lines(path, acked, prefix=PFX)

def file_cell():
    path = os.path.join(D, "fork.bin")
    loop = asyncio.new_event_loop()
    async def start():
        f = await overlapped.open(path, "wb")
        await f.write_at(record(0), 0)
        return f, [f.write_at(record(i), i * 4096) for i in range(1, 64)]
    try:
        f, futs = loop.run_until_complete(start())
        fork_and_check([lambda: f.write_at(b"child", 0), lambda: f.read_at(1, 0)],
                       closing=f.close)
        async def finish():
            for i, fut in enumerate(futs, 1):
                assert await fut == 4096, f"the parent's write {i} failed"
            await f.close()
        loop.run_until_complete(asyncio.wait_for(finish(), 30))
    finally:
        loop.close()
    with open(path, "rb") as g:
        assert g.read() == b"".join(record(i) for i in range(64)), "the parent's data is wrong"

aiofiles_cell() if MODE else file_cell()
print("ok")
'''

INJECTED = r'''
MNT = sys.argv[3]
filler = os.path.join(MNT, "filler")

def fill(leave):
    """Fills the file system, then frees ``leave`` bytes."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    chunk = b"f" * 65536
    size = 0
    try:
        while True:
            try:
                size += os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        os.fsync(fd)
        os.ftruncate(fd, max(size - leave, 0))
        os.fsync(fd)
    finally:
        os.close(fd)

def free():
    os.unlink(filler)

def aiofiles_cell():
    path = os.path.join(MNT, "target.log")
    prepare(path)
    fill(256 * 1024)
    acked, behind = [], []
    async def main():
        f = await overlapped.aiofiles.open(path, MODE, buffering=4 << 20)
        await write_lines(f, 0, 500, acked)                       # in the file
        await write_lines(f, 1, 40000, behind, flush=False)       # ~2 MiB behind
        try:
            await f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
        else:
            raise AssertionError("the flush did not report ENOSPC")
        # What was acknowledged and flushed is there; of the bytes behind,
        # the kernel took a prefix (perhaps a torn line) and the rest waits.
        first, rest = "".join(acked).encode(), "".join(behind).encode()
        with open(path, "rb") as g:
            got = g.read()
        assert got.startswith(first), "bytes flushed before the failure are missing"
        assert rest.startswith(got[len(first):]), "the file holds bytes never written"
        assert len(got) < len(first) + len(rest), "ENOSPC but everything written?"
        free()
        await f.flush()                                           # the rest, once
        await f.close()
        with open(path, "rb") as g:
            assert g.read() == first + rest, "bytes lost or doubled across the failure"
    asyncio.run(asyncio.wait_for(main(), 120))

def file_cell():
    path = os.path.join(MNT, "target.bin")
    fill(256 * 1024)
    async def main():
        f = await overlapped.open(path, "wb")
        for i in range(16):
            assert await f.write_at(record(i), i * 4096) == 4096
        big = b"".join(record(i) for i in range(16, 16 + 512))
        try:
            await f.write_at(big, 16 * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
        else:
            raise AssertionError("the write did not report ENOSPC")
        with open(path, "rb") as g:
            got = g.read()
        assert got[:16 * 4096] == b"".join(record(i) for i in range(16)), "acknowledged bytes lost"
        free()
        assert await f.write_at(big, 16 * 4096) == len(big)
        await f.close()
    asyncio.run(asyncio.wait_for(main(), 60))
    with open(path, "rb") as g:
        assert g.read() == b"".join(record(i) for i in range(16 + 512))

aiofiles_cell() if MODE else file_cell()
print("ok")
'''

SCRIPTS = {
    "drop-behind": DROP_BEHIND,
    "shared-writers": SHARED,
    "close-racing-reads": CLOSE_RACING,
    "shutdown-in-flight": SHUTDOWN,
    "fork-in-flight": FORK,
    "injected-failure": INJECTED,
}


@pytest.fixture(scope="module")
def small_fs(tmp_path_factory):
    """A small ext4 (scripts/small-fs), or the reason there is none."""
    d = tmp_path_factory.mktemp("smallfs")
    r = subprocess.run(
        [str(REPO / "scripts" / "small-fs"), "mount", str(d), "8"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        yield None, (r.stderr.strip() or f"small-fs exited with {r.returncode}")
        return
    try:
        yield r.stdout.strip().splitlines()[-1], None
    finally:
        subprocess.run(
            [str(REPO / "scripts" / "small-fs"), "umount", str(d)],
            capture_output=True,
            timeout=60,
        )


def report(capsys, front, scenario, outcome):
    with capsys.disabled():
        print(f"\ntorture: {front} {driver_name()} {scenario} {outcome}", flush=True)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("front", FRONTS)
def test_torture(front, scenario, tmp_path, capsys, request):
    args = [front, tmp_path]
    if scenario == "injected-failure":
        mnt, why = request.getfixturevalue("small_fs")
        if mnt is None:
            report(capsys, front, scenario, f"SKIPPED: {why}")
            pytest.skip(f"SKIPPED: {why}")
        for name in os.listdir(mnt):
            if name != "lost+found":
                os.unlink(os.path.join(mnt, name))
        args.append(mnt)
    try:
        out, _ = run_script(COMMON + SCRIPTS[scenario], tmp_path, *args, timeout=90)
    except BaseException as e:
        why = " ".join(str(e).split())[-300:]
        report(capsys, front, scenario, f"FAIL: {why}")
        raise
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if last.startswith("n/a:"):
        report(capsys, front, scenario, last)
        return
    if last != "ok":
        report(capsys, front, scenario, f"FAIL: the scenario printed {last!r}")
        pytest.fail(f"scenario printed {out!r}")
    report(capsys, front, scenario, "ok")
