#!/usr/bin/env python3
"""Summarises scripts/bench-c output: per shape, the median reads/s and CPU
per read of each system, and the ratios of liboverlap (c) to the others,
medians of the per-round ratios.

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
print("| shape | system | reads/s (median) | CPU us/read | c / system, reads/s | c / system, CPU |")
print("|---|---|---|---|---|---|")
for shape in shapes:
    rounds = [v for (s, _), v in runs.items() if s == shape]
    systems = sorted({w for v in rounds for w in v}, key=lambda w: (w != "c", w))
    for who in systems:
        vals = [v[who] for v in rounds if who in v]
        ratios = [v["c"][0] / v[who][0] for v in rounds if who in v and "c" in v]
        cpu = [v["c"][1] / v[who][1] for v in rounds if who in v and "c" in v and v[who][1] > 0]
        r = "-" if who == "c" else f"{statistics.median(ratios):.3f}"
        cr = "-" if who == "c" or not cpu else f"{statistics.median(cpu):.3f}"
        print(f"| {shape} | {who} | {statistics.median(x[0] for x in vals)/1e3:.1f}k | "
              f"{statistics.median(x[1] for x in vals):.2f} | {r} | {cr} |")
