"""Carried first messages: a first message to a name travels with its lookup.

Theory of operation
-------------------
A first send to a name this host does not know waited for the lookup of the
name at its home (:mod:`aiopdbp.hosts.names`) -- a round trip -- and only
then went to the GP's host: three hops.  Instead, a send that would wait
for a name this host has not asked for yet, of a ``bytes`` payload of at
most :data:`CARRY_MAX` bytes, sends the message *with* the lookup
(:meth:`Carrier.carry`, ``CarryMsg`` to the name's home, sent by
:meth:`~aiopdbp.hosts.names.NameService.want` in place of ``LookupMsg``):

1. When the name is registered with a pipe on another host, the home
   passes the message on to it (``CarryMsg`` with the GP's pid and the
   sender's host as ``origin``); when it is the GP's host, it delivers it
   itself.  It does not subscribe the sender's host: the GP's host answers
   with the name's row and keeps it current there
   (:mod:`aiopdbp.hosts.namerows`).  A name not registered (or bound) yet,
   or registered on the sender's own host: the home subscribes the sender's
   host as for any lookup (the name's registration goes back to it, then
   every update) and answers no (``CarriedMsg``), and the sender sends the
   message as any other once the name has come -- the name rule is the
   lookup's, unchanged.
2. The GP's host puts the message in the GP's pipe and answers the sender's
   host (``CarriedMsg`` with the rows of its GPs, the GP's first, as an
   announcement carries them); no GP bound there any more: it answers no,
   and the sender asks the home for the name as for any lookup and sends it
   as any other (which then fails or waits by the name rule).

*Order.*  The send returns when the answer comes: the sending GP's next
message (which goes straight to the GP's host) cannot overtake the carried
one, so per-pair order holds.  The first message takes two hops, the answer
a third, which a request/response overlaps with the response.

*Credit.*  A carried message travels outside credit: the GP's host takes it
past its pipe's capacity, as a control item.  Bounded: only the first send
to a name this host has never asked for carries its message, so at most one
per sending host and name, of at most :data:`CARRY_MAX` bytes.

*Names.*  It carries its sender's registration row (as a link's
announcement does), so the receiver names it and answers it without a
lookup of its own.  The row comes by way of the home, so the sender's host
holds the sending GP's updates until the answer comes (an update sent
straight there could overtake the row), then sends them there as to any
host it told the row (:meth:`~aiopdbp.hosts.namerows.HostRows.hold`).

*Failure.*  A lost host on the way -- the home, or the GP's host -- fails
the send (:meth:`Carrier.break_host`; where the home passed it on is not
known to the sender until the answer: a host lost meanwhile makes it ask
the home for the name, whose registration says); so do the job
stopping and the node closing (:meth:`Carrier.fail`).  There is no timeout
besides: the answer comes when the GP's host's loop runs, as a queued message
would be taken then (a rank busy for long in an import is not lost).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiopdbp.errors import BrokenResourceError, ProtocolError
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.names import NameService, home_of
from aiopdbp.hosts.tables import ProcReg, Update
from aiopdbp.hosts.toolate import despite_cancel
from aiopdbp.wire.control import CarriedMsg, CarryMsg, LookupMsg, TableMsg
from aiopdbp.wire.mesp import Kind

__all__ = ["CARRY_MAX", "Carrier", "DeliverFn"]

#: the largest payload a first message may carry with its lookup (bytes)
CARRY_MAX = 4096

#: deliver(pid, fields): put a carried message into GP ``pid``'s pipe here
#: (past its capacity); False when the GP has no open pipe here
DeliverFn = Callable[[int, tuple[str, Kind, int, Any, int]], bool]

_KINDS = {int(Kind.SHORT): Kind.SHORT, int(Kind.COMMAND): Kind.COMMAND}


class Carrier:
    """This host's carried first messages: as their sender, as a name's
    home that passes them on, and as the GP's host that delivers them."""

    def __init__(self, rank: int, size: int, names: NameService, channel: ControlChannel, *,
                 deliver: DeliverFn | None) -> None:
        self.rank = rank
        self.size = size
        self._names = names
        self._channel = channel
        self._deliver = deliver
        self._reqs = iter(range(1, 1 << 62))
        self._waiting: dict[int, tuple[asyncio.Future[bool], int, str]] = {}   # req -> (answer, home, name)
        self._holding: dict[int, int] = {}   # req -> the sending GP whose updates wait for its answer
        self._failed: BaseException | None = None
        self._lost: dict[int, BaseException] = {}   # hosts lost -> why
        names.tables.subscribe(self._on_update)

    async def carry(self, name: str, fields: tuple[str, Kind, int, Any, int]) -> bool:
        """Send a first message (``fields``: source name, kind, com, data,
        source pid) to GP ``name`` with this host's lookup of the name.
        True once it is in the GP's pipe; False when it was not sent (a name
        asked for already, a payload too large, ...) or could not be
        delivered: then the caller sends it as any other.

        Cancellation: the message has left with the lookup and cannot be
        recalled, so a cancel waits for its answer (bounded: a host lost on
        the way, the job stopping or the node closing answers it): not
        delivered -- ``CancelledError``, nothing was queued; delivered --
        the send happened and returns ``True``, and the cancel is raised at
        the calling task's next suspension instead (as trio delivers a
        cancel that came too late for an operation at its next checkpoint)
        -- unless the scope that asked for it has ended meanwhile (an
        expired ``asyncio.timeout`` around the send withdraws its cancel).
        A cancelled send therefore never delivers its message.
        """
        source, kind, com, data, spid = fields
        if (type(data) is not bytes or len(data) > CARRY_MAX or self._deliver is None
                or self._failed is not None):
            return False
        entry = self._names.tables.pta.get(spid)
        rows = [] if entry is None else [[spid, source, int(entry.ptype), entry.pipe]]
        req = next(self._reqs)
        home = home_of(name, self.size)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[req] = (fut, home, name)
        if rows:   # the GP's host takes the row: no update of the GP may overtake it there
            self._holding[req] = spid
            self._names.rows.hold(spid)
        try:
            if not self._names.want(name, CarryMsg(req, 0, name, 0, source, spid, int(kind), com, data, rows),
                                    lambda exc: self._answer(req, BrokenResourceError(
                                        f"host {home} is unreachable: {exc}"))):
                self._unhold(req, None)
                return False
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                if not await despite_cancel(fut, bool):
                    raise
                return True
        finally:
            self._waiting.pop(req, None)
            self._unhold(req, None)

    def _unhold(self, req: int, host: int | None) -> None:
        """Carried message ``req`` is answered by the GP's host ``host``,
        which took the sending GP's row, or given up (None): that GP's
        updates go on (to ``host`` too)."""
        spid = self._holding.pop(req, 0)
        if spid:
            self._names.rows.release(spid, host)

    def _answer(self, req: int, result: bool | BaseException) -> None:
        waiting = self._waiting.get(req)
        if waiting is None or waiting[0].done():
            return
        if isinstance(result, BaseException):
            waiting[0].set_exception(result)
        else:
            waiting[0].set_result(result)

    # ------------------------------------------------------------- handlers
    def on_carry(self, src: int, msg: CarryMsg) -> None:
        if msg.pid:   # at the GP's host, from the name's home
            self._take(src, msg)
            return
        if home_of(msg.name, self.size) != self.rank:
            raise ProtocolError(f"a carried lookup of {msg.name!r} from host {src}, not its home")
        reg = self._names.home.homed(msg.name)
        if reg is None or reg.pid is None or reg.pipe is None or reg.node == src or self._failed is not None:
            # not registered (or bound) yet: the sender sends it once the name comes
            self._refuse(src, msg.req, msg.name)
            return
        # passed on without subscribing the sender's host: the GP's host
        # answers it with the GP's row, and keeps it current there
        on = CarryMsg(msg.req, src, msg.name, reg.pid, msg.source, msg.spid, msg.kind, msg.com,
                      msg.data, msg.rows)
        if reg.node == self.rank:
            self._take(self.rank, on)
            return
        req, name, node = msg.req, msg.name, reg.node
        self._channel.send(node, on, lambda exc: self._refuse(src, req, name))

    def _refuse(self, src: int, req: int, name: str) -> None:
        """The home does not pass a carried message on: it subscribes the
        sender's host to the name as for any lookup (that answer goes
        first) and says no; the sender sends it once the name has come."""
        self._names.home.on_lookup(src, LookupMsg(name, 0))
        self._channel.send(src, CarriedMsg(req, False, "", []))

    def _take(self, src: int, msg: CarryMsg) -> None:
        """The GP's host: deliver a message its name's home passed on, and
        answer the sender's host."""
        if src != home_of(msg.name, self.size) or msg.origin == self.rank or msg.kind not in _KINDS:
            raise ProtocolError(f"a carried message for {msg.name!r} from host {src}, not its home")
        # the sender's row: its host holds the GP's updates until this
        # answer reaches it, then sends them here (aiopdbp.hosts.namerows)
        self._names.on_table(msg.origin, TableMsg(0, "proc_names", msg.rows))
        ok = (self._deliver is not None and self._names.tables.by_name.get(msg.name) == msg.pid
              and self._deliver(msg.pid, (msg.source, _KINDS[msg.kind], msg.com, msg.data, msg.spid)))
        # the answer carries this host's rows, the GP's first: the sender
        # holds the name from here on, and so do its other GPs ours
        self._channel.send(msg.origin, CarriedMsg(msg.req, ok, msg.name,
                                                  self._names.rows_for(msg.origin, msg.pid)))

    def on_carried(self, src: int, msg: CarriedMsg) -> None:
        if msg.name:   # from the GP's host, not the home's refusal
            self._names.on_carried_rows(src, msg.name, msg.ok, msg.rows)
            self._unhold(msg.req, src)
        self._answer(msg.req, msg.ok)

    # -------------------------------------------------------------- failure
    def break_host(self, host: int, exc: BaseException) -> None:
        """Host ``host`` is lost: a message carried by way of it, or to a GP
        on it, fails with ``exc`` (its answer would never come)."""
        self._lost.setdefault(host, exc)
        tables = self._names.tables
        for req, (_, home, name) in list(self._waiting.items()):
            entry = tables.pta.get(tables.by_name.get(name, 0))
            if home == host or (entry is not None and entry.node == host):
                self._answer(req, exc)
            elif entry is None:
                # where the home passed it on is not known here: its answer
                # (the registration) says, and fails it if that host is lost
                self._names.relook(name)

    def _on_update(self, op: str, update: Update, result: Any) -> None:
        """The tables: a name registered on a host lost already fails the
        message carried to it (its answer would never come)."""
        if type(update) is ProcReg and update.node in self._lost:
            for req, (_, _, name) in list(self._waiting.items()):
                if name == update.name:
                    self._answer(req, self._lost[update.node])

    def fail(self, exc: BaseException) -> None:
        """The job stops or the node closes: every carried message waiting
        for its answer fails with ``exc``, and no more are carried."""
        self._failed = exc
        for req in list(self._waiting):
            self._answer(req, exc)
