"""The hosts/ layer: it imports nothing above it, and every control kind has
exactly one handler among its parts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiopdbp.hosts.channel import HANDLER_NAMES, Dispatch
from aiopdbp.wire.control import ByeMsg, StopAckMsg, StreamDoneMsg, StreamDonesMsg

ROOT = Path(__file__).resolve().parent.parent

#: imports aiopdbp.hosts alone: the package's own ``__init__`` (the public API,
#: which imports every layer) is replaced by an empty package of the same path
_PROBE = """
import json, sys, types
pkg = types.ModuleType("aiopdbp"); pkg.__path__ = [sys.argv[1]]; sys.modules["aiopdbp"] = pkg
import aiopdbp.hosts
print(json.dumps(sorted(m for m in sys.modules if m.startswith("aiopdbp."))))
"""


@pytest.mark.timeout(60)
def test_hosts_import_loads_nothing_from_the_layers_above() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT / "aiopdbp")], capture_output=True,
                         text=True, timeout=50, check=True).stdout
    loaded = json.loads(out)
    assert "aiopdbp.hosts.remote" in loaded
    above = [m for m in loaded if m.split(".")[1] in ("routing", "streams", "runtime", "sync", "launch",
                                                       "bench", "cli")]
    assert above == []


class _Handles:
    """A part that handles the control kinds it is given."""

    def __init__(self, names: list[str], log: list[tuple[str, int, object]]) -> None:
        for name in names:
            setattr(self, name, lambda src, msg, _n=name: log.append((_n, src, msg)))


def test_dispatch_hands_each_kind_to_its_one_owner() -> None:
    log: list[tuple[str, int, object]] = []
    half = len(HANDLER_NAMES) // 2
    dispatch = Dispatch(_Handles(list(HANDLER_NAMES[:half]), log), _Handles(list(HANDLER_NAMES[half:]), log))
    bye, ack = ByeMsg(3), StopAckMsg(1)
    dispatch(2, bye)
    dispatch(1, ack)
    assert log == [("on_bye", 2, bye), ("on_stop_ack", 1, ack)]


def test_dispatch_refuses_a_control_kind_without_handler() -> None:
    with pytest.raises(TypeError, match="on_bye: 0 owners"):
        Dispatch(_Handles([n for n in HANDLER_NAMES if n != "on_bye"], []))


def test_dispatch_refuses_a_control_kind_with_two_handlers() -> None:
    with pytest.raises(TypeError, match="on_table: 2 owners"):
        Dispatch(_Handles(list(HANDLER_NAMES), []), _Handles(["on_table"], []))


# ------------------------------------------------------- stream DONEs, batched
class _Sent:
    """A control channel that records what is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, object]] = []

    def send(self, dest: int, msg: object, on_fail: object = None) -> None:
        self.sent.append((dest, msg))


class _Done:
    """A stream table that records the DONEs it hears."""

    def __init__(self) -> None:
        self.done_calls: list[tuple[tuple[int, int], str | None, int]] = []

    def done(self, key: tuple[int, int], error: str | None, origin: int) -> None:
        self.done_calls.append((key, error, origin))

    def credit(self, key: tuple[int, int], segments: int) -> None:
        raise AssertionError("no credit expected")


def _credit(channel: _Sent, streams: _Done | None = None) -> Any:
    from aiopdbp.hosts.credit import Credit
    return Credit(0, 3, None, None, channel, None, streams or _Done(), window=lambda h: 1 << 20,  # type: ignore[arg-type]
                  block_size=1 << 16, large=1 << 16, max_inflight=4, allow_pickle=False)


async def _next_iteration() -> None:
    """Return once the callbacks scheduled so far in this loop iteration ran."""
    fut = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(fut.set_result, None)
    await fut


async def test_stream_dones_of_one_loop_iteration_leave_in_one_message_per_host() -> None:
    channel = _Sent()
    credit = _credit(channel)
    credit.send_done(1, (1, 5), None)
    credit.send_done(1, (1, 6), None)
    credit.send_done(2, (2, 7), None)
    assert channel.sent == []
    await _next_iteration()
    assert channel.sent == [(1, StreamDonesMsg(1, [5, 6])), (2, StreamDoneMsg(2, 7, True, ""))]


async def test_failed_stream_done_leaves_at_once() -> None:
    channel = _Sent()
    _credit(channel).send_done(1, (1, 5), "receiver closed the stream")
    assert channel.sent == [(1, StreamDoneMsg(1, 5, False, "receiver closed the stream"))]


async def test_stream_dones_held_for_a_host_that_fails_are_not_sent() -> None:
    channel = _Sent()
    credit = _credit(channel)
    credit.send_done(1, (1, 5), None)
    credit.fail(1, ConnectionError("host 1 is gone"))
    await _next_iteration()
    assert channel.sent == []


def test_stream_dones_message_completes_each_stream_it_names() -> None:
    streams = _Done()
    _credit(_Sent(), streams).on_stream_dones(2, StreamDonesMsg(2, [4, 9]))
    assert streams.done_calls == [((2, 4), None, 2), ((2, 9), None, 2)]


class _Silent:
    """A control channel whose messages go nowhere (rank 0 never answers)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, object]] = []

    def send(self, dest: int, msg: object, on_fail: object = None) -> None:
        self.sent.append((dest, msg))


@pytest.mark.timeout(10)
async def test_table_request_rank_0_never_answers_fails_after_the_reply_timeout() -> None:
    from aiopdbp.errors import BrokenResourceError
    from aiopdbp.hosts.sequencer import Sequencer
    from aiopdbp.hosts.tables import Tables

    channel = _Silent()
    seq = Sequencer(1, 2, Tables(), channel, gp_window=1 << 20, reply_timeout=0.2)  # type: ignore[arg-type]
    with pytest.raises(BrokenResourceError, match="host 0 did not answer proc_free within 0.2 s"):
        await seq.commit("proc_free", (5,))
    assert [type(m).__name__ for _, m in channel.sent] == ["ReleaseMsg"]


def test_second_bye_and_data_after_bye_are_protocol_errors() -> None:
    from aiopdbp.errors import ProtocolError
    from aiopdbp.hosts.inbound import Inbound

    failed: list[tuple[int, BaseException]] = []
    inbound = Inbound(0, 2, None, None, None, name_of=str,  # type: ignore[arg-type]
                      fail_host=lambda h, e: failed.append((h, e)), block_size=1 << 16, allow_pickle=False)
    inbound.on_bye(1, ByeMsg(0))
    with pytest.raises(ProtocolError, match="second BYE from host 1"):
        inbound.on_bye(1, ByeMsg(3))
    inbound.on_data(1, memoryview(bytes(16)))     # a data message after the forged BYE(0)
    assert [(h, type(e).__name__) for h, e in failed] == [(1, "ProtocolError")]
    assert "data message 1 after a BYE that said 0" in str(failed[0][1])


def test_split_payload_that_lands_at_once_is_delivered() -> None:
    """A bulk receive may complete inside ``recv_bulk`` (the payload was
    there already): the landing must be queued before it is posted."""
    import numpy as np

    from aiopdbp.hosts.inbound import Inbound
    from aiopdbp.wire.codec import encode_split
    from aiopdbp.wire.mesp import CDU, Kind

    class AtOnce:
        bulk_tags = 4

        def recv_bulk(self, source: int, tag: int, nbytes: int, out: object, done: Any) -> None:
            done(np.ones(nbytes, np.uint8))

    class Arrivals:
        def __init__(self) -> None:
            self.got: list[Any] = []

        def place_messages(self, host: int, pids: tuple[int, ...], item: Any, cost: int) -> None:
            self.got.append((host, pids, item))

    arrivals = Arrivals()
    inbound = Inbound(0, 2, None, arrivals, None, name_of=str, fail_host=lambda h, e: None,  # type: ignore[arg-type]
                      block_size=1 << 16, allow_pickle=False, bulk=AtOnce())  # type: ignore[arg-type]
    head, _ = encode_split(CDU(Kind.SHORT, 1, (2,), np.zeros(1 << 16, np.uint8)))
    inbound.on_data(1, memoryview(head))
    assert [(h, pids) for h, pids, _ in arrivals.got] == [(1, (2,))]
    assert inbound.drained(()) is False  # (no BYE yet) but nothing waits behind the payload


def _admitting_inbound(book: Any, failed: list[tuple[int, BaseException]]) -> tuple[Any, list[Any]]:
    from aiopdbp.hosts.inbound import Inbound

    posted: list[Any] = []

    class Held:  # receives are posted and never land in this test
        bulk_tags = 8

        def recv_bulk(self, source: int, tag: int, nbytes: int, out: object, done: Any) -> None:
            posted.append((source, nbytes))

    class Taken:  # a fuzzed frame that reads as short messages is taken (their decoding is not this test's)
        def place_shorts(self, host: int, buf: Any) -> None:
            pass

    inbound = Inbound(0, 2, None, Taken(), None, name_of=str,  # type: ignore[arg-type]
                      fail_host=lambda h, e: failed.append((h, e)), block_size=1 << 16, allow_pickle=False,
                      bulk=Held(), book=book)  # type: ignore[arg-type]
    return inbound, posted


def _split_head(nbytes: int) -> bytes:
    import numpy as np

    from aiopdbp.wire.codec import encode_split
    from aiopdbp.wire.mesp import CDU, Kind

    head, _ = encode_split(CDU(Kind.SHORT, 1, (2,), np.zeros(nbytes, np.uint8)))
    return head


def test_a_split_header_beyond_the_credit_granted_fails_its_sender_and_posts_no_receive() -> None:
    """Admission by grant (issue 28): two 600 KiB arrays to one GP within a
    1 MiB window are more than the sender may have outstanding; the second
    header is a ProtocolError and its receive is never posted."""
    from aiopdbp.errors import ProtocolError
    from aiopdbp.hosts.gate import CreditBook

    failed: list[tuple[int, BaseException]] = []
    inbound, posted = _admitting_inbound(CreditBook(1 << 20), failed)
    inbound.on_data(1, memoryview(_split_head(600 << 10)))
    assert posted == [(1, 600 << 10)] and not failed
    inbound.on_data(1, memoryview(_split_head(600 << 10)))
    assert posted == [(1, 600 << 10)]
    assert len(failed) == 1 and failed[0][0] == 1
    assert isinstance(failed[0][1], ProtocolError) and "beyond the credit granted" in str(failed[0][1])


def test_one_message_larger_than_the_window_is_admitted_when_nothing_is_outstanding() -> None:
    """The sender's rule lets one message larger than the window go once the
    whole window is back: admission by grant must take it."""
    from aiopdbp.hosts.gate import CreditBook

    failed: list[tuple[int, BaseException]] = []
    inbound, posted = _admitting_inbound(CreditBook(1 << 20), failed)
    inbound.on_data(1, memoryview(_split_head(4 << 20)))
    assert posted == [(1, 4 << 20)] and not failed


# ------------------------------------------------ grants carried (issue 27 item 3)
class _Ledger:
    """The arrivals as the credit side sees them: the window, the grants-at-once switch."""

    window = 1 << 20
    grants_at_once = False

    def on_ask(self, host: int, pid: int) -> None: ...
    def flush_grants(self, everything: bool = False) -> None: ...


class _BulkTr:
    """Enough of a transport with bulk payloads for a link's split frames."""

    tick = 0
    bulk_tags = 8

    def __init__(self) -> None:
        self.heads: list[Any] = []

    def post_nowait(self, dest: int, channel: Any, blocks: list[Any]) -> None:
        self.heads.append(bytes(blocks[0]))

    def post_bulk(self, dest: int, tag: int, buf: Any, done: Any = None) -> None:
        return None


def _carrying_credit(channel: _Sent) -> tuple[Any, _Ledger, _BulkTr]:
    from aiopdbp.hosts.credit import Credit
    ledger, tr = _Ledger(), _BulkTr()
    credit = Credit(0, 3, tr, None, channel, ledger, _Done(), window=lambda h: 1 << 20,  # type: ignore[arg-type]
                    block_size=1 << 16, large=1 << 15, max_inflight=4, allow_pickle=False)
    return credit, ledger, tr


async def test_grants_due_in_one_loop_iteration_leave_in_one_credit_message_per_host() -> None:
    from aiopdbp.wire.control import CreditMsg
    channel = _Sent()
    credit, ledger, _ = _carrying_credit(channel)
    assert ledger.grants_at_once    # the arrivals hand grants over as they fall due
    credit.grant(1, [(5, 1000)])
    credit.grant(1, [(6, 2000)])
    credit.grant(2, [(7, 10)])
    assert channel.sent == []
    await _next_iteration()
    assert channel.sent == [(1, CreditMsg([(5, 1000), (6, 2000)])), (2, CreditMsg([(7, 10)]))]


async def test_a_whole_window_grant_to_a_host_that_had_no_reply_from_here_goes_at_once() -> None:
    from aiopdbp.wire.control import CreditMsg
    channel = _Sent()
    credit, _, _ = _carrying_credit(channel)
    credit.grant(1, [(5, 1 << 20)])     # no link to host 1: a one-way flow's reader
    assert channel.sent == [(1, CreditMsg([(5, 1 << 20)]))]


async def test_grants_ride_on_the_next_split_header_to_their_host_in_one_mpi_message() -> None:
    import numpy as np

    from aiopdbp.wire.codec import split_target
    from aiopdbp.wire.control import CreditMsg, decode_control
    from aiopdbp.wire.mesp import Kind
    from aiopdbp.wire.message import Message

    channel = _Sent()
    credit, _, tr = _carrying_credit(channel)
    link = credit.link(1)
    arr = np.zeros(1 << 16, np.uint8)
    link.put_to(9, Message(("src", Kind.SHORT, 0, arr, 3)))    # a reply to host 1 went: a conversation
    credit.grant(1, [(5, 1 << 20)])     # a whole window: the next reply carries it
    credit.grant(1, [(6, 4096)])
    link.put_to(9, Message(("src", Kind.SHORT, 0, arr, 3)))
    await _next_iteration()
    assert channel.sent == []           # no CreditMsg of their own
    plain, carrying = tr.heads
    n = len(carrying) - len(plain)
    assert decode_control(carrying[:n]) == CreditMsg([(5, 1 << 20), (6, 4096)])
    assert carrying[n:] == plain and split_target(carrying[n:]) == (arr.nbytes, 9, False)
    assert link.stats().credit_carried == 1


async def test_a_whole_window_grant_no_reply_carried_makes_the_next_go_at_once() -> None:
    from aiopdbp.wire.control import CreditMsg
    import numpy as np

    from aiopdbp.wire.mesp import Kind
    from aiopdbp.wire.message import Message

    channel = _Sent()
    credit, _, _ = _carrying_credit(channel)
    link = credit.link(1)
    link.put_to(9, Message(("src", Kind.SHORT, 0, np.zeros(1 << 16, np.uint8), 3)))
    credit.grant(1, [(5, 1 << 20)])
    await _next_iteration()             # no reply carried it: sent at the iteration's end
    assert channel.sent == [(1, CreditMsg([(5, 1 << 20)]))]
    credit.grant(1, [(5, 1 << 20)])     # a one-way flow: the next goes at once
    assert channel.sent[1:] == [(1, CreditMsg([(5, 1 << 20)]))]


def _carried_frame(grants: list[tuple[int, int]]) -> bytes:
    from aiopdbp.wire.control import CreditMsg
    return CreditMsg(grants).encode()


def test_grants_carried_by_a_split_header_are_handed_on_and_its_payload_posted() -> None:
    from aiopdbp.hosts.inbound import Inbound
    from aiopdbp.hosts.gate import CreditBook

    failed: list[tuple[int, BaseException]] = []
    credited: list[tuple[int, Any]] = []
    inbound, posted = _admitting_inbound(CreditBook(1 << 20), failed)
    inbound._on_credit = lambda src, msg: credited.append((src, msg.grants))
    assert isinstance(inbound, Inbound)
    for _ in range(2):   # (the second time, the frame's bytes were seen: kept, not decoded again)
        inbound.on_data(1, memoryview(_carried_frame([(7, 1 << 19)]) + _split_head(1 << 16)))
    assert failed == []
    assert credited == [(1, [(7, 1 << 19)])] * 2
    assert posted == [(1, 1 << 16)] * 2
    assert inbound.credit_carried == 2


@pytest.mark.parametrize("rest", [b"", bytes(8), "block"])
def test_grants_carried_by_anything_but_a_split_header_fail_its_sender(rest: Any) -> None:
    from aiopdbp.wire.mesp import Kind
    from aiopdbp.wire.shorts import encode_shorts

    failed: list[tuple[int, BaseException]] = []
    credited: list[Any] = []
    inbound, posted = _admitting_inbound(None, failed)
    inbound._on_credit = lambda src, msg: credited.append(msg)
    if rest == "block":
        rest = encode_shorts([(2, 1, Kind.SHORT, 3, b"x")])
    inbound.on_data(1, memoryview(_carried_frame([(7, 100)]) + rest))
    assert [(h, type(e).__name__) for h, e in failed] == [(1, "ProtocolError")]
    assert "credit grants carried by something other than a split header" in str(failed[0][1])
    assert credited == [] and posted == []


def _fuzz_settings() -> Any:
    from hypothesis import HealthCheck, settings
    return settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_garbage_behind_or_inside_a_carried_credit_frame_is_only_ever_a_protocol_error() -> None:
    """Whatever follows (or replaces) a CREDIT frame's bytes, a data message
    that starts with one fails its sender with a ProtocolError or is taken;
    nothing else is raised."""
    from hypothesis import given
    from hypothesis import strategies as st

    frame = _carried_frame([(7, 100)])
    head = _split_head(1 << 16)

    @_fuzz_settings()
    @given(st.integers(0, len(frame) + len(head) - 1), st.binary(min_size=0, max_size=8),
           st.binary(max_size=64))
    def check(at: int, junk: bytes, tail: bytes) -> None:
        whole = bytearray(frame + head)
        whole[at:at + len(junk)] = junk
        failed: list[tuple[int, BaseException]] = []
        inbound, _ = _admitting_inbound(None, failed)
        inbound._on_credit = lambda src, msg: None
        inbound.on_data(1, memoryview(bytes(whole) + tail))
        assert all(type(e).__name__ == "ProtocolError" for _, e in failed), failed

    check()


class _NowBulk:
    """A bulk transport with ``recv_bulk_now``: payloads land at once unless ``hold``."""

    bulk_tags = 4

    def __init__(self, hold: bool = False) -> None:
        import numpy as np

        self.hold = hold
        self.now: list[tuple[int, int, int]] = []       # recv_bulk_now: (source, tag, nbytes)
        self.tracked: list[tuple[Any, Any, Any]] = []   # what was tracked: (tag, buffer, done)
        self.np = np

    def recv_bulk(self, source: int, tag: int, nbytes: int, out: object, done: Any) -> None:
        done(self.np.full(nbytes, 9, self.np.uint8))

    def recv_bulk_now(self, source: int, tag: int, nbytes: int, out: object) -> tuple[Any, Any]:
        self.now.append((source, tag, nbytes))
        buf = self.np.full(nbytes, tag + 1, self.np.uint8)
        if not self.hold:
            return buf, None
        return buf, lambda done: self.tracked.append((tag, buf, done))


class _Arrivals:
    def __init__(self) -> None:
        self.got: list[Any] = []

    def place_messages(self, host: int, pids: tuple[int, ...], item: Any, cost: int) -> None:
        self.got.append(("message", host, pids, int(item.data[0]), cost))

    def place_shorts(self, host: int, buf: Any) -> None:
        self.got.append(("shorts", host))


def _now_inbound(bulk: _NowBulk, book: Any = None,
                 failed: list[tuple[int, BaseException]] | None = None) -> tuple[Any, _Arrivals]:
    from aiopdbp.hosts.inbound import Inbound

    arrivals = _Arrivals()
    sink = failed if failed is not None else []
    inbound = Inbound(0, 2, None, arrivals, None, name_of=str,  # type: ignore[arg-type]
                      fail_host=lambda h, e: sink.append((h, e)), block_size=1 << 16, allow_pickle=False,
                      bulk=bulk, book=book)  # type: ignore[arg-type]
    return inbound, arrivals


def test_a_cached_split_header_whose_payload_lands_at_once_is_delivered_in_the_call() -> None:
    bulk = _NowBulk()
    inbound, arrivals = _now_inbound(bulk)
    head = _split_head(1 << 16)
    inbound.on_data(1, memoryview(head))   # first: checked and kept, the general path
    inbound.on_data(1, memoryview(head))   # again: the cached header's receive, delivered at once
    assert bulk.now == [(1, 1, 1 << 16)] and bulk.tracked == []
    assert [g[:4] for g in arrivals.got] == [("message", 1, (2,), 9), ("message", 1, (2,), 2)]
    s = inbound._sources[1]
    assert not s.queue and not s.announced and s.bulk_seq == 2


def test_a_cached_split_header_still_landing_holds_the_next_messages_of_its_host() -> None:
    from aiopdbp.wire.mesp import L1, MsgType

    bulk = _NowBulk(hold=True)
    inbound, arrivals = _now_inbound(bulk)
    head = _split_head(1 << 16)
    inbound.on_data(1, memoryview(head))
    inbound.on_data(1, memoryview(head))
    shorts = L1.pack(1, int(MsgType.BPS), 1, 8) + bytes(8)   # (its records are the arrivals' to check)
    inbound.on_data(1, memoryview(shorts))            # behind the payload still landing
    assert [g[0] for g in arrivals.got] == ["message"] and len(bulk.tracked) == 1
    tag, buf, done = bulk.tracked[0]
    assert tag == 1 and inbound._sources[1].announced
    done(buf)                                         # it lands: then the shorts behind it
    assert [g[:4] for g in arrivals.got] == [("message", 1, (2,), 9), ("message", 1, (2,), 2), ("shorts", 1)]
    assert not inbound._sources[1].queue and not inbound._sources[1].announced


def test_a_cached_split_header_beyond_the_credit_granted_posts_no_receive() -> None:
    from aiopdbp.errors import ProtocolError
    from aiopdbp.hosts.gate import CreditBook
    from aiopdbp.wire.message import CREDIT_OVERHEAD

    book = CreditBook(1 << 20)
    failed: list[tuple[int, BaseException]] = []
    bulk = _NowBulk()
    inbound, arrivals = _now_inbound(bulk, book, failed)
    head = _split_head(600 << 10)
    inbound.on_data(1, memoryview(head))
    book.delivered(1, 2, (600 << 10) + CREDIT_OVERHEAD)   # delivered, not granted back yet
    inbound.on_data(1, memoryview(head))
    assert bulk.now == [] and len(arrivals.got) == 1
    assert len(failed) == 1 and isinstance(failed[0][1], ProtocolError)
    assert "beyond the credit granted" in str(failed[0][1])
