import asyncio, time, sys, os
import aiopdbp
from aiopdbp.runtime.cluster import open_cluster
N = int(os.environ.get("N", "4000"))
SIZE = int(os.environ.get("SIZE", "8"))
async def main():
    async with open_cluster(2) as nodes:
      async with nodes[0].process("a") as a, nodes[1].process("b") as b:
          data = b"x" * SIZE
          async def echo():
              for _ in range(N + 200):
                  m = await b.recv(); await b.send("a", m.data)
          t = asyncio.ensure_future(echo())
          for _ in range(200):
              await a.send("b", data); await a.recv()
          c0 = time.thread_time(); w0 = time.perf_counter()
          for _ in range(N):
              await a.send("b", data); await a.recv()
          c1 = time.thread_time(); w1 = time.perf_counter()
          await t
          print("%.2f" % ((c1 - c0) / N * 1e6))
asyncio.run(main())
