"""The transport interface: moves opaque byte blocks between hosts.

A transport knows nothing about CDUs, GPs or pools.  It carries *blocks* (any
object with the buffer protocol) from this host to another host on one of two
channels (SPEC section 9, the dual channel):

* ``Channel.CONTROL`` carries CMP messages (registration, bindings, barriers,
  credits).  It is small and latency critical and must never queue behind data.
* ``Channel.DATA`` carries DMP messages (coalesced BP blocks, stream segments).

Everything above (encoding, coalescing, credits, table replication) is done by
the node with the sans-I/O codec, so the same node code runs over the
in-process fabric (tests, one process simulating several hosts) and over MPI.

Contract every implementation keeps:

* ``send(dest, channel, blocks)`` sends each block as one message, **in
  order** per (dest, channel), and returns when every block may be reused by
  the caller.  Blocks are never copied on the MPI path (zero copy); the
  in-process fabric copies, like a network would.
* Incoming blocks are handed, in arrival order per (source, channel), to the
  ``deliver`` callback given to :meth:`Transport.start`.  ``deliver`` runs in the
  event loop thread and must not block; flow control (credits) is the node's
  business, so a transport may deliver whenever a message is complete.
* ``aclose()`` is idempotent; sends after it raise ``ClosedResourceError``.
* Raw point-to-point messages (:meth:`Transport.raw_isend` /
  :meth:`Transport.raw_irecv`, used by the device staging for its pinned
  chunks): matched by (source, tag) in posting order, like MPI's
  non-overtaking rule, received straight into the caller's buffer, never
  coalesced and never seen by ``deliver``.  A send may complete only once
  a matching receive took it (rendezvous), so a receiver must match every
  raw message it was sent.
* Optional receive-buffer hook: ``start(deliver, alloc)``.  Before receiving a
  message of ``n`` bytes the transport may call ``alloc(source, channel, n)``;
  if it returns a writable buffer of exactly ``n`` bytes, the message is
  received into it and ``deliver`` gets *that same object*.  This is how the
  receive buffer pool (RBP) takes messages off the network straight into its
  blocks.  ``None`` means "allocate yourself".
"""

from __future__ import annotations

import abc
import asyncio
import enum
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiopdbp.errors import ClosedResourceError

Buffer = Any  # anything with the buffer protocol (bytes, memoryview, ndarray, ...)

# deliver(source_rank, channel, block) -- block is a bytes-like buffer owned by
# the receiver (a bytearray/memoryview it may keep).
DeliverFn = Callable[[int, "Channel", memoryview], None]
# on_data(source_rank, block): the data channel's messages alone, where the
# receiver has a door for them (no channel to dispatch on per message)
SinkFn = Callable[[int, memoryview], None]
# alloc(source_rank, channel, nbytes) -> writable buffer of exactly nbytes, or None
AllocFn = Callable[[int, "Channel", int], Any]


class RawRequest(Protocol):
    """A posted raw send or receive (:meth:`Transport.raw_isend`)."""

    #: bytes received (receives, once done; -1 when cancelled)
    received: int

    def done(self) -> bool:
        """True once the buffer is free again; never blocks; raises if the
        operation failed (e.g. a message longer than the receive buffer)."""
        ...

    def cancel(self) -> None:
        """Withdraw a receive not matched yet (``done()`` then reports it,
        with ``received == -1``); no effect on sends."""
        ...


class LoopPoller:
    """Calls ``poller()`` from the event loop until :meth:`remove`: every loop
    iteration (``call_soon``) while it reports progress and for ``spin``
    seconds after, then on a timer (the loop's timer resolution is about
    1 ms, too coarse to follow a device copy, fine for an idle wait)."""

    def __init__(self, poller: Callable[[], bool], spin: float = 2e-3, tick: float = 2e-4) -> None:
        self._poller = poller
        self._spin = spin
        self._tick_s = tick
        self._stop = False
        self._loop = asyncio.get_running_loop()
        self._last = time.perf_counter()  # a new poller has work: spin first
        self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        if self._stop:
            return
        now = time.perf_counter()
        if self._poller():
            self._last = now
        if now - self._last < self._spin:
            self._loop.call_soon(self._tick)
        else:
            self._loop.call_later(self._tick_s, self._tick)

    def remove(self) -> None:
        self._stop = True


class Channel(enum.IntEnum):
    """The two channels of the dual-channel device layer."""

    CONTROL = 0
    DATA = 1


class Transport(abc.ABC):
    """Abstract host-to-host block transport (one instance per host/rank)."""

    rank: int = 0
    size: int = 1
    name: str = "abstract"

    def __init__(self) -> None:
        self._closed = False
        self._tick = 0
        self._tick_pending = False

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` began."""
        return self._closed

    @abc.abstractmethod
    async def start(self, deliver: DeliverFn, alloc: AllocFn | None = None, *, alloc_min: int = 0,
                    on_data: SinkFn | None = None) -> None:
        """Begin receiving; every incoming block goes to ``deliver`` -- or,
        given ``on_data``, every data-channel block to ``on_data(source,
        block)`` (the commonest message then costs no dispatch on its
        channel); ``alloc``
        (if given) provides the buffer a message of ``nbytes`` lands in, for
        messages of at least ``alloc_min`` bytes (smaller ones, the lone
        short messages, skip the call: the transport's own buffer is cheaper).

        Cancellation: safe; a cancelled start leaves the transport unstarted
        and ``aclose()`` still releases whatever was set up.
        """

    @abc.abstractmethod
    async def send(self, dest: int, channel: Channel, blocks: Sequence[Buffer]) -> None:
        """Send ``blocks`` to host ``dest`` in order; return when they may be reused.

        Cancellation: cancelling the await cancels (or, where MPI cannot
        cancel a send, completes and frees) the outstanding requests; blocks
        not yet started are not sent.
        """

    @abc.abstractmethod
    async def aclose(self, *, graceful: bool = True) -> None:
        """Stop receiving, complete or cancel outstanding requests, free resources.

        ``graceful=False`` (the job is failing or interrupted): stop at once,
        abandon what is in flight, do not wait for the other hosts.

        Cancellation: idempotent; a cancelled close can be repeated.
        """

    def post(self, dest: int, channel: Channel, blocks: Sequence[Buffer]) -> asyncio.Future[None]:
        """Start sending ``blocks`` now; the future completes when they may be
        reused.  Lets one sender keep a window of sends in flight without a
        Task per message.  The default wraps :meth:`send` in a task."""
        return asyncio.ensure_future(self.send(dest, channel, blocks))

    @property
    def tick(self) -> int:
        """A number that changes once per event-loop iteration (while the
        transport is busy): a link sends the first CDU of a tick at once and
        coalesces the rest.  The default counts call_soon callbacks."""
        if not self._tick_pending:
            self._tick_pending = True
            asyncio.get_running_loop().call_soon(self._next_tick)
        return self._tick

    def _next_tick(self) -> None:
        self._tick += 1
        self._tick_pending = False

    def post_nowait(self, dest: int, channel: Channel,
                    blocks: Sequence[Buffer]) -> asyncio.Future[None] | None:
        """Like :meth:`post`, but None when the sends completed at once (the
        common case for small messages: no future to make).  Errors raise."""
        fut = self.post(dest, channel, blocks)
        if fut.done():
            fut.result()
            return None
        return fut

    def send_lane(self, dest: int, channel: Channel) -> Any:
        """An object whose ``post(frame)`` is ``post_nowait(dest, channel,
        [frame])`` at less cost, or None (the default: this transport has
        none; callers use :meth:`post_nowait`)."""
        return None

    def add_poller(self, poller: Callable[[], bool]) -> Callable[[], None]:
        """Have ``poller()`` called by the transport's progress (device
        staging's CUDA events); returns a function that removes it.  The
        default is a :class:`LoopPoller` (transports without a progress engine)."""
        return LoopPoller(poller).remove

    #: whether :meth:`drive` makes progress (a transport with a polled engine)
    drives: bool = False

    async def drive(self, ready: Callable[[], bool]) -> None:
        """Make progress in the calling task until ``ready()``, or return
        when that would not pay (the caller then waits the ordinary way).
        The default returns at once: nothing to drive.

        Cancellation: safe; nothing is taken.
        """
        return None

    #: bulk payload tags are 0 .. bulk_tags - 1 (0: no bulk payloads; large
    #: payloads then follow their header on the data channel)
    bulk_tags: int = 0

    #: :meth:`post_bulk` also takes the payload's header (``head``)
    bulk_heads: bool = False

    #: a host link keeps a partly filled block open while a send of its to
    #: that host is in flight, and sends it when that send completes (or the
    #: block fills), instead of a frame of its own per loop turn: where a send
    #: that does not complete at once waits for a receiver with no core of its
    #: own (:mod:`aiopdbp.hosts.link`, "Coalescing")
    holds_blocks: bool = False

    def post_bulk(self, dest: int, tag: int, buf: Buffer, done: asyncio.Future[None] | None = None,
                  head: Buffer | None = None) -> asyncio.Future[None] | None:
        """Post one large payload (zero copy) for host ``dest`` under ``tag``;
        None when it completed at once, else a future (``buf`` reusable then;
        ``done`` itself when given: the transport resolves it).  ``head``
        (where ``bulk_heads``): the split frame's header, posted first as a
        data-channel message in the same call."""
        raise NotImplementedError(f"the {self.name} transport has no bulk payloads")

    def recv_bulk(self, source: int, tag: int, nbytes: int, out: Buffer | None,
                  done: Callable[[Any], None]) -> None:
        """Receive host ``source``'s payload ``tag`` into ``out`` (None: a
        pooled buffer of ``nbytes``); ``done(buffer)`` once it landed (maybe
        in this call).  The default is a transport's ``recv_bulk_now(source,
        tag, nbytes, out) -> (buffer, track)`` (track None: it landed in the
        call; else ``track(done)`` has ``done`` called once it lands), which
        a caller that delivers at once may use itself."""
        now = getattr(self, "recv_bulk_now", None)
        if now is None:
            raise NotImplementedError(f"the {self.name} transport has no bulk payloads")
        buf, track = now(source, tag, nbytes, out)
        if track is None:
            done(buf)
        else:
            track(done)

    def exchange_counts(self, counts: Sequence[int]) -> Callable[[], int | None] | None:
        """Start a sum over every rank of ``counts`` (one number per rank:
        what this rank sent to it); returns a poll that gives None until
        every rank took part, then the sum of what all ranks sent to this
        one, and raises :class:`~aiopdbp.errors.TransportError` when that
        can never come (a peer left without taking part).  None: this
        transport has no such collective (closing then tells every peer).
        Every rank calls it once, at close."""
        return None

    #: raw tags are 0 .. raw_tag_limit - 1 (0: the transport has no raw messages)
    raw_tag_limit: int = 0

    def raw_isend(self, dest: int, tag: int, buf: Buffer) -> RawRequest:
        """Post a raw send of ``buf`` (kept unmodified until ``done()``) to host ``dest``."""
        raise NotImplementedError(f"the {self.name} transport has no raw messages")

    def raw_irecv(self, source: int, tag: int, buf: Buffer) -> RawRequest:
        """Post a raw receive from host ``source`` into the writable ``buf``."""
        raise NotImplementedError(f"the {self.name} transport has no raw messages")

    def abort(self, message: str, code: int = 1) -> None:  # pragma: no cover - default
        """Tear the whole job down (used when a rank's program raised)."""
        raise SystemExit(code)

    @property
    def hostname(self) -> str:
        import socket

        return socket.gethostname()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError(f"{self.name} transport is closed")

    def stats(self) -> dict[str, Any]:
        """Counters for benchmarks and diagnostics (messages, bytes, wake-ups)."""
        return {}
