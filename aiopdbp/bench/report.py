"""Results of a benchmark job: rows, the table, JSON, CSV, machine info, progress.

Every measured run is kept (``runs`` in the JSON); a *row* summarises the runs
of one (test, size, ranks, GPs per rank, implementation) with
:func:`aiopdbp.bench.stats.summarize` and gives its speed ratio to each
baseline measured for the same point (ratio of medians, > 1 = faster than
the baseline; for latency the baseline's latency over ours).  Each row names
its API, payload type and buffer policy, and the transport.

Output files (in ``--out``): ``bench.json`` (meta, rows, runs, summary),
``bench.csv`` (the rows), ``fig*.png`` (:mod:`aiopdbp.bench.plots`) and, with
``--profile``, ``profile-rank*.pstats``/``.txt``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import socket
import sys
import shutil
import tempfile
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from aiopdbp.bench.stats import mean_of_ratios, speed_ratio, summarize
from aiopdbp.env import mpi_settings

__all__ = [
    "DESCRIPTIONS",
    "Progress",
    "build_rows",
    "build_summary",
    "collect_meta",
    "fmt_bytes",
    "format_table",
    "machine_info",
    "print_report",
    "write_csv",
    "write_json",
    "write_outputs",
]

#: API, payload and buffer policy of each implementation (one row each)
DESCRIPTIONS: dict[str, dict[str, str]] = {
    "aiopdbp-msg": {
        "api": "await gp.send(dest, unit) / await gp.recv()",
        "payload": "bytes",
        "buffers": "send: prebuilt ring of immutable bytes, reused (no copy by contract); "
                   "recv: library-allocated bytes per message; every unit compared"},
    "aiopdbp-stream": {
        "api": "await gp.send_stream(dest, generator, segment_size=unit) / async for seg in stream",
        "payload": "bytes segments",
        "buffers": "send: the same ring, one segment per unit (an iterable: borrowed); "
                   "recv: the library's segments; every segment compared"},
    "raw": {
        "api": "mpi4py Isend/Irecv windows + Waitall (latency: Send/Recv; bw: ack per window)",
        "payload": "bytes",
        "buffers": "send: the same ring, reused; recv: one preallocated, touched numpy buffer "
                   "per flow (a window), reused; every window compared"},
    "floor": {
        "api": "asyncio floor: Isend + one Improbe/Mrecv poller waking futures, uncoalesced",
        "payload": "bytes",
        "buffers": "send: the same ring, reused; recv: fresh buffer per MPI message; "
                   "every unit compared"},
    "floor64k": {
        "api": "asyncio floor, coalesced into 64 KiB blocks (first message of a loop "
               "iteration sent at once)",
        "payload": "bytes",
        "buffers": "send: the same ring, copied into 64 KiB blocks; recv: fresh buffer per "
                   "MPI message, records copied to bytes; every unit compared"},
    "alltoall": {
        "api": "comm.Alltoall, count = unit size per peer, one call per round",
        "payload": "numpy uint8",
        "buffers": "send: the ring tiled per peer, prebuilt and reused; recv: one reused "
                   "buffer, compared whole after every call"},
}
UNITS = {"latency": "us", "rate": "msg/s"}
BASELINES = ("raw", "floor", "floor64k", "alltoall")


# ------------------------------------------------------------------ machine
def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """The machine and software versions (the MPI library only if mpi4py.MPI is loaded)."""
    getaff = getattr(os, "sched_getaffinity", None)
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": len(getaff(0)) if getaff is not None else os.cpu_count(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
    }
    for dist in ("aiopdbp", "numpy", "mpi4py", "mpich", "uvloop", "msgpack", "matplotlib", "rich"):
        info[dist if dist != "mpich" else "mpich_wheel"] = _version(dist)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        try:
            info["mpi_library"] = " ".join(mpi.Get_library_version().split())
            vendor, ver = mpi.get_vendor()
            info["mpi_vendor"] = f"{vendor} {'.'.join(map(str, ver))}"
            info["mpi_standard"] = "%d.%d" % mpi.Get_version()
        except Exception as exc:  # depends on the MPI build
            info["mpi_library"] = f"unknown ({exc!r})"
    info["env"] = mpi_settings()
    return info


def transport_label(hosts: Sequence[str], link: str) -> str:
    """``shm``, ``tcp (...)`` or ``network (k hosts)``, plus the ``--link`` label."""
    distinct = len(set(hosts))
    if distinct > 1:
        base = f"network ({distinct} hosts)"
    elif (settings := mpi_settings()).get("MPIR_CVAR_NOLOCAL") == "1":
        base = f"tcp (MPIR_CVAR_NOLOCAL=1, UCX_TLS={settings.get('UCX_TLS', '-')})"
    else:
        base = "shm"
    return f"{base}, {link}" if link else base


def collect_meta(opts: Any, ranks: int, hosts: Sequence[str], started: float) -> dict[str, Any]:
    """Everything a result file says about how it was measured."""
    info = machine_info()
    options = {k: v for k, v in asdict(opts).items() if k != "command"}
    return {
        "aiopdbp": info.get("aiopdbp"),
        "machine": info,
        "event_loop": "uvloop" if opts.uvloop and info.get("uvloop") else "asyncio",
        "transport": transport_label(hosts, opts.link),
        "link": opts.link, "line_rate_bps": opts.line_rate or None,
        "ranks": ranks, "hosts": list(hosts), "gps_per_rank": opts.gps_per_rank,
        "statistic": "each figure: repeat R runs; trimmed_mean = mean after dropping the largest "
                     "and smallest run (the PDBP paper); median, min, max, quartiles beside it",
        "ratios": "vs_X = speed of this row / speed of X at the same point (ratio of medians; "
                  "latency: X's latency / ours): > 1 means faster than X",
        "options": options, "command": " ".join(opts.command),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "duration_s": round(time.time() - started, 1),
    }


# --------------------------------------------------------------------- rows
def build_rows(runs: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (test, size, ranks, GPs per rank, impl), in run order, with ratios."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["test"], r["size"], r["ranks"], r["gps_per_rank"], r["impl"]), []).append(r)
    line_rate = meta.get("line_rate_bps") or 0
    rows: list[dict[str, Any]] = []
    for (test, size, ranks, k, impl), rs in groups.items():
        s = summarize([r["value"] for r in rs])
        row: dict[str, Any] = {"test": test, "ranks": ranks, "gps_per_rank": k, "size": size,
                               "impl": impl, "unit": UNITS.get(test, "MB/s")}
        row.update(s.as_dict())
        for c in ("cpu_tx_us", "cpu_rx_us", "cpu_txrx_us"):
            vals = sorted(r[c] for r in rs if r.get(c) is not None)
            row[c] = vals[len(vals) // 2] if vals else None
        row["units_per_flow"], row["window"] = rs[0]["units_per_flow"], rs[0]["window"]
        if line_rate and row["unit"] == "MB/s":
            row["line_fraction"] = s.median * 8e6 / line_rate
        row.update(DESCRIPTIONS.get(impl, {}))
        row["transport"] = meta.get("transport")
        rows.append(row)
    index = {(r["test"], r["size"], r["ranks"], r["gps_per_rank"], r["impl"]): r for r in rows}
    for r in rows:
        for b in BASELINES:
            other = index.get((r["test"], r["size"], r["ranks"], r["gps_per_rank"], b))
            r[f"vs_{b}"] = (speed_ratio(r["median"], other["median"],
                                        lower_is_better=r["test"] == "latency")
                            if other is not None else None)
    return rows


def build_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per test and rank count: the mean of per-size ratios (trimmed means, the
    paper's way) of each aiopdbp implementation to each baseline."""
    out: dict[str, Any] = {}
    index = {(r["test"], r["size"], r["ranks"], r["gps_per_rank"], r["impl"]): r for r in rows}
    for r in rows:
        if not str(r["impl"]).startswith("aiopdbp"):
            continue
        for b in BASELINES:
            other = index.get((r["test"], r["size"], r["ranks"], r["gps_per_rank"], b))
            if other is None:
                continue
            key = f"{r['test']} n={r['ranks']} k={r['gps_per_rank']} {r['impl']} vs {b}"
            out.setdefault(key, []).append((r["trimmed_mean"], other["trimmed_mean"], r["size"]))
    return {k: {"mean_of_ratios": mean_of_ratios([(a, b) for a, b, _ in v],
                                                 lower_is_better=k.startswith("latency")),
                "sizes": [s for *_, s in v]} for k, v in out.items()}


# -------------------------------------------------------------------- files
def _json_default(o: object) -> object:
    tolist = getattr(o, "tolist", None)
    if callable(tolist):
        return tolist()
    return str(o)


def write_json(path: str | os.PathLike[str], data: object) -> Path:
    """Write ``data`` as indented JSON atomically (parents created); NaN becomes null."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(_no_nan(data), f, indent=2, default=_json_default)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _no_nan(o: Any) -> Any:
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return None
    if isinstance(o, Mapping):
        return {k: _no_nan(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_no_nan(v) for v in o]
    return o


def write_csv(path: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]],
              meta: Mapping[str, Any]) -> Path:
    """The rows as CSV, each with the machine, MPI library and aiopdbp version."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    m = meta.get("machine", {})
    extra = {"cpu_model": m.get("cpu_model"), "kernel": m.get("kernel"),
             "mpi_library": m.get("mpi_library"), "aiopdbp": meta.get("aiopdbp"),
             "event_loop": meta.get("event_loop")}
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    cols += list(extra)
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({**_no_nan(dict(r)), **extra})
    return p


def write_outputs(out: Path, meta: dict[str, Any], runs: list[dict[str, Any]], *, plots: bool,
                  profile: bool = False) -> dict[str, Any]:
    """Rows, summary, JSON, CSV, plots and the printed report; returns the document."""
    rows = build_rows(runs, meta)
    doc = {"meta": meta, "rows": rows, "runs": runs, "summary": build_summary(rows)}
    return finish(out, doc, plots=plots, profile=profile)


def finish(out: Path, doc: dict[str, Any], *, plots: bool, profile: bool = False) -> dict[str, Any]:
    """Write ``doc`` (JSON, CSV, plots) into ``out`` and print the report."""
    write_json(out / "bench.json", doc)
    write_csv(out / "bench.csv", doc["rows"], doc["meta"])
    notes = [f"results: {out / 'bench.json'}, {out / 'bench.csv'}"]
    if plots:
        from aiopdbp.bench.plots import write_plots

        made, note = write_plots(out, doc["rows"], doc["meta"])
        notes += [f"plots: {', '.join(str(p) for p in made)}"] if made else []
        notes += [note] if note else []
    if profile:
        notes.append(f"profiles: {out}/profile-rank*.pstats (and .txt: top 40 by own time)")
    print_report(doc, notes)
    return doc


# ------------------------------------------------------------------ printing
def fmt_bytes(n: float) -> str:
    """``4194304`` -> ``'4 MiB'``, ``291`` -> ``'291 B'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)


#: the printed report fits a terminal this wide (full detail: bench.json, bench.csv)
REPORT_WIDTH = 100
#: ratio columns of the printed tables
_SHORT = {"raw": "xraw", "floor": "xfloor", "floor64k": "xf64k", "alltoall": "xa2a"}
_LEGEND = ("median of the timed runs; ±: half the min..max range, in % of the median; xB: speed "
           "ratio to baseline B at the same point (> 1: aiopdbp faster; xf64k: floor64k, xa2a: "
           "alltoall); cpu us: CPU µs per unit, sender/receiver.  Trimmed means, quartiles and "
           "the rest: bench.json, bench.csv.")


def _spread(r: Mapping[str, Any]) -> str:
    vals = [r.get(k) for k in ("min", "max", "median")]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals) or not vals[2]:
        return "-"
    lo, hi, med = (float(v) for v in vals)  # type: ignore[arg-type]
    return f"±{(hi - lo) / 2 / abs(med):.0%}"


def _table_rows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict[str, str]]]]:
    """The printed tables: one per test (its unit in the title), in order of
    appearance, with the columns that fit :data:`REPORT_WIDTH`; a column
    that is empty in every row (a baseline not run) is left out."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["test"], []).append(r)
    tables = []
    for test, rs in groups.items():
        ranks = sorted({str(r["ranks"]) for r in rs})
        units = sorted({str(r["unit"]) for r in rs})
        title = f"{test} ({', '.join(units)}), n={','.join(ranks)}"
        out = []
        for r in rs:
            cpu = r.get("cpu_txrx_us") or "/".join(_num(r.get(c)) for c in ("cpu_tx_us", "cpu_rx_us"))
            row = {"n": str(r["ranks"])} if len(ranks) > 1 else {}
            row |= {"size": fmt_bytes(r["size"]), "impl": r["impl"], "median": _num(r["median"]),
                    "±": _spread(r)}
            row |= {_SHORT[b]: _num(r.get(f"vs_{b}")) for b in BASELINES}
            row["cpu us"] = cpu if isinstance(cpu, str) else _num(cpu)
            out.append(row)
        empty = [c for c in out[0] if all(row[c] in ("-", "-/-") for row in out)]
        tables.append((title, [{k: v for k, v in row.items() if k not in empty} for row in out]))
    return tables


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Aligned plain-text table of dict rows (columns in first-seen order)."""
    if not rows:
        return "(no rows)"
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(text, REPORT_WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def print_report(doc: Mapping[str, Any], notes: Sequence[str] = ()) -> None:
    """The tables (rich when installed), the paper-style summary and
    ``notes``, all within :data:`REPORT_WIDTH` columns."""
    meta = doc["meta"]
    m = meta.get("machine", {})
    head = (f"aiopdbp bench: ranks {meta.get('ranks')}, transport {meta.get('transport')}, "
            f"loop {meta.get('event_loop')}, {m.get('mpi_library', '?')[:60]}; "
            f"{m.get('cpu_model')} ({m.get('cpu_usable')} cores), kernel {m.get('kernel')}")
    print(_wrap(head, "  "))
    print(_wrap(_LEGEND, "  "), flush=True)
    tables = _table_rows(doc["rows"])
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for title, rows in tables:
            print(f"\n{title}\n{format_table(rows)}", flush=True)
    else:
        width = REPORT_WIDTH
        if sys.stdout.isatty():
            width = min(width, shutil.get_terminal_size((REPORT_WIDTH, 24)).columns)
        console = Console(width=width)
        for title, rows in tables:
            t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
            for c in rows[0] if rows else []:
                t.add_column(c, justify="left" if c in ("impl",) else "right", no_wrap=True)
            for r in rows:
                t.add_row(*r.values())
            console.print(t)
    summary = doc.get("summary", {})
    if summary:
        print("mean of per-size speed ratios (trimmed means, > 1 = aiopdbp faster):")
        for k, v in summary.items():
            print(_wrap(f"  {k}: {_num(v['mean_of_ratios'])}  ({len(v['sizes'])} sizes)", "    "))
    for n in notes:
        print(_wrap(n, "  "))
    sys.stdout.flush()


class Progress:
    """A progress bar on rank 0: rich's when stderr is a terminal, else one line per case."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self.total, self.enabled, self.done = total, enabled, 0
        self._last = ""
        self._rich: Any = None
        if not enabled or not sys.stderr.isatty():
            return
        try:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                       TextColumn, TimeElapsedColumn)
        except ImportError:
            return
        self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(stderr=True))
        self._rich.start()
        self._task = self._rich.add_task("bench", total=total)

    def step(self, case: str, detail: str) -> None:
        """A run of ``case`` (``detail``: implementation, warm-up) is about to start."""
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, description=f"{case} {detail}")
        elif case != self._last:
            self._last = case
            print(f"[bench {self.done}/{self.total}] {case}", file=sys.stderr, flush=True)
        self.done += 1

    def close(self) -> None:
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
            self._rich.stop()
