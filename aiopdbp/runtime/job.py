"""The job: how a rank runs, stops, fails and reports (``aiopdbp.run``).

Theory of operation
-------------------
Every rank of an MPI job runs the same program, usually ``aiopdbp.run(main())``.
This module makes such a job behave like one program when something goes
wrong, the way Dask or Ray treat a failing worker: fail fast, name the
culprit, show its traceback once, leave nothing behind.

*One Job per ``run()``.*  :class:`Job` owns the main task, the signal
handlers and the list of open nodes (nodes attach themselves on start and
detach on close; they are the Job's only way to reach the other ranks).

*Stopping.*  :meth:`Job.request_stop` is the single way a job stops early:
a local SIGINT/SIGTERM, or a peer that reports an interrupt or a failure.
It records *why* (a :class:`Stop`), tells the other ranks through every open
node (so a rank that got no signal stops too), and cancels the main task,
so every pending ``await`` is cancelled -- nothing is left to the
interpreter's exit.  A second SIGINT exits at once.

*Failing.*  When an exception leaves a node's ``async with`` block under MPI,
the node calls :meth:`Job.fail` *before* it closes anything: the rank prints
its complete traceback (first, so it precedes every consequence on the
peers) and the line "rank r (GP g) failed: KeyError: ...", removes its
shared-memory segments, then the node tells the peers.  The GP is known
because a GP block that an exception leaves notes it
(:meth:`Job.note_gp_failure`).  An exception that merely reflects another
rank's failure (it carries ``origin_rank``; for an exception group, every
leaf that is not a cancellation does) is a *consequence*: the rank prints
nothing while it waits (at most :data:`CONSEQUENCE_GRACE`) for that rank's
report, then the one line that names the rank, the GP and the error where
the failure started -- never a traceback or advice of its own.  The failing
rank tells the others :data:`TELL_DELAY` after its traceback (hydra forwards
each rank's output on its own); each prints its line before acknowledging,
and the failing rank exits once all have (hydra then ends the rest).  Only if that
rank reports nothing in time (it caught its error and went on) is the
consequence reported as this rank's own failure.

*Exiting.*  Under MPI a rank that stopped or failed never calls
``MPI_Finalize`` (the peers may not be there to match it): it flushes its
output, unlinks the ``/dev/shm`` segments *it maps* (ownership, never a glob),
and ends with ``os._exit`` -- 130/143 after SIGINT/SIGTERM, 1 after a
failure; ``MPI_Abort`` only when a peer may not have heard of the failure.
Outside MPI ``run()`` behaves like ``asyncio.run`` (KeyboardInterrupt on
Ctrl-C), plus SIGTERM -> ``SystemExit(143)`` after a clean shutdown.

*Another event loop.*  A program may open its node under ``asyncio.run``,
``uvloop.run``, an ``asyncio.Runner`` or any loop instead of
``aiopdbp.run``.  Under MPI the node then *adopts* the loop
(:func:`adopt_loop`, from ``Node.start``): the same Job is made for it --
rank-prefixed output, SIGINT/SIGTERM, the failure report and the stop --
and the node ends the process as ``run()`` would once a failure or a stop
has left its block (``Job.finish``: no ``MPI_Finalize`` that would wait for
peers), since no ``run()`` is there to do it after the loop; an exception
that reaches the top of the program after the node closed aborts the job
(``sys.excepthook``).  A loop that is already running when the program
starts (a Jupyter kernel) cannot be ended that way: a job of several ranks
is refused there with the one-line fix.  One process works under any loop.

*Output.*  Under MPI every line a rank writes to ``sys.stdout``/``sys.stderr``
is written whole, in one ``write``, prefixed with ``[rank] `` (hydra's own
``-prepend-rank`` prefixes every *chunk*, so two ranks' partial lines still
run together).  ``AIOPDBP_RANK_PREFIX=0`` turns it off.  (:mod:`aiopdbp.rankout`;
under ``aiopdbp launch`` from the rank's start, before ``run()``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, NoReturn, Protocol, TypeVar

from aiopdbp.env import (
    env_rank,
    env_size,
    own_shm,
    record_failure,
    record_rank,
    record_own_shm,
    unlink_own_shm,
    under_aiopdbp_launch,
    uvloop_wanted,
)
from aiopdbp.errors import TransportError
from aiopdbp.hosts.failure import Stop, StopKind, where
from aiopdbp.rankout import flush_all, prefix_output
from aiopdbp.runtime import lastwords
from aiopdbp.transport.mpiload import ABORT_FLUSH_S, load_mpi

T = TypeVar("T")

__all__ = ["KERNEL_FIX", "Job", "Stop", "StopKind", "adopt_loop", "end_adopted", "run", "current_job", "env_rank", "env_size",
           "unlink_own_shm", "own_shm", "record_own_shm", "consequence_of", "leaves", "root_cause",
           "summary", "where"]

#: how long a failing rank waits for the peers to acknowledge its failure
ACK_GRACE = 1.0
#: how long a failing rank waits between printing its traceback and telling
#: the others (who then print their line): hydra forwards each rank's pipe on
#: its own, and the traceback must come first in the merged output
TELL_DELAY = 0.2
#: how long a rank whose error came from a peer waits for that peer's report
#: (the peer reports when its error leaves its node block, after its GPs and
#: tasks have unwound); the job still ends within 10 s when it never comes
CONSEQUENCE_GRACE = 5.0
#: how long a rank whose MPI transport failed waits before it reports that as
#: its own failure: a peer that vanished (``kill -9``) makes MPI fail at once
#: on the ranks it was exchanging with, and the launcher (or the vanished
#: rank's last-words helper) names it while hydra ends the job within this
TRANSPORT_GRACE = 2.0


class Peer(Protocol):
    """What a Job needs of an open node: a way to reach the other ranks."""

    def tell_peers(self, stop: Stop) -> None: ...

    async def wait_acks(self, timeout: float) -> bool: ...


log = logging.getLogger("aiopdbp.job")


def _transport_noise(exc: BaseException) -> bool:
    """An error of MPI or of the transport: what a stopping job's peers,
    exiting, leave the ranks still running (calls to processes that are gone)."""
    if isinstance(exc, TransportError):
        return True
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and isinstance(exc, mpi.Exception)


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions of an exception group, recursively (``[exc]`` else)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


def _origin(exc: BaseException) -> int | None:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        origin = getattr(e, "origin_rank", None)
        if isinstance(origin, int):
            return origin
        e = e.__cause__ or e.__context__
    return None


def consequence_of(exc: BaseException, rank: int | None = None) -> int | None:
    """The rank an error came from, when it only reflects another rank's
    failure or action (``origin_rank`` set by the remote layer), else None.

    An exception group (a ``TaskGroup``'s) is a consequence when every leaf
    that is not a cancellation is one; ``rank`` (this rank) does not count
    as another rank."""
    origin: int | None = None
    for leaf in leaves(exc):
        if isinstance(leaf, asyncio.CancelledError):
            continue
        o = _origin(leaf)
        if o is None or o == rank:
            return None
        if origin is None:
            origin = o
    return origin


def transport_failure(exc: BaseException) -> bool:
    """Whether every leaf of ``exc`` but cancellations is an error of MPI or
    of the transport (what a vanished peer leaves the others): no program
    error among them."""
    found = [leaf for leaf in leaves(exc) if not isinstance(leaf, asyncio.CancelledError)]
    return bool(found) and all(_transport_noise(leaf) for leaf in found)


def root_cause(exc: BaseException, rank: int | None = None) -> BaseException:
    """The exception that started a failure: the first leaf of a group that
    is neither a cancellation nor a consequence of another rank."""
    found = [leaf for leaf in leaves(exc) if not isinstance(leaf, asyncio.CancelledError)]
    own = [leaf for leaf in found if _origin(leaf) in (None, rank)]
    return (own or found or [exc])[0]


def summary(exc: BaseException) -> str:
    """``KeyError: 'missing'``: an exception in one line."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ------------------------------------------------------------------ the job
class Job:
    """The running program of one rank (see the module docstring)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank = rank
        self.size = size
        self.stop: Stop | None = None
        self.reported: BaseException | None = None   # traceback already printed
        self.consequence = False                     # our error only reflected a peer's
        self.acked = False                           # every peer heard of our failure
        #: each open node's peer, with the task the node started in -- held:
        #: a task left unreferenced (a gather's child once the program's main
        #: raised) is collected, its coroutine closed midway through the
        #: node's failure report
        self._peers: dict[Peer, asyncio.Task[Any] | None] = {}
        self._main: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None     # created in the loop
        self._signals = 0
        self._gp_failures: list[tuple[BaseException, str]] = []   # (exception, GP name)
        self._line_said = False
        self._line_lock = threading.Lock()
        #: made for a loop that aiopdbp.run does not run (see "Another event loop")
        self.adopted = False

    @property
    def under_mpi(self) -> bool:
        return self.size > 1

    @property
    def stopped(self) -> bool:
        """Whether the job was asked to stop (a signal, a peer's stop)."""
        return self.stop is not None

    # -- nodes ----------------------------------------------------------------
    def attach(self, peer: Peer) -> None:
        """A node started: it can now tell the other ranks about a stop."""
        self._peers[peer] = asyncio.current_task()
        if self.stop is not None:
            peer.tell_peers(self.stop)

    def detach(self, peer: Peer) -> None:
        self._peers.pop(peer, None)

    # -- stopping -------------------------------------------------------------
    def request_stop(self, stop: Stop, *, tell: bool = True) -> None:
        """Stop the job once: tell the peers, cancel the main task."""
        if self.stop is not None:
            return
        self.stop = stop
        # The line about the stop is said at once, not when this rank exits:
        # the failing rank exits once every rank has acknowledged, an
        # interrupted one without waiting, and hydra then kills the ranks
        # left (seen in CI: rank 0 never printed its line).
        self._stop_line()
        if tell and stop.rank == self.rank:
            for peer in list(self._peers):
                peer.tell_peers(stop)
        if self._stopped is not None:
            self._stopped.set()
        main = self._main
        if main is not None and not main.done():
            main.cancel(f"aiopdbp: {stop.describe()}")

    def on_signal(self, signum: int, frame: Any) -> None:
        # A plain signal handler (not loop.add_signal_handler): it runs at the
        # next bytecode even while a coroutine keeps the loop busy.
        self._signals += 1
        loop = self._loop
        if self._signals > 1 or loop is None:
            _hard_exit(128 + signum)
        stop = Stop(StopKind.INTERRUPTED, self.rank, signum)
        loop.call_soon_threadsafe(self.request_stop, stop)

    # -- failing --------------------------------------------------------------
    def note_gp_failure(self, exc: BaseException, gp: str) -> None:
        """An exception left GP ``gp``'s block: if it fails the job, the
        report names the GP.  Cancellations are not noted.  A consequence of
        another rank's error is: it is reported as this rank's own failure
        when that rank reports nothing (a GP there merely left)."""
        if all(isinstance(leaf, asyncio.CancelledError) for leaf in leaves(exc)):
            return
        self._gp_failures.append((root_cause(exc, self.rank), gp))
        del self._gp_failures[:-16]   # a program that catches and goes on

    def _gp_of(self, cause: BaseException) -> str:
        # An exception leaves the innermost GP block first: the first GP
        # noted for it is the one whose code raised, the later ones enclose it.
        for noted, gp in self._gp_failures:
            if noted is cause:
                return gp
        return ""

    def describe_failure(self, exc: BaseException) -> Stop:
        """The stop a failure with ``exc`` makes: its root cause, its GP."""
        cause = root_cause(exc, self.rank)
        return Stop(StopKind.PEER_FAILED, self.rank, 0, summary(cause), self._gp_of(cause))

    async def fail(self, exc: BaseException, peer: Peer | None = None) -> None:
        """An exception leaves a node block: report it before anything closes.

        Prints the rank's complete traceback, removes this rank's
        shared-memory segments, and tells the other ranks.  An error that
        only reflects a peer's failure prints nothing: the rank waits for
        that peer's report (its notice stops this rank, which then prints
        one line naming the peer, see :meth:`finish`).

        Cancellation: the waits are bounded; a cancelled call has reported.
        """
        if self.reported is exc or self.stop is not None:
            return
        if self.reported is not None and \
                all(isinstance(leaf, (asyncio.CancelledError, GeneratorExit)) for leaf in leaves(exc)):
            # a node cancelled because this rank's failure ends it -- or whose
            # task, left unreferenced once the program's main raised, was
            # collected (its coroutine closed)
            return
        origin = consequence_of(exc, self.rank)
        grace = CONSEQUENCE_GRACE if origin is not None else \
            TRANSPORT_GRACE if self.under_mpi and transport_failure(exc) else 0.0
        if grace:
            # Give the rank the error came from time to report first; its
            # FAILED notice makes this rank stop quietly.  A failed transport
            # has no origin: a vanished peer's is said by the launcher or its
            # helper, and hydra ends this rank meanwhile.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self._wait_stop()
            if self.stopped:
                self.consequence = True
                self.reported = exc
                return
        self.report(exc)
        await asyncio.sleep(TELL_DELAY)   # the traceback is forwarded before any peer's line
        stop = self.describe_failure(exc)
        peers = list(self._peers) if peer is None else [peer]
        for p in peers:
            p.tell_peers(stop)
        acked = True
        for p in peers:
            acked = await p.wait_acks(ACK_GRACE) and acked
        self.acked = acked and bool(peers)

    async def _wait_stop(self) -> None:
        if self._stopped is None:
            self._stopped = asyncio.Event()
            if self.stop is not None:
                self._stopped.set()
        await self._stopped.wait()

    def report(self, exc: BaseException) -> None:
        """Print ``exc``'s complete traceback once (prefixed by rank under MPI)."""
        if self.reported is exc:
            return
        self.reported = exc
        unlink_own_shm()
        record_failure(1)
        text = "".join(traceback.format_exception(exc))
        if self.under_mpi:
            text += f"aiopdbp: {self.describe_failure(exc).describe()}; stopping the job\n"
        sys.stderr.write(text)
        sys.stderr.flush()

    def _stop_line(self) -> None:
        """The one line a rank prints about the job's stop, at most once: an
        interrupt is said by rank 0 alone (under ``aiopdbp launch`` the
        launcher says it, from rank 0's record when only a rank was signalled), another rank's failure by every rank, naming
        where it started (under a plain mpiexec each rank's output is read
        among the others'); this rank's own failure has its traceback and a
        lost host its abort line instead -- but a rank another failed for a
        protocol error has no traceback: it says who failed it and why."""
        stop = self.stop
        if stop is None:
            return
        if stop.kind is StopKind.INTERRUPTED:
            if self.rank != 0:
                return
            if under_aiopdbp_launch():
                # the launcher says it: its own signal's line if it got one,
                # else this one (a rank was signalled alone)
                record_failure(stop.exit_code, f"job {stop.describe()}")
                return
            line = f"aiopdbp: job {stop.describe()}"
        elif stop.kind is StopKind.HOST_LOST or (stop.rank == self.rank and stop.by < 0):
            return
        else:
            line = f"aiopdbp: {stop.describe()}"
        with self._line_lock:
            if self._line_said:
                return
            self._line_said = True
        self._say(line)

    def _say(self, line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    # -- running ----------------------------------------------------------------
    async def supervise(self, main: Awaitable[T]) -> T:
        """Run ``main`` as the job's main task."""
        self._loop = loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        loop.set_exception_handler(self._loop_error)
        self._stopped = asyncio.Event()
        if self.stop is not None:
            self._stopped.set()
        try:
            return await main
        except Exception as exc:
            # The program's error, raised beside a node that is still open in
            # another task (asyncio.run is about to cancel that task): it is
            # the failure, reported while the peers can still be told -- not
            # the node's cancellation that follows.
            if self.under_mpi and self.stop is None and self._peers:
                await self.fail(exc)
            raise
        finally:
            self._main = None

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's exception handler: once the job is stopping (a
        signal, a peer's stop), what the transport reports -- MPI calls to
        ranks that already exited (``process_vm_readv failed``) -- is a
        consequence of the stop, which was said in one line: kept out of the
        output (debug log).  Before a stop such an error is held for
        :data:`TRANSPORT_GRACE` (a vanished peer's rank is named meanwhile).
        Anything else is reported as asyncio would."""
        exc = context.get("exception")
        if self.stop is not None and exc is not None and _transport_noise(exc):
            log.debug("after the stop: %s: %r", context.get("message"), exc)
            return
        if self.under_mpi and exc is not None and _transport_noise(exc) and not context.get("held"):
            # (see TRANSPORT_GRACE) news only if this rank is still running then
            loop.call_later(TRANSPORT_GRACE, self._loop_error, loop, {**context, "held": True})
            return
        loop.default_exception_handler(context)

    def finish(self, exc: BaseException | None) -> None:
        """After the loop ended: exit the way the outcome demands (MPI)."""
        stop = self.stop
        if stop is not None:
            if stop.kind is StopKind.HOST_LOST:
                # the lost host cannot hear us: only MPI_Abort ends its rank;
                # the record makes `aiopdbp launch` name the lost rank, not
                # the ranks MPI_Abort killed
                self._say(f"aiopdbp: rank {self.rank}: {stop.describe()}")
                record_failure(1, stop.describe())
                _abort(1)
            self._stop_line()  # (said already, unless the stop came some other way)
            _hard_exit(stop.exit_code)
        if exc is None or isinstance(exc, (SystemExit, GeneratorExit)):
            return
        if self.reported is not exc:
            self.report(exc)    # raised outside any node: the peers do not know
            _abort(1)
        if self.consequence or self.acked:
            if self.acked:
                # every peer printed its line before it acknowledged; give
                # hydra a moment to forward them (it kills the ranks left
                # when this one exits)
                time.sleep(ABORT_FLUSH_S)
            _hard_exit(1)
        _abort(1)


_current: Job | None = None


def current_job() -> Job | None:
    """The Job of the running ``aiopdbp.run()``, or the one a node adopted
    for another loop (None outside both)."""
    return _current


#: what a program that opens a node of several ranks in a running kernel is told
KERNEL_FIX = ("aiopdbp: a job of several ranks cannot run in an event loop that is already running "
              "(a Jupyter kernel): put the program in a file and start it with "
              "`aiopdbp launch -n N prog.py` (ending with aiopdbp.run(main()))")


def adopt_loop() -> Job | None:
    """The Job of this rank when a node starts under MPI outside
    ``aiopdbp.run`` (see "Another event loop"): made once for the running
    loop; None for a job of one rank (nothing to adopt).  Raises
    ``RuntimeError`` (:data:`KERNEL_FIX`) in a running Jupyter kernel."""
    global _current
    if _current is not None:
        if _current.adopted:
            record_rank(_current.rank)   # a later node of the same program
        return _current
    size = env_size()
    if size <= 1:
        return None
    if "ipykernel" in sys.modules:
        raise RuntimeError(KERNEL_FIX)
    job = Job(env_rank(), size)
    job.adopted = True
    prefix_output(job.rank)
    record_rank(job.rank)
    job._loop = loop = asyncio.get_running_loop()
    job._main = asyncio.current_task()
    loop.set_exception_handler(job._loop_error)
    job._stopped = asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, job.on_signal)
    previous = sys.excepthook

    def excepthook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
        # the top of the program: as run() ends, the peers must not wait for us
        if _current is job:
            job.finish(value)
        previous(tp, value, tb)

    sys.excepthook = excepthook
    _current = job
    return job


def end_adopted(job: Job, exc: BaseException | None) -> None:
    """A node of an adopted loop closed: after a failure or a stop the
    process ends here, as ``run()`` ends it after its loop
    (:meth:`Job.finish`); after a clean close the job stays for the next
    node, and a later exception at the top of the program still ends it."""
    if exc is not None or job.stop is not None:
        if job.stop is None and isinstance(exc, (SystemExit, GeneratorExit)):
            return
        job.finish(exc)
    record_rank(job.rank, done=True)   # (aiopdbp launch: this rank returned, it did not vanish)


# ---------------------------------------------------------------- exiting
def _hard_exit(code: int) -> NoReturn:
    """End the process now: no MPI_Finalize (peers may be gone), no leftovers."""
    lastwords.quiet()   # (this rank said its line)
    unlink_own_shm()
    flush_all()
    os._exit(code)


def _abort(code: int) -> NoReturn:
    """Abort the whole MPI job (the peers may not know we failed)."""
    lastwords.quiet()
    unlink_own_shm()
    flush_all()
    time.sleep(ABORT_FLUSH_S)
    with contextlib.suppress(Exception):
        mpi = load_mpi()
        if mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.COMM_WORLD.Abort(code)
    os._exit(code)


# ------------------------------------------------------------------- run()
@contextlib.contextmanager
def _signal_handlers(job: Job) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, job.on_signal)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


async def _await(aw: Awaitable[T]) -> T:
    return await aw


def _loop_factory(use_uvloop: bool | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if use_uvloop is None:
        use_uvloop = uvloop_wanted()
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            return None
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return loop_factory
    return None


def run(main: Coroutine[Any, Any, T] | Awaitable[T], *, use_uvloop: bool | None = None,
        debug: bool = False) -> T:
    """Run ``main`` to completion in a new event loop (uvloop when present).

    ``use_uvloop=None`` uses uvloop if it is installed and the environment
    variable ``AIOPDBP_UVLOOP`` is not ``0``.

    Signals: SIGINT and SIGTERM cancel ``main`` (every pending await is
    cancelled and the nodes close); a second one exits at once.  Outside MPI
    Ctrl-C then raises ``KeyboardInterrupt`` as ``asyncio.run`` does, and
    SIGTERM ``SystemExit(143)``.  Under MPI the whole job stops: the other
    ranks are told, every rank exits with 130 (SIGINT) or 143 (SIGTERM),
    and one line says so.  An exception that escapes ``main`` under MPI
    prints this rank's traceback first and ends the job (see
    :doc:`/guide/failures`).
    """
    global _current
    coro = main if asyncio.iscoroutine(main) else _await(main)
    size = env_size()
    job = Job(env_rank() if size > 1 else 0, size)
    if job.under_mpi:
        prefix_output(job.rank)
        record_rank(job.rank)  # (aiopdbp launch: a rank that never returns vanished)
        lastwords.start(job.rank)   # (plain mpiexec: the same, said by a helper)
    previous, _current = _current, job
    outcome: BaseException | None = None
    try:
        with _signal_handlers(job), asyncio.Runner(debug=debug,
                                                   loop_factory=_loop_factory(use_uvloop)) as runner:
            return runner.run(job.supervise(coro))
    except BaseException as exc:
        outcome = exc
        stop = job.stop
        if not job.under_mpi and stop is not None and isinstance(exc, asyncio.CancelledError):
            if stop.signal == signal.SIGINT:
                raise KeyboardInterrupt() from None
            raise SystemExit(128 + stop.signal) from None
        raise
    finally:
        _current = previous
        lastwords.quiet()
        if job.under_mpi and job.stop is None and (outcome is None or isinstance(outcome, SystemExit)):
            record_rank(job.rank, done=True)
        if job.under_mpi and (outcome is not None or job.stop is not None):
            job.finish(outcome)
