"""A rank whose GP raises; the peers only see consequences.

Modes (argv[1]):
  midstream -- rank 0 streams to "consumer" on rank 1, which raises after 10 segments
  raise     -- rank 1 raises while rank 0 waits in recv()
"""
import sys
import time

import numpy as np

import aiopdbp


async def main(mode: str) -> None:
    async with aiopdbp.open_node() as node:
        if mode == "midstream":
            if node.rank == 0:
                async with node.process("producer") as gp:
                    data = np.zeros(64 << 20, dtype=np.uint8)
                    await gp.send_stream("consumer", data, segment_size=1 << 20)
            else:
                async with node.process("consumer") as gp:
                    stream = await gp.recv()
                    n = 0
                    async for _ in stream:
                        n += 1
                        if n == 10:
                            print(f"raising at {time.time():.6f}", flush=True)
                            raise ValueError("consumer broke at segment 10")
        else:
            async with node.process(f"g{node.rank}") as gp:
                if node.rank == 1:
                    await node.lookup("g0")
                    print(f"raising at {time.time():.6f}", flush=True)
                    raise ValueError("boom from rank 1")
                await gp.recv()


aiopdbp.run(main(sys.argv[1]))
