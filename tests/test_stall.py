"""Stalls are reported, deadlocks fail (aiopdbp.stall), in one process; the
same over MPI with mpi_scripts/deadlock.py and mpi_scripts/stall_exit.py (leaving
a stalled job: Ctrl-C, a cancelled send, a finished rank)."""

from __future__ import annotations

import asyncio
import logging

import pytest

import aiopdbp
from aiopdbp import DeadlockError, WaitEdge
from aiopdbp.stall import find_cycle

STALL = 0.2  # seconds: tests shorten the default 30 s


def _edge(a: str, b: str, rank: int = 0) -> WaitEdge:
    return WaitEdge(a, rank, b, rank, "credit", 1.0)


def test_find_cycle_finds_a_two_gp_cycle_of_readers_that_do_not_read() -> None:
    cycle = find_cycle([_edge("a", "b"), _edge("b", "a")], {"a", "b"})
    assert cycle is not None
    assert {(e.gp, e.waits_for) for e in cycle} == {("a", "b"), ("b", "a")}


def test_find_cycle_ignores_a_cycle_through_a_gp_that_reads() -> None:
    assert find_cycle([_edge("a", "b"), _edge("b", "a")], {"a"}) is None


def test_find_cycle_finds_a_longer_cycle_and_leaves_out_its_tail() -> None:
    edges = [_edge("t", "a"), _edge("a", "b"), _edge("b", "c"), _edge("c", "a")]
    cycle = find_cycle(edges, {"t", "a", "b", "c"})
    assert cycle is not None
    assert [e.gp for e in cycle] == ["a", "b", "c"]


def test_find_cycle_without_a_cycle_is_none() -> None:
    assert find_cycle([_edge("a", "b"), _edge("b", "c")], {"a", "b", "c"}) is None


@pytest.mark.timeout(20)
async def test_send_send_cycle_fails_both_sends_with_the_wait_for_graph() -> None:
    async with aiopdbp.open_node(pipe_capacity=4, stall_timeout=STALL) as node:
        async with node.process("a") as a, node.process("b") as b:
            async def flood(gp: aiopdbp.GP, dest: str) -> None:
                for i in range(10):          # more than the destination's pipe holds
                    await gp.send(dest, i.to_bytes(4, "little"))

            results = await asyncio.gather(flood(a, "b"), flood(b, "a"), return_exceptions=True)
            assert all(isinstance(r, DeadlockError) for r in results), results
            cycle = results[0].cycle  # type: ignore[union-attr]
            assert {(e.gp, e.waits_for) for e in cycle} == {("a", "b"), ("b", "a")}
            assert all(e.resource == "a pipe slot" and e.seconds >= STALL for e in cycle)
            assert node.stats().stall["deadlocks"] == 1


@pytest.mark.timeout(20)
async def test_stream_exchange_cycle_fails_both_send_streams_instead_of_hanging() -> None:
    # Each GP sends the other a stream of more than 64 KiB (it returns once
    # read) before receiving: neither reads, so neither returns.  Found by
    # a newcomer check: it hung silently, the DONE wait being no wait the
    # stall watch saw (up to the segment window, 16 MiB, where it did).
    from aiopdbp.errors import STREAM_READING

    async with aiopdbp.open_node(stall_timeout=STALL) as node:
        async with node.process("a") as a, node.process("b") as b:
            async def exchange(gp: aiopdbp.GP, dest: str) -> None:
                await gp.send_stream(dest, bytes(100 << 10))
                await (await gp.recv()).read()  # type: ignore[union-attr]

            results = await asyncio.gather(exchange(a, "b"), exchange(b, "a"), return_exceptions=True)
            assert all(isinstance(r, DeadlockError) for r in results), results
            cycle = results[0].cycle  # type: ignore[union-attr]
            assert {(e.gp, e.waits_for) for e in cycle} == {("a", "b"), ("b", "a")}
            assert all(e.resource == STREAM_READING for e in cycle), cycle
            assert "returns once its receiver has read it all" in str(results[0])
            assert node.stats().stall["deadlocks"] == 1


@pytest.mark.timeout(20)
async def test_stream_its_receiver_does_not_read_is_reported_and_completes_once_read(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aiopdbp.stall")
    stalled = _Seen("stalled")
    logging.getLogger("aiopdbp.stall").addHandler(stalled)
    try:
        async with aiopdbp.open_node(stall_timeout=STALL) as node:
            async with node.process("p") as p, node.process("lazy") as lazy:
                sending = asyncio.create_task(p.send_stream("lazy", bytes(100 << 10)))
                stream = await lazy.recv()      # taken, not read: the sender still waits
                await stalled.event.wait()
                assert not sending.done()
                assert bytes(await stream.read()) == bytes(100 << 10)  # type: ignore[union-attr]
                assert await sending == 100 << 10   # a slow reader is reported, never failed
                assert node.stats().stall["deadlocks"] == 0
    finally:
        logging.getLogger("aiopdbp.stall").removeHandler(stalled)
    assert "GP 'p' (rank 0) waits" in caplog.text and "the reading of a stream of GP 'lazy'" in caplog.text


class _Seen(logging.Handler):
    """Sets an event when a record containing ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text = text
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


@pytest.mark.timeout(20)
async def test_slow_receiver_is_reported_and_not_failed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aiopdbp.stall")
    idle = _Seen("has not called recv")
    logging.getLogger("aiopdbp.stall").addHandler(idle)
    try:
        async with aiopdbp.open_node(pipe_capacity=4, stall_timeout=STALL) as node:
            async with node.process("fast") as fast, node.process("slow") as slow:
                async def produce() -> None:
                    for i in range(8):
                        await fast.send("slow", i.to_bytes(4, "little"))

                producer = asyncio.create_task(produce())
                await idle.event.wait()       # both reports are out; now read
                got = [int.from_bytes((await slow.recv()).data, "little")  # type: ignore[union-attr]
                       for _ in range(8)]
                await producer                # no error: a slow reader is not a deadlock
                assert got == list(range(8))
                assert node.stats().stall["stalls"] == 1
                assert node.stats().stall["deadlocks"] == 0
    finally:
        logging.getLogger("aiopdbp.stall").removeHandler(idle)
    text = caplog.text
    assert "stalled: GP 'fast' (rank 0) waits" in text and "a pipe slot of GP 'slow'" in text
    assert "GP 'slow' has 4 item(s) queued and has not called recv" in text


def test_a_rank_with_nothing_stale_sends_rank_0_no_report() -> None:
    from aiopdbp.stall import StallWatch, Waits

    sent: list[object] = []
    watch = StallWatch(1, Waits(), lambda: [("g", 0, 5)], timeout=1.0,
                       report=lambda edges, idle: sent.append((edges, idle)))
    watch.check(now=100.0)
    watch.check(now=200.0)
    assert sent == []


@pytest.mark.timeout(20)
async def test_stall_watch_off_reports_nothing() -> None:
    async with aiopdbp.open_node(pipe_capacity=1, stall_timeout=None) as node:
        async with node.process("p") as p, node.process("q") as q:
            await p.send("q", b"1")
            blocked = asyncio.create_task(p.send("q", b"2"))
            for _ in range(20):
                await asyncio.sleep(0)
            assert not blocked.done()
            assert node.stats().stall == {"waiting": 1, "stalls": 0, "deadlocks": 0}
            assert (await q.recv()).data == b"1"  # type: ignore[union-attr]
            await blocked


# ------------------------------------------------------------- over MPI
from tests.mpirun import HYDRA_FAILED, SCRIPTS_DIR, check_mpi, requires_mpi, run_mpi, unprefixed

import json  # noqa: E402


def _results(out: str) -> dict[int, dict[str, object]]:
    rows = [json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines() if "RESULT " in line]
    return {int(r["rank"]): r for r in rows}


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("tcp", [False, True], ids=["shm", "tcp"])
def test_send_send_cycle_across_ranks_fails_the_job_with_the_cycle(tcp: bool) -> None:
    r = run_mpi(SCRIPTS_DIR / "deadlock.py", n=2, tcp=tcp, args=["cycle"], timeout=60)
    got = _results(check_mpi(r, expect_rc=HYDRA_FAILED))
    out = r.stdout + unprefixed(r.stderr)
    assert got, out
    want = [["g0", 0, "g1", 1, "credit"], ["g1", 1, "g0", 0, "credit"]]
    for row in got.values():                  # every rank that printed saw the same cycle
        assert sorted(row["cycle"]) == want, out  # type: ignore[arg-type]
    assert "DeadlockError: deadlock: 'g" in out, out
    assert out.count("Traceback") == 1, out   # one failure (the cycle's first rank), one line elsewhere


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_stream_exchange_cycle_across_ranks_fails_the_job_instead_of_hanging() -> None:
    from aiopdbp.errors import STREAM_READING

    r = run_mpi(SCRIPTS_DIR / "deadlock.py", n=2, args=["streams"], timeout=60)
    got = _results(check_mpi(r, expect_rc=HYDRA_FAILED))
    out = r.stdout + unprefixed(r.stderr)
    assert got, out
    want = [["g0", 0, "g1", 1, STREAM_READING], ["g1", 1, "g0", 0, STREAM_READING]]
    for row in got.values():
        assert sorted(row["cycle"]) == want, out  # type: ignore[arg-type]
    assert "DeadlockError: deadlock: 'g" in out and out.count("Traceback") == 1, out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_slow_receiver_across_ranks_is_reported_and_the_job_succeeds() -> None:
    r = run_mpi(SCRIPTS_DIR / "deadlock.py", n=2, args=["slow"], timeout=60)
    got = _results(check_mpi(r))
    out = r.stdout + unprefixed(r.stderr)
    assert got[1]["ok"] is True, out
    assert got[0]["stall"] == {"waiting": 0, "stalls": 1, "deadlocks": 0}, out
    assert "stalled: GP 'g0' (rank 0) waits" in out and "credit of GP 'g1' (rank 1)" in out, out
    assert "GP 'g1' has" in out and "has not called recv" in out, out


# ------------------------------------------- leaving a stalled job, in seconds
import contextlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from tests.mpirun import REPO_ROOT

#: every rank gone this long after the interrupt or the cancel (issue 15 item 5)
LEAVE_WITHIN = 5.0


class _Job:
    """``aiopdbp launch -n 2 stall_exit.py MODE``, its output watched line by line."""

    def __init__(self, mode: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aiopdbp", "launch", "-n", "2", str(SCRIPTS_DIR / "stall_exit.py"), mode],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=str(REPO_ROOT),
            start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, word: str, timeout: float = 60, count: int = 1) -> None:
        """Poll the lines read so far until ``count`` of them contain ``word``."""
        deadline = time.monotonic() + timeout
        while sum(word in line for line in self.lines) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                pytest.fail(f"no {count} {word!r} line(s):\n{self.output}", pytrace=False)
            time.sleep(0.02)

    def pids(self) -> dict[int, int]:
        """rank -> pid, from the ranks' "ready" lines read so far."""
        return {int(m.group(1)): int(m.group(2)) for line in self.lines
                if (m := re.search(r"ready rank (\d+) pid (\d+)$", line))}

    def finish(self) -> tuple[int, float]:
        """Exit code and seconds from now until the job (every rank) is gone."""
        t0 = time.monotonic()
        try:
            rc = self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the job did not end within 90 s:\n{self.output}", pytrace=False)
        took = time.monotonic() - t0
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return rc, took

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ctrl_c_after_a_stall_ends_every_rank_within_5_s() -> None:
    job = _Job("ctrlc")
    job.wait_for("stalled")
    os.kill(job.proc.pid, signal.SIGINT)           # Ctrl-C: to the launcher
    rc, took = job.finish()
    assert rc == 130, job.output
    assert took < LEAVE_WITHIN, f"the job took {took:.1f} s to end\n{job.output}"


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ctrl_c_to_a_stuck_rank_ends_a_finished_rank_within_5_s() -> None:
    # rank 0 finished and waits in its close handshake (close_timeout 60 s)
    job = _Job("finished")
    job.wait_for("finished")
    job.wait_for("ready", count=2)                 # rank 1's line may come after rank 0's "finished"
    os.kill(job.pids()[1], signal.SIGINT)          # only the rank that does not finish
    rc, took = job.finish()
    assert rc == 130, job.output
    assert took < LEAVE_WITHIN, f"the job took {took:.1f} s to end\n{job.output}"


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_cancelled_stalled_send_ends_every_rank_within_5_s() -> None:
    job = _Job("cancel")
    job.wait_for("stalled")                        # the application gives up 1 s later
    rc, took = job.finish()
    assert rc == 1, job.output
    assert "TimeoutError" in unprefixed(job.output), job.output
    assert took < 1.0 + LEAVE_WITHIN, f"the job took {took:.1f} s to end\n{job.output}"


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_stall_on_a_rank_whose_loop_is_blocked_says_the_loop_may_be_blocked() -> None:
    # only the sender can say it: the receiver's own idle report needs its loop
    r = run_mpi(SCRIPTS_DIR / "blocked_loop.py", n=2, timeout=60)
    out = r.stdout + unprefixed(r.stderr)
    assert r.returncode == 0 and "OK" in r.stdout, out
    assert "stalled: GP 'g0' (rank 0) waits" in out, out
    assert "or rank 1's event loop is blocked in a call that does not await" in out, out
