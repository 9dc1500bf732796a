"""Local synchronisation: a GP exchanges data with its named neighbours only (SPEC section 10).

No global barrier: before each iteration of a Jacobi or heat-distribution
code a GP exchanges halos with its neighbours and waits for them alone::

    nb = Neighbours(gp, "heat", ["strip-2", "strip-4"])
    halos = await nb.exchange({"strip-2": top_row, "strip-4": bottom_row})

Companions, tags, failure and closing are :mod:`aiopdbp.sync.member`'s, as
for a barrier.  A neighbour's companion names the sender of a halo by its
pid (resolved before the first exchange), not by an index: a neighbour list
is each member's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiopdbp.errors import BarrierError
from aiopdbp.runtime.process import GP
from aiopdbp.wire.message import Message
from aiopdbp.sync.member import OP_HALO, UNSET, SyncMember

__all__ = ["NeighbourStats", "Neighbours"]


@dataclass
class NeighbourStats:
    """What one member of a :class:`Neighbours` group did: ``exchanges``
    completed, halo messages ``sent`` and ``received`` (cumulative)."""

    member: str
    neighbours: tuple[str, ...]
    exchanges: int = 0
    sent: int = 0
    received: int = 0


class Neighbours(SyncMember):
    """Local synchronisation: exchange data with named neighbour GPs only.

    ``Neighbours(gp, group, neighbours)``: every GP of the group creates one
    with the same ``group`` and its own neighbour list; the relation must be
    symmetric (if ``a`` lists ``b``, ``b`` lists ``a``).  Each
    :meth:`exchange` sends one item to every neighbour and returns one item
    from every neighbour, of the same exchange (round-tagged: a fast
    neighbour's next halo is held back, never mixed).  No global barrier is
    involved: a GP waits only for its neighbours.

    Cleanup: as for :class:`~aiopdbp.sync.barriers.Barrier` (an async context
    manager, closed by its GP when the GP is freed if the program did not
    close it).

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
                       timeout: float | None = UNSET) -> dict[str, Any]:
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
                self._gone.check((), asyncio.get_running_loop().time(), True, self._round)
            if len(self._pid_index) < len(self._names):
                for j in self._peer_indices:    # resolve every sender before reading
                    if j not in self._ready:
                        self._learn(j, await self._await_peer(j, deadline, t))
            for j, name in enumerate(self._names):
                await self._send(j, OP_HALO, 0, outgoing[name], 0, deadline, t)
                self.stats.sent += 1
            got = await self._gather(self._peer_indices, OP_HALO, 0, deadline, t)
        except BaseException as exc:
            err = self._fail(exc)
            if isinstance(exc, (BarrierError, asyncio.CancelledError)):
                raise
            raise err from exc
        finally:
            self._busy = False
        self._round += 1
        self.stats.exchanges = self._round
        return {self._names[j]: got[j] for j in self._peer_indices}

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
