"""cgdiff.py A.out B.out N [--inclusive]: per-function instructions per round trip, B - A."""
import re, subprocess, sys
def load(f, inc):
    args = ["callgrind_annotate", "--auto=no", "--threshold=100"] + (["--inclusive=yes"] if inc else []) + [f]
    out = subprocess.run(args, capture_output=True, text=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)", line)
        if not m: continue
        name = re.sub(r"/tmp/python-build[^ ]*Python-3.11.7/", "", m.group(2))
        name = re.sub(r"\[.*\]$", "", name).strip()
        name = re.sub(r"^(/tmp/tensor16-base|/tmp/tensor16-new|/work/wt/tensor16)/", "", name)
        d[name] = d.get(name, 0) + int(m.group(1).replace(",", ""))
    return d
a, b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
inc = "--inclusive" in sys.argv
A, B = load(a, inc), load(b, inc)
rows = sorted(((B.get(k, 0) - A.get(k, 0)) / n, A.get(k, 0) / n, B.get(k, 0) / n, k) for k in set(A) | set(B))
top = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4].isdigit() else 40
print(f"{'B-A':>9} {'A':>9} {'B':>9}  function (per round trip)")
for r in sorted(rows, key=lambda r: -abs(r[0]))[:top]:
    print(f"{r[0]:9.0f} {r[1]:9.0f} {r[2]:9.0f}  {r[3][:140]}")
