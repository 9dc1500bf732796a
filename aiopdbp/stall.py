"""Stalls are reported, deadlocks fail: the waits of one rank, watched.

Theory of operation
-------------------
Every wait of a sender on a peer goes through :meth:`Waits.begin` /
:meth:`Waits.end` (the router's credit and pipe-slot waits, a stream's
segment window): a :class:`Wait` says which GP waits, for what (``credit``
from a GP on another rank, a ``pipe slot`` of a GP here, a stream's
``segment window``), for whom, and since when.  The flow-control argument
(:mod:`aiopdbp.hosts.link`, "Why nothing waits forever inside the library") shows
that each of these waits is released by the *destination GP reading*; so a
wait that lasts is either a slow reader or an application cycle.

A :class:`StallWatch` per rank looks every ``stall_timeout / 2`` s (a timer;
nothing runs while no one waits):

* **Stall report.**  A wait older than ``stall_timeout`` is logged once (the
  ``aiopdbp.stall`` logger, WARNING) with the GP, the resource, the peer and
  its rank, and how long; so is a local GP that has data queued and has not
  taken any of it for ``stall_timeout`` ("has not called recv").  A reader
  that is merely slow is reported, never failed.
* **Deadlock.**  Each rank sends rank 0 what it sees that is stale: its
  waits (edges *gp -> waits_for*) and its GPs that do not read.  An edge is
  *blocked* when its ``waits_for`` GP does not read.  A cycle of blocked
  edges cannot resolve: each GP on it waits in ``send`` for the next one to
  read, and none reads.  (The cycle that any bounded design allows, MPI's
  ``MPI_Send`` included: two GPs that each send more than a window to the
  other before receiving.)  Rank 0 finds the cycle and sends it to every
  rank; each fails the waits of the cycle's GPs with
  :class:`~aiopdbp.errors.DeadlockError`, whose ``cycle`` is the wait-for
  graph (a tuple of :class:`WaitEdge`), so ``send`` raises it in the user's
  task and the job fails the usual way (the first traceback is the cause).

* **The last open rank.**  When every other rank has closed its node
  (rank 0 tells this one, :mod:`aiopdbp.hosts.closing`), only a GP of this
  rank can still send to a GP here.  From then on a GP that waits in
  ``recv()`` with nothing queued for ``stall_timeout`` is reported once
  (the reply that never comes: the hang MPI leaves silent), and so is the
  case where every GP here waits so, with no send under way.  Reported, not
  failed: code outside the GPs -- a timer, another task that holds a GP, a
  thread -- may still send, and aiopdbp cannot see it; a send waits only
  for a reader, which is why a cycle of sends is provably stuck and this is not.

Reports go to rank 0 only when what a rank sees changes, so a healthy job
sends none.  The detector is deliberately conservative: a GP that reads,
however slowly, breaks every cycle through it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiopdbp.errors import DeadlockError
from aiopdbp.records import FrozenRecord, init_field

log = logging.getLogger("aiopdbp.stall")

__all__ = ["DEFAULT_STALL_TIMEOUT", "StallWatch", "Wait", "WaitEdge", "Waits", "find_cycle"]

#: seconds a wait on a peer may last before it is reported
DEFAULT_STALL_TIMEOUT = 30.0


class WaitEdge(FrozenRecord):
    """``gp`` (on ``rank``) has waited ``seconds`` for ``resource`` of
    ``waits_for`` (on ``waits_for_rank``).  A frozen record (as a frozen
    slots dataclass, without one's cost at import: :mod:`aiopdbp.records`)."""

    __slots__ = ("gp", "rank", "waits_for", "waits_for_rank", "resource", "seconds")
    gp: str
    rank: int
    waits_for: str
    waits_for_rank: int
    resource: str
    seconds: float

    def __init__(self, gp: str, rank: int, waits_for: str, waits_for_rank: int, resource: str,
                 seconds: float) -> None:
        init_field(self, "gp", gp)
        init_field(self, "rank", rank)
        init_field(self, "waits_for", waits_for)
        init_field(self, "waits_for_rank", waits_for_rank)
        init_field(self, "resource", resource)
        init_field(self, "seconds", seconds)

    def to_wire(self) -> list[Any]:
        """The fields in order, as a stall report carries them (``WaitEdge(*fields)`` again)."""
        return list(self._values())

    def __str__(self) -> str:
        return (f"GP {self.gp!r} (rank {self.rank}) waits {self.seconds:.1f} s for {self.resource} "
                f"of GP {self.waits_for!r} (rank {self.waits_for_rank})")


def _why(edge: WaitEdge) -> str:
    """What a stall report suggests: a receiver on another rank may not be
    reading, or its rank's event loop may be stuck in a call that does not
    await -- then only this side can say so (the idle report of the
    receiving GP needs that loop)."""
    if edge.waits_for_rank in (edge.rank, -1):   # here, or not known
        return "the receiver does not take its data"
    return (f"the receiver does not take its data: it does not read, or rank "
            f"{edge.waits_for_rank}'s event loop is blocked in a call that does not await")


class Wait:
    """One live wait (see :meth:`Waits.begin`)."""

    __slots__ = ("gp", "resource", "dest", "dest_rank", "since", "task", "error", "reported")

    def __init__(self, gp: str, resource: str, dest: str, dest_rank: int) -> None:
        self.gp = gp
        self.resource = resource
        self.dest = dest
        self.dest_rank = dest_rank
        self.since = time.monotonic()
        self.task = asyncio.current_task()
        self.error: BaseException | None = None   # set when the watch fails this wait
        self.reported = False

    def edge(self, rank: int, now: float) -> WaitEdge:
        return WaitEdge(self.gp, rank, self.dest, self.dest_rank, self.resource, now - self.since)

    def check(self) -> None:
        """After a ``CancelledError`` in the wait: raise the error the watch
        failed it with (the cancel was ours, not the caller's)."""
        task = self.task
        if self.error is not None and task is not None and task.uncancel() == 0:
            raise self.error from None


class Waits:
    """The live waits of one rank on peers."""

    def __init__(self) -> None:
        self._live: set[Wait] = set()

    def begin(self, gp: str, resource: str, dest: str, dest_rank: int) -> Wait:
        wait = Wait(gp, resource, dest, dest_rank)
        self._live.add(wait)
        return wait

    def end(self, wait: Wait) -> None:
        self._live.discard(wait)

    def live(self) -> list[Wait]:
        return list(self._live)

    def fail(self, cycle: tuple[WaitEdge, ...]) -> int:
        """Fail the waits of the cycle's edges that live here."""
        rank_of = {(e.gp, e.waits_for): e.rank for e in cycle}
        origin = cycle[0].rank
        n = 0
        for wait in self._live:
            rank = rank_of.get((wait.gp, wait.dest))
            if rank is not None and wait.error is None and wait.task is not None:
                wait.error = DeadlockError(cycle)
                if rank != origin:
                    # one failure for the job: the cycle's first rank reports
                    # it, the others' errors are its consequence (one line each)
                    wait.error.origin_rank = origin
                wait.task.cancel()
                n += 1
        return n


def find_cycle(edges: list[WaitEdge], idle: set[str]) -> tuple[WaitEdge, ...] | None:
    """A cycle of *blocked* edges (whose ``waits_for`` is in ``idle``: it
    does not read), in order, or None."""
    out: dict[str, list[WaitEdge]] = {}
    for e in edges:
        if e.waits_for in idle and e.gp in idle:
            out.setdefault(e.gp, []).append(e)
    state: dict[str, int] = {}          # 1: on the path, 2: done
    path: list[WaitEdge] = []

    def visit(gp: str) -> tuple[WaitEdge, ...] | None:
        state[gp] = 1
        for e in out.get(gp, ()):
            nxt = e.waits_for
            if state.get(nxt) == 1:
                path.append(e)
                start = next(i for i, p in enumerate(path) if p.gp == nxt)
                return tuple(path[start:])
            if nxt not in state:
                path.append(e)
                found = visit(nxt)
                if found is not None:
                    return found
                path.pop()
        state[gp] = 2
        return None

    for gp in sorted(out):
        if gp not in state:
            found = visit(gp)
            if found is not None:
                return found
    return None


def _recv_line(rank: int, new: list[tuple[str, float]], every: bool) -> str:
    """What the last open rank says of its GPs ``new`` (name, seconds) that
    wait in ``recv()``, and (``every``) that all its GPs do."""
    parts = []
    if new:
        one = len(new) == 1
        names = ", ".join(repr(name) for name, _ in new[:8]) + (f" and {len(new) - 8} more" if len(new) > 8 else "")
        parts.append(f"{'GP' if one else 'GPs'} {names} {'has' if one else 'have'} waited in recv() for "
                     f"{min(secs for _, secs in new):.1f} s{'' if one else ' or longer'} since every other "
                     f"rank closed its node: only a GP of rank {rank} can still send to {'it' if one else 'them'}")
    if every:
        parts.append(f"every GP of rank {rank} waits in recv() with nothing queued and no send under way: "
                     f"unless code outside them (a timer, another task, a thread) sends, rank {rank} waits forever")
    return "; ".join(parts)


#: (name, items queued, items ever taken) of each local GP's private pipe
Readers = Callable[[], list[tuple[str, int, int]]]
#: (name, waits in recv() now, items queued, items ever taken) of each local GP
Receivers = Callable[[], list[tuple[str, bool, int, int]]]
#: send (edges, idle) to rank 0
Report = Callable[[list[WaitEdge], list[str]], None]
#: tell every rank the cycle
Broadcast = Callable[[tuple[WaitEdge, ...]], None]


class StallWatch:
    """Watches one rank's waits; at rank 0 also finds deadlocks."""

    def __init__(self, rank: int, waits: Waits, readers: Readers, *, timeout: float,
                 report: Report | None = None, broadcast: Broadcast | None = None,
                 receivers: Receivers | None = None) -> None:
        self.rank = rank
        self.waits = waits
        self.timeout = timeout
        self._readers = readers
        self._receivers = receivers
        self._report = report           # None at rank 0: its own view is used directly
        self._broadcast = broadcast
        self._handle: asyncio.TimerHandle | None = None
        self._taken: dict[str, tuple[int, float]] = {}   # name -> (taken, since)
        self._idle_reported: set[str] = set()
        self._views: dict[int, tuple[list[WaitEdge], set[str]]] = {}
        # what rank 0 was last sent: nothing stale, at first -- a healthy job sends no report
        self._last_sent: tuple[frozenset[tuple[str, str]], frozenset[str]] = (frozenset(), frozenset())
        self.stalls = 0                 # waits reported
        self.deadlocks = 0              # cycles found (rank 0) or received
        #: since when every other rank has closed its node (None: not so, or not known)
        self.last_open_since: float | None = None
        self._recv_since: dict[str, tuple[int, float]] = {}   # name -> (taken, waits since)
        self._recv_reported: set[str] = set()
        self._all_reported = False

    def start(self) -> None:
        if self.timeout and self.timeout > 0 and self._handle is None:
            self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(max(self.timeout / 2, 0.01), self._tick)

    def last_open(self, now: float | None = None) -> None:
        """Every other rank has closed its node: from now on, report the GPs
        here that wait in ``recv()`` for ``timeout`` (see "The last open rank")."""
        if self.last_open_since is not None:
            return
        now = time.monotonic() if now is None else now
        self.last_open_since = now
        log.debug("rank %d: every other rank has closed its node", self.rank)
        if self._receivers is None or not self.timeout or self.timeout <= 0:
            return
        self._check_receivers(now)          # the GPs that wait now, wait since now
        if self._handle is not None:
            # look again when they can be reported, not up to timeout/2 later
            self._handle.cancel()
            self._handle = asyncio.get_running_loop().call_later(self.timeout, self._tick)

    def _tick(self) -> None:
        self._handle = None
        try:
            self.check()
        finally:
            self._schedule()

    def check(self, now: float | None = None) -> tuple[list[WaitEdge], set[str]]:
        """One look: report what is stale; send rank 0 the view if it changed."""
        now = time.monotonic() if now is None else now
        stale: list[WaitEdge] = []
        for wait in self.waits.live():
            if now - wait.since >= self.timeout:
                edge = wait.edge(self.rank, now)
                stale.append(edge)
                if not wait.reported:
                    wait.reported = True
                    self.stalls += 1
                    log.warning("rank %d: stalled: %s (%s)", self.rank, edge, _why(edge))
        idle: set[str] = set()
        seen: dict[str, tuple[int, float]] = {}
        for name, queued, taken in self._readers():
            prev = self._taken.get(name)
            since = prev[1] if prev is not None and prev[0] == taken and queued else now
            seen[name] = (taken, since)
            if queued and now - since >= self.timeout:
                idle.add(name)
                if name not in self._idle_reported:
                    self._idle_reported.add(name)
                    log.warning("rank %d: GP %r has %d item(s) queued and has not called recv "
                                "for %.1f s", self.rank, name, queued, now - since)
        self._taken = seen
        self._idle_reported &= idle
        if self.last_open_since is not None and self._receivers is not None and self.timeout > 0:
            self._check_receivers(now)
        if self._report is not None:
            key = (frozenset((e.gp, e.waits_for) for e in stale), frozenset(idle))
            if key != self._last_sent:
                self._last_sent = key
                self._report(stale, sorted(idle))
        else:
            self.on_report(self.rank, stale, sorted(idle))
        return stale, idle

    def _check_receivers(self, now: float) -> None:
        """The last open rank: report its GPs that wait in ``recv()`` with
        nothing queued and have taken nothing for ``timeout``."""
        assert self._receivers is not None
        seen: dict[str, tuple[int, float]] = {}
        stuck: list[tuple[str, float]] = []
        gps = 0
        for name, waiting, queued, taken in self._receivers():
            gps += 1
            if not waiting or queued:
                continue
            prev = self._recv_since.get(name)
            since = prev[1] if prev is not None and prev[0] == taken else now
            seen[name] = (taken, since)
            if now - since >= self.timeout:
                stuck.append((name, now - since))
        self._recv_since = seen
        new = [(name, secs) for name, secs in stuck if name not in self._recv_reported]
        self._recv_reported = {name for name, _ in stuck}
        every = gps > 0 and len(stuck) == gps and not self.waits.live()
        if not every:
            self._all_reported = False
        said = every and not self._all_reported
        if said:
            self._all_reported = True
        if new or said:
            log.warning("rank %d: %s", self.rank, _recv_line(self.rank, new, said))

    def on_report(self, rank: int, edges: list[WaitEdge], idle: list[str]) -> None:
        """Rank 0: ``rank`` sees these stale waits and GPs that do not read."""
        self._views[rank] = (edges, set(idle))
        all_edges = [e for v in self._views.values() for e in v[0]]
        all_idle = set().union(*(v[1] for v in self._views.values()))
        cycle = find_cycle(all_edges, all_idle)
        if cycle is None:
            return
        for r in {e.rank for e in cycle}:
            self._views.pop(r, None)    # each rank reports again if it stays stuck
        self.deadlocks += 1
        log.error("rank %d: deadlock: %s", self.rank, "; ".join(str(e) for e in cycle))
        if self._broadcast is not None:
            self._broadcast(cycle)
        self.on_deadlock(cycle)

    def on_deadlock(self, cycle: tuple[WaitEdge, ...]) -> None:
        """Fail the waits of ``cycle`` that live here."""
        if self.rank != 0:
            self.deadlocks += 1
        self.waits.fail(cycle)

    def stats(self) -> dict[str, Any]:
        return {"waiting": len(self.waits.live()), "stalls": self.stalls, "deadlocks": self.deadlocks}
