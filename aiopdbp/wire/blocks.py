"""The block format's reader and writer: the per-message work of the data path.

This module is the data path's core: sans-I/O (it imports neither asyncio
nor mpi4py), plain typed Python, and compiled by Cython when the package is
built (``aiopdbp.wire.cblocks``, typed by ``blocks.pxd``); :mod:`aiopdbp.ext`
chooses the compiled form at import and this source when it is missing,
stale or refused (``AIOPDBP_NO_EXTENSIONS=1``).  Both forms give the same
records, the same bytes and the same :class:`~aiopdbp.errors.ProtocolError`\\ s
(``tests/test_blocks.py`` runs every test against both).

Short records
-------------
A BPS frame (level-1 type BPS, ``count`` records) carries the commonest CDU
compactly: a short or command message to ONE GP with a ``bytes`` payload
below 64 KiB, a small numpy array, or no payload.  Each record is 15 bytes
``<IIIBH``::

    dest pid u32 | source pid u32 | com u32 | flags u8 | payload_len u16

flags: bits 0-1 the Kind (COMMAND or SHORT, or STREAM below), bit 7 "payload
is None", bit 6 "payload is a small numpy array": its level-3 ndarray meta
(:mod:`aiopdbp.wire.payload`, unpadded) then its bytes, decoded into a
writable array of its own; then payload_len bytes.  No id/sno/segno (they
are 0 for messages), no alignment.

*Short streams.*  Kind bits STREAM (1) mark a stream whose OPEN carries it
whole: the payload starts with ``STREAM_HEAD`` ``<II`` (the stream's ``sno``
-- its key is the sending host and ``sno`` -- and the sender's credit
window), then bytes or (bit 6) an array as above.  It travels among the
short messages of a block and is decoded in the same pass: the reader hands
it to its ``stream`` callback (the receiving host's stream table), whose
answer takes its place in the run, so it keeps its order with the messages
around it.

Blocks
------
:class:`BlockWriter` fills one block at a time for one destination host:
short records (BPS) or full CDU records (BP, encoded by
:func:`~aiopdbp.wire.codec.encode_record`), never both in one block; it
writes the level-1 header when the block is closed.  It also makes the
*lone frame* of a short record (the first CDU of a loop iteration leaves at
once, in a frame of its own): the same bytes as a block of one.  Where the
block's memory comes from (a pool slot), when a block is sent and whether a
record goes lone is the caller's (:mod:`aiopdbp.hosts.link`).

:class:`BlockReader` decodes a whole BPS frame in one pass, straight into
the receiver's records, grouped in runs of consecutive records for one GP
(one pipe operation per run).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.mesp import DEFAULT_LIMITS, L1, VERSION, Kind, Limits, MsgType
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.wire.payload import decode_short_ndarray, short_ndarray

__all__ = [
    "SHORT", "SHORT_ARRAY", "SHORT_MAX", "SHORT_NONE", "STREAM_HEAD", "BlockReader", "BlockWriter",
    "ShortRun", "StreamFn",
]

SHORT = struct.Struct("<IIIBH")
SHORT_NONE = 0x80          # flags bit: the payload is None
SHORT_ARRAY = 0x40         # flags bit: the payload is a numpy array (meta + bytes)
SHORT_MAX = 0xFFFF         # largest payload of a short record
#: what a short stream's payload starts with: its sno and the sender's credit window
STREAM_HEAD = struct.Struct("<II")
# level-1 header + one short record: a lone frame in one pack
_LONE = struct.Struct("<BBHI" + SHORT.format[1:])
_LONE_SIZE = 23            # _LONE.size

_BPS = int(MsgType.BPS)
_U8 = np.dtype(np.uint8)
_BP = int(MsgType.BP)
_STREAM = int(Kind.STREAM)
_SHORT_SIZE = 15           # SHORT.size
_HEAD_SIZE = 8             # STREAM_HEAD.size, L1.size
_MAX_COUNT = 0xFFFF

# What a flags byte means when reading: its Kind and what the payload is.
_DATA_BYTES = 0
_DATA_NONE = 1
_DATA_ARRAY = 2
_DATA_STREAM = 3
_DATA_STREAM_ARRAY = 4
_FLAGS_READ: dict[int, tuple[Kind, int]] = {}
for _k in (Kind.COMMAND, Kind.SHORT):
    _FLAGS_READ[int(_k)] = (_k, _DATA_BYTES)
    _FLAGS_READ[int(_k) | SHORT_NONE] = (_k, _DATA_NONE)
    _FLAGS_READ[int(_k) | SHORT_ARRAY] = (_k, _DATA_ARRAY)
_FLAGS_READ[_STREAM] = (Kind.STREAM, _DATA_STREAM)
_FLAGS_READ[_STREAM | SHORT_ARRAY] = (Kind.STREAM, _DATA_STREAM_ARRAY)

#: what a reader hands a short stream to: ``(dest pid, source pid, source
#: name, com, sno, window, data)`` -> the item that takes its place in its
#: run, or None (nothing takes it: refused)
StreamFn = Callable[[int, int, Any, int, int, int, Any], Any]

#: one run of a decoded BPS frame: (dest pid, records, payload bytes)
ShortRun = tuple[int, list[Any], int]


class BlockWriter:
    """Records for one destination host, into one block at a time.

    ``short_limit``: ``bytes`` payloads shorter than this go as short
    records (the caller's threshold for large payloads, at most
    :data:`SHORT_MAX` + 1).  The caller opens a block in memory of its own
    (:meth:`open`), puts records (:meth:`put_short`, :meth:`put_record`)
    and closes it (:meth:`close`: the header is written, the bytes to send
    are returned).
    """

    def __init__(self, short_limit: int) -> None:
        self.short_limit = min(SHORT_MAX + 1, short_limit)
        #: the open block's level-1 type (BPS or BP), 0 when none is open
        self.kind = 0
        #: records in the open block
        self.count = 0
        self._view: memoryview | None = None
        self._pos = 0
        self._limit = 0
        # The last 1-D uint8 array put as a short record (the commonest
        # array message): its shape and the meta short_ndarray gave for it.
        # The payload module's meta cache only ever adds entries, so the
        # same shape has the same meta for good; such an array is its own
        # flat bytes.  (The compiled twin remembers any dtype and shape.)
        self._ashape: tuple[int, ...] | None = None
        self._ameta = b""
        self._anbytes = 0

    # ----------------------------------------------------------- the block
    def offset(self, kind: int) -> int:
        """Where a record of a block of ``kind`` would start: in the open
        block if it is of that kind, else at the start of a new one (a full
        record's padding depends on it)."""
        return self._pos if self.kind == kind else L1.size

    def open(self, view: memoryview, kind: int) -> None:
        """Begin a block of ``kind`` (BPS or BP) in ``view`` (its size is
        the block's limit); a block still open is dropped, unsent."""
        self._view = view
        self.kind = kind
        self._pos = L1.size      # the level-1 header is written at close
        self.count = 0
        self._limit = len(view)

    def close(self) -> int:
        """Close the open block: its level-1 header is written and its
        length returned (0 when none was open or it holds no record: it is
        dropped, and its memory is the caller's again)."""
        view = self._view
        if view is None:
            return 0
        self._view = None
        kind, self.kind = self.kind, 0
        count = self.count
        if not count:
            return 0
        L1.pack_into(view, 0, VERSION, kind, count, self._pos - L1.size)
        return self._pos

    # -------------------------------------------------------------- records
    def put_short(self, pid: int, src: int, com: int, kind: int, data: Any, head: bytes,
                  lone: bool) -> Any:
        """Encode a message to GP ``pid`` as a short record, if it is one.

        ``kind``: the message's Kind (COMMAND or SHORT; STREAM for a stream
        carried whole, then ``head`` is its :data:`STREAM_HEAD`); ``data``:
        None, ``bytes``, a small numpy array, or (a short stream) a
        ``memoryview`` of bytes.  With ``lone`` the record becomes a frame
        of its own, returned as ``bytes``.  Otherwise it goes into the open
        BPS block: True; False when there is no room (no block, a BP one, or
        full: the caller opens a new BPS block and puts it again).  None: not
        a short record (the caller encodes a full record); nothing written.
        """
        # Written out flat, the commonest case first: this runs once per message.
        if type(data) is bytes and not head:
            n = len(data)
            if n >= self.short_limit:
                return None
            flags = kind
            meta = b""
            body: Any = data
        elif data is None:
            if head:
                return None
            n = 0
            flags = kind | SHORT_NONE
            meta = b""
            body = b""
        elif type(data) is np.ndarray:
            if data.dtype is _U8 and data.shape == self._ashape and data.flags.c_contiguous:
                if self._anbytes >= self.short_limit:
                    return None
                meta = head + self._ameta
                body = data
                n = len(meta) + self._anbytes
            else:
                parts = short_ndarray(data)  # None: not small, or its meta not checked yet
                if parts is None or data.nbytes >= self.short_limit:
                    return None
                if data.dtype is _U8 and data.ndim == 1:
                    self._ashape, self._ameta, self._anbytes = data.shape, parts[0], data.nbytes
                meta = head + parts[0]
                body = parts[1]
                n = len(meta) + data.nbytes
            if n > SHORT_MAX:
                return None
            flags = kind | SHORT_ARRAY
        elif type(data) is bytes:  # a short stream's bytes, after its head
            n = len(head) + len(data)
            if n > SHORT_MAX or n > self.short_limit:
                return None
            flags = kind
            meta = head
            body = data
        elif type(data) is memoryview and head:  # the same as a view, of any format
            n = len(head) + data.nbytes
            if n > SHORT_MAX or n > self.short_limit or not data.c_contiguous:
                return None
            flags = kind
            meta = head
            body = data if data.format == "B" and data.ndim == 1 else data.cast("B")
        else:
            return None
        if lone:
            frame = _LONE.pack(VERSION, _BPS, 1, _SHORT_SIZE + n, pid, src, com, flags, n)
            if meta:
                return b"".join((frame, meta, body))  # one copy of the payload's bytes
            return frame + body if n else frame
        pos = self._pos
        if self.kind != _BPS or pos + _SHORT_SIZE + n > self._limit or self.count == _MAX_COUNT:
            return False
        view = self._view
        assert view is not None
        SHORT.pack_into(view, pos, pid, src, com, flags, n)
        pos += _SHORT_SIZE
        if meta:
            m = len(meta)
            view[pos:pos + m] = meta
            view[pos + m:pos + n] = body
        elif n:
            view[pos:pos + n] = body
        self._pos = pos + n
        self.count += 1
        return True

    def put_record(self, parts: list[Any], nbytes: int) -> bool:
        """Put a full CDU record (``parts``, ``nbytes`` in all, encoded for
        :meth:`offset` of BP) into the open BP block; False when there is no
        room (no block, a BPS one, or full)."""
        pos = self._pos
        if self.kind != _BP or pos + nbytes > self._limit or self.count == _MAX_COUNT:
            return False
        view = self._view
        assert view is not None
        for part in parts:
            k = len(part) if type(part) is bytes else memoryview(part).nbytes
            view[pos:pos + k] = part
            pos += k
        self._pos = pos
        self.count += 1
        return True


class BlockReader:
    """Decodes BPS frames into the receiver's records.

    Each record is ``make((source, kind, com, data, source_pid))`` (``make``
    a tuple type, e.g. the receiver's message class, called with one tuple):
    ``source`` is the name ``names`` gives the source pid (``unknown(pid)``,
    by default ``"<pid N>"``, when it has none) or, with no ``names``, the
    pid; ``kind`` a :class:`~aiopdbp.wire.mesp.Kind`; ``data`` a ``bytes``
    copy, an array of its own, or None.
    """

    def __init__(self, names: Mapping[int, str] | None = None, make: Any = tuple,
                 unknown: Callable[[int], str] | None = None, limits: Limits = DEFAULT_LIMITS) -> None:
        self.names = names
        self.make = make
        self.unknown = unknown
        self.limits = limits

    def read(self, buf: Any, stream: StreamFn | None = None) -> list[ShortRun]:
        """Decode one BPS frame (a ``memoryview`` of bytes, or bytes).

        Returns runs ``[(dest, [record, ...], payload_bytes), ...]``:
        consecutive records for the same destination GP form one run (order
        kept).  A short stream record is handed to ``stream`` (without one it
        is a ProtocolError), whose answer takes its place in its run.
        ``payload_bytes`` counts an array's data bytes (its credit), not its
        meta, and for a stream record ``stream`` refused (None: left out of
        the run) its bytes and :data:`~aiopdbp.wire.message.CREDIT_OVERHEAD`,
        as its sender charged it.  Raises only :class:`ProtocolError`.
        """
        b = bytes(buf)   # slicing bytes makes the payload objects in one step
        end = len(b)
        if end < _HEAD_SIZE:
            raise ProtocolError(f"frame of {end} bytes is shorter than its header")
        version, mtype, count, body_len = L1.unpack_from(b, 0)
        if version != VERSION:
            raise ProtocolError(f"unsupported version {version}")
        if mtype != _BPS:
            raise ProtocolError(f"not a BPS frame: type {mtype}")
        if body_len > self.limits.max_frame:
            raise ProtocolError(f"frame body of {body_len} bytes > limit {self.limits.max_frame}")
        if end != _HEAD_SIZE + body_len:
            raise ProtocolError(f"frame holds {end - _HEAD_SIZE} body bytes, header says {body_len}")
        if not count:
            raise ProtocolError("a BPS frame holds at least one record")
        return self.records(b, count, stream)

    def read_one(self, buf: Any) -> tuple[int, Any, int] | None:
        """The commonest frame in one step: a lone message (one short
        record of bytes, None or a small array; not a stream) as
        ``(dest, record, payload_bytes)``, what :meth:`read` gives as its
        one run ``[(dest, [record], payload_bytes)]``, without the runs.
        None for any other frame -- a stream, more than one record, or
        anything malformed: :meth:`read` then decodes it or says what is
        wrong with it, so this never raises.  ``buf`` is a one-dimensional
        buffer of bytes (a ``memoryview`` of a ``bytearray``, ``bytes``)."""
        end = len(buf)
        if end < _LONE_SIZE:
            return None
        version, mtype, count, body_len, dest, src, com, flags, n = _LONE.unpack_from(buf, 0)
        if count != 1 or version != VERSION or mtype != _BPS or body_len != end - _HEAD_SIZE \
                or n != end - _LONE_SIZE or body_len > self.limits.max_frame:
            return None
        what = _FLAGS_READ.get(flags)
        if what is None or what[1] > _DATA_ARRAY:
            return None
        form = what[1]
        data: Any
        if form == _DATA_BYTES:
            data = bytes(buf[_LONE_SIZE:])
        elif form == _DATA_NONE:
            if n:
                return None
            data = None
        else:  # its credit is its nbytes, as sent
            try:
                data = decode_short_ndarray(bytes(buf), _LONE_SIZE, end, self.limits)
            except ProtocolError:
                return None
            n = data.nbytes
        names = self.names
        if names is None:
            source: Any = src
        else:
            source = names.get(src)
            if source is None:
                source = f"<pid {src}>" if self.unknown is None else self.unknown(src)
        return dest, self.make((source, what[0], com, data, src)), n

    def records(self, b: bytes, count: int, stream: StreamFn | None) -> list[ShortRun]:
        """The ``count`` records of a BPS frame ``b`` whose header was checked."""
        names = self.names
        make = self.make
        limits = self.limits
        unpack = SHORT.unpack_from
        end = len(b)
        off = _HEAD_SIZE
        runs: list[ShortRun] = []
        run: list[Any] = []
        run_dest = -1
        run_bytes = 0
        last_src = -1
        source: Any = None
        data: Any = None
        sno = -1
        window = -1
        for _ in range(count):
            if off + _SHORT_SIZE > end:
                raise ProtocolError("truncated short record")
            dest, src, com, flags, n = unpack(b, off)
            off += _SHORT_SIZE
            what = _FLAGS_READ.get(flags)
            if what is None:
                raise ProtocolError(f"bad short record flags 0x{flags:02x}")
            kind, form = what
            if form == _DATA_NONE and n:
                raise ProtocolError("None payload with a length")
            stop = off + n
            if stop > end:
                raise ProtocolError("truncated short record payload")
            if form == _DATA_BYTES:
                data = b[off:stop]
            elif form == _DATA_NONE:
                data = None
            elif form == _DATA_ARRAY:  # its credit is its nbytes, as sent
                data = decode_short_ndarray(b, off, stop, limits)
                n = data.nbytes
            else:  # a short stream: its credit is its data's bytes, as sent
                if n <= _HEAD_SIZE:
                    raise ProtocolError("truncated short stream record")
                if stream is None:
                    raise ProtocolError("a short stream record where no stream may come")
                sno, window = STREAM_HEAD.unpack_from(b, off)
                if form == _DATA_STREAM_ARRAY:
                    data = decode_short_ndarray(b, off + _HEAD_SIZE, stop, limits)
                    n = data.nbytes
                else:  # writable, of its own: what the reader gets
                    data = bytearray(b[off + _HEAD_SIZE:stop])
                    n -= _HEAD_SIZE
            off = stop
            if src != last_src:
                last_src = src
                if names is None:
                    source = src
                else:
                    source = names.get(src)
                    if source is None:
                        source = f"<pid {src}>" if self.unknown is None else self.unknown(src)
            if dest != run_dest:
                if run:
                    runs.append((run_dest, run, run_bytes))
                run = []
                run_dest = dest
                run_bytes = 0
            if sno < 0:
                run.append(make((source, kind, com, data, src)))
            else:  # the stream table makes its incoming stream (None: it refused it)
                assert stream is not None  # (checked where the record was read)
                item = stream(dest, src, source, com, sno, window, data)
                if item is not None:
                    run.append(item)
                else:  # refused: not in the run, but its credit (with the record's overhead) comes back
                    n += CREDIT_OVERHEAD
                sno = -1
            run_bytes += n
        if off != end:
            raise ProtocolError(f"{end - off} trailing bytes after the last short record")
        runs.append((run_dest, run, run_bytes))
        return runs
