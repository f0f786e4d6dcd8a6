#!/usr/bin/env python3
"""Summarises scripts/bench-c output: per shape, the median reads/s and CPU
per read of each system, and the ratios of liboverlap (c; c-caller: an
engine with OVERLAP_ENGINE_WAITS_ON_CALLER) to the others, medians of the
per-round ratios.

    scripts/bench-c-table.py OUT.txt
"""
import statistics, sys
from collections import defaultdict

runs = defaultdict(dict)  # (shape, round) -> system -> (rps, cpu)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 5:
        continue
    rnd, shape, who, rps, cpu = f
    runs[(shape, rnd)][who] = (float(rps), float(cpu))
shapes = []
for shape, _ in runs:
    if shape not in shapes:
        shapes.append(shape)
mine = ["c", "c-caller"]
present = [m for m in mine if any(m in v for v in runs.values())]
head = " | ".join(f"{m} / system, reads/s | {m} / system, CPU" for m in present)
print(f"| shape | system | reads/s (median) | CPU us/read | {head} |")
print("|---|---|---|---|" + "---|---|" * len(present))
for shape in shapes:
    rounds = [v for (s, _), v in runs.items() if s == shape]
    systems = sorted({w for v in rounds for w in v}, key=lambda w: (w not in mine, w))
    for who in systems:
        vals = [v[who] for v in rounds if who in v]
        cells = []
        for m in present:
            ratios = [v[m][0] / v[who][0] for v in rounds if who in v and m in v]
            cpu = [v[m][1] / v[who][1] for v in rounds if who in v and m in v and v[who][1] > 0]
            cells.append("-" if who == m or not ratios else f"{statistics.median(ratios):.3f}")
            cells.append("-" if who == m or not cpu else f"{statistics.median(cpu):.3f}")
        print(f"| {shape} | {who} | {statistics.median(x[0] for x in vals)/1e3:.1f}k | "
              f"{statistics.median(x[1] for x in vals):.2f} | " + " | ".join(cells) + " |")
