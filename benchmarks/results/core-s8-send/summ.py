"""Medians (range) over ab.sh's rounds: python3 summ.py OUTDIR [VARIANTS]."""
import os
import re
import statistics as st
import sys

D = sys.argv[1]
VARIANTS = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("base", "new", "basepure", "pure")


def runs(path):
    if not os.path.exists(path):
        return []
    txt = re.sub(r"^\[\d+\] ", "", open(path).read(), flags=re.M)
    return [r for r in re.split(r"^== \S+ run \d+\n", txt, flags=re.M) if r.strip()]


out = {}
keys: list[str] = []
for v in VARIANTS:
    res: dict[str, list[float]] = {}
    for r in runs(f"{D}/hops-{v}.txt"):
        rows = {}
        for line in r.splitlines():
            m = re.match(r"\| (\S+ \S+) \| (\S+) \| [^|]+\| ([\d.]+) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", line)
            if m:
                rows[(m.group(1), m.group(2))] = dict(lat=float(m.group(3)), cpu=float(m.group(4)))
        if not rows:
            continue
        f8 = rows[("8 B", "floor")]
        for impl in ("aiopdbp", "aiopdbp-ro"):
            res.setdefault(f"8 B one way x floor ({impl})", []).append(rows[("8 B", impl)]["lat"] / f8["lat"])
            res.setdefault(f"8 B CPU per RT x floor ({impl})", []).append(rows[("8 B", impl)]["cpu"] / f8["cpu"])
            res.setdefault(f"4 KiB one way x floor ({impl})", []).append(
                rows[("4 KiB", impl)]["lat"] / rows[("4 KiB", "floor")]["lat"])
        for stage in ("send path", "before encoding", "encoding", "posting", "probe and receive", "decoding",
                      "delivery", "wake-up", "one way"):
            m = re.search(r"\|\s+" + stage + r" \| ([\d.]+) \| ([\d.]+) \|", r)
            if m:
                res.setdefault(f"8 B hop: {stage} (us)", []).append((float(m.group(1)) + float(m.group(2))) / 2)
        m = re.search(r"Python calls into aiopdbp \(progress polling excluded\) \| ([\d.]+) \| ([\d.]+) \|", r)
        if m:
            res.setdefault("calls into aiopdbp per RT", []).append((float(m.group(1)) + float(m.group(2))) / 2)
    if os.path.exists(f"{D}/micro-{v}.txt"):
        for line in open(f"{D}/micro-{v}.txt"):
            m = re.match(r"cpu_pp ([\d.]+)", line)
            if m:
                res.setdefault("in-process thread CPU per 8 B bytes RT (us)", []).append(float(m.group(1)))
            m = re.match(r"send_us (\S+) ([\d.]+)", line)
            if m:
                res.setdefault(f"in-process await gp.send, 8 B {m.group(1)} (us)", []).append(float(m.group(2)))
            m = re.match(r"before_ns (\S+) ([\d.]+)", line)
            if m:
                res.setdefault(f"send before the link's offer, 8 B {m.group(1)} (ns)", []).append(float(m.group(2)))
    for k in res:
        if k not in keys:
            keys.append(k)
    out[v] = res
print("| figure | " + " | ".join(VARIANTS) + " |")
print("|---" * (len(VARIANTS) + 1) + "|")
for k in keys:
    cells = []
    for v in VARIANTS:
        xs = out[v].get(k, [])
        cells.append(f"{st.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-")
    print(f"| {k} | " + " | ".join(cells) + " |")
