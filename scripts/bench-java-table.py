#!/usr/bin/env python3
"""Summarises scripts/bench-java's OUT.jsonl: per executor variant and
workload, the median reads/s of each system, the median of the per-round
ratios overlap-java / java-afc (reads/s, then CPU per read) and the threads
each process had."""
import json
import statistics
import sys
from collections import defaultdict

if len(sys.argv) != 2:
    sys.exit("usage: bench-java-table.py OUT.jsonl")
rows = defaultdict(dict)  # (variant, workload) -> {(round, system): record}
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    wl = r["workload"]
    if "C" in r["params"]:
        wl = f"{wl}:{r['params']['C']}"
    key = (r["params"]["variant"], wl)
    rows[key][(r["round"], r["system"])] = r


def cpu_us(r):
    reads = float(r["iops"]) * float(r["complete_s"])
    return float(r["cpu_s"]) / reads * 1e6 if reads else float("nan")


print("| executor | workload | overlap-java reads/s | JDK reads/s | overlap / JDK (rounds) "
      "| CPU us/read overlap / JDK | threads overlap / JDK |")
print("| --- | --- | --- | --- | --- | --- | --- |")
def order(item):
    (variant, wl), _ = item
    name, _, c = wl.partition(":")
    return (variant, name, int(c or 0))


for (variant, wl), by in sorted(rows.items(), key=order):
    rounds = sorted({rd for rd, _ in by})
    pairs = [(by[(rd, "overlap-java")], by[(rd, "java-afc")]) for rd in rounds
             if (rd, "overlap-java") in by and (rd, "java-afc") in by]
    if not pairs:
        continue
    o_iops = statistics.median(float(o["iops"]) for o, _ in pairs)
    j_iops = statistics.median(float(j["iops"]) for _, j in pairs)
    ratios = [float(o["iops"]) / float(j["iops"]) for o, j in pairs]
    o_cpu = statistics.median(cpu_us(o) for o, _ in pairs)
    j_cpu = statistics.median(cpu_us(j) for _, j in pairs)
    o_thr = max(o["threads"] for o, _ in pairs)
    j_thr = max(j["threads"] for _, j in pairs)
    print(f"| {variant} | {wl} | {o_iops / 1e3:.1f}k | {j_iops / 1e3:.1f}k | "
          f"**{statistics.median(ratios):.2f}** ({', '.join(f'{x:.2f}' for x in ratios)}) | "
          f"{o_cpu:.1f} / {j_cpu:.1f} | {o_thr} / {j_thr} |")
