"""ab_table.py DIR [FIRST LAST]: each variant's rounds of ab.sh (load, aiopdbp and raw msg/s, x raw,
CPU us/msg) and medians (of rounds FIRST..LAST where given)."""
import json, re, statistics, sys

d = sys.argv[1]
lo, hi = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (1, 10**9)
for v in ("base", "lib", "new"):
    try:
        t = open(f"{d}/rate-{v}.txt").read()
    except OSError:
        continue
    xs, rates, tx, rx = [], [], [], []
    for block in t.split("== ")[1:]:
        head = block.splitlines()[0]
        i = int(head.split()[1])
        if not lo <= i <= hi:
            continue
        load = re.search(r"load average: ([\d.]+)", head).group(1)
        try:
            runs = json.load(open(f"{d}/r-{v}-{i}/bench.json"))
        except OSError:
            print(f"{v} round {i} load {load}: no result"); continue
        rows = {r["impl"]: r for r in runs["rows"]}
        a, r = rows["aiopdbp-msg"], rows["raw"]
        x = a["median"] / r["median"]
        xs.append(x); rates.append(a["median"]); tx.append(a.get("cpu_tx_us") or 0); rx.append(a.get("cpu_rx_us") or 0)
        print(f"{v} round {i} load {load}: aiopdbp {a['median']:,.0f} msg/s, cpu tx/rx "
              f"{a.get('cpu_tx_us') or 0:.2f}/{a.get('cpu_rx_us') or 0:.2f} us, raw {r['median']:,.0f} msg/s, x raw {x:.2f}")
    if xs:
        print(f"{v}: median x raw {statistics.median(xs):.2f} (rounds {', '.join(f'{x:.2f}' for x in xs)}), "
              f"median aiopdbp {statistics.median(rates):,.0f} msg/s, median cpu tx/rx "
              f"{statistics.median(tx):.2f}/{statistics.median(rx):.2f} us")
