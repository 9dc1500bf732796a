"""A GP's receive path (:mod:`aiopdbp.runtime.recvpath`) and its compiled twin
(``aiopdbp.runtime.crecvpath``): every test runs against both forms, over a
real pipe with a stand-in receiving side, node and GP coroutine, then
through a real GP."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from aiopdbp import arrays
from aiopdbp.errors import ClosedResourceError
from aiopdbp.routing.pipes import Pipe
from aiopdbp.runtime import recvpath as pure_path
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.runtime.recvcore import COMPILED as RECV_COMPILED
from aiopdbp.streams.receiver import WholeStream
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import Message

try:
    from aiopdbp.runtime import crecvpath as compiled_path  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_path = None

FORMS = [pytest.param(pure_path, id="pure"),
         pytest.param(compiled_path, id="compiled",
                      marks=pytest.mark.skipif(compiled_path is None, reason="the compiled receive path is not built"))]

pytestmark = pytest.mark.timeout(10)


class _Rx:
    """The receiving side's parts the path reads."""

    def __init__(self) -> None:
        self.held: Any = None
        self.into_task: Any = None


class _Node:
    def __init__(self, arrays: str = "auto") -> None:
        self.arrays = arrays


class _Slow:
    """The GP's coroutine: takes the next item itself unless the path took
    one (from an empty pipe: a message that came while it waited), and
    records what it was given."""

    def __init__(self, pipe: Pipe[Any]) -> None:
        self.pipe = pipe
        self.calls: list[tuple[Any, ...]] = []

    async def __call__(self, timeout: float | None, arrays: str | None, taken: Any) -> Any:
        self.calls.append((timeout, arrays))
        if taken is None and not len(self.pipe):
            self.pipe.put_many([_msg(b"later")], 1)
        return ("slow", taken if taken is not None else self.pipe.receive_nowait())


def _msg(data: Any = b"x" * 64, source: Any = "a", pid: int = 5) -> Message:
    return Message((source, Kind.SHORT, 0, data, pid))


def _path(form: Any, pipe: Pipe[Any], node: _Node | None = None, *,
          bound: bool = True) -> tuple[Any, _Rx, _Slow]:
    rx = _Rx()
    slow = _Slow(pipe)
    path = form.RecvPath(rx, node or _Node(), slow, arrays.arrival)
    if bound:   # (the GP's pipe, not freed)
        path.pipe = pipe
    return path, rx, slow


@pytest.mark.parametrize("form", FORMS)
async def test_a_named_bytes_message_in_the_pipe_is_taken_and_returned(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    first, second = _msg(b"1"), _msg(b"2")
    pipe.put_many([first, second], 1)
    path, _, slow = _path(form, pipe)
    assert await path.recv(300.0) is first
    assert await path.recv() is second
    assert pipe.taken == 2 and not len(pipe) and not slow.calls


@pytest.mark.parametrize("form", FORMS)
async def test_a_take_reaching_the_watch_settles_it(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([_msg(), _msg(), _msg()], 3)
    settled: list[tuple[int, int]] = []

    def on_watch(p: Pipe[Any], upto: int, host: int) -> int:
        settled.append((upto, host))
        return upto + 2

    pipe.on_watch, pipe.watch_at = on_watch, 1
    path, _, _ = _path(form, pipe)
    for _ in range(3):
        await path.recv()
    assert settled == [(1, 3), (3, 3)] and pipe.watch_at == 5


@pytest.mark.parametrize("form", FORMS)
async def test_a_take_frees_a_local_senders_bytes_and_serves_the_parked(form: Any, pdbp_spawn: Any) -> None:
    pipe: Pipe[Any] = Pipe(8, max_bytes=100)
    assert pipe.offer(5, 80, ("a", Kind.SHORT, 0, b"x", 5))
    waiter = await pdbp_spawn(pipe.reserve(5, 80))      # no room for 80 more bytes: it parks
    assert not waiter.done()
    path, _, _ = _path(form, pipe)
    assert (await path.recv()).data == b"x"
    await asyncio.wait_for(waiter, 5)                 # the take freed the bytes and served it
    assert pipe.room.held_bytes == 80


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", ["no pipe", "empty pipe", "arrays asked for", "an item held", "recv_into waits"])
async def test_everything_else_is_the_gps_coroutine_and_takes_nothing_first(form: Any, case: str) -> None:
    pipe: Pipe[Any] = Pipe(8)
    if case != "empty pipe":
        pipe.put_many([_msg()], 1)
    path, rx, slow = _path(form, pipe, bound=case != "no pipe")
    if case == "an item held":
        rx.held = _msg(b"held")
    elif case == "recv_into waits":
        rx.into_task = object()
    arrays = "numpy" if case == "arrays asked for" else None
    kind, item = await path.recv(2.0, arrays=arrays)
    assert kind == "slow" and slow.calls == [(2.0, arrays)]
    assert item.data == (b"later" if case == "empty pipe" else b"x" * 64) and pipe.taken == 1


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", ["unnamed source", "stream"])
async def test_an_item_returned_otherwise_goes_to_the_gps_coroutine(form: Any, case: str) -> None:
    """Either form hands it on: taken (pure) or left first in the pipe (compiled)."""
    item: Any = _msg(source=5) if case == "unnamed source" else ("not a Message", 5)
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([item], 1)
    path, _, slow = _path(form, pipe)
    assert await path.recv() == ("slow", item)
    assert slow.calls == [(None, None)] and pipe.taken == 1


def _whole(source: Any = "a") -> WholeStream:
    """A short stream as the arrivals put it in a pipe (its owner is not asked here)."""
    return WholeStream(None, (1, 7), source, 5, 9, np.full(16, 3, dtype=np.uint8), 0, 16)  # type: ignore[arg-type]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("node_arrays", ["auto", "numpy"])
async def test_a_named_incoming_stream_in_the_pipe_is_taken_and_returned(form: Any, node_arrays: str) -> None:
    pipe: Pipe[Any] = Pipe(8)
    stream, after = _whole(), _msg(b"after")
    pipe.put_many([stream, after], 1)
    path, _, slow = _path(form, pipe, _Node(node_arrays))
    got = await path.recv()
    assert got is stream and got.arrays == node_arrays   # (what its read() gives, as the GP's coroutine sets it)
    assert not slow.calls and pipe.taken == 1 and len(pipe) == 1
    assert await path.recv() is after


@pytest.mark.parametrize("form", FORMS)
async def test_an_incoming_stream_from_an_unnamed_sender_goes_to_the_gps_coroutine(form: Any) -> None:
    stream = _whole(source=5)
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([stream], 1)
    path, _, slow = _path(form, pipe)
    assert await path.recv() == ("slow", stream)
    assert slow.calls == [(None, None)] and pipe.taken == 1


@pytest.mark.parametrize("form", FORMS)
async def test_an_array_that_arrives_as_it_came_is_returned(form: Any) -> None:
    arr = np.arange(3, dtype=np.int32)
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([_msg(arr)], 1)
    path, _, slow = _path(form, pipe)
    assert (await path.recv()).data is arr and not slow.calls


@pytest.mark.parametrize("form", FORMS)
async def test_an_array_to_convert_is_converted_and_taken_by_the_path(form: Any) -> None:
    arr = np.arange(3, dtype=np.int32)
    pipe: Pipe[Any] = Pipe(8)
    sent = _msg(arr, pid=7)
    pipe.put_many([sent], 1)
    path, _, slow = _path(form, pipe, _Node("numpy"))
    got = await path.recv()
    assert type(got) is Message and got[:3] == sent[:3] and got.source_pid == 7
    assert got.data is arr and not slow.calls and pipe.taken == 1 and not len(pipe)


@pytest.mark.parametrize("form", FORMS)
async def test_arrive_rebuilds_the_message_around_the_converted_array(form: Any) -> None:
    path, _, _ = _path(form, Pipe(8))
    sent = Message(("a", Kind.COMMAND, 9, np.arange(2, dtype=np.int8), 4))
    got = path.arrive(sent, "numpy")
    assert type(got) is Message and got is not sent
    assert got[:3] == sent[:3] and got.data is sent.data and got.source_pid == 4


@pytest.mark.parametrize("form", FORMS)
async def test_two_senders_items_come_in_turns(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([_msg(b"a1", "a", 5), _msg(b"a2", "a", 5)], 1)
    pipe.put_many([_msg(b"b1", "b", 6)], 1)
    path, _, _ = _path(form, pipe)
    got = []
    for _ in range(3):
        item = await path.recv()
        got.append((item[1] if type(item) is tuple else item).data)
    assert got == [b"a1", b"b1", b"a2"]


@pytest.mark.parametrize("form", FORMS)
async def test_a_receive_never_run_takes_nothing(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([_msg()], 1)
    path, _, _ = _path(form, pipe)
    path.recv().close()
    assert len(pipe) == 1 and pipe.taken == 0


# What recv returns for an item in the pipe is a coroutine in both forms (the
# compiled one an awaitable of its own, its item returned without a
# StopIteration where it is awaited): the coroutine protocol must hold for it.

@pytest.mark.parametrize("form", FORMS)
async def test_a_receive_run_by_a_task_returns_the_message_whole(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    sent = _msg(b"t")
    pipe.put_many([sent], 1)
    path, _, _ = _path(form, pipe)
    assert await asyncio.create_task(path.recv()) is sent   # (a tuple: returned whole, not unpacked)


@pytest.mark.parametrize("form", FORMS)
async def test_a_receive_stepped_by_hand_returns_its_item_once(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    sent = _msg(b"s")
    pipe.put_many([sent], 1)
    path, _, _ = _path(form, pipe)
    coro = path.recv()
    with pytest.raises(StopIteration) as stop:
        coro.send(None)
    assert stop.value.value is sent and pipe.taken == 1
    with pytest.raises(RuntimeError, match="cannot reuse"):
        coro.send(None)


@pytest.mark.parametrize("form", FORMS)
async def test_a_receive_thrown_into_before_it_runs_takes_nothing(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([_msg()], 1)
    path, _, slow = _path(form, pipe)
    coro = path.recv()
    with pytest.raises(KeyError):
        coro.throw(KeyError("k"))
    assert len(pipe) == 1 and pipe.taken == 0 and not slow.calls


@pytest.mark.parametrize("form", FORMS)
async def test_a_receive_that_goes_to_the_gps_coroutine_passes_steps_and_throws_on(form: Any) -> None:
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([_msg()], 1)
    rx = _Rx()
    seen: list[Any] = []

    async def waits(timeout: float | None, arrays: str | None, taken: Any) -> Any:
        try:
            await asyncio.sleep(0)
        except KeyError as exc:
            seen.append(exc)
            raise
        return "late"

    path = form.RecvPath(rx, _Node(), waits, arrays.arrival)
    path.pipe = pipe
    coro = path.recv()
    rx.held = object()              # held by an earlier receive after the call: the GP's coroutine
    assert coro.send(None) is None  # (its sleep's bare yield)
    with pytest.raises(KeyError):
        coro.throw(KeyError("k"))
    assert len(seen) == 1 and len(pipe) == 1
    coro2 = path.recv()
    assert coro2.send(None) is None
    with pytest.raises(StopIteration) as stop:
        coro2.send(None)
    assert stop.value.value == "late" and len(pipe) == 1


@pytest.mark.parametrize("form", FORMS)
def test_a_receive_never_awaited_warns_as_a_coroutine_does(form: Any) -> None:
    import gc
    import warnings
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([_msg()], 1)
    path, _, _ = _path(form, pipe)
    coro = path.recv()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del coro
        gc.collect()
    assert [str(w.message) for w in caught] == ["coroutine 'RecvPath.recv' was never awaited"]
    assert pipe.taken == 0


@pytest.mark.timeout(30)
async def test_a_gps_recv_is_its_paths_coroutine_and_behaves_as_before() -> None:
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            assert b.recv == (b._in.recv if RECV_COMPILED else b._recv)   # (the pure form: the GP's coroutine)
            waiting = asyncio.create_task(b.recv(timeout=5.0))   # a task takes it: a coroutine
            await a.send("b", b"first")
            assert (await waiting).data == b"first"
            await a.send("b", b"hello", com=4, timeout=5.0)
            while not len(b.pipe):
                await asyncio.sleep(0)
            msg = await b.recv(timeout=5.0)                      # taken by the path
            assert (msg.source, msg.com, msg.data) == ("a", 4, b"hello")
            with pytest.raises(ValueError):
                await b.recv(arrays="bogus")
            await b.free()
            with pytest.raises(ClosedResourceError):
                await b.recv()
