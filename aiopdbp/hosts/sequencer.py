"""The replicated tables: initialisation (paper Fig. 6) and ordered updates.

Theory of operation
-------------------
*Initialisation.*  Every host sends its ``HInfoMsg`` to rank 0 (the MNode,
up the tree below); rank 0 orders the node-table updates and answers, down
the tree, with every host's info (with its credit window) and all GP
bindings (``MBInfoMsg``).  Missing hosts
make :class:`~aiopdbp.errors.HandshakeError` name them after the handshake
timeout.

*The tree.*  Rank 0 talks to a few hosts only: the hosts form a binomial
tree rooted at rank 0 (:func:`parent`: rank r's parent is r with its lowest
set bit cleared), and every table message travels along it.  A request goes
up hop by hop (:class:`~aiopdbp.wire.control.RelayMsg` names its origin), an
answer goes down the path to its requester, and an update is forwarded by
each host to its children: rank 0 sends log2(N) messages per update
instead of N, and holds MPI state for log2(N) peers, not for every one.
Order holds hop by hop (one channel per pair is FIFO), and an answer
follows its update down the same path, so the requester has applied the
update when its answer arrives.

*Ordered updates.*  Rank 0 is the sequencer.  A host asks for an update
with the CMP kind that names it -- ``RegMsg`` (register a GP), ``APipeMsg``
(bind its pipe), ``ReleaseMsg`` (release the pipe, or free the GP), or
``TableReqMsg`` for any other update; rank 0 applies it, broadcasts it with a
sequence number (``TableMsg``) to every other host, then answers the
requester (``ARMsg``, ``AAPMsg``, ``TableAckMsg``) -- after the broadcast, on
the same channel, so the requester has applied the update when its
``await`` returns.  A requester that gave up waiting undoes what its request
did with ``CancelMsg``.  Equal ``Tables.digest`` on every host proves the
order is one.

*Bounded waits.*  Rank 0 answers a request as soon as it arrives, so a
request unanswered for ``reply_timeout`` seconds means rank 0 is gone or
no longer talks to this host (it failed it): the wait fails with
:class:`~aiopdbp.errors.BrokenResourceError` instead of lasting forever (a
GP freed while the job closes waits here).

*Stopping.*  When the job stops (:meth:`Sequencer.stop_waiting`) rank 0 may be
gone: every pending request fails, undoing updates (release, free) are
applied here only, and nothing new starts.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from aiopdbp.errors import (
    BrokenResourceError,
    DuplicateProcessError,
    HandshakeError,
    PDBPError,
    ProtocolError,
    RankFailedError,
    UnknownProcessError,
)
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.tables import NodeType, Tables
from aiopdbp.wire.control import (
    AAPMsg,
    APipeMsg,
    ARMsg,
    CancelMsg,
    CtrlMsg,
    HInfoMsg,
    MBInfoMsg,
    RegMsg,
    RelayMsg,
    ReleaseMsg,
    TableAckMsg,
    TableMsg,
    TableReqMsg,
    decode_control,
)

log = logging.getLogger("aiopdbp.hosts.sequencer")

__all__ = ["Sequencer", "children", "next_hop", "parent"]

#: the kinds a RelayMsg may carry: the table messages this module handles
_RELAYED = frozenset({"on_reg", "on_apipe", "on_release", "on_cancel", "on_ar", "on_aap",
                      "on_hinfo", "on_table_req", "on_table_ack"})


def parent(rank: int) -> int:
    """Rank ``rank``'s parent in the hosts' binomial tree (rank 0 is the root)."""
    return rank & (rank - 1)


def children(rank: int, size: int) -> list[int]:
    """The children of ``rank`` in the tree of ``size`` hosts: ``rank`` plus
    each power of two below its lowest set bit (any, for rank 0)."""
    low = rank & -rank if rank else 1 << size.bit_length()
    out, bit = [], 1
    while bit < low and rank | bit < size:
        out.append(rank | bit)
        bit <<= 1
    return out


def next_hop(here: int, dest: int) -> int:
    """The child of ``here`` on the path down to ``dest`` (``here`` an ancestor
    of ``dest``): ``here`` plus the highest bit of ``dest`` it lacks."""
    return here | (1 << ((dest & ~here).bit_length() - 1))


def _ancestor(rank: int, dest: int) -> bool:
    while dest > rank:
        dest = parent(dest)
    return dest == rank


class Sequencer:
    """This host's replica of the tables, kept in rank 0's order."""

    def __init__(self, rank: int, size: int, tables: Tables, channel: ControlChannel, *,
                 gp_window: int, reply_timeout: float = 60.0) -> None:
        self.rank = rank
        self.reply_timeout = reply_timeout
        self.size = size
        self.tables = tables
        self._channel = channel
        self._gp_window = gp_window
        self._reqs = iter(range(1, 1 << 62))
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._cancelled: set[int] = set()
        self._req_names: dict[int, str] = {}   # pending registrations: req -> name
        self._seq = 0                     # last applied (replicas) / assigned (rank 0)
        self._hinfo: dict[int, list[Any]] = {}
        self._windows: dict[int, int] = {}
        self._ready: asyncio.Future[None] | None = None
        self._closing = False
        self._stopping = False   # the job stops: table requests go unanswered

    # ------------------------------------------------------- initialisation
    def prepare(self) -> None:
        """Get ready for the other hosts' ``HInfoMsg`` (before the transport starts)."""
        self._ready = asyncio.get_running_loop().create_future()

    async def handshake(self, timeout: float) -> None:
        """Send this host's info and wait until every host joined (Fig. 6).

        Cancellation: nothing to undo; the node closes what was started.
        """
        if self._ready is None:
            self.prepare()
        assert self._ready is not None
        me = [self.rank, socket.gethostname(), _host_ip(),
              int(NodeType.MASTER if self.rank == 0 else NodeType.COMPUTE), self._gp_window]
        if self.rank == 0:
            self.on_hinfo(0, HInfoMsg([me], self._gp_window))
        else:
            self._up(HInfoMsg([me], self._gp_window))
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            missing = sorted(set(range(self.size)) - set(self._hinfo)) if self.rank == 0 else [0]
            raise HandshakeError(
                f"host {self.rank}: initialisation did not complete within {timeout} s "
                f"(no answer from host(s) {missing})") from None

    def window(self, host: int) -> int:
        """The credit window ``host`` gives each sender per GP (from the handshake)."""
        return self._windows.get(host, self._gp_window)

    def on_hinfo(self, src: int, msg: HInfoMsg) -> None:
        if self.rank == 0 and len(msg.hosts) == 1 and src not in self._hinfo:
            entry = list(msg.hosts[0])
            self._windows[src] = int(entry[4]) if len(entry) > 4 else msg.gp_window
            self._hinfo[src] = entry[:4]
            if len(self._hinfo) == self.size:
                # one node_add per host in rank order, each a sequence number;
                # ALL-HOSTInfo carries them all, and every replica applies them
                # from it in the same order (not one TableMsg per host)
                for h in range(self.size):
                    self.tables.apply("node_add", list(self._hinfo[h]))
                    self._seq += 1
                hosts = [self._hinfo[h] + [self._windows[h]] for h in range(self.size)]
                self._to_children(HInfoMsg(hosts, self._gp_window))
                self._to_children(MBInfoMsg(self._bindings()))
                self._set_ready()
        elif self.rank != 0 and src == parent(self.rank):
            self._to_children(msg)
            self._windows = {int(e[0]): int(e[4]) for e in msg.hosts if len(e) > 4}
            for entry in msg.hosts:
                self._seq += 1
                try:
                    self.tables.apply("node_add", list(entry[:4]))
                except PDBPError as exc:  # cannot happen if every host applies the same order
                    log.critical("replica diverged applying node_add %s: %s", entry[:4], exc)

    def on_mbinfo(self, src: int, msg: MBInfoMsg) -> None:
        if src == parent(self.rank):
            self._to_children(msg)
        self._set_ready()

    def _bindings(self) -> list[list[Any]]:
        return [[p.pid, p.name, int(p.ptype), p.node, p.pipe if p.pipe is not None else -1]
                for p in self.tables.pta.values()]

    def _set_ready(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    # --------------------------------------------------- replicated tables
    async def commit(self, op: str, args: tuple[Any, ...]) -> Any:
        """Apply a table update in the cluster-wide order; return its result.

        Cancellation: the update may still be applied (its request is on the
        way to rank 0); a registration or binding it made is then undone.
        No answer within ``reply_timeout`` raises
        :class:`~aiopdbp.errors.BrokenResourceError`.
        """
        if self.rank == 0:
            return self._sequence(op, list(args))
        if self._stopping:
            # The job is stopping (failure, interrupt): rank 0 may be gone.
            # Undoing (release, free) is applied here only; nothing new starts.
            if op in ("pipe_release", "proc_free"):
                self.commit_nowait(op, args)
                return None
            raise RankFailedError(f"the job is stopping: {op} refused", self.rank)
        req = next(self._reqs)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[req] = fut
        if op == "proc_reg":
            name, ptype, node, *rest = args
            pipe = rest[0] if rest and rest[0] is not None else -1
            msg: CtrlMsg = RegMsg(req, name, int(ptype), node, pipe)
            self._req_names[req] = name
        elif op == "pipe_bind":
            msg = APipeMsg(req, args[0], args[1])
        elif op in ("pipe_release", "proc_free"):
            msg = ReleaseMsg(req, args[0], op == "proc_free")
        else:
            msg = TableReqMsg(req, op, list(args))
        self._up(msg, lambda exc: self._resolve(
            req, None, BrokenResourceError(f"host 0 is unreachable: {exc}")))
        try:
            async with asyncio.timeout(self.reply_timeout):
                return await fut
        except TimeoutError:
            self._cancelled.add(req)  # undo it if rank 0 does it late
            raise BrokenResourceError(
                f"host 0 did not answer {op} within {self.reply_timeout} s") from None
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():
                self._cancelled.add(req)  # undo it if rank 0 does it anyway
            raise
        finally:
            self._waiting.pop(req, None)
            self._req_names.pop(req, None)

    def commit_nowait(self, op: str, args: tuple[Any, ...]) -> None:
        """Ask for a table update without waiting for it."""
        if self._closing or self._stopping:
            try:  # tearing down: the other hosts are closing too
                self.tables.apply(op, args)
            except PDBPError:
                pass
            return
        if self.rank == 0:
            try:
                self._sequence(op, list(args))
            except PDBPError as exc:
                log.debug("table update %s%s refused: %s", op, args, exc)
            return
        self._up(TableReqMsg(0, op, list(args)))

    def _sequence(self, op: str, args: list[Any]) -> Any:
        """Rank 0: apply one update and broadcast it (raises if refused)."""
        result = self.tables.apply(op, args)
        self._seq += 1
        self._to_children(TableMsg(self._seq, op, args))
        return result

    # ------------------------------------------------------------- the tree
    def _to_children(self, msg: CtrlMsg) -> None:
        for h in children(self.rank, self.size):
            self._channel.send(h, msg)

    def _up(self, msg: CtrlMsg, on_fail: Callable[[BaseException], None] | None = None) -> None:
        """A request (or this host's info) to rank 0, through this host's parent."""
        up = parent(self.rank)
        self._channel.send(up, msg if up == 0 else RelayMsg(self.rank, 0, msg.encode()), on_fail)

    def _down(self, dest: int, msg: CtrlMsg) -> None:
        """Rank 0's answer to host ``dest``, down the path its updates take."""
        hop = next_hop(self.rank, dest)
        self._channel.send(hop, msg if hop == dest else RelayMsg(0, dest, msg.encode()))

    def on_relay(self, src: int, msg: RelayMsg) -> None:
        """A table message on its way: handled here when it is for this host,
        else passed on (up to the parent, or down towards its destination);
        one that cannot be on its way here is a ProtocolError."""
        dest = msg.dest
        if dest == self.rank:
            inner = decode_control(msg.frame)
            # up to rank 0 from another host; down only from rank 0
            origin_ok = 0 < msg.origin < self.size if self.rank == 0 else msg.origin == 0
            if inner.HANDLER not in _RELAYED or not origin_ok:
                raise ProtocolError(f"a relayed {type(inner).__name__} from host {msg.origin}")
            getattr(self, inner.HANDLER)(msg.origin, inner)
        elif dest == 0:
            self._channel.send(parent(self.rank), msg)
        elif 0 < dest < self.size and _ancestor(self.rank, dest) and src == parent(self.rank):
            self._channel.send(next_hop(self.rank, dest), msg)
        else:
            raise ProtocolError(f"a relay for host {dest} reached host {self.rank}")

    def _answer(self, op: str, args: list[Any]) -> tuple[Any, PDBPError | None]:
        try:
            return self._sequence(op, args), None
        except PDBPError as exc:
            return None, exc

    # rank 0: requests
    def on_reg(self, src: int, msg: RegMsg) -> None:
        args: list[Any] = [msg.name, msg.ptype, msg.node] + ([msg.pipe] if msg.pipe >= 0 else [])
        pid, exc = self._answer("proc_reg", args)
        self._down(src, ARMsg(msg.req, exc is None, pid or 0, "" if exc is None else str(exc),
                                      "" if exc is None else type(exc).__name__))

    def on_apipe(self, src: int, msg: APipeMsg) -> None:
        _, exc = self._answer("pipe_bind", [msg.pid, msg.pipe])
        self._down(src, AAPMsg(msg.req, exc is None, msg.pipe, "" if exc is None else str(exc)))

    def on_release(self, src: int, msg: ReleaseMsg) -> None:
        _, exc = self._answer("proc_free" if msg.free else "pipe_release", [msg.pid])
        self._down(src, AAPMsg(msg.req, exc is None, -1, "" if exc is None else str(exc)))

    def on_table_req(self, src: int, msg: TableReqMsg) -> None:
        _, exc = self._answer(msg.op, msg.args)
        if msg.req:
            self._down(src, TableAckMsg(msg.req, exc is None, "" if exc is None else str(exc)))

    def on_cancel(self, src: int, msg: CancelMsg) -> None:
        entry = self.tables.pta.get(msg.pid)
        if entry is not None and entry.node == src:
            self._answer("proc_free", [msg.pid])

    # replicas: updates and answers
    def on_table(self, src: int, msg: TableMsg) -> None:
        self._to_children(msg)
        if msg.seq != self._seq + 1:
            log.critical("table update %d out of order (applied %d)", msg.seq, self._seq)
        self._seq = msg.seq
        try:
            self.tables.apply(msg.op, msg.args)
        except PDBPError as exc:
            if self._closing or self._stopping:
                # tearing down, this host applied its own releases alone
                log.debug("table update %s after local teardown: %s", msg, exc)
            else:  # cannot happen if every host applies the same order
                log.critical("replica diverged applying %s: %s", msg, exc)

    def on_ar(self, src: int, msg: ARMsg) -> None:
        if msg.req in self._cancelled:
            self._cancelled.discard(msg.req)
            if msg.ok:
                self._up(CancelMsg(msg.req, msg.pid))
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

    # ------------------------------------------------------------- stopping
    def stop_waiting(self, exc: BaseException) -> None:
        """The job stops: no table request will be answered any more; every
        pending one fails with ``exc``."""
        self._stopping = True
        self._fail_waiting(exc)

    def mark_closing(self) -> None:
        """The node is closing: updates asked from now on are applied here only."""
        self._closing = True

    def close(self) -> None:
        """The node closed: every pending request fails."""
        self._closing = True
        self._fail_waiting(BrokenResourceError("node closed"))

    def _fail_waiting(self, exc: BaseException) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()


def _rebuild_error(etype: str, error: str, name: str | None) -> PDBPError:
    """The error rank 0 refused a table update with, as the same class and
    message (never wrapped twice)."""
    if etype == "DuplicateProcessError" and name is not None:
        return DuplicateProcessError(name)
    if etype == "UnknownProcessError" and name is not None:
        return UnknownProcessError(name)
    return PDBPError(error or "table update refused")


def _host_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
