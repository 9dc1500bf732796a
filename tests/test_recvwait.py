"""A GP's receive that waits (the pipe empty at the call, no timeout): in the
compiled form the receive path's own wait (``crecvpath._Wait``: the driver,
the park on a future, the take), in the pure form ``GP._recv``'s.  Each test
runs through a real GP in whichever form is loaded (the suite runs both:
``AIOPDBP_NO_EXTENSIONS=1``), and each outcome -- woken, cancelled before or
after the wake-up, a closed pipe, a pipe at its end, a driver -- must be the
same in both."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from aiopdbp.errors import ClosedResourceError
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.runtime.recvcore import COMPILED as RECV_COMPILED

pytestmark = pytest.mark.timeout(20)


async def _parked(gp: Any) -> asyncio.Task[Any]:
    """A task whose ``gp.recv()`` is parked on the empty pipe."""
    task = asyncio.create_task(gp.recv())
    while not gp.receiving:
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not task.done() and len(gp.pipe._recv_waiters) >= 1
    return task


async def test_a_waiting_receive_is_the_paths_own_in_the_compiled_form() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("b") as b:
            coro = b.recv()
            try:
                assert isinstance(coro, types.CoroutineType) != RECV_COMPILED
            finally:
                coro.close()
            assert b.receiving == 0


async def test_a_parked_receive_is_woken_by_a_send_and_returns_it() -> None:
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            for i in range(3):
                task = await _parked(b)
                assert b.receiving == 1
                await a.send("b", bytes([i]) * 8)
                msg = await task
                assert (msg.source, msg.data) == ("a", bytes([i]) * 8)
                assert b.receiving == 0 and not b.pipe._recv_waiters


async def test_a_parked_receive_cancelled_takes_nothing_and_leaves_no_waiter() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a, nodes[0].process("b") as b:
            task = await _parked(b)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert b.receiving == 0 and not b.pipe._recv_waiters
            await a.send("b", b"next")
            assert (await b.recv()).data == b"next"


async def test_a_receive_cancelled_after_its_wake_up_passes_it_on() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a, nodes[0].process("b") as b:
            first = await _parked(b)
            second = asyncio.create_task(b.recv())
            while b.receiving < 2:
                await asyncio.sleep(0)
            await a.send("b", b"one")     # wakes the first (its future set), which has not run
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert (await second).data == b"one"   # the wake-up went on: nothing lost
            assert b.receiving == 0 and len(b.pipe) == 0


async def test_a_timeout_around_a_parked_receive_takes_nothing() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a, nodes[0].process("b") as b:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.01):   # (nothing is sent: it always expires)
                    await b.recv()
            assert b.receiving == 0 and not b.pipe._recv_waiters
            with pytest.raises(TimeoutError, match="received nothing within"):
                await b.recv(timeout=0.01)
            await a.send("b", b"after")
            assert (await b.recv()).data == b"after" and b.receiving == 0


async def test_a_parked_receive_raises_when_its_gp_is_freed() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("b") as b:
            task = await _parked(b)
            await b.free()
            with pytest.raises(ClosedResourceError, match="is closed"):
                await task
            assert b.receiving == 0


@pytest.mark.parametrize("error", [None, ConnectionError("peer broken")])
async def test_a_parked_receive_raises_when_its_pipe_is_closed(error: Any) -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("b") as b:
            task = await _parked(b)
            b.pipe.close(error)
            with pytest.raises(ClosedResourceError, match="is closed"):
                await task
            assert b.receiving == 0


async def test_a_parked_receive_raises_eof_when_its_pipe_ends() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("b") as b:
            task = await _parked(b)
            b.pipe.close_send()
            with pytest.raises(EOFError):
                await task
            assert b.receiving == 0


# The wait stepped by hand: the coroutine protocol, as a native coroutine's.

async def test_a_waiting_receive_stepped_by_hand_yields_a_future_then_returns() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a, nodes[0].process("b") as b:
            coro = b.recv()
            fut = coro.send(None)
            assert isinstance(fut, asyncio.Future) and fut._asyncio_future_blocking
            assert b.receiving == 1 and list(b.pipe._recv_waiters) == [fut]
            fut._asyncio_future_blocking = False
            await a.send("b", b"hand")
            assert fut.done()
            with pytest.raises(StopIteration) as stop:
                coro.send(None)
            assert stop.value.value.data == b"hand" and b.receiving == 0
            with pytest.raises(RuntimeError, match="cannot reuse"):
                coro.send(None)


@pytest.mark.parametrize("exc", [asyncio.CancelledError, KeyError])
async def test_a_waiting_receive_thrown_into_raises_and_stops_counting(exc: type[BaseException]) -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a, nodes[0].process("b") as b:
            coro = b.recv()
            fut = coro.send(None)
            with pytest.raises(exc):
                coro.throw(exc("t"))
            assert b.receiving == 0
            # a cancel withdraws its future (Pipe.receive's rule); another exception does not
            assert list(b.pipe._recv_waiters) == ([] if exc is asyncio.CancelledError else [fut])
            b.pipe._recv_waiters.clear()
            with pytest.raises(RuntimeError, match="cannot reuse"):
                coro.send(None)
            await a.send("b", b"x")
            assert (await b.recv()).data == b"x"


async def test_a_waiting_receive_closed_stops_counting() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("b") as b:
            coro = b.recv()
            coro.send(None)
            coro.close()
            assert b.receiving == 0
            coro.close()   # (twice: nothing)


# With a driver (a transport that steps MPI in the waiting task): the wait
# lets it run until the pipe is ready, then takes the item.

async def test_a_receive_with_a_driver_takes_what_arrived_while_it_drove() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a, nodes[0].process("b") as b:
            calls: list[Any] = []

            async def drive(ready: Any) -> None:
                calls.append(ready)
                await asyncio.sleep(0)
                await a.send("b", b"driven")    # (what the driver's step would deliver)
                assert ready()

            b._drive = drive
            assert (await b.recv()).data == b"driven"
            assert len(calls) == 1 and calls[0] == b.pipe.ready
            assert b.receiving == 0 and not b.pipe._recv_waiters


async def test_a_receive_whose_driver_gives_up_parks_and_is_woken() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a, nodes[0].process("b") as b:
            async def drive(ready: Any) -> None:
                await asyncio.sleep(0)           # quiet: the caller waits the ordinary way

            b._drive = drive
            task = await _parked(b)
            await a.send("b", b"late")
            assert (await task).data == b"late" and b.receiving == 0


async def test_a_receive_cancelled_while_it_drives_stops_the_driver_and_counting() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("b") as b:
            driving = asyncio.Event()
            stopped: list[BaseException] = []

            async def drive(ready: Any) -> None:
                driving.set()
                try:
                    await asyncio.Event().wait()
                except BaseException as exc:
                    stopped.append(exc)
                    raise

            b._drive = drive
            task = asyncio.create_task(b.recv())
            await driving.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert [type(e) for e in stopped] == [asyncio.CancelledError]
            assert b.receiving == 0 and not b.pipe._recv_waiters
