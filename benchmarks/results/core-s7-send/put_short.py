"""The block writer's share of sending one 8 B message: ``BlockWriter.put_short``
making a lone frame (what ``LinkSender.short`` posts), thread CPU per call,
median of R runs of N; NP=1 (default) the uint8 array the pingpong bench
sends, NP=0 ``bytes``.  Prints which form runs (AIOPDBP_NO_EXTENSIONS=1: pure).

    PYTHONPATH=TREE python put_short.py
"""
import os, statistics, time
import numpy as np
from aiopdbp.wire import core
from aiopdbp.wire.mesp import DEFAULT_LIMITS
from aiopdbp.wire.payload import encode_payload
N = int(os.environ.get("N", "200000")); R = int(os.environ.get("R", "7"))
PAY = np.frombuffer(b"x" * 8, np.uint8).copy() if os.environ.get("NP", "1") == "1" else b"x" * 8
encode_payload(PAY, False, DEFAULT_LIMITS)  # the first send checks its dtype and shape
w = core.BlockWriter(1 << 16)
put = w.put_short
frame = put(3, 1, 0, 0, PAY, b"", True)
assert frame is not None
res = []
for _ in range(R):
    t0 = time.thread_time()
    for _ in range(N):
        put(3, 1, 0, 0, PAY, b"", True)
    res.append((time.thread_time() - t0) / N * 1e9)
print("compiled" if core.COMPILED else "pure", type(PAY).__name__, "frame", frame.hex(),
      "ns/call median %.0f (%s)" % (statistics.median(res), " ".join("%.0f" % x for x in res)))
