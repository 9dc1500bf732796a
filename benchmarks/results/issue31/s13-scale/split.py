"""split.py DIR [PREFIX]: perf samples of the ranks by phase (from each rank's JSON stamps) and by dso/symbol class."""
import collections, json, re, subprocess, sys
from pathlib import Path
d = Path(sys.argv[1]); prefix = sys.argv[2] if len(sys.argv) > 2 else "aiopdbp"
launched = float((d / "launched").read_text())
pid2rank = {int(p.read_text()): int(p.name[4:]) for p in d.glob("pid-*")}
recs = {r["rank"]: r for r in (json.loads(p.read_text()) for p in d.glob(f"{prefix}-*.json"))}
order = list(recs[0]["phases"])
out = subprocess.run(["perf", "script", "-i", str(d / "perf.data"), "-F", "pid,tid,time,ip,sym,dso"],
                     capture_output=True, text=True).stdout
line = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*?)\s*\((.*)\)$")
cnt = collections.Counter(); by = collections.defaultdict(collections.Counter); tids = collections.Counter()
for l in out.splitlines():
    m = line.match(l)
    if not m:
        continue
    pid, tid, t, sym, dso = int(m[1]), int(m[2]), float(m[3]) - launched, m[4], m[5]
    rank = pid2rank.get(pid)
    if rank is None:
        ph = "other-proc"
    else:
        ph = next((k for k in order if t <= recs[rank]["phases"][k][0]), "after")
        if pid != tid:
            tids[ph] += 1
    cnt[ph] += 1
    dso = dso.rsplit("/", 1)[-1]
    cls = ("kernel:" + sym) if "kernel" in dso else dso.split(".cpython")[0].split(".so")[0]
    by[ph][cls] += 1
tot = sum(cnt.values())
print(f"samples {tot} (1 ms each): per phase (ms over all processes), thread samples (non-main)")
for ph in [*order, "after", "other-proc"]:
    if cnt[ph]:
        top = ", ".join(f"{k} {v}" for k, v in by[ph].most_common(12))
        print(f"{ph:11} {cnt[ph]:6}  thr {tids[ph]:5}  | {top}")
