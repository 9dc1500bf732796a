"""The sans-I/O stream protocol (aiopdbp.streams.protocol): event sequences in, actions out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiopdbp.errors import ProtocolError
from aiopdbp.streams.protocol import (
    Abort, Aborted, Break, Cancel, Close, Consumed, Credit, Deliver, Done, EmitAbort, EmitEnd,
    EmitSegment, End, Event, Fail, Finished, Open, Opened, ReceiverProtocol, Registry, Segment,
    SendCredit, SendDone, SendSegment, SenderProtocol, SendWhole, StreamState, Whole,
)

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parent.parent


def _sender(window: int | None = 4) -> SenderProtocol:
    s = SenderProtocol(window)
    s.handle(Opened())
    return s


def _receiver(window: int = 4, credit: int = 0) -> ReceiverProtocol:
    r = ReceiverProtocol(window, credit)
    r.handle(Open())
    return r


def test_import_loads_no_io_library_in_fresh_interpreter() -> None:
    # the package's __init__ imports the I/O layers; the module itself must not
    code = ("import sys, types\n"
            f"pkg = types.ModuleType('aiopdbp'); pkg.__path__ = [{str(ROOT / 'aiopdbp')!r}]\n"
            "sys.modules['aiopdbp'] = pkg\n"
            "import aiopdbp.streams.protocol\n"
            "import json; print(json.dumps([m for m in ('asyncio', 'mpi4py', 'cupy', 'numpy') "
            "if m in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(out.stdout) == []


# ------------------------------------------------------------------- sender
def test_sender_segments_numbered_and_end_counts_them() -> None:
    s = _sender(None)
    assert s.handle(SendSegment(10)) == (EmitSegment(0),)
    assert s.handle(SendSegment(5)) == (EmitSegment(1),)
    assert s.handle(End()) == (EmitEnd(2, 15),)
    assert s.handle(Done()) == (Finished(),)
    assert s.state is StreamState.DONE


def test_sender_segment_before_opened_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        SenderProtocol(4).handle(SendSegment(1))


def test_sender_segment_without_credit_is_protocol_error() -> None:
    s = _sender(2)
    s.handle(SendSegment(1))
    s.handle(SendSegment(1))
    assert not s.can_send
    with pytest.raises(ProtocolError):
        s.handle(SendSegment(1))
    s.handle(Credit(1))
    assert s.handle(SendSegment(1)) == (EmitSegment(2),)


def test_sender_staged_segment_takes_no_credit_and_emits_nothing() -> None:
    s = _sender(1)
    assert s.handle(SendSegment(100, staged=True)) == ()
    assert s.handle(SendSegment(100, staged=True)) == ()
    assert s.handle(End()) == (EmitEnd(2, 200),)


def test_sender_done_before_end_is_protocol_error() -> None:
    s = _sender()
    with pytest.raises(ProtocolError):
        s.handle(Done())


def test_sender_done_with_error_fails_the_stream() -> None:
    s = _sender()
    assert s.handle(Done("receiver closed")) == (Fail("receiver closed"),)
    assert s.state is StreamState.BROKEN


def test_sender_cancel_emits_abort_and_ends_it() -> None:
    s = _sender()
    s.handle(SendSegment(1))
    assert s.handle(Cancel("cancelled")) == (EmitAbort(1, "cancelled"),)
    assert s.state is StreamState.ABORTED
    for ev in (SendSegment(1), End(), Credit(1), Done(), Cancel("again")):
        with pytest.raises(ProtocolError):
            s.handle(ev)


def _fields(side: Any) -> dict[str, Any]:
    return {k: getattr(side, k) for k in type(side).__slots__ if not k.startswith("_")} | {"state": side.state}


@pytest.mark.parametrize("window", [None, 1, 4])
def test_sender_send_whole_is_opened_a_staged_segment_an_end_and_done(window: int | None) -> None:
    one, four = SenderProtocol(window), SenderProtocol(window)
    assert one.handle(SendWhole(910)) == (Finished(),)
    four.handle(Opened())
    four.handle(SendSegment(910, staged=True))
    four.handle(End())
    assert four.handle(Done()) == (Finished(),)
    assert _fields(one) == _fields(four) and one.state is StreamState.DONE


def test_sender_done_after_send_whole_is_protocol_error() -> None:
    s = SenderProtocol(4)
    s.handle(SendWhole(10))
    with pytest.raises(ProtocolError):   # nothing comes back for a stream sent whole
        s.handle(Done())


def test_sender_send_whole_after_opened_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        _sender().handle(SendWhole(1))


def test_sender_zero_credit_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        _sender().handle(Credit(0))


def test_side_given_a_foreign_event_answers_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        _sender().handle(Segment(0, b"", 0))
    with pytest.raises(ProtocolError):
        _receiver().handle(SendSegment(1))
    with pytest.raises(ProtocolError):
        _receiver().handle(Event())


# ----------------------------------------------------------------- receiver
def test_receiver_delivers_in_order_and_finishes_at_end() -> None:
    r = _receiver()
    assert r.handle(Segment(0, "a", 1)) == (Deliver("a"),)
    assert r.handle(Segment(1, "b", 1)) == (Deliver("b"),)
    assert r.handle(End(2, 2)) == (Finished(), SendDone(None))
    assert r.state is StreamState.DONE


@pytest.mark.parametrize("credit", [0, 4])
def test_receiver_whole_is_segment_zero_and_an_end_of_one_without_a_done(credit: int) -> None:
    one, two = _receiver(4, credit), _receiver(4, credit)
    actions = one.handle(Whole("a", 7))
    assert actions == (Deliver("a"), Finished())   # its sender waits for no DONE
    assert two.handle(Segment(0, "a", 7)) + two.handle(End(1, 7)) == actions + (SendDone(None),)
    assert _fields(one) == _fields(two) and one.state is StreamState.DONE


@pytest.mark.parametrize("credit", [0, 4])
def test_receiver_take_whole_leaves_the_state_open_then_whole_leave(credit: int) -> None:
    one, two = ReceiverProtocol(4, credit), _receiver(4, credit)
    one.take_whole(7)
    two.handle(Whole("a", 7))
    assert _fields(one) == _fields(two) and one.state is StreamState.DONE


@pytest.mark.parametrize("nbytes", [-1, 1.0, True])
def test_receiver_take_whole_of_a_bad_size_breaks_the_stream(nbytes: Any) -> None:
    r = ReceiverProtocol(4)
    with pytest.raises(ProtocolError):
        r.take_whole(nbytes)
    assert r.state is StreamState.BROKEN


def test_receiver_take_whole_of_an_open_stream_is_refused() -> None:
    r = _receiver()
    with pytest.raises(ProtocolError):
        r.take_whole(1)
    assert r.state is StreamState.OPEN


def test_receiver_whole_after_a_segment_breaks_the_stream() -> None:
    r = _receiver()
    r.handle(Segment(0, "a", 1))
    with pytest.raises(ProtocolError):
        r.handle(Whole("b", 1))
    assert r.state is StreamState.BROKEN


def test_receiver_reorders_early_segments() -> None:
    r = _receiver()
    assert r.handle(Segment(2, "c", 1)) == ()
    assert r.handle(Segment(1, "b", 1)) == ()
    assert r.handle(Segment(0, "a", 1)) == (Deliver("a"), Deliver("b"), Deliver("c"))


def test_receiver_end_before_segments_waits_for_them() -> None:
    r = _receiver()
    assert r.handle(End(2, 3)) == ()
    assert r.handle(Segment(0, "a", 1)) == (Deliver("a"),)
    assert r.handle(Segment(1, "b", 2)) == (Deliver("b"), Finished(), SendDone(None))


def test_receiver_duplicate_segment_breaks_the_stream() -> None:
    r = _receiver()
    r.handle(Segment(0, "a", 1))
    with pytest.raises(ProtocolError, match="duplicate"):
        r.handle(Segment(0, "a", 1))
    assert r.state is StreamState.BROKEN


def test_receiver_segment_out_of_window_breaks_the_stream() -> None:
    r = _receiver(window=2)
    with pytest.raises(ProtocolError, match="window"):
        r.handle(Segment(2, "c", 1))
    assert r.state is StreamState.BROKEN


def test_receiver_segment_beyond_end_is_protocol_error() -> None:
    r = _receiver()
    r.handle(End(1, 1))
    with pytest.raises(ProtocolError):
        r.handle(Segment(1, "x", 1))


def test_receiver_end_with_wrong_byte_count_is_protocol_error() -> None:
    r = _receiver()
    r.handle(Segment(0, "a", 1))
    with pytest.raises(ProtocolError, match="END announced"):
        r.handle(End(1, 7))
    assert r.state is StreamState.BROKEN


def test_receiver_gives_credit_back_each_half_window() -> None:
    r = _receiver(window=4, credit=4)
    for i in range(4):
        r.handle(Segment(i, i, 1))
    assert [r.handle(Consumed()) for _ in range(4)] == [(), (SendCredit(2),), (), (SendCredit(2),)]


def test_receiver_without_credit_window_gives_none() -> None:
    r = _receiver(credit=0)
    r.handle(Segment(0, "a", 1))
    assert r.handle(Consumed()) == ()


def test_receiver_abort_reports_and_late_segment_is_protocol_error() -> None:
    r = _receiver()
    assert r.handle(Abort("sender cancelled")) == (Aborted("sender cancelled"),)
    with pytest.raises(ProtocolError):
        r.handle(Segment(0, "a", 1))


def test_receiver_close_tells_the_sender() -> None:
    r = _receiver()
    assert r.handle(Close("receiver closed")) == (SendDone("receiver closed"),)
    assert r.state is StreamState.BROKEN


def test_receiver_break_tells_nobody() -> None:
    r = _receiver()
    assert r.handle(Break("host lost")) == ()
    assert r.state is StreamState.BROKEN


# ----------------------------------------------------------------- registry
def test_registry_unknown_stream_is_protocol_error() -> None:
    reg: Registry[tuple[int, int], str] = Registry()
    with pytest.raises(ProtocolError, match="unknown stream"):
        reg.get((1, 1))


def test_registry_given_up_stream_is_late_not_unknown() -> None:
    reg: Registry[tuple[int, int], str] = Registry()
    reg.add((1, 1), "s")
    reg.remove((1, 1), given_up=True)
    assert reg.get((1, 1)) is None
    reg.settle((1, 1))
    with pytest.raises(ProtocolError):
        reg.get((1, 1))


def test_registry_second_open_is_protocol_error() -> None:
    reg: Registry[int, str] = Registry()
    reg.add(1, "s")
    with pytest.raises(ProtocolError):
        reg.add(1, "t")


# --------------------------------------------------------------- hypothesis
_JUNK = st.one_of(st.none(), st.text(max_size=2), st.floats(allow_nan=True), st.integers(-3, 3),
                  st.binary(max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([Segment, End, Credit, SendSegment, Done, SendWhole, Whole]), st.lists(_JUNK, min_size=1, max_size=3),
       st.booleans())
def test_malformed_event_fields_answer_protocol_error_only(
        cls: Any, values: list[Any], sender: bool) -> None:
    import inspect
    nargs = len([p for p in inspect.signature(cls).parameters.values()])
    ev = cls(*(values * 3)[:nargs])
    side: Any = _sender() if sender else _receiver()
    try:
        side.handle(ev)
    except ProtocolError:
        pass  # the only exception it may raise


def test_segment_number_that_is_not_an_int_is_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="not an int"):
        _receiver().handle(Segment(1.0, "a", 1))  # type: ignore[arg-type]



@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.permutations(list(range(n)) + ["end"])))
def test_receiver_any_arrival_order_within_window_delivers_once_in_order(order: list[Any]) -> None:
    n = len(order) - 1
    r = _receiver(window=n)
    got: list[Any] = []
    for item in order:
        ev: Event = End(n, n) if item == "end" else Segment(item, item, 1)
        got += [a.data for a in r.handle(ev) if isinstance(a, Deliver)]
    assert got == list(range(n))
    assert r.state is StreamState.DONE


_RECV_EVENTS = st.one_of(
    st.builds(Segment, st.integers(-2, 8), st.none(), st.integers(0, 3)),
    st.builds(End, st.integers(-1, 8), st.integers(-1, 12)),
    st.builds(Abort, st.text(max_size=3)), st.builds(Close, st.text(max_size=3)),
    st.builds(Break, st.text(max_size=3)), st.just(Consumed()), st.just(Open()),
    st.just(SendSegment(1)), st.just(Credit(1)), st.builds(Whole, st.none(), st.integers(-1, 3)))


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 4), st.integers(0, 4), st.lists(_RECV_EVENTS, max_size=25))
def test_receiver_any_event_sequence_answers_actions_or_protocol_error(
        window: int, credit: int, events: list[Event]) -> None:
    r = _receiver(window, credit)
    delivered = 0
    for ev in events:
        was_ended = r.ended
        try:
            actions = r.handle(ev)
        except ProtocolError:
            continue  # the only exception it may raise
        assert all(isinstance(a, Event) for a in actions)
        if was_ended:
            assert isinstance(ev, Consumed)  # nothing else is accepted once over
        delivered += sum(isinstance(a, Deliver) for a in actions)
        assert delivered == r.next  # each segment number delivered exactly once, in order


_SEND_EVENTS = st.one_of(
    st.builds(SendSegment, st.integers(-1, 5), st.booleans()), st.just(End()), st.just(Opened()),
    st.builds(Credit, st.integers(-1, 3)), st.builds(Done, st.none() | st.text(max_size=3)),
    st.builds(Cancel, st.text(max_size=3)), st.builds(Break, st.text(max_size=3)),
    st.just(Segment(0, None, 0)), st.builds(SendWhole, st.integers(-1, 5)))


@settings(max_examples=400, deadline=None)
@given(st.none() | st.integers(1, 4), st.lists(_SEND_EVENTS, max_size=25))
def test_sender_any_event_sequence_answers_actions_or_protocol_error(
        window: int | None, events: list[Event]) -> None:
    s = SenderProtocol(window)
    numbered: list[int] = []  # segment numbers handed out, staged ones (emitted by nobody) included
    for ev in events:
        try:
            actions = s.handle(ev)
        except ProtocolError:
            continue
        if isinstance(ev, SendSegment):
            emits = [a.segno for a in actions if isinstance(a, EmitSegment)]
            assert len(emits) == (0 if ev.staged else 1)
            numbered.append(s.segno - 1)
            assert emits in ([], [s.segno - 1])
        assert s.credits is None or s.credits >= 0
    assert numbered == list(range(len(numbered)))  # without gaps or repeats


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.integers(0, 10), st.data())
def test_conversation_with_reordering_and_cancel_either_side_ends_both(
        window: int, nseg: int, data: st.DataObject) -> None:
    """A sender and a receiver joined by a channel that reorders the data it
    carries (segments, END, ABORT) and keeps control messages in order; either
    side may give up at any point.  Both sides end; a stream nobody gave up is
    delivered whole and in order; only ProtocolError is ever raised, and only
    for events that arrive after their side ended."""
    s, r = _sender(window), _receiver(window, window)
    to_r: list[Event] = []
    to_s: list[Event] = []
    got: list[int] = []
    ready = 0  # delivered, not yet consumed
    cancel = data.draw(st.sampled_from([None, "sender", "receiver"]))
    cancel_at = data.draw(st.integers(0, 3 * nseg + 3))

    def feed_r(ev: Event) -> None:
        nonlocal ready
        try:
            acts = r.handle(ev)
        except ProtocolError:
            assert r.ended  # late after a give-up, never a legal exchange
            return
        for a in acts:
            if isinstance(a, Deliver):
                got.append(a.data)
                ready += 1
            elif isinstance(a, SendDone):
                to_s.append(Done(a.error))

    def feed_s(ev: Event) -> None:
        try:
            acts = s.handle(ev)
        except ProtocolError:
            assert s.ended
            return
        for a in acts:
            if isinstance(a, EmitSegment):
                to_r.append(Segment(a.segno, a.segno, 1))
            elif isinstance(a, EmitEnd):
                to_r.append(End(a.nseg, a.nbytes))
            elif isinstance(a, EmitAbort):
                to_r.append(Abort(a.why))

    for step in range(20 * (nseg + 2)):
        if cancel and step == cancel_at:
            if cancel == "sender" and not s.ended:
                feed_s(Cancel("cancelled"))
            elif cancel == "receiver" and not r.ended:
                feed_r(Close("closed"))
        moves = []
        if not s.ended and s.state is StreamState.OPEN and s.can_send:
            moves.append("send")
        if to_r:
            moves.append("to_r")
        if to_s:
            moves.append("to_s")
        if ready:
            moves.append("consume")
        if not moves:
            break
        move = data.draw(st.sampled_from(moves))
        if move == "send":
            feed_s(SendSegment(1) if s.segno < nseg else End())
        elif move == "to_r":
            feed_r(to_r.pop(data.draw(st.integers(0, len(to_r) - 1))))  # any order
        elif move == "to_s":
            feed_s(to_s.pop(0))  # the control channel keeps its order
        else:
            ready -= 1
            try:
                for a in r.handle(Consumed()):
                    if isinstance(a, SendCredit):
                        to_s.append(Credit(a.n))
            except ProtocolError:
                pytest.fail("Consumed is always accepted")
    assert s.ended and r.ended
    assert got == list(range(len(got)))
    if s.state is StreamState.DONE:
        assert r.state is StreamState.DONE and got == list(range(nseg))
    if cancel is None:
        assert s.state is StreamState.DONE
    elif r.state is StreamState.BROKEN:
        assert s.state in (StreamState.BROKEN, StreamState.ABORTED)


# ------------------------------------------------ the OPEN of a short stream
def _eager_open(data: object, window: int = 16, com: int = 3) -> object:
    from aiopdbp.streams.table import EAGER_OPEN
    from aiopdbp.wire.mesp import CDU, Kind, StreamOp
    return CDU(Kind.STREAM, 1, (2,), data, com, window, 7, EAGER_OPEN, 0, (), StreamOp.OPEN)


def test_open_meta_round_trip_keeps_an_iterable_streams_unknown_size() -> None:
    from aiopdbp.streams.receiver import StreamMeta
    from aiopdbp.streams.table import pack_meta, unpack_meta
    meta = unpack_meta(pack_meta(StreamMeta("ndarray", None, np.dtype("<i4"), (None, 3), com=3, window=8)))
    assert (meta.kind, meta.nbytes, meta.dtype, meta.shape, meta.com, meta.window) == \
        ("ndarray", None, "<i4", (None, 3), 3, 8)


def test_eager_open_meta_is_its_array_payloads_dtype_and_shape_through_the_codec() -> None:
    from aiopdbp.streams.table import eager_meta
    from aiopdbp.wire.codec import decode, encode_cdu
    arr = np.arange(12, dtype=">i4").reshape(4, 3)  # a big-endian dtype must stay exactly that
    (cdu,) = decode(b"".join(bytes(p) for p in encode_cdu(_eager_open(arr))))  # type: ignore[arg-type]
    meta = eager_meta(cdu)  # type: ignore[arg-type]
    assert (meta.kind, meta.nbytes, meta.dtype, meta.shape, meta.com, meta.window) == \
        ("ndarray", 48, ">i4", (4, 3), 3, 16)


def test_eager_open_meta_of_a_bytes_payload_is_a_bytes_stream() -> None:
    from aiopdbp.streams.table import eager_meta
    meta = eager_meta(_eager_open(memoryview(b"hello")))  # type: ignore[arg-type]
    assert (meta.kind, meta.nbytes, meta.com, meta.window, meta.dtype) == ("bytes", 5, 3, 16, None)


@pytest.mark.parametrize("data", [None, b"", np.zeros(0, np.uint8), np.array(5), "text"],
                         ids=["none", "empty-bytes", "empty-array", "0-d-array", "str"])
def test_eager_open_without_whole_data_is_protocol_error(data: object) -> None:
    from aiopdbp.streams.table import eager_meta
    with pytest.raises(ProtocolError, match="whole data"):
        eager_meta(_eager_open(data))  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [0, -1, 1 << 40])
def test_eager_open_with_a_bad_window_is_protocol_error(window: int) -> None:
    from aiopdbp.streams.table import eager_meta
    with pytest.raises(ProtocolError, match="credit window"):
        eager_meta(_eager_open(b"hello", window=window))  # type: ignore[arg-type]


# ------------------------------------------- one-call forms of the commonest events
def _state(side: Any) -> tuple[Any, ...]:
    return tuple(getattr(side, k) for k in side.__slots__ if not k.startswith("_")) + (side.state,)


@given(st.none() | st.integers(1, 4), st.lists(st.integers(0, 100), min_size=1, max_size=8))
@settings(max_examples=50, deadline=None)
def test_sender_segment_call_is_the_sendsegment_event(window: int | None, sizes: list[int]) -> None:
    # numbers, credit and bytes as handle(SendSegment) leaves them, and the
    # same ProtocolError once the window is used up
    a, b = _sender(window), _sender(window)
    for n in sizes:
        try:
            want: Any = a.handle(SendSegment(n))[0].segno  # type: ignore[attr-defined]
        except ProtocolError:
            want = ProtocolError
        try:
            got: Any = b.segment(n)
        except ProtocolError:
            got = ProtocolError
        assert got == want and _state(a) == _state(b)


def test_sender_segment_call_before_opened_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        SenderProtocol(4).segment(1)


def test_receiver_take_next_takes_only_the_next_segment_in_order() -> None:
    r = _receiver(4)
    assert not r.take_next(1, 5) and (r.next, r.nbytes) == (0, 0)   # early: handle() keeps it
    assert r.take_next(0, 5) and (r.next, r.nbytes) == (1, 5)
    assert not r.take_next(0, 5)                                    # a duplicate: handle() refuses it
    r.handle(Segment(2, b"x", 1))
    assert not r.take_next(1, 5)                                    # one is early: handle() delivers both


@given(st.integers(1, 8), st.integers(0, 8), st.integers(1, 20))
@settings(max_examples=50, deadline=None)
def test_receiver_consumed_call_is_the_consumed_event(window: int, credit: int, taken: int) -> None:
    a, b = _receiver(window, credit), _receiver(window, credit)
    for _ in range(taken):
        acts = a.handle(Consumed())
        n = b.consumed()
        assert acts == ((SendCredit(n),) if n else ())
