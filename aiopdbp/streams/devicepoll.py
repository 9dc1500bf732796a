"""The device path's poller: device work in flight, advanced without blocking.

One :class:`DevicePoller` per node (:class:`~aiopdbp.streams.devicepath.DevicePath`
owns it).  The transport's progress engine calls it on every step while device
work is in flight -- never a blocking synchronize, never a CUDA host callback:
it advances the staging transfers, the receive jobs of incoming device
streams, the events that awaiting calls wait for, and the terminators posted
after a stopped send.  With nothing in flight it takes itself off the engine,
so an idle node pays nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiopdbp.device.backend import Event, Stream
from aiopdbp.device.staging import Stager, Transfer
from aiopdbp.errors import ClosedResourceError, DeviceError
from aiopdbp.transport.base import LoopPoller

if TYPE_CHECKING:
    from aiopdbp.streams.devicestreams import RecvJob
    from aiopdbp.transport.base import RawRequest, Transport

log = logging.getLogger("aiopdbp.streams.devicepath")

__all__ = ["DevicePoller"]


class _Wait:
    """An awaited event; ``keep`` (arrays its work touches) lives until the
    event completed, also when the waiter was cancelled; ``stream`` goes back
    to the copy-stream pool then."""

    __slots__ = ("event", "fut", "keep", "stream")

    def __init__(self, event: Event, fut: asyncio.Future[None], keep: tuple[Any, ...], stream: Stream | None) -> None:
        self.event = event
        self.fut = fut
        self.keep = keep
        self.stream = stream


class DevicePoller:
    """Device work in flight on one node, polled by the progress engine
    (``transport``; a loop poller on a single host)."""

    def __init__(self, transport: Transport | None) -> None:
        self._transport = transport
        #: the node's stager, once the device path opened it
        self.stager: Stager | None = None
        #: receive jobs of incoming device streams, oldest first
        self.jobs: list[RecvJob] = []
        self._events: list[_Wait] = []
        self._terminators: list[RawRequest] = []
        self._remove: Callable[[], None] | None = None
        self._retire_scheduled = False
        self._closed = False

    def add_job(self, job: RecvJob) -> None:
        """Poll ``job`` until it finished."""
        self.jobs.append(job)
        self.kick()

    def add_terminator(self, request: RawRequest) -> None:
        """Keep the send ``request`` (a stream's terminator) until it is over."""
        self._terminators.append(request)
        self.kick()

    def kick(self) -> None:
        """Work was queued: be on the progress engine."""
        if self._remove is None and not self._closed:
            transport = self._transport
            if transport is not None:
                self._remove = transport.add_poller(self._poll)
            else:
                self._remove = LoopPoller(self._poll).remove  # a single host

    async def wait(self, event: Event, keep: tuple[Any, ...] = (), stream: Stream | None = None) -> None:
        """Wait, without blocking the loop, until ``event`` is done (the poller
        queries it); ``keep`` stays referenced until then, ``stream`` (a copy
        stream of the pool) is given back then.

        Cancellation: stops waiting; the device work goes on, and ``keep``
        lives until it is over.
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._events.append(_Wait(event, fut, keep, stream))
        self.kick()
        await fut

    async def transfer(self, start: Callable[[Callable[[Any], None]], Transfer]) -> Transfer:
        """Start a staging transfer and wait until it succeeded (raise its error).

        Cancellation: the transfer is aborted.
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(_: Any) -> None:
            if not fut.done():
                fut.set_result(None)

        t = start(done)
        self.kick()
        try:
            await fut
        except asyncio.CancelledError:
            t.abort(ClosedResourceError("the awaiting call was cancelled"))
            raise
        if t.error is not None:
            raise t.error
        return t

    def close(self) -> None:
        """Abandon the receive jobs, fail the waits, leave the engine."""
        self._closed = True
        for job in self.jobs:
            job.abandon()
        self.jobs.clear()
        for fut in (w.fut for w in self._events):
            if not fut.done():
                fut.set_exception(ClosedResourceError("node closed"))
                fut.exception()
        self._events.clear()
        self._retire()

    # ------------------------------------------------------------ polling
    def _busy(self) -> bool:
        return bool(self._events or self.jobs or self._terminators or
                    (self.stager is not None and self.stager.pending))

    def _retire(self) -> None:
        self._retire_scheduled = False
        if self._remove is not None and (self._closed or not self._busy()):
            self._remove()
            self._remove = None

    def _poll(self) -> bool:
        """One step: transfers, receive jobs, events, terminators (oldest first)."""
        try:
            moved = self.stager.poll() if self.stager is not None and self.stager.pending else False
            if self.jobs:
                for job in self.jobs:
                    moved = job.poll() or moved
                if any(job.finished for job in self.jobs):
                    self.jobs = [j for j in self.jobs if not j.finished]
            if self._events:
                moved = self._poll_events() or moved
            if self._terminators:
                self._terminators = [r for r in self._terminators if not _over(r)]
        except Exception:  # a bug must not stop the progress engine
            log.exception("device poller failed")
            moved = False
        if not self._busy() and not self._retire_scheduled:
            self._retire_scheduled = True  # not now: the engine is iterating its pollers
            asyncio.get_running_loop().call_soon(self._retire)
        return moved

    def _poll_events(self) -> bool:
        kept: list[_Wait] = []
        for w in self._events:
            try:
                if not w.event.done():
                    kept.append(w)  # also when its waiter is gone: w.keep lives on
                    continue
            except DeviceError as exc:
                if not w.fut.done():
                    w.fut.set_exception(exc)
                continue
            if not w.fut.done():
                w.fut.set_result(None)
            if w.stream is not None and self.stager is not None:
                self.stager.streams.give(w.stream)
        moved = len(kept) != len(self._events)
        self._events = kept
        return moved


def _over(req: Any) -> bool:
    try:
        return bool(req.done())
    except Exception:
        return True
