"""A GP raises KeyError while its peers still talk to it (issue 19, the failure rule).

Rank 1's GP ``g1`` raises ``KeyError('missing')``; every other rank only
suffers consequences.  Ranks above 1 are bystanders waiting in ``recv()``.
Modes (argv[1]):

  consumer -- rank 0 keeps sending to g1, which raises on its 10th recv
  blocked  -- g1 never reads; once rank 0's ``send`` to it is blocked (the
              credit towards a full pipe is spent), g1 is told so and raises
  bidi     -- g0 and g1 each stream to the other; g1's reader raises after
              10 segments while both streams are open
  barrier  -- g0 and g1 pass a Barrier; g1 raises before round 3 while g0
              waits in it
  nested   -- GP s2.3 raises inside GP sink2's block (rank 1) while g0 waits
  beside   -- the program gathers its node with another task; on rank 1 that
              task raises while g0 keeps sending to g1 (no GP's code failed:
              the node is cancelled only because the program ends)
"""
import asyncio
import sys
import time

import aiopdbp


def say(what: str) -> None:
    print(f"{what} at {time.time():.6f}", flush=True)


async def consumer(node: aiopdbp.Node) -> None:
    if node.rank == 0:
        async with node.process("g0") as gp:
            while True:
                await gp.send("g1", b"x" * 100)
    async with node.process("g1") as gp:
        table: dict[str, int] = {}
        for i in range(10):
            await gp.recv()
        say("raising")
        table["missing"]


async def blocked(node: aiopdbp.Node) -> None:
    if node.rank == 0:
        async with node.process("g0") as gp, node.process("g0-ctl") as ctl:
            while True:
                send = asyncio.ensure_future(gp.send("g1", bytes(4096)))
                done, _ = await asyncio.wait({send}, timeout=0.5)
                if not done:      # g1 does not read: this send waits for its credit
                    say("blocked")
                    await ctl.send("g1-ctl", b"blocked")
                await send        # still blocked when g1 fails
    # g1 innermost: the failure report names the GP whose block the error leaves first
    async with node.process("g1-ctl") as ctl, node.process("g1"):
        await ctl.recv()          # rank 0 is blocked in send to us
        say("raising")
        {}["missing"]


async def bidi(node: aiopdbp.Node) -> None:
    me, peer = ("g0", "g1") if node.rank == 0 else ("g1", "g0")

    def frames():
        while True:
            yield bytes(64 << 10)

    async with node.process(me) as gp:
        async def reader() -> None:
            stream = await gp.recv()
            n = 0
            async for _ in stream:
                n += 1
                if n == 10 and node.rank == 1:
                    say("raising")
                    raise KeyError("missing")

        async with asyncio.TaskGroup() as tg:
            tg.create_task(gp.send_stream(peer, frames(), segment_size=64 << 10))
            tg.create_task(reader())


async def barrier(node: aiopdbp.Node) -> None:
    async with node.process(f"g{node.rank}") as gp:
        bar = aiopdbp.Barrier(gp, "pair", ["g0", "g1"])
        for i in range(5):
            if node.rank == 1 and i == 2:
                say("raising")
                {}["missing"]
            await bar.wait()


async def nested(node: aiopdbp.Node) -> None:
    if node.rank == 0:
        async with node.process("g0") as gp:
            await gp.recv()
    async with node.process("sink2"):
        async with node.process("s2.3"):
            say("raising")
            {}["missing"]


async def main(mode: str) -> None:
    async with aiopdbp.open_node() as node:
        if node.rank > 1:
            async with node.process(f"bystander-{node.rank}") as gp:
                await gp.recv()
            return
        await {"consumer": consumer, "blocked": blocked, "bidi": bidi, "barrier": barrier,
           "nested": nested}[mode](node)


async def beside() -> None:
    ready = asyncio.Event()

    async def run_node() -> None:
        async with aiopdbp.open_node() as node:
            rank = node.rank
            if rank == 0:
                async with node.process("g0") as gp:
                    while True:
                        await gp.send("g1", b"x" * 100)
            async with node.process(f"g{rank}") as gp:
                if rank == 1:
                    for i in range(10):
                        await gp.recv()
                    ready.set()
                await asyncio.Event().wait()

    async def other() -> None:
        await ready.wait()
        say("raising")
        {}["missing"]

    await asyncio.gather(run_node(), other())


aiopdbp.run(beside() if sys.argv[1] == "beside" else main(sys.argv[1]))
