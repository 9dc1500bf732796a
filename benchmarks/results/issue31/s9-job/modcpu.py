"""Per-module CPU of a fresh interpreter's imports (``-X importtime`` with the thread's CPU
clock instead of the wall clock, so the load on a shared machine does not count).

``python modcpu.py [--repeats 9] [--top 60] CODE DIR [DIR...]``: runs ``python -c CODE`` in a
fresh interpreter ``--repeats`` times per checkout DIR (first on ``sys.path``, alternated),
from an empty working directory, and prints each module's median self CPU (ms) and the median
of the total, side by side.  The hook replaces ``importlib._bootstrap._find_and_load``, which
the interpreter's import looks up on every import (as ``-X importtime`` measures there)."""
import os, statistics, subprocess, sys, tempfile

HOOK = r'''
import importlib._bootstrap as _b, time as _t, sys as _s, atexit as _ae
_orig = _b._find_and_load
_stack = [0]
_self = {}
_clk = _t.thread_time_ns
def _fl(name, import_):
    t0 = _clk(); _stack.append(0)
    try:
        return _orig(name, import_)
    finally:
        dt = _clk() - t0; child = _stack.pop()
        _self[name] = _self.get(name, 0) + dt - child
        _stack[-1] += dt
_b._find_and_load = _fl
_T0 = _clk()
def _dump():
    import json
    with open(__OUT__, "w") as f:
        json.dump({"self": _self, "total": _stack[0], "run": _clk() - _T0}, f)
_ae.register(_dump)
'''


def once(py, d, code, out, cwd):
    hook = HOOK.replace("__OUT__", repr(out))
    env = dict(os.environ, PYTHONPATH=d, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    subprocess.run([py, "-c", hook + "\n" + code], env=env, cwd=cwd, check=True)
    import json
    with open(out) as f:
        return json.load(f)


def main():
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--top", type=int, default=60)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("code")
    p.add_argument("dirs", nargs="+")
    a = p.parse_args()
    cwd = tempfile.mkdtemp(prefix="modcpu-cwd-")
    out = tempfile.mktemp(prefix="modcpu-", suffix=".json")
    res = {d: [] for d in a.dirs}
    for k in range(a.repeats):
        for d in (a.dirs if k % 2 == 0 else a.dirs[::-1]):
            res[d].append(once(a.python, d, a.code, out, cwd))
    os.rmdir(cwd)
    os.unlink(out)
    mods = {}
    for d, runs in res.items():
        names = set().union(*(r["self"] for r in runs))
        mods[d] = {m: statistics.median(r["self"].get(m, 0) for r in runs) / 1e6 for m in names}
    print(f"code: {a.code}\nrepeats: {a.repeats}")
    for d, runs in res.items():
        tot = [r["total"] / 1e6 for r in runs]
        aio = [sum(v for m, v in r["self"].items() if m.startswith("aiopdbp")) / 1e6 for r in runs]
        print(f"{d}: imports CPU median {statistics.median(tot):.1f} ms (min {min(tot):.1f}), "
              f"aiopdbp modules' self {statistics.median(aio):.1f} ms, modules {len(mods[d])}")
    allm = sorted(set().union(*mods.values()), key=lambda m: -max(mods[d].get(m, 0) for d in a.dirs))
    print("self CPU ms (median): " + " | ".join(a.dirs))
    for m in allm[:a.top]:
        print("  " + "  ".join(f"{mods[d][m]:7.2f}" if m in mods[d] else "      -" for d in a.dirs) + f"  {m}")


main()
