"""A host's graceful close: wait until everything the other hosts sent it has arrived.

Theory of operation
-------------------
Every host, once it has flushed its links, takes part in the transport's
count exchange (:meth:`~aiopdbp.transport.base.Transport.exchange_counts`):
each says how many data messages it sent to each host, and each learns how
many all the others together sent it -- over MPI one
``MPI_Ireduce_scatter_block``, log2(N) rounds of MPI's own, so a closing host
talks only to the peers it talked to before.  It then waits until as many
have arrived (:meth:`~aiopdbp.hosts.inbound.Inbound.arrived`).

Without the exchange (a transport that has none), or when it cannot complete
(a failed host, a peer gone without taking part), the host closes by BYE
instead: it tells every host how many data messages it sent it, and waits
until every host not failed said as much and it all arrived.  Both waits
end at the close deadline, with an error logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Protocol

from aiopdbp.errors import TransportError
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.inbound import Inbound
from aiopdbp.transport.backoff import Backoff
from aiopdbp.transport.base import Transport
from aiopdbp.wire.control import ByeMsg

log = logging.getLogger("aiopdbp.hosts.closing")

__all__ = ["Closing"]


class _Failed(Protocol):
    @property
    def failed(self) -> Collection[int]: ...


class Closing:
    """The wait at the end of :meth:`aiopdbp.hosts.remote.Remote.close`."""

    def __init__(self, rank: int, size: int, transport: Transport, channel: ControlChannel,
                 inbound: Inbound, failures: _Failed) -> None:
        self.rank, self.size = rank, size
        self._transport = transport
        self._channel = channel
        self._inbound = inbound
        self._failures = failures

    async def wait(self, sent: dict[int, int], deadline: float) -> None:
        """Wait until what the other hosts sent here arrived (``sent``: the
        data messages this host sent to each), or until ``deadline``
        (``time.monotonic()``).

        Cancellation: nothing to undo; the node stops anyway.
        """
        if not await self._by_counts(sent, deadline):
            await self._by_bye(sent, deadline)

    async def _by_counts(self, sent: dict[int, int], deadline: float) -> bool:
        """The count exchange; False: close by BYE instead."""
        # every rank starts the exchange, failures or not: MPI's collectives
        # must be called in one order on every rank (the transport's closing
        # barrier follows)
        poll = self._transport.exchange_counts([sent.get(h, 0) for h in range(self.size)])
        if poll is None or self._failures.failed:
            return False
        backoff = Backoff(100e-6, 2e-3)
        total: int | None = None
        while True:
            if total is None:
                try:
                    total = poll()
                except TransportError:
                    return False
            if total is not None and self._inbound.arrived(total):
                return True
            if self._failures.failed:
                return False
            if time.monotonic() > deadline:
                self._gave_up()
                return True
            await backoff.sleep()

    async def _by_bye(self, sent: dict[int, int], deadline: float) -> None:
        """BYE to every host, then wait for every host not failed."""
        for h in range(self.size):
            if h != self.rank:  # also to a failed host: its control channel may work
                self._channel.send(h, ByeMsg(sent.get(h, 0)))
        backoff = Backoff(100e-6, 2e-3)
        while not self._inbound.drained(self._failures.failed):
            if time.monotonic() > deadline:
                self._gave_up()
                break
            await backoff.sleep()

    def _gave_up(self) -> None:
        log.error("host %d: gave up waiting for the other hosts to close after the close timeout",
                  self.rank)
