from mpi4py import MPI
import numpy as np, time, resource
c = MPI.COMM_WORLD; r = c.Get_rank()
pc = time.perf_counter_ns
def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for n in (1 << 20, 16 << 20):
    a = np.ones(n, np.uint8)
    bufs = [np.empty(n, np.uint8) for _ in range(2)]
    for b in bufs: b[:] = 0
    for mode in ("same", "alt2", "fresh"):
        ts = []; f0 = faults()
        for i in range(40 if n > 1<<20 else 200):
            c.Barrier()
            if r == 0:
                c.Send(a, 1, 0)
            else:
                b = bufs[0] if mode == "same" else bufs[i & 1] if mode == "alt2" else np.empty(n, np.uint8)
                t0 = pc(); c.Recv(b, 0, 0); ts.append(pc() - t0)
        if r == 1:
            print(n, mode, "Recv med %.1f us min %.1f; faults/msg %.1f" % (np.median(ts)/1e3, min(ts)/1e3, (faults()-f0)/len(ts)))
