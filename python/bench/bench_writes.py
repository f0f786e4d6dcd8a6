#!/usr/bin/env python3
"""Writes and copies in Python: ``overlapped.aiofiles`` against
``aiofiles`` (25.1, its default executor), interleaved in one process and
one event loop (each round runs every workload once per system, the first
system alternating between rounds).

  python python/bench/bench_writes.py DIR [SIZE_MIB=256] [ROUNDS=5]

Workloads (SIZE bytes each):

- ``write 8K``: ``await f.write(...)`` of 8 KiB at a time to a new file
  opened ``'wb'``;
- ``write 64K``: the same, 64 KiB at a time;
- ``write 256B text``: 256-byte lines (``f.write(line)``) to a new file
  opened ``'w'``;
- ``copy warm``: ``read(65536)`` from a source file in the page cache, each
  chunk written to a new file opened ``'wb'`` (what a program does without
  ``shutil``);
- ``copy cold``: the same, the source written back (``os.fsync``) and
  evicted (``posix_fadvise(DONTNEED)``) first.

Each measurement runs from the open to the end of the ``async with`` (the
file flushed and closed: its data is in the page cache; no fsync). The file
written is then checked (its size and every byte) and removed, outside the
timing. DIR is a directory on the file system to measure (files named
``bw-*`` are made there and removed at the end). Prints each round's times
on stderr, then a markdown table: the median of each system, the ratio of
the medians aiofiles / overlap (above 1: overlap is faster) and the ratio
within each round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import Any, Callable

SYSTEMS = ("aiofiles", "overlapped.aiofiles")
WORKLOADS = ("write 8K", "write 64K", "write 256B text", "copy warm", "copy cold")
COPY_CHUNK = 64 << 10
LINE = 256
CHECK_CHUNK = 1 << 20


def pattern(size: int) -> bytes:
    """SIZE bytes of 0, 1, ..., 250, 0, 1, ...: 251 divides no chunk size,
    so a chunk written at the wrong offset shows."""
    period = bytes(range(251))
    return (period * (size // 251 + 1))[:size]


def lines() -> list[str]:
    """251 distinct 256-byte lines (each numbered), written in turn."""
    return [f"{i:03d} " + "x" * (LINE - 5) + "\n" for i in range(251)]


def evict(path: str) -> None:
    """Writes back and drops the file's cached pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path: str) -> None:
    """Reads the file once, so that it is cached."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


def check(path: str, size: int, expect: Callable[[int, int], bytes], what: str) -> None:
    """Fails unless the file is `size` bytes of what `expect(offset, n)`
    says (compared 1 MiB at a time: a page-cache read, a fraction of the
    write's time)."""
    got = os.path.getsize(path)
    if got != size:
        raise SystemExit(f"{what}: wrote {got} bytes, expected {size}")
    with open(path, "rb", buffering=0) as f:
        off = 0
        while off < size:
            b = f.read(CHECK_CHUNK)
            if not b or b != expect(off, len(b)):
                raise SystemExit(f"{what}: the {len(b)} bytes at offset {off} are not what was written")
            off += len(b)


class Setup:
    def __init__(self, directory: str, size: int) -> None:
        self.src = os.path.join(directory, "bw-src")
        self.out = os.path.join(directory, "bw-out")
        self.size = size
        self.data = pattern(size)
        self.lines = lines()
        self.text = "".join(self.lines).encode()


async def run(aio: Any, work: str, s: Setup) -> float:
    """One measurement of `work` through `aio` (an aiofiles module), in seconds."""
    if work == "copy warm":
        warm(s.src)
    elif work == "copy cold":
        evict(s.src)
    size = s.size
    t0 = time.perf_counter()
    if work in ("write 8K", "write 64K"):
        chunk = 8 << 10 if work == "write 8K" else 64 << 10
        mv = memoryview(s.data)
        async with aio.open(s.out, "wb") as f:
            for off in range(0, size, chunk):
                await f.write(mv[off:off + chunk])
    elif work == "write 256B text":
        ls = s.lines
        async with aio.open(s.out, "w", encoding="ascii") as f:
            for i in range(size // LINE):
                await f.write(ls[i % 251])
    else:
        async with aio.open(s.src, "rb") as r, aio.open(s.out, "wb") as w:
            while True:
                b = await r.read(COPY_CHUNK)
                if not b:
                    break
                await w.write(b)
    took = time.perf_counter() - t0
    if work == "write 256B text":
        period = len(s.text)

        def expect(off: int, n: int) -> bytes:
            start = off % period
            return (s.text * (n // period + 2))[start:start + n]

    else:

        def expect(off: int, n: int) -> bytes:
            return s.data[off:off + n]

    check(s.out, size, expect, f"{work} by {aio.__name__}")
    os.remove(s.out)
    return took


async def bench(s: Setup, rounds: int) -> dict[tuple[str, str], list[float]]:
    import aiofiles

    import overlapped.aiofiles

    mods = {"aiofiles": aiofiles, "overlapped.aiofiles": overlapped.aiofiles}
    times: dict[tuple[str, str], list[float]] = {(w, n): [] for w in WORKLOADS for n in SYSTEMS}
    for rnd in range(rounds):
        order = SYSTEMS if rnd % 2 == 0 else SYSTEMS[::-1]
        for work in WORKLOADS:
            for name in order:
                took = await run(mods[name], work, s)
                print(f"round {rnd}: {work:<16} {name:<17} {took:.3f} s", file=sys.stderr, flush=True)
                times[(work, name)].append(took)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a directory on the file system to measure (bw-* files are made there)")
    ap.add_argument("size_mib", nargs="?", type=int, default=256, help="bytes written per measurement, MiB (256)")
    ap.add_argument("rounds", nargs="?", type=int, default=5, help="rounds (5)")
    a = ap.parse_args()
    if a.size_mib < 1 or a.rounds < 1:
        ap.error("SIZE_MIB and ROUNDS must be at least 1")
    import overlapped

    s = Setup(a.dir, a.size_mib << 20)
    with open(s.src, "wb") as f:
        f.write(s.data)
    try:
        times = asyncio.run(bench(s, a.rounds))
    finally:
        for p in (s.src, s.out):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass
    print(f"# {a.dir}, {a.size_mib} MiB, {a.rounds} rounds, overlap driver "
          f"{overlapped.driver()['kind']}, medians", flush=True)
    print("| workload | aiofiles | overlapped.aiofiles | aiofiles / overlap | per-round ratios |")
    print("| --- | --- | --- | --- | --- |")
    for work in WORKLOADS:
        af, ov = times[(work, "aiofiles")], times[(work, "overlapped.aiofiles")]
        maf, mov = statistics.median(af), statistics.median(ov)
        per_round = ", ".join(f"{x / max(y, 1e-9):.2f}" for x, y in zip(af, ov))
        print(f"| {work} | {maf:.3f} s | {mov:.3f} s | {maf / max(mov, 1e-9):.2f}x | {per_round} |", flush=True)


if __name__ == "__main__":
    main()
