"""A task that waits for a message steps the engine itself (``drive``).

Rank 1 drives until rank 0's ping arrives (the ping is received by a step
of the driver); the engine's task, woken when a driver leaves, does not
spin on its first turn (the driver's task runs on: a sender that yields its
turn would wait a whole spin for nothing); a driver cancelled while it
steps hands progress back to the engine's own task (the next message
arrives with no driver at all); a
driver that starts after the spin window, or with spinning off
(``AIOPDBP_SPIN_US=0``), returns at once instead of spinning.  argv: none.
"""

from __future__ import annotations

import asyncio
import os

from transport_common import Inbox, run

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport


async def main(t: MPITransport, inbox: Inbox) -> None:
    peer = 1 - t.rank
    spinning = os.environ.get("AIOPDBP_SPIN_US") != "0"
    await t.send(peer, Channel.CONTROL, [b"hello"])
    await inbox.wait_count(1)
    # 1. replies are received by the waiting task's own steps.  A driver
    # leaves after 5 ms without traffic, which a loaded machine may cause on
    # every round for a while: the ping-pong goes on (50 rounds at least) until
    # each rank has had a reply taken by its own driver, or 1,000 rounds.
    min_rounds, max_rounds = 50, 1000
    st0 = t.stats()
    spun = 0   # rounds whose engine spun on its first turn after the driver left
    i = 0
    last = False
    while not last:
        if t.rank == 0:
            mine = t.stats()["driven_steps"] > st0["driven_steps"]
            theirs = i > 0 and bytes(inbox.by_key[(1, Channel.CONTROL)][-1]) == b"driven"
            last = i + 1 >= max_rounds or (i + 1 >= min_rounds and (not spinning or mine and theirs))
            await t.send(1, Channel.CONTROL, [b"last" if last else b"ping"])
            drives = t.stats()["drives"]
            await t.drive(lambda: inbox.count >= 2 + i)   # (the job's timeout bounds it)
            if t.stats()["drives"] > drives and inbox.count >= 2 + i:
                # The driver left with its reply; this task yields its turn
                # and is runnable at once: the engine's task, woken by the
                # driver, steps once and yields back instead of spinning.
                spins = t.stats()["spins"]
                await asyncio.sleep(0)
                spun += t.stats()["spins"] > spins
            await inbox.wait_count(2 + i)
        else:
            await asyncio.wait_for(t.drive(lambda: inbox.count >= 2 + i), 10)
            await inbox.wait_count(2 + i)
            last = bytes(inbox.by_key[(0, Channel.CONTROL)][-1]) == b"last"
            driven = t.stats()["driven_steps"] > st0["driven_steps"]
            await t.send(0, Channel.CONTROL, [b"driven" if driven else b"pong"])
        i += 1
    rounds = i
    st1 = t.stats()
    assert not spun, f"the engine spun after {spun} of {rounds} drivers left"
    if spinning:
        assert st1["drives"] > st0["drives"] and st1["driven_steps"] > st0["driven_steps"], (st0, st1)
    else:
        assert st1["drives"] == st0["drives"] and st1["driven_steps"] == st0["driven_steps"], (st0, st1)
    base = 1 + rounds
    # 2. a driver cancelled mid-drive: the engine's task takes over again
    if t.rank == 1:
        driver = asyncio.ensure_future(t.drive(lambda: False))
        for _ in range(5):
            await asyncio.sleep(0)
        driver.cancel()
        try:
            await driver  # cancelled -- or it returned on its own: 5 ms without traffic
        except asyncio.CancelledError:
            pass
        await t.send(0, Channel.CONTROL, [b"go"])
        await inbox.wait_count(base + 1, timeout=5)   # no driver: the engine's task delivers it
    else:
        await inbox.wait_count(base + 1)
        await t.send(1, Channel.CONTROL, [b"after"])
    # 3. after the spin window without traffic a driver returns at once
    await asyncio.sleep(0.05)
    st = t.stats()
    await asyncio.wait_for(t.drive(lambda: False), 2)
    assert t.stats()["drives"] == st["drives"], "a driver started on a quiet engine"
    print(f"rank {t.rank} OK", flush=True)


if __name__ == "__main__":
    run(main)
