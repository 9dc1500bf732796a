from mpi4py import MPI
import numpy as np, os, resource, time
comm = MPI.COMM_WORLD; r = comm.rank; p = 1 - r
SIZES = [int(s) for s in os.environ.get("SIZES", "65536,1048576").split(",")]
N = int(os.environ.get("N", "1000")); B = 10
def ru():
    x = resource.getrusage(resource.RUSAGE_SELF); return x.ru_minflt, x.ru_utime + x.ru_stime
for size in SIZES:
    data = np.ones(size, np.uint8); rb = np.empty(size, np.uint8)
    n = N if size < (1 << 20) else max(100, N // 4)
    for mode in ("reused", "fresh"):
        st = MPI.Status()
        def recv():
            if mode == "reused": comm.Recv(rb, p); return rb
            m = comm.Mprobe(p, status=st); b = np.empty(st.Get_count(MPI.BYTE), np.uint8); m.Recv(b); return b
        comm.Barrier(); f0, c0 = ru(); walls = []
        for b in range(n // B):
            t = time.perf_counter()
            for i in range(B):
                if r == 0: comm.Send(data, p); recv()
                else: recv(); comm.Send(data, p)
            walls.append((time.perf_counter() - t) / B / 2 * 1e6)
        f1, c1 = ru(); k = n // B * B
        line = f"mpi4py-{mode} {size:9d} one way p50 {np.median(walls):8.2f} us  cpu/RT r{r} {(c1-c0)/k*1e6:8.1f} us  minflt/RT {(f1-f0)/k:6.2f}"
        lines = comm.gather(line)
        if r == 0: print(lines[0]); print("   ", lines[1][lines[1].index("cpu"):])
