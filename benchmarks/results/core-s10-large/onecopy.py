"""Where MPICH does a large payload's copy, as aiopdbp posts it (mpi4py only, 2 ranks).

    aiopdbp launch -n 2 onecopy.py [SIZES]

Rank 0 posts a header (``Isend``, 100 B, data communicator) and the payload (``Isend`` on a
second communicator), then tests the payload's request until it completes, counting the tests.
Rank 1 probes for the header, posts the payload's ``Irecv`` (into a reused buffer) and tests it
once -- aiopdbp's receive fast path -- then, if it did not land, tests until it does, counting.
Then rank 1 echoes the same way.  Per size: the fraction of payloads landed in the first Test,
the receiver's Irecv+first Test time, the tests the sender needed after posting (a rendezvous
completes at the sender only when the sender's progress sees the receiver's done), and the
round trip, beside blocking Send/Recv of the same bytes in the same job (alternated)."""
import sys, time
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
data, bulk = comm.Dup(), comm.Dup()
me, peer = comm.rank, 1 - comm.rank
sizes = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "65536,1048576,16777216").split(",")]
head = np.zeros(100, np.uint8)
st = MPI.Status()
ns = time.perf_counter_ns


def send(buf):
    data.Isend([head, MPI.BYTE], peer, 1).Wait()
    r = bulk.Isend([buf, MPI.BYTE], peer, 2)
    n = 1
    while not r.Test():
        n += 1
    return n


def recv(buf):
    hb = np.empty(100, np.uint8)
    while not data.Iprobe(peer, 1, st):
        pass
    data.Recv([hb, MPI.BYTE], peer, 1)
    t = ns()
    r = bulk.Irecv([buf, MPI.BYTE], peer, 2)
    first = r.Test()
    t1 = ns()
    n = 1
    while not first and not r.Test():
        n += 1
    return first, t1 - t, n


for size in sizes:
    a = np.ones(size, np.uint8)
    b = np.empty(size, np.uint8)
    iters = 200 if size <= (1 << 20) else 40
    for impl in ("aiopdbp-like", "Send/Recv") * 3:
        comm.Barrier()
        rt, firsts, posts, stests, rtests = [], 0, [], [], []
        for i in range(iters + 10):
            t0 = ns()
            if impl == "Send/Recv":
                if me == 0:
                    comm.Send([a, MPI.BYTE], 1, 3); comm.Recv([b, MPI.BYTE], 1, 3)
                else:
                    comm.Recv([b, MPI.BYTE], 0, 3); comm.Send([b, MPI.BYTE], 0, 3)
            elif me == 0:
                stests.append(send(a))
                f, p, n = recv(b)
                firsts += f; posts.append(p); rtests.append(n)
            else:
                f, p, n = recv(b)
                firsts += f; posts.append(p); rtests.append(n)
                stests.append(send(b))
            if i >= 10:
                rt.append(ns() - t0)
        if me == 0:
            line = f"{size:>9} B {impl:>13}: one way {np.median(rt) / 2e3:8.1f} us"
            if impl != "Send/Recv":
                line += (f"; landed in the first Test {firsts / (iters + 10):.2f}, Irecv+Test {np.median(posts) / 1e3:.1f} us"
                         f", receiver tests {np.median(rtests):.0f}, sender tests after posting {np.median(stests):.0f}")
            print(line, flush=True)
