"""The GP's own host's side of the names: the rows it told, kept current.

A host tells another the registration rows of its own GPs (an announcement
when it makes a link there, or its answer to a carried first message,
:mod:`aiopdbp.hosts.carry`); from then on it sends that host every update
of those GPs that it applies (``TableMsg`` with ``seq`` :data:`VIA`), in
the order it applies them -- its home's order, since the GP's host is
subscribed to its own GPs' names at their home.  So the told host keeps the
row as a subscriber would, without asking the name's home (a lookup and its
answer, per host and name), and the home keeps fewer subscribers.  The
subscriber's side (which rows it takes, which updates it applies) is
:class:`~aiopdbp.hosts.names.NameService`.
"""

from __future__ import annotations

from typing import Any

from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.tables import PipeBind, PipeRelease, ProcFree, Tables, Update
from aiopdbp.wire.control import TableMsg

__all__ = ["ANNOUNCE_MAX", "VIA", "HostRows"]

#: the most GP rows one announcement carries (a host with more GPs announces
#: these; the receiver asks the homes of the others)
ANNOUNCE_MAX = 256

#: ``TableMsg.seq`` of an update sent by the GP's own host (0: by its name's home)
VIA = 1

_RELAYED = (PipeBind, PipeRelease, ProcFree)


class HostRows:
    """The rows of this host's GPs told to other hosts, and their updates sent after them."""

    def __init__(self, rank: int, tables: Tables, channel: ControlChannel) -> None:
        self.rank = rank
        self.tables = tables
        self._channel = channel
        self._told: dict[int, set[int]] = {}   # own GP pid -> the hosts told its row
        self._holds: dict[int, int] = {}       # own GP pid -> its carried rows on their way
        self._held: dict[int, list[TableMsg]] = {}   # ... and its updates held meanwhile
        #: no updates sent any more (the node is closing, or the job stopping)
        self.quiet = False
        tables.subscribe(self._on_update)

    def rows_for(self, host: int, first: int = 0) -> list[list[Any]]:
        """The rows of the GPs here not told to ``host`` yet, and GP
        ``first``'s in front in any case (told before, it may have been set
        aside there), marked told: their updates go to ``host`` from now on."""
        rows = []
        entries = self.tables.processes_on(self.rank)
        if first:
            entries.sort(key=lambda p: p.pid != first)
        for p in entries[:ANNOUNCE_MAX]:
            told = self._told.setdefault(p.pid, set())
            if host not in told or p.pid == first:
                told.add(host)
                rows.append([p.pid, p.name, int(p.ptype), p.pipe])
        return rows

    def hold(self, pid: int) -> None:
        """GP ``pid``'s row leaves with a carried message, by way of its
        name's home, to a host not known yet: its updates wait (for every
        host) until :meth:`release`, so that none reaches that host before
        the row does."""
        self._holds[pid] = self._holds.get(pid, 0) + 1

    def release(self, pid: int, host: int | None) -> None:
        """The carried row of GP ``pid`` reached ``host`` (None: no host
        took it): its updates go there from now on; those held go out."""
        if host is not None:   # (a free meanwhile is held: it goes there too)
            self._told.setdefault(pid, set()).add(host)
        n = self._holds.get(pid, 0) - 1
        if n > 0:
            self._holds[pid] = n
            return
        self._holds.pop(pid, None)
        for msg in self._held.pop(pid, ()):
            self._send(msg)

    def _on_update(self, op: str, update: Update, result: Any) -> None:
        if not isinstance(update, _RELAYED):
            return
        msg = TableMsg(VIA, op, list(update))
        if update.pid in self._holds:
            self._held.setdefault(update.pid, []).append(msg)
        else:
            self._send(msg)

    def _send(self, msg: TableMsg) -> None:
        pid = msg.args[0]
        hosts = self._told.pop(pid, None) if msg.op == "proc_free" else self._told.get(pid)
        if not hosts or self.quiet:
            return
        for host in sorted(hosts):
            self._channel.send(host, msg)
