"""The A/B's figures per round from ab/rate-*.txt and ab/pp-*.txt: python3 ab_table.py ab"""
import re, statistics, sys

d = sys.argv[1]
for v in ("base", "new"):
    t = open(f"{d}/rate-{v}.txt").read()
    rounds = re.split(r"^== ", t, flags=re.M)[1:]
    rate, cpu, raw = [], [], []
    for r in rounds:
        m = re.search(r"aiopdbp-msg\s+([\d,]+)\s+±\d+%\s+([\d.]+)\s+([\d.]+)/([\d.]+)", r)
        w = re.search(r"\braw\s+([\d,]+)\s+±", r)
        load = r.split("load average: ")[1].split(",")[0]
        if m:
            rate.append(int(m[1].replace(",", ""))); cpu.append(float(m[4]))
            raw.append(int(w[1].replace(",", "")) if w else 0)
            print(f"{v} round {r.split()[1]} load {load}: aiopdbp {m[1]} msg/s, cpu tx/rx {m[3]}/{m[4]} us, "
                  f"raw {w[1] if w else '-'} msg/s, x raw {m[2]}")
        else:
            print(f"{v} round {r.split()[1]} load {load}: no table (timed out)")
    if rate:
        print(f"{v}: median {statistics.median(rate):,.0f} msg/s, receiver cpu median {statistics.median(cpu)} us")
    t = open(f"{d}/pp-{v}.txt").read()
    for r in re.split(r"^== ", t, flags=re.M)[1:]:
        a = re.search(r"\| 8 B \| aiopdbp \|[^|]*\| ([\d.]+) \|[^|]*\|[^|]*\| ([\d.]+) \| ([\d.]+) \|", r)
        f = re.search(r"\| 8 B \| floor \|[^|]*\| ([\d.]+) \|", r)
        load = r.split("load average: ")[1].split(",")[0]
        print(f"  {v} pingpong round {r.split()[1]} load {load}: 8 B p50 {a[1] if a else '-'} us "
              f"(floor {f[1] if f else '-'}), x floor {a[3] if a else '-'}, CPU/RT {a[2] if a else '-'} us")
