"""(s14: copied from ../s7-start, with every rank's CPU per phase summed, "cpu-all")
A/B of the whole all-to-all job (``bench scale``'s rank program) between variants,
alternated: ``python ab_job.py -n 32 --repeats 3 NAME=PYTHON[:ENV=V,...] ...``.

PYTHON is a checkout's ``.venv/bin/python``; each variant runs in its checkout
(``python -m`` puts the working directory first on the ranks' sys.path).  Each variant runs ``PYTHON -m aiopdbp launch -n N PROG rank --pattern alltoall --out D
--launched T`` (PROG: this branch's scale_job.py by path, so an older aiopdbp runs the
same rank program), and the raw program (scale_raw.py) once per round.  Prints, per run,
the job's wall and each phase's end (rank 0 / latest other) and CPU (r0 / max other),
and per variant the medians, with ``uptime`` before each run."""
import argparse, json, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve()
BENCH = HERE.parents[4] / "aiopdbp" / "bench"
PROG, RAW = BENCH / "scale_job.py", BENCH / "scale_raw.py"


CPU = []   # the last run's summed CPU per phase (appended by phases())


def cpu_line(c):
    return "cpu-all " + "  ".join(f"{k} {v:.2f}" for k, v in c.items()) + f"  total {sum(c.values()):.2f}"


def phases(folder, prefix):
    recs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob(f"{prefix}-*.json"))]
    order = list(recs[0]["phases"])
    out = {}
    for i, k in enumerate(order):
        ends = {r["rank"]: r["phases"][k][0] for r in recs}
        cpu = {r["rank"]: r["phases"][k][1] - (r["phases"][order[i - 1]][1] if i else 0) for r in recs}
        others = [x for x in ends if x] or [0]
        out[k] = (ends[0], max(ends[x] for x in others), cpu[0], max(cpu[x] for x in others))
    eng = [r.get("pattern_engine", {}) for r in recs]
    # every rank's CPU in each phase, summed (s14): the job is CPU-bound on 2 cores, so this
    # sum, steadier than a wall under load, is what the wall follows
    out_cpu = {k: sum(r["phases"][k][1] - (r["phases"][order[i - 1]][1] if i else 0) for r in recs)
               for i, k in enumerate(order)}
    CPU.append(out_cpu)
    return out, len(recs), eng


def run(py, env, n, prog, extra):
    d = tempfile.mkdtemp(prefix="names16-ab-")
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[1]
    t = time.time()
    r = subprocess.run([py, "-m", "aiopdbp", "launch", "-n", str(n), str(prog), *extra, "--pattern", "alltoall",
                        "--out", d, "--launched", repr(t)], env=env, capture_output=True, text=True, timeout=300,
                       # the variant's checkout: `-m` puts the cwd first on sys.path, before
                       # PYTHONPATH (the launcher's and each rank's rankout are imported from it)
                       cwd=env.get("PYTHONPATH") or Path(py).parents[2])
    wall = time.time() - t
    if r.returncode:
        print(r.stdout[-2000:], r.stderr[-2000:])
        raise SystemExit(f"exit {r.returncode}")
    return d, wall, up


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-raw", action="store_true")
    p.add_argument("--raw-each", action="store_true",
                   help="run the raw program under each variant's launcher (raw@NAME), not only the first's")
    p.add_argument("variants", nargs="+")
    a = p.parse_args()
    variants = []
    for v in a.variants:
        name, spec = v.split("=", 1)
        py, _, envs = spec.partition(":")
        env = dict(os.environ, AIOPDBP_RANK_PREFIX="0")
        for kv in filter(None, envs.split(",")):
            k, _, val = kv.partition("=")
            env[k] = val
        variants.append((name, py, env))
    res = {name: [] for name, _, _ in variants}
    cpus = {}
    res["raw"] = []
    for k in range(a.repeats):
        order = variants if k % 2 == 0 else variants[::-1]
        for name, py, env in order:
            d, wall, up = run(py, env, a.n, PROG, ["rank"])
            ph, n, eng = phases(d, "aiopdbp")
            res[name].append((wall, ph))
            cpus.setdefault(name, []).append(CPU[-1])
            steps = statistics.median(e.get("steps", 0) for e in eng)
            idle = statistics.median(e.get("idle_sleeps", 0) for e in eng)
            print(f"[{k}] {name:10} wall {wall:6.2f}  load{up}  " + "  ".join(
                f"{p} {v[0]:.2f}/{v[1]:.2f} c{v[2]:.3f}/{v[3]:.3f}" for p, v in ph.items())
                + f"  steps {steps:.0f} idle {idle:.0f}", flush=True)
            print(f"    {name:10} {cpu_line(CPU[-1])}", flush=True)
        for name, py, env in ([] if a.no_raw else order if a.raw_each else variants[:1]):
            label = f"raw@{name}" if a.raw_each else "raw"
            d, wall, up = run(py, env, a.n, RAW, [])
            ph, n, _ = phases(d, "raw")
            res.setdefault(label, []).append((wall, ph))
            cpus.setdefault(label, []).append(CPU[-1])
            print(f"[{k}] {label:10} wall {wall:6.2f}  load{up}  " + "  ".join(
                f"{p} {v[0]:.2f}/{v[1]:.2f} c{v[2]:.3f}/{v[3]:.3f}" for p, v in ph.items()), flush=True)
            print(f"    {label:10} {cpu_line(CPU[-1])}", flush=True)
    print("medians:")
    for name, runs in res.items():
        if not runs:
            continue
        keys = list(runs[0][1])
        med = {p: [statistics.median(r[1][p][i] for r in runs) for i in range(4)] for p in keys}
        print(f"  {name:10} wall {statistics.median(r[0] for r in runs):6.2f}  " + "  ".join(
            f"{p} {v[0]:.2f}/{v[1]:.2f} c{v[2]:.3f}/{v[3]:.3f}" for p, v in med.items()))
        c = cpus.get(name, [])
        if c:
            print(f"  {'':10} median " + cpu_line({k: statistics.median(x[k] for x in c) for k in c[0]}))


main()
