"""Receiving a data stream (the patent's SINFO): :class:`IncomingStream`.

The receiver gets the stream object from ``gp.recv()`` in arrival order with
its messages.  It yields segments in ``segno`` order even when they arrive
out of order (a bounded reorder window), checks the END's counts, and turns
an ABORT, a gap or a lost sender into :class:`~aiopdbp.errors.StreamError` --
never a hang or truncated data.  A short stream from another host, which
its OPEN carried whole, is a :class:`WholeStream`: the same reader, made
and read in one call each.  Device sinks subclass it in
:mod:`aiopdbp.streams.devicestreams`; the sending side is
:mod:`aiopdbp.streams.sender`, the protocol both obey
:mod:`aiopdbp.streams.protocol` (sans-I/O).

Zero copy: the receiver copies each segment exactly once -- into the result
of :meth:`IncomingStream.read`, or into a private copy when it iterates -- so
no receiver ever holds a view of memory the sender may change after
``send_stream`` returns.
"""

from __future__ import annotations

import collections
from typing import Any, Protocol

import numpy as np

from aiopdbp.arrays import KINDS, arrival, host_array, parse_name, wire_name
from aiopdbp.errors import BrokenResourceError, ClosedResourceError, ProtocolError, StreamError
from aiopdbp.routing.pipes import Pipe
from aiopdbp.streams import protocol as sp
from aiopdbp.streams.protocol import StreamState
from aiopdbp.wire.mesp import CDU, StreamOp
from aiopdbp.records import Record

__all__ = ["DEFAULT_SEGMENT", "EAGER_LIMIT", "LAND_MAX", "IncomingStream", "StreamMeta", "StreamOwner", "StreamState",
           "WholeStream", "describe", "is_array", "whole_meta"]

DEFAULT_SEGMENT = 1 << 20
#: streams of known size up to this land their large segments in place (IncomingStream.landing),
#: and the most bytes all streams of a host being received hold that way at once
LAND_MAX = 64 << 20
#: a stream of at most this many bytes, known when it opens, travels inside its OPEN
EAGER_LIMIT = 64 << 10


class StreamOwner(Protocol):
    """What a stream needs of the table that keeps it (:mod:`aiopdbp.streams.table`)."""

    def incoming_closed(self, stream: IncomingStream, error: str | None, notify: bool) -> None: ...
    def landing_array(self, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]] | None: ...
    def give_credit(self, stream: IncomingStream, segments: int) -> None: ...


class StreamMeta(Record):
    """What the OPEN of a stream announces."""

    __slots__ = ("kind", "nbytes", "dtype", "shape", "com", "borrowed", "extra", "window")
    kind: str  # "bytes" or "ndarray"
    nbytes: int | None  # total bytes; None: unknown (an iterable source)
    dtype: np.dtype[Any] | None  # array and device streams: the element type; None: bytes
    shape: tuple[int | None, ...]  # ndarray streams: first axis None when unknown
    com: int
    borrowed: bool  # segments are views of sender memory that may change
    extra: dict[str, Any]
    window: int  # remote sender's credit window (segments), 0: none

    def __init__(self, kind: str = "bytes",
                 nbytes: int | None = None,
                 dtype: np.dtype[Any] | None = None,
                 shape: tuple[int | None, ...] = (),
                 com: int = 0,
                 borrowed: bool = False,
                 extra: dict[str, Any] | None = None,
                 window: int = 0) -> None:
        self.kind = kind
        self.nbytes = nbytes
        self.dtype = dtype
        self.shape = shape
        self.com = com
        self.borrowed = borrowed
        self.extra = {} if extra is None else extra
        self.window = window

    def to_wire(self) -> dict[str, Any]:
        # on the wire an unknown size is -1 and an unknown length 0
        # and a dtype by its wire name (aiopdbp.arrays.wire_name), "" for none
        dtype = "" if self.dtype is None else wire_name(self.dtype)
        d = {"kind": self.kind, "nbytes": -1 if self.nbytes is None else self.nbytes, "dtype": dtype,
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
        name = str(d.get("dtype", ""))
        return cls(str(d.get("kind", "bytes")), nbytes, parse_name(name) if name else None, shape,
                   int(d.get("com", 0)), extra=extra, window=int(d.get("window", 0)))


def whole_meta(data: Any, com: int, window: Any) -> StreamMeta:
    """The meta of a stream its OPEN carried whole: its one segment
    ``data``, its ``com`` and the sender's credit ``window`` (a CDU record's
    or a short stream record's) -- an array gives an array stream of its
    dtype and shape, a buffer a bytes stream.  ``ProtocolError`` for what
    no sender sends: a window out of range, an empty or 0-d array, an empty
    buffer, anything else."""
    if type(window) is not int or not 0 < window <= 0xFFFFFFFF:
        raise ProtocolError(f"a stream OPEN announces a credit window of {window!r}")
    if isinstance(data, np.ndarray):
        if data.ndim == 0 or not data.nbytes:
            raise ProtocolError("a stream OPEN carries an empty or 0-d array as its whole data")
        return StreamMeta("ndarray", data.nbytes, data.dtype, data.shape, com, window=window)
    if isinstance(data, (bytes, bytearray, memoryview)) and len(data):
        return StreamMeta("bytes", memoryview(data).nbytes, com=com, window=window)
    raise ProtocolError(f"a stream OPEN carries {type(data).__name__} as its whole data")


# --------------------------------------------------------------------- cutting
def is_array(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or hasattr(obj, "__cuda_array_interface__")


def describe(source: Any, com: int) -> StreamMeta:
    """Meta for a buffer/array source (an iterable source is described lazily)."""
    if is_array(source):
        return StreamMeta("ndarray", int(source.nbytes), np.dtype(source.dtype), tuple(source.shape), com,
                          borrowed=bool(getattr(getattr(source, "flags", None), "writeable", True)))
    mv = memoryview(source)
    return StreamMeta("bytes", mv.nbytes, com=com, borrowed=not mv.readonly)


_OPEN = sp.Open()  # made once: every stream starts with it
_SEGMENT = StreamOp.SEGMENT


def _end_bytes(data: Any) -> int:
    try:
        return int.from_bytes(bytes(data), "little")
    except Exception:
        return -1


def _as_u8(seg: Any) -> np.ndarray[Any, np.dtype[np.uint8]]:
    if isinstance(seg, np.ndarray):
        return np.ascontiguousarray(seg).reshape(-1).view(np.uint8)
    return np.frombuffer(seg, dtype=np.uint8)


def _whole_read(data: Any, array: bool, owned: bool, kind: str) -> Any:
    """What ``read()`` returns for a stream its OPEN carried whole, from its
    one segment ``data`` (``owned``: a writable copy of its own, handed over
    as it is; else copied once): an array stream's array as ``kind`` asks
    (``array``: the meta's kind), a bytes stream's writable memoryview."""
    if array and type(data) is np.ndarray:
        # the OPEN's record gave it the stream's dtype and shape
        if not owned:
            data = data.copy()
        if kind != "auto" or data.dtype.metadata is not None:
            return arrival(data, kind)
        return data
    if owned and type(data) is bytearray:
        return memoryview(data)
    return _as_u8(data).copy().data


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

    #: the bytes its OPEN holds of a local receiver's pipe until taken (the
    #: credit its sender reserved there: the whole stream when the OPEN
    #: carries it); 0 for one from another host, which credit bounded
    pipe_cost = 0

    def __init__(self, owner: StreamOwner, key: tuple[int, int], source: str, pipe: Pipe[CDU] | None,
                 window: int, source_pid: int = 0, dest_pid: int = 0,
                 meta: StreamMeta | None = None, *, whole: Any = None, owned: bool = False) -> None:
        self._owner = owner
        self.key = key
        self.sno = key[1]
        self.source_pid = source_pid
        self.dest_pid = dest_pid
        #: the sender's name
        self.source = source
        #: what the sender announced, ``.kind`` (``"bytes"`` or ``"ndarray"``),
        #: ``.nbytes``, ``.dtype`` (a ``numpy.dtype``; ``None`` for bytes) and
        #: ``.shape`` (``None`` where not known in advance, as for a stream
        #: sent from an iterable)
        self.meta = meta if meta is not None else StreamMeta()
        # PipeB, the stream's bound private pipe; None for a stream whose
        # OPEN carried it whole (arrived_whole): nothing more can come for it
        self.pipe = pipe
        self._proto = proto = sp.ReceiverProtocol(window, self.meta.window)
        self._ready: collections.deque[Any] = collections.deque()  # in order, not yet read
        self._error: BaseException | None = None
        self._whole = False      # its OPEN carried it all (arrived_whole), and it is unread
        self._owned = False      # ... and its one segment is a writable copy of its own
        if whole is None:
            proto.handle(_OPEN)
        else:  # arrived_whole(whole, owned) at once: the protocol takes OPEN, segment and END in one step
            proto.take_whole(int(whole.nbytes) if hasattr(whole, "nbytes") else len(whole))
            self._ready.append(whole)
            self._whole = True
            self._owned = owned
        # Segments landing in place: the array read() returns, and where the
        # next announced segment goes in it (see landing()).
        self._landed: np.ndarray[Any, np.dtype[np.uint8]] | None = None
        self._land_at = 0
        #: what arrays arrive as by default (the receiving node's ``arrays`` option)
        self.arrays = "auto"

    def __repr__(self) -> str:
        return f"<IncomingStream {self.key} from {self.source!r} seg {self._proto.next} {self.state.name}>"

    @property
    def com(self) -> int:
        """The number the sender gave ``send_stream(..., com=)``."""
        return self.meta.com

    @property
    def state(self) -> StreamState:
        """Where the stream is: open, done, aborted by its sender, broken."""
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

    def fail_here(self, exc: BaseException, reason: str) -> None:
        """This receiver failed the stream (a device error, a malformed
        piece): reads raise ``exc`` and the sender is told ``reason``."""
        self.fail(exc)
        self._owner.incoming_closed(self, reason, True)

    def arrived_whole(self, data: Any, owned: bool = False) -> None:
        """The stream's OPEN carried all of it: ``data``, its one segment,
        and its END, which the protocol hears now (the stream is DONE:
        nothing more comes, and its sender, done once it sent the OPEN,
        waits for nothing).  ``owned``: ``data`` is a writable copy of its
        own (a short record's), which :meth:`read` hands over as it is: its
        one copy was made."""
        self._apply(sp.Whole(data, int(data.nbytes) if hasattr(data, "nbytes") else len(data)))
        self._whole = True
        self._owned = owned

    def landing(self, nbytes: int) -> Any | None:
        """Where the next large segment, of ``nbytes``, may land as it comes
        off the network (its header has arrived, its bytes not yet): its
        slice of the array :meth:`read` will return, so that reading the
        stream copies nothing -- or None (a pooled buffer, copied by
        :meth:`read` as before).  Segments come in order, so slices are
        handed out in order.  Only for a stream of known size of at most
        :data:`LAND_MAX`, and while the host's budget for such arrays
        allows (the owner's ``landing_array``: the whole array is taken at
        the first segment, before the stream's window would bound what it
        holds, so many concurrent streams must not all do it)."""
        total = self.meta.nbytes
        if total is None or total > LAND_MAX or self.pipe is None or self._proto.ended:
            return None
        buf = self._landed
        if buf is None:
            if self._land_at:
                return None
            buf = self._landed = self._owner.landing_array(total)
            if buf is None:  # the host's budget for such arrays is spent
                self._land_at = -1  # and stays so for this stream
                return None
        at = self._land_at
        if at < 0 or at + nbytes > total:  # closed, or past the announced size
            return None
        self._land_at = at + nbytes
        return buf[at:at + nbytes]

    def landing_bytes(self) -> int:
        """Bytes of the array this stream's segments land in (0: none);
        counted once: the owner's budget gets them back when it closes."""
        n = 0 if self._landed is None or self._land_at < 0 else int(self._landed.nbytes)
        self._land_at = -1  # nothing more lands here
        return n

    def _feed(self, cdu: CDU) -> None:
        """One CDU from PipeB through the protocol, and its actions carried out."""
        op = cdu.op
        if op is StreamOp.ABORT:
            self._apply(sp.Abort(bytes(cdu.data).decode(errors="replace")))
        elif op is StreamOp.END:
            self._apply(sp.End(cdu.segno, _end_bytes(cdu.data)))
        else:
            data = cdu.data
            self._apply(sp.Segment(cdu.segno, data, int(data.nbytes) if hasattr(data, "nbytes") else len(data)))

    def _apply(self, event: sp.Event) -> None:
        """One arrived event through the protocol, and its actions carried out."""
        proto = self._proto
        try:
            actions = proto.handle(event)
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
                n = self._proto.consumed()  # the protocol's Consumed, in one call
                if n:
                    self._owner.give_credit(self, n)
                return data
            if self._proto.state is StreamState.DONE:
                return None
            pipe = self.pipe
            if pipe is None:  # not reached: a whole stream is DONE (or failed) once fed
                raise StreamError(f"stream {self.key} from {self.source!r} has nothing more to read")
            try:
                cdu = pipe.receive_nowait() if len(pipe) else await pipe.receive()
            except (BrokenResourceError, ClosedResourceError, EOFError) as exc:
                if self._error is not None:
                    raise self._error from exc
                raise StreamError(f"stream {self.key} from {self.source!r} was cut off") from exc
            if cdu.op is _SEGMENT:
                # the commonest: the next segment in order, taken by the
                # protocol in one call (Segment, Deliver) and consumed at once
                data = cdu.data
                if self._proto.take_next(cdu.segno, int(data.nbytes) if hasattr(data, "nbytes") else len(data)):
                    n = self._proto.consumed()
                    if n:
                        self._owner.give_credit(self, n)
                    return data
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
        if type(data) is memoryview:  # the commonest (bytes streams)
            return memoryview(bytes(data)) if self.meta.borrowed else data
        if is_array(data):
            return data.copy() if self.meta.borrowed else data
        if self.meta.borrowed or not isinstance(data, memoryview):
            data = memoryview(bytes(data) if self.meta.borrowed else data)
        return data

    async def read(self, out: Any = None, *, arrays: str | None = None) -> Any:
        """Gather the whole stream into one buffer or array.

        Bytes streams give a writable ``memoryview`` (format ``B``); array
        streams an array with the sender's dtype and shape: as it was sent
        (a tensor as a tensor where torch imports), or as ``arrays`` says
        (``"auto"``, ``"numpy"``, ``"torch"``; default: the receiving node's
        option).  With ``out`` (any writable buffer, array or CPU tensor of
        at least the stream's size, e.g. one reused across streams) the data
        land there and a view of the filled part is returned: no
        allocation, exactly one copy.

        Cancellation: cancelling leaves the stream open at the segment reached;
        segments already consumed are not given back, so treat the stream as
        broken (``aclose()`` it).
        """
        kind = arrays or self.arrays
        if kind not in KINDS:
            raise ValueError(f"arrays is one of {KINDS}, not {arrays!r}")
        if out is not None and not isinstance(out, np.ndarray) and (arr := host_array(out)) is not None:
            out = arr  # a tensor: its memory as an ndarray
        if self._whole and out is None and self._ready and self._error is None:
            # The OPEN carried it all and nothing was read: one copy at most.
            self._whole = False
            # (no Consumed: the stream is DONE, and a DONE stream gives no credit back)
            return _whole_read(self._ready.popleft(), self.meta.kind == "ndarray", self._owned, kind)
        data = await self._read(out)
        if type(data) is np.ndarray and (kind != "auto" or data.dtype.metadata is not None):
            return arrival(data, kind)
        return data

    async def _read(self, out: Any) -> Any:
        meta = self.meta
        if meta.nbytes is not None and self._proto.next == len(self._ready):  # nothing read yet
            # numpy's allocator asks the kernel for huge pages on big buffers,
            # which makes first-touch page faults several times cheaper.
            # The array segments land in is taken when the first segment's
            # header arrives, usually after this read began: look for it at
            # the first segment, not before.
            flat: Any = None if out is None else _flat_bytes(out, meta.nbytes)
            landed: Any = None
            pos = 0
            while (seg := await self._next_segment()) is not None:
                b = _as_u8(seg)
                if flat is None:   # the first segment: in the landing array, or gathered
                    landed = self._landed
                    if landed is None or not b.size or b.ctypes.data != landed.ctypes.data:
                        landed = None
                        flat = np.empty(meta.nbytes, dtype=np.uint8)
                    else:
                        flat = landed
                elif landed is not None and b.size and b.ctypes.data != landed.ctypes.data + pos:
                    # Not landed in its place (it came another way): from
                    # here on gather into a fresh array, since later
                    # segments may sit where this one belongs.
                    flat = np.empty(meta.nbytes, dtype=np.uint8)
                    flat[:pos] = landed[:pos]
                    landed = None
                if landed is None:
                    flat[pos:pos + b.size] = b
                pos += b.size
            if flat is None:  # no segment at all
                flat = np.empty(0, dtype=np.uint8)
            if meta.kind == "ndarray":
                return flat[:pos].view(meta.dtype).reshape(meta.shape)
            return memoryview(flat[:pos].data)
        parts = []
        while (seg := await self._next_segment()) is not None:
            parts.append(np.array(seg, copy=True) if self.meta.kind == "ndarray" or is_array(seg)
                         else _as_u8(seg).copy())
        if self.meta.kind == "ndarray" or (parts and parts[0].dtype != np.uint8):
            if not parts:
                return np.empty((0, *meta.shape[1:]), dtype=np.uint8 if meta.dtype is None else meta.dtype)
            # the announced dtype, exactly: concatenate would make it native-endian
            whole = np.concatenate([p.reshape(1) if p.ndim == 0 else p for p in parts],
                                   dtype=meta.dtype)
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
        """Abandon the stream (idempotent): what was not read is dropped and
        later reads raise ``StreamError``.  A sender still sending (or, for
        a stream of several segments, waiting for its delivery) fails with
        ``BrokenResourceError``; one whose stream travelled whole in its
        OPEN had returned already.

        Cancellation: never suspends.
        """
        ended = self._proto.ended
        if ended and not self._ready:
            return
        self._ready.clear()  # (a stream already DONE: delivered, unread, dropped here, nobody to tell)
        self._whole = False
        self._error = StreamError(f"stream {self.key} was closed by its receiver")
        if ended:
            return
        for act in self._proto.handle(sp.Close("receiver closed the stream")):
            self._owner.incoming_closed(self, act.error, True)  # type: ignore[attr-defined]

    async def __aenter__(self) -> IncomingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class WholeStream(IncomingStream):
    """A stream from another host whose OPEN carried it whole (its one
    segment and its END, in a short record): complete on arrival -- DONE,
    and the reader's like a message.  Made in one call by the arrivals'
    decode (:meth:`~aiopdbp.streams.table.StreamTable.open_whole`) and read
    in one: what :class:`IncomingStream` holds beside the segment -- the
    :class:`StreamMeta`, the protocol's state and the queue of segments --
    is made when something asks for it (``meta``, ``async for``,
    ``read(out=...)``, ``aclose()``), as it would have been at the start (a
    short stream feels each object and call)."""

    pipe: Pipe[CDU] | None = None
    _error: BaseException | None = None
    _whole = True
    _landed: np.ndarray[Any, np.dtype[np.uint8]] | None = None
    _land_at = 0
    arrays = "auto"
    _m: StreamMeta | None = None
    _p: sp.ReceiverProtocol | None = None
    _q: collections.deque[Any] | None = None

    def __init__(self, owner: StreamOwner, key: tuple[int, int], source: str, source_pid: int, dest_pid: int,
                 data: Any, com: int, window: int, owned: bool = True) -> None:
        # (IncomingStream.__init__ is not run: the properties below make what it would)
        if (type(window) is not int or not 0 < window <= 0xFFFFFFFF or not (
                type(data) is np.ndarray and data.ndim and data.nbytes or type(data) is bytearray and data)):
            # not the commonest record: whole_meta refuses it, saying why, or accepts it
            self._m = whole_meta(data, com, window)
        self._owner = owner
        self.key = key
        self.sno = key[1]
        self.source_pid = source_pid
        self.dest_pid = dest_pid
        self.source = source
        self._data = data       # the one segment (kept: the meta is made of it)
        self._com = com
        self._window = window
        self._owned = owned

    @property
    def meta(self) -> StreamMeta:
        """As :attr:`IncomingStream.meta`: the segment's kind, dtype and
        shape, the ``com`` and window of its record."""
        m = self._m
        if m is None:
            m = self._m = whole_meta(self._data, self._com, self._window)
        return m

    @meta.setter
    def meta(self, meta: StreamMeta) -> None:
        self._m = meta

    @property
    def _proto(self) -> sp.ReceiverProtocol:
        """The protocol as ``take_whole`` leaves it: DONE."""
        p = self._p
        if p is None:
            meta = self.meta
            p = self._p = sp.ReceiverProtocol(meta.window, meta.window)
            p.take_whole(int(meta.nbytes or 0))
        return p

    @_proto.setter
    def _proto(self, proto: sp.ReceiverProtocol) -> None:
        self._p = proto

    @property
    def _ready(self) -> collections.deque[Any]:
        """The segments not read: the one, until it is read."""
        q = self._q
        if q is None:
            q = self._q = collections.deque((self._data,) if self._whole else ())
        return q

    @_ready.setter
    def _ready(self, ready: collections.deque[Any]) -> None:
        self._q = ready

    @property
    def state(self) -> StreamState:
        """DONE: it arrived complete (nothing can break it after)."""
        return StreamState.DONE

    @property
    def finished(self) -> bool:
        return True

    async def read(self, out: Any = None, *, arrays: str | None = None) -> Any:
        """As :meth:`IncomingStream.read`; the commonest, the whole stream
        unread and no ``out``, in this one call."""
        if out is None and self._whole and self._q is None:
            kind = arrays or self.arrays
            if kind not in KINDS:
                raise ValueError(f"arrays is one of {KINDS}, not {arrays!r}")
            self._whole = False
            data = self._data
            if type(data) is np.ndarray and kind == "auto" and self._owned and data.dtype.metadata is None:
                return data  # the commonest: _whole_read's first answer, without the call
            return _whole_read(data, isinstance(data, np.ndarray), self._owned, kind)
        return await IncomingStream.read(self, out, arrays=arrays)


# ------------------------------------------------------------------- sending
