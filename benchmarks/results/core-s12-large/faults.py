"""Per round trip of a large ping-pong (rank 0 sends a writable array, rank 1 echoes what it got:
bench pingpong's aiopdbp row): the receive cache's hits and misses, minor page faults
(getrusage), data and control messages, the link's credit waits and asks -- counts, not times.

    aiopdbp launch -n 2 faults.py [SIZES]"""
import asyncio, resource, sys
import numpy as np
import aiopdbp

SIZES = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "65536,1048576,16777216").split(",")]


def snap(node):
    st = node.stats()
    t = st.transport
    links = list(st.links.values())
    ctl = sum(n for per in st.messages_sent.values() for k, n in per.items() if k != "data")
    return (t.get("recv_cache_hits", 0), t.get("recv_cache_misses", 0), resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
            t.get("bulk_sends", 0) + sum(l.messages for l in links), ctl,
            sum(l.credit_waits for l in links), sum(l.credit_asks for l in links), t.get("bulk_recvs", 0))


async def main():
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"f-{me}") as gp:
            peer = f"f-{1 - me}"
            await node.lookup(peer, timeout=30)
            for size in SIZES:
                a = [np.full(size, k + 1, np.uint8) for k in range(2)]
                n = 200 if size <= (1 << 20) else 30

                async def rts(count):
                    for i in range(count):
                        if me == 0:
                            await gp.send(peer, a[i & 1])
                            msg = await gp.recv()
                        else:
                            msg = await gp.recv()
                            await gp.send(peer, msg.data)

                await rts(20)
                b = snap(node)
                await rts(n)
                e = snap(node)
                d = [(y - x) / n for x, y in zip(b, e)]
                print(f"rank {me} {size:>9} B per round trip: cache hits {d[0]:.2f} misses {d[1]:.2f}, minor faults "
                      f"{d[2]:.1f} ({d[2] * 4096 / size:.2f} per received byte/4 KiB), data msgs {d[3]:.2f}, control {d[4]:.2f}, "
                      f"credit waits {d[5]:.2f} asks {d[6]:.2f}, bulk recvs {d[7]:.2f}", flush=True)

asyncio.run(main())
