"""Raw mpi4py baselines, measured in the same job as aiopdbp (OSU-style).

What a careful user would write by hand with mpi4py and numpy, for the same
flows, unit sizes and payloads as the aiopdbp runs (see
:mod:`aiopdbp.bench.workload`).  Every function is called on every rank of
``comm`` (ranks without a part return an empty :class:`Measure` at once) and
returns this rank's :class:`Measure`; the harness gathers them.

Buffer policy (stated in every result row): the sender sends the ring's
prebuilt, immutable ``bytes`` units (no copy, reused -- the same objects
aiopdbp sends); the receiver posts ``Irecv`` into one preallocated,
already-touched numpy buffer per flow that holds a window of units, reused
for every window, and compares every window with the expected bytes (one
``numpy.array_equal`` per window) before posting the next.

* :func:`bandwidth` -- osu_bw: windows of ``Isend``/``Irecv`` + ``Waitall``,
  a 4-byte ack after each window.
* :func:`flows` -- windowed ``Isend``/``Irecv`` over any set of flows (the
  ``rate`` test and the paper's patterns): per round every rank posts a
  window of receives for each incoming flow and a window of sends for each
  outgoing flow, then ``Waitall``; no ack (the receivers' checks end the clock).
* :func:`alltoall` -- ``comm.Alltoall`` with count = unit size per peer, one
  call per round (the paper's Fig. 11 comparison).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from aiopdbp.bench.workload import RING_BYTES, Checker, Flow, Measure, Ring

__all__ = ["alltoall", "bandwidth", "flows"]

TAG_ACK = 1000


def _buf(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A receive buffer, touched now so no page fault lands in a timed loop."""
    b = np.empty(nbytes, dtype=np.uint8)
    b.fill(0)
    return b


def bandwidth(comm: Any, ring: Ring, windows: int, warmup: int, send_ring: Ring,
              checker: Checker) -> Measure:
    """osu_bw from rank 0 to rank 1: ``windows`` windows of ``ring.window`` units."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    if rank > 1:
        return Measure()
    byte, w, p, size = MPI.BYTE, ring.window, ring.count, ring.size
    ack = bytearray(4)
    waitall = MPI.Request.Waitall
    t0 = c0 = 0.0
    if rank == 0:
        specs = [[u, byte] for u in send_ring.units]
        isend = comm.Isend
        for it in range(warmup + windows):
            if it == warmup:
                t0, c0 = time.perf_counter(), time.process_time()
            i = it * w
            waitall([isend(specs[(i + u) % p], 1, 0) for u in range(w)])
            comm.Recv([ack, byte], 1, TAG_ACK)
        n = windows * w
        return Measure(time.perf_counter() - t0, time.process_time() - c0, n, 0, checker.errors)
    rbuf = _buf(w * size)
    rspecs = [[rbuf[u * size:(u + 1) * size], byte] for u in range(w)]
    irecv = comm.Irecv
    for it in range(warmup + windows):
        if it == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        waitall([irecv(rspecs[u], 0, 0) for u in range(w)])
        checker.check_window(0, it * w, rbuf, w)
        comm.Send([ack, byte], 0, TAG_ACK)
    return Measure(time.perf_counter() - t0, time.process_time() - c0, 0, windows * w, checker.errors)


def flows(comm: Any, fl: Sequence[Flow], ring: Ring, units: int, send_ring: Ring,
          checker: Checker) -> Measure:
    """Windowed ``Isend``/``Irecv`` of ``units`` units on every flow of ``fl``."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    outs = [f for f in fl if f.src == rank]
    ins = [f for f in fl if f.dst == rank]
    if not outs and not ins:
        return Measure()
    byte, w, p, size = MPI.BYTE, ring.window, ring.count, ring.size
    specs = [[u, byte] for u in send_ring.units]
    rbufs = {f: _buf(w * size) for f in ins}
    rspecs = {f: [[b[u * size:(u + 1) * size], byte] for u in range(w)] for f, b in rbufs.items()}
    isend, irecv, waitall = comm.Isend, comm.Irecv, MPI.Request.Waitall
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, units, w):
        k = min(w, units - i)
        reqs = []
        for f in ins:
            rs, src, tag = rspecs[f], f.src, f.chan
            reqs += [irecv(rs[u], src, tag) for u in range(k)]
        for f in outs:
            dst, tag = f.dst, f.chan
            reqs += [isend(specs[(i + u) % p], dst, tag) for u in range(k)]
        waitall(reqs)
        for f in ins:
            checker.check_window(f, i, rbufs[f], k)
    t, c = time.perf_counter() - t0, time.process_time() - c0
    return Measure(t, c, units * len(outs), units * len(ins), checker.errors)


def alltoall(comm: Any, ring: Ring, rounds: int, send_ring: Ring, checker: Checker) -> Measure:
    """``rounds`` calls of ``comm.Alltoall``, ``ring.size`` bytes per peer.

    Round ``i`` sends unit ``i`` of the ring to every rank (a prebuilt
    ``n * size`` buffer per distinct unit, reused); the receive buffer is
    reused and compared as a whole with the expected one after every call.
    """
    from mpi4py import MPI

    n, size = comm.Get_size(), ring.size
    distinct = max(1, min(ring.count, RING_BYTES // (n * size)))

    def tiles(r: Ring) -> list[np.ndarray[Any, np.dtype[np.uint8]]]:
        return [np.tile(np.frombuffer(r.units[j], dtype=np.uint8), n) for j in range(distinct)]

    sbufs = tiles(send_ring)
    want = sbufs if send_ring is ring else tiles(ring)
    rbuf = _buf(n * size)
    byte = MPI.BYTE
    sspecs = [[b, byte] for b in sbufs]
    rspec = [rbuf, byte]
    a2a = comm.Alltoall
    bad = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(rounds):
        j = i % distinct
        a2a(sspecs[j], rspec)
        if not np.array_equal(rbuf, want[j]):
            bad += 1
            if bad == 1:
                checker.fail("every peer", i, "Alltoall's received blocks differ from the expected units")
    t, c = time.perf_counter() - t0, time.process_time() - c0
    return Measure(t, c, rounds * (n - 1), rounds * (n - 1), checker.errors)
