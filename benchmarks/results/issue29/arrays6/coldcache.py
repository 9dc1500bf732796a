"""Does a 64 KiB copy between torch calls make them dearer (their code and data evicted)?
Thread CPU per iteration, min of 9 x 5000: copy(SIZE) alone, copy + torch.from_numpy + t.numpy(),
torch.from_numpy + t.numpy() alone; the difference is the calls' cost in that context (ns)."""
import sys, time, timeit
import numpy as np, torch
g = {"np": np, "torch": torch}
for size in (8, 4096, 65536, 262144):
    g["src"] = np.ones(size, np.uint8); g["dst"] = np.empty(size, np.uint8)
    g["a"] = np.ones(size, np.uint8); g["t"] = torch.from_numpy(np.ones(size, np.uint8))
    def m(stmt):
        return min(timeit.Timer(stmt, globals=g, timer=time.thread_time).repeat(9, 5000)) / 5000 * 1e9
    copy = m("np.copyto(dst, src); np.copyto(src, dst)")
    both = m("np.copyto(dst, src); np.copyto(src, dst); torch.from_numpy(a); t.numpy()")
    calls = m("torch.from_numpy(a); t.numpy()")
    print(f"{size:7d} B: copies {copy:8.0f}  copies+calls {both:8.0f}  calls in that context {both-copy:6.0f}  calls alone {calls:6.0f}")
