"""Which MPICH protocol moves a 64 KiB / 1 MiB shm message: does landing need the sender's progress?"""
from mpi4py import MPI
import numpy as np, time, sys
comm = MPI.COMM_WORLD; r = comm.rank; p = 1 - r
SIZE = int(sys.argv[1]); N = 200
data = np.ones(SIZE, np.uint8); rb = np.empty(SIZE, np.uint8)
ns = time.perf_counter_ns
def busy(d):
    e = ns() + d
    while ns() < e: pass
for case in ("sender idle 200us after Isend, recv pre-posted", "recv posted 100us late, sender spins Test",
             "recv posted 100us late, sender idle 300us"):
    res = []
    for i in range(N):
        comm.Barrier()
        if r == 0:
            t0 = ns(); q = comm.Isend(data, p)
            t1 = ns()
            if case.startswith("sender idle") or case.endswith("idle 300us"):
                busy(200_000 if case.startswith("sender") else 300_000)
                q.Wait()
            else:
                while not q.Test(): pass
            comm.send((t0, t1), p, tag=7)
        else:
            if case.startswith("recv posted"):
                busy(100_000)
            a = ns(); q = comm.Irecv(rb, p); b = ns()
            while not q.Test(): pass
            c = ns()
            t0, t1 = comm.recv(source=p, tag=7)
            res.append((t1 - t0, b - a, c - t0, c - a))
    if r == 1:
        m = np.median(np.array(res), axis=0) / 1e3
        print(f"{SIZE} {case}: Isend call {m[0]:.1f} us, Irecv call {m[1]:.1f}, landed after Isend {m[2]:.1f}, landed after Irecv posted {m[3]:.1f}")
