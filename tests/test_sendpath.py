"""A GP's send path (:mod:`aiopdbp.runtime.sendpath`) and its compiled twin
(``aiopdbp.runtime.csendpath``): every test runs against both forms, with a
stand-in router and target, then once through a real GP."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import numpy as np
import pytest

from aiopdbp.errors import ClosedResourceError
from aiopdbp.hosts.owned import OwnedDone, fail_owned
from aiopdbp.runtime import sendpath as pure_path
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.tensormem.view import plain_snapshot
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import CREDIT_OVERHEAD

try:
    from aiopdbp.runtime import csendpath as compiled_path  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_path = None

FORMS = [pytest.param(pure_path, id="pure"),
         pytest.param(compiled_path, id="compiled",
                      marks=pytest.mark.skipif(compiled_path is None, reason="the compiled send path is not built"))]

PID, DEST_PID = 5, 9


class _Target:
    """Takes what ``room`` allows; records every offer."""

    def __init__(self, room: int = 1 << 30) -> None:
        self.room = room
        self.offers: list[tuple[int, int, tuple[Any, ...]]] = []

    def offer(self, pid: int, cost: int, fields: tuple[Any, ...]) -> bool:
        if cost > self.room:
            return False
        self.room -= cost
        self.offers.append((pid, cost, fields))
        return True


class _Router:
    """The router's parts the send path reads, and a recording ``send_waiting``."""

    def __init__(self, target: _Target) -> None:
        self.pids = {"b": DEST_PID}
        self.targets: dict[int, Any] = {DEST_PID: target}
        self._queued: deque[Any] = deque()
        self.offered = 0
        self.waited: list[tuple[str, tuple[Any, ...], int, float | None]] = []

    def try_send(self, dest: str, fields: tuple[Any, ...], cost: int) -> bool:
        pid = self.pids.get(dest)
        if pid is None:
            return False
        tgt = self.targets.get(pid)
        if tgt is None or self._queued or not tgt.offer(pid, cost, fields):
            return False
        self.offered += 1
        return True

    async def send_waiting(self, dest: str, fields: tuple[Any, ...], cost: int, timeout: float | None) -> None:
        self.waited.append((dest, fields, cost, timeout))


class _Slow:
    """The GP's own coroutine: records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def __call__(self, dest: Any, data: Any, com: int, kind: Kind, timeout: float | None,
                       copy: bool) -> None:
        self.calls.append((dest, data, com, kind, timeout, copy))


def _path(form: Any, router: _Router, slow: _Slow, owned_min: int = 1 << 15) -> Any:
    return form.SendPath("a", PID, router, slow, owned_min=owned_min, snapshot=plain_snapshot, max_ndim=32)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_bytes_to_a_name_go_to_its_target_in_one_offer(form: Any) -> None:
    tgt = _Target()
    router, slow = _Router(tgt), _Slow()
    await _path(form, router, slow).send("b", b"x" * 64, 3, Kind.COMMAND, 300.0, True)
    assert tgt.offers == [(DEST_PID, 64 + CREDIT_OVERHEAD, ("a", Kind.COMMAND, 3, b"x" * 64, PID))]
    assert router.offered == 1 and not router.waited and not slow.calls


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_small_plain_array_goes_as_its_snapshot(form: Any) -> None:
    tgt = _Target()
    arr = np.arange(4, dtype=np.float32)
    await _path(form, _Router(tgt), _Slow()).send("b", arr, 0, Kind.SHORT, None, True)
    (pid, cost, fields), = tgt.offers
    assert cost == arr.nbytes + CREDIT_OVERHEAD
    assert fields[3] is not arr and np.array_equal(fields[3], arr)   # a writable array is copied
    arr[0] = 99
    assert fields[3][0] == 0


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", ["multicast", "str payload", "large array", "bad com", "bad kind",
                                  "int timeout", "negative timeout"])
async def test_everything_else_is_the_gps_own_coroutine(form: Any, case: str) -> None:
    dest: Any = "b"
    data: Any = b"x"
    com, kind, timeout = 0, Kind.SHORT, None
    if case == "multicast":
        dest = ["b", "c"]
    elif case == "str payload":
        data = "text"
    elif case == "large array":
        data = np.zeros(1 << 15, dtype=np.uint8)
    elif case == "bad com":
        com = -1
    elif case == "bad kind":
        kind = Kind.STREAM
    elif case == "int timeout":
        timeout = 5
    else:
        timeout = -1.0
    tgt, slow = _Target(), _Slow()
    await _path(form, _Router(tgt), slow).send(dest, data, com, kind, timeout, False)
    assert slow.calls == [(dest, data, com, kind, timeout, False)] and not tgt.offers


class _Link:
    """A remote GP's target whose ``owned`` takes a large array (``takes``) or not."""

    def __init__(self, takes: bool = True, remote: bool = True) -> None:
        self.takes = takes
        self.remote = remote
        self.owneds: list[tuple[int, int, tuple[Any, ...]]] = []
        self.done: OwnedDone | None = None

    def owned(self, pid: int, nbytes: int, fields: tuple[Any, ...]) -> OwnedDone | None:
        self.owneds.append((pid, nbytes, fields))
        if self.takes:
            self.done = OwnedDone()
        return self.done


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_large_array_to_a_link_that_takes_it_waits_for_that_links_send(form: Any) -> None:
    link, slow = _Link(), _Slow()
    router = _Router(_Target())
    router.targets[DEST_PID] = link
    arr = np.zeros(1 << 15, dtype=np.uint8)
    task = asyncio.ensure_future(_path(form, router, slow).send("b", arr, 7, Kind.SHORT, None, True))
    await asyncio.sleep(0)
    (pid, cost, fields), = link.owneds
    assert (pid, cost) == (DEST_PID, arr.nbytes + CREDIT_OVERHEAD) and fields[3] is arr   # its own buffer
    assert fields[:3] + fields[4:] == ("a", Kind.SHORT, 7, PID) and not slow.calls
    assert link.done is not None and not task.done()   # MPI still reads the buffer
    link.done.hold()
    task.cancel()                                       # a held send's cancel waits for it
    await asyncio.sleep(0)
    assert not task.done()
    link.done.set_result(None)
    await task                 # sent: the task, this send alone, returns (OwnedDone's rule)
    assert not task.cancelled() and not slow.calls


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", ["cancelled before posted", "cancelled, then the link failed", "the link failed"])
async def test_an_owned_send_the_link_took_ends_as_its_wait_says(form: Any, case: str) -> None:
    link = _Link()
    router = _Router(_Target())
    router.targets[DEST_PID] = link
    task = asyncio.ensure_future(_path(form, router, _Slow()).send("b", np.zeros(1 << 15, np.uint8), 0, Kind.SHORT,
                                                                    None, True))
    await asyncio.sleep(0)
    done = link.done
    assert done is not None
    if case != "cancelled before posted":
        done.hold()
    if case != "the link failed":
        task.cancel()
        await asyncio.sleep(0)
    if case != "cancelled before posted":
        fail_owned(done, ConnectionError("host 1 lost"))
    if case == "the link failed":
        with pytest.raises(ConnectionError):
            await task
    else:   # not sent: the cancel stands (before posted, the link drops the message)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled() and done.done()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", ["link declines", "frozen array", "strided array", "queued ahead", "local target",
                                  "unknown name"])
async def test_a_large_array_the_link_does_not_take_now_is_the_gps_own_coroutine(form: Any, case: str) -> None:
    link, slow = _Link(takes=case != "link declines", remote=case != "local target"), _Slow()
    router = _Router(_Target())
    router.targets[DEST_PID] = link
    arr = np.zeros(1 << 15, dtype=np.uint8)
    dest = "nobody" if case == "unknown name" else "b"
    if case == "frozen array":     # (immutable bytes: not ownable, the GP's coroutine shares it)
        arr = np.frombuffer(bytes(1 << 15), dtype=np.uint8)
    if case == "strided array":    # (not one MPI message)
        arr = np.zeros(1 << 16, dtype=np.uint8)[::2]
    if case == "queued ahead":
        router._queued.append(object())
    await _path(form, router, slow).send(dest, arr, 0, Kind.SHORT, None, True)
    assert slow.calls == [(dest, arr, 0, Kind.SHORT, None, True)]
    assert len(link.owneds) == (case == "link declines")   # (the GP's coroutine asks it again)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_target_without_room_makes_the_send_wait_at_the_router(form: Any) -> None:
    router = _Router(_Target(room=0))
    path = _path(form, router, _Slow())
    path.burst = 1000
    await path.send("b", b"y", 0, Kind.SHORT, 2.0, True)
    assert router.waited == [("b", ("a", Kind.SHORT, 0, b"y", PID), 1 + CREDIT_OVERHEAD, 2.0)]
    assert path.burst == pure_path.BURST_BYTES   # the run of sends that never suspended is over


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_an_unknown_name_waits_at_the_router(form: Any) -> None:
    router = _Router(_Target())
    await _path(form, router, _Slow()).send("nobody", b"y", 0, Kind.SHORT, None, True)
    assert [w[0] for w in router.waited] == ["nobody"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_run_of_sends_yields_once_its_burst_is_spent(form: Any) -> None:
    tgt = _Target()
    path = _path(form, _Router(tgt), _Slow())
    cost = 100 + CREDIT_OVERHEAD
    quiet = (pure_path.BURST_BYTES - 1) // cost
    ran = 0

    async def other() -> None:
        nonlocal ran
        ran += 1

    task = asyncio.ensure_future(other())
    for _ in range(quiet):
        await path.send("b", b"z" * 100, 0, Kind.SHORT, None, True)
    assert ran == 0                       # no send suspended yet
    await path.send("b", b"z" * 100, 0, Kind.SHORT, None, True)
    assert ran == 1 and len(tgt.offers) == quiet + 1
    await task


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_freed_gp_sends_nothing(form: Any) -> None:
    tgt, slow = _Target(), _Slow()
    path = _path(form, _Router(tgt), slow)
    path.freed = True
    await path.send("b", b"x", 0, Kind.SHORT, None, True)
    assert slow.calls and not tgt.offers   # the GP's coroutine raises ClosedResourceError


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_gp_freed_while_its_send_yields_raises(form: Any) -> None:
    tgt = _Target()
    path = _path(form, _Router(tgt), _Slow())
    path.burst = 1
    coro = path.send("b", b"x", 0, Kind.SHORT, None, True)
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)       # the send yields (its burst is spent) ...
    path.freed = True            # ... and its GP is freed meanwhile
    with pytest.raises(ClosedResourceError):
        await task
    assert not tgt.offers


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_the_send_is_a_coroutine_a_task_can_run(form: Any) -> None:
    tgt = _Target()
    coro = _path(form, _Router(tgt), _Slow()).send("b", b"x", 0, Kind.SHORT, None, True)
    assert asyncio.iscoroutine(coro) and not tgt.offers   # nothing is sent before it runs
    await asyncio.create_task(coro)
    assert len(tgt.offers) == 1


@pytest.mark.timeout(20)
async def test_a_gp_sends_through_its_path() -> None:
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            await a.send("b", b"first")          # (a first message waits for the name)
            await b.recv(timeout=5.0)
            routed = nodes[0].router.offered
            await a.send("b", b"hello", com=4, timeout=5.0)
            msg = await b.recv(timeout=5.0)
            assert (msg.source, msg.com, msg.data) == ("a", 4, b"hello")
            assert nodes[0].router.offered == routed + 1
            await a.free()
            with pytest.raises(ClosedResourceError):
                await a.send("b", b"late")


class _Whole:
    """The GP's own ``send``: records its arguments, returns a coroutine."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def __call__(self, dest: Any, data: Any, **kw: Any) -> Any:
        self.calls.append((dest, data, kw))
        return asyncio.sleep(0)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("data", [b"x" * 64, np.arange(3, dtype=np.int16), None])
async def test_call_takes_host_data_to_the_paths_send(form: Any, data: Any) -> None:
    tgt, slow, whole = _Target(), _Slow(), _Whole()
    path = _path(form, _Router(tgt), slow)
    path.whole = whole
    await path.call("b", data, com=3, kind=Kind.COMMAND, timeout=300.0)
    assert not whole.calls
    if data is None:   # (not a fast payload: the sending side's coroutine, as from GP.send)
        assert slow.calls == [("b", None, 3, Kind.COMMAND, 300.0, True)] and not tgt.offers
    else:
        (pid, cost, fields), = tgt.offers
        assert (pid, fields[:3], fields[4]) == (DEST_PID, ("a", Kind.COMMAND, 3), PID)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", ["bytearray", "str", "stream"])
async def test_call_hands_anything_else_to_the_gps_own_send(form: Any, case: str) -> None:
    tgt, slow, whole = _Target(), _Slow(), _Whole()
    path = _path(form, _Router(tgt), slow)
    path.whole = whole
    data: Any = {"bytearray": bytearray(b"x"), "str": "text", "stream": b"x"}[case]
    stream = object() if case == "stream" else None
    await path.call("b", data, com=1, timeout=2.0, copy=False, stream=stream)
    assert whole.calls == [("b", data, {"com": 1, "kind": Kind.SHORT, "timeout": 2.0, "copy": False,
                                        "stream": stream})]
    assert not tgt.offers and not slow.calls


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_sends_nothing_until_awaited(form: Any) -> None:
    tgt = _Target()
    coro = _path(form, _Router(tgt), _Slow()).call("b", b"x")
    assert asyncio.iscoroutine(coro) and not tgt.offers
    coro.close()
    assert not tgt.offers


# What call returns is a coroutine in both forms (the compiled one an awaitable of
# its own that runs the path's coroutine when its first step cannot send): the
# coroutine protocol, step by step, must hold for it as for a native one.

@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_thrown_into_before_it_runs_raises_and_sends_nothing(form: Any) -> None:
    tgt = _Target()
    coro = _path(form, _Router(tgt), _Slow()).call("b", b"x")
    with pytest.raises(KeyError):
        coro.throw(KeyError("k"))
    with pytest.raises(RuntimeError, match="cannot reuse"):
        coro.send(None)
    assert not tgt.offers


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_takes_no_value_before_it_runs(form: Any) -> None:
    tgt = _Target()
    coro = _path(form, _Router(tgt), _Slow()).call("b", b"x")
    with pytest.raises(TypeError, match="non-None"):
        coro.send(1)
    assert not tgt.offers
    coro.close()                           # (still unstarted: closed, not awaited)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_done_in_one_step_returns_none_and_cannot_be_awaited_again(form: Any) -> None:
    tgt = _Target()
    coro = _path(form, _Router(tgt), _Slow()).call("b", b"x")
    with pytest.raises(StopIteration) as stop:
        coro.send(None)
    assert stop.value.value is None and len(tgt.offers) == 1
    with pytest.raises(RuntimeError, match="cannot reuse"):
        await coro


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_that_yields_passes_a_throw_on_to_the_send(form: Any) -> None:
    tgt = _Target()
    path = _path(form, _Router(tgt), _Slow())
    path.burst = 1                         # its burst is spent: the send yields first
    coro = path.call("b", b"x")
    assert coro.send(None) is None         # (asyncio.sleep(0)'s bare yield)
    with pytest.raises(KeyError):
        coro.throw(KeyError("k"))
    assert not tgt.offers and path.burst == pure_path.BURST_BYTES
    with pytest.raises(RuntimeError, match="cannot reuse"):
        coro.send(None)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_that_yields_then_closed_sends_nothing(form: Any) -> None:
    tgt = _Target()
    path = _path(form, _Router(tgt), _Slow())
    path.burst = 1
    coro = path.call("b", b"x")
    assert coro.send(None) is None
    coro.close()
    with pytest.raises(RuntimeError, match="cannot reuse"):
        coro.send(None)
    assert not tgt.offers


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_that_yields_resumes_and_sends(form: Any) -> None:
    tgt = _Target()
    path = _path(form, _Router(tgt), _Slow())
    path.burst = 1
    coro = path.call("b", b"x")
    assert coro.send(None) is None
    with pytest.raises(StopIteration):
        coro.send(None)
    assert len(tgt.offers) == 1


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_call_never_awaited_warns_as_a_coroutine_does(form: Any) -> None:
    import gc
    import warnings
    tgt = _Target()
    coro = _path(form, _Router(tgt), _Slow()).call("b", b"x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del coro
        gc.collect()
    assert [str(w.message) for w in caught] == ["coroutine 'SendPath.send' was never awaited"]
    assert not tgt.offers


@pytest.mark.timeout(20)
async def test_a_gps_send_is_its_paths_call_in_the_compiled_form() -> None:
    from aiopdbp.runtime.process import GP
    from aiopdbp.runtime.sendcore import COMPILED
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a:
            if COMPILED:
                assert a.send == a._path.call
            else:
                assert a.send == GP.send.__get__(a)
            assert a._path.whole == GP.send.__get__(a)


@pytest.mark.timeout(20)
async def test_a_task_running_a_gps_send_cancelled_before_it_runs_sends_nothing() -> None:
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            await a.send("b", b"first")          # (the name is known: the next send is the path's)
            await b.recv(timeout=5.0)
            task = asyncio.create_task(a.send("b", b"never"))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await a.send("b", b"after", timeout=5.0)
            assert (await b.recv(timeout=5.0)).data == b"after"


@pytest.mark.timeout(20)
async def test_a_gps_send_of_host_data_with_a_stream_raises_at_the_await() -> None:
    async with open_cluster(1) as nodes:
        async with nodes[0].process("a") as a:
            coro = a.send("a", b"x", stream=object())
            with pytest.raises(TypeError, match="stream= is for device arrays"):
                await coro


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_call_takes_what_the_tensor_view_gives_to_the_paths_send(form: Any) -> None:
    tgt, slow, whole = _Target(), _Slow(), _Whole()
    tensor, arr = object(), np.arange(3, dtype=np.int16)
    path = form.SendPath("a", PID, _Router(tgt), slow, owned_min=1 << 15, snapshot=plain_snapshot, max_ndim=32,
                         tensor_view=lambda obj: arr if obj is tensor else None)
    path.whole = whole
    await path.call("b", tensor, com=3, timeout=300.0)
    (pid, cost, fields), = tgt.offers
    assert fields[3].tolist() == [0, 1, 2] and fields[3] is not arr  # its snapshot, as an array's
    assert cost == arr.nbytes + CREDIT_OVERHEAD and not whole.calls and not slow.calls


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", ["left", "stream"])
async def test_call_hands_what_the_tensor_view_leaves_to_the_gps_own_send(form: Any, case: str) -> None:
    tgt, slow, whole = _Target(), _Slow(), _Whole()
    tensor, arr = object(), np.arange(3, dtype=np.int16)
    path = form.SendPath("a", PID, _Router(tgt), slow, owned_min=1 << 15, snapshot=plain_snapshot, max_ndim=32,
                         tensor_view=lambda obj: arr if obj is tensor and case == "stream" else None)
    path.whole = whole
    stream = object() if case == "stream" else None
    await path.call("b", tensor, com=1, stream=stream)
    assert whole.calls == [("b", tensor, {"com": 1, "kind": Kind.SHORT, "timeout": None, "copy": True,
                                          "stream": stream})]
    assert not tgt.offers and not slow.calls
