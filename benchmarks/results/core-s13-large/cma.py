from mpi4py import MPI
import numpy as np, time, sys
c = MPI.COMM_WORLD; r = c.Get_rank()
n = int(sys.argv[1])
a = np.ones(n, np.uint8); b = np.empty(n, np.uint8)
for i in range(200):
    if r == 0:
        c.Send(a, 1, 0); c.Recv(b, 1, 0)
    else:
        c.Recv(b, 0, 0); c.Send(a, 0, 0)
t = time.perf_counter()
for i in range(2000):
    if r == 0:
        c.Send(a, 1, 0); c.Recv(b, 1, 0)
    else:
        c.Recv(b, 0, 0); c.Send(a, 0, 0)
if r == 0: print(n, "one way us", (time.perf_counter()-t)/4000*1e6)
