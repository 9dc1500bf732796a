"""Medians over the runs of ab.sh / torch_ab.sh: per file (variant), size and impl, the one-way
p50, x floor and x mpi4py bw of each run, their medians and ranges.  Usage: summ.py OUTDIR"""
import collections, pathlib, re, statistics, sys


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"


out = pathlib.Path(sys.argv[1])
for f in sorted(out.glob("pp-*.txt")):
    rows: dict = collections.defaultdict(lambda: ([], [], []))
    for line in f.read_text().splitlines():
        c = [x.strip() for x in line.split("|")]
        if len(c) > 9 and re.match(r"^\d", c[1]):
            r = rows[(c[1], c[2])]
            r[0].append(float(c[4]))
            for k, col in ((1, 8), (2, 9)):
                if c[col] not in ("-", ""):
                    r[k].append(float(c[col]))
    print(f"## {f.stem}\n")
    print("| size | impl | runs | one way p50, us: median (range) | x floor | x mpi4py bw |")
    print("|---|---|---|---|---|---|")
    for (size, impl), (lat, fl, bw) in rows.items():
        print(f"| {size} | {impl} | {len(lat)} | {med(lat)} | {med(fl)} | {med(bw)} |")
    print()
