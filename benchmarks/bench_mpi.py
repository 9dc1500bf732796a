"""aiopdbp over MPI next to raw mpi4py, measured in the same mpiexec run.

Two ranks; GP ``a`` lives on rank 0, GP ``b`` on rank 1.  Each repetition runs
the raw mpi4py test (benchmarks/mpi_baseline.py, OSU-style) and then the same
pattern through aiopdbp, so both see the same machine state; we report the
median of each and the ratio of the medians.

* latency   -- 8-byte ping-pong, one-way microseconds (osu_latency vs
  ``gp.send``/``gp.recv`` GP to GP);
* msg rate  -- 64-byte messages per second (windowed Isend/Irecv vs a GP
  sending N messages to a GP on the other rank, one ack at the end);
* bandwidth -- 4 MiB messages (windowed Isend/Irecv, a fresh buffer per
  message) vs a 256 MiB stream in 4 MiB segments, the receiver iterating
  the segments without copying them.

Run::

    mpiexec -n 2 .venv/bin/python benchmarks/bench_mpi.py --repeat 5
    UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1 mpiexec -n 2 .venv/bin/python benchmarks/bench_mpi.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import aiopdbp  # noqa: E402
from _common import machine_info, print_table, write_json  # noqa: E402

PEER = {0: "b", 1: "a"}


async def _sync(gp: aiopdbp.GP) -> None:
    """A round trip between the two GPs (both ranks call it)."""
    other = PEER[gp.node.rank]
    await gp.send(other, b"sync", com=99, timeout=60)
    msg = await gp.recv(timeout=60)
    assert isinstance(msg, aiopdbp.Message) and msg.com == 99, msg
    await gp.node.flush(timeout=60)  # our own "sync" has really left


async def _share(gp: aiopdbp.GP, comm: Any, value: float) -> float:
    """Rank 0's figure on every rank.  Flush first: a blocking MPI collective
    stops this rank's event loop, and a reply still queued here would never
    reach the peer."""
    await gp.node.flush(timeout=60)
    return float(comm.bcast(value, root=0))


async def latency(gp: aiopdbp.GP, iters: int) -> float:
    await _sync(gp)
    data = b"12345678"
    if gp.node.rank == 0:
        t0 = time.perf_counter()
        for _ in range(iters):
            await gp.send("b", data)
            await gp.recv()
        dt = time.perf_counter() - t0
    else:
        for _ in range(iters):
            await gp.recv()
            await gp.send("a", data)
        dt = 0.0
    return dt / iters / 2 * 1e6


async def msg_rate(gp: aiopdbp.GP, n: int) -> float:
    await _sync(gp)
    data = b"x" * 64
    if gp.node.rank == 0:
        t0 = time.perf_counter()
        send = gp.send
        for _ in range(n):
            await send("b", data)
        await gp.recv()  # b's ack: everything arrived
        return n / (time.perf_counter() - t0)
    recv = gp.recv
    for _ in range(n):
        await recv()
    await gp.send("a", b"ack")
    return 0.0


async def bandwidth(gp: aiopdbp.GP, total: int, segment: int, src: np.ndarray[Any, Any]) -> float:
    await _sync(gp)
    if gp.node.rank == 0:
        t0 = time.perf_counter()
        await gp.send_stream("b", src, segment_size=segment)
        return total / (time.perf_counter() - t0)
    stream = await gp.recv()
    assert isinstance(stream, aiopdbp.IncomingStream)
    n = 0
    async for seg in stream:
        n += seg.nbytes
    assert n == total
    return 0.0


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    from mpi4py import MPI

    from mpi_baseline import raw_bandwidth, raw_latency, raw_msg_rate

    comm = MPI.COMM_WORLD
    rows: list[dict[str, Any]] = []
    async with aiopdbp.open_node() as node:
        assert node.size == 2, "run with mpiexec -n 2"
        name = "a" if node.rank == 0 else "b"
        async with node.process(name) as gp:
            await node.lookup(PEER[node.rank], timeout=60)
            total = args.stream_mib << 20
            src = np.ones(total, dtype=np.uint8)
            results: dict[str, tuple[list[float], list[float]]] = {
                "latency 8 B (us, one way)": ([], []),
                "msg rate 64 B (k/s)": ([], []),
                "bandwidth 4 MiB (GB/s)": ([], []),
            }
            for _rep in range(args.repeat):
                if args.verbose: print(node.rank, "rep", _rep, flush=True)
                # Both engines live and every name known before blocking raw
                # MPI calls take the event loop away for a while.
                await _sync(gp)
                r = results["latency 8 B (us, one way)"]
                r[0].append(raw_latency(comm, 8, iters=args.lat_iters, warmup=200))
                if args.verbose: print(node.rank, "raw lat done", flush=True)
                r[1].append(await _share(gp, comm, await latency(gp, args.lat_iters)))
                if args.verbose: print(node.rank, "lat done", flush=True)
                r = results["msg rate 64 B (k/s)"]
                await _sync(gp)
                r[0].append(raw_msg_rate(comm, 64) / 1e3)
                r[1].append(await _share(gp, comm, await msg_rate(gp, args.messages)) / 1e3)
                if args.verbose: print(node.rank, "rate done", flush=True)
                r = results["bandwidth 4 MiB (GB/s)"]
                await _sync(gp)
                r[0].append(raw_bandwidth(comm, 4 << 20, window=16, iters=8, warmup=1,
                                          reuse_buffer=False) / 1e9)
                r[1].append(await _share(gp, comm, await bandwidth(gp, total, 4 << 20, src)) / 1e9)
            for label, (raw, ours) in results.items():
                mr, mo = statistics.median(raw), statistics.median(ours)
                ratio = mr / mo if label.startswith("latency") else mo / mr
                rows.append({"test": label, "raw mpi4py": round(mr, 2), "aiopdbp": round(mo, 2),
                             "ratio (aiopdbp/raw, latency raw/aiopdbp)": round(ratio, 2),
                             "aiopdbp runs": [round(x, 1) for x in ours]})
            if node.rank == 0 and args.verbose:
                print(node._remote.stats() if node._remote else {}, flush=True)
    return rows


def cli() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--lat-iters", type=int, default=2000)
    p.add_argument("--stream-mib", type=int, default=256)
    p.add_argument("--json", default="")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    rows = aiopdbp.run(main(args))
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 0:
        info = machine_info()
        path = "tcp" if os.environ.get("MPIR_CVAR_NOLOCAL") == "1" else "shm"
        print(f"# aiopdbp vs raw mpi4py, 2 ranks, {path} path, medians of {args.repeat}")
        print("# " + ", ".join(f"{k}={v}" for k, v in info.items() if k in ("host", "cpu", "cores", "python", "mpi_library", "event_loop")))
        print_table(rows)
        if args.json:
            write_json(args.json, {"machine": info, "path": path, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(cli())
