"""Does a 64 KiB+80 B / 1 MiB contiguous message land at the receiver (Mprobe + Imrecv + Test) while its sender sleeps
20 ms without MPI progress?  (receiver-pulled copy: landed in the first Test)   mpiexec -n 2 python mpull.py"""
import time, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.rank
for n in (65536+80, 1<<20):
    a = np.ones(n, np.uint8); b = np.empty(n, np.uint8)
    for k in range(3):
        c.Barrier()
        if r == 0:
            t0 = time.perf_counter(); q = c.Isend(a, 1, 5); t1 = time.perf_counter()
            time.sleep(0.02)   # no MPI progress here
            q.Wait()
            print(f"n={n} Isend {1e6*(t1-t0):.1f} us", flush=True)
        else:
            st = MPI.Status(); m = c.Mprobe(0, 5, st); t0 = time.perf_counter()
            q = m.Irecv(b); tests = 0
            while not q.Test(): tests += 1
            print(f"n={n} receiver: matched -> landed {1e6*(time.perf_counter()-t0):.1f} us, tests {tests}", flush=True)
        c.Barrier()
