"""The first program: a camera GP sends a greeting and a stack of frames to a
detector GP, which answers with the mean of each frame.  Runs as one process
(``python first.py``) and unchanged on two ranks (``aiopdbp launch -n 2 first.py``)."""
import asyncio

import numpy as np

import aiopdbp


async def camera(node: aiopdbp.Node) -> None:
    async with node.process("camera") as cam:
        await cam.send("detector", b"hello", com=1)  # waits until "detector" exists
        frames = np.arange(16 * 48 * 64, dtype=np.uint8).reshape(16, 48, 64)
        await cam.send_stream("detector", frames)    # 48 KiB: returns once sent
        reply = await cam.recv()                     # a Message: .source .com .data
        print("camera got", len(reply.data), "means from", reply.source)


async def detector(node: aiopdbp.Node) -> None:
    async with node.process("detector") as det:
        hello = await det.recv()                     # the Message, in arrival order
        stream = await det.recv()                    # then the IncomingStream
        frames = await stream.read()                 # ndarray: sender's dtype, shape
        await det.send("camera", frames.mean(axis=(1, 2)))
        print("detector got", hello.data, frames.shape, frames.dtype)


async def main() -> None:
    async with aiopdbp.open_node() as node, asyncio.TaskGroup() as tg:
        if node.rank == 0:
            tg.create_task(camera(node))
        if node.rank == node.size - 1:
            tg.create_task(detector(node))


aiopdbp.run(main())
