"""The last open rank: once every other rank has closed its node, a GP that
waits in recv() is reported (aiopdbp.stall), and a rank whose close timeout
passes says which ranks it still waits for (aiopdbp.hosts.closing).  In one
process (the watch, the tally, an in-process cluster of 3), then over MPI
with mpi_scripts/last_open.py."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest

import aiopdbp
from aiopdbp.errors import ProtocolError
from aiopdbp.hosts.closing import Closing
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.stall import StallWatch, Waits
from aiopdbp.wire.control import ClosingMsg, CtrlMsg, LastOpenMsg

STALL = 0.2
TOLD = "since every other rank closed its node"


class _GPs:
    """Fake receivers: name -> (waits in recv, queued, taken)."""

    def __init__(self, **state: tuple[bool, int, int]) -> None:
        self.state = state

    def __call__(self) -> list[tuple[str, bool, int, int]]:
        return [(name, *v) for name, v in self.state.items()]


def _watch(gps: _GPs) -> StallWatch:
    return StallWatch(2, Waits(), lambda: [], timeout=1.0, receivers=gps)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "aiopdbp.stall"]


# ----------------------------------------------------------- the stall watch
def test_last_open_rank_reports_a_gp_waiting_in_recv_once_after_the_stall_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aiopdbp.stall")
    watch = _watch(_GPs(c=(True, 0, 1)))
    watch.last_open(now=100.0)
    watch.check(now=100.9)
    assert _said(caplog) == []
    watch.check(now=101.0)
    watch.check(now=105.0)
    [line] = _said(caplog)
    assert line.startswith(f"rank 2: GP 'c' has waited in recv() for 1.0 s {TOLD}: only a GP of rank 2 "
                           "can still send to it"), line


def test_a_gp_waiting_in_recv_is_not_reported_while_another_rank_is_open(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aiopdbp.stall")
    watch = _watch(_GPs(c=(True, 0, 1)))
    watch.check(now=100.0)
    watch.check(now=200.0)
    assert _said(caplog) == [] and watch.last_open_since is None


def test_last_open_rank_does_not_report_a_gp_that_reads_or_has_items_queued(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aiopdbp.stall")
    gps = _GPs(reads=(True, 0, 1), queued=(True, 3, 0), busy=(False, 0, 0))
    watch = _watch(gps)
    watch.last_open(now=100.0)
    gps.state["reads"] = (True, 0, 2)      # it took an item and waits again
    watch.check(now=100.6)
    watch.check(now=101.5)
    assert _said(caplog) == []
    watch.check(now=101.6)
    [line] = _said(caplog)
    assert "GP 'reads' has waited in recv() for 1.0 s" in line and "every GP" not in line, line


async def test_every_gp_waiting_in_recv_is_said_only_with_no_send_under_way(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aiopdbp.stall")
    watch = _watch(_GPs(c=(True, 0, 0), d=(True, 0, 0)))
    send = watch.waits.begin("c", "credit", "x", 0)    # a send of a task outside the GPs' recv
    watch.last_open(now=100.0)
    watch.check(now=101.0)
    watch.waits.end(send)
    watch.check(now=101.5)
    first, second = _said(caplog)
    assert first == (f"rank 2: GPs 'c', 'd' have waited in recv() for 1.0 s or longer {TOLD}: only a GP "
                     "of rank 2 can still send to them"), first
    assert second.startswith("rank 2: every GP of rank 2 waits in recv() with nothing queued and no send "
                             "under way"), second


# -------------------------------------------------- rank 0's tally of closes
class _Channel:
    def __init__(self) -> None:
        self.sent: list[tuple[int, CtrlMsg]] = []

    def send(self, dest: int, msg: CtrlMsg, on_fail: Any = None) -> None:
        self.sent.append((dest, msg))


class _Told:
    def __init__(self) -> None:
        self.times = 0

    def __call__(self) -> None:
        self.times += 1


class _Exchange:
    """A transport whose count exchange never completes (a rank never closes)."""

    def exchange_counts(self, counts: list[int]) -> Any:
        return lambda: None


class _NoFailures:
    failed: tuple[int, ...] = ()

    def left(self) -> frozenset[int] | None:
        return None   # no heartbeat


class _Heartbeat(_NoFailures):
    """Failures with a heartbeat that saw ``gone`` leave."""

    def __init__(self) -> None:
        self.gone: frozenset[int] = frozenset()

    def left(self) -> frozenset[int] | None:
        return self.gone


class _Later:
    """A transport whose count exchange completes when ``total`` is set."""

    def __init__(self) -> None:
        self.total: int | None = None

    def exchange_counts(self, counts: list[int]) -> Any:
        return lambda: self.total


class _Arrived:
    def arrived(self, total: int) -> bool:
        return True


def _closing(rank: int, size: int, channel: _Channel | None = None, told: _Told | None = None,
             close_timeout: float = 0.0) -> Closing:
    return Closing(rank, size, _Exchange(), channel or _Channel(), None, _NoFailures(),  # type: ignore[arg-type]
                   last_open=told or _Told(), close_timeout=close_timeout)


def test_rank_0_tells_the_last_open_rank_when_every_other_rank_closed() -> None:
    channel, told = _Channel(), _Told()
    closing = _closing(0, 3, channel, told)
    closing.on_closing(1, ClosingMsg(1))
    assert channel.sent == []
    closing.begin()                         # rank 0's own close
    assert channel.sent == [(2, LastOpenMsg(2))] and told.times == 0


def test_rank_0_that_is_the_last_open_rank_needs_no_message() -> None:
    channel, told = _Channel(), _Told()
    closing = _closing(0, 2, channel, told)
    closing.on_closing(1, ClosingMsg(1))
    assert channel.sent == [] and told.times == 1


def test_a_closing_rank_tells_rank_0_once() -> None:
    channel = _Channel()
    closing = _closing(1, 4, channel)
    closing.begin()
    closing.begin()
    assert channel.sent == [(0, ClosingMsg(1))]


def test_a_last_open_notice_not_from_rank_0_or_not_for_this_rank_is_a_protocol_error() -> None:
    told = _Told()
    closing = _closing(2, 3, told=told)
    closing.on_last_open(0, LastOpenMsg(2))
    assert told.times == 1
    with pytest.raises(ProtocolError):
        closing.on_last_open(1, LastOpenMsg(2))
    with pytest.raises(ProtocolError):
        closing.on_last_open(0, LastOpenMsg(1))


# ------------------------------------------------- the close timeout's line
@pytest.mark.timeout(10)
@pytest.mark.parametrize("rank,size,closed,want", [
    (1, 2, (), "host 1: rank 0 has not closed its node within the close timeout (3 s); still waiting for it"),
    (0, 3, (1,), "host 0: rank 2 has not closed its node within the close timeout (3 s); still waiting for it"),
    (0, 4, (), "host 0: ranks 1, 2, 3 have not closed their nodes within the close timeout (3 s); still "
               "waiting for them"),
    (1, 3, (), "host 1: not every rank has closed its node within the close timeout (3 s); still waiting "
               "for the ranks that have not (rank 0 names them)"),
], ids=["two-ranks", "rank-0-knows", "rank-0-knows-several", "not-known"])
async def test_close_timeout_says_which_ranks_it_still_waits_for_not_that_it_gave_up(
        caplog: pytest.LogCaptureFixture, rank: int, size: int, closed: tuple[int, ...], want: str) -> None:
    caplog.set_level(logging.WARNING, logger="aiopdbp.hosts.closing")
    closing = _closing(rank, size)
    for r in closed:
        closing.on_closing(r, ClosingMsg(r))
    closing.begin()
    await closing.wait({}, time.monotonic() - 1, 3.0)
    [record] = [r for r in caplog.records if r.name == "aiopdbp.hosts.closing"]
    assert record.levelno == logging.WARNING and record.getMessage().startswith(want), record.getMessage()


@pytest.mark.timeout(10)
async def test_a_rank_past_its_close_timeout_holds_on_serving_until_the_late_rank_closes(
        caplog: pytest.LogCaptureFixture) -> None:
    # it keeps the names homed on it: the late rank may still ask them
    caplog.set_level(logging.WARNING, logger="aiopdbp.hosts.closing")
    exchange = _Later()
    closing = Closing(1, 2, exchange, _Channel(), _Arrived(), _Heartbeat(),  # type: ignore[arg-type]
                      last_open=_Told(), close_timeout=0.0)
    closing.begin()
    waiting = asyncio.create_task(closing.wait({}, time.monotonic() - 1, 3.0))
    await asyncio.sleep(0.2)
    assert not waiting.done() and "still waiting for it" in caplog.text
    exchange.total = 0           # rank 0 reached its close
    await asyncio.wait_for(waiting, 5)


@pytest.mark.timeout(10)
async def test_a_rank_holding_on_stops_a_close_timeout_after_the_heartbeat_saw_a_rank_leave() -> None:
    # a node closed without waiting (graceful=False) never takes part in the exchange
    failures = _Heartbeat()
    closing = Closing(1, 2, _Later(), _Channel(), _Arrived(), failures,  # type: ignore[arg-type]
                      last_open=_Told(), close_timeout=0.0)
    closing.begin()
    waiting = asyncio.create_task(closing.wait({}, time.monotonic() - 1, 0.1))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    failures.gone = frozenset({0})
    await asyncio.wait_for(waiting, 5)


@pytest.mark.timeout(10)
async def test_rank_0_holding_on_past_its_close_timeout_still_tells_the_last_open_rank() -> None:
    channel = _Channel()
    closing = Closing(0, 3, _Later(), channel, _Arrived(), _Heartbeat(),  # type: ignore[arg-type]
                      last_open=_Told(), close_timeout=0.0)
    closing.begin()
    waiting = asyncio.create_task(closing.wait({}, time.monotonic() - 1, 3.0))
    await asyncio.sleep(0.1)
    closing.on_closing(1, ClosingMsg(1))
    assert channel.sent == [(2, LastOpenMsg(2))] and not waiting.done()
    waiting.cancel()


class _Seen(logging.Handler):
    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text = text
        self.lines: list[str] = []
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.lines.append(record.getMessage())
            self.event.set()


@pytest.mark.timeout(10)
async def test_open_rank_0_names_the_ranks_still_open_a_close_timeout_after_the_first_close() -> None:
    seen = _Seen("not closed")
    logging.getLogger("aiopdbp.hosts.closing").addHandler(seen)
    try:
        closing = _closing(0, 4, close_timeout=0.05)
        closing.on_closing(1, ClosingMsg(1))
        closing.on_closing(3, ClosingMsg(3))
        await asyncio.wait_for(seen.event.wait(), 5)
        closing.stop()
    finally:
        logging.getLogger("aiopdbp.hosts.closing").removeHandler(seen)
    assert seen.lines == ["rank 0: ranks 0, 2 have not closed their nodes 0.05 s (the close timeout) after "
                          "the first rank closed its own; the ranks that closed wait for them"]


# ------------------------------------------------ an in-process cluster of 3
@pytest.mark.timeout(30)
async def test_in_process_the_last_open_rank_is_told_and_its_gp_waiting_in_recv_reported() -> None:
    seen = _Seen(TOLD)
    logging.getLogger("aiopdbp.stall").addHandler(seen)
    try:
        async with open_cluster(3, stall_timeout=STALL, close_timeout=20.0) as nodes:
            async with nodes[2].process("c") as c, nodes[1].process("b") as b:
                await b.send("c", b"hi")
                assert (await c.recv()).data == b"hi"   # type: ignore[union-attr]
                await b.free()
                closes = [asyncio.create_task(n.aclose()) for n in nodes[:2]]
                waiting = asyncio.create_task(c.recv())
                await asyncio.wait_for(seen.event.wait(), 15)
                waiting.cancel()
            await asyncio.gather(nodes[2].aclose(), *closes)
    finally:
        logging.getLogger("aiopdbp.stall").removeHandler(seen)
    [line] = seen.lines
    assert line.startswith(f"rank 2: GP 'c' has waited in recv() for ") and TOLD in line, line


# --------------------------------------------------------------- over MPI
from tests.mpirun import SCRIPTS_DIR, check_mpi, requires_mpi, run_mpi, unprefixed  # noqa: E402

SCRIPT = SCRIPTS_DIR / "last_open.py"


def _results(out: str) -> dict[int, str]:
    rows = [json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines() if "RESULT " in line]
    return {int(r["rank"]): str(r["warned"]) for r in rows}


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_reply_that_never_comes_is_reported_naming_the_gp_that_waits() -> None:
    # the new user's program: rank 1's GP leaves without answering rank 0's
    r = run_mpi(SCRIPT, n=2, args=["reply"], timeout=75)
    warned = _results(check_mpi(r))
    out = r.stdout + unprefixed(r.stderr)
    assert warned[0].startswith(f"rank 0: GP 'a' has waited in recv() for ") and TOLD in warned[0], out
    assert "every GP of rank 0 waits in recv()" in warned[0] and warned[1] == "", out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_the_last_open_rank_that_is_not_rank_0_is_told_and_reports_its_gp() -> None:
    r = run_mpi(SCRIPT, n=3, args=["three"], timeout=75)
    warned = _results(check_mpi(r))
    out = r.stdout + unprefixed(r.stderr)
    assert warned[2].startswith("rank 2: GP 'c' has waited in recv() for ") and TOLD in warned[2], out
    assert warned[0] == warned[1] == "", out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_rank_late_on_purpose_is_not_reported_and_the_job_ends_0() -> None:
    r = run_mpi(SCRIPT, n=2, args=["late"], timeout=75)
    out = check_mpi(r) + unprefixed(r.stderr)
    assert sorted(_results(out)) == [0, 1], out
    assert "closed its node" not in out and "close timeout" not in out and "stall" not in out, out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_rank_whose_close_timeout_passes_says_it_still_waits_for_rank_0() -> None:
    r = run_mpi(SCRIPT, n=2, args=["slow"], timeout=75)
    out = check_mpi(r) + unprefixed(r.stderr)
    assert TOLD in _results(out)[0], out
    assert "[1] host 1: rank 0 has not closed its node within the close timeout (1 s); still waiting " \
           "for it" in r.stderr, out
    assert "gave up" not in out, out


LATE_HOME = SCRIPTS_DIR / "late_home.py"


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_rank_late_past_the_close_timeout_frees_gps_homed_on_a_rank_that_closed() -> None:
    # the names are homed on rank 1, which closed 3 close timeouts before
    r = run_mpi(LATE_HOME, n=2, timeout=75)
    out = check_mpi(r) + unprefixed(r.stderr)
    assert sorted(_results_ranks(out)) == [0, 1], out
    assert "Error" not in out and "Traceback" not in out and "did not answer" not in out, out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_rank_holding_on_past_its_close_timeout_prints_the_late_ranks_failure() -> None:
    r = run_mpi(LATE_HOME, n=2, args=["fails"], timeout=75)
    check_mpi(r, expect_rc=1)
    out = r.stdout + r.stderr
    assert "[1] aiopdbp: rank 0 (GP gp-a) failed: KeyError: 'late'" in out, out


def _results_ranks(out: str) -> list[int]:
    return [int(json.loads(line.split("RESULT ", 1)[1])["rank"]) for line in out.splitlines() if "RESULT " in line]
