"""Medians over the runs of benchmarks/large_hops.py in a folder: FOLDER/{A,B,C}-N.txt.

    python3 benchmarks/results/core-bw/parse_hops.py FOLDER
"""
import re
import statistics
import sys
from pathlib import Path

runs: dict[tuple[str, int], dict[str, list[float]]] = {}
for f in sorted(Path(sys.argv[1]).glob("[ABC]-*.txt")):
    side = f.stem.split("-")[0]
    size = 0
    for line in f.read_text().splitlines():
        m = re.search(r"(\d+) B one-way hop", line)
        if m:
            size = int(m.group(1))
        m = re.match(r"\[0\] \| ([a-z ]+) \| ([\d.]+) \| ([\d.]+) \|", line)
        if m:
            d = runs.setdefault((side, size), {})
            d.setdefault(m.group(1), []).extend([float(m.group(2)), float(m.group(3))])
        m = re.search(r"rank \d (\d+) B per round trip: data MPI messages ([\d.]+), control (\{.*\})", line)
        if m:
            d = runs.setdefault((side, int(m.group(1))), {})
            d.setdefault("data MPI messages / RT", []).append(float(m.group(2)))
            ctl = eval(m.group(3))  # noqa: S307 (our own output: a dict of floats)
            d.setdefault("CreditMsg / RT", []).append(float(ctl.get("CreditMsg", 0.0)))
            cur = d
        m = re.search(r"without the polling loop's ([\d.]+)", line)
        if m:
            cur.setdefault("calls into aiopdbp / RT (no polling)", []).append(float(m.group(1)))
sizes = sorted({s for _, s in runs})
sides = sorted({s for s, _ in runs})
for size in sizes:
    print(f"\n{size} B: medians over runs and both directions or ranks (range)")
    print("| figure | " + " | ".join(sides) + " |\n|---|" + "---|" * len(sides))
    keys = list(dict.fromkeys(k for s in sides for k in runs.get((s, size), {})))
    for k in keys:
        cells = []
        for s in sides:
            xs = runs.get((s, size), {}).get(k, [])
            cells.append(f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")
