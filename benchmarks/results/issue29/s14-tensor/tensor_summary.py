import re, statistics, sys, pathlib
d = pathlib.Path(sys.argv[1])
res = {}
for f in sorted(d.glob("*.txt")):
    rows = {}
    for l in f.read_text().splitlines():
        m = re.match(r"\| (8 B|64 KiB|16 MiB) \| aiopdbp \|[^|]*\| ([\d.]+) \|", l)
        if m: rows.setdefault(m.group(1), []).append(float(m.group(2)))
    res[f.stem] = rows
for t in ("base", "new"):
    for s in [s for s in ("8 B", "64 KiB", "16 MiB") if s in res[f"{t}-numpy"] and s in res[f"{t}-torch"]]:
        n, tt = res[f"{t}-numpy"][s], res[f"{t}-torch"][s]
        k = min(len(n), len(tt)); n, tt = n[:k], tt[:k]
        mn, mt = statistics.median(n), statistics.median(tt)
        pair = [b - a for a, b in zip(n, tt)] if s == "8 B" else [b / a for a, b in zip(n, tt)]
        print(f"{t} {s}: numpy {n} torch {tt} medians {mn:.2f}/{mt:.2f} -> "
              + (f"+{mt-mn:.2f} us" if s == "8 B" else f"{mt/mn:.3f}x") + f"; per round {[round(x,2) for x in pair]}")
