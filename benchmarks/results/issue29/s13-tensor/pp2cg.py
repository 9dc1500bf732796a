"""2-rank ping-pong (s12's pp2.py, its loop as `bench pingpong` has it) under callgrind,
instrumented around the measured loop only (cgctl), the collector off in the loop:
    mpiexec -n 2 valgrind --tool=callgrind --instr-atstart=no ... python pp2cg.py KIND SIZE N
Each rank's count includes its waits (the event loop's polls): read the per-function
diffs (cgdiff.py) for what the payload adds, not the totals alone."""
import asyncio, gc, os, sys
import numpy as np
from aiopdbp.runtime import open_node

KIND, SIZE, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
WARM = 100
if KIND == "torch":
    import torch  # (before the node: its import under valgrind outlasts a liveness timeout)


async def main():
    async with open_node(host_timeout=600.0) as node:
        rank = node.rank
        async with node.process(f"g{rank}") as gp:
            peer = f"g{1-rank}"
            await node.lookup(peer, timeout=60)
            arr = np.frombuffer(bytearray(np.arange(SIZE, dtype=np.uint8).tobytes()), dtype=np.uint8)
            if KIND == "torch":
                import torch
                p = torch.from_numpy(arr)
            else:
                p = arr

            async def rts(n):
                for _ in range(n):
                    if rank == 0:
                        await gp.send(peer, p)
                        m = await gp.recv()
                    else:
                        m = await gp.recv()
                        await gp.send(peer, m.data)
                assert type(m.data) is type(p)

            await rts(WARM)
            gc.collect()
            gc.disable()
            import cgctl
            cgctl.start()
            await rts(N)
            cgctl.stop()
            gc.enable()
            if rank == 0:
                await gp.send(peer, b"end"); await gp.recv()
            else:
                await gp.recv(); await gp.send(peer, b"end")

asyncio.run(main())
