"""Device streams: the incoming side, and the wire protocol of staged chunks.

Theory of operation
===================

A device array crossing hosts travels as a *stream* whose OPEN (on the
ordinary stream path, in order with the sender's messages) carries the
stream meta with ``kind = "device"`` and, in ``meta.extra``, the
:class:`~aiopdbp.device.chunks.ArrayMeta` (dtype, shape, C/F order, piece
size) and a *raw tag*.  The array's bytes do not go through the link's
coalescing at all: each piece (one pinned chunk) is one raw message of the
transport (``raw_isend``/``raw_irecv``: an MPI ``Isend``/``Irecv`` on the data
communicator with that tag, straight from and into pinned memory), so
ordinary messages never wait behind megabytes of array.

**Matching.**  Raw messages of one (sender, tag) match receives in posting
order (MPI's non-overtaking rule), so the receiver posts receives for pieces
0, 1, 2, ... and piece *i* lands in the buffer posted for piece *i*.  A
raw send of a chunk may complete only when the receiver has taken it
(rendezvous), so **the receiver must match every message it was sent** or
the sender's chunk never comes back to its pool.

**Endings.**  The sender posts its pieces in order.  If it stops early (it
failed, was cancelled, or heard that the receiver gave up) after posting
``p < npieces`` pieces, it posts one empty raw message, the *terminator*:
it matches the receiver's receive number ``p``.  So the receiver always
knows when nothing more will come: after ``npieces`` matches, or at the
terminator.  A receiver that gives up (its GP left, ``aclose()``, a device
error) cancels the receives it posted, tells the sender (the stream's
ordinary DONE-with-error) and keeps *draining* -- receiving into a scratch
buffer and counting matches, cancelled receives excepted -- until one of
those two ends.  On success the sender's END travels on the ordinary stream
path once its last piece is out; it may overtake the last segments' copies
to the device, which the stream protocol allows (:mod:`aiopdbp.streams.protocol`:
the stream is done when every segment announced by the END has arrived).

**Receiving** (:class:`RecvJob`, one per incoming device stream), states::

    RECEIVING -> DONE                      every piece arrived
    RECEIVING -> DRAINING -> DRAINED       gave up, failed, or the sender stopped

The destination is chosen by the receiving GP: an SGP gets a device array
on its device (a :class:`~aiopdbp.device.staging.RecvTransfer`: receive into
a pinned chunk, host-to-device copy), an NGP a numpy array that the pieces
are received into directly (:class:`HostRecv`: no pinned memory, no copy,
no device needed on that rank).  Each completed segment is put into the
stream's PipeB as a segment CDU whose data is a view of the destination, so
:class:`DeviceIncomingStream` is the ordinary receiver (ordering, END
check, ABORT and failure handling by the stream protocol); its ``read()`` returns the destination
itself.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from aiopdbp.arrays import KINDS, arrival
from aiopdbp.wire.mesp import CDU, Kind
from aiopdbp.device.chunks import ArrayMeta, ChunkPlan, Piece, Segment, segment_view
from aiopdbp.device.staging import TransferState
from aiopdbp.errors import ClosedResourceError, ProtocolError, StreamError
from aiopdbp.streams.receiver import IncomingStream, StreamState
from aiopdbp.transport.base import RawRequest


__all__ = ["DeviceIncomingStream", "HostRecv", "HostToDeviceStream", "JobState", "RecvJob", "ToDevice",
           "SenderStopped", "TERMINATOR", "device_header"]

#: the terminator's payload: an empty raw message
TERMINATOR = b""
_ENDED = frozenset({StreamState.DONE, StreamState.ABORTED, StreamState.BROKEN})


class SenderStopped(StreamError):
    """The sender's terminator arrived: it posted no more pieces."""


def device_header(meta: Any) -> tuple[ArrayMeta, int, int | None]:
    """``(ArrayMeta, raw tag, message kind or None)`` from a device stream's
    meta.extra; ``ProtocolError`` when it is malformed."""
    extra = meta.extra
    try:
        kind = extra.get("msg")
        return ArrayMeta.from_wire(extra["dev"]), int(extra["tag"]), None if kind is None else int(kind)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolError(f"malformed device stream header {extra!r}: {exc}") from None


# ----------------------------------------------------------------- streams
class DeviceIncomingStream(IncomingStream):
    """An incoming stream of one device array.

    Segments are views of :attr:`array`, the destination (a device array on
    the receiving SGP's device, or a numpy array for an NGP), filled by
    aiopdbp before each segment is delivered: ``async for`` yields them with
    no copy, ``read()`` returns the whole destination.
    """

    def landing(self, nbytes: int) -> None:
        """Segments land in pooled buffers: aiopdbp moves them to the device."""
        return None

    #: the destination array (set by the device path when the stream opens)
    array: Any = None
    #: what turns the destination into the torch tensor it arrives as (set
    #: by the device path for a tensor's stream where torch imports), or None
    to_tensor: Callable[[Any], Any] | None = None

    async def __anext__(self) -> Any:
        """The next segment: a view of the destination, ready on any stream.

        Cancellation: a cancelled wait loses no segment.
        """
        data = await self.next_segment()
        if data is None:
            raise StopAsyncIteration
        return data

    async def read(self, out: Any = None, *, arrays: str | None = None) -> Any:
        """The whole array, once every segment arrived: a device array for
        an SGP (a torch tensor on its device where the sender sent one and
        torch imports here), a numpy array for an NGP (or as ``arrays``
        says: it applies to host arrays only), with the sender's dtype,
        shape and memory order.  ``out`` (numpy destinations only) receives
        a copy.

        Cancellation: leaves the stream at the segment reached (``aclose()`` it).
        """
        kind = arrays or self.arrays
        if kind not in KINDS:
            raise ValueError(f"arrays is one of {KINDS}, not {arrays!r}")
        if out is not None and not isinstance(self.array, np.ndarray):
            raise ValueError("read(out=...) is for streams delivered to host memory; "
                             "a device stream's read() returns its own device array")
        if out is None:
            arr = await self.landed()
            if isinstance(arr, np.ndarray):
                return arrival(arr, kind)
            return arr if self.to_tensor is None else self.to_tensor(arr)
        while await self.next_segment() is not None:
            pass
        dst = np.asarray(out)
        if dst.nbytes < self.array.nbytes or not dst.flags.writeable:
            raise ValueError(f"read(out=...) needs a writable buffer of {self.array.nbytes} bytes")
        flat = dst.reshape(-1).view(np.uint8)[: self.array.nbytes]
        flat[:] = _flat_u8(self.array)
        return flat.view(self.array.dtype).reshape(self.array.shape, order=_order(self.array))

    async def landed(self) -> Any:
        """The destination once every segment arrived, as it landed (a
        backend array, or numpy): what a device *message* carries, turned
        into what its receiver asked for by ``recv``.

        Cancellation: as for :meth:`read`.
        """
        while await self.next_segment() is not None:
            pass
        return self.array


class ToDevice(Protocol):
    """What a host-to-device stream asks of the device path
    (:class:`aiopdbp.streams.devicepath.DevicePath`)."""

    def wants_device(self, pid: int) -> bool: ...
    async def to_device(self, host: Any, pid: int) -> Any: ...


class HostToDeviceStream(IncomingStream):
    """A host array stream that may arrive at an SGP opened with
    ``to_device=True``: if its GP is one (decided when it is read, when the
    GP is surely known here), segments and ``read()`` are device arrays on
    the GP's device; otherwise it is an ordinary stream."""

    def landing(self, nbytes: int) -> None:
        """Segments land in pooled buffers: aiopdbp moves them to the device."""
        return None

    devices: ToDevice  #: a class attribute of the per-node subclass (see DevicePath)

    async def __anext__(self) -> Any:
        """The next segment (copied to the device for a to_device SGP).

        Cancellation: a cancellation during the copy loses that segment.
        """
        seg = await IncomingStream.__anext__(self)
        if not self.devices.wants_device(self.dest_pid):
            return seg
        return await self.devices.to_device(seg, self.dest_pid)

    async def read(self, out: Any = None, *, arrays: str | None = None) -> Any:  # (device data: arrays does not apply)
        """The whole stream (one device array for a to_device SGP).

        Cancellation: as for :meth:`IncomingStream.read`.
        """
        if not self.devices.wants_device(self.dest_pid):
            return await IncomingStream.read(self, out)
        if out is not None:
            raise ValueError("read(out=...) is not available when the SGP gets host streams on its device")
        return await self.devices.to_device(await IncomingStream.read(self), self.dest_pid)


def _order(arr: Any) -> str:
    return "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"


def _flat_u8(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The bytes of a C- or F-contiguous array, in its own memory order."""
    base = arr.T if _order(arr) == "F" else arr
    return base.reshape(-1).view(np.uint8)


# --------------------------------------------------------- raw receive wrapper
class _Counted:
    """A raw receive that reports its match to its job (counting, terminator)."""

    __slots__ = ("req", "job", "nbytes", "_seen", "_error")

    def __init__(self, req: RawRequest, job: RecvJob, nbytes: int) -> None:
        self.req = req
        self.job = job
        self.nbytes = nbytes
        self._seen = False
        self._error: BaseException | None = None

    def done(self) -> bool:
        if not self._seen:
            try:
                if not self.req.done():
                    return False
            except Exception as exc:  # e.g. truncated: a message was matched all the same
                self._seen = True
                self.job.matched += 1
                self._error = exc
                raise
            self._seen = True
            n = self.req.received
            if n >= 0:
                self.job.matched += 1
            if n == 0:
                self.job.terminated = True
                self._error = SenderStopped("the sender stopped before the end of the array")
            elif n > 0 and n != self.nbytes and self.job.state is JobState.RECEIVING:
                self._error = ProtocolError(f"a piece of {n} bytes where {self.nbytes} were expected")
        if self._error is not None:
            raise self._error
        return True

    def cancel(self) -> None:
        self.req.cancel()


# ------------------------------------------------------------- host receive
class HostRecv:
    """Receives the pieces of an array straight into a new numpy array
    (an NGP's destination): the same interface as ``RecvTransfer``."""

    def __init__(self, meta: ArrayMeta, post: Callable[[Piece, memoryview], Any], *, max_in_flight: int,
                 on_segment: Callable[[HostRecv, Segment], None], on_done: Callable[[HostRecv], None]) -> None:
        self.meta = meta
        self.plan = ChunkPlan(meta)
        self.array: Any = np.empty(meta.shape, meta.dtype, order=meta.order)
        self._flat = _flat_u8(self.array)
        self._post = post
        self.max_in_flight = max_in_flight
        self._on_segment = on_segment
        self._on_done = on_done
        self.state = TransferState.ACTIVE
        self.error: BaseException | None = None
        self._posted: collections.deque[tuple[Piece, Any]] = collections.deque()
        self._next = 0
        self._landed = 0  # pieces [0, landed) are in the array
        self.segments_delivered = 0

    @property
    def settled(self) -> bool:
        return self.state in (TransferState.DONE, TransferState.FAILED)

    def view(self, seg: Segment) -> Any:
        return segment_view(self.array, self.meta, seg)

    def abort(self, exc: BaseException) -> None:
        """Fail: cancel what is posted; settled once every receive is over."""
        if self.state is TransferState.ACTIVE:
            self._fail(exc)
            self.poll()

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        self.state = TransferState.DRAINING
        for _, req in self._posted:
            req.cancel()
        self._on_done(self)

    def poll(self) -> bool:
        if self.settled:
            return False
        moved = False
        while self._posted:  # receives match in posting order: oldest first
            piece, req = self._posted[0]
            try:
                if not req.done():
                    break
            except Exception as exc:
                self._posted.popleft()
                moved = True
                if self.state is TransferState.ACTIVE:
                    self._fail(exc)
                continue
            self._posted.popleft()
            moved = True
            if self.state is TransferState.ACTIVE:
                self._landed = piece.index + 1
        plan = self.plan
        while self.state is TransferState.ACTIVE and self.segments_delivered < plan.nsegments \
                and plan.last_piece(self.segments_delivered) < self._landed:
            self._on_segment(self, plan.segment(self.segments_delivered))
            self.segments_delivered += 1
            moved = True
        while self.state is TransferState.ACTIVE and self._next < plan.npieces \
                and len(self._posted) < self.max_in_flight:
            piece = plan.piece(self._next)
            view = self._flat[piece.offset: piece.offset + piece.nbytes]
            try:
                req = self._post(piece, view.data)
            except Exception as exc:
                self._fail(exc)
                break
            self._posted.append((piece, req))
            self._next += 1
            moved = True
        if not self._posted:
            if self.state is TransferState.DRAINING:
                self.state = TransferState.FAILED
                self.array = None
            elif self.state is TransferState.ACTIVE and self.segments_delivered == plan.nsegments:
                self.state = TransferState.DONE
                self._on_done(self)
        return moved


# ------------------------------------------------------------------ the job
class JobState(enum.Enum):
    RECEIVING = "receiving"  #: pieces land in the destination
    DONE = "done"  #: every piece arrived; the stream got its END
    DRAINING = "draining"  #: gave up: taking what the sender still sends, discarding it
    DRAINED = "drained"  #: nothing more will come


JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.RECEIVING: frozenset({JobState.DONE, JobState.DRAINING}),
    JobState.DRAINING: frozenset({JobState.DRAINED}),
    JobState.DONE: frozenset(),
    JobState.DRAINED: frozenset(),
}


class RecvJob:
    """One incoming device array from host ``host`` (see the module docstring).

    ``start(post)`` is called by the device path with the primitive that
    posts a receive; it returns the transfer object (``RecvTransfer`` or
    :class:`HostRecv`) that fills the destination.  ``stream`` is fed
    segment CDUs and the synthesised END; ``on_failed(job, exc)`` is told
    when *this side* fails (not when the sender stopped: its ABORT says why).
    """

    def __init__(self, wire: Any, host: int, tag: int, meta: ArrayMeta, stream: IncomingStream | None,
                 on_failed: Callable[[RecvJob, BaseException], None]) -> None:
        self.wire = wire
        self.host = host
        self.tag = tag
        self.meta = meta
        self.plan = ChunkPlan(meta)
        self.stream = stream
        self.state = JobState.RECEIVING
        self.matched = 0  #: raw messages of this stream matched so far (cancelled excepted)
        self.terminated = False  #: the sender's terminator arrived
        self.transfer: Any = None
        self.error: BaseException | None = None
        self._on_failed = on_failed
        self._scratch: Any = None
        self._drain_req: _Counted | None = None

    def post(self, piece: Piece, buf: memoryview) -> _Counted:
        """The receive primitive handed to the transfer."""
        return _Counted(self.wire.raw_irecv(self.host, self.tag, buf), self, piece.nbytes)

    def attach(self, transfer: Any) -> None:
        """The transfer that fills the destination (started by the device path)."""
        self.transfer = transfer
        if self.stream is not None and isinstance(self.stream, DeviceIncomingStream):
            self.stream.array = transfer.array

    @property
    def finished(self) -> bool:
        return self.state in (JobState.DONE, JobState.DRAINED)

    def _move(self, new: JobState) -> None:
        if new not in JOB_TRANSITIONS[self.state]:
            raise RuntimeError(f"illegal job transition {self.state.name} -> {new.name}")
        self.state = new

    # callbacks of the transfer (run inside poll)
    def on_segment(self, transfer: Any, seg: Segment) -> None:
        stream = self.stream
        if stream is not None and stream.state not in _ENDED and stream.pipe is not None:
            stream.pipe.force_put(CDU(Kind.STREAM, stream.source_pid, (stream.dest_pid,), transfer.view(seg),
                                      stream.com, 0, stream.sno, seg.index, self.host))

    def on_done(self, transfer: Any) -> None:
        if transfer.error is None:
            # every segment is in the stream's PipeB; the sender's END (on the
            # stream path, sent once its last piece was out) completes it
            self._move(JobState.DONE)
            return
        self.give_up(transfer.error)

    def give_up(self, exc: BaseException) -> None:
        """Stop filling the destination and drain (idempotent)."""
        if self.state is not JobState.RECEIVING:
            return
        self._move(JobState.DRAINING)
        self.error = exc
        if self.transfer is not None and not self.transfer.settled:
            self.transfer.abort(exc)
        if not isinstance(exc, SenderStopped):
            self._on_failed(self, exc)

    def poll(self) -> bool:
        """Advance (called by the device path's poller); True if anything moved."""
        if self.finished:
            return False
        moved = False
        stream = self.stream
        if self.state is JobState.RECEIVING and stream is not None and stream.state in _ENDED:
            self.give_up(StreamError("the receiver gave up the stream"))  # its GP left, aclose()...
            moved = True
        t = self.transfer
        if isinstance(t, HostRecv) and not t.settled:  # a RecvTransfer is polled by its stager
            moved = t.poll() or moved
        if self.state is JobState.DRAINING and (t is None or t.settled):
            moved = self._drain() or moved
        return moved

    def _drain(self) -> bool:
        """Match, one at a time into scratch memory, what the sender still sends."""
        moved = False
        req = self._drain_req
        if req is not None:
            try:
                if not req.done():
                    return False
            except Exception:
                pass  # the terminator, or a piece of the wrong size: both are counted
            self._drain_req = None
            moved = True
        if self.terminated or self.matched >= self.plan.npieces:
            self._move(JobState.DRAINED)
            self._scratch = None
            return True
        if self._scratch is None:
            self._scratch = np.empty(max(1, self.meta.piece_size), dtype=np.uint8)
        try:
            self._drain_req = self.post(self.plan.piece(self.matched), memoryview(self._scratch))
        except Exception as exc:  # the transport is gone: nothing more can come
            self.error = self.error or exc
            self._move(JobState.DRAINED)
        return True

    def abandon(self) -> None:
        """Stop for good (host lost, node closing); a transfer that MPI may
        still write into loses its chunks for the process's life."""
        if self.state is JobState.RECEIVING:
            self.give_up(ClosedResourceError("the device stream was abandoned"))
        t = self.transfer
        if t is not None and not t.settled and hasattr(t, "abandon"):
            t.abandon()
        if self.state is JobState.DRAINING:
            self._move(JobState.DRAINED)  # terminal: nothing will poll it again
