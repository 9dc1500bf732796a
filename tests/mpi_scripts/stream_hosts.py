"""Streams between ranks 1 and 2 of a 4-rank job involve only those two hosts.

Every GP registers and looks up every other; rank 0 then takes a snapshot of
its message counters (``node.stats().messages_received/sent``), tells g1
and g2 to go, and waits for g2's "done".  g1 sends g2 50 short streams (8 in
flight) and one of 4 MiB; g2 checks each and answers "done".  Rank 0 prints
what it received from and sent to ranks 1 and 2 in between, as one JSON line;
then it lets g1 and g2 leave (their release and free are table updates).
"""
import asyncio
import json
import os

import numpy as np

import aiopdbp


def delta(after: dict[int, dict[str, int]], before: dict[int, dict[str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for h in (1, 2):
        a, b = after.get(h, {}), before.get(h, {})
        d = {k: a[k] - b.get(k, 0) for k in a if a[k] != b.get(k, 0)}
        out[str(h)] = d
    return out


async def main() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process(f"g{node.rank}") as gp:
            for r in range(node.size):
                await node.lookup(f"g{r}", timeout=30)
            if node.rank == 0:
                # Rank 0 sequences every table update (each GP is registered and
                # bound in one) and sends the broadcasts and replies as it does:
                # once it knows every name, that traffic is counted already.
                before = node.stats()
                await gp.send("g1", b"go")
                await gp.send("g2", b"go")
                done = await gp.recv()
                after = node.stats()
                row = {"done": done.data.decode(),
                       "received": delta(after.messages_received, before.messages_received),
                       "sent": delta(after.messages_sent, before.messages_sent)}
                os.write(1, f"RESULT {json.dumps(row)}\n".encode())
                for r in range(1, node.size):  # they leave (free their GPs) only now
                    await gp.send(f"g{r}", b"bye")
            elif node.rank == 1:
                await gp.recv()
                sem = asyncio.Semaphore(8)

                async def one(i: int) -> None:
                    async with sem:
                        await gp.send_stream("g2", np.full(1024, i, dtype=np.int32))
                await asyncio.gather(*(one(i) for i in range(50)))
                await gp.send_stream("g2", np.arange(1 << 20, dtype=np.int32))
                await gp.recv()
            elif node.rank == 2:
                # g0's "go" races g1's first streams (g1 starts on its own "go"): take it wherever it comes
                seen = []
                go = streams = 0
                while go + streams < 52:
                    stream = await gp.recv()
                    if isinstance(stream, aiopdbp.Message):
                        assert stream.data == b"go", stream
                        go += 1
                        continue
                    streams += 1
                    data = await stream.read()
                    if data.size == 1024:
                        assert (data == data[0]).all()
                        seen.append(int(data[0]))
                    else:
                        assert (data == np.arange(1 << 20, dtype=np.int32)).all()
                ok = sorted(seen) == list(range(50))
                await gp.send("g0", b"ok" if ok else b"corrupt")
                await gp.recv()
            else:  # rank 3 stays until rank 0 is done: a freed name fails others' lookups
                await gp.recv()
            await asyncio.sleep(0)


aiopdbp.run(main())
