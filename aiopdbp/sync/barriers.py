"""Synchronous computations: barriers and local synchronisation among GPs (SPEC section 10).

``Barrier`` makes a named group of GPs -- on any hosts -- wait for each other::

    bar = Barrier(gp, "workers", ["w0", "w1", "w2"], algorithm="tree", timeout=30)
    async with bar:
        for it in range(100):
            ...                       # compute
            await bar.wait()          # nobody starts iteration it+1 before all finished it
            delta = await bar.allreduce(local_delta, "max")

``Neighbours`` is local synchronisation: a GP exchanges data with its named
neighbours only (halo exchange before each Jacobi iteration), no global barrier::

    nb = Neighbours(gp, "heat", ["strip-2", "strip-4"])
    halos = await nb.exchange({"strip-2": top_row, "strip-4": bottom_row})
"""

# Theory of operation
# -------------------
# *Companions.*  Synchronisation traffic must never mix with a GP's own
# messages, so every member gets a companion GP of type PType.COMM, registered
# on the member's host on first use (``open``) and freed on ``aclose``:
# ``f"{group}/{member}#sync"`` for a Barrier, ``f"{group}/{member}#nbr"`` for
# Neighbours.  Companions talk to companions; the member's own inbox is never
# touched.
#
# *Tags.*  Every message is a command CDU with no payload (a reduction value
# or halo data where there is one); its 32-bit command code carries the tag:
#
#     op u3 | step u6 | round mod 128 u7 | sender index u16
#
# A receiver that needs (op, step, round, sender) takes it from its stash or
# reads its companion's pipe, stashing everything else: a message of the next
# round that overtakes the current one waits there, never mixes.  Rounds of
# two members differ by at most one while a message is in flight (nobody
# completes round r+1 before everybody arrived at it), so ``round mod 128``
# is unambiguous.  Neighbours identify the sender by its companion's pid
# (resolved before the first exchange) instead of an index.
#
# *Algorithms* (members indexed 0..n-1 in the given order, L = ceil(log2 n)):
#
# * counter: everybody sends ARRIVE to member 0 (step 0), which releases
#   everybody (step 1): 2(n-1) messages, all to or from member 0, 2 steps.
# * tree: binomial tree, any n.  Arrival at level k (step k): member i with
#   lowest set bit 2^k sends to i - 2^k after hearing from its children
#   i + 2^j (j < k, i + 2^j < n); departure retraces it (step 2L-1-k).
#   2(n-1) messages in 2L steps.
# * dissemination: at step k, i sends to (i + 2^k) mod n and waits for
#   (i - 2^k) mod n: n*L messages in L steps, every member equally loaded.
# * butterfly: at step k, i exchanges with i XOR 2^k (n a power of two):
#   n*L messages in L steps.
#
# *Failure.*  A member that closes (``aclose``) broadcasts LEAVE carrying the
# number of rounds it completed, R; one that fails (timeout, cancellation,
# peer lost) broadcasts ABORT with the round it failed in, R.  Every member
# then fails any round >= R at once (rounds < R are still completed: the
# leaver's part of them was already sent).  A member whose own GP is freed
# closes its barrier by itself (LEAVE).  A peer companion freed without a
# LEAVE (its host closed) is seen as a ``proc_free`` table update of the pid
# this member talks to (pids, not names: names may be registered again): a
# wait blocked on a message from that member fails after ``grace`` seconds (a
# message already in flight may still arrive), and the next round fails at
# once.  Whoever fails broadcasts ABORT, so a failure spreads to the whole
# group instead of leaving anyone waiting.  A timeout bounds every wait; with
# ``timeout=None`` only a member that is alive but never arrives can keep the
# others waiting, as with ``MPI_Barrier``.  A broken barrier stays broken:
# close it and create a new one.
#
# *Closing.*  A CDU that reaches a host while the destination GP's pipe is
# released but its name not yet freed is held by that host's receive path
# for up to ``RemoteConfig.bind_timeout`` (node.py ``_deliver_local``), which
# stalls all traffic from the sending host.  So a closing member sends LEAVE
# only to peers that have not left yet, and keeps its companion until every
# peer has left or been freed (at most ``linger`` seconds): then nobody sends
# to it any more when it frees it.  A member the program does not close is
# closed by its GP when the GP is freed (``GP.own``), before the GP's own
# ``proc_free``, so the LEAVE goes out while everybody can still hear it.
#
# *Names.*  Group names are cluster-wide: reuse one only after every member
# closed its previous barrier of that name (companion names must be free).

from __future__ import annotations

import asyncio
import struct
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Self

import numpy as np

from aiopdbp.wire.codec import Kind
from aiopdbp.errors import BarrierError, ClosedResourceError, NoPipeError, PDBPError, WouldBlock
from aiopdbp.runtime.process import GP, Message
from aiopdbp.streams.receiver import IncomingStream
from aiopdbp.hosts.tables import PType

if TYPE_CHECKING:
    from aiopdbp.runtime.process import GPHost

__all__ = [
    "ALGORITHMS", "Barrier", "BarrierStats", "BarrierSummary", "BarrierTimeoutError",
    "Neighbours", "NeighbourStats", "aggregate_stats", "messages_for", "steps_for",
]

Algorithm = Literal["counter", "tree", "dissemination", "butterfly"]
ReduceOp = Literal["sum", "max", "min"]

#: the selectable barrier algorithms
ALGORITHMS: Final[tuple[str, ...]] = ("counter", "tree", "dissemination", "butterfly")

_OP_ARRIVE: Final = 1
_OP_RELEASE: Final = 2
_OP_EXCHANGE: Final = 3
_OP_HALO: Final = 4
_OP_LEAVE: Final = 5
_OP_ABORT: Final = 6
_OP_POKE: Final = 7
_OP_NAMES: Final = {1: "ARRIVE", 2: "RELEASE", 3: "EXCHANGE", 4: "HALO"}

_ROUND_MASK: Final = 0x7F
_MAX_MEMBERS: Final = 0xFFFF
_UFUNCS: Final[dict[str, Any]] = {"sum": np.add, "max": np.maximum, "min": np.minimum}
_GONE_HEAD = struct.Struct("<q")


class BarrierTimeoutError(BarrierError, TimeoutError):
    """A barrier round or a neighbour exchange did not complete within its
    timeout.  Both a :class:`~aiopdbp.errors.BarrierError` and a ``TimeoutError``."""


def _com(op: int, step: int, rnd: int, sender: int) -> int:
    return (op << 29) | (step << 23) | ((rnd & _ROUND_MASK) << 16) | sender


def _ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


def steps_for(algorithm: str, n: int) -> int:
    """Communication steps one barrier round takes (the notes' "rounds")."""
    if n <= 1:
        return 0
    if algorithm == "counter":
        return 2
    if algorithm == "tree":
        return 2 * _ceil_log2(n)
    return _ceil_log2(n)


def messages_for(algorithm: str, n: int) -> int:
    """Messages one barrier round sends in total, over all members."""
    if n <= 1:
        return 0
    if algorithm in ("counter", "tree"):
        return 2 * (n - 1)
    return n * _ceil_log2(n)


# ----------------------------------------------------------------- statistics
@dataclass
class BarrierStats:
    """What one member of a :class:`Barrier` did (cumulative over rounds).

    ``steps`` is the number of communication steps one round of the algorithm
    takes for this group size (2 for counter, 2*ceil(log2 n) for tree,
    ceil(log2 n) for dissemination/butterfly; 0 when n == 1) -- the "rounds"
    of the lecture notes; ``rounds`` is how many barrier rounds (``wait``
    calls) this member has passed.  ``sent``/``received`` count barrier
    messages (LEAVE/ABORT control traffic is not counted), ``step_sent[s]``
    the messages this member sent in step ``s``, summed over rounds, and
    ``last_round_sent[s]`` the same for its last completed round only;
    ``sent_to``/``received_from`` count them by peer member name.
    """

    algorithm: str
    members: int
    member: str
    steps: int
    rounds: int = 0
    sent: int = 0
    received: int = 0
    step_sent: list[int] = field(default_factory=list)
    last_round_sent: list[int] = field(default_factory=list)
    sent_to: Counter[str] = field(default_factory=Counter)
    received_from: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class BarrierSummary:
    """:func:`aggregate_stats` of every member of one group.

    ``messages`` is the total sent by all members over ``rounds`` rounds;
    ``messages_per_round`` = messages / rounds; ``step_messages[s]`` is the
    messages sent in step ``s`` per round, over all members; ``steps_used``
    the number of steps in which any message was sent; ``max_load`` the most
    messages one member sent plus received per round (the hot spot: 2(n-1)
    at the counter's master, 2*ceil(log2 n) for dissemination);
    ``hot_member`` that member.
    """

    algorithm: str
    members: int
    rounds: int
    steps: int
    messages: int
    messages_per_round: float
    step_messages: tuple[float, ...]
    steps_used: int
    max_load: float
    hot_member: str


def aggregate_stats(stats: Iterable[BarrierStats]) -> BarrierSummary:
    """Sum the statistics of all members of one barrier group.

    Every member must have passed the same number of rounds (it is the case
    after the last ``wait`` returned everywhere).
    """
    items = list(stats)
    if not items:
        raise ValueError("no statistics to aggregate")
    rounds = {s.rounds for s in items}
    if len(rounds) != 1:
        raise ValueError(f"members passed different numbers of rounds: {sorted(rounds)}")
    r = rounds.pop()
    algs = {s.algorithm for s in items}
    if len(algs) != 1:
        raise ValueError(f"statistics of different algorithms: {sorted(algs)}")
    first = items[0]
    per = max(r, 1)
    steps = [0] * first.steps
    for s in items:
        for k, c in enumerate(s.step_sent):
            steps[k] += c
    total = sum(s.sent for s in items)
    hot = max(items, key=lambda s: s.sent + s.received)
    return BarrierSummary(
        algorithm=first.algorithm, members=first.members, rounds=r, steps=first.steps,
        messages=total, messages_per_round=total / per,
        step_messages=tuple(c / per for c in steps), steps_used=sum(1 for c in steps if c),
        max_load=(hot.sent + hot.received) / per, hot_member=hot.member)


@dataclass
class NeighbourStats:
    """What one member of a :class:`Neighbours` group did: ``exchanges``
    completed, halo messages ``sent`` and ``received`` (cumulative)."""

    member: str
    neighbours: tuple[str, ...]
    exchanges: int = 0
    sent: int = 0
    received: int = 0


# ------------------------------------------------------ freed-name detection
class _Registry:
    """Per node: which sync members watch which pids for ``proc_free``.

    Pids, not names: a name may be freed and registered again (a new GP of
    the same name), and only the incarnation a member actually talks to
    matters.  The table listener is subscribed once per node (``Tables`` has
    no unsubscribe).
    """

    def __init__(self) -> None:
        self.watchers: dict[int, list[tuple[_SyncMember, int]]] = {}

    def watch(self, pid: int, member: _SyncMember, index: int) -> None:
        self.watchers.setdefault(pid, []).append((member, index))

    def unwatch(self, pid: int, member: _SyncMember) -> None:
        ws = self.watchers.get(pid)
        if ws is None:
            return
        ws[:] = [w for w in ws if w[0] is not member]
        if not ws:
            del self.watchers[pid]

    def on_update(self, op: str, args: tuple[Any, ...], result: Any) -> None:
        if op == "proc_free":
            for member, index in self.watchers.pop(args[0], ()):
                member.on_pid_freed(index)


_REGISTRIES: weakref.WeakKeyDictionary[GPHost, _Registry] = weakref.WeakKeyDictionary()


def _registry(node: GPHost) -> _Registry:
    reg = _REGISTRIES.get(node)
    if reg is None:
        reg = _Registry()
        node.tables.subscribe(reg.on_update)
        _REGISTRIES[node] = reg
    return reg


@dataclass
class _Gone:
    rounds: int | None      # rounds it completed (None: unknown, freed without LEAVE)
    reason: str
    since: float
    rank: int | None = None  # where it lived, when known


_UNSET: Any = object()


def _retrieve(task: asyncio.Task[None]) -> None:
    """An autoclose nobody awaits: its error (the node closed meanwhile) is
    cleanup noise, never "Task exception was never retrieved"."""
    if not task.cancelled():
        task.exception()
_OWN: Final = -2     # watch index of a member's own GP
_SETTLE: Final = 0.02  # s a closing member still listens after seeing a peer freed


# ------------------------------------------------------------ common machinery
class _SyncMember:
    """Companion management, tagged send/receive, stash, failure detection."""

    _suffix = "#sync"
    _what = "barrier"

    def __init__(self, gp: GP, group: str, peers: Sequence[str], self_index: int,
                 timeout: float | None, grace: float, linger: float) -> None:
        if not isinstance(group, str) or not group:
            raise ValueError("a group name is a non-empty str")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be > 0 or None")
        if grace < 0 or linger < 0:
            raise ValueError("grace and linger must be >= 0")
        self.gp = gp
        self.group = group
        self.timeout = timeout
        self.grace = grace
        self.linger = linger
        self._names = list(peers)               # index -> member GP name
        self._index_of = {n: i for i, n in enumerate(self._names)}
        self._self_index = self_index           # -1 when self is not in _names
        self._comp_names = [self.companion_of(n) for n in self._names]
        self._comp: GP | None = None
        self._opened = False
        self._closed = False
        self._busy = False
        self._broken: BarrierError | None = None
        self._round = 0
        self._stash: dict[tuple[int, int, int, int], Any] = {}
        self._gone: dict[int, _Gone] = {}
        self._ready: set[int] = set()           # peers whose pipe we have seen bound
        self._watched: list[int] = []           # pids watched for proc_free
        self._peer_pid: dict[int, int] = {}     # peer index -> its companion's pid
        self._peer_rank: dict[int, int] = {}    # peer index -> its companion's rank
        self._remote_peers: set[int] = set()    # peers whose companion is on another host
        self._autoclose: asyncio.Task[None] | None = None

    # -- naming ---------------------------------------------------------------
    @property
    def member(self) -> str:
        """This member's GP name."""
        return self.gp.name

    def companion_of(self, member: str) -> str:
        """The companion GP name of ``member`` in this group."""
        return f"{self.group}/{member}{self._suffix}"

    @property
    def companion(self) -> GP | None:
        """This member's companion GP (``None`` before ``open`` / after ``aclose``)."""
        return self._comp

    @property
    def round(self) -> int:
        """Rounds (barrier passages or exchanges) completed by this member."""
        return self._round

    @property
    def broken(self) -> bool:
        """True once a round failed: every later round raises ``BarrierError``."""
        return self._broken is not None

    def _peer_indices(self) -> range:
        return range(len(self._names))

    def _prefix(self) -> str:
        return f"{self._what} {self.group!r} round {self._round} at {self.member!r}"

    # -- lifecycle ------------------------------------------------------------
    async def open(self) -> None:
        """Register this member's companion GP on its host (idempotent; the
        first round does it when not done before).

        Cancellation: a cancelled open leaves no companion registered, or one
        that :meth:`aclose` frees.
        """
        if self._closed:
            raise ClosedResourceError(f"{self._what} {self.group!r} at {self.member!r} was closed")
        if self._opened:
            return
        node = self.gp.node
        peers = [i for i in self._peer_indices() if i != self._self_index]
        if not peers:
            self._opened = True
            return
        self._watch(self.gp.pid, _OWN)   # our GP freed -> leave the group
        try:
            comp = await node.register(self.companion_of(self.member), PType.COMM)
            try:
                await comp.apply_pipe()
            except BaseException:
                await comp.free()
                raise
        except BaseException:
            self._unwatch()
            raise
        self._comp = comp
        self._opened = True
        self.gp.own(self)   # closed when its GP is freed, if the program did not

    def _watch(self, pid: int, index: int) -> None:
        if pid in self.gp.node.tables.pta:
            _registry(self.gp.node).watch(pid, self, index)
            self._watched.append(pid)

    def _watch_peer(self, j: int, pid: int) -> None:
        """First contact with peer ``j``: remember and watch its companion's pid."""
        if j not in self._peer_pid:
            self._peer_pid[j] = pid
            entry = self.gp.node.tables.pta.get(pid)
            if entry is not None:
                self._peer_rank[j] = entry.node
            if entry is not None and entry.node != self.gp.node.rank:
                self._remote_peers.add(j)
            self._watch(pid, j)

    def _unwatch(self) -> None:
        reg = _REGISTRIES.get(self.gp.node)
        if reg is not None:
            for pid in self._watched:
                reg.unwatch(pid, self)
        self._watched.clear()

    async def aclose(self) -> None:
        """Leave the group: tell the other members (LEAVE: their rounds from
        the next one on fail at once) and free the companion.  Idempotent.

        The companion is kept until every peer has left or been freed, at
        most ``linger`` seconds (see the module notes): close the members of
        one group concurrently (``asyncio.gather``), not one after another
        from one task, or each close waits ``linger``.

        Cancellation: LEAVE is sent before the first suspension; a cancelled
        close may leave the companion's name registered until its node closes.
        """
        if self._closed:
            task = self._autoclose
            if task is not None and task is not asyncio.current_task() and not task.done():
                await asyncio.shield(task)
            return
        self._closed = True
        self.gp.disown(self)
        comp = self._comp
        try:
            if comp is not None:
                try:
                    self._drain_nowait(comp)     # learn who has left already
                except BarrierError:
                    pass
                self._broadcast(comp, _OP_LEAVE, "left the group")
                if not self._busy:
                    await self._linger(comp)
        finally:
            self._unwatch()
            self._comp = None
            if comp is not None:
                await comp.free()

    async def _linger(self, comp: GP) -> None:
        """Before freeing the companion, wait (at most ``linger`` s) until
        every peer has left (its LEAVE arrived) or been freed, so that
        nothing more is sent to this companion.  A member that closes skips
        the peers whose LEAVE it has seen; so the last to close frees at
        once and the others follow as they see it freed.  (A CDU that reaches
        a host while the companion's pipe is released but its name not yet
        freed holds up that host's receive path: see the module notes.)"""
        loop = asyncio.get_running_loop()
        end = loop.time() + self.linger
        peers = [i for i in self._peer_indices() if i != self._self_index]
        by_name = comp.node.tables.by_name
        for j in peers:                       # watch the peers never contacted, too
            if j not in self._peer_pid:
                pid = by_name.get(self._comp_names[j])
                if pid is None:
                    self._gone.setdefault(j, _Gone(None, "not registered", end - self.linger - 1))
                else:
                    self._watch_peer(j, pid)
        self._busy = True
        try:
            while True:
                now = loop.time()
                # a peer freed just now may still have a LEAVE in flight: settle briefly
                waiting = [j for j in peers if j not in self._gone or (
                    self._gone[j].rounds is None and j in self._remote_peers
                    and now - self._gone[j].since < _SETTLE)]
                rest = end - now
                if not waiting or rest <= 0:
                    return
                try:
                    item = await comp.recv(min(rest, _SETTLE) if all(
                        j in self._gone for j in waiting) else rest)
                except TimeoutError:
                    continue
                except (ClosedResourceError, NoPipeError):
                    return
                try:
                    self._accept(item)
                except BarrierError:
                    pass
        finally:
            self._busy = False

    async def __aenter__(self) -> Self:
        """``async with``: :meth:`open` on entry.

        Cancellation: as for :meth:`open`.
        """
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """``async with``: :meth:`aclose` on exit.

        Cancellation: as for :meth:`aclose`.
        """
        await self.aclose()

    # -- failure bookkeeping --------------------------------------------------
    def on_pid_freed(self, i: int) -> None:
        """Table listener: a watched pid was freed (peer ``i``'s companion, or
        with ``_OWN`` this member's own GP)."""
        if i == _OWN:
            if not self._closed and self._autoclose is None:
                self._autoclose = asyncio.get_running_loop().create_task(
                    self.aclose(), name=f"aiopdbp-sync-autoclose-{self.companion_of(self.member)}")
                self._autoclose.add_done_callback(_retrieve)
            return
        if i in self._gone:
            return
        self._gone[i] = _Gone(None, "its companion was freed without leaving (its GP, task or "
                                    "host ended?)", asyncio.get_running_loop().time())
        self._poke()

    def _poke(self) -> None:
        comp = self._comp
        if self._busy and comp is not None:
            try:   # wake the waiting receive through the public API
                comp.send_nowait(comp.name, None, com=_com(_OP_POKE, 0, 0, 0), kind=Kind.COMMAND)
            except PDBPError:
                pass

    def _broadcast(self, comp: GP, op: int, reason: str) -> None:
        """Best-effort LEAVE/ABORT to every peer (never waits, never raises)."""
        payload = _GONE_HEAD.pack(self._round) + self.member.encode() + b"\0" + reason.encode()
        for i in self._peer_indices():
            if i == self._self_index or i in self._gone:
                continue
            try:
                comp.send_nowait(self._comp_names[i], payload, com=_com(op, 0, 0, 0), kind=Kind.COMMAND)
            except PDBPError:
                pass

    def _gone_error(self, i: int, g: _Gone) -> BarrierError:
        name = self._names[i]
        if g.rounds is None:
            err = BarrierError(f"{self._prefix()}: member {name!r} is gone ({g.reason})")
        else:
            err = BarrierError(f"{self._prefix()}: member {name!r} {g.reason} (after {g.rounds} round(s))")
        rank = g.rank if g.rank is not None else self._peer_rank.get(i)
        if rank is not None and rank != self.gp.node.rank:
            err.origin_rank = rank   # under aiopdbp.run: a consequence of that rank (aiopdbp.runtime.job)
        return err

    def _check_gone(self, pending: Iterable[int], now: float, at_start: bool) -> float | None:
        """Raise if a gone member makes this round impossible; else return
        the earliest time a grace period of a pending member runs out."""
        wake: float | None = None
        pend = set(pending)
        for i, g in self._gone.items():
            if g.rounds is not None:
                if g.rounds <= self._round:
                    raise self._gone_error(i, g)
            elif at_start:
                raise self._gone_error(i, g)
            elif i in pend:
                until = g.since + self.grace
                if now >= until:
                    raise self._gone_error(i, g)
                wake = until if wake is None else min(wake, until)
        return wake

    # -- receiving --------------------------------------------------------------
    def _sender_of(self, msg: Message, field_: int) -> int | None:
        return field_ if 0 <= field_ < len(self._names) and field_ != self._self_index else None

    def _accept(self, item: Message | IncomingStream) -> None:
        if isinstance(item, IncomingStream):   # nobody streams to a companion
            asyncio.get_running_loop().create_task(item.aclose())
            return
        com = item.com
        op = com >> 29
        if op == _OP_POKE:
            return
        if op == _OP_LEAVE or op == _OP_ABORT:
            raw = bytes(item.data or b"")
            if len(raw) < _GONE_HEAD.size:
                return
            (rounds,) = _GONE_HEAD.unpack_from(raw)
            name, _, reason = raw[_GONE_HEAD.size:].decode(errors="replace").partition("\0")
            i = self._index_of.get(name)
            if i is None or i == self._self_index:
                return
            old = self._gone.get(i)
            if old is None or old.rounds is None:
                why = "left the group" if op == _OP_LEAVE else f"failed ({reason})"
                entry = self.gp.node.tables.pta.get(item.source_pid)
                self._gone[i] = _Gone(rounds, why, asyncio.get_running_loop().time(),
                                      entry.node if entry is not None else None)
            return
        i = self._sender_of(item, com & 0xFFFF)
        key = (op, (com >> 23) & 0x3F, (com >> 16) & _ROUND_MASK, -1 if i is None else i)
        if i is None:
            self._orphan(item, key)
            return
        if i not in self._peer_pid:
            self._watch_peer(i, item.source_pid)
        if key in self._stash:
            raise BarrierError(f"{self._prefix()}: duplicate {_OP_NAMES.get(op, op)} "
                               f"step {key[1]} from {self._names[i]!r} (two groups share a name?)")
        self._stash[key] = item.data

    def _orphan(self, item: Message, key: tuple[int, int, int, int]) -> None:
        pass  # a sender index outside the group: ignore

    def _drain_nowait(self, comp: GP) -> None:
        while True:
            try:
                item = comp.recv_nowait()
            except WouldBlock:
                return
            except (ClosedResourceError, NoPipeError):
                raise self._closed_error() from None
            self._accept(item)

    def _closed_error(self) -> BarrierError:
        return BarrierError(f"{self._prefix()}: this member's companion was freed "
                            "(closed meanwhile, or its node is closing)")

    def _timeout_error(self, what: str, timeout: float | None) -> BarrierTimeoutError:
        return BarrierTimeoutError(f"{self._prefix()}: timed out after {timeout} s {what}")

    def _describe(self, op: int, step: int, pending: Sequence[int]) -> str:
        names = [self._names[i] for i in pending]
        return f"waiting for {_OP_NAMES.get(op, op)} (step {step}) from {names}"

    async def _gather(self, sources: Iterable[int], op: int, step: int, deadline: float | None,
                      timeout: float | None) -> dict[int, Any]:
        comp = self._comp
        assert comp is not None
        rnd = self._round & _ROUND_MASK
        stash = self._stash
        got: dict[int, Any] = {}
        pending = list(sources)
        loop = asyncio.get_running_loop()
        while True:
            still = []
            for j in pending:
                key = (op, step, rnd, j)
                if key in stash:
                    got[j] = stash.pop(key)
                else:
                    still.append(j)
            if not still:
                self._count_received(got)
                return got
            pending = still
            try:
                item = comp.recv_nowait()
            except WouldBlock:
                now = loop.time()
                wake = self._check_gone(pending, now, False) if self._gone else None
                limit = deadline if wake is None else (wake if deadline is None else min(wake, deadline))
                try:
                    item = await comp.recv(None if limit is None else max(0.0, limit - now))
                except TimeoutError:
                    if deadline is not None and loop.time() >= deadline:
                        raise self._timeout_error(self._describe(op, step, pending), timeout) from None
                    continue
                except (ClosedResourceError, NoPipeError):
                    raise self._closed_error() from None
            except (ClosedResourceError, NoPipeError):
                raise self._closed_error() from None
            self._accept(item)
            if self._gone:
                self._check_gone(pending, loop.time(), False)

    def _count_received(self, got: Mapping[int, Any]) -> None:
        pass

    # -- sending ----------------------------------------------------------------
    async def _await_peer(self, j: int, deadline: float | None, timeout: float | None) -> int:
        """First contact: wait until peer ``j``'s companion is registered and
        its pipe is bound *in this host's tables* (a CDU sent to a host before
        it knows the destination could be dropped there); return its pid."""
        comp = self._comp
        assert comp is not None
        node = comp.node
        name = self._comp_names[j]
        loop = asyncio.get_running_loop()
        delay = 0.0002
        while True:
            pid = node.tables.by_name.get(name)
            if pid is not None:
                entry = node.tables.pta.get(pid)
                if entry is not None and entry.pipe is not None:
                    self._ready.add(j)
                    self._watch_peer(j, pid)
                    return pid
            self._drain_nowait(comp)
            now = loop.time()
            if self._gone:
                self._check_gone((j,), now, False)
            if deadline is not None and now >= deadline:
                raise self._timeout_error(
                    f"waiting for member {self._names[j]!r} to join (its companion {name!r} "
                    f"was not registered with a pipe)", timeout)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.01)

    async def _send(self, j: int, op: int, step: int, data: Any, sender: int,
                    deadline: float | None, timeout: float | None) -> None:
        comp = self._comp
        assert comp is not None
        if self._gone and j in self._gone:
            raise self._gone_error(j, self._gone[j])
        com = _com(op, step, self._round, sender)
        name = self._comp_names[j]
        if j in self._ready:
            try:
                comp.send_nowait(name, data, com=com, kind=Kind.COMMAND)
                return
            except (WouldBlock, NoPipeError):
                pass
            except ClosedResourceError:
                raise self._closed_error() from None
            except PDBPError:   # UnknownProcessError: freed meanwhile
                if j in self._gone:
                    raise self._gone_error(j, self._gone[j]) from None
                raise BarrierError(f"{self._prefix()}: member {self._names[j]!r} is gone "
                                   "(its companion is no longer registered)") from None
        else:
            await self._await_peer(j, deadline, timeout)
        loop = asyncio.get_running_loop()
        rest = None if deadline is None else max(1e-3, deadline - loop.time())
        try:
            await comp.send(name, data, com=com, kind=Kind.COMMAND, timeout=rest)
        except TimeoutError:
            raise self._timeout_error(f"sending to {self._names[j]!r}", timeout) from None

    def _begin(self, timeout: Any) -> tuple[float | None, float | None]:
        if self._closed:
            raise ClosedResourceError(f"{self._what} {self.group!r} at {self.member!r} was closed")
        if self._broken is not None:
            raise BarrierError(f"{self._what} {self.group!r} at {self.member!r} is broken: "
                               f"{self._broken}")
        if self._busy:
            raise RuntimeError(f"{self._what} {self.group!r} at {self.member!r}: a round is "
                               "already in progress (one task per member at a time)")
        t = self.timeout if timeout is _UNSET else timeout
        if t is not None and t <= 0:
            raise ValueError("timeout must be > 0 or None")
        loop = asyncio.get_running_loop()
        return t, (None if t is None else loop.time() + t)

    def _fail(self, exc: BaseException) -> BarrierError:
        """A round failed: the member is broken; tell the others (ABORT)."""
        if isinstance(exc, BarrierError):
            err = exc
        elif isinstance(exc, asyncio.CancelledError):
            err = BarrierError(f"{self._prefix()}: cancelled during the round")
        else:
            err = BarrierError(f"{self._prefix()}: {type(exc).__name__}: {exc}")
        self._broken = err
        comp = self._comp
        if comp is not None:
            self._broadcast(comp, _OP_ABORT, str(err))
        return err


# ------------------------------------------------------------------- barrier
class Barrier(_SyncMember):
    """A reusable barrier among the GPs named ``members`` (on any hosts).

    Every member creates its own ``Barrier(gp, group, members, ...)`` with the
    same ``group``, the same ordered ``members`` and the same ``algorithm``;
    ``gp.name`` must be one of ``members``.  Member 0 is the counter's master
    and the tree's root.

    ``algorithm``: ``"counter"`` (centralised), ``"tree"`` (binomial tree,
    any n), ``"dissemination"`` (any n) or ``"butterfly"`` (n a power of two).
    ``timeout`` (seconds, default None = no limit) bounds each round;
    ``grace`` is how long a round keeps waiting for a message from a member
    whose companion was freed without leaving (a message already in flight
    may still arrive); ``linger`` bounds how long :meth:`aclose` keeps the
    companion for the other members' LEAVE.  The group name must not be in
    use by another live barrier (companions are named
    ``f"{group}/{member}#sync"``).

    Statistics: :attr:`stats` (:class:`BarrierStats`);
    :func:`aggregate_stats` sums them over the members.

    Cleanup: ``async with Barrier(...) as bar`` opens on entry and closes
    (:meth:`aclose`) on exit.  A barrier left open is closed by its GP when
    the GP is freed (:meth:`GP.own`), or by the node when it closes, so a
    program may simply return.

    Cancellation: see :meth:`wait` and :meth:`aclose`.
    """

    _suffix = "#sync"
    _what = "barrier"

    def __init__(self, gp: GP, group: str, members: Sequence[str], *,
                 algorithm: Algorithm | str = "tree", timeout: float | None = None,
                 grace: float = 1.0, linger: float = 0.25) -> None:
        names = list(members)
        if not names:
            raise ValueError("a barrier needs at least one member")
        if len(set(names)) != len(names):
            raise ValueError("member names must be unique")
        if len(names) > _MAX_MEMBERS:
            raise ValueError(f"at most {_MAX_MEMBERS} members")
        if gp.name not in names:
            raise ValueError(f"GP {gp.name!r} is not one of the members")
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown barrier algorithm {algorithm!r}; choose one of {ALGORITHMS}")
        n = len(names)
        if algorithm == "butterfly" and n & (n - 1):
            raise ValueError(f"the butterfly barrier needs a power-of-two group, not {n} "
                             "(use 'dissemination' for any size)")
        super().__init__(gp, group, names, names.index(gp.name), timeout, grace, linger)
        self.algorithm: str = algorithm
        self.members: tuple[str, ...] = tuple(names)
        self.index: int = self._self_index
        self.size: int = n
        self.steps: int = steps_for(algorithm, n)
        self.stats = BarrierStats(algorithm, n, gp.name, self.steps, step_sent=[0] * self.steps,
                                  last_round_sent=[0] * self.steps)
        self._this_round: list[int] = []

    def __repr__(self) -> str:
        return (f"<Barrier {self.group!r} {self.algorithm} {self.index}/{self.size} "
                f"round={self._round}{' broken' if self.broken else ''}>")

    # -- public ---------------------------------------------------------------
    async def wait(self, *, timeout: float | None = _UNSET) -> int:
        """Wait until every member has called ``wait`` for this round; return
        the round number (0 for the first passage, then 1, 2, ...).

        Raises :class:`BarrierTimeoutError` when the round does not complete
        within ``timeout`` (default: the barrier's), and
        :class:`~aiopdbp.errors.BarrierError` when a member left, failed or
        was freed.  After a failure the barrier is broken: every later round
        raises at once.

        Cancellation: a cancelled wait breaks the barrier (this member may have
        sent part of the round); the other members are told (ABORT) and fail.
        """
        await self._round_trip(None, None, timeout)
        return self._round - 1

    async def allreduce(self, value: Any, op: ReduceOp | str = "sum", *,
                        timeout: float | None = _UNSET) -> Any:
        """A barrier round that also combines ``value`` from every member with
        ``op`` (``"sum"``, ``"max"`` or ``"min"``) and returns the result to
        all: the convergence test of an iterative solver in one round.

        ``value`` is a number or a numpy array (the same shape everywhere);
        a number gives a Python scalar back, an array an array.  The counter
        and tree algorithms compute the result once (at the master/root) and
        send it to everybody, so every member gets the same bits; butterfly
        also does (each pair combines the same two operands).  Dissemination
        works for any n (when n is not a power of two, a sum carries a second
        partial sum in some steps so that nobody is counted twice); its float
        sums may differ in the last bit between members.

        Cancellation: as for :meth:`wait`.
        """
        if op not in _UFUNCS:
            raise ValueError(f"unknown reduction {op!r}; choose 'sum', 'max' or 'min'")
        scalar = not isinstance(value, np.ndarray)
        arr = np.array(value)
        if arr.dtype.hasobject:
            raise TypeError("allreduce takes numbers or numeric arrays")
        # travel as 1-D arrays: a ufunc of 0-d arrays gives a numpy scalar,
        # which the codec would send as raw bytes
        result = await self._round_trip(arr.reshape(-1), _UFUNCS[op], timeout)
        assert result is not None
        out = np.asarray(result).reshape(arr.shape)
        return out.item() if scalar and out.ndim == 0 else out

    # -- one round ----------------------------------------------------------------
    async def _round_trip(self, value: np.ndarray[Any, Any] | None, ufunc: Any,
                          timeout: Any) -> np.ndarray[Any, Any] | None:
        t, deadline = self._begin(timeout)
        self._busy = True
        if not self._opened:
            try:
                await self.open()     # its errors leave the barrier usable
            except BaseException:
                self._busy = False
                raise
        self._this_round = [0] * self.steps
        try:
            if self._gone:
                self._check_gone((), asyncio.get_running_loop().time(), True)
            if self.size == 1:
                result = value
            elif self.algorithm == "counter":
                result = await self._counter(value, ufunc, deadline, t)
            elif self.algorithm == "tree":
                result = await self._tree(value, ufunc, deadline, t)
            else:
                result = await self._peerwise(value, ufunc, deadline, t)
        except BaseException as exc:
            err = self._fail(exc)
            if isinstance(exc, (BarrierError, asyncio.CancelledError)):
                raise
            raise err from exc
        finally:
            self._busy = False
        self._round += 1
        self.stats.rounds = self._round
        self.stats.last_round_sent = self._this_round
        return result

    async def _counter(self, acc: Any, ufunc: Any, deadline: float | None, t: float | None) -> Any:
        i, n = self.index, self.size
        if i == 0:
            got = await self._gather(range(1, n), _OP_ARRIVE, 0, deadline, t)
            if ufunc is not None:
                for j in range(1, n):
                    acc = ufunc(acc, got[j])
            for j in range(1, n):
                await self._put(j, _OP_RELEASE, 1, acc, deadline, t)
            return acc
        await self._put(0, _OP_ARRIVE, 0, acc, deadline, t)
        return (await self._gather((0,), _OP_RELEASE, 1, deadline, t))[0]

    async def _tree(self, acc: Any, ufunc: Any, deadline: float | None, t: float | None) -> Any:
        i, n = self.index, self.size
        levels = _ceil_log2(n)
        last = 2 * levels - 1
        # the level at which this member reports to its parent (the root never does)
        up = ((i & -i).bit_length() - 1) if i else levels
        for k in range(up):
            child = i + (1 << k)
            if child < n:
                got = await self._gather((child,), _OP_ARRIVE, k, deadline, t)
                if ufunc is not None:
                    acc = ufunc(acc, got[child])
        if i:
            parent = i - (1 << up)
            await self._put(parent, _OP_ARRIVE, up, acc, deadline, t)
            acc = (await self._gather((parent,), _OP_RELEASE, last - up, deadline, t))[parent]
        for k in reversed(range(up)):
            child = i + (1 << k)
            if child < n:
                await self._put(child, _OP_RELEASE, last - k, acc, deadline, t)
        return acc

    async def _peerwise(self, acc: Any, ufunc: Any, deadline: float | None, t: float | None) -> Any:
        i, n = self.index, self.size
        butterfly = self.algorithm == "butterfly"
        steps = _ceil_log2(n)
        # A dissemination sum over n members, n not a power of two: the last
        # step must add only the r = n - 2^(L-1) members not counted yet.
        # Besides its window A_k of the 2^k values ending at itself, each
        # member keeps B_k, the window of the (r mod 2^k) values ending at
        # itself: B_{k+1} = B_k, or A_k + (the sender's B_k) when bit k of r
        # is set (then both travel together).  The last step sends B = the
        # window of r.  Same messages and steps; max/min overlap harmlessly.
        exact = ufunc is np.add and not butterfly and n & (n - 1)
        r = n - (1 << (steps - 1)) if exact else 0
        window: Any = np.zeros_like(acc) if exact else None
        for k in range(steps):
            d = 1 << k
            if butterfly:
                to = frm = i ^ d
            else:
                to, frm = (i + d) % n, (i - d) % n
            last = k == steps - 1
            both = exact and not last and r & d
            out = acc
            if exact and last:
                out = window
            elif both:
                out = np.concatenate((acc, window))
            await self._put(to, _OP_EXCHANGE, k, out, deadline, t)
            got = (await self._gather((frm,), _OP_EXCHANGE, k, deadline, t))[frm]
            if ufunc is None:
                continue
            if both:
                m = acc.shape[0]
                window = ufunc(acc, got[m:])
                acc = ufunc(acc, got[:m])
            else:
                acc = ufunc(acc, got)
        return acc

    async def _put(self, j: int, op: int, step: int, data: Any, deadline: float | None,
                   t: float | None) -> None:
        await self._send(j, op, step, data, self.index, deadline, t)
        st = self.stats
        st.sent += 1
        st.step_sent[step] += 1
        self._this_round[step] += 1
        st.sent_to[self._names[j]] += 1

    def _count_received(self, got: Mapping[int, Any]) -> None:
        st = self.stats
        st.received += len(got)
        for j in got:
            st.received_from[self._names[j]] += 1

    def _describe(self, op: int, step: int, pending: Sequence[int]) -> str:
        names = [self._names[i] for i in pending]
        alg = self.algorithm
        if alg == "counter" and op == _OP_ARRIVE:
            return f"at the master: member(s) {names} did not arrive"
        if op == _OP_RELEASE:
            return (f"for the release from {names[0]!r} ({alg}): a member upstream has not "
                    "arrived (see the master/root's error)")
        if op == _OP_ARRIVE:
            return f"for the arrival of {names[0]!r}'s subtree (tree step {step})"
        return f"for {names[0]!r} ({alg} step {step}): it, or a member before it, has not arrived"


# ----------------------------------------------------------------- neighbours
class Neighbours(_SyncMember):
    """Local synchronisation: exchange data with named neighbour GPs only.

    ``Neighbours(gp, group, neighbours)``: every GP of the group creates one
    with the same ``group`` and its own neighbour list; the relation must be
    symmetric (if ``a`` lists ``b``, ``b`` lists ``a``).  Each
    :meth:`exchange` sends one item to every neighbour and returns one item
    from every neighbour, of the same exchange (round-tagged: a fast
    neighbour's next halo is held back, never mixed).  No global barrier is
    involved: a GP waits only for its neighbours.

    Cleanup: as for :class:`Barrier` (an async context manager, closed by
    its GP when the GP is freed if the program did not close it).

    Cancellation: see :meth:`exchange` and :meth:`aclose`.
    """

    _suffix = "#nbr"
    _what = "neighbours"

    def __init__(self, gp: GP, group: str, neighbours: Iterable[str], *,
                 timeout: float | None = None, grace: float = 1.0, linger: float = 0.25) -> None:
        names = list(neighbours)
        if len(set(names)) != len(names):
            raise ValueError("neighbour names must be unique")
        if gp.name in names:
            raise ValueError("a GP is not its own neighbour")
        super().__init__(gp, group, names, -1, timeout, grace, linger)
        self.neighbours: tuple[str, ...] = tuple(names)
        self.stats = NeighbourStats(gp.name, tuple(names))
        self._pid_index: dict[int, int] = {}
        self._orphans: dict[int, list[tuple[tuple[int, int, int, int], Any]]] = {}

    def __repr__(self) -> str:
        return f"<Neighbours {self.group!r} {self.member!r} -> {list(self.neighbours)} round={self._round}>"

    async def exchange(self, outgoing: Mapping[str, Any], *,
                       timeout: float | None = _UNSET) -> dict[str, Any]:
        """Send ``outgoing[name]`` to each neighbour ``name`` and return
        ``{name: what name sent to this GP}`` for the same exchange.

        ``outgoing`` must have exactly one entry per neighbour.  Payloads are
        what :meth:`GP.send` takes (bytes, numpy arrays, ``None``; Python
        objects with ``allow_pickle``); arrays are copied at the call, so the
        caller may overwrite them at once.  Raises
        :class:`BarrierTimeoutError` after ``timeout`` and
        :class:`~aiopdbp.errors.BarrierError` when a neighbour left or failed.

        Cancellation: a cancelled exchange breaks this member (part of the
        halos may be sent); its neighbours are told (ABORT) and fail.
        """
        t, deadline = self._begin(timeout)
        keys = set(outgoing)
        if keys != set(self.neighbours):
            raise ValueError(f"exchange needs one item per neighbour {sorted(self.neighbours)}, "
                             f"got {sorted(keys)}")
        if not self.neighbours:
            self._round += 1
            self.stats.exchanges = self._round
            return {}
        self._busy = True
        if not self._opened:
            try:
                await self.open()
            except BaseException:
                self._busy = False
                raise
        try:
            if self._gone:
                self._check_gone((), asyncio.get_running_loop().time(), True)
            if len(self._pid_index) < len(self._names):
                for j in self._peer_indices():    # resolve every sender before reading
                    if j not in self._ready:
                        self._learn(j, await self._await_peer(j, deadline, t))
            for j, name in enumerate(self._names):
                await self._send(j, _OP_HALO, 0, outgoing[name], 0, deadline, t)
                self.stats.sent += 1
            got = await self._gather(self._peer_indices(), _OP_HALO, 0, deadline, t)
        except BaseException as exc:
            err = self._fail(exc)
            if isinstance(exc, (BarrierError, asyncio.CancelledError)):
                raise
            raise err from exc
        finally:
            self._busy = False
        self._round += 1
        self.stats.exchanges = self._round
        return {self._names[j]: got[j] for j in self._peer_indices()}

    def _learn(self, j: int, pid: int) -> None:
        self._pid_index[pid] = j
        for key, data in self._orphans.pop(pid, ()):
            self._stash[(key[0], key[1], key[2], j)] = data

    def _sender_of(self, msg: Message, field_: int) -> int | None:
        return self._pid_index.get(msg.source_pid)

    def _orphan(self, item: Message, key: tuple[int, int, int, int]) -> None:
        # from a companion not resolved yet (its registration overtaken by data)
        self._orphans.setdefault(item.source_pid, []).append((key, item.data))

    def _count_received(self, got: Mapping[int, Any]) -> None:
        self.stats.received += len(got)

    def _describe(self, op: int, step: int, pending: Sequence[int]) -> str:
        return f"for the halo of neighbour(s) {[self._names[i] for i in pending]}"
