"""A pipe's room for its local senders: slots, the byte bound, reservations
and the senders parked for room (:class:`Room`; the pipe is
:mod:`aiopdbp.routing.pipes`, whose "Reservations" says why senders reserve).

Theory of operation
-------------------
*Slots.*  ``queued + reserved <= capacity`` always holds: a sender reserves a
slot before its item goes in, and the item fills it.  Without a byte bound
``queued`` is every item in the pipe; with one it is the local items only
(their marks, below).

*Bytes.*  A pipe made with ``max_bytes`` (a GP's private pipe: the node's
``RemoteConfig.gp_window``, 1 MiB by default) also bounds the bytes its
local senders have reserved or queued in it, by the same rule as the credit
a remote host has towards a GP (:mod:`aiopdbp.hosts.link`, "Credit"): a
message of ``n`` bytes (``credit_cost``) is admitted while the bytes held
plus ``n`` fit in ``max_bytes``, or when none are held (a message larger
than the bound goes alone).  So a reader that does not read holds at most
``max(max_bytes, largest message)`` bytes from its own rank, as it holds at
most that much per other host; the bytes return as the reader takes the
items (``release``: each local item's mark is its arrival number and
bytes).  A stream's OPEN holds what its sender reserved (``pipe_cost``: the
whole stream when the OPEN carries it).  Items from other hosts are not
counted here, neither in bytes nor in slots (with a byte bound ``capacity``
counts local items only): their credit already bounded them, and counted
they would take the local senders' room.

*Fair hand-off.*  Room the reader frees is reserved for the head of the
parked senders before it is woken; while anyone is parked or a woken sender
has not run (``woken``), the pipe is *contended* and no fast path admits
anyone: a sender refused then parks at the tail, to be served once one
woken before it has run.  So a woken sender that loops to send again
cannot spend room freed for the others before they have run (the contended
rule of :mod:`aiopdbp.hosts.link`, "Fair for every size").  Before anyone
parks, the empty pipe's ``max_bytes`` go to the fast path (``admit``); the
senders share them because a GP's run of sends that never suspend yields a
loop turn every ``BURST_BYTES`` of credit (:mod:`aiopdbp.hosts.link`, "From
the first message"), so k looping senders fill it in turns, and the
reader then takes it in turns (:mod:`aiopdbp.routing.pipes`, "Turns").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from aiopdbp.hosts.gate import ParkingLot
from aiopdbp.wire.message import Message, credit_cost


def item_cost(item: Any) -> int:
    """The bytes a local item holds of its pipe's bound, as its sender
    reserved them: a message's credit cost; another item's ``pipe_cost``
    (a stream's OPEN: with the stream when its OPEN carries it whole), or
    none."""
    return credit_cost(item[3]) if type(item) is Message else getattr(item, "pipe_cost", 0)


def fail_all(waiters: deque[asyncio.Future[None]] | list[asyncio.Future[None]],
             exc: BaseException) -> None:
    """Fail every future in ``waiters`` with ``exc`` (and empty it)."""
    futs = list(waiters)
    waiters.clear()
    for fut in futs:
        if not fut.done():
            fut.set_exception(exc)
            # The waiter may already be cancelled and never look at it.
            fut.exception()


class Room:
    """One pipe's room for its local senders (see the module docstring).

    The state is public for the readers that take an item inline (the pipe,
    and the compiled receive path): ``marks`` (local items queued, as
    ``(arrival number, bytes)``) and ``lot`` (the parked senders) are what
    a take looks at before it calls ``release`` / ``serve``.
    """

    __slots__ = ("capacity", "max_bytes", "reserved", "rbytes", "qbytes", "marks", "woken", "lot",
                 "_queued")

    def __init__(self, capacity: int, max_bytes: int, queued: Callable[[], int]) -> None:
        self.capacity = capacity
        # the byte bound (0: none): bytes reserved by local senders, bytes of
        # their items queued, and (arrival number, bytes) of those items
        self.max_bytes = max_bytes
        self.reserved = 0
        self.rbytes = 0
        self.qbytes = 0
        self.marks: deque[tuple[int, int]] = deque()
        # senders handed a reservation (``serve``) that have not run yet:
        # while any has, or one is parked, the pipe is contended (no fast path)
        self.woken = 0
        self.lot: ParkingLot[asyncio.Future[None]] = ParkingLot()
        # the items in the pipe (the slots' count without a byte bound)
        self._queued = queued

    @property
    def held_bytes(self) -> int:
        """Bytes local senders have reserved or queued (bounded by ``max_bytes``)."""
        return self.rbytes + self.qbytes

    @property
    def free(self) -> int:
        """Slots neither filled nor reserved (with a byte bound: by local items)."""
        return self.capacity - (len(self.marks) if self.max_bytes else self._queued()) - self.reserved

    def fits(self, nbytes: int) -> bool:
        """A free slot, and (with a byte bound) room for ``nbytes`` by the
        credit rule; with a byte bound the slots count local items only."""
        if not self.max_bytes:
            return self._queued() + self.reserved < self.capacity
        if len(self.marks) + self.reserved >= self.capacity:
            return False
        used = self.rbytes + self.qbytes
        return used <= 0 or used + nbytes <= self.max_bytes

    def take_nowait(self, nbytes: int) -> bool:
        """Reserve a slot (and ``nbytes``) now; False when it does not fit
        or the pipe is contended (a slot is never taken past a sender
        already parked for one)."""
        if self.lot or self.woken or not self.fits(nbytes):
            return False
        self.reserved += 1
        self.rbytes += nbytes if self.max_bytes else 0
        return True

    async def wait(self, nbytes: int) -> None:
        """Park until a slot (and ``nbytes``) is reserved for this sender,
        in FIFO order; what the pipe's close fails the parked with is raised.

        Cancellation: a cancelled wait holds no slot; a slot that had been
        handed to it goes to the next parked sender.
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lot.park(fut, nbytes)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.ran()
                self.give_back(nbytes)  # the room handed to us goes to the next sender
            elif self.lot.leave(fut) and self.lot:
                self.serve()   # the head left: those behind it may fit
            raise
        self.ran()

    def serve(self) -> None:
        """Hand free slots to the parked senders, oldest first (each gets its
        slot reserved before it runs, so no newcomer can take it)."""
        lot = self.lot
        while lot and self.fits(lot.head_need()):
            nbytes = lot.head_need()
            fut = lot.serve()
            if not fut.done():
                self.reserved += 1
                self.rbytes += nbytes if self.max_bytes else 0
                self.woken += 1
                fut.set_result(None)

    def ran(self) -> None:
        """A sender handed a reservation has run (or given it up): those
        parked since, refused while it had not, may be served now."""
        if self.woken > 0:
            self.woken -= 1
            if self.lot:
                self.serve()

    def give_back(self, nbytes: int) -> None:
        """A reservation will not be used: its slot and bytes go to the parked."""
        if self.reserved > 0:
            self.reserved -= 1
            self.rbytes = max(0, self.rbytes - nbytes) if self.reserved else 0
            self.serve()

    def admit(self, number: int, nbytes: int) -> bool:
        """The one-step fast path (the pipe's ``offer``): a slot and
        ``nbytes`` for a local item numbered ``number`` that goes in at once,
        with no reservation; False (nothing taken) when it does not fit or
        the pipe is contended."""
        if self.lot or self.woken:
            return False
        if not self.max_bytes:
            return self._queued() + self.reserved < self.capacity
        if len(self.marks) + self.reserved >= self.capacity:
            return False
        used = self.rbytes + self.qbytes
        if used > 0 and used + nbytes > self.max_bytes:
            return False
        self.marks.append((number, nbytes))
        self.qbytes += nbytes
        return True

    def fill(self, number: int, item: Any) -> None:
        """A reserved slot is filled by ``item``, numbered ``number``: with a
        byte bound its bytes move from reserved to queued until taken (its
        mark: the slots count local items)."""
        if self.reserved > 0:
            self.reserved -= 1
        if self.max_bytes:
            nbytes = item_cost(item)
            self.rbytes = max(0, self.rbytes - nbytes) if self.reserved else 0
            self.marks.append((number, nbytes))
            self.qbytes += nbytes

    def release(self, taken: int) -> None:
        """The reader took every local item numbered below ``taken``: their
        bytes are free again (the caller then ``serve``s the parked)."""
        marks = self.marks
        while marks and marks[0][0] < taken:
            self.qbytes -= marks.popleft()[1]

    def close(self, exc: BaseException) -> None:
        """The pipe is closed: nothing is reserved or held any more, and
        every parked sender gets ``exc``."""
        self.reserved = self.rbytes = self.qbytes = self.woken = 0
        self.marks.clear()
        self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """Every parked sender gets ``exc`` (the pipe is at its end or closed)."""
        fail_all(self.lot.take_all(), exc)
