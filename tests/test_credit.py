"""Per-destination credit (aiopdbp.hosts.link / aiopdbp.routing.router): one admission
rule, a fair FIFO hand-off, and owed credit that never strands a sender.

The link is driven directly (no transport traffic: only ``reserve``,
``offer`` and ``grant``), so each rule is checked on its own; the load suite
(tests/test_load.py) checks the same rules under real traffic.

``await asyncio.sleep(0)`` here is exactly one loop turn, and that is the
behaviour checked: a woken sender runs on the next turn, and the router sends
owed credit at the end of the loop iteration (``call_soon``, one batch), so
"right after one turn" is the promise, not an approximation of "eventually".
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aiopdbp.wire.mesp import Kind
from aiopdbp.errors import BrokenResourceError, WouldBlock
from aiopdbp.hosts.link import HostLink
from aiopdbp.routing.pipes import Pipe, PipePool
from aiopdbp.routing.router import Router
from aiopdbp.hosts.tables import Tables

WINDOW = 1000
PID = 7


class _Transport:
    """Just enough transport for a link whose sends go nowhere."""

    tick = 0

    def post_nowait(self, dest: int, channel: Any, blocks: list[Any]) -> None:
        return None


def _link(asks: list[tuple[int, int]] | None = None) -> HostLink:
    return HostLink(1, _Transport(), None, window=WINDOW, block_size=4096,  # type: ignore[arg-type]
                    large=1 << 20, max_inflight=4, allow_pickle=False,
                    ask=None if asks is None else (lambda h, p: asks.append((h, p))))


async def _parked(link: HostLink, n: int) -> None:
    """Let the loop run until ``n`` senders are parked."""
    for _ in range(100):
        if link.stats().credit_parked == n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"expected {n} parked senders, have {link.stats().credit_parked}")


def _fields(data: bytes) -> tuple[str, Kind, int, Any, int]:
    return ("src", Kind.SHORT, 0, data, 3)


@pytest.mark.timeout(10)
async def test_grant_serves_parked_senders_in_order_for_what_it_covers() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW)            # the whole window is out
    order: list[int] = []

    async def sender(i: int) -> None:
        await link.reserve(PID, 300)
        order.append(i)

    tasks = [asyncio.create_task(sender(i)) for i in range(4)]
    await _parked(link, 4)
    link.grant(PID, 700)                        # covers two of 300, not a third
    await asyncio.sleep(0)
    assert order == [0, 1]
    assert link.stats().credit_parked == 2
    link.grant(PID, 500)                        # 100 left + 500: two more
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3]


@pytest.mark.timeout(10)
async def test_newcomer_never_jumps_a_parked_sender() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW - 100)      # 100 left
    big = asyncio.create_task(link.reserve(PID, 500))
    await _parked(link, 1)
    # 100 bytes of credit would cover a 50-byte message, but one is parked.
    with pytest.raises(WouldBlock):
        link.reserve_nowait(PID, 50)
    assert link.offer(PID, 50, _fields(b"x")) is False
    link.grant(PID, 400)
    await big
    assert link.stats().credit_parked == 0


@pytest.mark.timeout(10)
async def test_newcomer_to_another_destination_is_not_held_up() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW)
    parked = asyncio.create_task(link.reserve(PID, 10))
    await _parked(link, 1)
    link.reserve_nowait(PID + 1, 500)           # another GP's credit: free
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked


@pytest.mark.timeout(10)
async def test_cancelled_head_passes_its_turn_on() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW - 200)      # 200 left
    head = asyncio.create_task(link.reserve(PID, 600))
    await _parked(link, 1)
    small = asyncio.create_task(link.reserve(PID, 100))
    await _parked(link, 2)
    head.cancel()
    with pytest.raises(asyncio.CancelledError):
        await head
    await small                                 # served from the 200 the head could not use
    assert link.stats().credit_parked == 0


@pytest.mark.timeout(10)
async def test_cancel_after_grant_hands_the_credit_on() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW)
    first = asyncio.create_task(link.reserve(PID, 400))
    await _parked(link, 1)
    second = asyncio.create_task(link.reserve(PID, 400))
    await _parked(link, 2)
    link.grant(PID, 400)                        # reserved for `first` ...
    first.cancel()                              # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second                                # got the credit `first` gave back
    with pytest.raises(WouldBlock):
        link.reserve_nowait(PID, 1)             # and nothing was created or lost


@pytest.mark.timeout(10)
async def test_message_larger_than_window_goes_once_whole_window_is_back() -> None:
    link = _link()
    link.reserve_nowait(PID, 10)
    huge = asyncio.create_task(link.reserve(PID, 3 * WINDOW))
    await _parked(link, 1)
    small = asyncio.create_task(link.reserve(PID, 10))
    await _parked(link, 2)                      # held behind the large head
    link.grant(PID, 10)                         # the whole window is back
    await huge
    assert link.stats().credit_parked == 1      # credit is negative now
    link.grant(PID, 2 * WINDOW + 10)
    await small


def test_message_larger_than_window_goes_at_once_on_an_idle_link() -> None:
    link = _link()
    link.reserve_nowait(PID, 5 * WINDOW)
    with pytest.raises(WouldBlock):
        link.reserve_nowait(PID, 1)


@pytest.mark.timeout(10)
async def test_parked_sender_asks_once_until_a_grant_comes() -> None:
    asks: list[tuple[int, int]] = []
    link = _link(asks)
    link.reserve_nowait(PID, WINDOW)
    tasks = [asyncio.create_task(link.reserve(PID, 300)) for _ in range(3)]
    await _parked(link, 3)
    assert asks == [(1, PID)]                   # one ask for the queue, not one per sender
    link.grant(PID, 300)                        # serves one, two still parked: ask again
    await _parked(link, 2)
    assert asks == [(1, PID), (1, PID)]
    link.grant(PID, 600)
    await asyncio.gather(*tasks)
    assert link.stats().credit_asks == 2


@pytest.mark.timeout(10)
async def test_failed_link_fails_every_parked_sender() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW)
    tasks = [asyncio.create_task(link.reserve(PID, 10)) for _ in range(3)]
    await _parked(link, 3)
    link.fail(BrokenResourceError("host 1 is gone"))
    for t in tasks:
        with pytest.raises(BrokenResourceError, match="host 1 is gone"):
            await t
    with pytest.raises(BrokenResourceError):
        await link.reserve(PID, 10)


# ------------------------------------------------------------ owed credit
def _router() -> tuple[Router, Pipe[Any], list[tuple[int, list[tuple[int, int]]]]]:
    tables = Tables()
    pps = PipePool(4, 4)
    grants: list[tuple[int, list[tuple[int, int]]]] = []
    router = Router(tables, pps, 0, name_timeout=1.0, window=WINDOW,
                    submit=lambda tgt, pid, item: None,                 # nothing is routed here
                    offer=lambda tgt, pid, cost, fields: False,
                    grant=lambda host, g: grants.append((host, list(g))))
    pipe = pps.apply_nowait()
    router.targets[PID] = pipe  # the GP's binding, as on_update("pipe_bind") makes it
    return router, pipe, grants


@pytest.mark.timeout(10)
async def test_owed_credit_below_threshold_stays_until_asked() -> None:
    router, pipe, grants = _router()
    router.deliver_remote(1, PID, [b"m"], 100)
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == []                         # 100 < window / 4: kept
    router.on_ask(1, PID)
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, 100)])]


@pytest.mark.timeout(10)
async def test_ask_before_the_reader_drains_is_answered_at_the_drain() -> None:
    router, pipe, grants = _router()
    router.deliver_remote(1, PID, [b"a"], 100)
    router.deliver_remote(1, PID, [b"b"], 100)
    router.on_ask(1, PID)
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == []                         # one item of host 1 still waits
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, 200)])]


@pytest.mark.timeout(10)
async def test_ask_with_nothing_owed_is_answered_when_data_in_flight_is_taken() -> None:
    router, pipe, grants = _router()
    router.on_ask(1, PID)                       # the ask overtook the data
    await asyncio.sleep(0)
    assert grants == []
    router.deliver_remote(1, PID, [b"late"], 60)
    pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, 60)])]


@pytest.mark.timeout(10)
async def test_unasked_owed_credit_returns_in_quarter_windows() -> None:
    router, pipe, grants = _router()
    for _ in range(3):
        router.deliver_remote(1, PID, [b"x"], WINDOW // 8)
        pipe.receive_nowait()
    await asyncio.sleep(0)
    assert grants == [(1, [(PID, WINDOW // 4)])]


# ------------------------------------------------------------ pipe slots
@pytest.mark.timeout(10)
async def test_pipe_slots_go_to_parked_senders_in_order() -> None:
    pipe: Pipe[int] = Pipe(2)
    pipe.send_nowait(-1)
    pipe.send_nowait(-2)
    order: list[int] = []

    async def sender(i: int) -> None:
        await pipe.send(i)
        order.append(i)

    tasks = [asyncio.create_task(sender(i)) for i in range(3)]
    for _ in range(3):
        await asyncio.sleep(0)
    with pytest.raises(WouldBlock):
        pipe.send_nowait(99)                    # a newcomer waits behind them
    got = []
    while len(got) < 5:
        got.append(await pipe.receive())
    await asyncio.gather(*tasks)
    assert got == [-1, -2, 0, 1, 2]
    assert order == [0, 1, 2]


@pytest.mark.timeout(10)
async def test_pipe_slot_handed_to_a_sender_is_not_taken_by_a_newcomer() -> None:
    pipe: Pipe[int] = Pipe(1)
    pipe.send_nowait(0)
    parked = asyncio.create_task(pipe.send(1))
    await asyncio.sleep(0)
    assert pipe.receive_nowait() == 0           # frees the slot: handed to `parked`
    assert pipe.offer(0, 0, ("s", Kind.SHORT, 0, b"x", 1)) is False
    with pytest.raises(WouldBlock):
        pipe.send_nowait(2)
    await parked
    assert pipe.receive_nowait() == 1
