"""The node: one per host (MPI rank), owning the tables, pipes and PipeManager.

``async with aiopdbp.open_node() as node`` starts a node: on a plain
``python prog.py`` it is a single host whose GPs all live in this process;
under ``mpiexec`` (or ``aiopdbp launch``) every rank opens one node and GPs on
different ranks talk by name exactly as local ones do.

Leaving the ``async with`` drains what was sent (every CDU in the public
pipes is routed, every outgoing block handed to the transport), frees the
GPs that are still registered, stops the PipeManager and closes the
transport, so the loop ends with no pending task.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, TypeVar

from .codec import CDU, Kind, StreamOp
from .job import current_job
from .job import run as run
from .errors import BrokenResourceError, ClosedResourceError, NoPipeError, UnknownProcessError, WouldBlock
from .manager import PipeManager, Target
from .pipes import Pipe, PipePool
from .remote import Remote, RemoteConfig, pack_meta as _pack_meta, unpack_meta as _unpack_meta
from .process import GP
from .streams import IncomingStream, OutgoingStream, StreamMeta
from .tables import NodeType, PType, Tables
from .transport.base import Transport

log = logging.getLogger("aiopdbp.node")

#: the name rule's default wait (seconds); also the handshake's default
DEFAULT_NAME_TIMEOUT = 30.0
T = TypeVar("T")


class Node:
    """One host of the PDBP system.

    Parameters (all have defaults that suit a workstation):

    ``pipe_capacity``
        CDUs one private pipe holds before its senders wait (backpressure).
    ``max_pipes``
        size of the private pipe pool (PPS): bound GPs + live incoming streams.
    ``stream_pipes``
        size of the public stream-pipe group: concurrent outgoing streams.
    ``stream_window``
        CDUs a stream's bound pipe holds; also its reorder window.
    ``allow_pickle``
        allow arbitrary Python objects as payloads (pickle protocol 5).
        **Trusted clusters only**: unpickling runs code chosen by the sender.
    ``name_timeout``
        the name rule: ``send``, ``send_stream`` and ``lookup`` wait up to this
        many seconds for a name that is not registered yet (another rank may
        still be starting), then raise :class:`UnknownProcessError`; their
        ``timeout=`` overrides it (``0``: do not wait).  A name that was
        registered and freed since fails at once.  Also the default of
        ``handshake_timeout``.
    """

    def __init__(self, transport: Transport | None = None, *, pipe_capacity: int = 1024,
                 max_pipes: int = 65536, stream_pipes: int = 1024, stream_window: int = 16,
                 allow_pickle: bool = False, remote: RemoteConfig | None = None,
                 close_timeout: float | None = None, handshake_timeout: float | None = None,
                 name_timeout: float = DEFAULT_NAME_TIMEOUT) -> None:
        self.transport = transport
        self.name_timeout = name_timeout
        self._left: set[str] = set()                # names registered once and freed since
        self.rank = transport.rank if transport is not None else 0
        self.size = transport.size if transport is not None else 1
        self.allow_pickle = allow_pickle
        self.stream_window = stream_window
        self.tables = Tables()
        self.tables.subscribe(self._on_update)
        self._pids = self.tables.by_name            # hot-path alias: name -> pid
        self._targets: dict[int, Target] = {}       # pid -> where its CDUs go
        self.pps = PipePool(pipe_capacity, max_pipes, label="pps")
        self.cps_streams = PipePool(1 << 30, stream_pipes, first_id=1 << 20, label="cps")
        self._public: Pipe[CDU] = Pipe(1 << 30, 0, "cps-msg")
        self.manager = PipeManager(self)
        self.manager.watch(self._public)
        self._gps: dict[int, GP] = {}
        self._ids = itertools.count(1)
        self._snos = itertools.count(1)
        self._streams_in: dict[tuple[int, int], IncomingStream] = {}
        self._streams_out: dict[tuple[int, int], OutgoingStream] = {}
        self._name_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._bind_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._pid_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._started = False
        self._closed = False
        self._closed_streams: set[tuple[int, int]] = set()
        self._ever_bound: set[int] = set()
        self._remote: Remote | None = None
        if transport is not None and self.size > 1:
            cfg = remote or RemoteConfig()
            if close_timeout is not None:
                cfg.close_timeout = close_timeout
            if handshake_timeout is not None:
                cfg.handshake_timeout = handshake_timeout
            elif cfg.handshake_timeout is None:
                cfg.handshake_timeout = name_timeout  # one rule for "is it there yet?"
            self._remote = Remote(self, transport, cfg)

    def __repr__(self) -> str:
        return f"<Node {self.rank}/{self.size} gps={len(self._gps)}>"

    # -- lifecycle --------------------------------------------------------------
    async def start(self) -> None:
        """Run the initialisation sequence and start routing.

        Cancellation: a cancelled start leaves the node unstarted; call
        ``aclose()`` to release what was set up.
        """
        if self._started:
            return
        self._started = True
        self.manager.start()
        if self._remote is not None:
            await self._remote.start()
            job = current_job()
            if job is not None:
                job.attach(self._remote)
        else:
            self.tables.apply("node_add", (0, socket.gethostname(), _host_ip(), int(NodeType.MASTER)))

    async def aclose(self, *, graceful: bool = True) -> None:
        """Drain, free every GP, stop routing, close the transport.  Idempotent.

        ``graceful=False`` skips the drain and the BYE exchange with the other
        hosts (used when the program is failing: do not wait for peers).

        Cancellation: if cancelled while draining, the node is still closed
        (without waiting for the drain) before the cancellation propagates.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._started and graceful:
                await self._drain()
                if self._remote is not None:
                    await self._remote.close()
        finally:
            gone = ClosedResourceError(f"node {self.rank} closed")
            for waiters in (*self._name_waiters.values(), *self._bind_waiters.values(),
                            *self._pid_waiters.values()):
                for fut in waiters:
                    if not fut.done():
                        fut.set_exception(gone)
                        fut.exception()
            self._name_waiters.clear()
            self._bind_waiters.clear()
            if self._remote is not None:
                job = current_job()
                if job is not None:
                    job.detach(self._remote)
                await self._remote.stop()
            for stream in list(self._streams_in.values()):
                stream._fail(BrokenResourceError("node closed"))
                self._incoming_closed(stream, "receiving node closed", True)
            for gp in list(self._gps.values()):
                self._drop_gp(gp)
            self.pps.close()
            self.cps_streams.close()
            await self.manager.stop()
            if self.transport is not None:
                await self.transport.aclose(graceful=graceful)

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until everything sent so far has left this host: routed by the
        PipeManager and, for remote GPs, handed to the transport and
        completed.  Use it before code that blocks the event loop (a raw MPI
        call, a long computation) so that peers are not left waiting.

        Cancellation: nothing to undo; what was sent keeps going.
        """
        async with asyncio.timeout(timeout):
            await self._drain()
            if self._remote is not None:
                await self._remote.flush()

    async def _drain(self) -> None:
        # Route everything already in the public pipes; the manager only
        # parks when every public pipe is empty.
        while not self.manager.idle or len(self._public):
            await asyncio.sleep(0)

    async def __aenter__(self) -> Node:
        try:
            await self.start()
        except BaseException:
            await self.aclose(graceful=False)  # __aexit__ will not run
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> None:
        # An error leaving the block under MPI fails the job: this rank's
        # traceback is printed and the peers are told *before* anything
        # closes (so no consequence on a peer is reported first); then the
        # node closes at once instead of making the others wait for a BYE.
        job = current_job()
        if exc is not None and self._remote is not None and job is not None and job.under_mpi \
                and job.stop is None:
            await job.fail(exc, peer=self._remote)
        await self.aclose(graceful=exc_type is None or self._remote is None)

    # -- the single point of table updates ------------------------------------
    async def _commit(self, op: str, *args: Any) -> Any:
        """Apply a table update in the cluster-wide order (rank 0 sequences it)."""
        if self._remote is not None:
            return await self._remote.commit(op, args)
        return self.tables.apply(op, args)

    def _commit_nowait(self, op: str, *args: Any) -> None:
        if self._remote is not None:
            self._remote.commit_nowait(op, args)
        else:
            self.tables.apply(op, args)

    def _on_update(self, op: str, args: tuple[Any, ...], result: Any) -> None:
        tables = self.tables
        if op == "proc_reg":
            self._left.discard(args[0])
            for fut in (*self._name_waiters.pop(args[0], ()), *self._pid_waiters.pop(result, ())):
                if not fut.done():
                    fut.set_result(None)
            if len(args) > 3 and args[3] is not None:
                self._on_update("pipe_bind", (result, args[3]), args[3])
        elif op == "pipe_bind":
            # A GP becomes a routing target once it has a pipe, wherever it
            # lives: locally its pipe, remotely the link to its host.
            pid, pipe_id = args
            entry = tables.pta.get(pid)
            if entry is not None:
                self._ever_bound.add(pid)
                self._targets[pid] = (self.pps.get(pipe_id) if entry.node == self.rank  # type: ignore[assignment]
                                      else self._link(entry.node))
                for fut in self._bind_waiters.pop(pid, ()):
                    if not fut.done():
                        fut.set_result(None)
        elif op in ("pipe_release", "proc_free"):
            pid = args[0]
            if op == "proc_free":
                self._left.add(self.tables.name_of(pid))
            self._targets.pop(pid, None)
            for fut in self._bind_waiters.pop(pid, ()):
                if not fut.done():
                    fut.set_result(None)  # the waiter re-checks and fails clearly

    def _link(self, node: int) -> Target:
        if self._remote is None:
            raise BrokenResourceError(f"host {node} is not reachable: this node has no remote links")
        return self._remote.link(node)

    def _submit(self, cdu: CDU) -> None:
        """Hand a CDU to the PipeManager.  When no public pipe holds anything
        the sender's task runs the manager's routing for it at once (same
        order, no hop to the manager task); otherwise it queues in the public
        message pipe and the manager drains it in its next batch."""
        manager = self.manager
        if not manager._ready and not self._public._items:
            manager.route(cdu)
            manager.routed += 1
        else:
            self._public.force_put(cdu)

    # -- registration (prcsReg / prcsFree) ------------------------------------
    async def register(self, name: str, ptype: PType = PType.CPU, *, bind: bool = False) -> GP:
        """Register a GP named ``name`` (the paper's prcsReg).

        Names are unique across the cluster; a taken name raises
        :class:`~aiopdbp.errors.DuplicateProcessError`.

        Cancellation: a cancelled register may or may not have registered the
        name (the update may already be ordered); it can be looked up.
        """
        if not isinstance(name, str) or not name:
            raise ValueError("a GP name is a non-empty str")
        if self._closed or not self._started:
            raise ClosedResourceError(f"node {self.rank} is {'closed' if self._closed else 'not started'}")
        if not bind:
            pid = await self._commit("proc_reg", name, int(ptype), self.rank)
            gp = GP(self, name, pid, PType(ptype))
            self._gps[pid] = gp
            return gp
        # Register with a bound pipe in ONE table update, so no host can see
        # the name before it can receive (register + apply in one step).
        pipe = await self.pps.apply()
        try:
            pid = await self._commit("proc_reg", name, int(ptype), self.rank, pipe.pipe_id)
        except BaseException:
            self.pps.release(pipe)
            raise
        gp = GP(self, name, pid, PType(ptype))
        gp._pipe = pipe
        self._gps[pid] = gp
        return gp

    @contextlib.asynccontextmanager
    async def process(self, name: str, ptype: PType = PType.CPU) -> AsyncIterator[GP]:
        """``async with node.process(name) as gp``: register + apply a pipe on
        entry, release + free on exit (whatever the exit)."""
        gp = await self.register(name, ptype, bind=True)
        failure: BaseException | None = None
        try:
            yield gp
        except BaseException as exc:
            failure = exc
            raise
        finally:
            await gp.free(reason=failure)

    async def _apply_pipe(self, gp: GP, timeout: float | None) -> None:
        if self._closed:
            raise ClosedResourceError(f"node {self.rank} is closed")
        pipe = await self.pps.apply(timeout)
        try:
            await self._commit("pipe_bind", gp.pid, pipe.pipe_id)
        except BaseException:
            self.pps.release(pipe)
            raise
        gp._pipe = pipe

    async def _release_pipe(self, gp: GP, reason: BaseException | None = None) -> None:
        pipe, gp._pipe = gp._pipe, None
        if pipe is None:
            return
        why = (f"GP {gp.name!r} on rank {self.rank} released its pipe" if reason is None else
               f"GP {gp.name!r} on rank {self.rank} left with {type(reason).__name__}: {reason}")
        self._abort_streams_to(gp.pid, why)
        self.pps.release(pipe)
        await self._commit("pipe_release", gp.pid)

    async def _free(self, gp: GP) -> None:
        self._gps.pop(gp.pid, None)
        if gp.pid in self.tables.pta:
            await self._commit("proc_free", gp.pid)

    def _drop_gp(self, gp: GP) -> None:
        """Free a GP synchronously (node shutdown)."""
        pipe, gp._pipe = gp._pipe, None
        if pipe is not None:
            self.pps.release(pipe)
            if gp.pid in self.tables.pta:
                self._commit_nowait("pipe_release", gp.pid)
        gp._freed = True
        self._gps.pop(gp.pid, None)
        if gp.pid in self.tables.pta:
            self._commit_nowait("proc_free", gp.pid)

    # -- name resolution ----------------------------------------------------------
    async def lookup(self, name: str, timeout: float | None = None) -> int:
        """The pid of ``name``, waiting for it to be registered by the name
        rule: up to ``timeout`` seconds, by default the node's
        ``name_timeout``; then :class:`UnknownProcessError`.  A GP created
        with :meth:`process` is registered with its pipe already bound, so a
        send can follow at once.

        Cancellation: nothing to undo.
        """
        return await self._resolve(name, timeout)

    async def _resolve(self, name: str, timeout: float | None) -> int:
        """The name rule (see ``name_timeout``), shared by every API."""
        pid = self._pids.get(name)
        if pid is not None:
            return pid
        wait = self.name_timeout if timeout is None else timeout
        if wait <= 0 or name in self._left:
            raise UnknownProcessError(name)
        if self._closed:
            raise ClosedResourceError(f"node {self.rank} is closed")
        fut = asyncio.get_running_loop().create_future()
        self._name_waiters.setdefault(name, []).append(fut)
        try:
            await asyncio.wait_for(fut, wait)
        except TimeoutError:
            raise UnknownProcessError(name, wait) from None
        finally:
            waiters = self._name_waiters.get(name)
            if waiters and fut in waiters:
                waiters.remove(fut)
        return self.tables.pid_of(name)

    async def _target_for(self, pid: int, timeout: float | None) -> Target:
        tgt = self._targets.get(pid)
        if tgt is not None:
            return tgt
        name = self.tables.process(pid).name  # raises for a freed pid
        if not timeout:
            raise NoPipeError(f"GP {name!r} has no private pipe bound (it must apply_pipe() first)")
        fut = asyncio.get_running_loop().create_future()
        self._bind_waiters.setdefault(pid, []).append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise TimeoutError(f"GP {name!r} bound no pipe within {timeout} s") from None
        tgt = self._targets.get(pid)
        if tgt is None:
            raise NoPipeError(f"GP {name!r} has no private pipe bound")
        return tgt

    async def _reserve(self, tgt: Target, timeout: float | None, dest: str = "the destination") -> None:
        try:
            tgt.reserve_nowait()
            return
        except WouldBlock:
            pass
        if timeout is None:
            await tgt.reserve()
        else:
            try:
                async with asyncio.timeout(timeout):
                    await tgt.reserve()
            except TimeoutError:
                where = (f"on the link to host {getattr(tgt, 'host', '?')}" if getattr(tgt, 'remote', False)
                         else "in its pipe")
                raise TimeoutError(f"timed out after {timeout:g} s waiting for room {where} to send "
                                   f"to {dest} (backpressure: it is not read as fast as it is "
                                   "sent to)") from None

    # -- streams -------------------------------------------------------------------
    async def _open_stream(self, gp: GP, pid: int, meta: StreamMeta,
                           timeout: float | None = None) -> OutgoingStream:
        entry = self.tables.process(pid)
        sno = next(self._snos)
        key = (self.rank, sno)
        pipe_a = await self.cps_streams.apply()
        self.manager.watch(pipe_a)
        incoming: IncomingStream | None = None
        try:
            await self._commit("stream_bind", self.rank, sno, pid, gp.pid, pipe_a.pipe_id)
            if entry.node == self.rank:
                incoming = await self._new_incoming(key, gp.pid, pid)
                incoming._open(meta)
                target: Any = incoming._pipe
                open_data: Any = incoming
            else:
                target = self._targets.get(pid)
                if target is None:
                    target = self._link(entry.node)
                meta.window = self.stream_window
                open_data = _pack_meta(meta)
            out = OutgoingStream(key, pid, pipe_a, target, asyncio.get_running_loop().create_future(),
                                 incoming)
            if incoming is None:
                out.credits = self.stream_window
            self._streams_out[key] = out
            # The OPEN travels the message path, so the receiver sees the
            # stream in arrival order with the sender's messages.
            tgt = await self._target_for(pid, timeout)
            await self._reserve(tgt, timeout, f"GP {entry.name!r}")
            self._submit(CDU(Kind.STREAM, gp.pid, (pid,), open_data, meta.com,
                             next(self._ids), sno, 0, self.rank, (), StreamOp.OPEN))
            return out
        except BaseException:
            if incoming is not None:
                self._incoming_closed(incoming, "sender failed to open the stream", False)
            self._streams_out.pop(key, None)
            self.cps_streams.release(pipe_a)
            if key in self.tables.mta:
                self._commit_nowait("stream_unbind", *key)
            raise

    async def _new_incoming(self, key: tuple[int, int], src_pid: int, dest_pid: int) -> IncomingStream:
        pipe_b = await self.pps.apply()
        pipe_b.capacity = self.stream_window
        stream = IncomingStream(self, key, self.tables.name_of(src_pid), pipe_b, self.stream_window)
        stream.dest_pid = dest_pid
        stream.source_pid = src_pid
        self._streams_in[key] = stream
        self._commit_nowait("stream_pipe_b", key[0], key[1], pipe_b.pipe_id)
        return stream

    async def _remote_targets(self, cdu: CDU) -> list[tuple[Target, bool]]:
        """Where a CDU that arrived from another host goes on this host:
        ``(target, force)`` pairs (``force``: put past capacity, for ABORT).

        Only waits in rare cases (a receiving GP that has not bound its pipe
        yet, an exhausted pipe pool); the caller places the CDU without
        blocking the other traffic from its host.
        """
        if cdu.kind is Kind.STREAM:
            key = (cdu.source_n, cdu.sno)
            op = cdu.op
            stream = self._streams_in.get(key)
            if stream is None:
                if key in self._closed_streams:
                    if op is StreamOp.END or op is StreamOp.ABORT:
                        self._closed_streams.discard(key)
                    return []
                if not cdu.dest_ps or not await self._known(cdu.dest_ps[0]):
                    return []
                # Segments may overtake their OPEN (they travel another public
                # pipe): bind the stream on first contact.
                stream = await self._new_incoming(key, cdu.source_p, cdu.dest_ps[0])
            if op is StreamOp.OPEN:
                stream._open(_unpack_meta(cdu.data))
                cdu.data = stream
                tgt = await self._local_target(cdu.dest_ps[0])
                return [] if tgt is None else [(tgt, False)]
            return [(stream._pipe, op is StreamOp.ABORT)]  # type: ignore[list-item]
        out: list[tuple[Target, bool]] = []
        for pid in cdu.dest_ps:
            if not await self._known(pid):
                continue
            entry = self.tables.pta.get(pid)
            if entry is not None and entry.node == self.rank:
                tgt = await self._local_target(pid)
                if tgt is not None:
                    out.append((tgt, False))
        return out

    def _remote_targets_nowait(self, cdu: CDU) -> list[tuple[Target, bool]] | None:
        """:meth:`_remote_targets` when it needs no wait, else None (then the
        caller takes the slow path).  Never changes the CDU."""
        if cdu.kind is Kind.STREAM:
            op = cdu.op
            if op is StreamOp.OPEN:
                return None
            stream = self._streams_in.get((cdu.source_n, cdu.sno))
            if stream is None:
                return None
            return [(stream._pipe, op is StreamOp.ABORT)]  # type: ignore[list-item]
        out: list[tuple[Target, bool]] = []
        pta = self.tables.pta
        rank = self.rank
        for pid in cdu.dest_ps:
            entry = pta.get(pid)
            if entry is None:
                if pid not in self.tables.names:
                    return None  # its registration has not reached us yet
                continue  # freed
            if entry.node == rank:
                tgt = self._targets.get(pid)
                if tgt is None:
                    return None
                out.append((tgt, False))
        return out

    async def _known(self, pid: int) -> bool:
        """Whether ``pid`` is registered; waits (up to the bind timeout) for a
        registration that has not reached this host yet.  Data can overtake
        the table update: the sender learnt the pid from rank 0's broadcast
        before we did, and data and control travel on different channels."""
        if pid in self.tables.pta:
            return True
        if pid in self.tables.names:
            return False  # registered once, freed since
        fut = asyncio.get_running_loop().create_future()
        self._pid_waiters.setdefault(pid, []).append(fut)
        timeout = self._remote.cfg.bind_timeout if self._remote is not None else 0
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.manager.dropped += 1
            log.warning("dropping a CDU for pid %d: never registered here", pid)
            return False
        finally:
            waiters = self._pid_waiters.get(pid)
            if waiters and fut in waiters:
                waiters.remove(fut)
        return pid in self.tables.pta

    async def _local_target(self, pid: int) -> Target | None:
        tgt = self._targets.get(pid)
        if tgt is not None:
            return tgt
        if pid in self._ever_bound:
            # It had a pipe and released it: drop now (waiting would stall
            # every other CDU from the same host for nothing).
            self.manager.dropped += 1
            log.debug("dropping a CDU for pid %d: its pipe was released", pid)
            return None
        timeout = self._remote.cfg.bind_timeout if self._remote is not None else None
        try:
            return await self._target_for(pid, timeout)
        except (TimeoutError, NoPipeError, UnknownProcessError) as exc:
            self.manager.dropped += 1
            log.warning("dropping a CDU for pid %d: %s", pid, exc)
            return None

    def _stream_done(self, key: tuple[int, int], error: str | None, origin: int | None = None) -> None:
        """A receiver (on rank ``origin``) consumed (or gave up) the stream ``key``."""
        out = self._streams_out.get(key)
        if out is None:
            return
        if error is None:
            if not out.done.done():
                out.done.set_result(None)
        else:
            out.broken = BrokenResourceError(f"stream receiver failed: {error}")
            if origin is not None and origin != self.rank:
                out.broken.origin_rank = origin
            out.wake()
            if not out.done.done():
                out.done.set_exception(out.broken)
                out.done.exception()

    def _stream_credit(self, stream: IncomingStream, n: int) -> None:
        """A remote stream's receiver consumed ``n`` segments: tell its sender."""
        if self._remote is not None and stream.key[0] != self.rank:
            self._remote.send_credit(stream.key, stream.dest_pid, stream.source_pid, n)

    def _stream_credit_in(self, key: tuple[int, int], n: int) -> None:
        out = self._streams_out.get(key)
        if out is not None:
            out.grant(n)

    def _break_streams_to(self, host: int, exc: BaseException) -> None:
        """Host ``host`` is gone: every stream sent there fails with ``exc``."""
        for out in list(self._streams_out.values()):
            if out.incoming is None and getattr(out.target, "host", None) == host:
                if out.broken is None:
                    out.broken = exc
                if not out.done.done():
                    out.done.set_exception(exc)
                    out.done.exception()
                out.wake()

    def _open_routed(self, cdu: CDU) -> None:
        out = self._streams_out.get((cdu.source_n, cdu.sno))
        if out is not None and not out.routed.done():
            out.routed.set_result(None)

    def _stream_for_open(self, cdu: CDU) -> IncomingStream:
        data = cdu.data
        if isinstance(data, IncomingStream):
            return data
        raise BrokenResourceError(f"stream {(cdu.source_n, cdu.sno)} has no local binding")

    def _stream_target(self, cdu: CDU) -> Target | None:
        key = (cdu.source_n, cdu.sno)
        stream = self._streams_in.get(key)
        if stream is not None:
            return stream._pipe  # type: ignore[return-value]
        out = self._streams_out.get(key)
        if out is not None and out.incoming is None:
            return out.target  # type: ignore[no-any-return]
        return None

    def _incoming_closed(self, stream: IncomingStream, error: str | None, notify: bool) -> None:
        """The receiving side of a stream is done (finished, aborted, abandoned)."""
        if self._streams_in.pop(stream.key, None) is None:
            return
        if stream.key[0] != self.rank:
            if not stream.finished:
                self._closed_streams.add(stream.key)  # drop what is still in flight
            if notify and self._remote is not None:
                self._remote.send_done(stream.key, stream.dest_pid,
                                       stream.source_pid, error)
            self.pps.release(stream._pipe)
            return
        if notify:
            self._stream_done(stream.key, error)
        self.pps.release(stream._pipe)

    def _close_outgoing(self, out: OutgoingStream) -> None:
        """The sending side is done: flush PipeA, undo the binding, free pipes."""
        if out.key not in self._streams_out:
            return
        # Route what is still in PipeA (an ABORT among it) while the stream
        # is still known, then forget it.
        for cdu in out.pipe_a.drain_nowait():
            self.manager.route(cdu)
        del self._streams_out[out.key]
        self.cps_streams.release(out.pipe_a)
        if out.key in self.tables.mta:
            self._commit_nowait("stream_unbind", *out.key)

    def _abort_streams_to(self, pid: int, why: str) -> None:
        for stream in [s for s in self._streams_in.values() if s.dest_pid == pid]:
            stream._fail(BrokenResourceError(why))
            self._incoming_closed(stream, why, True)

    # -- diagnostics ---------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters: routed/dropped CDUs, pipes in use, live streams, table
        version; with remote hosts also ``remote`` (per-link counters, credits,
        and the DDBP sub-pools: real size, DF/SU, grows, waits)."""
        extra = {"remote": self._remote.stats()} if self._remote is not None else {}
        return {**extra,
            "rank": self.rank, "size": self.size, "gps": len(self._gps),
            "routed": self.manager.routed, "dropped": self.manager.dropped,
            "pipes_in_use": self.pps.in_use, "pipes_created": self.pps.created,
            "streams_in": len(self._streams_in), "streams_out": len(self._streams_out),
            "table_version": self.tables.version, "table_digest": self.tables.digest,
        }


def _host_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def open_node(transport: Transport | None = None, **options: Any) -> Node:
    """The node of this host, to be used as ``async with open_node() as node``.

    With no ``transport``: under ``mpiexec`` with more than one rank the MPI
    transport is used (one node per rank); otherwise the node is a single
    host and every GP lives in this process.  ``options`` go to :class:`Node`.
    """
    if transport is None:
        transport = _default_transport()
    return Node(transport, **options)


def _default_transport() -> Transport | None:
    if os.environ.get("AIOPDBP_TRANSPORT", "").lower() == "local":
        return None
    try:
        from .transport.mpi import MPITransport, mpi_world_size
    except ImportError:
        return None
    if mpi_world_size() > 1:
        return MPITransport()
    return None
