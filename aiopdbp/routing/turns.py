"""The reader's turns: the queue of a pipe holding items of several senders.

See :mod:`aiopdbp.routing.pipes`, "Turns" and "Counting under turns", for
why the reader takes its pipe in rounds and how the items are counted for
credit under them, and "Rounds wait for a host" for why a round that is
over may wait for one more host's message (``held``, ``bound``) -- without
it, a host with one message in the pipe at a time (a window's worth) was
absent from the rounds while its next was on the way, and the reader's
own senders had those turns; :class:`Turns` is the queue that does it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from aiopdbp.wire.message import Message, credit_cost

T = TypeVar("T")


def sender_of(item: Any) -> Any:
    """The sender whose turn an item waits for: a message's ``source_pid``,
    another item's (a stream's OPEN), or 0 (items with no sender, such as a
    stream's segments or the PipeManager's entries: one FIFO)."""
    return item[4] if type(item) is Message else getattr(item, "source_pid", 0)


class Turns(Generic[T]):
    """The queue of a pipe holding items of several senders: a FIFO lane per
    sender, taken one item per turn in rounds (:mod:`aiopdbp.routing.pipes`, "Turns").

    It stands in for the pipe's deque: ``add`` queues an item of a class
    (-1: a local sender; else the host it came from), ``extend`` a batch
    from another host, ``popleft`` takes the item whose turn it is.  It
    numbers the items in arrival order and keeps, per class, the numbers of
    those not taken yet; after ``popleft``, ``cls`` is the taken item's
    class and ``low`` the number of that class's oldest item not taken yet
    (every one of the class numbered below it has been taken).  ``watch``
    holds, per host, the ``low`` at which the pipe reports to its watch.
    """

    __slots__ = ("_lanes", "_cur", "_nxt", "_round", "_served", "_n", "_next", "_order", "_gone",
                 "_where", "cls", "low", "watch", "_dry", "_unheld")

    def __init__(self, fifo: deque[T], first: int, cls: int, watch_at: int) -> None:
        # ``fifo``: the pipe's queue so far, in arrival order, numbered from
        # ``first``, all of one class ``cls`` (a host's watching at ``watch_at``)
        self._lanes: dict[Any, deque[list[Any]]] = {}   # sender -> [number, item, class]
        self._cur: deque[Any] = deque()   # senders not served this round yet, in turn order
        self._nxt: deque[Any] = deque()   # senders served this round, with items left
        self._round = 0
        self._served: dict[Any, int] = {}   # a sender whose lane emptied -> its last round
        # a host one of whose senders had its turn this round and ran dry ->
        # that round (the round waits for it, see ``held``); the round
        # whose wait is over (-1: none; 1 << 62: never wait again)
        self._dry: dict[int, int] = {}
        self._unheld = -1
        self._n = 0
        self._next = self.low = first      # the next arrival's number
        self.cls = cls
        # per class, the numbers of its items not known to be taken, in
        # arrival order; numbers taken out of that order
        self._order: dict[int, deque[int]] = {}
        self._gone: set[int] = set()
        self._where: dict[int, list[Any]] = {}   # number -> its lane entry, while queued
        self.watch: dict[int, int] = {cls: watch_at} if cls >= 0 else {}
        for item in fifo:
            self.add(item, cls)

    def __len__(self) -> int:
        return self._n

    def held(self) -> bool:
        """Whether the round is over but waits for a host: one of its
        senders had its turn this round, ran dry, and none of that host's
        items is queued (its next is on the way: its credit came back as
        the reader took it).  See :mod:`aiopdbp.routing.pipes`, "Rounds
        wait for a host"."""
        if self._cur or not self._n or self._unheld == self._round or self._unheld > self._round:
            return False
        rnd = self._round
        order = self._order
        for host, last in self._dry.items():
            if last == rnd and not order.get(host):
                return True
        return False

    def bound(self, seconds: float, wake: Callable[[], None]) -> None:
        """End the wait of a round that is ``held`` after ``seconds``, then
        ``wake()`` the reader: nothing hangs (outside an event loop, which
        could not bound it, the round does not wait)."""
        rnd = self._round
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._unheld = rnd
            return
        loop.call_later(seconds, self._bound_over, rnd, wake)

    def _bound_over(self, rnd: int, wake: Callable[[], None]) -> None:
        if rnd == self._round and self._unheld < rnd and self.held():
            self._unheld = rnd
            wake()

    def never_hold(self) -> None:
        """No round waits any more (no more items will come: the pipe is
        at its end or closed)."""
        self._unheld = 1 << 62

    def add(self, item: T, cls: int) -> None:
        """Queue an item of class ``cls`` (-1: local; else its host)."""
        key = sender_of(item)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
            # a sender that had its turn this round (its lane ran dry since)
            # waits for the next round: it does not go again before the
            # senders not served yet, though only one of them has an item
            # queued at a time (one message per window from their host)
            (self._nxt if self._served.get(key) == self._round else self._cur).append(key)
        number = self._next
        entry = [number, item, cls]
        lane.append(entry)
        self._where[number] = entry
        order = self._order.get(cls)
        if order is None:
            order = self._order[cls] = deque()
        order.append(number)
        self._next = number + 1
        self._n += 1

    def append(self, item: T) -> None:
        """Queue an item of a local sender."""
        self.add(item, -1)

    def extend(self, items: list[T], host: int) -> None:
        """Queue a batch that came from ``host``."""
        for item in items:
            self.add(item, host)

    def popleft(self) -> T:
        """The item whose turn it is: the oldest of the first sender not
        served this round; a round ends when every sender with items queued
        has been served once."""
        cur = self._cur
        if not cur:   # the round is over: the next one
            cur, self._cur, self._nxt = self._nxt, self._nxt, cur
            self._round += 1
        key = cur.popleft()
        lane = self._lanes[key]
        number, item, cls = lane.popleft()
        where = self._where
        del where[number]
        if lane:
            self._nxt.append(key)
        else:
            del self._lanes[key]
            self._served[key] = self._round
            if cls >= 0:
                self._dry[cls] = self._round
        self._n -= 1
        order = self._order[cls]
        oldest = order[0]
        if oldest != number:
            # Taken ahead of its class's oldest item (another sender's):
            # when both are messages of the same credit cost, they trade
            # numbers, so the class's count moves on as if the oldest had
            # been taken -- the same bytes -- and one sender's long lane
            # does not hold back its class-mates' credit (the marks count
            # costs by number: each still sums the costs of its numbers).
            other = where[oldest]
            held: Any = other[1]
            if type(item) is Message and type(held) is Message and (
                    len(item[3]) == len(held[3]) if type(item[3]) is bytes and type(held[3]) is bytes
                    else credit_cost(item[3]) == credit_cost(held[3])):
                other[0] = number
                where[number] = other
                del where[oldest]
                number = oldest
        if oldest == number:
            order.popleft()
            gone = self._gone
            while order and order[0] in gone:
                gone.remove(order.popleft())
        else:
            self._gone.add(number)
        self.cls = cls
        self.low = order[0] if order else self._next
        return item  # type: ignore[no-any-return]
