"""Import cost, base against new, alternated: for each import, the modules it loads (all, and
aiopdbp's: deterministic) and its cumulative time from ``python -X importtime`` (us, median of
ROUNDS; noise on a loaded machine).  python imports.py BASE NEW [ROUNDS]"""
import os, statistics, subprocess, sys

PY = os.environ.get("PY", "/work/main/.venv/bin/python")
MODS = ["aiopdbp", "aiopdbp.transport", "aiopdbp.transport.mpi", "aiopdbp.streams.protocol",
        "aiopdbp.hosts", "aiopdbp.runtime.job", "aiopdbp.bench"]


def once(tree: str, mod: str) -> tuple[int, int, int]:
    err = subprocess.run([PY, "-X", "importtime", "-c", f"import {mod}"], cwd="/tmp", capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": tree}, check=True).stderr
    rows = [l.split("|") for l in err.splitlines() if l.startswith("import time:") and "self [us]" not in l]
    names = [r[2].strip() for r in rows]
    cum = next(int(r[1]) for r in rows if r[2].strip() == mod)
    return len(rows), sum(n.startswith("aiopdbp") for n in names), cum


base, new = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
for mod in MODS:
    got: dict[str, list[tuple[int, int, int]]] = {base: [], new: []}
    for _ in range(rounds):
        for t in (base, new):
            got[t].append(once(t, mod))
    for t in (base, new):
        runs = got[t]
        print(f"{mod:26} {t:18} modules {runs[0][0]} (aiopdbp {runs[0][1]})  "
              f"cumulative us median {statistics.median(r[2] for r in runs):.0f}", flush=True)
