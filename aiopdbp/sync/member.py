"""What a barrier and a neighbour group share: a member of a sync group (SPEC section 10).

:class:`SyncMember` is the machinery under :class:`~aiopdbp.sync.barriers.Barrier`
and :class:`~aiopdbp.sync.neighbours.Neighbours`: the member's companion GP,
tagged send and receive with a stash, and failure detection (peers that
leave, fail or are freed).  Its underscore members are the interface of its
two subclasses, both in this package.
"""

# Theory of operation
# -------------------
# *Companions.*  Synchronisation traffic must never mix with a GP's own
# messages, so every member gets a companion GP of type PType.COMM, registered
# on the member's host on first use (``open``) and freed on ``aclose``:
# ``f"{group}/{member}#sync"`` for a Barrier, ``f"{group}/{member}#nbr"`` for
# Neighbours.  Companions talk to companions; the member's own inbox is never
# touched.
#
# *Tags.*  Every message is a command CDU with no payload (a reduction value
# or halo data where there is one); its 32-bit command code carries the tag:
#
#     op u3 | step u6 | round mod 128 u7 | sender index u16
#
# A receiver that needs (op, step, round, sender) takes it from its stash or
# reads its companion's pipe, stashing everything else: a message of the next
# round that overtakes the current one waits there, never mixes.  Rounds of
# two members differ by at most one while a message is in flight (nobody
# completes round r+1 before everybody arrived at it), so ``round mod 128``
# is unambiguous.  Neighbours identify the sender by its companion's pid
# (resolved before the first exchange) instead of an index.
#
# *Failure.*  A member that closes (``aclose``) broadcasts LEAVE carrying the
# number of rounds it completed, R; one that fails (timeout, cancellation,
# peer lost) broadcasts ABORT with the round it failed in, R.  Every member
# then fails any round >= R at once (rounds < R are still completed: the
# leaver's part of them was already sent).  A member whose own GP is freed
# closes its barrier by itself (LEAVE).  A peer companion freed without a
# LEAVE (its host closed) is seen as a ``proc_free`` table update of the pid
# this member talks to (pids, not names: names may be registered again): a
# wait blocked on a message from that member fails after ``grace`` seconds (a
# message already in flight may still arrive), and the next round fails at
# once.  Whoever fails broadcasts ABORT, so a failure spreads to the whole
# group instead of leaving anyone waiting.  A timeout bounds every wait; with
# ``timeout=None`` only a member that is alive but never arrives can keep the
# others waiting, as with ``MPI_Barrier``.  A broken barrier stays broken:
# close it and create a new one.
#
# *Closing.*  A CDU that reaches a host while the destination GP's pipe is
# released but its name not yet freed is held by that host's receive path
# for up to ``RemoteConfig.bind_timeout`` (parked by ``Arrivals.deliver_remote``), which
# stalls all traffic from the sending host.  So a closing member sends LEAVE
# only to peers that have not left yet, and keeps its companion until every
# peer has left or been freed (at most ``linger`` seconds): then nobody sends
# to it any more when it frees it.  A member the program does not close is
# closed by its GP when the GP is freed (``GP.own``), before the GP's own
# ``proc_free``, so the LEAVE goes out while everybody can still hear it.
#
# *Names.*  Group names are cluster-wide: reuse one only after every member
# closed its previous barrier of that name (companion names must be free).

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Self

from aiopdbp.errors import BarrierError, ClosedResourceError, NoPipeError, PDBPError, WouldBlock
from aiopdbp.hosts.tables import PType
from aiopdbp.runtime.process import GP
from aiopdbp.sync.departures import Departures, PeerWatch, notice
from aiopdbp.wire.message import Message
from aiopdbp.streams.receiver import IncomingStream
from aiopdbp.wire.mesp import Kind

__all__ = [
    "BarrierTimeoutError", "OP_ARRIVE", "OP_EXCHANGE", "OP_HALO", "OP_RELEASE", "SyncMember",
    "UNSET",
]

# the op field of a tag (see the notes above)
OP_ARRIVE: Final = 1
OP_RELEASE: Final = 2
OP_EXCHANGE: Final = 3
OP_HALO: Final = 4
_OP_LEAVE: Final = 5
_OP_ABORT: Final = 6
_OP_POKE: Final = 7
_OP_NAMES: Final = {1: "ARRIVE", 2: "RELEASE", 3: "EXCHANGE", 4: "HALO"}

_ROUND_MASK: Final = 0x7F


class BarrierTimeoutError(BarrierError, TimeoutError):
    """A barrier round or a neighbour exchange did not complete within its
    timeout.  Both a :class:`~aiopdbp.errors.BarrierError` and a ``TimeoutError``."""


def _com(op: int, step: int, rnd: int, sender: int) -> int:
    return (op << 29) | (step << 23) | ((rnd & _ROUND_MASK) << 16) | sender


UNSET: Any = object()


def _retrieve(task: asyncio.Task[None]) -> None:
    """An autoclose nobody awaits: its error (the node closed meanwhile) is
    cleanup noise, never "Task exception was never retrieved"."""
    if not task.cancelled():
        task.exception()
_OWN: Final = -2     # watch index of a member's own GP
_SETTLE: Final = 0.02  # s a closing member still listens after seeing a peer freed


# ------------------------------------------------------------ common machinery
class SyncMember:
    """Companion management, tagged send/receive, stash, failure detection."""

    _suffix = "#sync"
    _what = "barrier"

    def __init__(self, gp: GP, group: str, peers: Sequence[str], self_index: int,
                 timeout: float | None, grace: float, linger: float) -> None:
        if not isinstance(group, str) or not group:
            raise ValueError("a group name is a non-empty str")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be > 0 or None")
        if grace < 0 or linger < 0:
            raise ValueError("grace and linger must be >= 0")
        self.gp = gp
        self.group = group
        self.timeout = timeout
        self.grace = grace
        self.linger = linger
        self._names = list(peers)               # index -> member GP name
        self._self_index = self_index           # -1 when self is not in _names
        self._comp_names = [self.companion_of(n) for n in self._names]
        self._peer_indices = range(len(self._names))   # every peer index (self's too)
        self._comp: GP | None = None
        self._opened = False
        self._closed = False
        self._busy = False
        self._broken: BarrierError | None = None
        self._round = 0
        self._stash: dict[tuple[int, int, int, int], Any] = {}
        self._ready: set[int] = set()           # peers whose pipe we have seen bound
        self._watch = PeerWatch(self)           # proc_free watches, peers' companions
        self._gone = Departures(self._names, self_index, grace, gp.node.rank, self._prefix,
                                self._watch.rank.get)
        self._autoclose: asyncio.Task[None] | None = None

    # -- naming ---------------------------------------------------------------
    @property
    def member(self) -> str:
        """This member's GP name."""
        return self.gp.name

    def companion_of(self, member: str) -> str:
        """The companion GP name of ``member`` in this group."""
        return f"{self.group}/{member}{self._suffix}"

    @property
    def companion(self) -> GP | None:
        """This member's companion GP (``None`` before ``open`` / after ``aclose``)."""
        return self._comp

    @property
    def round(self) -> int:
        """Rounds (barrier passages or exchanges) completed by this member."""
        return self._round

    @property
    def broken(self) -> bool:
        """True once a round failed: every later round raises ``BarrierError``."""
        return self._broken is not None

    def _prefix(self) -> str:
        return f"{self._what} {self.group!r} round {self._round} at {self.member!r}"

    # -- lifecycle ------------------------------------------------------------
    async def open(self) -> None:
        """Register this member's companion GP on its host (idempotent; the
        first round does it when not done before).

        Cancellation: a cancelled open leaves no companion registered, or one
        that :meth:`aclose` frees.
        """
        if self._closed:
            raise ClosedResourceError(f"{self._what} {self.group!r} at {self.member!r} was closed")
        if self._opened:
            return
        node = self.gp.node
        peers = [i for i in self._peer_indices if i != self._self_index]
        if not peers:
            self._opened = True
            return
        self._watch.watch(self.gp.pid, _OWN)   # our GP freed -> leave the group
        for i in peers:
            # learn every peer's companion from its home, as it registers:
            # LEAVE and ABORT go to every member (never waiting), and the
            # linger watches them all (one lookup per peer and host)
            node.router.want(self._comp_names[i])
        try:
            comp = await node.register(self.companion_of(self.member), PType.COMM)
            try:
                await comp.apply_pipe()
            except BaseException:
                await comp.free()
                raise
        except BaseException:
            self._watch.unwatch()
            raise
        self._comp = comp
        self._opened = True
        self.gp.own(self)   # closed when its GP is freed, if the program did not

    async def aclose(self) -> None:
        """Leave the group: tell the other members (LEAVE: their rounds from
        the next one on fail at once) and free the companion.  Idempotent.

        The companion is kept until every peer has left or been freed, at
        most ``linger`` seconds (see the module notes): close the members of
        one group concurrently (``asyncio.gather``), not one after another
        from one task, or each close waits ``linger``.

        Cancellation: LEAVE is sent before the first suspension; a cancelled
        close may leave the companion's name registered until its node closes.
        """
        if self._closed:
            task = self._autoclose
            if task is not None and task is not asyncio.current_task() and not task.done():
                await asyncio.shield(task)
            return
        self._closed = True
        self.gp.disown(self)
        comp = self._comp
        try:
            if comp is not None:
                try:
                    self._drain_nowait(comp)     # learn who has left already
                except BarrierError:
                    pass
                self._broadcast(comp, _OP_LEAVE, "left the group")
                if not self._busy:
                    await self._linger(comp)
        finally:
            self._watch.unwatch()
            self._comp = None
            if comp is not None:
                await comp.free()

    async def _linger(self, comp: GP) -> None:
        """Before freeing the companion, wait (at most ``linger`` s) until
        every peer has left (its LEAVE arrived) or been freed, so that
        nothing more is sent to this companion.  A member that closes skips
        the peers whose LEAVE it has seen; so the last to close frees at
        once and the others follow as they see it freed.  (A CDU that reaches
        a host while the companion's pipe is released but its name not yet
        freed holds up that host's receive path: see the module notes.)"""
        loop = asyncio.get_running_loop()
        end = loop.time() + self.linger
        peers = [i for i in self._peer_indices if i != self._self_index]
        by_name = comp.node.tables.by_name
        for j in peers:                       # watch the peers never contacted, too
            if j not in self._watch.pid:
                pid = by_name.get(self._comp_names[j])
                if pid is None:
                    self._gone.unregistered(j, end - self.linger - 1)
                else:
                    self._watch.watch_peer(j, pid, self._comp_names[j])
        self._busy = True
        try:
            while True:
                now = loop.time()
                # a peer freed just now may still have a LEAVE in flight: settle briefly
                waiting = [j for j in peers if self._still_heard(j, now)]
                rest = end - now
                if not waiting or rest <= 0:
                    return
                try:
                    item = await comp.recv(min(rest, _SETTLE) if all(
                        j in self._gone for j in waiting) else rest)
                except TimeoutError:
                    continue
                except (ClosedResourceError, NoPipeError):
                    return
                try:
                    self._accept(item)
                except BarrierError:
                    pass
        finally:
            self._busy = False

    def _still_heard(self, j: int, now: float) -> bool:
        """Whether a closing member still waits for peer ``j``: it has not
        gone, or its companion on another host was freed so recently that
        a LEAVE of it may still be in flight."""
        g = self._gone.get(j)
        return g is None or (g.rounds is None and j in self._watch.remote and now - g.since < _SETTLE)

    async def __aenter__(self) -> Self:
        """``async with``: :meth:`open` on entry.

        Cancellation: as for :meth:`open`.
        """
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """``async with``: :meth:`aclose` on exit.

        Cancellation: as for :meth:`aclose`.
        """
        await self.aclose()

    # -- failure bookkeeping --------------------------------------------------
    def on_pid_freed(self, i: int) -> None:
        """Table listener: a watched pid was freed (peer ``i``'s companion, or
        with ``_OWN`` this member's own GP)."""
        if i == _OWN:
            if not self._closed and self._autoclose is None:
                self._autoclose = asyncio.get_running_loop().create_task(
                    self.aclose(), name=f"aiopdbp-sync-autoclose-{self.companion_of(self.member)}")
                self._autoclose.add_done_callback(_retrieve)
            return
        if self._gone.freed(i, asyncio.get_running_loop().time()):
            self._poke()

    def _poke(self) -> None:
        comp = self._comp
        if self._busy and comp is not None:
            try:   # wake the waiting receive through the public API
                comp.send_nowait(comp.name, None, com=_com(_OP_POKE, 0, 0, 0), kind=Kind.COMMAND)
            except PDBPError:
                pass

    def _broadcast(self, comp: GP, op: int, reason: str) -> None:
        """Best-effort LEAVE/ABORT to every peer (never waits, never raises)."""
        payload = notice(self._round, self.member, reason)
        for i in self._peer_indices:
            if i == self._self_index or i in self._gone:
                continue
            try:
                comp.send_nowait(self._comp_names[i], payload, com=_com(op, 0, 0, 0), kind=Kind.COMMAND)
            except PDBPError:
                pass

    # -- receiving --------------------------------------------------------------
    def _sender_of(self, msg: Message, field_: int) -> int | None:
        return field_ if 0 <= field_ < len(self._names) and field_ != self._self_index else None

    def _accept(self, item: Message | IncomingStream) -> None:
        if isinstance(item, IncomingStream):   # nobody streams to a companion
            asyncio.get_running_loop().create_task(item.aclose())
            return
        com = item.com
        op = com >> 29
        if op == _OP_POKE:
            return
        if op == _OP_LEAVE or op == _OP_ABORT:
            entry = self.gp.node.tables.pta.get(item.source_pid)
            self._gone.on_notice(op == _OP_LEAVE, bytes(item.data or b""),
                                 entry.node if entry is not None else None, asyncio.get_running_loop().time())
            return
        i = self._sender_of(item, com & 0xFFFF)
        key = (op, (com >> 23) & 0x3F, (com >> 16) & _ROUND_MASK, -1 if i is None else i)
        if i is None:
            self._orphan(item, key)
            return
        if i not in self._watch.pid:
            self._watch.watch_peer(i, item.source_pid, self._comp_names[i])
        if key in self._stash:
            raise BarrierError(f"{self._prefix()}: duplicate {_OP_NAMES.get(op, op)} "
                               f"step {key[1]} from {self._names[i]!r} (two groups share a name?)")
        self._stash[key] = item.data

    def _orphan(self, item: Message, key: tuple[int, int, int, int]) -> None:
        pass  # a sender index outside the group: ignore

    def _drain_nowait(self, comp: GP) -> None:
        while True:
            try:
                item = comp.recv_nowait()
            except WouldBlock:
                return
            except (ClosedResourceError, NoPipeError):
                raise self._closed_error() from None
            self._accept(item)

    def _closed_error(self) -> BarrierError:
        return BarrierError(f"{self._prefix()}: this member's companion was freed "
                            "(closed meanwhile, or its node is closing)")

    def _timeout_error(self, what: str, timeout: float | None) -> BarrierTimeoutError:
        return BarrierTimeoutError(f"{self._prefix()}: timed out after {timeout} s {what}")

    def _describe(self, op: int, step: int, pending: Sequence[int]) -> str:
        names = [self._names[i] for i in pending]
        return f"waiting for {_OP_NAMES.get(op, op)} (step {step}) from {names}"

    async def _gather(self, sources: Iterable[int], op: int, step: int, deadline: float | None,
                      timeout: float | None) -> dict[int, Any]:
        comp = self._comp
        assert comp is not None
        rnd = self._round & _ROUND_MASK
        stash = self._stash
        got: dict[int, Any] = {}
        pending = list(sources)
        loop = asyncio.get_running_loop()
        while True:
            still = []
            for j in pending:
                key = (op, step, rnd, j)
                if key in stash:
                    got[j] = stash.pop(key)
                else:
                    still.append(j)
            if not still:
                self._count_received(got)
                return got
            pending = still
            try:
                item = comp.recv_nowait()
            except WouldBlock:
                now = loop.time()
                wake = self._gone.check(pending, now, False, self._round) if self._gone else None
                limit = deadline if wake is None else (wake if deadline is None else min(wake, deadline))
                try:
                    item = await comp.recv(None if limit is None else max(0.0, limit - now))
                except TimeoutError:
                    if deadline is not None and loop.time() >= deadline:
                        raise self._timeout_error(self._describe(op, step, pending), timeout) from None
                    continue
                except (ClosedResourceError, NoPipeError):
                    raise self._closed_error() from None
            except (ClosedResourceError, NoPipeError):
                raise self._closed_error() from None
            self._accept(item)
            if self._gone:
                self._gone.check(pending, loop.time(), False, self._round)

    def _count_received(self, got: Mapping[int, Any]) -> None:
        pass

    # -- sending ----------------------------------------------------------------
    async def _await_peer(self, j: int, deadline: float | None, timeout: float | None) -> int:
        """First contact: wait until peer ``j``'s companion is registered and
        its pipe is bound *in this host's tables* (a CDU sent to a host before
        it knows the destination could be dropped there); return its pid."""
        comp = self._comp
        assert comp is not None
        node = comp.node
        name = self._comp_names[j]
        loop = asyncio.get_running_loop()
        delay = 0.0002
        node.router.want(name)   # learnt from its home host (aiopdbp.hosts.names)
        while True:
            pid = node.tables.by_name.get(name)
            if pid is not None:
                entry = node.tables.pta.get(pid)
                if entry is not None and entry.pipe is not None:
                    self._ready.add(j)
                    self._watch.watch_peer(j, pid, self._comp_names[j])
                    return pid
            self._drain_nowait(comp)
            now = loop.time()
            if self._gone:
                self._gone.check((j,), now, False, self._round)
            if deadline is not None and now >= deadline:
                raise self._timeout_error(
                    f"waiting for member {self._names[j]!r} to join (its companion {name!r} "
                    f"was not registered with a pipe)", timeout)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.01)

    async def _send(self, j: int, op: int, step: int, data: Any, sender: int,
                    deadline: float | None, timeout: float | None) -> None:
        comp = self._comp
        assert comp is not None
        if j in self._gone:
            raise self._gone.error(j)
        com = _com(op, step, self._round, sender)
        name = self._comp_names[j]
        if j in self._ready:
            try:
                comp.send_nowait(name, data, com=com, kind=Kind.COMMAND)
                return
            except (WouldBlock, NoPipeError):
                pass
            except ClosedResourceError:
                raise self._closed_error() from None
            except PDBPError:   # UnknownProcessError: freed meanwhile
                if j in self._gone:
                    raise self._gone.error(j) from None
                raise BarrierError(f"{self._prefix()}: member {self._names[j]!r} is gone "
                                   "(its companion is no longer registered)") from None
        else:
            await self._await_peer(j, deadline, timeout)
        loop = asyncio.get_running_loop()
        rest = None if deadline is None else max(1e-3, deadline - loop.time())
        try:
            await comp.send(name, data, com=com, kind=Kind.COMMAND, timeout=rest)
        except TimeoutError:
            raise self._timeout_error(f"sending to {self._names[j]!r}", timeout) from None

    def _begin(self, timeout: Any) -> tuple[float | None, float | None]:
        if self._closed:
            raise ClosedResourceError(f"{self._what} {self.group!r} at {self.member!r} was closed")
        if self._broken is not None:
            raise BarrierError(f"{self._what} {self.group!r} at {self.member!r} is broken: "
                               f"{self._broken}")
        if self._busy:
            raise RuntimeError(f"{self._what} {self.group!r} at {self.member!r}: a round is "
                               "already in progress (one task per member at a time)")
        t = self.timeout if timeout is UNSET else timeout
        if t is not None and t <= 0:
            raise ValueError("timeout must be > 0 or None")
        loop = asyncio.get_running_loop()
        return t, (None if t is None else loop.time() + t)

    def _fail(self, exc: BaseException) -> BarrierError:
        """A round failed: the member is broken; tell the others (ABORT)."""
        if isinstance(exc, BarrierError):
            err = exc
        elif isinstance(exc, asyncio.CancelledError):
            err = BarrierError(f"{self._prefix()}: cancelled during the round")
        else:
            err = BarrierError(f"{self._prefix()}: {type(exc).__name__}: {exc}")
        self._broken = err
        comp = self._comp
        if comp is not None:
            self._broadcast(comp, _OP_ABORT, str(err))
        return err

