#!/usr/bin/env python3
"""Summarises scripts/bench-tokio output: median IOPS and CPU per read of
each (driver, tasks) with its fio equivalent, and the ratios of
overlapped-tokio to spawn_blocking, tokio::fs and plain threads."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = defaultdict(list)
for r in rows:
    key = (r["job_driver"], r["concurrency"] if r["system"] == "overlap" else None)
    by[(r["job_driver"], r["system"], r["driver"], r.get("_conc", None))].append(r)

# Pair each overlap row with the fio rows that follow it in the same job.
jobs = []
cur = None
for r in rows:
    if r["system"] == "overlap":
        cur = {"d": r["job_driver"], "n": r["concurrency"], "round": r["round"], "o": r, "fio": {}}
        jobs.append(cur)
    elif cur is not None:
        cur["fio"][f'{r["driver"]}{r["iodepth"] if r["driver"] == "io_uring" else r["concurrency"]}'] = r

def med(vals):
    return statistics.median(vals) if vals else float("nan")

table = defaultdict(lambda: defaultdict(list))
for j in jobs:
    t = table[(j["d"], j["n"])]
    t["iops"].append(j["o"]["iops"])
    t["cpu"].append(j["o"]["cpu_us_per_op"])
    t["thr"].append(j["o"]["threads_peak"])
    for name, f in j["fio"].items():
        t["fio " + name].append(f["iops"])
        t["ratio " + name].append(j["o"]["iops"] / f["iops"])

print("| driver | tasks | IOPS | CPU us/read | threads | fio (same job) | ratio vs fio |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for (d, n), t in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    fio = [k[4:] for k in t if k.startswith("fio ")]
    fio_txt = ", ".join(f"{k} {med(t['fio ' + k])/1000:.1f}k" for k in fio)
    rat_txt = ", ".join(f"{med(t['ratio ' + k]):.2f}x {k}" for k in fio)
    print(f"| {d} | {n} | {med(t['iops'])/1000:.1f}k | {med(t['cpu']):.1f} | {max(t['thr'])} | {fio_txt} | {rat_txt} |")

print()
for n in sorted({n for (_, n) in table}):
    u = med(table[("uring", n)]["iops"]) if ("uring", n) in table else None
    if not u:
        continue
    for d in ("spawn-blocking", "tokio-fs", "sync"):
        if (d, n) in table:
            print(f"{n} tasks: overlapped-tokio / {d} = {u / med(table[(d, n)]['iops']):.2f}x (medians)")
