"""Does a large copy make the Python after it slower?  (the 1 MiB hop's size-dependent stages)

    python benchmarks/results/large6/cold_python.py

Times a fixed piece of Python (a small class's methods, dict lookups, a deque:
about what one stage of a hop does) right after copying SIZE bytes between
two warm numpy buffers, for SIZE = 0, 64 KiB, 1 MiB, 4 MiB; medians of 2,000.
The copy itself is outside the timed span.
"""
import collections, os, statistics, time
import numpy as np

class Stage:
    def __init__(self) -> None:
        self.d = {i: i for i in range(64)}; self.q: collections.deque[int] = collections.deque()
    def step(self, k: int) -> int:
        self.q.append(k); v = self.d.get(k & 63, 0); self.q.popleft(); return v + self.inner(k)
    def inner(self, k: int) -> int:
        return len(self.d) + (k & 1)

def work(s: Stage) -> int:
    t = 0
    for k in range(30):
        t += s.step(k)
    return t

ns = time.perf_counter_ns
s = Stage()
print("load", os.getloadavg())
print("| bytes copied before | Python after (us, median of 2000) |")
print("|---|---|")
for size in (0, 65536, 1 << 20, 4 << 20):
    a = np.ones(max(size, 1), np.uint8); b = np.empty_like(a)
    out = []
    for i in range(2200):
        if size:
            np.copyto(b, a)
        t0 = ns(); work(s); t1 = ns()
        if i >= 200:
            out.append((t1 - t0) / 1e3)
    print(f"| {size} | {statistics.median(out):.2f} |")
