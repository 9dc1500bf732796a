"""Timeline of a large one-way hop: enter/exit stamps of chosen functions on both ranks (one clock).

  aiopdbp launch -n 2 trace.py   (SIZE, N, RO=1 read-only payload, TORCH=1)
"""
import asyncio, importlib, inspect, os, time
import numpy as np
import aiopdbp
ns = time.perf_counter_ns
EV: list = []

SPEC = os.environ.get("FUNCS", ",".join([
    "aiopdbp.runtime.process:GP._send", "aiopdbp.runtime.payloads:ownable@aiopdbp.runtime.process",
    "aiopdbp.runtime.payloads:snapshot@aiopdbp.runtime.process",
    "aiopdbp.routing.router:Router.send_owned", "aiopdbp.routing.router:Router.try_send",
    "aiopdbp.hosts.link:HostLink.put_to", "aiopdbp.hosts.link:HostLink.offer",
    "aiopdbp.wire.codec:encode_split_array@aiopdbp.hosts.sender",
    "aiopdbp.transport.progress:ProgressEngine.post_bulk_send",
    "aiopdbp.transport.progress:ProgressEngine.step",
    "aiopdbp.transport.progress:ProgressEngine._complete_sends",
    "aiopdbp.transport.receives:Receives.receive",
    "aiopdbp.transport.receives:Receives.post_bulk",
    "aiopdbp.transport.recvcache:RecvBufferCache.alloc",
    "aiopdbp.hosts.inbound:Inbound.on_data", "aiopdbp.hosts.inbound:Inbound._land",
    "aiopdbp.hosts.inbound:Inbound.admit", "aiopdbp.hosts.inbound:Inbound._landed",
    "aiopdbp.hosts.inbound:Inbound._carried",
    "aiopdbp.routing.arrivals:Arrivals.place_messages",
    "aiopdbp.routing.pipes:Pipe.receive_nowait",
    "aiopdbp.runtime.process:GP.recv",
]))

def wrap():
    for spec in SPEC.split(","):
        where, _, into = spec.partition("@")
        mod, _, attr = where.partition(":")
        m = importlib.import_module(mod)
        owner, name = (m, attr) if "." not in attr else (getattr(m, attr.split(".")[0]), attr.split(".")[1])
        f = getattr(owner, name)
        tag = attr.split(".")[-1]
        if isinstance(inspect.getattr_static(owner, name), (staticmethod, classmethod)):
            print("cannot wrap", spec, "(a static or class method)")
            continue
        if asyncio.iscoroutinefunction(f):
            async def w(*a, __f=f, __t=tag, **k):
                EV.append((__t, 0, ns()))
                try:
                    return await __f(*a, **k)
                finally:
                    EV.append((__t, 1, ns()))
        else:
            def w(*a, __f=f, __t=tag, **k):
                EV.append((__t, 0, ns()))
                try:
                    return __f(*a, **k)
                finally:
                    EV.append((__t, 1, ns()))
        try:
            setattr(importlib.import_module(into) if into else owner, name, w)
        except Exception as e:
            print("cannot wrap", spec, e)

async def main():
    SIZE = int(os.environ.get("SIZE", "65536")); N = int(os.environ.get("N", "600"))
    RO = os.environ.get("RO") == "1"
    wrap()
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"t-{me}") as gp:
            peer = f"t-{1 - me}"
            await node.lookup(peer, timeout=30)
            pay = np.frombuffer(bytes(SIZE), np.uint8) if RO else np.ones(SIZE, np.uint8)
            if os.environ.get("TORCH") == "1":
                import torch
                pay = torch.ones(SIZE, dtype=torch.uint8)
            marks = []
            for i in range(N):
                if me == 0:
                    marks.append(("S", ns())); await gp.send(peer, pay); await gp.recv(); marks.append(("R", ns()))
                else:
                    m = await gp.recv(); marks.append(("R", ns())); marks.append(("S", ns()))
                    await gp.send(peer, pay if RO else m.data)
            from mpi4py import MPI
            allev = MPI.COMM_WORLD.gather((marks, EV))
            if me != 0:
                return
            # hop 0->1: from rank0 S[i] to rank1 R[i]; then 1->0: rank1 S[i] to rank0 R[i]
            def times(ms, k): return [t for kk, t in ms if kk == k]
            S0, R0, S1, R1 = times(allev[0][0], "S"), times(allev[0][0], "R"), times(allev[1][0], "S"), times(allev[1][0], "R")
            import bisect, collections
            if os.environ.get("DUMP"):
                i = N // 2
                a = S0[i]; b = R0[i] if len(R0) > i else S0[i] + 10**8
                for r in (0, 1):
                    for tag, kind, t in sorted(allev[r][1], key=lambda e: e[2]):
                        if a <= t <= b and tag not in ("step",) or (a <= t <= b and (t - a) % 1 == 0 and tag == "step" and False):
                            print(f"  r{r} {'>' if kind == 0 else '<'} {tag:20s} {(t - a)/1e3:9.2f}")
                    for k, t in allev[r][0]:
                        if a <= t <= b: print(f"  r{r} MARK {k} {(t - a)/1e3:9.2f}")
            for label, snd, rcv, srank in (("0->1", S0, R1, 0), ("1->0", S1, R0, 1)):
                rows = collections.defaultdict(list)
                tot = []
                for i in range(N // 5, N):
                    a, b = snd[i], rcv[i]
                    tot.append(b - a)
                print(f"hop {label} one way median {np.median(tot)/1e3:.2f} us")
                for r in (0, 1):
                    ev = sorted(allev[r][1], key=lambda e: e[2]); ts = [e[2] for e in ev]
                    agg = collections.defaultdict(lambda: ([], [], []))
                    for i in range(N // 5, N):
                        a, b = snd[i], rcv[i]
                        lo, hi = bisect.bisect_left(ts, a), bisect.bisect_right(ts, b)
                        opened = {}; first = {}; durs = collections.defaultdict(int); cnt = collections.Counter()
                        for tag, kind, t in ev[lo:hi]:
                            if kind == 0:
                                opened.setdefault(tag, []).append(t); first.setdefault(tag, t); cnt[tag] += 1
                            elif opened.get(tag):
                                t0 = opened[tag].pop(); 
                                if not opened[tag]: durs[tag] += t - t0
                        for tag in first:
                            agg[tag][0].append(first[tag] - a); agg[tag][1].append(durs[tag]); agg[tag][2].append(cnt[tag])
                    role = "sender" if r == srank else "receiver"
                    for tag, (o, d, c) in sorted(agg.items(), key=lambda kv: np.median(kv[1][0])):
                        print(f"   r{r} {role:8s} {tag:22s} first at {np.median(o)/1e3:7.2f} us, in it {np.median(d)/1e3:6.2f} us (outermost), calls/hop {np.mean(c):5.2f}, in {len(o)}/{N - N//5} hops")

aiopdbp.run(main())
