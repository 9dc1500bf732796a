"""python3 summarize.py OUT: tensor_ab.sh's outputs as medians per tree, payload and size
(one-way latency p50 and CPU us per round trip of the aiopdbp rows), and the torch/numpy figures."""
import re
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
SIZES = ("8 B", "64 KiB", "16 MiB")
data: dict = {}
loads = []
for f in sorted(out.glob("*_*.txt")):
    tree, pay = f.stem.split("_", 1)
    for line in f.read_text().splitlines():
        if line.startswith("=="):
            m = re.search(r"load average: ([\d.]+)", line)
            if m:
                loads.append(float(m.group(1)))
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[2] == "aiopdbp" and cells[1] in SIZES:
            data.setdefault((tree, pay, cells[1]), []).append((float(cells[4]), float(cells[7])))
print(f"{out}: load averages (1 min) at the runs' starts {min(loads):.1f}-{max(loads):.1f}")
print("| tree | payload | size | runs | p50 one way (us), median | [each run] | CPU us/RT, median |")
print("|---|---|---|---|---|---|---|")
med = {}
for key in sorted(data, key=lambda k: (k[0], SIZES.index(k[2]), k[1])):
    p50 = [r[0] for r in data[key]]
    cpu = [r[1] for r in data[key]]
    med[key] = (statistics.median(p50), statistics.median(cpu))
    print(f"| {key[0]} | {key[1]} | {key[2]} | {len(p50)} | {med[key][0]:.2f} | {' '.join(f'{x:.1f}' for x in p50)} "
          f"| {med[key][1]:.1f} |")
print()
print("| tree | size | torch - numpy (us) | torch / numpy | torch / numpyT (torch imported) | numpyT / numpy |")
print("|---|---|---|---|---|---|")
for tree in ("base", "branch"):
    for s in SIZES:
        try:
            n, t = med[(tree, "numpy", s)][0], med[(tree, "torch", s)][0]
        except KeyError:
            continue
        nt = med.get((tree, "numpyT", s), (float("nan"),))[0]
        print(f"| {tree} | {s} | {t - n:+.2f} | {t / n:.3f} | {t / nt:.3f} | {nt / n:.3f} |")
