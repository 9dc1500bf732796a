"""The system tables: NTA and PTA (SPEC section 2); the MTA row.

* **NTA** node table ``(Nid, Nname, Nip, Ntype)`` -- one row per host (rank).
* **PTA** process table ``(Pid, Pname, Ptype, PN)`` -- one row per generalized
  process; ``PN`` is the private pipe bound to it (``None`` while unbound) and
  ``node`` the host it lives on.
* **MTA** stream-mapping table ``(Pid, group, sno, PipeA, PipeB)`` -- one row
  per live data stream: the public pipe ``PipeA`` on the sending host bound to
  the private pipe ``PipeB`` on the receiving host.  **Not replicated** (a
  departure from SPEC section 2): only the stream's two hosts need the row,
  so each keeps its half in :attr:`aiopdbp.streams.table.StreamTable.mta`
  (:class:`StreamEntry`) and a stream is opened and closed by those two hosts
  alone -- no stream waits on rank 0 or queues behind the streams of others.

Every change goes through :meth:`Tables.apply`, the *single point of update*.
An update is a plain ``(op, args)`` tuple, so the multi-host runtime can send
it between hosts.  The NTA is the same on every host (set at start-up).  The
PTA is **not replicated** on every host (a departure from SPEC section 2,
made so that a registration costs O(1) messages, not one per host): each
name is kept by its home host (:mod:`aiopdbp.hosts.names`), which orders its
updates, gives its pid (``proc_reg``'s ``pid``) and sends them to the hosts
that registered or looked the name up; so a host's PTA holds the names it
uses, each the same as on every other host that holds it, and the name rule
(unique in the job; a send waits for its name; a freed name fails) holds as
before.  ``proc_name`` records the name of a sender's pid (learnt from its
home) without registering anything; ``proc_gone`` a name freed before this
host asked for it.  On one host alone pids are assigned by
the update (the next free number).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

from aiopdbp.errors import DuplicateProcessError, PDBPError, UnknownProcessError
from aiopdbp.records import Record


class NodeType(enum.IntEnum):
    """A node's role: a compute node, or the master node (rank 0, which
    orders the updates of the name tables)."""

    COMPUTE = 0
    MASTER = 1


class PType(enum.IntEnum):
    """What a GP runs on: ``CPU`` (a plain GP), ``GPU`` (a GPU GP, an
    :class:`~aiopdbp.runtime.sgp.SGP`, bound to one device) or ``COMM`` (the
    library's own helpers, such as a barrier's companion)."""

    CPU = 0
    GPU = 1
    COMM = 2


class NodeEntry(Record):
    __slots__ = ("nid", "name", "ip", "ntype")
    nid: int
    name: str
    ip: str
    ntype: NodeType

    def __init__(self, nid: int, name: str, ip: str, ntype: NodeType) -> None:
        self.nid = nid
        self.name = name
        self.ip = ip
        self.ntype = ntype


class ProcessEntry(Record):
    __slots__ = ("pid", "name", "ptype", "node", "pipe")
    pid: int
    name: str
    ptype: PType
    node: int
    pipe: int | None  # PN: bound private pipe id

    def __init__(self, pid: int, name: str, ptype: PType, node: int, pipe: int | None = None) -> None:
        self.pid = pid
        self.name = name
        self.ptype = ptype
        self.node = node
        self.pipe = pipe


class StreamEntry(Record):
    __slots__ = ("pid", "group", "sno", "node", "pipe_a", "pipe_b", "busy")
    pid: int  # destination GP
    group: int  # source GP (the stream group)
    sno: int  # stream number, unique per sending node
    node: int  # sending node (sno is unique per node)
    pipe_a: int  # public pipe on the sending host
    pipe_b: int  # private pipe on the receiving host (-1 until bound there)
    busy: bool

    def __init__(self, pid: int,
                 group: int,
                 sno: int,
                 node: int,
                 pipe_a: int,
                 pipe_b: int,
                 busy: bool = True) -> None:
        self.pid = pid
        self.group = group
        self.sno = sno
        self.node = node
        self.pipe_a = pipe_a
        self.pipe_b = pipe_b
        self.busy = busy


# -- the updates, typed: what ``Tables.apply`` hands its listeners ------------
# (on the wire an update is its op and a list of arguments, in these fields' order)
class NodeAdd(NamedTuple):
    nid: int
    name: str
    ip: str
    ntype: int


class NodesAdd(NamedTuple):
    entries: list[list[Any]]   # [nid, name, ip, ntype, ...] per host


class ProcReg(NamedTuple):
    name: str
    ptype: int
    node: int
    pipe: int | None = None    # bound at once when given
    pid: int | None = None     # given by the name's home host (None: numbered here)


class ProcFree(NamedTuple):
    pid: int


class ProcName(NamedTuple):
    pid: int
    name: str


class ProcGone(NamedTuple):
    name: str
    ptype: int
    node: int
    pid: int


class PipeBind(NamedTuple):
    pid: int
    pipe: int


class PipeRelease(NamedTuple):
    pid: int


Update = NodeAdd | NodesAdd | ProcReg | ProcFree | ProcName | ProcGone | PipeBind | PipeRelease

#: op -> its record
UPDATES: dict[str, type[Update]] = {
    "node_add": NodeAdd, "nodes_add": NodesAdd, "proc_reg": ProcReg, "proc_free": ProcFree,
    "proc_name": ProcName, "proc_gone": ProcGone, "pipe_bind": PipeBind, "pipe_release": PipeRelease}

#: ``fn(op, update, result)``: a listener of every applied update
UpdateFn = Callable[[str, Update, Any], None]

_NODE_TYPES = {int(t): t for t in NodeType}


class PendingName(str):
    """``"<pid N>"``: the name of a GP whose registration has not reached
    this host yet -- data can overtake the table update that registers its
    sender (they travel on different channels).  A ``str``, so it prints and
    compares as the placeholder; its type tells a receiver to look again
    (``GP.recv`` waits for the registration before it returns such an item)."""

    __slots__ = ()


class Tables:
    """NTA + PTA with one entry point for updates."""

    OPS = tuple(UPDATES)

    def __init__(self) -> None:
        self.nta: dict[int, NodeEntry] = {}
        self.pta: dict[int, ProcessEntry] = {}
        self.by_name: dict[str, int] = {}
        # pid -> name of every GP ever registered: a message read after its
        # sender was freed still names the sender (the same on every host).
        self.names: dict[int, str] = {}
        self.version = 0
        self._next_pid = 1
        self._hash = hashlib.blake2b(digest_size=16)
        self._listeners: list[UpdateFn] = []

    # -- the single point of update ------------------------------------------
    def apply(self, op: str, args: tuple[Any, ...] | list[Any]) -> Any:
        """Apply one update; return its result (e.g. the new pid).

        Raises a :class:`PDBPError` subclass for an update that is invalid
        against the current content (the same on every host, since every host
        holds the same content when it applies the same update).
        """
        args = tuple(args)
        kind = UPDATES.get(op)
        if kind is None:
            raise PDBPError(f"unknown table update {op!r}")
        try:
            update = kind(*args)
        except TypeError:
            raise PDBPError(f"table update {op!r} with {len(args)} arguments: {kind.__name__} has "
                            f"{len(kind._fields)}") from None
        result = getattr(self, f"_op_{op}")(*update)
        self.version += 1
        self._hash.update(repr((op, args)).encode())
        for fn in self._listeners:
            fn(op, update, result)
        return result

    def subscribe(self, fn: UpdateFn) -> None:
        """Call ``fn(op, update, result)`` after every applied update (``update``:
        its typed record, :data:`UPDATES`)."""
        self._listeners.append(fn)

    @property
    def digest(self) -> str:
        """A hash of every update applied so far, in order (equal digests on
        two hosts mean they applied the same updates in the same order)."""
        return self._hash.hexdigest()

    # -- queries ------------------------------------------------------------------
    def pid_of(self, name: str) -> int:
        try:
            return self.by_name[name]
        except KeyError:
            raise UnknownProcessError(name) from None

    def process(self, pid: int) -> ProcessEntry:
        try:
            return self.pta[pid]
        except KeyError:
            raise UnknownProcessError(f"pid {pid}") from None

    def name_of(self, pid: int) -> str:
        """The GP's name, or a :class:`PendingName` ``"<pid N>"`` while its
        registration has not reached this host."""
        return self.names.get(pid) or PendingName(f"<pid {pid}>")

    def processes_on(self, node: int) -> list[ProcessEntry]:
        return [p for p in self.pta.values() if p.node == node]

    def snapshot(self) -> dict[str, Any]:
        """A plain, comparable view of the content (for tests and HInfo/MBInfo)."""
        return {
            "version": self.version,
            "digest": self.digest,
            "nta": sorted((n.nid, n.name, n.ip, int(n.ntype)) for n in self.nta.values()),
            "pta": sorted((p.pid, p.name, int(p.ptype), p.node, p.pipe) for p in self.pta.values()),
        }

    # -- update handlers ------------------------------------------------------
    def _op_node_add(self, nid: int, name: str, ip: str, ntype: int) -> int:
        self.nta[nid] = NodeEntry(nid, name, ip, NodeType(ntype))
        return nid

    def _op_nodes_add(self, entries: list[list[Any]]) -> int:
        # every host's row at start-up in one update: one per host made
        # start-up quadratic in updates applied (1,024 hosts: 1 M of them);
        # an entry may carry more fields after the four (ALL-HOSTInfo's window)
        types = _NODE_TYPES
        rows = []
        for entry in entries:
            nid, name, ip, ntype = entry[0], entry[1], entry[2], entry[3]
            if ntype not in types:
                raise PDBPError(f"node type {ntype!r} is not one of {sorted(types)}")
            rows.append(NodeEntry(nid, name, ip, types[ntype]))
        for row in rows:
            self.nta[row.nid] = row
        return len(rows)

    def _op_proc_reg(self, name: str, ptype: int, node: int, pipe: int | None = None,
                     pid: int | None = None) -> int:
        # ``pid``: given by the name's home host (aiopdbp.hosts.names); one
        # host alone numbers its GPs itself
        if name in self.by_name:
            raise DuplicateProcessError(name)
        if pid is None:
            pid = self._next_pid
            self._next_pid += 1
        self.pta[pid] = ProcessEntry(pid, name, PType(ptype), node, pipe)
        self.by_name[name] = pid
        self.names[pid] = name
        return pid

    def _op_proc_free(self, pid: int) -> int:
        entry = self.process(pid)
        del self.pta[pid]
        self.by_name.pop(entry.name, None)
        return pid

    def _op_proc_name(self, pid: int, name: str) -> int:
        # the name of a GP that sent something here, learnt from its home:
        # a pid's name never changes, and knowing it registers nothing here
        self.names.setdefault(pid, name)
        return pid

    def _op_proc_gone(self, name: str, ptype: int, node: int, pid: int) -> int:
        # a name registered (as ``pid``, on ``node``) and freed before this
        # host asked its home for it: one update, so that no reader here can
        # see it registered between its registration and its free
        if name in self.by_name:
            raise DuplicateProcessError(name)
        self.names.setdefault(pid, name)
        return pid

    def _op_pipe_bind(self, pid: int, pipe: int) -> int:
        self.process(pid).pipe = pipe
        return pipe

    def _op_pipe_release(self, pid: int) -> int | None:
        entry = self.process(pid)
        pipe, entry.pipe = entry.pipe, None
        return pipe
