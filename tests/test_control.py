"""Typed control messages (aiopdbp.wire.control): every kind round-trips through
its frame; whatever the bytes, decoding gives a message or ProtocolError."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiopdbp.wire.codec import encode_control
from aiopdbp.wire.mesp import VERSION, Control, MsgType
from aiopdbp.wire.control import (
    AAPMsg,
    APipeMsg,
    ARMsg,
    ByeMsg,
    CancelMsg,
    CarriedMsg,
    CarryMsg,
    ClosingMsg,
    CreditAskMsg,
    CreditMsg,
    CtrlMsg,
    DeadlockMsg,
    HInfoMsg,
    LastOpenMsg,
    LookupMsg,
    LostMsg,
    MBInfoMsg,
    RegMsg,
    RelayMsg,
    ReleaseMsg,
    StopAckMsg,
    StallMsg,
    StopMsg,
    StreamCreditMsg,
    StreamDoneMsg,
    StreamDonesMsg,
    TableAckMsg,
    TableMsg,
    TableReqMsg,
    decode_control,
)
from aiopdbp.errors import ProtocolError

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EXAMPLES: list[CtrlMsg] = [
    RegMsg(3, "gp-1", 1, 2, -1), RegMsg(4, "gp-2", 0, 1, 7),
    ARMsg(3, True, 11, "", ""), ARMsg(4, False, 0, "taken", "DuplicateProcessError"),
    APipeMsg(5, 11, 2), AAPMsg(5, True, 2, ""), ReleaseMsg(6, 11, True), ReleaseMsg(7, 11, False),
    CancelMsg(8, 11),
    HInfoMsg([[0, "h0", "10.0.0.1", 1, 1 << 20]], 1 << 20), MBInfoMsg([[1, "gp", 0, 0, 3]]),
    TableMsg(9, "proc_reg", ["gp", 0, 1, None]), TableReqMsg(10, "stream_bind", [1, 2, 3, 4, 5]),
    TableAckMsg(10, False, "no"), CreditMsg([(1, 4096), (2, 65536)]), CreditAskMsg([3, 7]),
    StallMsg([["a", 0, "b", 1, "credit", 31.5]], ["a"]),
    DeadlockMsg([["a", 0, "b", 1, "credit", 31.5], ["b", 1, "a", 0, "credit", 30.0]]),
    StreamDoneMsg(1, 2, True, ""), StreamDonesMsg(1, [2, 3, 5]),
    StreamDoneMsg(1, 3, False, "receiver closed the stream"), StreamCreditMsg(1, 2, 8), ByeMsg(42),
    StopMsg("failed", 1, 0, "ValueError: boom"), StopMsg("interrupted", 2, 2, ""), StopAckMsg(0),
    RelayMsg(5, 0, RegMsg(3, "gp-1", 1, 5, -1).encode()),
    LookupMsg("gp-1", 0), LookupMsg("", 11),
    CarryMsg(3, 0, "gp-1", 0, "src", 12, 3, 0, b"first", [[12, "src", 0, 4]]),
    CarryMsg(3, 5, "gp-1", 11, "src", 12, 2, 7, b"", [[12, "src", 0, None]]),
    CarriedMsg(3, True, "gp", [[5, "gp", 0, 2]]), CarriedMsg(4, False, "", []),
    LostMsg(17, 16, 32, "rank 17 (host 'vm') has not been heard of for 4.0 s"),
    ClosingMsg(5), LastOpenMsg(7),
]


def test_every_control_type_has_a_class() -> None:
    control_types = {m for m in MsgType if m < 0x10 or m >= 0x20}
    assert {type(m).TYPE for m in EXAMPLES} == control_types


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_control_message_round_trips_through_its_frame(msg: CtrlMsg) -> None:
    assert decode_control(msg.encode()) == msg


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_control_message_compares_hashes_and_prints_as_a_frozen_dataclass(msg: CtrlMsg) -> None:
    fields = msg.field_names()
    values = tuple(getattr(msg, name) for name in fields)
    assert copy.copy(msg) == msg and pickle.loads(pickle.dumps(msg)) == msg
    assert repr(msg) == f"{type(msg).__qualname__}({', '.join(f'{name}={v!r}' for name, v in zip(fields, values))})"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(msg, fields[0], values[0])
    other = next(m for m in EXAMPLES if type(m) is not type(msg))
    assert msg != other and msg != values
    try:
        hash(values)
    except TypeError:   # a list in the body: unhashable, as the dataclass was
        with pytest.raises(TypeError):
            hash(msg)
    else:
        assert hash(msg) == hash(values) == hash(copy.copy(msg))


class _Recorder:
    def __getattr__(self, name: str) -> Any:
        def record(src: int, msg: CtrlMsg) -> None:
            self.got = (name, src, msg)
        return record


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_control_message_handle_calls_its_own_handler(msg: CtrlMsg) -> None:
    rec = _Recorder()
    msg.handle(rec, 3)  # type: ignore[arg-type]
    assert rec.got == (type(msg).HANDLER, 3, msg)


@pytest.mark.parametrize("msg", [CreditMsg([(1, 0)]), StreamCreditMsg(1, 2, 0),
                                 StopMsg("paused", 1, 0, ""), LostMsg(3, 2, 0, ""), LostMsg(-1, 2, 4, ""),
                                 ClosingMsg(-1), LastOpenMsg(-2)],
                         ids=str)
def test_control_message_with_a_bad_value_is_a_protocol_error(msg: CtrlMsg) -> None:
    with pytest.raises(ProtocolError):
        decode_control(msg.encode())


def test_data_frame_on_the_control_channel_is_a_protocol_error() -> None:
    from aiopdbp.wire.mesp import Kind
    from aiopdbp.wire.shorts import encode_shorts
    with pytest.raises(ProtocolError, match="data frame"):
        decode_control(encode_shorts([(1, 2, Kind.SHORT, 0, b"x")]))


@FAST
@given(st.sampled_from(EXAMPLES), st.data())
def test_mutated_control_frame_decodes_or_raises_protocol_error(msg: CtrlMsg, data: st.DataObject) -> None:
    frame = bytearray(msg.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    try:
        got = decode_control(bytes(frame[:cut]))
    except ProtocolError:
        return
    assert isinstance(got, CtrlMsg)


@FAST
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_protocol_error(raw: bytes) -> None:
    for frame in (raw, bytes([VERSION, MsgType.BYE, 0, 0, len(raw), 0, 0, 0]) + raw):
        try:
            decode_control(frame)
        except ProtocolError:
            pass


@pytest.mark.parametrize("snos", [[], [1, "2"], [True]], ids=["empty", "str", "bool"])
def test_stream_dones_without_int_snos_is_protocol_error(snos: list[Any]) -> None:
    frame = encode_control(Control(MsgType.STREAM_DONES, {"node": 1, "snos": snos}))
    with pytest.raises(ProtocolError, match="STREAM_DONES"):
        decode_control(frame)
