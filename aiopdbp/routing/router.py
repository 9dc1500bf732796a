"""Routing: where a CDU goes, by name -- on this host or another (SPEC 4-5).

Theory of operation
-------------------
The :class:`Router` is the one object that knows where every GP can be
reached.  It keeps, for every *bound* GP of the cluster, its **target**: the
GP's private :class:`~aiopdbp.routing.pipes.Pipe` when it lives here, else the
:class:`~aiopdbp.hosts.link.HostLink` of its host.  The targets follow the
tables (:meth:`on_update`, subscribed to ``Tables``), so routing is a dict
lookup; a name not known here is asked of its home host (``want``, see
:mod:`aiopdbp.hosts.names`) when a send first waits for it.  Every target offers the same four calls (the target
protocol): ``reserve_nowait(pid, nbytes)`` / ``reserve(pid, nbytes)`` take a
slot in the GP's pipe or ``nbytes`` of credit towards it on its host (a full
destination makes *its* senders wait, nobody else), ``unreserve`` gives it
back, ``put_to(pid, item)`` delivers what was reserved, and ``offer(pid,
nbytes, fields)`` does both for a message when neither has to wait (the
send path's common case: the waiting path is taken only when it says no).

*Names* follow one rule (:meth:`resolve`): a name not registered yet is
waited for up to the caller's ``timeout`` or the node's ``name_timeout``,
then :class:`UnknownProcessError`; a name freed since fails at once.

*Arrivals from other hosts* go into the same targets, placed by
:class:`~aiopdbp.routing.arrivals.Arrivals`, which also keeps the credit
they owe their senders.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sized
from typing import Any, Protocol

from aiopdbp.wire.mesp import CDU, Kind

from aiopdbp.errors import ClosedResourceError, NoPipeError, UnknownProcessError, WouldBlock
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message
from aiopdbp.routing.pipes import Pipe, PipePool
from aiopdbp.stall import Waits
from aiopdbp.hosts.owned import OwnedDone, OwnedSend
from aiopdbp.hosts.tables import PipeBind, PipeRelease, ProcFree, ProcGone, ProcName, ProcReg, Tables, Update

log = logging.getLogger("aiopdbp.routing.router")

__all__ = ["Router", "Target", "NAME_HINT_AFTER"]

#: after this long waiting for a name that is not registered, a close
#: registered name is logged as a likely misspelling (the wait goes on)
NAME_HINT_AFTER = 2.0



class Target(Protocol):
    """Where routed CDUs go: a local private pipe, or a remote host's link."""

    remote: bool

    def reserve_nowait(self, pid: int = 0, nbytes: int = 0) -> None: ...
    async def reserve(self, pid: int = 0, nbytes: int = 0) -> None: ...
    def unreserve(self, pid: int = 0, nbytes: int = 0) -> None: ...
    def put_to(self, pid: int, item: Any) -> bool | None: ...
    def offer(self, pid: int, nbytes: int, fields: tuple[str, Kind, int, Any, int]) -> bool: ...


class _LinkOnDemand:
    """A remote GP's target until it is first used: then the link to its host
    is made (``links(host)``) and put in its place in ``targets``, so a host
    whose GPs are never sent to costs no link."""

    __slots__ = ("_targets", "_pid", "_host", "_links")
    remote = True

    def __init__(self, targets: dict[int, Target], pid: int, host: int,
                 links: Callable[[int], Target]) -> None:
        self._targets, self._pid, self._host, self._links = targets, pid, host, links

    def link(self) -> Target:
        """The link itself, made now if need be, and in this one's place."""
        link = self._links(self._host)
        if self._targets.get(self._pid) is self:
            self._targets[self._pid] = link
        return link

    def __getattr__(self, name: str) -> Any:
        return getattr(self.link(), name)


class Landings:
    """Buffers of GPs that wait in ``recv_into`` (:meth:`aiopdbp.runtime.process.GP.recv_into`)
    with an empty pipe: the next large payload for such a GP from another
    host lands in its buffer instead of a pooled one."""

    def __init__(self, targets: dict[int, Target]) -> None:
        self._targets = targets
        #: pid -> [buffer, taken] (the inbound side asks take() only while this holds any)
        self.posted: dict[int, list[Any]] = {}

    def post(self, pid: int, buf: memoryview) -> None:
        """GP ``pid`` waits in ``recv_into(buf)``."""
        self.posted[pid] = [buf, False]

    def withdraw(self, pid: int) -> bool:
        """The wait ended; True when a payload was sent to the buffer meanwhile."""
        entry = self.posted.pop(pid, None)
        return entry is not None and bool(entry[1])

    def take(self, pid: int, nbytes: int) -> Any:
        """Where a large payload of ``nbytes`` for GP ``pid`` lands (the
        inbound path asks when its header arrives): the GP's own buffer when
        it waits with nothing in its pipe and the payload fits (once), else
        None (a pooled buffer)."""
        entry = self.posted.get(pid)
        if entry is None or entry[1]:
            return None
        buf: memoryview = entry[0]
        tgt = self._targets.get(pid)
        if nbytes > buf.nbytes or type(tgt) is not Pipe or len(tgt):
            return None
        entry[1] = True
        return buf[:nbytes]


class Router:
    """Names -> pids -> targets, local delivery and placement of arrivals."""

    # the count every routed-at-once send adds to is a slot: the compiled
    # send path adds to it in place (the rest of the state is the __dict__'s;
    # a router can still be weakly referenced)
    __slots__ = ("offered", "__dict__", "__weakref__")

    def __init__(self, tables: Tables, pps: PipePool, rank: int, *, name_timeout: float,
                 submit: Callable[[Target, int, Any], None],
                 offer: Callable[[Target, int, int, tuple[str, Kind, int, Any, int]], bool],
                 queued: Sized = (),
                 links: Callable[[int], Target] | None = None,
                 want: Callable[[str], None] | None = None,
                 want_pid: Callable[[int], None] | None = None,
                 recheck: Callable[[str], bool] | None = None,
                 carry: Callable[[str, tuple[str, Kind, int, Any, int]], Awaitable[bool]] | None = None) -> None:
        self._submit = submit    # the PipeManager's: queue an item for a target
        self._offer = offer      # ... and its no-wait path (False: take the waiting one)
        self._queued = queued    # ... and what it holds queued (try_send's check, inline)
        #: messages try_send routed at once (the manager counts the rest)
        self.offered = 0
        self.tables = tables
        self.pps = pps
        self.rank = rank
        self.name_timeout = name_timeout
        self.links = links    # host -> the link to it (None: a single host)
        self.targets: dict[int, Target] = {}      # bound GPs: pid -> where their CDUs go
        self.pids = tables.by_name                 # name -> pid (hot path)
        self._names = tables.names
        #: ``want(name)``: this host learns ``name`` (and its later updates)
        #: from its home host (aiopdbp.hosts.names); a no-op on one host,
        #: where every name is registered here
        self.want: Callable[[str], None] = want or _nothing
        #: ``want_pid(pid)``: this host learns the name of GP ``pid`` (a sender)
        self.want_pid: Callable[[int], None] = want_pid or _nothing
        #: ``recheck(name)``: a freed name this host heard of from its GP's
        #: host, not its home: ask the home again (True: its answer is due)
        self._recheck: Callable[[str], bool] = recheck or _no
        #: ``carry(name, fields)``: send a first message with the lookup of
        #: its name (aiopdbp.hosts.names, "Carried first messages"); True when
        #: delivered, False: send it as any other
        self._carry = carry
        self._left: dict[str, int] = {}           # names registered once and freed since -> rank
        self._home: dict[int, int] = {}           # pid -> the rank of its GP
        self._released: set[int] = set()          # GPs whose pipe was released (and not bound again)
        self._name_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._bind_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._pid_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._closed: BaseException | None = None
        self.waits = Waits()                      # senders waiting on a destination (aiopdbp.stall)
        self.landings = Landings(self.targets)    # GPs waiting in recv_into
        tables.subscribe(self.on_update)

    # ----------------------------------------------------------- table hook
    def on_update(self, op: str, update: Update, result: Any) -> None:
        """Follow the tables (called by ``Tables.apply``)."""
        match update:
            case ProcReg(name=name, node=node, pipe=pipe):
                self._left.pop(name, None)
                self._home[result] = node
                _wake(self._name_waiters.pop(name, ()))
                _wake(self._pid_waiters.pop(result, ()))
                if pipe is not None:
                    self.on_update("pipe_bind", PipeBind(result, pipe), pipe)
            case ProcName(pid=pid):
                _wake(self._pid_waiters.pop(pid, ()))
            case ProcGone(name=name, node=node, pid=pid):
                # freed before this host asked: the waiters fail at once
                self._left[name] = node
                _wake(self._name_waiters.pop(name, ()))
                _wake(self._pid_waiters.pop(pid, ()))
            case PipeBind(pid=pid, pipe=pipe_id):
                entry = self.tables.pta.get(pid)
                if entry is None:
                    return
                self._released.discard(pid)
                if entry.node == self.rank:
                    self.targets[pid] = self.pps.get(pipe_id)
                elif self.links is not None:
                    self.targets[pid] = _LinkOnDemand(self.targets, pid, entry.node, self.links)
                _wake(self._bind_waiters.pop(pid, ()))
            case PipeRelease(pid=pid):
                self._released.add(pid)     # "bind one first" would be wrong advice now
                self._gone(pid)
            case ProcFree(pid=pid):
                self._left[self.tables.name_of(pid)] = self._home.pop(pid, -1)
                self._released.discard(pid)
                self._gone(pid)

    def _gone(self, pid: int) -> None:
        """GP ``pid`` has no target any more; whoever waits for its binding
        re-checks and fails clearly."""
        self.targets.pop(pid, None)
        _wake(self._bind_waiters.pop(pid, ()))

    # ---------------------------------------------------------- resolution
    async def resolve(self, name: str, timeout: float | None) -> int:
        """The pid of ``name`` by the name rule (see the module docstring).

        Cancellation: nothing to undo.
        """
        pid = self.pids.get(name)
        if pid is not None:
            return pid
        wait = self.name_timeout if timeout is None else timeout
        left = self._left.pop(name, None)
        if left is not None and not self._recheck(name):
            self._left[name] = left   # its home said so: fails at once (the answer of a recheck may too)
        _if_freed(self._left, self.rank, name)
        if wait <= 0:
            self.want(name)   # not known here yet: a later look may find it
            raise UnknownProcessError(name, suggestions=self.close_names(name))
        if self._closed is not None:
            raise ClosedResourceError(f"node {self.rank} is closed")
        self.want(name)   # its home sends it (now, or when it is registered)
        pid = self.pids.get(name)   # at once when this host is its home
        if pid is None:
            _if_freed(self._left, self.rank, name)
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        hint = loop.call_later(min(NAME_HINT_AFTER, wait / 2), self._hint, name, wait)
        try:
            while pid is None:
                fut = loop.create_future()
                waiters = self._name_waiters.setdefault(name, [])
                waiters.append(fut)
                try:
                    await asyncio.wait_for(fut, max(0.0, end - loop.time()))
                except TimeoutError:
                    raise UnknownProcessError(name, wait, suggestions=self.close_names(name)) from None
                finally:
                    if fut in waiters:
                        waiters.remove(fut)
                    if not waiters:
                        self._name_waiters.pop(name, None)
                pid = self.pids.get(name)
                if pid is None:   # registered and freed before this task ran
                    _if_freed(self._left, self.rank, name)
        finally:
            hint.cancel()
        return pid

    def close_names(self, name: str) -> tuple[str, ...]:
        """Names close to ``name`` (a misspelling's "did you mean"): those
        registered now, then those registered once and freed since."""
        import difflib  # (here: only a name waited for long needs it, every rank imports this module)

        now = difflib.get_close_matches(name, list(self.pids), n=3, cutoff=0.6)
        gone = difflib.get_close_matches(name, [n for n in self._left if n not in self.pids], n=3, cutoff=0.6)
        return tuple((now + gone)[:3])

    def _hint(self, name: str, wait: float) -> None:
        # a misspelt name would otherwise wait out the name timeout silently
        close = self.close_names(name)
        if close and name not in self.pids:
            log.warning("waiting up to %g s for a GP named %r to be registered; did you mean %s? "
                        "(to fail sooner: open_node(name_timeout=...) or send(..., timeout=...))",
                        wait, name, " or ".join(repr(c) for c in close))

    async def source_name(self, pid: int) -> str:
        """The name of GP ``pid`` that sent something here: data can overtake
        the table update that registers its sender, so wait for that update
        (at most ``name_timeout``; then the ``"<pid N>"`` placeholder).

        Cancellation: nothing to undo.
        """
        name = self.tables.names.get(pid)
        if name is not None or self._closed is not None:
            return name or self.tables.name_of(pid)
        self.want_pid(pid)
        name = self.tables.names.get(pid)   # at once when this host is its home
        if name is not None:
            return name
        fut = asyncio.get_running_loop().create_future()
        waiters = self._pid_waiters.setdefault(pid, [])
        waiters.append(fut)
        try:
            await asyncio.wait_for(fut, self.name_timeout)
        except Exception:  # timed out, or the node closed: the placeholder
            pass
        finally:
            if fut in waiters:
                waiters.remove(fut)
            if not waiters:
                self._pid_waiters.pop(pid, None)
        return self.tables.name_of(pid)

    def target_nowait(self, pid: int) -> Target:
        """The target of a bound GP, else :class:`NoPipeError` (or
        :class:`UnknownProcessError` for a freed pid)."""
        tgt = self.targets.get(pid)
        if tgt is not None:
            return tgt
        entry = self.tables.process(pid)  # raises for a freed pid
        if pid in self._released:
            # it had one and gave it back: it left its block (or failed)
            exc = NoPipeError(f"GP {entry.name!r} on rank {entry.node} released its pipe (it left its "
                              "`async with node.process()` block, failed, or called release_pipe()): "
                              "nothing more can be sent to it")
            if entry.node != self.rank:
                exc.origin_rank = entry.node   # under aiopdbp.run: a consequence of that rank
            raise exc
        raise NoPipeError(f"GP {entry.name!r} has no private pipe bound (it must apply_pipe() first)")

    async def target(self, pid: int, timeout: float | None) -> Target:
        """The target of GP ``pid``; with ``timeout``, wait that long for its
        pipe to be bound."""
        tgt = self.targets.get(pid)
        if tgt is not None:
            return tgt
        if not timeout:
            return self.target_nowait(pid)
        name = self.tables.process(pid).name
        fut = asyncio.get_running_loop().create_future()
        waiters = self._bind_waiters.setdefault(pid, [])
        waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise TimeoutError(f"GP {name!r} bound no pipe within {timeout:g} s") from None
        finally:  # a wait that timed out or was cancelled leaves nothing behind
            if fut in waiters:
                waiters.remove(fut)
            if not waiters and self._bind_waiters.get(pid) is waiters:
                del self._bind_waiters[pid]
        return self.target_nowait(pid)

    async def _routed(self, dest: str, timeout: float | None) -> tuple[int, Target]:
        """GP ``dest``'s pid and target, waiting for its name and binding.

        Cancellation: nothing to undo.
        """
        pid = self.pids.get(dest)
        if pid is None:
            pid = await self.resolve(dest, timeout)
        tgt = self.targets.get(pid)
        if tgt is None:
            try:
                tgt = await self.target(pid, timeout)
            except UnknownProcessError:
                # it left between its name and now (the error could only say
                # "pid N"): the name rule says it by name, with where it left
                await self.resolve(dest, 0)
                raise
        return pid, tgt

    async def reserve(self, tgt: Target, pid: int, cost: int, timeout: float | None,
                      dest: str, src: str = "?") -> None:
        """Reserve room for one CDU to GP ``pid`` at ``tgt``: a slot in its
        pipe or ``cost`` bytes of its credit; waits while it is full
        (backpressure): forever, or up to ``timeout``, then ``TimeoutError``
        saying what it waited for.  The wait is registered (``waits``, the
        sender's name ``src``) so that a stall is reported and a cycle of
        such waits fails with :class:`~aiopdbp.errors.DeadlockError`.

        Cancellation: a cancelled reserve holds nothing.
        """
        try:
            tgt.reserve_nowait(pid, cost)
            return
        except WouldBlock:
            pass
        entry = self.tables.pta.get(pid)
        wait = self.waits.begin(src, "credit" if tgt.remote else "a pipe slot",
                                entry.name if entry is not None else f"<pid {pid}>",
                                entry.node if entry is not None else -1)
        try:
            if timeout is None:
                await tgt.reserve(pid, cost)
                return
            async with asyncio.timeout(timeout):
                await tgt.reserve(pid, cost)
        except asyncio.CancelledError:
            wait.check()
            raise
        except TimeoutError:
            where = (f"for credit from host {getattr(tgt, 'host', '?')}" if tgt.remote
                     else "for room in its pipe")
            raise TimeoutError(f"timed out after {timeout:g} s waiting {where} to send to {dest} "
                               "(backpressure: it is not read as fast as it is sent to)") from None
        finally:
            self.waits.end(wait)

    # -- sending: the routing decision ------------------------------------------
    def try_send(self, dest: str, fields: tuple[str, Kind, int, Any, int], cost: int) -> bool:
        """The routing decision when nothing has to wait: route one message
        (``fields``: source name, kind, com, payload, source pid) to the GP
        named ``dest`` and return True -- or False, having done nothing, when
        something must be waited for (then :meth:`send_waiting`).  A plain
        call, not a coroutine: the common case costs no await.  One path:
        ``if not try_send(...): await send_waiting(...)`` is the whole send."""
        pid = self.pids.get(dest)
        if pid is None:
            return False
        tgt = self.targets.get(pid)
        # the PipeManager's offer, inline: nothing queued ahead in the public
        # pipes, and the target takes it in one step
        if tgt is None or self._queued or not tgt.offer(pid, cost, fields):
            return False
        self.offered += 1
        return True

    async def send_waiting(self, dest: str, fields: tuple[str, Kind, int, Any, int], cost: int,
                           timeout: float | None) -> None:
        """The rest of a send after :meth:`try_send` said no: wait for
        the name, the binding, room at the target, or entries queued ahead in
        the public pipe, then route.

        A first message to a name this host has not asked for may travel
        with the lookup of the name (``carry``); the send then returns once
        it is delivered, so the next one cannot overtake it.

        Cancellation: a cancelled send has queued nothing (a reservation
        already taken is given back).  A first message carried with its
        name's lookup cannot be recalled: a cancel waits for its answer and,
        when it was delivered, the send returns and the cancel comes at the
        caller's next suspension (:meth:`~aiopdbp.hosts.carry.Carrier.carry`).
        """
        if (self._carry is not None and dest not in self.pids and dest not in self._left
                and self._closed is None and (timeout is None or timeout > 0)
                and await self._carry(dest, fields)):
            return
        pid, tgt = await self._routed(dest, timeout)
        await self.reserve(tgt, pid, cost, timeout, f"GP {dest!r}", fields[0])
        self._submit(tgt, pid, Message(fields))

    def send_nowait(self, dest: str, fields: tuple[str, Kind, int, Any, int], cost: int) -> None:
        """A send without waiting: ``WouldBlock`` when the target is full,
        ``UnknownProcessError`` for a name not registered (now), ``NoPipeError``
        for a GP with no pipe bound."""
        pid = self.tables.pid_of(dest)
        tgt = self.target_nowait(pid)
        tgt.reserve_nowait(pid, cost)
        self._submit(tgt, pid, Message(fields))

    def send_owned(self, dest: str, fields: tuple[str, Kind, int, Any, int], cost: int,
                   timeout: float | None, copy: Callable[[Any], Any]) -> Awaitable[None]:
        """Send a large payload with ``MPI_Send`` ownership; the awaitable
        returns once the caller's buffer ``fields[3]`` may be reused.  To a GP
        on another host whose link sends it from the buffer itself (``owns``),
        it waits for credit, then for the MPI send of the payload to
        complete; to a local GP (whose pipe would keep the buffer) the
        payload is ``copy(data)`` and the send is a plain one.  The
        commonest -- a known remote GP, credit at hand, nothing queued ahead
        -- is the link's ``owned`` at this call, and the awaitable is the
        payload's :class:`~aiopdbp.hosts.owned.OwnedDone` itself (no coroutine).

        Cancellation: before the message is handed to the link, nothing is
        queued and no credit is held.  After, the message goes: the wait
        cannot be cancelled (:class:`~aiopdbp.hosts.owned.OwnedDone`), so a
        cancel waits until MPI no longer reads the buffer -- bounded by the
        link, which fails the wait if host ``h`` is lost -- and the caller
        never regains a buffer MPI still reads.  Then the payload sent, the
        send returns and the cancel is raised at the task's next suspension
        (if still wanted: an ``asyncio.timeout`` that ended meanwhile
        withdraws it); not sent (the link failed), ``CancelledError``.
        """
        pid = self.pids.get(dest)
        if pid is not None and not self._queued:
            tgt = self.targets.get(pid)
            if tgt is not None and tgt.remote:
                owned = getattr(tgt, "owned", None)
                done: OwnedDone | None = owned(pid, cost, fields) if owned is not None else None
                if done is not None:
                    return done
        return self._send_owned(dest, fields, cost, timeout, copy)

    async def _send_owned(self, dest: str, fields: tuple[str, Kind, int, Any, int], cost: int,
                          timeout: float | None, copy: Callable[[Any], Any]) -> None:
        """:meth:`send_owned` when its link's ``owned`` did not take the message."""
        pid = self.pids.get(dest)
        tgt = self.targets.get(pid) if pid is not None else None
        if pid is None or tgt is None:  # (the commonest: both known, no coroutine to wait on)
            pid, tgt = await self._routed(dest, timeout)
        owns = getattr(tgt, "owns", None)
        if not tgt.remote or owns is None or not owns(cost - CREDIT_OVERHEAD):
            fields = (fields[0], fields[1], fields[2], copy(fields[3]), fields[4])
            if not self._offer(tgt, pid, cost, fields):
                await self.reserve(tgt, pid, cost, timeout, f"GP {dest!r}", fields[0])
                self._submit(tgt, pid, Message(fields))
            return
        try:  # the commonest: credit at hand (reserve would try this first too)
            tgt.reserve_nowait(pid, cost)
        except WouldBlock:
            await self.reserve(tgt, pid, cost, timeout, f"GP {dest!r}", fields[0])
        done = OwnedDone(loop=asyncio.get_running_loop())
        self._submit(tgt, pid, OwnedSend(Message(fields), done))
        if done.done():
            done.result()
            return
        await done  # a cancel waits for MPI, then raises only if the payload did not go

    async def multicast(self, what: str, pids: tuple[int, ...], fields: tuple[str, Kind, int, Any, int],
                        cost: int, timeout: float | None) -> None:
        """Route one message to every GP of ``pids`` (resolved, distinct):
        room is reserved at every target first (all or nothing), then a
        local GP gets the message in its pipe and each remote host ONE CDU
        naming its GPs, fanned out there.  ``what`` names the group in errors.

        Cancellation: a cancelled multicast has queued nothing and holds no room.
        """
        plan: list[tuple[Target, int]] = []   # (target, pid): every slot to reserve
        for pid in pids:
            tgt = self.targets.get(pid)
            if tgt is None:
                tgt = await self.target(pid, timeout)
            if isinstance(tgt, _LinkOnDemand):   # one CDU per host: group by the link itself
                tgt = tgt.link()
            plan.append((tgt, pid))
        taken: list[tuple[Target, int]] = []
        try:
            for tgt, pid in plan:
                await self.reserve(tgt, pid, cost, timeout, what, fields[0])
                taken.append((tgt, pid))
        except BaseException:
            for tgt, pid in taken:
                tgt.unreserve(pid, cost)
            raise
        msg = Message(fields)
        by_link: dict[int, tuple[Target, list[int]]] = {}
        for tgt, pid in plan:
            if tgt.remote:  # one CDU per remote host, fanned out there
                by_link.setdefault(id(tgt), (tgt, []))[1].append(pid)
            else:
                self._submit(tgt, pid, msg)
        source, kind, com, data, source_pid = fields
        for tgt, remote_pids in by_link.values():
            self._submit(tgt, remote_pids[0], CDU(kind, source_pid, tuple(remote_pids), data, com,
                                                  0, 0, 0, self.rank))

    def readers(self) -> list[tuple[str, int, int]]:
        """``(name, queued, taken)`` of every GP bound here (stall reports)."""
        names = self._names
        return [(names.get(pid, f"<pid {pid}>"), len(tgt), tgt.taken)
                for pid, tgt in self.targets.items() if type(tgt) is Pipe]

    # -------------------------------------------------------------- closing
    def close(self, exc: BaseException) -> None:
        """The node closes: every waiter fails with ``exc``; parked items go."""
        self._closed = exc
        for waiters in (*self._name_waiters.values(), *self._bind_waiters.values(),
                        *self._pid_waiters.values()):
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(exc)
                    fut.exception()
        self._name_waiters.clear()
        self._bind_waiters.clear()
        self._pid_waiters.clear()

    def stats(self) -> dict[str, int]:
        return {"targets": len(self.targets),
                "bind_waits": sum(not f.done() for w in self._bind_waiters.values() for f in w)}


def _if_freed(left: dict[str, int], rank: int, name: str) -> None:
    """Raise the name rule's error when ``name`` is among ``left`` (names
    freed since they were registered -> the rank of their GP); ``rank``: here."""
    home = left.get(name)
    if home is not None:
        exc = UnknownProcessError(name, freed_on=home)
        if home not in (rank, -1):
            exc.origin_rank = home   # under aiopdbp.run: a consequence of that rank
        raise exc


def _nothing(_: Any) -> None:
    pass


def _no(_: Any) -> bool:
    return False


def _wake(waiters: Any) -> None:
    for fut in waiters:
        if not fut.done():
            fut.set_result(None)

