# instructions of N loops of `m.source; m.data` on a Message (run with N=0 and N=10000 under
# callgrind --collect-atstart=no; the difference / N; prefix AIOPDBP_NO_EXTENSIONS=1 for the property)
import ctypes, os
from aiopdbp.wire.message import Message
t = ctypes.CDLL("/tmp/rate16/libcgtoggle.so").cg_toggle
m = Message(("a", 1, 3, b"xy", 7))
def f(m, n):
    for _ in range(n):
        m.source; m.data
f(m, 1000)
N = int(os.environ.get("N", "10000"))
t(); f(m, N); t()
