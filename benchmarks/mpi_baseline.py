"""Raw mpi4py baseline that every aiopdbp benchmark measures side by side.

Plain mpi4py with numpy buffers (no aiopdbp import), modelled on the OSU
micro-benchmarks, so an aiopdbp number can be printed next to what MPI itself
gives *in the same mpiexec run* (same placement, same transport settings)::

    from mpi_baseline import raw_latency, raw_bandwidth   # run from benchmarks/
    lat_us = raw_latency(MPI.COMM_WORLD, nbytes=8)

Every function is collective over ``comm`` (all ranks must call it, ranks that
take no part just wait) and returns the same value on every rank.  Point-to-point
tests use ranks 0 and 1 (``raw_msg_rate`` uses all pairs ``i, i + size//2``).

Standalone (rank 0 prints medians of ``--repeat`` runs)::

    mpiexec -n 2 .venv/bin/python benchmarks/mpi_baseline.py --repeat 5
    UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1 mpiexec -n 2 .venv/bin/python benchmarks/mpi_baseline.py
    python3 tools/dev.py bench mpi_baseline --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # also works as ``python -m benchmarks.mpi_baseline``
    sys.path.insert(0, _HERE)
from _common import fmt_bytes, machine_info, print_table, samples_of, write_json  # noqa: E402

__all__ = [
    "raw_latency",
    "raw_bandwidth",
    "raw_msg_rate",
    "raw_alltoall",
    "raw_barrier",
    "baseline_rows",
]

TAG_DATA = 101
TAG_ACK = 102


def _need_two(comm: MPI.Comm) -> None:
    """Point-to-point tests need ranks 0 and 1."""
    if comm.Get_size() < 2:
        raise ValueError("this benchmark needs at least 2 ranks (mpiexec -n 2 ...)")


def _buffers(nbytes: int) -> tuple[list[Any], list[Any]]:
    """A send and a receive message spec ``[array, MPI.BYTE]`` of ``nbytes``."""
    sbuf = np.full(nbytes, 0xA5, dtype=np.uint8)
    rbuf = np.empty(nbytes, dtype=np.uint8)
    return [sbuf, MPI.BYTE], [rbuf, MPI.BYTE]


def raw_latency(comm: MPI.Comm, nbytes: int = 8, iters: int = 10000,
                warmup: int = 1000) -> float:
    """One-way latency in µs (osu_latency): blocking ping-pong between ranks 0
    and 1, half the mean round-trip time."""
    _need_two(comm)
    rank = comm.Get_rank()
    smsg, rmsg = _buffers(nbytes)
    send, recv = comm.Send, comm.Recv
    result = 0.0
    comm.Barrier()
    if rank == 0:
        for _ in range(warmup):
            send(smsg, 1, TAG_DATA)
            recv(rmsg, 1, TAG_DATA)
        t0 = MPI.Wtime()
        for _ in range(iters):
            send(smsg, 1, TAG_DATA)
            recv(rmsg, 1, TAG_DATA)
        result = (MPI.Wtime() - t0) * 1e6 / (2 * iters)
    elif rank == 1:
        for _ in range(warmup + iters):
            recv(rmsg, 0, TAG_DATA)
            send(smsg, 0, TAG_DATA)
    return float(comm.bcast(result, root=0))


def raw_bandwidth(comm: MPI.Comm, nbytes: int = 4 << 20, window: int = 64,
                  iters: int = 20, warmup: int = 2, reuse_buffer: bool = True) -> float:
    """Unidirectional bandwidth in bytes/s (osu_bw): per iteration rank 0 posts
    ``window`` Isend, rank 1 ``window`` Irecv, both Waitall, then rank 1 sends
    a 4-byte ack.

    ``reuse_buffer=True`` (OSU's way) sends from and receives into one buffer,
    which stays in the CPU cache for messages up to a few MiB and so flatters
    shared-memory numbers; ``False`` gives each of the ``window`` messages its
    own send and receive buffer (``window * nbytes`` per rank), closer to a
    stream being reassembled into a large array."""
    _need_two(comm)
    rank = comm.Get_rank()
    if reuse_buffer:
        smsg, rmsg = _buffers(nbytes)
        smsgs, rmsgs = [smsg] * window, [rmsg] * window
    else:
        pairs = [_buffers(nbytes) for _ in range(window)] if rank < 2 else []
        smsgs, rmsgs = [p[0] for p in pairs], [p[1] for p in pairs]
    ack = np.zeros(4, dtype=np.uint8)
    waitall = MPI.Request.Waitall
    result = 0.0
    comm.Barrier()
    if rank == 0:
        isend = comm.Isend
        t0 = 0.0
        for i in range(warmup + iters):
            if i == warmup:
                t0 = MPI.Wtime()
            waitall([isend(m, 1, TAG_DATA) for m in smsgs])
            comm.Recv(ack, 1, TAG_ACK)
        result = nbytes * window * iters / (MPI.Wtime() - t0)
    elif rank == 1:
        irecv = comm.Irecv
        for _ in range(warmup + iters):
            waitall([irecv(m, 0, TAG_DATA) for m in rmsgs])
            comm.Send(ack, 0, TAG_ACK)
    return float(comm.bcast(result, root=0))


def raw_msg_rate(comm: MPI.Comm, nbytes: int = 64, window: int = 64,
                 iters: int = 500, warmup: int = 50) -> float:
    """Aggregate message rate in messages/s (osu_mbw_mr): each pair
    ``(i, i + size//2)`` runs windows of ``window`` non-blocking messages of
    ``nbytes`` (one MPI message each) followed by a 4-byte ack; the result is
    the sum of the pairs' rates."""
    _need_two(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    pairs = size // 2
    smsg, rmsg = _buffers(nbytes)
    ack = np.zeros(4, dtype=np.uint8)
    waitall = MPI.Request.Waitall
    rate = 0.0
    comm.Barrier()
    if rank < pairs:
        peer, isend = rank + pairs, comm.Isend
        t0 = 0.0
        for i in range(warmup + iters):
            if i == warmup:
                t0 = MPI.Wtime()
            waitall([isend(smsg, peer, TAG_DATA) for _ in range(window)])
            comm.Recv(ack, peer, TAG_ACK)
        rate = window * iters / (MPI.Wtime() - t0)
    elif rank < 2 * pairs:
        peer, irecv = rank - pairs, comm.Irecv
        for _ in range(warmup + iters):
            waitall([irecv(rmsg, peer, TAG_DATA) for _ in range(window)])
            comm.Send(ack, peer, TAG_ACK)
    return float(comm.allreduce(rate, op=MPI.SUM))


def raw_alltoall(comm: MPI.Comm, nbytes_per_peer: int = 65536, iters: int = 100,
                 warmup: int = 10) -> float:
    """Per-host throughput in bytes/s of ``comm.Alltoall`` with numpy buffers:
    bytes each rank sends to the *other* ranks per second (its own block is not
    counted), using the slowest rank's time."""
    size = comm.Get_size()
    sbuf = np.full(nbytes_per_peer * size, 0x5A, dtype=np.uint8)
    rbuf = np.empty(nbytes_per_peer * size, dtype=np.uint8)
    smsg, rmsg = [sbuf, MPI.BYTE], [rbuf, MPI.BYTE]
    alltoall = comm.Alltoall
    for _ in range(warmup):
        alltoall(smsg, rmsg)
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iters):
        alltoall(smsg, rmsg)
    elapsed = float(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    return nbytes_per_peer * (size - 1) * iters / elapsed


def raw_barrier(comm: MPI.Comm, iters: int = 10000, warmup: int = 1000) -> float:
    """µs per ``comm.Barrier()`` (mean over ``iters``, slowest rank)."""
    barrier = comm.Barrier
    for _ in range(warmup):
        barrier()
    barrier()
    t0 = MPI.Wtime()
    for _ in range(iters):
        barrier()
    elapsed = float(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    return elapsed * 1e6 / iters


# ------------------------------------------------------------------ suite --

_BW_BYTES_PER_REPEAT = 1 << 30  # cap the data one bandwidth measurement moves


def _bw_iters(nbytes: int, window: int) -> int:
    """osu_bw's 20 iterations, fewer for big messages (<= ~1 GiB per run)."""
    return max(2, min(20, _BW_BYTES_PER_REPEAT // max(1, nbytes * window)))


def baseline_rows(comm: MPI.Comm, repeat: int = 5, quick: bool = False
                  ) -> list[dict[str, Any]]:
    """Run the standard baseline suite; each row holds the median, min and max
    of ``repeat`` measurements (collective; identical rows on every rank)."""
    scale = 10 if quick else 1
    rows: list[dict[str, Any]] = []

    def add(test: str, size: int | str, unit: str, div: float,
            fn: Callable[[], float]) -> None:
        s = [v / div for v in samples_of(fn, repeat)]
        rows.append({"test": test,
                     "size": fmt_bytes(size) if isinstance(size, int) else size,
                     "median": statistics.median(s), "min": min(s), "max": max(s),
                     "unit": unit})

    for n in (8, 1024, 65536):
        it = (10000 if n <= 8192 else 1000) // scale
        add("latency (one way)", n, "us", 1.0,
            partial(raw_latency, comm, n, it, max(1, it // 10)))
    for n in (8, 64, 1024):
        it = 500 // scale
        add("msg rate (window 64)", n, "Mmsg/s", 1e6,
            partial(raw_msg_rate, comm, n, 64, it, max(1, it // 10)))
    for n in (65536, 1 << 20, 4 << 20):
        it = max(2, _bw_iters(n, 64) // scale)
        add("bandwidth (window 64)", n, "GB/s", 1e9,
            partial(raw_bandwidth, comm, n, 64, it, max(1, it // 10)))
    n = 4 << 20
    it = max(2, _bw_iters(n, 64) // scale)
    add("bandwidth (window 64, own bufs)", n, "GB/s", 1e9,
        partial(raw_bandwidth, comm, n, 64, it, max(1, it // 10), False))
    for n in (1024, 65536, 1 << 20):
        it = max(5, (1000 if n <= 65536 else 100) // scale)
        add("alltoall per host", n, "GB/s", 1e9,
            partial(raw_alltoall, comm, n, it, max(1, it // 10)))
    it = 10000 // scale
    add("barrier", f"{comm.Get_size()} ranks", "us", 1.0,
        partial(raw_barrier, comm, it, max(1, it // 10)))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run :func:`baseline_rows` on ``COMM_WORLD``; rank 0 prints the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=5, help="runs per point; the median is shown")
    ap.add_argument("--quick", action="store_true", help="10x fewer iterations (smoke test)")
    ap.add_argument("--json", metavar="PATH", help="also write results and machine info as JSON")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        print("mpi_baseline needs 2 ranks: mpiexec -n 2 python benchmarks/mpi_baseline.py",
              file=sys.stderr)
        return 2
    rows = baseline_rows(comm, repeat=args.repeat, quick=args.quick)
    if comm.Get_rank() == 0:
        info = machine_info()
        print(f"# raw mpi4py baseline: {comm.Get_size()} ranks, median of {args.repeat}; "
              f"{info.get('mpi_vendor', '?')}; env {info['mpi_env'] or '{}'}")
        print_table(rows)
        if args.json:
            write_json(args.json, {"machine": info, "repeat": args.repeat, "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
