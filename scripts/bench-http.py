#!/usr/bin/env python3
"""The Python parts of scripts/bench-http (the HTTP load sweep).

    bench-http.py mkdata DIR small|large COUNT    the dataset (idempotent)
    bench-http.py evict DIR                       drop DIR's files from the page cache
    bench-http.py warm DIR                        read DIR's files into the page cache
    bench-http.py freeport                        a free TCP port on 127.0.0.1
    bench-http.py readsectors PATH                sectors read so far by PATH's device
    bench-http.py plot CSV PNG                    requests/s and p99 against connections
    bench-http.py table CSV                       the markdown table for BENCHMARKS.md

Only the standard library, except `plot` (matplotlib).
"""
import csv
import os
import random
import socket
import sys


def files_of(d):
    for root, _, names in os.walk(d):
        for n in names:
            if not n.endswith(".lst"):
                yield os.path.join(root, n)


def mkdata(d, kind, count):
    """COUNT files under D/kind: 4-64 KiB each (small) or 1 MiB (large), in
    folders of 1000, and D/kind.lst with their URL paths."""
    count = int(count)
    base = os.path.join(d, kind)
    lst = os.path.join(d, kind + ".lst")
    stamp = os.path.join(d, f".{kind}-{count}.done")
    if os.path.exists(stamp):
        return
    rng = random.Random(42)
    paths = []
    for i in range(count):
        sub = f"{i // 1000:03d}"
        os.makedirs(os.path.join(base, sub), exist_ok=True)
        size = rng.randint(4 << 10, 64 << 10) if kind == "small" else 1 << 20
        rel = f"{kind}/{sub}/f{i:06d}.bin"
        with open(os.path.join(d, rel), "wb") as f:
            f.write(os.urandom(size))
        paths.append("/" + rel)
    with open(lst, "w") as f:
        f.write("\n".join(paths) + "\n")
    open(stamp, "w").close()


def evict(d):
    for p in files_of(d):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(d):
    for p in files_of(d):
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def freeport():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def readsectors(path):
    """Sectors read by the block device (or partition) holding PATH: its own
    line of /proc/diskstats; 0 where it has none (an overlay, btrfs or tmpfs
    has an anonymous device number), which the caller warns about."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if int(p[0]) == major and int(p[1]) == minor:
                print(p[5])
                return
    print(0)


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def plot(csv_path, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = rows(csv_path)
    panels = sorted({(r["dataset"], r["cache"]) for r in data})
    fig, axes = plt.subplots(2, max(1, len(panels)), figsize=(5 * max(1, len(panels)), 8), squeeze=False)
    for col, (ds, cache) in enumerate(panels):
        for server in sorted({r["server"] for r in data}):
            pts = sorted(
                (int(r["connections"]), float(r["requests_per_s"]), float(r["p99_ms"]))
                for r in data
                if r["dataset"] == ds and r["cache"] == cache and r["server"] == server
            )
            if not pts:
                continue
            xs = [p[0] for p in pts]
            axes[0][col].plot(xs, [p[1] for p in pts], marker="o", label=server)
            axes[1][col].plot(xs, [p[2] for p in pts], marker="o", label=server)
        for row, what in ((0, "requests/s"), (1, "p99 latency (ms)")):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            levels = sorted({int(r["connections"]) for r in data})
            ax.set_xticks(levels)
            ax.set_xticklabels([str(x) for x in levels])
            ax.set_xlabel("connections")
            ax.set_ylabel(what)
            ax.set_title(f"{ds} files, {cache}")
            ax.grid(True, alpha=0.3)
            ax.legend()
        axes[1][col].set_yscale("log")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def table(csv_path):
    data = rows(csv_path)
    print("| dataset | cache | server | connections | req/s | MB/s | p50 ms | p99 ms | /health p99 ms | device MB read | errors |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in data:
        print(
            f"| {r['dataset']} | {r['cache']} | {r['server']} | {r['connections']} | "
            f"{float(r['requests_per_s']):.0f} | {float(r['mb_per_s']):.1f} | {r['p50_ms']} | "
            f"{r['p99_ms']} | {r['health_p99_ms']} | {r['device_read_mb']} | {r['errors']} |"
        )


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "mkdata": mkdata,
        "evict": evict,
        "warm": warm,
        "freeport": freeport,
        "readsectors": readsectors,
        "plot": plot,
        "table": table,
    }[cmd](*args)


if __name__ == "__main__":
    main()
