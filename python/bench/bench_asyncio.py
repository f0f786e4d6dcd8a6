#!/usr/bin/env python3
"""asyncio file reads through overlap against what Python users run
today.

  python python/bench/bench_asyncio.py --file /path/on/disk/data.bin [--seconds 3]

Each contender runs in a fresh interpreter (its own environment, e.g.
CAIO_IMPL), for ``--seconds``, doing 4 KiB reads at random 4 KiB-aligned
offsets, and reports reads/s, CPU per read, and the most threads the process
had (io_uring's kernel workers, ``iou-wrk``, and SQPOLL threads, ``iou-sqp``,
counted apart). The file is only read; buffered contenders first evict it
from the page cache (``posix_fadvise(DONTNEED)``).

Contenders (``--only`` picks some):

- direct: 32 tasks, each with one O_DIRECT read in flight:
  ``overlap`` (``File.readinto_at`` into an ``AlignedBuffer``),
  ``preadv-executor`` (``os.preadv`` on an O_DIRECT descriptor through
  ``loop.run_in_executor`` with 32 threads), and ``fio`` (io_uring,
  ``--iodepth=32``, the same file).
- buffered (file evicted first), 32 tasks: ``overlapped.aiofiles``,
  ``aiofiles`` (25.1, its default executor), ``aiofile+caio`` (aiofile on
  caio's io_uring backend, ``CAIO_IMPL=uring``, as installed).
- buffered, 1024 tasks: ``overlapped.aiofiles`` and ``aiofiles``.
- floor (not by default): where the CPU per read goes. ``asyncio-floor``
  is the same 32 tasks with no I/O at all: each awaits a future that a
  ``loop.call_soon`` resolves (the least one "await a completion" costs in
  asyncio); ``overlap`` is run again on uvloop's event loop
  (``OVERLAP_BENCH_LOOP=uvloop``, if uvloop is installed), beside fio.
- wake (not by default): on the thread-pool driver, completions woken on
  pool threads reach the loop through the hub's eventfd (``add_reader``)
  or through ``loop.call_soon_threadsafe`` (``OVERLAP_PY_WAKE=threadsafe``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

BS = 4096


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def thread_census() -> dict:
    user = kernel = sqpoll = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as c:
                comm = c.read()
        except OSError:
            continue
        if comm.startswith("iou-wrk"):
            kernel += 1
        elif comm.startswith("iou-sqp"):
            sqpoll += 1
        else:
            user += 1
    return {"threads": user, "iou_wrk": kernel, "iou_sqp": sqpoll}


# ------------------------------------------------------------------ workers
# Each runs inside its own interpreter: `bench_asyncio.py --worker NAME`.


async def run_tasks(tasks: int, seconds: float, make_reader):
    """Runs `tasks` coroutines made by make_reader(i, rng) for `seconds`;
    returns (reads, elapsed, cpu, census)."""
    import asyncio
    import random

    count = [0]
    stop = [False]
    peak = {"threads": 0, "iou_wrk": 0, "iou_sqp": 0}

    ready = [0]

    async def worker(i):
        rng = random.Random(i)
        read = await make_reader(i)
        ready[0] += 1
        while not stop[0]:
            await read(rng)
            count[0] += 1

    async def census():
        while not stop[0]:
            c = thread_census()
            for k in peak:
                peak[k] = max(peak[k], c[k])
            await asyncio.sleep(0.1)

    ws = [asyncio.ensure_future(worker(i)) for i in range(tasks)]
    cs = asyncio.ensure_future(census())
    # Warm-up: every task has opened its file and started reading.
    deadline = time.perf_counter() + 60
    while ready[0] < tasks and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    c0, t0, r0 = count[0], time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    c1, t1, r1 = count[0], time.perf_counter(), time.process_time()
    stop[0] = True
    await asyncio.gather(*ws, return_exceptions=True)
    await cs
    return c1 - c0, t1 - t0, r1 - r0, peak


def worker_main(name: str, path: str, tasks: int, seconds: float) -> dict:
    import asyncio

    blocks = os.path.getsize(path) // BS

    def offset(rng):
        return rng.randrange(blocks) * BS

    async def main():
        loop = asyncio.get_running_loop()
        if name == "asyncio-floor":

            async def make(i):
                async def read(rng):
                    offset(rng)
                    fut = loop.create_future()
                    loop.call_soon(fut.set_result, None)
                    await fut

                return read

            return await run_tasks(tasks, seconds, make)
        if name == "overlap":
            import overlapped

            f = await overlapped.open(path, "rb", direct=True)

            async def make(i):
                buf = overlapped.AlignedBuffer(BS)

                async def read(rng):
                    await f.readinto_at(buf, offset(rng))

                return read

        elif name == "preadv-executor":
            import mmap
            from concurrent.futures import ThreadPoolExecutor

            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            pool = ThreadPoolExecutor(max_workers=tasks)  # one thread per task in flight

            async def make(i):
                buf = mmap.mmap(-1, BS)  # page-aligned, as O_DIRECT needs

                async def read(rng):
                    await loop.run_in_executor(pool, os.preadv, fd, [buf], offset(rng))

                return read

        elif name in ("overlapped.aiofiles", "aiofiles"):
            if name == "aiofiles":
                import aiofiles
            else:
                import overlapped.aiofiles as aiofiles

            async def make(i):
                f = await aiofiles.open(path, "rb")

                async def read(rng):
                    await f.seek(offset(rng))
                    await f.read(BS)

                return read

        elif name == "aiofile+caio":
            from aiofile import AIOFile

            async def make(i):
                f = AIOFile(path, "rb")
                await f.open()

                async def read(rng):
                    await f.read(BS, offset(rng))

                return read

        else:
            raise SystemExit(f"unknown worker {name}")
        return await run_tasks(tasks, seconds, make)

    if os.environ.get("OVERLAP_BENCH_LOOP") == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    reads, elapsed, cpu, peak = asyncio.run(main())
    out = {
        "contender": name,
        "tasks": tasks,
        "reads_per_s": reads / elapsed,
        "cpu_us_per_read": cpu / max(reads, 1) * 1e6,
        **{f"peak_{k}": v for k, v in peak.items()},
    }
    if name.startswith("overlap"):
        import overlapped

        out["driver"] = overlapped.driver()["kind"]
        s = overlapped.stats()
        out["completed_async"] = s["completed_async"]
        out["completed_inline"] = s["completed_inline"]
        out["kernel_workers_seen"] = s["kernel_workers_seen"]
        out["submitted"] = s["submitted"]
        out["submit_syscalls"] = s["submit_syscalls"]
    return out


def fio(path: str, depth: int, seconds: float, direct: bool) -> dict:
    cmd = [
        "fio", "--name=bench", f"--filename={path}", "--readonly", "--rw=randread",
        f"--bs={BS}", "--ioengine=io_uring", f"--iodepth={depth}", f"--direct={int(direct)}",
        f"--runtime={seconds}", "--time_based", "--output-format=json",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(r.stdout)["jobs"][0]
    iops = j["read"]["iops"]
    cpu_s = (j["usr_cpu"] + j["sys_cpu"]) / 100 * seconds
    return {
        "contender": f"fio io_uring depth {depth}",
        "tasks": depth,
        "reads_per_s": iops,
        "cpu_us_per_read": cpu_s / max(iops * seconds, 1) * 1e6,
        "command": " ".join(cmd),
    }


def run_worker(name, path, tasks, seconds, env=None) -> dict:
    e = dict(os.environ)
    e.update(env or {})
    cmd = [sys.executable, __file__, "--worker", name, "--file", path,
           "--tasks", str(tasks), "--seconds", str(seconds)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if r.returncode != 0:
        return {"contender": name, "tasks": tasks, "error": r.stderr.strip().splitlines()[-1:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def show(r: dict, base: dict | None = None) -> str:
    if "error" in r:
        return f"{r['contender']:<28} {r['tasks']:>5}  error: {r['error']}"
    line = (f"{r['contender']:<28} {r['tasks']:>5} {r['reads_per_s']:>10,.0f}/s "
            f"{r['cpu_us_per_read']:>7.1f} us CPU/read")
    if "peak_threads" in r:
        line += f"  threads {r['peak_threads']} (+{r['peak_iou_wrk']} iou-wrk, {r['peak_iou_sqp']} iou-sqp)"
    if base and "reads_per_s" in base and base["reads_per_s"]:
        line += f"  {r['reads_per_s'] / base['reads_per_s']:.2f}x {base['contender']}"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", required=True, help="an existing file to read (read only)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--only", default="direct,buffered,many", help="direct,buffered,many (also: floor, wake)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="one JSON object per result")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker_main(a.worker, a.file, a.tasks, a.seconds)))
        return
    groups = a.only.split(",")
    results = []

    def emit(r, base=None):
        results.append(r)
        print(json.dumps(r) if a.json else show(r, base), flush=True)

    print(f"# {a.file}, {a.seconds:g} s per contender, 4 KiB random reads", flush=True)
    if "direct" in groups:
        print("## O_DIRECT, one read in flight per task", flush=True)
        ov = run_worker("overlap", a.file, a.tasks, a.seconds)
        pe = run_worker("preadv-executor", a.file, a.tasks, a.seconds)
        fi = fio(a.file, a.tasks, a.seconds, direct=True)
        emit(fi)
        emit(pe)
        emit(ov, pe)
        if "reads_per_s" in ov:
            print(f"   overlap / fio: {ov['reads_per_s'] / fi['reads_per_s']:.2f}x", flush=True)
    if "buffered" in groups:
        print("## buffered, file evicted before each contender", flush=True)
        evict(a.file)
        af = run_worker("aiofiles", a.file, a.tasks, a.seconds)
        emit(af)
        evict(a.file)
        ca = run_worker("aiofile+caio", a.file, a.tasks, a.seconds, {"CAIO_IMPL": "uring"})
        emit(ca, af)
        evict(a.file)
        oa = run_worker("overlapped.aiofiles", a.file, a.tasks, a.seconds)
        emit(oa, af)
        if "reads_per_s" in oa and "reads_per_s" in ca:
            print(f"   overlapped.aiofiles / aiofile+caio: {oa['reads_per_s'] / ca['reads_per_s']:.2f}x", flush=True)
    if "floor" in groups:
        print("## where the CPU per read goes: asyncio alone, and overlap on uvloop", flush=True)
        fi = fio(a.file, a.tasks, a.seconds, direct=True)
        emit(fi)
        emit(run_worker("asyncio-floor", a.file, a.tasks, a.seconds))
        ov = run_worker("overlap", a.file, a.tasks, a.seconds)
        emit(ov, fi)
        try:
            import importlib.util

            have_uvloop = importlib.util.find_spec("uvloop") is not None
        except ImportError:
            have_uvloop = False
        if have_uvloop:
            uv = run_worker("overlap", a.file, a.tasks, a.seconds, {"OVERLAP_BENCH_LOOP": "uvloop"})
            uv["contender"] = "overlap on uvloop"
            emit(uv, fi)
        else:
            print("SKIPPED: overlap on uvloop: uvloop is not installed (pip install uvloop)", flush=True)
    if "wake" in groups:
        print("## thread-pool driver (OVERLAP_DRIVER=pool): how pool threads wake the loop", flush=True)
        ev = run_worker("overlap", a.file, a.tasks, a.seconds, {"OVERLAP_DRIVER": "pool"})
        ev["contender"] = "overlap pool, eventfd"
        ts = run_worker("overlap", a.file, a.tasks, a.seconds,
                        {"OVERLAP_DRIVER": "pool", "OVERLAP_PY_WAKE": "threadsafe"})
        ts["contender"] = "overlap pool, call_soon_ts"
        emit(ev)
        emit(ts, ev)
    if "many" in groups:
        print("## buffered, 1024 tasks, file evicted before each contender", flush=True)
        evict(a.file)
        af = run_worker("aiofiles", a.file, 1024, a.seconds)
        emit(af)
        evict(a.file)
        oa = run_worker("overlapped.aiofiles", a.file, 1024, a.seconds)
        emit(oa, af)


if __name__ == "__main__":
    main()
