"""PNG plots in the style of the PDBP paper's Fig. 8-11 (matplotlib, optional).

* ``fig8_1toN.png``, ``fig9_Nto1.png``, ``fig10_NtoN.png``: per-host
  throughput (Mbit/s) against the unit packet size (log x), one line per
  rank count; left panel ``gp.send``, right panel ``send_stream``; the raw
  mpi4py baseline of the same rank count dotted, in the same colour.
* ``fig11_NtoN_vs_alltoall.png``: N-to-N with ``gp.send`` (solid) against
  ``MPI_Alltoall`` (dashed) per rank count; the legend gives the mean of the
  per-size ratios (the paper's 9.9x summary).
* ``p2p.png``: the OSU-style tests (latency, message rate, bandwidth) of
  each implementation, so the floor and raw MPI are seen beside aiopdbp.

Points are the trimmed means (the paper's statistic); the shaded band spans
min..max of the runs.  Lines are named as in the paper (``1-to-3``,
``3-to-1``, ``4x4``) with the rank count beside.  With a ``--line-rate``
horizontal lines mark it and 85 % of it (the issue's target).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aiopdbp.bench.stats import mean_of_ratios

__all__ = ["pattern_label", "write_plots"]

_FIGS = (("fig8_1toN.png", "1toN", "Fig. 8 style: 1-to-N"),
         ("fig9_Nto1.png", "Nto1", "Fig. 9 style: N-to-1"),
         ("fig10_NtoN.png", "NtoN", "Fig. 10 style: N-to-N"))
_MISSING = "plots skipped: matplotlib is not installed (pip install 'aiopdbp[bench]')"


def _series(rows: Sequence[Mapping[str, Any]], test: str, impl: str, ranks: int
            ) -> tuple[list[int], list[float], list[float], list[float]]:
    pts = sorted((r["size"], r["trimmed_mean"], r["min"], r["max"]) for r in rows
                 if r["test"] == test and r["impl"] == impl and r["ranks"] == ranks)
    return ([p[0] for p in pts], [p[1] * 8 for p in pts], [p[2] * 8 for p in pts],
            [p[3] * 8 for p in pts])  # MB/s -> Mbit/s


def pattern_label(test: str, ranks: int) -> str:
    """The paper's name of a pattern on ``ranks`` ranks: ``1-to-3``, ``3-to-1``, ``4x4``."""
    if test == "1toN":
        return f"1-to-{ranks - 1}"
    if test == "Nto1":
        return f"{ranks - 1}-to-1"
    if test == "NtoN":
        return f"{ranks}x{ranks}"
    return f"{ranks} ranks"


def _line_rate(ax: Any, line: float | None) -> None:
    if line:
        ax.axhline(line / 1e6, color="grey", lw=0.8, ls="--", label="line rate")
        ax.axhline(0.85 * line / 1e6, color="grey", lw=0.8, ls=":", label="85 % of line rate")


def _size_axis(ax: Any) -> None:
    """Log x (sizes); log y too when the throughputs span more than 100x."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel("unit packet size (bytes)")
    ys = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
    if ys and max(ys) > 100 * min(ys):
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)


def write_plots(out: Path, rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]
                ) -> tuple[list[Path], str]:
    """Write every figure that has data; returns (files, note).  The note says
    why plots were skipped (matplotlib missing), else it is empty."""
    try:
        import matplotlib
    except ImportError:
        return [], _MISSING
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    where = f"{_transport_label(meta.get('transport'))}, {meta.get('event_loop')}"
    line = meta.get("line_rate_bps")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_ranks = sorted({int(r["ranks"]) for r in rows})

    def finish(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)

    for name, test, title in _FIGS:
        panels = [i for i in ("aiopdbp-msg", "aiopdbp-stream")
                  if any(r["test"] == test and r["impl"] == i for r in rows)]
        if not panels:
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
        for ax, impl in zip(axes[0], panels):
            for c, n in enumerate(all_ranks):
                col = colours[c % len(colours)]
                x, y, lo, hi = _series(rows, test, impl, n)
                if x:
                    ax.plot(x, y, "o-", color=col,
                            label=f"aiopdbp {pattern_label(test, n)} ({n} ranks)")
                    ax.fill_between(x, lo, hi, color=col, alpha=0.15)
                x, y, _, _ = _series(rows, test, "raw", n)
                if x:
                    ax.plot(x, y, ":", color=col, label=f"raw mpi4py {pattern_label(test, n)}")
            _line_rate(ax, line)
            _size_axis(ax)
            ax.set_ylabel("per-host throughput (Mbit/s)")
            ax.set_title(f"{title}, {'gp.send' if impl == 'aiopdbp-msg' else 'send_stream'}",
                         fontsize=10)
            ax.legend(fontsize=7)
        fig.suptitle(where, fontsize=8)
        finish(fig, name)

    if any(r["test"] == "NtoN" and r["impl"] == "alltoall" for r in rows):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for c, n in enumerate(all_ranks):
            col = colours[c % len(colours)]
            ours = {r["size"]: r["trimmed_mean"] for r in rows
                    if r["test"] == "NtoN" and r["impl"] == "aiopdbp-msg" and r["ranks"] == n}
            theirs = {r["size"]: r["trimmed_mean"] for r in rows
                      if r["test"] == "NtoN" and r["impl"] == "alltoall" and r["ranks"] == n}
            ratio = mean_of_ratios([(ours[s], theirs[s]) for s in ours if s in theirs])
            x, y, _, _ = _series(rows, "NtoN", "aiopdbp-msg", n)
            if x:
                ax.plot(x, y, "o-", color=col,
                        label=f"aiopdbp {n}x{n} (mean of ratios {ratio:.2f}x)")
            x, y, _, _ = _series(rows, "NtoN", "alltoall", n)
            if x:
                ax.plot(x, y, "s--", color=col, label=f"MPI_Alltoall {n}x{n}")
        _line_rate(ax, line)
        _size_axis(ax)
        ax.set_ylabel("per-host throughput (Mbit/s)")
        ax.set_title(f"Fig. 11 style: N-to-N vs MPI_Alltoall ({where})", fontsize=9)
        ax.legend(fontsize=7)
        finish(fig, "fig11_NtoN_vs_alltoall.png")

    p2p = [t for t in ("latency", "rate", "bw") if any(r["test"] == t for r in rows)]
    if p2p:
        fig, axes = plt.subplots(1, len(p2p), figsize=(4.6 * len(p2p), 4.0), squeeze=False)
        for ax, test in zip(axes[0], p2p):
            sel = [r for r in rows if r["test"] == test]
            labels = [f"{r['impl']}\n{r['size']} B n={r['ranks']}" for r in sel]
            ax.bar(range(len(sel)), [r["median"] for r in sel],
                   yerr=[[r["median"] - r["min"] for r in sel], [r["max"] - r["median"] for r in sel]],
                   color=[colours[i % len(colours)] for i in range(len(sel))])
            ax.set_xticks(range(len(sel)), labels, fontsize=6, rotation=60)
            ax.set_ylabel(f"{test} ({sel[0]['unit']}, median)")
            ax.set_title(test, fontsize=10)
        fig.suptitle(where, fontsize=8)
        finish(fig, "p2p.png")
    return made, ""


def _transport_label(transport: Any) -> str:
    """One short label for a figure: merged runs list one transport per rank
    count (``network (3 hosts), emulated 1gbit ...``); keep what they share."""
    if not isinstance(transport, (list, tuple)):
        return str(transport)
    labels = [str(t) for t in transport]
    if len(set(labels)) <= 1:
        return labels[0] if labels else "?"
    import re

    hosts = sorted({int(m) for t in labels for m in re.findall(r"\((\d+) hosts?\)", t)})
    rest = {re.sub(r"\s*\(\d+ hosts?\)", "", t) for t in labels}
    if hosts and len(rest) == 1:
        return f"{rest.pop()}, {'/'.join(map(str, hosts))} hosts"
    return "; ".join(dict.fromkeys(labels))

