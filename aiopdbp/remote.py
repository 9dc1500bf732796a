"""Remote hosts: DDBP pools, coalescing, credits, dual channel, replicated tables.

Theory of operation
-------------------
*Links and the send pool (SBP).*  Every remote host ``h`` is reached through a
:class:`HostLink`, the routing target of every GP that lives on ``h``.  A
sender reserves a slot in the link's bounded pending queue (backpressure),
the PipeManager puts the CDU there, and two coroutines per link do the
paper's SBP work:

* the **SBP writer** packs pending CDUs into the open block of the sub-pool
  SCBP_h (coalescing: many small CDUs become one BP frame, one MPI message).
  It waits for a block when the row is full and cannot grow -- Algorithm 1
  runs inside the pool -- which stalls the pending queue and so the senders.
  A CDU with a large payload (a stream segment) is not copied: it becomes a
  split frame, header and payload sent as two messages straight from the
  user's buffer.
* the **SBP reader** sends the units in order, keeping up to ``max_inflight``
  sends posted per host without a Task per message; readers of different
  hosts run concurrently (the paper's parallel SBP reader).

*Credits.*  A host may have at most ``recv_window`` bytes outstanding at a
receiver (announced in its HInfo).  The receiver returns credit on the
*control* channel once the CDUs of a message have been moved into local
pipes.  A GP that does not read therefore stops its senders on every host,
and the receive side never holds more than ``hosts x recv_window`` bytes.

*Receive pool (RBP).*  The transport asks :meth:`Remote._alloc` for a buffer
before it receives a data message; small messages land directly in a block
of RCBP_src (the paper's RBP writer).  One **RBP reader** per source host
decodes and delivers the CDUs to the private pipes (or a stream's bound
pipe), copying payloads out of the block, then releases it and returns the
credit.  Large split frames are received into their own buffer and handed
over without a copy.

*Dual channel.*  Table updates, credits, stream completions, HInfo and BYE
travel on the control channel, so they never queue behind bulk data.

*Replicated tables.*  Rank 0 (the MNode) is the sequencer: every update is
sent to it, applied there and broadcast with a sequence number; every host
applies updates in that order (MPI keeps messages from one source in order)
and the originator's ``await`` returns the result when its own copy has
applied it.  Equal ``Tables.digest`` on every host proves it.

*Closing.*  ``close()`` flushes every link, tells every host with BYE how
many data messages it sent, and waits until it has received and delivered
as many from everyone (or ``close_timeout`` passes).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from .codec import (
    CDU,
    Control,
    Kind,
    MsgType,
    StreamOp,
    bp_header,
    decode,
    decode_split,
    encode_cdu,
    encode_control,
    encode_record,
    encode_small_into,
    encode_split,
    peek_header,
)
from .errors import (
    BrokenResourceError,
    ClosedResourceError,
    DuplicateProcessError,
    HandshakeError,
    PDBPError,
    ProtocolError,
    RankFailedError,
    UnknownProcessError,
    WouldBlock,
)
from .job import Stop, StopKind, current_job
from .pipes import Pipe
from .pool import BufferPool, Slot
from .streams import StreamMeta
from .tables import NodeType
from .transport.base import Channel, Transport

if TYPE_CHECKING:
    from .node import Node

log = logging.getLogger("aiopdbp.remote")

# A CDU that follows the previous one for the same host by more than this is
# sent at once instead of at the end of the loop iteration (HostLink.put_reserved).
_QUIET = 20e-6


_CTRL = Channel.CONTROL
_DATA = Channel.DATA


@dataclass
class RemoteConfig:
    """Tunables of the multi-host runtime (all per host)."""

    block_size: int = 64 << 10        # UMB block = largest coalesced message (stays eager)
    pool_blocks: int = 0              # UMB blocks; 0: 32 per remote host per matrix
    row_capacity: int = 32            # N, cells of one sub-pool row
    initial: int = 4                  # m, initial real cells per row (Algorithm 1 step 1)
    threshold: float = 0.5            # Algorithm 1 threshold on SU
    recv_window: int = 32 << 20       # credit: bytes a peer may have outstanding here
    link_capacity: int = 4096         # CDUs queued for one host before senders wait
    large: int = 32 << 10             # payloads >= this travel as split zero-copy frames
    max_inflight: int = 16            # posted sends per host
    handshake_timeout: float | None = None  # None: the node's name_timeout (30 s)
    close_timeout: float = 60.0
    bind_timeout: float = 30.0        # wait for a receiving GP to bind its pipe


def _nbytes(data: Any) -> int:
    if data is None:
        return 0
    if type(data) is bytes:
        return len(data)
    n = getattr(data, "nbytes", None)
    if n is not None:
        return int(n)
    try:
        return memoryview(data).nbytes
    except TypeError:
        return 0  # a pickled object: size unknown until encoded


class HostLink:
    """The routing target for every GP on one remote host (SCBP_h + sender)."""

    remote = True

    def __init__(self, remote: Remote, host: int) -> None:
        self._remote = remote
        self.host = host
        cfg = remote.cfg
        self._pending: Pipe[CDU] = Pipe(cfg.link_capacity, -1, f"link{host}")
        # Bound methods as attributes: the send hot path calls them directly.
        self.reserve = self._pending.reserve
        self.reserve_nowait = self._pending.reserve_nowait
        self.unreserve = self._pending.unreserve
        self.force_put = self._pending.force_put
        self._slot: Slot | None = None      # the open block of SCBP_host
        self._count = 0                     # records in it
        self._flush_scheduled = False
        self._last_put = 0.0
        self._units: deque[tuple[str, Any, list[Any], int]] = deque()
        self._units_ready: asyncio.Event = asyncio.Event()
        self._credit = cfg.recv_window
        self.window = cfg.recv_window
        self._credit_ready = asyncio.Event()
        self._inflight = 0
        self._inflight_ready = asyncio.Event()
        self._writer_idle = True
        self.sent_msgs = 0
        self.sent_bytes = 0
        self.cdus = 0
        self.blocks = 0
        self.splits = 0
        self.credit_waits = 0
        self.error: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(_guard(self._writer(), self.fail), name=f"aiopdbp-sbp-writer-{self.host}"),
            loop.create_task(_guard(self._reader(), self.fail), name=f"aiopdbp-sbp-reader-{self.host}")]

    @property
    def idle(self) -> bool:
        return (not len(self._pending) and self._writer_idle and self._slot is None
                and not self._units and self._inflight == 0)

    def grant(self, nbytes: int) -> None:
        self._credit += nbytes
        self._credit_ready.set()

    def fail(self, exc: BaseException) -> None:
        """The host is gone: senders waiting on this link get ``exc``."""
        if self.error is None:
            self.error = exc
        self._pending.close(self.error)

    # -- SBP writer: CDUs -> blocks (coalescing) ------------------------------
    def put_reserved(self, cdu: CDU) -> None:
        """Take a CDU for this host (its slot was reserved by the sender).

        When the writer is idle the CDU is encoded into the open block right
        here, and a flush of that block is scheduled for the end of this
        loop iteration: at low load a message leaves without a hop to
        another task; in a burst (the sender does not yield) records pile up
        in the block and leave together (coalescing).
        """
        p = self._pending
        if self._writer_idle and not len(p) and self.error is None:
            p.unreserve()
            now = time.perf_counter()
            quiet = now - self._last_put > _QUIET
            self._last_put = now
            if self._write(cdu):
                if quiet and self._slot is not None and not self._units:
                    # The previous CDU for this host came a while ago: a
                    # lone message, send it now (latency).  In a burst CDUs
                    # come microseconds apart and the flush waits for the
                    # end of the loop iteration (coalescing).
                    self._flush_block()
                elif not self._flush_scheduled:
                    self._flush_scheduled = True
                    asyncio.get_running_loop().call_soon(self._flush_soon)
                return
            p.force_put(cdu)  # no free block right now: the writer task waits for one
            return
        p.put_reserved(cdu)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        if self._writer_idle and not len(self._pending):
            self._flush_block()

    def _write(self, cdu: CDU) -> bool:
        """Encode one CDU into the open block (or as a frame of its own).
        False when a new block is needed and none is free right now."""
        remote = self._remote
        cfg = remote.cfg
        if cdu.kind is Kind.STREAM and _nbytes(cdu.data) >= cfg.large and _splittable(cdu.data):
            self._flush_block()
            head, payload = encode_split(cdu)
            self._push("split", None, [head, payload], len(head) + memoryview(payload).nbytes)
            self.splits += 1
            self.cdus += 1
            return True
        slot = self._slot
        if slot is not None and self._count < 0xFFFF:
            n = encode_small_into(slot.view, slot.used, cdu)
            if n > 0:  # the common case, written in place
                slot.used += n
                self._count += 1
                self.cdus += 1
                return True
        allow_pickle = remote.node.allow_pickle
        try:
            parts, n = encode_record(cdu, slot.used if slot is not None else 8,
                                     allow_pickle=allow_pickle)
        except (TypeError, ValueError) as exc:
            log.error("cannot encode CDU for host %d: %s", self.host, exc)
            return True
        if slot is None or n > slot.room or self._count == 0xFFFF:
            self._flush_block()
            if n + 8 > cfg.block_size:
                # Too big for a block and not splittable (e.g. a large
                # pickle): one frame of its own.
                frame = encode_cdu(cdu, allow_pickle=allow_pickle)
                whole = b"".join(bytes(p) if not isinstance(p, bytes) else p for p in frame)
                self._push("frame", None, [whole], len(whole))
                self.cdus += 1
                return True
            try:
                slot = remote.pool.send.acquire_nowait(self.host, cfg.block_size)
            except WouldBlock:
                return False
            self._open_block(slot)
            parts, n = encode_record(cdu, 8, allow_pickle=allow_pickle)
        # Slot.append, inlined: this loop runs once per small CDU.
        view = slot.view
        at = slot.used
        for part in parts:
            k = len(part) if type(part) is bytes else memoryview(part).nbytes
            view[at:at + k] = part
            at += k
        slot.used = at
        self._count += 1
        self.cdus += 1
        return True

    def _open_block(self, slot: Slot) -> None:
        slot.append(bytes(8))  # level-1 header, patched on commit
        self._slot = slot
        self._count = 0

    def _flush_block(self) -> None:
        if self._slot is not None:
            slot, self._slot = self._slot, None
            self._commit(slot, self._count)

    # -- SBP writer: CDUs -> blocks (coalescing) ------------------------------
    async def _writer(self) -> None:
        pool = self._remote.pool.send
        block_size = self._remote.cfg.block_size
        pending = self._pending
        while True:
            self._writer_idle = True
            try:
                cdu = await pending.receive()
            except ClosedResourceError:
                if self.error is not None:
                    return  # the link failed: fail() closed the queue
                raise
            self._writer_idle = False
            batch = [cdu]
            batch += pending.drain_nowait()
            for cdu in batch:
                while not self._write(cdu):
                    # The row is full and Algorithm 1 cannot grow it: wait
                    # for a block (backpressure reaches the senders through
                    # the pending queue, which stops draining meanwhile).
                    self._open_block(await pool.acquire(self.host, block_size))
            if not len(pending):
                # Nothing more queued: send now rather than wait to fill the
                # block (latency first; under load blocks fill by themselves).
                self._flush_block()

    def _commit(self, slot: Slot, count: int) -> None:
        slot.view[:8] = bp_header(count, slot.used - 8)
        pool = self._remote.pool.send
        pool.commit(slot)
        # The reader side of the row: blocks are sent in commit order, so the
        # oldest committed block is this one.
        taken = pool.next_filled_nowait(self.host)
        self.blocks += 1
        self._push("block", taken, [taken.data], taken.used)

    def _push(self, kind: str, slot: Slot | None, blocks: list[Any], nbytes: int) -> None:
        if not self._units and self._may_send(nbytes):
            self._post(slot, blocks, nbytes)  # nothing queued: skip the hop to the reader
            return
        self._units.append((kind, slot, blocks, nbytes))
        self._units_ready.set()

    # -- SBP reader: blocks -> network, windowed, credit-limited ----------------
    def _may_send(self, nbytes: int) -> bool:
        # Receivers return credit in batches of a quarter window, so at
        # quiescence we hold more than 3/4 of it: any message up to that
        # size can go, and a bigger one goes once we hold half the window
        # (it overdraws the credit), so no size can deadlock.
        c = self._credit
        return (c >= nbytes or c >= self.window // 2) and self._inflight < self._remote.cfg.max_inflight

    def _post(self, slot: Slot | None, blocks: list[Any], nbytes: int) -> None:
        self._credit -= nbytes
        self._inflight += 1
        self.sent_msgs += len(blocks)
        self.sent_bytes += nbytes
        self._remote.data_sent[self.host] += len(blocks)
        fut = self._remote.transport.post(self.host, _DATA, blocks)
        if fut.done():
            self._sent(fut, slot)
        else:
            fut.add_done_callback(functools.partial(self._sent, slot=slot))

    async def _reader(self) -> None:
        units = self._units
        while True:
            if not units:
                self._units_ready.clear()
                await self._units_ready.wait()
                continue
            kind, slot, blocks, nbytes = units[0]
            while not self._may_send(nbytes):
                if self._inflight >= self._remote.cfg.max_inflight:
                    self._inflight_ready.clear()
                    await self._inflight_ready.wait()
                else:
                    self.credit_waits += 1
                    self._credit_ready.clear()
                    await self._credit_ready.wait()
            units.popleft()
            self._post(slot, blocks, nbytes)

    def _sent(self, fut: asyncio.Future[None], slot: Slot | None = None) -> None:
        self._inflight -= 1
        self._inflight_ready.set()
        if slot is not None:
            try:
                self._remote.pool.send.release(slot)
            except Exception:  # pool closed during shutdown
                pass
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None and self.error is None:
            log.error("sending to host %d failed: %s", self.host, exc)
            self.fail(exc)

    def stats(self) -> dict[str, Any]:
        return {"cdus": self.cdus, "blocks": self.blocks, "splits": self.splits,
                "messages": self.sent_msgs, "bytes": self.sent_bytes,
                "credit": self._credit, "credit_waits": self.credit_waits,
                "pending": len(self._pending)}

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except BaseException:  # noqa: BLE001 - shutting down
                pass
        self._tasks = []


def _splittable(data: Any) -> bool:
    if isinstance(data, np.ndarray):
        return not data.dtype.hasobject and data.dtype.fields is None
    return isinstance(data, (bytes, bytearray, memoryview))


class _Unit:
    """One received data message whose CDUs are being placed."""

    __slots__ = ("source", "nbytes", "left")

    def __init__(self, source: _Source, nbytes: int) -> None:
        self.source = source
        self.nbytes = nbytes
        self.left = 1  # the reader's own hold, dropped after the last CDU


class _Source:
    """Receive side of one remote host: RCBP_src's queue and its RBP reader."""

    def __init__(self, host: int) -> None:
        self.host = host
        self.queue: deque[tuple[list[CDU], Slot | None, int]] = deque()
        self.ready = asyncio.Event()
        self.split_head: Any = None
        self.split_bytes = 0
        self.owed = 0
        self.received = 0       # data messages taken off the network
        self.busy = False
        self.bye: int | None = None
        self.task: asyncio.Task[None] | None = None


class Remote:
    """The multi-host half of a :class:`~aiopdbp.node.Node`."""

    def __init__(self, node: Node, transport: Transport, cfg: RemoteConfig) -> None:
        self.node = node
        self.transport = transport
        self.cfg = cfg
        self.rank = transport.rank
        self.size = transport.size
        others = max(1, self.size - 1)
        nblocks = cfg.pool_blocks or 2 * 32 * others
        self.pool = BufferPool(self.size, cfg.row_capacity, cfg.block_size, nblocks, cfg.initial,
                               cfg.threshold, local=self.rank)
        self.links: dict[int, HostLink] = {}
        self.sources = {h: _Source(h) for h in range(self.size) if h != self.rank}
        self.data_sent = {h: 0 for h in range(self.size)}
        self._slots: dict[int, Slot] = {}
        self._parked: dict[Any, deque[tuple[CDU, _Unit]]] = {}
        self._quarter = max(1, cfg.recv_window // 4)
        self._reqs = iter(range(1, 1 << 62))
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._seq = 0                     # last applied (replicas) / assigned (rank 0)
        self._hinfo: dict[int, list[Any]] = {}
        self._windows: dict[int, int] = {}
        self._ready: asyncio.Future[None] | None = None
        self._closing = False
        self.protocol_errors = 0
        self.peer_stop: Stop | None = None
        self.failed: dict[int, BaseException] = {}   # host -> what broke it
        self._acks: set[int] | None = None
        self.fallback_allocs = 0
        self._warned_fallback = False

    # ------------------------------------------------------------------ start
    async def start(self) -> None:
        """Start receiving and run the initialisation sequence (paper Fig. 6).

        Every host reports its HInfo to rank 0; rank 0 orders the node table
        updates, then sends the full host table (ALL-HOSTInfo) and the binding
        table (ALL-MBInfo) to everyone.

        Cancellation: leaves the transport started; ``close()`` cleans up.
        """
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        await self.transport.start(self._on_message, self._alloc)  # type: ignore[call-arg]
        for src in self.sources.values():
            src.task = loop.create_task(_guard(self._rbp_reader(src), None),
                                        name=f"aiopdbp-rbp-reader-{src.host}")
        me = [self.rank, socket.gethostname(), _host_ip(),
              int(NodeType.MASTER if self.rank == 0 else NodeType.COMPUTE)]
        timeout = self.cfg.handshake_timeout if self.cfg.handshake_timeout is not None else 30.0
        if self.rank == 0:
            self._on_hinfo(0, {"hosts": [me], "window": self.cfg.recv_window})
        else:
            self._control(0, Control(MsgType.HINFO, {"hosts": [me], "window": self.cfg.recv_window}))
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            missing = sorted(set(range(self.size)) - set(self._hinfo)) if self.rank == 0 else [0]
            raise HandshakeError(
                f"host {self.rank}: initialisation did not complete within {timeout} s "
                f"(no answer from host(s) {missing})") from None
        for h in range(self.size):
            if h != self.rank:
                link = self.link(h)
                link.window = link._credit = self._windows.get(h, self.cfg.recv_window)

    def _on_hinfo(self, src: int, body: dict[str, Any]) -> None:
        if self.rank == 0 and len(body["hosts"]) == 1 and src not in self._hinfo:
            self._hinfo[src] = list(body["hosts"][0])
            self._windows[src] = int(body.get("window", self.cfg.recv_window))
            if len(self._hinfo) == self.size:
                for h in range(self.size):
                    nid, name, ip, ntype = self._hinfo[h]
                    self._sequence(0, 0, "node_add", [nid, name, ip, ntype])
                hosts = [self._hinfo[h] + [self._windows[h]] for h in range(self.size)]
                full = Control(MsgType.HINFO, {"hosts": [h[:4] for h in hosts],
                                               "windows": [h[4] for h in hosts]})
                bindings = Control(MsgType.MBINFO, {"bindings": self._bindings()})
                for h in range(1, self.size):
                    self._control(h, full)
                    self._control(h, bindings)
                self._windows = {h: self._windows[h] for h in range(self.size)}
                self._set_ready()
        elif self.rank != 0 and src == 0:
            self._windows = dict(enumerate(int(w) for w in body.get("windows", [])))

    def _bindings(self) -> list[list[Any]]:
        t = self.node.tables
        return [[p.pid, p.name, int(p.ptype), p.node, p.pipe] for p in t.pta.values()]

    def _set_ready(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    def link(self, host: int) -> HostLink:
        link = self.links.get(host)
        if link is None:
            if not 0 <= host < self.size or host == self.rank:
                raise BrokenResourceError(f"no remote host {host}")
            link = self.links[host] = HostLink(self, host)
            link.start()
            if host in self.failed:
                link.fail(self.failed[host])
        return link

    # --------------------------------------------------- replicated tables
    async def commit(self, op: str, args: tuple[Any, ...]) -> Any:
        """Apply a table update in the cluster-wide order; return its result.

        Cancellation: the update may still be applied (it is already on its
        way to rank 0); only the wait for it is abandoned.
        """
        req = next(self._reqs)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[req] = fut
        try:
            if self.rank == 0:
                self._sequence(0, req, op, list(args))
            else:
                self._control(0, Control(MsgType.TABLE, {"seq": 0, "op": op, "args": list(args),
                                                         "req": req, "origin": self.rank}), req)
            return await fut
        finally:
            self._waiting.pop(req, None)

    def commit_nowait(self, op: str, args: tuple[Any, ...]) -> None:
        if self._closing:
            try:  # tearing down: the other hosts are closing too
                self.node.tables.apply(op, args)
            except PDBPError:
                pass
            return
        if self.rank == 0:
            self._sequence(0, 0, op, list(args))
        else:
            self._control(0, Control(MsgType.TABLE, {"seq": 0, "op": op, "args": list(args),
                                                     "req": 0, "origin": self.rank}))

    def _sequence(self, origin: int, req: int, op: str, args: list[Any]) -> None:
        """Rank 0: order, apply and broadcast one update."""
        try:
            result = self.node.tables.apply(op, args)
        except PDBPError as exc:
            if origin == 0:
                self._resolve(req, None, exc)
            else:
                self._control(origin, Control(MsgType.TABLE, {
                    "seq": -1, "op": op, "args": args, "req": req, "origin": origin,
                    "error": str(exc), "etype": type(exc).__name__,
                    "name": getattr(exc, "name", None)}))
            return
        self._seq += 1
        msg = Control(MsgType.TABLE, {"seq": self._seq, "op": op, "args": args, "req": req,
                                      "origin": origin})
        for h in range(1, self.size):
            self._control(h, msg)
        if origin == 0:
            self._resolve(req, result, None)

    def _on_table(self, src: int, body: dict[str, Any]) -> None:
        if self.rank == 0:
            self._sequence(int(body.get("origin", src)), int(body.get("req", 0)), body["op"],
                           body["args"])
            return
        req = int(body.get("req", 0))
        origin = int(body.get("origin", -1))
        if body["seq"] == -1:
            if origin == self.rank:
                self._resolve(req, None, _rebuild_error(body))
            return
        if body["seq"] != self._seq + 1:
            log.critical("table update %s out of order (applied %d)", body["seq"], self._seq)
        self._seq = int(body["seq"])
        err: PDBPError | None = None
        try:
            result = self.node.tables.apply(body["op"], body["args"])
        except PDBPError as exc:  # cannot happen if every host applies the same order
            log.critical("replica diverged applying %s: %s", body, exc)
            result, err = None, exc
        if origin == self.rank:
            self._resolve(req, result, err)

    def _resolve(self, req: int, result: Any, exc: BaseException | None) -> None:
        fut = self._waiting.get(req)
        if fut is None or fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(tuple(result) if isinstance(result, list) else result)

    # ------------------------------------------------------ control channel
    def _control(self, dest: int, msg: Control | CDU, req: int = 0) -> None:
        """Send one control message; if it cannot be sent and ``req`` waits
        for an answer, that wait fails instead of hanging."""
        if isinstance(msg, Control):
            frame: Any = encode_control(msg)
        else:
            frame = b"".join(bytes(p) if not isinstance(p, bytes) else p for p in encode_cdu(msg))
        try:
            fut = self.transport.post(dest, _CTRL, [frame])
        except Exception as exc:  # transport already closed
            self._unreachable(dest, req, exc)
            return
        if fut.done():
            if not fut.cancelled() and fut.exception() is not None:
                self._unreachable(dest, req, fut.exception())  # type: ignore[arg-type]
            return
        fut.add_done_callback(
            lambda f: None if f.cancelled() or f.exception() is None
            else self._unreachable(dest, req, f.exception()))  # type: ignore[arg-type]

    def _unreachable(self, dest: int, req: int, exc: BaseException) -> None:
        log.debug("control message to host %d failed: %s", dest, exc)
        if req:
            self._resolve(req, None, BrokenResourceError(f"host {dest} is unreachable: {exc}"))

    def send_done(self, key: tuple[int, int], dest_pid: int, src_pid: int, error: str | None) -> None:
        """Tell a remote sender its stream was consumed (or failed here)."""
        cdu = CDU(Kind.STREAM, dest_pid, (src_pid,), error.encode() if error else None, 0, 0,
                  key[1], 0, key[0], (), StreamOp.DONE)
        self._control(key[0], cdu)

    def send_credit(self, key: tuple[int, int], dest_pid: int, src_pid: int, n: int) -> None:
        """Give a remote stream sender ``n`` segments of credit back."""
        cdu = CDU(Kind.STREAM, dest_pid, (src_pid,), None, 0, 0, key[1], n, key[0], (),
                  StreamOp.CREDIT)
        self._control(key[0], cdu)

    def _on_control(self, src: int, buf: memoryview) -> None:
        try:
            items = decode(buf)
        except ProtocolError as exc:
            self.protocol_errors += 1
            log.error("malformed control message from host %d: %s", src, exc)
            self.fail_host(src, ProtocolError(f"malformed control message from host {src}: {exc}"))
            return
        for item in items:
            if isinstance(item, CDU):
                if item.op is StreamOp.DONE:
                    err = bytes(item.data).decode(errors="replace") if item.data is not None else None
                    self.node._stream_done((item.source_n, item.sno), err, src)
                elif item.op is StreamOp.CREDIT:
                    self.node._stream_credit_in((item.source_n, item.sno), item.segno)
                continue
            body = item.body
            t = item.type
            if t is MsgType.CREDIT:
                link = self.links.get(src)
                if link is not None:
                    link.grant(int(body["bytes"]))
            elif t is MsgType.TABLE:
                self._on_table(src, body)
            elif t is MsgType.HINFO:
                self._on_hinfo(src, body)
            elif t is MsgType.MBINFO:
                self._set_ready()
            elif t is MsgType.BYE:
                s = self.sources.get(src)
                if s is not None:
                    s.bye = int(body["sent"])
                    s.ready.set()
            elif t is MsgType.ERROR:
                self._on_peer_stop(src, body)

    def fail_host(self, host: int, exc: BaseException) -> None:
        """Host ``host`` can no longer be talked to: everything that depends
        on it fails with ``exc`` (the first cause wins)."""
        if host not in self.failed:
            self.failed[host] = exc
            log.debug("host %d: %s", host, exc)
        link = self.links.get(host)
        if link is not None:
            link.fail(self.failed[host])
        self.node._break_streams_to(host, self.failed[host])

    # ------------------------------------------------- job-wide stops
    def tell_peers(self, stop: Stop) -> None:
        """Tell every other rank that this job stops (our interrupt or failure)."""
        failed = stop.kind is StopKind.PEER_FAILED
        body = {"message": stop.message, "kind": "failed" if failed else "interrupted",
                "signal": stop.signal, "rank": stop.rank}
        if failed:
            self._acks = set()
        for h in range(self.size):
            if h != self.rank:
                self._control(h, Control(MsgType.ERROR, body))

    async def wait_acks(self, timeout: float) -> bool:
        """Wait until every other rank acknowledged our failure notice."""
        others = set(range(self.size)) - {self.rank}
        deadline = time.monotonic() + timeout
        delay = 0.0
        while self._acks is None or not others <= self._acks:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(delay)
            delay = min(0.005, delay + 0.0005)
        return True

    def _on_peer_stop(self, src: int, body: dict[str, Any]) -> None:
        kind = body.get("kind", "failed")
        if kind == "ack":
            if self._acks is not None:
                self._acks.add(src)
            return
        rank = int(body.get("rank", src))
        message = str(body.get("message", ""))
        if kind == "interrupted":
            stop = Stop(StopKind.INTERRUPTED, rank, int(body.get("signal", 2)), message)
            exc = RankFailedError(f"rank {rank} was interrupted", rank)
        else:
            self._control(src, Control(MsgType.ERROR, {"message": "", "kind": "ack"}))
            stop = Stop(StopKind.PEER_FAILED, rank, 0, message)
            exc = RankFailedError(f"rank {rank} failed: {message}", rank)
        self.peer_stop = stop
        self.fail_host(src, exc)
        job = current_job()
        if job is not None:
            job.request_stop(stop, tell=False)

    # ------------------------------------------------- receive pool (RBP)
    def _alloc(self, src: int, channel: Channel, nbytes: int) -> memoryview | None:
        if channel != _DATA or nbytes > self.cfg.block_size or src == self.rank:
            return None
        s = self.sources.get(src)
        if s is None or s.split_head is not None:
            return None  # the payload half of a split frame: its own buffer
        try:
            slot = self.pool.recv.acquire_nowait(src, nbytes)
        except (WouldBlock, Exception):
            # The row is full and Algorithm 1 may not grow it (SU at or under
            # the threshold, or no free UMB block): take the message into a
            # private buffer instead; the credit window still bounds it.
            self.fallback_allocs += 1
            if not self._warned_fallback:
                self._warned_fallback = True
                log.debug("receive pool row for host %d is full; using a private buffer", src)
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
        slot = self._slots.pop(id(buf), None)
        n = memoryview(buf).nbytes
        s.received += 1
        if slot is not None:
            rpool = self.pool.recv
            rpool.commit(slot, n)
            slot = rpool.next_filled_nowait(src)
        try:
            if s.split_head is not None:
                head, s.split_head = s.split_head, None
                cdus: list[Any] = [decode_split(head, buf)]
                n += s.split_bytes
            else:
                mt, body_len = peek_header(buf)
                if mt is MsgType.REMOTE and n < 8 + body_len:
                    s.split_head = bytes(buf)   # header now, payload next
                    s.split_bytes = n
                    if slot is not None:
                        self.pool.recv.release(slot)
                    return
                cdus = decode(buf, allow_pickle=self.node.allow_pickle)
        except ProtocolError as exc:
            self.protocol_errors += 1
            if slot is not None:
                self.pool.recv.release(slot)
            log.error("malformed data message from host %d: %s", src, exc)
            self.fail_host(src, ProtocolError(f"malformed data message from host {src}: {exc}"))
            return
        if not s.queue and not s.busy and self._place_now(s, cdus, slot, n):
            return  # delivered without a hop to the RBP reader
        s.queue.append((cdus, slot, n))
        s.ready.set()

    def _place_now(self, s: _Source, cdus: list[CDU], slot: Slot | None, n: int) -> bool:
        nowait = self.node._remote_targets_nowait
        plan = []
        for cdu in cdus:
            targets = nowait(cdu)
            if targets is None:
                return False
            plan.append(targets)
        unit = _Unit(s, n)
        place = self._place
        for cdu, targets in zip(cdus, plan):
            _settle(cdu, slot is not None)
            for tgt, force in targets:
                place(tgt, cdu, unit, force)
        if slot is not None:
            self.pool.recv.release(slot)
        self._unit_done(unit)
        return True

    async def _rbp_reader(self, s: _Source) -> None:
        targets_of = self.node._remote_targets
        pool = self.pool.recv
        place = self._place
        q = s.queue
        while True:
            if not q:
                s.ready.clear()
                await s.ready.wait()
                continue
            cdus, slot, n = q[0]
            unit = _Unit(s, n)
            s.busy = True
            try:
                for cdu in cdus:
                    _settle(cdu, slot is not None)  # the block is about to be reused
                    for tgt, force in await targets_of(cdu):
                        place(tgt, cdu, unit, force)
            finally:
                s.busy = False
            q.popleft()
            if slot is not None:
                pool.release(slot)
            self._unit_done(unit)

    def _place(self, tgt: Any, cdu: CDU, unit: _Unit, force: bool) -> None:
        """Put a received CDU into its local pipe, or park it behind that
        pipe's earlier CDUs when the pipe is full.

        Parking instead of waiting keeps one stalled GP from blocking every
        other GP that receives from the same host (no head-of-line blocking
        inside the row); the message's credit is returned only when all its
        CDUs are placed, so parked data stays bounded by the credit window.
        """
        if force:
            tgt.force_put(cdu)
            return
        q = self._parked.get(tgt)
        if q is None:
            try:
                tgt.reserve_nowait()
            except WouldBlock:
                pass
            except BrokenResourceError:
                return  # its reader is gone; nothing to deliver to
            else:
                tgt.put_reserved(cdu)
                return
            q = self._parked[tgt] = deque()
            asyncio.get_running_loop().create_task(_guard(self._unpark(tgt, q), None),
                                                   name="aiopdbp-rbp-parked")
        q.append((cdu, unit))
        unit.left += 1

    async def _unpark(self, tgt: Any, q: deque[tuple[CDU, _Unit]]) -> None:
        try:
            while q:
                cdu, unit = q[0]
                try:
                    try:  # fill every free slot without a task switch per CDU
                        tgt.reserve_nowait()
                    except WouldBlock:
                        await tgt.reserve()
                except BrokenResourceError:
                    while q:
                        self._unit_done(q.popleft()[1])
                    return
                q.popleft()
                tgt.put_reserved(cdu)
                self._unit_done(unit)
        finally:
            if self._parked.get(tgt) is q:
                del self._parked[tgt]
            while q:  # cancelled at shutdown
                self._unit_done(q.popleft()[1])

    def _unit_done(self, unit: _Unit) -> None:
        unit.left -= 1
        if unit.left == 0:
            s = unit.source
            s.owed += unit.nbytes
            if s.owed >= self._quarter:
                self._return_credit(s)

    def _return_credit(self, s: _Source, *, force: bool = False) -> None:
        """Return credit once a quarter of the window is owed (see
        ``HostLink._may_send`` for why that cannot deadlock); ``force`` at
        shutdown.  Batching keeps credit traffic to one control message per
        quarter window instead of one per data message."""
        if s.owed and (force or s.owed >= self._quarter):
            owed, s.owed = s.owed, 0
            self._control(s.host, Control(MsgType.CREDIT, {"bytes": owed, "blocks": 0}))

    # ---------------------------------------------------------------- close
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
            await self._wait(lambda: all(link.idle or link.error for link in self.links.values()),
                             deadline, "flushing sends")
            for h in range(self.size):
                if h != self.rank:
                    self._control(h, Control(MsgType.BYE, {"sent": self.data_sent[h]}))

            def drained() -> bool:
                return not self._parked and all(
                    s.bye is not None and s.received >= s.bye and not s.queue and not s.busy
                    for s in self.sources.values())
            await self._wait(drained, deadline, "waiting for the other hosts to close")
        finally:
            await self.stop()

    async def flush(self) -> None:
        """Wait until every link has handed its CDUs to the transport and the
        sends completed.

        Cancellation: nothing to undo.
        """
        await self._wait(lambda: all(link.idle or link.error for link in self.links.values()),
                         float("inf"), "flushing")

    async def _wait(self, cond: Any, deadline: float, what: str) -> None:
        delay = 0.0
        while not cond():
            if time.monotonic() > deadline:
                log.error("host %d: gave up %s after the close timeout", self.rank, what)
                return
            await asyncio.sleep(delay)
            delay = min(0.002, delay + 0.0001)

    async def stop(self) -> None:
        for link in self.links.values():
            await link.stop()
        for s in self.sources.values():
            if s.task is not None:
                s.task.cancel()
                try:
                    await s.task
                except BaseException:  # noqa: BLE001 - shutting down
                    pass
                s.task = None
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(BrokenResourceError("node closed"))
                fut.exception()
        self.pool.close()

    def size_history(self, host: int) -> dict[str, list[tuple[float, int]]]:
        """Real size over time of the sub-pools for ``host``: SCBP and RCBP
        (the Algorithm 1 statistic)."""
        return {"send": self.pool.send.size_history(host), "recv": self.pool.recv.size_history(host)}

    def stats(self) -> dict[str, Any]:
        return {
            "links": {h: link.stats() for h, link in self.links.items()},
            "received": {h: s.received for h, s in self.sources.items()},
            "protocol_errors": self.protocol_errors,
            "fallback_allocs": self.fallback_allocs,
            "pool": self.pool.stats(),
        }


async def _guard(coro: Any, on_error: Any) -> None:
    """Run a service coroutine; a crash is logged (and fails its link) instead
    of dying silently and leaving peers to hang."""
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001
        log.exception("aiopdbp service task failed")
        if on_error is not None:
            on_error(BrokenResourceError(f"link failed: {exc!r}"))


def _own(data: Any) -> Any:
    if isinstance(data, memoryview):
        return bytes(data)
    if isinstance(data, np.ndarray):
        return data.copy()
    return data


def _settle(cdu: CDU, in_block: bool) -> None:
    """Give a received payload the type the receiver expects: bytes-like
    message payloads are ``bytes`` (as on one host); anything that lives in a
    pool block is copied out before the block is reused."""
    data = cdu.data
    if data is None:
        return
    if in_block:
        cdu.data = _own(data)
    elif type(data) is memoryview and cdu.kind is not Kind.STREAM:
        cdu.data = bytes(data)


def _rebuild_error(body: dict[str, Any]) -> PDBPError:
    """The error rank 0 refused a table update with, as the same class and
    message (``name`` carries the GP name of the name errors)."""
    etype = body.get("etype", "")
    name = body.get("name")
    if etype == "DuplicateProcessError" and isinstance(name, str):
        return DuplicateProcessError(name)
    if etype == "UnknownProcessError" and isinstance(name, str):
        return UnknownProcessError(name)
    return PDBPError(str(body.get("error", "table update refused")))


def _host_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def pack_meta(meta: StreamMeta) -> bytes:
    return msgpack.packb(meta.to_wire())  # type: ignore[no-any-return]


def unpack_meta(data: Any) -> StreamMeta:
    try:
        return StreamMeta.from_wire(msgpack.unpackb(bytes(data), raw=False))
    except Exception as exc:
        raise ProtocolError(f"bad stream OPEN meta: {exc}") from exc
