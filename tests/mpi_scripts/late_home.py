"""A rank late past the close timeout frees GPs whose names are homed on a
rank that closed long before (aiopdbp.hosts.closing): the early rank still
answers for the names it keeps until the late one closes.  Every rank
prints ``RESULT {json}``.

2 ranks, close_timeout CLOSE: rank 1 closes at once.  Rank 0 holds ``late-gp``
(homed on rank 1: ``zlib.crc32(name) % 2``), sleeps 3 close timeouts, then
registers ``gp-a`` (also homed on rank 1) and frees both: a registration, a
pipe release and two frees asked of a home that closed 2 close timeouts ago.
With ``fails``, rank 0 then raises instead: rank 1, still holding on, prints
the job's one line for it.
"""
import asyncio
import json
import sys
import zlib

import aiopdbp

CLOSE = 1.0
HOMED_ON_1 = ("late-gp", "gp-a")


async def main(fails: bool) -> None:
    assert all(zlib.crc32(n.encode()) % 2 == 1 for n in HOMED_ON_1)
    async with aiopdbp.open_node(close_timeout=CLOSE) as node:
        me = node.rank
        if me == 0:
            async with node.process("late-gp"):
                await asyncio.sleep(3 * CLOSE)   # rank 1 closed its node CLOSE * 3 ago
                async with node.process("gp-a"):
                    if fails:
                        raise KeyError("late")
    print("RESULT " + json.dumps({"rank": me}), flush=True)


aiopdbp.run(main(sys.argv[1:] == ["fails"]))
