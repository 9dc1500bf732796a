"""GP 'dst' (rank 1) leaves its block in the middle of a stream from GP 'src'
(rank 0) without an error: src's send_stream raises BrokenResourceError, a
consequence of rank 1 that rank 1 never reports, so rank 0 fails the job."""
import asyncio

import numpy as np

import aiopdbp


async def src(node: aiopdbp.Node) -> None:
    async with node.process("src") as gp:
        async def chunks():   # more than the stream window: dst leaves before the end
            for j in range(64):
                yield np.full(1 << 20, j, np.uint8)
                await asyncio.sleep(0)
        await gp.send_stream("dst", chunks(), timeout=60)


async def dst(node: aiopdbp.Node) -> None:
    async with node.process("dst") as gp:
        stream = await gp.recv(timeout=60)
        async for _ in stream:
            return   # leaves after the first segment, with no error


async def main() -> None:
    async with aiopdbp.open_node() as node:
        await (src(node) if node.rank == 0 else dst(node))


aiopdbp.run(main())
