"""Tests of the sans-I/O CDU/MESP codec (aiopdbp.wire.codec).

The fuzz tests decode with allow_pickle=False: the "ProtocolError and nothing
else" guarantee is about frame structure.  An unpickler fed corrupt data can
crash the interpreter (a mutated numpy pickle segfaulted CPython 3.11 while
this suite was written), which is why pickling is opt-in for trusted peers.
"""

from __future__ import annotations

import pickle
import struct
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

from aiopdbp.wire.codec import Decoder, decode, encode_block, encode_cdu, encode_control

from aiopdbp.wire.mesp import ALIGN, CDU, CONTROL_SCHEMAS, VERSION, Control, Kind, Limits, MsgType, StreamOp, frame_size, peek_header

from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.wire.shorts import encode_shorts
from aiopdbp.errors import ProtocolError

# A hang bound, not a speed limit: the property tests below run 60-300
# examples each, CPU-bound, 15-50 s apiece on a 2-core machine at load 25-30
# (where three of them passed pytest's default 60 s).
pytestmark = pytest.mark.timeout(300)

FAST = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

L1 = struct.Struct("<BBHI")
REC = struct.Struct("<QIIIIIBBBHHQ")


# ------------------------------------------------------------------ helpers


def join(parts: list[Any]) -> bytes:
    return b"".join(parts)


def frame_of(cdu: CDU, **kw: Any) -> bytes:
    return join(encode_cdu(cdu, **kw))


def decode_one(buf: Any, **kw: Any) -> Any:
    """The single item a frame decodes to (typed Any: CDU or Control)."""
    [item] = decode(buf, **kw)
    return item


def decode_or_none(buf: Any, **kw: Any) -> list[Any] | None:
    """decode(), where ProtocolError is fine and anything else fails the test."""
    try:
        return decode(buf, **kw)
    except ProtocolError:
        return None


def same_array(a: Any, b: Any) -> bool:
    # Raw bytes compare exactly, NaN and NaT included.
    return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
            and np.ascontiguousarray(a).tobytes() == b.tobytes())


def assert_same_cdu(sent: CDU, got: Any, check_data: bool = True) -> None:
    assert isinstance(got, CDU)
    for name in ("kind", "source_p", "com", "id", "sno", "segno", "source_n", "op"):
        assert getattr(got, name) == getattr(sent, name), name
    assert type(got.kind) is Kind and type(got.op) is StreamOp
    assert got.dest_ps == tuple(sent.dest_ps) and got.dest_ns == tuple(sent.dest_ns)
    data = sent.data
    if not check_data:
        return
    if data is None:
        assert got.data is None
    elif isinstance(data, np.ndarray) and data.dtype.kind != "O":
        assert same_array(data, got.data)
    elif isinstance(data, (bytes, bytearray, memoryview)):
        assert isinstance(got.data, memoryview)
        assert got.data.tobytes() == memoryview(data).tobytes()
    else:
        assert got.data == data


# --------------------------------------------------------------- strategies

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
dest_sets = st.lists(u32, max_size=8, unique=True).map(tuple)
kind_ops = st.one_of(
    st.tuples(st.just(Kind.STREAM), st.sampled_from(StreamOp)),
    st.tuples(st.sampled_from([Kind.COMMAND, Kind.SHORT]), st.just(StreamOp.SEGMENT)),
)
bytes_like = st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=300).map(bytearray),
    st.binary(max_size=300).map(lambda b: memoryview(b)),
    st.binary(max_size=300).map(lambda b: memoryview(bytearray(b))[::2]),  # strided
)
wire_dtypes = st.one_of(
    npst.scalar_dtypes(),
    npst.integer_dtypes(endianness="?"),
    npst.floating_dtypes(endianness="?"),
    npst.complex_number_dtypes(endianness="?"),
    npst.byte_string_dtypes(max_len=8),
    npst.unicode_string_dtypes(max_len=4),
)
arrays = npst.arrays(wire_dtypes, npst.array_shapes(min_dims=0, max_dims=4, min_side=0,
                                                   max_side=5))
noncontiguous = arrays.filter(lambda a: a.ndim > 0).map(lambda a: a[::-1].T[..., ::2])
texts = st.text(st.characters(codec="utf-8"), max_size=20)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                   st.floats(allow_nan=False), texts, st.binary(max_size=20))
plain_objects = st.recursive(
    leaves, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(texts, kids, max_size=4),
    max_leaves=12)
pickled_objects = st.one_of(
    plain_objects,
    st.tuples(plain_objects, arrays).map(lambda t: {"meta": t[0], "array": t[1]}),
)


@st.composite
def cdus(draw: st.DrawFn, data: st.SearchStrategy[Any] | None = None) -> CDU:
    kind, op = draw(kind_ops)
    payload = draw(data if data is not None else st.one_of(st.none(), bytes_like, arrays))
    return CDU(kind, draw(u32), draw(dest_sets), payload, com=draw(u32), id=draw(u64),
               sno=draw(u32), segno=draw(u32), source_n=draw(u32), dest_ns=draw(dest_sets),
               op=op)


_FIELD = {int: st.integers(-2**63, 2**64 - 1), str: texts, bool: st.booleans(),
          list: st.lists(leaves, max_size=5), bytes: st.binary(max_size=64)}


@st.composite
def controls(draw: st.DrawFn) -> Control:
    mtype = draw(st.sampled_from(sorted(CONTROL_SCHEMAS)))
    body: dict[str, Any] = draw(st.dictionaries(texts, leaves, max_size=3))
    for key, typ in CONTROL_SCHEMAS[mtype].items():
        body[key] = draw(_FIELD[typ])  # type: ignore[index]
    if mtype == MsgType.HINFO:
        body["hosts"] = draw(st.lists(st.tuples(u32, texts, texts, u32).map(list), max_size=4))
    return Control(mtype, body)


def sample_frames() -> list[bytes]:
    """One small valid frame of each shape, for mutation and truncation."""
    base = dict(com=5, id=7, sno=1, segno=2, source_n=3, dest_ns=(4,))
    return [
        frame_of(CDU(Kind.SHORT, 1, (2, 3), b"hello", **base)),  # type: ignore[arg-type]
        frame_of(CDU(Kind.COMMAND, 1, (2,), None)),
        frame_of(CDU(Kind.STREAM, 1, (2,), np.arange(6, dtype="<i4").reshape(2, 3),
                     op=StreamOp.END)),
        frame_of(CDU(Kind.SHORT, 1, (2,), {"x": np.arange(3.0)}), allow_pickle=True),
        join(encode_block([CDU(Kind.SHORT, 1, (2,), b"ab"), CDU(Kind.COMMAND, 9, (8, 7), None)])),
        encode_control(Control(MsgType.REG, {"name": "gp", "ptype": 1, "node": 0, "req": 3,
                                             "pipe": -1})),
        encode_shorts([(2, 1, Kind.SHORT, 5, b"hi"), (3, 1, Kind.COMMAND, 0, None)]),
    ]


# ---------------------------------------------------------------- round trip


@FAST
@given(cdus(), st.sampled_from([MsgType.REMOTE, MsgType.UDATA, MsgType.LOCAL]))
def test_roundtrip_cdu_preserves_every_field(cdu: CDU, mtype: MsgType) -> None:
    frame = frame_of(cdu, msgtype=mtype)
    assert peek_header(frame) == (mtype, len(frame) - 8)
    got = decode_one(frame)
    assert_same_cdu(cdu, got)


@FAST
@given(cdus(bytes_like))
def test_roundtrip_bytes_like_payload_arrives_as_memoryview(cdu: CDU) -> None:
    got = decode_one(frame_of(cdu))
    assert_same_cdu(cdu, got)


@FAST
@given(cdus(st.one_of(arrays, noncontiguous)))
def test_roundtrip_ndarray_payload_keeps_dtype_shape_and_bytes(cdu: CDU) -> None:
    got = decode_one(bytearray(frame_of(cdu)))
    assert_same_cdu(cdu, got)


@FAST
@given(cdus(pickled_objects))
def test_roundtrip_pickled_object_with_opt_in(cdu: CDU) -> None:
    frame = frame_of(cdu, allow_pickle=True)
    got = decode_one(frame, allow_pickle=True)
    if isinstance(cdu.data, dict) and "array" in cdu.data:
        # Compare with what pickle itself makes of the array (it may, e.g.,
        # normalise the byte order of a 0-d datetime): the codec adds nothing.
        expected = pickle.loads(pickle.dumps(cdu.data["array"], protocol=5))
        assert same_array(expected, got.data["array"])
        assert got.data["meta"] == cdu.data["meta"]
        assert_same_cdu(cdu, got, check_data=False)
    else:
        assert_same_cdu(cdu, got)


@SLOW
@given(st.lists(cdus(st.one_of(st.none(), bytes_like, arrays,
                               st.binary(min_size=9000, max_size=9000))),
                min_size=1, max_size=40))
def test_roundtrip_block_of_many_cdus(batch: list[CDU]) -> None:
    parts = encode_block(batch)
    frame = join(parts)
    assert frame_size(parts) == len(frame)
    assert peek_header(frame) == (MsgType.BP, len(frame) - 8)
    got = decode(frame)
    assert len(got) == len(batch)
    for sent, back in zip(batch, got):
        assert_same_cdu(sent, back)


@FAST
@given(controls())
def test_roundtrip_control_every_type(msg: Control) -> None:
    assert decode(encode_control(msg)) == [msg]


@SLOW
@given(st.lists(st.one_of(cdus().map(frame_of), controls().map(encode_control)),
                min_size=1, max_size=6),
       st.lists(st.integers(1, 97), min_size=1, max_size=50))
def test_decoder_random_chunking_yields_frames_in_order(frames: list[bytes],
                                                       sizes: list[int]) -> None:
    stream = b"".join(frames)
    dec = Decoder()
    got: list[Any] = []
    pos = i = 0
    while pos < len(stream):
        step = sizes[i % len(sizes)]
        got += dec.feed(stream[pos:pos + step])
        pos, i = pos + step, i + 1
        assert dec.pending <= max(len(f) for f in frames)
    assert dec.pending == 0
    assert len(got) == len(frames)
    for frame, item in zip(frames, got):
        expected = decode_one(frame)
        if isinstance(expected, Control):
            assert item == expected
        else:
            assert_same_cdu(expected, item)


def test_roundtrip_object_dtype_array_with_opt_in() -> None:
    arr = np.array([{"a": 1}, None, "x"], dtype=object)
    got = decode_one(frame_of(CDU(Kind.SHORT, 1, (2,), arr), allow_pickle=True),
                   allow_pickle=True)
    assert got.data.dtype == object and list(got.data) == list(arr)


def test_roundtrip_numpy_scalar_arrives_as_0d_array() -> None:
    got = decode_one(frame_of(CDU(Kind.SHORT, 1, (2,), np.float32(1.5))))
    assert got.data.shape == () and got.data.dtype == np.float32 and got.data == 1.5


def test_roundtrip_multidimensional_memoryview_flattens_to_bytes() -> None:
    src = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = decode_one(frame_of(CDU(Kind.SHORT, 1, (2,), src.data)))
    assert got.data.tobytes() == src.tobytes()


# ------------------------------------------------------------------ zero copy


def test_decode_bytes_from_bytearray_shares_memory() -> None:
    buf = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), b"abcdef")))
    got = decode_one(buf)
    buf[-6:] = b"XYZXYZ"
    assert got.data.tobytes() == b"XYZXYZ"


def test_decode_ndarray_from_bytearray_is_aligned_view() -> None:
    buf = bytearray(frame_of(CDU(Kind.STREAM, 1, (2, 3, 4), np.arange(10.0))))
    got = decode_one(buf)
    assert np.shares_memory(got.data, np.frombuffer(buf, np.uint8))
    assert got.data.flags.aligned and got.data.flags.writeable


def test_decode_pickled_array_uses_out_of_band_view() -> None:
    buf = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), [np.arange(100.0)]), allow_pickle=True))
    got = decode_one(buf, allow_pickle=True)
    assert np.shares_memory(got.data[0], np.frombuffer(buf, np.uint8))
    assert got.data[0].ctypes.data % ALIGN == np.frombuffer(buf, np.uint8).ctypes.data % ALIGN


def test_encode_contiguous_ndarray_payload_is_zero_copy() -> None:
    arr = np.arange(100, dtype=np.int64)
    parts = encode_cdu(CDU(Kind.STREAM, 1, (2,), arr))
    assert np.shares_memory(np.frombuffer(parts[-1], np.uint8), arr)


def test_encode_block_coalesces_small_payloads_into_one_buffer() -> None:
    parts = encode_block([CDU(Kind.SHORT, 1, (2,), b"x" * 64) for _ in range(100)])
    assert len(parts) == 1


def test_encode_block_keeps_large_payload_zero_copy() -> None:
    big = np.zeros(1 << 16, np.uint8)
    parts = encode_block([CDU(Kind.SHORT, 1, (2,), b"a"), CDU(Kind.STREAM, 1, (2,), big),
                          CDU(Kind.SHORT, 1, (2,), b"b")])
    assert any(np.shares_memory(np.frombuffer(p, np.uint8), big) for p in parts)
    assert len(decode(join(parts))) == 3


# ---------------------------------------------------------------------- fuzz


@FAST
@given(st.binary(max_size=200))
def test_decode_garbage_raises_only_protocol_error(garbage: bytes) -> None:
    decode_or_none(garbage)


@FAST
@given(st.sampled_from(list(MsgType)), st.integers(0, 3), st.binary(max_size=300))
def test_decode_garbage_body_behind_valid_header_raises_only_protocol_error(
        mtype: MsgType, count: int, body: bytes) -> None:
    decode_or_none(L1.pack(VERSION, mtype, count, len(body)) + body)


@FAST
@given(st.binary(max_size=400), st.lists(st.integers(1, 64), min_size=1, max_size=20))
def test_decoder_garbage_in_random_chunks_raises_only_protocol_error(
        garbage: bytes, sizes: list[int]) -> None:
    dec = Decoder()
    pos = i = 0
    try:
        while pos < len(garbage):
            dec.feed(garbage[pos:pos + sizes[i % len(sizes)]])
            pos, i = pos + sizes[i % len(sizes)], i + 1
    except ProtocolError:
        pass


@FAST
@given(st.data())
def test_decode_mutated_frame_raises_protocol_error_or_decodes(data: st.DataObject) -> None:
    frame = bytearray(data.draw(st.sampled_from(sample_frames())))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(0, 255)),
                               min_size=1, max_size=4))
    for pos, value in flips:
        frame[pos] = value
    decode_or_none(bytes(frame))
    dec = Decoder()
    try:
        dec.feed(frame[:7])
        dec.feed(frame[7:])
    except ProtocolError:
        pass


@SLOW
@given(cdus(st.one_of(st.none(), bytes_like, arrays)), st.data())
def test_decode_mutated_random_frame_raises_protocol_error_or_decodes(
        cdu: CDU, data: st.DataObject) -> None:
    frame = bytearray(frame_of(cdu))
    pos = data.draw(st.integers(0, len(frame) - 1))
    frame[pos] = data.draw(st.integers(0, 255))
    decode_or_none(frame)


@pytest.mark.parametrize("index", range(6))
def test_decode_truncated_at_every_position_raises_protocol_error(index: int) -> None:
    frame = sample_frames()[index]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode(frame[:cut], allow_pickle=True)


@pytest.mark.parametrize("index", range(6))
@pytest.mark.parametrize("extra", [b"\x00", b"garbage", bytes(64)])
def test_decode_appended_bytes_raises_protocol_error(index: int, extra: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(sample_frames()[index] + extra, allow_pickle=True)


# ------------------------------------------------------------ specific cases


def test_decode_wrong_version_raises() -> None:
    frame = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), b"x")))
    frame[0] = VERSION + 1
    with pytest.raises(ProtocolError, match="version"):
        decode(frame)


def test_decode_unknown_msgtype_raises() -> None:
    frame = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), b"x")))
    frame[1] = 0x7F
    with pytest.raises(ProtocolError, match="unknown message type"):
        decode(frame)


def test_decode_record_count_mismatch_raises() -> None:
    frame = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), b"x")))
    frame[2] = 2  # two records announced on a REMOTE frame
    with pytest.raises(ProtocolError, match="count"):
        decode(frame)


def test_decode_oversized_body_len_raises_before_reading_body() -> None:
    with pytest.raises(ProtocolError, match="max_frame"):
        decode(L1.pack(VERSION, MsgType.REMOTE, 1, 2**32 - 1))
    with pytest.raises(ProtocolError, match="max_frame"):
        peek_header(L1.pack(VERSION, MsgType.BP, 3, 101), limits=Limits(max_frame=100))


def test_decoder_oversized_header_raises_immediately() -> None:
    dec = Decoder(limits=Limits(max_frame=1000))
    with pytest.raises(ProtocolError, match="max_frame"):
        dec.feed(L1.pack(VERSION, MsgType.REMOTE, 1, 1001))


def test_decoder_allocates_only_what_arrives() -> None:
    dec = Decoder()
    tracemalloc.start()
    try:
        dec.feed(L1.pack(VERSION, MsgType.REMOTE, 1, 1 << 30))  # max_frame exactly
        dec.feed(bytes(1000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dec.pending == 1008
    assert peak < 1 << 20


def test_decode_control_over_max_control_raises() -> None:
    frame = encode_control(Control(MsgType.ERROR, {"kind": "failed", "rank": 0, "signal": 0,
                                                   "message": "x" * 200, "gp": ""}))
    with pytest.raises(ProtocolError, match="control body"):
        decode(frame, limits=Limits(max_control=100))


def test_decode_truncated_frame_raises() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), b"payload"))
    with pytest.raises(ProtocolError):
        decode(frame[:-1])


def test_decode_trailing_garbage_raises() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), b"payload"))
    with pytest.raises(ProtocolError):
        decode(frame + b"\x00")


def test_decode_trailing_bytes_inside_body_raises() -> None:
    frame = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), b"payload")) + b"junk")
    L1.pack_into(frame, 0, VERSION, MsgType.REMOTE, 1, len(frame) - 8)
    with pytest.raises(ProtocolError, match="trailing"):
        decode(frame)


def test_decode_pickle_refused_without_opt_in() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), {"a": 1}), allow_pickle=True)
    with pytest.raises(ProtocolError, match="pickle payload refused"):
        decode(frame)


def test_decode_pickle_segment_past_frame_raises() -> None:
    frame = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), "x" * 40), allow_pickle=True))
    # Level 3 meta follows the 43-byte record header and one u32 destination.
    meta = 8 + REC.size + 4
    assert struct.unpack_from("<H", frame, meta) == (0,)
    struct.pack_into("<Q", frame, meta + 2, 2**63)
    with pytest.raises(ProtocolError, match="past the frame"):
        decode(frame, allow_pickle=True)


def test_decode_bad_pickle_raises_protocol_error() -> None:
    frame = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), "a string"), allow_pickle=True))
    frame[-3:] = b"\xff\xfe\xfd"
    with pytest.raises(ProtocolError, match="pickle"):
        decode(frame, allow_pickle=True)


def _ndarray_frame(dtype_str: bytes, shape: tuple[int, ...], data: bytes) -> bytes:
    """Hand-built REMOTE frame whose NDARRAY meta says anything we like."""
    meta = bytes([len(dtype_str)]) + dtype_str + struct.pack(f"<B{len(shape)}Q", len(shape),
                                                             *shape)
    head = REC.pack(0, 0, 0, 0, 1, 0, Kind.SHORT, 0, 2, 0, 1, len(data)) + struct.pack("<I", 2)
    off = 8 + len(head) + len(meta)
    meta += bytes(-off % ALIGN)
    body = head + meta + data
    return L1.pack(VERSION, MsgType.REMOTE, 1, len(body)) + body


def test_hand_built_ndarray_frame_decodes() -> None:
    got = decode_one(_ndarray_frame(b"<i2", (2,), b"\x01\x00\x02\x00"))
    assert got.data.tolist() == [1, 2]


@pytest.mark.parametrize("dtype_str", [b"|O", b"<i4,<i4", b"(2,)<i4", b"|V0", b"nonsense",
                                       b"\xff\xfe", b""])
def test_decode_refused_dtype_raises(dtype_str: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(_ndarray_frame(dtype_str, (1,), bytes(8)))


def test_decode_shape_not_matching_payload_raises() -> None:
    with pytest.raises(ProtocolError, match="does not match"):
        decode(_ndarray_frame(b"<i4", (3,), bytes(8)))


def test_decode_empty_array_with_absurd_dims_raises() -> None:
    with pytest.raises(ProtocolError):
        decode(_ndarray_frame(b"<i4", (0, 2**64 - 1, 2**64 - 1), b""))


def test_decode_ndim_over_limit_raises() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), np.zeros((1,) * 5)))
    with pytest.raises(ProtocolError, match="dimensions"):
        decode(frame, limits=Limits(max_ndim=4))


def test_decode_too_many_destinations_raises() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, tuple(range(10)), b"x"))
    with pytest.raises(ProtocolError, match="destinations"):
        decode(frame, limits=Limits(max_dests=9))


def test_decode_too_many_pickle_buffers_raises() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), [np.zeros(4) for _ in range(3)]),
                     allow_pickle=True)
    with pytest.raises(ProtocolError, match="pickle buffers"):
        decode(frame, allow_pickle=True, limits=Limits(max_pickle_buffers=2))


def test_decode_op_on_non_stream_kind_raises() -> None:
    frame = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), b"x")))
    frame[8 + 29] = StreamOp.END  # the op byte of the record header
    with pytest.raises(ProtocolError, match="kind/op"):
        decode(frame)


def test_decode_non_buffer_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode(12345)  # type: ignore[arg-type]


@pytest.mark.parametrize("body", [
    {"name": "gp", "ptype": 1, "node": 0},  # missing key
    {"name": "gp", "ptype": "1", "node": 0, "req": 3},  # wrong type
    {"name": "gp", "ptype": True, "node": 0, "req": 3},  # bool is not an int here
    [1, 2, 3],  # not a map
])
def test_decode_control_schema_violation_raises(body: Any) -> None:
    import msgpack

    raw = msgpack.packb(body)
    with pytest.raises(ProtocolError):
        decode(L1.pack(VERSION, MsgType.REG, 0, len(raw)) + raw)


def test_decode_control_bad_msgpack_raises() -> None:
    raw = b"\xc1\xc1"  # 0xc1 is never used in msgpack
    with pytest.raises(ProtocolError):
        decode(L1.pack(VERSION, MsgType.BYE, 0, len(raw)) + raw)


def test_decode_control_extra_keys_allowed() -> None:
    msg = Control(MsgType.BYE, {"sent": 10, "note": "extra"})
    assert decode(encode_control(msg)) == [msg]


def test_encode_control_accepts_tuples_for_list_fields() -> None:
    frame = encode_control(Control(MsgType.HINFO, {"hosts": ((0, "n0", "10.0.0.1", 1),),
                                                   "gp_window": 1}))
    got = decode_one(frame)
    assert got.body["hosts"] == [[0, "n0", "10.0.0.1", 1]]


def test_encode_control_schema_violation_raises_value_error() -> None:
    with pytest.raises(ValueError):
        encode_control(Control(MsgType.CREDIT, {"bytes": 1}))


def test_encode_control_data_type_raises_value_error() -> None:
    with pytest.raises(ValueError):
        encode_control(Control(MsgType.REMOTE, {}))


def test_encode_unpicklable_without_opt_in_raises_type_error() -> None:
    with pytest.raises(TypeError, match="allow_pickle"):
        encode_cdu(CDU(Kind.SHORT, 1, (2,), {"a": 1}))


def test_encode_object_dtype_without_opt_in_raises_type_error() -> None:
    with pytest.raises(TypeError, match="allow_pickle"):
        encode_cdu(CDU(Kind.SHORT, 1, (2,), np.array([None], dtype=object)))


def test_encode_unpicklable_with_opt_in_raises_type_error() -> None:
    with pytest.raises(TypeError, match="cannot pickle"):
        encode_cdu(CDU(Kind.SHORT, 1, (2,), lambda: None), allow_pickle=True)


@pytest.mark.parametrize("field, value", [("id", 2**64), ("sno", -1), ("com", 2**32),
                                          ("dest_ps", (2**32,)), ("source_p", "1")])
def test_encode_field_out_of_range_raises_value_error(field: str, value: Any) -> None:
    cdu = CDU(Kind.SHORT, 1, (2,), b"x")
    setattr(cdu, field, value)
    with pytest.raises(ValueError):
        encode_cdu(cdu)
    with pytest.raises(ValueError):
        encode_block([cdu])


def test_encode_op_on_non_stream_raises_value_error() -> None:
    with pytest.raises(ValueError, match="STREAM"):
        encode_cdu(CDU(Kind.SHORT, 1, (2,), b"x", op=StreamOp.OPEN))


def test_encode_cdu_with_bp_msgtype_raises_value_error() -> None:
    with pytest.raises(ValueError):
        encode_cdu(CDU(Kind.SHORT, 1, (2,), b"x"), MsgType.BP)


def test_encode_over_max_frame_raises_value_error() -> None:
    with pytest.raises(ValueError, match="max_frame"):
        encode_cdu(CDU(Kind.SHORT, 1, (2,), bytes(200)), limits=Limits(max_frame=100))


def test_encode_too_many_destinations_raises_value_error() -> None:
    with pytest.raises(ValueError, match="destinations"):
        encode_cdu(CDU(Kind.SHORT, 1, tuple(range(5)), b""), limits=Limits(max_dests=4))


def test_encode_block_empty_raises_value_error() -> None:
    with pytest.raises(ValueError):
        encode_block([])


@pytest.mark.parametrize("kw", [{"max_frame": 2**32}, {"max_dests": 2**16}, {"max_ndim": 65},
                                {"max_control": -1}])
def test_limits_beyond_wire_fields_raise_value_error(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Limits(**kw)


def test_peek_header_short_buffer_raises() -> None:
    with pytest.raises(ProtocolError):
        peek_header(b"\x01\x12")


def test_decoder_frame_split_across_chunks() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), b"0123456789"))
    dec = Decoder()
    assert dec.feed(frame[:3]) == [] and dec.pending == 3
    assert dec.feed(frame[3:20]) == [] and dec.pending == 20
    got: Any = dec.feed(frame[20:])[0]
    assert got.data.tobytes() == b"0123456789" and dec.pending == 0


def test_decoder_multiple_frames_in_one_chunk() -> None:
    frames = [frame_of(CDU(Kind.SHORT, 1, (2,), bytes([i]) * i)) for i in range(5)]
    bye = encode_control(Control(MsgType.BYE, {"sent": 5}))
    got: list[Any] = Decoder().feed(b"".join(frames) + bye)
    assert [g.data.tobytes() for g in got[:5]] == [bytes([i]) * i for i in range(5)]
    assert got[5] == Control(MsgType.BYE, {"sent": 5})


def test_decoder_payload_survives_reuse_of_chunk_buffer() -> None:
    chunk = bytearray(frame_of(CDU(Kind.SHORT, 1, (2,), b"keep")))
    got: Any = Decoder().feed(chunk)[0]
    chunk[:] = bytes(len(chunk))
    assert got.data.tobytes() == b"keep"


def test_decoder_after_error_keeps_raising() -> None:
    dec = Decoder()
    with pytest.raises(ProtocolError):
        dec.feed(b"\xff" * 8)
    with pytest.raises(ProtocolError, match="broken"):
        dec.feed(frame_of(CDU(Kind.SHORT, 1, (2,), b"x")))


def test_decoder_refuses_pickle_without_opt_in() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), {"a": 1}), allow_pickle=True)
    with pytest.raises(ProtocolError, match="refused"):
        Decoder().feed(frame)
    got: Any = Decoder(allow_pickle=True).feed(frame)[0]
    assert got.data == {"a": 1}


def test_pickle_payload_is_protocol_5() -> None:
    frame = frame_of(CDU(Kind.SHORT, 1, (2,), {"a": 1}), allow_pickle=True)
    assert pickle.PROTO + bytes([5]) in frame


# ---------------------------------------------------------------- fast path
@pytest.mark.parametrize("data", [b"", b"x" * 64, None])
def test_encode_small_into_round_trips_in_a_bp_block(data: bytes | None) -> None:
    from aiopdbp.wire.codec import bp_header, encode_small_into

    cdu = CDU(Kind.SHORT, 7, (9,), data, 5, 11, 0, 0, 2)
    buf = bytearray(512)
    n1 = encode_small_into(memoryview(buf), 8, cdu)
    n2 = encode_small_into(memoryview(buf), 8 + n1, cdu)
    buf[:8] = bp_header(2, n1 + n2)
    out = decode(bytes(buf[:8 + n1 + n2]))
    assert [(c.source_p, c.dest_ps, c.com, c.id, c.source_n) for c in out] == [(7, (9,), 5, 11, 2)] * 2
    assert all((bytes(c.data) if c.data is not None else None) == data for c in out)


def test_encode_small_into_declines_other_shapes_and_reports_no_room() -> None:
    from aiopdbp.wire.codec import encode_small_into

    buf = memoryview(bytearray(64))
    assert encode_small_into(buf, 0, CDU(Kind.SHORT, 1, (2, 3), b"x")) == 0  # multicast
    assert encode_small_into(buf, 0, CDU(Kind.SHORT, 1, (2,), np.zeros(2))) == 0  # array
    assert encode_small_into(buf, 0, CDU(Kind.SHORT, 1, (2,), b"x" * 100)) == -1  # too big


# ------------------------------------------------------- short records (BPS)
from aiopdbp.wire.shorts import SHORT_MAX, decode_shorts# noqa: E402
from aiopdbp.wire.message import Message  # noqa: E402

short_records = st.lists(
    st.tuples(st.integers(1, 2**32 - 1), st.integers(1, 2**32 - 1),
              st.sampled_from([Kind.SHORT, Kind.COMMAND]), st.integers(0, 2**32 - 1),
              st.one_of(st.none(), st.binary(max_size=300))),
    min_size=1, max_size=40)


@FAST
@given(short_records)
def test_short_records_round_trip_in_bulk(records: list[Any]) -> None:
    frame = encode_shorts(records)
    runs = decode_shorts(frame)
    # runs: consecutive records for one destination together, payload bytes counted
    assert [(d, s, k, c, p) for d, run, _ in runs for s, k, c, p, _ in run] == records
    assert all(runs[i][0] != runs[i + 1][0] for i in range(len(runs) - 1))
    assert [n for _, _, n in runs] == [sum(len(r[3] or b"") for r in run) for _, run, _ in runs]
    names = {s: f"gp{s}" for _, s, _, _, _ in records}
    named = decode_shorts(frame, names=names, make=Message)
    assert [(m.source, m.source_pid, m.kind, m.com, m.data) for _, run, _ in named for m in run] == \
        [(f"gp{s}", s, k, c, p) for _, s, k, c, p in records]
    assert [(c.dest_ps, c.source_p, c.kind, c.com, None if c.data is None else bytes(c.data))
            for c in decode(frame)] == [((d,), s, k, c, p) for d, s, k, c, p in records]


@FAST
@given(short_records, st.data())
def test_mutated_short_block_decodes_or_raises_protocol_error(records: list[Any], data: st.DataObject) -> None:
    _decode_mutated_shorts(records, data)


def _decode_mutated_shorts(records: list[Any], data: st.DataObject, stream: Any = None) -> None:
    """Encode ``records`` as a BPS frame, change up to 4 bytes and cut it:
    both decoders give records or ProtocolError, nothing else (``stream``:
    the bulk decoder's callback for short streams)."""
    frame = bytearray(encode_shorts(records))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    for decoder in (lambda b: decode_shorts(b, stream=stream), decode):
        try:
            decoder(bytes(frame[:cut]))
        except ProtocolError:
            pass


short_arrays = npst.arrays(
    dtype=st.one_of(npst.integer_dtypes(), npst.floating_dtypes(), npst.boolean_dtypes(),
                    npst.complex_number_dtypes(), npst.datetime64_dtypes()),
    shape=npst.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
array_records = st.lists(
    st.tuples(st.integers(1, 2**32 - 1), st.integers(1, 2**32 - 1),
              st.sampled_from([Kind.SHORT, Kind.COMMAND]), st.integers(0, 2**32 - 1),
              st.one_of(st.none(), st.binary(max_size=40), short_arrays)),
    min_size=1, max_size=20)


@FAST
@given(array_records)
def test_short_records_carry_arrays_with_dtype_shape_and_credit(records: list[Any]) -> None:
    runs = decode_shorts(encode_shorts(records))
    got = [rec for _, run, _ in runs for rec in run]
    assert len(got) == len(records)
    for (_, s, k, c, p), (gs, gk, gc, gp, _) in zip(records, got):
        assert (gs, gk, gc) == (s, k, c)
        if isinstance(p, np.ndarray):
            assert type(gp) is np.ndarray and gp.dtype == p.dtype and gp.shape == p.shape
            assert gp.tobytes() == p.tobytes() and gp.flags.writeable and gp.flags.owndata
        else:
            assert gp == p
    # a run's credit counts an array's data bytes, as the sender's credit_cost does
    assert [n for _, _, n in runs] == [sum(0 if r[3] is None else len(r[3]) if type(r[3]) is bytes
                                           else r[3].nbytes for r in run) for _, run, _ in runs]


@FAST
@given(array_records, st.data())
def test_mutated_short_array_block_decodes_or_raises_protocol_error(records: list[Any],
                                                                   data: st.DataObject) -> None:
    _decode_mutated_shorts(records, data)


def test_short_record_refuses_what_it_cannot_carry() -> None:
    with pytest.raises(ValueError):
        encode_shorts([(1, 2, Kind.STREAM, 0, b"x")])
    with pytest.raises(ValueError):
        encode_shorts([(1, 2, Kind.SHORT, 0, bytes(SHORT_MAX + 1))])
    with pytest.raises(ValueError):
        encode_shorts([(2**32, 2, Kind.SHORT, 0, b"")])


@pytest.mark.parametrize("arr", [np.arange(4, dtype=np.int16), np.arange(6, dtype=">f4").reshape(2, 3)[:, ::2],
                                 np.array([1, 2], dtype="M8[s]"), np.float64(2.5),
                                 np.arange(4, dtype=np.int8), np.array([True, False])])
def test_ndarray_sent_twice_decodes_the_same_both_times(arr: Any) -> None:
    # the second encode/decode takes the cached meta of this dtype and shape
    for _ in range(2):
        parts = encode_cdu(CDU(Kind.SHORT, 5, (7,), arr, 0))
        assert all(memoryview(p).format == "B" for p in parts)  # blocks are filled from bytes
        frame = b"".join(bytes(p) for p in parts)
        got = decode(memoryview(frame))[0].data
        want = np.asarray(arr)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_cached_ndarray_meta_still_obeys_a_smaller_max_ndim() -> None:
    arr = np.zeros((1, 1, 1), dtype=np.uint8)
    frame = b"".join(bytes(p) for p in encode_cdu(CDU(Kind.SHORT, 5, (7,), arr, 0)))
    decode(memoryview(frame))  # cached now
    with pytest.raises(ProtocolError):
        decode(memoryview(frame), limits=Limits(max_ndim=2))


# ------------------------------------------------------------ short streams
def _opened(dest: int, src: int, source: Any, com: int, sno: int, window: int, data: Any) -> Any:
    """A decoder's stream callback: what the stream table would put in the pipe."""
    return ("stream", dest, src, source, com, sno, window, data)


def test_short_stream_record_takes_its_place_among_the_messages_of_its_run() -> None:
    arr = np.arange(6, dtype=">i4").reshape(2, 3)
    frame = encode_shorts([(5, 2, Kind.SHORT, 1, b"before"), (5, 2, Kind.STREAM, 9, (7, 16, b"seg")),
                           (5, 2, Kind.SHORT, 2, b"after"), (6, 3, Kind.STREAM, 0, (8, 4, arr))])
    runs = decode_shorts(frame, names={2: "a", 3: "b"}, make=Message, stream=_opened)
    assert [(d, n) for d, _, n in runs] == [(5, 6 + 3 + 5), (6, arr.nbytes)]  # credit: data bytes, as sent
    before, whole, after = runs[0][1]
    assert (before.data, after.data) == (b"before", b"after")
    assert whole == ("stream", 5, 2, "a", 9, 7, 16, bytearray(b"seg"))
    got = runs[1][1][0][-1]
    assert runs[1][1][0][:7] == ("stream", 6, 3, "b", 0, 8, 4)
    assert got.dtype == arr.dtype and got.shape == arr.shape and (got == arr).all() and got.flags.writeable


def test_short_stream_record_refused_by_the_callback_is_left_out_but_counted() -> None:
    # counted as its sender charged it: its bytes and a record's overhead
    # (the run's items each add one overhead where the runs are placed)
    frame = encode_shorts([(5, 2, Kind.STREAM, 0, (7, 16, b"seg")), (5, 2, Kind.SHORT, 0, b"m")])
    runs = decode_shorts(frame, make=Message, stream=lambda *a: None)
    assert [(d, [m.data for m in run], n) for d, run, n in runs] == [(5, [b"m"], 4 + CREDIT_OVERHEAD)]


def test_short_stream_record_without_a_stream_callback_is_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="no stream may come"):
        decode_shorts(encode_shorts([(5, 2, Kind.STREAM, 0, (7, 16, b"seg"))]))


def test_short_stream_record_of_no_data_is_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="short stream"):
        decode_shorts(encode_shorts([(5, 2, Kind.STREAM, 0, (7, 16, b""))]), stream=_opened)


def test_generic_decode_gives_a_short_stream_as_the_open_cdu_that_carries_it_whole() -> None:
    from aiopdbp.wire.shorts import EAGER_OPEN, ShortStream

    (cdu,) = decode(encode_shorts([(5, 2, Kind.STREAM, 3, (7, 16, b"seg"))]))
    assert cdu == ShortStream((None, Kind.STREAM, 3, bytearray(b"seg"), 2, 7, 16, 0)).cdu(5)
    assert (cdu.op, cdu.segno, cdu.sno, cdu.id, cdu.dest_ps) == (StreamOp.OPEN, EAGER_OPEN, 7, 16, (5,))


stream_records = st.lists(
    st.one_of(st.tuples(st.integers(1, 9), st.integers(1, 9), st.sampled_from([Kind.SHORT, Kind.COMMAND]),
                        st.integers(0, 9), st.one_of(st.none(), st.binary(max_size=20))),
              st.tuples(st.integers(1, 9), st.integers(1, 9), st.just(Kind.STREAM), st.integers(0, 9),
                        st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                                  st.one_of(st.binary(min_size=1, max_size=20),
                                            npst.arrays(np.int16, st.integers(1, 5)))))),
    min_size=1, max_size=12)


@FAST
@given(stream_records, st.data())
def test_mutated_short_block_with_streams_decodes_or_raises_protocol_error(records: list[Any],
                                                                          data: st.DataObject) -> None:
    _decode_mutated_shorts(records, data, _opened)


# ---------------------------- strings that decode are strings (issue 28 item 4)
_SMILE = "\U0001F600".encode("utf-32-le")            # a valid code point, marked in the frame
_BEYOND = (0x110000).to_bytes(4, "little")           # one past U+10FFFF


def _beyond_unicode(frame: bytes) -> bytes:
    assert frame.count(_SMILE) == 1
    return frame.replace(_SMILE, _BEYOND)


def test_unicode_array_beyond_u10ffff_in_a_frame_is_refused_at_decode() -> None:
    frame = _beyond_unicode(frame_of(CDU(Kind.SHORT, 1, (2,), np.array(["a\U0001F600"], dtype="<U2"))))
    with pytest.raises(ProtocolError, match="beyond U\\+10FFFF"):
        decode(frame)


def test_unicode_array_beyond_u10ffff_in_a_short_record_is_refused_at_decode() -> None:
    from aiopdbp.wire import core
    frame = _beyond_unicode(encode_shorts([(2, 1, Kind.SHORT, 0, np.array(["\U0001F600"], dtype="<U1"))]))
    with pytest.raises(ProtocolError, match="beyond U\\+10FFFF"):
        core.BlockReader().read(frame)


def test_unicode_array_beyond_u10ffff_in_a_split_payload_is_refused_at_decode() -> None:
    from aiopdbp.wire.codec import decode_split, encode_split, split_array
    head, payload = encode_split(CDU(Kind.SHORT, 1, (2,), np.array(["\U0001F600"] * 4, dtype=">U1")))
    bad = bytes(payload).replace("\U0001F600".encode("utf-32-be"), (0x110000).to_bytes(4, "big"))
    with pytest.raises(ProtocolError, match="beyond U\\+10FFFF"):
        decode_split(head, bad)
    arr = split_array(head)
    assert arr is not None
    with pytest.raises(ProtocolError, match="beyond U\\+10FFFF"):
        arr.array(bad)


def test_unicode_arrays_within_range_decode_unchanged() -> None:
    for a in (np.array(["ab", "\U0010FFFF"]), np.array("xyz"), np.array([["\ud800"]], dtype=">U1")):
        got = decode_one(frame_of(CDU(Kind.SHORT, 1, (2,), a))).data
        assert got.dtype == a.dtype and got.tolist() == a.tolist()
