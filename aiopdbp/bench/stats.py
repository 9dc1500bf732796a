"""Statistics of repeated runs, ratios between implementations, merging of jobs.

Pure Python (no MPI, no numpy), so it is unit-tested on its own.

* :func:`trimmed_mean` is the PDBP paper's statistic: repeat a measurement,
  drop the largest and the smallest run, take the mean of the rest.
* :func:`summarize` adds the median and the spread (min, max, quartiles) that
  the OSU-style tables need, so a reader sees how noisy a figure is.
* :func:`speed_ratio` turns two figures into "how many times faster is
  aiopdbp": for throughputs ``ours / theirs``, for latencies ``theirs / ours``,
  so > 1 always means aiopdbp is better.
* :func:`mean_of_ratios` is how the paper summarises Fig. 11 (PDBP vs
  ``MPI_Alltoall``): the ratio at each packet size, then the mean of those.
* :func:`merge_results` joins the result documents of several jobs (one per
  rank count of a sweep) into one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "Summary",
    "mean_of_ratios",
    "merge_results",
    "quartiles",
    "speed_ratio",
    "summarize",
    "trimmed_mean",
]


def trimmed_mean(values: Sequence[float]) -> float:
    """Mean after dropping one largest and one smallest value (the paper's
    statistic); the plain mean of fewer than 3 values.

    >>> trimmed_mean([1.0, 2.0, 3.0, 100.0])
    2.5
    """
    if not values:
        raise ValueError("trimmed_mean of no values")
    v = sorted(float(x) for x in values)
    if len(v) >= 3:
        v = v[1:-1]
    return statistics.fmean(v)


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles (inclusive method: within [min, max], exact
    for small samples); both equal the value for a single sample."""
    if not values:
        raise ValueError("quartiles of no values")
    if len(values) == 1:
        v = float(values[0])
        return v, v
    q = statistics.quantiles([float(x) for x in values], n=4, method="inclusive")
    return q[0], q[2]


@dataclass(frozen=True)
class Summary:
    """What the tables show for one (test, size, ranks, implementation)."""

    n: int                #: number of measured runs (warm-ups excluded)
    trimmed_mean: float   #: the paper's statistic
    median: float
    min: float
    max: float
    q1: float
    q3: float

    @property
    def iqr(self) -> float:
        """Inter-quartile range."""
        return self.q3 - self.q1

    @property
    def spread(self) -> float:
        """(max - min) / median: relative spread of the runs (0 when exact)."""
        return (self.max - self.min) / self.median if self.median else math.inf

    def as_dict(self) -> dict[str, float | int]:
        """The fields plus ``iqr`` and ``spread``, for JSON/CSV rows."""
        d: dict[str, float | int] = dict(asdict(self))
        d["iqr"] = self.iqr
        d["spread"] = self.spread
        return d


def summarize(values: Sequence[float]) -> Summary:
    """Trimmed mean, median, min, max and quartiles of ``values`` (>= 1)."""
    if not values:
        raise ValueError("summarize of no values")
    v = [float(x) for x in values]
    q1, q3 = quartiles(v)
    return Summary(len(v), trimmed_mean(v), statistics.median(v), min(v), max(v), q1, q3)


def speed_ratio(ours: float, theirs: float, *, lower_is_better: bool) -> float:
    """How many times faster "ours" is than "theirs" (> 1: ours is better).

    Throughputs and rates: ``ours / theirs``; latencies
    (``lower_is_better``): ``theirs / ours``.  NaN when undefined.
    """
    if lower_is_better:
        ours, theirs = theirs, ours
    if theirs <= 0 or math.isnan(theirs) or math.isnan(ours):
        return math.nan
    return ours / theirs


def mean_of_ratios(pairs: Iterable[tuple[float, float]], *, lower_is_better: bool = False) -> float:
    """Mean over ``(ours, theirs)`` pairs of :func:`speed_ratio` -- the paper's
    "compute the ratio at each packet size, then average the ratios" (Fig. 11).
    NaN when no pair has a defined ratio."""
    ratios = [r for o, t in pairs
              if not math.isnan(r := speed_ratio(o, t, lower_is_better=lower_is_better))]
    return statistics.fmean(ratios) if ratios else math.nan


# --------------------------------------------------------------------- merging
#: meta keys that may legitimately differ between the jobs of one sweep
_PER_JOB_META = ("ranks", "hosts", "command", "started", "finished", "duration_s", "transport")


def merge_results(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Join the result documents of several jobs (a sweep over rank counts).

    Rows and runs are concatenated in job order; the shared ``meta`` is the
    first job's, with every per-job entry kept under ``meta["jobs"]``.  A row
    key ``(test, impl, size, ranks, gps_per_rank)`` may appear in one job only, and
    all jobs must come from the same aiopdbp version and machine: anything
    else is refused with ``ValueError``, since a merged table would mix
    figures that cannot be compared.
    """
    if not docs:
        raise ValueError("nothing to merge")
    first = docs[0].get("meta", {})
    for d in docs[1:]:
        m = d.get("meta", {})
        for what in ("aiopdbp", "machine"):
            a, b = _pick(first, what), _pick(m, what)
            if a != b:
                raise ValueError(f"cannot merge results with different {what}: {a!r} vs {b!r}")
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    jobs: list[dict[str, Any]] = []
    for d in docs:
        for r in d.get("rows", []):
            key = (r.get("test"), r.get("impl"), r.get("size"), r.get("ranks"), r.get("gps_per_rank"))
            if key in seen:
                raise ValueError(f"row {key} appears in more than one job")
            seen.add(key)
            rows.append(dict(r))
        runs.extend(dict(x) for x in d.get("runs", []))
        m = d.get("meta", {})
        jobs.extend(m.get("jobs") or [{k: m[k] for k in _PER_JOB_META if k in m}])
    meta = {k: v for k, v in first.items() if k not in _PER_JOB_META and k != "jobs"}
    meta["jobs"] = jobs
    meta["ranks"] = sorted({r for j in jobs for r in _as_list(j.get("ranks"))})
    transports = sorted({str(j.get("transport")) for j in jobs if j.get("transport")})
    meta["transport"] = transports[0] if len(transports) == 1 else transports
    return {"meta": meta, "rows": rows, "runs": runs}


def _pick(meta: Mapping[str, Any], key: str) -> Any:
    """``meta[key]``, reduced to what identifies it (a machine by host, CPU, kernel)."""
    v = meta.get(key)
    if key == "machine" and isinstance(v, Mapping):
        return tuple(v.get(k) for k in ("cpu_model", "platform", "cpu_count"))
    return v


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]
