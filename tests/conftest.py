"""Shared fixtures of the aiopdbp test-suite.

Keep this file small and generic: per-area helpers live in the test modules.
Fixture names carry a prefix saying what they are for (``pdbp_`` for the
single-host asyncio tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest

import aiopdbp

Spawn = Callable[[Coroutine[Any, Any, Any]], Awaitable["asyncio.Task[Any]"]]


@pytest.fixture
async def pdbp_node() -> AsyncIterator[aiopdbp.Node]:
    """An open single-host node with default options (closed at teardown)."""
    async with aiopdbp.open_node() as node:
        yield node


@pytest.fixture
async def pdbp_spawn() -> AsyncIterator[Spawn]:
    """``task = await pdbp_spawn(coro)``: run ``coro`` in a new task and return
    once it has reached its first real suspension point (or finished).

    This orders tasks without sleeping: when ``pdbp_spawn`` returns, a
    coroutine that blocks (in ``recv``, ``send`` under backpressure, ...) is
    parked there.  Tasks still running at teardown are cancelled and awaited.
    """
    tasks: list[asyncio.Task[Any]] = []

    async def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        ready = asyncio.Event()

        async def runner() -> Any:
            ready.set()
            return await coro

        task = asyncio.get_running_loop().create_task(runner())
        tasks.append(task)
        await ready.wait()
        return task

    yield spawn
    for task in tasks:
        if not task.done():
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
