"""A plain large ping-pong for callgrind (bench pingpong's aiopdbp row: rank 0 sends a
writable array, rank 1 echoes what it got), nothing wrapped: cg.sh collects only inside
the compiled entry points it names, so the counts are per call of those.

    aiopdbp launch -n 2 cgpp.py SIZE ITERS"""
import asyncio, sys
import numpy as np
import aiopdbp

SIZE = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100


async def main():
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"f-{me}") as gp:
            peer = f"f-{1 - me}"
            await node.lookup(peer, timeout=600)
            a = [np.full(SIZE, k + 1, np.uint8) for k in range(2)]
            for i in range(N):
                if me == 0:
                    await gp.send(peer, a[i & 1], timeout=600.0)
                    msg = await gp.recv(timeout=600.0)
                    assert msg.data[0] == (i & 1) + 1
                else:
                    msg = await gp.recv(timeout=600.0)
                    await gp.send(peer, msg.data, timeout=600.0)
            print(f"rank {me}: {N} round trips of {SIZE} B", flush=True)

asyncio.run(main())
