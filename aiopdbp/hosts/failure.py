"""Failing hosts: liveness, job-wide stops, stalls -- naming the culprit.

Theory of operation
-------------------
*A failed host.*  :meth:`HostFailures.fail_host` is the one way a host stops
being talked to (a malformed message, its stop notice, its loss): the first
cause is kept and everything that depends on the host -- its link, the
streams to and from it -- fails with that cause.

*A peer that breaks the protocol.*  :meth:`HostFailures.protocol_error`
fails the host and then the whole job, blaming the sending rank: a peer
whose frames cannot be trusted cannot be trusted to close either (it may
wait for an answer that the failed link never carries), so every rank is
told (``StopMsg`` naming the sender and its ``ProtocolError``), the
sender included, and exits as after any rank's failure.  The sender, which
has no traceback of its own to show, prints that it was failed by host N
and for what (``Stop.by``), so the user sees both sides.

*Liveness.*  With a ``host_timeout`` a heartbeat thread
(:mod:`aiopdbp.hosts.liveness`, started through the ``heartbeat`` callable
handed in at construction) notices a host that went silent -- but only a
host of its watch set, the few ranks next to it on a ring, so that beating
costs O(1) per rank.  :meth:`HostFailures.host_lost` then fails it with a
:class:`~aiopdbp.errors.HostLostError` naming it, tells the program (callbacks,
:meth:`HostFailures.wait_lost`) and, under ``aiopdbp.run``, asks the job to
stop ``lost_grace`` later.  Every other rank must hear of it too (its
program waits on ``host_lost()``, its sends to the lost host must fail, its
abort line names it), without the watcher talking to every peer: the
watcher sends a ``LostMsg`` down a binomial tree over the ring positions
counted from itself (:func:`spread_targets`): the rank at a position passes
it on for the ``span`` positions from its own, halving the span at each
send, so every live rank hears of it in O(log n) hops and sends O(log n)
messages; lost ranks are skipped, their positions handed to the next live
one.  Each watcher of the lost rank starts its own tree and every rank
passes on every notice it gets (at most one per tree), so a second rank
dead inside one tree does not cut its subtree off from the others.

*Job-wide stops.*  A :class:`Stop` says why a job stops early and where it
started.  :meth:`HostFailures.tell_peers` sends it to every other rank
(``StopMsg``); a rank that hears of a peer's failure prints its line (the
job, reached through the ``job`` callable) and acknowledges
(``StopAckMsg``); the failing rank waits for the acks
(:meth:`HostFailures.wait_acks`) before it exits.  From then on no table
request is answered (``stop_waiting``).

*Stalls.*  :class:`StallRelay` carries the stall watch's reports to rank 0's
deadlock detector (``StallMsg``) and rank 0's verdict back (``DeadlockMsg``).

This module imports nothing above ``hosts/``: the job is reached through
the :class:`JobControl` door, the streams through a ``break_host`` callable.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import signal
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from aiopdbp.env import record_failure
from aiopdbp.errors import HostLostError, ProtocolError, RankFailedError
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.stall import StallWatch, WaitEdge
from aiopdbp.transport.backoff import Backoff
from aiopdbp.wire.control import DeadlockMsg, LostMsg, StallMsg, StopAckMsg, StopMsg
from aiopdbp.records import FrozenRecord, init_field

log = logging.getLogger("aiopdbp.hosts.failure")

__all__ = ["Beat", "HostFailures", "JobControl", "LostCallback", "StallRelay", "Stop", "StopKind",
           "spread_targets", "where"]


class StopKind(enum.Enum):
    """Why a job stops early."""

    INTERRUPTED = "interrupted"      # a signal, here or on a peer
    PEER_FAILED = "peer failed"      # another rank's program raised
    HOST_LOST = "host lost"          # a host went silent (liveness)


class Stop(FrozenRecord):
    """One reason to stop: ``rank`` is where it happened."""

    __slots__ = ("kind", "rank", "signal", "message", "gp", "by")
    kind: StopKind
    rank: int
    signal: int
    message: str
    gp: str  # the GP the failure left, when known
    by: int  # the rank that failed ``rank`` for a protocol error (-1: it failed itself)

    def __init__(self, kind: StopKind,
                 rank: int,
                 signal: int = 0,
                 message: str = "",
                 gp: str = "",
                 by: int = -1) -> None:
        init_field(self, "kind", kind)
        init_field(self, "rank", rank)
        init_field(self, "signal", signal)
        init_field(self, "message", message)
        init_field(self, "gp", gp)
        init_field(self, "by", by)

    def describe(self) -> str:
        if self.kind is StopKind.INTERRUPTED:
            return f"interrupted by {signal.Signals(self.signal).name} (on rank {self.rank})"
        if self.kind is StopKind.HOST_LOST:
            return f"{self.message}; aborting the job"
        if self.by >= 0:
            return f"{where(self.rank, self.gp)} was failed by host {self.by} for a protocol error: {self.message}"
        return f"{where(self.rank, self.gp)} failed: {self.message}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signal if self.kind is StopKind.INTERRUPTED else 1


def summary(exc: BaseException) -> str:
    """``ProtocolError: bad version``: an exception in one line."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def where(rank: int, gp: str = "") -> str:
    """``rank 1 (GP g1)``, or ``rank 1`` when the GP is not known."""
    return f"rank {rank} (GP {gp})" if gp else f"rank {rank}"


def spread_targets(me: int, origin: int, span: int, size: int, skip: Collection[int]) -> list[tuple[int, int]]:
    """Whom rank ``me`` passes a notice on to, as ``(rank, span)`` pairs, when
    it is responsible for the ``span`` ring positions from its own, positions
    counted from ``origin`` (position 0) on the ring of ``size`` ranks: it
    hands the upper half of what is left to the first rank of that half not
    in ``skip`` (which then answers for the rest of the half), and halves
    again, until it answers for itself alone (see "Liveness")."""
    pos = (me - origin) % size
    end = min(pos + span, size)
    out: list[tuple[int, int]] = []
    while end - pos > 1:
        mid = pos + (end - pos + 1) // 2
        for q in range(mid, end):
            rank = (origin + q) % size
            if rank not in skip:
                out.append((rank, end - q))
                break
        end = mid
    return out


class JobControl(Protocol):
    """What failure handling asks of the running job (:class:`aiopdbp.runtime.job.Job`)."""

    def request_stop(self, stop: Stop, *, tell: bool = True) -> None: ...


class Beat(Protocol):
    """The liveness heartbeat (:class:`aiopdbp.hosts.liveness.Heartbeat`) as seen here."""

    def error(self, rank: int) -> HostLostError: ...
    def stop(self, timeout: float = 1.0) -> None: ...
    @property
    def lost(self) -> frozenset[int]: ...
    @property
    def departed(self) -> frozenset[int]: ...
    def stats(self) -> dict[str, Any]: ...


#: ``callback(rank, HostLostError)``: the program hears of a lost host
LostCallback = Callable[[int, BaseException], None]


class HostFailures:
    """Which hosts failed and why; liveness; the job-wide stop notices."""

    def __init__(self, rank: int, size: int, channel: ControlChannel, *,
                 break_host: Callable[[int, BaseException], None],
                 stop_waiting: Callable[[BaseException], None],
                 job: Callable[[], JobControl | None],
                 heartbeat: Callable[[Callable[[int], None]], Beat | None],
                 lost_grace: float) -> None:
        self.rank = rank
        self.size = size
        self._channel = channel
        self._break_host = break_host
        self._stop_waiting = stop_waiting
        self._job = job
        self._start_beat = heartbeat
        self._lost_grace = lost_grace
        self.failed: dict[int, BaseException] = {}   # host -> what broke it
        self.lost: dict[int, BaseException] = {}
        self.peer_stop: Stop | None = None
        self._acks: set[int] | None = None
        self._protocol_stop = False
        self._closing = False
        self._heartbeat: Beat | None = None
        self._lost_callbacks: list[LostCallback] = []
        self._lost_waiters: list[asyncio.Future[tuple[int, BaseException]]] = []

    def fail_host(self, host: int, exc: BaseException) -> None:
        """Host ``host`` can no longer be talked to: everything that depends
        on it fails with ``exc`` (the first cause wins)."""
        if host not in self.failed:
            self.failed[host] = exc
            log.debug("host %d: %s", host, exc)
        self._break_host(host, self.failed[host])

    def protocol_error(self, host: int, exc: BaseException) -> None:
        """Host ``host`` sent what the protocol does not allow: fail it, then
        stop the job naming it and ``exc`` (once; later errors are logged)."""
        self.fail_host(host, exc)
        if self._protocol_stop:
            return
        self._protocol_stop = True
        stop = Stop(StopKind.PEER_FAILED, host, 0, summary(exc))
        record_failure(1)   # the job's status for `aiopdbp launch`: the sender has no failure of its own
        job = self._job()
        if job is not None:   # this rank's line first: the sender's answers it
            job.request_stop(stop, tell=False)
        # Every rank hears of it, the sender too: it may wait on this rank
        # (a table request, the closing handshake) and must stop waiting.
        self.tell_peers(stop)

    # ------------------------------------------------------------ liveness
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the heartbeat (when the transport and ``host_timeout`` allow one)."""

        def on_lost(rank: int) -> None:  # in the heartbeat thread
            try:
                loop.call_soon_threadsafe(self.host_lost, rank)
            except RuntimeError:  # the loop is closed: nothing waits any more
                pass

        self._heartbeat = self._start_beat(on_lost)

    def close(self) -> None:
        """The node is closing: a host that goes silent now is not lost."""
        self._closing = True

    def host_lost(self, rank: int) -> None:
        """Host ``rank`` went silent (our heartbeat noticed): every other rank
        hears of it (``LostMsg``, see "Liveness"), then :meth:`_lost`."""
        if rank in self.lost or self._closing:
            return
        hb = self._heartbeat
        err = hb.error(rank) if hb is not None else HostLostError(f"rank {rank} is lost", rank)
        self._spread(LostMsg(rank, self.rank, self.size, str(err)))
        self._lost(rank, err)

    def on_lost(self, src: int, msg: LostMsg) -> None:
        """A watcher's notice that ``msg.rank`` is lost, passed on to us: pass
        it on to our part of the ring, then fail the host as if we had seen it."""
        if not (msg.rank < self.size and msg.origin < self.size and msg.span <= self.size):
            raise ProtocolError(f"LOST names rank {msg.rank} from {msg.origin} over {msg.span} of {self.size} ranks")
        if msg.rank == self.rank:
            return   # we were stopped (SIGSTOP) and resumed: the watchers' abort ends us
        self._spread(msg)
        if msg.rank not in self.lost and not self._closing:
            self._lost(msg.rank, HostLostError(f"{msg.message} (noticed by rank {msg.origin})", msg.rank))

    def _spread(self, msg: LostMsg) -> None:
        skip = set(self.lost) | {msg.rank}
        for dest, span in spread_targets(self.rank, msg.origin, msg.span, self.size, skip):
            self._channel.send(dest, LostMsg(msg.rank, msg.origin, span, msg.message))

    def _lost(self, rank: int, err: HostLostError) -> None:
        """Everything that depends on host ``rank`` fails with ``err``; the
        program hears of it (callbacks, :meth:`wait_lost`); then, under
        ``aiopdbp.run``, the job stops."""
        self.lost[rank] = err
        log.error("%s", err)
        if rank == 0:
            self._stop_waiting(err)  # no sequencer: no table update completes any more
        self.fail_host(rank, err)
        for cb in list(self._lost_callbacks):
            try:
                cb(rank, err)
            except Exception:  # a broken callback must not hide the loss
                log.exception("on_host_lost callback failed")
        for fut in self._lost_waiters:
            if not fut.done():
                fut.set_result((rank, err))
        self._lost_waiters.clear()
        job = self._job()
        if job is not None:
            stop = Stop(StopKind.HOST_LOST, rank, 0, str(err))
            asyncio.get_running_loop().call_later(self._lost_grace, job.request_stop, stop)

    def add_lost_callback(self, callback: LostCallback) -> None:
        self._lost_callbacks.append(callback)

    async def wait_lost(self) -> tuple[int, BaseException]:
        """The first lost host: ``(rank, HostLostError)``.

        Cancellation: nothing to undo.
        """
        if self.lost:
            rank = next(iter(self.lost))
            return rank, self.lost[rank]
        fut: asyncio.Future[tuple[int, BaseException]] = asyncio.get_running_loop().create_future()
        self._lost_waiters.append(fut)
        return await fut

    def left(self) -> frozenset[int] | None:
        """The peers the heartbeat saw leave (a goodbye) or go silent, also
        while this node closes; None without a heartbeat (no such view)."""
        hb = self._heartbeat
        return None if hb is None else hb.departed | hb.lost

    def stop_heartbeat(self, timeout: float = 1.0) -> None:
        hb, self._heartbeat = self._heartbeat, None
        if hb is not None:
            hb.stop(timeout)

    def liveness_stats(self) -> dict[str, Any]:
        hb = self._heartbeat
        return hb.stats() if hb is not None else {}

    # ---------------------------------------------- job-wide stops (Peer)
    def tell_peers(self, stop: Stop) -> None:
        """Tell every other rank that this job stops (our interrupt or failure)."""
        failed = stop.kind is StopKind.PEER_FAILED
        self._stop_waiting(RankFailedError(f"the job is stopping ({stop.describe()})", stop.rank))
        if failed:
            self._acks = set()
        msg = StopMsg("failed" if failed else "interrupted", stop.rank, stop.signal, stop.message, stop.gp)
        for h in range(self.size):
            if h != self.rank:
                self._channel.send(h, msg)

    async def wait_acks(self, timeout: float) -> bool:
        """Wait until every other rank acknowledged our failure notice.

        Cancellation: nothing to undo.
        """
        others = set(range(self.size)) - {self.rank} - set(self.failed)
        deadline = time.monotonic() + timeout
        backoff = Backoff(100e-6, 5e-3)
        while self._acks is None or not others <= self._acks:
            if time.monotonic() > deadline:
                return False
            await backoff.sleep()
        return True

    def on_stop(self, src: int, msg: StopMsg) -> None:
        if msg.kind == "interrupted":
            stop = Stop(StopKind.INTERRUPTED, msg.rank, msg.signal or 2, msg.message)
            exc = RankFailedError(f"rank {msg.rank} was interrupted", msg.rank)
        else:
            # A rank reports its own failures itself: a notice that names
            # this rank comes from a peer that failed it for a protocol error.
            by = src if msg.rank == self.rank and src != self.rank else -1
            stop = Stop(StopKind.PEER_FAILED, msg.rank, 0, msg.message, msg.gp, by)
            exc = RankFailedError(stop.describe(), msg.rank)
        self.peer_stop = stop
        self._stop_waiting(exc)
        self.fail_host(src, exc)
        job = self._job()
        if job is not None:
            job.request_stop(stop, tell=False)   # prints this rank's line about it
        if msg.kind != "interrupted":
            # acknowledged after the line is out: the failing rank exits then
            self._channel.send(src, StopAckMsg(self.rank))

    def on_stop_ack(self, src: int, msg: StopAckMsg) -> None:
        if self._acks is not None:
            self._acks.add(src)


class StallRelay:
    """Stall reports to rank 0's deadlock detector and its verdicts back
    (:mod:`aiopdbp.stall`: the watch is the node's)."""

    def __init__(self, rank: int, size: int, channel: ControlChannel, stall: StallWatch | None,
                 failed: Callable[[int], bool]) -> None:
        self.rank = rank
        self.size = size
        self._channel = channel
        self._stall = stall
        self._failed = failed

    def send_stall(self, edges: list[WaitEdge], idle: list[str]) -> None:
        """This rank's stale waits, to rank 0's deadlock detector."""
        self._channel.send(0, StallMsg([e.to_wire() for e in edges], idle))

    def send_deadlock(self, cycle: tuple[WaitEdge, ...]) -> None:
        """Rank 0: every other rank fails its waits of ``cycle``."""
        body = [e.to_wire() for e in cycle]
        for h in range(1, self.size):
            if not self._failed(h):
                self._channel.send(h, DeadlockMsg(body))

    def on_stall(self, src: int, msg: StallMsg) -> None:
        if self._stall is not None and self.rank == 0:
            self._stall.on_report(src, [WaitEdge(*e) for e in msg.edges], msg.idle)

    def on_deadlock(self, src: int, msg: DeadlockMsg) -> None:
        if self._stall is not None:
            self._stall.on_deadlock(tuple(WaitEdge(*e) for e in msg.cycle))
