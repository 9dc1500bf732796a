"""The large message's receive fast path (:mod:`aiopdbp.hosts.splitin`) and
its compiled twin (``aiopdbp.hosts.csplitin``): every test runs against both
forms, and a property test holds them to the same results for any header,
credit and landing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aiopdbp.errors import ProtocolError
from aiopdbp.hosts import splitin as pure_splitin
from aiopdbp.hosts.gate import CreditBook
from aiopdbp.wire.codec import encode_split_array, split_array
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message

try:
    from aiopdbp.hosts import csplitin as compiled_splitin  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_splitin = None

#: both forms: every test runs against each
FORMS = [pytest.param(pure_splitin, id="pure"),
         pytest.param(compiled_splitin, id="compiled",
                      marks=pytest.mark.skipif(compiled_splitin is None, reason="the compiled form is not built"))]

HOST, PID, SRC = 1, 7, 3
TAGS = 4


class _Source:
    """The inbound state of one host, as much as the fast path reads."""

    def __init__(self) -> None:
        self.host = HOST
        self.bulk_seq = TAGS - 1


class _Bulk:
    """The transport's ``recv_bulk_now``: lands at once unless ``pending``."""

    def __init__(self, *, pending: bool = False, refuse: BaseException | None = None) -> None:
        self.pending = pending
        self.refuse = refuse
        self.posts: list[tuple[int, int, int, Any]] = []

    def __call__(self, source: int, tag: int, nbytes: int, out: Any) -> tuple[Any, Any]:
        if self.refuse is not None:
            raise self.refuse
        self.posts.append((source, tag, nbytes, out))
        buf = out if out is not None else np.arange(nbytes, dtype=np.uint8)
        return buf, (self.track if self.pending else None)

    def track(self, done: Any) -> None:  # pragma: no cover - handed back, never called here
        raise AssertionError


def _header(arr: np.ndarray[Any, Any], pid: int = PID) -> tuple[bytes, Any]:
    head, _ = encode_split_array(Kind.COMMAND, SRC, pid, 9, arr)
    return head, split_array(head)


def _fast(form: Any, post: Any, *, book: Any = None, landing: Any = None, waiting: Any = (),
          names: dict[int, str] | None = None) -> tuple[Any, list[Any]]:
    placed: list[Any] = []
    fast = form.ArraysIn({}, post, TAGS, book, landing, waiting, {SRC: "src"} if names is None else names,
                         lambda pid: f"<pid {pid}>", lambda *a: placed.append(a))
    return fast, placed


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_a_header_seen_before_whose_payload_lands_at_once_is_delivered_in_the_call(form: Any) -> None:
    arr = np.zeros((16, 512), np.float64)
    head, said = _header(arr)
    bulk = _Bulk()
    fast, placed = _fast(form, bulk)
    fast.arrays[head] = said
    s = _Source()
    assert fast.take(s, memoryview(head)) is True
    assert bulk.posts == [(HOST, TAGS - 1, arr.nbytes, None)] and s.bulk_seq == 0   # the frame's tag, wrapped
    ((host, pids, msg, cost),) = placed
    assert (host, pids, cost) == (HOST, (PID,), arr.nbytes + CREDIT_OVERHEAD)
    assert type(msg) is Message and msg[:3] == ("src", Kind.COMMAND, 9) and msg.source_pid == SRC
    assert msg.data.dtype == arr.dtype and msg.data.shape == arr.shape


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("open_pipe", [True, False], ids=["open pipe", "no open pipe"])
def test_a_landed_payloads_message_goes_to_the_placer_in_one_call_else_the_slow_way(form: Any,
                                                                                     open_pipe: bool) -> None:
    arr = np.zeros(8192, np.uint8)
    head, said = _header(arr)
    placed: list[Any] = []
    ones: list[Any] = []

    def place_one(host: int, pid: int, msg: Any, cost: int) -> bool:
        ones.append((host, pid, msg, cost))
        return open_pipe

    fast = form.ArraysIn({head: said}, _Bulk(), TAGS, None, None, (), {SRC: "src"}, lambda pid: f"<pid {pid}>",
                         lambda *a: placed.append(a), place_one)
    assert fast.take(_Source(), memoryview(head)) is True
    ((host, pid, msg, cost),) = ones
    assert (host, pid, cost) == (HOST, PID, arr.nbytes + CREDIT_OVERHEAD) and type(msg) is Message
    # no open pipe: the arrivals' own way (parked for the GP, or dropped with its credit returned)
    assert placed == ([] if open_pipe else [(HOST, (PID,), msg, cost)])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_a_header_not_seen_before_is_left_to_the_caller(form: Any) -> None:
    head, _ = _header(np.zeros(8192, np.uint8))
    bulk = _Bulk()
    fast, placed = _fast(form, bulk)
    assert fast.take(_Source(), memoryview(head)) is None
    assert not bulk.posts and not placed


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_a_payload_still_landing_is_handed_back_with_its_credit_and_track(form: Any) -> None:
    head, said = _header(np.zeros(8192, np.uint8))
    bulk = _Bulk(pending=True)
    fast, placed = _fast(form, bulk)
    fast.arrays[head] = said
    assert fast.take(_Source(), memoryview(head)) == (head, said, 8192 + CREDIT_OVERHEAD, bulk.track)
    assert len(bulk.posts) == 1 and not placed


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_without_a_receive_that_hands_back_the_payload_the_header_takes_the_queue(form: Any) -> None:
    head, said = _header(np.zeros(8192, np.uint8))
    fast, placed = _fast(form, None)
    fast.arrays[head] = said
    assert fast.take(_Source(), memoryview(head)) == (head, said, 0, None)
    assert not placed


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_a_payload_beyond_the_credit_granted_is_refused_before_its_receive(form: Any) -> None:
    book = CreditBook(1 << 16)
    book.deliver(book.account(HOST, PID), 40_000)     # outstanding: 40,000 of a 64 KiB window
    head, said = _header(np.zeros(30_000, np.uint8))
    bulk = _Bulk()
    fast, placed = _fast(form, bulk, book=book)
    fast.arrays[head] = said
    with pytest.raises(ProtocolError, match="beyond the credit granted"):
        fast.take(_Source(), memoryview(head))
    assert not bulk.posts and not placed
    assert fast.admissible(HOST, PID, 20_000, 0) == 20_000 + CREDIT_OVERHEAD
    with pytest.raises(ProtocolError):
        fast.admissible(HOST, PID, 20_000, 10_000)   # with what is admitted and not delivered yet


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_no_memory_for_the_payload_is_the_senders_protocol_error(form: Any) -> None:
    head, said = _header(np.zeros(8192, np.uint8))
    fast, _ = _fast(form, _Bulk(refuse=MemoryError()))
    fast.arrays[head] = said
    with pytest.raises(ProtocolError, match="no memory"):
        fast.take(_Source(), memoryview(head))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_a_gps_own_buffer_is_asked_for_only_while_a_gp_waits_in_recv_into(form: Any) -> None:
    head, said = _header(np.zeros(8192, np.uint8))
    asked: list[tuple[int, int]] = []
    own = bytearray(8192)

    def landing(pid: int, nbytes: int) -> Any:
        asked.append((pid, nbytes))
        return memoryview(own)

    bulk = _Bulk()
    waiting: dict[int, Any] = {}
    fast, placed = _fast(form, bulk, landing=landing, waiting=waiting)
    fast.arrays[head] = said
    fast.take(_Source(), memoryview(head))
    assert asked == [] and bulk.posts[-1][3] is None
    waiting[PID] = object()
    fast.take(_Source(), memoryview(head))
    assert asked == [(PID, 8192)] and bulk.posts[-1][3] is not None
    assert np.shares_memory(placed[-1][2].data, np.frombuffer(own, np.uint8))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.timeout(10)
def test_a_sender_whose_name_is_not_known_here_is_named_by_name_of(form: Any) -> None:
    head, said = _header(np.zeros(8192, np.uint8))
    fast, placed = _fast(form, _Bulk(), names={})
    fast.arrays[head] = said
    fast.take(_Source(), memoryview(head))
    assert placed[0][2].source == f"<pid {SRC}>"


@pytest.mark.skipif(compiled_splitin is None, reason="the compiled form is not built")
@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(["u1", "<f8", ">i4", "<U3", "|S5", "?"]),
       shape=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       outstanding=st.integers(0, 1 << 17), pending=st.booleans(), pid=st.sampled_from([0, PID]),
       known=st.booleans())
def test_both_forms_give_the_same_results_for_any_header(dtype: str, shape: list[int], outstanding: int,
                                                          pending: bool, pid: int, known: bool) -> None:
    arr = np.zeros(shape, dtype)
    if arr.dtype.kind == "U":
        arr = np.full(shape, "ab", dtype)
    head, said = _header(arr, pid)
    results = []
    for form in (pure_splitin, compiled_splitin):
        book = CreditBook(1 << 16)
        if outstanding:
            book.deliver(book.account(HOST, pid), outstanding)
        bulk = _Bulk(pending=pending)
        fast, placed = _fast(form, bulk, book=book, names={SRC: "src"} if known else {})
        if said is not None:
            fast.arrays[head] = said
        s = _Source()
        try:
            got: Any = fast.take(s, memoryview(head))
        except ProtocolError as exc:
            got = ("ProtocolError", str(exc))
        if type(got) is tuple and len(got) == 4 and got[3] is not None:
            assert got[3] == bulk.track
            got = got[:3] + ("track",)
        msgs = [(h, p, tuple(m[:3]) + (m[4], m[3].dtype, m[3].shape, m[3].tobytes()), c) for h, p, m, c in placed]
        results.append((got, bulk.posts, s.bulk_seq, msgs))
    assert results[0] == results[1]
