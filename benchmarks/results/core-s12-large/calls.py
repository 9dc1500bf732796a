"""The per-message calls of prof.sh's two profiles side by side: rank 0's aiopdbp functions
called at most 1.5 times per round trip (a function the waiting loop calls runs tens of times
per round trip: its count is waiting, not work).   python calls.py prof"""
import re, sys
from pathlib import Path

def calls(path):
    out, on = {}, False
    for line in Path(path).read_text().splitlines():
        if line.startswith("[1]"):
            continue
        if "rank 0 65536 B per round trip" in line:
            on = True
            continue
        if "rank 1 65536 B per round trip" in line:
            break
        m = re.match(r"\[0\]\s+([\d.]+)\s+(\S+:\d+ \S+)\s+tot", line)
        if on and m and not m.group(2).startswith("~"):
            out[re.sub(r":\d+", "", m.group(2))] = float(m.group(1))
    return out

d = Path(sys.argv[1])
b, n = calls(d / "profile-64K-base.txt"), calls(d / "profile-64K-new.txt")
keys = sorted({k for k, v in {**b, **n}.items() if max(b.get(k, 0), n.get(k, 0)) <= 1.5},
              key=lambda k: (-b.get(k, 0), k))
print(f"{'function':45} base  new   (calls per round trip, rank 0, aiopdbp's at most 1.5)")
for k in keys:
    print(f"{k:45} {b.get(k, 0):5.2f} {n.get(k, 0):5.2f}")
print(f"{'sum':45} {sum(b.get(k, 0) for k in keys):5.2f} {sum(n.get(k, 0) for k in keys):5.2f}")
