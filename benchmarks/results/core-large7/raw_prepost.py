"""Raw mpi4py: does a pre-posted payload Irecv (posted before the header
arrives) beat one posted after the header is decoded, when the receiver has
D us of Python work between seeing the header and posting?  Nonblocking
Isend/Test loops as aiopdbp's engine does (no blocking Recv).
mpiexec -n 2 python raw_prepost.py SIZE D_US"""
from mpi4py import MPI
import numpy as np, time, sys
comm = MPI.COMM_WORLD; bulk = comm.Dup(); r = comm.rank; p = 1 - r
SIZE = int(sys.argv[1]); D = float(sys.argv[2]) * 1e-6; N = 1000
data = np.ones(SIZE, np.uint8); head = np.zeros(64, np.uint8)
perf = time.perf_counter
def work():
    end = perf() + D
    while perf() < end:
        pass
def waitall(reqs):
    while not MPI.Request.Testall(reqs):
        pass
def send():
    a = comm.Isend(head, p); b = bulk.Isend(data, p); waitall([a, b])
def recv_after():   # header, D us of decode, then post the payload's Irecv
    h = np.empty(64, np.uint8); rq = comm.Irecv(h, p)
    while not rq.Test(): pass
    work()
    buf = np.empty(SIZE, np.uint8); rq = bulk.Irecv(buf, p)
    while not rq.Test(): pass
    return buf
pre = [None, None]
def recv_pre():     # the payload's Irecv already posted; header, D us, then complete
    h = np.empty(64, np.uint8); rq = comm.Irecv(h, p)
    while not rq.Test(): pass
    work()
    preq, buf = pre
    while not preq.Test(): pass
    nb = np.empty(SIZE, np.uint8); pre[:] = [bulk.Irecv(nb, p), nb]  # the next landing, posted now
    return buf
def run(name, recv):
    res = []
    for rep in range(5):
        comm.Barrier(); t = perf()
        for i in range(N):
            if r == 0: send(); recv()
            else: recv(); send()
        res.append((perf() - t) / N / 2 * 1e6)
    return sorted(res)[2]
nb = np.empty(SIZE, np.uint8); pre[:] = [bulk.Irecv(nb, p), nb]
out = {}
for rnd in range(5):
    for name, fn in (("after", recv_after), ("pre", recv_pre)):
        if name == "after":
            pre[0].Cancel(); pre[0].Wait()
        else:
            nb = np.empty(SIZE, np.uint8); pre[:] = [bulk.Irecv(nb, p), nb]
        comm.Barrier()
        out.setdefault(name, []).append(run(name, fn))
pre[0].Cancel(); pre[0].Wait()
if r == 0:
    import statistics as S; print(f"{SIZE} B, decode {D*1e6:.1f} us, 5 alternated rounds (each the median of 5 x {N} round trips): " + "; ".join(f"{k}: median {S.median(vs):.2f} min {min(vs):.2f} [{' '.join(f'{v:.1f}' for v in vs)}] us one way" for k, vs in out.items()))
