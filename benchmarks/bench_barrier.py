"""Barrier latency: counter, tree and dissemination, against MPI_Barrier.

Not a test.  On every rank, ``G`` GPs (G = 2, 4, 8 by default) join one
barrier group of ``G x ranks`` members (member i lives on rank i % ranks;
member 0 is the counter's master and the tree's root).  For each algorithm
and G, one *sample* is the time of ``--rounds`` back-to-back ``wait()``
calls divided by the number of rounds, taken as the slowest member's
(reduced with ``allreduce(.., "max")`` outside the timed part); the figure
is the median of ``--repeat`` samples (min and max shown), the algorithms
interleaved inside every repeat so machine noise hits them alike.  The
messages per round are measured too (summed over all members) and checked
against the formula.

``MPI.Barrier`` (``COMM_WORLD``, one call per rank: MPI has one process per
rank where aiopdbp has G GPs) is timed in the same run, same repeats; at one
rank without ``mpiexec`` it is MPI's singleton barrier.

    python benchmarks/bench_barrier.py                        # 1 rank, in-process
    mpiexec -n 2 .venv/bin/python benchmarks/bench_barrier.py
    mpiexec -n 4 .venv/bin/python benchmarks/bench_barrier.py --gps 2 4 8 --repeat 7
    python benchmarks/bench_barrier.py --json out.json        # also write the rows
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from typing import Any

try:
    from _common import machine_info, print_table, write_json
except ImportError:  # python -m benchmarks.bench_barrier
    from benchmarks._common import machine_info, print_table, write_json  # type: ignore[no-redef]

import aiopdbp
from aiopdbp.sync import Barrier, messages_for, steps_for

ALGS = ("counter", "tree", "dissemination")


async def _sample(bar: Barrier, ctl: Barrier, rounds: int) -> tuple[float, float]:
    """One member's part of one sample: (s per wait, slowest member; messages per round,
    all members).  The reductions run on a separate tree barrier ``ctl``, untimed."""
    sent0, r0 = bar.stats.sent, bar.stats.rounds
    await bar.wait()                          # line everybody up
    t0 = time.perf_counter()
    for _ in range(rounds):
        await bar.wait()
    dt = (time.perf_counter() - t0) / rounds
    sent, r = bar.stats.sent - sent0, bar.stats.rounds - r0
    worst = await ctl.allreduce(dt, "max")
    total = await ctl.allreduce(sent, "sum")
    return worst, total / r


def _mpi_barrier_us(rounds: int) -> float | None:
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    comm = MPI.COMM_WORLD
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(rounds):
        comm.Barrier()
    dt = MPI.Wtime() - t0
    return float(comm.allreduce(dt, op=MPI.MAX)) * 1e6 / rounds


async def bench(cfg: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if cfg.mpi:
        try:   # initialise MPI in the main thread (a singleton at one rank)
            from mpi4py import MPI  # noqa: F401
        except ImportError:
            cfg.mpi = False
    async with aiopdbp.open_node() as node, contextlib.AsyncExitStack() as stack:
        rank, size = node.rank, node.size
        mpi_samples: list[float] = []
        for g in cfg.gps:
            n = g * size
            names = [f"bench-{g}-{i}" for i in range(n)]
            gps = [await stack.enter_async_context(node.process(nm))
                   for i, nm in enumerate(names) if i % size == rank]
            bars = {alg: [Barrier(gp, f"{alg}-{g}", names, algorithm=alg, timeout=cfg.timeout)
                          for gp in gps] for alg in cfg.algs}
            ctls = [Barrier(gp, f"ctl-{g}", names, algorithm="tree", timeout=cfg.timeout)
                    for gp in gps]
            # members of one group close together (one after another, each would
            # linger for the LEAVE of the others)
            stack.push_async_callback(_close_all, [*ctls, *(b for v in bars.values() for b in v)])
            for alg in cfg.algs:
                await asyncio.gather(*(_warm(bar, cfg.warmup) for bar in bars[alg]))
            samples: dict[str, list[float]] = {alg: [] for alg in cfg.algs}
            msgs: dict[str, float] = {}
            mpi_g: list[float] = []
            for _ in range(cfg.repeat):
                for alg in cfg.algs:
                    res = await asyncio.gather(*(_sample(bar, ctl, cfg.rounds)
                                                 for bar, ctl in zip(bars[alg], ctls)))
                    samples[alg].append(res[0][0] * 1e6)
                    msgs[alg] = res[0][1]
                # in a thread: the event loop must keep running (it flushes aiopdbp's
                # outgoing blocks; blocking it in MPI_Barrier could starve a peer rank)
                mpi = await asyncio.to_thread(_mpi_barrier_us, cfg.rounds) if cfg.mpi else None
                if mpi is not None:
                    mpi_g.append(mpi)
            mpi_samples += mpi_g
            for alg in cfg.algs:
                s = samples[alg]
                rows.append({
                    "ranks": size, "gps/host": g, "members": n, "algorithm": alg,
                    "msgs/round": msgs[alg], "expected": messages_for(alg, n),
                    "steps": steps_for(alg, n),
                    "median_us": statistics.median(s), "min_us": min(s), "max_us": max(s),
                    "MPI.Barrier_us": statistics.median(mpi_g) if mpi_g else float("nan"),
                })
    return rows


async def _close_all(bars: list[Barrier]) -> None:
    await asyncio.gather(*(bar.aclose() for bar in bars))


async def _warm(bar: Barrier, rounds: int) -> None:
    for _ in range(rounds):
        await bar.wait()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gps", type=int, nargs="+", default=[2, 4, 8], help="GPs per host")
    ap.add_argument("--algs", nargs="+", default=list(ALGS), choices=ALGS)
    ap.add_argument("--rounds", type=int, default=200, help="barrier rounds per sample")
    ap.add_argument("--repeat", type=int, default=5, help="samples per figure (median)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--no-mpi", dest="mpi", action="store_false", help="skip MPI.Barrier")
    ap.add_argument("--json", help="also write the rows (and machine info) to this file")
    ap.add_argument("--no-uvloop", action="store_true")
    cfg = ap.parse_args(argv)
    rows = aiopdbp.run(bench(cfg), use_uvloop=not cfg.no_uvloop)
    if rows:
        info = machine_info()
        rank = 0
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            rank = mpi.COMM_WORLD.Get_rank()
        if rank == 0:
            print(f"# bench_barrier: {rows[0]['ranks']} rank(s), loop="
                  f"{'asyncio' if cfg.no_uvloop else 'uvloop'}, {cfg.rounds} rounds x "
                  f"{cfg.repeat} repeats, {info['cpu_model']} ({info['cpu_usable']} usable cores)")
            print_table(rows)
            bad = [r for r in rows if r["msgs/round"] != r["expected"]]
            if bad:
                print(f"# MESSAGE COUNT MISMATCH in {len(bad)} row(s)")
            if cfg.json:
                write_json(cfg.json, {"machine": info, "rows": rows, "argv": argv})
            return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
