"""The send side of the MPI progress engine: every send request of one
transport from its post to its completion.

A send is posted in the caller's task (:meth:`Sends.post`: one ``Isend`` per
block and one ``Test``; an eager message completes right there and the
caller gets no future at all), or by a one-frame :meth:`lane <Sends.lane>`
in one call of the compiled kernel.  One that did not complete at once is
tracked here, oldest first, and completed by the engine's step
(:meth:`Sends.complete`): sends complete about in order, so ``Test`` the
oldest until one is not done (one ``Test`` costs a tenth of a ``Testsome``
over a window); every 32nd step, ``Testsome`` over all of them.  Its blocks
stay referenced until MPI is done with them.

Each send to a rank whose previous send from us is older than the doorbell's
``RING_AFTER_S`` rings it (:mod:`aiopdbp.transport.doorbell`): it may be
asleep.  The engine owns the doorbell and tells this side when it is joined
or closed (:meth:`Sends.use_bell`).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from aiopdbp.errors import TransportError
from aiopdbp.transport.core import kernel_core
from aiopdbp.transport.doorbell import RING_AFTER_S, Doorbell
from aiopdbp.transport.mpiload import prepare_mpi_import

prepare_mpi_import()
from mpi4py import MPI  # noqa: E402  (thread level must be set first)

__all__ = ["FULL_SCAN_EVERY", "Sends", "resolve"]

#: every this many steps, Testsome over every send (not only the oldest)
FULL_SCAN_EVERY: Final = 32

_BYTE = MPI.BYTE
_Testsome = MPI.Request.Testsome
_Testall = MPI.Request.Testall


def resolve(fut: asyncio.Future[None]) -> None:
    """Complete ``fut`` unless it is already done (a waiter may have left)."""
    if not fut.done():
        fut.set_result(None)


class _SendOp:
    """One post: its future, requests still running, blocks kept alive."""

    __slots__ = ("future", "remaining", "blocks")

    def __init__(self, future: asyncio.Future[None], remaining: int, blocks: tuple[Any, ...]) -> None:
        self.future = future
        self.remaining = remaining
        self.blocks: tuple[Any, ...] | None = blocks


class Sends:
    """The send requests of one transport (read the module docstring).

    ``comms[i]`` is the communicator of channel ``i``, ``bulk`` the large
    payloads' one; every message on them uses ``tag``.  ``kick()`` tells the
    engine it has requests to complete.  After :meth:`fail`, every post
    raises the failure and every lane refuses.
    """

    def __init__(self, comms: Sequence[MPI.Comm], tag: int, bulk: MPI.Comm | None,
                 kick: Callable[[], None]) -> None:
        self._comms = list(comms)
        self._bulk = bulk
        self._tag = tag
        self._kick = kick
        self._loop: asyncio.AbstractEventLoop | None = None
        self._post_one = kernel_core.post_one
        self._bell: Doorbell | None = None
        self._last_to = [-1e9] * self._comms[0].Get_size()   # when we last sent to each rank
        self._lanes: list[Any] = []   # every SendLane made (see lane)
        #: the requests not completed at once, (request, op) oldest first
        self.reqs: collections.deque[tuple[Any, _SendOp]] = collections.deque()
        self.failure: BaseException | None = None
        self._steps = 0
        self.n_sends = self.n_fast_sends = self.bytes_sent = self.n_send_calls = 0
        self.n_completed = self.n_testsome = self.n_testsome_hits = self.n_bulk_sends = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make the futures of sends not completed at once in ``loop``."""
        self._loop = loop

    def use_bell(self, bell: Doorbell | None) -> None:
        """Ring through ``bell`` from now on (None: ring no more)."""
        self._bell = bell
        for lane in self._lanes:
            lane.bell = bell

    # ------------------------------------------------------------ posting
    def post(self, channel: int, dest: int, blocks: Sequence[Any]) -> asyncio.Future[None] | None:
        """Post one ``Isend`` per block; None when all completed at once
        (eager), else a future that completes when every block may be reused."""
        if self.failure is not None:
            raise TransportError(f"MPI progress failed: {self.failure!r}")
        comm = self._comms[channel]
        tag = self._tag
        self.n_send_calls += 1
        if len(blocks) == 1:  # the commonest: one frame, sent eagerly
            b = blocks[0]
            req = self._post_one(comm, b, dest, tag)
            self.bytes_sent += len(b) if type(b) is bytes else memoryview(b).nbytes
            self.n_sends += 1
            self._ring(dest)
            if req is None:
                self.n_fast_sends += 1
                return None
            reqs = [req]
        else:
            reqs = []
            for b in blocks:
                reqs.append(comm.Isend([b, _BYTE], dest, tag))
                self.bytes_sent += len(b) if type(b) is bytes else memoryview(b).nbytes
            self.n_sends += len(reqs)
            self._ring(dest)
            if _Testall(reqs):
                self.n_fast_sends += len(reqs)
                return None
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        op = _SendOp(fut, len(reqs), tuple(blocks))
        for r in reqs:
            self.reqs.append((r, op))
        self._kick()
        return fut

    def post_bulk(self, dest: int, tag: int, buf: Any, done: asyncio.Future[None] | None = None,
                  head: Any = None) -> asyncio.Future[None] | None:
        """``Isend`` of one large payload on the bulk communicator with
        ``tag`` (its receiver posts the matching receive when the payload's
        header arrives); None when it completed at once, else a future that
        completes when ``buf`` may be reused -- ``done`` itself when given
        (resolved by the step that sees the completion: no callback hop for a
        caller waiting on it).  ``buf`` stays referenced until MPI is done
        with it.  ``head``: the split frame's header, posted first as
        :meth:`post` posts one frame on the data channel (a large message's
        two posts in one call); one that does not complete at once is
        completed here like any send, its future nobody's."""
        if self.failure is not None:
            raise TransportError(f"MPI progress failed: {self.failure!r}")
        assert self._bulk is not None
        if head is not None:
            hreq = self._post_one(self._comms[1], head, dest, self._tag)
            self._ring(dest)
            self.n_send_calls += 1
            self.n_sends += 1
            self.bytes_sent += len(head)
            if hreq is None:
                self.n_fast_sends += 1
            else:
                assert self._loop is not None
                self.reqs.append((hreq, _SendOp(self._loop.create_future(), 1, (head,))))
                self._kick()
        self.n_bulk_sends += 1
        self.bytes_sent += memoryview(buf).nbytes
        req = self._post_one(self._bulk, buf, dest, tag)
        if req is None:
            if done is not None:
                resolve(done)
            return None
        return self._pending_bulk(req, buf, done)

    def _ring(self, dest: int) -> None:
        """Ring ``dest`` when our previous send to it is older than
        ``RING_AFTER_S``: it may be asleep then (see the doorbell module);
        never otherwise.  After the ``Isend``: the woken engine must find it."""
        bell = self._bell
        if bell is not None:
            now = time.perf_counter()
            last = self._last_to
            if now - last[dest] > RING_AFTER_S:
                bell.ring(dest)
            last[dest] = now

    # -------------------------------------------------------------- lanes
    def lane(self, channel: int, dest: int, refuse: Callable[[], None]) -> Any:
        """A :class:`~aiopdbp.transport.kernel.SendLane` for one-frame sends
        to ``dest`` on ``channel``: what :meth:`post` does for one block, in
        one call of the compiled kernel.  ``refuse()`` raises why a send
        cannot be posted (the transport is closed); a failure shuts the lane."""
        bulk = self._bulk if channel == 1 else None  # the data lane posts split frames too (post_pair)
        lane = kernel_core.SendLane(self._comms[channel], dest, self._tag, self._last_to, RING_AFTER_S,
                                    self._bell, self._pending, refuse, bulk, self._pending_bulk)
        if self.failure is not None:
            lane.open = False
            lane.refuse = self.raise_failure
        self._lanes.append(lane)
        return lane

    def shut(self) -> None:
        """No lane posts again: each calls its ``refuse`` (the transport closes)."""
        for lane in self._lanes:
            lane.open = False

    def _pending(self, req: Any, buf: Any) -> asyncio.Future[None]:
        """A lane's send that did not complete at once: tracked as :meth:`post`'s are."""
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self.reqs.append((req, _SendOp(fut, 1, (buf,))))
        self._kick()
        return fut

    def _pending_bulk(self, req: Any, buf: Any, done: asyncio.Future[None] | None) -> asyncio.Future[None]:
        """A payload send that did not complete at once: its future (``done``
        when given) is resolved by the step that sees it complete."""
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future() if done is None else done
        self.reqs.append((req, _SendOp(fut, 1, (buf,))))
        self._kick()
        return fut

    def raise_failure(self, *_: Any) -> None:
        """Raise the failure (a failed lane's ``refuse``)."""
        raise TransportError(f"MPI progress failed: {self.failure!r}")

    # ---------------------------------------------------------- completing
    def complete(self) -> bool:
        """Complete what MPI has finished (one engine step); True if any."""
        sends = self.reqs
        done = False
        while sends and sends[0][0].Test():
            _, op = sends.popleft()
            self._finish(op)
            self.n_completed += 1
            done = True
        self._steps += 1
        if sends and self._steps % FULL_SCAN_EVERY == 0:
            reqs = [r for r, _ in sends]
            self.n_testsome += 1
            idx = _Testsome(reqs)
            if idx:
                self.n_testsome_hits += 1
                self.n_completed += len(idx)
                done = True
                hit = set(idx)
                kept: collections.deque[tuple[Any, _SendOp]] = collections.deque()
                for i, item in enumerate(sends):
                    if i in hit:
                        self._finish(item[1])
                    else:
                        kept.append(item)
                self.reqs = kept
        return done

    @staticmethod
    def _finish(op: _SendOp) -> None:
        op.remaining -= 1
        if op.remaining == 0:
            op.blocks = None
            resolve(op.future)

    def fail(self, exc: BaseException) -> None:
        """MPI progress failed: every post raises ``exc`` from now on and
        every lane refuses with it."""
        self.failure = exc
        for lane in self._lanes:
            lane.open = False
            lane.refuse = self.raise_failure

    def abandon(self) -> list[Any]:
        """Give up on every request: fail its waiter; returns what MPI may
        still touch (the caller keeps it alive)."""
        kept = list(self.reqs)
        err = TransportError(f"MPI progress failed: {self.failure!r}" if self.failure is not None
                             else "transport closed before the send completed")
        for _, op in kept:
            if not op.future.done():
                op.future.set_exception(err)
                op.future.exception()
        self.reqs.clear()
        return kept

    def stats(self) -> dict[str, Any]:
        """Counters: posts, messages, bytes, completions (lanes' included)."""
        lanes = self._lanes
        lane_sends = sum(lane.sends for lane in lanes)
        return {
            "send_calls": self.n_send_calls + lane_sends, "sends": self.n_sends + lane_sends,
            "fast_sends": self.n_fast_sends + sum(lane.fast for lane in lanes),
            "bytes_sent": self.bytes_sent + sum(lane.nbytes for lane in lanes), "completed_reqs": self.n_completed,
            "testsome_calls": self.n_testsome, "testsome_hits": self.n_testsome_hits,
            "bulk_sends": self.n_bulk_sends + sum(lane.bulk_sends for lane in lanes),
        }
