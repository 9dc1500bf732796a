"""Pipe hot paths, old against new, alternated in one process (thread CPU ns per op, medians).

    python pipe_ab2.py OLD_CHECKOUT NEW_CHECKOUT

Loads each checkout's aiopdbp/routing/pipes.py beside the installed aiopdbp
(pipe_ab.py of the fair4 session, plus the turns path; ``put_many`` is given
the sending host where the checkout's takes it).
"""
import importlib.util, inspect, statistics, sys, time, os
from aiopdbp.wire.message import Message
from aiopdbp.wire.mesp import Kind

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod

old = load(sys.argv[1] + "/aiopdbp/routing/pipes.py", "oldpipes")
new = load(sys.argv[2] + "/aiopdbp/routing/pipes.py", "newpipes")
fields = ("a", Kind.SHORT, 0, b"x" * 8, 7)
N = 20000

def put(mod):
    if "host" in inspect.signature(mod.Pipe.put_many).parameters:
        return lambda p, items, host=1: p.put_many(items, host)
    return lambda p, items, host=1: p.put_many(items)

def watch(mod):   # a router-like watch: the next watch is returned, or set as the old router's settle did
    if "host" in inspect.signature(mod.Pipe.put_many).parameters:
        return lambda p, upto, host: 1 << 62
    return lambda p, upto: setattr(p, "watch_at", 1 << 62)

def pingpong_remote(mod):   # one item arrives (put_many of 1), the reader takes it
    p = mod.Pipe(1024, max_bytes=1 << 20); m = [Message(fields)]; pm = put(mod)
    p.on_watch = watch(mod)
    t = time.thread_time_ns()
    for _ in range(N):
        pm(p, m); p.watch_at = p.appended; p.receive_nowait()
    return (time.thread_time_ns() - t) / N

def pingpong_local(mod):    # offer + take
    p = mod.Pipe(1024, max_bytes=1 << 20)
    t = time.thread_time_ns()
    for _ in range(N):
        p.offer(7, 72, fields); p.receive_nowait()
    return (time.thread_time_ns() - t) / N

def backlog_local(mod):     # one sender, pipe holds 100: offer + take
    p = mod.Pipe(1 << 20, max_bytes=1 << 30)
    for _ in range(100): p.offer(7, 72, fields)
    t = time.thread_time_ns()
    for _ in range(N):
        p.offer(7, 72, fields); p.receive_nowait()
    return (time.thread_time_ns() - t) / N

def batch_remote(mod):      # batches of 64 from one sender onto a non-empty pipe, taken one by one
    p = mod.Pipe(1024, max_bytes=1 << 20); b = [Message(fields) for _ in range(64)]; pm = put(mod)
    pm(p, b)
    t = time.thread_time_ns()
    for _ in range(N // 64):
        pm(p, b)
        for _ in range(64): p.receive_nowait()
    return (time.thread_time_ns() - t) / (N // 64 * 64)

def turns_6(mod):           # turns: 6 senders on 2 hosts, each a batch of 8 per round, all taken
    p = mod.Pipe(1024, max_bytes=1 << 20); pm = put(mod)
    p.on_watch = watch(mod)
    batches = [[Message(("a", Kind.SHORT, 0, b"x" * 8, s)) for _ in range(8)] for s in range(6)]
    pm(p, batches[0], 1)
    t = time.thread_time_ns()
    rounds = N // 48
    for _ in range(rounds):
        for s in range(6):
            pm(p, batches[s], 1 + s // 3)
        p.watch_at = 0
        for _ in range(48): p.receive_nowait()
    return (time.thread_time_ns() - t) / (rounds * 48)

for fn in (pingpong_remote, pingpong_local, backlog_local, batch_remote, turns_6):
    a, b = [], []
    for _ in range(15):
        a.append(fn(old)); b.append(fn(new))
    print(f"{fn.__name__:16s} old {statistics.median(a):7.1f} ns  new {statistics.median(b):7.1f} ns  "
          f"({statistics.median(b)/statistics.median(a):.3f}x)  load {os.getloadavg()[0]:.1f}")
