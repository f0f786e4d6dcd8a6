#!/usr/bin/env python3
"""Summarises scripts/bench-hotpath output: one row per shape and binary, with
the fio results of the same invocation and the ratios (IOPS, CPU per read).

    scripts/hotpath-table.py OUT.jsonl [OUT2.jsonl ...]   (several: medians)
"""
import json, statistics, sys
from collections import defaultdict

rows = defaultdict(list)  # (shape, binary) -> list of (overlap, fio_uring, fio_psync)
for path in sys.argv[1:]:
    inv = defaultdict(list)
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            inv[(r["shape"], r["binary"])].append(r)
    for key, rs in inv.items():
        ov = [r for r in rs if r["system"] == "overlap"]
        fu = [r for r in rs if r["system"] == "fio" and r["driver"] == "io_uring"]
        fp = [r for r in rs if r["system"] == "fio" and r["driver"] == "psync"]
        if ov:
            rows[key].append((ov[0], fu[0] if fu else None, fp[0] if fp else None))

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def f(x, fmt):
    return "-" if x is None else fmt.format(x)

print("| shape | binary | overlap IOPS | CPU us/read | fio io_uring IOPS | CPU us/read | fio psync IOPS | vs fio io_uring | vs psync | CPU vs fio io_uring |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (shape, binary), runs in rows.items():
    oi = med([o["iops"] for o, _, _ in runs]); oc = med([o["cpu_us_per_op"] for o, _, _ in runs])
    ui = med([u["iops"] if u else None for _, u, _ in runs]); uc = med([u["cpu_us_per_op"] if u else None for _, u, _ in runs])
    pi = med([p["iops"] if p else None for _, _, p in runs])
    r1 = med([o["iops"] / u["iops"] if u else None for o, u, _ in runs])
    r2 = med([o["iops"] / p["iops"] if p else None for o, _, p in runs])
    r3 = med([o["cpu_us_per_op"] / u["cpu_us_per_op"] if u else None for o, u, _ in runs])
    print(f"| `{shape}` | {binary} | {f(oi,'{:,.0f}')} | {f(oc,'{:.1f}')} | {f(ui,'{:,.0f}')} | {f(uc,'{:.1f}')} | {f(pi,'{:,.0f}')} | {f(r1,'{:.2f}x')} | {f(r2,'{:.2f}x')} | {f(r3,'{:.2f}x')} |")
