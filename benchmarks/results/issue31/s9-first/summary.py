"""Per run and per tree: median round trip (ms) of each mode of s8-first's cold_parts.py, and
the ratios cold/warm and cold/idle of the same run.

    python summary.py OUT      (OUT: ab.sh's folder of r{k}-{base,new}-n{N} runs)
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def rtts(run: Path) -> dict[str, list[float]]:
    r0 = json.loads((run / "rank-0.json").read_text())
    out: dict[str, list[float]] = {}
    for rec in r0["rounds"]:
        out.setdefault(rec["mode"], []).append((rec["s5"] - rec["s0"]) * 1e3)
    return out


def main() -> None:
    root = Path(sys.argv[1])
    rows: dict[tuple[int, str], list[dict[str, float]]] = {}
    print(f"{'run':16s} {'cold':>6s} {'known':>6s} {'idle':>6s} {'warm':>6s} {'cold/warm':>9s} {'cold/idle':>9s}  (ms, medians over the pairs)")
    for run in sorted(p for p in root.iterdir() if p.is_dir() and (p / "rank-0.json").exists()):
        _, tree, n = run.name.split("-")
        m = {k: statistics.median(v) for k, v in rtts(run).items()}
        rows.setdefault((int(n[1:]), tree), []).append(m)
        print(f"{run.name:16s} {m['cold']:6.2f} {m['known']:6.2f} {m['idle']:6.2f} {m['warm']:6.2f} "
              f"{m['cold'] / m['warm']:9.1f} {m['cold'] / m['idle']:9.1f}")
    print("\nmedian over the rounds (each round's figure a median over its pairs):")
    for (n, tree), ms in sorted(rows.items()):
        med = {k: statistics.median(x[k] for x in ms) for k in ("cold", "known", "idle", "warm")}
        cw = statistics.median(x["cold"] / x["warm"] for x in ms)
        ci = statistics.median(x["cold"] / x["idle"] for x in ms)
        print(f"N={n:3d} {tree:5s} rounds {len(ms)}: cold {med['cold']:.2f} known {med['known']:.2f} "
              f"idle {med['idle']:.2f} warm {med['warm']:.2f}; cold/warm {cw:.1f}x, cold/idle {ci:.1f}x")


if __name__ == "__main__":
    main()
