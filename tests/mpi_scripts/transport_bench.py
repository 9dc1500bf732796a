"""Quick benchmark (not a test): MPITransport vs raw mpi4py, 2 ranks, same run.

    mpiexec -n 2 python tests/mpi_scripts/transport_bench.py [poll|thread] [--quick]
    (add UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1 to the environment for TCP)

Measures 8-byte ping-pong one-way latency, 4 MiB windowed bandwidth and the
64-byte message rate (one block per message), first with raw mpi4py on a
duplicated communicator, then through the transport.  Rank 0 prints a table.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport, load_mpi

MPI = load_mpi()
QUICK = "--quick" in sys.argv
MODE = next((a for a in sys.argv[1:] if not a.startswith("-")), "auto")
COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
assert COMM.Get_size() == 2, "run with 2 ranks"
PEER = 1 - RANK

PP_ITERS = 2000 if QUICK else 20000
BW_SIZE = 4 << 20
BW_WINDOW = 16
RATE_WINDOW = 1000
TARGET_BYTES = (256 if QUICK else 1024) << 20  # per bandwidth run
RATE_MSGS = 20000 if QUICK else 200000


def raw_bench(comm: Any) -> dict[str, float]:
    res: dict[str, float] = {}
    b8 = bytearray(8)
    for _ in range(2):  # warm-up + measured
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(PP_ITERS):
            if RANK == 0:
                comm.Send(b8, PEER, 0)
                comm.Recv(b8, PEER, 0)
            else:
                comm.Recv(b8, PEER, 0)
                comm.Send(b8, PEER, 0)
        res["lat_us"] = (time.perf_counter() - t0) / PP_ITERS / 2 * 1e6

    big = bytearray(BW_SIZE)
    bufs = [bytearray(BW_SIZE) for _ in range(BW_WINDOW)]
    nwin = max(2, TARGET_BYTES // (BW_SIZE * BW_WINDOW))
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(nwin):
        if RANK == 0:
            MPI.Request.Waitall([comm.Isend(big, PEER, 1) for _ in range(BW_WINDOW)])
            comm.Recv(b8, PEER, 2)
        else:
            MPI.Request.Waitall([comm.Irecv(bufs[i], PEER, 1) for i in range(BW_WINDOW)])
            comm.Send(b8, PEER, 2)
    res["bw_GBps"] = nwin * BW_WINDOW * BW_SIZE / (time.perf_counter() - t0) / 1e9

    small = bytearray(64)
    rbufs = [bytearray(64) for _ in range(RATE_WINDOW)]
    nwin = RATE_MSGS // RATE_WINDOW
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(nwin):
        if RANK == 0:
            MPI.Request.Waitall([comm.Isend(small, PEER, 3) for _ in range(RATE_WINDOW)])
            comm.Recv(b8, PEER, 4)
        else:
            MPI.Request.Waitall([comm.Irecv(rbufs[i], PEER, 3) for i in range(RATE_WINDOW)])
            comm.Send(b8, PEER, 4)
    res["rate_kmsgs"] = nwin * RATE_WINDOW / (time.perf_counter() - t0) / 1e3
    return res


class Sink:
    """Deliver callback with a cheap single-waiter wake-up per channel."""

    def __init__(self) -> None:
        self.count = [0, 0]
        self.bytes = 0
        self.target = [0, 0]
        self.waiter: list[asyncio.Future[None] | None] = [None, None]

    def deliver(self, src: int, ch: Channel, view: memoryview) -> None:
        self.count[ch] += 1
        self.bytes += view.nbytes
        w = self.waiter[ch]
        if w is not None and self.count[ch] >= self.target[ch] and not w.done():
            w.set_result(None)

    async def wait(self, ch: Channel, n: int) -> None:
        if self.count[ch] >= n:
            return
        self.target[ch] = n
        fut = asyncio.get_running_loop().create_future()
        self.waiter[ch] = fut
        try:
            await fut
        finally:
            self.waiter[ch] = None


async def transport_bench(t: MPITransport, sink: Sink) -> dict[str, float]:
    res: dict[str, float] = {}
    C, D = Channel.CONTROL, Channel.DATA
    b8 = [bytes(8)]
    for _ in range(2):
        COMM.Barrier()  # fine: nothing in flight
        base = sink.count[C]
        t0 = time.perf_counter()
        for i in range(1, PP_ITERS + 1):
            if RANK == 0:
                await t.send(PEER, C, b8)
                await sink.wait(C, base + i)
            else:
                await sink.wait(C, base + i)
                await t.send(PEER, C, b8)
        res["lat_us"] = (time.perf_counter() - t0) / PP_ITERS / 2 * 1e6

    big = bytearray(BW_SIZE)
    nwin = max(2, TARGET_BYTES // (BW_SIZE * BW_WINDOW))
    COMM.Barrier()
    base_d, base_c = sink.count[D], sink.count[C]
    t0 = time.perf_counter()
    for w in range(1, nwin + 1):
        if RANK == 0:
            await t.send(PEER, D, [big] * BW_WINDOW)
            await sink.wait(C, base_c + w)
        else:
            await sink.wait(D, base_d + w * BW_WINDOW)
            await t.send(PEER, C, b8)
    res["bw_GBps"] = nwin * BW_WINDOW * BW_SIZE / (time.perf_counter() - t0) / 1e9

    small = bytes(64)
    nwin = RATE_MSGS // RATE_WINDOW
    for variant in ("rate_kmsgs", "rate_calls_kmsgs"):
        COMM.Barrier()
        base_d, base_c = sink.count[D], sink.count[C]
        t0 = time.perf_counter()
        for w in range(1, nwin + 1):
            if RANK == 0:
                if variant == "rate_kmsgs":  # one send() call, RATE_WINDOW blocks
                    await t.send(PEER, D, [small] * RATE_WINDOW)
                else:  # one send() call per message
                    for _ in range(RATE_WINDOW):
                        await t.send(PEER, D, [small])
                await sink.wait(C, base_c + w)
            else:
                await sink.wait(D, base_d + w * RATE_WINDOW)
                await t.send(PEER, C, b8)
        res[variant] = nwin * RATE_WINDOW / (time.perf_counter() - t0) / 1e3
    return res


async def amain() -> tuple[dict[str, float], dict[str, Any]]:
    t = MPITransport(progress=MODE)
    sink = Sink()
    await t.start(sink.deliver)
    try:
        res = await transport_bench(t, sink)
    finally:
        await t.aclose()
    return res, t.stats()


def main() -> None:
    raw_comm = COMM.Dup()
    raw = raw_bench(raw_comm)
    raw_comm.Free()
    if "--uvloop" in sys.argv:
        import uvloop

        tr, st = uvloop.run(amain())
    else:
        tr, st = asyncio.run(amain())
    if RANK == 0:
        print(f"progress={st['progress']} quick={QUICK} uvloop={'--uvloop' in sys.argv}")
        print(f"{'metric':<22}{'raw mpi4py':>14}{'transport':>14}{'ratio':>9}")
        for k in ("lat_us", "bw_GBps", "rate_kmsgs", "rate_calls_kmsgs"):
            r = raw.get(k, raw.get("rate_kmsgs", 0.0))
            v = tr[k]
            print(f"{k:<22}{r:>14.2f}{v:>14.2f}{v / r:>9.2f}")
        print("stats", {k: st[k] for k in ("steps", "testsome_calls", "wakeups", "idle_sleeps", "fast_sends", "send_calls")})


if __name__ == "__main__":
    main()
