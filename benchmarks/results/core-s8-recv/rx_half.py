"""The receive half of one 8 B message, in process: ``inbound.on_data`` of a real
lone frame (captured from node 0's third send: ``bytes``, or with NP=1 the uint8
array the pingpong bench sends) + the GP pipe's ``receive_nowait``, on node 1 of
an ``open_cluster(2)``; thread CPU per message, median of R runs of N, and the
Python calls per message under cProfile.  V=1 lists the calls.

    NP=1 python rx_half.py    # (PYTHONPATH picks the tree)
"""
import asyncio, time, os, cProfile, pstats, statistics
from aiopdbp.runtime.cluster import open_cluster
import numpy as np
PAY = np.frombuffer(b"x" * 8, np.uint8).copy() if os.environ.get("NP") else b"x" * 8
N = int(os.environ.get("N", "20000")); R = int(os.environ.get("R", "7"))
async def main():
    async with open_cluster(2) as nodes:
      async with nodes[0].process("a") as a, nodes[1].process("b") as b:
          inb = nodes[1]._remote.inbound
          arr = nodes[1].arrivals  # (spied there: a transport may call inbound.on_data bound at its start)
          got = []
          orig = arr.place_shorts
          def spy(src, buf):
              got.append((src, bytes(buf))); return orig(src, buf)
          arr.place_shorts = spy
          for _ in range(3):
              await a.send("b", PAY); m = await b.recv()
          del arr.place_shorts
          src, frame = got[-1]; print("frame", frame.hex())
          pipe = b._pipe
          on_data = inb.on_data
          take = pipe.receive_nowait
          for _ in range(1000):
              on_data(src, memoryview(bytearray(frame))); take()
          res = []
          for _ in range(R):
              bufs = [memoryview(bytearray(frame)) for _ in range(N)]
              t0 = time.thread_time()
              for mv in bufs:
                  on_data(src, mv); take()
              res.append((time.thread_time() - t0) / N * 1e6)
          await asyncio.sleep(0.01)
          bufs = [memoryview(bytearray(frame)) for _ in range(N)]
          pr = cProfile.Profile(); pr.enable()
          for mv in bufs:
              on_data(src, mv); take()
          pr.disable()
          st = pstats.Stats(pr)
          ours = sum(r[1] for (f, l, fn), r in st.stats.items() if "/aiopdbp/" in f)
          print("rx us/msg median %.3f (%s) | calls/msg: aiopdbp %.2f all %.2f" % (
              statistics.median(res), " ".join("%.3f" % x for x in res), ours / N, st.total_calls / N))
          if os.environ.get("V"):
              rows = sorted(((r[1] / N, os.path.basename(f) + ":" + fn) for (f, l, fn), r in st.stats.items()), reverse=True)
              for r in rows: print("  %.2f %s" % r)
asyncio.run(main())
