"""The device path: how device arrays travel between GPs (one per node).

Theory of operation
===================

``node.devices`` is the node's :class:`DevicePath`.  It owns the device
backend (CuPy, or the simulated one), the :class:`~aiopdbp.device.staging.Stager`
with its pinned chunk pool, the SGPs' devices, and one *poller* that the
transport's progress engine calls on every step while device work is in
flight (never a blocking synchronize, never a CUDA host callback): it
advances the staging transfers, the receive jobs of incoming device streams
(:mod:`aiopdbp.streams.devicestreams`) and the events that awaiting calls wait for
(:mod:`aiopdbp.streams.devicepoll`).
With nothing in flight the poller is removed, so an idle node pays nothing.

**Backend and pool.**  ``open_node(device=...)`` (or env ``AIOPDBP_DEVICE``)
names the backend: ``"cupy"``, ``"sim"``, a backend instance, ``"none"``
(no device support), or ``"auto"`` (the default: CuPy if it is installed,
opened when first needed).  A named backend and its pinned pool are opened
at node start; ``"auto"`` opens them on first use (the first SGP or device
array), so a CPU-only program never imports CuPy.  aiopdbp never changes the
thread's current device: an SGP's device defaults to the rank's (its local
rank modulo the visible devices) and every device call names its device.

**Sending** (``gp.send`` / ``gp.send_stream`` of a device array):

The producer's pending work is captured *at the call*: ``gp.send`` and
``gp.send_stream`` are plain functions that record an event on the
producer's stream (its ``stream=`` argument, else the thread's current stream
of the array's device -- CuPy's, or torch's through ``__dlpack__(stream=)``)
and on the sending SGP's ``gp.stream`` before they return the awaitable, so
a ``with stream:`` block left before the await does not matter.  Every copy
aiopdbp queues waits on those events, on a copy stream of its own (one per
transfer in flight, from a pool).  Received device arrays are allocated from
the memory pool of the receiving SGP's ``gp.stream`` and the copies into them
wait for that stream's work, so a block freed by the receiver's kernels is
never overwritten under them.  An array is kept alive until every copy that
touches it completed, also when the call that queued it was cancelled.

* *Same node*: the array is copied device-to-device into a new array on the
  receiving SGP's device; the call returns when that copy's event is done.  ``copy=False`` hands the
  very object over (after the producer's event), when the receiver is an
  SGP on the array's device.  An NGP receives numpy: the array is staged
  through pinned chunks into a new numpy array.
* *Another node*: a device stream (see :mod:`aiopdbp.streams.devicestreams`): the
  array is staged out chunk by chunk; ``send`` and ``send_stream`` return
  when the receiver has the whole array, so a later send of the same GP
  cannot overtake it.  A ``send`` travels as a stream that the receiving node
  turns into one :class:`~aiopdbp.wire.message.Message` when it is complete.

**Delivery rule.**  An SGP receives device data as device arrays on its own
device, an NGP as numpy arrays; an SGP receives host data as numpy unless it
was opened with ``to_device=True``.  A received array is *complete* when
``recv()``/``read()`` returns (every copy into it is done): use it on any
stream without synchronising.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.arrays import ML_DTYPES, device_dtype, host_array, tensor_wanted, wire_name
from aiopdbp.wire.mesp import Kind
from aiopdbp.device import open_backend
from aiopdbp.device.backend import DeviceBackend, Order
from aiopdbp.device.chunks import ArrayMeta, ChunkPlan, Piece, segment_view
from aiopdbp.device.staging import Stager, Transfer
from aiopdbp.streams.devicepoll import DevicePoller
from aiopdbp.streams.devicebind import Captured, DeviceBindings, DeviceConfig, Sender, device_config
from aiopdbp.streams.devicestreams import (
    TERMINATOR,
    DeviceIncomingStream,
    HostRecv,
    HostToDeviceStream,
    RecvJob,
    device_header,
)
from aiopdbp.errors import BrokenResourceError, ClosedResourceError, DeviceError, StreamError, TransportError
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message, credit_cost
from aiopdbp.streams.receiver import IncomingStream, StreamMeta, StreamState
from aiopdbp.streams.sender import GenSource, Staged, run_sender

if TYPE_CHECKING:
    from aiopdbp.hosts.tables import Tables
    from aiopdbp.routing.arrivals import Arrivals
    from aiopdbp.routing.router import Router, Target
    from aiopdbp.streams.outgoing import OutgoingStream
    from aiopdbp.streams.table import StreamTable
    from aiopdbp.transport.base import Transport

log = logging.getLogger("aiopdbp.streams.devicepath")

__all__ = ["DevicePath"]


class _Done:
    """A request that is over at once (local staging: the bytes were copied)."""

    received = 0

    def done(self) -> bool:
        return True

    def cancel(self) -> None:
        pass


_DONE = _Done()


class _OutSend:
    """A device array being staged out to another host."""

    __slots__ = ("host", "tag", "npieces", "posted", "transfer")

    def __init__(self, host: int, tag: int, npieces: int) -> None:
        self.host = host
        self.tag = tag
        self.npieces = npieces
        self.posted = 0
        self.transfer: Transfer | None = None


class DevicePath:
    """A node's device support (see the module docstring)."""

    def __init__(self, config: DeviceConfig | str | DeviceBackend | None = None, *, rank: int,
                 tables: Tables, router: Router, arrivals: Arrivals,
                 submit: Callable[[Target, int, Message], None],
                 transport: Transport | None) -> None:
        self._rank = rank
        self._tables = tables
        self._router = router
        self._arrivals = arrivals   # where a device message from another host goes in
        self._submit = submit
        self._transport = transport
        self.config = device_config(config)
        self.backend: DeviceBackend | None = None
        self.stager: Stager | None = None
        self._owns_backend = False
        #: the SGPs of this node and their devices
        self.sgps = DeviceBindings(tables, lambda: self.open().backend)
        #: device work in flight, advanced by the progress engine
        self.poller = DevicePoller(transport)
        self._outs: set[_OutSend] = set()
        self._tags: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.counts = {"sent_local": 0, "sent_remote": 0, "received_remote": 0, "drained": 0}
        #: the class of host array streams arriving at SGPs opened with to_device=True
        self.h2d_stream_class: type[HostToDeviceStream] = type(
            "HostToDeviceStream", (HostToDeviceStream,), {"devices": self})

    # ---------------------------------------------------------- lifecycle
    @property
    def enabled(self) -> bool:
        """False when device support is off (``device="none"``)."""
        return self.config.backend != "none"

    def start(self) -> None:
        """Open a named backend and its pinned pool now (``"auto"``: on first use)."""
        if self.config.backend != "auto" and self.enabled:
            self.open()

    def open(self) -> Stager:
        """The stager, opening the backend and the pinned pool on first use."""
        if self.stager is not None:
            return self.stager
        if self._closed:
            raise ClosedResourceError("the node's device support is closed")
        kind = self.config.backend
        if isinstance(kind, DeviceBackend):
            backend, owns = kind, False
        elif kind == "none":
            raise DeviceError("device support is off (open_node(device='none') or AIOPDBP_DEVICE=none)")
        elif kind == "auto" and importlib.util.find_spec("cupy") is None:
            raise DeviceError("no device backend: CuPy is not installed (pip install aiopdbp[gpu-cuda12] "
                              "or [gpu-cuda13]); the simulated backend runs anywhere: "
                              "open_node(device='sim') or AIOPDBP_DEVICE=sim")
        else:
            backend = open_backend(str(kind), **(self.config.sim if kind == "sim" else {}))
            owns = True
        cfg = self.config
        try:
            self.stager = Stager(backend, pool_bytes=cfg.pool_bytes, chunk_size=cfg.chunk_size,
                                 max_in_flight=cfg.max_in_flight, recv_reserve=cfg.recv_reserve)
        except BaseException:
            if owns:
                backend.close()
            raise
        self.backend, self._owns_backend = backend, owns
        self.poller.stager = self.stager
        return self.stager

    def close(self) -> None:
        """Abandon what is in flight, drop the pinned pool, close an owned backend."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        self.poller.close()
        if self.stager is not None:
            self.stager.close()
        if self.backend is not None and self._owns_backend:
            self.backend.close()

    # ----------------------------------------------------------------- SGPs
    def wants_device(self, pid: int) -> bool:
        """True for an SGP of this node opened with ``to_device=True``."""
        return self.sgps.wants_device(pid)

    # ------------------------------------------------------------ capture
    def capture(self, gp: Sender, data: Any, stream: Any = None) -> Captured:
        """Capture device array ``data`` *now*, at the user's call: events on
        the producer's stream (``stream``, else the current one of the array's
        device) and on the sending SGP's ``gp.stream`` order every later copy.
        ``TypeError`` for what the backend cannot use."""
        backend = self.open().backend
        user = None
        if stream is not None:
            device = getattr(data, "device", None)
            dev = getattr(device, "id", getattr(device, "index", device))
            user = backend.as_stream(stream, int(dev) if isinstance(dev, int) else backend.get_device())
        info = backend.inspect(data, user)
        dt = device_dtype(data, info.dtype)
        if dt is not info.dtype:  # a tensor: its receivers get a tensor back (the wire name says so)
            info = info.replace(dtype=dt)
        after = [backend.record_event(info.stream)]
        own = self.sgps.get(gp.pid)
        if own is not None:
            after.append(backend.record_event(own.device_stream))
        return Captured(data, info, tuple(after))

    # ------------------------------------------------------- local copies
    async def local_payload(self, gp: Sender, cap: Captured, pid: int, copy: bool) -> Any:
        """What GP ``pid`` of this node receives for a captured device array:
        a copy on its device (or the array itself, ``copy=False``), or numpy
        for an NGP."""
        stager = self.open()
        backend = stager.backend
        info, data = cap.info, cap.data
        device = self.sgps.device_of(pid)
        if device is None:  # an NGP: pinned staging into a new numpy array
            out = np.empty(info.nbytes, dtype=np.uint8)

            def post(piece: Piece, buf: memoryview) -> _Done:
                out[piece.offset: piece.offset + piece.nbytes] = np.frombuffer(buf, dtype=np.uint8)
                return _DONE

            await self.poller.transfer(lambda done: stager.send(data, post, on_done=done, info=info, after=cap.after))
            order = info.order or "C"
            shaped = out.view(info.dtype).reshape(info.shape[::-1] if order == "F" else info.shape)
            return shaped.T if order == "F" else shaped
        s = stager.streams.take(info.device)
        for ev in cap.after:
            backend.wait_event(s, ev)
        if not copy and info.device == device:
            await self.poller.wait(backend.record_event(s), (data,), s)
            return data
        consumer = self.sgps.stream_of(pid) or backend.current_stream(device)
        dst = backend.empty(info.shape, info.dtype, info.order or "C", device, consumer)
        backend.wait_event(s, backend.record_event(consumer))  # dst's block may be one the consumer freed
        src = info.array if info.order is not None else backend.contiguous(info.array, s)
        backend.copy_d2d(src, dst, s)
        await self.poller.wait(backend.record_event(s), (data, src, dst), s)
        return dst

    async def to_device(self, host: Any, pid: int) -> Any:
        """Host array ``host`` as a new device array on SGP ``pid``'s device
        (pinned staging), a CPU tensor as a tensor there (where torch
        imports; bfloat16 and float8 tensors stay where they are); other
        payloads are returned as they are."""
        device = self.sgps.device_of(pid)
        if device is None:
            return host
        if not isinstance(host, np.ndarray):
            mem = host_array(host)  # a CPU tensor: its memory, its dtype tagged as a tensor's
            if mem is None or wire_name(mem.dtype).partition(";")[0] in ML_DTYPES:
                return host
            host = mem
        tensor = tensor_wanted(wire_name(host.dtype))
        arr = host if host.flags.c_contiguous or host.flags.f_contiguous else np.ascontiguousarray(host)
        order: Order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
        flat = (arr.T if order == "F" else arr).reshape(-1).view(np.uint8)
        stager = self.open()
        meta = ArrayMeta(arr.dtype, tuple(arr.shape), order, stager.pool.chunk_size)

        def post(piece: Piece, buf: memoryview) -> _Done:
            np.frombuffer(buf, dtype=np.uint8)[:] = flat[piece.offset: piece.offset + piece.nbytes]
            return _DONE

        t = await self.poller.transfer(lambda done: stager.recv(meta, post, device=device, on_done=done,
                                                          consumer=self.sgps.stream_of(pid)))
        return stager.backend.as_tensor(t.array) if tensor else t.array  # type: ignore[attr-defined]

    # -------------------------------------------------------------- sending
    async def send(self, gp: Sender, streams: StreamTable, dest: str, cap: Captured, *, com: int, kind: Kind,
                   timeout: float | None, copy: bool) -> None:
        """Body of ``gp.send`` for a device array (see the module docstring);
        to another node it travels as a device stream of ``streams``.

        Cancellation: a cancelled send has queued nothing (its credit is given back).
        """
        router = self._router
        pid = await router.resolve(dest, timeout)
        tgt = router.targets.get(pid) or await router.target(pid, timeout)
        if tgt.remote:
            await self._send_remote(gp, streams, pid, cap, com=com, kind=kind, timeout=timeout, segment_size=None)
            return
        cost = credit_cost(cap.data)
        await router.reserve(tgt, pid, cost, timeout, f"GP {dest!r}", gp.name)
        try:
            async with asyncio.timeout(timeout):
                payload = await self.local_payload(gp, cap, pid, copy)
        except BaseException:
            tgt.unreserve(pid, cost)
            raise
        if payload is not cap.data and not isinstance(payload, np.ndarray) and tensor_wanted(wire_name(cap.info.dtype)):
            payload = self.open().backend.as_tensor(payload)  # sent as a tensor
        self._submit(tgt, pid, Message((gp.name, kind, com, payload, gp.pid)))
        self.counts["sent_local"] += 1

    async def send_stream(self, gp: Sender, streams: StreamTable, dest: str, cap: Captured, *,
                          segment_size: int | None, com: int, timeout: float | None, copy: bool) -> int:
        """Body of ``gp.send_stream`` for a device array, a stream of
        ``streams``; returns its bytes.

        Cancellation: as for :func:`~aiopdbp.streams.sender.run_sender`.
        """
        if segment_size is not None and segment_size < 1:
            raise ValueError("segment_size must be >= 1")
        pid = await self._router.resolve(dest, timeout)
        if self._tables.process(pid).node != self._rank:
            return await self._send_remote(gp, streams, pid, cap, com=com, kind=None, timeout=timeout,
                                           segment_size=segment_size)
        info = cap.info
        meta = StreamMeta("device", info.nbytes, np.dtype(info.dtype), info.shape, com)
        source = GenSource(lambda out: self._local_segments(out, gp, pid, cap, segment_size, copy))
        n = await run_sender(streams, gp.pid, pid, meta, source, timeout=timeout, what=f"stream to {dest!r}")
        self.counts["sent_local"] += 1
        return n

    async def _send_remote(self, gp: Sender, streams: StreamTable, pid: int, cap: Captured, *, com: int,
                           kind: Kind | None,
                           timeout: float | None, segment_size: int | None) -> int:
        """Stage a device array out to GP ``pid`` on another node (a device stream)."""
        tables = self._tables
        stager = self.open()
        info = cap.info
        host = tables.process(pid).node
        chunk = stager.pool.chunk_size
        piece = min(segment_size or chunk, chunk)
        limit = self._transport.raw_tag_limit if self._transport is not None else 0
        if limit <= 0:
            raise TransportError("this transport cannot carry device arrays (it has no raw messages)")
        n = self._tags.get(host, 0)     # raw-message tags, per host in turn
        self._tags[host] = n + 1
        sent = _OutSend(host, n % limit, 0)
        ameta = ArrayMeta(info.dtype, info.shape, info.order or "C", piece)
        sent.npieces = ChunkPlan(ameta).npieces
        # the receiver's name: its registration may reach its host after this stream
        extra: dict[str, Any] = {"dev": ameta.to_wire(), "tag": sent.tag, "to": tables.name_of(pid)}
        if kind is not None:
            extra["msg"] = int(kind)
        meta = StreamMeta("device", info.nbytes, np.dtype(info.dtype), info.shape, com, extra=extra)
        source = GenSource(lambda out: self._staged_segments(out, gp, cap, sent, ameta))
        n = await run_sender(streams, gp.pid, pid, meta, source, timeout=timeout,
                             what=f"device array to GP {tables.name_of(pid)!r}")
        self.counts["sent_remote"] += 1
        return n

    async def _local_segments(self, out: OutgoingStream, gp: Sender, pid: int, cap: Captured,
                              segment_size: int | None, copy: bool) -> AsyncGenerator[Any, None]:
        """Chunk source of a device array for a GP of this node: its copy on
        the receiver's device (or numpy for an NGP), in segment views."""
        payload = await self.local_payload(gp, cap, pid, copy)
        if isinstance(out.incoming, DeviceIncomingStream):
            out.incoming.array = payload
            if payload is not cap.data and _sent_as_tensor(out.incoming.meta):
                out.incoming.to_tensor = self.open().backend.as_tensor
        info = cap.info
        chunk = self.open().pool.chunk_size
        ameta = ArrayMeta(info.dtype, info.shape, _order_of(payload, self.backend),
                          min(segment_size or chunk, chunk))
        plan = ChunkPlan(ameta)
        for i in range(plan.nsegments):
            yield segment_view(payload, ameta, plan.segment(i))

    async def _staged_segments(self, out: OutgoingStream, gp: Sender, cap: Captured, sent: _OutSend,
                               ameta: ArrayMeta) -> AsyncGenerator[Any, None]:
        """Chunk source of a device array for a GP of another node: the
        stager moves it out piece by piece as raw transport messages (its
        device-to-host copies overlap the sends); the segments are
        :class:`~aiopdbp.streams.sender.Staged`, counted once all are out."""
        stager = self.open()
        wire = self._transport
        assert wire is not None

        def post(piece: Piece, buf: memoryview) -> Any:
            req = wire.raw_isend(sent.host, sent.tag, buf)
            sent.posted += 1
            return req

        self._outs.add(sent)
        try:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def staged(_: Transfer) -> None:
                if not fut.done():
                    fut.set_result(None)

            sent.transfer = stager.send(cap.data, post, piece_size=ameta.piece_size, on_done=staged, info=cap.info,
                                        after=cap.after)
            self.poller.kick()
            # the receiver may give up while the pieces go out: stop at once
            await asyncio.wait([fut, out.done], return_when=asyncio.FIRST_COMPLETED)
            if out.broken is not None:
                raise out.broken
            await fut
            if sent.transfer.error is not None:
                raise sent.transfer.error
        except BaseException as exc:
            self._stop(sent, exc)
            raise
        finally:
            self._outs.discard(sent)
        plan = ChunkPlan(ameta)
        for i in range(plan.nsegments):
            yield Staged(plan.segment(i).nbytes)

    def _stop(self, sent: _OutSend, exc: BaseException) -> None:
        """Stop staging out; if pieces are missing, the terminator tells the receiver."""
        t = sent.transfer
        if t is not None:
            t.abort(exc if isinstance(exc, Exception) else ClosedResourceError("cancelled"))
        if sent.posted < sent.npieces and self._transport is not None:
            try:
                self.poller.add_terminator(self._transport.raw_isend(sent.host, sent.tag, TERMINATOR))
            except Exception as err:  # the peer or the transport is gone
                log.debug("no terminator to host %d: %s", sent.host, err)

    # ------------------------------------------------------------ receiving
    def stream_class(self, kind: str, dest_pid: int) -> type[IncomingStream]:
        """The incoming stream class for a stream of ``kind`` (its meta's)
        arriving at GP ``dest_pid``."""
        if kind == "device":
            return DeviceIncomingStream
        if kind == "ndarray" and self.sgps.any_to_device:
            # decided when it is read: its GP may not be known here yet
            return self.h2d_stream_class
        return IncomingStream

    def start_incoming(self, host: int, stream: IncomingStream) -> bool:
        """A device stream's OPEN arrived: start receiving its chunks.  True
        when it is a device *message* (delivered as a Message when complete)."""
        try:
            ameta, tag, kind = device_header(stream.meta)
            msg_kind = None if kind is None else Kind(kind)
        except Exception as exc:  # a malformed header: nothing can be matched
            self._fail_stream(stream, exc)
            return True
        stream.meta.window = 0  # no segment credit: the chunks pace themselves
        if isinstance(stream, DeviceIncomingStream) and _sent_as_tensor(stream.meta):
            stream.to_tensor = self.open().backend.as_tensor  # sent as a tensor: arrives as one
        job = RecvJob(self._transport, host, tag, ameta, stream, self._job_failed)
        self.poller.add_job(job)
        b = self.sgps.binding(stream.dest_pid, str(stream.meta.extra.get("to", "")))
        device = None if b is None else b[0]
        try:
            if device is None:
                job.attach(HostRecv(ameta, job.post, max_in_flight=self.config.max_in_flight,
                                    on_segment=job.on_segment, on_done=job.on_done))
            else:
                consumer = self.sgps.stream_of(stream.dest_pid, str(stream.meta.extra.get("to", "")))
                job.attach(self.open().recv(ameta, job.post, device=device, on_segment=job.on_segment,
                                            on_done=job.on_done, consumer=consumer))
        except Exception as exc:  # e.g. the device allocation failed: drain what comes
            job.give_up(exc)
        self.counts["received_remote"] += 1
        if msg_kind is None:
            return False
        task = asyncio.get_running_loop().create_task(self._deliver_message(host, stream, msg_kind))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _deliver_message(self, host: int, stream: IncomingStream, kind: Kind) -> None:
        """A device message: deliver it once its stream is complete."""
        try:
            # as it landed: recv turns a host copy into what its caller asks for
            arr = await stream.landed() if isinstance(stream, DeviceIncomingStream) else await stream.read()
        except (BrokenResourceError, ClosedResourceError):
            self._arrivals.refund(host, stream.dest_pid, CREDIT_OVERHEAD)
            return
        if isinstance(stream, DeviceIncomingStream) and stream.to_tensor is not None \
                and not isinstance(arr, np.ndarray):
            arr = stream.to_tensor(arr)
        msg = Message((stream.source, kind, stream.com, arr, stream.source_pid))
        self._arrivals.deliver_remote(host, stream.dest_pid, [msg], CREDIT_OVERHEAD)

    def refuse_incoming(self, host: int, key: tuple[int, int], meta: StreamMeta) -> None:
        """A device stream that cannot be received: still take what is sent."""
        try:
            ameta, tag, _ = device_header(meta)
        except Exception:
            return  # malformed: nothing can be matched
        job = RecvJob(self._transport, host, tag, ameta, None, lambda j, e: None)
        job.give_up(StreamError("refused"))
        self.poller.add_job(job)
        self.counts["drained"] += 1

    def _job_failed(self, job: RecvJob, exc: BaseException) -> None:
        """This side failed (a device error, a malformed piece): fail the stream, tell the sender."""
        stream = job.stream
        if stream is not None and stream.state not in (StreamState.DONE, StreamState.ABORTED, StreamState.BROKEN):
            self._fail_stream(stream, exc)

    def _fail_stream(self, stream: IncomingStream, exc: BaseException) -> None:
        err = StreamError(f"stream {stream.key} from {stream.source!r} failed at the receiver: "
                          f"{type(exc).__name__}: {exc}")
        err.__cause__ = exc
        stream.fail_here(err, f"receiver failed: {type(exc).__name__}: {exc}")

    def break_host(self, host: int, exc: BaseException) -> None:
        """Host ``host`` is gone: what is staged with it can never complete."""
        for job in [j for j in self.poller.jobs if j.host == host]:
            job.abandon()
        for sent in [s for s in self._outs if s.host == host]:
            if sent.transfer is not None:
                sent.transfer.abandon()

    # ---------------------------------------------------------------- stats
    def stats(self) -> dict[str, Any]:
        """Counters: backend, pinned pool, transfers and jobs in flight."""
        out: dict[str, Any] = {"backend": getattr(self.backend, "name", None), **self.counts,
                               "jobs": len(self.poller.jobs), "sgps": len(self.sgps)}
        if self.stager is not None:
            pool = self.stager.pool
            out.update(transfers=len(self.stager.transfers), chunk_size=pool.chunk_size, chunks=pool.nchunks,
                       chunks_free=pool.free, chunks_in_use=pool.in_use, chunks_lost=pool.lost,
                       chunks_high_water=pool.high_water)
        return out


def _order_of(arr: Any, backend: DeviceBackend | None) -> Any:
    if isinstance(arr, np.ndarray):
        return "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    assert backend is not None
    return backend.inspect(arr).order or "C"


def _sent_as_tensor(meta: StreamMeta) -> bool:
    """Whether a device stream arrives as a torch tensor (its dtype's tag says it was sent as one)."""
    return meta.dtype is not None and tensor_wanted(wire_name(meta.dtype))
