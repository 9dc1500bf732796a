"""Sans-I/O codec for PDBP communication data units (CDU) and MESP messages.

Encoding turns a :class:`CDU` (or a :class:`Control` message) into a list of
buffers; decoding turns the bytes of one message back into objects or raises
:class:`~aiopdbp.errors.ProtocolError` -- never anything else, never a hang,
never an allocation beyond :class:`Limits`.  No I/O happens here.
"""

# Theory of operation
# -------------------
# Every message between hosts is one *frame* with a short, layered header
# (SPEC sections 8-9: each system level parses only its own layer).  All
# integers are little-endian and fixed size, so each layer is one
# ``struct.unpack_from`` call.
#
#   level 1, packet header, 8 bytes ``<BBHI``:
#       version u8 | msgtype u8 | count u16 | body_len u32
#     count is the number of CDU records (1, or 1..65535 for a BP block) and
#     0 for a control frame; body_len is the byte count after these 8 bytes.
#   control frame body: one msgpack map, checked against CONTROL_SCHEMAS.
#   CDU frame body: ``count`` records, each
#     level 2, record header, 43 bytes ``<QIIIIIBBBHHQ``:
#       id u64 | sno u32 | segno u32 | source_n u32 | source_p u32 | com u32 |
#       kind u8 | op u8 | payload tag u8 | n_dest_ns u16 | n_dest_ps u16 |
#       payload_len u64
#     then n_dest_ns + n_dest_ps u32 (dest_ns first, then dest_ps);
#     level 3, payload meta, by tag (self-delimiting):
#       NONE, BYTES: nothing
#       NDARRAY:     dtype_len u8 | dtype.str (ascii) | ndim u8 | shape u64*ndim
#       PICKLE:      nbuf u16 | u64 length of the pickle stream and of each of
#                    the nbuf out-of-band buffers
#     then payload_len bytes of payload.  For NDARRAY and PICKLE every payload
#     segment (the array data; the pickle stream and each out-of-band buffer)
#     starts at an offset from the frame start that is a multiple of ALIGN;
#     the gap is zero padding (ignored on decode) and inner gaps count in
#     payload_len.  An aligned frame buffer (any fresh allocation) therefore
#     yields aligned zero-copy numpy arrays.  BYTES is never padded: short
#     messages stay short.

from __future__ import annotations

import dataclasses
import enum
import pickle
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union

import msgpack
import numpy as np

from aiopdbp.errors import ProtocolError

# What the runtime passes around as frames and frame parts.  Any C-contiguous
# buffer (an ndarray, array.array, mmap) also works at run time; the alias is
# concrete so numpy/MPI calls on encoded parts type-check (PEP 688's Buffer
# does not cover ndarray before Python 3.12).
Buffer = Union[bytes, bytearray, memoryview]

__all__ = [
    "ALIGN", "Buffer", "CDU", "CONTROL_SCHEMAS", "Control", "DEFAULT_LIMITS", "Decoder", "Kind",
    "Limits", "MsgType", "Payload", "StreamOp", "VERSION", "decode", "encode_block",
    "encode_cdu", "encode_control", "frame_size", "peek_header",
    "bp_header", "encode_record", "encode_small_into", "encode_split", "decode_split",
    "SHORT", "SHORT_NONE", "SHORT_MAX", "ShortRun", "bps_header", "encode_shorts", "decode_shorts",
]

VERSION: int = 1
ALIGN = 16  # numpy's largest dtype alignment (longdouble / clongdouble)


class Kind(enum.IntEnum):
    """CDU type (patent): data stream, command message, short message."""

    STREAM = 1
    COMMAND = 2
    SHORT = 3


class StreamOp(enum.IntEnum):
    """Sub-operation of a ``Kind.STREAM`` CDU (``SEGMENT`` for other kinds)."""

    SEGMENT = 0
    OPEN = 1
    END = 2
    ABORT = 3
    DONE = 4
    CREDIT = 5  # receiver -> sender: ``segno`` more segments of this stream may be sent


class MsgType(enum.IntEnum):
    """Level-1 MESP message type."""

    # CMP, control channel (paper section 4.1); see aiopdbp.wire.control
    REG = 0x01      # RegMsg: register a GP (with its pipe)
    APIPE = 0x02    # APipeMsg: bind a pipe to a GP
    RELEASE = 0x03  # ReleaseMsg: release a GP's pipe, or free the GP
    CANCEL = 0x04   # CancelMsg: undo a request whose requester gave up
    AR = 0x05       # ARMsg: answer to RegMsg
    AAP = 0x06      # AAPMsg: answer to APipeMsg (and ReleaseMsg)
    HINFO = 0x07    # HInfoMsg: one host's / all hosts' info (initialisation)
    MBINFO = 0x08   # MBInfoMsg: all GP-pipe bindings (initialisation)
    # runtime control messages
    TABLE = 0x09    # one ordered table update broadcast by rank 0
    CREDIT = 0x0A   # per-destination flow-control credit return
    BYE = 0x0B      # graceful close, carries how much was sent
    ERROR = 0x0C    # a rank stops the job (failure, interrupt) -- StopMsg
    STREAM_DONE = 0x0D    # a stream's receiver consumed it (or gave up)
    STREAM_CREDIT = 0x0E  # a stream's receiver consumed segments
    STOP_ACK = 0x0F       # a rank heard of a failure
    TABLE_REQ = 0x20      # a stream-binding (MTA) update asked of rank 0
    TABLE_ACK = 0x21      # rank 0's answer to TABLE_REQ
    CREDIT_ASK = 0x22     # a sender is parked for credit towards these GPs
    STALL = 0x23          # a rank's stale waits, to rank 0 (aiopdbp.stall)
    DEADLOCK = 0x24       # rank 0 found a cycle of waits: fail them
    # DMP, data channel (paper section 4.3)
    UDATA = 0x10
    LOCAL = 0x11
    REMOTE = 0x12
    BP = 0x13
    BPS = 0x14  # a coalesced block of short-message records (compact format)


class Payload(enum.IntEnum):
    """Level-3 payload tag."""

    NONE = 0
    BYTES = 1
    NDARRAY = 2
    PICKLE = 3


@dataclasses.dataclass(slots=True)
class CDU:
    """The patent's 10-tuple plus the stream sub-op."""

    kind: Kind
    source_p: int  # Pid of the sending GP (u32)
    dest_ps: tuple[int, ...]  # Pids of the destination GPs, a set for multicast
    data: Any = None  # None, bytes-like, numpy.ndarray, or (opt-in) picklable
    com: int = 0  # command code (u32)
    id: int = 0  # u64
    sno: int = 0  # stream number (u32)
    segno: int = 0  # segment number (u32)
    source_n: int = 0  # source node (u32)
    dest_ns: tuple[int, ...] = ()  # destination nodes set (u32 each)
    op: StreamOp = StreamOp.SEGMENT


@dataclasses.dataclass(slots=True, frozen=True)
class Control:
    """One CMP message: a type and a msgpack-able body."""

    type: MsgType
    body: dict[str, Any]


@dataclasses.dataclass(slots=True, frozen=True)
class Limits:
    """Caps that bound what a decoder accepts (and an encoder produces)."""

    max_frame: int = 1 << 30  # body bytes of one frame
    max_dests: int = 4096  # entries in each of dest_ns / dest_ps
    max_ndim: int = 32
    max_pickle_buffers: int = 256
    max_control: int = 1 << 20  # body bytes of a control frame

    def __post_init__(self) -> None:
        # Each cap must fit the wire field that carries the value.
        for name, top in (("max_frame", 0xFFFFFFFF), ("max_dests", 0xFFFF), ("max_ndim", 64),
                          ("max_pickle_buffers", 0xFFFF), ("max_control", 0xFFFFFFFF)):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= top:
                raise ValueError(f"Limits.{name} must be an int in [0, {top}], got {value!r}")


DEFAULT_LIMITS = Limits()

CONTROL_SCHEMAS: dict[MsgType, dict[str, type | tuple[type, ...]]] = {
    MsgType.REG: {"req": int, "name": str, "ptype": int, "node": int, "pipe": int},
    MsgType.APIPE: {"req": int, "pid": int, "pipe": int},
    MsgType.RELEASE: {"req": int, "pid": int, "free": bool},
    MsgType.CANCEL: {"req": int, "pid": int},
    MsgType.AR: {"req": int, "ok": bool, "pid": int, "error": str, "etype": str},
    MsgType.AAP: {"req": int, "ok": bool, "pipe": int, "error": str},
    MsgType.HINFO: {"hosts": list, "gp_window": int},  # hosts: [nid, name, ip, ntype]
    MsgType.MBINFO: {"bindings": list},
    MsgType.TABLE: {"seq": int, "op": str, "args": list},
    MsgType.CREDIT: {"grants": list},  # [pid, bytes] pairs
    MsgType.BYE: {"sent": int},
    MsgType.ERROR: {"kind": str, "rank": int, "signal": int, "message": str, "gp": str},
    MsgType.STREAM_DONE: {"node": int, "sno": int, "ok": bool, "error": str},
    MsgType.STREAM_CREDIT: {"node": int, "sno": int, "segments": int},
    MsgType.STOP_ACK: {"rank": int},
    MsgType.TABLE_REQ: {"req": int, "op": str, "args": list},
    MsgType.TABLE_ACK: {"req": int, "ok": bool, "error": str},
    MsgType.CREDIT_ASK: {"pids": list},
    MsgType.STALL: {"edges": list, "idle": list},
    MsgType.DEADLOCK: {"cycle": list},
}

_L1 = struct.Struct("<BBHI")
_REC_FMT = "QIIIIIBBBHHQ"
_REC = struct.Struct("<" + _REC_FMT)
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_ZEROS = bytes(ALIGN)
_COPY_MAX = 8192  # encode_block copies payloads up to this size into the block

# Hot paths use plain ints: on Python 3.11 reading ``Payload.BYTES`` costs
# ~120 ns (an enum property), an int compare ~20 ns; and int -> member goes
# through a dict, since calling an IntEnum costs ~10x more.
_NONE, _BYTES, _NDARRAY, _PICKLE = (int(t) for t in Payload)
_STREAM = int(Kind.STREAM)
_BP = int(MsgType.BP)
_BPS = int(MsgType.BPS)
_BLOCKS = frozenset((_BP, _BPS))
_KINDS = {int(k): k for k in Kind}
_OPS = {int(o): o for o in StreamOp}
_MSGTYPES = {int(m): m for m in MsgType}
_CDU_SINGLE = frozenset(int(m) for m in (MsgType.UDATA, MsgType.LOCAL, MsgType.REMOTE))
_CONTROL = frozenset(int(m) for m in CONTROL_SCHEMAS)

# Structs for "level 1 + record + n dests" (encode) and "n dests" (decode),
# built on first use; only small n are cached so the caches stay bounded.
_HEAD_CACHE: dict[int, struct.Struct] = {}
_RECD_CACHE: dict[int, struct.Struct] = {}
_DEST_CACHE: dict[int, struct.Struct] = {}
_STRUCT_CACHE_MAX = 64
_DTYPE_CACHE: dict[bytes, np.dtype[Any]] = {}
_DTYPE_CACHE_MAX = 256
# Small messages repeat their dtype and shape: the level-3 meta of a
# (dtype, shape) already checked is kept encoded (sender), and the decoded
# (dtype, shape, count) of meta bytes already checked (receiver): ~2.5 us of
# a lone 8 B array's ~4 us encode, ~1.5 us of its decode.
_META_ENC: dict[tuple[np.dtype[Any], tuple[int, ...]], bytes] = {}
_META_DEC: dict[bytes, tuple[np.dtype[Any], tuple[int, ...], int]] = {}
_META_CACHE_MAX = 1024


def _cached(cache: dict[int, struct.Struct], n: int, prefix: str) -> struct.Struct:
    s = cache.get(n)
    if s is None:
        s = struct.Struct(f"{prefix}{n}I")
        if n <= _STRUCT_CACHE_MAX:
            cache[n] = s
    return s


def _align(off: int) -> int:
    return (off + ALIGN - 1) & -ALIGN


# ---------------------------------------------------------------- encoding


def _pickle_payload(obj: object, limits: Limits) -> tuple[int, bytes, list[Buffer], int]:
    oob: list[pickle.PickleBuffer] = []
    try:
        main = pickle.dumps(obj, protocol=5, buffer_callback=oob.append)
        views = [b.raw() for b in oob]
    except Exception as exc:  # PicklingError, AttributeError, BufferError, ...
        raise TypeError(f"cannot pickle {type(obj).__name__} payload: {exc}") from exc
    if len(views) > limits.max_pickle_buffers:
        raise ValueError(f"{len(views)} out-of-band pickle buffers > {limits.max_pickle_buffers}")
    segs: list[Buffer] = [main, *views]
    lengths = [len(main), *(v.nbytes for v in views)]
    meta = _U16.pack(len(views)) + struct.pack(f"<{len(lengths)}Q", *lengths)
    # Segments after the first are padded to ALIGN relative to the (aligned)
    # first one, so the padding does not depend on where the record sits.
    parts: list[Buffer] = []
    plen = 0
    for seg, n in zip(segs, lengths):
        pad = -plen & (ALIGN - 1)
        if pad:
            parts.append(_ZEROS[:pad])
            plen += pad
        if n:
            parts.append(seg)
        plen += n
    return _PICKLE, meta, parts, plen


def _payload(data: Any, allow_pickle: bool,
             limits: Limits) -> tuple[int, bytes, list[Buffer], int]:
    """Classify ``data``: (tag, level-3 meta without padding, parts, payload_len)."""
    if type(data) is bytes:  # immutable, so the object itself is the part
        return _BYTES, b"", [data] if data else [], len(data)
    if data is None:
        return _NONE, b"", [], 0
    if isinstance(data, (bytes, bytearray, memoryview)):
        mv = memoryview(data)
        if not mv.c_contiguous:
            mv = memoryview(mv.tobytes())  # the one copy a strided view needs
        elif mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        return _BYTES, b"", [mv] if mv.nbytes else [], mv.nbytes
    if isinstance(data, np.generic):
        data = np.asarray(data)  # numpy scalars travel as 0-d arrays
    if isinstance(data, np.ndarray):
        dt = data.dtype
        hit = _META_ENC.get((dt, data.shape))
        if hit is not None:  # dtype and shape checked before
            if data.ndim == 1 and dt.itemsize == 1 and data.flags.c_contiguous:
                view = data.data  # already flat bytes (maybe as int8, bool, S1)
                if view.format != "B":
                    view = view.cast("B")
            else:
                view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
            return _NDARRAY, hit, [view] if view.nbytes else [], view.nbytes
        if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
            if allow_pickle:
                return _pickle_payload(data, limits)
            raise TypeError(f"ndarray of dtype {dt} needs allow_pickle=True")
        if data.ndim > limits.max_ndim:
            raise ValueError(f"ndarray has {data.ndim} dimensions > {limits.max_ndim}")
        name = dt.str.encode("ascii")
        if len(name) > 0xFF:
            raise TypeError(f"dtype {dt} has too long a name for the wire")
        meta = (_U8.pack(len(name)) + name
                + struct.pack(f"<B{data.ndim}Q", data.ndim, *data.shape))
        if len(_META_ENC) < _META_CACHE_MAX:
            _META_ENC[(dt, data.shape)] = meta
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        return _NDARRAY, meta, [flat.data] if flat.nbytes else [], flat.nbytes
    if allow_pickle:
        return _pickle_payload(data, limits)
    raise TypeError(f"cannot send {type(data).__name__} without allow_pickle=True "
                    "(only None, bytes-like objects and numpy arrays travel raw)")


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
        tag, meta, parts, plen = _payload(data, allow_pickle, limits)
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
    first = bytearray(_L1.size)  # level-1 header patched in at the end
    out: list[Buffer] = [first]
    cur = first
    off = _L1.size  # absolute offset of the next byte, for alignment
    count = 0
    for cdu in cdus:
        if count == 0xFFFF:
            raise ValueError("a BP block holds at most 65535 CDUs")
        n_ns, n_ps = _check_cdu(cdu, limits)
        tag, meta, parts, plen = _payload(cdu.data, allow_pickle, limits)
        s = _cached(_RECD_CACHE, n_ns + n_ps, "<" + _REC_FMT)
        off += s.size
        if meta:
            meta += _ZEROS[:-(off + len(meta)) & (ALIGN - 1)]
        cur += _record(cdu, s, tag, n_ns, n_ps, plen)
        cur += meta
        off += len(meta) + plen
        if off - _L1.size > limits.max_frame:
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
    _L1.pack_into(first, 0, VERSION, _BP, count, off - _L1.size)
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
    tag, meta, parts, plen = _payload(cdu.data, allow_pickle, limits)
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
    return _L1.pack(VERSION, _BP, count, body_len)


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


def decode_split(head: Buffer, payload: Buffer, *, limits: Limits = DEFAULT_LIMITS) -> CDU:
    """Decode a frame sent by :func:`encode_split`; the payload is not copied."""
    mv = _byte_view(head)
    pv = _byte_view(payload)
    mt, count, body_len = _header(mv, limits)
    if int(mt) not in _CDU_SINGLE or count != 1:
        raise ProtocolError(f"split frame must be a single-CDU frame, not {mt.name}")
    if len(mv) - _L1.size + len(pv) != body_len:
        raise ProtocolError(f"split frame holds {len(mv) - _L1.size + len(pv)} body bytes, "
                            f"header says {body_len}")
    end = len(mv)
    off = _L1.size
    if off + _REC.size > end:
        raise ProtocolError("truncated CDU record header")
    (id_, sno, segno, src_n, src_p, com, kind, op, tag, n_ns, n_ps, plen) = _REC.unpack_from(mv, off)
    off += _REC.size
    k = _KINDS.get(kind)
    o = _OPS.get(op)
    if k is None or o is None or (op and kind != _STREAM):
        raise ProtocolError(f"bad CDU kind/op {kind}/{op}")
    if n_ns > limits.max_dests or n_ps > limits.max_dests:
        raise ProtocolError(f"CDU with more than {limits.max_dests} destinations")
    nd = n_ns + n_ps
    if off + 4 * nd > end:
        raise ProtocolError("truncated destination list")
    dests = _cached(_DEST_CACHE, nd, "<").unpack_from(mv, off)
    off += 4 * nd
    if plen != len(pv):
        raise ProtocolError(f"payload of {len(pv)} bytes, record says {plen}")
    data: Any
    if tag == _BYTES:
        data = pv
    elif tag == _NONE:
        if plen:
            raise ProtocolError("NONE payload with a length")
        data = None
    elif tag == _NDARRAY:
        dt, shape, n, off = _ndarray_meta(mv, off, end, limits)
        if n * dt.itemsize != plen:
            raise ProtocolError(f"ndarray {shape} of {dt} does not match {plen} payload bytes")
        off = min(end, off)
        try:
            data = np.frombuffer(pv, dt, n).reshape(shape)
        except (ValueError, OverflowError) as exc:
            raise ProtocolError(f"bad ndarray shape {shape}") from exc
    else:
        raise ProtocolError(f"payload tag {tag} cannot be split")
    if off != end:
        raise ProtocolError(f"{end - off} stray bytes in a split frame header")
    return CDU(k, src_p, dests[n_ns:], data, com, id_, sno, segno, src_n, dests[:n_ns], o)


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
    return _L1.pack(VERSION, msg.type, 0, len(body)) + body


def frame_size(parts: Sequence[Buffer]) -> int:
    """Total bytes of an encoded frame (all its parts)."""
    return sum(memoryview(p).nbytes for p in parts)


# ---------------------------------------------------------- short records
#
# A BPS frame (level-1 type BPS, ``count`` records) carries the commonest
# CDU compactly: a short or command message to ONE GP with a ``bytes`` (or
# no) payload below 64 KiB.  Each record is 15 bytes ``<IIIBH``:
#     dest pid u32 | source pid u32 | com u32 | flags u8 | payload_len u16
# flags: bits 0-1 the Kind (COMMAND or SHORT), bit 7 "payload is None";
# then payload_len bytes.  No id/sno/segno (they are 0 for messages), no
# alignment.  Writers pack records straight into a pool block with
# ``SHORT.pack_into`` and write ``bps_header`` in front.

SHORT = struct.Struct("<IIIBH")
SHORT_NONE = 0x80          # flags bit: the payload is None
SHORT_MAX = 0xFFFF         # largest payload of a short record
_SHORT_KINDS = frozenset((int(Kind.COMMAND), int(Kind.SHORT)))
# flags byte -> Kind, or (Kind,) when the payload is None
_SHORT_KIND_OF: dict[int, Any] = {**{int(k): k for k in (Kind.COMMAND, Kind.SHORT)},
                                  **{int(k) | 0x80: (k,) for k in (Kind.COMMAND, Kind.SHORT)}}


def bps_header(count: int, body_len: int) -> bytes:
    """The level-1 header of a BPS frame of ``count`` short records."""
    if not 0 < count <= 0xFFFF:
        raise ValueError("a BPS block holds 1..65535 records")
    return _L1.pack(VERSION, _BPS, count, body_len)


def encode_shorts(records: Iterable[tuple[int, int, Kind, int, bytes | None]]) -> bytes:
    """One BPS frame of ``(dest, source, kind, com, data)`` records."""
    body = bytearray()
    count = 0
    for dest, src, kind, com, data in records:
        if int(kind) not in _SHORT_KINDS:
            raise ValueError(f"a short record carries COMMAND or SHORT, not {kind!r}")
        if data is not None and (type(data) is not bytes or len(data) > SHORT_MAX):
            raise ValueError("a short record carries None or bytes of at most 65535 bytes")
        try:
            body += SHORT.pack(dest, src, com, int(kind) | (SHORT_NONE if data is None else 0),
                               0 if data is None else len(data))
        except struct.error as exc:
            raise ValueError(f"short record field out of range: {exc}") from exc
        if data:
            body += data
        count += 1
    return bps_header(count, len(body)) + bytes(body)


#: one run of a decoded BPS frame: (dest pid, records, payload bytes)
ShortRun = tuple[int, list[Any], int]


def _decode_shorts(mv: memoryview, count: int, names: Mapping[int, str] | None,
                   make: type[tuple[Any, ...]],
                   unknown: Callable[[int], str] | None = None) -> list[ShortRun]:
    # One pass from wire to the receiver's record: no intermediate tuple, no
    # second loop; consecutive records for one GP form one run, so placing
    # them is one pipe operation.
    b = bytes(mv)   # slicing bytes makes the payload objects in one step
    end = len(b)
    off = _L1.size
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
        append(make((source, kind, com, data, src)))
        run_bytes += n
    if off != end:
        raise ProtocolError(f"{end - off} trailing bytes after the last short record")
    runs.append((run_dest, run, run_bytes))
    return runs


def decode_shorts(buf: Buffer, *, names: Mapping[int, str] | None = None,
                  make: type[tuple[Any, ...]] = tuple,
                  limits: Limits = DEFAULT_LIMITS,
                  unknown: Callable[[int], str] | None = None) -> list[ShortRun]:
    """Decode one BPS frame in bulk, straight into the receiver's records.

    Returns runs ``[(dest, [record, ...], payload_bytes), ...]``: consecutive
    records for the same destination GP form one run (order kept).  Each
    record is ``make((source, kind, com, data, source_pid))`` (``make`` a
    tuple type, e.g. the receiver's message class, called with one tuple): ``source`` is the name
    ``names`` gives the source pid (``unknown(pid)``, by default
    ``"<pid N>"``, when it has none) or, with
    no ``names``, the pid; ``kind`` a :class:`Kind`; ``data`` a ``bytes``
    copy or None.  Raises only :class:`ProtocolError`.
    """
    if type(buf) is memoryview and buf.format == "B" and buf.ndim == 1 and len(buf) >= 8:
        # the receive path's case: one header check, no generic dispatch
        version, mtype, count, body_len = _L1.unpack_from(buf)
        if (version == VERSION and mtype == _BPS and count and len(buf) == 8 + body_len
                and body_len <= limits.max_frame):
            return _decode_shorts(buf, count, names, make, unknown)
    mv = _byte_view(buf)
    mt, count, body_len = _header(mv, limits)
    if mt is not MsgType.BPS:
        raise ProtocolError(f"not a BPS frame: {mt.name}")
    if len(mv) != _L1.size + body_len:
        raise ProtocolError(f"frame holds {len(mv) - _L1.size} body bytes, header says {body_len}")
    return _decode_shorts(mv, count, names, make, unknown)


# ---------------------------------------------------------------- decoding


def _byte_view(buf: Buffer) -> memoryview:
    try:
        mv = memoryview(buf)
        if mv.ndim != 1 or mv.itemsize != 1 or mv.format != "B":
            mv = mv.cast("B")  # needs C-contiguity
    except (TypeError, ValueError, BufferError) as exc:
        raise ProtocolError(f"not a contiguous bytes-like buffer: {exc}") from exc
    return mv


def _header(mv: memoryview, limits: Limits, off: int = 0) -> tuple[MsgType, int, int]:
    if len(mv) - off < _L1.size:
        raise ProtocolError(f"frame of {len(mv) - off} bytes is shorter than its header")
    version, mtype, count, body_len = _L1.unpack_from(mv, off)
    if version != VERSION:
        raise ProtocolError(f"unsupported protocol version {version} (want {VERSION})")
    mt = _MSGTYPES.get(mtype)
    if mt is None:
        raise ProtocolError(f"unknown message type 0x{mtype:02x}")
    if body_len > limits.max_frame:
        raise ProtocolError(f"frame body of {body_len} bytes > max_frame {limits.max_frame}")
    if mtype in _CONTROL:
        if count != 0:
            raise ProtocolError(f"control frame with record count {count}")
        if body_len > limits.max_control:
            raise ProtocolError(f"control body of {body_len} bytes > {limits.max_control}")
    elif count != 1 and (mtype not in _BLOCKS or count == 0):
        raise ProtocolError(f"{mt.name} frame with record count {count}")
    return mt, count, body_len


def peek_header(buf: Buffer, *, limits: Limits = DEFAULT_LIMITS) -> tuple[MsgType, int]:
    """(message type, body length) from the first 8 bytes of a frame."""
    mt, _, body_len = _header(_byte_view(buf), limits)
    return mt, body_len


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


def _dtype(name: bytes) -> np.dtype[Any]:
    dt = _DTYPE_CACHE.get(name)
    if dt is not None:
        return dt
    try:
        dt = np.dtype(name.decode("ascii"))
    except Exception as exc:  # TypeError, ValueError, UnicodeDecodeError, ...
        raise ProtocolError(f"bad dtype {name!r}") from exc
    # Only plain, fixed-size, reference-free dtypes can be viewed over bytes.
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
        raise ProtocolError(f"dtype {name!r} refused")
    if len(_DTYPE_CACHE) < _DTYPE_CACHE_MAX:
        _DTYPE_CACHE[name] = dt
    return dt


def _u64s(mv: memoryview, off: int, end: int, n: int) -> tuple[int, ...]:
    if off + 8 * n > end:
        raise ProtocolError("truncated payload meta")
    return struct.unpack_from(f"<{n}Q", mv, off)


def _ndarray_meta(mv: memoryview, off: int, end: int,
                  limits: Limits) -> tuple[np.dtype[Any], tuple[int, ...], int, int]:
    """Level-3 ndarray meta at ``off``: (dtype, shape, element count, aligned
    offset of the data)."""
    if off >= end:
        raise ProtocolError("truncated ndarray meta")
    nlen = mv[off]
    if off + nlen + 2 <= end:
        stop = off + nlen + 2 + 8 * mv[off + nlen + 1]
        if stop <= end:
            key = bytes(mv[off:stop])
            hit = _META_DEC.get(key)
            if hit is not None and len(hit[1]) <= limits.max_ndim:  # checked before
                return hit[0], hit[1], hit[2], _align(stop)
            dt, shape, count, data_off = _ndarray_meta_slow(mv, off, end, limits)
            if len(_META_DEC) < _META_CACHE_MAX:
                _META_DEC[key] = (dt, shape, count)
            return dt, shape, count, data_off
    return _ndarray_meta_slow(mv, off, end, limits)


def _ndarray_meta_slow(mv: memoryview, off: int, end: int,
                       limits: Limits) -> tuple[np.dtype[Any], tuple[int, ...], int, int]:
    nlen = mv[off]
    off += 1
    if off + nlen + 1 > end:
        raise ProtocolError("truncated ndarray meta")
    dt = _dtype(bytes(mv[off:off + nlen]))
    off += nlen
    ndim = mv[off]
    if ndim > limits.max_ndim:
        raise ProtocolError(f"ndarray with {ndim} dimensions > {limits.max_ndim}")
    shape = _u64s(mv, off + 1, end, ndim)
    count = 1
    for dim in shape:
        count *= dim
    return dt, shape, count, _align(off + 1 + 8 * ndim)


def _ndarray(mv: memoryview, off: int, end: int, plen: int,
             limits: Limits) -> tuple[np.ndarray[Any, Any], int]:
    dt, shape, count, off = _ndarray_meta(mv, off, end, limits)
    if count * dt.itemsize != plen or off + plen > end:
        raise ProtocolError(f"ndarray {shape} of {dt} does not match {plen} payload bytes")
    try:  # an empty array may still carry absurd dims numpy refuses
        arr = np.frombuffer(mv, dt, count, off).reshape(shape)
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"bad ndarray shape {shape}") from exc
    return arr, off + plen


def _unpickle(mv: memoryview, off: int, end: int, plen: int, limits: Limits) -> tuple[Any, int]:
    if off + 2 > end:
        raise ProtocolError("truncated pickle meta")
    (nbuf,) = _U16.unpack_from(mv, off)
    if nbuf > limits.max_pickle_buffers:
        raise ProtocolError(f"{nbuf} pickle buffers > {limits.max_pickle_buffers}")
    lengths = _u64s(mv, off + 2, end, nbuf + 1)
    start = pos = _align(off + 2 + 8 * (nbuf + 1))
    segs: list[memoryview] = []
    for n in lengths:
        pos = _align(pos)
        if pos + n > end:
            raise ProtocolError("pickle segment runs past the frame")
        segs.append(mv[pos:pos + n])
        pos += n
    if pos - start != plen:
        raise ProtocolError(f"pickle segments of {pos - start} bytes, header says {plen}")
    try:
        obj = pickle.loads(segs[0], buffers=segs[1:])
    except Exception as exc:  # anything a corrupt (or hostile) pickle may raise
        raise ProtocolError(f"bad pickle payload: {exc!r}") from exc
    return obj, pos


def _decode_records(mv: memoryview, count: int, allow_pickle: bool,
                    limits: Limits) -> list[CDU | Control]:
    out: list[CDU | Control] = []
    end = len(mv)
    off = _L1.size
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
            data, off = _ndarray(mv, off, end, plen, limits)
        elif tag == _PICKLE:
            if not allow_pickle:
                raise ProtocolError("pickle payload refused (decode with allow_pickle=True "
                                    "only for trusted peers)")
            data, off = _unpickle(mv, off, end, plen, limits)
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
    mv = _byte_view(buf)
    mt, count, body_len = _header(mv, limits)
    if len(mv) != _L1.size + body_len:
        raise ProtocolError(f"frame holds {len(mv) - _L1.size} body bytes, header says "
                            f"{body_len}")
    if count == 0:
        return [_decode_control(mt, mv[_L1.size:], limits)]
    try:
        if mt is MsgType.BPS:
            return [CDU(k, src, (dest,), data, com)
                    for dest, run, _ in _decode_shorts(mv, count, None, tuple)
                    for _, k, com, data, src in run]
        return _decode_records(mv, count, allow_pickle, limits)
    except ProtocolError:
        raise
    except Exception as exc:
        # Safety net: the checks above are meant to be complete (the fuzz
        # tests hold them to it), but callers treat ProtocolError as "the
        # peer sent garbage" and must never see a raw ValueError for that.
        raise ProtocolError(f"malformed frame: {exc!r}") from exc


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
            return self._feed(_byte_view(data))
        except ProtocolError as exc:
            self._error = exc
            raise

    def _feed(self, mv: memoryview) -> list[CDU | Control]:
        out: list[CDU | Control] = []
        pos, n = 0, len(mv)
        while pos < n:
            if self._need < 0 and not self._head and n - pos >= _L1.size:
                # Fast path: a whole header, maybe the whole frame, in this chunk.
                need = _header(mv, self._limits, pos)[2]
                if n - pos - _L1.size >= need:
                    frame = bytearray(mv[pos:pos + _L1.size + need])
                    pos += _L1.size + need
                    out.extend(decode(frame, allow_pickle=self._allow_pickle,
                                      limits=self._limits))
                    continue
            if self._need < 0:
                take = min(_L1.size - len(self._head), n - pos)
                self._head += mv[pos:pos + take]
                pos += take
                if len(self._head) < _L1.size:
                    break
                self._need = _header(memoryview(bytes(self._head)), self._limits)[2]
            need = self._need
            if not self._parts and n - pos >= need:
                # The whole body is in this chunk: one copy straight into the frame.
                frame = bytearray(_L1.size + need)
                frame[_L1.size:] = mv[pos:pos + need]
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
                frame = bytearray(_L1.size + need)
                at = _L1.size
                for part in self._parts:
                    frame[at:at + len(part)] = part
                    at += len(part)
            frame[:_L1.size] = self._head
            self._head, self._parts, self._have, self._need = bytearray(), [], 0, -1
            out.extend(decode(frame, allow_pickle=self._allow_pickle, limits=self._limits))
        return out
