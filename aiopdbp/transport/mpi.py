"""The MPI transport: blocks between ranks over two duplicated communicators.

This module and the progress engine's (:mod:`aiopdbp.transport.progress`,
:mod:`~aiopdbp.transport.sends`, :mod:`~aiopdbp.transport.receives`,
:mod:`~aiopdbp.transport.comms`) are the only parts of aiopdbp that import
mpi4py, and they do so lazily: importing this module does
*not* import mpi4py nor initialise MPI.  MPI is initialised when the first
:class:`MPITransport` is created (or by :func:`load_mpi`), so a plain
``python prog.py`` that never uses MPI never pays for it.

Dual channel (SPEC section 9): the transport ``Dup()``s its base communicator
twice (three times: see "Bulk payloads"), one communicator for ``Channel.CONTROL`` and one for ``Channel.DATA``.
MPI matching is per communicator, so a control message is never *matched*
behind data: the sender's control ``Isend`` is a request of its own, and the
receiver probes the control communicator before the data one in every probe
round and receives large data messages only after matching (see
:mod:`aiopdbp.transport.progress`), so a control message sent after a 48 x
4 MiB data backlog is delivered after 0-5 of those blocks instead of after
all of them.  (Below MPI, one connection may still carry both: on MPICH's
shared-memory path the control message surfaces after the backlog's
rendezvous headers, i.e. after about one probe per queued message.)

MPI thread level: ``MPI_THREAD_MULTIPLE`` is requested, see
:mod:`aiopdbp.transport.mpiload` (how MPI is loaded, shared with the engine).

Bulk payloads (issue 18, the size-aware protocol): a third communicator,
``aiopdbp.bulk``, carries the payloads of large messages, one MPI message
each, from the sender's buffer to the receiver's (:meth:`MPITransport.post_bulk`,
:meth:`MPITransport.recv_bulk`).  The engine never probes it: the payload's
header travels on the data channel, and when it arrives the receiving host
posts an ``Irecv`` for exactly ``(source, tag)`` into the buffer the message
lands in -- a pooled one, or the receiving GP's own (``recv_into``).  The tag
is the split frame's number per (sender, receiver) pair modulo
:data:`BULK_TAGS`, counted alike on both sides (headers are matched in order
on the data channel).  MPICH's own rendezvous moves the bytes; nothing is
probed, allocated or copied before the receiver knows where they go.

Raw messages (:meth:`MPITransport.raw_isend`, the device staging's pinned
chunks) are plain ``Isend``/``Irecv`` on the data communicator with tags
from :data:`RAW_TAG_BASE` up: the engine only probes its own tag (below
32768), so it never takes them, and they are never coalesced or copied.
Their requests are tested by whoever posted them (the device poller, from
an engine step).

Message sizes: mpi4py 4 uses the MPI-4 large-count (``_c``) entry points when
the MPI library has them (MPICH >= 4 does), so a single block may exceed
2 GiB; the receive side allocates exactly the probed byte count.
"""

from __future__ import annotations

import array
import asyncio
import functools
import importlib.util
import itertools
import os
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from aiopdbp.env import doorbell_enabled, record_own_shm
from aiopdbp.errors import ClosedResourceError
from aiopdbp.transport.base import AllocFn, Buffer, Channel, DeliverFn, SinkFn, Transport
from aiopdbp.transport.comms import Comms
from aiopdbp.transport.doorbell import ADDRESS_BYTES, Doorbell, DoorbellJoin
from aiopdbp.transport.mpiload import ABORT_FLUSH_S, load_mpi, mpi_world_size, prepare_mpi_import

if TYPE_CHECKING:
    from mpi4py import MPI

    from aiopdbp.transport.progress import ProgressEngine

__all__ = ["MPITransport", "mpi_world_size", "prepare_mpi_import", "load_mpi"]

#: every message of the transport uses this tag on its channel communicator
TAG = 0
#: raw tag t travels as MPI tag RAW_TAG_BASE + t (above every engine tag)
RAW_TAG_BASE = 32768
# Each transport a process creates uses the next tag (modulo the guaranteed
# MPI_TAG_UB of 32767).  Every rank creates its transports in the same order
# (the Dup() calls are collective), so the tags agree; a message left over
# from an earlier transport -- MPICH reuses a freed communicator's context
# id -- carries an old tag and can never be matched by a newer one.
_sessions = itertools.count()
#: bulk payload tags are 0 .. BULK_TAGS - 1 (the guaranteed MPI_TAG_UB + 1)
BULK_TAGS = 32768


class _RawRequest:
    """An ``Isend``/``Irecv`` of a raw message (the RawRequest protocol)."""

    __slots__ = ("_req", "_status", "_buf", "received")

    def __init__(self, req: Any, status: Any, buf: Buffer) -> None:
        self._req = req
        self._status = status
        self._buf = buf  # MPI may touch it until the request completes
        self.received = 0

    def done(self) -> bool:
        req = self._req
        if req is None:
            return True
        if not req.Test(self._status):
            return False
        st = self._status
        self.received = -1 if st.Is_cancelled() else st.Get_count(load_mpi().BYTE)
        self._req = self._buf = None
        return True

    def cancel(self) -> None:
        if self._req is not None:
            self._req.Cancel()


class MPITransport(Transport):
    """Blocks between MPI ranks: zero copy, dual channel, one progress engine.

    Construct it on **every** rank of ``comm`` in the same order (the
    ``Dup()`` calls are collective), then ``await start(deliver)``.

    ``progress`` selects the progress mode (``"auto"``, ``"poll"``,
    ``"thread"``; see :mod:`aiopdbp.transport.progress`).  ``spin_us`` and
    ``max_backoff_us`` tune the poll/back-off policy (env
    ``AIOPDBP_SPIN_US``/``AIOPDBP_MAX_BACKOFF_US``); ``drain_timeout`` bounds
    how long :meth:`aclose` waits for this rank's outstanding requests.

    Buffer lifetime: a block passed to :meth:`send` must not be modified
    until ``send`` returns; if the ``send`` is cancelled, not until MPI has
    finished with it, which the caller cannot observe -- so treat blocks of
    a cancelled send as given away (the engine keeps them referenced until
    then).  A delivered ``memoryview`` belongs to the receiver for good; it
    may be kept, sliced, wrapped (``numpy.frombuffer``) and written to.
    Blocks of 128 KiB and more are numpy arrays carved from recycled memory
    (see :class:`~aiopdbp.transport.recvcache.RecvBufferCache`): the memory goes back to the cache only once the
    array and every view of it are gone, so keep the ``memoryview`` or
    ``view.obj``, never ``view.obj.base`` (the pooled block itself).
    """

    name = "mpi"

    def __init__(
        self,
        comm: MPI.Comm | None = None,
        *,
        progress: str = "auto",
        spin_us: float | None = None,
        max_backoff_us: float | None = None,
        drain_timeout: float = 5.0,
        join_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        _MPI = load_mpi(join_timeout)
        from aiopdbp.transport.progress import ProgressEngine

        base = comm if comm is not None else _MPI.COMM_WORLD
        self._base: MPI.Comm = base
        self.rank = base.Get_rank()
        self.size = base.Get_size()
        # (Idup: start() waits for every rank's, bounded by ``join_timeout``)
        self._comms = Comms(base)
        self._control: MPI.Comm = self._comms.control
        self._data: MPI.Comm = self._comms.data
        self._bulk: MPI.Comm = self._comms.bulk
        self.join_timeout = join_timeout
        record_own_shm()  # the launcher removes them should this rank be killed
        self._drain_timeout = drain_timeout
        self._started = False
        self._engine_tag = (TAG + next(_sessions)) % 32768
        self._engine: ProgressEngine = ProgressEngine(
            [self._control, self._data],  # index == Channel value
            tag=self._engine_tag,
            mode=progress,
            spin_s=None if spin_us is None else spin_us * 1e-6,
            max_backoff_s=None if max_backoff_us is None else max_backoff_us * 1e-6,
            bulk=self._bulk,
        )
        self._sends = self._engine.sends
        # ranks outnumber cores: links hold their blocks behind a send in flight
        self.holds_blocks = self._engine.oversubscribed
        self._quiescing: asyncio.Future[None] | None = None
        self._raw_limit: int | None = None
        self._bulk_in = self._engine.bulk_receiver(self.size, functools.partial(self._refuse, channel=Channel.DATA))

    # ------------------------------------------------------------- helpers

    @staticmethod
    def available() -> bool:
        """True if mpi4py is importable (checked without importing it)."""
        return importlib.util.find_spec("mpi4py") is not None

    mpi_world_size = staticmethod(mpi_world_size)

    @property
    def progress_mode(self) -> str:
        """The progress mode actually in use (``"poll"`` or ``"thread"``)."""
        return self._engine.mode

    # ------------------------------------------------------------ interface

    async def start(self, deliver: DeliverFn, alloc: AllocFn | None = None, *, alloc_min: int = 0,
                    on_data: SinkFn | None = None) -> None:
        """Begin receiving; every incoming block goes to ``deliver`` (each
        data-channel one to ``on_data(source, view)`` when given: the
        receive kernel calls it the moment the message is received).

        ``deliver(source, channel, view)`` is called in the event loop thread,
        in arrival order per (source, channel); ``view`` is a ``memoryview``
        (format ``"B"``) over a buffer allocated for that message alone --
        or, when the optional ``alloc(source, channel, nbytes)`` hook
        returned a writable buffer of exactly ``nbytes``, that very object
        (the receive buffer pool's block: the message is received straight
        into it).  Messages below ``alloc_min`` bytes skip the hook.  The hook is called in arrival order per (source, channel),
        possibly before earlier messages were delivered, and only in the
        ``"poll"`` progress mode (in ``"thread"`` mode it would have to run in
        the progress thread, so the transport allocates itself).

        Cancellation: nothing here awaits; a cancelled start leaves the
        transport either unstarted or started, and ``aclose()`` releases it.
        """
        self._check_open()
        if self._started:
            raise RuntimeError("MPITransport.start() called twice")
        await self._comms.join(self.join_timeout, self.rank, self.size)
        self._engine.start(deliver, asyncio.get_running_loop(), alloc, self._doorbells(), alloc_min=alloc_min,
                           on_data=on_data)
        self._started = True
        self._bulk_in.open = True

    def _doorbells(self) -> DoorbellJoin:
        """Make this rank's doorbell and start the exchange of every rank's
        address (an ``Iallgather`` every rank takes part in).  Nothing waits
        for it: the engine completes it in the background and uses the
        doorbell from then on (a rank that never opens its node must fail
        the handshake, not this).  No doorbell when disabled
        (``AIOPDBP_DOORBELL=0``) or the socket fails."""
        _MPI = load_mpi()
        bell: Doorbell | None = None
        if doorbell_enabled():
            try:
                bell = Doorbell(self.rank, self.size)
            except OSError:  # no abstract Unix sockets here: the idle timer only
                bell = None
        mine = bytearray(bell.packed_address() if bell is not None else b"\xff" * ADDRESS_BYTES)
        every = bytearray(ADDRESS_BYTES * self.size)
        req = self._control.Iallgather([mine, _MPI.BYTE], [every, _MPI.BYTE])
        return DoorbellJoin(bell, req, mine, every)

    def send_lane(self, dest: int, channel: Channel) -> Any:
        """A lane for one-frame sends to ``dest`` on ``channel`` (see
        :class:`~aiopdbp.transport.kernel.SendLane`): ``lane.post(frame)``
        is ``post_nowait(dest, channel, [frame])`` in one call.  After
        ``aclose`` (or a failure of the engine) its posts raise as
        ``post_nowait``'s would."""
        if self._closed or not self._started or not 0 <= dest < self.size or channel not in (0, 1):
            self._refuse(dest, channel)
        return self._sends.lane(int(channel), dest, functools.partial(self._refuse, dest, channel))

    def _refuse(self, dest: int, channel: Channel) -> None:
        if self._closed:
            raise ClosedResourceError("mpi transport is closed")
        if not self._started:
            raise RuntimeError("MPITransport: send/post before start()")
        if not 0 <= dest < self.size:
            raise ValueError(f"destination rank {dest} out of range 0..{self.size - 1}")
        raise ValueError(f"unknown channel {channel!r}")

    @property
    def tick(self) -> int:
        """The progress engine's step count: it steps at least once per
        loop iteration while busy, and a send wakes it."""
        return self._engine.n_steps

    async def send(self, dest: int, channel: Channel, blocks: Sequence[Buffer]) -> None:
        """Send each block as one message to rank ``dest``; return when all completed.

        Every block is one ``Isend`` (fixed tag) on ``channel``'s communicator,
        posted in order before the first await, so blocks are matched in
        order per (dest, channel).  Blocks are passed to MPI as they are (no
        copy) and must be contiguous buffers.  Small (eager) messages usually
        complete at once and ``send`` returns without suspending.

        Cancellation: MPI cannot reliably cancel a send (``MPI_Cancel`` on
        send requests is deprecated in MPI-4), so cancelling the await does
        not withdraw the messages: every block was already posted and will
        still be delivered.  The progress engine keeps the blocks referenced
        and completes and frees the requests in the background; the caller
        must not modify the blocks afterwards.
        """
        fut = self.post_nowait(dest, channel, blocks)
        if fut is not None:
            await fut

    def post_nowait(self, dest: int, channel: Channel,
                    blocks: Sequence[Buffer]) -> asyncio.Future[None] | None:
        """Post the sends now; None when they completed at once (eager),
        else a future.  Errors (closed transport, bad rank) raise."""
        if self._closed or not self._started or not 0 <= dest < self.size or channel not in (0, 1):
            self._refuse(dest, channel)
        return self._sends.post(channel, dest, blocks)

    drives = True

    def drive(self, ready: Callable[[], bool]) -> Coroutine[Any, Any, None]:
        """Step MPI progress in the calling task until ``ready()`` (see
        :meth:`aiopdbp.transport.progress.ProgressEngine.drive`): the
        engine's own coroutine, with no frame of ours around it.

        Cancellation: safe; nothing is taken.
        """
        return self._engine.drive(ready)

    def exchange_counts(self, counts: Sequence[int]) -> Callable[[], int | None] | None:
        """An ``Ireduce_scatter_block`` (sum) of every rank's ``counts`` on the
        control communicator: log2(N) rounds of MPI's own, instead of one
        message to every peer (see :meth:`Transport.exchange_counts`)."""
        if self._closed or not self._started:
            return None
        _MPI = load_mpi()
        mine = array.array("q", counts)
        total = array.array("q", [0])
        req = self._control.Ireduce_scatter_block([mine, _MPI.INT64_T], [total, _MPI.INT64_T],
                                                  op=_MPI.SUM)

        def poll() -> int | None:
            # the buffers stay referenced by this closure until the sum is in
            return int(total[0]) if mine and req.Test() else None

        return poll

    bulk_tags = BULK_TAGS

    bulk_heads = True

    def post_bulk(self, dest: int, tag: int, buf: Buffer, done: asyncio.Future[None] | None = None,
                  head: Buffer | None = None) -> asyncio.Future[None] | None:
        """Post one large payload to rank ``dest`` on the bulk communicator
        (see "Bulk payloads" above), after its header ``head`` on the data
        channel when given (one call for both); None when the payload
        completed at once, else a future completing when ``buf`` may be
        reused (``done`` itself when given).  Errors raise."""
        if self._closed or not self._started or not 0 <= dest < self.size:
            self._refuse(dest, Channel.DATA)
        return self._sends.post_bulk(dest, tag, buf, done, head)

    @property
    def recv_bulk_now(self) -> Callable[[int, int, int, Buffer | None], tuple[Any, Any]]:
        """``recv_bulk_now(source, tag, nbytes, out)``: receive the payload
        rank ``source`` posted with ``tag`` into ``out`` (None: a pooled
        buffer of ``nbytes``): ``(buffer, None)`` when it landed in this call,
        else ``(buffer, track)``: ``track(done)`` has ``done(buffer)`` called
        once it landed (before the loop turns).  One call of the kernel (its
        :class:`~aiopdbp.transport.kernel.BulkRecv`); before ``start``, after
        ``aclose`` or a failure it raises as ``post_nowait`` would.
        (:meth:`recv_bulk`, the callback form, is this plus that.)"""
        post: Callable[[int, int, int, Buffer | None], tuple[Any, Any]] = self._bulk_in.post
        return post

    def add_poller(self, poller: Callable[[], bool]) -> Callable[[], None]:
        """Call ``poller()`` at every progress step (see the engine)."""
        return self._engine.add_poller(poller)

    @property
    def raw_tag_limit(self) -> int:  # type: ignore[override]
        """Raw tags available: the MPI library's ``TAG_UB`` above :data:`RAW_TAG_BASE`."""
        if self._raw_limit is None:
            ub = self._base.Get_attr(load_mpi().TAG_UB)
            self._raw_limit = max(0, int(ub or 0) - RAW_TAG_BASE + 1)
        return self._raw_limit

    def raw_isend(self, dest: int, tag: int, buf: Buffer) -> _RawRequest:
        """``Isend`` of ``buf`` to rank ``dest`` with raw tag ``tag`` (zero copy)."""
        _MPI = self._check_raw(dest, tag)
        req = self._data.Isend([buf, _MPI.BYTE], dest, RAW_TAG_BASE + tag)
        self._engine.kick()
        return _RawRequest(req, _MPI.Status(), buf)

    def raw_irecv(self, source: int, tag: int, buf: Buffer) -> _RawRequest:
        """``Irecv`` from rank ``source`` with raw tag ``tag`` straight into ``buf``."""
        _MPI = self._check_raw(source, tag)
        req = self._data.Irecv([buf, _MPI.BYTE], source, RAW_TAG_BASE + tag)
        self._engine.kick()
        return _RawRequest(req, _MPI.Status(), buf)

    def _check_raw(self, peer: int, tag: int) -> Any:
        if self._closed or not self._started:
            self._refuse(peer, Channel.DATA)
        if not 0 <= peer < self.size:
            raise ValueError(f"rank {peer} out of range 0..{self.size - 1}")
        if not 0 <= tag < self.raw_tag_limit:
            raise ValueError(f"raw tag {tag} outside [0, {self.raw_tag_limit})")
        return load_mpi()

    @property
    def control_comm(self) -> Any:
        """The control channel's communicator (after :meth:`start`); other
        components (the liveness heartbeat) use it with tags of their own."""
        return self._control

    @property
    def tag(self) -> int:
        """The tag of this transport's messages on its communicators."""
        return self._engine_tag

    def post(self, dest: int, channel: Channel, blocks: Sequence[Buffer]) -> asyncio.Future[None]:
        """Post the sends now (like :meth:`send`, no task); the future completes
        when every block may be reused.

        Errors (closed transport, bad rank, MPI failure) are set on the
        returned future.  Cancelling the future does not withdraw the
        messages (see :meth:`send`); the engine still completes them.
        """
        loop = asyncio.get_running_loop()
        try:
            fut = self.post_nowait(dest, channel, blocks)
        except Exception as exc:
            failed: asyncio.Future[None] = loop.create_future()
            failed.set_exception(exc)
            return failed
        if fut is None:
            fut = loop.create_future()
            fut.set_result(None)
        return fut

    async def aclose(self, *, graceful: bool = True) -> None:
        """Stop progress, drain or abandon outstanding requests, free the communicators.

        Outstanding sends and receives of this rank get up to
        ``drain_timeout`` seconds to complete (messages arriving meanwhile are
        still delivered); what is left is abandoned (waiters get
        :class:`TransportError`, buffers stay referenced).  There are no
        pre-posted receives to cancel: receives are only posted for messages
        already matched by ``Improbe``.  Peers should stop sending to this
        rank first (the node layer's shutdown handshake), or their large
        sends to us will not complete.  Later ``send`` calls raise
        :class:`ClosedResourceError`.

        Cancellation: idempotent; the engine keeps stopping in the background
        and a repeated ``aclose()`` waits for it and frees what is left.
        """
        self._closed = True
        self._engine.shut_lanes()
        if not graceful:
            # Failing or interrupted: abandon in-flight requests, no
            # agreement with peers that may be gone; the process is ending.
            await self._engine.stop(0.0)
            self._comms.leave()
            return
        await self._engine.stop(self._drain_timeout)
        # One quiesce for all concurrent/repeated closers; the others wait.
        if self._quiescing is None:
            self._quiescing = asyncio.ensure_future(self._comms.quiesce(self._drain_timeout) if self._started
                                                    else asyncio.sleep(0))
        try:
            await asyncio.shield(self._quiescing)
        finally:
            if self._quiescing.done():
                self._comms.free()

    def abort(self, message: str, code: int = 1) -> None:
        """Print ``message`` to stderr and abort the whole MPI job with ``code``.

        Never returns: ``MPI_Abort`` asks the launcher to kill every rank; if
        the call comes back anyway (it can, while the launcher's kill is on
        its way), the process exits with ``os._exit(code)``.
        """
        try:
            print(message, file=sys.stderr, flush=True)
            sys.stdout.flush()
            # Hydra's proxy forwards our output from a pipe; MPI_Abort tears it
            # down, and under load it lost the message (seen in the test suite).
            time.sleep(ABORT_FLUSH_S)
        finally:
            try:
                self._base.Abort(code)
            finally:
                os._exit(code)

    def stats(self) -> dict[str, Any]:
        """Counters: sends, recvs, bytes, steps, wake-ups, idle sleeps, mode."""
        s = self._engine.stats()
        s.update(rank=self.rank, size=self.size, closed=self._closed)
        return s

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._started else "new")
        return f"<MPITransport rank={self.rank}/{self.size} progress={self._engine.mode} {state}>"

