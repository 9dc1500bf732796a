"""Per-phase durations (latest rank's end minus the previous phase's latest end) and the
summed CPU per phase, from ab_job.py's output: medians per variant, and new/base per round.
Usage: python phase_durations.py ab32-N.txt"""
import re, statistics, sys
from collections import defaultdict

walls, durs, cpus = defaultdict(list), defaultdict(lambda: defaultdict(list)), defaultdict(lambda: defaultdict(list))
last = None
for line in open(sys.argv[1]):
    m = re.match(r"\[(\d+)\] (\S+)\s+wall\s+([\d.]+)\s+load ([\d., ]+?)\s{2}(.*)", line)
    if m:
        rnd, name, wall = int(m[1]), m[2], float(m[3])
        walls[name].append(wall)
        prev = 0.0
        for ph, a, b in re.findall(r"(\w+) ([\d.]+)/([\d.]+) c", m[5]):
            durs[name][ph].append(float(b) - prev)
            prev = float(b)
        last = name
        continue
    m = re.match(r"\s+(\S+)\s+cpu-all (.*) total ([\d.]+)", line)
    if m and not line.strip().startswith("median"):
        for ph, v in re.findall(r"(\w+) ([\d.]+)", m[2]):
            cpus[m[1]][ph].append(float(v))
        cpus[m[1]]["total"].append(float(m[3]))
for name in walls:
    print(f"{name:6} n={len(walls[name])} wall median {statistics.median(walls[name]):6.2f}  (runs {' '.join(f'{w:.2f}' for w in walls[name])})")
    print("   phase duration medians: " + "  ".join(f"{p} {statistics.median(v):.2f}" for p, v in durs[name].items()))
    print("   summed CPU medians:     " + "  ".join(f"{p} {statistics.median(v):.2f}" for p, v in cpus[name].items()))
if "base" in walls and "new" in walls:
    r = [n / b for n, b in zip(walls["new"], walls["base"])]
    print(f"new/base wall per round: {' '.join(f'{x:.3f}' for x in r)}  median {statistics.median(r):.3f}")
    for ph in durs["base"]:
        rr = [n / b for n, b in zip(durs["new"][ph], durs["base"][ph]) if b > 0]
        print(f"  {ph:10} duration new/base per round: {' '.join(f'{x:.2f}' for x in rr)}  median {statistics.median(rr):.2f}")
    if "raw" in walls:
        for v in ("base", "new"):
            rr = [a / b for a, b in zip(walls[v], walls["raw"])]
            print(f"{v}/raw wall per round: {' '.join(f'{x:.2f}' for x in rr)}  median {statistics.median(rr):.2f}")
