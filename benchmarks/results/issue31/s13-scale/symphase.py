"""symphase.py DIR PREFIX PHASE: top symbols in that phase over all ranks."""
import collections, json, re, subprocess, sys
from pathlib import Path
d = Path(sys.argv[1]); prefix = sys.argv[2]; want = sys.argv[3]
launched = float((d / "launched").read_text())
pid2rank = {int(p.read_text()): int(p.name[4:]) for p in d.glob("pid-*")}
recs = {r["rank"]: r for r in (json.loads(p.read_text()) for p in d.glob(f"{prefix}-*.json"))}
order = list(recs[0]["phases"])
out = subprocess.run(["perf", "script", "-i", str(d / "perf.data"), "-F", "pid,tid,time,ip,sym,dso"], capture_output=True, text=True).stdout
line = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*?)\s*\((.*)\)$")
c = collections.Counter(); n = 0
for l in out.splitlines():
    m = line.match(l)
    if not m: continue
    rank = pid2rank.get(int(m[1]))
    if rank is None: continue
    t = float(m[3]) - launched
    ph = next((k for k in order if t <= recs[rank]["phases"][k][0]), "after")
    if ph == want:
        c[m[4] + " " + m[5].rsplit("/", 1)[-1][:20]] += 1; n += 1
print(want, n)
for k, v in c.most_common(int(sys.argv[4]) if len(sys.argv) > 4 else 30): print(f"{v:6} {k}")
