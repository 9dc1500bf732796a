"""Pipes and the dynamic pipe pool (DPP, SPEC section 4).

A :class:`Pipe` is a one-way, bounded channel in the style of trio's memory
channels, FIFO for each sender (several senders' items are taken in turns,
below): ``send`` waits for room, ``send_nowait`` raises
:class:`~aiopdbp.errors.WouldBlock`; ``receive`` waits for an item.

Theory of operation
-------------------
*Reservations.*  A sender that must not overwhelm a destination reserves a
slot in the destination pipe **before** it hands its CDU to the host's public
pipe; the PipeManager then puts the CDU into the reserved slot without ever
waiting.  This gives per-destination backpressure (a slow GP stalls only its
own senders) while the single PipeManager never blocks on one full pipe and
so never stalls traffic to the other GPs (no head-of-line blocking).
``len(items) + reserved <= capacity`` always holds (:mod:`aiopdbp.routing.room`).

*Room.*  A pipe's slots, its byte bound (``max_bytes``: a GP's private pipe
bounds the bytes its own rank's senders hold in it, as credit bounds
another host's), the reservations and the senders parked for room, served
oldest first with the fair hand-off, are its :class:`~aiopdbp.routing.room.Room`
(:mod:`aiopdbp.routing.room`: "Slots", "Bytes", "Fair hand-off"), ``pipe.room``.
Items from other hosts (``put_many``) take no room: their credit already
bounded them.

*Turns.*  The reader takes its pipe one sender at a time.  A pipe is one
FIFO in arrival order (all a one-sender pipe ever is: the ping-pong path
pays one test per item); once an item of another sender (a message's
``source_pid``, a stream OPEN's) or from another host arrives while the
pipe holds items, the queue becomes a FIFO lane per sender, taken in
*rounds* (:class:`~aiopdbp.routing.turns.Turns`), until it is empty again: in each round every
sender with items queued has one taken, in the order they came.  So each
of k senders with items queued gets every k-th item the reader takes,
whichever host its items came from and however early they came (without
turns, the host whose window reached the pipe first had all of it taken
first: the reader's own senders, against a link's latency, or the first of
two remote hosts), and each sender's items keep their order.  A sender
whose lane ran dry after its turn and refilled within the same round waits
for the next round, behind the senders not served yet: with messages of
about a window (1 MiB in the default 1 MiB window) a host has one message
queued at a time, from each of its k_h parked senders in turn (its credit
queue's order), so turns that only saw the senders with an item queued
alternated between the reader's own sender and that host (1/2 each, 3x fair
for 1 local and 5 remote senders); in rounds, each of the k_h gets its
turn before the local sender's next.  The rounds are remembered while the
pipe holds items (there, the local sender's next item is queued as soon
as its last is taken); a pipe emptied starts afresh.  A batch from another
host (``put_many``) is checked at its two ends only, not item by item: its
order within is its host's send order, which that host's credit hand-off
keeps fair; it is split by sender when turns begin or while they last.

*Rounds wait for a host.*  Rounds alone are not enough when a host has
one message queued at a time (messages of a window): after the reader
takes it, that host's next (its next parked sender's) comes only after the
credit's round trip and the transfer, and a reader that takes again
sooner found a round of the reader's own senders only -- they got a turn
for every one of that host's, up to 3x fair (1 local sender, 5 on one
other host).  So a round that is over waits for a host one of whose
senders had its turn in it and ran dry while none of that host's items is
queued (``Turns.held``): the pipe then looks empty to its reader
(``len``, ``ready``, ``receive_nowait``) until an item of that host
arrives -- it joins the round if its sender has not had a turn in it, so
each of the host's k_h senders takes a turn before the local sender's next
-- or until ``hold_s`` (``HOLD_S``) has passed, when the next round starts
without it; nothing hangs.  A host that stops sending costs one wait of
``hold_s``, and only a round that just served that host waits: a lone
sender, and senders of the reader's own host among themselves, never
wait.  A pipe at its end (``close_send``) never waits.

*Counting under turns.*  The bounds count items by arrival number: the
local bytes (the room's ``marks``) and the credit each other host is owed (the
router's marks per host on ``appended``, settled through ``on_watch``) are
freed once every item of their class (local, or from that host) numbered
below them has been taken -- in one FIFO, once ``taken`` items have been.
Under turns each class counts up to its oldest item not taken yet, never
past an item still queued: the bytes a pipe holds stay within what was
admitted for it, as before.  The classes are counted apart so that a long
lane of one (a local sender's whole window, or a host's lone sender's)
does not hold back another's credit while the reader takes its items: a
host's credit comes back as its own items are taken (counted together, a
lone sender on one host held back the credit of five on another, whose
lanes then ran dry while it kept its turns).  Within a class, a message
taken ahead of the class's oldest item, when that is a message of the
same credit cost, trades numbers with it: the count moves on as if the
oldest had been taken, which frees the same bytes, and each mark still
sums the costs of the numbers it covers.  So one sender's long lane (it
started first) does not hold back its host-mates' credit either; items
of other costs, or that are not messages, do not trade and wait for
their turn as above.  The reader's turns reach
every lane while it reads, so every wait is still released by the
destination GP reading (:mod:`aiopdbp.hosts.link`, "Why nothing waits
forever").

*Wake-ups without loss.*  Waiters park on futures in FIFO order.  A producer
only *wakes* a consumer; the consumer then takes the item from the deque
itself.  A consumer cancelled after being woken therefore loses nothing: the
item is still in the deque and the wake-up is passed to the next waiter
(anyio's memory-stream rule: a cancelled receive loses no item).

*Closing.*  The owner (the GP reading it, or the pool) closes a pipe.  After
that, receiving raises :class:`ClosedResourceError` (you closed it) while
senders and reservers get :class:`BrokenResourceError` (their peer is gone).
``close()`` may be called any number of times.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, TypeVar

from aiopdbp.wire.mesp import CDU, Kind
from aiopdbp.errors import BrokenResourceError, ClosedResourceError, NoPipeError, WouldBlock
from aiopdbp.routing.room import Room, fail_all
from aiopdbp.routing.turns import Turns, sender_of
from aiopdbp.wire.message import Message

# The longest a round waits for a host ("Rounds wait for a host"): a grant's
# round trip and a window's transfer, with room for a loaded host.
HOLD_S = 0.05

T = TypeVar("T")


def _other_source(queue: deque[Any], items: list[Any]) -> bool:
    """Whether a batch arriving at a pipe that holds ``queue`` shows another
    sender than the one at its head, at either end (the batch's order within
    is its host's send order: it is only split into turns with the rest)."""
    key = sender_of(queue[0])
    return bool(sender_of(items[0]) != key or sender_of(items[-1]) != key)


def _wake_first(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        fut = waiters.popleft()
        if not fut.done():
            fut.set_result(None)
            return


def _wake_all(pipe: Pipe[Any], waiters: deque[asyncio.Future[None]],
              on_ready: Callable[[Pipe[Any]], None] | None) -> None:
    """A held round's wait is over: wake ``pipe``'s reader (and the
    PipeManager, through ``on_ready``), as an arrival would."""
    if waiters:
        _wake_first(waiters)
    if on_ready is not None:
        on_ready(pipe)


class Pipe(Generic[T]):
    """A bounded one-way channel (a UNIX-pipe-like mailbox), FIFO for each
    sender; the items of several senders are taken in turns.

    ``pipe_id`` identifies the pipe in the binding tables; ``capacity`` is the
    number of items (CDUs) it holds, counting reservations; ``room`` (a
    :class:`~aiopdbp.routing.room.Room`) is what its local senders have of it.
    """

    __slots__ = (
        "pipe_id", "room", "_items", "_recv_waiters", "_closed", "_eof", "on_ready", "label", "_error",
        "appended", "taken", "watch_at", "on_watch", "_turns", "_host", "hold_s",
    )

    remote = False  # the target protocol (aiopdbp.routing.router): a local pipe

    def __init__(self, capacity: int, pipe_id: int = -1, label: str = "", max_bytes: int = 0) -> None:
        if capacity < 1:
            raise ValueError("pipe capacity must be >= 1")
        self.pipe_id = pipe_id
        self.label = label
        # one FIFO in arrival order; turns (a FIFO per sender) from when
        # another sender's items arrive while it holds some until it is empty
        # (see "Turns").  The one FIFO holds one host's items (any other
        # sender's start turns): local ones hold marks while queued (with a
        # byte bound; without one they count with other hosts', which only
        # ever credits later).
        # (in turns ``_items`` is the Turns too: it stands in for the deque)
        self._items: deque[T] = deque()
        self._turns: Turns[T] | None = None
        # the slots, the byte bound, reservations and parked senders (a
        # pipe without a byte bound counts every queued item against its slots)
        self.room = Room(capacity, max_bytes, lambda: len(self._items))
        # the longest a round waits for a host (see "Rounds wait for a host")
        self.hold_s = HOLD_S
        self._host = -1   # the host of the one FIFO's items from other hosts (the last batch's)
        self._recv_waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._error: BaseException | None = None
        self._eof = False
        # Called when the pipe goes from empty to non-empty (the PipeManager
        # uses it to learn which public pipes have work without polling).
        self.on_ready: Callable[[Pipe[T]], None] | None = None
        # Items ever appended / taken, and a watch: ``on_watch(self, upto,
        # host)`` runs when every item from ``host`` numbered (``appended``)
        # below ``upto`` has been taken and ``upto`` reaches the watch
        # (flow control returns credit for remote items once the reader has
        # taken them; in one FIFO ``upto`` is ``taken``, see "Counting under
        # turns"); it returns the next watch for that host.  ``watch_at``
        # is the one FIFO's; a batch lowers a host's watch to its end.
        self.appended = 0
        self.taken = 0
        self.watch_at = 1 << 62
        self.on_watch: Callable[[Pipe[T], int, int], int] | None = None

    # -- state -------------------------------------------------------------
    def __len__(self) -> int:
        """The items a receive may take now (none while the round waits
        for a host: see "Rounds wait for a host")."""
        turns = self._turns
        return len(self._items) if turns is None or not turns.held() else 0

    def __repr__(self) -> str:
        return (f"<Pipe {self.label or self.pipe_id} {len(self._items)}+{self.room.reserved}"
                f"/{self.room.capacity}{' closed' if self._closed else ''}>")

    @property
    def closed(self) -> bool:
        return self._closed

    def ready(self) -> bool:
        """Whether a receive would not wait: an item is queued, or the pipe
        is closed or at its end (the receive then raises)."""
        # (len(self) > 0 without the call: a driver asks after every step)
        turns = self._turns
        return (bool(self._items) if turns is None else len(turns) > 0 and not turns.held()) \
            or self._closed or self._eof

    # -- producing -------------------------------------------------------------
    def _check_send(self) -> None:
        if self._closed:
            if self._error is not None:
                raise self._error  # what broke it, not a derived "pipe closed"
            raise BrokenResourceError(f"pipe {self.label or self.pipe_id} was closed by its reader")
        if self._eof:
            raise ClosedResourceError(f"pipe {self.label or self.pipe_id} is closed for sending")

    def reserve_nowait(self, pid: int = 0, nbytes: int = 0) -> None:
        """Reserve one slot or raise :class:`WouldBlock` (``pid`` and
        ``nbytes`` are the target protocol's; a pipe counts items).  A slot
        is never taken past a sender already parked for one."""
        self._check_send()
        if not self.room.take_nowait(nbytes):
            raise WouldBlock

    async def reserve(self, pid: int = 0, nbytes: int = 0) -> None:
        """Reserve one slot, waiting for room in FIFO order.

        Cancellation: a cancelled reserve holds no slot; a slot that had
        been handed to it goes to the next parked sender.
        """
        self._check_send()
        room = self.room
        if not room.take_nowait(nbytes):
            await room.wait(nbytes)
            # the room reserved the slot for us; a close since then dropped
            # every reservation and says why here
            self._check_send()

    def unreserve(self, pid: int = 0, nbytes: int = 0) -> None:
        """Give back a reservation that will not be used."""
        self.room.give_back(nbytes)

    def put_reserved(self, item: T) -> None:
        """Put an item into a slot reserved earlier (never waits).

        On a closed pipe the item is dropped silently: its reader is gone and
        the sender was (or will be) told through ``BrokenResourceError``.
        """
        self.put_to(0, item)

    def offer(self, pid: int, nbytes: int, fields: tuple[str, Kind, int, Any, int]) -> bool:
        """Target protocol (see :mod:`aiopdbp.routing.router`): reserve a slot and put
        the :class:`~aiopdbp.wire.message.Message` made of ``fields`` in one step
        when there is room; False (nothing taken) when the caller must wait
        or the pipe is closed (the waiting path then says why)."""
        if self._closed or self._eof or not self.room.admit(self.appended, nbytes):
            return False
        self._append(Message(fields))  # type: ignore[arg-type]
        return True

    def force_put(self, item: T) -> None:
        """Put an item even past capacity (control items such as an ABORT that
        must overtake backpressure; bounded by one per stream)."""
        if not self._closed:
            self._append(item)

    def _append(self, item: T) -> None:
        items = self._items
        was_empty = not items
        if not was_empty and self._turns is None:
            # _source, inline: a one-sender pipe under load does this per item
            head: Any = items[0]
            new: Any = item
            kind = type(new)
            # (a stream's segments, CDUs, have no sender: PipeB stays one FIFO)
            if (kind is not CDU or type(head) is not CDU) and \
                    (new[4] if kind is Message else sender_of(new)) != \
                    (head[4] if type(head) is Message else sender_of(head)):
                # a second sender: turns; the FIFO's items are local when
                # they hold marks (the new item's, if any, is numbered ``appended``)
                marks = self.room.marks
                items = self._items = self._turns = Turns(  # type: ignore[assignment]
                    items, self.taken, -1 if marks and marks[0][0] < self.appended else self._host,
                    self.watch_at)
        items.append(item)
        self.appended += 1
        if self._recv_waiters:
            _wake_first(self._recv_waiters)
        if was_empty and self.on_ready is not None:
            self.on_ready(self)

    def put_to(self, pid: int, item: T) -> bool:
        """Target protocol (see :mod:`aiopdbp.routing.router`): put a reserved item;
        False when it was dropped (the pipe is closed: its reader left)."""
        if self._closed:
            return False   # (the close dropped every reservation)
        self.room.fill(self.appended, item)
        self._append(item)
        return True

    def put_many(self, items: list[T], host: int) -> bool:
        """Append items past capacity in one go (a batch that arrived from
        ``host``: its flow control bounded it); one wake-up.  False when
        the pipe is closed and took nothing (the caller's, then, to drop
        them and return their credit)."""
        if self._closed:
            return False
        if not items:
            return True
        queue = self._items
        was_empty = not queue
        turns = self._turns
        if turns is None and (was_empty or host == self._host and not _other_source(queue, items)):
            queue.extend(items)
            self._host = host
        else:
            if turns is None:   # a second sender (or host): turns
                turns = self._items = self._turns = Turns(  # type: ignore[assignment]
                    queue, self.taken, -1 if self.room.marks else self._host, self.watch_at)
            turns.extend(items, host)
            end = self.appended + len(items)
            if turns.watch.get(host, 1 << 62) > end:
                turns.watch[host] = end
        self.appended += len(items)
        if self._recv_waiters:
            _wake_first(self._recv_waiters)
        if was_empty and self.on_ready is not None:
            self.on_ready(self)
        return True

    def send_nowait(self, item: T) -> None:
        """Put an item now or raise :class:`WouldBlock` when full."""
        self.reserve_nowait()
        self.put_to(0, item)

    async def send(self, item: T) -> None:
        """Put an item, waiting while the pipe is full (backpressure).

        Cancellation: a cancelled send has not put its item.
        """
        await self.reserve()
        self.put_to(0, item)

    def close_send(self) -> None:
        """End of data: the reader drains what is queued, then gets ``EOFError``."""
        self._eof = True
        if self._turns is not None:
            self._turns.never_hold()
        self.room.fail(ClosedResourceError("pipe closed for sending"))
        while self._recv_waiters:
            _wake_first(self._recv_waiters)

    # -- consuming -------------------------------------------------------------
    def receive_nowait(self) -> T:
        """Take the next item or raise :class:`WouldBlock` (``EOFError`` after
        ``close_send`` once drained)."""
        items = self._items
        turns = self._turns
        if items if turns is None else len(turns) and not turns.held():
            item = items.popleft()
            self.taken += 1
            room = self.room
            if turns is None:
                if room.marks:
                    room.release(self.taken)
                if room.lot:
                    room.serve()
                if self.taken >= self.watch_at and self.on_watch is not None:
                    self.watch_at = self.on_watch(self, self.taken, self._host)
                return item
            # in turns each class is counted up to its oldest item not taken
            # (see "Counting under turns"); only the taken item's class moved
            cls = turns.cls
            if cls < 0:
                if room.marks:
                    room.release(turns.low)
            elif self.on_watch is not None:
                watch = turns.watch
                if turns.low >= watch.get(cls, 0):
                    watch[cls] = self.on_watch(self, turns.low, cls)
            if not len(turns):
                # every item taken (taken == appended), so every class's
                # credit was settled at its last take: one FIFO again
                self._items = deque()
                self._turns = None
                self.watch_at = 1 << 62
            elif turns.held():
                # the round waits for a host, boundedly: nothing hangs
                turns.bound(self.hold_s, partial(_wake_all, self, self._recv_waiters, self.on_ready))
            if room.lot:
                room.serve()
            return item
        if self._closed:
            raise ClosedResourceError(f"pipe {self.label or self.pipe_id} is closed")
        if self._eof and not len(items):
            raise EOFError
        raise WouldBlock

    async def receive(self) -> T:
        """Take the next item, waiting for one.

        Cancellation: a cancelled receive takes no item (nothing is lost);
        a wake-up it had received is passed on to the next receiver.
        """
        if len(self):
            return self.receive_nowait()
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise ClosedResourceError(f"pipe {self.label or self.pipe_id} is closed")
            if self._eof and not self._items:
                raise EOFError
            fut: asyncio.Future[None] = loop.create_future()
            self._recv_waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    if self._items:
                        _wake_first(self._recv_waiters)
                else:
                    try:
                        self._recv_waiters.remove(fut)
                    except ValueError:
                        pass
                raise
            if len(self):
                item = self.receive_nowait()
                if len(self) and self._recv_waiters:
                    _wake_first(self._recv_waiters)
                return item

    def drain_nowait(self, limit: int = 1 << 30) -> list[T]:
        """Take up to ``limit`` queued items at once (the PipeManager's batch)."""
        items = self._items
        n = len(items)
        if n == 0:
            return []
        if self._turns is not None:
            out: list[T] = []
            while len(out) < limit and len(self):
                out.append(self.receive_nowait())
            return out
        if n <= limit:
            out = list(items)
            items.clear()
            self.taken += n
        else:
            out = [items.popleft() for _ in range(limit)]
            self.taken += limit
        room = self.room
        if room.marks:
            room.release(self.taken)
        if self.taken >= self.watch_at and self.on_watch is not None:
            self.watch_at = self.on_watch(self, self.taken, self._host)
        if room.lot:
            room.serve()
        return out

    def close(self, error: BaseException | None = None) -> None:
        """Close the pipe (idempotent): queued items are discarded, receivers
        get ClosedResourceError, senders BrokenResourceError -- or ``error``,
        the cause of the close (e.g. the failure of the host behind a link),
        which every sender then sees."""
        if self._closed:
            return
        self._closed = True
        self._error = error
        self._items = deque()
        self._turns = None
        fail_all(self._recv_waiters, ClosedResourceError(f"pipe {self.label or self.pipe_id} is closed"))
        self.room.close(error if error is not None else BrokenResourceError(
            f"pipe {self.label or self.pipe_id} was closed by its reader"))

    async def aclose(self) -> None:
        """Close the pipe; may be called twice.

        Cancellation: never suspends, so it cannot be interrupted half-way.
        """
        self.close()


class PipePool:
    """The private-pipe set (PPS) of one host with dynamic binding.

    Pipes are created lazily up to ``max_pipes`` and recycled: ``apply``
    hands out a free pipe (the paper's *prcsApplyPipe*), ``release`` closes it
    (waking anyone blocked on it), resets it and returns it to the pool
    (*prcsReleasePipe*).  Binding bookkeeping lives in the tables; the pool
    only owns the pipe objects.
    """

    def __init__(self, pipe_capacity: int, max_pipes: int, *, first_id: int = 0, label: str = "pps",
                 max_bytes: int = 0) -> None:
        if max_pipes < 1:
            raise ValueError("max_pipes must be >= 1")
        self.pipe_capacity = pipe_capacity
        self.max_bytes = max_bytes     # each pipe's byte bound for local senders (0: none)
        self.max_pipes = max_pipes
        self.label = label
        self._next_id = first_id
        self._all: dict[int, Pipe[Any]] = {}
        self._free: deque[Pipe[Any]] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def in_use(self) -> int:
        return len(self._all) - len(self._free)

    @property
    def created(self) -> int:
        return len(self._all)

    def get(self, pipe_id: int) -> Pipe[Any]:
        return self._all[pipe_id]

    def apply_nowait(self) -> Pipe[Any]:
        """Bind a free pipe now, or raise :class:`NoPipeError` if none is left."""
        if self._free:
            return self._free.popleft()
        if len(self._all) < self.max_pipes:
            pipe: Pipe[Any] = Pipe(self.pipe_capacity, self._next_id, f"{self.label}{self._next_id}",
                                    self.max_bytes)
            self._all[self._next_id] = pipe
            self._next_id += 1
            return pipe
        raise NoPipeError(f"all {self.max_pipes} pipes of {self.label} are bound")

    async def apply(self, timeout: float | None = None) -> Pipe[Any]:
        """Bind a free pipe, waiting up to ``timeout`` seconds for one.

        Cancellation: a cancelled apply holds no pipe.
        """
        try:
            return self.apply_nowait()
        except NoPipeError:
            if timeout == 0:
                raise
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    fut: asyncio.Future[None] = loop.create_future()
                    self._waiters.append(fut)
                    try:
                        await fut
                    except asyncio.CancelledError:
                        if fut.done() and not fut.cancelled():
                            _wake_first(self._waiters)
                        elif fut in self._waiters:
                            self._waiters.remove(fut)
                        raise
                    try:
                        return self.apply_nowait()
                    except NoPipeError:
                        continue
        except TimeoutError:
            raise NoPipeError(f"no pipe of {self.label} became free within {timeout} s") from None

    def release(self, pipe: Pipe[Any]) -> None:
        """Unbind a pipe: close it (peers see BrokenResourceError) and put a
        fresh pipe with the same id back into the pool.

        The closed object is never reopened: a task that still holds it (a
        reader woken just before the release, a late sender) sees a closed
        pipe instead of silently using a pipe that now belongs to someone
        else.
        """
        if self._all.get(pipe.pipe_id) is not pipe:
            return
        pipe.close()
        fresh: Pipe[Any] = Pipe(self.pipe_capacity, pipe.pipe_id, f"{self.label}{pipe.pipe_id}",
                                 self.max_bytes)
        self._all[pipe.pipe_id] = fresh
        self._free.append(fresh)
        _wake_first(self._waiters)

    def close(self) -> None:
        for pipe in self._all.values():
            pipe.close()
        fail_all(self._waiters, NoPipeError(f"{self.label} is closed"))
