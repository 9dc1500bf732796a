"""The aiopdbp side of the benchmark: one node per rank, GPs, the test drivers.

Only the public API: ``open_node``, ``node.process``, ``node.lookup``,
``gp.send``/``gp.recv``, ``gp.send_stream``, ``IncomingStream`` (``async
for`` or ``read()``), ``node.flush``.

Theory of operation.  The harness alternates aiopdbp runs with raw MPI and
floor runs in one job, so the node lives in its own event loop
(:class:`AioSide`, an ``asyncio.Runner``) that runs only during aiopdbp runs:
while the raw baseline blocks in MPI or the floor runs in its loop, the
node's loop is stopped -- nothing of aiopdbp competes with the baselines, and
nothing of theirs with aiopdbp.  Before the loop stops, every rank passes an
end-of-run barrier of GP messages (so no rank stops while a peer still waits
for it: a stream's sender waits for the receiver's completion) and flushes.

GP ``bench.R.J`` is GP ``J`` of rank ``R`` (J < ``--gps-per-rank``);
``bench.ctl.R`` carries the barrier.  Each run gives every local GP with
outgoing flows a sender task and every GP with incoming flows a receiver task.
Senders call ``await gp.send(dest, unit, timeout=...)`` round-robin over
their destinations, or one ``send_stream`` per destination (concurrently) of
a generator over the ring's units with ``segment_size`` = unit size; a
sender's clock stops after ``node.flush()`` (its data has left the host).
Receivers check every unit (``gp.recv()``; ``async for seg in stream`` or
``await stream.read()``); a rank's clock stops when its tasks are done.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from operator import attrgetter
from typing import Any, TypeVar

from aiopdbp.bench.workload import Checker, Flow, Measure, Ring
from aiopdbp.runtime import GP, Node, open_node
from aiopdbp.streams import IncomingStream
from aiopdbp.wire.message import Message

__all__ = ["AioSide", "gp_name", "loop_factory"]

T = TypeVar("T")
_SOURCE, _DATA = attrgetter("source"), attrgetter("data")
_DONE, _GO, _ACK = 7001, 7002, 7003


def gp_name(rank: int, j: int) -> str:
    """Name of GP ``j`` of rank ``rank``."""
    return f"bench.{rank}.{j}"


def loop_factory(use_uvloop: bool) -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when wanted and installed, else asyncio's default loop."""
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop  # type: ignore[no-any-return, unused-ignore]
    return asyncio.new_event_loop


class AioSide:
    """This rank's node and GPs, in an event loop that runs only for aiopdbp runs."""

    def __init__(self, rank: int, size: int, gps_per_rank: int, timeout: float,
                 use_uvloop: bool) -> None:
        self.rank, self.size, self.k, self.timeout = rank, size, gps_per_rank, timeout
        self._runner = asyncio.Runner(loop_factory=loop_factory(use_uvloop))
        self._stack = contextlib.AsyncExitStack()
        self.node: Node | None = None
        self.gps: list[GP] = []
        self._ctl: GP | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` in the node's loop (the loop stops again when it returns)."""
        return self._runner.run(coro)

    def open(self) -> None:
        """Open the node, register this rank's GPs, wait for every rank's names."""
        self.run(self._open())

    async def _open(self) -> None:
        st, t = self._stack, self.timeout
        node = self.node = await st.enter_async_context(open_node())
        if node.size != self.size or node.rank != self.rank:
            raise RuntimeError(f"node {node.rank}/{node.size} does not match MPI rank "
                               f"{self.rank}/{self.size}")
        self.gps = [await st.enter_async_context(node.process(gp_name(self.rank, j)))
                    for j in range(self.k)]
        self._ctl = await st.enter_async_context(node.process(f"bench.ctl.{self.rank}"))
        for r in range(self.size):
            await node.lookup(f"bench.ctl.{r}", timeout=t)
            for j in range(self.k):
                await node.lookup(gp_name(r, j), timeout=t)
        # a name's home answers lookups only while its loop runs: no rank
        # leaves this loop (for raw MPI) until every rank has all its names
        await self._barrier()

    def close(self) -> None:
        """Free the GPs and close the node (all ranks must call it)."""
        try:
            self.run(self._stack.aclose())
        finally:
            self._runner.close()

    def measure(self, body: Callable[[], Coroutine[Any, Any, Measure]]) -> Measure:
        """Run one timed ``body()`` then the end-of-run barrier and a flush."""
        async def whole() -> Measure:
            m = await body()
            await self._barrier()
            return m
        return self.run(whole())

    async def _barrier(self) -> None:
        ctl, t = self._ctl, self.timeout
        assert ctl is not None and self.node is not None
        if self.rank == 0:
            for _ in range(self.size - 1):
                await _expect(ctl, _DONE, t)
            if self.size > 1:
                await ctl.send([f"bench.ctl.{r}" for r in range(1, self.size)], com=_GO, timeout=t)
        else:
            await ctl.send("bench.ctl.0", com=_DONE, timeout=t)
            await _expect(ctl, _GO, t)
        await self.node.flush(timeout=t)

    # ------------------------------------------------------------------ drivers
    async def bandwidth(self, ring: Ring, windows: int, warmup: int, send_ring: Ring,
                        checker: Checker) -> Measure:
        """osu_bw from rank 0 to rank 1 with ``gp.send``; an ack after every window."""
        if self.rank > 1 or self.node is None:
            return Measure()
        gp, t = self.gps[0], self.timeout
        peer = gp_name(1 - self.rank, 0)
        w, units, p = ring.window, send_ring.units, ring.count
        t0 = c0 = 0.0
        for it in range(warmup + windows):
            if it == warmup:
                t0, c0 = time.perf_counter(), time.process_time()
            if self.rank == 0:
                i = it * w
                for u in range(w):
                    await gp.send(peer, units[(i + u) % p], timeout=t)
                await _expect(gp, _ACK, t)
            else:
                checker.check_run(peer, [_data(await gp.recv(timeout=t)) for _ in range(w)])
                await gp.send(peer, com=_ACK, timeout=t)
        n = windows * w
        return Measure(time.perf_counter() - t0, time.process_time() - c0,
                       n if self.rank == 0 else 0, n if self.rank == 1 else 0, checker.errors)

    async def flows(self, fls: Sequence[Flow], ring: Ring, units: int, send_ring: Ring,
                    checker: Checker, *, stream: bool, read: bool = False) -> Measure:
        """``units`` units on every flow, with messages or (``stream``) one stream per flow."""
        assert self.node is not None
        node, rank, t = self.node, self.rank, self.timeout
        outs: dict[int, list[str]] = {}
        ins: dict[int, list[str]] = {}
        for f in sorted(fls):
            if f.src == rank:
                outs.setdefault(f.chan, []).append(gp_name(f.dst, f.chan))
            if f.dst == rank:
                ins.setdefault(f.chan, []).append(gp_name(f.src, f.chan))
        if not outs and not ins:
            return Measure()
        payload, p, size = send_ring.units, ring.count, ring.size

        def segments() -> Iterator[bytes]:
            return (payload[i % p] for i in range(units))

        async def send_msgs(gp: GP, dests: list[str]) -> None:
            send = gp.send
            for i in range(units):
                u = payload[i % p]
                for d in dests:
                    await send(d, u, timeout=t)

        async def send_streams(gp: GP, dests: list[str]) -> None:
            sent = await asyncio.gather(*(gp.send_stream(d, segments(), segment_size=size, timeout=t)
                                          for d in dests))
            if any(n != units * size for n in sent):
                checker.fail(gp.name, units, f"send_stream reported {sent} bytes, expected {units * size}")

        async def recv_msgs(gp: GP, n: int) -> None:
            # a window's messages checked at once, as the raw receiver checks its window
            recv, check, w = gp.recv, checker.check_all, ring.window
            got: list[Message] = []
            add = got.append
            for i in range(0, n, w):
                for _ in range(min(w, n - i)):
                    msg = await recv(timeout=t)
                    if not isinstance(msg, Message):
                        await msg.aclose()
                        raise RuntimeError(f"{gp.name}: a stream arrived in a message run")
                    add(msg)
                check(list(map(_SOURCE, got)), list(map(_DATA, got)))
                got.clear()

        async def consume(s: IncomingStream) -> None:
            check, key = checker.check, s.source
            if read:
                whole = memoryview(await s.read()).cast("B")
                for u in range(len(whole) // size):
                    check(key, whole[u * size:(u + 1) * size])
                if len(whole) % size:
                    checker.fail(key, len(whole) // size, "stream length is not a whole number of units")
            else:
                async for seg in s:
                    check(key, seg)

        async def recv_streams(gp: GP, n: int) -> None:
            async with asyncio.TaskGroup() as tg:
                for _ in range(n):
                    item = await gp.recv(timeout=t)
                    if not isinstance(item, IncomingStream):
                        raise RuntimeError(f"{gp.name}: a message arrived in a stream run")
                    tg.create_task(consume(item))

        t0, c0 = time.perf_counter(), time.process_time()
        async with asyncio.timeout(t):
            async with asyncio.TaskGroup() as tg:
                for j, dests in outs.items():
                    gp = self.gps[j]
                    tg.create_task(send_streams(gp, dests) if stream else send_msgs(gp, dests))
                for j, srcs in ins.items():
                    gp = self.gps[j]
                    tg.create_task(recv_streams(gp, len(srcs)) if stream
                                   else recv_msgs(gp, units * len(srcs)))
            if outs:
                await node.flush()
        tm, c = time.perf_counter() - t0, time.process_time() - c0
        checker.expect_counts({src: units for srcs in ins.values() for src in srcs})
        n_out = sum(len(d) for d in outs.values()) * units
        n_in = sum(len(s) for s in ins.values()) * units
        return Measure(tm, c, n_out, n_in, checker.errors)


def _data(item: Message | IncomingStream) -> Any:
    if not isinstance(item, Message):
        raise RuntimeError("a stream arrived where a message was expected")
    return item.data


async def _expect(gp: GP, com: int, timeout: float) -> Message:
    item = await gp.recv(timeout=timeout)
    if not isinstance(item, Message) or item.com != com:
        raise RuntimeError(f"{gp.name}: expected control message {com}, got {item!r}")
    return item
