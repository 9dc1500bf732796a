"""The send side's credit rule, sans-I/O: one FIFO wait queue and the gate.

Neither asyncio nor MPI is imported here: a waiter is an opaque token (the
async shell's future, :mod:`aiopdbp.hosts.link`; a pipe's, :mod:`aiopdbp.routing.pipes`),
and every method takes an event and returns what to do (the tokens to wake,
whether to ask for credit).  The shell does the waking and the sending.

* :class:`ParkingLot` -- parked waiters in arrival order, each with what it
  needs; the one wait queue of the package (credit and pipe slots alike).
* :class:`CreditGate` -- one link's credit towards every GP of one host:
  ``admit`` (the fast path), ``park``, ``grant``, ``cancel``, ``resumed``,
  ``fail``.  The rule is documented in :mod:`aiopdbp.hosts.link` ("Credit").
* :class:`CreditBook` -- the receiving side: what each (sending host, GP)
  has delivered and not had back, what is owed, the asks, and the grants to
  send (``delivered``, ``taken``, ``owe``, ``ask`` -> when to send;
  ``grants`` -> what).  The router (:mod:`aiopdbp.routing.router`) feeds it.
  It keeps one :class:`CreditAccount` per (host, GP), made once and held
  by the marks, so a message's credit is an attribute update.
* :class:`PipeMarks` -- one pipe's marks: which of the items other hosts
  put in it owe which credit, turned into credit owed in the book as the
  reader takes them (the pipe's ``on_watch``; :mod:`aiopdbp.routing.arrivals`).

*Fairness.*  A destination is **contended** from the moment a sender parks
for it until the queue is empty *and* every sender the gate woke has run
(``resumed``).  While it is contended, ``admit`` refuses everybody, so a
sender that was just served and loops to send again parks at the tail
behind the senders woken with it, instead of spending on the fast path the
credit the grant left over before they have run.  So with k senders waiting
on one reader each is served once per round, whatever the message size; an
uncontended destination pays nothing for it (``admit`` is one dict lookup,
as before).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from aiopdbp.wire.message import CREDIT_OVERHEAD

__all__ = ["ASK_STEP", "LATER", "NOW", "SOON", "CreditAccount", "CreditBook", "CreditGate", "GateWait", "ParkingLot",
           "PipeMarks", "Placer", "Wake"]

W = TypeVar("W")


class ParkingLot(deque[tuple[W, int]]):
    """Waiters (opaque tokens) in FIFO order, each with what it needs:
    ``(token, need)`` pairs in a deque, so that asking whether anyone is
    parked -- which every send and every take does -- is the deque's own
    test, no Python call."""

    __slots__ = ()

    def park(self, token: W, need: int = 1) -> None:
        """``token`` waits at the tail for ``need`` (bytes, slots: the caller's unit)."""
        self.append((token, need))

    def head_need(self) -> int:
        """What the head needs (the lot must not be empty)."""
        return self[0][1]

    def serve(self) -> W:
        """Take the head (it is being served)."""
        return self.popleft()[0]

    def leave(self, token: W) -> bool:
        """Take ``token`` out wherever it is (it gave up); False: it was not parked."""
        for i, (t, _) in enumerate(self):
            if t is token:
                del self[i]
                return True
        return False

    def take_all(self) -> list[W]:
        """Take every waiter out, in order (to fail them)."""
        tokens = [t for t, _ in self]
        self.clear()
        return tokens


class Wake(NamedTuple):
    """What an event asks of the shell: wake ``tokens`` (their credit is
    reserved), and send host ``h`` a credit ask for the destination if ``ask``."""

    tokens: list[object]
    ask: bool


class GateWait(NamedTuple):
    """A contended destination (for stall reports): its parked senders."""

    pid: int
    senders: int
    head_need: int
    progress_at: float   # the clock at the last serve, or the first park


class _Dest:
    """One contended destination: its lot, the woken senders that have not run
    yet, whether an ask is out, and when it last made progress."""

    __slots__ = ("lot", "woken", "asked", "progress_at")

    def __init__(self, now: float) -> None:
        self.lot: ParkingLot[object] = ParkingLot()
        self.woken = 0
        self.asked = False
        self.progress_at = now


_NOTHING = Wake([], False)


class CreditGate:
    """One link's credit towards each GP of its host (see the module docstring)."""

    __slots__ = ("window", "_credit", "_dests", "_clock", "waits", "asks")

    def __init__(self, window: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._credit: dict[int, int] = {}      # pid -> credit left (absent: a full window)
        self._dests: dict[int, _Dest] = {}     # pid -> its state while contended
        self._clock = clock
        self.waits = 0                          # senders ever parked
        self.asks = 0                           # asks ever requested

    # ------------------------------------------------------------ queries
    def credit(self, pid: int) -> int:
        return self._credit.get(pid, self.window)

    def contended(self, pid: int) -> bool:
        return pid in self._dests

    def parked(self) -> int:
        return sum(len(d.lot) for d in self._dests.values())

    def short(self) -> int:
        """Destinations whose credit is below the window now."""
        return len(self._credit)

    def least(self) -> int:
        return min(self._credit.values(), default=self.window)

    def outstanding(self) -> int:
        return sum(self.window - c for c in self._credit.values())

    def waiting(self) -> list[GateWait]:
        return [GateWait(pid, len(d.lot), d.lot.head_need(), d.progress_at)
                for pid, d in self._dests.items() if d.lot]

    # ------------------------------------------------------------- events
    def admit(self, pid: int, nbytes: int) -> bool:
        """Take ``nbytes`` of GP ``pid``'s credit if the rule allows it now:
        ``pid`` is not contended and its credit covers ``min(nbytes, window)``."""
        if pid in self._dests:
            return False
        c = self._credit.get(pid, self.window)
        if c >= nbytes or c >= self.window:
            self._credit[pid] = c - nbytes
            return True
        return False

    def park(self, pid: int, nbytes: int, token: object) -> Wake:
        """``token`` was refused by ``admit``: it waits at the tail (and is
        woken at once if the credit covers it and it is the head)."""
        d = self._dests.get(pid)
        if d is None:
            d = self._dests[pid] = _Dest(self._clock())
        d.lot.park(token, nbytes)
        self.waits += 1
        return self._serve(pid, d)

    def resumed(self, pid: int) -> None:
        """A woken sender ran: once all have and nobody is parked, ``pid`` is
        no longer contended."""
        d = self._dests.get(pid)
        if d is not None:
            d.woken -= 1
            if d.woken <= 0 and not d.lot:
                self._uncontend(pid)

    def grant(self, pid: int, nbytes: int) -> Wake:
        """Host ``h`` gave back ``nbytes`` of ``pid``'s credit (or a sender
        gave back what it will not use)."""
        c = self._credit.get(pid, self.window) + nbytes
        self._credit[pid] = c
        d = self._dests.get(pid)
        if d is None:
            if c >= self.window:
                del self._credit[pid]             # back to a full window: forget it
            return _NOTHING
        d.asked = False
        return self._serve(pid, d)

    def cancel(self, pid: int, nbytes: int, token: object) -> Wake:
        """``token`` (which needed ``nbytes``) gave up: still parked, it
        leaves the lot; already served (its wake may have crossed the
        cancel), the ``nbytes`` reserved for it go back.  Either way the
        senders behind it are served as far as the credit covers."""
        d = self._dests.get(pid)
        if d is None:                              # failed since
            return _NOTHING
        if not d.lot.leave(token):
            d.woken -= 1
            self._credit[pid] = self._credit.get(pid, self.window) + nbytes
        return self._serve(pid, d)

    def fail(self) -> list[object]:
        """The host is gone: every parked token, to fail; nothing is contended."""
        tokens = [t for d in self._dests.values() for t in d.lot.take_all()]
        self._dests.clear()
        return tokens

    # ------------------------------------------------------------ the hand-off
    def _serve(self, pid: int, d: _Dest) -> Wake:
        """Reserve for the parked senders of ``pid``, head first, while the
        credit covers the head's ``min(need, window)``."""
        lot = d.lot
        c = self._credit.get(pid, self.window)
        window = self.window
        woken: list[object] = []
        while lot:
            need = lot.head_need()
            if c < need and c < window:
                break
            c -= need
            woken.append(lot.serve())
        if woken:
            d.woken += len(woken)
            d.progress_at = self._clock()
        if c >= window:
            self._credit.pop(pid, None)
        else:
            self._credit[pid] = c
        ask = False
        if lot:
            if not d.asked:
                d.asked = ask = True
                self.asks += 1
        elif d.woken <= 0:
            self._uncontend(pid)
        return Wake(woken, ask) if woken or ask else _NOTHING

    def _uncontend(self, pid: int) -> None:
        del self._dests[pid]


#: an ask is answered once ``window / ASK_STEP`` is owed (:class:`CreditBook`);
#: the receiver's marks (:mod:`aiopdbp.routing.arrivals`) are no coarser
ASK_STEP = 64

#: when the grants of a :class:`CreditBook` are due: nothing new, at the end
#: of the loop iteration (with the others), or at once
LATER, SOON, NOW = 0, 1, 2


class CreditAccount:
    """What one sending host has in flight to one GP here, as the
    :class:`CreditBook` keeps it: ``pending`` bytes delivered into the GP's
    pipe and not taken yet, ``owed`` bytes taken and not granted back yet,
    ``asked`` (a sender there is parked for credit).  ``holding``: something
    was delivered since the pipe last held nothing of the host's; ``owing``:
    the book lists the account among those with credit owed.

    The book makes one per (host, GP) (:meth:`CreditBook.account`) and
    changes it; whoever marks a pipe's items (:class:`PipeMarks`) holds it,
    so that a message's credit is two attribute updates, not a look-up."""

    __slots__ = ("host", "pid", "pending", "owed", "asked", "holding", "owing")

    def __init__(self, host: int, pid: int) -> None:
        self.host = host
        self.pid = pid
        self.pending = 0
        self.owed = 0
        self.asked = False
        self.holding = False
        self.owing = False


class CreditBook:
    """The receiving host's credit towards the senders of each of its GPs.

    Per (sending host, GP), a :class:`CreditAccount`: ``pending`` bytes
    delivered into the GP's pipe and not taken yet, ``owed`` bytes taken and
    not granted back yet.  Owed
    credit goes back in steps of at least ``window / 4`` (one control message
    per quarter window, not per message); below that only when the sender
    asked, and then once ``window / ASK_STEP`` (a 64th) is owed or the GP
    has taken everything of that host's that waits for it (an ask is
    answered once the reader has caught up, or has taken a 64th of the
    window: a sender parked behind a host-mate's long queue -- it started
    first and filled the window alone -- gets credit at the pace the reader
    takes that host's messages, a few at a time, so it joins the reader's
    turns within a few of them, not once a coarser step or a quarter window
    has been taken); a whole window (a large message) at once.  See
    :mod:`aiopdbp.hosts.link`, "Credit".

    The events come per account (:meth:`deliver`, :meth:`take`: the marks,
    one per message) or per (host, GP) (the rest, which look the account up).
    An account lives as long as the book: a GP's owed credit below the
    threshold waits for the close (``grants(everything=True)``) anyway.
    """

    __slots__ = ("window", "_accounts", "_owing", "_grants")

    def __init__(self, window: int) -> None:
        self.window = window
        self._accounts: dict[tuple[int, int], CreditAccount] = {}
        # the accounts with credit owed, in the order they came to owe it
        self._owing: dict[CreditAccount, None] = {}
        self._grants: dict[int, list[tuple[int, int]]] = {}

    def account(self, host: int, pid: int) -> CreditAccount:
        """The account of ``host``'s credit towards GP ``pid`` (made on first use)."""
        key = (host, pid)
        acct = self._accounts.get(key)
        if acct is None:
            acct = self._accounts[key] = CreditAccount(host, pid)
        return acct

    def deliver(self, acct: CreditAccount, cost: int) -> None:
        """``cost`` bytes from ``acct.host`` went into GP ``acct.pid``'s pipe."""
        acct.pending += cost
        acct.holding = True

    def take(self, acct: CreditAccount, cost: int) -> int:
        """GP ``acct.pid`` took (or dropped) ``cost`` bytes ``acct.host``
        delivered: they are owed.  Returns when grants are due."""
        left = acct.pending - cost
        if left > 0:
            acct.pending = left
        else:
            acct.pending = 0
            acct.holding = False
        return self._owe(acct, cost)

    def delivered(self, host: int, pid: int, cost: int) -> None:
        """:meth:`deliver` to ``host``'s account for ``pid``."""
        self.deliver(self.account(host, pid), cost)

    def taken(self, host: int, pid: int, cost: int) -> int:
        """:meth:`take` from ``host``'s account for ``pid``."""
        return self.take(self.account(host, pid), cost)

    def ask(self, host: int, pid: int) -> int:
        """A sender on ``host`` is parked for ``pid``'s credit."""
        acct = self.account(host, pid)
        acct.asked = True
        owed = acct.owed
        if owed and (not acct.holding or owed * ASK_STEP >= self.window):
            return self._owe(acct, 0)
        return LATER

    def owe(self, host: int, pid: int, cost: int) -> int:
        """``cost`` more bytes are owed to ``host`` for ``pid`` (something it
        sent will never reach the pipe, or was taken)."""
        return self._owe(self.account(host, pid), cost)

    def _owe(self, acct: CreditAccount, cost: int) -> int:
        owed = acct.owed + cost
        if owed * 4 < self.window and not (owed and acct.asked and (
                not acct.holding or owed * ASK_STEP >= self.window)):
            acct.owed = owed
            if not acct.owing:
                acct.owing = True
                self._owing[acct] = None
            return LATER
        acct.owed = 0
        if acct.owing:
            acct.owing = False
            del self._owing[acct]
        acct.asked = False   # the grant answers the ask; a sender still parked asks again
        grants = self._grants.get(acct.host)
        if grants is None:
            grants = self._grants[acct.host] = []
        grants.append((acct.pid, owed))
        return NOW if owed >= self.window else SOON

    def grants(self, everything: bool = False) -> dict[int, list[tuple[int, int]]]:
        """The grants due, per host, and forget them (``everything``: also
        what is owed below the threshold, e.g. at close)."""
        if everything:
            for acct in self._owing:
                self._grants.setdefault(acct.host, []).append((acct.pid, acct.owed))
                acct.owed = 0
                acct.owing = False
            self._owing.clear()
        grants, self._grants = self._grants, {}
        return grants

    def owed(self) -> int:
        return sum(acct.owed for acct in self._owing)

    def outstanding(self, host: int, pid: int) -> int:
        """Bytes ``host`` has delivered to ``pid`` that were not granted back
        yet: at most what its credit let it send (``window``, or one larger
        message alone)."""
        acct = self._accounts.get((host, pid))
        return 0 if acct is None else acct.pending + acct.owed

    def admits(self, host: int, pid: int, nbytes: int) -> bool:
        """Whether ``host``'s credit can cover a message of ``nbytes`` for
        ``pid`` now: the sender's rule seen from here (its credit is never
        more than what this book has not had back).  False means the sender
        broke the protocol (an announced size beyond what it was granted)."""
        out = self.outstanding(host, pid)
        return out <= 0 or out + nbytes <= self.window


class _HostMarks(deque[list[int]]):
    """One host's marks in a pipe, and the account of the GP its last marks
    were for (a pipe's items are one GP's: the look-up is made once)."""

    __slots__ = ("acct",)

    def __init__(self, acct: CreditAccount) -> None:
        super().__init__()
        self.acct = acct


class PipeMarks:
    """One pipe's credit marks (see :mod:`aiopdbp.routing.arrivals`,
    "Placing"): per sending host, a FIFO of marks ``[end, pid, cost]`` --
    that host's items numbered (the pipe's ``appended``) below ``end`` owe
    ``cost`` bytes of GP ``pid``'s credit.  :meth:`mark` records a batch
    (the book hears it was delivered); :meth:`settle`, the pipe's
    ``on_watch``, turns the marks the reader has passed into credit owed,
    and calls ``due(when)`` for each of the book's answers but ``LATER``.
    Per host it holds the book's :class:`CreditAccount` of the GP it marked
    last, so a mark and its settling reach the book without a look-up.
    Its compiled twin keeps the marks in a C ring per host: no object per
    mark, and the book called C to C.
    """

    __slots__ = ("book", "_due", "_hosts")

    def __init__(self, book: CreditBook, due: Callable[[int], None]) -> None:
        self.book = book
        self._due = due
        self._hosts: dict[int, _HostMarks] = {}

    def mark(self, host: int, pid: int, cost: int, end: int) -> int:
        """``host``'s items for ``pid`` up to ``end`` owe ``cost`` more bytes.
        Returns ``end`` when this is the host's only mark (the pipe's
        watch moves there), else -1."""
        book = self.book
        marks = self._hosts.get(host)
        if marks is None:
            marks = self._hosts[host] = _HostMarks(book.account(host, pid))
        acct = marks.acct
        if acct.pid != pid:
            acct = marks.acct = book.account(host, pid)
        book.deliver(acct, cost)
        if marks:
            last = marks[-1]
            if last[1] == pid and last[2] * ASK_STEP < book.window:
                # Extend the last mark rather than add one per batch: credit
                # then comes back in steps no coarser than an asking sender's.
                last[0] = end
                last[2] += cost
                return end if len(marks) == 1 else -1
        marks.append([end, pid, cost])
        return end if len(marks) == 1 else -1

    def settle(self, pipe: object, taken: int, host: int) -> int:
        """The reader took every item of ``host``'s numbered below ``taken``:
        the marks it passed are owed.  Returns where ``host``'s next mark
        ends (the pipe's next watch; ``1 << 62``: none)."""
        marks = self._hosts.get(host)
        if not marks:
            return 1 << 62
        book = self.book
        while marks and marks[0][0] <= taken:
            _, pid, cost = marks.popleft()
            acct = marks.acct
            if acct.pid != pid:
                acct = marks.acct = book.account(host, pid)
            due = book.take(acct, cost)
            if due != LATER:
                self._due(due)
        return marks[0][0] if marks else 1 << 62

    def drain(self) -> list[tuple[int, int, int]]:
        """Every mark left, as ``(host, pid, cost)``, in order per host,
        and forget them (the pipe was released: its items will never be taken)."""
        out = [(host, pid, cost) for host, marks in self._hosts.items() for _, pid, cost in marks]
        self._hosts.clear()
        return out


class Placer:
    """Short messages from other hosts into the pipes of the GPs here, and
    their marks (:mod:`aiopdbp.routing.arrivals`, "Placing"): per pipe, its
    :class:`PipeMarks` (``marks``, made at the pipe's first arrival, whose
    ``settle`` becomes the pipe's ``on_watch``).

    :meth:`place` takes the commonest arrival, a frame of one short
    message, from the read to the reader's wake-up: ``reader.read_one``,
    then :meth:`place_one` (``targets[pid].put_many`` when that is a
    ``pipe_type``, the mark).
    Where the GP has no open pipe it goes to ``other(host, pid, items,
    cost)``; a frame of several records to ``runs(host, buf)``.  The
    compiled twin does it in one C call (the pipe's ``put_many`` is the
    one Python call left in it)."""

    __slots__ = ("reader", "targets", "pipe_type", "book", "marks", "_due", "_other", "_runs")

    def __init__(self, reader: Any, targets: dict[int, Any], pipe_type: type, book: CreditBook,
                 due: Callable[[int], None], other: Callable[[int, int, list[Any], int], object],
                 runs: Callable[[int, Any], None]) -> None:
        self.reader = reader
        self.targets = targets
        self.pipe_type: Any = pipe_type
        self.book = book
        self.marks: dict[Any, PipeMarks] = {}   # kept, even empty, until the pipe is released
        self._due = due
        self._other = other
        self._runs = runs

    def place(self, host: int, buf: Any) -> None:
        """A short-message frame from ``host`` (raises only ``ProtocolError``)."""
        one = self.reader.read_one(buf)
        if one is None:
            self._runs(host, buf)
            return
        pid, msg, nbytes = one
        cost = nbytes + CREDIT_OVERHEAD
        if not self.place_one(host, pid, msg, cost):  # (a message, not a stream: nothing for the stream table to hear)
            self._other(host, pid, [msg], cost)

    def place_one(self, host: int, pid: int, msg: Any, cost: int) -> bool:
        """One message from ``host`` into GP ``pid``'s pipe (``targets[pid]``,
        a ``pipe_type``) and its mark; False, nothing done, where ``pid`` has
        no open pipe here (the caller's slow way: parked, or dropped and its
        credit returned).  A landed large payload's message comes here too
        (:mod:`aiopdbp.hosts.splitin`)."""
        pipe: Any = self.targets.get(pid)
        if type(pipe) is self.pipe_type and pipe.put_many([msg], host):  # (False: closed, took nothing)
            self.mark(pipe, host, pid, cost)
            return True
        return False

    def mark(self, pipe: Any, host: int, pid: int, cost: int) -> None:
        """Remember that ``pipe``'s items up to its ``appended`` owe ``cost`` to ``host``."""
        marks = self.marks.get(pipe)
        if marks is None:
            marks = self.marks[pipe] = PipeMarks(self.book, self._due)
            pipe.on_watch = marks.settle
        watch = marks.mark(host, pid, cost, pipe.appended)
        if watch >= 0:
            pipe.watch_at = watch
