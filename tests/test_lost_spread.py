"""A lost host's name reaches every rank along spread trees (issue 31 item 4):
the heartbeat watches only a ring neighbourhood, so a watcher passes the loss
on (``LostMsg``) down a binomial tree over the ring -- O(log n) messages per
rank, none to the lost one -- and every rank fails the host naming it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from aiopdbp.errors import HostLostError, ProtocolError
from aiopdbp.hosts.failure import HostFailures, spread_targets
from aiopdbp.launch.exits import pidfd_exit_status
from aiopdbp.wire.control import CtrlMsg, LostMsg, decode_control
from tests.mpirun import SCRIPTS_DIR, rank_lines, requires_mpi
from tests.test_mpi_failures import LiveJob, _launch

WATCH_JOB = SCRIPTS_DIR / "watch_job.py"


class _Wires:
    """The control channels of ``size`` ranks: sends are queued, frames
    round-trip through their encoding, ``pump`` delivers them in order."""

    def __init__(self, size: int, dead: set[int]) -> None:
        self.size, self.dead = size, dead
        self.queue: list[tuple[int, int, CtrlMsg]] = []
        self.sent: Counter[int] = Counter()
        self.got: Counter[int] = Counter()
        self.ranks = [self._failures(r) for r in range(size)]

    def _failures(self, rank: int) -> HostFailures:
        wires = self

        class Channel:
            def send(self, dest: int, msg: CtrlMsg, on_fail: object = None) -> None:
                wires.sent[rank] += 1
                wires.queue.append((rank, dest, decode_control(msg.encode())))

        return HostFailures(rank, self.size, Channel(), break_host=lambda h, e: None,  # type: ignore[arg-type]
                            stop_waiting=lambda e: None, job=lambda: None, heartbeat=lambda cb: None,
                            lost_grace=1.0)

    def pump(self) -> None:
        while self.queue:
            src, dest, msg = self.queue.pop(0)
            self.got[dest] += 1
            if dest not in self.dead:
                assert isinstance(msg, LostMsg)
                self.ranks[dest].on_lost(src, msg)


def test_a_loss_noticed_by_one_watcher_reaches_every_rank_in_log_n_messages_each() -> None:
    wires = _Wires(32, dead={17})
    wires.ranks[16].host_lost(17)
    wires.pump()
    for r, f in enumerate(wires.ranks):
        if r != 17:
            assert list(f.lost) == [17], r
            assert isinstance(f.lost[17], HostLostError) and f.lost[17].origin_rank == 17
            assert str(f.lost[17]).startswith("rank 17 is lost")
            assert 17 in f.failed
    assert "noticed by rank 16" in str(wires.ranks[3].lost[17])
    assert wires.got[17] == 0                                            # nothing to the lost rank
    assert all(wires.got[r] == 1 for r in range(32) if r not in (16, 17))   # each hears of it once
    assert max(wires.sent.values()) <= 5 and sum(wires.sent.values()) == 30  # log2(32) at most, n - 2 in all


def test_every_watcher_spreads_so_a_second_dead_rank_cuts_no_rank_off() -> None:
    # Rank 24 is a hop of watcher 16's tree that answers for ranks 24-31:
    # dead too, it drops them; the other watchers' trees still reach them.
    dead = {17, 24}
    wires = _Wires(32, dead)
    for watcher in (15, 16, 18, 19):
        wires.ranks[watcher].host_lost(17)
    wires.pump()
    assert all(list(f.lost) == [17] for r, f in enumerate(wires.ranks) if r not in dead)
    assert max(wires.sent[r] for r in range(32) if r not in (15, 16, 18, 19)) <= 4 * 5


def test_one_tree_alone_misses_the_ranks_a_second_dead_rank_answers_for() -> None:
    # the control for the test above: one tree alone does not survive a second death
    wires = _Wires(32, dead={17, 24})
    wires.ranks[16].host_lost(17)
    wires.pump()
    missed = sorted(r for r, f in enumerate(wires.ranks) if r not in (17, 24) and not f.lost)
    assert missed == list(range(25, 32))


@pytest.mark.parametrize("size", [2, 3, 7, 16, 33])
def test_spread_targets_reach_every_live_rank_once_skipping_the_lost(size: int) -> None:
    for origin in range(size):
        skip = {(origin + size // 2) % size} if size > 2 else set()
        reached: Counter[int] = Counter()
        todo = [(origin, size)]
        while todo:
            me, span = todo.pop()
            out = spread_targets(me, origin, span, size, skip)
            assert len(out) <= (size - 1).bit_length()
            for dest, sub in out:
                reached[dest] += 1
                todo.append((dest, sub))
        assert set(reached) == set(range(size)) - skip - {origin}
        assert set(reached.values()) <= {1}


def test_a_notice_that_names_its_receiver_is_not_passed_on() -> None:
    # a rank stopped (SIGSTOP) and resumed hears that it was lost: the
    # watchers' abort ends it; it must not fail itself or pass it on
    wires = _Wires(8, dead=set())
    wires.ranks[3].on_lost(2, LostMsg(3, 2, 8, "rank 3 is lost"))
    assert not wires.queue and not wires.ranks[3].lost


def test_a_notice_naming_a_rank_outside_the_job_is_a_protocol_error() -> None:
    wires = _Wires(8, dead=set())
    with pytest.raises(ProtocolError, match="LOST names rank 9"):
        wires.ranks[3].on_lost(2, LostMsg(9, 2, 8, "rank 9 is lost"))
    assert not wires.queue and not wires.ranks[3].lost


# ------------------------------------------------ 32 oversubscribed ranks (MPI)
N, VICTIM, HOST_TIMEOUT = 32, 17, 5.0


def _ready_job() -> tuple[LiveJob, dict[int, int]]:
    """``aiopdbp launch -n 32`` of watch_job.py, every rank up: (job, rank -> pid)."""
    job = _launch("-n", str(N), str(WATCH_JOB), str(HOST_TIMEOUT))
    job.wait_for(r"^\[\d+\] ready \d+$", N, timeout=240)
    return job, {r: int(line.split()[1]) for r, line in rank_lines(job.output)
                 if r is not None and line.startswith("ready ")}


def _signal_and_time_to_end(job: LiveJob, pid: int, sig: signal.Signals) -> float:
    t0 = time.monotonic()
    os.kill(pid, sig)
    try:
        assert job.finish(timeout=120) != 0, job.output
        return time.monotonic() - t0
    finally:
        try:   # a stopped rank the abort did not end
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(300)
def test_frozen_rank_of_32_is_named_by_every_rank_and_ends_the_job_within_twice_the_host_timeout() -> None:
    job, pids = _ready_job()
    took = _signal_and_time_to_end(job, pids[VICTIM], signal.SIGSTOP)
    out = job.output
    lost = {r: line for r, line in rank_lines(out) if line.startswith("LOST ")}
    assert sorted(lost) == [r for r in range(N) if r != VICTIM], out        # every other rank heard
    assert all(line.startswith(f"LOST {VICTIM} ") for line in lost.values()), out
    last = [line for line in out.splitlines() if line.startswith("aiopdbp launch:")]
    assert last and re.match(rf"aiopdbp launch: rank {VICTIM} \(host '[^']*'\) has not been heard of", last[-1]), out
    assert took < 2 * HOST_TIMEOUT, (took, out)


def _reaped_status_known() -> bool:
    """Whether a pidfd tells the exit status once reaped (Linux 6.15): the
    launcher then says how a rank hydra reaped before it looked ended."""
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    fd = os.pidfd_open(proc.pid)
    try:
        proc.wait()
        return pidfd_exit_status(fd) == 3 << 8
    finally:
        os.close(fd)


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(300)
def test_killed_rank_of_32_ends_the_job_within_twice_the_host_timeout_and_is_named_first() -> None:
    job, pids = _ready_job()
    took = _signal_and_time_to_end(job, pids[VICTIM], signal.SIGKILL)
    out = job.output
    assert took < 2 * HOST_TIMEOUT, (took, out)
    first = [line for line in out.splitlines() if line.startswith("aiopdbp launch:")]
    how = "was killed by SIGKILL" if _reaped_status_known() else r"(was killed by SIGKILL|vanished \(exit status unknown\))"
    assert first and re.match(rf"aiopdbp launch: rank {VICTIM} \(pid {pids[VICTIM]}\) {how} during aiopdbp.run, "
                              "the first rank to end", first[0]), out
