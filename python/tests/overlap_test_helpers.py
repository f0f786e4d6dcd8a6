"""What the tests share (imported by name; conftest.py sets
REAL_AIOFILES before aiofiles_upstream/ points "aiofiles" at overlap's)."""

import asyncio
import os

import overlapped

EXPECTED_DRIVER = os.environ.get("OVERLAP_DRIVER") or None

# The real aiofiles package (set by conftest.py).
REAL_AIOFILES = None


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
    from overlapped import _loop

    hub = _loop.hub_for(asyncio.get_running_loop())
    deadline = asyncio.get_running_loop().time() + timeout
    while hub.pending and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)
    return hub.pending


def run_script(code: str, tmp_path, *args, timeout: float = 60.0, env=None):
    """Runs ``code`` (a Python script) in a fresh interpreter in its own
    session, with ``args`` as ``sys.argv[1:]``, and returns ``(stdout,
    stderr)``. Fails the test if it exits with an error or outlives
    ``timeout`` (its whole process group, forked children included, is then
    killed): a hang is a failure, not a stuck suite. Runs from ``tmp_path``,
    where the source tree's ``overlapped/`` (no compiled module) is not on the
    path; ``env`` entries are added to this process's environment."""
    import signal
    import subprocess
    import sys

    import pytest

    script = tmp_path / f"scenario_{os.getpid()}_{id(code)}.py"
    script.write_text(code)
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        cwd=tmp_path,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        pytest.fail(f"scenario hung (killed after {timeout}s)\nstdout:\n{out}\nstderr:\n{err}")
    if proc.returncode != 0:
        pytest.fail(f"scenario exited with {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}")
    return out, err
