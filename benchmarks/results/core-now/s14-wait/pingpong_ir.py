"""Instructions per 8 B round trip of an in-process ping-pong whose receives wait (issue 27,
s14-wait): two nodes over the in-process fabric, GP "a" on node 0 sends 8 B to GP "b" on
node 1 and awaits the echo; "b" awaits, then echoes what came.  Each ``await gp.recv()``
finds its pipe empty and waits (the fabric has no driver: the receive parks and the
delivery wakes it), as the 2-rank ping-pong's receive does when its driver does not spin.
Collection (callgrind, toggled from here) covers N measured round trips after 50 warm ones,
garbage collection off.  DRIVE=1: each GP gets a driver (its ``_drive``, as the MPI transport's
engine gives a waiting receive) that yields until its pipe is ready -- the fabric's delivery
runs meanwhile -- so the receive takes what arrived while it drove, never parking: the shape of
the 2-rank ping-pong's wait, without MPI's polling (whose count is timing).
PROFILE=1: no callgrind; the Python calls per round trip instead (cProfile over the measured
round trips: all, and those into aiopdbp).
env: N, CGLIB, LOOP=uvloop|asyncio, DRIVE, PROFILE."""
import asyncio, ctypes, gc, os

from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.runtime import recvcore, sendcore

# a tree whose extension is older than its source runs that module pure: never count it as compiled
assert bool(os.environ.get("AIOPDBP_NO_EXTENSIONS")) != (sendcore.COMPILED and recvcore.COMPILED), \
    "not the form asked for (an extension not rebuilt?)"

N = int(os.environ.get("N", "200"))
if os.environ.get("PROFILE"):
    import cProfile, pstats
    prof = cProfile.Profile()
    _on = [False]

    def toggle():
        _on[0] = not _on[0]
        prof.enable() if _on[0] else prof.disable()
else:
    prof = None
    toggle = ctypes.CDLL(os.environ.get("CGLIB", "/tmp/wait16/libcgtoggle.so")).cg_toggle


async def main():
    payload = [bytes([i]) * 8 for i in range(2)]
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            if os.environ.get("DRIVE"):
                async def drive(ready):
                    while not ready():
                        await asyncio.sleep(0)
                a._drive = b._drive = drive
            async def echo(n):
                for _ in range(n):
                    msg = await b.recv()
                    await b.send("a", msg.data)
            for n, measured in ((50, False), (N, True)):
                gc.collect(); gc.disable()
                t = asyncio.ensure_future(echo(n))
                await asyncio.sleep(0)   # b waits first
                if measured: toggle()
                for i in range(n):
                    await a.send("b", payload[i & 1])
                    msg = await a.recv()
                    assert msg.data == payload[i & 1]
                if measured: toggle()
                await t
                gc.enable()
    if prof is not None:
        st = pstats.Stats(prof).stats
        ours = sum(row[1] for (f, _, _), row in st.items() if f"{os.sep}aiopdbp{os.sep}" in f)
        print(f"calls/RT all {sum(row[1] for row in st.values()) / N:.1f} into aiopdbp {ours / N:.1f}")

if os.environ.get("LOOP", "uvloop") == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
