"""Per-round figures of final.sh's small/ folder: python3 summarize.py OUT/small"""
import re, statistics, sys
from pathlib import Path

d = Path(sys.argv[1])
for v in ("base", "new"):
    pp = (d / f"pp-{v}.txt").read_text().split("== ")[1:]
    for r in pp:
        row = lambda size: next(l for l in r.splitlines() if l.startswith(f"| {size} | aiopdbp |"))
        f8, f4 = (float(row(s).split("|")[8]) for s in ("8 B", "4 KiB"))
        cpu = float(row("8 B").split("|")[7])
        fl = next(l for l in r.splitlines() if l.startswith("| 8 B | floor |"))
        calls = re.search(r"Python calls into aiopdbp .*?\| ([\d.]+) \| ([\d.]+)", r)
        print(f"{v} pp round {r.split()[1]}: 8 B {f8:.2f}x floor, 4 KiB {f4:.2f}x, CPU/RT {cpu} us "
              f"({cpu / float(fl.split('|')[7]):.2f}x floor's), calls/RT {calls.group(1)}/{calls.group(2)}")
    rt = (d / f"rate-{v}.txt").read_text().split("== ")[1:]
    for r in rt:
        rate = re.search(r"64 B\s+aiopdbp-msg\s+[\d,]+\s+±\d+%\s+([\d.]+)", r).group(1)
        a2a = [float(m.split()[-2]) for m in re.findall(r"\d+ (?:KiB|B)\s+aiopdbp-msg\s+[\d.]+\s+±\d+%.*", r.split("NtoN (MB/s)")[1])]
        print(f"{v} rate round {r.split()[1]}: 64 B rate {rate}x raw; NtoN x alltoall {a2a} median {statistics.median(a2a)}")
