"""MPICH eager limit over shared memory: does an Isend of n bytes complete at its first Test (no receive posted)?
    mpiexec -n 2 python eager.py"""
import numpy as np, time
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.rank
for n in (1000, 4000, 8000, 16000, 16384, 17000, 32000, 48000, 60000):
    a = np.ones(n, np.uint8); b = np.empty(n, np.uint8)
    c.Barrier()
    if r == 0:
        q = c.Isend(a, 1, 5); done = q.Test(); tests = 0
        while not q.Test(): tests += 1
        print(n, "completed at once:", done, "tests", tests, flush=True)
    else:
        time.sleep(0.05); c.Recv(b, 0, 5)
    c.Barrier()
