"""The per-hop work a tensor adds, alone: one send's conversion and split header
(GP.send's cpu_tensor_array, the codec's encode_split_array) and one arrival
(the array over a landing buffer, recv's check and arrival, the tensor dropped),
K times, for numpy arrays or torch tensors of SIZE bytes.

    K=.. KIND=numpy|torch SIZE=8 [CG=1] python micro.py
Under callgrind with CG=1 and cgctl importable, only the K iterations are instrumented."""
import os
import numpy as np
import torch
from aiopdbp import arrays
from aiopdbp.wire import codec
from aiopdbp.wire.mesp import Kind

K = int(os.environ.get("K", "1000")); KIND = os.environ.get("KIND", "numpy"); SIZE = int(os.environ.get("SIZE", "8"))
a = np.arange(SIZE, dtype=np.uint8)
p = torch.from_numpy(a) if KIND == "torch" else a
arrays.host_array(torch.arange(2, dtype=torch.uint8))  # tensors seen: plans made, the type tracked
first = arrays.cpu_tensor_array(p) if KIND == "torch" else a
head, _ = codec.encode_split_array(Kind.SHORT, 1, 2, 0, first)
split = codec.split_array(head)
del first


def hop(n):
    cpu_tensor_array, encode, arrival, ndarray, empty, u8 = arrays.cpu_tensor_array, codec.encode_split_array, arrays.arrival, np.ndarray, np.empty, np.uint8
    SHORT, kind = Kind.SHORT, "auto"
    for _ in range(n):
        data = p
        if type(data) is not bytes and type(data) is not ndarray:
            data = cpu_tensor_array(data)
        encode(SHORT, 1, 2, 0, data)
        del data
        x = split.array(empty(SIZE, u8))
        if type(x) is not ndarray or (kind == "auto" and x.dtype.metadata is None):
            out = x
        else:
            out = arrival(x, kind)
        del out, x


hop(200)
assert type(arrays.arrival(split.array(np.empty(SIZE, np.uint8)), "auto")) is type(p)
if os.environ.get("CG"):
    import cgctl
    cgctl.start(); hop(K); cgctl.stop()
else:
    import time
    t0 = time.thread_time(); hop(K); print(f"{KIND} {SIZE} B: {(time.thread_time() - t0) / K * 1e9:.0f} ns per hop")
