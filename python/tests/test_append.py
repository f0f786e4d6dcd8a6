"""Append mode means what it means to the OS: the file is
opened with O_APPEND and every write lands at the end of the file, as one
step with respect to every other appender (tasks, threads, processes).

Each concurrent scenario runs in a subprocess with a time limit
(``run_script``); the file must then hold every line, each intact."""

import os

import pytest

import overlapped
import overlapped.aiofiles as ours

from overlap_test_helpers import REAL_AIOFILES as real
from overlap_test_helpers import run_script

LINE_BODY = "x" * 50


def expected_lines(prefixes):
    return sorted(f"{p} {LINE_BODY}\n" for p in prefixes)


def check_lines(path, prefixes):
    """Every line present once and intact, nothing else in the file."""
    data = path.read_bytes().decode()
    lines = data.splitlines(keepends=True)
    want = expected_lines(prefixes)
    missing = len(set(want) - set(lines))
    assert sorted(lines) == want, (
        f"{len(lines)} lines of {len(want)} expected, {missing} missing; "
        f"first lines: {lines[:3]!r}"
    )


PREAMBLE = """
import asyncio, os, sys, threading
import overlapped
import overlapped.aiofiles as aiofiles

P = sys.argv[1]
MODE = sys.argv[2]
BODY = "x" * 50

def data(prefix):
    line = f"{prefix} {BODY}\\n"
    return line if "b" not in MODE else line.encode()
"""

TASKS = PREAMBLE + """
async def one(i):
    async with aiofiles.open(P, MODE) as f:
        await f.write(data(f"task{i:04d}"))

async def main():
    await asyncio.gather(*(one(i) for i in range(100)))

asyncio.run(main())
"""

APPEND_MODES = ["a", "ab", "a+", "a+b"]


@pytest.mark.parametrize("mode", APPEND_MODES)
def test_aiofiles_append_from_many_tasks_keeps_every_line(tmp_path, mode):
    p = tmp_path / "log.txt"
    p.write_text("")
    run_script(TASKS, tmp_path, p, mode)
    check_lines(p, [f"task{i:04d}" for i in range(100)])


TASKS_X_LINES = PREAMBLE + """
async def one(i):
    # Three ways to write: buffered and flushed after every line, buffered
    # up to the close, and unbuffered (binary) or line-buffered (text).
    kind = i % 3
    kw = {}
    if kind == 2:
        kw = {"buffering": 0} if "b" in MODE else {"buffering": 1}
    async with aiofiles.open(P, MODE, **kw) as f:
        for j in range(40):
            await f.write(data(f"task{i:04d}-line{j:03d}"))
            if kind == 0:
                await f.flush()
            await asyncio.sleep(0)

async def main():
    await asyncio.gather(*(one(i) for i in range(50)))

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", APPEND_MODES)
def test_aiofiles_append_tasks_times_lines_keeps_every_line(tmp_path, mode):
    p = tmp_path / "log.txt"
    p.write_text("")
    run_script(TASKS_X_LINES, tmp_path, p, mode)
    check_lines(p, [f"task{i:04d}-line{j:03d}" for i in range(50) for j in range(40)])


FORKED = PREAMBLE + """
async def child(n):
    async def one(i):
        async with aiofiles.open(P, MODE) as f:
            await f.write(data(f"proc{n}-task{i:03d}"))
    await asyncio.gather(*(one(i) for i in range(50)))

pids = []
for n in range(4):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            asyncio.run(child(n))
            code = 0
        finally:
            os._exit(code)
    pids.append(pid)
for pid in pids:
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
"""


@pytest.mark.parametrize("mode", ["a", "ab"])
def test_aiofiles_append_from_forked_processes_keeps_every_line(tmp_path, mode):
    p = tmp_path / "log.txt"
    p.write_text("")
    run_script(FORKED, tmp_path, p, mode)
    check_lines(p, [f"proc{n}-task{i:03d}" for n in range(4) for i in range(50)])


THREADS = PREAMBLE + """
async def loop_main(n):
    async def one(i):
        async with aiofiles.open(P, MODE) as f:
            await f.write(data(f"thread{n}-task{i:03d}"))
    await asyncio.gather(*(one(i) for i in range(25)))

errors = []
def run(n):
    try:
        asyncio.run(loop_main(n))
    except BaseException as e:
        errors.append(e)
threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
"""


@pytest.mark.parametrize("mode", ["a", "ab"])
def test_aiofiles_append_from_threads_keeps_every_line(tmp_path, mode):
    p = tmp_path / "log.txt"
    p.write_text("")
    run_script(THREADS, tmp_path, p, mode)
    check_lines(p, [f"thread{n}-task{i:03d}" for n in range(4) for i in range(25)])


NATIVE = """
import asyncio, sys
import overlapped

P = sys.argv[1]
MODE = sys.argv[2]

async def one(i):
    async with overlapped.open(P, MODE) as f:
        assert f.append
        line = f"task{i:04d} {'x' * 50}\\n".encode()
        # The offset does not matter in append mode: the kernel writes at
        # the end of the file.
        assert await f.write_at(line, 0) == len(line)

async def main():
    await asyncio.gather(*(one(i) for i in range(100)))

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["ab", "a+b"])
def test_native_append_writes_at_the_end_whatever_the_offset(tmp_path, mode):
    p = tmp_path / "log.txt"
    p.write_text("")
    run_script(NATIVE, tmp_path, p, mode)
    check_lines(p, [f"task{i:04d}" for i in range(100)])


async def test_native_append_mode_keeps_contents_and_reads_in_a_plus(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"head\n")
    async with overlapped.open(p, "a+b") as f:
        assert await f.write_at(b"tail\n", 0) == 5
        assert await f.read_at(100, 0) == b"head\ntail\n"
    assert p.read_bytes() == b"head\ntail\n"


async def tell_scenario(aiofiles, d, mode, buffering):
    """Appends to a file with contents, as one writer: the positions
    ``tell`` reports along the way, and the contents."""
    p = d / "f"
    p.write_bytes(b"0123456789\n")
    text = "b" not in mode

    def conv(s):
        return s if text else s.encode()

    out = []
    kw = {} if buffering is None else {"buffering": buffering}
    async with aiofiles.open(p, mode, **kw) as f:
        out.append(await f.tell())
        await f.write(conv("abc\n"))
        out.append(await f.tell())
        await f.flush()
        out.append(await f.tell())
        await f.write(conv("a longer line\n"))
        await f.flush()
        out.append(await f.tell())
        if "+" in mode:
            out.append(await f.read())  # at the end: nothing
            await f.seek(0)
            out.append(await f.read(4))
            await f.write(conv("end\n"))  # still at the end of the file
            await f.flush()
            out.append(await f.tell())
            out.append(await f.read())
    out.append(p.read_bytes())
    return out


@pytest.mark.parametrize(
    "mode,buffering",
    [("a", None), ("ab", None), ("a+", None), ("a+b", None), ("ab", 0), ("a+b", 0), ("a", 1)],
)
async def test_append_tell_matches_python(tmp_path, mode, buffering):
    """``tell`` after appends gives what Python's own file objects give (the
    file's size after the write), in every append mode."""
    results = []
    for name, mod in (("real", real), ("ours", ours)):
        d = tmp_path / name
        d.mkdir()
        results.append(await tell_scenario(mod, d, mode, buffering))
    assert results[1] == results[0]


def test_append_opens_with_o_append(tmp_path):
    """The descriptor of a file opened in append mode has O_APPEND (so other
    code writing through it, a dup or a child, appends too)."""
    import asyncio
    import fcntl

    p = tmp_path / "f"

    async def main():
        flags = []
        async with overlapped.open(p, "ab") as f:
            flags.append(fcntl.fcntl(f.fileno(), fcntl.F_GETFL))
        for mode in ("a", "ab", "a+", "a+b"):
            async with ours.open(p, mode) as f:
                flags.append(fcntl.fcntl(f.fileno(), fcntl.F_GETFL))
        async with overlapped.open(p, "r+b") as f:
            plain = fcntl.fcntl(f.fileno(), fcntl.F_GETFL)
        return flags, plain

    flags, plain = asyncio.run(main())
    assert all(fl & os.O_APPEND for fl in flags), flags
    assert not plain & os.O_APPEND
