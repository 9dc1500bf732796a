"""A stream of small segments to another host: its window is not paced by credit.

Rank 0's GP sends rank 1's one stream of 2,000 segments of 64 B (an
iterable of ``bytes``, ``segment_size=64``); rank 1 iterates it, checks
every segment and its order, and prints one JSON line: whether the data was
right, and the stream credit messages rank 1 sent rank 0 meanwhile.
"""
import json
import os

import aiopdbp

SEGMENTS, SIZE = 2000, 64


async def main() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process(f"g{node.rank}") as gp:
            for r in range(node.size):
                await node.lookup(f"g{r}", timeout=30)
            if node.rank == 0:
                segs = (bytes([i % 251]) * SIZE for i in range(SEGMENTS))
                sent = await gp.send_stream("g1", segs, segment_size=SIZE)
                assert sent == SEGMENTS * SIZE, sent
                await gp.recv()   # rank 1 has counted: both may leave
            else:
                before = node.stats().messages_sent.get(0, {}).get("StreamCreditMsg", 0)
                stream = await gp.recv()
                ok, n = True, 0
                async for seg in stream:
                    ok = ok and bytes(seg) == bytes([n % 251]) * SIZE
                    n += 1
                credits = node.stats().messages_sent.get(0, {}).get("StreamCreditMsg", 0) - before
                row = {"ok": ok and n == SEGMENTS, "credit_msgs": credits}
                os.write(1, f"RESULT {json.dumps(row)}\n".encode())
                await gp.send("g0", b"bye")


aiopdbp.run(main())
