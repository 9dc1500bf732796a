"""Who has gone from a sync group, as one member learns it (SPEC section 10).

A member of a :class:`~aiopdbp.sync.member.SyncMember` group learns that a
peer is gone in two ways (the module notes of :mod:`aiopdbp.sync.member`):
the peer says so (a LEAVE or ABORT notice carrying the rounds it completed),
or its companion GP is freed without a word (a ``proc_free`` of the pid this
member talks to, seen in this host's tables).  :class:`Departures` keeps
what was learnt and answers the one question a round asks -- can it still
complete, and if it may yet, until when to wait; :class:`PeerWatch` and the
per-node :class:`Registry` watch the pids.  Nothing here sends or receives.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiopdbp.errors import BarrierError
from aiopdbp.hosts.tables import ProcFree, ProcGone, ProcReg, Update

if TYPE_CHECKING:
    from aiopdbp.runtime.process import GP, GPHost

__all__ = ["Departures", "Gone", "PeerWatch", "Registry", "Watcher", "notice"]

_NOTICE_HEAD = struct.Struct("<q")


def notice(rounds: int, member: str, reason: str) -> bytes:
    """The payload of a LEAVE or ABORT notice: the rounds ``member`` completed, and why."""
    return _NOTICE_HEAD.pack(rounds) + member.encode() + b"\0" + reason.encode()


@dataclass
class Gone:
    """A peer gone from the group."""

    rounds: int | None      # rounds it completed (None: unknown, freed without LEAVE)
    reason: str
    since: float
    rank: int | None = None  # where it lived, when known


class Departures:
    """The peers gone from one member's group, and what that means for a round.

    ``names``: the members' GP names by index; ``prefix()``: the words that
    open this member's errors (its group, round and name); ``rank_of(i)``:
    the host of peer ``i``'s companion when known; ``here``: this host.
    """

    def __init__(self, names: Sequence[str], self_index: int, grace: float, here: int,
                 prefix: Callable[[], str], rank_of: Callable[[int], int | None]) -> None:
        self._names = names
        self._index_of = {n: i for i, n in enumerate(names)}
        self._self_index = self_index
        self._grace = grace
        self._here = here
        self._prefix = prefix
        self._rank_of = rank_of
        self._gone: dict[int, Gone] = {}

    def __bool__(self) -> bool:
        return bool(self._gone)

    def __contains__(self, i: object) -> bool:
        return i in self._gone

    def get(self, i: int) -> Gone | None:
        """What is known of peer ``i``'s departure (None: not gone)."""
        return self._gone.get(i)

    def freed(self, i: int, now: float) -> bool:
        """Peer ``i``'s companion was freed; True when that is news (no
        notice of it came first)."""
        if i in self._gone:
            return False
        self._gone[i] = Gone(None, "its companion was freed without leaving (its GP, task or "
                                   "host ended?)", now)
        return True

    def unregistered(self, i: int, since: float) -> None:
        """Peer ``i``'s companion is not registered here (never contacted)."""
        self._gone.setdefault(i, Gone(None, "not registered", since))

    def on_notice(self, leave: bool, raw: bytes, rank: int | None, now: float) -> None:
        """A LEAVE (``leave``) or ABORT notice arrived, from host ``rank``
        when known; a malformed or foreign one is ignored."""
        if len(raw) < _NOTICE_HEAD.size:
            return
        (rounds,) = _NOTICE_HEAD.unpack_from(raw)
        name, _, reason = raw[_NOTICE_HEAD.size:].decode(errors="replace").partition("\0")
        i = self._index_of.get(name)
        if i is None or i == self._self_index:
            return
        old = self._gone.get(i)
        if old is None or old.rounds is None:
            why = "left the group" if leave else f"failed ({reason})"
            self._gone[i] = Gone(rounds, why, now, rank)

    def error(self, i: int) -> BarrierError:
        """The error of a round that cannot complete because peer ``i`` is gone."""
        g = self._gone[i]
        name = self._names[i]
        if g.rounds is None:
            err = BarrierError(f"{self._prefix()}: member {name!r} is gone ({g.reason})")
        else:
            err = BarrierError(f"{self._prefix()}: member {name!r} {g.reason} (after {g.rounds} round(s))")
        rank = g.rank if g.rank is not None else self._rank_of(i)
        if rank is not None and rank != self._here:
            err.origin_rank = rank   # under aiopdbp.run: a consequence of that rank (aiopdbp.runtime.job)
        return err

    def check(self, pending: Iterable[int], now: float, at_start: bool, rounds: int) -> float | None:
        """Raise if a gone peer makes round ``rounds`` impossible; else return
        the earliest time a grace period of a pending peer runs out (a
        message already in flight from a freed peer may still arrive)."""
        wake: float | None = None
        pend = set(pending)
        for i, g in self._gone.items():
            if g.rounds is not None:
                if g.rounds <= rounds:
                    raise self.error(i)
            elif at_start:
                raise self.error(i)
            elif i in pend:
                until = g.since + self._grace
                if now >= until:
                    raise self.error(i)
                wake = until if wake is None else min(wake, until)
        return wake


# ------------------------------------------------------ freed-name detection
class Watcher(Protocol):
    """What the watches need of a member."""

    @property
    def gp(self) -> GP: ...

    def on_pid_freed(self, i: int) -> None: ...


class Registry:
    """Per node: which sync members watch which pids for ``proc_free``.

    Pids, not names: a name may be freed and registered again (a new GP of
    the same name), and only the incarnation a member actually talks to
    matters.  The table listener is subscribed once per node (``Tables`` has
    no unsubscribe).
    """

    def __init__(self) -> None:
        self.watchers: dict[int, list[tuple[Watcher, int]]] = {}
        #: pids whose host is not known here yet -> the watches that want it
        self.placing: dict[int, list[tuple[PeerWatch, int]]] = {}

    def watch(self, pid: int, member: Watcher, index: int) -> None:
        self.watchers.setdefault(pid, []).append((member, index))

    def place(self, pid: int, watch: PeerWatch, index: int) -> None:
        """Tell ``watch`` GP ``pid``'s host when its registration arrives."""
        self.placing.setdefault(pid, []).append((watch, index))

    def unwatch(self, pid: int, member: Watcher) -> None:
        for table in (self.watchers, self.placing):
            ws: list[Any] | None = table.get(pid)
            if ws is None:
                continue
            ws[:] = [w for w in ws if w[0] is not member and getattr(w[0], "member", None) is not member]
            if not ws:
                del table[pid]

    def on_update(self, op: str, update: Update, result: Any) -> None:
        match update:
            case ProcReg(node=node):
                for watch, index in self.placing.pop(result, ()):
                    watch.placed(index, node)
            case ProcFree(pid=pid) | ProcGone(pid=pid):
                self.placing.pop(pid, None)
                for member, index in self.watchers.pop(pid, ()):
                    member.on_pid_freed(index)


_REGISTRIES: weakref.WeakKeyDictionary[GPHost, Registry] = weakref.WeakKeyDictionary()


def _registry(node: GPHost) -> Registry:
    reg = _REGISTRIES.get(node)
    if reg is None:
        reg = Registry()
        node.tables.subscribe(reg.on_update)
        _REGISTRIES[node] = reg
    return reg


class PeerWatch:
    """One member's side of freed-name detection: the pids it watches for
    ``proc_free`` (through its node's registry), and what it learnt of each
    peer's companion at first contact."""

    def __init__(self, member: Watcher) -> None:
        self.member = member
        self.watched: list[int] = []           # pids watched for proc_free
        self.pid: dict[int, int] = {}          # peer index -> its companion's pid
        self.rank: dict[int, int] = {}         # peer index -> its companion's rank
        self.remote: set[int] = set()          # peers whose companion is on another host

    def watch(self, pid: int, index: int, *, known: bool = False) -> None:
        """Watch ``pid`` for its free (``known``: even if its registration
        has not reached this host yet -- it is on its way from its home)."""
        node = self.member.gp.node
        if known or pid in node.tables.pta:
            _registry(node).watch(pid, self.member, index)
            self.watched.append(pid)

    def watch_peer(self, j: int, pid: int, name: str) -> None:
        """First contact with peer ``j``, whose companion ``name`` is GP
        ``pid``: remember and watch it.  This host learns the companion's
        registration and free from its home (``want``): a peer that only
        ever sent here would otherwise be unknown here."""
        if j not in self.pid:
            self.pid[j] = pid
            node = self.member.gp.node
            node.router.want(name)
            entry = node.tables.pta.get(pid)
            if entry is not None:
                self.placed(j, entry.node)
            else:
                _registry(node).place(pid, self, j)
            self.watch(pid, j, known=True)

    def placed(self, j: int, rank: int) -> None:
        """Peer ``j``'s companion lives on host ``rank``."""
        self.rank[j] = rank
        if rank != self.member.gp.node.rank:
            self.remote.add(j)

    def unwatch(self) -> None:
        reg = _REGISTRIES.get(self.member.gp.node)
        if reg is not None:
            for pid in self.watched:
                reg.unwatch(pid, self.member)
        self.watched.clear()
