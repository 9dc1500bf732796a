"""The node's other hosts, as the parts built before its Remote reach them.

On more than one rank a :class:`~aiopdbp.runtime.node.Node` builds its
:class:`~aiopdbp.hosts.remote.Remote` last: the Remote serves the router, the
arrivals, the stream table and the stall watch, which are built before it
and are handed its methods as callables.  A :class:`RemoteSide` is made
first, its bound methods are what those parts get, and the node attaches the
Remote to it once the Remote exists -- no part is ever given an attribute
after its construction.  On one host there is no RemoteSide: the parts get
``None`` for every callable.
"""

from __future__ import annotations

from typing import Any

from aiopdbp.hosts.remote import Remote
from aiopdbp.routing.router import Target
from aiopdbp.stall import WaitEdge
from aiopdbp.wire.mesp import Kind

__all__ = ["RemoteSide"]


class RemoteSide:
    """The Remote a node's parts reach, attached once it is built
    (:meth:`attach`); every method forwards to it.  Its ``send_done`` and
    ``send_credit`` make it the stream table's
    :class:`~aiopdbp.streams.table.StreamPeers`."""

    __slots__ = ("_remote",)

    def __init__(self) -> None:
        # assigned by attach() before the node's constructor returns; a call
        # before that fails loudly (AttributeError) instead of doing nothing
        self._remote: Remote

    def attach(self, remote: Remote) -> None:
        """The node's Remote, now built: what every method below forwards to."""
        self._remote = remote

    # -- the router: where a GP of another host is reached; its name asked for
    def link(self, host: int) -> Target:
        return self._remote.link(host)

    def want(self, name: str) -> None:
        self._remote.sequencer.names.want(name)

    def want_pid(self, pid: int) -> None:
        self._remote.sequencer.names.want_pid(pid)

    def recheck(self, name: str) -> bool:
        return self._remote.sequencer.names.recheck(name)

    async def carry(self, name: str, fields: tuple[str, Kind, int, Any, int]) -> bool:
        return await self._remote.sequencer.carrier.carry(name, fields)

    # -- the arrivals: credit back to a sending host
    def grant(self, host: int, grants: list[tuple[int, int]]) -> None:
        self._remote.grant(host, grants)

    # -- the stream table: a stream's other end
    def send_done(self, host: int, key: tuple[int, int], error: str | None) -> None:
        self._remote.send_done(host, key, error)

    def send_credit(self, host: int, key: tuple[int, int], segments: int) -> None:
        self._remote.send_credit(host, key, segments)

    # -- the stall watch: reports to rank 0, a deadlock to every rank
    def send_stall(self, edges: list[WaitEdge], idle: list[str]) -> None:
        self._remote.send_stall(edges, idle)

    def send_deadlock(self, cycle: tuple[WaitEdge, ...]) -> None:
        self._remote.send_deadlock(cycle)
