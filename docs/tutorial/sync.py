"""Barriers and local synchronisation: four workers, spread over the ranks,
meet at a reusable barrier, reduce a value with ``allreduce`` and exchange
halos with their two neighbours on a ring (``Neighbours``: no global step)."""
import asyncio

import aiopdbp

WORKERS = [f"worker-{i}" for i in range(4)]


async def worker(node: aiopdbp.Node, i: int) -> None:
    name = WORKERS[i]
    async with node.process(name) as gp:
        barrier = aiopdbp.Barrier(gp, "all", WORKERS, algorithm="tree", timeout=60)
        async with barrier as bar:
            for _ in range(3):
                await bar.wait()                       # reusable; rounds never mix
            total = await bar.allreduce(i + 1, "sum")  # 1 + 2 + 3 + 4
            left, right = WORKERS[i - 1], WORKERS[(i + 1) % len(WORKERS)]
            async with aiopdbp.Neighbours(gp, "ring", [left, right], timeout=60) as nb:
                got = await nb.exchange({left: f"{name}->left".encode(),
                                         right: f"{name}->right".encode()})
            await bar.wait()                           # nobody leaves early
        print(f"{name}: sum {total}, from {left}: {got[left].decode()},"
              f" from {right}: {got[right].decode()}")


async def main() -> None:
    async with aiopdbp.open_node() as node, asyncio.TaskGroup() as tg:
        for i in range(len(WORKERS)):
            if i % node.size == node.rank:             # each rank owns some workers
                tg.create_task(worker(node, i))


aiopdbp.run(main())
