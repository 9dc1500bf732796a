"""The in-process fabric: several hosts in one event loop.

``InProcFabric(n)`` makes ``n`` connected :class:`InProcTransport` endpoints.
Every block is copied on send, as a network would, and delivered in order per
(source, channel) through ``loop.call_soon``; the control channel has its own
queue so control messages overtake queued data, like the dual channel over
MPI.  Tests run the whole multi-host runtime -- codec, pools, credits, table
replication, streams -- over it, without mpiexec.

Raw messages (:meth:`InProcTransport.raw_isend`) behave like MPI's
rendezvous protocol: a send stays pending, its buffer referenced, until a
receive with the same (source, destination, tag) is posted; then the bytes
are copied and both complete.  So a sender's chunk is busy until the peer
took it, as over MPI, and a test sees a receiver that never matches as a
send that never completes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from aiopdbp.errors import ClosedResourceError, TransportError
from aiopdbp.transport.base import Buffer, Channel, DeliverFn, SinkFn, Transport

_RawKey = tuple[int, int, int]  # (source, destination, tag)
_DATA = Channel.DATA


class _RawRequest:
    """A raw send or receive of the fabric (the RawRequest protocol)."""

    __slots__ = ("buf", "received", "error", "finished", "queue")

    def __init__(self, buf: Buffer) -> None:
        mv = memoryview(buf)
        self.buf = mv if mv.ndim == 1 and mv.format == "B" else mv.cast("B")
        self.received = 0
        self.error: BaseException | None = None
        self.finished = False
        self.queue: deque[_RawRequest] | None = None  # where it waits for its match

    def done(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.finished

    def cancel(self) -> None:
        q = self.queue
        if q is not None and not self.finished:
            q.remove(self)
            self.queue = None
            self.received = -1
            self.finished = True


class InProcFabric:
    """``n`` endpoints that deliver to each other inside one event loop."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("a fabric needs at least one host")
        self.endpoints = [InProcTransport(self, rank, n) for rank in range(n)]
        self.messages = 0
        self.bytes = 0
        self._raw: dict[_RawKey, tuple[deque[_RawRequest], deque[_RawRequest]]] = {}
        self._counts: dict[int, Sequence[int]] = {}   # exchange_counts: each rank's part

    def count_part(self, rank: int, counts: Sequence[int]) -> Callable[[], int | None]:
        """Rank ``rank``'s part of the count exchange (see Transport.exchange_counts)."""
        self._counts[rank] = list(counts)

        def poll() -> int | None:
            if len(self._counts) == len(self.endpoints):
                return sum(part[rank] for part in self._counts.values())
            gone = [e.rank for e in self.endpoints if e.closed and e.rank not in self._counts]
            if gone:
                raise TransportError(f"host(s) {gone} closed without taking part in the count exchange")
            return None

        return poll

    def raw_post(self, key: _RawKey, req: _RawRequest, send: bool) -> _RawRequest:
        """Queue a raw send or receive and complete what now matches."""
        sends, recvs = self._raw.setdefault(key, (deque(), deque()))
        q = sends if send else recvs
        q.append(req)
        req.queue = q
        while sends and recvs:
            s, r = sends.popleft(), recvs.popleft()
            s.queue = r.queue = None
            n = s.buf.nbytes
            if n > r.buf.nbytes:
                r.error = TransportError(f"raw message of {n} bytes truncated to {r.buf.nbytes}")
            else:
                r.buf[:n] = s.buf
                r.received = n
            s.finished = r.finished = True
            s.buf = r.buf = memoryview(b"")  # nothing referenced after completion
        if not sends and not recvs:
            del self._raw[key]
        return req

    def __getitem__(self, rank: int) -> InProcTransport:
        return self.endpoints[rank]

    def __len__(self) -> int:
        return len(self.endpoints)


class InProcTransport(Transport):
    """One host's endpoint of an :class:`InProcFabric`."""

    name = "inproc"

    def __init__(self, fabric: InProcFabric, rank: int, size: int) -> None:
        super().__init__()
        self.fabric = fabric
        self.rank = rank
        self.size = size
        self._deliver: DeliverFn | None = None
        self._on_data: SinkFn | None = None
        self._alloc: Any = None
        self._alloc_min = 0
        # One queue per channel: control is drained before data on every
        # tick, so a control message never waits behind queued data.
        self._queues: tuple[deque[tuple[int, Channel, memoryview]], ...] = (deque(), deque())
        self._scheduled = False
        self.sent = 0
        self.received = 0

    async def start(self, deliver: DeliverFn, alloc: Any = None, *, alloc_min: int = 0,
                    on_data: SinkFn | None = None) -> None:
        """Begin receiving (data-channel blocks to ``on_data`` when given).

        Cancellation: nothing to undo.
        """
        self._check_open()
        self._deliver = deliver
        self._on_data = on_data
        self._alloc = alloc
        self._alloc_min = alloc_min
        if any(self._queues):
            self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        self._scheduled = False
        deliver = self._deliver
        if deliver is None or self._closed:
            return
        ctl, data = self._queues
        # A bounded batch per tick keeps the loop fair to other callbacks.
        for _ in range(256):
            if ctl:
                src, ch, mv = ctl.popleft()
            elif data:
                src, ch, mv = data.popleft()
            else:
                return
            self.received += 1
            if ch is _DATA and self._on_data is not None:
                self._on_data(src, mv)
            else:
                deliver(src, ch, mv)
            if self._closed:  # deliver() may close this endpoint
                return  # type: ignore[unreachable]
        if ctl or data:
            self._schedule()

    def accept(self, source: int, channel: Channel, block: Buffer) -> None:
        if self._closed:
            return
        mv = memoryview(block).cast("B") if memoryview(block).ndim else memoryview(block)
        n = mv.nbytes
        buf = self._alloc(source, channel, n) if self._alloc is not None and n >= self._alloc_min else None
        if buf is None:
            buf = memoryview(bytearray(n))
        buf[:] = mv
        self._queues[channel].append((source, channel, buf))
        if self._deliver is not None:
            self._schedule()

    def _send_now(self, dest: int, channel: Channel, blocks: Sequence[Buffer]) -> None:
        self._check_open()
        if not 0 <= dest < self.size:
            raise TransportError(f"no host {dest} in a fabric of {self.size}")
        peer = self.fabric.endpoints[dest]
        if peer.closed:
            raise TransportError(f"host {dest} has closed its transport")
        for block in blocks:
            peer.accept(self.rank, Channel(channel), block)
            self.sent += 1
            self.fabric.messages += 1
            self.fabric.bytes += memoryview(block).nbytes

    async def send(self, dest: int, channel: Channel, blocks: Sequence[Buffer]) -> None:
        """Copy ``blocks`` to ``dest`` (they may be reused on return).

        Cancellation: the copy happens before the first suspension, so a
        cancelled send has sent everything.
        """
        self._send_now(dest, channel, blocks)

    def post(self, dest: int, channel: Channel, blocks: Sequence[Buffer]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            self._send_now(dest, channel, blocks)
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        return fut

    async def aclose(self, *, graceful: bool = True) -> None:
        """Stop delivering; later sends raise ClosedResourceError.  Idempotent.

        Cancellation: never suspends.
        """
        self._closed = True
        for q in self._queues:
            q.clear()

    def exchange_counts(self, counts: Sequence[int]) -> Callable[[], int | None] | None:
        """Every endpoint's counts, summed when all took part (the fabric's)."""
        return self.fabric.count_part(self.rank, counts)

    raw_tag_limit = 1 << 30

    def raw_isend(self, dest: int, tag: int, buf: Buffer) -> _RawRequest:
        """Post a raw send (completes when ``dest`` posts the matching receive)."""
        self._check_raw(dest, tag)
        if self.fabric.endpoints[dest].closed:
            raise TransportError(f"host {dest} has closed its transport")
        self.fabric.messages += 1
        return self.fabric.raw_post((self.rank, dest, tag), _RawRequest(buf), True)

    def raw_irecv(self, source: int, tag: int, buf: Buffer) -> _RawRequest:
        """Post a raw receive into ``buf`` (completes when ``source``'s send matches)."""
        self._check_raw(source, tag)
        if memoryview(buf).readonly:
            raise ValueError("raw_irecv needs a writable buffer")
        return self.fabric.raw_post((source, self.rank, tag), _RawRequest(buf), False)

    def _check_raw(self, peer: int, tag: int) -> None:
        self._check_open()
        if not 0 <= peer < self.size:
            raise TransportError(f"no host {peer} in a fabric of {self.size}")
        if not 0 <= tag < self.raw_tag_limit:
            raise ValueError(f"raw tag {tag} outside [0, {self.raw_tag_limit})")

    def abort(self, message: str, code: int = 1) -> None:
        raise TransportError(f"host {self.rank} aborted: {message}")

    def stats(self) -> dict[str, Any]:
        return {"sent": self.sent, "received": self.received}


__all__ = ["InProcFabric", "InProcTransport", "ClosedResourceError"]
