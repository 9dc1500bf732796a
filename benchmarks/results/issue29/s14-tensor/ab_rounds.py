"""ab_rounds.py DIR: the tensor A/B by round (a run killed at its limit leaves its round out of the pairs):
p50 one-way us of numpy and torch per tree and round, torch - numpy at 8 B, torch / numpy at 64 KiB, medians."""
import re, statistics, sys, pathlib
d = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(d.glob("*-*.txt")):
    tree, kind = f.stem.split("-")
    rnd = None
    for l in f.read_text().splitlines():
        m = re.match(r"== \S+ \S+ (\d+) (\S+) .*load average: ([\d.]+)", l)
        if m:
            rnd = int(m.group(1)); rows.setdefault((tree, rnd), {})["load"] = m.group(3); continue
        m = re.match(r"\| (8 B|64 KiB) \| aiopdbp \|[^|]*\| ([\d.]+) \|", l)
        if m and rnd is not None:
            rows[(tree, rnd)][(kind, m.group(1))] = float(m.group(2))
for tree in ("base", "new"):
    d8, d64 = [], []
    for (t, r), v in sorted(rows.items()):
        if t != tree: continue
        line = f"{tree} round {r} (load {v['load']}):"
        for s in ("8 B", "64 KiB"):
            n, x = v.get(("numpy", s)), v.get(("torch", s))
            line += f"  {s} numpy {n} torch {x}"
            if n and x:
                (d8 if s == "8 B" else d64).append(x - n if s == "8 B" else x / n)
        print(line)
    print(f"{tree}: 8 B torch-numpy per round {[round(x, 2) for x in d8]} median "
          f"{statistics.median(d8) if d8 else None}; 64 KiB torch/numpy {[round(x, 3) for x in d64]} median "
          f"{statistics.median(d64) if d64 else None}")
