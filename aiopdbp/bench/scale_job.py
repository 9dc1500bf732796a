"""The rank programs of ``aiopdbp bench scale``: one aiopdbp job rank, one in-process cluster.

``aiopdbp launch -n N -m aiopdbp.bench.scale_job rank --pattern alltoall --out DIR``
runs on every rank: ``open_node`` (MPI is initialised inside it), one GP
``scale-RANK``, a dissemination barrier of GP messages (every GP has
registered once it passes), a cold and a warm round trip between rank 0 and a rank the
barrier never pairs it with (:func:`cold_pair`), then the pattern --
``alltoall``: ``--units`` messages of ``--unit`` bytes to every other GP;
``ring``: the same to both neighbours -- and a last barrier.  Each rank
writes ``DIR/aiopdbp-RANK.json``.

``python -m aiopdbp.bench.scale_job cluster --nodes N --out FILE`` starts
``open_cluster(N)`` in this process, registers ``ring-I`` on every node and
passes one message around the ring, and writes its figures to ``FILE``.

The control messages of registration are counted from ``node.stats()``'s
``messages_sent`` (kinds :data:`REGISTRATION_KINDS`), between entering
``open_node`` and passing the first barrier (heartbeats and credit are other
kinds and are not counted).  Peak RSS is ``ru_maxrss`` at the end.

Phases (``phases``: wall seconds since ``--launched``, the launcher's
``time.time()``, and this process's CPU seconds, at each stamp): ``main``
(interpreter, ``aiopdbp.rankout`` and this module's imports done),
``init`` (``open_node()`` made its transport: MPI initialised), ``open``
(the start-up exchange done), ``registered`` (the first barrier passed),
``pattern`` (the pattern and the last barrier done), ``closed`` (the node
closed) -- so a rank's time between its process start and its end splits
into start-up, ``MPI_Init``, aiopdbp's start-up, the work and the close.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from aiopdbp.runtime.job import run
from aiopdbp.runtime.node import open_node
from aiopdbp.runtime.process import GP
from aiopdbp.wire.message import Message

__all__ = ["REGISTRATION_KINDS", "cold_pair", "main", "registration_messages"]

REGISTRATION_KINDS: Final = frozenset({
    "RegMsg", "ARMsg", "APipeMsg", "AAPMsg", "TableMsg", "TableReqMsg", "TableAckMsg", "RelayMsg",
    "LookupMsg"})
#: the progress engine's counters kept for the pattern (its steps against the messages it moved)
ENGINE_COUNTERS: Final = ("steps", "spins", "idle_sleeps", "wakeups", "sends", "recvs", "drives",
                          "driven_steps", "rings_heard", "rings_sent")
COM_ARRIVE, COM_DATA, COM_PING, COM_PONG = 1, 3, 4, 5
TIMEOUT: Final = 120.0


def registration_messages(sent: Mapping[int, Mapping[str, int]]) -> int:
    """Control messages of the registration kinds in a ``messages_sent`` snapshot."""
    return sum(n for per in sent.values() for kind, n in per.items() if kind in REGISTRATION_KINDS)


def stamp(launched: float) -> tuple[float, float]:
    """(wall seconds since ``launched``, a ``time.time()``; this process's CPU seconds)."""
    return time.time() - launched, time.process_time()


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class _Inbox:
    """``recv`` by ``com`` (and, for barrier rounds, by payload): what arrives
    for another phase waits here for it."""

    def __init__(self, gp: GP) -> None:
        self.gp = gp
        self.held: dict[tuple[int, bytes | None], list[Message]] = {}

    async def take(self, com: int, key: bytes | None = None) -> Message:
        held = self.held.get((com, key))
        if held:
            return held.pop(0)
        while True:
            item = await self.gp.recv(timeout=TIMEOUT)
            if not isinstance(item, Message):
                raise RuntimeError(f"{self.gp.name}: a stream arrived in the scale benchmark")
            got = (item.com, bytes(item.data) if item.com == COM_ARRIVE else None)
            if got == (com, key):
                return item
            self.held.setdefault(got, []).append(item)


async def _barrier(inbox: _Inbox, rank: int, names: list[str], epoch: int) -> None:
    """A dissemination barrier (as MPI's ``Barrier`` on shared memory): in round
    k, rank r tells r + 2^k and waits for r - 2^k -- log2(N) peers per rank,
    so the barrier does not make every rank talk to one."""
    size, k = len(names), 0
    while (1 << k) < size:
        key = bytes((epoch, k))
        await inbox.gp.send(names[(rank + (1 << k)) % size], key, com=COM_ARRIVE, timeout=TIMEOUT)
        await inbox.take(COM_ARRIVE, key)
        k += 1


def cold_pair(size: int) -> int:
    """The nearest rank d to rank 0 that the dissemination barrier never pairs
    with it (neither d nor N-d a power of two); 1 when there is none (N <= 4:
    the "cold" round trip is then a warm pair's)."""
    for d in range(3, size - 2):
        if d & (d - 1) and (size - d) & (size - d - 1):
            return d
    return 1


async def _round_trips(inbox: _Inbox, rank: int, names: list[str], unit: bytes,
                       warm: int) -> tuple[float, float]:
    """Cold and median warm round trip between 0 and a rank the barrier leaves
    it alone with (:func:`cold_pair`)."""
    size = len(names)
    a, b = 0, cold_pair(size)
    gp = inbox.gp
    times: list[float] = []
    if rank == a:
        for _ in range(1 + warm):
            t = time.perf_counter()
            await gp.send(names[b], unit, com=COM_PING, timeout=TIMEOUT)
            await inbox.take(COM_PONG)
            times.append(time.perf_counter() - t)
    elif rank == b:
        for _ in range(1 + warm):
            await inbox.take(COM_PING)
            await gp.send(names[a], unit, com=COM_PONG, timeout=TIMEOUT)
    if not times:
        return 0.0, 0.0
    # here, not at the top: only two ranks get here, and every rank's imports
    # are part of the job time measured against the raw program's
    import statistics
    return times[0], statistics.median(times[1:])


async def _idle_round_trip(inbox: _Inbox, rank: int, names: list[str], unit: bytes, idle: float) -> float:
    """One more round trip of the same pair after ``idle`` s of silence:
    everything is made, but both engines have gone to sleep (the base a first
    message is measured against besides a warm one, which finds both spinning)."""
    a, b = 0, cold_pair(len(names))
    if rank == a:
        await asyncio.sleep(idle)
        t = time.perf_counter()
        await inbox.gp.send(names[b], unit, com=COM_PING, timeout=TIMEOUT)
        await inbox.take(COM_PONG)
        return time.perf_counter() - t
    if rank == b:
        await inbox.take(COM_PING)
        await inbox.gp.send(names[a], unit, com=COM_PONG, timeout=TIMEOUT)
    return 0.0


async def _pattern(inbox: _Inbox, rank: int, names: list[str], pattern: str, units: int,
                   unit: bytes) -> None:
    size = len(names)
    if pattern == "alltoall":
        peers = [names[(rank + k) % size] for k in range(1, size)]
    else:
        peers = sorted({names[(rank - 1) % size], names[(rank + 1) % size]} - {names[rank]})
    gp = inbox.gp

    async def send_all() -> None:
        for _ in range(units):
            for peer in peers:
                await gp.send(peer, unit, com=COM_DATA, timeout=TIMEOUT)

    sender = asyncio.create_task(send_all())
    try:
        for _ in range(units * len(peers)):
            msg = await inbox.take(COM_DATA)
            if len(msg.data) != len(unit):
                raise RuntimeError(f"{gp.name}: a message of {len(msg.data)} bytes from {msg.source}")
    finally:
        await sender


async def rank_main(pattern: str, units: int, unit_size: int, warm: int, out: Path,
                    t_start: float, launched: float = 0.0, idle: float = 0.0) -> int:
    """One rank of the job; writes ``out/aiopdbp-RANK.json``.  ``idle`` > 0:
    after the pattern, the cold pair's round trip once more after that many
    seconds of silence (``idle_rtt_s``), then a barrier."""
    unit = bytes(unit_size)
    launched = launched or time.time() - (time.perf_counter() - t_start)
    phases = {"main": stamp(launched)}
    t0 = time.perf_counter()
    opening = open_node()
    phases["init"] = stamp(launched)
    async with opening as node:
        t_open = time.perf_counter() - t0
        phases["open"] = stamp(launched)
        rss_open = _peak_kib()
        rank, size = node.rank, node.size
        names = [f"scale-{r}" for r in range(size)]
        before = registration_messages(node.stats().messages_sent)
        t1 = time.perf_counter()
        async with node.process(names[rank]) as gp:
            t_reg = time.perf_counter() - t1
            inbox = _Inbox(gp)
            await _barrier(inbox, rank, names, 0)
            t_all_reg = time.perf_counter() - t1
            phases["registered"] = stamp(launched)
            engine_before = dict(node.stats().transport)
            reg_msgs = registration_messages(node.stats().messages_sent) - before
            cold, warm_rtt = await _round_trips(inbox, rank, names, unit, warm)
            t2 = time.perf_counter()
            await _pattern(inbox, rank, names, pattern, units, unit)
            await _barrier(inbox, rank, names, 1)
            t_pattern = time.perf_counter() - t2
            phases["pattern"] = stamp(launched)
            idle_rtt = 0.0
            if idle > 0:
                idle_rtt = await _idle_round_trip(inbox, rank, names, unit, idle)
                await _barrier(inbox, rank, names, 2)
                phases["idle"] = stamp(launched)
            engine_after = node.stats().transport
            engine = {k: engine_after[k] - engine_before.get(k, 0) for k in ENGINE_COUNTERS
                      if k in engine_after}
            links = sorted(node.stats().links)   # the hosts this rank holds a link to
    phases["closed"] = stamp(launched)
    rec: dict[str, Any] = {
        "impl": "aiopdbp", "pattern": pattern, "rank": rank, "size": size,
        "open_s": t_open, "register_s": t_reg,
        "all_registered_s": t_all_reg, "registration_msgs": reg_msgs,
        "first_rtt_s": cold, "warm_rtt_s": warm_rtt, "pattern_s": t_pattern,
        "total_s": time.perf_counter() - t_start, "rss_open_kib": rss_open,
        "rss_peak_kib": _peak_kib(), "links": links, "phases": phases,
        "pattern_engine": engine}
    if idle_rtt:
        rec["idle_rtt_s"] = idle_rtt
    (out / f"aiopdbp-{rank}.json").write_text(json.dumps(rec), encoding="utf-8")
    return 0


async def cluster_main(n: int, out: Path) -> int:
    """``open_cluster(n)``: start, one GP per node, one message around the ring."""
    from aiopdbp.runtime.cluster import open_cluster

    t0 = time.perf_counter()
    names = [f"ring-{i}" for i in range(n)]
    rec: dict[str, Any] = {"impl": "cluster", "size": n}
    async with open_cluster(n) as nodes:
        rec["open_s"] = time.perf_counter() - t0
        before = sum(registration_messages(x.stats().messages_sent) for x in nodes)
        master_before = registration_messages(nodes[0].stats().messages_sent)
        registered = asyncio.Event()
        count = [0]
        t1 = time.perf_counter()

        async def member(i: int) -> None:
            async with nodes[i].process(names[i]) as gp:
                count[0] += 1
                if count[0] == n:
                    rec["register_s"] = time.perf_counter() - t1
                    registered.set()
                await registered.wait()
                if i == 0:
                    t2 = time.perf_counter()
                    await gp.send(names[1 % n], b"token", timeout=TIMEOUT)
                    await gp.recv(timeout=TIMEOUT)
                    rec["ring_s"] = time.perf_counter() - t2
                else:
                    msg = await gp.recv(timeout=TIMEOUT)
                    await gp.send(names[(i + 1) % n], msg.data, timeout=TIMEOUT)  # type: ignore[union-attr]

        await asyncio.wait_for(asyncio.gather(*(member(i) for i in range(n))), TIMEOUT * 4)
        total = sum(registration_messages(x.stats().messages_sent) for x in nodes) - before
        rec["registration_msgs"] = total / n
        rec["master_registration_msgs"] = (
            registration_messages(nodes[0].stats().messages_sent) - master_before) / n
        t3 = time.perf_counter()
    rec["close_s"] = time.perf_counter() - t3
    rec["total_s"] = time.perf_counter() - t0
    rec["rss_peak_kib"] = _peak_kib()
    out.write_text(json.dumps(rec), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m aiopdbp.bench.scale_job rank|cluster ...``."""
    t_start = time.perf_counter()
    p = argparse.ArgumentParser(prog="python -m aiopdbp.bench.scale_job")
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rank", help="one rank of an MPI job (under aiopdbp launch)")
    r.add_argument("--pattern", choices=("alltoall", "ring"), default="alltoall")
    r.add_argument("--units", type=int, default=20)
    r.add_argument("--unit", type=int, default=256)
    r.add_argument("--warm", type=int, default=20, help="warm round trips after the cold one")
    r.add_argument("--idle", type=float, default=0.0,
                   help="after the pattern, the pair's round trip once more after this many s of silence")
    r.add_argument("--out", required=True)
    r.add_argument("--launched", type=float, default=0.0,
                   help="the launcher's time.time() at launch (phases are stamped from it)")
    c = sub.add_parser("cluster", help="an in-process cluster (open_cluster)")
    c.add_argument("--nodes", type=int, required=True)
    c.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.what == "rank":
        return run(rank_main(a.pattern, a.units, a.unit, a.warm, Path(a.out), t_start, a.launched, a.idle))
    return run(cluster_main(a.nodes, Path(a.out)))


if __name__ == "__main__":
    raise SystemExit(main())
