"""The home's side of the names: the records of the names homed on this host.

A name's home (:func:`aiopdbp.hosts.names.home_of`) alone registers it,
gives its pid, applies its updates in the one order it receives them, and
sends each to the hosts subscribed to the name -- this host included,
through ``apply``, the subscriber's side (:class:`~aiopdbp.hosts.names.NameService`).
The theory of operation is in :mod:`aiopdbp.hosts.names`; this module is
the part that answers other hosts' requests (``RegMsg``, ``APipeMsg``,
``ReleaseMsg``, ``TableReqMsg``, ``CancelMsg``, ``LookupMsg``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiopdbp.errors import DuplicateProcessError, PDBPError, UnknownProcessError
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.tables import ProcGone, ProcReg
from aiopdbp.records import Record
from aiopdbp.wire.control import (
    AAPMsg,
    APipeMsg,
    ARMsg,
    CancelMsg,
    LookupMsg,
    RegMsg,
    ReleaseMsg,
    TableAckMsg,
    TableMsg,
    TableReqMsg,
)

__all__ = ["NameHome", "PID_OPS"]

#: the updates a home applies to a registered GP (by pid)
PID_OPS = ("pipe_bind", "pipe_release", "proc_free")

#: applies one table update on this host (the subscriber's side)
ApplyFn = Callable[[str, list[Any]], None]


class _Record(Record):
    """A home's record of one name."""

    __slots__ = ("subs", "reg", "live")
    subs: set[int]  # hosts sent every update of it
    reg: ProcReg | None  # its last registration, its pipe kept current
    live: bool  # registered now (reg is kept after its free)

    def __init__(self, subs: set[int] | None = None, reg: ProcReg | None = None, live: bool = False) -> None:
        self.subs = set() if subs is None else subs
        self.reg = reg
        self.live = live


class NameHome:
    """The names homed on this host: their registrations, pids and subscribers."""

    def __init__(self, rank: int, size: int, channel: ControlChannel, apply: ApplyFn) -> None:
        self.rank = rank
        self.size = size
        self._channel = channel
        self._apply = apply
        self._homed: dict[str, _Record] = {}      # the names homed here
        self._homed_pids: dict[int, str] = {}     # every pid given here -> its name
        self._given = 0                           # registrations numbered so far

    def register(self, src: int, name: str, ptype: int, node: int, pipe: int | None) -> int:
        """Register ``name`` for host ``src``; its pid (raises if it is taken)."""
        rec = self._homed.get(name)
        if rec is None:
            rec = self._homed[name] = _Record()
        if rec.live:
            raise DuplicateProcessError(name)
        self._given += 1
        pid = (self._given - 1) * self.size + self.rank + 1
        rec.reg = ProcReg(name, ptype, node, pipe, pid)
        rec.live = True
        rec.subs.add(src)
        self._homed_pids[pid] = name
        self._push(rec, "proc_reg", list(rec.reg))
        return pid

    def homed(self, name: str) -> ProcReg | None:
        """The registration of ``name`` (homed here) when it is registered now."""
        rec = self._homed.get(name)
        return rec.reg if rec is not None and rec.live else None

    def update(self, op: str, pid: int, pipe: int | None) -> Any:
        """Apply one update of a registered GP and send it to its subscribers."""
        name = self._homed_pids.get(pid)
        rec = None if name is None else self._homed.get(name)
        if rec is None or not rec.live or rec.reg is None or rec.reg.pid != pid:
            raise UnknownProcessError(f"pid {pid}")
        if op == "pipe_bind":
            rec.reg = rec.reg._replace(pipe=pipe)
            self._push(rec, op, [pid, pipe])
            return pipe
        if op == "pipe_release":
            old = rec.reg.pipe
            rec.reg = rec.reg._replace(pipe=None)
            self._push(rec, op, [pid])
            return old
        rec.live = False
        self._push(rec, op, [pid])
        return pid

    def _push(self, rec: _Record, op: str, args: list[Any]) -> None:
        for host in sorted(rec.subs):
            if host == self.rank:
                self._apply(op, args)
            else:
                self._channel.send(host, TableMsg(0, op, args))

    def subscribe(self, src: int, name: str) -> None:
        """``src`` gets ``name``'s registration (and free) now, if there was
        one, and every update of it from now on."""
        rec = self._homed.get(name)
        if rec is None:
            rec = self._homed[name] = _Record()
        rec.subs.add(src)
        reg = rec.reg
        if reg is None:
            return   # not registered yet: its registration will be pushed
        if rec.live:
            op, args = "proc_reg", list(reg)
        else:   # one update: registration and free in two, a reader could run between
            assert reg.pid is not None   # (a home's registrations carry the pid it gave)
            op, args = "proc_gone", list(ProcGone(reg.name, reg.ptype, reg.node, reg.pid))
        if src == self.rank:
            self._apply(op, args)
        else:
            self._channel.send(src, TableMsg(0, op, args))

    def _answer(self, op: str, pid: int, pipe: int | None = None) -> PDBPError | None:
        try:
            self.update(op, pid, pipe)
        except PDBPError as exc:
            return exc
        return None

    # ------------------------------------------------- the other hosts' requests
    def on_reg(self, src: int, msg: RegMsg) -> None:
        try:
            pid = self.register(src, msg.name, msg.ptype, msg.node, None if msg.pipe < 0 else msg.pipe)
        except PDBPError as exc:
            self._channel.send(src, ARMsg(msg.req, False, 0, str(exc), type(exc).__name__))
        else:
            self._channel.send(src, ARMsg(msg.req, True, pid, "", ""))

    def on_apipe(self, src: int, msg: APipeMsg) -> None:
        exc = self._answer("pipe_bind", msg.pid, msg.pipe)
        self._channel.send(src, AAPMsg(msg.req, exc is None, msg.pipe, "" if exc is None else str(exc)))

    def on_release(self, src: int, msg: ReleaseMsg) -> None:
        exc = self._answer("proc_free" if msg.free else "pipe_release", msg.pid)
        self._channel.send(src, AAPMsg(msg.req, exc is None, -1, "" if exc is None else str(exc)))

    def on_table_req(self, src: int, msg: TableReqMsg) -> None:
        if msg.op in PID_OPS and msg.args and type(msg.args[0]) is int:
            exc = self._answer(msg.op, msg.args[0], msg.args[1] if len(msg.args) > 1 else None)
        else:
            exc = PDBPError(f"table update {msg.op!r} is not asked of a home")
        if msg.req:
            self._channel.send(src, TableAckMsg(msg.req, exc is None, "" if exc is None else str(exc)))

    def on_cancel(self, src: int, msg: CancelMsg) -> None:
        name = self._homed_pids.get(msg.pid)
        rec = None if name is None else self._homed.get(name)
        if rec is not None and rec.live and rec.reg is not None and rec.reg.pid == msg.pid \
                and rec.reg.node == src:
            self._answer("proc_free", msg.pid)

    def on_lookup(self, src: int, msg: LookupMsg) -> None:
        if msg.name:
            self.subscribe(src, msg.name)
            return
        name = self._homed_pids.get(msg.pid)
        if name is None:
            return   # never given here: the asker keeps its placeholder
        if src == self.rank:
            self._apply("proc_name", [msg.pid, name])
        else:
            self._channel.send(src, TableMsg(0, "proc_name", [msg.pid, name]))
