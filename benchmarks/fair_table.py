"""Issue 28's fairness table: messages per sender a slow reader takes, by where the senders are.

    python benchmarks/fair_table.py [--tree DIR] [--repeat N] [--only NAME,...]

Runs ``tests/mpi_scripts/fair.py`` (one reader on rank 0 taking one message
per period; every sender loops ``await gp.send("reader", bytes(size))``,
started together) for each case below, with the default 1 MiB credit window
and no warm-up, so the counts start with the reader's first message; the
"per 5 s window" column is the least and greatest share of any sender in
any 5 s window of the run (``--seconds`` longer than 5 shows the steady
state too).  ``--tree`` runs another checkout's code (an A/B against an older
commit).  Prints one markdown row per run: the counts per sender, their
least and greatest share against the fair 1/k, and whether every sender is
within 2x of 1/k.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from aiopdbp.launch.launcher import find_mpiexec

REPO = Path(__file__).resolve().parent.parent

#: name -> (ranks, senders per other rank, senders on the reader's rank, size, period s);
#: a name ending in ``@K1+K2`` puts K1 senders on rank 1, K2 on rank 2, ...
CASES: dict[str, tuple[int, int, int, int, float]] = {
    "one-rank-1k": (2, 6, 0, 1024, 0.01),
    "spread-1k": (3, 3, 0, 1024, 0.01),
    "mixed-1k": (2, 3, 3, 1024, 0.01),
    "uneven-1k": (2, 5, 1, 1024, 0.01),
    "local-1k": (1, 0, 6, 1024, 0.01),
    "spread-1m": (3, 3, 0, 1 << 20, 0.02),
    "mixed-1m": (2, 3, 3, 1 << 20, 0.02),
    "uneven-1m": (2, 5, 1, 1 << 20, 0.02),
    "uneven-spread-1k@1+5": (3, 0, 0, 1024, 0.01),
}


def run(tree: Path, name: str, seconds: float) -> dict[str, object]:
    ranks, senders, local, size, period = CASES[name]
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    cmd = [find_mpiexec(), "-n", str(ranks), sys.executable, str(tree / "tests/mpi_scripts/fair.py"),
           "--senders", str(senders), "--local", str(local), "--size", str(size),
           "--window", "0", "--warmup", "0", "--period", str(period), "--seconds", str(seconds),
           *(["--per-rank", name.split("@")[1].replace("+", ",")] if "@" in name else [])]
    t0 = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 120).stdout
    rows = [json.loads(line.split("FAIR ", 1)[1]) for line in out.splitlines() if "FAIR " in line]
    if len(rows) != 1:
        return {"case": name, "error": out[-500:], "wall_s": round(time.monotonic() - t0, 1)}
    counts: dict[str, int] = rows[0]["counts"]
    fair = rows[0]["taken"] / len(counts)
    lo, hi = min(counts.values()) / fair, max(counts.values()) / fair
    # the same per 5 s window: the worst share of any sender in any window
    buckets = rows[0].get("buckets", [])      # (an older checkout's fair.py reports none)
    shares = [c / (sum(b.values()) / len(b)) for b in buckets if sum(b.values()) >= len(b) * 10
              for c in b.values()]
    blo, bhi = (min(shares), max(shares)) if shares else (lo, hi)
    return {"case": name, "counts": "/".join(str(counts[k]) for k in sorted(counts)),
            "min/fair": round(lo, 2), "max/fair": round(hi, 2),
            "windows": f"{round(blo, 2)}-{round(bhi, 2)} over {len(buckets)}",
            "within 2x": min(lo, blo) >= 0.5 and max(hi, bhi) <= 2}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=Path, default=REPO)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    print(f"tree {args.tree}; load {os.getloadavg()[0]:.1f}", flush=True)
    print("| case | counts (sorted by sender) | min/fair | max/fair | per 5 s window | within 2x |\n"
          "|---|---|---|---|---|---|")
    for _ in range(args.repeat):
        for name in args.only.split(","):
            row = run(args.tree, name, args.seconds)
            if "error" in row:
                print(f"| {name} | error: {row['error']!r} | | | | |", flush=True)
            else:
                print(f"| {name} | {row['counts']} | {row['min/fair']} | {row['max/fair']} | "
                      f"{row['windows']} | {row['within 2x']} |", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
