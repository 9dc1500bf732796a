"""Summarise cma_ab.sh output: per setting, the aiopdbp and mpi4py p50s and
the CPU per round trip (both ranks) and the same-job ratio (x mpi4py bandwidth), medians over the pairs."""
import re, statistics as S, sys
rows = {}
cur = None
for line in open(sys.argv[1]):
    m = re.match(r"# pair (\d+) (\S+)", line)
    if m:
        cur = m.group(2); continue
    c = [x.strip() for x in line.split("|")[1:-1]]
    if len(c) >= 9:
        rows.setdefault((cur, c[0], c[1]), []).append((float(c[3]), float(c[8]), float(c[6])))
for (cfg, size, impl), v in sorted(rows.items()):
    p50 = [r[0] for r in v]; ratio = [r[1] for r in v]; cpu = [r[2] for r in v]
    print(f"{size:8s} {impl:8s} {cfg:6s} n={len(v)} p50 median {S.median(p50):7.2f} us [{min(p50):.1f}-{max(p50):.1f}]"
          f"  CPU us/RT median {S.median(cpu):6.1f}  x mpi4py median {S.median(ratio):.2f} [{' '.join(f'{r:.2f}' for r in ratio)}]")
