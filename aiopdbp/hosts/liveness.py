"""Liveness: a heartbeat thread per rank notices a peer that went silent.

Theory of operation
-------------------
Every rank runs one :class:`Heartbeat`, a daemon thread that every
``interval`` s sends a tiny message (its kind and the host name) to
its *watch set*, receives theirs, and declares a peer of the set *lost*,
once, when it has not been heard of for more than ``timeout`` s.

*The watch set* (:func:`watch_set`): the ``watch`` nearest ranks on each
side of a ring of ranks (``r +- 1 .. r +- watch``, 2 by default; every peer
when the job is that small).  It is symmetric -- whom a rank beats to are
those that watch it -- so a rank's heartbeat cost is O(1) in the job size
instead of O(ranks), and a dead rank is still noticed by up to ``2 * watch``
watchers, each of which reports it: the job's failure path then stops every
rank, naming the dead one.  ``on_lost(rank, silence)``
is called *in the heartbeat thread*; an asyncio caller marshals it::

    Heartbeat(comm, tag, on_lost=lambda r, s: loop.call_soon_threadsafe(node.host_lost, r, s))

*Why a thread.*  The event loop may be busy in user code for longer than
``timeout``.  BLAS, CUDA synchronize and ``time.sleep`` release the GIL, and
pure-Python code hands it over every ``sys.getswitchinterval()``, so the
thread keeps beating.  Only C code that *holds* the GIL that long
(``sum(range(10**9))``, a backtracking regex) silences a rank: its peers
cannot tell it from a dead one.

*MPI.*  The thread uses the communicator it is given with a tag of its own
(the transport probes only its own tag) and never blocks in MPI: ``Isend``
with at most one beat in flight per peer (a stopped peer cannot pile up
requests), ``Improbe(ANY_SOURCE, tag)`` + ``Imrecv``, ``Test``.  And at
most :data:`UNANSWERED` beats go to a peer not heard of since: a completed
send is not a delivered one.  MPICH's shared-memory transport copies an
eager message into a cell of the *sender's* pool (one pool for all its
destinations, ``MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS`` cells) and the
send completes at once; only the receiver frees the cell.  A stopped peer
frees none, so a beat to it every interval would take the whole pool, and
then the sender's beats to every other peer would wait inside MPI: its
other watchers would declare the sender lost too.  This needs
``MPI_THREAD_MULTIPLE``; below it :meth:`Heartbeat.start` raises
:class:`~aiopdbp.errors.TransportError`, and the fallback is
:meth:`Monitor.poll` (one round, called by the event loop), which beats only
while the loop turns.

*The observer's own stalls.*  Time this thread missed (SIGSTOP, the GIL
held) is not held against the peers, or a rank resumed by ``kill -CONT``
would declare all others lost.  So a peer is declared lost ``timeout`` to
``timeout + tick`` s after it was last heard of, plus the observer's stalls.

*Leaving.*  :meth:`Monitor.stop` sends its watch set a goodbye (a peer that left
is never declared lost), waits a bounded time for the sends, joins the thread.
The I/O sits behind :class:`Wire` (:class:`MPIWire`), so the logic runs and
is tested without MPI.  Cost: a beat per watched peer per ``interval``; a round (O(watched),
~2 µs) per ``tick = min(interval/4, 0.25)`` s, the wake-up costing more (50-120 µs).
"""

from __future__ import annotations

import atexit
import enum
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiopdbp.errors import HostLostError, TransportError

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["Heartbeat", "Monitor", "MPIWire", "UNANSWERED", "WATCH", "Wire", "Sent", "State", "encode",
           "decode", "watch_set"]

#: ranks watched on each side of the ring of ranks (see the module docstring)
WATCH = 2
#: beats sent to a peer not heard of since (see the module docstring)
UNANSWERED = 2


def watch_set(rank: int, size: int, watch: int = WATCH) -> list[int]:
    """The peers ``rank`` beats to and watches: ``rank +- 1 .. rank +- watch``
    on the ring of ``size`` ranks (every peer when ``watch`` covers them;
    ``watch <= 0``: every peer)."""
    if watch <= 0 or 2 * watch >= size - 1:
        return [r for r in range(size) if r != rank]
    return sorted({(rank + d) % size for d in range(1, watch + 1)}
                  | {(rank - d) % size for d in range(1, watch + 1)})

#: kind byte, length of the host name; then the host name
_HEAD = struct.Struct("<cB")
BEAT, BYE = b"H", b"B"


def encode(kind: bytes, host: str) -> bytes:
    """One heartbeat (``BEAT``) or goodbye (``BYE``) message."""
    name = host.encode("utf-8", "replace")[:255]
    return _HEAD.pack(kind, len(name)) + name


def decode(data: bytes) -> tuple[bytes, str]:
    """``(kind, host)`` of a message; ``ValueError`` when malformed."""
    n = len(data) - _HEAD.size
    kind, hlen = _HEAD.unpack_from(data) if n >= 0 else (b"", -1)
    if kind not in (BEAT, BYE) or hlen != n:
        raise ValueError(f"malformed heartbeat {bytes(data[:16])!r}")
    return kind, data[_HEAD.size:].decode("utf-8", "replace")


class Sent(Protocol):
    """A posted send, e.g. an mpi4py ``Request`` (which keeps its buffer alive)."""
    def Test(self) -> bool: ...  # noqa: N802 - mpi4py's name: completed yet? never blocks


class Wire(Protocol):
    """The I/O the monitor needs; no method may block."""

    rank: int
    size: int
    host: str

    def isend(self, dest: int, data: bytes) -> Sent: ...

    def receive(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` complete messages ``(source, data)`` that arrived."""
        ...


class State(enum.Enum):
    """NEW -> RUNNING (start) | POLLING (first poll); any -> STOPPED."""

    NEW, RUNNING, POLLING, STOPPED = "new", "running", "polling", "stopped"


_ALLOWED = {State.NEW: {State.RUNNING, State.POLLING, State.STOPPED}, State.RUNNING: {State.STOPPED},
            State.POLLING: {State.STOPPED}, State.STOPPED: set()}


class Monitor:
    """Heartbeats over any :class:`Wire` (see the module docstring).

    ``on_lost(rank, silence_s)`` runs in the heartbeat thread (or in the
    caller of :meth:`poll`); it must not block.  An exception it raises is
    counted in ``stats()["callback_errors"]`` and kept in :attr:`callback_error`.
    """

    def __init__(self, wire: Wire, *, interval: float = 1.0, timeout: float = 30.0,
                 on_lost: Callable[[int, float], None],
                 clock: Callable[[], float] = time.monotonic, watch: int = WATCH) -> None:
        if not interval > 0:
            raise ValueError(f"heartbeat interval must be > 0 s, not {interval!r}")
        if not timeout > interval:
            raise ValueError(f"liveness timeout ({timeout!r} s) must exceed the interval ({interval} s)")
        self.interval, self.timeout = float(interval), float(timeout)
        self.tick = min(self.interval / 4, 0.25)
        self._wire, self._on_lost, self._clock = wire, on_lost, clock
        self._peers = watch_set(wire.rank, wire.size, watch)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = State.NEW
        self.callback_error: BaseException | None = None
        now = clock()
        self._last = dict.fromkeys(self._peers, now)  # when each peer was last heard of
        self._hosts: dict[int, str] = {}             # peers heard of, with their host
        self._unanswered = dict.fromkeys(self._peers, 0)  # beats sent since last heard of
        self._inflight: list[tuple[int, Sent]] = []  # sends not completed yet: (peer, send)
        self._gone: set[int] = set()                 # peers that said goodbye
        self._lost: dict[int, float] = {}            # rank -> silence when declared
        self._prev = self._next_send = now           # previous round, next beat
        self._max_stall, self._cpu, self._last_error = 0.0, 0.0, ""
        self._n = dict.fromkeys(("rounds sent skipped received goodbyes malformed stalls "
                                 "wire_errors callback_errors abandoned").split(), 0)

    def _to(self, state: State) -> None:
        if state not in _ALLOWED[self.state]:
            raise RuntimeError(f"liveness monitor: {self.state.value} -> {state.value} is not allowed")
        self.state = state

    # ------------------------------------------------------------- control
    def _begin(self, state: State) -> None:
        with self._lock:
            self._to(state)
            now = self._clock()   # every peer's silence starts now
            self._last = dict.fromkeys(self._peers, now)
            self._prev = self._next_send = now

    def start(self) -> None:
        """Start the heartbeat thread (once); it sends its first beats at once."""
        self._begin(State.RUNNING)
        self._thread = threading.Thread(target=self._run, name="aiopdbp-heartbeat", daemon=True)
        self._thread.start()
        # atexit runs LIFO: this runs before mpi4py's MPI_Finalize handler.
        atexit.register(self.stop)

    def poll(self) -> None:
        """One round in the caller's thread: the fallback without a thread
        (below ``MPI_THREAD_MULTIPLE``); call it every :attr:`tick` seconds."""
        if self.state is State.NEW:
            self._begin(State.POLLING)
        elif self.state is not State.POLLING:
            raise RuntimeError(f"poll() on a {self.state.value} liveness monitor (start() runs a thread)")
        self._round()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread and say goodbye to every peer, waiting up to
        ``timeout`` s for those sends (then ``stats()["abandoned"]`` counts the
        rest).  Idempotent.  Call it before the communicator is freed."""
        deadline = self._clock() + timeout
        with self._lock:
            was = self.state
            if was is State.STOPPED:
                return
            self._to(State.STOPPED)
        atexit.unregister(self.stop)
        if was is State.RUNNING and self._thread is not threading.current_thread():
            assert self._thread is not None
            self._wake.set()
            self._thread.join(max(0.0, deadline - self._clock()) + 1.0)
            if self._thread.is_alive():   # only a blocking on_lost can do this
                self._last_error = "heartbeat thread did not end (on_lost blocks?)"
                return
        self._goodbye(deadline)

    # ------------------------------------------------------------- queries
    @property
    def lost(self) -> frozenset[int]:
        """Peers declared lost (each is reported once to ``on_lost``)."""
        with self._lock:
            return frozenset(self._lost)

    @property
    def departed(self) -> frozenset[int]:
        """Peers that said goodbye: never declared lost."""
        with self._lock:
            return frozenset(self._gone)

    def silence(self) -> dict[int, float]:
        """Peer rank -> seconds since it was last heard of (departed peers left out)."""
        now = self._clock()
        with self._lock:
            return {p: now - t for p, t in self._last.items() if p not in self._gone}

    def error(self, rank: int) -> HostLostError:
        """The :class:`HostLostError` for a lost (or silent) peer, naming its rank and host."""
        with self._lock:
            silence = self._lost.get(rank, self._clock() - self._last.get(rank, self._clock()))
            host = self._hosts.get(rank)
        where = f"rank {rank} (host {host!r})" if host else f"rank {rank}"
        what = "has not been heard of for" if host is not None else "was never heard of in"
        return HostLostError(f"{where} {what} {silence:.1f} s (liveness timeout {self.timeout:g} s): it died, "
                             f"is stopped, or its network is down", rank)

    def stats(self) -> dict[str, Any]:
        """Counters (``rounds sent skipped received goodbyes malformed stalls
        wire_errors callback_errors abandoned``), ``lost``
        (rank -> silence when declared), ``departed``, ``max_silence_s``,
        ``max_stall_s``, ``thread_cpu_s`` (CPU time of the thread), ``last_error``."""
        silence = max(self.silence().values(), default=0.0)
        with self._lock:
            return dict(self._n, state=self.state.value, lost=dict(self._lost), departed=sorted(self._gone),
                        max_silence_s=silence, max_stall_s=self._max_stall, thread_cpu_s=self._cpu,
                        last_error=self._last_error)

    # ------------------------------------------------------------- the round
    def _run(self) -> None:
        while self.state is State.RUNNING:
            self._round()
            self._cpu = time.thread_time()
            self._wake.wait(self.tick)

    def _round(self) -> None:
        declared: list[tuple[int, float]] = []
        with self._lock:
            if self.state is State.STOPPED:
                return
            now = self._clock()
            self._n["rounds"] += 1
            stall = now - self._prev - self.tick
            if stall > 2 * self.tick:
                # We were not looking (SIGSTOP, GIL held): do not hold it against the peers.
                self._n["stalls"] += 1
                self._max_stall = max(self._max_stall, stall)
                for p in self._last:
                    self._last[p] = min(now, self._last[p] + stall)
            self._prev = now
            self._receive(now)
            if now >= self._next_send:
                self._next_send = max(self._next_send + self.interval, now)
                self._send_all(BEAT)
            for p, t in self._last.items():
                if p not in self._gone and p not in self._lost and now - t > self.timeout:
                    self._lost[p] = now - t
                    declared.append((p, now - t))
        for rank, silence in declared:
            try:
                self._on_lost(rank, silence)
            except Exception as exc:  # the thread must survive a faulty callback
                with self._lock:
                    self._n["callback_errors"] += 1
                    self.callback_error = self.callback_error or exc

    def _receive(self, now: float) -> None:
        try:
            msgs = self._wire.receive(4 * len(self._peers) + 16)
        except Exception as exc:
            msgs = []
            self._wire_error(exc)
        for src, data in msgs:
            try:
                kind, host = decode(data)
            except ValueError as exc:
                self._n["malformed"] += 1
                self._last_error = str(exc)
                continue
            if src not in self._last:
                continue
            self._n["received"] += 1
            self._hosts[src] = host
            self._last[src] = now
            self._unanswered[src] = 0
            if kind == BYE and src not in self._gone:
                self._gone.add(src)
                self._n["goodbyes"] += 1

    def _send_all(self, kind: bytes) -> None:
        """One message to every peer that did not leave; a beat skips a peer
        whose previous send has not completed or that was sent
        :data:`UNANSWERED` beats since it was last heard of (no pile-up), a
        goodbye does not."""
        self._reap()
        busy = {p for p, _ in self._inflight}
        msg = encode(kind, self._wire.host)
        for p in self._peers:
            if p in self._gone:
                continue
            if kind == BEAT and (p in busy or self._unanswered[p] >= UNANSWERED):
                self._n["skipped"] += 1
                continue
            try:
                self._inflight.append((p, self._wire.isend(p, msg)))
                self._n["sent"] += 1
                self._unanswered[p] += 1
            except Exception as exc:
                self._wire_error(exc)

    def _goodbye(self, deadline: float) -> None:
        with self._lock:
            self._send_all(BYE)
        while True:
            with self._lock:
                self._receive(self._clock())   # keeps MPI progressing; notes peers' goodbyes
                if not self._reap():
                    break
                # A send to a lost peer may never complete: not worth waiting for.
                waiting = any(p not in self._lost for p, _ in self._inflight)
            if not waiting or self._clock() >= deadline:
                break
            time.sleep(min(self.tick, 0.005))
        # What is left stays referenced in _inflight: MPI may still read the buffers.
        self._n["abandoned"] = len(self._inflight)

    def _reap(self) -> bool:
        """Forget completed sends; False if MPI failed."""
        try:
            self._inflight = [(p, sent) for p, sent in self._inflight if not sent.Test()]
            return True
        except Exception as exc:
            self._wire_error(exc)
            return False

    def _wire_error(self, exc: Exception) -> None:
        self._n["wire_errors"] += 1
        self._last_error = f"{type(exc).__name__}: {exc}"


class MPIWire:
    """:class:`Wire` over an mpi4py communicator, one tag of its own."""

    def __init__(self, comm: MPI.Comm, tag: int) -> None:
        from aiopdbp.transport.mpi import load_mpi

        mpi = load_mpi()
        if not 0 <= tag <= 32767:
            raise ValueError(f"heartbeat tag {tag} is outside 0..32767 (MPI_TAG_UB)")
        self._mpi, self._comm, self._tag = mpi, comm, tag
        self.rank, self.size = int(comm.Get_rank()), int(comm.Get_size())
        self.host = str(mpi.Get_processor_name())
        self._status = mpi.Status()
        self._pending: list[tuple[int, bytearray, Any]] = []

    def isend(self, dest: int, data: bytes) -> Sent:
        if self._mpi.Is_finalized():
            raise RuntimeError("MPI is finalized")
        req: Sent = self._comm.Isend([data, self._mpi.BYTE], dest, self._tag)
        return req

    def receive(self, limit: int) -> list[tuple[int, bytes]]:
        mpi, st = self._mpi, self._status
        if mpi.Is_finalized():
            raise RuntimeError("MPI is finalized")
        while len(self._pending) < limit:
            msg = self._comm.Improbe(mpi.ANY_SOURCE, self._tag, st)
            if msg is None:
                break
            buf = bytearray(st.Get_count(mpi.BYTE))
            # Imrecv, not Mrecv: a large (malformed) message must not block us.
            self._pending.append((st.Get_source(), buf, msg.Irecv([buf, mpi.BYTE])))
        done = [(src, bytes(buf)) for src, buf, req in self._pending if req.Test()]
        self._pending = [p for p in self._pending if p[2] != mpi.REQUEST_NULL]  # not completed
        return done


class Heartbeat(Monitor):
    """The MPI monitor: heartbeats on ``comm`` with tag ``tag``.

    Use a tag that no other traffic on ``comm`` uses and that differs from an
    earlier monitor's on a communicator with the same context id (MPICH
    reuses freed ones; a stale goodbye would exempt a peer).  :meth:`start`
    raises :class:`TransportError` below ``MPI_THREAD_MULTIPLE``: use
    :meth:`poll` from the event loop then."""

    def __init__(self, comm: MPI.Comm, tag: int, *, interval: float = 1.0, timeout: float = 30.0,
                 on_lost: Callable[[int, float], None], watch: int = WATCH) -> None:
        super().__init__(MPIWire(comm, tag), interval=interval, timeout=timeout, on_lost=on_lost,
                         watch=watch)

    def start(self) -> None:
        from aiopdbp.transport.mpi import load_mpi

        mpi = load_mpi()
        level = mpi.Query_thread()
        if level < mpi.THREAD_MULTIPLE:
            name = {mpi.THREAD_SINGLE: "SINGLE", mpi.THREAD_FUNNELED: "FUNNELED"}.get(level, "SERIALIZED")
            raise TransportError(f"the heartbeat thread needs MPI_THREAD_MULTIPLE, but MPI was initialised "
                                 f"with MPI_THREAD_{name}: set AIOPDBP_MPI_THREAD_LEVEL=multiple (or "
                                 f"mpi4py.rc.thread_level) before MPI starts, or call poll() from the loop")
        super().start()
