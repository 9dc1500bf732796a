"""Medians (range) of ab.sh's in-process figures: python3 summ.py OUTDIR [VARIANTS]."""
import re
import statistics as st
import sys

D = sys.argv[1]
VARIANTS = sys.argv[2].split(",") if len(sys.argv) > 2 else ["base", "new"]
print("| figure | " + " | ".join(VARIANTS) + " |")
print("|---" * (len(VARIANTS) + 1) + "|")
rows = {}
for v in VARIANTS:
    for line in open(f"{D}/micro-{v}.txt"):
        m = re.match(r"(bytes|numpy) rx us/msg median ([\d.]+) .*aiopdbp ([\d.]+)", line)
        if m:
            rows.setdefault(f"receive half, {m.group(1)} (us)", {}).setdefault(v, []).append(float(m.group(2)))
            rows.setdefault(f"receive half, {m.group(1)}: calls into aiopdbp", {}).setdefault(v, []).append(float(m.group(3)))
        m = re.match(r"cpu_pp ([\d.]+)", line)
        if m:
            rows.setdefault("in-process thread CPU per 8 B bytes round trip (us)", {}).setdefault(v, []).append(float(m.group(1)))
for k, per in rows.items():
    print(f"| {k} | " + " | ".join(
        f"{st.median(per[v]):.2f} ({min(per[v]):.2f}-{max(per[v]):.2f})" if per.get(v) else "-" for v in VARIANTS) + " |")
