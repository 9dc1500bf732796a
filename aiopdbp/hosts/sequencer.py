"""The node table: initialisation (paper Fig. 6) along the hosts' tree.

Theory of operation
-------------------
*Initialisation.*  Every host's ``HInfoMsg`` reaches rank 0 (the MNode,
up the tree below); rank 0 orders the node-table updates and answers, down
the tree, with every host's info (with its credit window) and all GP
bindings (``MBInfoMsg``).  Missing hosts
make :class:`~aiopdbp.errors.HandshakeError` name them after the handshake
timeout (rank 0 names every host of the subtrees that did not report).

*The tree.*  Rank 0 talks to a few hosts only: the hosts form a binomial
tree rooted at rank 0 (:func:`parent`: rank r's parent is r with its lowest
set bit cleared), and the start-up messages travel along it.  The hosts'
info is gathered up: a host waits for one ``HInfoMsg`` from each child (the
info of the child's whole subtree) and sends its parent one with its own
added, and the answer is forwarded by each host to its children: every host
sends one message up, and rank 0 receives and sends log2(N) instead of N,
and holds MPI state for log2(N) peers, not for every one.
(:class:`~aiopdbp.wire.control.RelayMsg`, a frame passed hop by hop along
the tree, stays in the protocol; start-up no longer sends it.)

*Names* are not sequenced here: each GP name has a home host that keeps it
(:mod:`aiopdbp.hosts.names`, :attr:`Sequencer.names`), so a registration
never reaches rank 0 unless rank 0 is its name's home.  :meth:`commit` and
the stopping calls hand over to it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from aiopdbp.errors import BrokenResourceError, HandshakeError, PDBPError, ProtocolError
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.carry import Carrier, DeliverFn
from aiopdbp.hosts.names import NameService
from aiopdbp.hosts.tables import NodeType, Tables
from aiopdbp.wire.control import CtrlMsg, HInfoMsg, MBInfoMsg, RelayMsg, decode_control

log = logging.getLogger("aiopdbp.hosts.sequencer")

__all__ = ["Sequencer", "children", "next_hop", "parent"]

#: the kinds a RelayMsg may carry: a host's info, up to rank 0
_RELAYED = frozenset({"on_hinfo"})


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
                 gp_window: int, reply_timeout: float = 60.0, deliver: DeliverFn | None = None) -> None:
        self.rank = rank
        self.reply_timeout = reply_timeout
        self.size = size
        self.tables = tables
        self._channel = channel
        self._gp_window = gp_window
        #: the GP names: homed by hash, not sequenced here (aiopdbp.hosts.names)
        self.names = NameService(rank, size, tables, channel, reply_timeout=reply_timeout)
        #: first messages carried with their name's lookup (aiopdbp.hosts.carry)
        self.carrier = Carrier(rank, size, self.names, channel, deliver=deliver)
        self._hinfo: dict[int, list[Any]] = {}    # host -> its info, of this host's subtree
        self._kids = children(rank, size)
        self._reported: set[int] = set()          # the children whose subtree's info came
        self._windows: dict[int, int] = {}
        self._ready: asyncio.Future[None] | None = None

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
        self._gather([me])
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
        if self.rank != 0 and src == parent(self.rank):   # ALL-HOSTInfo, down the tree
            self._to_children(msg)
            self._windows = {int(e[0]): int(e[4]) for e in msg.hosts if len(e) > 4}
            try:
                self.tables.apply("nodes_add", (msg.hosts,))
            except (PDBPError, IndexError, TypeError) as exc:   # rank 0 sent a malformed table
                raise ProtocolError(f"a malformed host table: {exc}") from None
        elif src in self._kids and src not in self._reported:   # a child's subtree, up
            for entry in msg.hosts:
                nid = entry[0] if type(entry) is list and len(entry) >= 4 else None
                if type(nid) is not int or not _ancestor(src, nid) or nid in self._hinfo:
                    raise ProtocolError(f"host {src} reported {entry!r}: not a host of its subtree")
            self._reported.add(src)
            self._gather(msg.hosts)

    def _gather(self, entries: list[list[Any]]) -> None:
        """Add hosts' info to this subtree's; once every child and this host
        are in, send it all up in one message (rank 0: answer every host)."""
        for entry in entries:
            self._hinfo[int(entry[0])] = list(entry)
        if len(self._reported) < len(self._kids) or self.rank not in self._hinfo:
            return
        if self.rank != 0:
            self._channel.send(parent(self.rank),
                               HInfoMsg([self._hinfo[h] for h in sorted(self._hinfo)], self._gp_window))
            return
        for h, entry in self._hinfo.items():
            self._windows[h] = int(entry[4]) if len(entry) > 4 else self._gp_window
        # every host's row in rank order, in one update; ALL-HOSTInfo carries
        # them all, and every host applies them from it (not one TableMsg per host)
        rows = [self._hinfo[h][:4] for h in range(self.size)]
        self.tables.apply("nodes_add", (rows,))
        hosts = [rows[h] + [self._windows[h]] for h in range(self.size)]
        self._to_children(HInfoMsg(hosts, self._gp_window))
        self._to_children(MBInfoMsg(self._bindings()))
        self._set_ready()

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

    # ------------------------------------------------------------------ names
    async def commit(self, op: str, args: tuple[Any, ...]) -> Any:
        """Apply a GP's table update through its name's home (:mod:`aiopdbp.hosts.names`).

        Cancellation: see :meth:`aiopdbp.hosts.names.NameService.commit`.
        """
        return await self.names.commit(op, args)

    def commit_nowait(self, op: str, args: tuple[Any, ...]) -> None:
        """Ask for a GP's table update without waiting for it."""
        self.names.commit_nowait(op, args)

    # ------------------------------------------------------------- the tree
    def _to_children(self, msg: CtrlMsg) -> None:
        for h in children(self.rank, self.size):
            self._channel.send(h, msg)

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

    # ------------------------------------------------------------- stopping
    def stop_waiting(self, exc: BaseException) -> None:
        """The job stops: no table request will be answered any more; every
        pending one fails with ``exc``."""
        self.names.stop_waiting(exc)
        self.carrier.fail(exc)

    def mark_closing(self) -> None:
        """The node is closing: updates asked from now on are applied here only."""
        self.names.mark_closing()

    def close(self) -> None:
        """The node closed: every pending request fails."""
        self.names.close()
        self.carrier.fail(BrokenResourceError("node closed"))


def _host_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
