"""The GPU program in a PyTorch form: a producer of bfloat16 tensors, a
consumer that computes on them, a sink that wants numpy.  Tensors travel
as tensors (CPU tensors here, by the host path without a copy; a CUDA
tensor would take the device path) and arrive as tensors, with their dtype."""
import asyncio

import torch

import aiopdbp


async def producer(node: aiopdbp.Node) -> None:
    async with node.process("producer") as gp:
        for step in range(3):
            batch = torch.full((4, 8), float(step), dtype=torch.bfloat16)
            await gp.send("consumer", batch)  # a tensor: no pickle, no copy to numpy
            batch.zero_()                     # safe: what was sent is already taken
        tail = torch.arange(16, dtype=torch.bfloat16).reshape(2, 8)
        await gp.send_stream("consumer", tail)
        print("producer sent 3 batches and a stream")


async def consumer(node: aiopdbp.Node) -> None:
    async with node.process("consumer") as gp:
        total = torch.zeros(8, dtype=torch.float32)
        for _ in range(3):
            batch = (await gp.recv()).data    # a torch.bfloat16 tensor
            total += batch.float().sum(dim=0)
        tail = await (await gp.recv()).read()  # the stream, gathered: a tensor too
        print("consumer got", tail.dtype, tuple(tail.shape),
              "total", total.tolist()[:2])
        await gp.send("sink", total)


async def sink(node: aiopdbp.Node) -> None:
    async with node.process("sink") as gp:
        msg = await gp.recv(arrays="numpy")   # this GP wants numpy, whatever was sent
        print("sink got", type(msg.data).__name__, msg.data.dtype, msg.data[:2])


async def main() -> None:
    async with aiopdbp.open_node() as node, asyncio.TaskGroup() as tg:
        if node.rank == 0:
            tg.create_task(producer(node))
            tg.create_task(sink(node))
        if node.rank == node.size - 1:
            tg.create_task(consumer(node))


aiopdbp.run(main())
