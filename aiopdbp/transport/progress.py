"""The MPI progress engine: one per rank, it drives every MPI request of a transport.

Theory of operation
===================

MPI is not an event source asyncio can wait on: there is no file descriptor
that becomes readable when a message arrives or a request completes.  Someone
has to *call into MPI* (probe, test) for anything to happen -- that is what
"progress" means, and with MPICH the *rate* of those calls is what moves
queued messages (about one queued message per call on the shared-memory
path).  This module owns that duty for one ``MPITransport``
(``aiopdbp.transport.mpi``) and turns MPI completions into asyncio events.
There is no asyncio task per message: one engine, a few lists.

State (all of it in the engine):

* ``_reqs`` / ``_ops`` -- two parallel lists: every in-flight MPI request and
  the operation it belongs to.  A *send op* (:class:`_SendOp`) is one
  ``send()`` call: its asyncio future, the number of its requests still
  running and strong references to the caller's blocks, so that no buffer can
  be freed while MPI still reads it (also after the caller cancelled).  A
  *recv op* (:class:`_RecvOp`) is one large message being received with
  ``Imrecv``.  Completed slots become ``REQUEST_NULL``/``None`` in place and
  the lists are compacted lazily, so the Python work per step is proportional
  to what completed, not to what is in flight.
* ``_matched`` -- per channel, large messages already matched by
  ``Improbe`` whose receive has not been posted yet (see step 2).
* ``_rfifo`` -- per (channel, source) FIFO of receive ops that are matched but
  not deliverable yet, because an earlier large message from the same source
  on the same channel is still landing.  Delivery stays in arrival order per
  (source, channel) while small messages are received inline.

One progress step (:meth:`ProgressEngine._step`):

1. *Match.*  Rounds of ``comm.Improbe(ANY_SOURCE, TAG)`` on the control
   communicator, then the data communicator (the dual channel), until a round
   finds nothing (or 64 rounds / 1 MiB received).  A *matched* probe hands us
   an ``MPI.Message`` that no other receive can steal any more; its status
   tells the source and exact byte count.  Messages up to
   ``inline_recv_limit`` (64 KiB) are received at once with ``Message.Recv``
   into a buffer of exactly that size (the bytes are already here: eager
   protocol) and queued for delivery.  Larger ones are only matched.
2. *Receive large messages.*  Matched large messages get a buffer of exactly
   their size and an ``Message.Irecv`` -- control first, about 1 MiB per step.
   Deferring the copy is what lets a control message queued behind a data
   backlog be found after one probe per backlog message rather than after
   copying the whole backlog (on MPICH's shared-memory path ``Irecv`` of a
   large message does the whole single-copy transfer at once).
3. *Complete.*  ``MPI.Request.Testsome`` over the oldest 64 live requests
   (they complete roughly in FIFO order) and over all of them every 16th
   step; completed sends resolve their future when their last block is done,
   completed receives release their (channel, source) FIFO.

Receive buffers: ``bytearray`` below 4 KiB, uninitialised ``numpy.empty``
(no memset) above, and from 128 KiB a :class:`RecvBufferCache` that recycles
the memory of large buffers once the receiver drops them (fresh ``mmap``-ed
memory page-faults on every use and capped shared-memory bandwidth at ~3 GB/s).
The deliver callback gets a ``memoryview`` (format ``"B"``) of exactly the
message size; the receiver owns it (zero copy).

Sends are posted by ``post_send`` in the caller's thread: one ``Isend`` per
block, then one ``Test``/``Testsome`` -- eager messages usually complete
right there and ``send()`` returns without a future or a loop round trip.

Progress modes (``mode=`` argument, or env ``AIOPDBP_PROGRESS`` for "auto")
---------------------------------------------------------------------------

``"poll"`` (the default; what ``"auto"`` picks)
    The engine is a single asyncio task in the event loop.  While anything is
    in flight, or anything happened within the last ``spin`` window (default
    5 ms, env ``AIOPDBP_SPIN_US``), it spins: progress steps for up to
    ``spin_budget`` (20 us, env ``AIOPDBP_SPIN_BUDGET_US``) or until
    something user-visible happens, then ``await asyncio.sleep(0)`` so every
    other task of the loop runs; the budget is skipped when the loop was
    busy with other work since the engine last yielded.  Spinning gives the
    best latency (~6-10 us one-way, raw MPI + a few us) and burns one core
    *while traffic flows*.  When idle it backs off exponentially (50 us ..
    ``max_backoff`` = 1 ms, env ``AIOPDBP_MAX_BACKOFF_US``; loop timers have
    ~1 ms granularity anyway): an idle rank costs ~1000 cheap wake-ups per
    second, a few percent of one core.  The price of the back-off is latency
    for the *first* message after a quiet period (up to ~1-2 ms).  Every
    ``send()`` wakes the engine and restarts the spin window, so
    request/response traffic started by this rank is never delayed.  Keep
    the spin window well above the peer's worst wake-up delay (back-off
    sleep rounded up to the loop's 1 ms timer tick): with a 1 ms window, two
    ranks in ping-pong were seen to lock into alternately missing each
    other, at ~1-2 ms per message instead of ~8 us; 5 ms breaks that cycle.

``"thread"``
    A dedicated progress thread does all probing, receiving and testing; the
    event loop thread never touches MPI for receives (it only posts its own
    ``Isend`` calls -- hence ``MPI_THREAD_MULTIPLE``).  Arrivals and
    completions are handed to the loop in batches, one
    ``loop.call_soon_threadsafe`` per batch.  Idle back-off uses
    ``threading.Event.wait`` (50 us .. 1 ms).  Trade-off: the loop thread can
    sleep in ``epoll`` and long-running loop callbacks that release the GIL
    (numpy/cupy work, blocking I/O) do not stall MPI progress, at the price
    of a thread hop per batch (~10-15 us more one-way latency) and GIL
    hand-offs while the thread spins (pure-Python CPU-bound coroutines delay
    it by up to ``sys.getswitchinterval()``).  Without ``MPI_THREAD_MULTIPLE``
    the engine falls back to ``"poll"`` with a :class:`RuntimeWarning`.

Wake-ups and the watchdog: ``send()`` sets ``_kicked`` and, if the engine
sleeps, resolves its wake-up future (poll) or sets its ``threading.Event``
(thread).  A wake-up that races with going to sleep can be missed, but every
sleep is bounded by ``max_backoff``, so a missed wake-up costs at most that
much latency and can never deadlock.

MPI thread level: ``aiopdbp.transport.mpi`` requests ``MPI_THREAD_MULTIPLE``
(mpi4py's default, set explicitly through ``mpi4py.rc.thread_level`` before
the first ``from mpi4py import MPI``) so that both modes are available in any
process; with MPICH the measured cost on the message path is within noise
(< 0.1 us per message).  Override with env ``AIOPDBP_MPI_THREAD_LEVEL``.

Import this module only through ``aiopdbp.transport.mpi`` (importing it
imports and initialises MPI).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import os
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, Final

from ..errors import ClosedResourceError, TransportError
from .base import AllocFn, Channel, DeliverFn
from .mpi import prepare_mpi_import

prepare_mpi_import()
from mpi4py import MPI  # noqa: E402  (thread level must be set first)

_np: Any
try:  # numpy gives uninitialised (no memset) large receive buffers
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is a dependency of aiopdbp
    _np = None

__all__ = ["ProgressEngine", "PROGRESS_MODES", "resolve_mode"]

PROGRESS_MODES: Final = ("auto", "poll", "thread")

#: messages at most this long are received inline with ``Message.Recv``
DEFAULT_INLINE_RECV_LIMIT: Final = 64 * 1024
#: receive buffers at least this long come from ``numpy.empty`` (no memset)
NUMPY_ALLOC_THRESHOLD: Final = 4096
#: receive buffers at least this long come from the recycling cache
RECV_CACHE_MIN_SIZE: Final = 128 * 1024
DEFAULT_RECV_CACHE_BYTES: Final = 64 * 2**20
#: requests tested per step (oldest first) when many are in flight ...
TEST_WINDOW: Final = 64
#: ... and every this many steps, all of them
FULL_SCAN_EVERY: Final = 16
#: a step stops probing after receiving this many bytes
STEP_RECV_BYTES: Final = 1 << 20
#: max probe rounds (one probe per channel) per step (fairness between channels)
DEFAULT_MAX_BATCH: Final = 64
DEFAULT_SPIN_S: Final = 5e-3
DEFAULT_SPIN_BUDGET_S: Final = 20e-6
DEFAULT_MIN_BACKOFF_S: Final = 50e-6
DEFAULT_MAX_BACKOFF_S: Final = 1e-3

_BYTE = MPI.BYTE
_ANY_SOURCE = MPI.ANY_SOURCE
_Testsome = MPI.Request.Testsome
_Testall = MPI.Request.Testall

# Buffers/requests that MPI may still touch after an engine gave up on them
# (drain timeout at close).  Kept alive for the life of the process: freeing
# them could let MPI read or write freed memory.
_ABANDONED: list[Any] = []


def _env_float(name: str, default: float, scale: float) -> float:
    """``float(env[name]) * scale``, or ``default`` (already scaled) when unset."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw) * scale
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def resolve_mode(mode: str = "auto") -> str:
    """Turn a progress-mode request into ``"poll"`` or ``"thread"``.

    ``"auto"`` consults env ``AIOPDBP_PROGRESS`` and defaults to ``"poll"``;
    an explicit ``"poll"``/``"thread"`` argument wins over the environment.
    (MPI thread support is checked later, by the engine.)
    """
    if mode == "auto":
        mode = os.environ.get("AIOPDBP_PROGRESS", "").strip().lower() or "auto"
    if mode == "auto":
        return "poll"
    if mode not in ("poll", "thread"):
        raise ValueError(f"progress mode must be one of {PROGRESS_MODES}, got {mode!r}")
    return mode


def _size_class(size: int) -> int:
    """Round up to 1/8 of the size's power of two (<= 12.5 % slack)."""
    step = 1 << max(0, size.bit_length() - 4)
    return (size + step - 1) // step * step


class RecvBufferCache:
    """Recycles the memory of large receive buffers (thread safe, bounded).

    A large message gets a fresh-looking ``numpy`` array of exactly its size,
    carved from a pooled owner block.  When the receiver drops its last
    reference to that array (and every view of it), a ``weakref.finalize``
    returns the owner block to the cache.  Why: fresh large allocations are
    ``mmap``-ed by malloc and every page faults again on first touch -- on the
    shared-memory path that capped receive bandwidth at ~3 GB/s instead of
    ~9 GB/s.  ``capacity`` bounds the bytes kept while unused (0 disables
    the cache: plain ``numpy.empty`` per message).  Owner blocks are wrapped
    in a ``memoryview`` so numpy views of the delivered array keep the
    *array* (not the owner) alive, which is what the finalizer watches.
    """

    def __init__(self, capacity: int, min_size: int) -> None:
        self.capacity = capacity
        self.min_size = min_size
        self._free: dict[int, list[memoryview]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def alloc(self, size: int) -> Any:
        if size < NUMPY_ALLOC_THRESHOLD or _np is None:
            return bytearray(size)
        if size < self.min_size or self.capacity <= 0:
            return _np.empty(size, dtype=_np.uint8)
        cls = _size_class(size)
        owner: memoryview | None = None
        with self._lock:
            lst = self._free.get(cls)
            if lst:
                owner = lst.pop()
                self._bytes -= cls
        if owner is None:
            self.misses += 1
            owner = memoryview(_np.empty(cls, dtype=_np.uint8))
        else:
            self.hits += 1
        arr = _np.frombuffer(owner, dtype=_np.uint8, count=size)
        weakref.finalize(arr, self._put, cls, owner).atexit = False
        return arr

    def _put(self, cls: int, owner: memoryview) -> None:
        with self._lock:
            if self._bytes + cls > self.capacity:
                return  # over budget: let it go back to the OS
            self._free.setdefault(cls, []).append(owner)
            self._bytes += cls

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._bytes = 0

    @property
    def cached_bytes(self) -> int:
        return self._bytes


def _nbytes(block: Any) -> int:
    t = type(block)
    if t is bytes or t is bytearray:
        return len(block)
    if t is memoryview:
        return int(block.nbytes)
    return memoryview(block).nbytes


class _SendOp:
    """One ``send()`` call: its future, requests still running, blocks kept alive."""

    __slots__ = ("future", "remaining", "blocks")

    def __init__(self, future: asyncio.Future[None], remaining: int, blocks: tuple[Any, ...]) -> None:
        self.future = future
        self.remaining = remaining
        self.blocks: tuple[Any, ...] | None = blocks


class _RecvOp:
    """One matched message: its buffer, and whether its bytes have landed."""

    __slots__ = ("channel", "source", "view", "done")

    def __init__(self, channel: int, source: int, view: Any, done: bool) -> None:
        self.channel = channel
        self.source = source
        self.view = view  # what deliver gets: our memoryview or the alloc hook's buffer
        self.done = done


_Op = _SendOp | _RecvOp
_Delivery = tuple[int, Channel, Any]


def _consume_result(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: no "exception was never retrieved" log


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ProgressEngine:
    """Owns every in-flight MPI request of one transport and completes them.

    ``comms[i]`` is the communicator of ``Channel(i)``; all messages use
    ``tag``.  Create it in the rank's event loop thread, call :meth:`start`
    once, post sends with :meth:`post_send`, finish with :meth:`stop`.
    """

    def __init__(
        self,
        comms: Sequence[MPI.Comm],
        *,
        tag: int = 0,
        mode: str = "auto",
        spin_s: float | None = None,
        min_backoff_s: float | None = None,
        max_backoff_s: float | None = None,
        spin_budget_s: float | None = None,
        inline_recv_limit: int = DEFAULT_INLINE_RECV_LIMIT,
        max_batch: int = DEFAULT_MAX_BATCH,
        recv_cache_bytes: int | None = None,
    ) -> None:
        mode = resolve_mode(mode)
        if mode == "thread" and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            warnings.warn(
                "aiopdbp: progress mode 'thread' needs MPI_THREAD_MULTIPLE but the MPI "
                f"library provides level {MPI.Query_thread()}; falling back to 'poll'",
                RuntimeWarning,
                stacklevel=3,
            )
            mode = "poll"
        self.mode: str = mode
        self._comms: tuple[MPI.Comm, ...] = tuple(comms)
        self._chan_comms = tuple((Channel(i), c) for i, c in enumerate(self._comms))
        self._tag = tag
        self._spin_s = spin_s if spin_s is not None else _env_float("AIOPDBP_SPIN_US", DEFAULT_SPIN_S, 1e-6)
        self._min_backoff_s = min_backoff_s if min_backoff_s is not None else DEFAULT_MIN_BACKOFF_S
        self._max_backoff_s = (
            max_backoff_s
            if max_backoff_s is not None
            else _env_float("AIOPDBP_MAX_BACKOFF_US", DEFAULT_MAX_BACKOFF_S, 1e-6)
        )
        self._spin_budget_s = (
            spin_budget_s
            if spin_budget_s is not None
            else _env_float("AIOPDBP_SPIN_BUDGET_US", DEFAULT_SPIN_BUDGET_S, 1e-6)
        )
        if self._max_backoff_s <= 0:
            raise ValueError("max_backoff must be > 0 (it is the watchdog that bounds a missed wake-up)")
        self._min_backoff_s = min(self._min_backoff_s, self._max_backoff_s)
        self._inline_limit = inline_recv_limit
        self._max_batch = max_batch
        cache_bytes = (
            recv_cache_bytes
            if recv_cache_bytes is not None
            else int(_env_float("AIOPDBP_RECV_CACHE_MB", DEFAULT_RECV_CACHE_BYTES, 2**20))
        )
        self._cache = RecvBufferCache(cache_bytes, RECV_CACHE_MIN_SIZE)
        self._status = MPI.Status()

        # in-flight requests; owned by the engine's progress context (loop
        # thread in poll mode, progress thread in thread mode)
        # completed slots stay in place as REQUEST_NULL / None and are
        # compacted lazily (when they are the majority): per-step Python work
        # is O(completed), not O(in flight)
        self._reqs: list[MPI.Request] = []
        self._ops: list[_Op | None] = []
        self._nlive = 0
        self._head = 0  # index of the oldest live request
        self._scan_tick = 0
        self._rfifo: dict[tuple[int, int], collections.deque[_RecvOp]] = {}
        # per channel: large messages matched by Improbe, not yet received
        self._matched: tuple[collections.deque[tuple[_RecvOp, MPI.Message, int]], ...] = tuple(
            collections.deque() for _ in self._comms
        )
        # thread mode: sends posted by the loop thread, waiting to be adopted
        self._incoming: collections.deque[tuple[list[MPI.Request], _SendOp]] = collections.deque()

        self._loop: asyncio.AbstractEventLoop | None = None
        self._deliver: DeliverFn | None = None
        self._user_alloc: AllocFn | None = None
        self._started = False
        self._stopping = False
        self._stopped = False
        self._kicked = False
        self._failure: BaseException | None = None
        self._deadline = 0.0

        # poll mode
        self._task: asyncio.Task[None] | None = None
        self._wake_fut: asyncio.Future[None] | None = None
        # thread mode
        self._thread: threading.Thread | None = None
        self._wake_evt = threading.Event()
        self._sleeping = False
        self._out_lock = threading.Lock()
        self._out_d: list[_Delivery] = []
        self._out_c: list[_SendOp] = []
        self._out_scheduled = False
        self._thread_done: asyncio.Future[None] | None = None

        # counters
        self.n_send_calls = 0
        self.n_sends = 0
        self.n_fast_sends = 0
        self.bytes_sent = 0
        self.n_recvs = 0
        self.bytes_recv = 0
        self.n_steps = 0
        self.n_testsome = 0
        self.n_testsome_hits = 0
        self.n_completed = 0
        self.max_completed = 0
        self.n_wakeups = 0
        self.n_idle_sleeps = 0
        self.n_batches = 0
        self.n_deliver_errors = 0
        self.n_user_allocs = 0
        self.n_alloc_errors = 0

    # ------------------------------------------------------------------ public

    @property
    def inflight(self) -> int:
        """MPI requests owned by the engine plus matched messages not yet received."""
        return (
            self._nlive
            + sum(len(r) for r, _ in list(self._incoming))
            + sum(len(m) for m in self._matched)
        )

    def start(
        self,
        deliver: DeliverFn,
        loop: asyncio.AbstractEventLoop | None = None,
        alloc: AllocFn | None = None,
    ) -> None:
        """Begin progress (receiving included) in ``loop`` (default: the running loop).

        ``alloc(source, channel, nbytes)`` (optional) may return a writable
        buffer of exactly ``nbytes`` to receive a message into; ``deliver``
        then gets that same object.  It is called in arrival order per
        (source, channel), possibly before earlier messages were delivered.
        Only used in ``"poll"`` mode, where it runs in the event loop thread;
        ``"thread"`` mode never calls it (it would run in the progress thread)
        and allocates itself, which the transport contract allows.
        """
        if self._started:
            raise RuntimeError("progress engine already started")
        if self._stopping:
            raise ClosedResourceError("progress engine is stopped")
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._deliver = deliver
        self._user_alloc = alloc if self.mode == "poll" else None
        self._started = True
        if self.mode == "poll":
            self._task = self._loop.create_task(self._poll_main(), name="aiopdbp-mpi-progress")
        else:
            self._thread_done = self._loop.create_future()
            self._thread = threading.Thread(target=self._thread_main, name="aiopdbp-mpi-progress", daemon=True)
            self._thread.start()
            _THREAD_ENGINES.add(self)

    def post_send(self, channel: int, dest: int, blocks: Sequence[Any]) -> asyncio.Future[None] | None:
        """``Isend`` every block to ``dest`` on ``channel``'s communicator.

        Returns ``None`` when all requests completed at once (eager messages),
        else a future resolved when the last one completes.  Called in the
        event loop thread.  The engine keeps the blocks referenced until MPI
        is done with them, even if the future is cancelled.
        """
        if self._failure is not None:
            raise TransportError(f"MPI progress failed: {self._failure!r}") from self._failure
        if self._stopping or not self._started:
            raise ClosedResourceError("progress engine is not running")
        if not isinstance(blocks, (list, tuple)):
            blocks = tuple(blocks)  # a generator must survive being iterated twice
        comm = self._comms[channel]
        tag = self._tag
        nbytes = 0
        reqs: list[MPI.Request] = []
        try:
            for b in blocks:
                reqs.append(comm.Isend((b, _BYTE), dest, tag))
                nbytes += _nbytes(b)
            self.n_send_calls += 1
            self.n_sends += len(reqs)
            self.bytes_sent += nbytes
            self._kick()
            # eager messages usually complete right here: no future, no wait
            if len(reqs) == 1:
                if reqs[0].Test():
                    self.n_fast_sends += 1
                    return None
            elif reqs:
                idx = _Testsome(reqs)
                if idx is None or len(idx) == len(reqs):
                    self.n_fast_sends += 1
                    return None
                if idx:
                    reqs = [r for r in reqs if r]  # completed ones are REQUEST_NULL now
            else:
                return None
        except MPI.Exception as exc:
            # requests already posted stay owned (and their blocks alive) until done
            live = [r for r in reqs if r]
            if live:
                self._adopt(live, None, tuple(blocks))
            raise TransportError(f"MPI send to rank {dest} failed: {exc}") from exc
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._adopt(reqs, fut, tuple(blocks))
        return fut

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop progress: drain own in-flight requests (up to ``timeout`` s), then end.

        While draining, arriving messages are still received and delivered
        (so peers' sends to us can complete); after ``stop`` returns nothing
        is delivered any more.  Requests still running at the deadline are
        abandoned: their futures fail with :class:`TransportError` and their
        buffers stay referenced for the life of the process.

        Cancellation: the engine keeps stopping in the background; calling
        ``stop`` again waits for it again.
        """
        if not self._stopping:
            self._stopping = True
            self._deadline = time.monotonic() + max(0.0, timeout)
            self._wake()
        if not self._started or self._stopped:
            self._finish()
            return
        if self._task is not None:
            await asyncio.shield(self._task)
        elif self._thread_done is not None:
            await asyncio.shield(self._thread_done)
            if self._thread is not None:
                self._thread.join(1.0)
        self._finish()

    def stats(self) -> dict[str, Any]:
        """Counters: messages, bytes, steps, wake-ups, idle sleeps."""
        return {
            "progress": self.mode,
            "send_calls": self.n_send_calls,
            "sends": self.n_sends,
            "fast_sends": self.n_fast_sends,
            "bytes_sent": self.bytes_sent,
            "recvs": self.n_recvs,
            "bytes_recv": self.bytes_recv,
            "steps": self.n_steps,
            "testsome_calls": self.n_testsome,
            "testsome_hits": self.n_testsome_hits,
            "completed_reqs": self.n_completed,
            "max_completed_per_test": self.max_completed,
            "wakeups": self.n_wakeups,
            "idle_sleeps": self.n_idle_sleeps,
            "loop_batches": self.n_batches,
            "deliver_errors": self.n_deliver_errors,
            "user_allocs": self.n_user_allocs,
            "alloc_errors": self.n_alloc_errors,
            "inflight": self.inflight,
            "recv_cache_hits": self._cache.hits,
            "recv_cache_misses": self._cache.misses,
        }

    # ---------------------------------------------------------------- internal

    def _adopt(self, reqs: list[MPI.Request], fut: asyncio.Future[None] | None, blocks: tuple[Any, ...]) -> None:
        if fut is None:
            assert self._loop is not None
            fut = self._loop.create_future()  # nobody waits on it
            fut.add_done_callback(_consume_result)
        op = _SendOp(fut, len(reqs), blocks)
        if self.mode == "poll":
            self._own(reqs, op)
        else:
            self._incoming.append((reqs, op))

    def _own(self, reqs: list[MPI.Request], op: _Op) -> None:
        """Add requests to the in-flight list (progress context only)."""
        self._reqs.extend(reqs)
        self._ops.extend([op] * len(reqs))
        self._nlive += len(reqs)

    def _kick(self) -> None:
        """Restart the spin window and wake a sleeping engine (send side)."""
        self._kicked = True
        self._wake()

    def _wake(self) -> None:
        if self.mode == "poll":
            f = self._wake_fut
            if f is not None and not f.done():
                f.set_result(None)
        elif self._sleeping:
            self._wake_evt.set()

    def _finish(self) -> None:
        self._stopped = True
        self._cache.clear()
        self._deliver = None
        _THREAD_ENGINES.discard(self)

    def _report(self, message: str, exc: BaseException) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_exception_handler({"message": message, "exception": exc})

    def _user_buffer(self, source: int, channel: Channel, size: int) -> Any:
        """The alloc hook's buffer for a message, or None (then we allocate)."""
        assert self._user_alloc is not None
        try:
            buf = self._user_alloc(source, channel, size)
            if buf is None:
                return None
            mv = memoryview(buf)
            if mv.readonly or mv.nbytes != size or not mv.c_contiguous:
                raise ValueError(
                    f"alloc hook returned {mv.nbytes} bytes (readonly={mv.readonly}, "
                    f"contiguous={mv.c_contiguous}) for a {size}-byte message"
                )
        except Exception as exc:  # a broken hook must not stop progress
            self.n_alloc_errors += 1
            self._report("aiopdbp: MPI transport alloc hook failed; using an own buffer", exc)
            return None
        self.n_user_allocs += 1
        return buf

    def _deliver_all(self, deliveries: list[_Delivery]) -> None:
        """Hand arrivals to the callback (event loop thread)."""
        deliver = self._deliver
        if deliver is None:
            return
        for src, ch, view in deliveries:
            try:
                deliver(src, ch, view)
            except Exception as exc:  # a broken callback must not stop progress
                self.n_deliver_errors += 1
                self._report("aiopdbp: MPI transport deliver callback raised", exc)

    def _step(self, deliveries: list[_Delivery], completed: list[_SendOp]) -> bool:
        """One progress step (see theory of operation).  True if anything happened."""
        self.n_steps += 1
        busy = False
        status = self._status
        tag = self._tag
        inline_limit = self._inline_limit
        rfifo = self._rfifo
        alloc = self._cache.alloc
        chan_comms = self._chan_comms
        got_bytes = 0
        # 1. Match.  Rounds of one probe per channel, control first.  MPI
        #    (MPICH shm) surfaces about one queued message per progress call,
        #    so large messages are only *matched* here (cheap) and received
        #    in phase 2: a control message queued behind a data backlog is
        #    found after ~one probe per backlog message, not after copying
        #    the whole backlog.  Small messages are received at once.
        for _ in range(self._max_batch):
            got = False
            for ch, comm in chan_comms:
                msg = comm.Improbe(_ANY_SOURCE, tag, status)
                if msg is None:
                    continue
                got = True
                src = status.Get_source()
                size = status.Get_count(_BYTE)
                self.n_recvs += 1
                self.bytes_recv += size
                fifo = rfifo.get((ch, src))
                # the alloc hook is called in arrival order per (source, channel)
                ubuf = self._user_buffer(src, ch, size) if self._user_alloc is not None else None
                if size <= inline_limit:
                    got_bytes += size
                    if ubuf is None:
                        buf = alloc(size)
                        obj: Any = memoryview(buf)
                    else:
                        buf = obj = ubuf
                    msg.Recv((buf, _BYTE))
                    if fifo:
                        fifo.append(_RecvOp(ch, src, obj, True))
                    else:
                        deliveries.append((src, ch, obj))
                else:
                    rop = _RecvOp(ch, src, ubuf, False)  # view None: allocate in phase 2
                    if fifo is None:
                        fifo = rfifo[(ch, src)] = collections.deque()
                    fifo.append(rop)  # keeps its place in arrival order
                    self._matched[ch].append((rop, msg, size))
            if not got:
                break
            busy = True
            if got_bytes >= STEP_RECV_BYTES:
                break
        # 2. Receive matched large messages (control first), up to about
        #    STEP_RECV_BYTES per step (at least one), with Imrecv into a
        #    buffer of exactly the probed size.
        if self._matched[0] or self._matched[1]:
            busy = True
            for matched in self._matched:
                while matched and got_bytes < STEP_RECV_BYTES:
                    rop, msg, size = matched.popleft()
                    if rop.view is None:
                        buf = alloc(size)
                        rop.view = memoryview(buf)
                    else:
                        buf = rop.view
                    self._reqs.append(msg.Irecv((buf, _BYTE)))
                    self._ops.append(rop)
                    self._nlive += 1
                    got_bytes += size
        if self._nlive:
            reqs = self._reqs
            head = self._head
            # Test a window of the oldest live requests (they complete
            # roughly in FIFO order), and everything every few steps: with
            # thousands in flight a full Testsome costs ~30 ns per request,
            # and it is the *frequency* of MPI calls that drives progress.
            self._scan_tick += 1
            if len(reqs) - head <= TEST_WINDOW or not self._scan_tick % FULL_SCAN_EVERY:
                window = reqs[head:] if head else reqs
            else:
                window = reqs[head : head + TEST_WINDOW]
            self.n_testsome += 1
            idx = _Testsome(window)
            if idx:
                busy = True
                self.n_completed += len(idx)
                self.n_testsome_hits += 1
                if len(idx) > self.max_completed:
                    self.max_completed = len(idx)
                ops = self._ops
                for j in idx:
                    i = head + j
                    op = ops[i]
                    ops[i] = None
                    if isinstance(op, _SendOp):
                        op.remaining -= 1
                        if op.remaining == 0:
                            op.blocks = None
                            completed.append(op)
                    elif op is not None:
                        op.done = True
                        self._release_fifo(op.channel, op.source, deliveries)
                self._nlive -= len(idx)
                if self._nlive == 0:
                    reqs.clear()
                    ops.clear()
                    head = 0
                elif 2 * self._nlive < len(reqs) and len(reqs) > 32:
                    self._reqs = [r for r in reqs if r]
                    self._ops = [o for o in ops if o is not None]
                    head = 0
                else:
                    while ops[head] is None:  # a live entry exists: bounded
                        head += 1
                self._head = head
        return busy

    def _release_fifo(self, channel: int, source: int, deliveries: list[_Delivery]) -> None:
        key = (channel, source)
        fifo = self._rfifo[key]
        while fifo and fifo[0].done:
            op = fifo.popleft()
            deliveries.append((op.source, Channel(op.channel), op.view))
        if not fifo:
            del self._rfifo[key]

    def _fail_all(self, exc: BaseException, completed: list[_SendOp]) -> None:
        """MPI raised in progress: abandon every request, fail every waiter."""
        self._failure = exc
        self._abandon_leftovers(completed)

    def _complete_sends(self, completed: list[_SendOp]) -> None:
        """Resolve send futures (event loop thread)."""
        for op in completed:
            fut = op.future
            if fut.done():
                continue
            if op.remaining == 0:
                fut.set_result(None)
            elif self._failure is not None:
                fut.set_exception(TransportError(f"MPI progress failed: {self._failure!r}"))
            else:
                fut.set_exception(TransportError("transport closed before the send completed"))

    def _pending(self) -> bool:
        """True while this rank has MPI work of its own in flight."""
        return bool(self._nlive or self._incoming or self._matched[0] or self._matched[1])

    def _abandon_leftovers(self, completed: list[_SendOp]) -> None:
        """Give up on every request: keep buffers alive forever, fail the waiters."""
        if not self._pending():
            return
        _ABANDONED.append((self._reqs, self._ops, list(self._incoming), [list(m) for m in self._matched]))
        for op in self._ops:
            if isinstance(op, _SendOp) and op.remaining > 0:
                op.remaining = -1
                completed.append(op)
        while self._incoming:
            op2 = self._incoming.popleft()[1]
            op2.remaining = -1
            completed.append(op2)
        self._reqs = []
        self._ops = []
        self._nlive = 0
        self._head = 0
        for m in self._matched:
            m.clear()
        self._rfifo.clear()

    # ------------------------------------------------------------- poll mode

    async def _poll_main(self) -> None:
        loop = self._loop
        assert loop is not None
        perf = time.perf_counter
        sleep = asyncio.sleep
        deliveries: list[_Delivery] = []
        completed: list[_SendOp] = []
        last_active = t_yield = perf()
        backoff = 0.0
        budget = self._spin_budget_s
        spinning = True
        try:
            while True:
                try:
                    t_resume = perf()
                    busy = self._step(deliveries, completed)
                    # Inner spin: poke MPI again for up to `budget` seconds
                    # until something user-visible happens (an arrival, a
                    # finished send) before paying for an event-loop round
                    # trip -- but only if the loop gave control back
                    # quickly, i.e. no other coroutine had work to do.
                    if spinning and not deliveries and not completed and t_resume - t_yield < budget:
                        end = t_resume + budget
                        while not deliveries and not completed and perf() < end:
                            busy = self._step(deliveries, completed) or busy
                except MPI.Exception as exc:
                    # the engine is dead: fail every waiter, report, stop
                    self._fail_all(exc, completed)
                    self._complete_sends(completed)
                    self._deliver_all(deliveries)
                    self._report("aiopdbp: MPI progress failed; the transport is unusable", exc)
                    self._stopping = True
                    return
                if completed:
                    self._complete_sends(completed)
                    completed.clear()
                if deliveries:
                    self._deliver_all(deliveries)
                    deliveries.clear()
                if self._kicked:
                    self._kicked = False
                    busy = True
                if self._stopping and (not self._pending() or time.monotonic() >= self._deadline or self._failure):
                    self._abandon_leftovers(completed)
                    self._complete_sends(completed)
                    return
                if busy:
                    last_active = t_yield = perf()
                    backoff = 0.0
                    spinning = True
                    await sleep(0)
                    continue
                t_yield = perf()
                if self._pending() or t_yield - last_active < self._spin_s:
                    spinning = True
                    await sleep(0)
                    continue
                # idle: bounded exponential back-off (the watchdog tick)
                spinning = False
                backoff = min(max(backoff * 2.0, self._min_backoff_s), self._max_backoff_s)
                self.n_idle_sleeps += 1
                fut: asyncio.Future[None] = loop.create_future()
                self._wake_fut = fut
                handle = loop.call_later(backoff, _resolve, fut)
                try:
                    await fut
                finally:
                    self._wake_fut = None
                    handle.cancel()
                if self._kicked:
                    self.n_wakeups += 1
                t_yield = perf()
        except asyncio.CancelledError:
            # cancelled from outside (loop shutdown): abandon, never lose buffers
            self._abandon_leftovers(completed)
            self._complete_sends(completed)
            self._stopping = True
            raise

    # ------------------------------------------------------------ thread mode

    def _thread_main(self) -> None:
        loop = self._loop
        assert loop is not None
        perf = time.perf_counter
        incoming = self._incoming
        evt = self._wake_evt
        deliveries: list[_Delivery] = []
        completed: list[_SendOp] = []
        last_active = perf()
        backoff = 0.0
        try:
            while True:
                while incoming:
                    reqs, op = incoming.popleft()
                    self._own(reqs, op)
                try:
                    busy = self._step(deliveries, completed)
                except MPI.Exception as exc:
                    # the engine is dead: fail every waiter, report, stop
                    self._fail_all(exc, completed)
                    self._post(deliveries, completed)
                    self._report_threadsafe("aiopdbp: MPI progress failed; the transport is unusable", exc)
                    self._stopping = True
                    return
                if deliveries or completed:
                    if not self._post(deliveries, completed):
                        return  # loop is gone
                    deliveries = []
                    completed = []
                if self._kicked:
                    self._kicked = False
                    busy = True
                if self._stopping and (
                    not self._pending() or time.monotonic() >= self._deadline or self._failure
                ):
                    self._abandon_leftovers(completed)
                    if completed:
                        self._post([], completed)
                    return
                if busy:
                    last_active = perf()
                    backoff = 0.0
                    continue
                if self._pending() or perf() - last_active < self._spin_s:
                    os.sched_yield()  # releases the GIL: let the loop thread run
                    continue
                backoff = min(max(backoff * 2.0, self._min_backoff_s), self._max_backoff_s)
                self.n_idle_sleeps += 1
                evt.clear()
                self._sleeping = True
                if not incoming and not self._kicked and not self._stopping:
                    evt.wait(backoff)
                self._sleeping = False
                if self._kicked:
                    self.n_wakeups += 1
        except BaseException as exc:  # pragma: no cover - defensive
            self._failure = exc
            self._report_threadsafe("aiopdbp: MPI progress thread crashed", exc)
        finally:
            try:
                loop.call_soon_threadsafe(self._thread_finished)
            except RuntimeError:
                pass

    def _post(self, deliveries: list[_Delivery], completed: list[_SendOp]) -> bool:
        """Queue a batch for the loop; one ``call_soon_threadsafe`` per batch."""
        assert self._loop is not None
        with self._out_lock:
            self._out_d.extend(deliveries)
            self._out_c.extend(completed)
            if self._out_scheduled:
                return True
            self._out_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain_out)
        except RuntimeError:  # loop closed
            return False
        return True

    def _drain_out(self) -> None:
        with self._out_lock:
            d, self._out_d = self._out_d, []
            c, self._out_c = self._out_c, []
            self._out_scheduled = False
        self.n_batches += 1
        if c:
            self._complete_sends(c)
        if d:
            self._deliver_all(d)

    def _thread_finished(self) -> None:
        self._drain_out()
        if self._thread_done is not None and not self._thread_done.done():
            self._thread_done.set_result(None)

    def _report_threadsafe(self, message: str, exc: BaseException) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._report, message, exc)
        except RuntimeError:
            pass

    def _stop_thread_now(self, timeout: float) -> None:
        """Interpreter exit: stop the progress thread before MPI is finalised."""
        self._stopping = True
        self._deadline = min(self._deadline or float("inf"), time.monotonic() + timeout)
        self._wake_evt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout + 0.5)


_THREAD_ENGINES: weakref.WeakSet[ProgressEngine] = weakref.WeakSet()


@atexit.register
def _stop_threads_at_exit() -> None:
    # registered after mpi4py's own exit hook (mpi4py is imported above), so
    # it runs before MPI_Finalize: no progress thread may call MPI after that.
    for engine in list(_THREAD_ENGINES):
        engine._stop_thread_now(0.5)

