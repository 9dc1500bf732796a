"""The MPI progress engine: one per rank, it drives every MPI request of a transport.

Theory of operation
===================

MPI is not an event source asyncio can wait on: nothing becomes readable when
a message arrives.  Someone has to *call into MPI* (probe, test) for anything
to happen.  This engine owns that duty for one ``MPITransport`` and turns MPI
completions into asyncio events -- one asyncio task, no task per message.

One step (:meth:`ProgressEngine.step`):

1. *Match and receive.*  ``Improbe(ANY_SOURCE, tag)`` on the control
   communicator, then on the data one, until neither has a message (or about
   1 MiB was received in this step).  A matched probe is a message no other
   receive can steal.  The common message -- small, in order -- is matched
   and received by the receive kernel (:mod:`aiopdbp.transport.kernel`,
   compiled where it is built); what it leaves matched is handled here.  Messages up to ``inline_limit`` (64 KiB) are received at
   once with ``Mrecv`` (the bytes are already here: eager protocol); larger ones
   get an ``Imrecv`` into a buffer of exactly their size, so a control message
   behind a data backlog is found after one probe per backlog message rather
   than after copying the backlog.  Delivery stays in arrival order per
   (channel, source): a message waits behind a large one still landing.
2. *Complete sends* (:meth:`Sends.complete <aiopdbp.transport.sends.Sends.complete>`:
   the send side, posts and completions, is :mod:`aiopdbp.transport.sends`).
3. *Bulk payloads* (the transport's third communicator, never probed): a
   large payload's ``Irecv`` is posted by ``ProgressEngine.bulk_receiver``'s ``post``
   when its header has arrived, into the buffer it is delivered in; one that
   did not land at once is tracked (:meth:`ProgressEngine.track_bulk`) and
   tested every step; its ``Isend`` (:meth:`Sends.post_bulk <aiopdbp.transport.sends.Sends.post_bulk>`)
   completes like any send, resolving the waiting sender's future from the
   step (see :mod:`aiopdbp.transport.mpi`, "Bulk payloads").
4. *Pollers.*  Other non-blocking work that must be driven by the same loop
   -- the device staging's CUDA events -- registers a poller, called each step.

Waiting (:meth:`ProgressEngine._run`), the latency/CPU trade-off.  After a
step that did something the engine yields (``sleep(0)``) and steps again.
After an empty step, if the loop has nothing else to run (``sleep(0)`` came
back quickly) and traffic was seen within ``spin_window`` (5 ms), it *spins*:
steps again for up to ``spin`` (20 us, env ``AIOPDBP_SPIN_US``; 0 never
spins) before yielding -- the latency of a ping-pong is then MPI's plus one
loop iteration.  With requests in flight it keeps stepping every loop
iteration.  Otherwise it backs off (:class:`Backoff`: 50 us doubling to a
cap, rounded up by the loop's timer) until a send of its own (:meth:`kick`),
a peer's ring, or the timer wakes it.

*The doorbell* (:mod:`aiopdbp.transport.doorbell`) is what lets an idle engine
sleep without losing the next message: a peer on this host that sends to us
after more than 2 ms without sending to us rings our datagram socket, which
the loop watches, so the first message after a quiet spell wakes us through
the kernel instead of waiting for the next timer (up to 1 ms, more under
load).  Why no message waits for a timer: we only sleep after
``spin_window`` (5 ms) without progress; receiving a peer's previous message
was progress, so a peer whose previous send to us is younger than 2 ms knows
we are awake, and every other send rings.  Once every peer has rung us (the
hello each engine sends at start), the timer is only a safety net and the
cap grows from 1 ms to 50 ms (``AIOPDBP_IDLE_MAX_US``) after a second
without progress: a rank blocked in ``recv`` costs ~20 wake-ups per second
instead of ~1000 (measured: 0.05 instead of 0.55 CPU-s per 10 s).  During a
conversation the cap stays 1 ms: under heavy CPU contention (load 15 on 2
cores) a 50 ms cap there sometimes turned an 8 B ping-pong from ~30 us into
milliseconds -- some wake-up the doorbell should have given was missed, for
a reason not found yet -- so the timer stays the bound it was.  A peer that cannot ring us (another host,
another network namespace) keeps the cap at 1 ms (``AIOPDBP_MAX_BACKOFF_US``).
No thread blocks in MPI for us: MPICH's blocking waits busy-poll a core.

*Oversubscription.*  When this host runs more ranks than it has cores (MPI's
local rank count vs. the CPUs this process may use), a spinning rank steals
the core another rank needs to make progress: the engine then never spins,
and an empty step is followed by ``sched_yield`` so that a runnable rank on
the same core gets it.

*Driving.*  A task that awaits a reply (``gp.recv`` on an empty pipe)
calls :meth:`ProgressEngine.drive`: it steps the engine itself, yielding
every ``spin``, until its pipe has an item; meanwhile the engine's task
stands aside (it waits, no timer, until the last driver leaves; its first
step then does not spin, for the driver's task runs on).  So the
step that receives the reply runs in the very task that wants it: no
future is resolved and no second task is scheduled between the ``Mrecv``
and ``recv`` returning (measured: the wake-up hop of an 8 B ping-pong,
~3 us of ~15).  A driver only starts while traffic is recent (the spin
window) and leaves when it has been quiet that long, so an idle rank still
sleeps in the engine's task with the doorbell, and never with spinning off.

Sends are posted in the caller's task (:attr:`ProgressEngine.sends`): one
``Isend`` per block and one ``Test`` -- eager messages complete right there
and the caller gets no future at all.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from aiopdbp.env import (idle_max_seconds, local_ranks, max_backoff_seconds, oversubscribed, progress_mode,
                         spin_seconds)
from aiopdbp.errors import ClosedResourceError
from aiopdbp.transport.backoff import Backoff
from aiopdbp.transport.base import AllocFn, Channel, DeliverFn, SinkFn
from aiopdbp.transport.doorbell import Doorbell, DoorbellJoin
from aiopdbp.transport.mpiload import prepare_mpi_import
from aiopdbp.transport.receives import Receives
from aiopdbp.transport.recvcache import DEFAULT_RECV_CACHE_BYTES
from aiopdbp.transport.sends import Sends, resolve

prepare_mpi_import()
from mpi4py import MPI  # noqa: E402  (thread level must be set first)


__all__ = ["Backoff", "ProgressEngine", "local_ranks", "oversubscribed", "PROGRESS_MODES", "resolve_mode"]

PROGRESS_MODES: Final = ("auto", "poll")
#: messages at most this long are received inline with ``Mrecv``
DEFAULT_INLINE_RECV_LIMIT: Final = 64 * 1024
DEFAULT_SPIN_S: Final = 20e-6
DEFAULT_SPIN_WINDOW_S: Final = 5e-3
#: the idle back-off's cap during a conversation (or when peers cannot ring) ...
DEFAULT_MAX_BACKOFF_S: Final = 1e-3
#: the idle back-off's cap once every peer can ring our doorbell ...
DEFAULT_IDLE_MAX_S: Final = 50e-3
#: ... and nothing happened for this long
LONG_IDLE_S: Final = 1.0

_CONTROL = Channel.CONTROL
_DATA = Channel.DATA

# Buffers/requests that MPI may still touch after an engine gave up on them
# (drain timeout at close).  Kept alive for the life of the process: freeing
# them could let MPI read or write freed memory.
_ABANDONED: list[Any] = []


def resolve_mode(mode: str = "auto") -> str:
    """The progress mode: ``"poll"`` (the only one; ``"auto"`` means it)."""
    if mode == "auto":
        mode = progress_mode()
    if mode in ("auto", "poll"):
        return "poll"
    raise ValueError(f"progress mode must be one of {PROGRESS_MODES}, got {mode!r}")


class ProgressEngine:
    """Owns every in-flight MPI request of one transport and completes them.

    ``comms[i]`` is the communicator of ``Channel(i)``; all messages use
    ``tag``.  Create it in the rank's event loop thread, :meth:`start` it
    once, post sends with :attr:`sends`, finish with :meth:`stop`.
    """

    def __init__(self, comms: Sequence[MPI.Comm], *, tag: int = 0, mode: str = "auto",
                 spin_s: float | None = None, spin_window_s: float | None = None,
                 max_backoff_s: float | None = None, inline_recv_limit: int = DEFAULT_INLINE_RECV_LIMIT,
                 recv_cache_bytes: int | None = None, bulk: MPI.Comm | None = None) -> None:
        self.mode = resolve_mode(mode)
        self._comms = list(comms)
        self._bulk = bulk  # large payloads, matched by (source, tag): never probed
        self._tag = tag
        #: this host runs more ranks than this process may use cores: the
        #: engine never spins and gives the core up between empty steps
        self.oversubscribed = oversubscribed()
        spin = spin_seconds(DEFAULT_SPIN_S) if spin_s is None else spin_s
        self._spin = 0.0 if self.oversubscribed else spin
        self._spin_window = DEFAULT_SPIN_WINDOW_S if spin_window_s is None else spin_window_s
        most = max_backoff_seconds(DEFAULT_MAX_BACKOFF_S) if max_backoff_s is None else max_backoff_s
        self._backoff = Backoff(50e-6, most)
        self._short_most = most
        self._idle_most = max(most, idle_max_seconds(DEFAULT_IDLE_MAX_S))
        self._bell: Doorbell | None = None
        self._joining: DoorbellJoin | None = None
        cache = DEFAULT_RECV_CACHE_BYTES if recv_cache_bytes is None else recv_cache_bytes
        self._rx = Receives(self._comms, tag, inline_recv_limit, cache, bulk, self._report)
        self._bulk_in: Any = None     # the kernel's BulkRecv (bulk_receiver)
        #: the send side: posts (in the caller's task), lanes, completions
        self.sends = Sends(self._comms, tag, bulk, self.kick)
        self._pollers: list[Callable[[], bool]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._kicked = False
        self._stopping = False
        self._deadline = 0.0
        self._failure: BaseException | None = None
        self._steps = 0
        self._drivers = 0             # tasks stepping us in drive()
        self._last_active = 0.0       # when a step last did something (perf_counter)
        # counters
        self.n_steps = self.n_spins = self.n_idle_sleeps = self.n_wakeups = 0
        self.n_deliver_errors = 0
        self.n_rings = 0
        self.n_drives = self.n_driven = 0

    @property
    def n_recvs(self) -> int:
        """Messages received so far (probed ones; bulk payloads not counted)."""
        return self._rx.n_recvs

    # ------------------------------------------------------------- lifecycle
    def start(self, deliver: DeliverFn, loop: asyncio.AbstractEventLoop,
              alloc: AllocFn | None = None, doorbell: DoorbellJoin | None = None, *,
              alloc_min: int = 0, on_data: SinkFn | None = None) -> None:
        """Begin stepping in ``loop``, every message to ``deliver`` (a data
        one to ``on_data`` when given); once ``doorbell``'s address exchange
        completes, an idle engine waits on it (see :mod:`aiopdbp.transport.doorbell`)."""
        def control(src: int, view: Any) -> None:
            deliver(src, _CONTROL, view)

        def data(src: int, view: Any) -> None:
            deliver(src, _DATA, view)

        self._rx.start((control, data if on_data is None else on_data), self._sink_failed, alloc, alloc_min)
        self._loop = loop
        self.sends.start(loop)
        self._joining = doorbell
        self._task = loop.create_task(self._run(), name="aiopdbp-progress")

    def _join_bell(self) -> None:
        """Use the doorbell once every rank's address is here (checked once per
        loop iteration while the exchange runs; MPI errors end the engine)."""
        join = self._joining
        if join is None or not join.done():
            return
        self._joining = None
        bell = join.bell
        if bell is not None and self._loop is not None:
            self._bell = bell
            self.sends.use_bell(bell)
            self._loop.add_reader(bell.fileno(), self._on_ring)

    def _on_ring(self) -> None:
        bell = self._bell
        if bell is not None and bell.drain():
            self.n_rings += 1
            self.kick()

    def _close_bell(self) -> None:
        join, self._joining = self._joining, None
        if join is not None:
            _ABANDONED.append(join)  # MPI may still write its buffers
            if join.bell is not None:
                join.bell.close()
        bell, self._bell = self._bell, None
        self.sends.use_bell(None)
        if bell is not None:
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.remove_reader(bell.fileno())
            bell.close()

    async def stop(self, timeout: float = 5.0) -> None:
        """Drain own in-flight requests (up to ``timeout`` s), then end.

        Messages arriving meanwhile are still delivered.  Requests still
        running at the deadline are abandoned: their futures fail with
        :class:`~aiopdbp.errors.TransportError`, their buffers stay referenced for the life
        of the process.

        Cancellation: the engine keeps stopping; calling ``stop`` again waits again.
        """
        if not self._stopping:
            self._stopping = True
            self._deadline = time.monotonic() + max(0.0, timeout)
            self.kick()
        task = self._task
        if task is not None:
            await asyncio.shield(task)
        self._abandon()

    def add_poller(self, poller: Callable[[], bool]) -> Callable[[], None]:
        """Call ``poller()`` every step (it returns True when it did something);
        returns a function that removes it."""
        self._pollers.append(poller)
        self.kick()

        def remove() -> None:
            if poller in self._pollers:
                self._pollers.remove(poller)
        return remove

    def kick(self) -> None:
        """Something to do soon (a send posted, a poller added): stop backing off."""
        self._kicked = True
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    def shut_lanes(self) -> None:
        """No lane posts again, nor the bulk receiver: each calls its ``refuse`` (the transport closes)."""
        self.sends.shut()
        if self._bulk_in is not None:
            self._bulk_in.open = False

    def bulk_receiver(self, size: int, refuse: Callable[[int], None]) -> Any:
        """The receives of large payloads from ranks below ``size`` in one call
        each (the kernel's :class:`~aiopdbp.transport.kernel.BulkRecv`; one not
        landed at once goes to :meth:`track_bulk`), shut until the transport opens it."""
        self._bulk_in = self._rx.bulk(size, self.track_bulk, refuse)
        return self._bulk_in

    def track_bulk(self, handle: Any, buf: Any, done: Callable[[Any], None]) -> None:
        """``done(buf)`` once the payload of ``handle`` (from ``bulk_receiver``) has landed."""
        self._rx.bulk_recvs.append((handle, buf, done))
        self.kick()

    # -------------------------------------------------------------- receives
    # ----------------------------------------------------------------- steps
    def step(self) -> bool:
        """One progress step; True if anything happened."""
        self.n_steps += 1
        rx = self._rx
        busy = rx.receive()  # (each message to its sink as it is received)
        sends = self.sends
        if sends.reqs:
            busy = sends.complete() or busy
        landed: list[tuple[Callable[[Any], None], Any]] | None = None
        if rx.bulk_recvs:  # (no list per step otherwise: steps run back to back while polling)
            landed = []
            busy = rx.complete_bulk(landed) or busy
        if self._pollers:
            for poll in self._pollers:
                busy = poll() or busy
        if landed:
            for done, buf in landed:
                try:
                    done(buf)
                except Exception as exc:  # a broken callback must not stop progress
                    self.n_deliver_errors += 1
                    if type(exc) is not ClosedResourceError:  # (that one: the node is closing)
                        self._report("aiopdbp: MPI transport bulk receive callback raised", exc)
        return busy

    def _sink_failed(self, exc: Exception) -> None:
        """A delivery raised (told by the receives; progress goes on)."""
        self.n_deliver_errors += 1
        if type(exc) is not ClosedResourceError:  # (that one: the node is closing)
            self._report("aiopdbp: MPI transport deliver callback raised", exc)

    async def drive(self, ready: Callable[[], bool]) -> None:
        """Step in the calling task until ``ready()`` is true.

        The task that waits for a reply polls for it itself, so the reply
        costs no hand-off to another task (see "Driving" in the module
        doc).  Returns at once -- and whenever traffic has been quiet for
        the spin window -- when spinning is off (an oversubscribed host,
        ``AIOPDBP_SPIN_US=0``), the engine is stopping or has not started:
        the caller then waits the ordinary way, and the engine's own task,
        which can sleep, takes over.  Like the engine, it spins (``spin``
        of steps before yielding) only while the loop has nothing else to
        run, and otherwise takes one step per loop iteration.

        Cancellation: safe at every await; nothing is taken, and the engine
        resumes stepping on its own when its last driver leaves.
        """
        spin = self._spin
        task = self._task
        if not spin or self._stopping or task is None or task.done():
            return
        perf = time.perf_counter
        window = self._spin_window
        if perf() - self._last_active > window:
            return  # quiet: the reply is not imminent, let the engine sleep
        self._drivers += 1
        self.n_drives += 1
        idle = True
        try:
            while not ready():
                # Spin only while the loop has nothing else to run (as the
                # engine does): with other tasks busy, one step per turn.
                end = perf() + spin if idle else 0.0
                while True:
                    if self.step():
                        self._last_active = perf()
                        self.n_driven += 1
                        if ready():
                            return
                    now = perf()
                    if now >= end:
                        break
                if now - self._last_active > window or self._stopping:
                    return
                await asyncio.sleep(0)
                idle = perf() - now < spin
        except MPI.Exception as exc:
            self._fail(exc)
        finally:
            self._drivers -= 1
            if not self._drivers:
                self.kick()

    def pending(self) -> bool:
        """True while this rank has MPI work of its own in flight."""
        return bool(self.sends.reqs or self._pollers or self._rx.pending())

    async def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        perf = time.perf_counter
        sleep = asyncio.sleep
        spin = self._spin
        window = self._spin_window
        yield_cpu = os.sched_yield if self.oversubscribed and hasattr(os, "sched_yield") else None
        self._last_active = t_yield = perf()
        try:
            while True:
                if self._drivers:
                    # A task waiting for a reply steps us (drive): stand
                    # aside until the last driver leaves, then step at once.
                    fut = self._wake = loop.create_future()
                    try:
                        await fut
                    finally:
                        self._wake = None
                    self._kicked = False
                    # No spin on the first step: the driver that woke us
                    # runs on (a sender yielding its turn is runnable at
                    # once), so this was no quick turn of an idle loop.
                    t_yield = float("-inf")
                    continue
                t_resume = perf()
                last_active = self._last_active
                try:
                    busy = self.step()
                    if not busy and spin and t_resume - t_yield < spin and t_resume - last_active < window:
                        # The loop had nothing else to do: poke MPI again for
                        # up to `spin` before paying for a loop round trip.
                        self.n_spins += 1
                        end = t_resume + spin
                        while not busy and perf() < end:
                            busy = self.step()
                    if self._joining is not None:
                        self._join_bell()
                except MPI.Exception as exc:
                    self._fail(exc)
                    return
                if self._kicked:
                    self._kicked = False
                    busy = True
                now = perf()
                if busy:
                    last_active = self._last_active = now
                    self._backoff.reset()
                if self._stopping and (not self.pending() or time.monotonic() >= self._deadline):
                    return
                # Idle only if the window had passed *before* this step's
                # probe (t_resume): a preemption between the probe and here
                # must not put us to sleep past a message that came meanwhile
                # (its sender may not ring: see the doorbell module).
                if busy or self.pending() or t_resume - last_active < window:
                    if yield_cpu is not None and not busy:
                        yield_cpu()  # oversubscribed: let a runnable rank have this core
                    t_yield = perf()
                    await sleep(0)
                    continue
                # idle: back off until a send, a ring or a timer wakes us
                self.n_idle_sleeps += 1
                bell = self._bell
                # The long cap only after a second without progress: while a
                # conversation goes on, a wake-up the doorbell misses costs at
                # most the short cap (a safety net we measured we need under
                # heavy CPU contention, see the module doc).
                long_idle = now - last_active > LONG_IDLE_S
                self._backoff.most = (self._idle_most if long_idle and bell is not None
                                      and bell.everyone_rings else self._short_most)
                fut = self._wake = loop.create_future()
                handle = loop.call_later(self._backoff.delay(), resolve, fut)
                try:
                    await fut
                finally:
                    self._wake = None
                    handle.cancel()
                if self._kicked:
                    self.n_wakeups += 1
                t_yield = perf()
        except asyncio.CancelledError:
            self._abandon()
            raise
        finally:
            self._close_bell()

    # ------------------------------------------------------------- failures
    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._stopping = True
        self.sends.fail(exc)
        if self._bulk_in is not None:
            self._bulk_in.open = False
            self._bulk_in.refuse = self.sends.raise_failure
        self._abandon()
        self._report("aiopdbp: MPI progress failed; the transport is unusable", exc)

    def _abandon(self) -> None:
        """Give up on every request: keep buffers alive, fail the waiters."""
        if not (self.sends.reqs or self._rx.pending()):
            return
        _ABANDONED.append((self.sends.abandon(), self._rx.abandon()))

    def _report(self, message: str, exc: BaseException) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_exception_handler({"message": message, "exception": exc})

    def stats(self) -> dict[str, Any]:
        """Counters: messages, bytes, steps, spins, idle sleeps, wake-ups."""
        return {
            "progress": self.mode, "oversubscribed": self.oversubscribed,
            "spin_us": self._spin * 1e6, **self.sends.stats(),
            "steps": self.n_steps, "spins": self.n_spins,
            "drives": self.n_drives, "driven_steps": self.n_driven,
            "idle_sleeps": self.n_idle_sleeps, "wakeups": self.n_wakeups,
            "inflight": len(self.sends.reqs) + self._rx.inflight(),
            "deliver_errors": self.n_deliver_errors, "rings_heard": self.n_rings,
            "doorbell": self._bell is not None and self._bell.everyone_rings,
            "rings_sent": self._bell.rung if self._bell is not None else 0,
            "ring_failures": self._bell.ring_failures if self._bell is not None else 0,
            **self._rx.stats(),
        }
