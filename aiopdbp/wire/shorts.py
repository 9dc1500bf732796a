"""Short records and short streams: the compact BPS frame (SPEC section 5).

The format, its writer and its reader are the data path's core,
:mod:`aiopdbp.wire.blocks` (compiled where built: :mod:`aiopdbp.wire.core`).
This module keeps what the rest of the codec and the stream table use of it:
:class:`ShortStream` (a stream whose OPEN carries it whole, as the sending
link takes it), :func:`encode_shorts` (a frame of given records, written by
the same :class:`~aiopdbp.wire.blocks.BlockWriter` as the send path) and
:func:`decode_shorts` (a frame read by the same
:class:`~aiopdbp.wire.blocks.BlockReader` as the receive path).
Sans-I/O: imports neither asyncio nor mpi4py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.blocks import SHORT, SHORT_ARRAY, SHORT_MAX, SHORT_NONE, STREAM_HEAD, ShortRun, StreamFn
from aiopdbp.wire.core import BlockReader, BlockWriter
from aiopdbp.wire.mesp import CDU, DEFAULT_LIMITS, L1, VERSION, Buffer, Kind, Limits, MsgType, StreamOp
from aiopdbp.wire.payload import encode_payload

__all__ = [
    "EAGER_OPEN", "SHORT", "SHORT_ARRAY", "SHORT_MAX", "SHORT_NONE", "STREAM_HEAD", "ShortRun", "ShortStream",
    "StreamFn", "bps_header", "decode_short_runs", "decode_shorts", "encode_shorts",
]

#: ``segno`` of a stream OPEN (full CDU record) that carries its whole stream
EAGER_OPEN = 1
_BPS = int(MsgType.BPS)
_SHORT_KINDS = frozenset((int(Kind.COMMAND), int(Kind.SHORT)))
_META_MAX = 2 + 0xFF + 8 * 0xFF   # the longest level-3 array meta


def _nbytes(data: Any) -> int:
    if type(data) is tuple and len(data) == 3:  # a short stream's (sno, window, segment)
        data = data[2]
    n = getattr(data, "nbytes", None)
    return int(n) if n is not None else len(data) if isinstance(data, (bytes, bytearray)) else 0


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
    """One BPS frame of ``(dest, source, kind, com, data)`` records, written
    by the send path's :class:`~aiopdbp.wire.blocks.BlockWriter`.  A short
    stream is kind STREAM with ``data`` ``(sno, window, segment)``
    (``segment``: bytes or a small array).  ``ValueError`` for a record
    that is not a short one."""
    records = list(records)
    writer = BlockWriter(SHORT_MAX + 1)
    room = sum(SHORT.size + STREAM_HEAD.size + _META_MAX + _nbytes(r[4]) for r in records)
    block = memoryview(bytearray(L1.size + room))
    writer.open(block, _BPS)
    for dest, src, kind, com, data in records:
        head = b""
        if kind is Kind.STREAM and type(data) is tuple and len(data) == 3 and data[2] is not None:
            head = STREAM_HEAD.pack(data[0], data[1])
            data = data[2] if type(data[2]) is not bytes else memoryview(data[2])
        elif int(kind) not in _SHORT_KINDS:
            raise ValueError(f"a short record carries COMMAND or SHORT (or STREAM: (sno, window, data)), "
                             f"not {kind!r}")
        if not (0 <= dest <= 0xFFFFFFFF and 0 <= src <= 0xFFFFFFFF and 0 <= com <= 0xFFFFFFFF):
            raise ValueError(f"short record field out of range: dest {dest}, source {src}, com {com}")
        if type(data) is np.ndarray:  # its meta is checked (and cached) by the full encoder first
            encode_payload(data, False, DEFAULT_LIMITS)
        put = writer.put_short(dest, src, com, int(kind), data, head, False)
        if put is None:
            raise ValueError(f"a short record carries None, bytes or a small numpy array of at most "
                             f"{SHORT_MAX} payload bytes, not {type(data).__name__}")
        if put is False:
            raise ValueError("a BPS block holds 1..65535 records")
    n = writer.close()
    if not n:
        raise ValueError("a BPS block holds 1..65535 records")
    return bytes(block[:n])


def decode_short_runs(mv: memoryview, count: int, names: Mapping[int, str] | None,
                      make: type[tuple[Any, ...]],
                      unknown: Callable[[int], str] | None = None,
                      limits: Limits = DEFAULT_LIMITS, stream: StreamFn | None = None) -> list[ShortRun]:
    """The records of a BPS frame whose header was checked (``count`` from
    it), as :func:`decode_shorts` returns them."""
    return BlockReader(names, make, unknown, limits).records(bytes(mv), count, stream)


def decode_shorts(buf: Buffer, *, names: Mapping[int, str] | None = None,
                  make: type[tuple[Any, ...]] = tuple,
                  limits: Limits = DEFAULT_LIMITS,
                  unknown: Callable[[int], str] | None = None,
                  stream: StreamFn | None = None) -> list[ShortRun]:
    """Decode one BPS frame in bulk, straight into the receiver's records:
    :meth:`BlockReader.read <aiopdbp.wire.blocks.BlockReader.read>` (the
    receive path keeps one reader and calls it directly).  Raises only
    :class:`ProtocolError`."""
    try:
        return BlockReader(names, make, unknown, limits).read(buf, stream)
    except (TypeError, BufferError) as exc:
        raise ProtocolError(f"not a frame: {exc}") from exc
