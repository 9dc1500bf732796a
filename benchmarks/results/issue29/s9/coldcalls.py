"""What each call on a tensor's path costs cold (after a cache-thrashing interlude) and hot.

  python coldcalls.py [TRIALS] [COPY_KIB] [DICT_READS] [SLEEP_US]
Per call: median ns over TRIALS of one call timed with perf_counter_ns right after the
interlude (a copy of COPY_KIB KiB and a walk over DICT_READS Python dicts: what another process or
a 64 KiB hop leaves behind), and hot (the same call again at once).
"""
import gc, sys, time
import numpy as np, torch
sys.path.insert(0, "/work/wt/tensor11")
from aiopdbp.arrays import arrival, cpu_tensor_array, host_array

TRIALS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
KB = int(sys.argv[2]) if len(sys.argv) > 2 else 128
OBJS = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
ns = time.perf_counter_ns
big = np.ones(KB << 10, np.uint8); big2 = np.empty_like(big)
objs = [dict(a=i) for i in range(OBJS)]

SLEEP = float(sys.argv[4]) * 1e-6 if len(sys.argv) > 4 else 0.0

def thrash():
    if SLEEP:
        time.sleep(SLEEP)  # lets whatever else is runnable have this core (under load: other processes)
    np.copyto(big2, big)
    n = 0
    for o in objs:
        n += o["a"]

a = np.ones(65536, np.uint8)
t = torch.from_numpy(a.copy())
host_array(t)  # plans made
tagged = cpu_tensor_array(t)
arrival(tagged.copy(), "auto")
strided = torch.strided

OPS = {
    "np.frombuffer(a) [baseline]": lambda: np.frombuffer(a, np.uint8),
    "a.view() [baseline]": lambda: a.view(),
    "t.dtype": lambda: t.dtype,
    "t.is_cpu": lambda: t.is_cpu,
    "t.layout": lambda: t.layout,
    "t.requires_grad": lambda: t.requires_grad,
    "t.is_neg()": lambda: t.is_neg(),
    "t.is_contiguous()": lambda: t.is_contiguous(),
    "t.shape": lambda: t.shape,
    "t.data_ptr()": lambda: t.data_ptr(),
    "t.numpy()": lambda: t.numpy(),
    "cpu_tensor_array(t)": lambda: cpu_tensor_array(t),
    "torch.from_numpy(a)": lambda: torch.from_numpy(a),
    "torch.frombuffer(a)": lambda: torch.frombuffer(a, dtype=torch.uint8),
    "arrival(tagged copy)": None,  # needs a fresh array each time: below
    "del tensor(from_numpy)": None,
    "del ndarray [baseline]": None,
}

def measure(name, op):
    cold, hot = [], []
    for _ in range(TRIALS):
        if name == "arrival(tagged copy)":
            x = np.frombuffer(bytearray(65536), tagged.dtype)
            thrash(); t0 = ns(); r = arrival(x, "auto"); t1 = ns(); del r
            x = np.frombuffer(bytearray(65536), tagged.dtype)
            t2 = ns(); r = arrival(x, "auto"); t3 = ns(); del r
        elif name.startswith("del "):
            mk = (lambda: torch.from_numpy(np.empty(65536, np.uint8))) if "tensor" in name else (lambda: np.empty(65536, np.uint8))
            r = mk(); thrash(); t0 = ns(); del r; t1 = ns()
            r = mk(); t2 = ns(); del r; t3 = ns()
        else:
            thrash(); t0 = ns(); r = op(); t1 = ns(); del r
            t2 = ns(); r = op(); t3 = ns(); del r
        cold.append(t1 - t0); hot.append(t3 - t2)
    return np.median(cold), np.median(hot)

gc.disable()
print(f"trials {TRIALS}, interlude: sleep {SLEEP*1e6:g} us, {KB} KiB copy, {OBJS} dict reads; ns per call, median")
print(f"{'call':32s} {'cold':>8s} {'hot':>8s}")
for name, op in OPS.items():
    c, h = measure(name, op)
    print(f"{name:32s} {c:8.0f} {h:8.0f}")
