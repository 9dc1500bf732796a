"""Tables of this folder's runs: python3 summarize.py  (ab/ and inproc/)."""
import glob
import os
import re
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
import sys
AB = sys.argv[1] if len(sys.argv) > 1 else "ab"


def load(f: str) -> str:
    m = re.search(r"load average: ([\d.]+)", open(f).read())
    return m.group(1) if m else "?"


print("## ab/: bench pingpong, aiopdbp row: one way p50 (us) and CPU us/RT, by round")
rows: dict = {}
for f in sorted(glob.glob(f"{HERE}/{AB}/r*_*_*.txt")):
    r, v, p = os.path.basename(f)[:-4].split("_")
    for line in open(f):
        m = re.match(r"\| (8 B|64 KiB) \| aiopdbp \|[^|]*\| ([\d.]+) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|", line)
        if m:
            rows.setdefault((m.group(1), r), {})[(v, p)] = (float(m.group(2)), float(m.group(3)), load(f))
for (size, r), d in sorted(rows.items()):
    cells = []
    for v in ("base", "new"):
        if (v, "numpy") in d and (v, "torch") in d:
            (nl, nc, ld1), (tl, tc, ld2) = d[(v, "numpy")], d[(v, "torch")]
            cells.append(f"{v}: numpy {nl:.0f} torch {tl:.0f} us ({tl / nl:.2f}x, load {ld1}/{ld2}); CPU/RT {nc:.0f} / {tc:.0f}")
    print(f"{size:7s} {r}: " + " | ".join(cells))

print("\n## inproc/: thread CPU per in-process round trip, torch - numpy (median of batches), by round")
got: dict = {}
for f in sorted(glob.glob(f"{HERE}/inproc/s*_r*_*.txt")):
    s, r, v = os.path.basename(f)[:-4].split("_")
    for line in open(f):
        m = re.search(r"torch-numpy us/RT: min ([-+\d.]+) p10 ([-+\d.]+) median ([-+\d.]+); torch/numpy: min ([\d.]+) median ([\d.]+)", line)
        if m:
            got.setdefault((int(s[1:]), v), []).append((r, float(m.group(3)), float(m.group(5)), float(m.group(1)), load(f)))
for (s, v), lst in sorted(got.items()):
    print(f"{s:>6} B {v:4s}: " + "; ".join(f"{r} +{d:.1f} us ({q:.3f}x, min {mn:+.1f}, load {ld})" for r, d, q, mn, ld in lst)
          + f"  -> median {statistics.median(x[1] for x in lst):+.1f} us/RT, {statistics.median(x[2] for x in lst):.3f}x")
