"""Helpers shared by the single-host scripts of this folder (bench_local, bench_barrier).

The MPI benchmarks live in the installed harness ``aiopdbp bench``
(:mod:`aiopdbp.bench`); machine info, JSON output and the paper's statistic
come from there, so there is one copy of each.  Scripts here run as
``python benchmarks/NAME.py`` (this folder on ``sys.path``: ``from _common
import ...``) or ``python -m benchmarks.NAME`` from the repository root.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Mapping, Sequence

from aiopdbp.bench.report import fmt_bytes, machine_info, write_json
from aiopdbp.bench.stats import trimmed_mean

__all__ = [
    "median_of",
    "samples_of",
    "trimmed_mean",
    "machine_info",
    "format_table",
    "print_table",
    "write_json",
    "fmt_bytes",
]


def samples_of(fn: Callable[[], float], repeat: int) -> list[float]:
    """Call ``fn()`` ``repeat`` times and return every result, in order."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    return [float(fn()) for _ in range(repeat)]


def median_of(fn: Callable[[], float], repeat: int) -> float:
    """Median of ``repeat`` calls of ``fn()`` (each call is one full measurement)."""
    return statistics.median(samples_of(fn, repeat))


def _fmt_cell(v: object) -> str:
    """Format one table cell: floats with 4 significant digits."""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def format_table(rows: Sequence[Mapping[str, object]]) -> str:
    """Render rows (dicts) as an aligned text table; columns in first-seen order,
    numbers right-aligned."""
    if not rows:
        return "(no rows)"
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    cells = [[_fmt_cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    numeric = [all(isinstance(r.get(c), (int, float)) for r in rows if c in r)
               for c in cols]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [line(cols), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


def print_table(rows: Sequence[Mapping[str, object]]) -> None:
    """Print :func:`format_table` of ``rows`` to stdout (flushed)."""
    print(format_table(rows), flush=True)
