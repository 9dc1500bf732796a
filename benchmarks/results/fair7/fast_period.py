"""uneven-1m with another reader period, old tree against new, alternated:

    python benchmarks/results/fair7/fast_period.py PERIOD_S REPEATS OLD_TREE NEW_TREE
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # benchmarks/
import fair_table as ft  # noqa: E402

period = float(sys.argv[1])
ft.CASES[f"uneven-1m-p{period}"] = (2, 5, 1, 1 << 20, period)
for i in range(int(sys.argv[2])):
    for t in (sys.argv[3], sys.argv[4]):
        row = ft.run(Path(t), f"uneven-1m-p{period}", 8.0)
        print(f"run {i} {t} load {os.getloadavg()[0]:.1f}: {row}", flush=True)
