"""Instructions of each half of a 64 B message in the rate benchmark's shape, in process
(two nodes over the in-process fabric, one task), under callgrind with collection toggled
from here: a burst of B `await gp.send(dest, unit, timeout=300.0)` that do not wait (they
coalesce into a block; the GP's burst yield is kept out of the burst), then the block delivered, then B `await gp.recv(timeout=300.0)` +
the benchmark's `Checker.check`.  HALF=tx collects the send bursts, HALF=rx the receive
loops, HALF=deliver the delivery between them.  Run with N bursts and with 0 (cg.sh):
the difference / (N*B) is instructions per message.  env: B=100 N=bursts SIZE=64 CGLIB;
RXMODE (rx half: ``recv`` as above, ``window`` the bench's loop since s14 -- the messages
gathered, then one ``Checker.check_all`` --, ``nocheck`` the receive alone, ``bare`` the loop and
the check of items taken from the pipe's deque directly)."""
import asyncio, ctypes, gc, os

from operator import attrgetter

from aiopdbp.bench.workload import Checker, Ring
from aiopdbp.wire.message import Message
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.runtime import recvcore, sendcore

# a tree whose extension is older than its source runs that module pure: never count it as compiled
assert bool(os.environ.get("AIOPDBP_NO_EXTENSIONS")) != (sendcore.COMPILED and recvcore.COMPILED), \
    "not the form asked for (an extension not rebuilt?)"

_SOURCE, _DATA = attrgetter("source"), attrgetter("data")
B = int(os.environ.get("B", "100")); N = int(os.environ.get("N", "50"))
SIZE = int(os.environ.get("SIZE", "64")); HALF = os.environ.get("HALF", "tx")
RXMODE = os.environ.get("RXMODE", "recv")   # rx: recv + check; nocheck: recv alone; bare: check alone
toggle = ctypes.CDLL(os.environ.get("CGLIB", "/tmp/rate16/libcgtoggle.so")).cg_toggle
tx, rx, dl = (toggle if HALF == "tx" else None), (toggle if HALF == "rx" else None), \
    (toggle if HALF == "deliver" else None)


async def main():
    ring = Ring(SIZE, 64)
    units, p = ring.units, ring.count
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            checker = Checker(ring, "x")
            send, recv, check = a.send, b.recv, checker.check
            pipe = b._pipe
            i = 0
            for warm in (True, False):
                gc.collect(); gc.disable()
                for _ in range(20 if warm else N):
                    a._path.burst = 1 << 30  # no yield inside a burst: the delivery stays out of tx
                    if tx and not warm: tx()
                    for _ in range(B):
                        await send("b", units[i % p], timeout=300.0)
                        i += 1
                    if tx and not warm: tx()
                    if dl and not warm: dl()
                    while len(pipe) < B:
                        await asyncio.sleep(0)
                    if dl and not warm: dl()
                    if rx and not warm: rx()
                    if RXMODE == "recv":
                        for _ in range(B):
                            msg = await recv(timeout=300.0)
                            check(msg.source, msg.data)
                    elif RXMODE == "window":     # recv, the window's check at once (the bench's loop since s14)
                        got = []
                        for _ in range(B):
                            msg = await recv(timeout=300.0)
                            if not isinstance(msg, Message):
                                raise RuntimeError("not a message")
                            got.append(msg)
                        checker.check_all(list(map(_SOURCE, got)), list(map(_DATA, got)))
                    elif RXMODE == "nocheck":    # the receive alone
                        for _ in range(B):
                            msg = await recv(timeout=300.0)
                    else:                        # "bare": the loop and the check, the item from the pipe's deque
                        popleft = pipe._items.popleft
                        for _ in range(B):
                            msg = popleft()
                            check(msg.source, msg.data)
                        pipe.taken += B
                    if rx and not warm: rx()
                gc.enable()
            assert not checker.errors, checker.errors
            st = nodes[0].stats().links[1]
            print(f"lone {st.lone} blocks {st.blocks} cdus {st.cdus}")

asyncio.run(main())
