"""Synchronous computations among GPs (SPEC section 10): barriers and neighbours.

Theory of operation
-------------------
Full synchronisation is a :class:`Barrier`: every member of a named group,
on any hosts, waits until all have arrived (``MPI_Barrier`` semantics), with
a choice of algorithm -- counter (centralised, O(n)), binomial tree,
dissemination or butterfly (O(log n) steps) -- and an ``allreduce`` that
combines a value from every member in the same round.  Local
synchronisation is :class:`Neighbours`: a GP exchanges data (halos) with
its named neighbours only and waits for them alone.

Both are built on GPs, as any program is: each member gets a companion GP,
so sync traffic never mixes with the member's own messages; every message
carries a tag (op, step, round, sender) and a message that overtakes its
round waits in a stash.  A member that leaves, fails or whose host goes
away is seen by the others, and their rounds fail with a
:class:`~aiopdbp.errors.BarrierError` instead of waiting forever.

* :mod:`~aiopdbp.sync.member` -- the shared machinery (:class:`SyncMember`):
  companions, tags, the stash, failure and closing.
* :mod:`~aiopdbp.sync.barriers` -- :class:`Barrier`, its algorithms and
  statistics (:class:`BarrierStats`, :func:`aggregate_stats`).
* :mod:`~aiopdbp.sync.neighbours` -- :class:`Neighbours`.
"""

from __future__ import annotations

from aiopdbp.sync.barriers import (
    ALGORITHMS,
    Barrier,
    BarrierStats,
    BarrierSummary,
    aggregate_stats,
    messages_for,
    steps_for,
)
from aiopdbp.sync.member import BarrierTimeoutError
from aiopdbp.sync.neighbours import NeighbourStats, Neighbours

__all__ = [
    "ALGORITHMS", "Barrier", "BarrierStats", "BarrierSummary", "BarrierTimeoutError",
    "NeighbourStats", "Neighbours", "aggregate_stats", "messages_for", "steps_for",
]
