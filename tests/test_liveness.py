"""Liveness (issue 8, item 3): heartbeats notice a silent peer, never a busy one.

The round logic runs here over an in-memory :class:`FakeNet` with a fake
clock (``Monitor.poll``), so the decisions are checked exactly; the thread is
checked over the same fake network with the real clock; the MPI jobs
(``tests/mpi_scripts/liveness.py``) check the real thing: a ``kill -STOP``ped
rank is reported, a rank busy for seconds in numpy or in Python is not, and
the MPI thread-level fallback.  How long detection took is printed by the job
(a figure, not an assertion).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque

import pytest

from aiopdbp.errors import HostLostError, TransportError
from aiopdbp.hosts.liveness import BEAT, UNANSWERED, Monitor, State, encode, watch_set

from tests.mpirun import SCRIPTS_DIR, check_mpi, requires_mpi, run_mpi

pytestmark = pytest.mark.timeout(60)

SCRIPT = SCRIPTS_DIR / "liveness.py"
#: MPICH's shared-memory eager cells per sending rank (its default: 64)
MPICH_CELLS = "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS"


# --------------------------------------------------------------- fakes
class FakeSent:
    def __init__(self, net: FakeNet, dest: int) -> None:
        self.net, self.dest = net, dest

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        return self.dest not in self.net.stuck   # a send to a stuck peer never completes


class FakeWire:
    def __init__(self, net: FakeNet, rank: int) -> None:
        self.net, self.rank, self.size, self.host = net, rank, net.size, f"host{rank}"

    def isend(self, dest: int, data: bytes) -> FakeSent:
        sent = FakeSent(self.net, dest)
        self.net.inbox[dest].append((self.rank, data))
        self.net.sends[(self.rank, dest)].append(sent)
        return sent

    def receive(self, limit: int) -> list[tuple[int, bytes]]:
        box = self.net.inbox[self.rank]
        return [box.popleft() for _ in range(min(limit, len(box)))]


class FakeNet:
    """In-memory messages between ranks; ``stuck`` ranks never complete sends to them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.inbox: list[deque[tuple[int, bytes]]] = [deque() for _ in range(size)]
        self.sends: dict[tuple[int, int], list[FakeSent]] = {(a, b): [] for a in range(size)
                                                             for b in range(size)}
        self.stuck: set[int] = set()

    def wire(self, rank: int) -> FakeWire:
        return FakeWire(self, rank)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def monitors(n: int, clock: Clock, *, interval: float = 1.0, timeout: float = 3.0
             ) -> tuple[FakeNet, list[Monitor], list[tuple[int, int, float]]]:
    """n monitors over one FakeNet; ``events`` collects (observer, lost rank, silence)."""
    net = FakeNet(n)
    events: list[tuple[int, int, float]] = []
    mons = [Monitor(net.wire(r), interval=interval, timeout=timeout, clock=clock,
                    on_lost=lambda rank, s, me=r: events.append((me, rank, s))) for r in range(n)]
    return net, mons, events


def run_rounds(clock: Clock, mons: list[Monitor], seconds: float, *, step: float = 0.25) -> None:
    for _ in range(round(seconds / step)):
        clock.t += step
        for m in mons:
            m.poll()


# --------------------------------------------------------------- round logic
def test_silent_peer_is_declared_lost_once_after_timeout() -> None:
    clock = Clock()
    _, (a, b), events = monitors(2, clock)
    run_rounds(clock, [a, b], 5)
    assert events == [] and a.lost == frozenset()
    for _ in range(20):                            # b went silent: a alone, round by round
        run_rounds(clock, [a], 0.25)
        if a.silence()[1] <= 3.0:
            assert events == [], "declared lost within the timeout"
    assert [(me, r) for me, r, _ in events] == [(0, 1)]
    assert 3.0 < events[0][2] <= 3.0 + 0.25        # timeout < silence <= timeout + tick
    run_rounds(clock, [a], 10)
    assert len(events) == 1 and a.lost == frozenset({1})


def test_peer_that_said_goodbye_is_never_declared_lost() -> None:
    clock = Clock()
    _, (a, b), events = monitors(2, clock)
    run_rounds(clock, [a, b], 2)
    b.stop(timeout=0)
    run_rounds(clock, [a], 20)
    assert events == [] and a.departed == frozenset({1}) and 1 not in a.silence()


def test_heartbeats_to_a_stuck_peer_do_not_pile_up() -> None:
    clock = Clock()
    net, (a, _b), _ = monitors(2, clock, timeout=60)
    net.stuck.add(1)
    run_rounds(clock, [a], 20)
    assert sum(not s.Test() for s in net.sends[(0, 1)]) == 1
    assert a.stats()["skipped"] >= 18


def test_beats_to_a_silent_peer_stop_after_a_few_even_when_each_send_completes() -> None:
    # MPICH's shared memory completes a send at once and holds the sender's cell until
    # the receiver takes the message: a stopped peer must not be handed a beat every interval
    clock = Clock()
    net, (a, b), _ = monitors(2, clock, timeout=60)
    run_rounds(clock, [a, b], 2)
    net.inbox[1].clear()                          # b goes silent with nothing pending
    run_rounds(clock, [a], 20)
    assert len(net.inbox[1]) == UNANSWERED
    sent = a.stats()["sent"]
    run_rounds(clock, [a, b], 4)                  # b resumes and answers: a beats again
    assert a.stats()["sent"] - sent >= 3


def test_own_stall_is_not_held_against_peers() -> None:
    clock = Clock()
    _, (a, b), events = monitors(2, clock)
    run_rounds(clock, [a, b], 2)
    clock.t += 10                                 # a was not running (kill -STOP, GIL held)
    run_rounds(clock, [a], 1)
    assert events == [] and a.stats()["stalls"] == 1
    run_rounds(clock, [a, b], 2)
    run_rounds(clock, [a], 5)                     # detection still works afterwards
    assert [(me, r) for me, r, _ in events] == [(0, 1)]


def test_malformed_message_is_counted_and_ignored() -> None:
    clock = Clock()
    net, (a, _b), events = monitors(2, clock)
    net.inbox[0].extend([(1, b"xx"), (1, b"Z" + encode(BEAT, "h")[1:])])
    a.poll()
    assert a.stats()["malformed"] == 2 and a.stats()["received"] == 0
    run_rounds(clock, [a], 5)
    assert [(me, r) for me, r, _ in events] == [(0, 1)]   # malformed bytes keep no one alive


def test_error_names_rank_host_and_silence() -> None:
    clock = Clock()
    _, (a, b), _ = monitors(2, clock)
    run_rounds(clock, [a, b], 1)
    run_rounds(clock, [a], 5)
    err = a.error(1)
    assert isinstance(err, HostLostError) and err.origin_rank == 1
    assert "rank 1 (host 'host1') has not been heard of for 3." in str(err)


def test_error_for_a_peer_never_heard_of_says_so() -> None:
    clock = Clock()
    _, (a, _b), _ = monitors(2, clock)
    run_rounds(clock, [a], 5)
    assert "rank 1 was never heard of" in str(a.error(1))


def test_failing_on_lost_is_recorded_and_monitoring_goes_on() -> None:
    clock = Clock()
    net = FakeNet(3)

    def on_lost(rank: int, silence: float) -> None:
        raise RuntimeError(f"callback failed for {rank}")

    a = Monitor(net.wire(0), interval=1, timeout=3, clock=clock, on_lost=on_lost)
    run_rounds(clock, [a], 5)
    assert a.lost == frozenset({1, 2}) and a.stats()["callback_errors"] == 2
    assert isinstance(a.callback_error, RuntimeError)


@pytest.mark.parametrize("interval,timeout", [(0, 30), (-1, 30), (1, 1), (2, 1)])
def test_bad_interval_or_timeout_raises_value_error(interval: float, timeout: float) -> None:
    with pytest.raises(ValueError, match="interval|timeout"):
        Monitor(FakeNet(2).wire(0), interval=interval, timeout=timeout, on_lost=lambda r, s: None)


def test_poll_on_a_started_monitor_raises_runtime_error() -> None:
    m = Monitor(FakeNet(2).wire(0), interval=0.05, timeout=1, on_lost=lambda r, s: None)
    m.start()
    try:
        with pytest.raises(RuntimeError, match="poll"):
            m.poll()
    finally:
        m.stop()
    assert m.state is State.STOPPED


# --------------------------------------------------------------- the thread
def wait_until(cond: object, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_thread_declares_a_silent_peer_lost() -> None:
    net = FakeNet(2)
    lost = threading.Event()
    a = Monitor(net.wire(0), interval=0.02, timeout=0.2, on_lost=lambda r, s: lost.set())
    a.start()
    try:
        assert lost.wait(20)
        assert a.lost == frozenset({1})
    finally:
        a.stop()


def test_thread_keeps_live_peers_alive_while_main_thread_busy_in_python() -> None:
    net = FakeNet(2)
    events: list[int] = []
    a, b = (Monitor(net.wire(r), interval=0.02, timeout=0.2, on_lost=lambda rank, s: events.append(rank))
            for r in range(2))
    a.start()
    b.start()
    try:
        sent = a.stats()["sent"]
        end = time.perf_counter() + 1.0            # 5 timeouts of pure-Python work
        while time.perf_counter() < end:
            sum(i * i for i in range(1000))
        assert events == [], "a peer was declared lost while only the main thread was busy"
        assert a.stats()["sent"] - sent >= 10       # the thread kept sending meanwhile
    finally:
        b.stop()
        assert wait_until(lambda: a.departed == frozenset({1}))
        a.stop()
    assert events == [] and a.state is State.STOPPED


def test_stop_ends_the_thread_promptly() -> None:
    m = Monitor(FakeNet(2).wire(0), interval=10, timeout=30, on_lost=lambda r, s: None)
    m.start()
    t0 = time.monotonic()
    m.stop(timeout=0.5)
    assert time.monotonic() - t0 < 5 and m.state is State.STOPPED
    assert not any(t.name == "aiopdbp-heartbeat" and t.is_alive() for t in threading.enumerate())


# --------------------------------------------------------------- under MPI
def results(out: str) -> dict[int, dict[str, object]]:
    """The RESULT json line of every rank."""
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            res[r["rank"]] = r
    return res


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize("tcp", [False, True], ids=["shm", "tcp"])
def test_stopped_rank_is_reported_lost_by_the_others(tcp: bool) -> None:
    out = check_mpi(run_mpi(SCRIPT, n=3, args=["stop"], tcp=tcp, timeout=120))
    res = results(out)
    assert sorted(res) == [0, 1, 2], out
    for r in (0, 2):
        assert res[r]["lost"] == [1], out
    assert res[1]["lost"] == [], out          # resumed after CONT: its own stall is not the peers'
    assert res[1]["stalls"] >= 1, out


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(150)
def test_stopped_rank_leaves_the_others_heard_with_few_shared_memory_cells() -> None:
    """MPICH's cells per sender set to 8: the stopped rank holds at most a few of each
    watcher's cells, so the watchers' beats to each other still get through."""
    out = check_mpi(run_mpi(SCRIPT, n=3, args=["stop"], timeout=120, env={MPICH_CELLS: "8"}))
    res = results(out)
    assert sorted(res) == [0, 1, 2], out
    assert res[0]["lost"] == [1] and res[2]["lost"] == [1], out


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["numpy", "python"])
def test_busy_rank_is_not_reported_lost(mode: str) -> None:
    out = check_mpi(run_mpi(SCRIPT, n=2, args=[mode], timeout=120, env={"OPENBLAS_NUM_THREADS": "1"}))
    res = results(out)
    assert res[0]["lost"] == [] and res[1]["lost"] == [], out
    assert res[1]["busy_s"] > 2 * res[1]["timeout"], out       # the block really outlasted the timeout
    assert res[1]["sent_while_busy"] >= 3, out                  # its thread kept sending
    assert res[0]["max_silence_s"] < res[0]["timeout"], out


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(150)
def test_rank_holding_the_gil_is_reported_lost() -> None:
    """Control for the test above: C code that holds the GIL does silence a rank."""
    out = check_mpi(run_mpi(SCRIPT, n=2, args=["gil"], timeout=120))
    res = results(out)
    assert res[0]["lost"] == [1], out
    assert res[1]["lost"] == [], out          # the silenced rank does not blame its peer


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(150)
def test_start_below_thread_multiple_raises_and_poll_works() -> None:
    out = check_mpi(run_mpi(SCRIPT, n=2, args=["serialized"], timeout=120,
                            env={"AIOPDBP_MPI_THREAD_LEVEL": "serialized"}))
    res = results(out)
    for r in (0, 1):
        assert "MPI_THREAD_MULTIPLE" in res[r]["start_error"], out
        assert res[r]["received"] >= 3 and res[r]["lost"] == [], out
    assert TransportError.__name__ in res[0]["start_error_type"], out


# --------------------------------------------------------------- watch set (issue 31)
def test_watch_set_is_the_nearest_ranks_on_each_side_of_the_ring() -> None:
    assert watch_set(0, 16) == [1, 2, 14, 15]
    assert watch_set(7, 16, 1) == [6, 8]
    assert watch_set(2, 5) == [0, 1, 3, 4]          # small jobs: every peer


def test_a_rank_beats_only_to_its_watch_set() -> None:
    clock = Clock()
    net, mons, _ = monitors(16, clock)
    run_rounds(clock, mons, 2)
    beaten = {b for (a, b), sent in net.sends.items() if a == 0 and sent}
    assert beaten == {1, 2, 14, 15}


def test_a_dead_rank_is_declared_lost_by_its_watchers_alone() -> None:
    clock = Clock()
    _, mons, events = monitors(16, clock)
    run_rounds(clock, mons, 2)
    run_rounds(clock, [m for r, m in enumerate(mons) if r != 5], 5)   # rank 5 went silent
    assert sorted(me for me, lost, _ in events if lost == 5) == [3, 4, 6, 7]
    assert {lost for _, lost, _ in events} == {5}


def test_a_dead_watcher_does_not_hide_the_rank_it_watched() -> None:
    # ranks 5 and 6 die together: each was the other's watcher; the watchers'
    # watchers (3, 4 for 5; 7, 8 for 6) still declare both
    clock = Clock()
    _, mons, events = monitors(16, clock)
    run_rounds(clock, mons, 2)
    run_rounds(clock, [m for r, m in enumerate(mons) if r not in (5, 6)], 5)
    assert sorted(me for me, lost, _ in events if lost == 5) == [3, 4, 7]
    assert sorted(me for me, lost, _ in events if lost == 6) == [4, 7, 8]
