"""Instructions per 8 B round trip, in process (two nodes over the in-process fabric): GP "a"
sends 8 B to "b" and waits for its echo, N times, with callgrind's collection on only around
those N (toggled from here through ctypes, as halves_ir.py).  Every receive here waits: the
path the pingpong takes.  env: N (round trips), SIZE (8), CGLIB."""
import asyncio, ctypes, gc, os

from aiopdbp.runtime.cluster import open_cluster

N = int(os.environ.get("N", "1000")); SIZE = int(os.environ.get("SIZE", "8"))
toggle = ctypes.CDLL(os.environ.get("CGLIB", "/tmp/send14/libcgtoggle.so")).cg_toggle


async def main():
    payload = b"x" * SIZE
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
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
