"""Barriers: full synchronisation of a named group of GPs (SPEC section 10).

``Barrier`` makes a named group of GPs -- on any hosts -- wait for each other::

    bar = Barrier(gp, "workers", ["w0", "w1", "w2"], algorithm="tree", timeout=30)
    async with bar:
        for it in range(100):
            ...                       # compute
            await bar.wait()          # nobody starts iteration it+1 before all finished it
            delta = await bar.allreduce(local_delta, "max")

Its statistics (:class:`BarrierStats`, summed over a group by
:func:`aggregate_stats`) count the messages and steps of each algorithm.
"""

# Theory of operation
# -------------------
# Companions, tags, failure and closing are aiopdbp.sync.member's (see its
# notes); this module adds what one round does.
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

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np

from aiopdbp.errors import BarrierError
from aiopdbp.runtime.process import GP
from aiopdbp.sync.member import (
    OP_ARRIVE,
    OP_EXCHANGE,
    OP_RELEASE,
    UNSET,
    BarrierTimeoutError,
    SyncMember,
)

__all__ = [
    "ALGORITHMS", "Barrier", "BarrierStats", "BarrierSummary", "BarrierTimeoutError",
    "aggregate_stats", "messages_for", "steps_for",
]

Algorithm = Literal["counter", "tree", "dissemination", "butterfly"]
ReduceOp = Literal["sum", "max", "min"]

#: the selectable barrier algorithms
ALGORITHMS: Final[tuple[str, ...]] = ("counter", "tree", "dissemination", "butterfly")

_MAX_MEMBERS: Final = 0xFFFF  # the sender index is a u16 field of the tag
_UFUNCS: Final[dict[str, Any]] = {"sum": np.add, "max": np.maximum, "min": np.minimum}


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


# ------------------------------------------------------------------- barrier
class Barrier(SyncMember):
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
    async def wait(self, *, timeout: float | None = UNSET) -> int:
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
                        timeout: float | None = UNSET) -> Any:
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
                self._gone.check((), asyncio.get_running_loop().time(), True, self._round)
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
            got = await self._gather(range(1, n), OP_ARRIVE, 0, deadline, t)
            if ufunc is not None:
                for j in range(1, n):
                    acc = ufunc(acc, got[j])
            for j in range(1, n):
                await self._put(j, OP_RELEASE, 1, acc, deadline, t)
            return acc
        await self._put(0, OP_ARRIVE, 0, acc, deadline, t)
        return (await self._gather((0,), OP_RELEASE, 1, deadline, t))[0]

    async def _tree(self, acc: Any, ufunc: Any, deadline: float | None, t: float | None) -> Any:
        i, n = self.index, self.size
        levels = _ceil_log2(n)
        last = 2 * levels - 1
        # the level at which this member reports to its parent (the root never does)
        up = ((i & -i).bit_length() - 1) if i else levels
        for k in range(up):
            child = i + (1 << k)
            if child < n:
                got = await self._gather((child,), OP_ARRIVE, k, deadline, t)
                if ufunc is not None:
                    acc = ufunc(acc, got[child])
        if i:
            parent = i - (1 << up)
            await self._put(parent, OP_ARRIVE, up, acc, deadline, t)
            acc = (await self._gather((parent,), OP_RELEASE, last - up, deadline, t))[parent]
        for k in reversed(range(up)):
            child = i + (1 << k)
            if child < n:
                await self._put(child, OP_RELEASE, last - k, acc, deadline, t)
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
            await self._put(to, OP_EXCHANGE, k, out, deadline, t)
            got = (await self._gather((frm,), OP_EXCHANGE, k, deadline, t))[frm]
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
        if alg == "counter" and op == OP_ARRIVE:
            return f"at the master: member(s) {names} did not arrive"
        if op == OP_RELEASE:
            return (f"for the release from {names[0]!r} ({alg}): a member upstream has not "
                    "arrived (see the master/root's error)")
        if op == OP_ARRIVE:
            return f"for the arrival of {names[0]!r}'s subtree (tree step {step})"
        return f"for {names[0]!r} ({alg} step {step}): it, or a member before it, has not arrived"


