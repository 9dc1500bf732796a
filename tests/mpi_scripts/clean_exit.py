"""A 3-rank program that passes a Barrier 3 times, exchanges halos once, and
returns without closing anything (issue 19 item 2: a clean exit every time).

Modes (argv[1]):
  process  -- the GP is ``async with node.process(...)``: freed on exit
  register -- the GP comes from ``node.register`` and is never freed: the
              node cleans up what it owns when it closes
"""
import sys

import aiopdbp
from aiopdbp import Barrier, Neighbours


async def work(node: aiopdbp.Node, gp: aiopdbp.GP) -> None:
    names = [f"w{r}" for r in range(node.size)]
    bar = Barrier(gp, "all", names)
    for _ in range(3):
        await bar.wait()
    left, right = names[(node.rank - 1) % node.size], names[(node.rank + 1) % node.size]
    nb = Neighbours(gp, "ring", sorted({left, right}))
    await nb.exchange({left: b"to the left", right: b"to the right"})


async def main(mode: str) -> None:
    async with aiopdbp.open_node() as node:
        if mode == "process":
            async with node.process(f"w{node.rank}") as gp:
                await work(node, gp)
        else:
            gp = await node.register(f"w{node.rank}", bind=True)
            await work(node, gp)
    print("done", flush=True)


aiopdbp.run(main(sys.argv[1]))
