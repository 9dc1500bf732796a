"""The link's sender (:mod:`aiopdbp.hosts.sender`) and its compiled twin
(``aiopdbp.hosts.csender``): every test runs against both forms, and a
property test holds them to the same MPI messages for any sequence of items."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aiopdbp.errors import BrokenResourceError
from aiopdbp.hosts import sender as pure_sender
from aiopdbp.hosts.owned import OwnedDone
from aiopdbp.pool import PoolMatrix, SendPool, UserMemory
from aiopdbp.wire.codec import split_target
from aiopdbp.wire.mesp import CDU, Kind
from aiopdbp.wire.message import Message

try:
    from aiopdbp.hosts import csender as compiled_sender  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_sender = None

#: both forms of the sender: every test runs against each
FORMS = [pytest.param(pure_sender, id="pure"),
         pytest.param(compiled_sender, id="compiled",
                      marks=pytest.mark.skipif(compiled_sender is None, reason="the compiled sender is not built"))]

PID = 7
LARGE = 32 << 10


class _Transport:
    """Records what is posted; sends stay in flight until :meth:`complete`."""

    def __init__(self, *, bulk: bool = False, pending: bool = False) -> None:
        self.tick = 0
        self.posts: list[tuple[str, Any]] = []   # ("data", bytes) or ("bulk", (tag, head or None, nbytes))
        self.pending = pending
        self.inflight: list[asyncio.Future[None]] = []
        self.refuse: BaseException | None = None
        if bulk:
            self.bulk_tags = 8
            self.bulk_heads = True

    def post_nowait(self, dest: int, channel: Any, blocks: list[Any]) -> asyncio.Future[None] | None:
        if self.refuse is not None:
            raise self.refuse
        self.posts.append(("data", b"".join(bytes(b) for b in blocks)))
        if not self.pending:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.inflight.append(fut)
        return fut

    def post_bulk(self, dest: int, tag: int, buf: Any, done: Any = None, head: Any = None) -> Any:
        self.posts.append(("bulk", (tag, None if head is None else bytes(head), memoryview(buf).nbytes)))
        fut = asyncio.get_running_loop().create_future() if done is None else done
        self.inflight.append(fut)
        return fut

    def complete(self) -> None:
        """The oldest send in flight completes."""
        fut = self.inflight.pop(0)
        if not fut.done():
            fut.set_result(None)


def _sender(form: Any, tr: _Transport, *, max_inflight: int = 4,
            errors: list[BaseException] | None = None) -> Any:
    pool = SendPool(PoolMatrix(2, 4, UserMemory(4096, 8), 4, 0.5))
    sink = errors if errors is not None else []
    return form.LinkSender(1, tr, pool, block_size=4096, large=LARGE, max_inflight=max_inflight,
                           allow_pickle=False, on_error=sink.append)


def _msg(data: Any, com: int = 0) -> Message:
    return Message(("src", Kind.SHORT, com, data, 3))


async def _turn() -> None:
    """Let the end-of-iteration flush run."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_first_message_of_an_iteration_leaves_alone_the_rest_in_one_block(form: Any) -> None:
    tr = _Transport()
    out = _sender(form, tr)
    for k in range(5):
        assert out.short(PID, _msg(b"m%d" % k))
    assert len(tr.posts) == 1 and out.lone == 1          # the first at once, in a frame of its own
    await _turn()
    assert len(tr.posts) == 2 and out.blocks == 1        # the other four: one block, at the end of the turn
    assert out.sent_msgs == 2 and out.idle


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_sends_beyond_max_inflight_wait_in_order_and_go_as_earlier_ones_complete(form: Any) -> None:
    tr = _Transport(pending=True)
    out = _sender(form, tr, max_inflight=2)
    for k in range(4):
        tr.tick += 1                                      # each its own iteration: a lone frame each
        out.short(PID, _msg(b"%d" % k))
    # two posted; the third queued (a lone frame); the fourth, behind it,
    # went into a block, queued when the turn ends
    assert len(tr.posts) == 2 and out.inflight == 2 and out.queued == 1
    await _turn()
    assert out.queued == 2 and out.lone == 3 and out.blocks == 1 and not out.idle
    tr.complete()
    await asyncio.sleep(0)
    assert len(tr.posts) == 3 and out.queued == 1
    for _ in range(3):
        tr.complete()
        await asyncio.sleep(0)
    assert out.idle and [p[-1:] for _, p in tr.posts] == [b"0", b"1", b"2", b"3"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_large_array_goes_as_a_split_frame_carrying_the_grants_owed(form: Any) -> None:
    tr = _Transport(bulk=True)
    out = _sender(form, tr)
    out.carried = [(5, 1000)]
    arr = np.arange(10_000.0)
    done = OwnedDone(loop=asyncio.get_running_loop())
    out.message(PID, _msg(arr), done)
    ((kind, (tag, head, nbytes)),) = tr.posts
    assert kind == "bulk" and tag == 0 and nbytes == arr.nbytes
    assert head is not None and out.carried == [] and out.n_carried == 1   # the grant rode on the header
    assert not done.done()
    tr.complete()
    await asyncio.sleep(0)
    assert done.done() and out.splits == 1


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_refused_post_is_reported_once_and_fails_owned_sends(form: Any) -> None:
    tr = _Transport(bulk=True)
    errors: list[BaseException] = []
    out = _sender(form, tr, errors=errors)
    done = OwnedDone(loop=asyncio.get_running_loop())
    out.message(PID, _msg(np.arange(10_000.0)), done)
    tr.refuse = BrokenResourceError("closed")
    tr.tick += 1
    out.short(PID, _msg(b"x"))
    assert errors == [tr.refuse]
    out.fail(errors[0])                  # as the link does with what it was told
    with pytest.raises(BrokenResourceError):
        await done
    assert out.error is errors[0]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_stamp_is_called_before_and_after_each_post(form: Any) -> None:
    tr = _Transport()
    out = _sender(form, tr)
    seen: list[bool] = []
    out.stamp = seen.append
    out.short(PID, _msg(b"a"))
    out.short(PID, _msg(b"b"))
    await _turn()
    assert seen == [False, True, False, True] and len(tr.posts) == 2


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_record_too_big_for_a_block_goes_in_a_frame_of_its_own(form: Any) -> None:
    tr = _Transport()
    out = _sender(form, tr)
    out.short(PID, _msg(b"first"))
    out.cdu(CDU(Kind.SHORT, 3, (PID,), np.zeros(1500, np.float64), 0))   # 12 KB: not a 4 KiB block's
    assert len(tr.posts) == 2 and out.blocks == 0
    await _turn()
    assert out.idle


# One item per event: (what, size, tick advance, completions)
_ITEMS = st.lists(st.tuples(st.sampled_from(["bytes", "none", "array", "cdu", "large", "shared", "strided", "stream"]),
                            st.integers(0, 6000), st.booleans(), st.integers(0, 2)), max_size=40)


async def _replay(form: Any, items: list[tuple[str, int, bool, int]], bulk: bool) -> tuple[Any, ...]:
    from aiopdbp.wire.shorts import ShortStream

    tr = _Transport(bulk=bulk, pending=True)
    out = _sender(form, tr, max_inflight=3)
    for what, n, advance, completions in items:
        if advance:
            tr.tick += 1
        if what == "bytes":
            out.short(PID, _msg(bytes(n % 300)), b"") or out.cdu(CDU(Kind.SHORT, 3, (PID,), bytes(n), 0))
        elif what == "none":
            out.short(PID, _msg(None))
        elif what == "array":
            if not out.short(PID, _msg(np.arange(n % 200, dtype=np.int16))):
                out.cdu(CDU(Kind.SHORT, 3, (PID,), np.arange(n % 200, dtype=np.int16), 0))
        elif what == "cdu":
            out.cdu(CDU(Kind.COMMAND, 3, (PID, PID + 1), bytes(n), 9))
        elif what == "large":   # an owned send
            out.message(PID, _msg(np.full(LARGE // 8 + n, 1.5)), OwnedDone(loop=asyncio.get_running_loop()))
        elif what == "shared":  # a large array sent as a plain message (read-only, shared)
            arr = np.full(LARGE + n, 7, np.uint8)
            arr.flags.writeable = False
            out.message(PID, _msg(arr))
        elif what == "strided":  # large, not contiguous: the general encoder
            out.message(PID, _msg(np.arange(LARGE // 2 + n, dtype=np.int32)[::2]))
        else:
            out.stream(PID, ShortStream((None, Kind.STREAM, 0, bytes(n % 500), 3, n, 4, 0)))
        for _ in range(completions):
            if tr.inflight:
                tr.complete()
        await asyncio.sleep(0)
    while tr.inflight or not out.idle:
        if tr.inflight:
            tr.complete()
        await asyncio.sleep(0)
    return (tr.posts, out.sent_msgs, out.nbytes, out.lone, out.blocks, out.splits, out.fallbacks)


@pytest.mark.skipif(compiled_sender is None, reason="the compiled sender is not built")
@pytest.mark.parametrize("bulk", [False, True], ids=["in-order", "bulk"])
@settings(max_examples=150, deadline=None)
@given(_ITEMS)
def test_both_forms_post_the_same_messages_for_any_items(bulk: bool, items: list[tuple[str, int, bool, int]]) -> None:
    # a first run fills the codec's caches (an array's meta goes short once
    # its dtype and shape have been checked), so both forms meet them warm
    asyncio.run(_replay(pure_sender, items, bulk))
    pure = asyncio.run(_replay(pure_sender, items, bulk))
    compiled = asyncio.run(_replay(compiled_sender, items, bulk))
    assert pure == compiled
