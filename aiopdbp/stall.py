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

Reports go to rank 0 only when what a rank sees changes, so a healthy job
sends none.  The detector is deliberately conservative: a GP that reads,
however slowly, breaks every cycle through it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from aiopdbp.errors import DeadlockError

log = logging.getLogger("aiopdbp.stall")

__all__ = ["DEFAULT_STALL_TIMEOUT", "StallWatch", "Wait", "WaitEdge", "Waits", "find_cycle"]

#: seconds a wait on a peer may last before it is reported
DEFAULT_STALL_TIMEOUT = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class WaitEdge:
    """``gp`` (on ``rank``) has waited ``seconds`` for ``resource`` of
    ``waits_for`` (on ``waits_for_rank``)."""

    gp: str
    rank: int
    waits_for: str
    waits_for_rank: int
    resource: str
    seconds: float

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


#: (name, items queued, items ever taken) of each local GP's private pipe
Readers = Callable[[], list[tuple[str, int, int]]]
#: send (edges, idle) to rank 0
Report = Callable[[list[WaitEdge], list[str]], None]
#: tell every rank the cycle
Broadcast = Callable[[tuple[WaitEdge, ...]], None]


class StallWatch:
    """Watches one rank's waits; at rank 0 also finds deadlocks."""

    def __init__(self, rank: int, waits: Waits, readers: Readers, *, timeout: float,
                 report: Report | None = None, broadcast: Broadcast | None = None) -> None:
        self.rank = rank
        self.waits = waits
        self.timeout = timeout
        self._readers = readers
        self._report = report           # None at rank 0: its own view is used directly
        self._broadcast = broadcast
        self._handle: asyncio.TimerHandle | None = None
        self._taken: dict[str, tuple[int, float]] = {}   # name -> (taken, since)
        self._idle_reported: set[str] = set()
        self._views: dict[int, tuple[list[WaitEdge], set[str]]] = {}
        self._last_sent: tuple[frozenset[tuple[str, str]], frozenset[str]] | None = None
        self.stalls = 0                 # waits reported
        self.deadlocks = 0              # cycles found (rank 0) or received

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
        if self._report is not None:
            key = (frozenset((e.gp, e.waits_for) for e in stale), frozenset(idle))
            if key != self._last_sent:
                self._last_sent = key
                self._report(stale, sorted(idle))
        else:
            self.on_report(self.rank, stale, sorted(idle))
        return stale, idle

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
