"""overlapped.aiofiles against aiofiles 25.1 itself: each scenario runs on both
and must give the same results; and the regular files' I/O must go through
the engine (no thread)."""

import asyncio
import io
import os
import sys

import pytest

import overlapped
import overlapped.aiofiles as ours
import overlapped.aiofiles.os
import overlapped.aiofiles.ospath
import overlapped.aiofiles.tempfile
import overlapped.aiofiles.threadpool
from overlapped.aiofiles.threadpool import engine as engine_mod

from overlap_test_helpers import REAL_AIOFILES as real

assert real is not ours and real.__name__ == "aiofiles"


def test_same_public_names():
    assert ours.__all__ == real.__all__
    for name in real.__all__:
        assert hasattr(ours, name)
    for mod in ("os", "ospath", "tempfile", "threadpool"):
        r, o = getattr(real, mod), getattr(ours, mod)
        assert list(r.__all__) == list(o.__all__), mod
        for name in r.__all__:
            assert hasattr(o, name), (mod, name)
    import inspect

    assert inspect.signature(real.open) == inspect.signature(ours.open)
    for name in ("NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile", "TemporaryDirectory"):
        assert inspect.signature(getattr(real.tempfile, name)) == inspect.signature(
            getattr(ours.tempfile, name)
        )


async def both(scenario, tmp_path):
    """Runs ``scenario(module, dir)`` on aiofiles and on overlapped.aiofiles in
    fresh directories; returns both results."""
    results = []
    for name, mod in (("real", real), ("ours", ours)):
        d = tmp_path / name
        d.mkdir()
        try:
            results.append(("ok", await scenario(mod, d)))
        except Exception as e:  # the same exception type and message
            results.append(("raised", type(e).__name__, str(e).replace(str(d), "<dir>")))
    return results


async def binary_scenario(aiofiles, d):
    p = d / "b.bin"
    out = []
    async with aiofiles.open(p, "wb") as f:
        out.append(await f.write(b"line one\nline two\n"))
        out.append(await f.writelines([b"three\n", bytearray(b"four"), memoryview(b"\nfive")]))
        out.append(await f.tell())
        out += [f.mode, f.closed, await f.writable(), f.readable(), await f.seekable()]
        await f.flush()
    out.append(f.closed)
    async with aiofiles.open(p, "rb") as f:
        out.append(await f.read(4))
        out.append(await f.read1(3))
        out.append(await f.readline())
        out.append(await f.tell())
        out.append([line async for line in f])
        out.append(await f.read())
        out.append(await f.seek(0))
        out.append(await f.readlines())
        out.append(await f.seek(-5, os.SEEK_END))
        out.append(await f.read())
        await f.seek(2)
        b = bytearray(6)
        out.append((await f.readinto(b), bytes(b)))
        out.append((await f.peek(1))[:1])
        out.append(await f.read(2))
        out.append(await f.seek(3, os.SEEK_CUR))
        out.append(await f.read(100))
        out.append(await f.read(100))
        out.append(f.name == str(p))
        out.append(await f.isatty())
    async with aiofiles.open(p, "r+b") as f:
        await f.seek(5)
        await f.write(b"ONE")
        out.append(await f.tell())
        out.append(await f.truncate())
        out.append(await f.read())
        await f.seek(0)
        out.append(await f.read())
        out.append(f.mode)
    async with aiofiles.open(p, "ab") as f:
        out.append(await f.tell())
        await f.write(b"+tail")
        await f.seek(0)
        await f.write(b"+end")  # append mode: at the end whatever the position
        await f.flush()  # (before a flush, io's tell does not know about O_APPEND)
        out.append(await f.tell())
        out.append(f.mode)
    async with aiofiles.open(p, "a+b") as f:
        await f.seek(0)
        out.append(await f.read())
    async with aiofiles.open(p, "w+b") as f:
        out.append(await f.read())
        await f.write(b"xyz")
        await f.seek(0)
        out.append(await f.read())
        out.append(f.mode)
    f = await aiofiles.open(p, "rb", buffering=0)
    out.append(await f.read(2))
    out.append(await f.readall())
    out.append(f.mode)
    await f.close()
    out.append(f.closed)
    return out


async def test_binary_files_behave_as_aiofiles(tmp_path):
    r, o = await both(binary_scenario, tmp_path)
    assert r[0] == "ok", r
    assert o == r


@pytest.mark.parametrize("newline", [None, "", "\n", "\r", "\r\n"])
@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "utf-16"])
async def test_text_files_behave_as_aiofiles(tmp_path, newline, encoding):
    async def scenario(aiofiles, d):
        p = d / "t.txt"
        out = []
        text = "héllo\nwörld\r\nmixed\rend\n" * 50 + "no newline at the end"
        async with aiofiles.open(p, "w", encoding=encoding, newline=newline) as f:
            out.append(await f.write(text))
            await f.writelines(["a\n", "b\n"])
            out += [f.mode, f.encoding, f.errors, f.line_buffering, f.name == str(p)]
        with open(p, "rb") as check:
            out.append(check.read())
        async with aiofiles.open(p, "r", encoding=encoding, newline=newline) as f:
            out.append(await f.read(7))
            out.append(await f.readline())
            out.append(await f.readline(3))
            out.append([line async for line in f])
            out.append(f.newlines)
            out.append(await f.read())
        async with aiofiles.open(p, encoding=encoding, newline=newline) as f:
            out.append(await f.readlines())
        async with aiofiles.open(p, encoding=encoding, newline=newline) as f:
            out.append(await f.read())
            out.append(await f.read(10))
        async with aiofiles.open(p, encoding=encoding, newline=newline) as f:
            await f.readline()
            pos = await f.tell()
            first = await f.readline()
            await f.seek(pos)
            out.append(await f.readline() == first)
            await f.seek(0)
            out.append(await f.read(5))
            out.append(await f.seek(0, os.SEEK_END) > 0)
        async with aiofiles.open(p, "a", encoding=encoding, newline=newline) as f:
            await f.write("appended\n")
        async with aiofiles.open(p, "r+", encoding=encoding, newline=newline) as f:
            out.append((await f.read())[-20:])
        return out

    r, o = await both(scenario, tmp_path)
    assert r[0] == "ok", r
    assert o == r


async def test_text_errors_and_encodings(tmp_path):
    async def scenario(aiofiles, d):
        p = d / "e.txt"
        p.write_bytes(b"ok \xff\xfe bad\n")
        out = []
        async with aiofiles.open(p, errors="replace", encoding="utf-8") as f:
            out.append(await f.read())
        async with aiofiles.open(p, errors="surrogateescape", encoding="utf-8") as f:
            out.append(await f.read())
        try:
            async with aiofiles.open(p, encoding="utf-8") as f:
                await f.read()
        except UnicodeDecodeError as e:
            out.append(("decode error", e.start))
        async with aiofiles.open(d / "w.txt", "w", encoding="ascii", errors="xmlcharrefreplace") as f:
            await f.write("naïve")
        out.append((d / "w.txt").read_bytes())
        return out

    r, o = await both(scenario, tmp_path)
    assert o == r


@pytest.mark.parametrize(
    "args",
    [
        ("missing.txt", "r"),
        ("missing.txt", "rb"),
        (".", "r"),
        (".", "wb"),
        ("f", "rw"),
        ("f", "rbt"),
        ("f", "z"),
        ("f", "wb", {"encoding": "utf-8"}),
        ("f", "wb", {"newline": "\n"}),
        ("f", "w", {"buffering": 0}),
        ("f", "w", {"newline": "x"}),
        ("f", "w", {"encoding": "no-such-codec"}),
        ("exists", "x"),
        ("exists", "xb"),
        ("f\0g", "w"),
    ],
)
async def test_open_errors_as_aiofiles(tmp_path, args):
    name, mode, *kw = args
    kw = kw[0] if kw else {}

    async def scenario(aiofiles, d):
        (d / "exists").write_text("")
        async with aiofiles.open(d / name, mode, **kw) as f:
            return await f.read()

    r, o = await both(scenario, tmp_path)
    assert r[0] == "raised", r
    assert o == r


async def test_closed_file_and_wrong_direction(tmp_path):
    async def scenario(aiofiles, d):
        out = []
        f = await aiofiles.open(d / "c", "w")
        for call in (lambda: f.read(), lambda: f.readline()):
            try:
                await call()
            except Exception as e:
                out.append(type(e).__name__)
        await f.close()
        for call in (lambda: f.write("x"), lambda: f.tell(), lambda: f.read()):
            try:
                await call()
            except Exception as e:
                out.append((type(e).__name__, str(e)))
        g = await aiofiles.open(d / "c", "rb")
        try:
            await g.write(b"x")
        except Exception as e:
            out.append(type(e).__name__)
        try:
            await g.write("x")
        except Exception as e:
            out.append(type(e).__name__)
        await g.close()
        return out

    r, o = await both(scenario, tmp_path)
    assert o == r


async def test_regular_files_use_the_engine_and_no_thread(tmp_path):
    loop = asyncio.get_running_loop()
    before = overlapped.stats()["submitted"]
    async with ours.open(tmp_path / "e", "w+") as f:
        assert isinstance(f, engine_mod.EngineTextIOWrapper)
        assert isinstance(f, ours.threadpool.text.AsyncTextIOWrapper)
        await f.write("x" * 100)
        await f.seek(0)
        assert await f.read() == "x" * 100
    async with ours.open(tmp_path / "e", "rb") as f:
        assert isinstance(f, engine_mod.EngineBufferedReader)
        assert isinstance(f, ours.threadpool.binary.AsyncBufferedReader)
        assert [x async for x in f] == [b"x" * 100]
    async with ours.open(tmp_path / "e", "ab") as f:
        assert isinstance(f, ours.threadpool.binary.AsyncBufferedIOBase)
    f = await ours.open(tmp_path / "e", "rb", buffering=0)
    assert isinstance(f, ours.threadpool.binary.AsyncFileIO)
    await f.close()
    assert overlapped.stats()["submitted"] - before >= 10
    # aiofiles' thread pool (the loop's default executor) was never started.
    assert getattr(loop, "_default_executor", None) is None


async def test_non_regular_files_use_the_thread_pool(tmp_path):
    fd = os.open(tmp_path / "fd", os.O_RDWR | os.O_CREAT)
    async with ours.open(fd, "w") as f:  # a descriptor: as aiofiles
        assert not isinstance(f, engine_mod.EngineTextIOWrapper)
        await f.write("by fd")
    assert (tmp_path / "fd").read_text() == "by fd"
    r, w = os.pipe()
    async with ours.open(f"/proc/self/fd/{w}", "wb") as f:  # a pipe, by path
        assert not isinstance(f, engine_mod._EngineBinary)
        await f.write(b"through a pipe")
    os.close(w)
    assert os.read(r, 100) == b"through a pipe"
    os.close(r)
    async with ours.open("/dev/null", "rb") as f:
        assert await f.read() == b""


async def test_os_ospath_tempfile_stdio(tmp_path):
    p = tmp_path / "o"
    p.write_bytes(b"12345")
    assert (await ours.os.stat(p)).st_size == 5
    assert await ours.ospath.getsize(p) == 5
    assert await ours.ospath.exists(p) and await ours.ospath.isfile(p)
    assert not await ours.ospath.isdir(p)
    await ours.os.rename(p, tmp_path / "o2")
    assert await ours.os.listdir(tmp_path) == ["o2"]
    await ours.os.mkdir(tmp_path / "dd")
    await ours.os.rmdir(tmp_path / "dd")
    await ours.os.remove(tmp_path / "o2")
    assert not await ours.ospath.exists(tmp_path / "o2")
    async with ours.tempfile.TemporaryFile() as t:
        await t.write(b"temp")
        await t.seek(0)
        assert await t.read() == b"temp"
    async with ours.tempfile.NamedTemporaryFile("w+", dir=tmp_path) as t:
        await t.write("named")
        await t.seek(0)
        assert await t.read() == "named"
        assert os.path.exists(t.name)
    async with ours.tempfile.SpooledTemporaryFile(max_size=10) as t:
        await t.write(b"spooled" * 3)
        await t.seek(0)
        assert await t.read() == b"spooled" * 3
    async with ours.tempfile.TemporaryDirectory() as d:
        assert os.path.isdir(d)
    assert not os.path.exists(d)
    for obj in (ours.stdin, ours.stdout, ours.stderr, ours.stdin_bytes, ours.stdout_bytes, ours.stderr_bytes):
        assert hasattr(obj, "write") and hasattr(obj, "read")
    assert ours.stdout._file is sys.stdout
    await ours.stderr.write("")


async def test_many_tasks_through_aiofiles(tmp_path):
    p = tmp_path / "m"
    p.write_bytes(bytes(range(256)) * 256)

    async def one(i):
        async with ours.open(p, "rb") as f:
            await f.seek(i * 256)
            return await f.read(256)

    got = await asyncio.gather(*(one(i) for i in range(256)))
    assert got == [bytes(range(256))] * 256


async def _cancel_soon(coro):  # noqa: D401
    """Starts ``coro`` as a task, cancels it after one loop step; returns
    (cancelled, result)."""
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)
    task.cancel()
    try:
        return False, await task
    except asyncio.CancelledError:
        return True, None


class _StallAfter:
    """The engine file of an ``overlapped.aiofiles`` object, whose read number
    ``n`` (counting from 0) never completes: a read cancelled in flight,
    at a known point, whatever the device's speed."""

    def __init__(self, nf, n):
        self._nf, self._n = nf, n

    def __getattr__(self, name):
        return getattr(self._nf, name)

    async def read_at(self, size, offset):
        self._n -= 1
        if self._n < 0:
            await asyncio.Event().wait()
        return await self._nf.read_at(size, offset)


async def test_a_cancelled_read_consumes_nothing(tmp_path):
    # After a cancelled 32 MiB read aiofiles' tell() says
    # 33554432 (its thread finished the read; the bytes are lost), ours
    # stays: the next read returns the same bytes, however far a read of
    # many engine reads (readall, readline) had got.
    p = tmp_path / "big"
    content = os.urandom(1 << 20).replace(b"\n", b"x") * 3  # one line
    p.write_bytes(content)
    async with ours.open(p, "rb") as f:
        nf = f._nf
        for what, stall_at in (("read", 0), ("readall", 2), ("readline", 5)):
            await f.seek(0)
            f._nf = _StallAfter(nf, stall_at)
            call = {
                "read": lambda: f.read(32 << 20),
                "readall": lambda: f.read(),
                "readline": lambda: f.readline(),
            }[what]
            task = asyncio.ensure_future(call())
            for _ in range(50):
                await asyncio.sleep(0)
            assert not task.done(), what
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            f._nf = nf
            assert await f.tell() == 0, what
            assert await f.read(4096) == content[:4096], what


async def test_a_cancelled_write_still_moves_the_position(tmp_path):
    # The write is the kernel's once started: it lands, and the position
    # moves past it, as in aiofiles.
    p = tmp_path / "w"
    data = os.urandom(8 << 20)
    async with ours.open(p, "wb") as f:
        cancelled, _ = await _cancel_soon(f.write(data))
        assert await f.tell() == len(data), cancelled
        await f.write(b"after")
    deadline = asyncio.get_running_loop().time() + 10
    while p.stat().st_size < len(data) + 5 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    got = p.read_bytes()
    assert got[len(data):] == b"after"
    assert got[: len(data)] == data
