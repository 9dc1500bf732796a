"""A run of read-only (shared) sends from rank 0 to rank 1: time per message and engine spins per message on each rank."""
import asyncio, os, time
import numpy as np
import aiopdbp
SIZE = int(os.environ.get("SIZE", "65536")); N = int(os.environ.get("N", "2000")); RO = os.environ.get("RO", "1") == "1"

async def main():
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"st-{me}") as gp:
            peer = f"st-{1 - me}"
            await node.lookup(peer, timeout=30)
            pay = np.frombuffer(bytes(SIZE), np.uint8) if RO else np.ones(SIZE, np.uint8)
            res = []
            for rep in range(3):
                sp0 = node.stats().transport.get("spins", 0)
                t = time.perf_counter()
                if me == 0:
                    for i in range(N):
                        await gp.send(peer, pay)
                    await gp.recv()
                else:
                    for i in range(N):
                        await gp.recv()
                    await gp.send(peer, b"ok")
                dt = (time.perf_counter() - t) / N * 1e6
                res.append((dt, (node.stats().transport.get("spins", 0) - sp0) / N))
            from mpi4py import MPI
            outs = MPI.COMM_WORLD.allgather(res)
            if me == 0:
                print(f"size {SIZE} ro {RO} per message us {[round(a, 2) for a, _ in outs[0]]}  spins/msg r0 {[round(b, 3) for _, b in outs[0]]} r1 {[round(b, 3) for _, b in outs[1]]}  load {os.getloadavg()[0]:.1f}")

aiopdbp.run(main())
