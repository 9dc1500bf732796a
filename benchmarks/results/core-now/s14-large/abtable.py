"""The aiopdbp rows' 'x mpi4py bw' and one-way p50 (aiopdbp, mpi4py) of ab.sh's outputs, per round and tree, and their medians:
python abtable.py ab"""
import re, statistics, sys
from pathlib import Path

d = Path(sys.argv[1])
for kind, name in (("l", "shared memory"), ("t", "TCP")):
    rows: dict[tuple[str, str], list[float]] = {}
    loads: dict[str, list[str]] = {}
    p50: dict[tuple[str, str, str], list[float]] = {}
    for v in ("base", "new"):
        f = d / f"{kind}-{v}.txt"
        if not f.exists():
            continue
        for line in f.read_text().splitlines():
            if line.startswith("== "):
                loads.setdefault(v, []).append(line.split("load average: ")[-1].split(",")[0])
            m = re.match(r"\| (\S+ \w+) \| aiopdbp \| [^|]+ \| ([\d.]+) \|.*\| ([\d.]+) \|$", line)
            if m:
                rows.setdefault((m.group(1), v), []).append(float(m.group(3)))
                p50.setdefault((m.group(1), v, "aiopdbp"), []).append(float(m.group(2)))
            m = re.match(r"\| (\S+ \w+) \| mpi4py \| [^|]+ \| ([\d.]+) \|", line)
            if m:
                p50.setdefault((m.group(1), v, "mpi4py"), []).append(float(m.group(2)))
    print(f"{name}: load at each run's start base {loads.get('base')} new {loads.get('new')}")
    for size in dict.fromkeys(s for s, _ in rows):
        b, n = rows.get((size, "base"), []), rows.get((size, "new"), [])
        med = lambda xs: f"{statistics.median(xs):.2f}" if xs else "-"
        print(f"  {size:>7}: base {' / '.join(f'{x:.2f}' for x in b)} (median {med(b)}) -> "
              f"new {' / '.join(f'{x:.2f}' for x in n)} (median {med(n)}) x mpi4py")
        for v in ("base", "new"):
            print(f"           {v} p50 us aiopdbp {' / '.join(f'{x:.0f}' for x in p50.get((size, v, 'aiopdbp'), []))}"
                  f", mpi4py {' / '.join(f'{x:.0f}' for x in p50.get((size, v, 'mpi4py'), []))}")
