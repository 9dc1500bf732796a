"""Data streams (the patent's SINFO): segmentation, sending and reassembly.

Sending (:func:`send_stream`): the sender's writer asks the node to bind a
public pipe ``PipeA`` to the receiver (an MTA tuple), cuts the source into
segments of ``segment_size`` bytes, numbers them ``(sno, segno)``, writes them
in order (each one after reserving a slot at the receiver: backpressure), then
an END that carries how many segments and bytes were sent, and waits until
the receiver has taken the END (the whole stream is *delivered*).  Then the
binding is undone and the pipes go back to their pools.  A sender that fails
or is cancelled midway sends an ABORT instead, which overtakes backpressure.

Receiving (:class:`IncomingStream`): the receiver gets the stream object from
``gp.recv()`` in arrival order with its messages.  It yields segments in
``segno`` order even when they arrive out of order (a bounded reorder window),
checks the END's counts, and turns an ABORT, a gap or a lost sender into
:class:`~aiopdbp.errors.StreamError` -- never a hang or truncated data.

Zero copy: segments of an immutable or read-only source are views of it.  A
writable source is also sent as views (no copy on the sending side); the
receiver copies each segment exactly once -- into the result of :meth:`read`,
or into a private copy when it iterates -- so no receiver ever holds a view
of memory the sender may change after ``send_stream`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .codec import CDU, Kind, StreamOp
from .device.backend import is_device_array
from .errors import BrokenResourceError, ClosedResourceError, StreamError, WouldBlock
from .pipes import Pipe
from .stall import Waits

if TYPE_CHECKING:
    from .process import GP
    from .router import Target

__all__ = ["DEFAULT_SEGMENT", "IncomingStream", "OutgoingStream", "StreamMeta", "StreamOwner",
           "StreamState", "check_chunk", "cut", "describe", "send_stream"]

DEFAULT_SEGMENT = 1 << 20


class StreamState(enum.Enum):
    """Where one stream is, on either side (h11-style: states and the
    transitions allowed between them; anything else is a bug)."""

    OPENING = "opening"  # outgoing: bound, its OPEN not routed yet
    OPEN = "open"        # segments flow
    ENDING = "ending"    # outgoing: END queued, waiting for the receiver's DONE
    DONE = "done"        # delivered whole (receiver: END verified)
    ABORTED = "aborted"  # the sender gave up (cancelled, failed)
    BROKEN = "broken"    # the receiver gave up, or a peer, host or protocol failed


_TRANSITIONS: dict[StreamState, frozenset[StreamState]] = {
    StreamState.OPENING: frozenset({StreamState.OPEN, StreamState.ABORTED, StreamState.BROKEN}),
    StreamState.OPEN: frozenset({StreamState.ENDING, StreamState.DONE, StreamState.ABORTED,
                                 StreamState.BROKEN}),
    StreamState.ENDING: frozenset({StreamState.DONE, StreamState.ABORTED, StreamState.BROKEN}),
    StreamState.DONE: frozenset(),
    StreamState.ABORTED: frozenset(),
    StreamState.BROKEN: frozenset(),
}
_TERMINAL = frozenset({StreamState.DONE, StreamState.ABORTED, StreamState.BROKEN})


class _StateMachine:
    """A stream side's state with checked transitions."""

    __slots__ = ("state",)

    def __init__(self, state: StreamState) -> None:
        self.state = state

    def move(self, new: StreamState) -> bool:
        """Go to ``new``; False (no change) when already ended; a transition
        the table does not allow is a bug."""
        if self.state in _TERMINAL:
            return False
        if new not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"stream state {self.state.name} -> {new.name} is not allowed")
        self.state = new
        return True

    @property
    def ended(self) -> bool:
        return self.state in _TERMINAL


class StreamOwner(Protocol):
    """What a stream needs of the table that keeps it (:mod:`aiopdbp.streamtable`)."""

    def incoming_closed(self, stream: IncomingStream, error: str | None, notify: bool) -> None: ...
    def give_credit(self, stream: IncomingStream, segments: int) -> None: ...


@dataclass(slots=True)
class StreamMeta:
    """What the OPEN of a stream announces."""

    kind: str = "bytes"                    # "bytes" or "ndarray"
    nbytes: int | None = None              # total bytes; None: unknown (an iterable source)
    dtype: str = ""                        # numpy dtype str for ndarray streams
    shape: tuple[int | None, ...] = ()     # ndarray streams: first axis None when unknown
    com: int = 0
    borrowed: bool = False                 # segments are views of sender memory that may change
    extra: dict[str, Any] = field(default_factory=dict)
    window: int = 0                        # remote sender's credit window (segments), 0: none

    def to_wire(self) -> dict[str, Any]:
        # on the wire an unknown size is -1 and an unknown length 0
        d = {"kind": self.kind, "nbytes": -1 if self.nbytes is None else self.nbytes, "dtype": self.dtype,
             "shape": [0 if x is None else x for x in self.shape], "com": self.com, "window": self.window}
        if self.extra:  # e.g. a device stream's staging header (aiopdbp.devicepath)
            d["extra"] = self.extra
        return d

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> StreamMeta:
        extra = d.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError(f"stream meta extra is a {type(extra).__name__}, not a map")
        nbytes: int | None = int(d.get("nbytes", -1))
        shape: tuple[int | None, ...] = tuple(int(x) for x in d.get("shape", ()))
        if nbytes is not None and nbytes < 0:
            nbytes = None
            shape = (None, *shape[1:]) if shape else ()
        return cls(str(d.get("kind", "bytes")), nbytes, str(d.get("dtype", "")), shape,
                   int(d.get("com", 0)), extra=extra, window=int(d.get("window", 0)))


# --------------------------------------------------------------------- cutting
def _is_array(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or hasattr(obj, "__cuda_array_interface__")


def describe(source: Any, com: int) -> StreamMeta:
    """Meta for a buffer/array source (an iterable source is described lazily)."""
    if _is_array(source):
        return StreamMeta("ndarray", int(source.nbytes), source.dtype.str, tuple(source.shape), com,
                          borrowed=bool(getattr(getattr(source, "flags", None), "writeable", True)))
    mv = memoryview(source)
    return StreamMeta("bytes", mv.nbytes, com=com, borrowed=not mv.readonly)


def cut(chunk: Any, segment_size: int) -> Iterator[Any]:
    """Cut one buffer/array into segments of at most ``segment_size`` bytes.

    Arrays are cut along their first axis (whole rows), so every segment
    keeps the dtype and the trailing shape; bytes-like data become memoryview
    slices.  No data is copied (a non-contiguous array is made contiguous once).
    """
    if _is_array(chunk):
        arr = chunk
        if arr.ndim == 0:
            yield arr.reshape(1)
            return
        if isinstance(arr, np.ndarray) and not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        row = max(1, int(arr.nbytes // max(1, arr.shape[0]))) if arr.shape[0] else 1
        rows = max(1, segment_size // row)
        n = arr.shape[0]
        if n == 0:
            yield arr
            return
        for i in range(0, n, rows):
            yield arr[i:i + rows]
        return
    mv = memoryview(chunk)
    if mv.ndim != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())
    n = mv.nbytes
    if n == 0:
        yield mv
        return
    for i in range(0, n, segment_size):
        yield mv[i:i + segment_size]


async def _chunks(source: Any) -> AsyncGenerator[Any, None]:
    if isinstance(source, AsyncIterable):
        async for c in source:
            yield c
    else:
        for c in source:
            yield c


def _end_bytes(data: Any) -> int:
    try:
        return int.from_bytes(bytes(data), "little")
    except Exception:
        return -1


def _as_u8(seg: Any) -> np.ndarray[Any, np.dtype[np.uint8]]:
    if isinstance(seg, np.ndarray):
        return np.ascontiguousarray(seg).reshape(-1).view(np.uint8)
    return np.frombuffer(seg, dtype=np.uint8)


def _flat_bytes(out: Any, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A flat uint8 view of ``out`` (checked) or a fresh array of ``nbytes``."""
    if out is None:
        return np.empty(nbytes, dtype=np.uint8)
    arr = out if isinstance(out, np.ndarray) else np.frombuffer(out, dtype=np.uint8)
    if not arr.flags.writeable or not arr.flags.c_contiguous:
        raise ValueError("read(out=...) needs a writable C-contiguous buffer")
    flat = arr.reshape(-1).view(np.uint8)
    if flat.size < nbytes:
        raise ValueError(f"read(out=...) buffer holds {flat.size} bytes, the stream has {nbytes}")
    return flat[:nbytes]


# ------------------------------------------------------------------ receiving
class IncomingStream:
    """A data stream arriving at a GP.

    ``async for segment in stream`` yields the segments in order (a
    ``memoryview`` per segment of a bytes stream, an ``ndarray`` per segment
    of an array stream); ``await stream.read()`` gathers the whole stream (or
    what is left of it) into one ``memoryview`` (bytes streams) or one
    ``numpy.ndarray`` with the sender's dtype and shape (array streams).
    ``source`` is the sender's name, ``com`` the command code given to
    ``send_stream``, ``state`` a :class:`StreamState`.
    """

    def __init__(self, owner: StreamOwner, key: tuple[int, int], source: str, pipe: Pipe[CDU],
                 window: int, source_pid: int = 0, dest_pid: int = 0,
                 meta: StreamMeta | None = None) -> None:
        self._owner = owner
        self.key = key
        self.sno = key[1]
        self.source_pid = source_pid
        self.dest_pid = dest_pid
        self.source = source
        self.meta = meta if meta is not None else StreamMeta()
        self.pipe = pipe                   # PipeB, the stream's bound private pipe
        self._sm = _StateMachine(StreamState.OPEN)
        self._window = window
        self._next = 0
        self._consumed = 0                 # segments not yet credited back to the sender
        self._nbytes = 0
        self._stash: dict[int, CDU] = {}
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<IncomingStream {self.key} from {self.source!r} seg {self._next} {self.state.name}>"

    @property
    def com(self) -> int:
        return self.meta.com

    @property
    def state(self) -> StreamState:
        return self._sm.state

    @property
    def finished(self) -> bool:
        """True once the END was verified (the stream is DONE)."""
        return self._sm.state is StreamState.DONE

    def fail(self, exc: BaseException) -> None:
        """The stream broke from outside (its GP left, the node or the
        sender's host is gone): reads raise ``exc``."""
        if self._sm.move(StreamState.BROKEN):
            self._error = exc

    async def _next_cdu(self) -> CDU:
        """The CDU with segno == self._next (or a terminal END/ABORT)."""
        while True:
            if self._error is not None:
                raise self._error
            cdu = self._stash.pop(self._next, None)
            if cdu is not None:
                return cdu
            try:
                cdu = await self.pipe.receive()
            except (BrokenResourceError, ClosedResourceError, EOFError) as exc:
                if self._error is not None:
                    raise self._error from exc
                raise StreamError(f"stream {self.key} from {self.source!r} was cut off") from exc
            if cdu.op is StreamOp.ABORT:
                self._error = StreamError(
                    f"stream {self.key} from {self.source!r} was aborted by its sender"
                    f"{': ' + bytes(cdu.data).decode(errors='replace') if cdu.data else ''}")
                self._error.origin_rank = self.key[0]   # the sender's rank (aiopdbp.job)
                self._sm.move(StreamState.ABORTED)
                self._owner.incoming_closed(self, None, False)
                raise self._error
            if cdu.segno == self._next:
                return cdu
            if cdu.segno < self._next or cdu.segno in self._stash:
                self._protocol_fail(f"duplicate segment {cdu.segno}")
            if len(self._stash) >= self._window:
                self._protocol_fail(f"segment {self._next} missing (reorder window of {self._window} exceeded)")
            self._stash[cdu.segno] = cdu

    def _protocol_fail(self, why: str) -> None:
        self._error = StreamError(f"stream {self.key} from {self.source!r}: {why}")
        self._sm.move(StreamState.BROKEN)
        self._owner.incoming_closed(self, str(self._error), True)
        raise self._error

    async def next_segment(self) -> Any | None:
        """The next segment's data as it arrived (no private copy), or None
        after a verified END; raises ``StreamError`` as reading does.  For
        subclasses that deliver segments their own way (device streams).

        Cancellation: a cancelled wait loses no segment.
        """
        return await self._next_segment()

    async def _next_segment(self) -> Any | None:
        """Next segment's data, or None after a verified END."""
        if self._sm.state is StreamState.DONE:
            return None
        cdu = await self._next_cdu()
        self._next += 1
        if cdu.op is StreamOp.END:
            # END is numbered after the last segment and carries the byte count:
            # the graceful close says how much was sent, so nothing is lost silently.
            nseg = cdu.segno
            nbytes = _end_bytes(cdu.data)
            if nbytes != self._nbytes:
                self._protocol_fail(f"END announced {nseg} segments/{nbytes} bytes, "
                                    f"received {self._next - 1}/{self._nbytes}")
            self._sm.move(StreamState.DONE)
            self._owner.incoming_closed(self, None, True)
            return None
        data = cdu.data
        self._nbytes += int(data.nbytes) if hasattr(data, "nbytes") else len(data)
        window = self.meta.window
        if window:
            # Give a remote sender its credit back in half-windows: it never
            # runs more than a window ahead of what this GP consumed.
            self._consumed += 1
            if self._consumed >= max(1, window // 2):
                n, self._consumed = self._consumed, 0
                self._owner.give_credit(self, n)
        return data

    def __aiter__(self) -> IncomingStream:
        return self

    async def __anext__(self) -> Any:
        """Next segment (a private copy when it would alias sender memory).

        Cancellation: a cancelled wait loses no segment.
        """
        data = await self._next_segment()
        if data is None:
            raise StopAsyncIteration
        if _is_array(data):
            return data.copy() if self.meta.borrowed else data
        if self.meta.borrowed or not isinstance(data, memoryview):
            data = memoryview(bytes(data) if self.meta.borrowed else data)
        return data

    async def read(self, out: Any = None) -> Any:
        """Gather the whole stream into one buffer or array.

        Bytes streams give a writable ``memoryview`` (format ``B``); array
        streams a ``numpy.ndarray`` with the sender's dtype and shape.  With
        ``out`` (any writable buffer or array of at least the stream's size,
        e.g. one reused across streams) the data land there and a view of the
        filled part is returned: no allocation, exactly one copy.

        Cancellation: cancelling leaves the stream open at the segment reached;
        segments already consumed are not given back, so treat the stream as
        broken (``aclose()`` it).
        """
        meta = self.meta
        if meta.nbytes is not None and self._next == 0:
            # numpy's allocator asks the kernel for huge pages on big buffers,
            # which makes first-touch page faults several times cheaper.
            flat = _flat_bytes(out, meta.nbytes)
            pos = 0
            while (seg := await self._next_segment()) is not None:
                b = _as_u8(seg)
                flat[pos:pos + b.size] = b
                pos += b.size
            if meta.kind == "ndarray":
                return flat[:pos].view(np.dtype(meta.dtype)).reshape(meta.shape)
            return memoryview(flat[:pos].data)
        parts = []
        while (seg := await self._next_segment()) is not None:
            parts.append(np.array(seg, copy=True) if self.meta.kind == "ndarray" or _is_array(seg)
                         else _as_u8(seg).copy())
        if self.meta.kind == "ndarray" or (parts and parts[0].dtype != np.uint8):
            if not parts:
                return np.empty((0, *meta.shape[1:]), dtype=np.dtype(meta.dtype or "u1"))
            # the announced dtype, exactly: concatenate would make it native-endian
            whole = np.concatenate([p.reshape(1) if p.ndim == 0 else p for p in parts],
                                   dtype=np.dtype(meta.dtype) if meta.dtype else None)
            if out is not None:
                dst = _flat_bytes(out, whole.nbytes)
                dst[:] = whole.reshape(-1).view(np.uint8)
                return dst.view(whole.dtype).reshape(whole.shape)
            return whole
        total = sum(p.size for p in parts)
        flat = _flat_bytes(out, total)
        pos = 0
        for p in parts:
            flat[pos:pos + p.size] = p.reshape(-1)
            pos += p.size
        return memoryview(flat.data)

    async def aclose(self) -> None:
        """Abandon the stream (idempotent).  The sender's ``send_stream``
        fails with ``BrokenResourceError``; later reads raise ``StreamError``.

        Cancellation: never suspends.
        """
        if self._sm.ended:
            return
        self._error = StreamError(f"stream {self.key} was closed by its receiver")
        self._sm.move(StreamState.BROKEN)
        self._owner.incoming_closed(self, "receiver closed the stream", True)

    async def __aenter__(self) -> IncomingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ------------------------------------------------------------------- sending
class OutgoingStream:
    """Sender-side handle of one bound stream (its MTA row).

    ``credits`` bounds the segments in flight to a *remote* receiver (its
    stream window): each reserve takes one, and the receiver gives them back
    (``grant``) as its GP consumes segments.  A cancelled sender is thus never
    more than a window ahead of its ABORT.  ``None`` for a local receiver,
    whose bounded PipeB gives the same backpressure.
    """

    __slots__ = ("key", "dest_pid", "pipe_a", "target", "done", "broken", "incoming", "routed",
                 "credits", "_credit_waiter", "_sm", "host", "_waits", "_names")

    def __init__(self, key: tuple[int, int], dest_pid: int, pipe_a: Pipe[Any], target: Target,
                 incoming: IncomingStream | None, host: int, *, waits: Waits | None = None,
                 names: tuple[str, str] = ("?", "?")) -> None:
        loop = asyncio.get_running_loop()
        self._waits = waits                 # where a wait for the window is registered (stalls)
        self._names = names                 # (sending GP, receiving GP)
        self.key = key
        self.dest_pid = dest_pid
        self.pipe_a = pipe_a
        self.target = target
        self.host = host                    # the receiver's host
        self.done: asyncio.Future[None] = loop.create_future()
        self.broken: BaseException | None = None
        self.incoming = incoming
        # Set when the PipeManager has routed the OPEN: every message this GP
        # sent before the stream is then ahead of it on the way, so no
        # segment can overtake them (they travel different public pipes).
        self.routed: asyncio.Future[None] = loop.create_future()
        self.credits: int | None = None
        self._credit_waiter: asyncio.Future[None] | None = None
        self._sm = _StateMachine(StreamState.OPENING)

    @property
    def state(self) -> StreamState:
        return self._sm.state

    def opened(self) -> None:
        """The OPEN was routed: segments may follow."""
        if self._sm.move(StreamState.OPEN) and not self.routed.done():
            self.routed.set_result(None)

    def ending(self) -> None:
        """The END is queued."""
        self._sm.move(StreamState.ENDING)

    def delivered(self) -> None:
        """The receiver took the whole stream."""
        if self._sm.move(StreamState.DONE) and not self.done.done():
            self.done.set_result(None)

    def aborted(self) -> None:
        """The sender gave up (an ABORT follows)."""
        self._sm.move(StreamState.ABORTED)

    def break_(self, exc: BaseException) -> None:
        """The receiver gave up, or its host is gone: the sender gets ``exc``."""
        if self.broken is None:
            self.broken = exc
        self._sm.move(StreamState.BROKEN)
        if not self.done.done():
            self.done.set_exception(exc)
            self.done.exception()
        self.wake()

    def grant(self, n: int) -> None:
        """The receiver consumed ``n`` segments: that many more may be sent."""
        if self.credits is not None:
            self.credits += n
        self.wake()

    def wake(self) -> None:
        """Wake a sender waiting for credit (granted, or the stream broke)."""
        w = self._credit_waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def reserve(self) -> None:
        """Room for one more CDU of this stream (credit, or a PipeB slot).

        Cancellation: a cancelled reserve holds nothing.
        """
        if self.broken is not None:
            raise self.broken
        if self.credits is not None and self.credits > 0:
            self.credits -= 1
            return  # a link takes stream data without GP credit
        tgt = self.target
        if self.credits is None:
            try:
                tgt.reserve_nowait()
                return
            except WouldBlock:
                pass
            except BrokenResourceError:
                if self.broken is not None:  # say why: the receiver gave up the stream
                    raise self.broken from None
                raise
        wait = None
        if self._waits is not None:
            wait = self._waits.begin(self._names[0], "the segment window of a stream",
                                     self._names[1], self.host)
        try:
            await self._wait_room()
        except asyncio.CancelledError:
            if wait is not None:
                wait.check()
            raise
        finally:
            if wait is not None:
                self._waits.end(wait)  # type: ignore[union-attr]

    async def _wait_room(self) -> None:
        if self.credits is not None:
            while self.credits <= 0:
                fut = self._credit_waiter = asyncio.get_running_loop().create_future()
                try:
                    await fut
                finally:
                    self._credit_waiter = None
                if self.broken is not None:
                    raise self.broken
            self.credits -= 1
            return
        try:
            await self.target.reserve()
        except BrokenResourceError:
            if self.broken is not None:  # say why: the receiver gave up the stream
                raise self.broken from None
            raise
        if self.broken is not None:  # receiver went away while we waited
            raise self.broken


def _needs_pickle(dt: np.dtype[Any]) -> bool:
    return dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0


#: what send_stream takes, for its errors
_ACCEPTED = ("give bytes, a bytearray or memoryview, a numpy array, or an ordered (async) iterable "
             "(list, tuple, generator) of those, each item one chunk")
#: iterables without an order: their chunks would arrive in no defined order
_UNORDERED = (set, frozenset, dict)


def _a(obj: Any) -> str:
    """``a set`` / ``an int``: what the user passed, for an error message."""
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def check_chunk(chunk: Any, first: StreamMeta | None, k: int) -> StreamMeta:
    """Describe chunk ``k`` of a stream, or refuse it (``TypeError`` /
    ``ValueError``) before anything of it is sent.

    A stream carries bytes-like buffers or numpy/device arrays of plain
    (non-object, non-structured) dtypes; every chunk of one stream has the
    kind, dtype and trailing shape of its first chunk, so the receiver can
    gather it into one buffer or array.
    """
    if isinstance(chunk, np.generic):
        chunk = np.asarray(chunk)
    if isinstance(chunk, str):
        raise TypeError(f"a str cannot be streamed (chunk {k} of the stream): encode it to bytes "
                        "first, e.g. text.encode()")
    if is_device_array(chunk):
        raise TypeError(f"chunk {k} is a device array: send_stream() takes a device array whole, "
                        "not inside an iterable (send each one with its own send_stream())")
    if _is_array(chunk):
        dt = np.dtype(chunk.dtype)
        if _needs_pickle(dt):
            raise TypeError(f"chunk {k}: cannot stream an array of dtype {dt} (object, structured "
                            "or sub-array dtypes need pickling: send them with gp.send() and "
                            "open_node(allow_pickle=True))")
        meta = StreamMeta("ndarray", int(chunk.nbytes), dt.str, tuple(chunk.shape))
    else:
        try:
            mv = memoryview(chunk)
        except TypeError:
            raise TypeError(f"chunk {k} of the stream (item {k} of the iterable given to send_stream) "
                            f"is {_a(chunk)}, which cannot be streamed: {_ACCEPTED}") from None
        meta = StreamMeta("bytes", mv.nbytes)
    if first is not None:
        if meta.kind != first.kind:
            raise TypeError(f"chunk {k} is {'an array' if meta.kind == 'ndarray' else 'bytes'}, "
                            f"the stream's first chunk was {'an array' if first.kind == 'ndarray' else 'bytes'}")
        if meta.kind == "ndarray":
            if meta.dtype != first.dtype:
                raise ValueError(f"chunk {k} has dtype {np.dtype(meta.dtype)}, the stream's is "
                                 f"{np.dtype(first.dtype)}")
            if tuple(meta.shape[1:]) != tuple(first.shape[1:]) or not meta.shape or not first.shape:
                raise ValueError(f"chunk {k} has shape {meta.shape}, which does not continue the "
                                 f"stream's {first.shape} along its first axis")
    return meta


_NO_CHUNK = object()


async def send_stream(gp: GP, dest: str, source: Any, *, segment_size: int = DEFAULT_SEGMENT,
                      com: int = 0, timeout: float | None = None) -> int:
    """Body of :meth:`GP.send_stream`; returns the number of bytes sent."""
    if segment_size < 1:
        raise ValueError("segment_size must be >= 1")
    node = gp.node
    # Refuse bad input before anything is sent: a buffer is checked whole;
    # an iterable's first chunk is taken now (it fixes the stream's dtype
    # and shape, which the OPEN announces), the others as they come.
    is_buffer = _is_array(source) or isinstance(source, (str, np.generic))
    if not is_buffer:
        try:  # a buffer first: array.array is also iterable, but one buffer
            memoryview(source)
            is_buffer = True
        except TypeError:
            if not isinstance(source, (AsyncIterable, Iterable)) or isinstance(source, _UNORDERED):
                raise TypeError(f"send_stream cannot stream {_a(source)}: {_ACCEPTED}") from None
    first: Any = _NO_CHUNK
    if is_buffer:
        meta = first_meta = check_chunk(source, None, 0)
        meta.borrowed = describe(source, com).borrowed
        chunks = _chunks([source])
    else:
        chunks = _chunks(source)
        try:
            first = await anext(chunks, _NO_CHUNK)
            first_meta = check_chunk(first, None, 0) if first is not _NO_CHUNK else StreamMeta()
        except BaseException:
            await chunks.aclose()
            raise
        # An iterable's length is unknown: the OPEN announces kind, dtype and
        # the trailing shape (after a leading None).
        meta = StreamMeta(first_meta.kind, None, first_meta.dtype,
                          (None, *first_meta.shape[1:]) if first_meta.shape else (), borrowed=True)
    meta.com = com
    streams = node.streams
    try:
        pid = await node.router.resolve(dest, timeout)
        try:
            async with asyncio.timeout(timeout):
                out = await streams.open_outgoing(gp.pid, pid, meta, timeout)
        except TimeoutError:
            raise TimeoutError(f"stream to {dest!r} could not be opened within {timeout} s") from None
    except BaseException:
        await chunks.aclose()
        raise
    segno = 0
    nbytes = 0
    put = out.pipe_a.force_put
    target = out.target
    sno = out.key[1]
    src_pid = gp.pid
    rank = node.rank
    try:
        async with asyncio.timeout(timeout):
            await out.routed
            async with contextlib.aclosing(chunks):  # no generator left to the GC
                k = 0
                pending = first
                while True:
                    if pending is not _NO_CHUNK:
                        chunk, pending = pending, _NO_CHUNK
                    else:
                        chunk = await anext(chunks, _NO_CHUNK)
                        if chunk is _NO_CHUNK:
                            break
                        if not is_buffer:
                            check_chunk(chunk, first_meta, k)
                    k += 1
                    for seg in cut(chunk, segment_size):
                        if not seg.nbytes:
                            continue  # nothing to carry: the OPEN has dtype and shape
                        await out.reserve()
                        # PipeA holds (target, pid, CDU) for the PipeManager;
                        # pid 0: stream data takes no GP credit
                        put((target, 0, CDU(Kind.STREAM, src_pid, (pid,), seg, com, 0, sno, segno,
                                            rank)))
                        segno += 1
                        nbytes += int(seg.nbytes)
            await out.reserve()
            put((target, 0, CDU(Kind.STREAM, src_pid, (pid,), nbytes.to_bytes(8, "little"),
                                com, 0, sno, segno, rank, (), StreamOp.END)))
            out.ending()
            await out.done
        return nbytes
    except BaseException as exc:
        if not out.done.done() and out.broken is None:
            out.aborted()
            why = "sender cancelled" if isinstance(exc, asyncio.CancelledError) else \
                f"sender failed: {type(exc).__name__}: {exc}"
            put((target, 0, CDU(Kind.STREAM, src_pid, (pid,), why.encode(), com, 0, sno, segno,
                                rank, (), StreamOp.ABORT)))
        if isinstance(exc, TimeoutError):
            raise TimeoutError(f"stream to {dest!r} did not complete within {timeout} s") from None
        raise
    finally:
        streams.close_outgoing(out)
