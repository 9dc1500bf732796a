"""The waits that poll MPI: :class:`Backoff` and :class:`SpinThenBackoff` (the start-up join)."""

from __future__ import annotations

import asyncio
import time

from aiopdbp.transport.backoff import Backoff, SpinThenBackoff


def test_backoff_doubles_to_its_cap_and_starts_again_after_a_reset() -> None:
    b = Backoff(1e-3, 4e-3)
    assert [b.delay() for _ in range(4)] == [1e-3, 2e-3, 4e-3, 4e-3]
    b.reset()
    assert b.delay() == 1e-3


async def test_a_spinning_wait_returns_at_the_next_loop_turn_without_a_timer() -> None:
    wait = SpinThenBackoff(60.0, Backoff(30.0, 30.0))   # a back-off sleep would outlast the timeout
    turned = asyncio.Event()
    asyncio.get_running_loop().call_soon(turned.set)
    async with asyncio.timeout(10):
        await wait.sleep()
    assert turned.is_set() and wait.spinning()


async def test_once_the_spin_is_over_the_wait_sleeps_the_backoff() -> None:
    wait = SpinThenBackoff(0.0, Backoff(0.05, 0.05))
    assert not wait.spinning()
    t = time.monotonic()
    await wait.sleep()
    assert time.monotonic() - t >= 0.045
