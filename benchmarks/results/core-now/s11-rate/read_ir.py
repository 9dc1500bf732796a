"""Instructions per record of the block reader as the receiver runs it (``BlockReader(names,
Message)``, aiopdbp.routing.arrivals): a block of B 64 B short messages from one sender to one GP
(the rate benchmark's block), read N times with callgrind's collection on only around the reads
(toggled through ctypes, as halves_ir.py).  env: B (127), N (200), SIZE (64), CGLIB."""
import ctypes, gc, os

from aiopdbp.wire.core import BlockReader, BlockWriter   # the form that runs
from aiopdbp.wire.mesp import Kind, MsgType
from aiopdbp.wire.message import Message

B = int(os.environ.get("B", "127")); N = int(os.environ.get("N", "200")); SIZE = int(os.environ.get("SIZE", "64"))
toggle = ctypes.CDLL(os.environ.get("CGLIB", "/tmp/rate13/libcgtoggle.so")).cg_toggle

w = BlockWriter(1 << 15)
block = memoryview(bytearray(1 << 16))
w.open(block, int(MsgType.BPS))
for i in range(B):
    assert w.put_short(9, 5, 0, int(Kind.SHORT), bytes([i % 256]) * SIZE, b"", False) is True
frame = bytes(block[:w.close()])
reader = BlockReader({5: "a"}, Message)
(dest, run, nbytes), = reader.read(frame)
assert dest == 9 and len(run) == B and type(run[0]) is Message and run[0].source == "a"
for _ in range(20):
    reader.read(frame)
gc.collect(); gc.disable()
toggle()
for _ in range(N):
    reader.read(frame)
toggle()
