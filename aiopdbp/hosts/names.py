"""Names at scale: every GP name has a home host, which alone keeps it.

Theory of operation
-------------------
*Homes.*  A name's home is a host chosen by a stable hash of the name
(:func:`home_of`); every host computes the same home without asking anyone.
The home holds the name's record -- its registration (with the pid it gave),
whether it is still registered, and the hosts subscribed to it -- and
applies every update of that name in the one order it receives them.  So a
name is unique in the job (the home refuses a second registration with
:class:`~aiopdbp.errors.DuplicateProcessError`) without rank 0 seeing it,
and a registration costs two control messages (request and answer) at one
host, whatever the number of hosts.

*Pids* are given by the home: ``pid = k * size + home + 1`` for its k-th
registration, so they are unique in the job, and a pid names its home
(:func:`pid_home`): updates of a GP (bind, release, free) and the question
"whose pid is this?" go straight to it.

*Subscribers.*  A host learns a name only from its home: by registering it,
or by asking (:meth:`NameService.want`, ``LookupMsg``; the router asks when
a send waits for a name it does not know).  The home answers with the
registration (or, for a name freed since, ``proc_gone``: registration and
free in one update, so no reader sees it registered) and from then on sends that
host every update of the name (``TableMsg``), before answering the host
that asked for the update -- so a requester has applied its update when its
``await`` returns, and every subscriber sees a name's updates in the home's
order.  A host that never sends to a name never hears of it.  The name rule
is unchanged: a send waits for a name not registered yet (the home sends
its registration when it comes), and a freed name fails at once once its
free has reached the host (a subscriber gets it before anything later).

*Sources.*  A message carries its sender's pid; a receiver that does not
know that pid's name asks its home once (``LookupMsg`` with the pid) and
keeps the answer (``proc_name``: a pid's name never changes).

*The GP's host keeps its told hosts current* (so that a first message and
its answer need not wait for a lookup, and a host need not subscribe at the
home of every name it uses).  A host that makes a link to another (its
first send there) tells it the registrations of its own GPs
(:meth:`NameService.announce`, one ``proc_names`` update on the control
channel), and so does its answer to a carried first message; from then on
it sends that host every update of those GPs (:mod:`aiopdbp.hosts.namerows`,
``TableMsg`` with ``seq`` 1), in its home's order, since it is subscribed
there.  The receiver takes such a row as it would its home's answer -- it
holds the name, kept current by the GP's host -- unless it asked the home
for the name already (then the home keeps it current, and the GP's host's
updates of that name are ignored).  A name so held and then freed was not
freed by its home's word here: a send to it asks the home again
(:meth:`NameService.recheck`) -- it may be registered again elsewhere --
and fails by the name rule if the home says it is gone.

*Carried first messages.*  A first send to a name this host has not asked
for may carry its message with the lookup (:mod:`aiopdbp.hosts.carry`):
:meth:`NameService.want` sends that ``CarryMsg`` instead of ``LookupMsg``;
the home passes the message on to the GP's host without subscribing the
sender's host, and the GP's host answers with its rows
(:meth:`NameService.on_carried_rows`); when the home cannot pass it on, it
subscribes the host as for any lookup and says no.

*Bounded waits.*  A request unanswered for ``reply_timeout`` seconds fails
with :class:`~aiopdbp.errors.BrokenResourceError`; a name never registered is
waited for by the router up to its name timeout, as before.  When the job
stops every pending request fails, and undoing updates (release, free) are
applied here only.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from typing import Any

from aiopdbp.errors import (
    BrokenResourceError,
    DuplicateProcessError,
    PDBPError,
    ProtocolError,
    RankFailedError,
    UnknownProcessError,
)
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.namehome import PID_OPS, NameHome
from aiopdbp.hosts.namerows import VIA, HostRows
from aiopdbp.hosts.tables import Tables
from aiopdbp.wire.control import (
    AAPMsg,
    APipeMsg,
    ARMsg,
    CancelMsg,
    CtrlMsg,
    LookupMsg,
    RegMsg,
    ReleaseMsg,
    TableAckMsg,
    TableMsg,
    TableReqMsg,
)

log = logging.getLogger("aiopdbp.hosts.names")

__all__ = ["NameService", "home_of", "pid_home"]

def home_of(name: str, size: int) -> int:
    """The home host of GP name ``name`` in a job of ``size`` hosts."""
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) % size


def pid_home(pid: int, size: int) -> int:
    """The home host that gave ``pid`` (it keeps the pid's name)."""
    return (pid - 1) % size


class NameService:
    """This host's part of the names: the home of some, a subscriber of others."""

    def __init__(self, rank: int, size: int, tables: Tables, channel: ControlChannel, *,
                 reply_timeout: float = 60.0) -> None:
        self.rank = rank
        self.size = size
        self.tables = tables
        self.reply_timeout = reply_timeout
        self._channel = channel
        #: the names homed on this host (answers the other hosts' requests)
        self.home = NameHome(rank, size, channel, self._apply)
        #: the rows of this host's GPs told to others, and their updates after them
        self.rows = HostRows(rank, tables, channel)
        self._wanted: set[str] = set()            # names this host subscribed to (at their home)
        self._via: dict[str, int] = {}            # names held from their GP's host (kept current by it)
        self._recheck: set[str] = set()           # names freed by their GP's host's word, not the home's
        self._relooked: set[str] = set()          # carried names asked of the home again (a host lost)
        self._asked: set[int] = set()             # pids whose name was asked of their home
        self._reqs = iter(range(1, 1 << 62))
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._cancelled: set[int] = set()
        self._req_names: dict[int, str] = {}      # pending registrations: req -> name
        self._closing = False
        self._stopping = False

    # ------------------------------------------------------------ subscribing
    def want(self, name: str, carry: CtrlMsg | None = None,
             on_fail: Callable[[BaseException], None] | None = None) -> bool:
        """Subscribe to ``name`` at its home (once): its registration, if
        any, and every later update of it will be applied here.  ``carry``:
        a ``CarryMsg`` (:mod:`aiopdbp.hosts.carry`) to send as the lookup,
        ``on_fail`` called if it cannot be sent; True when it was sent --
        not when the home is here.  Nothing when the name is held from its
        GP's host already."""
        if name in self._wanted or name in self._via or self._closing or self._stopping:
            return False
        self._wanted.add(name)
        self._recheck.discard(name)
        home = home_of(name, self.size)
        if home == self.rank:
            self.home.subscribe(self.rank, name)
            return False
        if carry is not None:
            self._channel.send(home, carry, on_fail)
            return True
        self._channel.send(home, LookupMsg(name, 0))
        return False

    def recheck(self, name: str) -> bool:
        """``name`` was freed by its GP's host's word (not subscribed at its
        home): ask the home now (it may be registered again).  True when an
        answer (the registration, or ``proc_gone``) is on its way."""
        if name not in self._recheck or name in self.tables.by_name:
            return False
        self.want(name)
        return name in self._wanted

    def relook(self, name: str) -> None:
        """A carried first message to ``name`` waits for an answer and a host
        was lost: ask the home for the name (its registration says whether
        the GP was on the lost host), unless the home knows us already."""
        if name in self.tables.by_name or name in self._relooked or self._closing or self._stopping:
            return
        self._relooked.add(name)
        self._wanted.add(name)
        self._channel.send(home_of(name, self.size), LookupMsg(name, 0))

    def want_pid(self, pid: int) -> None:
        """Ask (once) the home of ``pid`` for its name (``proc_name``)."""
        if pid <= 0 or pid in self._asked or pid in self.tables.names or self._closing or self._stopping:
            return
        self._asked.add(pid)
        home = pid_home(pid, self.size)
        if home == self.rank:
            self.home.on_lookup(self.rank, LookupMsg("", pid))
        else:
            self._channel.send(home, LookupMsg("", pid))

    def announce(self, host: int) -> None:
        """Tell ``host`` (this host has just made a link to it) the
        registrations of the GPs here it was not told yet, so that it names
        what they send, and sends to them, without asking their homes."""
        if self._closing or self._stopping:
            return
        rows = self.rows_for(host)
        if rows:
            self._channel.send(host, TableMsg(0, "proc_names", rows))

    def rows_for(self, host: int, first: int = 0) -> list[list[Any]]:
        """The rows of the GPs here not told to ``host`` yet (:class:`HostRows`)."""
        return self.rows.rows_for(host, first)

    # ----------------------------------------------------------------- client
    async def commit(self, op: str, args: tuple[Any, ...]) -> Any:
        """Apply a table update through its name's home; return its result.

        Cancellation: the update may still be applied (its request is on the
        way to the home); a registration or binding it made is then undone.
        No answer within ``reply_timeout`` raises
        :class:`~aiopdbp.errors.BrokenResourceError`.
        """
        if self._stopping:
            # The job is stopping (failure, interrupt): the home may be gone.
            # Undoing (release, free) is applied here only; nothing new starts.
            if op in ("pipe_release", "proc_free"):
                self.commit_nowait(op, args)
                return None
            raise RankFailedError(f"the job is stopping: {op} refused", self.rank)
        if op == "proc_reg":
            name = args[0]
            home = home_of(name, self.size)
            if name not in self._wanted:
                try:
                    return await self._commit(home, op, args)
                except BaseException:
                    self._wanted.discard(name)   # refused: this host did not subscribe
                    raise
        elif op in PID_OPS:
            home = pid_home(args[0], self.size)
        else:
            raise PDBPError(f"unknown table update {op!r}")
        return await self._commit(home, op, args)

    async def _commit(self, home: int, op: str, args: tuple[Any, ...]) -> Any:
        """:meth:`commit` at host ``home`` (here or by a request to it)."""
        if op == "proc_reg":
            name, ptype, node, *rest = args
            pipe = rest[0] if rest and rest[0] is not None else -1
            self._wanted.add(name)   # the home subscribes the registering host
            if home == self.rank:
                return self.home.register(self.rank, name, int(ptype), node, None if pipe < 0 else pipe)
        elif home == self.rank:
            return self.home.update(op, args[0], args[1] if op == "pipe_bind" else None)
        req = next(self._reqs)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[req] = fut
        msg: CtrlMsg
        if op == "proc_reg":
            msg = RegMsg(req, name, int(ptype), node, pipe)
            self._req_names[req] = name
        elif op == "pipe_bind":
            msg = APipeMsg(req, args[0], args[1])
        else:
            msg = ReleaseMsg(req, args[0], op == "proc_free")
        self._channel.send(home, msg, lambda exc: self._resolve(
            req, None, BrokenResourceError(f"host {home} is unreachable: {exc}")))
        try:
            async with asyncio.timeout(self.reply_timeout):
                return await fut
        except TimeoutError:
            self._cancelled.add(req)  # undo it if the home does it late
            raise BrokenResourceError(
                f"host {home} did not answer {op} within {self.reply_timeout} s") from None
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():
                self._cancelled.add(req)  # undo it if the home does it anyway
            raise
        finally:
            self._waiting.pop(req, None)
            self._req_names.pop(req, None)

    def commit_nowait(self, op: str, args: tuple[Any, ...]) -> None:
        """Ask for a table update (of a GP, by pid) without waiting for it."""
        if self._closing or self._stopping:
            try:  # tearing down: the other hosts are closing too
                self.tables.apply(op, args)
            except PDBPError:
                pass
            return
        if op not in PID_OPS:
            raise PDBPError(f"table update {op!r} cannot be asked without waiting")
        home = pid_home(args[0], self.size)
        if home != self.rank:
            self._channel.send(home, TableReqMsg(0, op, list(args)))
            return
        try:
            self.home.update(op, args[0], args[1] if op == "pipe_bind" else None)
        except PDBPError as exc:
            log.debug("table update %s%s refused: %s", op, args, exc)

    # ------------------------------------------------------------ subscriber
    def _apply(self, op: str, args: list[Any]) -> None:
        try:
            self.tables.apply(op, args)
        except PDBPError as exc:
            if self._closing or self._stopping:
                # tearing down, this host applied its own releases alone
                log.debug("table update %s%s after local teardown: %s", op, args, exc)
            else:  # cannot happen: a home sends a name's updates in its order
                log.critical("names diverged applying %s%s: %s", op, args, exc)

    def on_table(self, src: int, msg: TableMsg) -> None:
        args = msg.args
        if msg.op == "proc_names":   # from the GPs' own host (announce), not a home
            self._take_rows(src, _announced_rows(args))
            return
        key = args[0] if args else None
        if msg.seq == VIA:   # an update of a GP, from its own host
            if msg.op not in PID_OPS or type(key) is not int:
                raise ProtocolError(f"a malformed update {msg.op!r} from a GP's host")
            name = self.tables.names.get(key)
            if name is None or self._via.get(name) != src or self.tables.by_name.get(name) != key:
                return   # not held from that host: its home keeps it current here, or nothing does
            self._apply(msg.op, args)
            if msg.op == "proc_free":
                del self._via[name]
                self._recheck.add(name)
            return
        # only a name's home sends its updates (the order every holder follows)
        if msg.op in ("proc_reg", "proc_gone") and type(key) is str:
            home = home_of(key, self.size)
        elif msg.op in (*PID_OPS, "proc_name") and type(key) is int:
            home = pid_home(key, self.size)
        else:
            raise ProtocolError(f"a malformed table update {msg.op!r}")
        if src != home:
            raise ProtocolError(f"a {msg.op} update from host {src}, not its home (host {home})")
        if msg.op == "proc_reg" and type(key) is str and len(args) > 4 and self.tables.by_name.get(key) == args[4]:
            return   # its registration again (asked again when a host was lost): held already
        self._apply(msg.op, args)

    def _take_rows(self, src: int, rows: list[tuple[int, str, int, int | None]]) -> None:
        """Rows of GPs on host ``src`` from ``src`` itself: name their pids,
        and hold each name not held or asked for yet (``src`` keeps it current)."""
        tables = self.tables
        for pid, name, ptype, pipe in rows:
            if pid not in tables.names:
                self._apply("proc_name", [pid, name])
            if name in tables.by_name or name in self._wanted or name in self._via:
                continue
            self._via[name] = src
            self._recheck.discard(name)
            self._apply("proc_reg", [name, ptype, src, pipe, pid])

    def on_carried_rows(self, src: int, name: str, ok: bool, rows: list[Any]) -> None:
        """The GP's host ``src`` answered our carried message to ``name``
        (the home passed it on without subscribing us): its rows; if they do
        not hold ``name`` (the GP left), ask the home as for any lookup."""
        if name in self._relooked:
            self._relooked.discard(name)   # asked the home again: it keeps it current
        else:
            self._wanted.discard(name)
        self._take_rows(src, _announced_rows(rows))
        if name not in self.tables.by_name and not self._closing and not self._stopping:
            self.want(name)

    def on_ar(self, src: int, msg: ARMsg) -> None:
        if msg.req in self._cancelled:
            self._cancelled.discard(msg.req)
            if msg.ok:
                self._channel.send(src, CancelMsg(msg.req, msg.pid))
            return
        exc: PDBPError | None = None
        if not msg.ok:
            exc = _rebuild_error(msg.etype, msg.error, self._req_names.get(msg.req))
        self._resolve(msg.req, msg.pid, exc)

    def on_aap(self, src: int, msg: AAPMsg) -> None:
        self._cancelled.discard(msg.req)
        self._resolve(msg.req, msg.pipe, None if msg.ok else PDBPError(msg.error))

    def on_table_ack(self, src: int, msg: TableAckMsg) -> None:
        self._resolve(msg.req, None, None if msg.ok else PDBPError(msg.error))

    def _resolve(self, req: int, result: Any, exc: BaseException | None) -> None:
        fut = self._waiting.get(req)
        if fut is None or fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    # -------------------------------------------------------------- stopping
    def stop_waiting(self, exc: BaseException) -> None:
        """The job stops: no request will be answered any more; every
        pending one fails with ``exc``."""
        self._stopping = True
        self.rows.quiet = True
        self._fail_waiting(exc)

    def mark_closing(self) -> None:
        """The node is closing: updates asked from now on are applied here only."""
        self._closing = True
        self.rows.quiet = True

    def close(self) -> None:
        """The node closed: every pending request fails."""
        self._closing = True
        self.rows.quiet = True
        self._fail_waiting(BrokenResourceError("node closed"))

    def _fail_waiting(self, exc: BaseException) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()


def _announced_rows(rows: list[Any]) -> list[tuple[int, str, int, int | None]]:
    """The rows of a ``proc_names`` announcement: ``(pid, name, ptype, pipe)``."""
    out = []
    for row in rows:
        if not (type(row) in (list, tuple) and len(row) == 4 and type(row[0]) is int and row[0] > 0
                and type(row[1]) is str and type(row[2]) is int and (row[3] is None or type(row[3]) is int)):
            raise ProtocolError(f"a malformed proc_names entry {row!r}")
        out.append((row[0], row[1], row[2], row[3]))
    return out


def _rebuild_error(etype: str, error: str, name: str | None) -> PDBPError:
    """The error a home refused an update with, as the same class and
    message (never wrapped twice)."""
    if etype == "DuplicateProcessError" and name is not None:
        return DuplicateProcessError(name)
    if etype == "UnknownProcessError" and name is not None:
        return UnknownProcessError(name)
    return PDBPError(error or "table update refused")
