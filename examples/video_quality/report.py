"""What the collector keeps and prints: the CSV, the per-stream summary, timings.

CSV columns are exactly ``stream,frame,blur,smoothness,verdict`` (``--details``
appends ``blockiness``).  ``smoothness`` is empty for a stream's first frame
(nothing to compare with).  ``verdict`` is the stream's verdict as of that
frame: ``ok`` or its flags joined by ``+`` in the order blurred, frozen, choppy.
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from .kernels import RESULT_COLUMNS, verdict_text

CSV_COLUMNS = ("stream", "frame", "blur", "smoothness", "verdict")
_COL = {name: i for i, name in enumerate(RESULT_COLUMNS)}

Array = np.ndarray[Any, Any]


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.5g}"


class CsvSink:
    """Writes result rows; sorted by (stream, frame) at close when ``sort`` is set
    (offline analysis), else in arrival order (live)."""

    def __init__(self, path: str | Path | None, names: Sequence[str], details: bool = False,
                 sort: bool = False) -> None:
        self.names, self.details, self.sort = names, details, sort
        self.rows = 0
        self._held: list[Array] = []
        self._file: IO[str] | None = None
        self._writer: Any = None
        if path is not None:
            self._file = open(path, "w", newline="", encoding="utf-8")
            self._writer = csv.writer(self._file)
            self._writer.writerow(CSV_COLUMNS + (("blockiness",) if self.details else ()))

    def add(self, table: Array) -> None:
        self.rows += len(table)
        if self._writer is None:
            return
        if self.sort:
            self._held.append(np.array(table))
        else:
            self._write(table)

    def _write(self, table: Array) -> None:
        names = self.names
        out = []
        for s, f, blur, smooth, block, flags in table.tolist():
            row = [names[int(s)], int(f), _fmt(blur), _fmt(smooth), verdict_text(int(flags))]
            if self.details:
                row.append(_fmt(block))
            out.append(row)
        self._writer.writerows(out)

    def close(self) -> None:
        if self._file is None:
            return
        if self._held:
            table = np.concatenate(self._held)
            order = np.lexsort((table[:, _COL["frame"]], np.array([self.names[int(s)] for s in table[:, 0]])))
            self._write(table[order])
            self._held.clear()
        self._file.close()
        self._file = None


@dataclass
class StreamSummary:
    """Per-stream running totals (arrays indexed by stream id), updated per result table."""

    n: int
    frames: Array = field(init=False)
    blur_sum: Array = field(init=False)
    smooth_sum: Array = field(init=False)
    smooth_n: Array = field(init=False)
    block_sum: Array = field(init=False)
    flags: Array = field(init=False)
    last_frame: Array = field(init=False)

    def __post_init__(self) -> None:
        self.frames = np.zeros(self.n, np.int64)
        self.blur_sum = np.zeros(self.n)
        self.smooth_sum = np.zeros(self.n)
        self.smooth_n = np.zeros(self.n, np.int64)
        self.block_sum = np.zeros(self.n)
        self.flags = np.zeros(self.n, np.int64)
        self.last_frame = np.full(self.n, -1, np.int64)

    def add(self, table: Array) -> None:
        s = table[:, _COL["stream"]].astype(np.int64)
        if s.size and (s.min() < 0 or s.max() >= self.n):
            raise ValueError(f"result for an unknown stream id (0..{self.n - 1})")
        np.add.at(self.frames, s, 1)
        np.add.at(self.blur_sum, s, table[:, _COL["blur"]])
        sm = table[:, _COL["smoothness"]]
        ok = ~np.isnan(sm)
        np.add.at(self.smooth_sum, s[ok], sm[ok])
        np.add.at(self.smooth_n, s[ok], 1)
        np.add.at(self.block_sum, s, table[:, _COL["blockiness"]])
        # verdicts are sticky, so the flags of a stream's latest frame are its verdict
        f = table[:, _COL["frame"]].astype(np.int64)
        order = np.argsort(f, kind="stable")
        later = f[order] >= self.last_frame[s[order]]
        sel = order[later]
        self.last_frame[s[sel]] = f[sel]
        self.flags[s[sel]] = table[sel, _COL["flags"]].astype(np.int64)

    def verdicts(self) -> list[str]:
        return [verdict_text(int(b)) for b in self.flags]

    def print(self, names: Sequence[str], truth: Sequence[str] | None = None, limit: int = 40,
              file: IO[str] = sys.stdout) -> int:
        """Print the table (or, past ``limit`` streams, the counts and the mismatches);
        returns the number of verdicts that differ from ``truth``."""
        verdicts = self.verdicts()
        mism = [i for i in range(self.n) if truth is not None and truth[i] != verdicts[i]]
        with np.errstate(invalid="ignore", divide="ignore"):
            blur = self.blur_sum / self.frames
            smooth = self.smooth_sum / self.smooth_n
            block = self.block_sum / self.frames
        width = min(48, max(10, *(len(n) for n in names))) if names else 10
        head = f"{'stream':<{width}} {'frames':>6} {'blur':>7} {'smooth':>7} {'block':>6}  verdict"
        if truth is not None:
            head += "  (expected)"
        rows = range(self.n) if self.n <= limit else mism
        if self.n > limit:
            counts: dict[str, int] = {}
            for v in verdicts:
                counts[v] = counts.get(v, 0) + 1
            print(f"{self.n} streams: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=file)
        if rows:
            print(head, file=file)
        for i in rows:
            line = (f"{names[i][:width]:<{width}} {self.frames[i]:>6} {blur[i]:>7.3f} {smooth[i]:>7.3f} "
                    f"{block[i]:>6.3f}  {verdicts[i]}")
            if truth is not None:
                line += "" if truth[i] == verdicts[i] else f"  (expected {truth[i]})"
            print(line, file=file)
        if truth is not None:
            print(f"verdicts matching the ground truth: {self.n - len(mism)}/{self.n}", file=file)
        return len(mism)


def _med(x: Any) -> float:
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    return float(np.median(x)) if x.size else float("nan")


def timing_report(res: Any, cfg: Any) -> dict[str, Any]:
    """The live run's timing, over the timed ticks (``cfg.warmup`` onwards).

    Per tick: ``latency`` from TICK to the last result at the collector; each
    stage's *busy* time (inside decode calls, inside the analysis, inside the
    collector's bookkeeping) as the busiest rank's and as the sum over ranks;
    ``other`` = latency - the busiest rank's decode + analysis (+ collect on
    rank 0): communication and waiting (only meaningful with at most one
    compute thread per rank, when a rank's stages cannot overlap).  With ``--phased`` the stages do not
    overlap, and the phases are timed apart from timestamps: decode (TICK to
    the last ingest done decoding), transfer (to the last batch read by an
    analyser), analysis (to the last result sent), collect (to the last result
    received).  Medians over the timed ticks.
    """
    ticks = range(cfg.warmup, cfg.ticks)
    n = res.summary.n
    frame_bytes = cfg.width * cfg.height * 3 // 2
    lat = res.tick_done - res.tick_start
    ranks = res.ranks
    ing = {int(name.split("-")[1]): st for name, st in res.ingest_stats.items()}
    ana = {name: st for name, st in res.analyser_stats.items()}
    per_tick: list[dict[str, float]] = []
    for t in ticks:
        dec, dec_cpu, proc = np.zeros(ranks), np.zeros(ranks), np.zeros(ranks)
        t_decoded = []
        for r, st in ing.items():
            rows = st[st[:, 0] == t]
            dec[r] += rows[:, 2].sum()
            dec_cpu[r] += rows[:, 5].sum()
            t_decoded.extend(rows[:, 4].tolist())
            # CPU of the whole rank from this round's start to the next one's (or the end)
            after = st[(st[:, 0] == t + 1) | (st[:, 0] == -1)]
            if len(rows) and len(after):
                proc[r] = after[0, 6] - rows[0, 6]
        an, an_cpu = np.zeros(ranks), np.zeros(ranks)
        t_read, t_done = [], []
        for name, st in ana.items():
            r = int(name.split("-")[1])
            rows = st[st[:, 0] == t]
            an[r] += rows[:, 4].sum()
            an_cpu[r] += rows[:, 6].sum()
            t_read.extend(rows[:, 3].tolist())
            t_done.extend(rows[:, 5].tolist())
        col = np.zeros(ranks)
        col[0] = res.collect_busy[t]
        busiest = float((dec + an + col).max())
        d: dict[str, float] = {
            "latency": float(lat[t]), "decode_max": float(dec.max()), "decode_sum": float(dec.sum()),
            "analysis_max": float(an.max()), "analysis_sum": float(an.sum()),
            "decode_cpu_sum": float(dec_cpu.sum()), "analysis_cpu_sum": float(an_cpu.sum()),
            "process_cpu_sum": float(proc.sum()),
            "collect": float(col[0]), "busiest_rank": busiest, "other": float(lat[t]) - busiest,
        }
        if cfg.phased and t_decoded and t_read and t_done:
            d["phase_decode"] = max(t_decoded) - res.tick_start[t]
            d["phase_transfer"] = max(t_read) - max(t_decoded)
            d["phase_analysis"] = max(t_done) - max(t_read)
            d["phase_collect"] = res.tick_done[t] - max(t_done)
        per_tick.append(d)
    keys = per_tick[0].keys() if per_tick else []
    med = {k: _med([d[k] for d in per_tick]) for k in keys}
    out: dict[str, Any] = {
        "streams": n, "ranks": ranks, "analyser_gps": res.analysers, "ingest_gps": ranks,
        "device": res.device, "placement": cfg.placement, "batch": cfg.batch, "threads": cfg.threads,
        "phased": cfg.phased, "timed_ticks": len(per_tick), "warmup_ticks": cfg.warmup,
        "cross_rank_share": res.cross_rank_share, "bytes_per_tick": n * frame_bytes,
        "median": med, "ticks": per_tick,
    }
    lines = []
    if per_tick:
        lat_all = [d["latency"] for d in per_tick]
        lines.append(f"tick latency (every stream's current frame, TICK -> all {n} results at the collector): "
                     f"median {med['latency']:.3f} s, min {min(lat_all):.3f} s, max {max(lat_all):.3f} s "
                     f"over {len(per_tick)} timed tick(s)")

        def rate(busy: float) -> str:
            return f"{n / busy:,.0f} frames/s" if busy > 0 else "-"

        lines.append(f"  decode   busy {med['decode_max']:.3f} s on the busiest rank, {med['decode_sum']:.3f} s "
                     f"in all: {rate(med['decode_sum'])} per ingest GP, {rate(med['decode_max'])} over "
                     f"{ranks} rank(s)")
        lines.append(f"  analysis busy {med['analysis_max']:.3f} s on the busiest rank, {med['analysis_sum']:.3f} s "
                     f"in all: {rate(med['analysis_sum'])} per analyser GP, {rate(med['analysis_max'])} over "
                     f"{res.analysers} GP(s)")
        lines.append(f"  CPU time (thread): decode {med['decode_cpu_sum']:.3f} s = "
                     f"{med['decode_cpu_sum'] / n * 1e6:.0f} us/frame, analysis {med['analysis_cpu_sum']:.3f} s = "
                     f"{med['analysis_cpu_sum'] / n * 1e6:.0f} us/frame (busy > CPU: the core was shared); "
                     f"all threads of all ranks {med['process_cpu_sum']:.3f} s")
        lines.append(f"  collect  busy {med['collect']:.3f} s (rank 0)")
        if cfg.threads > 1:
            lines.append(f"  other    n/a: with --threads {cfg.threads} the busy times of a rank's threads overlap "
                         f"(transfer of {n * frame_bytes / 1e6:.0f} MB, {res.cross_rank_share:.0%} across ranks)")
        else:
            lines.append(f"  other    {med['other']:.3f} s = latency - busiest rank's busy time "
                         f"(transfer of {n * frame_bytes / 1e6:.0f} MB, {res.cross_rank_share:.0%} across ranks, "
                         "and waiting)")
        if cfg.fps > 0:
            period = 1.0 / cfg.fps
            lag = res.tick_lag[cfg.warmup:cfg.ticks]
            late = int((lag > period).sum())
            out["late_ticks"] = late
            lines.append(f"  real time at {cfg.fps:g} fps: " + (
                "kept up (every tick started on schedule)" if late == 0 else
                f"fell behind: {late} of {len(lag)} tick(s) started more than one frame period late "
                f"(up to {lag.max():.2f} s)"))
        if "phase_decode" in med:
            lines.append(f"  phased: decode {med['phase_decode']:.3f} s, transfer {med['phase_transfer']:.3f} s "
                         f"({n * frame_bytes / 1e6 / max(med['phase_transfer'], 1e-9):,.0f} MB/s), analysis "
                         f"{med['phase_analysis']:.3f} s, collect {med['phase_collect']:.3f} s")
    out["lines"] = lines
    return out
