"""A/B of ``aiopdbp bench streams`` on two checkouts, alternated.

    python benchmarks/ab_streams.py OLD_DIR NEW_DIR [--runs 4] -- <bench streams options>

Runs ``python -m aiopdbp bench streams <options>`` with ``PYTHONPATH`` set to
OLD_DIR, then NEW_DIR, then OLD_DIR ... (``--runs`` each, alternated so that
a shared machine's drift hits both alike) and prints, per row (ranks, size,
in flight): each side's streams/messages ratio -- measured *in the same job*,
so a busier moment moves both -- as the median over the runs and its range,
and the median streams/s and messages/s.  Written for issue 17's short
streams (``benchmarks/ab.py`` does the same for ``aiopdbp bench``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from ab import alternate, parse  # benchmarks/ab.py: the same alternation for aiopdbp bench

Key = tuple[int, int, int]


def _run(checkout: Path, bench: list[str], out: Path) -> list[dict[str, float]]:
    """One run; a job that fails (e.g. a rank starved past a timeout on a
    busy machine) is said on stderr and run once more."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, "-m", "aiopdbp", "bench", "streams", *bench, "--out", str(out)]
    for attempt in (1, 2):
        done = subprocess.run(cmd, env=env, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, timeout=1800)
        if done.returncode == 0:
            break
        print(f"{checkout}: run failed (attempt {attempt}):\n{done.stderr[-2000:]}", file=sys.stderr, flush=True)
    else:
        raise SystemExit(f"{checkout}: bench streams failed twice")
    rows: list[dict[str, float]] = json.loads((out / "streams.json").read_text())["rows"]
    return rows


def main() -> None:
    args, bench = parse(__doc__, "runs", 4)
    seen: dict[str, dict[Key, list[tuple[float, float, float]]]] = {"old": {}, "new": {}}
    for side, r in alternate(args.old, args.new, args.runs, lambda c, out: _run(c, bench, out)):
        key = (int(r["n"]), int(r["size"]), int(r["inflight"]))
        seen[side].setdefault(key, []).append((r["ratio"], r["streams_per_s"], r["msgs_per_s"]))
    print(f"aiopdbp bench streams {' '.join(bench)}; {args.runs} runs each, alternated old/new")
    print(f"{'n':>2} {'size':>8} {'infl':>4} {'old ratio (range)':>22} {'new ratio (range)':>22} "
          f"{'old str/s':>10} {'old msg/s':>10} {'new str/s':>10} {'new msg/s':>10}")
    for key in sorted(seen["old"]):
        cells = []
        for side in ("old", "new"):
            runs = seen[side].get(key, [])
            ratios = [r[0] for r in runs]
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if runs else "-")
        speeds = [f"{statistics.median(r[j] for r in seen[side][key]):10.0f}"
                  for side in ("old", "new") for j in (1, 2)]
        print(f"{key[0]:>2} {key[1]:>8} {key[2]:>4} {cells[0]:>22} {cells[1]:>22} {' '.join(speeds)}")
        for side in ("old", "new"):  # every run's units/s: is a median shift more than the spread?
            runs = seen[side].get(key, [])
            print(f"   {side} runs: streams/s {[round(r[1]) for r in runs]}, msgs/s {[round(r[2]) for r in runs]}")


if __name__ == "__main__":
    main()
