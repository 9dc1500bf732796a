"""A GP's short-stream send path (``SendPath.call_stream`` / ``SendPath.stream``
in :mod:`aiopdbp.runtime.sendpath` and its compiled twin): every test runs
against both forms, with a stand-in router, target and stream table, then
through real GPs."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import numpy as np
import pytest

from aiopdbp.errors import UnknownProcessError
from aiopdbp.runtime import sendpath as pure_path
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.streams.receiver import EAGER_LIMIT
from aiopdbp.tensormem.view import plain_snapshot
from aiopdbp.wire.message import CREDIT_OVERHEAD

try:
    from aiopdbp.runtime import csendpath as compiled_path  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_path = None

FORMS = [pytest.param(pure_path, id="pure"),
         pytest.param(compiled_path, id="compiled",
                      marks=pytest.mark.skipif(compiled_path is None, reason="the compiled send path is not built"))]

pytestmark = pytest.mark.timeout(10)

PID, DEST_PID = 5, 9


class _Target:
    """A link to another host: takes what ``room`` allows, records every offer."""

    def __init__(self, room: int = 1 << 30, remote: bool = True) -> None:
        self.room = room
        self.remote = remote
        self.offers: list[tuple[int, int, Any]] = []

    def offer(self, pid: int, cost: int, record: Any) -> bool:
        if cost > self.room:
            return False
        self.room -= cost
        self.offers.append((pid, cost, record))
        return True


class _Router:
    """The router's parts the path reads; ``resolve`` records its calls."""

    def __init__(self, target: _Target) -> None:
        self.pids = {"b": DEST_PID}
        self.targets: dict[int, Any] = {DEST_PID: target}
        self._queued: deque[Any] = deque()
        self.offered = 0
        self.resolved: list[tuple[str, float | None]] = []

    def try_send(self, dest: str, fields: tuple[Any, ...], cost: int) -> bool:
        raise AssertionError("a stream is not a message")

    async def resolve(self, name: str, timeout: float | None) -> int:
        self.resolved.append((name, timeout))
        raise UnknownProcessError(f"no GP named {name!r}")


class _Streams:
    """The stream table's parts the path calls: records made, a no-wait put
    as the manager's (nothing queued, the target's offer), a recorded wait."""

    def __init__(self, router: _Router, wait_answer: bool | BaseException = True) -> None:
        self.router = router
        self.sno = 0
        self.waited: list[tuple[Any, ...]] = []
        self.wait_answer = wait_answer

    def whole_record(self, sender: int, com: int, eager: Any) -> tuple[Any, ...]:
        self.sno += 1
        return ("record", sender, com, eager, self.sno)

    def send_whole_nowait(self, tgt: Any, pid: int, record: Any, cost: int) -> bool:
        return not self.router._queued and bool(tgt.offer(pid, cost, record))

    async def send_whole(self, sender: int, tgt: Any, pid: int, record: Any, cost: int) -> bool:
        self.waited.append((sender, tgt, pid, record, cost))
        if isinstance(self.wait_answer, BaseException):
            raise self.wait_answer
        return self.wait_answer


class _WholeStream:
    """The GP's own ``send_stream``: records its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def __call__(self, dest: Any, data: Any, **kw: Any) -> Any:
        self.calls.append((dest, data, kw))

        async def sent() -> int:
            return -1
        return sent()


async def _no_slow(*args: Any) -> None:
    raise AssertionError("a stream never takes the message path's slow send")


def _path(form: Any, target: _Target | None = None,
          wait_answer: bool | BaseException = True) -> tuple[Any, _Router, _Streams, _WholeStream]:
    router = _Router(target if target is not None else _Target())
    path = form.SendPath("a", PID, router, _no_slow, owned_min=1 << 15, snapshot=plain_snapshot, max_ndim=32)
    streams, whole = _Streams(router, wait_answer), _WholeStream()
    path.streams, path.whole_stream = streams, whole
    return path, router, streams, whole


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("data", [np.arange(1024, dtype=np.float32), b"x" * 4096], ids=["array", "bytes"])
async def test_a_short_buffer_to_another_host_is_one_record_in_one_offer(form: Any, data: Any) -> None:
    tgt = _Target()
    path, router, streams, whole = _path(form, tgt)
    assert await path.call_stream("b", data, com=7, segment_size=4096) == 4096
    (pid, cost, record), = tgt.offers
    assert (pid, cost, record[:3], record[4]) == (DEST_PID, 4096 + CREDIT_OVERHEAD, ("record", PID, 7), 1)
    if type(data) is bytes:   # (as short_segment gives it: a memoryview of its bytes)
        assert type(record[3]) is memoryview and record[3].obj is data
    else:
        assert record[3] is data
    assert not whole.calls and not streams.waited


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", ["local GP", "unknown name", "longer than a segment", "longer than eager",
                                  "empty", "0-d array", "not contiguous", "object dtype", "bad com",
                                  "int timeout", "segment_size not an int", "freed", "no table"])
async def test_everything_else_is_the_gps_own_send_stream_and_sends_nothing(form: Any, case: str) -> None:
    tgt = _Target(remote=case != "local GP")
    path, _, streams, whole = _path(form, tgt)
    dest: Any = "nobody" if case == "unknown name" else "b"
    data: Any = np.ones(64, dtype=np.uint8)
    kw: dict[str, Any] = {"segment_size": None, "com": 0, "timeout": None, "copy": True}
    if case == "longer than a segment":
        kw["segment_size"] = 32
    elif case == "longer than eager":
        data = np.ones(EAGER_LIMIT + 1, dtype=np.uint8)
    elif case == "empty":
        data = b""
    elif case == "0-d array":
        data = np.array(3)
    elif case == "not contiguous":
        data = np.ones(64, dtype=np.uint8)[::2]
    elif case == "object dtype":
        data = np.array([1, "x"], dtype=object)
    elif case == "bad com":
        kw["com"] = -1
    elif case == "int timeout":
        kw["timeout"] = 5
    elif case == "segment_size not an int":
        kw["segment_size"] = 4.0
    elif case == "freed":
        path.freed = True
    elif case == "no table":
        path.streams = None
    assert await path.call_stream(dest, data, **kw) == -1
    assert whole.calls == [(dest, data, kw)]
    assert not tgt.offers and not streams.waited and streams.sno == 0


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", ["bytearray", "list", "stream="])
async def test_call_hands_other_data_to_the_gps_own_send_stream_at_the_call(form: Any, case: str) -> None:
    path, _, _, whole = _path(form)
    data: Any = {"bytearray": bytearray(b"x"), "list": [b"x"], "stream=": b"x"}[case]
    stream = object() if case == "stream=" else None
    coro = path.call_stream("b", data, segment_size=8, com=1, timeout=2.0, copy=False, stream=stream)
    assert whole.calls == [("b", data, {"segment_size": 8, "com": 1, "timeout": 2.0, "copy": False,
                                        "stream": stream})]
    assert await coro == -1


@pytest.mark.parametrize("form", FORMS)
async def test_no_credit_and_no_timeout_waits_as_send_stream_does(form: Any) -> None:
    tgt = _Target(room=0)
    path, _, streams, whole = _path(form, tgt)
    data = b"y" * 100
    assert await path.call_stream("b", data) == 100
    (sender, got_tgt, pid, record, cost), = streams.waited
    assert (sender, got_tgt, pid, record[:3], cost) == (PID, tgt, DEST_PID, ("record", PID, 0), 100 + CREDIT_OVERHEAD)
    assert not whole.calls


@pytest.mark.parametrize("form", FORMS)
async def test_something_queued_ahead_makes_it_wait_behind(form: Any) -> None:
    tgt = _Target()
    path, router, streams, _ = _path(form, tgt)
    router._queued.append(object())
    assert await path.call_stream("b", b"z") == 1
    assert not tgt.offers and len(streams.waited) == 1


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", ["timeout", "no no-wait path"])
async def test_a_wait_it_does_not_do_is_the_gps_own(form: Any, case: str) -> None:
    path, _, streams, whole = _path(form, _Target(room=0), wait_answer=case != "no no-wait path")
    timeout = 3.0 if case == "timeout" else None
    assert await path.call_stream("b", b"w", timeout=timeout) == -1
    assert whole.calls == [("b", b"w", {"segment_size": None, "com": 0, "timeout": timeout, "copy": True})]
    assert len(streams.waited) == (0 if case == "timeout" else 1)


@pytest.mark.parametrize("form", FORMS)
async def test_a_receiver_gone_while_it_waits_is_named_by_the_name_rule(form: Any) -> None:
    path, router, _, _ = _path(form, _Target(room=0), wait_answer=UnknownProcessError("pid 9"))
    with pytest.raises(UnknownProcessError, match="nobody|'b'"):
        await path.call_stream("b", b"w")
    assert router.resolved == [("b", 0)]


@pytest.mark.parametrize("form", FORMS)
async def test_nothing_is_sent_until_awaited(form: Any) -> None:
    tgt = _Target()
    path, _, streams, _ = _path(form, tgt)
    coro = path.call_stream("b", b"x")
    assert asyncio.iscoroutine(coro) and not tgt.offers
    coro.close()
    assert not tgt.offers and streams.sno == 0


@pytest.mark.timeout(30)
async def test_a_gps_send_stream_is_its_paths_call_in_the_compiled_form() -> None:
    from aiopdbp.runtime.process import GP
    from aiopdbp.runtime.sendcore import COMPILED
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a:
            assert a.send_stream == (a._path.call_stream if COMPILED else GP.send_stream.__get__(a))
            assert a._path.whole_stream == GP.send_stream.__get__(a)
            assert a._path.streams is nodes[0].streams


@pytest.mark.timeout(30)
async def test_short_streams_between_hosts_arrive_whole_and_count_as_routed() -> None:
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            await a.send("b", b"first")          # (the name is known: the streams below take the path)
            await b.recv(timeout=5.0)
            before = nodes[0].stats().routed
            arr = np.arange(512, dtype=np.int64).reshape(64, 8)
            assert await a.send_stream("b", arr, com=3) == arr.nbytes
            assert await a.send_stream("b", b"bytes", timeout=5.0) == 5
            got = await b.recv(timeout=5.0)
            assert (got.source, got.com) == ("a", 3)
            out = await got.read()
            assert out.dtype == arr.dtype and np.array_equal(out, arr)
            assert await (await b.recv(timeout=5.0)).read() == b"bytes"
            assert nodes[0].stats().routed == before + 2


@pytest.mark.timeout(30)
async def test_a_gps_short_stream_cancelled_before_it_runs_sends_nothing() -> None:
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            await a.send("b", b"first")
            await b.recv(timeout=5.0)
            task = asyncio.create_task(a.send_stream("b", b"never"))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await a.send_stream("b", b"after", timeout=5.0)
            assert await (await b.recv(timeout=5.0)).read() == b"after"
