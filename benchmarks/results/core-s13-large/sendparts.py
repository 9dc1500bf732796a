"""Where the owned send's time goes, pure form, patched timers."""
import asyncio, time, os, sys
import numpy as np
import aiopdbp
from aiopdbp.transport import kernel
from aiopdbp.hosts import sender as snd
from aiopdbp.wire import codec
from aiopdbp.routing import router as rt

T = {}
ns = time.perf_counter_ns
def wrap(obj, name, key):
    orig = getattr(obj, name)
    def w(*a, **k):
        t = ns(); out = orig(*a, **k); T.setdefault(key, []).append(ns() - t); return out
    setattr(obj, name, w)
wrap(kernel.SendLane, "post_pair", "post_pair")
wrap(kernel, "post_one", "post_one")
wrap(snd, "encode_split_array", "encode_split_array")
wrap(snd.LinkSender, "owned", "link.owned")
wrap(rt.Router, "send_owned", "router.send_owned")
from aiopdbp.runtime import payloads
wrap(payloads, "ownable", "ownable")

async def main():
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"p{me}") as gp:
            peer = f"p{1-me}"
            await node.lookup(peer, timeout=30)
            for size in (65536, 1 << 20):
                T.clear(); full = []
                pl = [np.full(size, k, np.uint8) for k in range(2)]
                for i in range(300):
                    if me == 0:
                        t = ns(); await gp.send(peer, pl[i & 1]); full.append(ns() - t)
                        m = await gp.recv()
                    else:
                        m = await gp.recv(); t = ns(); await gp.send(peer, m.data); full.append(ns() - t)
                if me == 0:
                    print(size, "load", os.getloadavg()[0])
                    print("  gp.send total (until sent) med %.2f us" % (np.median(full[30:]) / 1e3))
                    for k, v in T.items():
                        print("  %-20s n=%d med %.2f us min %.2f" % (k, len(v), np.median(v[30:]) / 1e3, min(v) / 1e3))
asyncio.run(main()) if False else aiopdbp.run(main())
