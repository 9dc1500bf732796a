"""Waiting without losing the reply (issue 18 item 1): three measurements.

``aiopdbp launch -n 2 benchmarks/wake.py gap``: rank 0 idles ``GAP`` ms (every
rank's node quiet), then sends 8 B to rank 1, which answers; the round trip
of each of 200 pings per gap (median, p90), for gaps 1, 5, 20, 100 ms.

``aiopdbp launch -n 2 benchmarks/wake.py idle``: rank 1 awaits ``gp.recv``
for 10 s with no traffic; its process CPU seconds over those 10 s.

``aiopdbp launch -n 4 benchmarks/wake.py pairs``: ranks 0<->1 and 2<->3 ping
8 B back and forth 3000 times each, concurrently; the slowest pair's median
round trip and the job's wall time (compare with ``AIOPDBP_SPIN_US=0``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import numpy as np

import aiopdbp


async def main(mode: str) -> None:
    async with aiopdbp.open_node() as node:
        rank, size = node.rank, node.size
        async with node.process(f"w{rank}") as gp:
            for r in range(size):
                await node.lookup(f"w{r}", timeout=30)
            ping = np.frombuffer(b"12345678", dtype=np.uint8)
            if mode == "gap":
                from mpi4py import MPI

                comm = MPI.COMM_WORLD.Dup()
                await _gap(node, gp, rank, ping, comm)
                comm.Free()
            elif mode == "idle":
                await _idle(gp, rank, ping)
            else:
                await _pairs(gp, rank, ping)


async def _floor_gap(comm, rank: int, gap_ms: int, n: int) -> list[int]:
    """The issue's plain asyncio floor (Test + sleep(0)), same gaps."""
    async def wait(req):
        while not req.Test():
            await asyncio.sleep(0)
    rb = np.zeros(1, dtype=np.int64)
    rtts = []
    for _ in range(n):
        if rank == 0:
            await asyncio.sleep(gap_ms / 1e3)
            t0 = time.perf_counter_ns()
            rq = comm.Irecv(rb, 1, 3)
            await wait(comm.Isend(np.array([t0], dtype=np.int64), 1, 3))
            await wait(rq)
            rtts.append(time.perf_counter_ns() - t0)
        else:
            await wait(comm.Irecv(rb, 0, 3))
            await wait(comm.Isend(rb, 0, 3))
    return rtts


async def _gap(node, gp, rank: int, ping, comm) -> None:
    out = []
    for gap_ms in (1, 5, 20, 100):
        n = 200 if gap_ms < 100 else 40
        if rank < 2:
            f = np.array(await _floor_gap(comm, rank, gap_ms, n)) / 1e3
            if rank == 0:
                out.append(f"gap {gap_ms:>3} ms: floor round trip median {np.median(f):8.1f} us, "
                           f"p90 {np.percentile(f, 90):8.1f} us")
        n = 200 if gap_ms < 100 else 40
        rtts, fwd, back = [], [], []
        for _ in range(n):
            if rank == 0:
                await asyncio.sleep(gap_ms / 1e3)
                t0 = time.perf_counter_ns()
                await gp.send("w1", np.array([t0], dtype=np.int64))
                m = await gp.recv(timeout=10)
                t2 = time.perf_counter_ns()
                t1 = int(np.frombuffer(m.data, dtype=np.int64)[0])
                rtts.append(t2 - t0)
                fwd.append(t1 - t0)
                back.append(t2 - t1)
            else:
                m = await gp.recv(timeout=30)
                t1 = time.perf_counter_ns()
                await gp.send("w0", np.array([t1], dtype=np.int64))
        if rank == 0:
            a = np.array(rtts) / 1e3
            out.append(f"gap {gap_ms:>3} ms: 8 B round trip median {np.median(a):8.1f} us, "
                       f"p90 {np.percentile(a, 90):8.1f} us, max {a.max():8.1f} us ({n} pings); "
                       f"ping arrives {np.median(fwd) / 1e3:.1f} us, answer {np.median(back) / 1e3:.1f} us")
    if rank == 0:
        print("\n".join(out), flush=True)
    else:
        t = node.stats().transport
        print(f"rank 1: rings heard {t.get('rings_heard')}, idle sleeps {t['idle_sleeps']}, "
              f"doorbell {t.get('doorbell')}", flush=True)


async def _idle(gp, rank: int, ping) -> None:
    if rank == 0:
        await asyncio.sleep(10.5)
        await gp.send("w1", ping)
        await gp.recv(timeout=10)
    else:
        c0, t0 = time.process_time(), time.perf_counter()
        m = await gp.recv(timeout=30)
        c, t = time.process_time() - c0, time.perf_counter() - t0
        await gp.send("w0", m.data)
        print(f"idle: rank 1 blocked in recv {t:.2f} s, CPU {c:.3f} s (all threads of the process)",
              flush=True)


async def _pairs(gp, rank: int, ping) -> None:
    peer = f"w{rank ^ 1}"
    rtts = []
    t0 = time.perf_counter()
    for _ in range(3000):
        if rank % 2 == 0:
            s = time.perf_counter_ns()
            await gp.send(peer, ping)
            await gp.recv(timeout=30)
            rtts.append(time.perf_counter_ns() - s)
        else:
            m = await gp.recv(timeout=30)
            await gp.send(peer, m.data)
    if rank % 2 == 0:
        print(f"pairs: rank {rank}: 3000 round trips in {time.perf_counter() - t0:.3f} s, "
              f"median {np.median(rtts) / 1e3:.1f} us", flush=True)
    if os.environ.get("WAKE_STATS"):
        t = gp.node.stats().transport
        print(f"rank {rank}: " + ", ".join(f"{k}={t.get(k)}" for k in (
            "steps", "spins", "idle_sleeps", "wakeups", "rings_heard", "rings_sent", "ring_failures", "doorbell")), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "gap"))
