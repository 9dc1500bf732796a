"""What post_joined's copy costs: the lane's join of an 80 B header and a 64 KiB / 128 KiB payload
(the compiled kernel's post_joined without its Isend: a bytearray and two memcpy, here as
bytearray + slice assignment), best of many runs (the unpreempted cost on a loaded VM).
    python memcpy.py"""
import timeit
import numpy as np

head = bytes(80)
for n in (65536, 131072):
    arr = np.ones(n, np.uint8)
    mv = memoryview(arr).cast("B")

    def join() -> bytearray:
        f = bytearray(80 + n)
        f[:80] = head
        f[80:] = mv
        return f

    best = min(timeit.repeat(join, number=200, repeat=50)) / 200
    print(f"{n} B: join {best * 1e6:.2f} us (best of 50 x 200)")
