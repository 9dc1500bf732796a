"""mpull.py with the send a two-block hindexed datatype (an 80 B header + the payload, MPI.BOTTOM): the
receiver waits for the sleeping sender (~20 ms).   mpiexec -n 2 python hpull.py"""
import time, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.rank
for n in (65536+80, 1<<20):
    a = np.ones(n, np.uint8); b = np.empty(n, np.uint8)
    for k in range(3):
        c.Barrier()
        if r == 0:
            h = bytearray(80); t0 = time.perf_counter(); dt = MPI.BYTE.Create_hindexed([80, n-80], [MPI.Get_address(h), MPI.Get_address(a)]).Commit(); q = c.Isend([MPI.BOTTOM, 1, dt], 1, 5); dt.Free(); t1 = time.perf_counter()
            time.sleep(0.02)   # no MPI progress here
            q.Wait()
            print(f"n={n} Isend {1e6*(t1-t0):.1f} us", flush=True)
        else:
            st = MPI.Status(); m = c.Mprobe(0, 5, st); t0 = time.perf_counter()
            q = m.Irecv(b); tests = 0
            while not q.Test(): tests += 1
            print(f"n={n} receiver: matched -> landed {1e6*(time.perf_counter()-t0):.1f} us, tests {tests}", flush=True)
        c.Barrier()
