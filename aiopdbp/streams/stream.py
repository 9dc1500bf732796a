"""Data streams (the patent's SINFO): segmentation, sending and reassembly.

The protocol of a stream is :mod:`aiopdbp.streams.protocol` (sans-I/O); this
module is its I/O for every kind of data: :func:`run_sender` is the one
sender loop (it pulls segments from a :class:`ChunkSource`: host buffers and
iterables here, device copies and staging in :mod:`aiopdbp.streams.devicepath`) and
:class:`IncomingStream` the one receiver (device sinks subclass it in
:mod:`aiopdbp.streams.devicestreams`).  A stream whose whole data is one short
buffer travels inside its OPEN (:data:`EAGER_LIMIT`).

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
import collections
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from aiopdbp.streams import protocol as sp
from aiopdbp.wire.codec import CDU, StreamOp
from aiopdbp.device.backend import is_device_array
from aiopdbp.errors import BrokenResourceError, ClosedResourceError, ProtocolError, StreamError
from aiopdbp.routing.pipes import Pipe
from aiopdbp.streams.protocol import StreamState

if TYPE_CHECKING:
    from aiopdbp.runtime.process import GP
    from aiopdbp.streams.table import OutgoingStream

__all__ = ["DEFAULT_SEGMENT", "EAGER_LIMIT", "ChunkSource", "GenSource", "HostSource", "Staged", "run_sender", "IncomingStream", "StreamMeta", "StreamOwner",
           "StreamState", "check_chunk", "cut", "describe", "send_stream"]

DEFAULT_SEGMENT = 1 << 20
#: a stream of at most this many bytes, known when it opens, travels inside its OPEN
EAGER_LIMIT = 64 << 10


class StreamOwner(Protocol):
    """What a stream needs of the table that keeps it (:mod:`aiopdbp.streams.table`)."""

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
        if self.extra:  # e.g. a device stream's staging header (aiopdbp.streams.devicepath)
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
        self._proto = sp.ReceiverProtocol(window, self.meta.window)
        self._proto.handle(sp.Open())
        self._ready: collections.deque[Any] = collections.deque()  # in order, not yet read
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<IncomingStream {self.key} from {self.source!r} seg {self._proto.next} {self.state.name}>"

    @property
    def com(self) -> int:
        return self.meta.com

    @property
    def state(self) -> StreamState:
        return self._proto.state

    @property
    def finished(self) -> bool:
        """True once the END was verified (the stream is DONE)."""
        return self._proto.state is StreamState.DONE

    def fail(self, exc: BaseException) -> None:
        """The stream broke from outside (its GP left, the node or the
        sender's host is gone): reads raise ``exc``."""
        if not self._proto.ended:
            self._proto.handle(sp.Break(str(exc)))
            self._error = exc

    def _feed(self, cdu: CDU) -> None:
        """One CDU from PipeB through the protocol, and its actions carried out."""
        proto = self._proto
        op = cdu.op
        try:
            if op is StreamOp.ABORT:
                actions = proto.handle(sp.Abort(bytes(cdu.data).decode(errors="replace")))
            elif op is StreamOp.END:
                actions = proto.handle(sp.End(cdu.segno, _end_bytes(cdu.data)))
            else:
                data = cdu.data
                actions = proto.handle(sp.Segment(cdu.segno, data, int(data.nbytes) if hasattr(data, "nbytes")
                                                  else len(data)))
        except ProtocolError as exc:
            self._error = StreamError(f"stream {self.key} from {self.source!r}: {exc}")
            if not proto.ended:
                proto.handle(sp.Break(str(exc)))
            self._owner.incoming_closed(self, str(self._error), True)
            raise self._error from None
        for act in actions:
            kind = type(act)
            if kind is sp.Deliver:
                self._ready.append(act.data)  # type: ignore[attr-defined]
            elif kind is sp.SendDone:
                self._owner.incoming_closed(self, act.error, True)  # type: ignore[attr-defined]
            elif kind is sp.Aborted:
                why = act.why  # type: ignore[attr-defined]
                self._error = StreamError(f"stream {self.key} from {self.source!r} was aborted by its "
                                          f"sender{': ' + why if why else ''}")
                self._error.origin_rank = self.key[0]   # the sender's rank (aiopdbp.runtime.job)
                self._owner.incoming_closed(self, None, False)
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
        ready = self._ready
        while True:
            if self._error is not None:
                raise self._error
            if ready:
                data = ready.popleft()
                for act in self._proto.handle(sp.Consumed()):
                    self._owner.give_credit(self, act.n)  # type: ignore[attr-defined]
                return data
            if self._proto.state is StreamState.DONE:
                return None
            try:
                cdu = await self.pipe.receive()
            except (BrokenResourceError, ClosedResourceError, EOFError) as exc:
                if self._error is not None:
                    raise self._error from exc
                raise StreamError(f"stream {self.key} from {self.source!r} was cut off") from exc
            self._feed(cdu)

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
        if meta.nbytes is not None and self._proto.next == len(self._ready):  # nothing read yet
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
        if self._proto.ended:
            return
        self._error = StreamError(f"stream {self.key} was closed by its receiver")
        for act in self._proto.handle(sp.Close("receiver closed the stream")):
            self._owner.incoming_closed(self, act.error, True)  # type: ignore[attr-defined]

    async def __aenter__(self) -> IncomingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ------------------------------------------------------------------- sending
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


class Staged:
    """A segment a chunk source carried itself, outside the stream's CDUs
    (device staging's raw messages): the sender loop only counts it."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


class ChunkSource(Protocol):
    """Where the sender loop (:func:`run_sender`) takes a stream's segments.

    :meth:`segments` yields, once the OPEN is routed, each segment in order:
    a buffer or array for the loop to carry (after a credit), or
    :class:`Staged` for one the source carried itself.  It may watch ``out``
    (e.g. ``out.done`` fails when the receiver gives up).  :meth:`aclose`
    releases what the source holds when the stream ends before it started.
    """

    def segments(self, out: OutgoingStream) -> AsyncGenerator[Any, None]: ...
    async def aclose(self) -> None: ...
    def single(self) -> Any | None: ...


class GenSource:
    """A chunk source made of a function that, given the stream, returns an
    async generator of its segments (what the device path uses)."""

    __slots__ = ("_gen",)

    def __init__(self, gen: Callable[[OutgoingStream], AsyncGenerator[Any, None]]) -> None:
        self._gen = gen

    def segments(self, out: OutgoingStream) -> AsyncGenerator[Any, None]:
        return self._gen(out)

    async def aclose(self) -> None:
        """Nothing to release before the generator started.

        Cancellation: never suspends.
        """

    def single(self) -> None:
        return None  # produced on the way: never carried in the OPEN


class HostSource:
    """Host data: one buffer or array, or an (async) iterable of them, cut
    into segments of ``segment_size`` bytes (zero copy), each chunk checked
    against the first one as it comes."""

    __slots__ = ("meta", "_chunks", "_first", "_first_meta", "_is_buffer", "_segment_size", "_buffer")

    def __init__(self, source: Any, segment_size: int) -> None:
        self._segment_size = segment_size
        self._first: Any = _NO_CHUNK
        # Refuse bad input before anything is sent: a buffer is checked whole;
        # an iterable's first chunk is taken in start() (it fixes the stream's
        # dtype and shape, which the OPEN announces), the others as they come.
        is_buffer = _is_array(source) or isinstance(source, (str, np.generic))
        if not is_buffer:
            try:  # a buffer first: array.array is also iterable, but one buffer
                memoryview(source)
                is_buffer = True
            except TypeError:
                if not isinstance(source, (AsyncIterable, Iterable)) or isinstance(source, _UNORDERED):
                    raise TypeError(f"send_stream cannot stream {_a(source)}: {_ACCEPTED}") from None
        self._is_buffer = is_buffer
        if is_buffer:
            self.meta = self._first_meta = check_chunk(source, None, 0)
            self.meta.borrowed = describe(source, 0).borrowed
            self._chunks = _chunks([source])
            self._buffer = source
        else:
            self._chunks = _chunks(source)
            self._first_meta = self.meta = StreamMeta()

    async def start(self) -> None:
        """Take an iterable's first chunk: the stream's kind, dtype and
        trailing shape (its size is unknown: ``nbytes`` None, a leading None).

        Cancellation: the source is closed.
        """
        if self._is_buffer:
            return
        try:
            self._first = first = await anext(self._chunks, _NO_CHUNK)
            fm = self._first_meta = check_chunk(first, None, 0) if first is not _NO_CHUNK else StreamMeta()
        except BaseException:
            await self._chunks.aclose()
            raise
        self.meta = StreamMeta(fm.kind, None, fm.dtype, (None, *fm.shape[1:]) if fm.shape else (), borrowed=True)

    async def aclose(self) -> None:
        """Close the source's iterator (a generator's ``finally`` runs).

        Cancellation: the iterator may be left unclosed.
        """
        await self._chunks.aclose()

    def single(self) -> Any | None:
        """The whole stream as its one segment when it is a buffer of at most
        :data:`EAGER_LIMIT` bytes (and not empty), else None: what the OPEN
        may carry (the short-stream fast path)."""
        nbytes = self.meta.nbytes
        if not self._is_buffer or nbytes is None or not 0 < nbytes <= min(EAGER_LIMIT, self._segment_size):
            return None
        segs = list(cut(self._buffer, self._segment_size))
        return segs[0] if len(segs) == 1 else None

    async def segments(self, out: OutgoingStream) -> AsyncGenerator[Any, None]:
        chunks, size, k = self._chunks, self._segment_size, 0
        async with contextlib.aclosing(chunks):  # no generator left to the GC
            pending = self._first
            while True:
                if pending is not _NO_CHUNK:
                    chunk, pending = pending, _NO_CHUNK
                else:
                    chunk = await anext(chunks, _NO_CHUNK)
                    if chunk is _NO_CHUNK:
                        break
                    if not self._is_buffer:
                        check_chunk(chunk, self._first_meta, k)
                k += 1
                for seg in cut(chunk, size):
                    if seg.nbytes:  # an empty one carries nothing: the OPEN has dtype and shape
                        yield seg


async def run_sender(gp: GP, pid: int, meta: StreamMeta, source: ChunkSource, *,
                     timeout: float | None, what: str) -> int:
    """THE sender loop of every stream, host or device data: open the stream
    to GP ``pid``, send what ``source`` yields under the stream protocol
    (:mod:`aiopdbp.streams.protocol`: a credit or pipe slot per segment), the END,
    and wait until the receiver has it all; returns the bytes sent.  On
    failure or cancellation the receiver gets an ABORT.  ``what`` names the
    stream in timeout errors.

    Cancellation: the receiver's stream is aborted; the binding is undone.
    """
    streams = gp.node.streams
    try:
        try:
            async with asyncio.timeout(timeout):
                out = await streams.open_outgoing(gp.pid, pid, meta, timeout, eager=source.single())
        except TimeoutError:
            raise TimeoutError(f"{what} could not be opened within {timeout} s") from None
    except BaseException:
        await source.aclose()
        raise
    try:
        async with asyncio.timeout(timeout):
            await out.routed
            if out.carried:
                # The OPEN carried the one segment and the END; the protocol
                # heard both when it was routed (OutgoingStream.opened).
                await source.aclose()
            else:
                segments = source.segments(out)
                async with contextlib.aclosing(segments):
                    async for seg in segments:
                        if type(seg) is Staged:
                            out.staged(seg.nbytes)
                            continue
                        await out.reserve()
                        out.emit_segment(seg)
                await out.reserve()
                out.emit_end()
            await out.done
        return out.proto.nbytes
    except BaseException as exc:
        out.cancel(exc)
        if isinstance(exc, TimeoutError):
            raise TimeoutError(f"{what} did not complete within {timeout} s") from None
        raise
    finally:
        streams.close_outgoing(out)


async def send_stream(gp: GP, dest: str, source: Any, *, segment_size: int = DEFAULT_SEGMENT,
                      com: int = 0, timeout: float | None = None) -> int:
    """Body of :meth:`GP.send_stream`; returns the number of bytes sent."""
    if segment_size < 1:
        raise ValueError("segment_size must be >= 1")
    src = HostSource(source, segment_size)
    await src.start()
    src.meta.com = com
    try:
        pid = await gp.node.router.resolve(dest, timeout)
    except BaseException:
        await src.aclose()
        raise
    return await run_sender(gp, pid, src.meta, src, timeout=timeout, what=f"stream to {dest!r}")
