"""Arrivals from other hosts, and the credit they owe (SPEC 4-5).

Theory of operation
-------------------
:class:`Arrivals` is the receiving side of every remote GP's flow control:
it puts what other hosts sent into the pipes of the GPs here, and it keeps
the receiver's credit book (:class:`~aiopdbp.hosts.gate.CreditBook`), the
ledger the host links' credit (:mod:`aiopdbp.hosts.credit`) asks and is
granted from.  The router (:mod:`aiopdbp.routing.router`) decides where a
send goes; this class only ever delivers here, into the targets the
router keeps.

*Placing.*  The messages of one block for one GP
(:attr:`place_shorts`; a stream carried whole in a short record becomes
its incoming stream in the stream table, handed in as ``streams``, and
takes its place among the messages) go into its pipe in one batch, past
its capacity -- the sender's credit bounded them -- and a mark remembers,
per sending host, where the batch ends.  The core's
:class:`~aiopdbp.hosts.gate.Placer` does both and keeps the marks; a
frame of one message (the commonest) goes from the read to the reader's
wake-up in one call of it.

*Returning credit.*  When the GP has taken every item of that host's up
to a mark (the pipe's watch, which counts each host's items apart: a long
queue of one host's never holds back another's credit, see
:mod:`aiopdbp.routing.pipes`, "Counting under turns"), the bytes become
credit owed to the sending host (:meth:`settle`); the book says when it is
due, returned per destination in ``window/4`` steps, at once for a whole
window (a large message's sender is parked for it), or below the threshold
when the sender asks (:meth:`on_ask`).

*Parking.*  A message for a GP whose registration or binding has not
reached this host yet is *parked* for that GP alone, so it never holds up
traffic to the others; it is delivered when the binding comes (this class
follows the tables, after the router), dropped with its credit returned if
the GP is gone, or after ``bind_timeout``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from aiopdbp.hosts.gate import LATER, NOW
from aiopdbp.hosts.gatecore import CreditBook, Placer
from aiopdbp.hosts.tables import PipeBind, PipeRelease, ProcFree, ProcReg, Tables, Update
from aiopdbp.routing.pipes import Pipe
from aiopdbp.wire.core import BlockReader
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message

log = logging.getLogger("aiopdbp.routing.arrivals")

__all__ = ["Arrivals", "GrantFn", "WholeStreams"]

#: grant(host, [(pid, bytes), ...]): give a remote host credit back
GrantFn = Callable[[int, list[tuple[int, int]]], None]


class WholeStreams(Protocol):
    """Where arrivals hand the streams that arrive whole in short records
    (the stream table, :mod:`aiopdbp.streams.table`)."""

    def open_whole(self, host: int, dest: int, src: int, source: Any, com: int, sno: int, window: int,
                   data: Any) -> Any | None: ...
    def undelivered(self, items: list[Any]) -> None: ...


class Arrivals:
    """Items from other hosts into the pipes of the GPs here, and the credit
    they owe their senders (see the module docstring).

    ``targets`` is the router's (pid -> where a GP is reached: a
    :class:`~aiopdbp.routing.pipes.Pipe` for a GP here); ``grant`` returns
    credit to a sending host; ``landings`` are the buffers of GPs waiting
    in ``recv_into`` (the router's :class:`~aiopdbp.routing.router.Landings`),
    offered to the inbound path; ``want_pid`` asks for the name of a sender
    not known here yet.
    """

    def __init__(self, tables: Tables, targets: dict[int, Any], rank: int, *, window: int = 1 << 20,
                 bind_timeout: float = 30.0, grant: GrantFn | None = None,
                 streams: WholeStreams | None = None, landings: Any = None,
                 want_pid: Callable[[int], None] | None = None) -> None:
        self.tables = tables
        self.targets = targets
        self.rank = rank
        self.window = window                      # credit this host gives each sender per GP
        self.bind_timeout = bind_timeout
        self.grant = grant
        self.landings = landings
        self._streams = streams
        #: decodes the BPS frames from other hosts into Messages (the core's reader);
        #: a sender whose name is not known here yet is asked for at once
        self.reader = BlockReader(tables.names, Message,
                                  tables.name_of if want_pid is None else _asking(tables.name_of, want_pid))
        #: the credit this host owes each (sending host, GP): the rule is the book's
        self.book = CreditBook(window)
        #: places arrivals into pipes and keeps each pipe's marks (see "Placing")
        self.placer = Placer(self.reader, targets, Pipe, self.book, self._due, self.deliver_remote,
                             self._place_runs)
        #: ``place_shorts(host, buf)``: deliver a BPS frame of short messages
        #: from ``host``, decoded straight into :class:`Message` records (raises
        #: only ``ProtocolError``); a lone message, the commonest frame, in one
        #: call of the placer's (compiled: one C call), the others by
        #: :meth:`_place_runs`
        self.place_shorts: Callable[[int, Any], None] = self.placer.place
        #: ``place_one(host, pid, message, cost)``: one message into GP
        #: ``pid``'s open pipe (False, nothing done: none here -- then
        #: :meth:`place_messages`); a landed large payload's message in one
        #: call of the placer's (:mod:`aiopdbp.hosts.splitin`)
        self.place_one: Callable[[int, int, Any, int], bool] = self.placer.place_one
        #: the grant sink batches per loop iteration itself (it carries grants
        #: on the host's next split header, :mod:`aiopdbp.hosts.credit`): due
        #: grants go to it at once, so the reply that follows can carry them
        self.grants_at_once = False
        self._flush_scheduled = False
        self._parked: dict[int, deque[tuple[int, list[Any], int]]] = {}
        self._ever_bound: set[int] = set()
        self._closed = False
        self.dropped = 0
        self.parked = 0
        tables.subscribe(self.on_update)

    # ----------------------------------------------------------- table hook
    def on_update(self, op: str, update: Update, result: Any) -> None:
        """Follow the tables for the GPs something is parked for (called by
        ``Tables.apply``, after the router has followed them)."""
        match update:
            case ProcReg(pipe=pipe) if pipe is not None:
                self.on_update("pipe_bind", PipeBind(result, pipe), pipe)
            case ProcReg():
                if result in self._parked and self.tables.pta[result].node != self.rank:
                    self._unpark(result)  # not ours after all: drop what waited
            case PipeBind(pid=pid):
                if self.tables.pta.get(pid) is None:
                    return
                self._ever_bound.add(pid)
                if pid in self._parked:
                    self._unpark(pid)
            case ProcFree(pid=pid):
                self._ever_bound.discard(pid)   # its entry is gone: nothing is parked for it now
                if pid in self._parked:
                    self._unpark(pid)
            case PipeRelease(pid=pid):
                if pid in self._parked:
                    self._unpark(pid)

    # ------------------------------------------------------------- placing
    def _place_runs(self, host: int, buf: Any) -> None:
        """:attr:`place_shorts` for a frame of several records: one pipe
        operation per run of records for the same GP."""
        streams = self._streams
        whole = None if streams is None else functools.partial(streams.open_whole, host)
        for pid, msgs, nbytes in self.reader.read(buf, whole):
            cost = nbytes + CREDIT_OVERHEAD * len(msgs)
            tgt = self.targets.get(pid)
            if type(tgt) is Pipe and tgt.put_many(msgs, host):  # deliver_remote's common case
                self.placer.mark(tgt, host, pid, cost)
            elif not self.deliver_remote(host, pid, msgs, cost) and streams is not None:
                streams.undelivered(msgs)  # a stream among them: its sender must hear

    def place_messages(self, host: int, pids: tuple[int, ...], item: Any, cost: int) -> None:
        """Deliver one item (a Message, or a stream's first contact) from
        ``host`` to each of its GPs ``pids`` here (multicast fans out here)."""
        for pid in pids:
            entry = self.tables.pta.get(pid)
            if entry is None or entry.node == self.rank:
                self.deliver_remote(host, pid, [item], cost)

    def deliver_remote(self, host: int, pid: int, items: list[Any], cost: int) -> bool:
        """Put items that came from ``host`` into GP ``pid``'s pipe, charging
        ``cost`` bytes of credit until the GP has taken them.  False when
        they were dropped (the GP is gone)."""
        tgt: Any = self.targets.get(pid)
        if type(tgt) is Pipe and tgt.put_many(items, host):
            self.placer.mark(tgt, host, pid, cost)
            return True
        entry = self.tables.pta.get(pid)
        waiting = (entry is None and pid not in self.tables.names) or (
            entry is not None and entry.node == self.rank and pid not in self._ever_bound)
        if waiting and not self._closed:
            # Its registration or binding has not reached us: park for it alone.
            q = self._parked.get(pid)
            if q is None:
                q = self._parked[pid] = deque()
                asyncio.get_running_loop().call_later(self.bind_timeout, self._expire, pid)
            q.append((host, items, cost))
            self.parked += len(items)
            return True
        self.dropped += len(items)
        log.debug("dropping %d item(s) for pid %d: it has no pipe here", len(items), pid)
        self._due(self.book.owe(host, pid, cost))
        return False

    def deliver_carried(self, pid: int, fields: tuple[Any, ...]) -> bool:
        """Put a first message that came with its name's lookup
        (:mod:`aiopdbp.hosts.names`, "Carried first messages") into GP
        ``pid``'s pipe, past its capacity and outside credit (at most one per
        sending host and name, a few KiB); False when
        the GP has no open pipe here (its sender then sends it as any other)."""
        tgt: Any = self.targets.get(pid)
        if type(tgt) is not Pipe or tgt.closed:
            return False
        tgt.force_put(Message(fields))
        return True

    def _unpark(self, pid: int) -> None:
        q = self._parked.pop(pid, None)
        while q:
            host, items, cost = q.popleft()
            if not self.deliver_remote(host, pid, items, cost) and self._streams is not None:
                self._streams.undelivered(items)  # a stream among them: its sender must hear

    def _expire(self, pid: int) -> None:
        q = self._parked.pop(pid, None)
        if q:
            log.warning("dropping %d CDU(s) for pid %d: it never bound a pipe here within %g s",
                        sum(len(i) for _, i, _ in q), pid, self.bind_timeout)
        while q:
            host, items, cost = q.popleft()
            self.dropped += len(items)
            self._due(self.book.owe(host, pid, cost))
            if self._streams is not None:
                self._streams.undelivered(items)  # a stream among them: its sender must hear

    # ---------------------------------------------------------- credit out
    def settle(self, pipe: Pipe[Any], taken: int, host: int) -> int:
        """The reader took items: what it took from ``host`` (every one
        numbered below ``taken``: :attr:`Pipe.on_watch`) is credit owed.
        Returns where ``host``'s next mark ends (the pipe's next watch).
        (The pipe calls its :class:`~aiopdbp.hosts.gate.PipeMarks` itself.)"""
        marks = self.placer.marks.get(pipe)
        return 1 << 62 if marks is None else marks.settle(pipe, taken, host)

    def forget_pipe(self, pipe: Pipe[Any]) -> None:
        """A pipe is released: its queued remote items are discarded, their
        credit goes back to their senders."""
        marks = self.placer.marks.pop(pipe, None)
        if marks is not None:
            for host, pid, cost in marks.drain():
                self._taken(host, pid, cost)
        pipe.watch_at = 1 << 62

    def refund(self, host: int, pid: int, cost: int) -> None:
        """Give ``host`` back ``cost`` bytes of GP ``pid``'s credit for
        something that will never reach the GP's pipe (a device message that
        failed on the way)."""
        self._due(self.book.owe(host, pid, cost))

    def _taken(self, host: int, pid: int, cost: int) -> None:
        self._due(self.book.taken(host, pid, cost))

    def on_ask(self, host: int, pid: int) -> None:
        """A sender on ``host`` is parked for GP ``pid``'s credit: what is
        owed below the return threshold goes back as soon as the GP has
        taken everything of ``host``'s that waits for it (see "Returning credit")."""
        self._due(self.book.ask(host, pid))

    def _due(self, due: int) -> None:
        """Send the book's grants when it says they are due."""
        if due == LATER:
            return
        if due == NOW or self.grants_at_once:
            # A whole window (a large message): its sender is parked for it
            # or will be at its next send, so it goes now -- at the end of
            # the iteration it would leave after whatever the reader sends
            # next (a reply), and the sender would park for it.
            self.flush_grants()
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush_grants)

    def flush_grants(self, everything: bool = False) -> None:
        """Send the credit owed (once per loop iteration; ``everything``: also
        the amounts below the quarter-window threshold, e.g. at close)."""
        self._flush_scheduled = False
        grants = self.book.grants(everything)
        if self.grant is not None:
            for host, g in grants.items():
                self.grant(host, g)

    # -------------------------------------------------------------- closing
    def close(self) -> None:
        """The node closes: nothing is parked any more, nothing parks."""
        self._closed = True
        self._parked.clear()

    def stats(self) -> dict[str, int]:
        return {"dropped": self.dropped, "parked": self.parked,
                "parked_now": sum(len(q) for q in self._parked.values()),
                "credit_owed": self.book.owed()}


def _asking(name_of: Callable[[int], str], want_pid: Callable[[int], None]) -> Callable[[int], str]:
    """``name_of`` that also asks for the name it does not know yet."""
    def unnamed(pid: int) -> str:
        want_pid(pid)
        return name_of(pid)
    return unnamed
