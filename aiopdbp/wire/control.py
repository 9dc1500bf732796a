"""Typed control messages (MESP's CMP, paper section 4.1), sans-I/O.

One small class per message kind, with its encoding, decoding and handling
together (in the spirit of ucx-py's ``CtrlMsg``): ``msg.encode()`` gives the
frame; :func:`decode_control` turns a frame back into the right class (or
raises :class:`~aiopdbp.errors.ProtocolError`, nothing else).  Each class
names its handler method (``HANDLER``); the receiving host's
:class:`~aiopdbp.hosts.channel.Dispatch` maps each class to the one part that
owns it, checked at construction (``msg.handle(handler, src)`` does the same
for one handler object).  Like the codec, this module imports neither asyncio
nor mpi4py.

The paper's kinds carry the operations they name:

====================  ==========================================================
``RegMsg``            a host asks the name's home host to register a GP, with
                      its pipe when it has one; ``ARMsg`` answers (pid or error)
``APipeMsg``          bind a pipe to a GP; ``AAPMsg`` answers
``ReleaseMsg``        release a GP's pipe, or free the GP; ``AAPMsg`` answers
``CancelMsg``         undo what a request did, when its requester gave up
                      waiting (a cancelled ``register``/``apply_pipe``)
``HInfoMsg``          a host's info to rank 0; all hosts' info back (Fig. 6)
``MBInfoMsg``         all GP-pipe bindings, sent by rank 0 at initialisation
====================  ==========================================================

and the runtime's own: ``TableMsg`` (one table update, sent by a name's home
to the hosts that use the name), ``TableReqMsg``/``TableAckMsg`` (any other table update, and the ones a host asks for without waiting),
``CreditMsg`` and ``CreditAskMsg`` (per-destination flow control), ``StallMsg``
and ``DeadlockMsg`` (:mod:`aiopdbp.stall`), ``StreamDoneMsg``,
``StreamDonesMsg``, ``StreamCreditMsg``, ``ByeMsg``, ``StopMsg`` and ``StopAckMsg``;
``ClosingMsg`` and ``LastOpenMsg`` tell rank 0 which ranks closed their node and
the one rank left open that it is (:mod:`aiopdbp.hosts.closing`);
``RelayMsg`` carries a host's info up the hosts' tree; ``LookupMsg`` asks
a name's home host for the name (:mod:`aiopdbp.hosts.names`), and ``CarryMsg``
does so carrying a first message to it, answered by ``CarriedMsg``
(:mod:`aiopdbp.hosts.carry`); ``LostMsg``
spreads a lost host's name from the rank that noticed it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from aiopdbp.wire.codec import decode, encode_control
from aiopdbp.wire.mesp import Buffer, Control, MsgType
from aiopdbp.errors import ProtocolError
from aiopdbp.records import FrozenRecord, init_field

__all__ = [
    "AAPMsg", "APipeMsg", "ARMsg", "ByeMsg", "CancelMsg", "ClosingMsg", "ControlHandler", "CreditAskMsg", "CreditMsg",
    "CtrlMsg", "DeadlockMsg", "StallMsg",
    "CarriedMsg", "CarryMsg", "HInfoMsg", "LastOpenMsg", "LookupMsg", "LostMsg", "MBInfoMsg", "RegMsg", "RelayMsg", "ReleaseMsg", "StopAckMsg",
    "StopMsg", "StreamCreditMsg",
    "StreamDoneMsg", "StreamDonesMsg", "TableAckMsg", "TableMsg", "TableReqMsg", "credit_frame", "decode_control",
]


class ControlHandler(Protocol):
    """What the runtime does with each control message (``src``: the sender's rank)."""

    def on_reg(self, src: int, msg: RegMsg) -> None: ...
    def on_apipe(self, src: int, msg: APipeMsg) -> None: ...
    def on_release(self, src: int, msg: ReleaseMsg) -> None: ...
    def on_cancel(self, src: int, msg: CancelMsg) -> None: ...
    def on_ar(self, src: int, msg: ARMsg) -> None: ...
    def on_aap(self, src: int, msg: AAPMsg) -> None: ...
    def on_hinfo(self, src: int, msg: HInfoMsg) -> None: ...
    def on_mbinfo(self, src: int, msg: MBInfoMsg) -> None: ...
    def on_table(self, src: int, msg: TableMsg) -> None: ...
    def on_table_req(self, src: int, msg: TableReqMsg) -> None: ...
    def on_table_ack(self, src: int, msg: TableAckMsg) -> None: ...
    def on_credit(self, src: int, msg: CreditMsg) -> None: ...
    def on_credit_ask(self, src: int, msg: CreditAskMsg) -> None: ...
    def on_stall(self, src: int, msg: StallMsg) -> None: ...
    def on_deadlock(self, src: int, msg: DeadlockMsg) -> None: ...
    def on_stream_done(self, src: int, msg: StreamDoneMsg) -> None: ...
    def on_stream_credit(self, src: int, msg: StreamCreditMsg) -> None: ...
    def on_stream_dones(self, src: int, msg: StreamDonesMsg) -> None: ...
    def on_bye(self, src: int, msg: ByeMsg) -> None: ...
    def on_closing(self, src: int, msg: ClosingMsg) -> None: ...
    def on_last_open(self, src: int, msg: LastOpenMsg) -> None: ...
    def on_stop(self, src: int, msg: StopMsg) -> None: ...
    def on_stop_ack(self, src: int, msg: StopAckMsg) -> None: ...
    def on_relay(self, src: int, msg: RelayMsg) -> None: ...
    def on_lookup(self, src: int, msg: LookupMsg) -> None: ...
    def on_carry(self, src: int, msg: CarryMsg) -> None: ...
    def on_carried(self, src: int, msg: CarriedMsg) -> None: ...
    def on_lost(self, src: int, msg: LostMsg) -> None: ...


class CtrlMsg(FrozenRecord):
    """Base of the control message classes: frame in, frame out, one handler.

    Each kind is a frozen record (:mod:`aiopdbp.records`): its fields are
    its ``__slots__``, its ``__init__`` is written out, and equality, hash
    and repr are a frozen dataclass's -- without the methods a dataclass
    compiles at import, on every rank."""

    TYPE: ClassVar[MsgType]
    HANDLER: ClassVar[str]
    __slots__ = ()

    def body(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.field_names()}

    def encode(self) -> bytes:
        """The frame: a level-1 header and the msgpack body."""
        return encode_control(Control(self.TYPE, self.body()))

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        """Build from a body the codec checked against the schema."""
        return cls(*[body[name] for name in cls.field_names()])

    def handle(self, handler: ControlHandler, src: int) -> None:
        getattr(handler, self.HANDLER)(src, self)


_CLASSES: dict[MsgType, type[CtrlMsg]] = {}


def _register(cls: type[CtrlMsg]) -> type[CtrlMsg]:
    _CLASSES[cls.TYPE] = cls
    return cls


def _pairs(value: Any, what: str) -> list[tuple[int, int]]:
    out = []
    for item in value:
        if (not isinstance(item, (list, tuple)) or len(item) != 2
                or not all(type(x) is int for x in item)):
            raise ProtocolError(f"{what} entries are [int, int] pairs")
        out.append((item[0], item[1]))
    return out


# --------------------------------------------------------- paper kinds (CMP)
@_register
class RegMsg(CtrlMsg):
    """Register GP ``name`` living on host ``node`` (``pipe`` -1: none yet)."""

    TYPE: ClassVar[MsgType] = MsgType.REG
    HANDLER: ClassVar[str] = "on_reg"

    __slots__ = ("req", "name", "ptype", "node", "pipe")
    req: int
    name: str
    ptype: int
    node: int
    pipe: int

    def __init__(self, req: int, name: str, ptype: int, node: int, pipe: int) -> None:
        init_field(self, "req", req)
        init_field(self, "name", name)
        init_field(self, "ptype", ptype)
        init_field(self, "node", node)
        init_field(self, "pipe", pipe)


@_register
class ARMsg(CtrlMsg):
    """Answer to :class:`RegMsg`: the pid, or why not (``etype``: error class)."""

    TYPE: ClassVar[MsgType] = MsgType.AR
    HANDLER: ClassVar[str] = "on_ar"

    __slots__ = ("req", "ok", "pid", "error", "etype")
    req: int
    ok: bool
    pid: int
    error: str
    etype: str

    def __init__(self, req: int, ok: bool, pid: int, error: str, etype: str) -> None:
        init_field(self, "req", req)
        init_field(self, "ok", ok)
        init_field(self, "pid", pid)
        init_field(self, "error", error)
        init_field(self, "etype", etype)


@_register
class APipeMsg(CtrlMsg):
    """Bind pipe ``pipe`` of the GP's host to GP ``pid``."""

    TYPE: ClassVar[MsgType] = MsgType.APIPE
    HANDLER: ClassVar[str] = "on_apipe"

    __slots__ = ("req", "pid", "pipe")
    req: int
    pid: int
    pipe: int

    def __init__(self, req: int, pid: int, pipe: int) -> None:
        init_field(self, "req", req)
        init_field(self, "pid", pid)
        init_field(self, "pipe", pipe)


@_register
class ReleaseMsg(CtrlMsg):
    """Release GP ``pid``'s pipe; with ``free`` also unregister the GP."""

    TYPE: ClassVar[MsgType] = MsgType.RELEASE
    HANDLER: ClassVar[str] = "on_release"

    __slots__ = ("req", "pid", "free")
    req: int
    pid: int
    free: bool

    def __init__(self, req: int, pid: int, free: bool) -> None:
        init_field(self, "req", req)
        init_field(self, "pid", pid)
        init_field(self, "free", free)


@_register
class AAPMsg(CtrlMsg):
    """Answer to :class:`APipeMsg` and :class:`ReleaseMsg`."""

    TYPE: ClassVar[MsgType] = MsgType.AAP
    HANDLER: ClassVar[str] = "on_aap"

    __slots__ = ("req", "ok", "pipe", "error")
    req: int
    ok: bool
    pipe: int
    error: str

    def __init__(self, req: int, ok: bool, pipe: int, error: str) -> None:
        init_field(self, "req", req)
        init_field(self, "ok", ok)
        init_field(self, "pipe", pipe)
        init_field(self, "error", error)


@_register
class CancelMsg(CtrlMsg):
    """The requester of ``req`` gave up: undo what it did to GP ``pid``
    (free a GP registered for it, release a pipe bound for it)."""

    TYPE: ClassVar[MsgType] = MsgType.CANCEL
    HANDLER: ClassVar[str] = "on_cancel"

    __slots__ = ("req", "pid")
    req: int
    pid: int

    def __init__(self, req: int, pid: int) -> None:
        init_field(self, "req", req)
        init_field(self, "pid", pid)


@_register
class HInfoMsg(CtrlMsg):
    """Hosts' info ``[nid, name, ip, ntype]``: one entry from a host to rank
    0 (S-HOSTInfo), every host's from rank 0 (ALL-HOSTInfo); ``gp_window``:
    the sender's per-destination credit window in bytes."""

    TYPE: ClassVar[MsgType] = MsgType.HINFO
    HANDLER: ClassVar[str] = "on_hinfo"

    __slots__ = ("hosts", "gp_window")
    hosts: list[list[Any]]
    gp_window: int

    def __init__(self, hosts: list[list[Any]], gp_window: int) -> None:
        init_field(self, "hosts", hosts)
        init_field(self, "gp_window", gp_window)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        hosts = body["hosts"]
        for entry in hosts:
            if not (isinstance(entry, list) and len(entry) in (4, 5) and type(entry[0]) is int
                    and isinstance(entry[1], str) and isinstance(entry[2], str)
                    and type(entry[3]) is int):
                raise ProtocolError("HINFO host entries are [nid, name, ip, ntype(, gp_window)]")
        if body["gp_window"] <= 0:
            raise ProtocolError("HINFO gp_window must be positive")
        return cls(hosts, body["gp_window"])


@_register
class MBInfoMsg(CtrlMsg):
    """All GP-pipe bindings (ALL-MBInfo): ``[pid, name, ptype, node, pipe]``."""

    TYPE: ClassVar[MsgType] = MsgType.MBINFO
    HANDLER: ClassVar[str] = "on_mbinfo"

    __slots__ = ("bindings",)
    bindings: list[list[Any]]

    def __init__(self, bindings: list[list[Any]]) -> None:
        init_field(self, "bindings", bindings)


# ---------------------------------------------------------- runtime kinds
@_register
class TableMsg(CtrlMsg):
    """A table update from the home host of the name it changes (``seq`` 0),
    or of a GP from its own host to a host it told the GP's row (``seq`` 1,
    :mod:`aiopdbp.hosts.namerows`)."""

    TYPE: ClassVar[MsgType] = MsgType.TABLE
    HANDLER: ClassVar[str] = "on_table"

    __slots__ = ("seq", "op", "args")
    seq: int
    op: str
    args: list[Any]

    def __init__(self, seq: int, op: str, args: list[Any]) -> None:
        init_field(self, "seq", seq)
        init_field(self, "op", op)
        init_field(self, "args", args)


@_register
class TableReqMsg(CtrlMsg):
    """A table update asked of rank 0 that has no paper message of its own
    (and the updates a host asks for without waiting: ``commit_nowait``)."""

    TYPE: ClassVar[MsgType] = MsgType.TABLE_REQ
    HANDLER: ClassVar[str] = "on_table_req"

    __slots__ = ("req", "op", "args")
    req: int
    op: str
    args: list[Any]

    def __init__(self, req: int, op: str, args: list[Any]) -> None:
        init_field(self, "req", req)
        init_field(self, "op", op)
        init_field(self, "args", args)


@_register
class TableAckMsg(CtrlMsg):
    """Rank 0's answer to :class:`TableReqMsg` (after its broadcast)."""

    TYPE: ClassVar[MsgType] = MsgType.TABLE_ACK
    HANDLER: ClassVar[str] = "on_table_ack"

    __slots__ = ("req", "ok", "error")
    req: int
    ok: bool
    error: str

    def __init__(self, req: int, ok: bool, error: str) -> None:
        init_field(self, "req", req)
        init_field(self, "ok", ok)
        init_field(self, "error", error)


@_register
class CreditMsg(CtrlMsg):
    """Per-destination credit: ``(pid, bytes)`` the sender may send again."""

    TYPE: ClassVar[MsgType] = MsgType.CREDIT
    HANDLER: ClassVar[str] = "on_credit"

    __slots__ = ("grants",)
    grants: list[tuple[int, int]]

    def __init__(self, grants: list[tuple[int, int]]) -> None:
        init_field(self, "grants", grants)

    def body(self) -> dict[str, Any]:
        return {"grants": [list(g) for g in self.grants]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        grants = _pairs(body["grants"], "CREDIT grants")
        if any(n <= 0 for _, n in grants):
            raise ProtocolError("CREDIT grants must be positive")
        return cls(grants)


_CREDIT_FRAMES: dict[tuple[tuple[int, int], ...], bytes] = {}


def credit_frame(grants: list[tuple[int, int]]) -> bytes:
    """``CreditMsg(grants).encode()``, kept: a request/response of one size
    carries the same grant every time (the encoder costs ~20 dict lookups)."""
    key = tuple(grants)
    frame = _CREDIT_FRAMES.get(key)
    if frame is None:
        if len(_CREDIT_FRAMES) >= 64:
            _CREDIT_FRAMES.clear()
        frame = _CREDIT_FRAMES[key] = CreditMsg(grants).encode()
    return frame


@_register
class CreditAskMsg(CtrlMsg):
    """Senders are parked for credit towards ``pids``: return what is owed
    below the threshold once those GPs have taken what waits for them."""

    TYPE: ClassVar[MsgType] = MsgType.CREDIT_ASK
    HANDLER: ClassVar[str] = "on_credit_ask"

    __slots__ = ("pids",)
    pids: list[int]

    def __init__(self, pids: list[int]) -> None:
        init_field(self, "pids", pids)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        pids = body["pids"]
        if not pids or any(type(p) is not int or p <= 0 for p in pids):
            raise ProtocolError("CREDIT_ASK pids must be positive ints")
        return cls(list(pids))


def _edges(value: Any, what: str) -> list[list[Any]]:
    """Wait-for edges: ``[gp, rank, waits_for, waits_for_rank, resource, seconds]``."""
    out = []
    for e in value:
        if (not isinstance(e, (list, tuple)) or len(e) != 6 or not isinstance(e[0], str)
                or type(e[1]) is not int or not isinstance(e[2], str) or type(e[3]) is not int
                or not isinstance(e[4], str) or not isinstance(e[5], (int, float))):
            raise ProtocolError(f"{what}: bad wait edge {e!r}")
        out.append(list(e))
    return out


@_register
class StallMsg(CtrlMsg):
    """A rank's view for rank 0's deadlock detector: its stale waits
    (``edges``) and its GPs that hold data and do not read (``idle``)."""

    TYPE: ClassVar[MsgType] = MsgType.STALL
    HANDLER: ClassVar[str] = "on_stall"

    __slots__ = ("edges", "idle")
    edges: list[list[Any]]
    idle: list[str]

    def __init__(self, edges: list[list[Any]], idle: list[str]) -> None:
        init_field(self, "edges", edges)
        init_field(self, "idle", idle)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        idle = body["idle"]
        if any(not isinstance(n, str) for n in idle):
            raise ProtocolError("STALL idle must be names")
        return cls(_edges(body["edges"], "STALL"), list(idle))


@_register
class DeadlockMsg(CtrlMsg):
    """Rank 0 found this cycle of waits (edges as in :class:`StallMsg`)."""

    TYPE: ClassVar[MsgType] = MsgType.DEADLOCK
    HANDLER: ClassVar[str] = "on_deadlock"

    __slots__ = ("cycle",)
    cycle: list[list[Any]]

    def __init__(self, cycle: list[list[Any]]) -> None:
        init_field(self, "cycle", cycle)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        cycle = _edges(body["cycle"], "DEADLOCK")
        if not cycle:
            raise ProtocolError("DEADLOCK with an empty cycle")
        return cls(cycle)


@_register
class StreamDoneMsg(CtrlMsg):
    """Stream ``(node, sno)``'s receiver took it all (``ok``) or gave up."""

    TYPE: ClassVar[MsgType] = MsgType.STREAM_DONE
    HANDLER: ClassVar[str] = "on_stream_done"

    __slots__ = ("node", "sno", "ok", "error")
    node: int
    sno: int
    ok: bool
    error: str

    def __init__(self, node: int, sno: int, ok: bool, error: str) -> None:
        init_field(self, "node", node)
        init_field(self, "sno", sno)
        init_field(self, "ok", ok)
        init_field(self, "error", error)


@_register
class StreamCreditMsg(CtrlMsg):
    """Stream ``(node, sno)``'s receiver consumed ``segments`` segments."""

    TYPE: ClassVar[MsgType] = MsgType.STREAM_CREDIT
    HANDLER: ClassVar[str] = "on_stream_credit"

    __slots__ = ("node", "sno", "segments")
    node: int
    sno: int
    segments: int

    def __init__(self, node: int, sno: int, segments: int) -> None:
        init_field(self, "node", node)
        init_field(self, "sno", sno)
        init_field(self, "segments", segments)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        if body["segments"] <= 0:
            raise ProtocolError("STREAM_CREDIT segments must be positive")
        return cls(body["node"], body["sno"], body["segments"])


@_register
class StreamDonesMsg(CtrlMsg):
    """Streams ``(node, sno)``, one per ``sno`` of ``snos``: their receivers
    took them whole.  The DONEs of one loop iteration to one host travel in
    one message (a failed stream's DONE is a :class:`StreamDoneMsg` of its own)."""

    TYPE: ClassVar[MsgType] = MsgType.STREAM_DONES
    HANDLER: ClassVar[str] = "on_stream_dones"

    __slots__ = ("node", "snos")
    node: int
    snos: list[int]

    def __init__(self, node: int, snos: list[int]) -> None:
        init_field(self, "node", node)
        init_field(self, "snos", snos)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        snos = body["snos"]
        if not snos or any(type(s) is not int for s in snos):
            raise ProtocolError("STREAM_DONES snos must be a non-empty list of ints")
        return cls(body["node"], list(snos))


@_register
class ByeMsg(CtrlMsg):
    """Graceful close: the sender sent ``sent`` data messages to this host."""

    TYPE: ClassVar[MsgType] = MsgType.BYE
    HANDLER: ClassVar[str] = "on_bye"

    __slots__ = ("sent",)
    sent: int

    def __init__(self, sent: int) -> None:
        init_field(self, "sent", sent)


class _RankMsg(CtrlMsg):
    """A control message that names one rank, ``rank`` (never negative)."""

    __slots__ = ("rank",)
    rank: int

    def __init__(self, rank: int) -> None:
        init_field(self, "rank", rank)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        if body["rank"] < 0:
            raise ProtocolError(f"{cls.TYPE.name} names rank {body['rank']}")
        return cls(body["rank"])


@_register
class ClosingMsg(_RankMsg):
    """To rank 0: rank ``rank`` (the sender) closes its node and has sent
    everything it will send."""

    TYPE: ClassVar[MsgType] = MsgType.CLOSING
    HANDLER: ClassVar[str] = "on_closing"

    __slots__ = ()


@_register
class LastOpenMsg(_RankMsg):
    """From rank 0: every rank but ``rank`` (the receiver) has closed its node."""

    TYPE: ClassVar[MsgType] = MsgType.LAST_OPEN
    HANDLER: ClassVar[str] = "on_last_open"

    __slots__ = ()


@_register
class StopMsg(CtrlMsg):
    """Rank ``rank`` stops the job: ``kind`` "failed" or "interrupted";
    ``gp`` names the GP a failure left ("" when not known)."""

    TYPE: ClassVar[MsgType] = MsgType.ERROR
    HANDLER: ClassVar[str] = "on_stop"

    __slots__ = ("kind", "rank", "signal", "message", "gp")
    kind: str
    rank: int
    signal: int
    message: str
    gp: str

    def __init__(self, kind: str, rank: int, signal: int, message: str, gp: str = "") -> None:
        init_field(self, "kind", kind)
        init_field(self, "rank", rank)
        init_field(self, "signal", signal)
        init_field(self, "message", message)
        init_field(self, "gp", gp)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        if body["kind"] not in ("failed", "interrupted"):
            raise ProtocolError(f"unknown stop kind {body['kind']!r}")
        return cls(body["kind"], body["rank"], body["signal"], body["message"], body["gp"])


@_register
class StopAckMsg(CtrlMsg):
    """Rank ``rank`` heard of a failure and stops."""

    TYPE: ClassVar[MsgType] = MsgType.STOP_ACK
    HANDLER: ClassVar[str] = "on_stop_ack"

    __slots__ = ("rank",)
    rank: int

    def __init__(self, rank: int) -> None:
        init_field(self, "rank", rank)


@_register
class RelayMsg(CtrlMsg):
    """A control frame from host ``origin`` for host ``dest``, passed hop by
    hop along the hosts' tree (:mod:`aiopdbp.hosts.sequencer`) so that rank 0
    talks to a few hosts, not to every one."""

    TYPE: ClassVar[MsgType] = MsgType.RELAY
    HANDLER: ClassVar[str] = "on_relay"

    __slots__ = ("origin", "dest", "frame")
    origin: int
    dest: int
    frame: bytes

    def __init__(self, origin: int, dest: int, frame: bytes) -> None:
        init_field(self, "origin", origin)
        init_field(self, "dest", dest)
        init_field(self, "frame", frame)


@_register
class LookupMsg(CtrlMsg):
    """To a name's home host: send this host GP ``name``'s registration and
    every later update of it (``pid`` 0); or, ``name`` empty, the name of GP
    ``pid`` (:mod:`aiopdbp.hosts.names`)."""

    TYPE: ClassVar[MsgType] = MsgType.LOOKUP
    HANDLER: ClassVar[str] = "on_lookup"

    __slots__ = ("name", "pid")
    name: str
    pid: int

    def __init__(self, name: str, pid: int) -> None:
        init_field(self, "name", name)
        init_field(self, "pid", pid)


@_register
class CarryMsg(CtrlMsg):
    """A lookup of GP ``name`` that carries the first message to it
    (:mod:`aiopdbp.hosts.carry`): to the name's home (``pid`` 0), which
    subscribes the sender's host as ``LookupMsg`` does; then from the home to
    the GP's host (``pid``: the GP, ``origin``: the sender's host), which
    delivers it and answers ``origin`` with ``CarriedMsg(req)``.  The message: ``source``/``spid`` (the sending
    GP), ``kind``, ``com``, ``data``; ``rows``: the sending GP's
    registration, as a ``proc_names`` announcement carries it."""

    TYPE: ClassVar[MsgType] = MsgType.CARRY
    HANDLER: ClassVar[str] = "on_carry"

    __slots__ = ("req", "origin", "name", "pid", "source", "spid", "kind", "com", "data", "rows")
    req: int
    origin: int
    name: str
    pid: int
    source: str
    spid: int
    kind: int
    com: int
    data: bytes
    rows: list[Any]

    def __init__(self, req: int, origin: int, name: str, pid: int, source: str, spid: int, kind: int,
                 com: int, data: bytes, rows: list[Any]) -> None:
        init_field(self, "req", req)
        init_field(self, "origin", origin)
        init_field(self, "name", name)
        init_field(self, "pid", pid)
        init_field(self, "source", source)
        init_field(self, "spid", spid)
        init_field(self, "kind", kind)
        init_field(self, "com", com)
        init_field(self, "data", data)
        init_field(self, "rows", rows)


@_register
class CarriedMsg(CtrlMsg):
    """The answer to carried message ``req`` (``CarryMsg``): delivered
    (``ok``), or not -- its sender sends it as any other.  From the GP's
    host, ``name`` (the GP's) and ``rows``: that host's GPs' registrations,
    as a ``proc_names`` announcement carries them (it keeps them current
    there from now on); from the name's home, which did not pass it on,
    ``name`` is empty."""

    TYPE: ClassVar[MsgType] = MsgType.CARRIED
    HANDLER: ClassVar[str] = "on_carried"

    __slots__ = ("req", "ok", "name", "rows")
    req: int
    ok: bool
    name: str
    rows: list[Any]

    def __init__(self, req: int, ok: bool, name: str, rows: list[Any]) -> None:
        init_field(self, "req", req)
        init_field(self, "ok", ok)
        init_field(self, "name", name)
        init_field(self, "rows", rows)


@_register
class LostMsg(CtrlMsg):
    """Rank ``origin`` noticed that rank ``rank`` is lost (``message``: its
    error); the receiver passes it on to the ``span`` ring positions that
    start at its own (:mod:`aiopdbp.hosts.failure`, "Liveness")."""

    TYPE: ClassVar[MsgType] = MsgType.LOST
    HANDLER: ClassVar[str] = "on_lost"

    __slots__ = ("rank", "origin", "span", "message")
    rank: int
    origin: int
    span: int
    message: str

    def __init__(self, rank: int, origin: int, span: int, message: str) -> None:
        init_field(self, "rank", rank)
        init_field(self, "origin", origin)
        init_field(self, "span", span)
        init_field(self, "message", message)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CtrlMsg:
        if min(body["rank"], body["origin"]) < 0 or body["span"] < 1:
            raise ProtocolError(f"LOST names rank {body['rank']} from {body['origin']} over span {body['span']}")
        return cls(body["rank"], body["origin"], body["span"], body["message"])


# ------------------------------------------------------------------ decoding
def decode_control(buf: Buffer) -> CtrlMsg:
    """The control message in one frame; :class:`ProtocolError` otherwise."""
    items = decode(buf)
    item = items[0]
    if not isinstance(item, Control):
        raise ProtocolError("a data frame on the control channel")
    cls = _CLASSES.get(item.type)
    if cls is None:  # pragma: no cover - every control type has a class
        raise ProtocolError(f"no control message class for {item.type.name}")
    try:
        return cls.from_body(item.body)
    except ProtocolError:
        raise
    except Exception as exc:  # a body the schema let through but the class refuses
        raise ProtocolError(f"bad {item.type.name} body: {exc!r}") from exc
