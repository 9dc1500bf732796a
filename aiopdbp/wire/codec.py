"""Sans-I/O codec for PDBP communication data units (CDU) and MESP messages.

Encoding turns a :class:`CDU` (or a :class:`Control` message) into a list of
buffers; decoding turns the bytes of one message back into objects or raises
:class:`~aiopdbp.errors.ProtocolError` -- never anything else, never a hang,
never an allocation beyond :class:`Limits`.  No I/O happens here.
"""

# The frame layout (levels 1-3) is described in aiopdbp.wire.mesp, which
# also holds the types; level-3 payloads are aiopdbp.wire.payload's, short
# records (BPS frames) aiopdbp.wire.shorts'.  This module puts them together:
# CDU frames (single, BP blocks, split in two), control frames, decode and
# the incremental Decoder.  Import each name from the module that defines
# it, or from the package door (``from aiopdbp.wire import CDU, decode``).

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgpack
import numpy as np

from aiopdbp.arrays import TAG
from aiopdbp.errors import ProtocolError
from aiopdbp.wire.mesp import (
    ALIGN,
    CONTROL_SCHEMAS,
    DEFAULT_LIMITS,
    L1,
    VERSION,
    CDU,
    Buffer,
    Control,
    Kind,
    Limits,
    MsgType,
    Payload,
    StreamOp,
    byte_view,
    read_header,
)
from aiopdbp.wire.payload import check_text, decode_ndarray, decode_pickle, encode_payload, ndarray_meta
from aiopdbp.wire.shorts import ShortStream, decode_short_runs

__all__ = ["Decoder", "bp_header", "decode", "decode_split", "encode_block", "encode_cdu", "encode_control",
           "encode_record", "encode_small_into", "encode_split", "encode_split_array", "split_array",
           "split_stream_key", "split_target", "SplitArray", "SPLIT_CACHE_MAX"]

_REC_FMT = "QIIIIIBBBHHQ"  # the level-2 record header (see aiopdbp.wire.mesp)
_REC = struct.Struct("<" + _REC_FMT)
_ZEROS = bytes(ALIGN)
_COPY_MAX = 8192  # encode_block copies payloads up to this size into the block

# Hot paths use plain ints: on Python 3.11 reading ``Payload.BYTES`` costs
# ~120 ns (an enum property), an int compare ~20 ns; and int -> member goes
# through a dict, since calling an IntEnum costs ~10x more.
_NONE, _BYTES, _NDARRAY, _PICKLE = (int(t) for t in Payload)
_STREAM = int(Kind.STREAM)
_BP = int(MsgType.BP)
_KINDS = {int(k): k for k in Kind}
_OPS = {int(o): o for o in StreamOp}
_CDU_SINGLE = frozenset(int(m) for m in (MsgType.UDATA, MsgType.LOCAL, MsgType.REMOTE))

# Structs for "level 1 + record + n dests" (encode) and "n dests" (decode),
# built on first use; only small n are cached so the caches stay bounded.
_HEAD_CACHE: dict[int, struct.Struct] = {}
_RECD_CACHE: dict[int, struct.Struct] = {}
_DEST_CACHE: dict[int, struct.Struct] = {}
_STRUCT_CACHE_MAX = 64


def _cached(cache: dict[int, struct.Struct], n: int, prefix: str) -> struct.Struct:
    s = cache.get(n)
    if s is None:
        s = struct.Struct(f"{prefix}{n}I")
        if n <= _STRUCT_CACHE_MAX:
            cache[n] = s
    return s


# ---------------------------------------------------------------- CDU frames


def _check_cdu(cdu: CDU, limits: Limits) -> tuple[int, int]:
    kind = cdu.kind
    op = cdu.op
    if kind not in _KINDS or op not in _OPS:
        raise ValueError(f"invalid CDU kind/op: {kind!r}/{op!r}")
    if op and kind != _STREAM:
        raise ValueError(f"op {op!r} is only valid for Kind.STREAM CDUs")
    n_ns, n_ps = len(cdu.dest_ns), len(cdu.dest_ps)
    if n_ns > limits.max_dests or n_ps > limits.max_dests:
        raise ValueError(f"more than {limits.max_dests} destinations")
    return n_ns, n_ps


def _record(cdu: CDU, s: struct.Struct, tag: int, n_ns: int, n_ps: int, plen: int) -> bytes:
    try:
        return s.pack(cdu.id, cdu.sno, cdu.segno, cdu.source_n, cdu.source_p, cdu.com,
                      cdu.kind, cdu.op, tag, n_ns, n_ps, plen, *cdu.dest_ns, *cdu.dest_ps)
    except struct.error as exc:  # a field out of its u32/u64 range, or not an int
        raise ValueError(f"CDU field out of range: {exc}") from exc


def encode_cdu(cdu: CDU, msgtype: MsgType = MsgType.REMOTE, *, allow_pickle: bool = False,
               limits: Limits = DEFAULT_LIMITS) -> list[Buffer]:
    """Encode one CDU as a UDATA/LOCAL/REMOTE frame: ``[header, payload parts...]``.

    Payload parts reference the caller's data (zero copy) where it is
    C-contiguous; keep it unchanged until the frame is sent.  Raises
    TypeError for data that cannot travel (see ``allow_pickle``) and
    ValueError for out-of-range fields or a frame beyond ``limits``.
    """
    if msgtype not in _CDU_SINGLE:
        raise ValueError(f"encode_cdu needs UDATA, LOCAL or REMOTE, not {msgtype!r}")
    n_ns, n_ps = _check_cdu(cdu, limits)
    data = cdu.data
    if type(data) is bytes:  # hot path: immutable, so the object itself is the part
        tag, meta, plen = _BYTES, b"", len(data)
        parts: list[Buffer] = [data] if plen else []
    else:
        tag, meta, parts, plen = encode_payload(data, allow_pickle, limits)
    nd = n_ns + n_ps
    fixed = 8 + _REC.size + 4 * nd
    if meta:
        meta += _ZEROS[:-(fixed + len(meta)) & (ALIGN - 1)]
    body_len = fixed - 8 + len(meta) + plen
    if body_len > limits.max_frame:
        raise ValueError(f"frame body of {body_len} bytes > max_frame {limits.max_frame}")
    s = _HEAD_CACHE.get(nd) or _cached(_HEAD_CACHE, nd, "<BBHI" + _REC_FMT)
    try:
        head = s.pack(VERSION, msgtype, 1, body_len, cdu.id, cdu.sno, cdu.segno, cdu.source_n,
                      cdu.source_p, cdu.com, cdu.kind, cdu.op, tag, n_ns, n_ps, plen,
                      *cdu.dest_ns, *cdu.dest_ps)
    except struct.error as exc:  # a field out of its u32/u64 range, or not an int
        raise ValueError(f"CDU field out of range: {exc}") from exc
    if meta:
        head += meta
    return [head, *parts]


def encode_block(cdus: Iterable[CDU], *, allow_pickle: bool = False,
                 limits: Limits = DEFAULT_LIMITS) -> list[Buffer]:
    """Coalesce several CDUs into one BP frame.

    Headers and payloads up to 8 KiB are copied into shared bytearrays so a
    block of many small CDUs is one buffer; larger payloads stay zero-copy
    parts.  Raises ValueError for an empty block or more than 65535 CDUs.
    """
    first = bytearray(L1.size)  # level-1 header patched in at the end
    out: list[Buffer] = [first]
    cur = first
    off = L1.size  # absolute offset of the next byte, for alignment
    count = 0
    for cdu in cdus:
        if count == 0xFFFF:
            raise ValueError("a BP block holds at most 65535 CDUs")
        n_ns, n_ps = _check_cdu(cdu, limits)
        tag, meta, parts, plen = encode_payload(cdu.data, allow_pickle, limits)
        s = _cached(_RECD_CACHE, n_ns + n_ps, "<" + _REC_FMT)
        off += s.size
        if meta:
            meta += _ZEROS[:-(off + len(meta)) & (ALIGN - 1)]
        cur += _record(cdu, s, tag, n_ns, n_ps, plen)
        cur += meta
        off += len(meta) + plen
        if off - L1.size > limits.max_frame:
            raise ValueError(f"block body > max_frame {limits.max_frame}")
        if plen <= _COPY_MAX:
            for part in parts:
                cur += part
        else:
            out.extend(parts)
            cur = bytearray()
            out.append(cur)
        count += 1
    if not count:
        raise ValueError("a BP block needs at least one CDU")
    L1.pack_into(first, 0, VERSION, _BP, count, off - L1.size)
    if not cur:
        out.pop()
    return out


def encode_record(cdu: CDU, offset: int, *, allow_pickle: bool = False,
                  limits: Limits = DEFAULT_LIMITS) -> tuple[list[Buffer], int]:
    """One BP record (levels 2-3 and payload) for byte ``offset`` of a BP frame.

    For writers that coalesce CDUs straight into a pool block: append the
    returned parts at ``offset`` (alignment padding depends on it), then
    write :func:`bp_header` at the start of the block.  Returns the parts and
    their total length.
    """
    n_ns, n_ps = _check_cdu(cdu, limits)
    tag, meta, parts, plen = encode_payload(cdu.data, allow_pickle, limits)
    s = _cached(_RECD_CACHE, n_ns + n_ps, "<" + _REC_FMT)
    off = offset + s.size
    if meta:
        meta += _ZEROS[:-(off + len(meta)) & (ALIGN - 1)]
    head = _record(cdu, s, tag, n_ns, n_ps, plen)
    if meta:
        head += meta
    return [head, *parts], len(head) + plen


_REC1 = struct.Struct("<" + _REC_FMT + "I")  # a record with exactly one destination GP


def encode_small_into(buf: memoryview, offset: int, cdu: CDU) -> int:
    """Fast path of :func:`encode_record` for the commonest CDU -- one
    destination GP, no destination nodes, a ``bytes`` (or no) payload --
    written straight into ``buf`` at ``offset``.  Returns the bytes written,
    0 when the CDU is not of that shape, -1 when it does not fit."""
    data = cdu.data
    if len(cdu.dest_ps) != 1 or cdu.dest_ns:
        return 0
    if type(data) is bytes:
        tag = _BYTES
        n = len(data)
    elif data is None:
        tag = _NONE
        n = 0
    else:
        return 0
    end = offset + _REC1.size + n
    if end > len(buf):
        return -1
    try:
        _REC1.pack_into(buf, offset, cdu.id, cdu.sno, cdu.segno, cdu.source_n, cdu.source_p,
                        cdu.com, cdu.kind, cdu.op, tag, 0, 1, n, cdu.dest_ps[0])
    except struct.error as exc:
        raise ValueError(f"CDU field out of range: {exc}") from exc
    if n:
        buf[end - n:end] = data
    return end - offset


def bp_header(count: int, body_len: int) -> bytes:
    """The level-1 header of a BP frame of ``count`` records."""
    if not 0 < count <= 0xFFFF:
        raise ValueError("a BP block holds 1..65535 CDUs")
    return L1.pack(VERSION, _BP, count, body_len)


def encode_split(cdu: CDU, *, limits: Limits = DEFAULT_LIMITS) -> tuple[bytes, Buffer]:
    """A REMOTE frame cut in two messages: its header and its payload.

    Large payloads (stream segments) travel as their own message straight
    from the caller's buffer (zero copy); :func:`decode_split` puts the two
    halves back together.  Only BYTES, NDARRAY and NONE payloads split.
    """
    parts = encode_cdu(cdu, MsgType.REMOTE, allow_pickle=False, limits=limits)
    head = parts[0]
    if len(parts) == 1:
        return bytes(head), b""
    if len(parts) == 2:
        return bytes(head), parts[1]
    return bytes(head), b"".join(parts[1:])


def split_target(head: Buffer, *, limits: Limits = DEFAULT_LIMITS) -> tuple[int, int, bool]:
    """What the header half of a split frame announces, before its payload
    arrives: ``(payload bytes, destination pid, is a stream CDU)`` -- enough
    to choose where the payload lands.  The pid is 0 unless the CDU has
    exactly one destination GP (a multicast's payload is shared by all of
    them) and its payload is a numpy array (a bytes payload is delivered
    as a ``bytes`` object of its own: it cannot stay in a GP's buffer).
    :func:`decode_split` checks the rest once it has."""
    mv = byte_view(head)
    mt, count, body_len = read_header(mv, limits)
    if int(mt) not in _CDU_SINGLE or count != 1 or len(mv) < L1.size + _REC.size:
        raise ProtocolError("not the header of a split frame")
    plen = body_len - (len(mv) - L1.size)
    (_, _, _, _, _, _, kind, _, tag, n_ns, n_ps, rplen) = _REC.unpack_from(mv, L1.size)
    if plen < 0 or rplen != plen:
        raise ProtocolError(f"split frame header announces {plen} payload bytes, record says {rplen}")
    if n_ns > limits.max_dests or n_ps > limits.max_dests:
        raise ProtocolError(f"CDU with more than {limits.max_dests} destinations")
    at = L1.size + _REC.size + 4 * n_ns
    if at + 4 * n_ps > len(mv):
        raise ProtocolError("truncated destination list")
    pid = struct.unpack_from("<I", mv, at)[0] if n_ps == 1 and tag == _NDARRAY else 0
    return plen, pid, kind == _STREAM


def split_stream_key(head: Buffer) -> tuple[int, int]:
    """The stream key ``(source node, stream number)`` of a split frame's
    header that :func:`split_target` accepted as a stream CDU's."""
    (_, sno, _, source_n) = struct.unpack_from("<QIII", byte_view(head), L1.size)
    return source_n, sno


def _read_split(head: Buffer, nbytes: int | None,
                limits: Limits) -> tuple[tuple[int, ...], tuple[int, ...], Any, int]:
    """Check the header half of a split frame (with a payload of ``nbytes``,
    or whatever its header announces when None): (its record's fields,
    its destinations, the payload's layout -- ``(dtype, shape, count)`` for
    an array, else None --, the payload's length)."""
    mv = byte_view(head)
    mt, count, body_len = read_header(mv, limits)
    if int(mt) not in _CDU_SINGLE or count != 1:
        raise ProtocolError(f"split frame must be a single-CDU frame, not {mt.name}")
    end = len(mv)
    if nbytes is not None and end - L1.size + nbytes != body_len:
        raise ProtocolError(f"split frame holds {end - L1.size + nbytes} body bytes, "
                            f"header says {body_len}")
    off = L1.size
    if off + _REC.size > end:
        raise ProtocolError("truncated CDU record header")
    rec = _REC.unpack_from(mv, off)
    (_, _, _, _, _, _, kind, op, tag, n_ns, n_ps, plen) = rec
    off += _REC.size
    if kind not in _KINDS or op not in _OPS or (op and kind != _STREAM):
        raise ProtocolError(f"bad CDU kind/op {kind}/{op}")
    if n_ns > limits.max_dests or n_ps > limits.max_dests:
        raise ProtocolError(f"CDU with more than {limits.max_dests} destinations")
    nd = n_ns + n_ps
    if off + 4 * nd > end:
        raise ProtocolError("truncated destination list")
    dests = _cached(_DEST_CACHE, nd, "<").unpack_from(mv, off)
    off += 4 * nd
    if plen != body_len - (end - L1.size):
        raise ProtocolError(f"split frame header announces {body_len - (end - L1.size)} payload bytes, "
                            f"record says {plen}")
    layout: Any = None
    if tag == _NDARRAY:
        dt, shape, n, off = ndarray_meta(mv, off, end, limits)
        if n * dt.itemsize != plen:
            raise ProtocolError(f"ndarray {shape} of {dt} does not match {plen} payload bytes")
        off = min(end, off)
        layout = (dt, shape, n)
    elif tag == _NONE:
        if plen:
            raise ProtocolError("NONE payload with a length")
    elif tag != _BYTES:
        raise ProtocolError(f"payload tag {tag} cannot be split")
    if off != end:
        raise ProtocolError(f"{end - off} stray bytes in a split frame header")
    return rec, dests, layout, plen


def _array(pv: Buffer, dt: np.dtype[Any], shape: tuple[int, ...], n: int) -> np.ndarray[Any, Any]:
    try:
        data = np.frombuffer(pv, dt, n)
        data = data if len(shape) == 1 else data.reshape(shape)
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"bad ndarray shape {shape}") from exc
    return check_text(data)


def decode_split(head: Buffer, payload: Buffer, *, limits: Limits = DEFAULT_LIMITS) -> CDU:
    """Decode a frame sent by :func:`encode_split`; the payload is not copied."""
    pv = byte_view(payload)
    rec, dests, layout, plen = _read_split(head, len(pv), limits)
    (id_, sno, segno, src_n, src_p, com, kind, op, tag, n_ns, _, _) = rec
    data: Any = None
    if layout is not None:
        data = _array(pv, *layout)
    elif tag == _BYTES:
        data = pv
    return CDU(_KINDS[kind], src_p, dests[n_ns:], data, com, id_, sno, segno, src_n, dests[:n_ns],
               _OPS[op])


# ------------------------------------------ split frames of one array, cached
#
# A message of one numpy array from one GP to another has a split header
# that depends only on (kind, source pid, destination pid, com, dtype,
# shape): a ping-pong of 64 KiB arrays sends the very same ~100 bytes every
# time.  Both sides cache it -- the sender the encoded bytes, the receiver
# what they say -- so a repeat costs a dict lookup, not the codec (~3 us
# each side, about a tenth of a 64 KiB hop).

#: entries of each split-header cache; a full cache starts over
SPLIT_CACHE_MAX = 256
_SPLIT_HEADS: dict[tuple[Any, ...], bytes] = {}


def encode_split_array(kind: Kind, source_p: int, pid: int, com: int,
                       data: np.ndarray[Any, Any]) -> tuple[bytes, Buffer]:
    """``encode_split(CDU(kind, source_p, (pid,), data, com))`` for a
    C-contiguous numpy array, its header from a cache (see above)."""
    dt = data.dtype
    # (a tensor's tagged dtype equals its base: its tag tells their headers apart; arrays.tag_of inline)
    md = dt.metadata
    key = (kind, source_p, pid, com, dt, data.shape) if md is None else \
        (kind, source_p, pid, com, dt, data.shape, md.get(TAG))
    head = _SPLIT_HEADS.get(key)
    if head is None:
        head, payload = encode_split(CDU(kind, source_p, (pid,), data, com))
        if len(_SPLIT_HEADS) >= SPLIT_CACHE_MAX:
            _SPLIT_HEADS.clear()
        _SPLIT_HEADS[key] = head
        return head, payload
    try:
        mv = data.data
        if mv.ndim != 1 or mv.format != "B":
            mv = mv.cast("B")
    except (ValueError, TypeError):  # a dtype the buffer protocol refuses (datetime64)
        mv = data.reshape(-1).view(np.uint8).data
    return head, mv


class SplitArray(NamedTuple):
    """What a split header says when its frame carries one numpy array to
    one GP (a short or command message): all of the message but its bytes."""

    nbytes: int
    pid: int
    kind: Kind
    source_p: int
    com: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    items: int

    def array(self, payload: Buffer) -> np.ndarray[Any, Any]:
        """The array over ``payload`` (``nbytes`` or more bytes), not copied."""
        return _array(payload, self.dtype, self.shape, self.items)


def split_array(head: Buffer, *, limits: Limits = DEFAULT_LIMITS) -> SplitArray | None:
    """The :class:`SplitArray` of a split frame's header, or None when the
    frame is something else (a stream segment, bytes, a multicast); the
    header is checked as :func:`decode_split` checks it, so a receiver may
    keep the answer per header bytes."""
    rec, dests, layout, plen = _read_split(head, None, limits)
    (_, _, _, _, src_p, com, kind, _, _, n_ns, n_ps, _) = rec
    if layout is None or kind == _STREAM or n_ps != 1:
        return None
    return SplitArray(plen, dests[n_ns], _KINDS[kind], src_p, com, layout[0], layout[1], layout[2])


# ------------------------------------------------------------ control frames


def _check_body(mtype: MsgType, body: object, seq: type | tuple[type, ...]) -> str | None:
    """Why ``body`` does not fit the schema of ``mtype``, or None if it fits.

    ``seq`` is what passes for a ``list`` field: msgpack sends tuples as
    arrays, so the encoder accepts them while the decoder sees lists only.
    """
    if not isinstance(body, dict):
        return f"{mtype.name} body is {type(body).__name__}, not a map"
    for key, types in CONTROL_SCHEMAS[mtype].items():
        if key not in body:
            return f"{mtype.name} body lacks {key!r}"
        value = body[key]
        if types is list:
            types = seq
        # bool is an int subclass; a flag where a number belongs is a bug.
        if not isinstance(value, types) or (isinstance(value, bool) and types is int):
            return f"{mtype.name}.{key} is {type(value).__name__}, not {types}"
    if mtype == MsgType.HINFO:
        for entry in body["hosts"]:
            if not (isinstance(entry, seq) and isinstance(entry, (list, tuple))
                    and len(entry) in (4, 5)):
                return "HINFO host entries are [nid, name, ip, ntype(, gp_window)]"
    return None


def encode_control(msg: Control, *, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """Encode one CMP message as one frame (header + msgpack body).

    A body that misses the schema raises ValueError; one msgpack cannot
    serialise raises msgpack's TypeError/OverflowError.
    """
    if msg.type not in CONTROL_SCHEMAS:
        raise ValueError(f"{msg.type!r} is not a control message type")
    problem = _check_body(msg.type, msg.body, (list, tuple))
    if problem:
        raise ValueError(problem)
    body: bytes = msgpack.packb(msg.body, use_bin_type=True)
    if len(body) > limits.max_control:
        raise ValueError(f"control body of {len(body)} bytes > max_control {limits.max_control}")
    return L1.pack(VERSION, msg.type, 0, len(body)) + body


def _decode_control(mt: MsgType, body: memoryview, limits: Limits) -> Control:
    cap = limits.max_control
    # The body length is already capped by max_control; the max_*_len caps
    # stop a 5-byte string/array header from announcing gigabytes.
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False, max_str_len=cap,
                              max_bin_len=cap, max_array_len=cap, max_map_len=cap,
                              max_ext_len=cap)
    except Exception as exc:  # ExtraData, FormatError, StackError, TypeError (keys), ...
        raise ProtocolError(f"bad {mt.name} body: {exc}") from exc
    problem = _check_body(mt, obj, list)
    if problem:
        raise ProtocolError(problem)
    return Control(mt, obj)


# ---------------------------------------------------------------- decoding


def _decode_records(mv: memoryview, count: int, allow_pickle: bool,
                    limits: Limits) -> list[CDU | Control]:
    out: list[CDU | Control] = []
    end = len(mv)
    off = L1.size
    rec_unpack = _REC.unpack_from
    rec_size = _REC.size
    kinds, ops, max_dests = _KINDS, _OPS, limits.max_dests
    for _ in range(count):
        if off + rec_size > end:
            raise ProtocolError("truncated CDU record header")
        (id_, sno, segno, src_n, src_p, com, kind, op, tag, n_ns, n_ps,
         plen) = rec_unpack(mv, off)
        off += rec_size
        k = kinds.get(kind)
        o = ops.get(op)
        if k is None or o is None or (op and kind != _STREAM):
            raise ProtocolError(f"bad CDU kind/op {kind}/{op}")
        if n_ns > max_dests or n_ps > max_dests:
            raise ProtocolError(f"CDU with more than {max_dests} destinations")
        nd = n_ns + n_ps
        if off + 4 * nd > end:
            raise ProtocolError("truncated destination list")
        dests = _cached(_DEST_CACHE, nd, "<").unpack_from(mv, off)
        off += 4 * nd
        data: Any
        if tag == _BYTES:
            if off + plen > end:
                raise ProtocolError("truncated payload")
            data = mv[off:off + plen]
            off += plen
        elif tag == _NONE:
            if plen:
                raise ProtocolError("NONE payload with a length")
            data = None
        elif tag == _NDARRAY:
            data, off = decode_ndarray(mv, off, end, plen, limits)
        elif tag == _PICKLE:
            if not allow_pickle:
                raise ProtocolError("pickle payload refused (decode with allow_pickle=True "
                                    "only for trusted peers)")
            data, off = decode_pickle(mv, off, end, plen, limits)
        else:
            raise ProtocolError(f"unknown payload tag {tag}")
        out.append(CDU(k, src_p, dests[n_ns:], data, com, id_, sno, segno, src_n,
                       dests[:n_ns], o))
    if off != end:
        raise ProtocolError(f"{end - off} trailing bytes after the last CDU record")
    return out


def decode(buf: Buffer, *, allow_pickle: bool = False,
           limits: Limits = DEFAULT_LIMITS) -> list[CDU | Control]:
    """Decode exactly one complete frame into ``[CDU, ...]`` or ``[Control]``.

    BYTES payloads are memoryview slices of ``buf`` and NDARRAY payloads are
    numpy views of it (zero copy): keep ``buf`` unchanged while they live.
    PICKLE payloads are refused unless ``allow_pickle``.  Enable it only
    between trusted hosts: the frame around a pickle is checked like any
    other and unpickling errors become ProtocolError, but a hostile pickle
    runs arbitrary code and a corrupt one can crash the interpreter
    (a mutated numpy pickle segfaults CPython), beyond any codec's reach.
    """
    mv = byte_view(buf)
    mt, count, body_len = read_header(mv, limits)
    if len(mv) != L1.size + body_len:
        raise ProtocolError(f"frame holds {len(mv) - L1.size} body bytes, header says "
                            f"{body_len}")
    if count == 0:
        return [_decode_control(mt, mv[L1.size:], limits)]
    try:
        if mt is MsgType.BPS:
            return [rec if type(rec) is CDU else CDU(rec[1], rec[4], (dest,), rec[3], rec[2])
                    for dest, run, _ in decode_short_runs(mv, count, None, tuple, None, limits, _short_stream)
                    for rec in run]
        return _decode_records(mv, count, allow_pickle, limits)
    except ProtocolError:
        raise
    except Exception as exc:
        # Safety net: the checks above are meant to be complete (the fuzz
        # tests hold them to it), but callers treat ProtocolError as "the
        # peer sent garbage" and must never see a raw ValueError for that.
        raise ProtocolError(f"malformed frame: {exc!r}") from exc


def _short_stream(dest: int, src: int, source: Any, com: int, sno: int, window: int, data: Any) -> CDU:
    """A short stream record as the full CDU record of the same OPEN (its
    sending node, which the record leaves to the receiving link, is 0 here)."""
    return ShortStream((None, Kind.STREAM, com, data, src, sno, window, 0)).cdu(dest)


class Decoder:
    """Incremental decoder for a byte stream (e.g. a socket).

    ``feed`` arbitrary chunks and get the frames they complete.  At most one
    frame is buffered; its length is checked against ``limits`` as soon as
    its 8-byte header is in, before anything is allocated for it, and memory
    grows only with bytes actually received.  Each frame is copied once into
    its own bytearray, so decoded payloads may be kept after the caller
    reuses its chunk buffer.  After a ProtocolError the stream is out of
    sync: every later ``feed`` raises it again (frames completed earlier in
    the failing chunk are dropped).
    """

    def __init__(self, *, allow_pickle: bool = False, limits: Limits = DEFAULT_LIMITS) -> None:
        self._allow_pickle = allow_pickle
        self._limits = limits
        self._head = bytearray()  # the partial header of the next frame
        self._parts: list[bytes] = []  # body bytes received so far
        self._have = 0
        self._need = -1  # body bytes of the current frame; -1: header incomplete
        self._error: ProtocolError | None = None

    @property
    def pending(self) -> int:
        """Bytes buffered towards the next frame."""
        return len(self._head) + self._have

    def feed(self, data: Buffer) -> list[CDU | Control]:
        """Consume a chunk; return every frame it completes, in order."""
        if self._error is not None:
            raise ProtocolError(f"stream broken earlier: {self._error}")
        try:
            return self._feed(byte_view(data))
        except ProtocolError as exc:
            self._error = exc
            raise

    def _feed(self, mv: memoryview) -> list[CDU | Control]:
        out: list[CDU | Control] = []
        pos, n = 0, len(mv)
        while pos < n:
            if self._need < 0 and not self._head and n - pos >= L1.size:
                # Fast path: a whole header, maybe the whole frame, in this chunk.
                need = read_header(mv, self._limits, pos)[2]
                if n - pos - L1.size >= need:
                    frame = bytearray(mv[pos:pos + L1.size + need])
                    pos += L1.size + need
                    out.extend(decode(frame, allow_pickle=self._allow_pickle,
                                      limits=self._limits))
                    continue
            if self._need < 0:
                take = min(L1.size - len(self._head), n - pos)
                self._head += mv[pos:pos + take]
                pos += take
                if len(self._head) < L1.size:
                    break
                self._need = read_header(memoryview(bytes(self._head)), self._limits)[2]
            need = self._need
            if not self._parts and n - pos >= need:
                # The whole body is in this chunk: one copy straight into the frame.
                frame = bytearray(L1.size + need)
                frame[L1.size:] = mv[pos:pos + need]
                pos += need
            else:
                take = min(need - self._have, n - pos)
                if take:
                    self._parts.append(bytes(mv[pos:pos + take]))
                    self._have += take
                    pos += take
                if self._have < need:
                    break
                # Allocated only now that every byte has arrived.
                frame = bytearray(L1.size + need)
                at = L1.size
                for part in self._parts:
                    frame[at:at + len(part)] = part
                    at += len(part)
            frame[:L1.size] = self._head
            self._head, self._parts, self._have, self._need = bytearray(), [], 0, -1
            out.extend(decode(frame, allow_pickle=self._allow_pickle, limits=self._limits))
        return out
