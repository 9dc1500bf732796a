"""Rank 1 raises inside its node while rank 0 waits for a message forever."""
import asyncio

import aiopdbp


async def main() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process(f"g{node.rank}") as gp:
            if node.rank == 1:
                await node.lookup("g0", timeout=30)
                raise ValueError("boom from rank 1")
            await gp.recv()  # never comes: only the abort ends this rank


aiopdbp.run(main())
