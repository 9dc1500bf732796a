"""``aiopdbp bench scale``: what start-up, memory and names cost as the rank count grows.

For each rank count N of ``-n`` and each pattern (``alltoall``: ``--units``
messages of ``--unit`` bytes to every other rank; ``ring``: the same to both
neighbours) it launches two jobs one after the other on the same machine --
aiopdbp (:mod:`aiopdbp.bench.scale_job`) and the raw mpi4py program of the
same pattern (``scale_raw.py``: ``MPI_Alltoall`` / ``Isend``-``Irecv``) --
and for each ``--cluster`` size one in-process cluster (``open_cluster``) in
a fresh interpreter.  It prints, per row, rank 0's figure and the maximum
over the other ranks (``r0/max``): open time (``open_node``; raw: MPI init +
``Barrier``), peak RSS, job wall time, registration control messages (sent
at rank 0 / the most any other rank sent), the cold and warm round trip of
a pair (``--idle S``: and its round trip after S s of silence, the base
that shows what first contact adds beyond waking a sleeping peer), and then
each figure's slope per peer (least squares over N-1) and
the aiopdbp minus raw slope of peak RSS (``--repeat K``: each job K times,
aiopdbp and raw alternated, each figure the median).  Then where each job's
time went: every rank stamps its phases (wall since the launch, CPU seconds;
see :mod:`aiopdbp.bench.scale_job`), and the phase table gives, per phase,
when it ended (rank 0 / the latest other rank) and the CPU it took (rank 0 /
the most any other rank took).  ``OUT/scale.json`` keeps every
rank's record; ``OUT/scale.txt`` the printed table.

Bytecode: before the first job it writes aiopdbp's bytecode where it is
missing or stale (:func:`compile_sources`), as ``pip install`` of a wheel
does: an editable install under ``PYTHONDONTWRITEBYTECODE=1`` has none, and
then every rank compiles every module of aiopdbp from source at each start
(about 0.16 CPU-s a rank, 32 ranks at once on 2 cores), which the raw
program, whose numpy and mpi4py come compiled, never pays.

Oversubscribed runs are heavy: run them under ``nice`` on a shared machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import py_compile
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiopdbp.bench.plan import BENCH_ENV, parse_ranks

__all__ = ["build_parser", "compile_sources", "main", "median_summary", "phase_rows", "slope",
           "summarise_job"]

MIB = 1024.0


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``aiopdbp bench scale``."""
    p = argparse.ArgumentParser(
        prog="aiopdbp bench scale", allow_abbrev=False,
        description="Per-peer costs: open time, peak RSS, registration and first-message "
        "latency over oversubscribed MPI jobs and in-process clusters, beside raw mpi4py "
        "programs of the same pattern in the same run; prints each figure's slope per peer.",
        epilog="example: nice -n 10 aiopdbp bench scale -n 4,8,16,32 --cluster 8,64,256")
    a = p.add_argument
    a("-n", "--ranks", type=parse_ranks, default=[4, 8, 16], metavar="N[,N...]",
      help="MPI rank counts (default 4,8,16; 0 or 'none' is not allowed: use --no-mpi)")
    a("--no-mpi", action="store_true", help="only the in-process clusters")
    a("--patterns", default="alltoall,ring", help="comma list of alltoall, ring")
    a("--cluster", default="8,64", metavar="N[,N...]",
      help="in-process cluster sizes (open_cluster), '' for none (default 8,64)")
    a("--units", type=int, default=20, help="messages per pair and direction (20)")
    a("--unit", type=int, default=256, help="bytes per message (256)")
    a("--repeat", type=int, default=1, metavar="K",
      help="run each MPI job K times, aiopdbp and raw alternated, and report the median "
           "of each figure (1; peak RSS varies by a few MiB from run to run)")
    a("--idle", type=float, default=0.0, metavar="S",
      help="also time the cold pair's round trip after S s of silence (after the pattern; the "
           "aiopdbp job's wall then includes S): a first message against a peer that is asleep, "
           "beside one against a warm peer whose engine spins (0: not measured)")
    a("--timeout", type=float, default=300.0, help="seconds one job may take (300)")
    a("--out", default="", help="output folder (default ./aiopdbp-bench-scale-YYYYmmdd-HHMMSS)")
    return p


def compile_sources(root: Path) -> tuple[int, int]:
    """Write the bytecode of every ``*.py`` under ``root`` whose cached
    ``.pyc`` is missing or older than the source (py_compile writes it even
    under ``PYTHONDONTWRITEBYTECODE``, which only stops the import system);
    returns (modules compiled, modules that could not be: a read-only tree,
    a syntax error)."""
    done = failed = 0
    for src in sorted(root.rglob("*.py")):
        cached = Path(importlib.util.cache_from_source(str(src)))
        try:
            if cached.exists() and cached.stat().st_mtime >= src.stat().st_mtime:
                continue
            py_compile.compile(str(src), cfile=str(cached), doraise=True)
            done += 1
        except (OSError, py_compile.PyCompileError):
            failed += 1
    return done, failed


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 with fewer than two distinct x)."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _r0_max(recs: Sequence[dict[str, Any]], key: str) -> tuple[float, float]:
    r0 = [r[key] for r in recs if r["rank"] == 0]
    others = [r[key] for r in recs if r["rank"] != 0]
    return (float(r0[0]) if r0 else 0.0), (float(max(others)) if others else 0.0)


def summarise_job(recs: Sequence[dict[str, Any]], wall: float) -> dict[str, Any]:
    """One job's row from its ranks' records: rank 0 and the maximum over the others."""
    row: dict[str, Any] = {"wall_s": wall}
    for key in ("open_s", "rss_peak_kib", "rss_open_kib", "pattern_s", "registration_msgs",
                "all_registered_s"):
        if recs and key in recs[0]:
            row[key] = _r0_max(recs, key)
    rtt = [r for r in recs if r.get("first_rtt_s")]
    if rtt:
        row["first_rtt_s"], row["warm_rtt_s"] = rtt[0]["first_rtt_s"], rtt[0]["warm_rtt_s"]
        if rtt[0].get("idle_rtt_s"):
            row["idle_rtt_s"] = rtt[0]["idle_rtt_s"]
    return row


def median_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One job's row from its repeats' rows: the median of each figure (of
    rank 0's and of the others' maximum, separately)."""
    out: dict[str, Any] = {}
    for key, value in rows[0].items():
        if isinstance(value, tuple):
            out[key] = (statistics.median(r[key][0] for r in rows),
                        statistics.median(r[key][1] for r in rows))
        else:
            out[key] = statistics.median(r[key] for r in rows)
    return out


def _read(folder: Path, prefix: str, n: int) -> list[dict[str, Any]]:
    recs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob(f"{prefix}-*.json"))]
    if len(recs) != n:
        raise RuntimeError(f"{folder}: {len(recs)} of {n} {prefix} ranks wrote their figures")
    return recs


def _run_mpi(n: int, argv: list[str], timeout: float) -> float:
    from aiopdbp.launch.launcher import launch

    t = time.perf_counter()
    rc = launch(n, [*argv, "--launched", repr(time.time())], timeout=timeout, extra_env=BENCH_ENV)
    wall = time.perf_counter() - t
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} on {n} ranks exited {rc}")
    return wall


def _run_cluster(n: int, out: Path, timeout: float) -> dict[str, Any]:
    file = out / f"cluster-{n}.json"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aiopdbp.bench.scale_job", "cluster", "--nodes", str(n),
                    "--out", str(file)], check=True, timeout=timeout)
    rec: dict[str, Any] = json.loads(file.read_text(encoding="utf-8"))
    rec["wall_s"] = time.perf_counter() - t
    return rec


def _fmt_pair(v: tuple[float, float], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(v[0] * scale)}/{fmt.format(v[1] * scale)}"


def _mpi_table(rows: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    say(f"{'pattern':9} {'N':>4} {'impl':8} {'open s r0/max':>14} {'RSS MiB r0/max':>15} "
        f"{'wall s':>7} {'reg msgs r0/max':>15} {'rtt cold/warm[/idle] ms':>23}")
    for r in rows:
        for impl in ("aiopdbp", "raw"):
            x = r[impl]
            reg = _fmt_pair(x["registration_msgs"], fmt="{:.0f}") if "registration_msgs" in x else "-"
            rtt = (f"{x['first_rtt_s'] * 1e3:.2f}/{x['warm_rtt_s'] * 1e3:.2f}"
                   if "first_rtt_s" in x else "-")
            if "idle_rtt_s" in x:
                rtt += (f"/{x['idle_rtt_s'] * 1e3:.2f} (cold {x['first_rtt_s'] / x['warm_rtt_s']:.1f}x warm, "
                        f"{x['first_rtt_s'] / x['idle_rtt_s']:.1f}x idle)")
            say(f"{r['pattern']:9} {r['n']:>4} {impl:8} {_fmt_pair(x['open_s']):>14} "
                f"{_fmt_pair(x['rss_peak_kib'], 1 / MIB, '{:.1f}'):>15} {x['wall_s']:>7.2f} "
                f"{reg:>15} {rtt:>23}")


def phase_rows(recs: Sequence[dict[str, Any]]) -> list[tuple[str, float, float, float, float]]:
    """Per phase of a job's ranks: (phase, rank 0's end, the latest other
    rank's end, rank 0's CPU in it, the most CPU another rank spent in it);
    ends in seconds since the launch, CPU in seconds."""
    if not recs or "phases" not in recs[0]:
        return []
    rows = []
    order = list(recs[0]["phases"])
    for i, name in enumerate(order):
        ends, cpus = {}, {}
        for r in recs:
            ph = r["phases"]
            ends[r["rank"]] = ph[name][0]
            cpus[r["rank"]] = ph[name][1] - (ph[order[i - 1]][1] if i else 0.0)
        others = [k for k in ends if k != 0] or [0]
        rows.append((name, ends.get(0, 0.0), max(ends[k] for k in others),
                     cpus.get(0, 0.0), max(cpus[k] for k in others)))
    return rows


def _phase_table(rows: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    say("phases (first run of each job): end s since launch r0/max, CPU s in the phase r0/max")
    for r in rows:
        ranks = r["ranks"] if isinstance(r["ranks"], dict) else r["ranks"][0]
        for impl in ("aiopdbp", "raw"):
            cells = [f"{name} {e0:.2f}/{em:.2f} cpu {c0:.2f}/{cm:.2f}"
                     for name, e0, em, c0, cm in phase_rows(ranks[impl])]
            wall = r["repeats"][0][impl]["wall_s"] if "repeats" in r else r[impl]["wall_s"]
            say(f"  {r['pattern']} N={r['n']} {impl}: " + "; ".join(cells) + f"; job end {wall:.2f}")


def _mpi_slopes(rows: list[dict[str, Any]], say: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pattern in sorted({r["pattern"] for r in rows}):
        rs = [r for r in rows if r["pattern"] == pattern]
        peers = [float(r["n"] - 1) for r in rs]
        s: dict[str, float] = {}
        for impl in ("aiopdbp", "raw"):
            for which, idx in (("r0", 0), ("max", 1)):
                s[f"{impl}_rss_mib_{which}"] = slope(peers, [r[impl]["rss_peak_kib"][idx] / MIB for r in rs])
                s[f"{impl}_open_s_{which}"] = slope(peers, [r[impl]["open_s"][idx] for r in rs])
            s[f"{impl}_wall_s"] = slope(peers, [r[impl]["wall_s"] for r in rs])
        s["reg_msgs_r0"] = slope(peers, [r["aiopdbp"]["registration_msgs"][0] for r in rs])
        s["reg_msgs_max"] = slope(peers, [r["aiopdbp"]["registration_msgs"][1] for r in rs])
        for which in ("r0", "max"):
            s[f"rss_excess_mib_{which}"] = s[f"aiopdbp_rss_mib_{which}"] - s[f"raw_rss_mib_{which}"]
        say(f"slopes per peer, {pattern}, N={','.join(str(r['n']) for r in rs)}: "
            f"peak RSS aiopdbp {s['aiopdbp_rss_mib_r0']:.3f}/{s['aiopdbp_rss_mib_max']:.3f} MiB "
            f"(r0/max), raw {s['raw_rss_mib_r0']:.3f}/{s['raw_rss_mib_max']:.3f}, excess "
            f"{s['rss_excess_mib_r0']:.3f}/{s['rss_excess_mib_max']:.3f}; open aiopdbp "
            f"{s['aiopdbp_open_s_r0'] * 1e3:.1f}/{s['aiopdbp_open_s_max'] * 1e3:.1f} ms, raw "
            f"{s['raw_open_s_r0'] * 1e3:.1f}/{s['raw_open_s_max'] * 1e3:.1f} ms; wall aiopdbp "
            f"{s['aiopdbp_wall_s'] * 1e3:.0f} ms, raw {s['raw_wall_s'] * 1e3:.0f} ms; "
            f"registration msgs r0/max {s['reg_msgs_r0']:.2f}/{s['reg_msgs_max']:.2f}")
        out[pattern] = s
    return out


def _cluster_table(recs: list[dict[str, Any]], say: Callable[[str], None]) -> dict[str, float]:
    say(f"{'nodes':>6} {'open s':>8} {'register s':>10} {'ring s':>8} {'close s':>8} "
        f"{'wall s':>8} {'peak MiB':>9} {'reg msgs/GP':>11} {'at master':>9}")
    for r in recs:
        say(f"{r['size']:>6} {r['open_s']:>8.3f} {r['register_s']:>10.3f} {r['ring_s']:>8.3f} "
            f"{r['close_s']:>8.3f} {r['wall_s']:>8.2f} {r['rss_peak_kib'] / MIB:>9.1f} "
            f"{r['registration_msgs']:>11.1f} {r['master_registration_msgs']:>9.1f}")
    xs = [float(r["size"]) for r in recs]
    s = {"peak_mib_per_node": slope(xs, [r["rss_peak_kib"] / MIB for r in recs]),
         "wall_s_per_node": slope(xs, [r["wall_s"] for r in recs])}
    if len(recs) > 1:
        say(f"slopes per node: peak {s['peak_mib_per_node'] * 1024:.1f} KiB, wall "
            f"{s['wall_s_per_node'] * 1e3:.2f} ms (a straight line: quadratic costs show as "
            "rising per-size ratios)")
    return s


def main(argv: Sequence[str] | None = None) -> int:
    """``aiopdbp bench scale [options]``; returns the exit code."""
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    patterns = [p for p in ns.patterns.split(",") if p]
    if any(p not in ("alltoall", "ring") for p in patterns):
        print(f"aiopdbp bench scale: --patterns: choose from alltoall, ring (got {ns.patterns!r})",
              file=sys.stderr)
        return 2
    clusters = [int(x) for x in ns.cluster.split(",") if x.strip()]
    out = Path(ns.out or time.strftime("aiopdbp-bench-scale-%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        print(text, flush=True)

    say(f"aiopdbp bench scale: {' '.join(['aiopdbp', 'bench', 'scale', *(argv or sys.argv[1:])])}")
    say(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start")
    doc: dict[str, Any] = {"mpi": [], "cluster": [], "slopes": {}}
    raw_prog = str(Path(__file__).with_name("scale_raw.py"))
    compiled, failed = compile_sources(Path(__file__).resolve().parent.parent)
    say(f"aiopdbp's bytecode: {compiled} modules compiled now, {failed} could not be"
        + (" (those compile in every rank at every start)" if failed else ""))
    if not ns.no_mpi:
        for pattern in patterns:
            for n in ns.ranks:
                runs: list[dict[str, Any]] = []
                for k in range(max(1, ns.repeat)):
                    job = out / (f"{pattern}-n{n}" if ns.repeat <= 1 else f"{pattern}-n{n}-r{k}")
                    job.mkdir(exist_ok=True)
                    common = ["--pattern", pattern, "--units", str(ns.units), "--unit", str(ns.unit),
                              "--out", str(job)]
                    idle = ["--idle", str(ns.idle)] if ns.idle > 0 else []
                    w_a = _run_mpi(n, ["-m", "aiopdbp.bench.scale_job", "rank", *common, *idle], ns.timeout)
                    w_r = _run_mpi(n, [raw_prog, *common], ns.timeout)
                    ra, rr = _read(job, "aiopdbp", n), _read(job, "raw", n)
                    runs.append({"aiopdbp": summarise_job(ra, w_a), "raw": summarise_job(rr, w_r),
                                 "ranks": {"aiopdbp": ra, "raw": rr}})
                    print(f"  {pattern} N={n}: aiopdbp {w_a:.2f} s, raw {w_r:.2f} s", flush=True)
                row: dict[str, Any] = {"pattern": pattern, "n": n}
                for impl in ("aiopdbp", "raw"):
                    row[impl] = median_summary([r[impl] for r in runs])
                row["ranks"] = runs[0]["ranks"] if len(runs) == 1 else [r["ranks"] for r in runs]
                if len(runs) > 1:
                    row["repeats"] = [{"aiopdbp": r["aiopdbp"], "raw": r["raw"]} for r in runs]
                doc["mpi"].append(row)
        _mpi_table(doc["mpi"], say)
        _phase_table(doc["mpi"], say)
        doc["slopes"]["mpi"] = _mpi_slopes(doc["mpi"], say)
    for n in clusters:
        doc["cluster"].append(_run_cluster(n, out, ns.timeout))
    if clusters:
        doc["slopes"]["cluster"] = _cluster_table(doc["cluster"], say)
    say(f"load {os.getloadavg()[0]:.2f} at the end")
    (out / "scale.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    (out / "scale.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"aiopdbp bench scale: results in {out}")
    return 0
