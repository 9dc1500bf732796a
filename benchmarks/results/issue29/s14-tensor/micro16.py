"""Per-call instructions of a tensor's send view and arrival (TensorPaths.view / land), and the
tensor's drop, outside the message path: N calls of each between callgrind's start/stop.

    N=K DTYPE=uint8|float32 PART=view|land|drop valgrind --tool=callgrind --instr-atstart=no python micro16.py

(CG=1 and cgctl importable: instrumentation around the loop only; run N=0 and N=K and subtract.)"""
import gc
import os

import numpy as np
import torch

from aiopdbp import arrays

N = int(os.environ.get("N", "1000"))
DT = os.environ.get("DTYPE", "uint8")
PART = os.environ.get("PART", "view")
t = torch.from_numpy(np.arange(8 // np.dtype(DT).itemsize, dtype=DT))
assert arrays.host_array(t) is not None  # the plan, the tracked type
view, land = arrays.cpu_tensor_view, arrays.landed_arrival
arr = view(t).copy()
assert type(land(arr.copy(), "auto")) is torch.Tensor
arrs = [arr.copy() for _ in range(N)]
tens = [land(a.copy(), "auto") for a in arrs] if PART == "drop" else None
gc.collect()
gc.disable()
if os.environ.get("CG"):
    import cgctl
    cgctl.start()
if PART == "view":
    for _ in range(N):
        view(t)
elif PART == "land":
    for a in arrs:
        land(a, "auto")
else:
    while tens:
        tens.pop()
if os.environ.get("CG"):
    cgctl.stop()
