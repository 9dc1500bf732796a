"""Thread CPU per call of the tensor's send and arrival conversions, hot
(timeit, min of 9 x 20000), in whichever tree PYTHONPATH names:

    PYTHONPATH=TREE python calls.py"""
import time
import timeit

import numpy as np
import torch

from aiopdbp import arrays

t = torch.arange(8, dtype=torch.uint8)
arrays.host_array(t)  # the plan for uint8 made, torch bound
tagged = arrays.cpu_tensor_array(t).dtype
land = np.arange(8, dtype=np.uint8).view(tagged)
arrays.arrival(land.copy(), "auto")  # the tagged dtype taken as it is
N = 20000


def per_call(stmt: str, g: dict) -> float:
    return min(timeit.repeat(stmt, globals=g, number=N, repeat=9, timer=time.thread_time)) / N * 1e9


g = {"t": t, "arrays": arrays, "land": land, "torch": torch, "np": np}
for stmt in ["pass", "arrays.cpu_tensor_array(t)", "arrays.arrival(land, 'auto')", "torch.from_numpy(land)",
             "arrays.arrival(land, 'auto'); None", "arrays.cpu_tensor_array(arrays.arrival(land, 'auto'))"]:
    print(f"{stmt:58s} {per_call(stmt, g):7.1f} ns")
