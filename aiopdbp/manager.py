"""The PipeManager (PM / PipeM): one coroutine per host that routes CDUs.

Theory of operation
-------------------
GPs never deliver anything themselves.  A sending GP *reserves* a slot at the
final target (a local private pipe, a stream's bound pipe ``PipeB``, or the
link to a remote host) and writes its CDU into one of the host's **public
pipes** (CPS): the message pipe, or the stream pipe ``PipeA`` bound to its
data stream.  A public pipe that turns non-empty announces itself on the
manager's *ready* queue; the manager wakes once, drains every ready pipe in
batches (no Task and no wake-up per message) and routes each CDU:

* a short/command message or a stream OPEN goes to every destination GP in
  ``dest_ps``: a local GP's private pipe, or -- once per host, whatever the
  number of GPs there (multicast fan-out happens at the receiving host) -- the
  link to a remote host;
* a stream SEGMENT/END/ABORT is looked up in the stream map (MTA) by
  ``(source node, sno)`` and goes to the stream's ``PipeB`` if the receiver is
  local, else to the receiver's host.

Because every slot was reserved by the sender, routing never waits: one slow
GP stalls only the GPs that send to it, never the manager.  CDUs that arrive
from the network enter through :meth:`PipeManager.route` as well, so local and
remote traffic share one routing function.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from .codec import CDU, Kind, StreamOp
from .pipes import Pipe

if TYPE_CHECKING:
    from .node import Node

log = logging.getLogger("aiopdbp.manager")

BATCH = 512  # CDUs routed from one public pipe before looking at the next one


class Target(Protocol):
    """Where the manager can put a CDU: a Pipe, or a link to a remote host."""

    remote: bool

    def reserve_nowait(self) -> None: ...
    async def reserve(self) -> None: ...
    def unreserve(self) -> None: ...
    def put_reserved(self, item: Any) -> None: ...
    def force_put(self, item: Any) -> None: ...


class PipeManager:
    """Routes CDUs from the public pipes to private pipes or remote hosts."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._ready: deque[Pipe[CDU]] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.routed = 0
        self.dropped = 0

    # -- public pipes announce themselves ---------------------------------------
    def watch(self, pipe: Pipe[CDU]) -> None:
        """Make ``pipe`` a public pipe this manager drains."""
        pipe.on_ready = self._on_ready

    def _on_ready(self, pipe: Pipe[CDU]) -> None:
        self._ready.append(pipe)
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def idle(self) -> bool:
        """True when no public pipe holds a CDU."""
        return not self._ready

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="aiopdbp-pipemanager")

    async def stop(self) -> None:
        """Cancel the routing task and wait for it.

        Cancellation: if the caller is cancelled the task is still cancelled.
        """
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():  # we were cancelled, not the task
                raise

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        ready = self._ready
        route = self.route
        while True:
            while ready:
                pipe = ready.popleft()
                batch = pipe.drain_nowait(BATCH)
                if len(pipe):
                    ready.append(pipe)  # fairness: others go first
                for cdu in batch:
                    try:
                        route(cdu)
                    except Exception:  # never let one bad CDU kill routing
                        self.dropped += 1
                        log.exception("dropping CDU that could not be routed: %r", cdu)
                self.routed += len(batch)
                if len(batch) == BATCH:
                    await asyncio.sleep(0)  # let consumers run on long bursts
            self._wakeup = loop.create_future()
            try:
                await self._wakeup
            finally:
                self._wakeup = None

    # -- routing -----------------------------------------------------------------
    def route(self, cdu: CDU) -> None:
        """Put one CDU where it goes (never waits; the slot was reserved)."""
        node = self._node
        if cdu.kind is Kind.STREAM and cdu.op is not StreamOp.OPEN:
            tgt = node._stream_target(cdu)
            if tgt is None:
                self.dropped += 1
                return
            if cdu.op is StreamOp.ABORT:
                tgt.force_put(cdu)
            else:
                tgt.put_reserved(cdu)
            return
        targets = node._targets
        dests = cdu.dest_ps
        if len(dests) == 1:
            tgt = targets.get(dests[0])
            if tgt is None:
                self.dropped += 1  # freed between the send and now
                return
            tgt.put_reserved(cdu)
            if cdu.kind is Kind.STREAM:  # an OPEN: its segments may follow now
                node._open_routed(cdu)
            return
        seen: set[int] = set()
        for pid in dests:
            tgt = targets.get(pid)
            if tgt is None:
                self.dropped += 1
                continue
            if id(tgt) in seen:
                continue
            seen.add(id(tgt))
            tgt.put_reserved(cdu)
