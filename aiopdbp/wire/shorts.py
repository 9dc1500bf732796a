"""Short records: the compact BPS frame for the commonest CDU (SPEC section 5).

A BPS frame (level-1 type BPS, ``count`` records) carries the commonest
CDU compactly: a short or command message to ONE GP with a ``bytes`` payload
below 64 KiB, a small numpy array, or no payload.  Each record is 15 bytes ``<IIIBH``:
    dest pid u32 | source pid u32 | com u32 | flags u8 | payload_len u16
flags: bits 0-1 the Kind (COMMAND or SHORT), bit 7 "payload is None",
bit 6 "payload is a small numpy array": its level-3 ndarray meta
(:mod:`aiopdbp.wire.payload`, unpadded) then its bytes, decoded into a
writable array of its own; then payload_len bytes.  No id/sno/segno (they are 0 for messages), no
alignment.  Writers pack records straight into a pool block with
``SHORT.pack_into`` and write ``bps_header`` in front.

*Short streams.*  Kind bits STREAM (1) mark a stream whose OPEN carries it
whole (:class:`ShortStream`: one short segment, then its END): the payload
starts with ``STREAM_HEAD`` ``<II`` (the stream's ``sno`` -- its key is the
sending host and ``sno`` -- and the sender's credit window), then bytes or
(bit 6) an array as above.  It travels among the short messages of a block,
so it costs what a short message costs on the wire, and it is decoded in the
same pass: the decoder hands it to its ``stream`` callback (the receiving
host's stream table), whose answer takes its place in the run, so it keeps
its order with the messages around it.  As a full CDU record the same OPEN
is ``Kind.STREAM``, op OPEN, ``segno`` :data:`EAGER_OPEN`, window in ``id``
(:meth:`ShortStream.cdu`).

:func:`decode_shorts` decodes a whole frame in one pass, straight into the
receiver's records.  Sans-I/O: imports neither asyncio nor mpi4py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.mesp import (
    CDU,
    DEFAULT_LIMITS,
    L1,
    VERSION,
    Buffer,
    Kind,
    Limits,
    MsgType,
    Payload,
    StreamOp,
    byte_view,
    read_header,
)
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.wire.payload import decode_short_ndarray, encode_payload

__all__ = [
    "EAGER_OPEN", "SHORT", "SHORT_ARRAY", "SHORT_MAX", "SHORT_NONE", "STREAM_HEAD", "ShortRun", "ShortStream",
    "StreamFn", "bps_header", "decode_short_runs", "decode_shorts", "encode_shorts",
]

SHORT = struct.Struct("<IIIBH")
SHORT_NONE = 0x80          # flags bit: the payload is None
SHORT_ARRAY = 0x40         # flags bit: the payload is a numpy array (meta + bytes)
SHORT_MAX = 0xFFFF         # largest payload of a short record
_SHORT_KINDS = frozenset((int(Kind.COMMAND), int(Kind.SHORT)))
_NDARRAY = int(Payload.NDARRAY)
#: what a short stream's payload starts with: its sno and the sender's credit window
STREAM_HEAD = struct.Struct("<II")
#: ``segno`` of a stream OPEN (full CDU record) that carries its whole stream
EAGER_OPEN = 1


class _Whole:
    """Flags of a short stream record (``array``: its data is an array)."""

    __slots__ = ("array",)

    def __init__(self, array: bool) -> None:
        self.array = array


# flags byte -> Kind; (Kind,) when the payload is None, [Kind] for an array,
# a _Whole for a short stream
_SHORT_KIND_OF: dict[int, Any] = {**{int(k): k for k in (Kind.COMMAND, Kind.SHORT)},
                                  **{int(k) | SHORT_NONE: (k,) for k in (Kind.COMMAND, Kind.SHORT)},
                                  **{int(k) | SHORT_ARRAY: [k] for k in (Kind.COMMAND, Kind.SHORT)},
                                  int(Kind.STREAM): _Whole(False), int(Kind.STREAM) | SHORT_ARRAY: _Whole(True)}
_BPS = int(MsgType.BPS)

#: what a decoder hands a short stream to: ``(dest pid, source pid, source
#: name, com, sno, window, data)`` -> the item that takes its place in its
#: run, or None (nothing takes it: refused)
StreamFn = Callable[[int, int, Any, int, int, int, Any], Any]


class ShortStream(tuple):  # type: ignore[type-arg]
    """A stream whose OPEN carries it whole, as the sending link takes it:
    ``ShortStream((None, Kind.STREAM, com, data, source_pid, sno, window, node))``
    -- a message's fields (no name: the record has none), then the
    stream's number, the sender's credit window and the sending node.  A
    tuple underneath, as :class:`~aiopdbp.wire.message.Message`: the link
    reads the same fields of both."""

    __slots__ = ()

    def cdu(self, dest: int) -> CDU:
        """The same OPEN as a full CDU record (what does not fit a short one)."""
        _, _, com, data, src, sno, window, node = self
        return CDU(Kind.STREAM, src, (dest,), data, com, window, sno, EAGER_OPEN, node, (), StreamOp.OPEN)


def bps_header(count: int, body_len: int) -> bytes:
    """The level-1 header of a BPS frame of ``count`` short records."""
    if not 0 < count <= 0xFFFF:
        raise ValueError("a BPS block holds 1..65535 records")
    return L1.pack(VERSION, _BPS, count, body_len)


def encode_shorts(records: Iterable[tuple[int, int, Kind, int, Any]]) -> bytes:
    """One BPS frame of ``(dest, source, kind, com, data)`` records (the
    reference encoder; the send path packs records into its blocks itself).
    A short stream is kind STREAM with ``data`` ``(sno, window, segment)``."""
    body = bytearray()
    count = 0
    for dest, src, kind, com, data in records:
        head = b""
        if kind is Kind.STREAM and type(data) is tuple and len(data) == 3 and data[2] is not None:
            head, data = STREAM_HEAD.pack(data[0], data[1]), data[2]
        elif int(kind) not in _SHORT_KINDS:
            raise ValueError(f"a short record carries COMMAND or SHORT (or STREAM: (sno, window, data)), "
                             f"not {kind!r}")
        flags = int(kind)
        if data is None:
            flags |= SHORT_NONE
            payload = b""
        elif type(data) is bytes:
            payload = data
        elif type(data) is np.ndarray:
            tag, meta, parts, _ = encode_payload(data, False, DEFAULT_LIMITS)
            if tag != _NDARRAY:  # pragma: no cover - encode_payload refuses what is not one
                raise ValueError("not a plain numpy array")
            flags |= SHORT_ARRAY
            payload = meta + b"".join(bytes(p) for p in parts)
        else:
            raise ValueError("a short record carries None, bytes or a numpy array")
        payload = head + payload
        if len(payload) > SHORT_MAX:
            raise ValueError(f"a short record carries at most {SHORT_MAX} payload bytes")
        try:
            body += SHORT.pack(dest, src, com, flags, len(payload))
        except struct.error as exc:
            raise ValueError(f"short record field out of range: {exc}") from exc
        body += payload
        count += 1
    return bps_header(count, len(body)) + bytes(body)


#: one run of a decoded BPS frame: (dest pid, records, payload bytes)
ShortRun = tuple[int, list[Any], int]


def decode_short_runs(mv: memoryview, count: int, names: Mapping[int, str] | None,
                      make: type[tuple[Any, ...]],
                      unknown: Callable[[int], str] | None = None,
                      limits: Limits = DEFAULT_LIMITS, stream: StreamFn | None = None) -> list[ShortRun]:
    """The records of a BPS frame whose header was checked (``count`` from
    it), as :func:`decode_shorts` returns them."""
    # One pass from wire to the receiver's record: no intermediate tuple, no
    # second loop; consecutive records for one GP form one run, so placing
    # them is one pipe operation.
    b = bytes(mv)   # slicing bytes makes the payload objects in one step
    end = len(b)
    off = L1.size
    unpack = SHORT.unpack_from
    size = SHORT.size
    kinds = _SHORT_KIND_OF
    runs: list[ShortRun] = []
    run: list[Any] = []
    append = run.append
    run_dest = -1
    run_bytes = 0
    last_src = -1
    source: Any = None
    data: Any
    sno = window = -1  # (sno >= 0: the record is a short stream's)
    for _ in range(count):
        if off + size > end:
            raise ProtocolError("truncated short record")
        dest, src, com, flags, n = unpack(b, off)
        off += size
        kind = kinds.get(flags)      # flags with "no payload" map to (kind,)
        if kind is None:
            raise ProtocolError(f"bad short record flags 0x{flags:02x}")
        if type(kind) is tuple:      # a None payload
            if n:
                raise ProtocolError("None payload with a length")
            kind = kind[0]
            data = None
        elif type(kind) is list:     # a numpy array: its credit is its nbytes, as sent
            stop = off + n
            if stop > end:
                raise ProtocolError("truncated short record payload")
            kind = kind[0]
            arr = decode_short_ndarray(b, off, stop, limits)
            off = stop
            n = arr.nbytes
            data = arr
        elif type(kind) is _Whole:   # a short stream: its credit is its data's bytes, as sent
            stop = off + n
            if stop > end or n <= STREAM_HEAD.size:
                raise ProtocolError("truncated short stream record")
            if stream is None:
                raise ProtocolError("a short stream record where no stream may come")
            sno, window = STREAM_HEAD.unpack_from(b, off)
            if kind.array:
                data = decode_short_ndarray(b, off + STREAM_HEAD.size, stop, limits)
                n = data.nbytes
            else:  # writable, of its own: what the reader gets
                data = bytearray(memoryview(b)[off + STREAM_HEAD.size:stop])
                n -= STREAM_HEAD.size
            off = stop
        else:
            stop = off + n
            if stop > end:
                raise ProtocolError("truncated short record payload")
            data = b[off:stop]
            off = stop
        if src != last_src:
            last_src = src
            if names is None:
                source = src
            else:
                source = names.get(src)
                if source is None:
                    source = f"<pid {src}>" if unknown is None else unknown(src)
        if dest != run_dest:
            if run:
                runs.append((run_dest, run, run_bytes))
            run = []
            append = run.append
            run_dest = dest
            run_bytes = 0
        if sno < 0:
            append(make((source, kind, com, data, src)))
        else:  # the stream table makes its incoming stream (None: it refused it)
            assert stream is not None  # (checked where the record was read)
            item = stream(dest, src, source, com, sno, window, data)
            if item is not None:
                append(item)
            else:  # refused: not in the run, but its credit (with the record's overhead) comes back
                n += CREDIT_OVERHEAD
            sno = -1
        run_bytes += n
    if off != end:
        raise ProtocolError(f"{end - off} trailing bytes after the last short record")
    runs.append((run_dest, run, run_bytes))
    return runs


def decode_shorts(buf: Buffer, *, names: Mapping[int, str] | None = None,
                  make: type[tuple[Any, ...]] = tuple,
                  limits: Limits = DEFAULT_LIMITS,
                  unknown: Callable[[int], str] | None = None,
                  stream: StreamFn | None = None) -> list[ShortRun]:
    """Decode one BPS frame in bulk, straight into the receiver's records.

    Returns runs ``[(dest, [record, ...], payload_bytes), ...]``: consecutive
    records for the same destination GP form one run (order kept).  A short
    stream record is handed to ``stream`` (without one it is a
    ProtocolError), whose answer takes its place in its run.  Each
    record is ``make((source, kind, com, data, source_pid))`` (``make`` a
    tuple type, e.g. the receiver's message class, called with one tuple): ``source`` is the name
    ``names`` gives the source pid (``unknown(pid)``, by default
    ``"<pid N>"``, when it has none) or, with
    no ``names``, the pid; ``kind`` a :class:`Kind`; ``data`` a ``bytes``
    copy, an array of its own, or None; ``payload_bytes`` counts an array's
    data bytes (its credit), not its meta, and for a stream record
    ``stream`` refused (None: left out of the run) its bytes and
    :data:`~aiopdbp.wire.message.CREDIT_OVERHEAD`, as its sender charged
    it (the run's records each add one overhead where they are placed).
    Raises only :class:`ProtocolError`.
    """
    if type(buf) is memoryview and buf.format == "B" and buf.ndim == 1 and len(buf) >= 8:
        # the receive path's case: one header check, no generic dispatch
        version, mtype, count, body_len = L1.unpack_from(buf)
        if (version == VERSION and mtype == _BPS and count and len(buf) == 8 + body_len
                and body_len <= limits.max_frame):
            return decode_short_runs(buf, count, names, make, unknown, limits, stream)
    mv = byte_view(buf)
    mt, count, body_len = read_header(mv, limits)
    if mt is not MsgType.BPS:
        raise ProtocolError(f"not a BPS frame: {mt.name}")
    if len(mv) != L1.size + body_len:
        raise ProtocolError(f"frame holds {len(mv) - L1.size} body bytes, header says {body_len}")
    return decode_short_runs(mv, count, names, make, unknown, limits, stream)
