"""One node's view of the other hosts: the parts of ``hosts/`` put together.

Theory of operation
-------------------
:class:`Remote` is the multi-host half of a node and the one door of
``hosts/`` the node uses.  It builds, at construction, the parts that each
own one job, and hands each what it needs:

==========================  ===============================================
:class:`ControlChannel`     typed control messages out and in, counted
                            (:mod:`aiopdbp.hosts.channel`)
:class:`Sequencer`          initialisation (Fig. 6) and, as its ``names``
                            (:class:`NameService`), the GP names, each kept
                            by its home host (:mod:`~aiopdbp.hosts.sequencer`,
                            :mod:`~aiopdbp.hosts.names`; the home's side:
                            :mod:`~aiopdbp.hosts.namehome`)
:class:`Inbound`            the receive pool (RBP), decoding, delivery to
                            the arrivals and the streams (:mod:`~aiopdbp.hosts.inbound`)
:class:`Credit`             the links to the other hosts and their per-GP
                            and stream credit (:mod:`~aiopdbp.hosts.credit`)
:class:`HostFailures`       failed and lost hosts, liveness, job-wide stops;
                            :class:`StallRelay`: stall reports
                            (:mod:`~aiopdbp.hosts.failure`)
==========================  ===============================================

It owns the DDBP (:class:`~aiopdbp.pool.BufferPool`): the links send
from its SBP, :class:`Inbound` receives into its RBP.

*Dual channel.*  A data message from the transport goes to
:class:`Inbound`; a control message is decoded by the channel and handed
(:class:`~aiopdbp.hosts.channel.Dispatch`) to the one part that handles its
kind.

*Upwards.*  ``hosts/`` imports nothing above it: the routing layer's
arrivals and the stream table are reached through the small protocols :class:`ArrivalsPort` and
:class:`StreamPort`, the running job through the ``job`` callable, all handed
in by the node.  The node in turn reaches the Remote from the parts built
before it (it serves them) through one
:class:`~aiopdbp.runtime.remoteside.RemoteSide`: the router gets its
forwarder to :meth:`Remote.link`, the arrivals its one to
:meth:`Remote.grant`, and the stream table the RemoteSide itself, for
:meth:`Remote.send_done` and :meth:`Remote.send_credit`.

*Closing.*  :meth:`close` flushes every link and waits until everything the
other hosts sent here has arrived (:class:`~aiopdbp.hosts.closing.Closing`: the
transport's count exchange, or BYE to every host), bounded by ``close_timeout``
-- past it, a rank waiting for ranks still open holds on, still dispatching
their control messages (see "Holding on" there); rank 0 learns from it which
ranks closed, and tells the last one open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from aiopdbp.env import unlink_own_shm
from aiopdbp.errors import ProtocolError, TransportError
from aiopdbp.hosts.channel import ControlChannel, Dispatch
from aiopdbp.hosts.closing import Closing
from aiopdbp.hosts.credit import Credit, CreditLedger, StreamControl
from aiopdbp.hosts.failure import Beat, HostFailures, JobControl, LostCallback, StallRelay, Stop
from aiopdbp.hosts.inbound import RBP_MIN, Deliver, Inbound, StreamSink
from aiopdbp.hosts.link import HostLink
from aiopdbp.hosts.sequencer import Sequencer
from aiopdbp.hosts.tables import Tables
from aiopdbp.pool import BufferPool
from aiopdbp.stall import StallWatch, WaitEdge
from aiopdbp.transport.base import Channel, Transport

if TYPE_CHECKING:
    from aiopdbp.hosts.linkstats import LinkStats

log = logging.getLogger("aiopdbp.hosts.remote")

__all__ = ["Remote", "RemoteConfig", "RemoteStats", "ArrivalsPort", "StreamPort"]

_CTRL = Channel.CONTROL

#: default UMB blocks of a rank: one budget shared by the rows of every peer
#: it talks to (rows are made at first traffic; empty ones give their space
#: to new peers when it runs out), so memory stops growing with the job size
POOL_BUDGET = 2048


@dataclass(frozen=True)
class RemoteStats:
    """The multi-host counters of a node (:meth:`Remote.snapshot`).

    ``links`` per host, ``received`` data messages per host,
    ``protocol_errors`` malformed messages received (data and control),
    ``fallback_allocs`` receives that found their receive-pool row full,
    ``failed_hosts`` hosts that can no longer be talked to, ``pool`` the
    buffer pools, ``liveness`` the heartbeats, ``messages_sent`` /
    ``messages_received`` per host and kind: the control kinds by class
    name (``"TableMsg"``, ...) and ``"data"`` for data-channel messages.
    """

    links: dict[int, LinkStats] = field(default_factory=dict)
    received: dict[int, int] = field(default_factory=dict)
    protocol_errors: int = 0
    fallback_allocs: int = 0
    failed_hosts: tuple[int, ...] = ()
    pool: dict[str, Any] = field(default_factory=dict)
    liveness: dict[str, Any] = field(default_factory=dict)
    messages_sent: dict[int, dict[str, int]] = field(default_factory=dict)
    messages_received: dict[int, dict[str, int]] = field(default_factory=dict)


@dataclass
class RemoteConfig:
    """Tunables of a job of several ranks (all per host), given to
    ``open_node(remote=RemoteConfig(...))``; the defaults suit most jobs
    (see :doc:`/operations` for when to change them).

    Args:
        block_size: bytes of one block into which small messages for one
            host are coalesced: the largest coalesced MPI message.
        pool_blocks: blocks in this host's buffer pools; 0: 32 per other
            host and direction, within a fixed memory budget.
        row_capacity: the most blocks one other host's sub-pool may grow to.
        initial: blocks a sub-pool starts with.
        threshold: how full a sub-pool must be (0 to 1) before it grows.
        gp_window: bytes of messages one other host may have in flight
            towards one GP here (its credit): what bounds a fast sender.
        large: payloads of at least this many bytes travel on their own, as
            one MPI message from the sender's buffer (no copy), instead of
            being coalesced.
        max_inflight: MPI sends posted at once towards one host.
        handshake_timeout: seconds every rank has to join at start-up;
            ``None``: the node's ``handshake_timeout``.
        close_timeout: seconds closing the node (and a request to rank 0)
            may wait for the other ranks.
        bind_timeout: seconds messages for a GP wait here for its
            registration or inbox to arrive before they are dropped.
        lost_grace: seconds between a lost host's report and the end of the
            job.
        reclaim_after: seconds after which the buffer-pool rows of a peer
            this host no longer talks to are given back (checked every
            ``reclaim_after`` seconds, so a row goes after one to two of
            them; made again at the next traffic); 0: never.
    """

    block_size: int = 64 << 10        # UMB block = largest coalesced message (stays eager)
    pool_blocks: int = 0              # UMB blocks; 0: 32 per remote host per matrix, at most POOL_BUDGET
    row_capacity: int = 32            # N, cells of one sub-pool row
    initial: int = 4                  # m, initial real cells per row (Algorithm 1 step 1)
    threshold: float = 0.5            # Algorithm 1 threshold on SU
    gp_window: int = 1 << 20          # credit: message bytes a host may have outstanding per GP here
    large: int = 32 << 10             # payloads >= this travel as split zero-copy frames
    max_inflight: int = 16            # posted data sends per host
    handshake_timeout: float | None = None  # None: the node's name_timeout (30 s)
    close_timeout: float = 60.0
    bind_timeout: float = 30.0        # keep CDUs for a GP whose binding has not arrived yet
    lost_grace: float = 1.0           # between reporting a lost host and aborting the job
    reclaim_after: float = 30.0       # idle seconds before a peer's pool rows are given back


class ArrivalsPort(Deliver, CreditLedger, Protocol):
    """What ``hosts/`` needs of the routing layer's arrivals
    (:class:`aiopdbp.routing.arrivals.Arrivals`): placing them, and its credit book."""


class StreamPort(StreamSink, StreamControl, Protocol):
    """What ``hosts/`` needs of the stream table (:class:`aiopdbp.streams.table.StreamTable`)."""

    def break_host(self, host: int, exc: BaseException) -> None: ...


def _no_job() -> JobControl | None:
    return None


def _nothing() -> None:
    return None


class Remote:
    """The multi-host half of a :class:`~aiopdbp.runtime.node.Node`.

    ``host_timeout``: liveness, seconds of silence before a host is lost
    (0: no heartbeat); ``job``: the running job, if any, asked to stop when a
    peer fails or a host is lost.
    """

    def __init__(self, transport: Transport, cfg: RemoteConfig, tables: Tables, arrivals: ArrivalsPort,
                 streams: StreamPort, *, allow_pickle: bool, stall: StallWatch | None = None,
                 host_timeout: float = 0.0,
                 job: Callable[[], JobControl | None] = _no_job) -> None:
        self.transport = transport
        self.cfg = cfg
        self.rank = rank = transport.rank
        self.size = size = transport.size
        self.host_timeout = host_timeout
        self._streams = streams
        nblocks = cfg.pool_blocks or min(2 * 32 * max(1, size - 1), POOL_BUDGET)
        self.pool = BufferPool(size, cfg.row_capacity, cfg.block_size, nblocks, cfg.initial,
                               cfg.threshold, local=rank)
        self.channel = ControlChannel(transport)
        self.sequencer = Sequencer(rank, size, tables, self.channel, gp_window=cfg.gp_window,
                                   reply_timeout=cfg.close_timeout, deliver=arrivals.deliver_carried)
        self.credit = Credit(rank, size, transport, self.pool.send, self.channel, arrivals, streams,
                             window=self.sequencer.window, block_size=cfg.block_size, large=cfg.large,
                             max_inflight=cfg.max_inflight, allow_pickle=allow_pickle,
                             on_link=self.sequencer.names.announce)
        self.failures = HostFailures(rank, size, self.channel, break_host=self._break_host,
                                     stop_waiting=self.sequencer.stop_waiting, job=job,
                                     heartbeat=self._heartbeat, lost_grace=cfg.lost_grace)
        self.inbound = Inbound(rank, size, self.pool.recv, arrivals, streams, name_of=tables.name_of,
                               fail_host=self.failures.protocol_error, block_size=cfg.block_size,
                               allow_pickle=allow_pickle, bulk=transport,
                               landing=getattr(getattr(arrivals, "landings", None), "take", None),
                               waiting=getattr(getattr(arrivals, "landings", None), "posted", None),
                               names=tables.names,
                               book=getattr(arrivals, "book", None),
                               # grants ride on split headers only where payloads travel apart (bulk tags)
                               on_credit=self.credit.on_credit if getattr(transport, "bulk_tags", 0) else None)
        self.stalls = StallRelay(rank, size, self.channel, stall, lambda h: h in self.failures.failed)
        self._closing_wait = Closing(rank, size, transport, self.channel, self.inbound, self.failures,
                                     last_open=stall.last_open if stall is not None else _nothing,
                                     close_timeout=cfg.close_timeout)
        names = self.sequencer.names
        self._dispatch = Dispatch(self.sequencer, names, names.home, self.sequencer.carrier, self.inbound,
                                  self.credit, self.failures, self.stalls, self._closing_wait)
        self._closing = False
        self._reclaim: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ start
    async def start(self) -> None:
        """Join the other hosts and run the initialisation sequence (Fig. 6).

        Cancellation: leaves the transport started; ``stop()`` cleans up.
        """
        cfg = self.cfg
        timeout = cfg.handshake_timeout if cfg.handshake_timeout is not None else 30.0
        self.sequencer.prepare()
        await self.transport.start(self._on_message, self.inbound.alloc, alloc_min=RBP_MIN,
                                   on_data=self.inbound.on_data)
        self.failures.start(asyncio.get_running_loop())
        await self.sequencer.handshake(timeout)
        # Every rank of the job has started MPI (the start-up's info came
        # from each), so every rank here has mapped MPICH's shared-memory
        # segments: their names can go now, and a rank killed later (kill
        # -9, the out-of-memory killer), even under a plain mpiexec that
        # cleans nothing, leaves none in /dev/shm.
        unlink_own_shm()
        # A link (its block, credit book and counters) is made at the first
        # send to its host (Credit.link), so a rank pays for the peers it talks to;
        # the pool rows too, and those of peers it stopped talking to go back.
        self._reclaim_idle()

    def _reclaim_idle(self) -> None:
        """Give back the pool rows of idle peers; again in ``reclaim_after`` seconds."""
        self._reclaim = None
        if self.cfg.reclaim_after <= 0 or self._closing or self.pool.send.closed:
            return
        self.pool.send.matrix.reclaim_idle()
        self.pool.recv.matrix.reclaim_idle()
        self._reclaim = asyncio.get_running_loop().call_later(self.cfg.reclaim_after, self._reclaim_idle)

    def _heartbeat(self, on_lost: Callable[[int], None]) -> Beat | None:
        """Start the heartbeat thread (MPI transports; see aiopdbp.hosts.liveness)."""
        comm = getattr(self.transport, "control_comm", None)
        if self.host_timeout <= 0 or comm is None:
            return None
        from aiopdbp.hosts.liveness import Heartbeat

        hb = Heartbeat(comm, (getattr(self.transport, "tag", 0) + 16384) % 32768,
                       interval=min(1.0, self.host_timeout / 10), timeout=self.host_timeout,
                       on_lost=lambda rank, silence: on_lost(rank))
        try:
            hb.start()
        except TransportError as exc:
            log.warning("no liveness heartbeat: %s", exc)
            return None
        return hb

    def _on_message(self, src: int, channel: Channel, buf: memoryview) -> None:
        if channel != _CTRL:
            self.inbound.on_data(src, buf)
            return
        try:
            msg = self.channel.decode(src, buf)
        except ProtocolError as exc:
            log.error("malformed control message from host %d: %s", src, exc)
            self.failures.protocol_error(src, ProtocolError(f"malformed control message from host {src}: {exc}"))
            return
        try:
            self._dispatch(src, msg)
        except ProtocolError as exc:  # a message out of place (a second BYE, ...)
            log.error("control message out of place from host %d: %s", src, exc)
            self.failures.protocol_error(src, ProtocolError(f"{type(msg).__name__} from host {src}: {exc}"))

    def _break_host(self, host: int, exc: BaseException) -> None:
        self.credit.fail(host, exc)
        self.sequencer.carrier.break_host(host, exc)
        self._streams.break_host(host, exc)

    # ------------------------- what the node, the router and the arrivals use
    def link(self, host: int) -> HostLink:
        """The link to ``host`` (made on first use): the router's target for its GPs."""
        return self.credit.link(host)

    def grant(self, host: int, grants: list[tuple[int, int]]) -> None:
        """Give ``host`` credit back for GPs here (the arrivals call it)."""
        self.credit.grant(host, grants)

    def send_done(self, host: int, key: tuple[int, int], error: str | None) -> None:
        """Stream ``key`` ended (the stream table's StreamPeers)."""
        self.credit.send_done(host, key, error)

    def send_credit(self, host: int, key: tuple[int, int], segments: int) -> None:
        """Stream credit for ``host`` (the stream table's StreamPeers)."""
        self.credit.send_credit(host, key, segments)

    async def commit(self, op: str, args: tuple[Any, ...]) -> Any:
        """Apply a table update in the cluster-wide order; return its result.

        Cancellation: see :meth:`aiopdbp.hosts.sequencer.Sequencer.commit`.
        """
        return await self.sequencer.commit(op, args)

    def commit_nowait(self, op: str, args: tuple[Any, ...]) -> None:
        """Ask for a table update without waiting for it."""
        self.sequencer.commit_nowait(op, args)

    def send_stall(self, edges: list[WaitEdge], idle: list[str]) -> None:
        """This rank's stale waits, to rank 0's deadlock detector."""
        self.stalls.send_stall(edges, idle)

    def send_deadlock(self, cycle: tuple[WaitEdge, ...]) -> None:
        """Rank 0: every other rank fails its waits of ``cycle``."""
        self.stalls.send_deadlock(cycle)

    # job-wide stops (aiopdbp.runtime.job.Peer)
    def tell_peers(self, stop: Stop) -> None:
        """Tell every other rank that this job stops (our interrupt or failure)."""
        self.failures.tell_peers(stop)

    async def wait_acks(self, timeout: float) -> bool:
        """Wait until every other rank acknowledged our failure notice.

        Cancellation: nothing to undo.
        """
        return await self.failures.wait_acks(timeout)

    async def wait_lost(self) -> tuple[int, BaseException]:
        """The first lost host: ``(rank, HostLostError)``.

        Cancellation: nothing to undo.
        """
        return await self.failures.wait_lost()

    def add_lost_callback(self, callback: LostCallback) -> None:
        self.failures.add_lost_callback(callback)

    # ---------------------------------------------------------------- close
    async def flush(self, timeout: float = float("inf")) -> None:
        """Wait until every link has handed its CDUs to MPI and the sends
        completed.

        Cancellation: nothing to undo.
        """
        if not await self.credit.flush(timeout):
            log.error("host %d: gave up flushing after the close timeout", self.rank)

    async def close(self, *, timeout: float | None = None) -> None:
        """Flush every link, wait (count exchange or BYE) until everything sent to us
        was delivered; then stop.  Idempotent.

        Cancellation: stops at once (no drain) and still releases resources.
        """
        if self._closing:
            return
        self._mark_closing()
        timeout = self.cfg.close_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        try:
            await self.flush(timeout)
            self.credit.flush_grants()
            self._closing_wait.begin()   # rank 0 learns which rank is the last one open
            await self._closing_wait.wait(self.credit.sent(), deadline, timeout)
        finally:
            self.failures.stop_heartbeat()  # before the transport frees the communicator it uses
            self.stop()

    def _mark_closing(self) -> None:
        self._closing = True
        if self._reclaim is not None:
            self._reclaim.cancel()
            self._reclaim = None
        self.sequencer.mark_closing()
        self.failures.close()

    def stop(self) -> None:
        """Fail every pending request; release the pool."""
        self._mark_closing()
        self.failures.stop_heartbeat(0.2)
        self._closing_wait.stop()
        self.sequencer.close()
        self.pool.close()

    # ------------------------------------------------------------ statistics
    def size_history(self, host: int) -> dict[str, list[tuple[float, int]]]:
        """Real size over time of the sub-pools for ``host``: SCBP and RCBP
        (the Algorithm 1 statistic)."""
        return {"send": self.pool.send.size_history(host), "recv": self.pool.recv.size_history(host)}

    def snapshot(self) -> RemoteStats:
        """The counters of the parts, read now (``node.stats()`` reports them)."""
        sent, recv = self.channel.counts()
        for h, n in self.credit.sent().items():
            if n:
                sent.setdefault(h, {})["data"] = n
        received = self.inbound.received()
        for h, n in received.items():
            if n:
                recv.setdefault(h, {})["data"] = n
        return RemoteStats(
            links=self.credit.stats(), received=received,
            protocol_errors=self.inbound.protocol_errors + self.channel.protocol_errors,
            fallback_allocs=self.inbound.fallback_allocs,
            failed_hosts=tuple(sorted(self.failures.failed)), pool=self.pool.stats(),
            liveness=self.failures.liveness_stats(), messages_sent=sent, messages_received=recv)
