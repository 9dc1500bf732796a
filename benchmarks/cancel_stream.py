"""A remote stream cancelled mid-way: how soon does its receiver know?

Rank 0 streams a large read-only array to rank 1 in 1 MiB segments; once the
receiver has read ``--after`` segments it says so, rank 0 cancels its
``send_stream`` and prints when; rank 1 prints when its ``read`` loop got
the ``StreamError`` and how many segments still arrived after the cancel.
Used by ``benchmarks/faults.py``.
"""
import asyncio
import sys
import time

import numpy as np

import aiopdbp

SEG = 1 << 20


async def main(after: int) -> None:
    async with aiopdbp.open_node() as node, asyncio.TaskGroup() as tg:
        if node.rank == 0:
            async def send() -> None:
                async with node.process("snd") as snd:
                    data = np.zeros(1 << 30, dtype=np.uint8)
                    data.flags.writeable = False
                    task = asyncio.create_task(snd.send_stream("rcv", data, segment_size=SEG))
                    await snd.recv()                    # "read enough"
                    t = time.time()
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    print(f"CANCEL {t:.6f}", flush=True)
                    await snd.recv()                    # the receiver is done
            tg.create_task(send())
        if node.rank == node.size - 1:
            async def receive() -> None:
                async with node.process("rcv") as rcv:
                    stream = await rcv.recv()
                    n = 0
                    try:
                        async for _ in stream:
                            n += 1
                            if n == after:
                                await rcv.send("snd", b"enough")
                    except aiopdbp.StreamError as exc:
                        print(f"ERROR {time.time():.6f} segments {n} total, {n - after} after the "
                              f"cancel request: {exc}", flush=True)
                    await rcv.send("snd", b"done")
            tg.create_task(receive())


aiopdbp.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
