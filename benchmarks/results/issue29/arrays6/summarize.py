"""Medians over the repeats of abab.sh outputs: per side, min numpy us/RT,
min torch - numpy, min (numpy+calls) - numpy, torch/numpy of the mins.
    python summarize.py ab_8.txt ab_64k.txt ab_8_step1.txt"""
import re, statistics, sys
for f in sys.argv[1:]:
    side = None; runs: dict = {}
    for line in open(f):
        m = re.match(r"== (\w+) (\d+)", line)
        if m:
            side = m.group(1); runs.setdefault(side, []).append({}); continue
        m = re.match(r"\s*\d+ B (\S+)\s+CPU us/RT min\s+([\d.]+)", line)
        if m and side:
            runs[side][-1][m.group(1)] = float(m.group(2))
    for side, rs in runs.items():
        rs = [r for r in rs if "numpy" in r and "torch" in r]
        med = lambda xs: statistics.median(xs)
        s = f"{f}: {side:6s} n={len(rs)} numpy {med([r['numpy'] for r in rs]):.2f}"
        s += f"  torch-numpy {med([r['torch'] - r['numpy'] for r in rs]):+.2f} [{min(r['torch'] - r['numpy'] for r in rs):+.2f}..{max(r['torch'] - r['numpy'] for r in rs):+.2f}]"
        s += f"  torch/numpy {med([r['torch'] / r['numpy'] for r in rs]):.3f}"
        if all("numpy+calls" in r for r in rs):
            s += f"  calls-numpy {med([r['numpy+calls'] - r['numpy'] for r in rs]):+.2f} [{min(r['numpy+calls'] - r['numpy'] for r in rs):+.2f}..{max(r['numpy+calls'] - r['numpy'] for r in rs):+.2f}]"
            s += f"  calls/numpy {med([r['numpy+calls'] / r['numpy'] for r in rs]):.3f}"
        print(s)
