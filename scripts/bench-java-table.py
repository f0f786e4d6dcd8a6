#!/usr/bin/env python3
"""Summarises scripts/bench-java's OUT.jsonl: per executor variant and
workload, the median reads/s of each system, the median of the per-round
ratios overlap-java / java-afc (reads/s, then CPU per read) and the threads
each process had. With WARM=K (K repetitions in one JVM), the cold run
(repetition 0, what the harness alone measures) and the warm one (the last)
are shown as separate rows."""
import json
import statistics
import sys
from collections import defaultdict

if len(sys.argv) != 2:
    sys.exit("usage: bench-java-table.py OUT.jsonl")
rows = defaultdict(dict)  # (variant, workload, run) -> {(round, system): record}
last_rep = defaultdict(int)  # (variant, workload) -> the highest repetition seen
records = []
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    wl = r["workload"]
    if "C" in r["params"]:
        wl = f"{wl}:{r['params']['C']}"
    rep = r.get("rep", 0)
    records.append((r["params"]["variant"], wl, rep, r))
    last_rep[(r["params"]["variant"], wl)] = max(last_rep[(r["params"]["variant"], wl)], rep)
for variant, wl, rep, r in records:
    last = last_rep[(variant, wl)]
    if last == 0:
        run = "one"
    elif rep == 0:
        run = "cold"
    elif rep == last:
        run = f"warm (run {last + 1} of {last + 1})"
    else:
        continue
    rows[(variant, wl, run)][(r["round"], r["system"])] = r


def cpu_us(r):
    reads = float(r["iops"]) * float(r["complete_s"])
    return float(r["cpu_s"]) / reads * 1e6 if reads else float("nan")


print("| executor | workload | JVM | overlap-java reads/s | JDK reads/s | overlap / JDK (rounds) "
      "| CPU us/read overlap / JDK | threads overlap / JDK |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
def order(item):
    (variant, wl, run), _ = item
    name, _, c = wl.partition(":")
    return (variant, name, int(c or 0), run)


for (variant, wl, run), by in sorted(rows.items(), key=order):
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
    print(f"| {variant} | {wl} | {run} | {o_iops / 1e3:.1f}k | {j_iops / 1e3:.1f}k | "
          f"**{statistics.median(ratios):.2f}** ({', '.join(f'{x:.2f}' for x in ratios)}) | "
          f"{o_cpu:.1f} / {j_cpu:.1f} | {o_thr} / {j_thr} |")

# The W3 comparison takes what each gives a program at its best: overlap-java with its
# default group (at most 8 library threads) against the JDK's channel with a 32-thread pool.
cross = []
for (variant, wl, run), by in sorted(rows.items(), key=order):
    if variant != "default":
        continue
    other = rows.get(("pool32", wl, run), {})
    rounds = sorted({rd for rd, _ in by})
    pairs = [(by[(rd, "overlap-java")], other[(rd, "java-afc")]) for rd in rounds
             if (rd, "overlap-java") in by and (rd, "java-afc") in other]
    if pairs:
        ratios = [float(o["iops"]) / float(j["iops"]) for o, j in pairs]
        cross.append(f"| {wl} | {run} | {statistics.median(float(o['iops']) for o, _ in pairs) / 1e3:.1f}k | "
                     f"{statistics.median(float(j['iops']) for _, j in pairs) / 1e3:.1f}k | "
                     f"**{statistics.median(ratios):.2f}** ({', '.join(f'{x:.2f}' for x in ratios)}) |")
if cross:
    print()
    print("| workload | JVM | overlap-java, default group | JDK, 32-thread pool | overlap / JDK (rounds) |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(cross))
