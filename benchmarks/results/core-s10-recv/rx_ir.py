"""The in-process receive half (place_shorts path via inbound.on_data, + the pipe's receive_nowait),
N messages, for instruction counting under callgrind (N=0 vs N=K: instructions per message).
(core-s9-credit's rx_ir.py, its spy put back either way: place_shorts is a method on the base, an
attribute holding the placer's on the new tree.)"""
import asyncio, os
from aiopdbp.runtime.cluster import open_cluster
import numpy as np
PAY = np.frombuffer(b"x" * 8, np.uint8).copy() if os.environ.get("NP") else b"x" * 8
N = int(os.environ.get("N", "2000"))
async def main():
    async with open_cluster(2) as nodes:
      async with nodes[0].process("a") as a, nodes[1].process("b") as b:
          arr = nodes[1].arrivals
          inb = nodes[1]._remote.inbound
          got = []
          own = "place_shorts" in vars(arr)
          orig = arr.place_shorts
          def spy(src, buf):
              got.append((src, bytes(buf))); return orig(src, buf)
          arr.place_shorts = spy
          for _ in range(3):
              await a.send("b", PAY); m = await b.recv()
          if own:
              arr.place_shorts = orig
          else:
              del arr.place_shorts
          src, frame = got[-1]
          take = b._pipe.receive_nowait
          od = inb.on_data
          bufs = [memoryview(bytearray(frame)) for _ in range(N)]
          import gc; gc.collect(); gc.disable()
          for mv in bufs:
              od(src, mv); take()
asyncio.run(main())
