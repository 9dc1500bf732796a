"""The last open rank (aiopdbp.hosts.closing, aiopdbp.stall): a GP that waits
in recv() once every other rank has closed its node is reported, not left
to hang silently.  stall_timeout STALL; every rank prints ``RESULT {json}``.

``reply``  2 ranks, the new user's program: rank 0's ``a`` sends ``b`` (rank 1)
           a message and waits for a reply that never comes; ``b`` leaves.
           Rank 0 ends once the stall watch said so (``warned``: the line).
``three``  3 ranks: rank 1's ``b`` sends rank 2's ``c`` a message and leaves,
           rank 0 has no GP; ``c`` waits for a second one: rank 2 is the last
           open rank and ends once told so, as ``reply``.
``late``   2 ranks: rank 1 finishes at once; rank 0's GP, once told it is
           the last open rank, sleeps 4 stall timeouts (it does not wait in
           recv), sends itself a message, takes it and ends: late,
           legitimately, and never reported.
``slow``   2 ranks, close_timeout CLOSE: rank 1 leaves at once; rank 0's
           ``asker-0`` waits in recv() until the stall watch said so, then is
           late past rank 1's close timeout (rank 1 says it still waits for
           rank 0) and ends.  The names are homed on rank 0, which serves
           them until the end.
"""
import asyncio
import json
import logging
import sys

import aiopdbp

STALL = 0.5
CLOSE = 1.0


class _Said(logging.Handler):
    """Sets ``event`` when the aiopdbp.stall logger says ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text = text
        self.event = asyncio.Event()
        self.line = ""

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.line = record.getMessage()
            self.event.set()


async def _until_reported(gp: aiopdbp.GP) -> str:
    """Wait in ``gp.recv()`` until the stall watch reports it (at most 30 s)."""
    said = _Said("every other rank closed its node")
    logging.getLogger("aiopdbp.stall").addHandler(said)
    recv = asyncio.ensure_future(gp.recv())
    try:
        async with asyncio.timeout(30):
            await said.event.wait()
    finally:
        recv.cancel()
        logging.getLogger("aiopdbp.stall").removeHandler(said)
    return said.line


async def main(mode: str) -> None:
    close = CLOSE if mode == "slow" else 30.0
    warned = ""
    async with aiopdbp.open_node(stall_timeout=STALL, close_timeout=close) as node:
        me = node.rank
        if mode == "reply":
            if me == 0:
                async with node.process("a") as a:
                    await a.send("b", b"hi")
                    warned = await _until_reported(a)
            else:
                async with node.process("b") as b:
                    m = await b.recv()
                    print("b got", m.data, "and leaves without answering", flush=True)
        elif mode == "three":
            if me == 2:
                async with node.process("c") as c:
                    await c.recv()
                    warned = await _until_reported(c)
            elif me == 1:
                async with node.process("b") as b:
                    await b.send("c", b"hi")
        elif mode == "late":
            if me == 0:
                async with node.process("late-0") as gp:
                    async with asyncio.timeout(30):     # told first: the watch is on from then
                        while node.stall.last_open_since is None:
                            await asyncio.sleep(0.05)
                    await asyncio.sleep(4 * STALL)
                    await gp.send("late-0", b"done")
                    assert (await gp.recv()).data == b"done"
        elif mode == "slow":
            if me == 0:
                async with node.process("asker-0") as gp:
                    await gp.send("answer-1", b"hi")
                    warned = await _until_reported(gp)
                    await asyncio.sleep(2 * CLOSE)   # late past rank 1's close timeout
            else:
                async with node.process("answer-1") as gp:
                    await gp.recv()
    print("RESULT " + json.dumps({"rank": me, "warned": warned}), flush=True)


aiopdbp.run(main(sys.argv[1]))
