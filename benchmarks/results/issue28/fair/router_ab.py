"""The router's credit marks, old against new, alternated in one process (thread CPU ns per op, medians).

    python router_ab.py OLD_CHECKOUT NEW_CHECKOUT

One remote message arrives (``put_many`` + ``Router._mark``) and the reader
takes it (``receive_nowait`` -> ``Router.settle``): the ping-pong path's
pipe and mark work, with each checkout's pipes.py and router.py (the
router's methods run on a stand-in holding only what they use).
"""
import importlib.util, inspect, statistics, sys, time, os, types
from collections import deque
from aiopdbp.wire.message import Message
from aiopdbp.wire.mesp import Kind

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod

trees = {t: (load(f"{t}/aiopdbp/routing/pipes.py", f"p{i}"), load(f"{t}/aiopdbp/routing/router.py", f"r{i}"))
         for i, t in enumerate(sys.argv[1:3])}
fields = ("a", Kind.SHORT, 0, b"x" * 8, 7)
N = 20000

class Book:
    def delivered(self, host, pid, cost): pass
    def taken(self, host, pid, cost): return None

def pingpong(tree):
    pipes, router = trees[tree]
    r = types.SimpleNamespace(_marks={}, book=Book(), window=1 << 20, _due=lambda x: None)
    r._taken = types.MethodType(router.Router._taken, r)
    r.settle = types.MethodType(router.Router.settle, r)
    mark = types.MethodType(router.Router._mark, r)
    p = pipes.Pipe(1024, max_bytes=1 << 20); m = [Message(fields)]
    two = "host" in inspect.signature(pipes.Pipe.put_many).parameters
    t = time.thread_time_ns()
    for _ in range(N):
        p.put_many(m, 1) if two else p.put_many(m)
        mark(p, 1, 7, 80)
        p.receive_nowait()
    return (time.thread_time_ns() - t) / N

old, new = sys.argv[1:3]
a, b = [], []
for _ in range(15):
    a.append(pingpong(old)); b.append(pingpong(new))
print(f"remote 1-item arrive + mark + take + settle: old {statistics.median(a):7.1f} ns  new {statistics.median(b):7.1f} ns  "
      f"({statistics.median(b)/statistics.median(a):.3f}x)  load {os.getloadavg()[0]:.1f}")
