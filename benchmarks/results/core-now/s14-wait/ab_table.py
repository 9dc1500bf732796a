"""Summarize ab.sh's rounds: python3 ab_table.py OUTDIR -> per round and median, each variant:
8 B one way (us) and x the same job's asyncio floor (aiopdbp, aiopdbp-ro), CPU per round trip x the
floor's, the hop table's wake-up hop (us, 0->1 / 1->0) and its Python calls per round trip
(rank 0 / rank 1)."""
import glob, json, os, statistics, sys

out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "pp-*-*/pingpong.json"))):
    v, i = os.path.basename(os.path.dirname(path)).split("-")[1:]
    d = json.load(open(path))
    r = {x["impl"]: x for x in d["rows"]}
    fl = r["floor"]
    pr = (d.get("hops") or {}).get("per_round_trip", {})
    wake = (d.get("hops") or {}).get("hops", {}).get("wake-up", [float("nan")] * 2)
    rows.setdefault(v, []).append((int(i), r["aiopdbp"]["latency_us"], r["aiopdbp"]["latency_us"] / fl["latency_us"],
                                   r["aiopdbp-ro"]["latency_us"] / fl["latency_us"],
                                   r["aiopdbp"]["cpu_us_per_rt"] / fl["cpu_us_per_rt"], fl["latency_us"],
                                   pr.get("calls", [float("nan")] * 2), pr.get("calls_all", [float("nan")] * 2), wake))
print("| variant | round | aiopdbp us | x floor | ro x floor | CPU x floor's | floor us | wake-up hop us | calls into aiopdbp r0/r1 | all calls r0/r1 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for v in ("base", "new"):
    for i, us, xf, xro, cpu, fl, c, ca, w in sorted(rows.get(v, [])):
        print(f"| {v} | {i} | {us:.2f} | {xf:.2f} | {xro:.2f} | {cpu:.2f} | {fl:.2f} | {w[0]:.2f}/{w[1]:.2f} | {c[0]:.1f}/{c[1]:.1f} | {ca[0]:.1f}/{ca[1]:.1f} |")
for v in ("base", "new"):
    rs = rows.get(v, [])
    if rs:
        print(f"| **{v} median** ({len(rs)}) | | {statistics.median(r[1] for r in rs):.2f} | {statistics.median(r[2] for r in rs):.2f} "
              f"| {statistics.median(r[3] for r in rs):.2f} | {statistics.median(r[4] for r in rs):.2f} | {statistics.median(r[5] for r in rs):.2f} | {statistics.median(r[8][0] for r in rs):.2f}/{statistics.median(r[8][1] for r in rs):.2f} | | |")
