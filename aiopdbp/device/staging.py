"""Pipelined staging of device arrays through a fixed pool of pinned host chunks.

Theory of operation
===================

An MPI library that is not CUDA-aware cannot read device memory, so a device
array crosses hosts through host memory.  Copying it whole and then sending
it costs ``t_d2h + t_net + t_h2d``; cutting it into chunks and running the
three stages as a pipeline costs about the slowest stage (MVAPICH2's
pipelined staging).  This module is that pipeline, written *sans-I/O*: it
never waits, never creates tasks or threads, and never calls MPI itself.
Whoever drives it (the progress engine, an in-process fabric, a test) calls
:meth:`Stager.poll` on every step and passes in the two primitives that move
a chunk's bytes: ``post_send(piece, buf)`` and ``post_recv(piece, buf)``,
each returning a :class:`Request` whose ``done()`` is polled like an MPI
request's ``Test``.

**Pool and plan** (:mod:`aiopdbp.device.chunks`).  Chunks come from a
:class:`~aiopdbp.device.chunks.PinnedChunkPool`: one pinned allocation made
once, carved into equal chunks (default 4 MiB), never grown.  Pinned memory
is what lets ``cudaMemcpyAsync`` run asynchronously at full bandwidth, and
registering it with the driver is slow, hence once.  Both sides cut the
array identically (:class:`~aiopdbp.device.chunks.ChunkPlan`, from the
:class:`~aiopdbp.device.chunks.ArrayMeta` in the stream header) into
*pieces* of whole rows of at most ``piece_size`` bytes, one chunk each;
*segments*, the receiver's unit of delivery, are whole-row pieces (or one
long row).

**Sender** (:class:`SendTransfer`), per chunk::

    FREE -> D2H_COPYING -> READY -> SENDING -> FREE

On creation aiopdbp's copy stream -- one of its own, taken from a small
pool, so one slow producer never stalls another transfer's copies -- waits
on events recorded, when the user sent, on the producer's stream: the copies are ordered
after the producer without a device-wide synchronize.  Each poll then, oldest
first: queries the events of chunks being copied (events of one stream
complete in order, so it stops at the first one not done: a cheap
``cudaEventQuery`` per chunk, never a blocking call); hands READY chunks to
``post_send`` in piece order; polls the send requests and returns a chunk to
the pool only when its send has completed -- its copy completed before it was
sent, so both are done; and starts copies of the next pieces into free
chunks, up to ``max_in_flight`` chunks per transfer.  So chunk *i* is on the
wire while chunks *i+1...* are being copied.

**Receiver** (:class:`RecvTransfer`), per chunk::

    FREE -> RECEIVING -> H2D_COPYING -> FREE

It allocates the destination array on the receiving device from the
memory pool of the *consumer's* stream (the receiving SGP's ``gp.stream``)
and orders its copies after that stream's work -- the memory may be a block
the consumer freed while its kernels still read it --
posts receives for the next pieces into free chunks, queues a host-to-device
copy when a receive lands, and frees the chunk when that copy's event is
done.  Pieces may land out of order; segments are delivered strictly in order
(``on_segment``), each once all its pieces are on the device, so a delivered
segment is ready for any stream without further synchronisation.

**Failure.**  A device error (``DeviceError`` from a copy or an event), or an
exception from a primitive or its request, fails the transfer: its ``error``
is set, ``on_done`` is called, no new work starts (state ``DRAINING``), and
chunks go back to the pool as soon as nothing touches them any more -- a chunk
being copied waits for its event, a chunk handed to MPI for its request
(receives are cancelled first).  Then the state is ``FAILED``.  A drain that
can never finish (a dead peer) is cut short by :meth:`Transfer.abandon`: its
chunks are withdrawn from the pool for good, never reused while MPI or the
GPU might still write them, and the device array is kept alive by the
:class:`Stager` until the copies queued with it completed (a freed device
block would be handed to the next allocation while a copy still writes it).

**Driving it.**  Everything runs in one thread, the one calling ``poll``;
``on_done(transfer)`` is called exactly once, when the outcome is known
(``transfer.error`` is None on success), ``on_segment(transfer, segment)``
once per segment in order; both run in that thread and must not block or
raise.  A progress engine uses it like this::

    stager = Stager(backend, pool_bytes=64 << 20, chunk_size=4 << 20)
    # in gp.send(), synchronously (the producer's stream is captured here):
    t = stager.send(arr, post_send, on_done=resolve_send_future)
    header = t.meta.to_wire()                       # travels with OPEN
    # at the receiver, when OPEN arrives:
    r = stager.recv(ArrayMeta.from_wire(header), post_recv, device=gp_device,
                    on_segment=lambda r, seg: deliver(r.view(seg)),
                    on_done=finish_stream)
    # in every progress step, next to MPI Testsome:
    busy = stager.poll() or busy                    # keep stepping while stager.pending

``post_send(piece, buf)`` / ``post_recv(piece, buf)`` get the piece (index,
byte offset, size) and a ``memoryview`` of exactly ``piece.nbytes`` pinned
bytes, and return a :class:`Request` (the transport's raw ``Isend``/``Irecv``
requests are ones: ``MPITransport.raw_isend``/``raw_irecv``).
"""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import Callable
from typing import Any, Protocol

from aiopdbp.errors import ClosedResourceError, DeviceError
from aiopdbp.device.backend import ArrayInfo, DeviceBackend, Event, HostBuffer, Stream
from aiopdbp.device.chunks import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_POOL_BYTES,
    ArrayMeta,
    Chunk,
    ChunkPlan,
    Piece,
    PinnedChunkPool,
    Role,
    Segment,
    segment_view,
)

__all__ = [
    "ChunkState", "DEFAULT_MAX_IN_FLIGHT", "RECV_TRANSITIONS", "RecvTransfer",
    "Request", "SEND_TRANSITIONS", "SendTransfer", "Stager", "StreamPool", "TRANSFER_TRANSITIONS", "Transfer", "TransferState",
]

DEFAULT_MAX_IN_FLIGHT = 4


# ------------------------------------------------------------------ requests
class Request(Protocol):
    """A posted send or receive, as the staging sees it."""

    def done(self) -> bool:
        """True once the operation is over (the buffer is free again); raises
        if it failed.  Never blocks."""
        ...

    def cancel(self) -> None:
        """Ask the operation to stop early (best effort; ``done()`` still
        reports when the buffer is free)."""
        ...


# ----------------------------------------------------------------- transfers
class ChunkState(enum.Enum):
    FREE = "free"
    D2H_COPYING = "d2h-copying"
    READY = "ready"
    SENDING = "sending"
    RECEIVING = "receiving"
    H2D_COPYING = "h2d-copying"


_S = ChunkState
SEND_TRANSITIONS: dict[ChunkState, frozenset[ChunkState]] = {
    _S.FREE: frozenset({_S.D2H_COPYING}),
    _S.D2H_COPYING: frozenset({_S.READY, _S.FREE}),  # FREE: its copy failed (the event raised)
    _S.READY: frozenset({_S.SENDING, _S.FREE}),  # FREE: the transfer failed before it was sent
    _S.SENDING: frozenset({_S.FREE}),  # the send request completed or failed
}
RECV_TRANSITIONS: dict[ChunkState, frozenset[ChunkState]] = {
    _S.FREE: frozenset({_S.RECEIVING}),
    _S.RECEIVING: frozenset({_S.H2D_COPYING, _S.FREE}),  # FREE: failed, cancelled, or landed after a failure
    _S.H2D_COPYING: frozenset({_S.FREE}),  # its event completed or raised
}


class TransferState(enum.Enum):
    ACTIVE = "active"  #: moving pieces
    DRAINING = "draining"  #: failed: waiting until no chunk is touched any more
    DONE = "done"  #: every piece moved, every chunk back in the pool
    FAILED = "failed"  #: failed, and every chunk back (or withdrawn by abandon)


TRANSFER_TRANSITIONS: dict[TransferState, frozenset[TransferState]] = {
    TransferState.ACTIVE: frozenset({TransferState.DRAINING, TransferState.DONE}),
    TransferState.DRAINING: frozenset({TransferState.FAILED}),
    TransferState.DONE: frozenset(),
    TransferState.FAILED: frozenset(),
}

PostFn = Callable[[Piece, memoryview], Request]
DoneFn = Callable[["Transfer"], None]
SegmentFn = Callable[["RecvTransfer", Segment], None]


class _Slot:
    __slots__ = ("piece", "chunk", "state", "event", "request")

    def __init__(self, piece: Piece, chunk: Chunk, state: ChunkState) -> None:
        self.piece = piece
        self.chunk = chunk
        self.state = state
        self.event: Event | None = None
        self.request: Request | None = None

    def view(self) -> HostBuffer:
        return self.chunk.buf[: self.piece.nbytes]


def _over(request: Request) -> bool:
    """``request.done()``, where a raise also means "over" (draining)."""
    try:
        return request.done()
    except (Exception, asyncio.CancelledError):
        return True


class Transfer:
    """What a send and a receive share: chunk slots, states, failure, drain."""

    def __init__(
        self,
        backend: DeviceBackend,
        pool: PinnedChunkPool,
        meta: ArrayMeta,
        stream: Stream,
        post: PostFn,
        max_in_flight: int,
        on_done: DoneFn | None,
        transitions: dict[ChunkState, frozenset[ChunkState]],
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if meta.piece_size > pool.chunk_size:
            raise ValueError(f"piece_size {meta.piece_size} exceeds the chunk size {pool.chunk_size}")
        self.backend = backend
        self.pool = pool
        self.meta = meta
        self.plan = ChunkPlan(meta)
        self.stream = stream  #: aiopdbp's copy stream used by this transfer
        self.max_in_flight = max_in_flight
        self.state = TransferState.ACTIVE
        self.error: BaseException | None = None
        self.pieces_done = 0
        self._post = post
        self._on_done = on_done
        self._transitions = transitions
        self._slots: collections.deque[_Slot] = collections.deque()
        self._next = 0  # next piece to start
        self.abandoned = False
        #: after abandon: events of copies still queued, and what they touch (kept alive)
        self.lingering: list[tuple[Event, Any]] = []

    @property
    def settled(self) -> bool:
        """DONE or FAILED: no chunk of this transfer is in use any more."""
        return self.state in (TransferState.DONE, TransferState.FAILED)

    def chunk_states(self) -> list[tuple[int, ChunkState]]:
        """``(piece index, state)`` of every chunk in flight, oldest first."""
        return [(s.piece.index, s.state) for s in self._slots]

    def abort(self, exc: BaseException) -> None:
        """Fail the transfer now (e.g. its caller was cancelled); it still
        drains through :meth:`poll`.  No effect once it failed or finished."""
        if self.state is TransferState.ACTIVE:
            self._fail(exc)
            self._finish()

    def abandon(self) -> None:
        """Stop draining: chunks still touched by MPI or the device are
        withdrawn from the pool for good.  For a drain that cannot finish."""
        self.abort(ClosedResourceError("transfer abandoned"))
        self._prune()
        array = self._array()
        for slot in self._slots:
            self.pool.lose(slot.chunk)
            if slot.event is not None and slot.state in (ChunkState.D2H_COPYING, ChunkState.H2D_COPYING):
                self.lingering.append((slot.event, array))
        self.abandoned = True
        self._slots.clear()
        self._finish()

    def poll(self) -> bool:
        """Advance without blocking; True if anything moved."""
        raise NotImplementedError

    # -- internals
    def _move(self, slot: _Slot, new: ChunkState) -> None:
        if new not in self._transitions[slot.state]:
            raise RuntimeError(f"illegal chunk transition {slot.state.name} -> {new.name}")
        slot.state = new
        if new is ChunkState.FREE:
            self.pool.release(slot.chunk)

    def _set_state(self, new: TransferState) -> None:
        if new not in TRANSFER_TRANSITIONS[self.state]:
            raise RuntimeError(f"illegal transfer transition {self.state.name} -> {new.name}")
        self.state = new

    def _fail(self, exc: BaseException) -> None:
        if self.state is not TransferState.ACTIVE:
            return
        self.error = exc
        self._set_state(TransferState.DRAINING)
        for slot in self._slots:
            if slot.state is ChunkState.READY:
                self._move(slot, ChunkState.FREE)
            elif slot.state is ChunkState.RECEIVING and slot.request is not None:
                try:
                    slot.request.cancel()
                except Exception:  # best effort: the drain waits for done() anyway
                    pass
        self._notify_done()

    def _queue_copy(self, slot: _Slot, queue: Callable[[], None]) -> bool:
        """Queue a copy into/out of ``slot``'s chunk and record its event;
        on failure, fail the transfer (False)."""
        try:
            queue()
        except Exception as exc:  # nothing was queued (a DeviceError, or a bug): the chunk is untouched
            self._move(slot, ChunkState.FREE)
            self._fail(exc)
            return False
        try:
            slot.event = self.backend.record_event(self.stream)
        except DeviceError as exc:  # a copy is queued but cannot be tracked
            self.pool.lose(slot.chunk)
            slot.state = ChunkState.FREE
            self._fail(exc)
            return False
        return True

    def _prune(self) -> None:
        if any(s.state is ChunkState.FREE for s in self._slots):
            self._slots = collections.deque(s for s in self._slots if s.state is not ChunkState.FREE)

    def _complete(self) -> bool:
        raise NotImplementedError

    def _finish(self) -> None:
        self._prune()
        if self._slots:
            return
        if self.state is TransferState.DRAINING:
            self._set_state(TransferState.FAILED)
            self._release_array()
        elif self.state is TransferState.ACTIVE and self._complete():
            self._set_state(TransferState.DONE)
            self._release_array()
            self._notify_done()

    def _release_array(self) -> None:
        pass

    def _array(self) -> Any:
        """The device array the copies touch."""
        return None

    def _notify_done(self) -> None:
        if self._on_done is not None:
            self._on_done(self)


class SendTransfer(Transfer):
    """Stages one device array out: D2H copies into chunks, ``post_send`` per piece."""

    def __init__(
        self,
        backend: DeviceBackend,
        pool: PinnedChunkPool,
        info: ArrayInfo,
        stream: Stream,
        post_send: PostFn,
        *,
        piece_size: int,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        on_done: DoneFn | None = None,
        after: tuple[Event, ...] | None = None,
    ) -> None:
        order = info.order or "C"
        super().__init__(backend, pool, ArrayMeta(info.dtype, info.shape, order, piece_size), stream,
                         post_send, max_in_flight, on_done, SEND_TRANSITIONS)
        self.device = info.device
        # order our copies after the producer's pending work, on the device: after
        # the events recorded when the user sent (``after``), else recorded now
        for ev in (backend.record_event(info.stream),) if after is None else after:
            backend.wait_event(stream, ev)
        self._src: Any = info.array if info.order is not None else backend.contiguous(info.array, stream)

    def poll(self) -> bool:
        if self.settled:
            return False
        moved = False
        copies_pending = False
        for slot in self._slots:  # 1. retire, oldest first
            if slot.state is ChunkState.D2H_COPYING and not copies_pending:
                assert slot.event is not None
                try:
                    ready = slot.event.done()
                except DeviceError as exc:
                    self._move(slot, ChunkState.FREE)
                    self._fail(exc)
                    moved = True
                    continue
                if not ready:
                    copies_pending = True  # later events of the stream cannot be done yet
                    continue
                self._move(slot, ChunkState.READY)
                if self.state is not TransferState.ACTIVE:
                    self._move(slot, ChunkState.FREE)
                moved = True
            elif slot.state is ChunkState.SENDING:
                assert slot.request is not None
                try:
                    finished = slot.request.done()
                except Exception as exc:
                    self._move(slot, ChunkState.FREE)
                    self._fail(exc)
                    moved = True
                    continue
                if finished:
                    self._move(slot, ChunkState.FREE)
                    self.pieces_done += 1
                    moved = True
        if self.state is TransferState.ACTIVE:  # 2. post sends in piece order
            for slot in self._slots:
                if slot.state is ChunkState.SENDING:
                    continue
                if slot.state is not ChunkState.READY:
                    break
                try:
                    slot.request = self._post(slot.piece, slot.view().data)
                except Exception as exc:
                    self._move(slot, ChunkState.FREE)
                    self._fail(exc)
                    break
                self._move(slot, ChunkState.SENDING)
                moved = True
        while self.state is TransferState.ACTIVE and self._next < self.plan.npieces and len(self._slots) < self.max_in_flight:
            chunk = self.pool.acquire(Role.SEND)  # 3. start the next copies
            if chunk is None:
                break
            slot = _Slot(self.plan.piece(self._next), chunk, ChunkState.FREE)
            self._move(slot, ChunkState.D2H_COPYING)
            self._slots.append(slot)
            self._next += 1
            moved = True
            src, view, off = self._src, slot.view(), slot.piece.offset
            if not self._queue_copy(slot, lambda: self.backend.copy_d2h(src, off, view, self.stream)):
                break
        self._finish()
        return moved

    def _complete(self) -> bool:
        return self.pieces_done == self.plan.npieces

    def _release_array(self) -> None:
        self._src = None  # the user's array (or our contiguous copy) may go now

    def _array(self) -> Any:
        return self._src


class RecvTransfer(Transfer):
    """Stages one device array in: ``post_recv`` per piece, H2D copies, in-order segments."""

    def __init__(
        self,
        backend: DeviceBackend,
        pool: PinnedChunkPool,
        meta: ArrayMeta,
        device: int,
        stream: Stream,
        post_recv: PostFn,
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        on_segment: SegmentFn | None = None,
        on_done: DoneFn | None = None,
        consumer: Stream | None = None,
    ) -> None:
        super().__init__(backend, pool, meta, stream, post_recv, max_in_flight, on_done, RECV_TRANSITIONS)
        self.device = device
        owner = backend.current_stream(device) if consumer is None else consumer
        #: the destination device array, complete once the transfer is DONE
        self.array: Any = backend.empty(meta.shape, meta.dtype, meta.order, device, owner)
        # the block comes from the consumer stream's pool: copy after its work
        backend.wait_event(stream, backend.record_event(owner))
        self.segments_delivered = 0
        self._on_segment = on_segment
        self._copying: collections.deque[_Slot] = collections.deque()  # in queue order
        self._frontier = 0  # pieces [0, frontier) are on the device
        self._ahead: set[int] = set()

    def view(self, seg: Segment) -> Any:
        """The destination rows of a delivered segment."""
        return segment_view(self.array, self.meta, seg)

    def poll(self) -> bool:
        if self.settled:
            return False
        moved = False
        for slot in self._slots:  # 1. receives that landed -> H2D copies
            if slot.state is not ChunkState.RECEIVING:
                continue
            assert slot.request is not None
            if self.state is not TransferState.ACTIVE:
                if _over(slot.request):
                    self._move(slot, ChunkState.FREE)
                    moved = True
                continue
            try:
                landed = slot.request.done()
            except Exception as exc:
                self._move(slot, ChunkState.FREE)
                self._fail(exc)
                moved = True
                continue
            if landed:
                self._move(slot, ChunkState.H2D_COPYING)
                moved = True
                view, off = slot.view(), slot.piece.offset
                if self._queue_copy(slot, lambda: self.backend.copy_h2d(view, self.array, off, self.stream)):
                    self._copying.append(slot)
        while self._copying:  # 2. copies done, in stream order
            slot = self._copying[0]
            assert slot.event is not None
            try:
                if not slot.event.done():
                    break
            except DeviceError as exc:
                self._copying.popleft()
                self._move(slot, ChunkState.FREE)
                self._fail(exc)
                moved = True
                continue
            self._copying.popleft()
            self._move(slot, ChunkState.FREE)
            self._landed(slot.piece.index)
            moved = True
        plan = self.plan  # 3. deliver segments in order
        while self.state is TransferState.ACTIVE and self.segments_delivered < plan.nsegments:
            s = self.segments_delivered
            if plan.last_piece(s) >= self._frontier:
                break
            self.segments_delivered += 1
            moved = True
            if self._on_segment is not None:
                self._on_segment(self, plan.segment(s))
        while self.state is TransferState.ACTIVE and self._next < plan.npieces and len(self._slots) < self.max_in_flight:
            chunk = self.pool.acquire(Role.RECV)  # 4. post the next receives
            if chunk is None:
                break
            slot = _Slot(plan.piece(self._next), chunk, ChunkState.FREE)
            self._move(slot, ChunkState.RECEIVING)
            try:
                slot.request = self._post(slot.piece, slot.view().data)
            except Exception as exc:
                self._move(slot, ChunkState.FREE)
                self._fail(exc)
                break
            self._slots.append(slot)
            self._next += 1
            moved = True
        self._finish()
        return moved

    def _landed(self, index: int) -> None:
        self.pieces_done += 1
        if index != self._frontier:
            self._ahead.add(index)
            return
        self._frontier += 1
        while self._frontier in self._ahead:
            self._ahead.remove(self._frontier)
            self._frontier += 1

    def _complete(self) -> bool:
        return self.segments_delivered == self.plan.nsegments and self.pieces_done == self.plan.npieces

    def _release_array(self) -> None:
        if self.state is TransferState.FAILED:
            self.array = None  # partial data: nobody may use it

    def _array(self) -> Any:
        return self.array


def _event_over(ev: Event) -> bool:
    try:
        return ev.done()
    except Exception:  # failed work is over too
        return True


# -------------------------------------------------------------------- stager
class StreamPool:
    """aiopdbp's own non-blocking copy streams: one per transfer in flight,
    reused once its transfer settled (so one transfer waiting on a slow
    producer never holds up another's copies)."""

    def __init__(self, backend: DeviceBackend) -> None:
        self.backend = backend
        self._free: dict[int, list[Stream]] = {}
        self.created = 0

    def take(self, device: int) -> Stream:
        """An idle copy stream of ``device`` (a new one if none is idle)."""
        free = self._free.get(device)
        if free:
            return free.pop()
        self.created += 1
        return self.backend.create_stream(device)

    def give(self, stream: Stream) -> None:
        """``stream``'s queued work is over: it may serve another transfer."""
        self._free.setdefault(stream.device, []).append(stream)


class Stager:
    """The staging machinery of one process: backend, pinned pool, a pool of
    copy streams (one per transfer in flight), and the live transfers, which
    :meth:`poll` advances oldest first."""

    def __init__(
        self,
        backend: DeviceBackend,
        *,
        pool_bytes: int = DEFAULT_POOL_BYTES,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        recv_reserve: int | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.backend = backend
        self.pool = PinnedChunkPool(backend, pool_bytes=pool_bytes, chunk_size=chunk_size, recv_reserve=recv_reserve)
        self.max_in_flight = max_in_flight
        self.streams = StreamPool(backend)
        self._live: list[Transfer] = []
        self._lingering: list[tuple[Event, Any]] = []
        self._kept_at_close: list[tuple[Event, Any]] = []

    def send(
        self, obj: Any, post_send: PostFn, *, piece_size: int | None = None,
        max_in_flight: int | None = None, on_done: DoneFn | None = None,
        info: ArrayInfo | None = None, after: tuple[Event, ...] | None = None,
    ) -> SendTransfer:
        """Start staging device array ``obj`` out and queue its first copies.

        The copies are ordered after ``after`` (events recorded on the
        producer's streams when the user sent), else after the producer's
        stream now (``info.stream``, by default the current stream).  Raises
        ``TypeError`` for an object the backend cannot use and ``DeviceError``
        when CUDA fails before anything is queued; ``on_done`` may run before
        this returns (an empty array, a failure)."""
        if info is None:
            info = self.backend.inspect(obj)
        stream = self.streams.take(info.device)
        try:
            t = SendTransfer(self.backend, self.pool, info, stream, post_send,
                             piece_size=piece_size or self.pool.chunk_size,
                             max_in_flight=max_in_flight or self.max_in_flight, on_done=on_done, after=after)
        except BaseException:
            self.streams.give(stream)
            raise
        self._live.append(t)
        t.poll()  # the first copies start now, not at the next progress step
        return t

    def recv(
        self, meta: ArrayMeta, post_recv: PostFn, *, device: int, max_in_flight: int | None = None,
        on_segment: SegmentFn | None = None, on_done: DoneFn | None = None, consumer: Stream | None = None,
    ) -> RecvTransfer:
        """Allocate the destination on ``device`` from ``consumer``'s memory
        pool (the receiving SGP's stream; default the current stream) and post
        the first receives.

        ``DeviceError`` when the allocation fails; ``on_done`` may run before
        this returns (an empty array, a failing receive primitive)."""
        stream = self.streams.take(device)
        try:
            t = RecvTransfer(self.backend, self.pool, meta, device, stream, post_recv,
                             max_in_flight=max_in_flight or self.max_in_flight, on_segment=on_segment,
                             on_done=on_done, consumer=consumer)
        except BaseException:
            self.streams.give(stream)
            raise
        self._live.append(t)
        t.poll()  # the first receives are posted now
        return t

    def keep(self, event: Event, *objs: Any) -> None:
        """Keep ``objs`` alive until ``event`` completed (device arrays that
        queued copies still touch, after their caller gave up on them)."""
        self._lingering.append((event, objs))

    @property
    def pending(self) -> bool:
        """True while any transfer is not settled or a kept array is still
        touched (the engine must keep polling)."""
        return bool(self._live or self._lingering)

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        return tuple(self._live)

    def poll(self) -> bool:
        """One progress step over every live transfer, oldest first."""
        moved = False
        for t in self._live:
            moved = t.poll() or moved
        if any(t.settled for t in self._live):
            for t in self._live:
                if t.settled:
                    self._settled(t)
            self._live = [t for t in self._live if not t.settled]
        if self._lingering:
            kept = [(ev, obj) for ev, obj in self._lingering if not _event_over(ev)]
            moved = moved or len(kept) != len(self._lingering)
            self._lingering = kept
        return moved

    def _settled(self, t: Transfer) -> None:
        self._lingering.extend(t.lingering)
        if not t.abandoned:  # every copy it queued is over: its stream is idle
            self.streams.give(t.stream)

    def close(self) -> None:
        """Abort and abandon what is left, then drop the pinned pool."""
        for t in self._live:
            t.abandon()
            self._lingering.extend(t.lingering)
        self._live.clear()
        # what copies still touch stays referenced by this object (never a blocking wait here)
        self._kept_at_close, self._lingering = self._lingering, []
        self.pool.close()
