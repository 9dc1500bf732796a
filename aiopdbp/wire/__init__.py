"""The wire: what travels between hosts, as bytes (SPEC sections 5, 8, 9).

Theory of operation
-------------------
Sans-I/O throughout: nothing here imports asyncio or mpi4py, sends or
receives.  Encoders turn objects into lists of buffers (zero copy where the
caller's data is C-contiguous); decoders turn the bytes of one frame back
into objects or raise :class:`~aiopdbp.errors.ProtocolError` -- never
anything else, never a hang, never an allocation beyond :class:`Limits`.

Every frame starts with the 8-byte level-1 header (version, message type,
record count, body length); each level parses only its own layer.

* :mod:`~aiopdbp.wire.mesp` -- the vocabulary: :class:`CDU` (with its
  :class:`Kind` and :class:`StreamOp`), :class:`MsgType`, :class:`Control`,
  :class:`Limits`, the control schemas, and the level-1 header and the frame
  layout (levels 1-3) it documents.
* :mod:`~aiopdbp.wire.payload` -- level 3: bytes, numpy arrays (zero-copy
  views on decode) and opt-in pickles.
* :mod:`~aiopdbp.wire.shorts` -- BPS frames: compact records for the
  commonest CDU (a short or command message to one GP with a small payload).
* :mod:`~aiopdbp.wire.codec` -- CDU frames (one CDU, a BP block of many,
  a frame split into header and payload), control frames, :func:`decode`
  and the incremental :class:`Decoder`.
* :mod:`~aiopdbp.wire.control` -- one typed class per control message kind
  (MESP's CMP) on top of the control frames.
* :mod:`~aiopdbp.wire.message` -- :class:`Message`, what a GP receives, and
  the flow-control credit a message costs.

The modules import one another in that order (mesp, then payload and
shorts, then codec, then control); message needs only mesp.
"""

from __future__ import annotations

from aiopdbp.wire.codec import (
    Decoder,
    bp_header,
    decode,
    decode_split,
    encode_block,
    encode_cdu,
    encode_control,
    encode_record,
    encode_small_into,
    encode_split,
)
from aiopdbp.wire.mesp import (
    ALIGN,
    CDU,
    CONTROL_SCHEMAS,
    DEFAULT_LIMITS,
    VERSION,
    Buffer,
    Control,
    Kind,
    Limits,
    MsgType,
    Payload,
    StreamOp,
    frame_size,
    peek_header,
)
from aiopdbp.wire.shorts import SHORT, SHORT_MAX, SHORT_NONE, ShortRun, bps_header, decode_shorts, encode_shorts
from aiopdbp.wire.control import (
    AAPMsg,
    APipeMsg,
    ARMsg,
    ByeMsg,
    CancelMsg,
    ControlHandler,
    CreditAskMsg,
    CreditMsg,
    CtrlMsg,
    DeadlockMsg,
    HInfoMsg,
    MBInfoMsg,
    RegMsg,
    ReleaseMsg,
    StallMsg,
    StopAckMsg,
    StopMsg,
    StreamCreditMsg,
    StreamDoneMsg,
    StreamDonesMsg,
    TableAckMsg,
    TableMsg,
    TableReqMsg,
    decode_control,
)
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message, credit_cost

__all__ = [
    # the vocabulary (aiopdbp.wire.mesp)
    "ALIGN", "Buffer", "CDU", "CONTROL_SCHEMAS", "Control", "DEFAULT_LIMITS", "Kind", "Limits",
    "MsgType", "Payload", "StreamOp", "VERSION",
    # frames (aiopdbp.wire.codec, .shorts)
    "Decoder", "bp_header", "decode", "decode_split", "encode_block", "encode_cdu",
    "encode_control", "encode_record", "encode_small_into", "encode_split", "frame_size",
    "peek_header",
    "SHORT", "SHORT_MAX", "SHORT_NONE", "ShortRun", "bps_header", "decode_shorts",
    "encode_shorts",
    # typed control messages (aiopdbp.wire.control)
    "AAPMsg", "APipeMsg", "ARMsg", "ByeMsg", "CancelMsg", "ControlHandler", "CreditAskMsg",
    "CreditMsg", "CtrlMsg", "DeadlockMsg", "HInfoMsg", "MBInfoMsg", "RegMsg", "ReleaseMsg",
    "StallMsg", "StopAckMsg", "StopMsg", "StreamCreditMsg", "StreamDoneMsg", "StreamDonesMsg", "TableAckMsg",
    "TableMsg", "TableReqMsg", "decode_control",
    # what a GP receives (aiopdbp.wire.message)
    "CREDIT_OVERHEAD", "Message", "credit_cost",
]
