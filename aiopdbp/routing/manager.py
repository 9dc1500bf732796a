"""The PipeManager (PM / PipeM): one coroutine per host that routes CDUs.

Theory of operation
-------------------
GPs never deliver anything themselves.  A sending GP reserves room at the
final target (a local private pipe or a stream's ``PipeB``: a slot; a remote
host's link: credit towards the destination GP -- see :mod:`aiopdbp.routing.router`)
and writes its CDU, as a ``(target, pid, item)`` entry, into one of the
host's **public pipes** (CPS): the message pipe, or the stream pipe ``PipeA``
bound to its data stream.  A public pipe that turns non-empty announces
itself on the manager's *ready* queue; the manager wakes once, drains every
ready pipe in batches (no Task and no wake-up per message) and routes each
entry: ``target.put_to(pid, item)`` -- into a local GP's private pipe, into a
stream's PipeB, or onto the link of a remote host (whose SBP coalesces it).

Because every slot was reserved by the sender, routing never waits: one slow
GP stalls only the GPs that send to it, never the manager.

*The fast path is the same path.*  When no public pipe holds anything,
:meth:`PipeManager.submit` routes the entry in the sender's task at once --
exactly what the manager would do next, without the hop to its task; the
order is unchanged, because nothing is queued ahead.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from aiopdbp.routing.pipes import Pipe

log = logging.getLogger("aiopdbp.routing.manager")

__all__ = ["BATCH", "PipeManager"]

BATCH = 512  # entries routed from one public pipe before looking at the next one


class PipeManager:
    """Routes ``(target, pid, item)`` entries from the public pipes."""

    def __init__(self) -> None:
        #: the public pipes holding entries, in the order they turned
        #: non-empty (read it, never change it: non-empty means a send must
        #: queue behind them -- the router's fast path looks)
        self.queued: deque[Pipe[Any]] = deque()
        self._ready = self.queued
        self._wakeup: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: the message group of the CPS: short messages, commands, stream OPENs
        self.public: Pipe[Any] = Pipe(1 << 30, 0, "cps-msg")
        self.watch(self.public)
        self.routed = 0
        self.dropped = 0

    # -- public pipes announce themselves ---------------------------------------
    def watch(self, pipe: Pipe[Any]) -> None:
        """Make ``pipe`` a public pipe this manager drains."""
        pipe.on_ready = self._on_ready

    def _on_ready(self, pipe: Pipe[Any]) -> None:
        self._ready.append(pipe)
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def idle(self) -> bool:
        """True when no public pipe holds an entry."""
        return not self._ready

    def submit(self, target: Any, pid: int, item: Any) -> None:
        """Route one message-path entry (its room was reserved): at once when
        nothing is queued ahead of it, else behind what is."""
        if not self._ready:
            if target.put_to(pid, item) is False:
                self.dropped += 1  # its GP left between the send and now
            self.routed += 1
        else:
            self.public.force_put((target, pid, item))

    def route_now(self, target: Any, pid: int, item: Any) -> bool | None:
        """Route a message-path entry (its room was reserved) at once when
        nothing is queued ahead of it: the target's answer (False: it
        refused it, its GP or its host gone).  None, having done nothing,
        when entries are queued: the caller submits it behind them (and
        hears of it from its own target wrapper)."""
        if self._ready:
            return None
        put: bool | None = target.put_to(pid, item)
        if put is False:
            self.dropped += 1
        self.routed += 1
        return put

    def put(self, pipe: Pipe[Any], target: Any, pid: int, item: Any) -> None:
        """Route an entry of the public pipe ``pipe`` (a stream's PipeA; its
        room was reserved): at once when nothing is queued ahead of it -- no
        public pipe, ``pipe`` among them, holds an entry -- else into
        ``pipe``, behind what is (as :meth:`submit` does for the message pipe)."""
        if not self._ready:
            if target.put_to(pid, item) is False:
                self.dropped += 1  # its GP left between the send and now
            self.routed += 1
        else:
            pipe.force_put((target, pid, item))

    def offer(self, target: Any, pid: int, nbytes: int, fields: tuple[Any, ...]) -> bool:
        """Route a message at once when nothing is queued ahead of it and its
        target has room: ``target.offer`` reserves and puts in one step.
        False (nothing taken): the caller reserves, waiting, and submits."""
        if self._ready or not target.offer(pid, nbytes, fields):
            return False
        self.routed += 1
        return True

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

    async def drain(self) -> None:
        """Wait until every public pipe is empty (routed).

        Cancellation: nothing to undo.
        """
        while self._ready:
            await asyncio.sleep(0)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        ready = self._ready
        while True:
            while ready:
                pipe = ready.popleft()
                batch = pipe.drain_nowait(BATCH)
                if len(pipe):
                    ready.append(pipe)  # fairness: others go first
                for target, pid, item in batch:
                    try:
                        if target.put_to(pid, item) is False:
                            self.dropped += 1  # its GP left between the send and now
                    except Exception:  # never let one bad entry kill routing
                        self.dropped += 1
                        log.exception("dropping a CDU that could not be routed: %r", item)
                self.routed += len(batch)
                if len(batch) == BATCH:
                    await asyncio.sleep(0)  # let consumers run on long bursts
            self._wakeup = loop.create_future()
            try:
                await self._wakeup
            finally:
                self._wakeup = None
