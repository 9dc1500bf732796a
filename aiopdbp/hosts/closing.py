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
until every host not failed said as much and it all arrived.  When the
close deadline passes first, a warning names the ranks still open where
this rank knows them (rank 0 does; in a job of two ranks the other one):
ranks may finish at different times, and this one goes on waiting for them.

*Holding on.*  A rank that closed early still keeps the names homed on it
(:mod:`aiopdbp.hosts.names`): a rank still open registers, releases, frees
and looks up such names there, and waits for each answer for at most its
reply timeout (the close timeout).  So the early rank waits for the late
ones here, serving its control channel, rather than in the transport's
close (whose closing barrier answers nothing, and discards what comes):
past the deadline its count exchange waits on, unbounded as MPI's own
close would be, until every rank has reached its close (the exchange
completes; what it counts then gets one more close timeout to arrive), a
host fails (a job stop also cancels the close), or the heartbeat saw a
rank leave without closing its node gracefully, or go silent (one more
close timeout, then on as before).  Without a heartbeat
(``host_timeout=0``, a transport without one) the wait ends at the
deadline, as does the BYE wait always.

*The last open rank.*  A rank whose node closes tells rank 0, once it has
sent everything (``ClosingMsg``: one message per rank, nothing on rank 0's
side but a set).  When every rank but one has closed, rank 0 tells that one
(``LastOpenMsg``; rank 0 itself needs no message): from then on only its
own GPs can send to its GPs, and its stall watch reports a GP that waits in
``recv()`` for as long as the stall timeout (:meth:`aiopdbp.stall.StallWatch.last_open`)
-- the hang of a reply that never comes, said instead of silent.  In a job
of more than two ranks rank 0 also names the ranks still open when the
close timeout has passed since the first rank closed, unless its own close
will say it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from typing import Protocol

from aiopdbp.errors import ProtocolError, TransportError
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.inbound import Inbound
from aiopdbp.transport.backoff import Backoff
from aiopdbp.transport.base import Transport
from aiopdbp.wire.control import ByeMsg, ClosingMsg, LastOpenMsg

log = logging.getLogger("aiopdbp.hosts.closing")

__all__ = ["Closing"]


class _Failed(Protocol):
    @property
    def failed(self) -> Collection[int]: ...
    def left(self) -> Collection[int] | None: ...


def ranks(hosts: Collection[int]) -> str:
    """``rank 2``, ``ranks 2, 5``, or ``ranks 2, 5, 7, ... (12 in all)``."""
    shown = sorted(hosts)
    text = ", ".join(map(str, shown[:8])) + (f", ... ({len(shown)} in all)" if len(shown) > 8 else "")
    return f"rank {text}" if len(shown) == 1 else f"ranks {text}"


class Closing:
    """The wait at the end of :meth:`aiopdbp.hosts.remote.Remote.close`,
    and the ranks that closed (see "The last open rank"; ``last_open``:
    called when this rank is the last one open, once).  ``close_timeout``:
    the job's, for rank 0's line about the ranks still open."""

    def __init__(self, rank: int, size: int, transport: Transport, channel: ControlChannel,
                 inbound: Inbound, failures: _Failed, *, last_open: Callable[[], None],
                 close_timeout: float) -> None:
        self.rank, self.size = rank, size
        self._transport = transport
        self._channel = channel
        self._inbound = inbound
        self._failures = failures
        self._last_open = last_open
        self._close_timeout = close_timeout
        self._began = False
        #: rank 0: the ranks whose node closed (ClosingMsg; rank 0's own when it closes)
        self.closed: set[int] = set()
        self._told = False                             # rank 0: the last open rank was told
        self._named: asyncio.TimerHandle | None = None  # rank 0: its line about the ranks open
        self._timeout = close_timeout                  # of the close under way
        self._stopped = False
        self._warned = False                           # the close timeout's line was said

    # ---------------------------------------------------- the last open rank
    def begin(self) -> None:
        """This rank closes its node and sent everything: tell rank 0."""
        if self._began:
            return
        self._began = True
        if self.rank == 0:
            self._closed(0)
        else:
            self._channel.send(0, ClosingMsg(self.rank))

    def on_closing(self, src: int, msg: ClosingMsg) -> None:
        if self.rank != 0 or msg.rank != src:
            raise ProtocolError(f"CLOSING of rank {msg.rank} from host {src} to host {self.rank}")
        self._closed(src)

    def on_last_open(self, src: int, msg: LastOpenMsg) -> None:
        if src != 0 or msg.rank != self.rank:
            raise ProtocolError(f"LAST_OPEN for rank {msg.rank} from host {src} to host {self.rank}")
        self._last_open()

    def _closed(self, rank: int) -> None:
        """Rank 0: ``rank``'s node closed."""
        self.closed.add(rank)
        if self._stopped:
            return
        if not self._told and len(self.closed) == self.size - 1:
            self._told = True
            last = next(r for r in range(self.size) if r not in self.closed)
            if last == 0:
                self._last_open()
            else:
                self._channel.send(last, LastOpenMsg(last))
        if len(self.closed) == self.size:
            self.stop()
        elif self._named is None and self.size > 2 and self._close_timeout > 0:
            # when the first rank to close says that its close timed out
            # (the others' lines cannot name the ranks open; this one can)
            loop = asyncio.get_running_loop()
            self._named = loop.call_later(self._close_timeout, self._name_open)

    def open_ranks(self) -> list[int] | None:
        """The ranks whose node has not closed, where this rank knows them
        (rank 0; in a job of two ranks, the other rank); None otherwise."""
        if self.rank == 0:
            return [r for r in range(self.size) if r not in self.closed]
        return [0] if self.size == 2 else None

    def _name_open(self) -> None:
        still = self.open_ranks() or []
        if self._began or not still:
            return  # rank 0's own close says it, when its close timeout passes
        log.warning("rank 0: %s %g s (the close timeout) after the first rank closed its own; the "
                    "ranks that closed wait for %s", _not_closed(still), self._close_timeout,
                    "it" if len(still) == 1 else "them")

    def stop(self) -> None:
        """No more lines about ranks open, no notice (the node stops, or
        every rank closed)."""
        self._stopped = True
        if self._named is not None:
            self._named.cancel()
            self._named = None

    async def wait(self, sent: dict[int, int], deadline: float, timeout: float) -> None:
        """Wait until what the other hosts sent here arrived (``sent``: the
        data messages this host sent to each), or until ``deadline``
        (``time.monotonic()``: the close began ``timeout`` s before it).

        Cancellation: nothing to undo; the node stops anyway.
        """
        self._timeout = timeout
        if not await self._by_counts(sent, deadline):
            await self._by_bye(sent, deadline)

    async def _by_counts(self, sent: dict[int, int], deadline: float) -> bool:
        """The count exchange; False: close by BYE instead.

        A rank that has not reached its close by ``deadline`` is waited for
        here, not in the transport's close (see "Holding on"): past the
        deadline the wait goes on until the exchange completes -- then what
        it counts gets a close timeout of its own to arrive -- or until the
        heartbeat saw a rank leave or go silent (a node closed without
        waiting, a program that never closed its node; then one more close
        timeout).  Without a heartbeat the wait ends at the deadline."""
        # every rank starts the exchange, failures or not: MPI's collectives
        # must be called in one order on every rank (the transport's closing
        # barrier follows)
        poll = self._transport.exchange_counts([sent.get(h, 0) for h in range(self.size)])
        if poll is None or self._failures.failed:
            return False
        backoff = Backoff(100e-6, 2e-3)
        total: int | None = None
        holding = False     # past the deadline, waiting for the ranks still open
        may_hold = True
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
            if holding and (total is not None or self._failures.left()):
                holding = may_hold = False
                deadline = time.monotonic() + self._timeout
                backoff = Backoff(100e-6, 2e-3)
            if not holding and time.monotonic() > deadline:
                if total is not None:
                    self._not_arrived()
                    return True
                if not self._warned:
                    self._still_open(self.open_ranks())   # a rank has not reached its close
                left = self._failures.left()
                if not may_hold or left is None or len(left):
                    return True
                holding = True
                # nothing to hurry for: the rank still open comes when it comes
                backoff = Backoff(2e-3, 50e-3)
            await backoff.sleep()

    async def _by_bye(self, sent: dict[int, int], deadline: float) -> None:
        """BYE to every host, then wait for every host not failed."""
        for h in range(self.size):
            if h != self.rank:  # also to a failed host: its control channel may work
                self._channel.send(h, ByeMsg(sent.get(h, 0)))
        backoff = Backoff(100e-6, 2e-3)
        while not self._inbound.drained(self._failures.failed):
            if time.monotonic() > deadline:
                silent = self._inbound.without_bye(self._failures.failed)
                if silent:
                    self._still_open(silent)
                else:
                    self._not_arrived()
                break
            await backoff.sleep()

    def _still_open(self, still: list[int] | None) -> None:
        """The close timeout passed before ``still`` (None: ranks not known
        here) closed: ranks may finish at different times -- a warning, not
        an error, and the rank goes on waiting for them (see "Holding on"):
        rank 0 still tells the last open rank."""
        self._warned = True
        if self._named is not None:   # (this line names them)
            self._named.cancel()
            self._named = None
        timeout = self._timeout
        if still:
            log.warning("host %d: %s within the close timeout (%g s); still waiting for %s (ranks may "
                        "finish at different times)", self.rank, _not_closed(still), timeout,
                        "it" if len(still) == 1 else "them")
        else:
            log.warning("host %d: not every rank has closed its node within the close timeout (%g s); "
                        "still waiting for the ranks that have not (rank 0 names them)", self.rank, timeout)

    def _not_arrived(self) -> None:
        self.stop()
        log.error("host %d: every rank closed its node, but what they sent here has not all arrived "
                  "within the close timeout (%g s); closing without it", self.rank, self._timeout)


def _not_closed(still: Collection[int]) -> str:
    """``rank 2 has not closed its node``, ``ranks 2, 5 have not closed their nodes``."""
    return f"{ranks(still)} {'has' if len(still) == 1 else 'have'} not closed " \
           f"{'its node' if len(still) == 1 else 'their nodes'}"
