"""The receiving side of remote flow control (aiopdbp.routing.arrivals):
items placed in the GPs' pipes, parked for a GP not bound yet, and the
credit they owe their senders."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiopdbp.hosts.tables import Tables
from aiopdbp.routing.arrivals import Arrivals
from aiopdbp.routing.pipes import Pipe, PipePool
from aiopdbp.wire.message import CREDIT_OVERHEAD

WINDOW = 1000
PID = 7
Grants = list[tuple[int, list[tuple[int, int]]]]


def _arrivals(window: int = WINDOW) -> tuple[Arrivals, Pipe[Any], Grants]:
    grants: Grants = []
    pipe = PipePool(4, 4).apply_nowait()
    # the GP's binding, as the router's on_update("pipe_bind") makes it
    arrivals = Arrivals(Tables(), {PID: pipe}, 0, window=window,
                        grant=lambda host, g: grants.append((host, list(g))))
    return arrivals, pipe, grants


# ------------------------------------------------------------ owed credit
@pytest.mark.timeout(10)
async def test_owed_credit_below_threshold_stays_until_asked() -> None:
    arrivals, pipe, grants = _arrivals()
    arrivals.deliver_remote(1, PID, [b"m"], 100)
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == []                         # 100 < window / 4: kept
    arrivals.on_ask(1, PID)
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, 100)])]


@pytest.mark.timeout(10)
async def test_ask_before_the_reader_drains_is_answered_at_the_drain() -> None:
    arrivals, pipe, grants = _arrivals()
    arrivals.deliver_remote(1, PID, [b"a"], 5)    # each below a 64th of the window
    arrivals.deliver_remote(1, PID, [b"b"], 5)
    arrivals.on_ask(1, PID)
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == []                         # one item of host 1 still waits
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, 10)])]


@pytest.mark.timeout(10)
async def test_ask_with_nothing_owed_is_answered_when_data_in_flight_is_taken() -> None:
    arrivals, pipe, grants = _arrivals()
    arrivals.on_ask(1, PID)                       # the ask overtook the data
    await asyncio.sleep(0)
    assert grants == []
    arrivals.deliver_remote(1, PID, [b"late"], 60)
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, 60)])]


@pytest.mark.timeout(10)
async def test_an_asking_host_gets_credit_back_after_a_64th_of_the_window() -> None:
    """Many small batches from one host (a sender that started first and
    filled the window alone) are marked in 64ths of the window, so a
    host-mate parked behind them gets credit once the reader has taken a
    64th, not once it has taken a whole coarser mark or caught up."""
    arrivals, pipe, grants = _arrivals(window=6400)
    for _ in range(40):
        arrivals.deliver_remote(1, PID, [b"x"], 10)
    arrivals.on_ask(1, PID)
    for _ in range(10):
        pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, 100)])]        # 100 * 64 >= 6400; 30 items still wait


@pytest.mark.timeout(10)
async def test_unasked_owed_credit_returns_in_quarter_windows() -> None:
    arrivals, pipe, grants = _arrivals()
    for _ in range(3):
        arrivals.deliver_remote(1, PID, [b"x"], WINDOW // 8)
        pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, WINDOW // 4)])]


@pytest.mark.timeout(10)
async def test_a_whole_window_of_credit_goes_back_before_the_reader_can_reply() -> None:
    arrivals, pipe, grants = _arrivals(window=1 << 20)
    arrivals.deliver_remote(1, PID, [b"big"], (1 << 20) + CREDIT_OVERHEAD)
    pipe.receive_nowait()
    assert grants == [(1, [(PID, (1 << 20) + CREDIT_OVERHEAD)])]   # at once, not at the iteration's end
    arrivals.deliver_remote(1, PID, [b"small"], 1000)
    pipe.receive_nowait()
    assert len(grants) == 1                                         # small ones still wait and batch


@pytest.mark.timeout(10)
async def test_a_released_pipe_gives_its_senders_their_credit_back() -> None:
    arrivals, pipe, grants = _arrivals()
    arrivals.deliver_remote(1, PID, [b"a"] * 3, 300)
    arrivals.deliver_remote(2, PID, [b"b"], 50)
    arrivals.forget_pipe(pipe)                   # the GP left with them unread
    arrivals.flush_grants(everything=True)
    assert sorted(grants) == [(1, [(PID, 300)]), (2, [(PID, 50)])]
    assert arrivals.stats()["credit_owed"] == 0


# --------------------------------------------------------------- parking
@pytest.mark.timeout(10)
async def test_items_for_a_gp_not_registered_yet_wait_for_its_binding_in_order() -> None:
    tables = Tables()
    pps = PipePool(4, 4)
    targets: dict[int, Any] = {}
    arrivals = Arrivals(tables, targets, 0, window=WINDOW)
    assert arrivals.deliver_remote(1, PID, [b"first"], 70)     # its registration has not come
    assert arrivals.deliver_remote(2, PID, [b"second"], 70)
    assert arrivals.stats()["parked_now"] == 2
    pipe = pps.apply_nowait()
    targets[PID] = pipe                 # what the router's on_update makes of the update below
    tables.apply("proc_reg", ("dst", 0, 0, pipe.pipe_id, PID))
    assert [pipe.receive_nowait(), pipe.receive_nowait()] == [b"first", b"second"]
    assert arrivals.stats()["parked_now"] == 0 and arrivals.parked == 2


@pytest.mark.timeout(10)
async def test_items_parked_for_a_gp_that_never_binds_end_their_streams_when_they_expire() -> None:
    ended: list[Any] = []
    heard = asyncio.Event()

    class _Streams:
        def open_whole(self, *a: Any) -> None:
            return None

        def undelivered(self, items: list[Any]) -> None:
            ended.extend(items)
            heard.set()

    arrivals = Arrivals(Tables(), {}, 0, bind_timeout=0.05, streams=_Streams())
    item = object()   # (an IncomingStream in the node: the stream table ends it)
    assert arrivals.deliver_remote(1, PID, [item], 100)      # parked: its registration has not come
    await asyncio.wait_for(heard.wait(), 5)                 # bind_timeout later
    assert ended == [item]                                   # its sender will hear
    assert arrivals.dropped == 1


def test_nothing_parks_once_closed() -> None:
    arrivals = Arrivals(Tables(), {}, 0)
    arrivals.close()
    assert not arrivals.deliver_remote(1, PID, [b"late"], 70)   # dropped, its credit owed back
    assert arrivals.stats()["parked_now"] == 0 and arrivals.dropped == 1
