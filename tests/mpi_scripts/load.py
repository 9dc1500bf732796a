"""Load patterns over MPI (issue 15 item 3): every payload checked, credit waits asserted.

    mpiexec -n N python tests/mpi_scripts/load.py [--window BYTES] [--timeout S] CASE [CASE ...]

A CASE is ``pattern[,key=value...]``; keys: ``senders`` (concurrent sending
tasks per sending GP), ``size`` (payload bytes, >= 16), ``count`` (items per
(sending GP, destination GP); default: just over 4 credit windows, 8 at least), ``window``
(the per-GP credit window of this case, default ``--window``), ``windows``
(the least number of windows of messages the case must move, default 4;
``windows=1`` lets an issue's reproducer run with its own window).  Patterns, with
one GP per rank (``g<r>``):

``oneway``     rank 0 -> rank N-1
``ring``       every rank -> the next (and receives from the previous)
``alltoall``   every rank -> every other rank
``fanin``      ranks 1..N-1 -> rank 0
``fanout``     rank 0 -> every other rank
``reqresp``    the ring as background traffic, and a client GP on rank 0 that
               sends ``count // 8`` requests one at a time to a server GP on
               rank N-1 and checks every reply
``mixed``      the ring, every 4th item a ``send_stream`` instead of a message,
               from ``senders`` tasks of their own beside the message tasks
``multicast``  rank 0 -> every other rank in one ``send`` per item
``shortstream`` the short-stream benchmark: every rank sends ``count``
               ``send_stream`` calls to the next (``senders`` in flight), then
               the same items as messages

Each case opens its own node (``RemoteConfig(gp_window=window)``), runs the
pattern, closes the node, and every rank prints one line (one write, so the
ranks' lines never merge)::

    LOAD {"case": i, "rank": r, "ok": true, "elapsed": s, "items": k, "credit_waits": {"h": n}, "loads": b, "rss_kib": m, ...}

Checks (a failed one makes ``ok`` false with ``error``): every item that
reaches a GP has the right content (a 16-byte header -- source rank, sending
task, per-task sequence number, size -- and a body that is a slice of a
seeded random buffer chosen by the header), per (source, task) the sequence
numbers arrive 0, 1, 2, ... (order), and the count from every source is
exact; every sending rank waited for credit on every link it sent messages
over (``node.stats().links[h].credit_waits > 0``; a multicast, on one of
them), and every case moves at
least 4 windows of messages per (sending host, destination GP) (else the
case is refused).  A case that does not finish within ``--timeout`` prints
``ok: false`` with ``"error": "timeout ..."`` and the node's stats, then
aborts the job (the peers are stuck too): a hang is reported, never waited
out.  Exit code 0 iff every case was ok on this rank.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp.hosts.remote import RemoteConfig
from aiopdbp.transport.mpi import load_mpi

MPI = load_mpi()
WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()

HEADER = struct.Struct("<HHII4x")  # source rank, task, sequence number, size (16 bytes)
#: credit a message costs beyond its payload (aiopdbp.wire.message.CREDIT_OVERHEAD)
OVERHEAD = 64
#: the bodies are slices of this buffer (same seed on every rank)
BASE = np.random.default_rng(15).integers(0, 256, (2 << 20) + 64, dtype=np.uint8)
PATTERNS = ("oneway", "ring", "alltoall", "fanin", "fanout", "reqresp", "mixed", "multicast",
            "shortstream")


def emit(row: dict[str, Any]) -> None:
    os.write(1, f"LOAD {json.dumps(row)}\n".encode())


def payload(src: int, task: int, seq: int, size: int) -> bytes:
    off = (src * 7919 + task * 104729 + seq * 31) % (1 << 20)
    return HEADER.pack(src, task, seq, size) + BASE[off:off + size - HEADER.size].tobytes()


def check(buf: Any, src: int) -> tuple[int, int]:
    """Check one received payload from rank ``src``; return (task, seq)."""
    view = memoryview(buf).cast("B")
    s, task, seq, size = HEADER.unpack_from(view)
    if s != src or size != len(view):
        raise AssertionError(f"header says rank {s}, {size} B; got it from rank {src}, {len(view)} B")
    off = (s * 7919 + task * 104729 + seq * 31) % (1 << 20)
    body = np.frombuffer(view, np.uint8, offset=HEADER.size)
    if not np.array_equal(body, BASE[off:off + size - HEADER.size]):
        raise AssertionError(f"corrupt payload from rank {src} task {task} seq {seq}")
    return task, seq


@dataclass
class Flow:
    """What one sending GP sends: ``count`` items to each of ``dests``."""

    src: int
    dests: tuple[int, ...]
    count: int
    mode: str = "msg"       # msg | stream | mixed | mcast
    phase: int = 0


@dataclass
class Case:
    idx: int
    pattern: str
    senders: int
    size: int
    count: int
    window: int
    flows: list[Flow] = field(default_factory=list)
    requests: int = 0
    #: the case must make a sender wait for credit (every case but an issue's
    #: reproducer run at its own window, ``windows=1``: its claim is that it
    #: finishes with every payload checked; at a 1 MiB window a reader that
    #: keeps pace with senders that yield (aiopdbp.hosts.link, "From the first
    #: message") may return credit before anyone waits)
    loads: bool = True

    @property
    def label(self) -> str:
        return f"{self.pattern},senders={self.senders},size={self.size},count={self.count},window={self.window}"


def parse_case(idx: int, text: str, window: int) -> Case:
    name, *kvs = text.split(",")
    if name not in PATTERNS:
        raise SystemExit(f"unknown pattern {name!r}; known: {', '.join(PATTERNS)}")
    opts = {"senders": 16, "size": 4096, "count": 0, "window": window, "windows": 4}
    for kv in kvs:
        k, _, v = kv.partition("=")
        if k not in opts:
            raise SystemExit(f"{text}: unknown key {k!r}; known: {', '.join(opts)}")
        opts[k] = int(v)
    if opts["size"] < HEADER.size or opts["size"] > 1 << 20:
        raise SystemExit(f"{text}: size must be {HEADER.size} B .. 1 MiB")
    cost = opts["size"] + OVERHEAD
    msgs_per_item = 0.75 if name == "mixed" else 1.0
    least = -(-opts["windows"] * opts["window"] // cost)       # 4 windows of messages
    # and at least 8 items: with 1 MiB messages 2 would be 4 windows, but a
    # lone sender round-robin over 3 destinations may then never wait
    need = max(int(-(-least // msgs_per_item)) + 1, 8)
    if opts["count"] == 0:
        opts["count"] = need
    elif opts["count"] < need:
        raise SystemExit(f"{text}: {opts['count']} items move less than {opts['windows']} windows of "
                         f"{opts['window']} B per destination; use count >= {need} or a smaller window")
    case = Case(idx, name, opts["senders"], opts["size"], opts["count"], opts["window"],
                loads=opts["windows"] > 1)
    n, c = SIZE, case.count
    nxt = [(r + 1) % n for r in range(n)]
    if name == "oneway":
        case.flows = [Flow(0, (n - 1,), c)]
    elif name in ("ring", "reqresp"):
        case.flows = [Flow(r, (nxt[r],), c) for r in range(n)]
        case.requests = max(1, c // 8) if name == "reqresp" else 0
    elif name == "mixed":
        case.flows = [Flow(r, (nxt[r],), c, "mixed") for r in range(n)]
    elif name == "alltoall":
        case.flows = [Flow(r, tuple(d for d in range(n) if d != r), c) for r in range(n)]
    elif name == "fanin":
        case.flows = [Flow(r, (0,), c) for r in range(1, n)]
    elif name == "fanout":
        case.flows = [Flow(0, tuple(range(1, n)), c)]
    elif name == "multicast":
        case.flows = [Flow(0, tuple(range(1, n)), c, "mcast")]
    elif name == "shortstream":
        case.flows = [f for r in range(n) for f in (Flow(r, (nxt[r],), c, "stream", 0),
                                                    Flow(r, (nxt[r],), c, "msg", 1))]
    return case


def gp_name(case: Case, r: int) -> str:
    return f"L{case.idx}.g{r}"


class Runner:
    """One case on this rank."""

    def __init__(self, case: Case, node: aiopdbp.Node) -> None:
        self.case = case
        self.node = node
        self.items = 0
        #: (task, destination) -> next sequence number, across the case's phases
        self.seqs: dict[tuple[int, Any], int] = {}

    async def send_flow(self, gp: aiopdbp.GP, flow: Flow) -> None:
        case = self.case
        if flow.mode == "mcast":
            work: Any = iter([(flow.dests, i) for i in range(flow.count)])
        else:  # destination by destination: a lone sender of large messages that went
            # round-robin would find each destination's credit back by its next turn
            work = iter([(d, i) for d in flow.dests for i in range(flow.count)])
        names = {d: gp_name(case, d) for d in range(SIZE)}
        streams: Any = iter(())
        if flow.mode == "mixed":  # its streams go from tasks of their own, beside the messages
            items = list(work)
            work = iter([x for x in items if x[1] % 4 != 3])
            streams = iter([x for x in items if x[1] % 4 == 3])

        async def task(t: int, work: Any) -> None:
            for dest, i in work:
                seq = self.seqs.get((t, dest), 0)
                self.seqs[(t, dest)] = seq + 1
                data = payload(RANK, t, seq, case.size)
                if flow.mode == "mcast":
                    await gp.send([names[d] for d in dest], data)
                elif flow.mode == "stream" or work is streams:
                    await gp.send_stream(names[dest], data)
                else:
                    await gp.send(names[dest], data)

        async with asyncio.TaskGroup() as tg:
            for t in range(case.senders):
                tg.create_task(task(t, work))
                if flow.mode == "mixed":
                    tg.create_task(task(case.senders + t, streams))

    async def receive(self, gp: aiopdbp.GP, expect: dict[int, int]) -> None:
        by_name = {gp_name(self.case, r): r for r in expect}
        got = {r: 0 for r in expect}
        nxt: dict[tuple[int, int], int] = {}
        total = sum(expect.values())
        for _ in range(total):
            item = await gp.recv()
            src = by_name.get(item.source)
            if src is None:
                raise AssertionError(f"item from unexpected GP {item.source!r}")
            buf = await item.read() if isinstance(item, aiopdbp.IncomingStream) else item.data
            task, seq = check(buf, src)
            want = nxt.get((src, task), 0)
            if seq != want:
                raise AssertionError(f"rank {src} task {task}: seq {seq} arrived, expected {want}")
            nxt[(src, task)] = seq + 1
            got[src] += 1
            self.items += 1
        if got != expect:
            raise AssertionError(f"received {got}, expected {expect}")

    async def client(self, gp: aiopdbp.GP) -> list[float]:
        server = f"L{self.case.idx}.srv"
        await self.node.lookup(server, timeout=30)
        rtts = []
        for seq in range(self.case.requests):
            t0 = time.perf_counter()
            await gp.send(server, payload(RANK, 0, seq, 64))
            reply = await gp.recv()
            rtts.append(time.perf_counter() - t0)
            if check(reply.data, SIZE - 1) != (0, seq):  # type: ignore[union-attr]
                raise AssertionError(f"reply {seq} out of order")
        return rtts

    async def server(self, gp: aiopdbp.GP) -> None:
        client = f"L{self.case.idx}.cli"
        for seq in range(self.case.requests):
            req = await gp.recv()
            if check(req.data, 0) != (0, seq):  # type: ignore[union-attr]
                raise AssertionError(f"request {seq} out of order")
            await gp.send(client, payload(RANK, 0, seq, 64))

    async def run(self) -> dict[str, Any]:
        case, node = self.case, self.node
        extra: dict[str, Any] = {}
        async with node.process(gp_name(case, RANK)) as gp, asyncio.TaskGroup() as tg:
            # only the GPs this rank sends to: a rank with nothing to do may
            # already have freed its GP (a freed name fails a lookup at once)
            for r in sorted({d for f in case.flows if f.src == RANK for d in f.dests}):
                await node.lookup(gp_name(case, r), timeout=30)
            expect: dict[int, int] = {}
            for f in case.flows:
                for d in f.dests:
                    if d == RANK:
                        expect[f.src] = expect.get(f.src, 0) + f.count
            if expect:
                tg.create_task(self.receive(gp, expect))
            mine = sorted((f for f in case.flows if f.src == RANK), key=lambda f: f.phase)

            async def sends() -> None:
                for f in mine:
                    await self.send_flow(gp, f)

            tg.create_task(sends())
            if case.requests and RANK == 0:
                async def cli() -> None:
                    async with node.process(f"L{case.idx}.cli") as c:
                        rtts = sorted(await self.client(c))
                        extra["rtt_p50_ms"] = round(1e3 * rtts[len(rtts) // 2], 3)
                tg.create_task(cli())
            if case.requests and RANK == SIZE - 1:
                async def srv() -> None:
                    async with node.process(f"L{case.idx}.srv") as s:
                        await self.server(s)
                tg.create_task(srv())
        return extra


def credit_dests(case: Case) -> set[int]:
    """The hosts this rank sends messages to (they take credit)."""
    return {d for f in case.flows if f.src == RANK and f.mode != "stream" for d in f.dests}


async def run_case(case: Case, timeout: float) -> bool:
    row: dict[str, Any] = {"case": case.idx, "label": case.label, "rank": RANK, "size": SIZE,
                           "loads": case.loads}
    node = aiopdbp.open_node(remote=RemoteConfig(gp_window=case.window), close_timeout=10.0)
    await node.start()
    runner = Runner(case, node)
    row["rss_start_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    ok = False
    try:
        async with asyncio.timeout(timeout):
            row.update(await runner.run())
        row["elapsed"] = time.perf_counter() - t0
        links = node.stats().links
        waits = {str(h): links[h].credit_waits for h in sorted(credit_dests(case))}
        row["credit_waits"] = waits
        idle = [h for h, n in waits.items() if n == 0]
        if case.pattern == "multicast" and any(waits.values()):
            # one send reserves every destination's credit in turn: while it
            # waits for the slowest, the others' credit comes back
            idle = []
        if idle and case.loads:
            raise AssertionError(f"no sender waited for credit towards host(s) {', '.join(idle)}: "
                                 "the case does not load the credit window")
        ok = True
    except TimeoutError:
        row["error"] = f"timeout: not finished within {timeout:g} s (received {runner.items})"
        row["stats"] = repr(node.stats())
    except BaseException as exc:  # noqa: BLE001 - reported, then the job fails
        traceback.print_exception(exc, file=sys.stderr)
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        row["error"] = f"{type(exc).__name__}: {exc}"
    row["ok"] = ok
    row["items"] = runner.items
    row["rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    emit(row)
    if not ok:
        # the peers are stuck in this case too: end the job now, not after their timeouts
        sys.stderr.write(f"rank {RANK}: case {case.label} failed: {row['error']}; aborting the job\n")
        sys.stderr.flush()
        time.sleep(0.5)
        WORLD.Abort(1)
    await node.aclose()
    return ok


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, default=64 << 10, help="per-GP credit window (bytes)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args()
    cases = [parse_case(i, text, args.window) for i, text in enumerate(args.cases)]
    ok = True
    for case in cases:
        ok = await run_case(case, args.timeout) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(aiopdbp.run(main()))
