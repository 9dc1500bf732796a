from mpi4py import MPI
import numpy as np, time, os
c = MPI.COMM_WORLD; r = c.Get_rank()
pc = time.perf_counter_ns
def busy(req):
    d = {}
    while not req.Test():
        for i in range(20):
            d[i] = (i, str(i))
for n in (65536, 1 << 20, 16 << 20):
    a = np.ones(n, np.uint8); bufs = [np.zeros(n, np.uint8) for _ in range(2)]
    for mode in ("wait", "test-loop", "python-busy", "yield-loop", "sleep"):
        ts = []
        for i in range(40 if n > 1<<20 else 200):
            c.Barrier()
            if r == 0:
                req = c.Isend(a, 1, 0)
                if mode == "wait": req.Wait()
                elif mode == "test-loop":
                    while not req.Test(): pass
                elif mode == "python-busy": busy(req)
                elif mode == "yield-loop":
                    while not req.Test(): os.sched_yield()
                else:
                    while not req.Test(): time.sleep(0.00005)
            else:
                time.sleep(0.0001)
                t0 = pc(); c.Recv(bufs[i & 1], 0, 0); ts.append(pc() - t0)
        if r == 1:
            print(n, "%-12s receiver Recv med %.1f us min %.1f" % (mode, np.median(ts)/1e3, min(ts)/1e3), flush=True)
