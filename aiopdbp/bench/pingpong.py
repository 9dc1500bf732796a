"""``aiopdbp bench pingpong``: request/response between two ranks, side by side.

The methodology of UCXX's ``send_recv`` benchmark: per size, warm-up round
trips, then one timestamp pair per round trip on rank 0; latency = median
RTT / 2, bandwidth = 2 x size / median RTT, p99 from the same samples.  Rank
0 sends one of two distinct payloads (alternating, so a stale buffer shows),
rank 1 sends back what it received, and rank 0 compares the echo with what it
sent after every round trip (outside the two timestamps, the same for every
implementation).  Implementations, interleaved in the same job (rotated
order per repeat), each on its own communicator:

* ``aiopdbp``: ``await gp.send(peer, a)`` / ``await gp.recv()``, ``a`` a
  writable numpy array (what users send: ``gp.send`` copies it below
  ``RemoteConfig.large``, and above sends it from its own memory and returns
  once MPI is done with it -- ``MPI_Send`` ownership);
  ``aiopdbp-ro``: the same with read-only arrays over ``bytes`` (shared,
  no copy).  Rank 1 echoes ``msg.data``.
* ``mpi4py``: blocking ``Send``/``Recv`` into a reused numpy buffer.
* ``floor``: the issue's hand-written asyncio floor -- one coroutine per
  rank, ``Isend``/``Irecv`` of reused numpy buffers, ``while not
  req.Test(): await asyncio.sleep(0)`` -- under uvloop.
* ``floor-lib``: :class:`aiopdbp.bench.floor.Floor` (``Improbe``/``Mrecv``
  of unknown size by a poller task that wakes a Future): the least a
  library that routes by name pays.

CPU per round trip is the two ranks' ``process_time`` over the measured
round trips.  ``--hops [SIZE]`` adds a diagnostic run of ``aiopdbp-ro`` at 8 B (or SIZE)
(never timed with the figures) in :mod:`aiopdbp.bench.hops`.  ``--quick``
checks the echo of every implementation at three sizes and times nothing.
Output: a table on stdout and ``pingpong.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from aiopdbp.bench.aio import AioSide, gp_name, loop_factory
from aiopdbp.bench.floor import Floor
from aiopdbp.bench.plan import BENCH_ENV, parse_sizes
from aiopdbp.env import in_mpi_job
from aiopdbp.hosts.remote import RemoteConfig

__all__ = ["IMPLS", "main", "summarize_runs"]

IMPLS = ("aiopdbp", "aiopdbp-ro", "mpi4py", "floor", "floor-lib")
PAYLOAD = {
    "aiopdbp": "writable numpy uint8 (copied < 32 KiB, owned above)",
    "aiopdbp-ro": "read-only numpy uint8 over bytes (shared)",
    "mpi4py": "writable numpy uint8, reused recv buffer",
    "floor": "writable numpy uint8, reused recv buffer",
    "floor-lib": "writable numpy uint8 out, fresh buffer in (Mrecv)",
}
DEFAULT_SIZES = "8,64,1K,8K,64K,1M,16M,64M"


def _label(impl: str, payload: str) -> str:
    """What ``impl`` sends under ``--payload``."""
    if payload == "torch" and impl.startswith("aiopdbp"):
        return "CPU torch uint8 tensor (writable; copied < 32 KiB, owned above)"
    return PAYLOAD[impl]
QUICK_SIZES = "8,64K,1M"
_TAG = 5


def iters_for(size: int, most: int) -> int:
    """Round trips per run: about 256 MiB each way, between 20 and ``most``."""
    return max(20, min(most, (256 << 20) // max(1, size)))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aiopdbp bench pingpong", allow_abbrev=False,
        description="Request/response between 2 ranks (UCXX send_recv methodology): aiopdbp "
        "gp.send/gp.recv vs mpi4py Send/Recv, the asyncio floor and floor-lib, in one job.")
    a = p.add_argument
    a("-n", "--ranks", type=int, default=2, help="ranks to launch (2; others idle)")
    a("--tcp", action="store_true", help="force MPICH's TCP path between local ranks")
    a("--sizes", default=None, help=f"payload sizes (default {DEFAULT_SIZES})")
    a("--impls", default=",".join(IMPLS), help=f"comma list of {', '.join(IMPLS)}")
    a("--iters", type=int, default=2000, help="most round trips per run (fewer for large sizes)")
    a("--repeat", type=int, default=3, help="runs per size and impl; figures are their medians")
    a("--quick", action="store_true", help="check the echo of every impl at 3 sizes; time nothing")
    a("--hops", nargs="?", const="8", default=None, metavar="SIZE",
      help="add the per-hop table of one size (8 B unless given; a diagnostic run of aiopdbp-ro)")
    a("--payload", choices=("numpy", "torch"), default="numpy",
      help="what the aiopdbp rows send: numpy arrays, or CPU torch tensors over the same bytes "
           "(torch has no read-only tensor: aiopdbp-ro then sends writable tensors too)")
    a("--timeout", type=float, default=120.0, help="seconds any one run may take")
    a("--out", default="", help="folder for pingpong.json (default: none written)")
    a("--no-uvloop", dest="uvloop", action="store_false", help="asyncio's default loop")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``aiopdbp bench pingpong [options]``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns = parser.parse_args(args)
    try:
        ns.sizes = parse_sizes(ns.sizes or (QUICK_SIZES if ns.quick else DEFAULT_SIZES))
        if ns.hops is not None:
            (ns.hops,) = parse_sizes(ns.hops)
            if ns.hops >= RemoteConfig.large:
                raise ValueError(f"--hops {ns.hops}: the per-hop table follows a message below "
                                 f"RemoteConfig.large ({RemoteConfig.large} B); larger ones travel "
                                 "as a header and one bulk MPI message")
    except ValueError as exc:
        parser.error(str(exc))
    ns.impls = tuple(x.strip() for x in ns.impls.split(",") if x.strip())
    bad = [x for x in ns.impls if x not in IMPLS]
    if bad or not ns.impls:
        parser.error(f"--impls: choose from {', '.join(IMPLS)} (got {bad or 'nothing'})")
    if ns.ranks < 2 or ns.iters < 1 or ns.repeat < 1:
        parser.error("-n must be >= 2, --iters and --repeat >= 1")
    if not in_mpi_job():
        from aiopdbp.launch.launcher import launch, reporting_failures

        child = ["-m", "aiopdbp.bench", "pingpong", *_child_argv(args)]
        return reporting_failures("aiopdbp bench pingpong",
                                  lambda: launch(ns.ranks, child, tcp=ns.tcp, extra_env=BENCH_ENV))
    return _run(ns, args)


def _child_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
        elif tok in ("-n", "--ranks"):
            skip = True
        elif not (tok.startswith("--ranks=") or tok == "--tcp" or (tok.startswith("-n") and tok != "-n")):
            out.append(tok)
    return out


# ====================================================================== payloads
class Payloads:
    """Two distinct seeded payloads of one size, in every form the impls send."""

    def __init__(self, size: int, payload: str = "numpy") -> None:
        rng = np.random.default_rng(291 + size)
        self.size = size
        self.raw = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(2)]
        self.writable = [np.frombuffer(bytearray(b), dtype=np.uint8) for b in self.raw]
        self.readonly = [np.frombuffer(b, dtype=np.uint8) for b in self.raw]
        #: what the aiopdbp rows send (the others send ``writable``)
        self.aio_writable: list[Any] = list(self.writable)
        self.aio_readonly: list[Any] = list(self.readonly)
        if payload == "torch":
            import torch
            self.aio_writable = self.aio_readonly = [torch.from_numpy(a) for a in self.writable]
        if size < 4096:
            exp = self.raw
            self.check: Callable[[Any, int], bool] = lambda got, k: bytes(_np(got)) == exp[k]
        else:
            arrs = self.readonly
            self.check = lambda got, k: bool(np.array_equal(np.frombuffer(_np(got), dtype=np.uint8), arrs[k]))


def _np(got: Any) -> Any:
    """A received tensor as numpy (no copy), for the echo check."""
    return got.numpy() if type(got).__module__.startswith("torch") else got


class Result:
    """One rank's part of one run."""

    def __init__(self) -> None:
        self.rtt_ns: list[int] = []
        self.cpu_s = 0.0
        self.errors: list[str] = []


# ======================================================================= drivers
def _mpi4py(comm: Any, pl: Payloads, iters: int, warm: int) -> Result:
    from mpi4py import MPI

    r, rank = Result(), comm.Get_rank()
    byte, ns = MPI.BYTE, time.perf_counter_ns
    rb = np.zeros(pl.size, dtype=np.uint8)
    send, recv, check, rtt = comm.Send, comm.Recv, pl.check, r.rtt_ns
    specs = [[a, byte] for a in pl.writable]
    rspec = [rb, byte]
    c0 = 0.0
    for i in range(warm + iters):
        if i == warm:
            c0 = time.process_time()
        if rank == 0:
            k = i & 1
            t0 = ns()
            send(specs[k], 1, _TAG)
            recv(rspec, 1, _TAG)
            t1 = ns()
            if i >= warm:
                rtt.append(t1 - t0)
            if not check(rb, k):
                r.errors.append(f"mpi4py: round trip {i}: wrong echo")
        else:
            recv(rspec, 0, _TAG)
            send(rspec, 0, _TAG)
    r.cpu_s = time.process_time() - c0
    return r


async def _floor(comm: Any, pl: Payloads, iters: int, warm: int) -> Result:
    """The issue's floor, verbatim in spirit: Test + sleep(0) per request."""
    from mpi4py import MPI

    async def wait(req: Any) -> None:
        while not req.Test():
            await asyncio.sleep(0)

    r, rank = Result(), comm.Get_rank()
    byte, ns = MPI.BYTE, time.perf_counter_ns
    rb = np.zeros(pl.size, dtype=np.uint8)
    check, rtt = pl.check, r.rtt_ns
    specs = [[a, byte] for a in pl.writable]
    rspec = [rb, byte]
    c0 = 0.0
    for i in range(warm + iters):
        if i == warm:
            c0 = time.process_time()
        if rank == 0:
            k = i & 1
            t0 = ns()
            rq = comm.Irecv(rspec, 1, _TAG)
            await wait(comm.Isend(specs[k], 1, _TAG))
            await wait(rq)
            t1 = ns()
            if i >= warm:
                rtt.append(t1 - t0)
            if not check(rb, k):
                r.errors.append(f"floor: round trip {i}: wrong echo")
        else:
            await wait(comm.Irecv(rspec, 0, _TAG))
            await wait(comm.Isend(rspec, 0, _TAG))
    r.cpu_s = time.process_time() - c0
    return r


async def _floor_lib(comm: Any, pl: Payloads, iters: int, warm: int) -> Result:
    r, rank = Result(), comm.Get_rank()
    fl = Floor(comm, coalesce=False)
    await fl.start()
    ns, check, rtt = time.perf_counter_ns, pl.check, r.rtt_ns
    c0 = 0.0
    try:
        for i in range(warm + iters):
            if i == warm:
                c0 = time.process_time()
            if rank == 0:
                k = i & 1
                t0 = ns()
                await fl.send(1, _TAG, pl.writable[k])
                _, _, data = await fl.recv()
                t1 = ns()
                if i >= warm:
                    rtt.append(t1 - t0)
                if not check(data, k):
                    r.errors.append(f"floor-lib: round trip {i}: wrong echo")
            else:
                _, _, data = await fl.recv()
                await fl.send(0, _TAG, data)
        r.cpu_s = time.process_time() - c0
    finally:
        await fl.aclose()
    return r


async def aio_pingpong(side: AioSide, pl: Payloads, iters: int, warm: int, readonly: bool) -> Result:
    """Ping-pong between GP 0 of ranks 0 and 1 with plain ``gp.send``/``gp.recv``."""
    r, rank = Result(), side.rank
    gp = side.gps[0]
    peer = gp_name(1 - rank, 0)
    send, recv = gp.send, gp.recv
    payload = pl.aio_readonly if readonly else pl.aio_writable
    ns, check, rtt = time.perf_counter_ns, pl.check, r.rtt_ns
    name = "aiopdbp-ro" if readonly else "aiopdbp"
    c0 = 0.0
    async with asyncio.timeout(side.timeout):  # the bounded path: no per-call timer
        for i in range(warm + iters):
            if i == warm:
                c0 = time.process_time()
            if rank == 0:
                k = i & 1
                t0 = ns()
                await send(peer, payload[k])
                msg = await recv()
                t1 = ns()
                if i >= warm:
                    rtt.append(t1 - t0)
                if not check(msg.data, k):  # type: ignore[union-attr]
                    r.errors.append(f"{name}: round trip {i}: wrong echo")
            else:
                msg = await recv()
                await send(peer, msg.data)  # type: ignore[union-attr]
    r.cpu_s = time.process_time() - c0
    return r


# ========================================================================= the job
class Job:
    """This rank's part of the job: communicators, the node, the floors' loop."""

    def __init__(self, ns: argparse.Namespace) -> None:
        from aiopdbp.transport.mpi import load_mpi

        MPI = load_mpi()
        world = MPI.COMM_WORLD
        self.ns = ns
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.ctl = world.Dup()
        self.comms = {"mpi4py": world.Dup(), "floor": world.Dup(), "floor-lib": world.Dup()}
        # Ranks above 1 take part in the collectives only.
        self.pair = self.ctl.Split(0 if self.rank < 2 else 1, self.rank)
        self.pair_comms = {k: c.Split(0 if self.rank < 2 else 1, self.rank) for k, c in self.comms.items()}
        self.side = AioSide(self.rank, self.size, 1, ns.timeout, ns.uvloop)
        self.loop = asyncio.Runner(loop_factory=loop_factory(ns.uvloop))

    def run_one(self, impl: str, pl: Payloads, iters: int, warm: int) -> list[Result]:
        gc.collect()
        self.ctl.Barrier()
        if self.rank > 1:
            res = Result()
            if impl.startswith("aiopdbp"):
                self.side.measure(self._idle)
        elif impl == "mpi4py":
            res = _mpi4py(self.pair_comms[impl], pl, iters, warm)
        elif impl == "floor":
            res = self.loop.run(_floor(self.pair_comms[impl], pl, iters, warm))
        elif impl == "floor-lib":
            res = self.loop.run(_floor_lib(self.pair_comms[impl], pl, iters, warm))
        else:
            res = cast(Result, self.side.measure(
                lambda: aio_pingpong(self.side, pl, iters, warm, impl == "aiopdbp-ro")))  # type: ignore[arg-type, return-value]
        out: list[Result] = self.ctl.allgather(res)
        return out

    @staticmethod
    async def _idle() -> Any:
        return Result()

    def close(self) -> None:
        try:
            self.side.close()
        finally:
            self.loop.close()
            for c in (*self.pair_comms.values(), *self.comms.values(), self.pair, self.ctl):
                c.Free()


def summarize_runs(size: int, runs: Sequence[Sequence[Result]]) -> dict[str, Any]:
    """Figures of one (size, impl) from its repeats: medians over runs of each run's statistic."""
    p50 = [float(np.median(rs[0].rtt_ns)) for rs in runs]
    p99 = [float(np.percentile(rs[0].rtt_ns, 99)) for rs in runs]
    cpu = [sum(x.cpu_s for x in rs[:2]) / len(rs[0].rtt_ns) for rs in runs]
    rtt50 = float(np.median(p50))
    return {
        "size": size, "repeats": len(runs), "round_trips": len(runs[0][0].rtt_ns),
        "rtt_p50_us": rtt50 / 1e3, "rtt_p99_us": float(np.median(p99)) / 1e3,
        "latency_us": rtt50 / 2e3, "latency_p99_us": float(np.median(p99)) / 2e3,
        "bandwidth_GBps": 2 * size / rtt50, "cpu_us_per_rt": float(np.median(cpu)) * 1e6,
        "latency_runs_us": [x / 2e3 for x in p50],
    }


def _run(ns: argparse.Namespace, argv: Sequence[str]) -> int:
    job: Job | None = None
    try:
        job = Job(ns)
        job.side.open()
        rows, failed = _plan(job, ns)
        hops = None
        if ns.hops and not failed:
            from aiopdbp.bench.hops import hop_table

            hops = hop_table(job.side, job.ctl, job.rank, Payloads(ns.hops, ns.payload), ns.iters)
    except BaseException:
        from aiopdbp.bench.runner import abort_job

        abort_job()
        raise
    finally:
        if job is not None:
            job.close()
    if job.rank != 0:
        return 1 if failed else 0
    if failed:
        print("aiopdbp bench pingpong: ECHO CHECK FAILED: " + "; ".join(failed[:5]), file=sys.stderr)
        return 1
    if ns.quick:
        print(f"aiopdbp bench pingpong --quick: echo checked for {', '.join(ns.impls)} at "
              f"{', '.join(map(str, ns.sizes))} B (nothing timed)")
        return 0
    doc = {"command": "aiopdbp bench pingpong " + " ".join(argv), "rows": rows, "hops": hops,
           "peak_rss_MiB_rank0": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "payloads": {k: _label(k, ns.payload) for k in ns.impls}, "payload": ns.payload}
    print(format_table(rows, ns.impls))
    if hops:
        from aiopdbp.bench.hops import format_hops

        print(format_hops(hops))
    print(f"peak RSS rank 0: {doc['peak_rss_MiB_rank0']:.0f} MiB")
    if ns.out:
        out = Path(ns.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "pingpong.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


def _plan(job: Job, ns: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    impls = list(ns.impls)
    for size in ns.sizes:
        pl = Payloads(size, ns.payload)
        iters = 5 if ns.quick else iters_for(size, ns.iters)
        warm = 2 if ns.quick else max(2, iters // 10)
        repeat = 1 if ns.quick else ns.repeat
        per: dict[str, list[list[Result]]] = {k: [] for k in impls}
        for rep in range(repeat):
            k = rep % len(impls)
            for impl in impls[k:] + impls[:k]:
                rs = job.run_one(impl, pl, iters, warm)
                errs = [e for x in rs for e in x.errors]
                if errs:
                    failed += errs
                    return rows, failed
                per[impl].append(rs)
        if job.rank == 0 and not ns.quick:
            for impl in impls:
                rows.append({"impl": impl, "payload": _label(impl, ns.payload), **summarize_runs(size, per[impl])})
            print(f"  {size} B done", file=sys.stderr, flush=True)
    return rows, failed


def format_table(rows: Sequence[dict[str, Any]], impls: Sequence[str]) -> str:
    """Markdown: per size and impl, latency p50/p99, bandwidth, CPU, ratio to the floor / mpi4py."""
    lines = ["| size | impl | payload | latency p50 (us) | p99 (us) | GB/s | CPU us/RT | "
             "x floor | x mpi4py bw |", "|---|---|---|---|---|---|---|---|---|"]
    by = {(r["size"], r["impl"]): r for r in rows}
    for r in rows:
        fl = by.get((r["size"], "floor"))
        mp = by.get((r["size"], "mpi4py"))
        xf = f"{r['latency_us'] / fl['latency_us']:.2f}" if fl else "-"
        xb = f"{r['bandwidth_GBps'] / mp['bandwidth_GBps']:.2f}" if mp else "-"
        lines.append(f"| {_fmt_size(r['size'])} | {r['impl']} | {r['payload']} | {r['latency_us']:.2f} | "
                     f"{r['latency_p99_us']:.2f} | {r['bandwidth_GBps']:.3f} | {r['cpu_us_per_rt']:.1f} | "
                     f"{xf} | {xb} |")
    return "\n".join(lines)


def _fmt_size(n: int) -> str:
    for unit, s in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << s and n % (1 << s) == 0:
            return f"{n >> s} {unit}"
    return f"{n} B"
