"""Calls per unit from unit_ir.py's cProfile dumps: totals, calls into aiopdbp,
and the functions whose count differs between two dumps.

    python calls.py A.prof B.prof UNITS
"""
import pstats
import sys


def load(path: str, units: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for (f, _l, fn), (_cc, nc, _tt, _ct, _callers) in pstats.Stats(path).stats.items():  # type: ignore[attr-defined]
        where = f.split("aiopdbp/", 1)[1] if "aiopdbp/" in f else ("~" if f == "~" else f.rsplit("/", 1)[-1])
        out[f"{where}:{fn}"] = out.get(f"{where}:{fn}", 0) + nc / units
    return out


units = int(sys.argv[3])
a, b = load(sys.argv[1], units), load(sys.argv[2], units)
ours = lambda d: sum(v for k, v in d.items() if k.split(":")[0].endswith(".py") and "/" in k.split(":")[0])  # noqa: E731
print(f"calls per unit, all: {sum(a.values()):.1f} vs {sum(b.values()):.1f}; into aiopdbp: {ours(a):.1f} vs {ours(b):.1f}")
for k in sorted(set(a) | set(b), key=lambda k: -(a.get(k, 0) - b.get(k, 0))):
    d = a.get(k, 0) - b.get(k, 0)
    if abs(d) >= 0.3:
        print(f"{a.get(k, 0):7.2f} {b.get(k, 0):7.2f} {d:+7.2f} {k}")
