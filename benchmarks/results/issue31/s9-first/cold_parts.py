"""Split a first round trip to a peer with nothing made for it into its parts (issue 31).

Run under the launcher (oversubscribed is fine)::

    nice -n 10 aiopdbp launch -n 16 python cold_parts.py OUTDIR [--warm 10] [--idle 1.5]

A hub barrier (every rank sends to ``cold-1`` and waits for its answer) leaves
rank 0 having talked to rank 1 only, so every d >= 2 is cold for it.  Then:

1. *count*: ``--quiet`` s after the barrier, one cold round trip 0 -> 2 -> 0
   alone; every rank snapshots its
   ``NodeStats.messages_sent`` before and 1 s after it: the control messages
   the first contact costs, at which hosts.
2. *parts*: for each cold peer d >= 3 in turn, in alternation:
   ``cold`` (a plain first ``send`` to ``cold-d``), or ``known`` (``node.lookup``
   first, timed, then the first send: the link made, the name known); then
   ``--warm`` round trips, then one more after d idled ``--idle`` s
   (``idle``: waking a sleeping engine, the link made).

Every rank writes OUTDIR/rank-R.json: its stamps (``time.perf_counter``, the
system-wide monotonic clock, so comparable across the ranks of one host):
when a name service saw a lookup (``lookup_in``) or applied a table update
(``table``: ``proc_reg`` answers, ``proc_names`` announcements, ``proc_name``),
when d took the ping and returned from the pong's send.  ``cold_parts_table.py``
joins them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from aiopdbp.hosts import names as names_mod
from aiopdbp.runtime.job import run
from aiopdbp.runtime.node import open_node
from aiopdbp.runtime.process import GP
from aiopdbp.wire.message import Message

TIMEOUT = 120.0
COM_BAR, COM_PING, COM_PONG = 1, 2, 3
STAMPS: list[list[Any]] = []   # [event, t, detail...]


def _hook() -> None:
    ns = names_mod.NameService
    on_table, on_lookup, want = ns.on_table, ns.on_lookup, ns.want

    def t_on_table(self: Any, src: int, msg: Any) -> None:
        on_table(self, src, msg)
        arg = msg.args[0] if msg.args and msg.op != "proc_names" else None
        STAMPS.append(["table", time.perf_counter(), msg.op, src, arg if isinstance(arg, (str, int)) else None])

    def t_on_lookup(self: Any, src: int, msg: Any) -> None:
        STAMPS.append(["lookup_in", time.perf_counter(), src, msg.name or msg.pid])
        on_lookup(self, src, msg)

    def t_want(self: Any, name: str, *rest: Any) -> bool:   # (s9: want may carry a message)
        STAMPS.append(["want", time.perf_counter(), name])
        return bool(want(self, name, *rest))

    ns.on_table, ns.on_lookup, ns.want = t_on_table, t_on_lookup, t_want  # type: ignore[method-assign]
    from aiopdbp.routing.router import Router
    resolve = Router.resolve

    async def t_resolve(self: Any, name: str, timeout: float | None) -> int:
        pid = await resolve(self, name, timeout)
        STAMPS.append(["resolved", time.perf_counter(), name])
        return pid

    Router.resolve = t_resolve  # type: ignore[method-assign]
    try:   # (s9) a lookup that carries the first message: the home's stamp as for LookupMsg
        from aiopdbp.hosts.carry import Carrier
    except ImportError:
        return
    on_carry = Carrier.on_carry

    def t_on_carry(self: Any, src: int, msg: Any) -> None:
        if not msg.pid:
            STAMPS.append(["lookup_in", time.perf_counter(), src, msg.name])
        on_carry(self, src, msg)

    Carrier.on_carry = t_on_carry  # type: ignore[method-assign]


class Inbox:
    def __init__(self, gp: GP) -> None:
        self.gp = gp
        self.held: dict[int, list[Message]] = {}

    async def take(self, com: int) -> Message:
        if self.held.get(com):
            return self.held[com].pop(0)
        while True:
            item = await self.gp.recv(timeout=TIMEOUT)
            assert isinstance(item, Message)
            if item.com == com:
                return item
            self.held.setdefault(item.com, []).append(item)


async def hub_barrier(inbox: Inbox, rank: int, size: int) -> None:
    if rank == 1:
        for _ in range(size - 1):
            await inbox.take(COM_BAR)
        for r in range(size):
            if r != 1:
                await inbox.gp.send(f"cold-{r}", b"", com=COM_BAR, timeout=TIMEOUT)
    else:
        await inbox.gp.send("cold-1", b"", com=COM_BAR, timeout=TIMEOUT)
        await inbox.take(COM_BAR)


def sent_snapshot(node: Any) -> dict[str, dict[str, int]]:
    return {str(h): dict(k) for h, k in node.stats().messages_sent.items()}


async def main(out: Path, warm: int, idle: float, payload: bytes, quiet: float) -> int:
    _hook()
    rounds: list[dict[str, Any]] = []
    async with open_node() as node:
        rank, size = node.rank, node.size
        async with node.process(f"cold-{rank}") as gp:
            inbox = Inbox(gp)
            await hub_barrier(inbox, rank, size)
            await asyncio.sleep(quiet)
            before = sent_snapshot(node)
            if rank == 0:
                t0 = time.perf_counter()
                await gp.send("cold-2", payload, com=COM_PING, timeout=TIMEOUT)
                t1 = time.perf_counter()
                await inbox.take(COM_PONG)
                rounds.append({"peer": 2, "mode": "count", "s0": t0, "s2": t1, "s5": time.perf_counter()})
            elif rank == 2:
                await inbox.take(COM_PING)
                d1 = time.perf_counter()
                await gp.send("cold-0", payload, com=COM_PONG, timeout=TIMEOUT)
                rounds.append({"peer": 2, "mode": "count", "d1": d1, "d2": time.perf_counter()})
            await asyncio.sleep(1.0)
            after = sent_snapshot(node)
            for i, d in enumerate(range(3, size)):
                mode = "cold" if i % 2 == 0 else "known"
                name = f"cold-{d}"
                for j in range(2 + warm):
                    m = mode if j == 0 else ("idle" if j == 1 + warm else "warm")
                    if rank == 0:
                        rec: dict[str, Any] = {"peer": d, "mode": m, "j": j}
                        if j == 1 + warm:
                            await asyncio.sleep(idle)
                        if j == 0 and mode == "known":
                            t = time.perf_counter()
                            await node.lookup(name, timeout=TIMEOUT)
                            rec["lookup_s"] = time.perf_counter() - t
                            await asyncio.sleep(0.05)
                        rec["s0"] = time.perf_counter()
                        await gp.send(name, payload, com=COM_PING, timeout=TIMEOUT)
                        rec["s2"] = time.perf_counter()
                        await inbox.take(COM_PONG)
                        rec["s5"] = time.perf_counter()
                        rounds.append(rec)
                    elif rank == d:
                        await inbox.take(COM_PING)
                        d1 = time.perf_counter()
                        await gp.send("cold-0", payload, com=COM_PONG, timeout=TIMEOUT)
                        rounds.append({"peer": d, "mode": m, "j": j, "d1": d1, "d2": time.perf_counter()})
                await asyncio.sleep(0.3 if rank == 0 else 0)
            await hub_barrier(inbox, rank, size)
    home = {f"cold-{r}": names_mod.home_of(f"cold-{r}", size) for r in range(size)}
    doc = {"rank": rank, "size": size, "rounds": rounds, "stamps": STAMPS, "homes": home,
           "sent_count_phase": {h: {k: n - before.get(h, {}).get(k, 0) for k, n in kinds.items()
                                    if n - before.get(h, {}).get(k, 0)} for h, kinds in after.items()}}
    (out / f"rank-{rank}.json").write_text(json.dumps(doc), encoding="utf-8")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--warm", type=int, default=10)
    p.add_argument("--idle", type=float, default=1.5)
    p.add_argument("--unit", type=int, default=256)
    p.add_argument("--quiet", type=float, default=0.5, help="seconds every rank waits after the barrier before the count phase")
    a = p.parse_args()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    sys.exit(run(main(Path(a.out), a.warm, a.idle, bytes(a.unit), a.quiet)))
