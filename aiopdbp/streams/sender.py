"""Sending a data stream: :func:`run_sender`, the one sender loop.

The protocol of a stream is :mod:`aiopdbp.streams.protocol` (sans-I/O); this
module is its sending I/O for every kind of data: :func:`run_sender` pulls
segments from a :class:`ChunkSource` (host buffers and iterables here:
:class:`HostSource`; device copies and staging in
:mod:`aiopdbp.streams.devicepath`: :class:`GenSource`).  A stream whose whole
data is one short buffer travels inside its OPEN
(:data:`~aiopdbp.streams.receiver.EAGER_LIMIT`).

Sending (:func:`send_stream`): the sender asks the stream table to bind a
public pipe ``PipeA`` to the receiver (an MTA tuple), cuts the source into
segments of ``segment_size`` bytes, numbers them ``(sno, segno)``, writes them
in order (each one after reserving a slot at the receiver: backpressure), then
an END that carries how many segments and bytes were sent, and waits until
the receiver has taken the END (the whole stream is *delivered*).  Then the
binding is undone and the pipes go back to their pools.  A sender that fails
or is cancelled midway sends an ABORT instead, which overtakes backpressure.
A short stream, carried whole by its OPEN, binds no pipe and is done once
its OPEN is routed (a copy taken): no DONE comes back for it.

Zero copy: segments of an immutable or read-only source are views of it.  A
writable source is also sent as views (no copy on the sending side); the
receiver copies each once (:mod:`aiopdbp.streams.receiver`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from aiopdbp.arrays import host_array, wire_name
from aiopdbp.errors import UnknownProcessError
from aiopdbp.device.backend import is_device_array
from aiopdbp.streams.receiver import DEFAULT_SEGMENT, EAGER_LIMIT, StreamMeta, describe, is_array
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.wire.shorts import ShortStream

if TYPE_CHECKING:
    from aiopdbp.streams.outgoing import OutgoingStream
    from aiopdbp.streams.table import StreamTable

__all__ = ["ChunkSource", "GenSource", "HostSource", "Staged", "check_chunk", "cut", "run_sender", "send_stream",
           "short_segment"]


# --------------------------------------------------------------------- cutting
def cut(chunk: Any, segment_size: int) -> Iterator[Any]:
    """Cut one buffer/array into segments of at most ``segment_size`` bytes.

    Arrays are cut along their first axis (whole rows), so every segment
    keeps the dtype and the trailing shape; bytes-like data become memoryview
    slices.  No data is copied (a non-contiguous array is made contiguous once).
    """
    if is_array(chunk):
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
    if mv.ndim != 1 or mv.format != "B":  # ('b'/'c' too: blocks are written as 'B')
        mv = mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())
    n = mv.nbytes
    if n == 0:
        yield mv
        return
    for i in range(0, n, segment_size):
        yield mv[i:i + segment_size]


def _host(chunk: Any) -> Any:
    """A tensor chunk (or any host array by DLPack) as an ndarray over its memory."""
    if type(chunk) is np.ndarray or type(chunk) is bytes:
        return chunk
    arr = host_array(chunk)
    return chunk if arr is None else arr


async def _chunks(source: Any) -> AsyncGenerator[Any, None]:
    if isinstance(source, AsyncIterable):
        async for c in source:
            yield c if type(c) is bytes else _host(c)
    else:
        for c in source:
            yield c if type(c) is bytes else _host(c)


#: dtype kinds that never need pickling (numbers, bools, datetimes: no fields, no objects, never 0 bytes)
_PLAIN = frozenset("biufcmM")


def _needs_pickle(dt: np.dtype[Any]) -> bool:
    return dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0


#: what send_stream takes, for its errors
_ACCEPTED = ("give bytes, a bytearray or memoryview, a numpy array or CPU tensor, or an ordered (async) iterable "
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
    if type(chunk) is np.ndarray and first is None:  # the commonest: one plain host array
        dt = chunk.dtype
        if not _needs_pickle(dt):
            return StreamMeta("ndarray", chunk.nbytes, dt, chunk.shape)
    if isinstance(chunk, np.generic):
        chunk = np.asarray(chunk)
    if isinstance(chunk, str):
        raise TypeError(f"a str cannot be streamed (chunk {k} of the stream): encode it to bytes "
                        "first, e.g. text.encode()")
    if type(chunk) is not np.ndarray and is_device_array(chunk):  # a plain ndarray is host data
        raise TypeError(f"chunk {k} is a device array: send_stream() takes a device array whole, "
                        "not inside an iterable (send each one with its own send_stream())")
    if is_array(chunk):
        dt = np.dtype(chunk.dtype)
        if _needs_pickle(dt):
            raise TypeError(f"chunk {k}: cannot stream an array of dtype {dt} (object, structured "
                            "or sub-array dtypes need pickling: send them with gp.send() and "
                            "open_node(allow_pickle=True))")
        meta = StreamMeta("ndarray", int(chunk.nbytes), dt, tuple(chunk.shape))
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
            # by wire name: a tensor's dtype equals the plain dtype it is tagged onto
            if meta.dtype is None or first.dtype is None or wire_name(meta.dtype) != wire_name(first.dtype):
                raise ValueError(f"chunk {k} has dtype {meta.dtype}, the stream's is {first.dtype}")
            if tuple(meta.shape[1:]) != tuple(first.shape[1:]) or not meta.shape or not first.shape:
                raise ValueError(f"chunk {k} has shape {meta.shape}, which does not continue the "
                                 f"stream's {first.shape} along its first axis")
    return meta


_NO_CHUNK = object()
#: a sender's run of segments that go without waiting (credit left) yields
#: once per this many bytes, each segment counted with ``CREDIT_OVERHEAD``
#: (as a GP's run of sends does, ``aiopdbp.runtime.sending.BURST_BYTES``)
BURST_BYTES = 16 << 10


def _borrowed(source: Any) -> bool:
    """Whether a buffer source may change after ``send_stream`` returns (as
    :func:`~aiopdbp.streams.receiver.describe` says, without its meta)."""
    if type(source) is np.ndarray:
        return bool(source.flags.writeable)
    return describe(source, 0).borrowed


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
    :meth:`single` is the whole stream as one short buffer for its OPEN to
    carry, or None; a source whose single buffer was carried holds nothing
    to release.
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
        is_buffer = type(source) is np.ndarray or is_array(source) or isinstance(source, (str, np.generic))
        if not is_buffer:
            try:  # a buffer first: array.array is also iterable, but one buffer
                memoryview(source)
                is_buffer = True
            except TypeError:
                if not isinstance(source, (AsyncIterable, Iterable)) or isinstance(source, _UNORDERED):
                    raise TypeError(f"send_stream cannot stream {_a(source)}: {_ACCEPTED}") from None
        self._is_buffer = is_buffer
        self._chunks: AsyncGenerator[Any, None] | None
        if is_buffer:
            self.meta = self._first_meta = check_chunk(source, None, 0)
            self.meta.borrowed = _borrowed(source)
            self._chunks = None  # made when segments() needs it: a short stream never does
            self._buffer = source
        else:
            self._chunks = _chunks(source)
            self._first_meta = self.meta = StreamMeta()

    async def start(self) -> None:
        """Take an iterable's first chunk: the stream's kind, dtype and
        trailing shape (its size is unknown: ``nbytes`` None, a leading None).

        Cancellation: the source is closed.
        """
        chunks = self._chunks
        if chunks is None:
            return
        try:
            self._first = first = await anext(chunks, _NO_CHUNK)
            fm = self._first_meta = check_chunk(first, None, 0) if first is not _NO_CHUNK else StreamMeta()
        except BaseException:
            await chunks.aclose()
            raise
        self.meta = StreamMeta(fm.kind, None, fm.dtype, (None, *fm.shape[1:]) if fm.shape else (), borrowed=True)

    async def aclose(self) -> None:
        """Close the source's iterator (a generator's ``finally`` runs).

        Cancellation: the iterator may be left unclosed.
        """
        if self._chunks is not None:
            await self._chunks.aclose()

    def single(self) -> Any | None:
        """The whole stream as its one segment when it is a buffer of at most
        :data:`EAGER_LIMIT` bytes (and not empty), else None: what the OPEN
        may carry (the short-stream fast path)."""
        nbytes = self.meta.nbytes
        if not self._is_buffer or nbytes is None or not 0 < nbytes <= min(EAGER_LIMIT, self._segment_size):
            return None
        buf = self._buffer
        if type(buf) is np.ndarray or is_array(buf):
            # the OPEN's record carries its dtype and shape: a 0-d array
            # (shape ()) goes the segment way, whose OPEN announces the shape
            if buf.ndim == 0 or not isinstance(buf, np.ndarray):
                return None
            return buf if buf.flags.c_contiguous else np.ascontiguousarray(buf)
        mv = memoryview(buf)  # one segment: what cut() would give, without the generator
        if mv.ndim != 1 or mv.format != "B":  # ('b'/'c' too: blocks are written as 'B')
            mv = mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())
        return mv

    async def segments(self, out: OutgoingStream) -> AsyncGenerator[Any, None]:
        if self._chunks is None:
            self._chunks = _chunks([self._buffer])
        chunks, size, k = self._chunks, self._segment_size, 0
        bytes_stream = not self._is_buffer and self._first_meta.kind == "bytes"
        async with contextlib.aclosing(chunks):  # no generator left to the GC
            pending = self._first
            while True:
                if pending is not _NO_CHUNK:
                    chunk, pending = pending, _NO_CHUNK
                else:
                    chunk = await anext(chunks, _NO_CHUNK)
                    if chunk is _NO_CHUNK:
                        break
                    if type(chunk) is bytes and bytes_stream:
                        # a bytes chunk of a bytes stream passes check_chunk;
                        # one that fits a segment is what cut gives, without the calls
                        if 0 < len(chunk) <= size:
                            k += 1
                            yield memoryview(chunk)
                            continue
                    elif not self._is_buffer:
                        check_chunk(chunk, self._first_meta, k)
                k += 1
                for seg in cut(chunk, size):
                    if seg.nbytes:  # an empty one carries nothing: the OPEN has dtype and shape
                        yield seg


async def run_sender(streams: StreamTable, sender: int, pid: int, meta: StreamMeta, source: ChunkSource, *,
                     timeout: float | None, what: str, segment_size: int | None = None) -> int:
    """THE sender loop of every stream, host or device data: open the stream
    from GP ``sender`` to GP ``pid`` in the node's stream table ``streams``,
    send what ``source`` yields under the stream protocol
    (:mod:`aiopdbp.streams.protocol`: a credit or pipe slot per segment), the END,
    and wait until the receiver has it all; returns the bytes sent.  A
    stream its OPEN carries whole is done once that is routed: first without
    waiting (:meth:`StreamTable.send_whole_nowait`, no handle made), then,
    to another host, after a wait for credit (:meth:`StreamTable.send_whole`,
    no handle either), else through :meth:`StreamTable.open_outgoing` (``segment_size``, the most
    bytes of one segment when known, sets its window).  On failure or cancellation
    the receiver gets an ABORT (a stream carried whole: its OPEN is dropped
    if it was not routed yet).  ``what`` names the stream in timeout errors.

    Cancellation: the receiver's stream is aborted; the binding is undone.
    """
    eager = source.single()
    if eager is not None and not meta.extra and await _send_whole(streams, sender, pid, meta.com, eager, timeout,
                                                                  what):
        return int(eager.nbytes)  # sent whole: done (the source was one buffer)
    try:
        if timeout is None:  # no timeout context to enter and leave: short streams feel it
            out = await streams.open_outgoing(sender, pid, meta, timeout, eager=eager,
                                                  segment_size=segment_size)
        else:
            try:
                async with asyncio.timeout(timeout):
                    out = await streams.open_outgoing(sender, pid, meta, timeout, eager=eager,
                                                      segment_size=segment_size)
            except TimeoutError:
                raise TimeoutError(f"{what} could not be opened within {timeout} s") from None
    except BaseException:
        await source.aclose()
        raise
    try:
        if timeout is None:
            await _transfer(out, source)
        else:
            async with asyncio.timeout(timeout):
                await _transfer(out, source)
        return out.proto.nbytes
    except BaseException as exc:
        out.cancel(exc)
        if isinstance(exc, TimeoutError):
            raise TimeoutError(f"{what} did not complete within {timeout} s") from None
        raise
    finally:
        streams.close_outgoing(out)


async def _send_whole(streams: StreamTable, sender: int, pid: int, com: int, eager: Any, timeout: float | None,
                      what: str, record: ShortStream | None = None) -> bool:
    """Send a stream carried whole by its record (``eager``, its one
    segment; ``record``: its record when made already) to GP ``pid`` on
    another host without a handle: at once when
    nothing has to wait (:meth:`StreamTable.send_whole_nowait`), else after
    a wait for credit as a message's (:meth:`StreamTable.send_whole`).
    True once its record is routed; False, having done nothing, when it
    needs a handle (a local receiver: :meth:`StreamTable.open_outgoing`).

    Cancellation: before its record is routed nothing goes.
    """
    tgt = streams.router.targets.get(pid)
    if tgt is None or not tgt.remote:
        return False
    if record is None:
        record = streams.whole_record(sender, com, eager)
    cost = CREDIT_OVERHEAD + int(eager.nbytes)  # its bytes, charged as a message's
    if streams.send_whole_nowait(tgt, pid, record, cost):
        return True
    try:
        if timeout is None:
            return await streams.send_whole(sender, tgt, pid, record, cost)
        async with asyncio.timeout(timeout):
            return await streams.send_whole(sender, tgt, pid, record, cost)
    except TimeoutError:
        raise TimeoutError(f"{what} could not be opened within {timeout} s") from None


def short_segment(source: Any, segment_size: int) -> Any | None:
    """The whole of ``source`` as its stream's one segment when it is a
    plain ndarray or ``bytes``/``bytearray``/``memoryview`` of at most
    :data:`EAGER_LIMIT` (and ``segment_size``) bytes, not empty: what
    :meth:`HostSource.single` gives for it, without a source or a meta
    made first (a short stream feels every call).  None for anything else,
    which takes the general path (and its checks)."""
    limit = EAGER_LIMIT if EAGER_LIMIT < segment_size else segment_size
    kind = type(source)
    if kind is np.ndarray:
        dt = source.dtype
        if not 0 < source.nbytes <= limit or source.ndim == 0 or dt.kind not in _PLAIN and _needs_pickle(dt):
            return None
        return source if source.flags.c_contiguous else np.ascontiguousarray(source)
    if kind is bytes or kind is bytearray or kind is memoryview:
        mv = memoryview(source)
        if not 0 < mv.nbytes <= limit:
            return None
        if mv.ndim != 1 or mv.format != "B":  # ('b'/'c' too: blocks are written as 'B')
            mv = mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())
        return mv
    return None


async def _transfer(out: OutgoingStream, source: ChunkSource) -> None:
    """The body of :func:`run_sender` once the stream is open: its segments
    under the protocol, the END, and the wait for the receiver's DONE (a
    stream carried whole: for its OPEN to be routed)."""
    if out.carried:
        # The OPEN carried the one segment and the END; the stream is done
        # once the OPEN is routed (OutgoingStream.opened): no DONE comes
        # back for it.  The source was one buffer: nothing to close.
        await out.done
        return
    await out.routed
    segments = source.segments(out)
    burst = BURST_BYTES
    async with contextlib.aclosing(segments):
        async for seg in segments:
            if type(seg) is Staged:
                out.staged(seg.nbytes)
                continue
            await out.reserve()
            out.emit_segment(seg)
            burst -= seg.nbytes + CREDIT_OVERHEAD
            if burst <= 0:  # a window of small segments never waits for credit: let the others run
                burst = BURST_BYTES
                await asyncio.sleep(0)
    await out.reserve()
    out.emit_end()
    await out.delivery()


async def send_stream(streams: StreamTable, sender: int, resolve: Callable[[str, float | None], Awaitable[int]],
                      dest: str, source: Any, *, segment_size: int = DEFAULT_SEGMENT,
                      com: int = 0, timeout: float | None = None) -> int:
    """Body of :meth:`GP.send_stream` for host data: GP ``sender`` sends
    ``source`` to the GP named ``dest`` (``resolve`` turns the name into a
    pid, waiting for it by the name rule); returns the number of bytes sent.

    Cancellation: as for :func:`run_sender`.
    """
    if segment_size < 1:
        raise ValueError("segment_size must be >= 1")
    eager = short_segment(source, segment_size)
    record: ShortStream | None = None
    if eager is not None:  # the commonest: one short buffer, carried whole, no handle (to another host)
        router = streams.router
        pid = router.pids.get(dest)
        tgt = None if pid is None else router.targets.get(pid)
        if tgt is not None and tgt.remote:
            # name, binding and credit there: routed in this call, no
            # coroutine awaited (as Router.try_send routes a message)
            record = streams.whole_record(sender, com, eager)
            cost = CREDIT_OVERHEAD + int(eager.nbytes)  # its bytes, charged as a message's
            if streams.send_whole_nowait(tgt, pid, record, cost):  # type: ignore[arg-type]
                return int(eager.nbytes)
            if timeout is None:  # credit to wait for, as a message's (Router.send_waiting): no second look
                try:
                    if await streams.send_whole(sender, tgt, pid, record, cost):  # type: ignore[arg-type]
                        return int(eager.nbytes)
                except UnknownProcessError:
                    await resolve(dest, 0)  # (as below)
                    raise
    what = f"stream to {dest!r}"
    if eager is not None:
        pid = await resolve(dest, timeout)
        try:
            if await _send_whole(streams, sender, pid, com, eager, timeout, what, record):
                return int(eager.nbytes)
        except UnknownProcessError:
            await resolve(dest, 0)  # (as below)
            raise
    src = HostSource(source, segment_size)
    if src._chunks is not None:  # an iterable: its first chunk fixes the meta
        await src.start()
    src.meta.com = com
    try:
        pid = await resolve(dest, timeout)
    except BaseException:
        await src.aclose()
        raise
    try:
        return await run_sender(streams, sender, pid, src.meta, src, timeout=timeout, what=what,
                                segment_size=segment_size)
    except UnknownProcessError:
        # the GP left between its name and the stream's opening (the error
        # could only say "pid N"): the name rule says it by name
        await resolve(dest, 0)
        raise
