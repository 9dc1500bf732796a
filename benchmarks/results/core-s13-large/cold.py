from mpi4py import MPI
import numpy as np, time
c = MPI.COMM_WORLD; r = c.Get_rank()
pc = time.perf_counter_ns
import asyncio, collections, struct
def work():
    d = {}
    for i in range(40):
        d[i] = struct.pack("<QQ", i, i)
        collections.deque([d]).popleft()
    return len(d)
for n in (0, 65536, 1048576, 4 << 20):
    a = np.ones(max(n,1), np.uint8); b = np.empty(max(n,1), np.uint8)
    ts = []
    for i in range(300):
        if r == 0:
            if n: c.Send(a, 1, 0)
            c.Recv(b[:1], 1, 1)
        else:
            if n: c.Recv(b, 0, 0)
            t0 = pc(); work(); ts.append(pc() - t0)
            c.Send(b[:1], 0, 1)
    if r == 1:
        print(n, "python work after recv: med %.2f us min %.2f" % (np.median(ts)/1e3, min(ts)/1e3))
