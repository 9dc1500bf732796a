"""The MESP vocabulary and the level-1 packet header (SPEC sections 5, 8, 9).

What travels between hosts: the :class:`CDU` (the patent's 10-tuple, with
its :class:`Kind` and stream :class:`StreamOp`), the level-1 message types
(:class:`MsgType`), the level-3 payload tags (:class:`Payload`), a CMP
:class:`Control` message and the schema its body must fit
(:data:`CONTROL_SCHEMAS`), the decoder's caps (:class:`Limits`), and the
8-byte header every frame starts with (:func:`read_header`,
:func:`peek_header`).  Sans-I/O: imports neither asyncio nor mpi4py.
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

import enum
import struct
from collections.abc import Sequence
from typing import Any, Union

from aiopdbp.errors import ProtocolError
from aiopdbp.records import FrozenRecord, Record, init_field

# What the runtime passes around as frames and frame parts.  Any C-contiguous
# buffer (an ndarray, array.array, mmap) also works at run time; the alias is
# concrete so numpy/MPI calls on encoded parts type-check (PEP 688's Buffer
# does not cover ndarray before Python 3.12).
Buffer = Union[bytes, bytearray, memoryview]

__all__ = [
    "ALIGN", "Buffer", "CDU", "CONTROL_SCHEMAS", "Control", "DEFAULT_LIMITS", "Kind", "L1",
    "Limits", "MsgType", "Payload", "StreamOp", "VERSION", "byte_view", "frame_size",
    "peek_header", "read_header",
]

VERSION: int = 1
ALIGN = 16  # numpy's largest dtype alignment (longdouble / clongdouble)


class Kind(enum.IntEnum):
    """What an item is: a stream (``STREAM``), or a message sent as a
    command (``COMMAND``, :meth:`GP.command`) or a plain one (``SHORT``, the
    default of :meth:`GP.send`); ``Message.kind`` says which."""

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
    STREAM_DONES = 0x25   # many streams' receivers took them whole (one message per loop iteration)
    RELAY = 0x26          # a table message on its way along the tree to or from rank 0
    LOOKUP = 0x27         # a host asks a name's home for it (and its updates), or a pid's name
    CARRY = 0x28          # a lookup carrying a first message, and that message passed on to its GP's host
    CARRIED = 0x29        # a carried first message was delivered (or not: send it as any other)
    CLOSING = 0x2A        # a rank closes its node, to rank 0 (which learns the last open rank)
    LAST_OPEN = 0x2B      # rank 0 to the one rank whose node is still open
    LOST = 0x2E           # a host was lost (liveness): passed on along a spread tree
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


class CDU(Record):
    """The patent's 10-tuple plus the stream sub-op."""

    __slots__ = ("kind", "source_p", "dest_ps", "data", "com", "id", "sno", "segno", "source_n", "dest_ns", "op")
    kind: Kind
    source_p: int  # Pid of the sending GP (u32)
    dest_ps: tuple[int, ...]  # Pids of the destination GPs, a set for multicast
    data: Any  # None, bytes-like, numpy.ndarray, or (opt-in) picklable
    com: int  # command code (u32)
    id: int  # u64
    sno: int  # stream number (u32)
    segno: int  # segment number (u32)
    source_n: int  # source node (u32)
    dest_ns: tuple[int, ...]  # destination nodes set (u32 each)
    op: StreamOp

    def __init__(self, kind: Kind,
                 source_p: int,
                 dest_ps: tuple[int, ...],
                 data: Any = None,
                 com: int = 0,
                 id: int = 0,
                 sno: int = 0,
                 segno: int = 0,
                 source_n: int = 0,
                 dest_ns: tuple[int, ...] = (),
                 op: StreamOp = StreamOp.SEGMENT) -> None:
        self.kind = kind
        self.source_p = source_p
        self.dest_ps = dest_ps
        self.data = data
        self.com = com
        self.id = id
        self.sno = sno
        self.segno = segno
        self.source_n = source_n
        self.dest_ns = dest_ns
        self.op = op


class Control(FrozenRecord):
    """One CMP message: a type and a msgpack-able body."""

    __slots__ = ("type", "body")
    type: MsgType
    body: dict[str, Any]

    def __init__(self, type: MsgType, body: dict[str, Any]) -> None:
        init_field(self, "type", type)
        init_field(self, "body", body)


class Limits(FrozenRecord):
    """Caps that bound what a decoder accepts (and an encoder produces)."""

    __slots__ = ("max_frame", "max_dests", "max_ndim", "max_pickle_buffers", "max_control")
    max_frame: int  # body bytes of one frame
    max_dests: int  # entries in each of dest_ns / dest_ps
    max_ndim: int
    max_pickle_buffers: int
    max_control: int  # body bytes of a control frame

    def __init__(self, max_frame: int = 1 << 30,
                 max_dests: int = 4096,
                 max_ndim: int = 32,
                 max_pickle_buffers: int = 256,
                 max_control: int = 1 << 20) -> None:
        init_field(self, "max_frame", max_frame)
        init_field(self, "max_dests", max_dests)
        init_field(self, "max_ndim", max_ndim)
        init_field(self, "max_pickle_buffers", max_pickle_buffers)
        init_field(self, "max_control", max_control)
        self._check()

    def _check(self) -> None:
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
    MsgType.STREAM_DONES: {"node": int, "snos": list},
    MsgType.STOP_ACK: {"rank": int},
    MsgType.TABLE_REQ: {"req": int, "op": str, "args": list},
    MsgType.TABLE_ACK: {"req": int, "ok": bool, "error": str},
    MsgType.CREDIT_ASK: {"pids": list},
    MsgType.STALL: {"edges": list, "idle": list},
    MsgType.DEADLOCK: {"cycle": list},
    MsgType.RELAY: {"origin": int, "dest": int, "frame": bytes},
    MsgType.LOOKUP: {"name": str, "pid": int},
    MsgType.CARRY: {"req": int, "origin": int, "name": str, "pid": int, "source": str, "spid": int,
                    "kind": int, "com": int, "data": bytes, "rows": list},
    MsgType.CARRIED: {"req": int, "ok": bool, "name": str, "rows": list},
    MsgType.CLOSING: {"rank": int},
    MsgType.LAST_OPEN: {"rank": int},
    MsgType.LOST: {"rank": int, "origin": int, "span": int, "message": str},
}

#: the level-1 packet header: version u8 | msgtype u8 | count u16 | body_len u32
L1 = struct.Struct("<BBHI")

# int -> member through a dict: calling an IntEnum costs ~10x more.
_MSGTYPES = {int(m): m for m in MsgType}
_BLOCKS = frozenset((int(MsgType.BP), int(MsgType.BPS)))
_CONTROL = frozenset(int(m) for m in CONTROL_SCHEMAS)


def byte_view(buf: Buffer) -> memoryview:
    """``buf`` as a flat unsigned-byte memoryview (no copy); ProtocolError
    for a buffer that cannot be one (not contiguous, not bytes-like)."""
    try:
        mv = memoryview(buf)
        if mv.ndim != 1 or mv.itemsize != 1 or mv.format != "B":
            mv = mv.cast("B")  # needs C-contiguity
    except (TypeError, ValueError, BufferError) as exc:
        raise ProtocolError(f"not a contiguous bytes-like buffer: {exc}") from exc
    return mv


def read_header(mv: memoryview, limits: Limits, off: int = 0) -> tuple[MsgType, int, int]:
    """Check the level-1 header at ``off``: (message type, record count,
    body length), or ProtocolError (bad version or type, a count the type
    does not allow, a body beyond ``limits``)."""
    if len(mv) - off < L1.size:
        raise ProtocolError(f"frame of {len(mv) - off} bytes is shorter than its header")
    version, mtype, count, body_len = L1.unpack_from(mv, off)
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
    mt, _, body_len = read_header(byte_view(buf), limits)
    return mt, body_len


def frame_size(parts: Sequence[Buffer]) -> int:
    """Total bytes of an encoded frame (all its parts)."""
    return sum(memoryview(p).nbytes for p in parts)
