"""CPU seconds of every rank of each run of ab_job.py, summed (on 2 cores a job's quiet wall is
about this sum over 2): ``python cpu_sum.py N_VARIANTS NAME... -- DIR...`` with the runs' output
folders in the order ab_job made them (per round: the variants, alternated, then raw)."""
import json, statistics, sys
from pathlib import Path

args = sys.argv[1:]
cut = args.index("--")
names, dirs = args[:cut], args[cut + 1:]
order = []
k = 0
while len(order) < len(dirs):
    order += (names if k % 2 == 0 else names[::-1]) + ["raw"]
    k += 1
res = {}
for name, d in zip(order, dirs):
    recs = [json.loads(p.read_text()) for p in Path(d).glob("*.json")]
    last = {r["rank"]: list(r["phases"].values())[-1][1] for r in recs}
    imp = {r["rank"]: r["phases"]["main"][1] for r in recs}
    res.setdefault(name, []).append((sum(last.values()), sum(imp.values()), len(recs)))
    print(f"{name:8} {Path(d).name}  ranks {len(recs)}  CPU all ranks {sum(last.values()):6.2f} s  "
          f"of it to imports done {sum(imp.values()):5.2f} s")
for name, runs in res.items():
    print(f"median {name:8} CPU all ranks {statistics.median(r[0] for r in runs):6.2f} s  "
          f"imports {statistics.median(r[1] for r in runs):5.2f} s  ({len(runs)} runs)")
