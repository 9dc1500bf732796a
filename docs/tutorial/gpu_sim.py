"""GPU generalized processes on the simulated device (runs on any machine;
with CuPy and a GPU, ``device="cupy"`` runs the same code).  An SGP uploads
an array to its device and streams the *device* array to another SGP, which
gets it on its own device, complete; a CPU GP receives numpy."""
import asyncio

import numpy as np

import aiopdbp
from aiopdbp import PType


async def producer(node: aiopdbp.Node) -> None:
    async with node.process("producer", ptype=PType.GPU) as gp:
        backend = node.devices.open().backend      # the simulated backend here
        host = np.arange(12, dtype=np.float32).reshape(3, 4)
        frames = backend.asarray(host, gp.device)  # a device array on gp.device
        await gp.send_stream("consumer", frames)   # staged for you across hosts
        print("producer sent a", type(frames).__name__, frames.shape)


async def consumer(node: aiopdbp.Node) -> None:
    async with node.process("consumer", ptype=PType.GPU) as gp:
        arr = await (await gp.recv()).read()       # a device array on gp.device
        host = arr.get()                           # back to numpy to print it
        print("consumer got a", type(arr).__name__, arr.shape, "sum", float(host.sum()))
        await gp.send("sink", arr)                 # device data to a CPU GP


async def sink(node: aiopdbp.Node) -> None:
    async with node.process("sink") as gp:         # a CPU GP: receives numpy
        msg = await gp.recv()
        print("sink got", type(msg.data).__name__, msg.data.shape)


async def main() -> None:
    async with aiopdbp.open_node(device="sim") as node, asyncio.TaskGroup() as tg:
        if node.rank == 0:
            tg.create_task(producer(node))
            tg.create_task(sink(node))
        if node.rank == node.size - 1:
            tg.create_task(consumer(node))


aiopdbp.run(main())
