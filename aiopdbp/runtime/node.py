"""The node: one per host (MPI rank) -- the composition root.

``async with aiopdbp.open_node() as node`` starts a node: on a plain
``python prog.py`` it is a single host whose GPs all live in this process;
under ``mpiexec`` (or ``aiopdbp launch``) every rank opens one node and GPs on
different ranks talk by name exactly as local ones do.

A node puts the paper's parts together and owns their lifecycle; each part
lives in its own module and the node only calls their public methods:

==================  ============================================================
``node.tables``     NTA/PTA/MTA (:mod:`aiopdbp.hosts.tables`), updated only by
                    :meth:`Node.commit` (rank 0 sequences updates)
``node.pps``        the private pipes (PPS), ``node.cps_streams`` the public
                    stream pipes (:mod:`aiopdbp.routing.pipes`)
``node.manager``    the PipeManager and the public message pipe
                    (:mod:`aiopdbp.routing.manager`)
``node.router``     names, targets, the routing decision (:mod:`aiopdbp.routing.router`)
``node.arrivals``   what other hosts send, placed in the GPs' pipes, and the
                    credit it owes them (:mod:`aiopdbp.routing.arrivals`)
``node.streams``    live streams and their bindings (:mod:`aiopdbp.streams.table`)
``node.devices``    device support: backend, pinned pool, SGPs
                    (:mod:`aiopdbp.streams.devicepath`), made on first use
                    (:mod:`aiopdbp.runtime.devices`)
GPs                 the GPs living here: registration, their pipes, release
                    (:mod:`aiopdbp.runtime.localgps`, behind :meth:`Node.register`,
                    ``apply_pipe``, ``release_pipe``, ``free``)
``Remote``          links, RBP, control messages, handshake, liveness
                    (:mod:`aiopdbp.hosts.remote`), on more than one host; the
                    parts built before it reach it through a RemoteSide
                    (:mod:`aiopdbp.runtime.remoteside`)
==================  ============================================================

Leaving the ``async with`` drains what was sent, frees the GPs that are still
registered, stops the PipeManager and closes the transport, so the loop ends
with no pending task.  An exception leaving it under MPI fails the whole job
first (:mod:`aiopdbp.runtime.job`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from aiopdbp.arrays import KINDS
from aiopdbp.env import local_transport_forced
from aiopdbp.errors import ClosedResourceError
from aiopdbp.runtime.job import adopt_loop, current_job, end_adopted
from aiopdbp.runtime.job import run as run
from aiopdbp.routing.manager import PipeManager
from aiopdbp.routing.pipes import PipePool
from aiopdbp.runtime.devices import NodeDevices, on_demand
from aiopdbp.runtime.localgps import LocalGPs
from aiopdbp.runtime.process import GP
from aiopdbp.runtime.remoteside import RemoteSide
from aiopdbp.hosts.remote import Remote, RemoteConfig, RemoteStats
from aiopdbp.routing.arrivals import Arrivals
from aiopdbp.routing.router import Router
from aiopdbp.stall import DEFAULT_STALL_TIMEOUT, StallWatch
from aiopdbp.streams.table import StreamTable
from aiopdbp.hosts.tables import NodeType, PType, Tables
from aiopdbp.transport.base import Transport

if TYPE_CHECKING:   # made on first use: a rank may never open an SGP or ask for stats
    from aiopdbp.device.backend import DeviceBackend
    from aiopdbp.runtime.stats import NodeStats
    from aiopdbp.streams.devicebind import DeviceConfig
    from aiopdbp.streams.devicepath import DevicePath

__all__ = ["DEFAULT_NAME_TIMEOUT", "Node", "open_node", "run"]

#: the name rule's default wait (seconds); also the handshake's and the
#: liveness timeout's default: one answer to "is it there (still)?"
DEFAULT_NAME_TIMEOUT = 30.0


class _WholeStreams:
    """The arrivals' way to the stream table (:class:`~aiopdbp.routing.arrivals.WholeStreams`),
    which is built after them: forwards to the node's."""

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    @property
    def open_whole(self) -> Callable[[int, int, int, Any, int, int, int, Any], Any | None]:
        # the table's own method, read once per frame by the arrivals (no
        # forwarding frame per short stream)
        return self._node.streams.open_whole

    def undelivered(self, items: list[Any]) -> None:
        self._node.streams.undelivered(items)


class Node:
    """The node of one rank (one host of the job): where its GPs live.

    Get it with ``async with aiopdbp.open_node(**options) as node``; the
    options are the arguments below, and every one has a default that suits a
    workstation.

    Args:
        transport: how the ranks reach each other; ``open_node`` picks it
            (MPI under a launcher with more than one rank, else none: one
            process).
        pipe_capacity: messages (or stream segments) one GP's inbox holds
            before the senders on its own host wait: the backpressure bound.
        max_pipes: how many inboxes this host can have at once: GPs with a
            pipe plus incoming streams.
        stream_pipes: how many streams this host can be sending at once.
        stream_window: segments a stream has in flight; also how far out of
            order its segments may arrive.  A stream to another host whose
            ``segment_size`` is below 16 KiB may have as many segments in
            flight as this many of 16 KiB hold (at most 4096).
        allow_pickle: allow arbitrary Python objects as payloads (pickle
            protocol 5).  **Trusted clusters only**: unpickling runs code
            chosen by the sender.
        arrays: what an array arrives as: ``"auto"`` (as it was sent: a
            PyTorch tensor as a tensor where torch imports here, else numpy),
            ``"numpy"`` or ``"torch"``; ``recv``/``read`` may override it per
            call (:doc:`/guide/arrays`).
        remote: :class:`~aiopdbp.hosts.remote.RemoteConfig`, the tunables of
            a job of several ranks.
        close_timeout: seconds the close of the node (and a request to
            rank 0) may wait for the other ranks before it gives up (default
            ``RemoteConfig.close_timeout``, 60 s).
        handshake_timeout: seconds every rank has to join at start-up, else
            :class:`HandshakeError`.  Defaults to ``max(name_timeout, 30)``.
        name_timeout: the name rule: ``send``, ``send_stream`` and ``lookup``
            wait up to this many seconds for a name that is not registered
            yet (another rank may still be starting), then raise
            :class:`UnknownProcessError`; their ``timeout=`` overrides it
            (``0``: do not wait).  A name that was registered and freed since
            fails at once.
        host_timeout: liveness: a host not heard of for this many seconds is
            lost (``0`` disables the heartbeat).  Defaults to
            ``max(name_timeout, 30)``, like ``handshake_timeout``: a short
            ``name_timeout`` (fail fast on a typo) never makes a loaded rank
            look dead.
        device: GPU support (GPU GPs, device arrays): ``"auto"`` (CuPy if
            installed, opened on first use), ``"cupy"``, ``"sim"`` (the
            simulated device, on the CPU), ``"none"``, a backend instance, or
            a :class:`~aiopdbp.streams.devicebind.DeviceConfig` (pinned pool
            size, chunk size, chunks in flight); default: env
            ``AIOPDBP_DEVICE``, else ``"auto"``.
        stall_timeout: a send that has waited this long for its destination
            to read is logged (the ``aiopdbp.stall`` logger), and so is a GP
            that holds data and has not called ``recv`` for as long; GPs that
            wait for each other in a cycle while none reads fail with
            :class:`~aiopdbp.errors.DeadlockError` (:mod:`aiopdbp.stall`).
            Default 30 s; ``None`` or ``0``: off.
    """

    def __init__(self, transport: Transport | None = None, *, pipe_capacity: int = 1024,
                 max_pipes: int = 65536, stream_pipes: int = 1024, stream_window: int = 16,
                 allow_pickle: bool = False, arrays: str = "auto", remote: RemoteConfig | None = None,
                 close_timeout: float | None = None, handshake_timeout: float | None = None,
                 name_timeout: float = DEFAULT_NAME_TIMEOUT,
                 host_timeout: float | None = None,
                 device: DeviceConfig | str | DeviceBackend | None = None,
                 stall_timeout: float | None = DEFAULT_STALL_TIMEOUT) -> None:
        self.transport = transport
        #: this node's rank in the job, ``0 .. size - 1``
        self.rank = transport.rank if transport is not None else 0
        #: how many ranks (nodes) the job has; 1 for one process
        self.size = transport.size if transport is not None else 1
        self.allow_pickle = allow_pickle
        if arrays not in KINDS:
            raise ValueError(f"arrays is one of {KINDS}, not {arrays!r}")
        self.arrays = arrays
        self.stream_window = stream_window
        self.name_timeout = name_timeout
        cfg = remote or RemoteConfig()
        if handshake_timeout is None and cfg.handshake_timeout is None:
            handshake_timeout = max(name_timeout, DEFAULT_NAME_TIMEOUT)  # one rule for "is it there yet?"
        # a copy: the caller's RemoteConfig is theirs, never changed here
        cfg = dataclasses.replace(
            cfg, close_timeout=cfg.close_timeout if close_timeout is None else close_timeout,
            handshake_timeout=cfg.handshake_timeout if handshake_timeout is None else handshake_timeout)
        self.tables = Tables()
        # a GP's pipe holds from its own rank at most what one other host may
        # have outstanding towards it: the window (aiopdbp.routing.pipes, "Bytes")
        self.pps = PipePool(pipe_capacity, max_pipes, label="pps", max_bytes=cfg.gp_window)
        self.cps_streams = PipePool(1 << 30, stream_pipes, first_id=1 << 20, label="cps")
        self.manager = PipeManager()
        # With other hosts, the Remote is built last: it serves the router, the
        # arrivals, the stream table and the stall watch built before it, and
        # they are handed the methods of a RemoteSide, which gets the Remote once
        # it is built (those parts get callables, never an attribute set later).
        side = RemoteSide() if transport is not None and self.size > 1 else None
        multi = side is not None
        self.router = Router(self.tables, self.pps, self.rank, name_timeout=name_timeout,
                             submit=self.manager.submit, offer=self.manager.offer,
                             queued=self.manager.queued, links=side.link if side else None,
                             want=side.want if side else None,
                             want_pid=side.want_pid if side else None,
                             recheck=side.recheck if side else None,
                             carry=side.carry if side else None)
        #: what other hosts send, into the GPs' pipes, and the credit it owes them
        self.arrivals = Arrivals(self.tables, self.router.targets, self.rank, window=cfg.gp_window,
                                 bind_timeout=cfg.bind_timeout, grant=side.grant if side else None,
                                 streams=_WholeStreams(self) if multi else None,
                                 landings=self.router.landings,
                                 want_pid=side.want_pid if side else None)
        router, arrivals, submit = self.router, self.arrivals, self.manager.submit

        def devices() -> DevicePath:
            from aiopdbp.streams.devicepath import DevicePath

            return DevicePath(device, rank=self.rank, tables=self.tables, router=router, arrivals=arrivals,
                              submit=submit, transport=transport)

        self._devices = NodeDevices(devices, eager=not on_demand(device))
        self.streams = StreamTable(self.rank, stream_window, self.tables, self.pps, self.cps_streams,
                                   self.router, self.arrivals, submit=self.manager.submit,
                                   watch=self.manager.watch,
                                   device=self._devices, peers=side,
                                   large=cfg.large if multi else None, offer=self.manager.offer,
                                   route=self.manager.put, route_now=self.manager.route_now)
        #: arrays at least this large may travel from the sender's own buffer
        #: (``RemoteConfig.large``; None on one host: a local send always copies)
        self.owned_min: int | None = cfg.large if multi else None
        #: what a GP waiting in ``recv`` calls to step the transport itself (None: nothing to drive)
        self.drive = transport.drive if multi and transport is not None and transport.drives else None
        self._started = False
        self._closed = False
        self._remote: Remote | None = None
        self._gps = LocalGPs(self, tables=self.tables, pps=self.pps, arrivals=self.arrivals,
                             streams=self.streams, sgps=self._devices, commit=self.commit,
                             commit_nowait=self.commit_nowait)
        self.host_timeout = max(name_timeout, DEFAULT_NAME_TIMEOUT) if host_timeout is None else host_timeout
        self.stall = StallWatch(
            self.rank, self.router.waits, self.router.readers, timeout=stall_timeout or 0.0,
            report=side.send_stall if side and self.rank != 0 else None,
            broadcast=side.send_deadlock if side else None,
            receivers=self._gps.receivers if multi else None)
        if side is not None:
            assert transport is not None
            self._remote = Remote(transport, cfg, self.tables, self.arrivals, self.streams,
                                  allow_pickle=allow_pickle, stall=self.stall,
                                  host_timeout=self.host_timeout, job=current_job)
            side.attach(self._remote)

    def __repr__(self) -> str:
        return f"<Node {self.rank}/{self.size} gps={len(self._gps)}>"

    @property
    def devices(self) -> DevicePath:
        """The node's device support (backend, pinned pool, SGPs), made on first use."""
        return self._devices.path

    # -- lifecycle --------------------------------------------------------------
    async def start(self) -> None:
        """Join the other ranks and start routing.  ``async with
        open_node()`` calls it for you.

        Cancellation: a cancelled start leaves the node unstarted; call
        ``aclose()`` to release what was set up.
        """
        if self._started:
            return
        self._started = True
        self._devices.start()  # a named backend and its pinned pool: now, before any GP
        self.manager.start()
        self.stall.start()
        if self._remote is not None:
            job = current_job() or adopt_loop()  # asyncio.run & co: fail and stop as aiopdbp.run does
            await self._remote.start()
            if job is not None:
                job.attach(self._remote)
        else:
            self.tables.apply("node_add", (0, socket.gethostname(), _host_ip(), int(NodeType.MASTER)))

    async def aclose(self, *, graceful: bool = True) -> None:
        """Drain, free every GP, stop routing, close the transport.  Idempotent.

        ``graceful=False`` skips the drain and the BYE exchange with the other
        hosts (the program is failing: do not wait for peers).

        Cancellation: if cancelled while draining, the node is still closed
        (without waiting for the drain) before the cancellation propagates.
        """
        if self._closed:
            return
        self._closed = True
        self._gps.close()
        self.stall.stop()
        try:
            if self._started and graceful:
                # what the program left open (a Barrier of a GP not freed)
                # closes while the peers can still hear it
                await self._gps.aclose_owned()
                await self.manager.drain()
                if self._remote is not None:
                    await self._remote.close()
        finally:
            gone = ClosedResourceError(f"node {self.rank} closed")
            self.router.close(gone)
            self.arrivals.close()
            if self._remote is not None:
                job = current_job()
                if job is not None:
                    job.detach(self._remote)
                self._remote.stop()
            self.streams.close(gone)
            self._devices.close()
            self._gps.drop_all()
            self.pps.close()
            self.cps_streams.close()
            await self.manager.stop()
            if self.transport is not None:
                await self.transport.aclose(graceful=graceful)

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until everything sent so far has left this host: routed by the
        PipeManager and, for remote GPs, handed to MPI and completed.  Use it
        before code that blocks the event loop (a raw MPI call, a long
        computation) so that peers are not left waiting.

        Cancellation: nothing to undo; what was sent keeps going.
        """
        async with asyncio.timeout(timeout):
            await self.manager.drain()
            if self._remote is not None:
                await self._remote.flush()

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
        if job is not None and job.adopted:
            end_adopted(job, exc)   # no aiopdbp.run after the loop to end the process

    # -- the single point of table updates ------------------------------------
    async def commit(self, op: str, *args: Any) -> Any:
        """Apply a table update in the job-wide order (rank 0 sequences it).
        Internal: the node's own registrations and bindings go through it.

        Cancellation: see :meth:`aiopdbp.hosts.remote.Remote.commit`.
        """
        if self._remote is not None:
            return await self._remote.commit(op, args)
        return self.tables.apply(op, args)

    def commit_nowait(self, op: str, *args: Any) -> None:
        """Ask for a table update without waiting for it.  Internal."""
        if self._remote is not None:
            self._remote.commit_nowait(op, args)
        else:
            self.tables.apply(op, args)

    # -- registration (prcsReg / prcsFree) ------------------------------------
    async def register(self, name: str, ptype: PType = PType.CPU, *, bind: bool = False,
                       device: int | None = None, to_device: bool = False) -> GP:
        """Register a GP named ``name`` and return it; you free it
        (:meth:`GP.free`).  :meth:`process` does this and the cleanup for
        you: prefer it.

        Args:
            name: the GP's name, unique in the whole job (a taken name raises
                :class:`~aiopdbp.errors.DuplicateProcessError`); other GPs
                send to it by this name.
            ptype: ``PType.CPU`` (the default), or ``PType.GPU`` for a GPU GP
                (an :class:`~aiopdbp.runtime.sgp.SGP`; ``DeviceError``
                without device support).
            bind: ``True``: the GP gets its inbox (a private pipe) in the same
                step, so no rank ever sees the name registered but unable to
                receive; ``False``: call :meth:`GP.apply_pipe` before anything
                is sent to it.
            device: a GPU GP's device number (default: this rank's).
            to_device: a GPU GP receives host arrays on its device too.

        Cancellation: a registration that completes after its caller was
        cancelled is undone.
        """
        return await self._gps.register(name, ptype, bind=bind, device=device, to_device=to_device)

    @contextlib.asynccontextmanager
    async def process(self, name: str, ptype: PType = PType.CPU, *, device: int | None = None,
                      to_device: bool = False) -> AsyncIterator[GP]:
        """``async with node.process(name) as gp``: a new GP named ``name``,
        ready to send and receive, freed when the block ends.

        On entry it registers the name and gives the GP its inbox; on exit,
        whatever the exit, it frees both (the exception the block leaves
        with reaches the senders of the streams it was receiving).  The
        arguments are those of :meth:`register`: ``ptype=PType.GPU`` makes a
        GPU GP."""
        gp = await self.register(name, ptype, bind=True, device=device, to_device=to_device)
        failure: BaseException | None = None
        try:
            yield gp
        except BaseException as exc:
            failure = exc
            job = current_job()
            if job is not None:
                job.note_gp_failure(exc, name)   # a failure report names the GP
            raise
        finally:
            await gp.free(reason=failure)

    async def apply_pipe(self, gp: GP, timeout: float | None) -> None:
        """Bind a private pipe to ``gp``.  Internal: call :meth:`GP.apply_pipe`.

        Cancellation: the pipe goes back to the pool and ``gp`` stays unbound
        on this host.
        """
        await self._gps.apply_pipe(gp, timeout)

    async def release_pipe(self, gp: GP, reason: BaseException | None = None, *, tell: bool = True) -> None:
        """Unbind ``gp``'s pipe.  Internal: call :meth:`GP.release_pipe`.
        ``tell=False``: here only (its free follows and says so).

        Cancellation: the pipe is unbound and back in the pool before the first
        suspension; only the table update to the other hosts may still be on
        its way.
        """
        await self._gps.release_pipe(gp, reason, tell=tell)

    async def free(self, gp: GP, *, wait: bool = True) -> None:
        """Unregister ``gp``.  Internal: call :meth:`GP.free`.  ``wait=False``: ask for
        the table update without waiting for it (a GP leaving with an error).

        Cancellation: this host forgets ``gp`` before the first suspension; the
        table update that frees its name everywhere may still be on its way.
        """
        await self._gps.free(gp, wait=wait)

    async def lookup(self, name: str, timeout: float | None = None) -> int:
        """The pid of ``name``, waiting for it to be registered by the name
        rule: up to ``timeout`` seconds, by default the node's
        ``name_timeout``; then :class:`UnknownProcessError`.  A GP created
        with :meth:`process` is registered with its pipe already bound, so a
        send can follow at once.

        Cancellation: nothing to undo.
        """
        return await self.router.resolve(name, timeout)

    # -- liveness -----------------------------------------------------------------
    async def host_lost(self) -> tuple[int, BaseException]:
        """Wait until a host is lost (silent for ``host_timeout``; noticed by
        the ranks that watch it and passed on to every rank): returns
        ``(rank, HostLostError)``.  Under ``aiopdbp.run`` the job is aborted
        ``RemoteConfig.lost_grace`` later (1 s by default), with that message.

        Cancellation: nothing to undo.
        """
        if self._remote is None:
            await asyncio.Event().wait()  # a single host never loses one
        assert self._remote is not None
        return await self._remote.wait_lost()

    def on_host_lost(self, callback: Any) -> None:
        """Call ``callback(rank, HostLostError)`` when a host is lost, before
        the job is aborted."""
        if self._remote is not None:
            self._remote.add_lost_callback(callback)

    # -- diagnostics ---------------------------------------------------------------
    def stats(self) -> NodeStats:
        """A typed snapshot of the node's counters (see :class:`NodeStats`)."""
        from aiopdbp.runtime.stats import NodeStats

        r = self._remote.snapshot() if self._remote is not None else RemoteStats()
        return NodeStats(
            rank=self.rank, size=self.size, gps=len(self._gps),
            routed=self.manager.routed + self.router.offered,
            dropped=self.manager.dropped + self.arrivals.dropped + self.streams.dropped,
            parked=self.arrivals.parked,
            pipes_in_use=self.pps.in_use, pipes_created=self.pps.created,
            streams_in=self.streams.incoming, streams_out=self.streams.outgoing,
            segments_landed=self.streams.landed,
            table_version=self.tables.version, table_digest=self.tables.digest,
            credit_owed=self.arrivals.book.owed(), bind_waits=self.router.stats()["bind_waits"],
            transport=self.transport.stats() if self.transport is not None else {},
            devices=self._devices.stats(),
            stall=self.stall.stats(),
            links=r.links, received=r.received, protocol_errors=r.protocol_errors,
            fallback_allocs=r.fallback_allocs, failed_hosts=r.failed_hosts, pool=r.pool,
            liveness=r.liveness, messages_sent=r.messages_sent, messages_received=r.messages_received,
        )

    def size_history(self, host: int) -> dict[str, list[tuple[float, int]]]:
        """Size over time of the buffer pools kept for ``host`` (the send
        pool and the receive pool grow and shrink with the traffic): for the
        benchmarks' plots."""
        if self._remote is None:
            return {"send": [], "recv": []}
        return self._remote.size_history(host)


def _host_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def open_node(transport: Transport | None = None, **options: Any) -> Node:
    """This process's node, to be used as ``async with open_node() as node``:
    the block starts it (joining the other ranks) and closes it.

    Args:
        transport: leave it out: under ``mpiexec`` (or ``aiopdbp launch``)
            with more than one rank the ranks talk over MPI, one node per
            rank; otherwise the node is a single host and every GP lives in
            this process (``AIOPDBP_TRANSPORT=local`` forces that).
        options: the :class:`Node` options (``name_timeout``,
            ``allow_pickle``, ``pipe_capacity``, ...).
    """
    if transport is None:
        transport = _default_transport(options)
    return Node(transport, **options)


def _default_transport(options: dict[str, Any]) -> Transport | None:
    if local_transport_forced():
        return None
    try:
        from aiopdbp.transport.mpi import MPITransport, mpi_world_size
    except ImportError:
        return None
    if mpi_world_size() > 1:
        cfg = options.get("remote")
        join = options.get("handshake_timeout") or (cfg.handshake_timeout if cfg is not None else None) \
            or options.get("name_timeout") or DEFAULT_NAME_TIMEOUT
        return MPITransport(join_timeout=join)
    return None
