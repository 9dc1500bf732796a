"""Streams: an array cut into segments, data produced over time by a
generator, and the three ways to read (all at once, into your own buffer,
segment by segment)."""
import asyncio

import numpy as np

import aiopdbp


def frames(n: int):
    """A source that produces its chunks over time (a camera, a file reader)."""
    for i in range(n):
        yield np.full((8, 32), i, dtype=np.int32)


async def sender(node: aiopdbp.Node) -> None:
    async with node.process("sender") as gp:
        big = np.arange(1 << 20, dtype=np.float32)     # 4 MiB
        n = await gp.send_stream("receiver", big, segment_size=256 * 1024)
        print("sent", n, "bytes in 256 KiB segments")
        await gp.send_stream("receiver", big)           # read into a reused buffer
        await gp.send_stream("receiver", frames(10))    # a generator: 10 chunks


async def receiver(node: aiopdbp.Node) -> None:
    async with node.process("receiver") as gp:
        first = await (await gp.recv()).read()          # one array: dtype, shape kept
        ok = bool((first == np.arange(1 << 20)).all())
        print("read", first.dtype, first.shape, "ok:", ok)
        buf = np.empty(1 << 20, dtype=np.float32)       # your buffer: no allocation
        await (await gp.recv()).read(out=buf)
        print("read into my buffer, ok:", bool((buf == first).all()))
        stream = await gp.recv()
        print("generator stream, size known up front:", stream.meta.nbytes)
        seen = [int(seg[0, 0]) async for seg in stream]  # segments, in order
        print("segments", seen)


async def main() -> None:
    async with aiopdbp.open_node() as node, asyncio.TaskGroup() as tg:
        if node.rank == 0:
            tg.create_task(sender(node))
        if node.rank == node.size - 1:
            tg.create_task(receiver(node))


aiopdbp.run(main())
