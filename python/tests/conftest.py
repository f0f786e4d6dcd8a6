"""Shared fixtures. The engine's driver is chosen once per process by
OVERLAP_DRIVER (``uring`` or ``pool``); ./scripts/test runs the suite once
for each."""

import asyncio
import os

import pytest

import overlap

EXPECTED_DRIVER = os.environ.get("OVERLAP_DRIVER") or None


def pytest_report_header(config):
    d = overlap.driver()
    return f"overlap driver: {d['kind']} (fallback: {d['fallback']}); OVERLAP_DRIVER={EXPECTED_DRIVER}"


def pattern(size: int, seed: int = 0) -> bytes:
    """Deterministic bytes where every 4 KiB block differs."""
    out = bytearray(size)
    for i in range(0, size, 4096):
        blk = ((i // 4096 + seed) % 251).to_bytes(1, "little") * 8
        out[i : i + 4096] = (blk * 512)[: min(4096, size - i)]
    # Make bytes within a block differ too.
    for i in range(0, size, 97):
        out[i] = (i * 31 + seed) & 0xFF
    return bytes(out)


@pytest.fixture
def data(tmp_path):
    """A 1 MiB file of known content on a real file system (tmp_path)."""
    content = pattern(1 << 20)
    p = tmp_path / "data.bin"
    p.write_bytes(content)
    return p, content


@pytest.fixture
def uring():
    return overlap.driver()["kind"] == "uring"


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def thread_count(kernel_workers: bool = False) -> int:
    """Threads of this process; io_uring's kernel workers (iou-wrk, idle
    ones linger for seconds) only if asked."""
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as c:
                comm = c.read()
        except OSError:
            continue
        if kernel_workers or not comm.startswith("iou-wrk"):
            n += 1
    return n


async def settle(loop_hub_pending=None, timeout: float = 5.0):
    """Lets the loop run until the current loop's hub has nothing pending."""
    from overlap import _loop

    hub = _loop.hub_for(asyncio.get_running_loop())
    deadline = asyncio.get_running_loop().time() + timeout
    while hub.pending and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)
    return hub.pending
