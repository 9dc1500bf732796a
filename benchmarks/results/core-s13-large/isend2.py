from mpi4py import MPI
import numpy as np, time, sys
c = MPI.COMM_WORLD; r = c.Get_rank()
pc = time.perf_counter_ns
for n in (80, 8000, 20000, 65536, 262144, 1048576, 16<<20):
    a = np.ones(n, np.uint8); b = np.empty(n, np.uint8)
    ts = []; tt=[]
    for i in range(300):
        c.Barrier()
        if r == 0:
            t0 = pc(); req = c.Isend(a, 1, 0); t1 = pc(); req.Test(); t2=pc()
            ts.append(t1 - t0); tt.append(t2-t1)
            req.Wait()
        else:
            time.sleep(0.0001)
            c.Recv(b, 0, 0)
    if r == 0:
        print(n, "Isend med us %.2f min %.2f  first Test %.2f" % (np.median(ts)/1e3, min(ts)/1e3, np.median(tt)/1e3))
