"""Summarise ab.sh's outputs: python3 parse_ab.py OUTDIR [VARIANTS] (medians of the rounds' same-job figures, range).
(core-sender's, reading no rate files where ab.sh ran none.)"""
import os
import re
import statistics as st
import sys

D = sys.argv[1]
VARIANTS = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("base", "new", "basepure", "pure")


def runs(path):
    txt = re.sub(r"^\[\d+\] ", "", open(path).read(), flags=re.M)
    return [r for r in re.split(r"^== \S+ run \d+\n", txt, flags=re.M) if r.strip()]


out = {}
for v in VARIANTS:
    res = {}
    for r in runs(f"{D}/hops-{v}.txt"):
        rows = {}
        for line in r.splitlines():
            m = re.match(r"\| (\S+ \S+) \| (\S+) \| [^|]+\| ([\d.]+) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", line)
            if m:
                rows[(m.group(1), m.group(2))] = dict(lat=float(m.group(3)), cpu=float(m.group(4)))
        if not rows:
            continue
        f8 = rows[("8 B", "floor")]
        res.setdefault("8 B one way x floor", []).append(rows[("8 B", "aiopdbp")]["lat"] / f8["lat"])
        res.setdefault("8 B CPU per RT x floor", []).append(rows[("8 B", "aiopdbp")]["cpu"] / f8["cpu"])
        res.setdefault("4 KiB one way x floor", []).append(rows[("4 KiB", "aiopdbp")]["lat"] / rows[("4 KiB", "floor")]["lat"])
        for stage in ("before encoding", "encoding", "posting", "probe and receive", "decoding", "delivery",
                      "wake-up", "one way"):
            m = re.search(r"\|\s+" + stage + r" \| ([\d.]+) \| ([\d.]+) \|", r)
            if m:
                res.setdefault(f"8 B hop: {stage} (us)", []).append((float(m.group(1)) + float(m.group(2))) / 2)
        m = re.search(r"Python calls into aiopdbp \(progress polling excluded\) \| ([\d.]+) \| ([\d.]+) \|", r)
        if m:
            res.setdefault("calls into aiopdbp per RT", []).append((float(m.group(1)) + float(m.group(2))) / 2)
    for r in (runs(f"{D}/rate-{v}.txt") if os.path.exists(f"{D}/rate-{v}.txt") else []):
        m = re.search(r"64 B\s+aiopdbp-msg\s+([\d,]+)\s+±\d+%\s+([\d.]+)", r)
        if m:
            res.setdefault("64 B rate x raw Isend", []).append(float(m.group(2)))
    out[v] = res
keys = list(out[VARIANTS[0]].keys())
print("| figure | " + " | ".join(VARIANTS) + " |")
print("|---" * (len(VARIANTS) + 1) + "|")
for k in keys:
    cells = []
    for v in VARIANTS:
        xs = out[v].get(k, [])
        cells.append(f"{st.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-")
    print(f"| {k} | " + " | ".join(cells) + " |")
