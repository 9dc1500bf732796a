"""Remote hosts: initialisation, replicated tables, the RBP, control messages.

Theory of operation
-------------------
:class:`Remote` is the multi-host half of a node.  It owns the DDBP
(:class:`~aiopdbp.pool.BufferPool`), one :class:`~aiopdbp.hosts.link.HostLink` per
other host (the send side), and everything that arrives from the transport:

*Initialisation (paper Fig. 6).*  Every host sends its ``HInfoMsg`` to rank 0
(the MNode); rank 0 orders the node-table updates and answers with every
host's info and all GP bindings (``MBInfoMsg``).  Missing hosts make
:class:`~aiopdbp.errors.HandshakeError` name them after ``handshake_timeout``.

*Replicated tables.*  Rank 0 is the sequencer.  A host asks for an update
with the CMP kind that names it -- ``RegMsg`` (register a GP), ``APipeMsg``
(bind its pipe), ``ReleaseMsg`` (release the pipe, or free the GP), or
``TableReqMsg`` for stream bindings; rank 0 applies it, broadcasts it with a
sequence number (``TableMsg``) to every other host, then answers the
requester (``ARMsg``, ``AAPMsg``, ``TableAckMsg``) -- after the broadcast, on
the same channel, so the requester has applied the update when its
``await`` returns.  A requester that gave up waiting undoes what its request
did with ``CancelMsg``.  Equal ``Tables.digest`` on every host proves the
order is one.

*Receive pool (RBP).*  The transport asks :meth:`Remote.alloc` for a buffer
before it receives a data message: one up to ``block_size`` lands in a
block of the sub-pool RCBP_src.  A block of short messages (BPS) is decoded
in bulk into :class:`~aiopdbp.wire.message.Message` objects, handed to the
router per destination GP, and the block is released at once; everything
else that landed in a block has its payload copied out first -- full records
(BP), and the payload half of a split frame, which the transport may have
put in a block because it allocates when it probes, before the header half
is delivered.  Messages larger than a block arrive in their own buffer and
are not copied.

*Dual channel.*  Everything that is not data travels on the control channel
as a typed message (:mod:`aiopdbp.wire.control`): table updates, per-destination
credit, stream completions and credit, BYE, stops.

*Closing.*  :meth:`close` flushes every link, tells every host with BYE how
many data messages it sent, and waits until it received as many from
everyone (bounded by ``close_timeout``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.transport.backoff import Backoff
from aiopdbp.wire.codec import CDU, Kind, MsgType, decode, decode_split, peek_header
from aiopdbp.wire.control import (
    AAPMsg,
    APipeMsg,
    ARMsg,
    ByeMsg,
    CancelMsg,
    CreditAskMsg,
    CreditMsg,
    DeadlockMsg,
    CtrlMsg,
    HInfoMsg,
    MBInfoMsg,
    RegMsg,
    ReleaseMsg,
    StopAckMsg,
    StopMsg,
    StallMsg,
    StreamCreditMsg,
    StreamDoneMsg,
    TableAckMsg,
    TableMsg,
    TableReqMsg,
    decode_control,
)
from aiopdbp.errors import (
    BrokenResourceError,
    DuplicateProcessError,
    HandshakeError,
    HostLostError,
    TransportError,
    PDBPError,
    ProtocolError,
    RankFailedError,
    UnknownProcessError,
    WouldBlock,
)
from aiopdbp.runtime.job import Stop, StopKind, current_job
from aiopdbp.hosts.link import HostLink, LinkStats
from aiopdbp.wire.message import Message, credit_cost
from aiopdbp.pool import BufferPool, Slot
from aiopdbp.stall import StallWatch, WaitEdge
from aiopdbp.hosts.tables import NodeType
from aiopdbp.transport.base import Channel, Transport

if TYPE_CHECKING:
    from aiopdbp.routing.router import Router
    from aiopdbp.streams.table import StreamTable
    from aiopdbp.hosts.tables import Tables

log = logging.getLogger("aiopdbp.hosts.remote")

__all__ = ["Remote", "RemoteConfig"]

#: data messages smaller than this (a lone message, a handful of records)
#: skip the receive pool: a plain buffer costs less than the pool's bookkeeping
RBP_MIN = 4096
_CTRL = Channel.CONTROL
_DATA = Channel.DATA
_BPS = int(MsgType.BPS)
_KINDS = {int(k): k for k in Kind}


@dataclass
class RemoteConfig:
    """Tunables of the multi-host runtime (all per host)."""

    block_size: int = 64 << 10        # UMB block = largest coalesced message (stays eager)
    pool_blocks: int = 0              # UMB blocks; 0: 32 per remote host per matrix
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


class _Source:
    """Receive side of one remote host."""

    __slots__ = ("host", "split_head", "received", "bye")

    def __init__(self, host: int) -> None:
        self.host = host
        self.split_head: bytes | None = None
        self.received = 0       # data messages taken off the network
        self.bye: int | None = None


class Remote:
    """The multi-host half of a :class:`~aiopdbp.runtime.node.Node`."""

    def __init__(self, transport: Transport, cfg: RemoteConfig, tables: Tables, router: Router,
                 streams: StreamTable, *, allow_pickle: bool, stall: StallWatch | None = None) -> None:
        self.transport = transport
        self.stall = stall
        self.cfg = cfg
        self.rank = transport.rank
        self.size = transport.size
        self.tables = tables
        self.router = router
        self.streams = streams
        self.allow_pickle = allow_pickle
        others = max(1, self.size - 1)
        nblocks = cfg.pool_blocks or 2 * 32 * others
        self.pool = BufferPool(self.size, cfg.row_capacity, cfg.block_size, nblocks, cfg.initial,
                               cfg.threshold, local=self.rank)
        self.links: dict[int, HostLink] = {}
        self.sources = {h: _Source(h) for h in range(self.size) if h != self.rank}
        self._ctrl_sent: dict[int, dict[str, int]] = {}   # host -> control kind -> messages
        self._ctrl_recv: dict[int, dict[str, int]] = {}
        self.failed: dict[int, BaseException] = {}   # host -> what broke it
        self.peer_stop: Stop | None = None
        self._slots: dict[int, Slot] = {}
        self._reqs = iter(range(1, 1 << 62))
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._cancelled: set[int] = set()
        self._req_names: dict[int, str] = {}   # pending registrations: req -> name
        self._seq = 0                     # last applied (replicas) / assigned (rank 0)
        self._hinfo: dict[int, list[Any]] = {}
        self._windows: dict[int, int] = {}
        self._ready: asyncio.Future[None] | None = None
        self._acks: set[int] | None = None
        self._closing = False
        self._stopping = False   # the job stops: table requests go unanswered
        self.protocol_errors = 0
        self.fallback_allocs = 0
        self.host_timeout = 0.0        # liveness: 0 = no heartbeat (set by the node)
        self._heartbeat: Any = None
        self._lost_callbacks: list[Any] = []
        self._lost_waiters: list[asyncio.Future[tuple[int, BaseException]]] = []
        self.lost: dict[int, BaseException] = {}
        router.links = self.link
        router.grant = self.grant
        streams.peers = self

    # ------------------------------------------------------------------ start
    async def start(self) -> None:
        """Join the other hosts and run the initialisation sequence (Fig. 6).

        Cancellation: leaves the transport started; ``stop()`` cleans up.
        """
        loop = asyncio.get_running_loop()
        timeout = self.cfg.handshake_timeout if self.cfg.handshake_timeout is not None else 30.0
        self._ready = loop.create_future()
        await self.transport.start(self._on_message, self.alloc)  # type: ignore[call-arg]
        self._start_heartbeat(loop)
        me = [self.rank, socket.gethostname(), _host_ip(),
              int(NodeType.MASTER if self.rank == 0 else NodeType.COMPUTE), self.cfg.gp_window]
        if self.rank == 0:
            self.on_hinfo(0, HInfoMsg([me], self.cfg.gp_window))
        else:
            self._control(0, HInfoMsg([me], self.cfg.gp_window))
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            missing = sorted(set(range(self.size)) - set(self._hinfo)) if self.rank == 0 else [0]
            raise HandshakeError(
                f"host {self.rank}: initialisation did not complete within {timeout} s "
                f"(no answer from host(s) {missing})") from None
        for h in range(self.size):
            if h != self.rank:
                self.link(h)

    def link(self, host: int) -> HostLink:
        """The link to ``host`` (made on first use)."""
        link = self.links.get(host)
        if link is None:
            if not 0 <= host < self.size or host == self.rank:
                raise BrokenResourceError(f"no remote host {host}")
            cfg = self.cfg
            link = self.links[host] = HostLink(
                host, self.transport, self.pool.send, window=self._windows.get(host, cfg.gp_window),
                block_size=cfg.block_size, large=cfg.large, max_inflight=cfg.max_inflight,
                allow_pickle=self.allow_pickle, ask=self.ask_credit)
            if host in self.failed:
                link.fail(self.failed[host])
        return link

    # ------------------------------------------------------- initialisation
    def on_hinfo(self, src: int, msg: HInfoMsg) -> None:
        if self.rank == 0 and len(msg.hosts) == 1 and src not in self._hinfo:
            entry = list(msg.hosts[0])
            self._windows[src] = int(entry[4]) if len(entry) > 4 else msg.gp_window
            self._hinfo[src] = entry[:4]
            if len(self._hinfo) == self.size:
                for h in range(self.size):
                    self._sequence("node_add", list(self._hinfo[h]))
                hosts = [self._hinfo[h] + [self._windows[h]] for h in range(self.size)]
                full = HInfoMsg(hosts, self.cfg.gp_window)
                bindings = MBInfoMsg(self._bindings())
                for h in range(1, self.size):
                    self._control(h, full)
                    self._control(h, bindings)
                self._set_ready()
        elif self.rank != 0 and src == 0:
            self._windows = {int(e[0]): int(e[4]) for e in msg.hosts if len(e) > 4}

    def on_mbinfo(self, src: int, msg: MBInfoMsg) -> None:
        self._set_ready()

    def _bindings(self) -> list[list[Any]]:
        return [[p.pid, p.name, int(p.ptype), p.node, p.pipe if p.pipe is not None else -1]
                for p in self.tables.pta.values()]

    def _set_ready(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    # --------------------------------------------------- replicated tables
    async def commit(self, op: str, args: tuple[Any, ...]) -> Any:
        """Apply a table update in the cluster-wide order; return its result.

        Cancellation: the update may still be applied (its request is on the
        way to rank 0); a registration or binding it made is then undone.
        """
        if self.rank == 0:
            return self._sequence(op, list(args))
        if self._stopping:
            # The job is stopping (failure, interrupt): rank 0 may be gone.
            # Undoing (release, free) is applied here only; nothing new starts.
            if op in ("pipe_release", "proc_free"):
                self.commit_nowait(op, args)
                return None
            raise RankFailedError(f"the job is stopping: {op} refused", self.rank)
        req = next(self._reqs)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[req] = fut
        if op == "proc_reg":
            name, ptype, node, *rest = args
            pipe = rest[0] if rest and rest[0] is not None else -1
            msg: CtrlMsg = RegMsg(req, name, int(ptype), node, pipe)
            self._req_names[req] = name
        elif op == "pipe_bind":
            msg = APipeMsg(req, args[0], args[1])
        elif op in ("pipe_release", "proc_free"):
            msg = ReleaseMsg(req, args[0], op == "proc_free")
        else:
            msg = TableReqMsg(req, op, list(args))
        self._control(0, msg, req)
        try:
            return await fut
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():
                self._cancelled.add(req)  # undo it if rank 0 does it anyway
            raise
        finally:
            self._waiting.pop(req, None)
            self._req_names.pop(req, None)

    def commit_nowait(self, op: str, args: tuple[Any, ...]) -> None:
        """Ask for a table update without waiting for it."""
        if self._closing or self._stopping:
            try:  # tearing down: the other hosts are closing too
                self.tables.apply(op, args)
            except PDBPError:
                pass
            return
        if self.rank == 0:
            try:
                self._sequence(op, list(args))
            except PDBPError as exc:
                log.debug("table update %s%s refused: %s", op, args, exc)
            return
        self._control(0, TableReqMsg(0, op, list(args)))

    def _sequence(self, op: str, args: list[Any]) -> Any:
        """Rank 0: apply one update and broadcast it (raises if refused)."""
        result = self.tables.apply(op, args)
        self._seq += 1
        msg = TableMsg(self._seq, op, args)
        for h in range(1, self.size):
            self._control(h, msg)
        return result

    def _answer(self, src: int, op: str, args: list[Any]) -> tuple[Any, PDBPError | None]:
        try:
            return self._sequence(op, args), None
        except PDBPError as exc:
            return None, exc

    def on_reg(self, src: int, msg: RegMsg) -> None:
        args: list[Any] = [msg.name, msg.ptype, msg.node] + ([msg.pipe] if msg.pipe >= 0 else [])
        pid, exc = self._answer(src, "proc_reg", args)
        self._control(src, ARMsg(msg.req, exc is None, pid or 0, "" if exc is None else str(exc),
                                 "" if exc is None else type(exc).__name__))

    def on_apipe(self, src: int, msg: APipeMsg) -> None:
        _, exc = self._answer(src, "pipe_bind", [msg.pid, msg.pipe])
        self._control(src, AAPMsg(msg.req, exc is None, msg.pipe, "" if exc is None else str(exc)))

    def on_release(self, src: int, msg: ReleaseMsg) -> None:
        _, exc = self._answer(src, "proc_free" if msg.free else "pipe_release", [msg.pid])
        self._control(src, AAPMsg(msg.req, exc is None, -1, "" if exc is None else str(exc)))

    def on_table_req(self, src: int, msg: TableReqMsg) -> None:
        _, exc = self._answer(src, msg.op, msg.args)
        if msg.req:
            self._control(src, TableAckMsg(msg.req, exc is None, "" if exc is None else str(exc)))

    def on_cancel(self, src: int, msg: CancelMsg) -> None:
        entry = self.tables.pta.get(msg.pid)
        if entry is not None and entry.node == src:
            self._answer(src, "proc_free", [msg.pid])

    def on_table(self, src: int, msg: TableMsg) -> None:
        if msg.seq != self._seq + 1:
            log.critical("table update %d out of order (applied %d)", msg.seq, self._seq)
        self._seq = msg.seq
        try:
            self.tables.apply(msg.op, msg.args)
        except PDBPError as exc:
            if self._closing or self._stopping:
                # tearing down, this host applied its own releases alone
                log.debug("table update %s after local teardown: %s", msg, exc)
            else:  # cannot happen if every host applies the same order
                log.critical("replica diverged applying %s: %s", msg, exc)

    def on_ar(self, src: int, msg: ARMsg) -> None:
        if msg.req in self._cancelled:
            self._cancelled.discard(msg.req)
            if msg.ok:
                self._control(0, CancelMsg(msg.req, msg.pid))
            return
        exc: PDBPError | None = None
        if not msg.ok:
            exc = _rebuild_error(msg.etype, msg.error, self._req_names.get(msg.req))
        self._resolve(msg.req, msg.pid, exc)

    def on_aap(self, src: int, msg: AAPMsg) -> None:
        self._cancelled.discard(msg.req)
        self._resolve(msg.req, msg.pipe, None if msg.ok else PDBPError(msg.error))

    def on_table_ack(self, src: int, msg: TableAckMsg) -> None:
        self._resolve(msg.req, None, None if msg.ok else PDBPError(msg.error))

    def _resolve(self, req: int, result: Any, exc: BaseException | None) -> None:
        fut = self._waiting.get(req)
        if fut is None or fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    # ------------------------------------------------------ control channel
    def _control(self, dest: int, msg: CtrlMsg, req: int = 0) -> None:
        """Send one control message; if it cannot be sent and ``req`` waits
        for an answer, that wait fails instead of hanging."""
        kinds = self._ctrl_sent.setdefault(dest, {})
        kind = type(msg).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
        try:
            fut = self.transport.post_nowait(dest, _CTRL, [msg.encode()])
        except Exception as exc:  # transport already closed
            self._unreachable(dest, req, exc)
            return
        if fut is not None:
            fut.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() is None
                else self._unreachable(dest, req, f.exception()))  # type: ignore[arg-type]

    def _unreachable(self, dest: int, req: int, exc: BaseException) -> None:
        log.debug("control message to host %d failed: %s", dest, exc)
        if req:
            self._resolve(req, None, BrokenResourceError(f"host {dest} is unreachable: {exc}"))

    def _on_control(self, src: int, buf: memoryview) -> None:
        try:
            msg = decode_control(buf)
        except ProtocolError as exc:
            self.protocol_errors += 1
            log.error("malformed control message from host %d: %s", src, exc)
            self.fail_host(src, ProtocolError(f"malformed control message from host {src}: {exc}"))
            return
        kinds = self._ctrl_recv.setdefault(src, {})
        kind = type(msg).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
        msg.handle(self, src)

    # credit (per destination GP)
    def grant(self, host: int, grants: list[tuple[int, int]]) -> None:
        """Give ``host`` credit back for GPs here (the router calls it)."""
        if host not in self.failed:
            self._control(host, CreditMsg(grants))

    # stalls and deadlocks (aiopdbp.stall: the watch is the node's)
    def send_stall(self, edges: list[WaitEdge], idle: list[str]) -> None:
        """This rank's stale waits, to rank 0's deadlock detector."""
        self._control(0, StallMsg([list(dataclasses.astuple(e)) for e in edges], idle))

    def send_deadlock(self, cycle: tuple[WaitEdge, ...]) -> None:
        """Rank 0: every other rank fails its waits of ``cycle``."""
        body = [list(dataclasses.astuple(e)) for e in cycle]
        for h in range(1, self.size):
            if h not in self.failed:
                self._control(h, DeadlockMsg(body))

    def on_stall(self, src: int, msg: StallMsg) -> None:
        if self.stall is not None and self.rank == 0:
            self.stall.on_report(src, [WaitEdge(*e) for e in msg.edges], msg.idle)

    def on_deadlock(self, src: int, msg: DeadlockMsg) -> None:
        if self.stall is not None:
            self.stall.on_deadlock(tuple(WaitEdge(*e) for e in msg.cycle))

    def ask_credit(self, host: int, pid: int) -> None:
        """A sender here is parked for GP ``pid``'s credit on ``host``."""
        if host not in self.failed:
            self._control(host, CreditAskMsg([pid]))

    def on_credit_ask(self, src: int, msg: CreditAskMsg) -> None:
        for pid in msg.pids:
            self.router.on_ask(src, pid)

    def on_credit(self, src: int, msg: CreditMsg) -> None:
        link = self.links.get(src)
        if link is not None:
            for pid, nbytes in msg.grants:
                link.grant(pid, nbytes)

    # streams (StreamPeers)
    def send_done(self, host: int, key: tuple[int, int], error: str | None) -> None:
        self._control(host, StreamDoneMsg(key[0], key[1], error is None, error or ""))

    def send_credit(self, host: int, key: tuple[int, int], segments: int) -> None:
        self._control(host, StreamCreditMsg(key[0], key[1], segments))

    def on_stream_done(self, src: int, msg: StreamDoneMsg) -> None:
        self.streams.done((msg.node, msg.sno), None if msg.ok else msg.error, src)

    def on_stream_credit(self, src: int, msg: StreamCreditMsg) -> None:
        self.streams.credit((msg.node, msg.sno), msg.segments)

    def on_bye(self, src: int, msg: ByeMsg) -> None:
        s = self.sources.get(src)
        if s is not None:
            s.bye = msg.sent

    # ------------------------------------------------------- failing hosts
    def fail_host(self, host: int, exc: BaseException) -> None:
        """Host ``host`` can no longer be talked to: everything that depends
        on it fails with ``exc`` (the first cause wins)."""
        if host not in self.failed:
            self.failed[host] = exc
            log.debug("host %d: %s", host, exc)
        first = self.failed[host]
        link = self.links.get(host)
        if link is not None:
            link.fail(first)
        self.streams.break_host(host, first)

    # liveness
    def _start_heartbeat(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the heartbeat thread (MPI transports; see aiopdbp.hosts.liveness)."""
        comm = getattr(self.transport, "control_comm", None)
        if self.host_timeout <= 0 or comm is None:
            return
        from aiopdbp.hosts.liveness import Heartbeat

        def on_lost(rank: int, silence: float) -> None:  # in the heartbeat thread
            try:
                loop.call_soon_threadsafe(self.host_lost, rank)
            except RuntimeError:  # the loop is closed: nothing waits any more
                pass

        interval = min(1.0, self.host_timeout / 10)
        hb = Heartbeat(comm, (getattr(self.transport, "tag", 0) + 16384) % 32768, interval=interval,
                       timeout=self.host_timeout, on_lost=on_lost)
        try:
            hb.start()
        except TransportError as exc:
            log.warning("no liveness heartbeat: %s", exc)
            return
        self._heartbeat = hb

    def host_lost(self, rank: int) -> None:
        """Host ``rank`` went silent: everything that depends on it fails with
        :class:`HostLostError` naming it; the program hears of it (callbacks,
        :meth:`wait_lost`); then, under ``aiopdbp.run``, the job stops."""
        if rank in self.lost or self._closing:
            return
        hb = self._heartbeat
        err = hb.error(rank) if hb is not None else HostLostError(f"rank {rank} is lost", rank)
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
        job = current_job()
        if job is not None:
            stop = Stop(StopKind.HOST_LOST, rank, 0, str(err))
            asyncio.get_running_loop().call_later(self.cfg.lost_grace, job.request_stop, stop)

    def add_lost_callback(self, callback: Any) -> None:
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

    def stop_heartbeat(self, timeout: float = 1.0) -> None:
        hb, self._heartbeat = self._heartbeat, None
        if hb is not None:
            hb.stop(timeout)

    def liveness_stats(self) -> dict[str, Any]:
        hb = self._heartbeat
        return hb.stats() if hb is not None else {}

    # job-wide stops (aiopdbp.runtime.job.Peer)
    def tell_peers(self, stop: Stop) -> None:
        """Tell every other rank that this job stops (our interrupt or failure)."""
        failed = stop.kind is StopKind.PEER_FAILED
        self._stop_waiting(RankFailedError(f"the job is stopping ({stop.describe()})", stop.rank))
        if failed:
            self._acks = set()
        msg = StopMsg("failed" if failed else "interrupted", stop.rank, stop.signal, stop.message, stop.gp)
        for h in range(self.size):
            if h != self.rank:
                self._control(h, msg)

    async def wait_acks(self, timeout: float) -> bool:
        """Wait until every other rank acknowledged our failure notice."""
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
            stop = Stop(StopKind.PEER_FAILED, msg.rank, 0, msg.message, msg.gp)
            exc = RankFailedError(stop.describe(), msg.rank)
        self.peer_stop = stop
        self._stop_waiting(exc)
        self.fail_host(src, exc)
        job = current_job()
        if job is not None:
            job.request_stop(stop, tell=False)   # prints this rank's line about it
        if msg.kind != "interrupted":
            # acknowledged after the line is out: the failing rank exits then
            self._control(src, StopAckMsg(self.rank))

    def _stop_waiting(self, exc: BaseException) -> None:
        """The job stops: no table request will be answered any more."""
        self._stopping = True
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()

    def on_stop_ack(self, src: int, msg: StopAckMsg) -> None:
        if self._acks is not None:
            self._acks.add(src)

    # ------------------------------------------------- receive pool (RBP)
    def alloc(self, src: int, channel: Channel, nbytes: int) -> memoryview | None:
        """Where the transport receives a data message: a block of RCBP_src
        (None: the transport's own buffer -- control messages, payload
        halves of split frames, messages larger than a block, and lone
        messages below :data:`RBP_MIN`)."""
        if channel != _DATA or not RBP_MIN <= nbytes <= self.cfg.block_size or src == self.rank:
            return None
        s = self.sources.get(src)
        if s is None or s.split_head is not None:
            return None
        try:
            slot = self.pool.recv.acquire_nowait(src, nbytes)
        except (WouldBlock, Exception):
            # The row is full and Algorithm 1 may not grow it: a private
            # buffer instead (the senders' credit still bounds it).
            self.fallback_allocs += 1
            return None
        view = slot.view[:nbytes]
        self._slots[id(view)] = slot
        return view

    def _on_message(self, src: int, channel: Channel, buf: memoryview) -> None:
        if channel == _CTRL:
            self._on_control(src, buf)
            return
        s = self.sources.get(src)
        if s is None:
            return
        s.received += 1
        if s.split_head is None and len(buf) > 1 and buf[1] == _BPS and not self._slots:
            # the commonest: short messages in a plain buffer (checked in decode)
            try:
                self.router.place_shorts(src, buf)
            except ProtocolError as exc:
                self._malformed(src, exc)
            return
        slot = self._slots.pop(id(buf), None) if self._slots else None
        try:
            if slot is None:
                self._place(s, buf, False)
                return
            rpool = self.pool.recv  # the RBP writer's half: the block is in RCBP_src
            rpool.commit(slot, memoryview(buf).nbytes)
            slot = rpool.next_filled_nowait(src)
            try:
                self._place(s, buf, True)
            finally:  # decoded and copied out: the block goes back at once
                rpool.release(slot)
        except ProtocolError as exc:
            self._malformed(src, exc)

    def _malformed(self, src: int, exc: ProtocolError) -> None:
        self.protocol_errors += 1
        log.error("malformed data message from host %d: %s", src, exc)
        self.fail_host(src, ProtocolError(f"malformed data message from host {src}: {exc}"))

    def _place(self, s: _Source, buf: memoryview, in_block: bool) -> None:
        """Decode one data message from host ``s.host`` and hand it on."""
        host = s.host
        if s.split_head is not None:
            head, s.split_head = s.split_head, None
            # The payload half may sit in a pool block too: the transport
            # allocates when it probes, before the header half is delivered.
            self._place_cdu(host, decode_split(head, buf), in_block)
            return
        if len(buf) > 1 and buf[1] == _BPS:  # the commonest: short messages (checked in decode)
            self.router.place_shorts(host, buf)
            return
        mt, body_len = peek_header(buf)
        if mt is MsgType.REMOTE and memoryview(buf).nbytes < 8 + body_len:
            s.split_head = bytes(buf)   # header now, payload next
            return
        for cdu in decode(buf, allow_pickle=self.allow_pickle):
            if isinstance(cdu, CDU):
                self._place_cdu(host, cdu, in_block)

    def _place_cdu(self, host: int, cdu: CDU, in_block: bool) -> None:
        data = cdu.data
        if data is not None and (in_block or (type(data) is memoryview and cdu.kind is not Kind.STREAM)):
            # Out of the pool block before it is reused; message payloads
            # are bytes (as on one host).
            cdu.data = _own(data, cdu.kind)
        if cdu.kind is Kind.STREAM:
            self.streams.place(host, cdu)
            return
        msg = Message((self.tables.name_of(cdu.source_p), cdu.kind, cdu.com, cdu.data,
                            cdu.source_p))
        self.router.place_messages(host, cdu.dest_ps, msg, credit_cost(cdu.data))

    # ---------------------------------------------------------------- close
    async def flush(self, timeout: float = float("inf")) -> None:
        """Wait until every link has handed its CDUs to MPI and the sends
        completed.

        Cancellation: nothing to undo.
        """
        for link in self.links.values():
            link.flush()
        await _until(lambda: all(link.idle or link.error for link in self.links.values()),
                     time.monotonic() + timeout, "flushing", self.rank)

    async def close(self, *, timeout: float | None = None) -> None:
        """Flush every link, exchange BYE, wait until everything sent to us
        was delivered; then stop.  Idempotent.

        Cancellation: stops at once (no drain) and still releases resources.
        """
        if self._closing:
            return
        self._closing = True
        timeout = self.cfg.close_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        try:
            await self.flush(timeout)
            self.router.flush_grants(everything=True)
            for h in range(self.size):
                if h != self.rank:  # also to a failed host: its control channel may work
                    link = self.links.get(h)
                    self._control(h, ByeMsg(link.sent_msgs if link is not None else 0))
            await _until(lambda: all(s.bye is not None and s.received >= s.bye or s.host in self.failed
                                     for s in self.sources.values()),
                         deadline, "waiting for the other hosts to close", self.rank)
        finally:
            self.stop_heartbeat()  # before the transport frees the communicator it uses
            self.stop()

    def stop(self) -> None:
        """Fail every pending request; release the pool."""
        self._closing = True
        self.stop_heartbeat(0.2)
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(BrokenResourceError("node closed"))
                fut.exception()
        self.pool.close()

    def size_history(self, host: int) -> dict[str, list[tuple[float, int]]]:
        """Real size over time of the sub-pools for ``host``: SCBP and RCBP
        (the Algorithm 1 statistic)."""
        return {"send": self.pool.send.size_history(host), "recv": self.pool.recv.size_history(host)}

    def message_counts(self) -> tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]:
        """Messages sent to and received from each host, per kind: the
        control kinds by class name (``"TableMsg"``, ``"StreamDoneMsg"``,
        ...) and ``"data"`` for data-channel messages."""
        sent = {h: dict(k) for h, k in self._ctrl_sent.items()}
        for h, link in self.links.items():
            if link.sent_msgs:
                sent.setdefault(h, {})["data"] = link.sent_msgs
        recv = {h: dict(k) for h, k in self._ctrl_recv.items()}
        for h, src in self.sources.items():
            if src.received:
                recv.setdefault(h, {})["data"] = src.received
        return sent, recv

    def link_stats(self) -> dict[int, LinkStats]:
        return {h: link.stats() for h, link in self.links.items()}

    def stats(self) -> dict[str, Any]:
        return {
            "received": {h: s.received for h, s in self.sources.items()},
            "protocol_errors": self.protocol_errors,
            "fallback_allocs": self.fallback_allocs,
            "failed_hosts": sorted(self.failed),
            "pool": self.pool.stats(),
        }


async def _until(cond: Any, deadline: float, what: str, rank: int) -> None:
    backoff = Backoff(100e-6, 2e-3)
    while not cond():
        if time.monotonic() > deadline:
            log.error("host %d: gave up %s after the close timeout", rank, what)
            return
        await backoff.sleep()


def _own(data: Any, kind: Kind) -> Any:
    if isinstance(data, memoryview):
        return bytes(data) if kind is not Kind.STREAM else memoryview(bytes(data))
    if isinstance(data, np.ndarray):
        return data.copy()
    return data


def _rebuild_error(etype: str, error: str, name: str | None) -> PDBPError:
    """The error rank 0 refused a table update with, as the same class and
    message (never wrapped twice)."""
    if etype == "DuplicateProcessError" and name is not None:
        return DuplicateProcessError(name)
    if etype == "UnknownProcessError" and name is not None:
        return UnknownProcessError(name)
    return PDBPError(error or "table update refused")


def _host_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
