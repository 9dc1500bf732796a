"""A/B: the same ``aiopdbp bench`` run on two checkouts, alternated.

    python benchmarks/ab.py OLD_DIR NEW_DIR [--repeats 5] -- <aiopdbp bench options>

Runs ``python -m aiopdbp bench <options>`` with ``PYTHONPATH`` set to OLD_DIR,
then NEW_DIR, then OLD_DIR ... (``--repeats`` runs each, alternated so that
the machine's drift hits both alike), and prints, per aiopdbp row (test,
size, impl): the old runs' medians as a range, the new runs' medians, and
whether the new median of medians lies inside the old range; also the CPU
microseconds per unit (sender + receiver), steadier than a speed on a shared machine.  Each run's
figures are aiopdbp's against raw mpi4py *in the same job* (``x raw``), so a
run on a busier moment moves both; the table shows the ratio and the speed.
Written for issue 16 (a restructuring must not change speed).  ``-- pingpong
<options>`` A/Bs ``aiopdbp bench pingpong``: its median is the one-way p50 in
us and ``x raw`` its bandwidth against hand-written mpi4py in the same job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def _run(checkout: Path, bench: list[str], out: Path) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    pingpong = bench[:1] == ["pingpong"]
    cmd = [sys.executable, "-m", "aiopdbp", "bench", *bench, *([] if pingpong else ["--no-plots"]),
           "--out", str(out)]
    subprocess.run(cmd, check=True, env=env, cwd=checkout, stdout=subprocess.DEVNULL, timeout=1800)
    if pingpong:
        return _pingpong_rows(json.loads((out / "pingpong.json").read_text())["rows"])
    rows: list[dict[str, object]] = json.loads((out / "bench.json").read_text())["rows"]
    return rows


def _pingpong_rows(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """``bench pingpong``'s rows in the shape above: median = one-way p50 in
    us, ``vs_raw`` = bandwidth against hand-written mpi4py in the same job
    (its latency over ours), CPU = us per round trip (both ranks)."""
    raw = {r["size"]: float(r["latency_us"]) for r in rows if r["impl"] == "mpi4py"}  # type: ignore[arg-type]
    return [{"test": "pingpong", "ranks": 2, "size": r["size"], "impl": r["impl"],
             "median": r["latency_us"], "cpu_txrx_us": r["cpu_us_per_rt"],
             "vs_raw": raw[r["size"]] / float(r["latency_us"]) if r["size"] in raw else None}  # type: ignore[arg-type]
            for r in rows]


def parse(doc: str | None, runs_flag: str, default: int) -> tuple[argparse.Namespace, list[str]]:
    """``OLD NEW [--<runs_flag> N] -- <bench options>``: (the A/B's options, the bench's)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument(f"--{runs_flag}", dest="runs", type=int, default=default)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    return ap.parse_args(argv[:cut]), argv[cut + 1:]


def alternate(old: Path, new: Path, runs: int, run: Callable[[Path, Path], list[T]]) -> Iterator[tuple[str, T]]:
    """``run(checkout, out_dir)`` on OLD, NEW, OLD, ... ``runs`` times each
    (a shared machine's drift hits both alike); yields ``(side, row)``."""
    with tempfile.TemporaryDirectory(prefix="aiopdbp-ab-") as tmp:
        for i in range(runs):
            for side, checkout in (("old", old), ("new", new)):
                for row in run(checkout.resolve(), Path(tmp) / f"{side}{i}"):
                    yield side, row
                print(f"run {i + 1}/{runs} {side} done", file=sys.stderr, flush=True)


def main() -> None:
    args, bench = parse(__doc__, "repeats", 5)   # the options for aiopdbp bench, after --
    seen: dict[str, dict[tuple[str, int, int, str], list[tuple[float, float, float]]]] = {"old": {}, "new": {}}
    for side, r in alternate(args.old, args.new, args.runs, lambda c, out: _run(c, bench, out)):
        if str(r["impl"]).startswith("aiopdbp"):
            key = (str(r["test"]), int(r["ranks"]), int(r["size"]), str(r["impl"]))  # type: ignore[call-overload]
            cpu = sum(float(r.get(k) or 0) for k in ("cpu_tx_us", "cpu_rx_us", "cpu_txrx_us"))  # type: ignore[arg-type]
            seen[side].setdefault(key, []).append((float(r["median"]), float(r["vs_raw"] or 0), cpu))  # type: ignore[arg-type]
    print(f"aiopdbp bench {' '.join(bench)}; {args.runs} runs each, alternated old/new")
    print(f"{'test':6} {'n':>2} {'size':>8} {'impl':12} {'old x raw (range)':>22} {'new x raw (range)':>22} "
          f"{'old median':>11} {'new median':>11} {'old cpu us':>10} {'new cpu us':>10}  new inside old range")
    for key in sorted(seen["old"]):
        old, new = seen["old"][key], seen["new"].get(key, [])
        if not new:
            continue
        o_r, n_r = [x for _, x, _ in old], [x for _, x, _ in new]
        o_m, n_m = [m for m, _, _ in old], [m for m, _, _ in new]
        o_c, n_c = [c for _, _, c in old], [c for _, _, c in new]
        inside = min(o_r) <= statistics.median(n_r) <= max(o_r)
        test, n, size, impl = key
        print(f"{test:6} {n:>2} {size:>8} {impl:12} "
              f"{statistics.median(o_r):6.3f} ({min(o_r):.3f}-{max(o_r):.3f}) "
              f"{statistics.median(n_r):6.3f} ({min(n_r):.3f}-{max(n_r):.3f}) "
              f"{statistics.median(o_m):11.1f} {statistics.median(n_m):11.1f} "
              f"{statistics.median(o_c):10.1f} {statistics.median(n_c):10.1f}  {'yes' if inside else 'NO'}")


if __name__ == "__main__":
    main()
