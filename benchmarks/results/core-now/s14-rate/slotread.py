# the same loop on a plain __slots__ class (member reads: what LOAD_ATTR_SLOT costs)
import ctypes, os
t = ctypes.CDLL("/tmp/rate16/libcgtoggle.so").cg_toggle
class S:
    __slots__ = ("source", "data")
m = S(); m.source = "a"; m.data = b"x"
def f(m, n):
    for _ in range(n):
        m.source; m.data
f(m, 1000)
N = int(os.environ.get("N", "10000"))
t(); f(m, N); t()
