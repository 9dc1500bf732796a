"""One process, no MPI: does a 64 KiB process_vm_readv (MPICH's CMA copy) make the next
torch.from_numpy slow, as it is right after a 64 KiB message lands?  Per trial: an interlude
(none, a numpy 64 KiB copy, or process_vm_readv of 64 KiB from a child process), then
torch.from_numpy of a fixed array, twice; median wall ns of each call.

  python cmacold.py [TRIALS] [SIZE]
"""
import ctypes, os, sys, time
import numpy as np, torch

TRIALS = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
SIZE = int(sys.argv[2]) if len(sys.argv) > 2 else 65536
ns = time.perf_counter_ns
libc = ctypes.CDLL(None, use_errno=True)

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

src = np.ones(SIZE, np.uint8); dst = np.empty(SIZE, np.uint8)
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # the child keeps src mapped and waits
    os.close(w); os.read(r, 1); os._exit(0)
os.close(r)
local = iovec(dst.ctypes.data, SIZE); remote = iovec(src.ctypes.data, SIZE)

def cma():
    n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    assert n == SIZE, ctypes.get_errno()

fixed = np.ones(8, np.uint8); fn = torch.from_numpy
modes = {"none": lambda: None, "numpy copy": lambda: np.copyto(dst, src), "process_vm_readv": cma,
         "fresh np.empty + process_vm_readv": None}
res = {m: ([], []) for m in modes}
for i in range(TRIALS):
    for m, f in modes.items():
        if f is None:
            d = np.empty(SIZE, np.uint8)
            n = libc.process_vm_readv(pid, ctypes.byref(iovec(d.ctypes.data, SIZE)), 1, ctypes.byref(remote), 1, 0)
        else:
            f()
        t0 = ns(); x = fn(fixed); t1 = ns(); y = fn(fixed); t2 = ns()
        res[m][0].append(t1 - t0); res[m][1].append(t2 - t1)
        del x, y
os.write(w, b"x"); os.waitpid(pid, 0)
print(f"SIZE {SIZE}, {TRIALS} trials: torch.from_numpy wall ns, median (p75)")
for m, (a, b) in res.items():
    print(f"  after {m:34s} 1st {np.median(a):7.0f} ({np.percentile(a, 75):7.0f})   2nd {np.median(b):7.0f} ({np.percentile(b, 75):7.0f})")
