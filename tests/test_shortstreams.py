"""Short streams: one buffer carried whole by its OPEN (one record, no
segments).  The receiver's :class:`~aiopdbp.streams.receiver.WholeStream`
(made and read in one call each) against the general
:class:`~aiopdbp.streams.receiver.IncomingStream` of the same record; the
sender's record routed at once after a wait for credit."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aiopdbp
from aiopdbp import BrokenResourceError
from aiopdbp.streams.protocol import ReceiverProtocol
from aiopdbp.streams.receiver import IncomingStream, StreamMeta, WholeStream, whole_meta

pytestmark = pytest.mark.timeout(60)


class _Owner:
    """A stream's table (``StreamOwner``), recording what the stream tells it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def incoming_closed(self, stream: IncomingStream, error: str | None, notify: bool) -> None:
        self.calls.append(("closed", error, notify))

    def landing_array(self, nbytes: int) -> None:
        return None

    def give_credit(self, stream: IncomingStream, segments: int) -> None:
        self.calls.append(("credit", segments))


def _now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that must not suspend (a stream that arrived whole never waits)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("it suspended")


def _seen(v: Any) -> Any:
    """What a reader can observe of a value, comparable across objects."""
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes(), v.flags.writeable)
    if isinstance(v, memoryview):
        return ("view", v.format, v.nbytes, bytes(v), v.readonly)
    if isinstance(v, StreamMeta):
        return ("meta", v.kind, v.nbytes, v.dtype, v.shape, v.com, v.window, v.borrowed, v.extra)
    if isinstance(v, list):
        return [_seen(x) for x in v]
    return v


async def _segments(s: IncomingStream) -> list[Any]:
    return [seg async for seg in s]


_OPS = {
    "read": lambda s: _now(s.read()),
    "read numpy": lambda s: _now(s.read(arrays="numpy")),
    "read bad kind": lambda s: _now(s.read(arrays="jax")),
    "read out": lambda s: _now(s.read(out=np.zeros(64, np.uint8))),
    "iterate": lambda s: _now(_segments(s)),
    "aclose": lambda s: _now(s.aclose()),
    "meta": lambda s: s.meta,
    "state": lambda s: (s.state, s.finished, s.com, s.source, s.key, s.sno, s.pipe),
    "repr": repr,
}


def _outcome(op: str, s: IncomingStream) -> Any:
    try:
        return ("value", _seen(_OPS[op](s)))
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


def _data(which: int) -> Any:
    if which == 0:
        return np.arange(12, dtype=">i4").reshape(3, 4)
    if which == 1:
        return np.arange(5, dtype=np.uint8)
    return bytearray(b"a segment")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2), st.lists(st.sampled_from(sorted(_OPS)), max_size=5))
def test_whole_stream_answers_as_the_incoming_stream_of_the_same_record(which: int, ops: list[str]) -> None:
    # The one-call receiver of a short record against the general one the
    # table made before (IncomingStream(whole=...)): same answers, same
    # calls to the table, for any sequence of what a reader may do.
    old_owner, new_owner = _Owner(), _Owner()
    data = _data(which)
    old = IncomingStream(old_owner, (1, 7), "src", None, 16, 5, 99, whole_meta(data, 3, 16), whole=data, owned=True)
    data = _data(which)
    new = WholeStream(new_owner, (1, 7), "src", 5, 99, data, 3, 16)
    for op in ops:
        assert _outcome(op, new) == _outcome(op, old), op
    assert new_owner.calls == old_owner.calls


def test_whole_stream_read_makes_no_meta_protocol_or_queue() -> None:
    # what a short stream costs its receiver: the stream object, nothing more
    # until something asks (then the meta, as the general stream holds it)
    arr = np.arange(4, dtype=np.uint8)
    s = WholeStream(_Owner(), (1, 7), "src", 5, 99, arr, 3, 16)
    assert _now(s.read()) is arr
    assert not [v for v in vars(s).values() if isinstance(v, (StreamMeta, ReceiverProtocol, collections.deque))]
    assert (s.meta.kind, s.meta.nbytes, s.meta.com, s.meta.window) == ("ndarray", 4, 3, 16)


@pytest.mark.parametrize("data, window", [(np.zeros(0, np.uint8), 16), (np.zeros((), np.uint8), 16),
                                          (bytearray(), 16), ("text", 16), (bytearray(b"x"), 0)])
def test_whole_stream_of_a_malformed_record_is_protocol_error(data: Any, window: Any) -> None:
    with pytest.raises(aiopdbp.ProtocolError):
        WholeStream(_Owner(), (1, 7), "src", 5, 99, data, 3, window)


async def test_short_stream_record_from_another_host_is_a_whole_stream(pdbp_node: aiopdbp.Node) -> None:
    st = pdbp_node.streams.open_whole(1, 99, 5, "src", 3, 7, 16, np.arange(4, dtype=np.uint8))
    assert type(st) is WholeStream and st.finished and st.com == 3


class _Link:
    """A remote host's link with credit to spare, recording what is routed to it."""

    remote = True
    host = 1

    def __init__(self, put: bool) -> None:
        self.put, self.items = put, []

    def reserve_nowait(self, pid: int, nbytes: int) -> None:
        pass

    def put_to(self, pid: int, item: Any) -> bool:
        self.items.append(item)
        return self.put


def test_route_now_routes_when_nothing_is_queued_else_does_nothing() -> None:
    from aiopdbp.routing.manager import PipeManager

    pm, link = PipeManager(), _Link(True)
    assert pm.route_now(link, 0, "record") is True and link.items == ["record"]
    pm.public.force_put((link, 0, "msg"))   # queued: the manager has not run yet
    assert pm.route_now(link, 0, "later") is None and link.items == ["record"]


def _table(link_put: bool) -> tuple[Any, _Link]:
    from aiopdbp.hosts.tables import Tables
    from aiopdbp.routing.arrivals import Arrivals
    from aiopdbp.routing.manager import PipeManager
    from aiopdbp.routing.pipes import PipePool
    from aiopdbp.routing.router import Router
    from aiopdbp.streams.table import StreamTable

    tables, pps, pm = Tables(), PipePool(4, 4), PipeManager()
    router = Router(tables, pps, 0, name_timeout=1.0, submit=pm.submit, offer=pm.offer, queued=pm.queued)
    table = StreamTable(0, 8, tables, pps, PipePool(1 << 30, 4, first_id=1 << 20), router,
                        Arrivals(tables, router.targets, 0), submit=pm.submit, watch=pm.watch,
                        offer=pm.offer, route=pm.put, route_now=pm.route_now)
    return table, _Link(link_put)


async def test_short_stream_that_waited_for_credit_is_routed_at_once_when_nothing_is_queued() -> None:
    table, link = _table(True)
    assert await asyncio.wait_for(table.send_whole(5, cast(Any, link), 9, cast(Any, "record"), 910), 5)
    assert link.items == ["record"]


async def test_short_stream_that_waited_for_credit_hears_its_failed_link() -> None:
    table, link = _table(False)
    with pytest.raises(BrokenResourceError, match="host 1 is gone"):
        await asyncio.wait_for(table.send_whole(5, cast(Any, link), 9, cast(Any, "record"), 910), 5)
