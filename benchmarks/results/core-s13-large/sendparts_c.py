"""Where the owned send's time goes, compiled form: stamps around the Python-level calls."""
import time, os
import numpy as np
import aiopdbp
from aiopdbp.routing import router as rt
from aiopdbp.runtime import sending

T = {}
ns = time.perf_counter_ns
mark = {}
o_so = rt.Router.send_owned
def send_owned(self, *a):
    t = ns(); mark["so"] = t
    out = o_so(self, *a)
    T.setdefault("router.send_owned (link.owned in it)", []).append(ns() - t)
    return out
rt.Router.send_owned = send_owned

async def main():
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"p{me}") as gp:
            peer = f"p{1-me}"
            await node.lookup(peer, timeout=30)
            link = node._remote.credit.link(1 - me)
            o_ow = link.owned
            def owned(*a):
                t = ns(); out = o_ow(*a); T.setdefault("link.owned", []).append(ns() - t); return out
            link.owned = owned
            lane = link.sender._lane if hasattr(link.sender, "_lane") else None
            for size in (65536, 1 << 20):
                T.clear(); full = []; pre = []
                pl = [np.full(size, k, np.uint8) for k in range(2)]
                for i in range(300):
                    if me == 0:
                        t = ns(); await gp.send(peer, pl[i & 1]); full.append(ns() - t); pre.append(mark["so"] - t)
                        m = await gp.recv()
                    else:
                        m = await gp.recv(); t = ns(); await gp.send(peer, m.data); full.append(ns() - t); pre.append(mark["so"] - t)
                if me == 0:
                    print(size, "load", os.getloadavg()[0])
                    print("  gp.send total (until sent) med %.2f us" % (np.median(full[30:]) / 1e3))
                    print("  gp.send called -> router.send_owned entered med %.2f us min %.2f" % (np.median(pre[30:]) / 1e3, min(pre)/1e3))
                    for k, v in T.items():
                        print("  %-20s n=%d med %.2f us min %.2f" % (k, len(v), np.median(v[30:]) / 1e3, min(v) / 1e3))
aiopdbp.run(main())
