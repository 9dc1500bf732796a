"""The large send's tail and the payload's receive, in one process (MPI to itself), timed:
old = transport.post_bulk / engine.post_bulk_recv chain, new = lane.post_pair / recv_bulk_now."""
import asyncio, os, sys, time
import numpy as np
from aiopdbp.transport.mpiload import prepare_mpi_import
prepare_mpi_import()
from mpi4py import MPI
from aiopdbp.transport.mpi import MPITransport
from aiopdbp.transport.base import Channel
N = int(os.environ.get("N", "3000")); SIZE = int(os.environ.get("SIZE", "65536"))

async def main():
    tr = MPITransport()
    got = []
    await tr.start(lambda *a: got.append(a))
    eng = tr._engine
    pay = np.ones(SIZE, np.uint8).data
    head = b"h" * 120
    lane = tr.send_lane(0, Channel.DATA)
    new = hasattr(lane, "post_pair") and getattr(lane, "bulk", None) is not None
    loop = asyncio.get_running_loop()
    landed = []
    def done_cb(buf): landed.append(1)
    best = []
    for rep in range(int(os.environ.get("REPS", "5"))):
        t_send = t_recv = 0.0
        for i in range(N):
            tag = i % 64
            d = loop.create_future()
            t0 = time.perf_counter()
            if new:
                fut = lane.post_pair(head, pay, tag, d)
            else:
                fut = tr.post_bulk(0, tag, pay, d, head)
            t1 = time.perf_counter()
            if new:
                buf, track = tr.recv_bulk_now(0, tag, SIZE, None)
                if track is not None:
                    track(done_cb)
            else:
                tr.recv_bulk(0, tag, SIZE, None, done_cb)
            t2 = time.perf_counter()
            t_send += t1 - t0; t_recv += t2 - t1
            while eng.step():   # the header to the sink, the send's completion
                pass
        best.append((t_send / N * 1e6, t_recv / N * 1e6))
    if not N: return
    print(f"{'new' if new else 'old'} send tail {min(b[0] for b in best):.3f} us  receive post {min(b[1] for b in best):.3f} us (min of 5 x {N}); headers {len(got)}; landed at once {len(landed) == 0}")
    await tr.aclose()

asyncio.run(main())
