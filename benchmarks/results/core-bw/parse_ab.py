"""Medians of the A/B rounds of ab.sh: aiopdbp's bandwidth / mpi4py's, per size and side."""
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
ratios: dict[tuple[str, int], list[float]] = {}
for f in sorted(out.glob("[AB]-*/pingpong.json")):
    side = f.parent.name.split("-")[0]
    rows = json.loads(f.read_text())["rows"]
    by = {(r["size"], r["impl"]): r for r in rows}
    for (size, impl), r in by.items():
        if impl == "aiopdbp" and (size, "mpi4py") in by:
            ratios.setdefault((side, size), []).append(r["bandwidth_GBps"] / by[(size, "mpi4py")]["bandwidth_GBps"])
print("| size | A (before) x mpi4py bw | B (after) | rounds |\n|---|---|---|---|")
for size in sorted({s for _, s in ratios}):
    a, b = ratios.get(("A", size), []), ratios.get(("B", size), [])
    fmt = lambda xs: f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"
    print(f"| {size} | {fmt(a)} | {fmt(b)} | {len(a)}/{len(b)} |")
