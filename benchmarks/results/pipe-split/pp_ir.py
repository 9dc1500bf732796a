"""Instructions per 8 B round trip, in process, callgrind's collection on only around the N
measured round trips (core-now/s11-rate/pp_ir.py, with WHERE=local for two GPs on one node:
the pipe's offer).  env: N, SIZE (8), WHERE (remote|local), CGLIB."""
import asyncio, ctypes, gc, os

from aiopdbp.runtime.cluster import open_cluster

N = int(os.environ.get("N", "1000")); SIZE = int(os.environ.get("SIZE", "8"))
WHERE = os.environ.get("WHERE", "remote")
toggle = ctypes.CDLL(os.environ.get("CGLIB", "/tmp/pipe14/libcgtoggle.so")).cg_toggle


async def main():
    payload = b"x" * SIZE
    async with open_cluster(2) as nodes:
        nb = nodes[1] if WHERE == "remote" else nodes[0]
        async with nodes[0].process("a") as a, nb.process("b") as b:
            async def echo(n):
                for _ in range(n):
                    m = await b.recv(timeout=300.0)
                    await b.send("a", m.data, timeout=300.0)
            t = asyncio.create_task(echo(200 + N))
            for warm in (True, False):
                gc.collect(); gc.disable()
                if not warm: toggle()
                for _ in range(200 if warm else N):
                    await a.send("b", payload, timeout=300.0)
                    m = await a.recv(timeout=300.0)
                    assert m.data == payload
                if not warm: toggle()
                gc.enable()
            await t

asyncio.run(main())
