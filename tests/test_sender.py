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

    def __init__(self, *, bulk: bool = False, pending: bool = False, hold: bool = False) -> None:
        self.tick = 0
        self.holds_blocks = hold
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
            errors: list[BaseException] | None = None, admit: Any = None, refund: Any = None) -> Any:
    pool = SendPool(PoolMatrix(2, 4, UserMemory(4096, 8), 4, 0.5))
    sink = errors if errors is not None else []
    return form.LinkSender(1, tr, pool, block_size=4096, large=LARGE, max_inflight=max_inflight,
                           allow_pickle=False, on_error=sink.append, admit=admit, refund=refund)


class _Credit:
    """A stand-in for the link's gate: admits while ``left`` covers the bytes;
    records what comes back."""

    def __init__(self, left: int) -> None:
        self.left = left
        self.refunds: list[tuple[int, int]] = []

    def admit(self, pid: int, nbytes: int) -> bool:
        if nbytes > self.left:
            return False
        self.left -= nbytes
        return True

    def refund(self, pid: int, nbytes: int) -> None:
        self.refunds.append((pid, nbytes))
        self.left += nbytes


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


class _CountedTicks(_Transport):
    """A transport whose tick counts its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    @property  # type: ignore[override]
    def tick(self) -> int:
        self.reads += 1
        return 0

    @tick.setter
    def tick(self, value: int) -> None:
        pass


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_message_into_an_open_block_reads_no_tick(form: Any) -> None:
    tr = _CountedTicks()
    out = _sender(form, tr)
    assert out.short(PID, _msg(b"lone")) and out.short(PID, _msg(b"opens a block"))
    reads = tr.reads
    for k in range(10):
        assert out.short(PID, _msg(b"m%d" % k))
        assert out.offer(PID, 8, _msg(b"o%d" % k))
    assert tr.reads == reads and out.lone == 1   # the block was open: the tick is the lone frame's question
    await _turn()
    assert out.blocks == 1


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
async def test_a_held_block_waits_for_the_send_in_flight_and_gathers_the_turns_after_it(form: Any) -> None:
    # ranks outnumber cores (transport.holds_blocks): while a send to the host
    # is in flight, what follows is one block, sent when that send completes
    tr = _Transport(pending=True, hold=True)
    out = _sender(form, tr)
    out.short(PID, _msg(b"message-0"))
    assert len(tr.posts) == 1 and out.lone == 1 and out.inflight == 1
    for k in range(1, 4):
        tr.tick += 1                                      # each its own iteration: no lone frame now
        out.short(PID, _msg(b"message-%d" % k))
        await _turn()
    assert len(tr.posts) == 1 and out.lone == 1 and not out.idle   # held, not sent at each turn's end
    tr.complete()
    await asyncio.sleep(0)
    assert len(tr.posts) == 2 and out.blocks == 1        # the three in one block, in order
    body = tr.posts[1][1]
    assert body.index(b"message-1") < body.index(b"message-2") < body.index(b"message-3")
    tr.complete()
    await asyncio.sleep(0)
    assert out.idle and out.sent_msgs == 2


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_held_block_leaves_at_once_when_it_fills(form: Any) -> None:
    tr = _Transport(pending=True, hold=True)
    out = _sender(form, tr)
    out.short(PID, _msg(b"0"))
    tr.tick += 1
    k = 0
    while out.blocks == 0:                                # 4 KiB blocks: the 14th of 300 B fills one
        out.short(PID, _msg(bytes(300)))
        k += 1
    assert k < 20 and len(tr.posts) == 2 and out.inflight == 2   # sent though a send is in flight


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


class _PairLane:
    """A transport's data lane that also posts split frames (the kernel's ``post_pair``)."""

    bulk = object()

    def __init__(self, tr: _Transport) -> None:
        self.tr = tr

    def post(self, buf: Any) -> None:
        self.tr.posts.append(("data", bytes(buf)))

    def post_pair(self, head: Any, buf: Any, tag: int, done: Any) -> Any:
        self.tr.posts.append(("pair", (tag, bytes(head), memoryview(buf).nbytes)))
        self.tr.inflight.append(done)
        return done


class _LaneTransport(_Transport):
    def send_lane(self, dest: int, channel: Any) -> _PairLane:
        return _PairLane(self)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_a_split_frame_goes_through_the_lane_in_one_call_when_the_lane_posts_pairs(form: Any) -> None:
    tr = _LaneTransport(bulk=True)
    out = _sender(form, tr)
    arr = np.arange(10_000.0)
    done = OwnedDone(loop=asyncio.get_running_loop())
    out.message(PID, _msg(arr), done)
    ((kind, (tag, head, nbytes)),) = tr.posts
    assert kind == "pair" and tag == 0 and nbytes == arr.nbytes
    assert split_target(head) == (arr.nbytes, PID, False)
    assert out.sent_msgs == 1 and out.splits == 1 and not done.done()
    tr.complete()
    await asyncio.sleep(0)
    assert done.done() and out.idle


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


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_offer_takes_credit_then_the_message_in_one_call(form: Any) -> None:
    tr = _Transport()
    credit = _Credit(100)
    out = _sender(form, tr, admit=credit.admit, refund=credit.refund)
    assert out.offer(PID, 72, _msg(b"12345678")) is True
    assert credit.left == 28 and out.offered == 1 and out.lone == 1 and len(tr.posts) == 1
    assert out.offer(PID, 72, _msg(b"again")) is False   # the credit says wait: nothing taken
    assert credit.left == 28 and out.offered == 1 and len(tr.posts) == 1
    await _turn()
    assert out.idle


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_offer_gives_back_the_credit_of_an_item_the_encoder_refuses(form: Any) -> None:
    tr = _Transport()
    credit = _Credit(1000)
    out = _sender(form, tr, admit=credit.admit, refund=credit.refund)
    with pytest.raises(TypeError):  # an object array without allow_pickle
        out.offer(PID, 100, _msg(np.array([object()], dtype=object)))
    assert credit.refunds == [(PID, 100)] and credit.left == 1000 and out.offered == 0 and not tr.posts


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_offer_takes_nothing_once_the_host_is_gone(form: Any) -> None:
    tr = _Transport()
    credit = _Credit(1000)
    out = _sender(form, tr, admit=credit.admit, refund=credit.refund)
    out.fail(BrokenResourceError("host 1 lost"))
    assert out.offer(PID, 72, _msg(b"x")) is False
    assert credit.left == 1000 and not tr.posts


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_owned_takes_credit_then_posts_the_split_frame_and_returns_its_future(form: Any) -> None:
    tr = _LaneTransport(bulk=True)
    arr = np.arange(10_000.0)
    cost = arr.nbytes + 64
    credit = _Credit(cost + 10)
    out = _sender(form, tr, admit=credit.admit, refund=credit.refund)
    done = out.owned(PID, cost, _msg(arr))
    assert isinstance(done, OwnedDone) and not done.done() and not done.cancel()   # posted: held
    ((kind, (tag, head, nbytes)),) = tr.posts
    assert kind == "pair" and nbytes == arr.nbytes and split_target(head) == (arr.nbytes, PID, False)
    assert credit.left == 10 and out.offered == 1
    assert out.owned(PID, cost, _msg(arr)) is None       # the credit says wait: nothing taken
    assert len(tr.posts) == 1 and credit.left == 10 and out.offered == 1
    tr.complete()
    await asyncio.sleep(0)
    assert done.done() and done.result() is None


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_owned_leaves_a_payload_below_large_and_a_lost_host_to_the_long_way(form: Any) -> None:
    tr = _LaneTransport(bulk=True)
    credit = _Credit(1 << 20)
    out = _sender(form, tr, admit=credit.admit, refund=credit.refund)
    small = np.arange(100.0)
    assert out.owned(PID, small.nbytes + 64, _msg(small)) is None   # copied, by the router's long way
    out.fail(BrokenResourceError("host 1 lost"))
    big = np.arange(10_000.0)
    assert out.owned(PID, big.nbytes + 64, _msg(big)) is None
    assert credit.left == 1 << 20 and not tr.posts and out.offered == 0


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_owned_gives_back_the_credit_of_a_message_refused_before_its_post(form: Any) -> None:
    tr = _LaneTransport(bulk=True)
    credit = _Credit(1 << 20)
    out = _sender(form, tr, admit=credit.admit, refund=credit.refund)
    bad = np.zeros(10_000, dtype=object)   # no pickles here: the encoder refuses it
    with pytest.raises(TypeError):
        out.owned(PID, 80_064, _msg(bad))
    assert credit.refunds == [(PID, 80_064)] and credit.left == 1 << 20 and not tr.posts and out.offered == 0


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
async def test_completed_owned_sends_are_let_go_without_a_callback_each(form: Any) -> None:
    tr = _LaneTransport(bulk=True)
    out = _sender(form, tr)
    arr = np.arange(10_000.0)
    dones = []
    for _ in range(200):
        done = OwnedDone(loop=asyncio.get_running_loop())
        out.message(PID, _msg(arr), done)
        assert not done._callbacks           # nothing for the loop to run when it completes
        dones.append(done)
        tr.complete()
    assert all(d.done() for d in dones)
    out.fail(BrokenResourceError("host 1 lost"))    # fails only what is still in flight: none
    assert all(d.exception() is None for d in dones)


# One item per event: (what, size, tick advance, completions)
_ITEMS = st.lists(st.tuples(st.sampled_from(["bytes", "none", "array", "cdu", "large", "shared", "strided", "stream",
                                             "offer", "offer-refused"]),
                            st.integers(0, 6000), st.booleans(), st.integers(0, 2)), max_size=40)


async def _replay(form: Any, items: list[tuple[str, int, bool, int]], bulk: bool,
                  hold: bool = False) -> tuple[Any, ...]:
    from aiopdbp.wire.shorts import ShortStream

    tr = _Transport(bulk=bulk, pending=True, hold=hold)
    credit = _Credit(20000)
    out = _sender(form, tr, max_inflight=3, admit=credit.admit, refund=credit.refund)
    offers: list[Any] = []
    for what, n, advance, completions in items:
        if advance:
            tr.tick += 1
        if what == "offer":  # a message or a short stream, by the credit rule
            item = (ShortStream((None, Kind.STREAM, 0, bytes(n % 700), 3, n, 4, 0)) if n % 3 == 0
                    else _msg(np.arange(n % 300, dtype=np.uint8)) if n % 3 == 1 else _msg(bytes(n)))
            offers.append(out.offer(PID, n + 64, item))
        elif what == "offer-refused":  # the encoder refuses it: its credit comes back
            try:
                out.offer(PID, n, _msg(np.array([n], dtype=object)))
            except TypeError as exc:
                offers.append(str(exc))
        elif what == "bytes":
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
    return (tr.posts, out.sent_msgs, out.nbytes, out.lone, out.blocks, out.splits, out.fallbacks,
            offers, out.offered, credit.left, credit.refunds)


@pytest.mark.skipif(compiled_sender is None, reason="the compiled sender is not built")
@pytest.mark.parametrize("bulk", [False, True], ids=["in-order", "bulk"])
@pytest.mark.parametrize("hold", [False, True], ids=["no-hold", "hold"])
@settings(max_examples=150, deadline=None)
@given(_ITEMS)
def test_both_forms_post_the_same_messages_for_any_items(bulk: bool, hold: bool,
                                                         items: list[tuple[str, int, bool, int]]) -> None:
    # a first run fills the codec's caches (an array's meta goes short once
    # its dtype and shape have been checked), so both forms meet them warm
    asyncio.run(_replay(pure_sender, items, bulk, hold))
    pure = asyncio.run(_replay(pure_sender, items, bulk, hold))
    compiled = asyncio.run(_replay(compiled_sender, items, bulk, hold))
    assert pure == compiled


def _gate_forms() -> list[Any]:
    from aiopdbp.hosts import gate as pure_gate
    try:
        from aiopdbp.hosts import cgate as compiled_gate  # type: ignore[attr-defined, unused-ignore]
    except ImportError:
        compiled_gate = None
    return [pytest.param(pure_gate, id="pure-gate"),
            pytest.param(compiled_gate, id="compiled-gate",
                         marks=pytest.mark.skipif(compiled_gate is None, reason="the compiled gate is not built"))]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("gates", _gate_forms())
@pytest.mark.timeout(10)
async def test_offer_admits_by_a_real_gates_rule_in_either_form(form: Any, gates: Any) -> None:
    # (a compiled sender calls a compiled gate's own admit in C: the same rule)
    tr = _Transport()
    gate = gates.CreditGate(200)
    out = _sender(form, tr, admit=gate.admit, refund=gate.grant)
    assert out.offer(PID, 150, _msg(b"x" * 8)) is True and gate.credit(PID) == 50
    assert out.offer(PID, 100, _msg(b"y" * 8)) is False and gate.credit(PID) == 50   # not covered
    assert out.offer(PID + 1, 100, _msg(b"z" * 8)) is True and gate.credit(PID + 1) == 100
    gate.park(PID, 100, object())                                # PID contended: its waiter first
    assert out.offer(PID, 10, _msg(b"w" * 8)) is False and gate.credit(PID) == 50
    assert out.offered == 2 and len(tr.posts) >= 1
    await _turn()


def _layouts() -> list[Any]:
    from aiopdbp.arrays import _tag
    be = np.arange(20_000, dtype=">i4")
    return [np.arange(LARGE + 5, dtype=np.uint8), np.arange(20_000.0).reshape(100, 200),
            np.ones((64, 300), np.float32), be, np.arange(20_000).astype("datetime64[s]"),
            np.zeros(20_000, dtype=_tag(np.dtype(np.int16), "torch", "bfloat16"))]


@pytest.mark.skipif(compiled_sender is None, reason="the compiled sender is not built")
@pytest.mark.timeout(20)
async def test_both_forms_split_an_owned_array_into_the_same_header_and_bytes() -> None:
    # the compiled form reads a cached header and the array's bytes itself
    # (csender._split_array); every layout, sent twice: the second from the cache
    frames: dict[str, list[Any]] = {}
    for name, form in (("pure", pure_sender), ("compiled", compiled_sender)):
        for arr in _layouts() * 2:
            tr = _LaneTransport(bulk=True)
            lane = tr.send_lane(0, None)
            got: list[Any] = []
            lane.post_pair = lambda head, buf, tag, done: got.append((bytes(head), bytes(buf))) or done  # type: ignore[method-assign]
            tr.send_lane = lambda dest, channel: lane  # type: ignore[method-assign]
            out = _sender(form, tr)
            done = OwnedDone(loop=asyncio.get_running_loop())
            out.message(PID, _msg(arr), done)
            assert got and got[0][1] == arr.tobytes()
            frames.setdefault(name, []).append(got[0])
    assert frames["pure"] == frames["compiled"]
