import re, sys, statistics as st
D = sys.argv[1]
def runs(path):
    txt = re.sub(r"^\[\d+\] ", "", open(path).read(), flags=re.M)
    return [r for r in re.split(r"^== \S+ run \d+\n", txt, flags=re.M) if r.strip()]
out = {}
for v in ("old", "compiled", "pure"):
    res = {}
    for r in runs(f"{D}/pingpong-{v}.txt"):
        rows = {}
        for line in r.splitlines():
            m = re.match(r"\| (\S+ \S+) \| (\S+) \| [^|]+\| ([\d.]+) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", line)
            if m:
                rows[(m.group(1), m.group(2))] = dict(lat=float(m.group(3)), cpu=float(m.group(4)), xf=float(m.group(5)), xbw=float(m.group(6)))
        if not rows: continue
        f8 = rows[("8 B", "floor")]
        res.setdefault("8B x floor", []).append(rows[("8 B", "aiopdbp")]["lat"] / f8["lat"])
        res.setdefault("8B us", []).append(rows[("8 B", "aiopdbp")]["lat"])
        res.setdefault("8B cpu x floor", []).append(rows[("8 B", "aiopdbp")]["cpu"] / f8["cpu"])
        res.setdefault("4K x floor", []).append(rows[("4 KiB", "aiopdbp")]["lat"] / rows[("4 KiB", "floor")]["lat"])
        for sz in ("64 KiB", "1 MiB", "16 MiB"):
            res.setdefault(f"{sz} x mpi4py bw", []).append(rows[(sz, "mpi4py")]["lat"] / rows[(sz, "aiopdbp")]["lat"])
    for r in runs(f"{D}/rate-{v}.txt"):
        m = re.search(r"64 B\s+aiopdbp-msg\s+([\d,]+)\s+±\d+%\s+([\d.]+)", r)
        if m: res.setdefault("64B rate x raw", []).append(float(m.group(2)))
    for r in runs(f"{D}/nton-{v}.txt"):
        m = re.search(r"aiopdbp-msg vs alltoall: ([\d.]+)", r)
        if m: res.setdefault("NtoN x alltoall", []).append(float(m.group(1)))
    for r in runs(f"{D}/streams-{v}.txt"):
        for line in r.splitlines():
            m = re.match(r"\s*(\d+)\s+4K\s+16\s+\d+\s+\d+\s+\d+\s+([\d.]+)", line)
            if m: res.setdefault(f"4K streams/msgs n={m.group(1)}", []).append(float(m.group(2)))
    out[v] = res
keys = list(out["old"].keys())
print("| figure | f4a742d (before) | compiled core | pure-Python core |")
print("|---|---|---|---|")
for k in keys:
    cells = []
    for v in ("old", "compiled", "pure"):
        xs = out[v].get(k, [])
        cells.append(f"{st.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-")
    print(f"| {k} | " + " | ".join(cells) + " |")
