"""The asyncio floor: the least an asyncio messaging layer over mpi4py costs.

Theory of operation.  aiopdbp puts asyncio between the user and MPI; some of
its cost is asyncio's, the rest is aiopdbp's.  To tell them apart, every
figure of ``aiopdbp bench`` is also given as a ratio to this floor: the same
design with nothing else in it.

* One :class:`Floor` per rank (and run) on its own communicator; one poller
  task, no task per message.
* ``send(dst, chan, data)`` posts ``Isend`` at once (uncoalesced), or, with
  ``coalesce=True``, sends the first message to a destination in each event
  loop iteration at once and packs the following ones (a 6-byte record
  header each) into a block of up to 64 KiB per destination, posted when
  full or at the end of the loop iteration (a ``call_soon`` callback).  At
  most ``max_inflight`` requests are in flight; beyond that ``send`` waits
  until half of them completed (backpressure through a future the poller
  resolves; one wake-up per half window, like a raw window's ``Waitall``).
* The poller matches arrivals with ``Improbe`` and receives them with
  ``Mrecv`` into a fresh buffer (``bytearray``; numpy for >= 64 KiB, which
  recycles large blocks), splits blocks into records (``bytes``, like
  aiopdbp's messages), completes sends with ``Test`` (oldest first) and wakes the
  waiting coroutine's future.  While every coroutine waits on it, it drives
  MPI the way a blocking ``Waitall`` does: it wakes a sender as soon as it
  has room, a receiver once arrivals pause (or 64 are waiting: one wake-up
  per batch, not per message), and yields with ``sleep(0)`` after ``spin_us``
  (20 us) without any arrival or completion; with nothing to wait for it
  sleeps on an event.
* Order is kept per (source, destination): every message of a pair matches
  the same ``Improbe(ANY_SOURCE, ANY_TAG)``, so MPI's non-overtaking rule
  applies across the plain and the block tags.

The drivers at the bottom run the bench's tests on it with the same payloads
and checks as the aiopdbp and raw runs.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from aiopdbp.bench.workload import Checker, Flow, Measure, Ring

__all__ = ["ACK_CHAN", "Floor", "run_bandwidth", "run_flows"]

BLOCK_TAG = 30000           #: MPI tag of a coalesced block
ACK_CHAN = 900              #: channel of the bandwidth test's acks
_REC = struct.Struct("<IH")  # record header in a block: payload length, channel
_NUMPY_RECV = 64 << 10
_BATCH = 64                  # hand the receiver at most this many arrivals per wake-up


class Floor:
    """Minimal asyncio messaging over one communicator (see the module doc)."""

    def __init__(self, comm: Any, *, coalesce: bool, block_size: int = 64 << 10,
                 max_inflight: int = 64, spin_us: float = 20.0) -> None:
        from mpi4py import MPI

        self._comm = comm
        self._byte = MPI.BYTE
        self._any_source, self._any_tag = MPI.ANY_SOURCE, MPI.ANY_TAG
        self._status = MPI.Status()
        self.rank: int = comm.Get_rank()
        self._coalesce = coalesce
        self._block = block_size
        self._max_inflight = max_inflight
        self._spin = spin_us * 1e-6
        self._inbox: deque[tuple[int, int, Any]] = deque()
        self._reqs: deque[Any] = deque()
        self._pending: dict[int, bytearray] = {}
        self._recent: set[int] = set()
        self._tick = False
        self._waiter: asyncio.Future[None] | None = None
        self._space: asyncio.Future[None] | None = None
        self._space_most = 0   # the space waiter wakes when at most this many sends are in flight
        self._active = False   # set by _pump when a message or a completion came
        self._idle = asyncio.Event()
        self._sleeping = False
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the poller on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._poll())

    async def aclose(self) -> None:
        """Complete every send, then stop the poller."""
        await self.drain()
        self._closing = True
        self._idle.set()
        if self._task is not None:
            await self._task

    # ------------------------------------------------------------------ sending
    def _post(self, dst: int, tag: int, buf: Any) -> None:
        self._reqs.append(self._comm.Isend([buf, self._byte], dst, tag))
        if self._sleeping:
            self._idle.set()

    def _end_of_iteration(self) -> None:
        """Post every partly filled block; the next message per destination goes at once."""
        self._tick = False
        self._recent.clear()
        pending, self._pending = self._pending, {}
        for dst, blk in pending.items():
            self._post(dst, BLOCK_TAG, blk)

    async def send(self, dst: int, chan: int, data: Any) -> None:
        """Send ``data`` to rank ``dst`` on channel ``chan`` (the buffer must stay unchanged).

        Cancellation: the message is already posted or packed when the call
        suspends (only to wait for room), so nothing is lost.
        """
        if not self._coalesce:
            self._post(dst, chan, data)
        elif dst in self._recent and len(data) < self._block:
            blk = self._pending.get(dst)
            if blk is None:
                blk = self._pending[dst] = bytearray()
            blk += _REC.pack(len(data), chan)
            blk += data
            if len(blk) >= self._block:
                del self._pending[dst]
                self._post(dst, BLOCK_TAG, blk)
        else:
            blk = self._pending.pop(dst, None)
            if blk is not None:  # keep order: what was packed goes first
                self._post(dst, BLOCK_TAG, blk)
            self._recent.add(dst)
            if not self._tick:
                self._tick = True
                self._loop.call_soon(self._end_of_iteration)
            self._post(dst, chan, data)
        if len(self._reqs) >= self._max_inflight:
            # Hysteresis, like a raw window's Waitall: one wake-up per half window.
            await self._wait_sends(self._max_inflight // 2)

    async def _wait_sends(self, most: int) -> None:
        while len(self._reqs) > most:
            self._space_most = most
            fut = self._space = self._loop.create_future()
            if self._sleeping:
                self._idle.set()
            try:
                await fut
            finally:
                self._space = None

    async def drain(self) -> None:
        """Post what is packed and wait until every send completed.

        Cancellation: sends stay posted; call again to wait for them.
        """
        self._end_of_iteration()
        await self._wait_sends(0)

    # ---------------------------------------------------------------- receiving
    async def recv(self) -> tuple[int, int, Any]:
        """The next message from any rank: ``(source, channel, data)``.

        Cancellation: nothing is taken from the inbox.
        """
        inbox = self._inbox
        while not inbox:
            fut = self._waiter = self._loop.create_future()
            if self._sleeping:
                self._idle.set()
            try:
                await fut
            finally:
                self._waiter = None
        return inbox.popleft()

    def _pump(self) -> None:
        """Receive every matched message and complete sends (``_active`` tells if any)."""
        st, improbe, inbox = self._status, self._comm.Improbe, self._inbox
        while (msg := improbe(self._any_source, self._any_tag, st)) is not None:
            n, src, tag = st.Get_count(self._byte), st.Get_source(), st.Get_tag()
            buf: Any = bytearray(n) if n < _NUMPY_RECV else np.empty(n, dtype=np.uint8)
            msg.Recv([buf, self._byte])
            if tag == BLOCK_TAG:
                mv, pos, unpack, hs = memoryview(buf), 0, _REC.unpack_from, _REC.size
                while pos < n:
                    ln, chan = unpack(buf, pos)
                    pos += hs
                    inbox.append((src, chan, mv[pos:pos + ln].tobytes()))
                    pos += ln
            else:
                inbox.append((src, tag, buf))
            self._active = True
        reqs = self._reqs
        # Oldest first: sends complete about in order, and one Test is ~10x
        # cheaper than a Testsome over a window of requests.
        while reqs and reqs[0].Test():
            reqs.popleft()
            self._active = True

    def _wake(self) -> None:
        """Resolve the futures of whoever can run now."""
        space = self._space
        if space is not None and len(self._reqs) <= self._space_most and not space.done():
            space.set_result(None)
        if self._inbox and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _poll(self) -> None:
        clock, sleep0, inbox = time.perf_counter, asyncio.sleep, self._inbox
        while not self._closing:
            if self._waiter is None and self._space is None and not self._reqs:
                self._sleeping = True
                self._idle.clear()
                await self._idle.wait()
                self._sleeping = False
                continue
            # When a coroutine waits on us, drive MPI (like a blocking Waitall).
            # Wake a sender as soon as it has room; hand a receiver what came
            # once arrivals pause (or _BATCH are waiting); give up after spin_us
            # without any arrival or completion, or when a block flush is due.
            # With nobody waiting (sends in flight only), poll once per iteration.
            waiting = self._waiter is not None or self._space is not None
            end = clock() + self._spin
            while True:
                self._active = False
                self._pump()
                if not waiting:
                    break
                space = self._space
                if (space is not None and len(self._reqs) <= self._space_most) or len(inbox) >= _BATCH:
                    break
                if self._active:
                    end = clock() + self._spin
                elif (inbox and self._waiter is not None) or self._tick or clock() >= end:
                    break
            self._wake()
            await sleep0(0)


# ======================================================================= drivers
async def run_bandwidth(fl: Floor, ring: Ring, windows: int, warmup: int, send_ring: Ring,
                        checker: Checker) -> Measure:
    """osu_bw from rank 0 to rank 1, an ack after every window."""
    rank = fl.rank
    if rank > 1:
        return Measure()
    w, units, p = ring.window, send_ring.units, ring.count
    send, recv = fl.send, fl.recv
    t0 = c0 = 0.0
    for it in range(warmup + windows):
        if it == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        if rank == 0:
            i = it * w
            for u in range(w):
                await send(1, 0, units[(i + u) % p])
            await recv()  # the ack
        else:
            got = [await recv() for _ in range(w)]
            checker.check_all([g[0] for g in got], [g[2] for g in got])
            await send(0, ACK_CHAN, b"ack")
    await fl.drain()
    n = windows * w
    return Measure(time.perf_counter() - t0, time.process_time() - c0,
                   n if rank == 0 else 0, n if rank == 1 else 0, checker.errors)


async def run_flows(fl: Floor, fls: Sequence[Flow], ring: Ring, units: int, send_ring: Ring,
                    checker: Checker) -> Measure:
    """``units`` units on every flow: one sender loop (round-robin over its
    flows) and one receiver loop per rank, concurrently."""
    rank = fl.rank
    outs = [(f.dst, f.chan) for f in fl_sorted(fls) if f.src == rank]
    ins = [(f.src, f.chan) for f in fl_sorted(fls) if f.dst == rank]
    if not outs and not ins:
        return Measure()
    payload, p = send_ring.units, ring.count

    async def sender() -> None:
        send = fl.send
        for i in range(units):
            u = payload[i % p]
            for dst, chan in outs:
                await send(dst, chan, u)
        await fl.drain()

    async def receiver() -> None:
        # a window's units checked at once, as the raw receiver checks its window
        recv, check, n, w = fl.recv, checker.check_all, units * len(ins), ring.window
        for i in range(0, n, w):
            srcs, chans, datas = zip(*[await recv() for _ in range(min(w, n - i))])
            check(list(zip(srcs, chans)), datas)

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*([sender()] if outs else []), *([receiver()] if ins else []))
    t, c = time.perf_counter() - t0, time.process_time() - c0
    checker.expect_counts({key: units for key in ins})
    return Measure(t, c, units * len(outs), units * len(ins), checker.errors)


def fl_sorted(fls: Sequence[Flow]) -> list[Flow]:
    """Flows in a fixed order (the same on every rank)."""
    return sorted(fls)
