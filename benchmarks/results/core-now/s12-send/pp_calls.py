"""Python calls per 8 B round trip, in process: pp_ir.py's loop (GP "a" sends 8 B to "b" and
waits for its echo, both ranks' work in this one process) under sys.setprofile, counting the
profile's "call" events (Python frames: aiopdbp's, asyncio's, this script's) and "c_call" events
(C functions called from a Python frame: builtins and compiled methods) over N round trips.
Deterministic for a given tree and form.  env: N (round trips)."""
import asyncio, collections, os, sys

from aiopdbp.runtime.cluster import open_cluster

N = int(os.environ.get("N", "500"))
calls = collections.Counter()


def prof(frame, event, arg):
    if event == "call":
        calls["py"] += 1
        if "aiopdbp" in frame.f_code.co_filename:
            calls["py aiopdbp"] += 1
    elif event == "c_call":
        calls["c"] += 1


async def main():
    payload = b"x" * 8
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            async def echo(n):
                for _ in range(n):
                    m = await b.recv(timeout=300.0)
                    await b.send("a", m.data, timeout=300.0)
            t = asyncio.create_task(echo(200 + N))
            for warm in (True, False):
                if not warm:
                    sys.setprofile(prof)
                for _ in range(200 if warm else N):
                    await a.send("b", payload, timeout=300.0)
                    m = await a.recv(timeout=300.0)
                    assert m.data == payload
                if not warm:
                    sys.setprofile(None)
            await t
    print(" ".join(f"{k}/RT {v / N:.1f}" for k, v in sorted(calls.items())))

asyncio.run(main())
