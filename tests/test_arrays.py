"""Arrays by the standard protocols (aiopdbp.arrays): dtype names on the
wire, what a tensor becomes at the call, what is refused and how it arrives."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import numpy as np
import pytest

import aiopdbp
from aiopdbp import arrays
from aiopdbp.device.backend import Placement, classify
from aiopdbp.device.chunks import ArrayMeta
from aiopdbp.wire.mesp import ALIGN, DEFAULT_LIMITS
from aiopdbp.wire.payload import decode_ndarray, encode_payload


def _round_trip(data: Any) -> np.ndarray:
    _, meta, parts, n = encode_payload(data, False, DEFAULT_LIMITS)
    buf = bytearray(meta) + bytes(-len(meta) % ALIGN) + b"".join(bytes(p) for p in parts)
    arr, _ = decode_ndarray(memoryview(buf), 0, len(buf), n, DEFAULT_LIMITS)
    return arr


def test_numpy_dtypes_keep_their_wire_name() -> None:
    for s in ["<f4", ">f4", "|b1", "<c8", "<u2", "|i1", "<M8[ns]", "|S3"]:
        assert arrays.wire_name(np.dtype(s)) == np.dtype(s).str  # the wire of numpy dtypes is unchanged


def test_ml_dtypes_travel_by_name() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for name in ["bfloat16", "float8_e4m3fn", "float8_e5m2"]:
        x = np.arange(4).astype(getattr(ml_dtypes, name))
        assert arrays.wire_name(x.dtype) == name
        got = _round_trip(x)
        assert got.dtype == x.dtype and got.tobytes() == x.tobytes()


def test_without_ml_dtypes_bits_arrive_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrays, "_ml_dtype", lambda name: None)
    monkeypatch.setattr(arrays, "_parsed", {})
    monkeypatch.setattr(arrays, "_warned", set())
    dt = arrays.parse_name("bfloat16")
    got = np.frombuffer(np.arange(3, dtype=np.uint16).tobytes(), dt)
    with pytest.warns(UserWarning, match="pip install ml_dtypes"):
        out = arrays.arrival(got, "auto")
    assert out.dtype == np.uint16 and out.tolist() == [0, 1, 2]
    assert arrays.arrival(got, "auto").dtype == np.uint16  # once: no second warning (filterwarnings=error)


def test_a_bad_wire_name_is_refused() -> None:
    with pytest.raises((TypeError, ValueError)):
        arrays.parse_name("<f4;jax")
    with pytest.raises(TypeError):
        arrays.parse_name("no-such-dtype")


class _DLPackOnly:
    """A host array known only by DLPack (as JAX or TensorFlow would be)."""

    def __init__(self, arr: np.ndarray) -> None:
        self._arr = arr

    def __dlpack__(self, **kw: Any) -> Any:
        return self._arr.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._arr.__dlpack_device__()


class _FakeCuda:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_a_dlpack_host_array_is_an_ndarray_over_its_memory() -> None:
    src = np.arange(6, dtype=np.float32)
    got = arrays.host_array(_DLPackOnly(src))
    assert got is not None and np.shares_memory(got, src)


def test_a_cuda_array_interface_object_is_device_data() -> None:
    assert arrays.host_array(_FakeCuda()) is None
    assert classify(_FakeCuda()) is Placement.CUDA


def test_device_array_meta_names_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    meta = ArrayMeta(np.dtype(ml_dtypes.bfloat16), (2, 3), "C", 1 << 20)
    assert meta.to_wire()["dtype"] == "bfloat16"
    assert ArrayMeta.from_wire(meta.to_wire()) == meta
    assert ArrayMeta.from_wire(meta.to_wire()).dtype == np.dtype(ml_dtypes.bfloat16)


async def _one(data: Any, **recv: Any) -> Any:
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("b") as b:
            await a.send("b", data)
            msg = await b.recv(timeout=10, **recv)
            return msg.data


async def test_a_dlpack_object_arrives_as_numpy() -> None:
    got = await _one(_DLPackOnly(np.arange(5, dtype=np.int16)))
    assert type(got) is np.ndarray and got.dtype == np.int16 and got.tolist() == [0, 1, 2, 3, 4]


async def test_arrays_option_is_checked() -> None:
    with pytest.raises(ValueError, match="arrays"):
        aiopdbp.Node(arrays="jax")
    with pytest.raises(ValueError, match="arrays"):
        await _one(b"x", arrays="cupy")


# ------------------------------------------------------------------ torch


def _torch() -> Any:
    return pytest.importorskip("torch")


@pytest.mark.parametrize("make, words", [
    (lambda t: t.ones(2, requires_grad=True), ".detach()"),
    (lambda t: t.ones(2, dtype=t.complex64).conj(), "resolve_conj()"),
    (lambda t: t.ones(2)._neg_view(), "resolve_neg()"),
    (lambda t: t.ones(2).to_sparse(), "to_dense()"),
    (lambda t: t.ones(2, device="meta"), "no data"),
])
async def test_tensors_dlpack_cannot_export_are_refused_at_the_call(make: Any, words: str) -> None:
    t = make(_torch())
    with pytest.raises(TypeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        await _one(t)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "complex64"])
@pytest.mark.parametrize("make, words", [
    (lambda t, d: t.ones(2, dtype=d, requires_grad=True), ".detach()"),
    (lambda t, d: t.ones(2, dtype=d, device="meta"), "no data"),
])
async def test_a_refusal_holds_once_its_dtype_was_sent(dtype: str, make: Any, words: str) -> None:
    torch = _torch()
    d = getattr(torch, dtype)
    assert (await _one(torch.ones(2, dtype=d))).dtype == d  # (the sender now knows the dtype)
    with pytest.raises(TypeError, match=re.escape(words)):
        await _one(make(torch, d))


async def test_an_object_dtype_says_what_to_send_instead() -> None:
    with pytest.raises(TypeError, match="allow_pickle"):
        await _one(np.array([object()]))


async def test_a_tensor_arrives_as_numpy_where_asked() -> None:
    torch = _torch()
    got = await _one(torch.arange(4, dtype=torch.bfloat16), arrays="numpy")
    assert type(got) is np.ndarray and got.dtype.name == "bfloat16"  # (ml_dtypes installed with torch here)


async def test_a_numpy_array_arrives_as_a_tensor_where_asked() -> None:
    torch = _torch()
    got = await _one(np.arange(4, dtype=">i4"), arrays="torch")
    assert type(got) is torch.Tensor and got.tolist() == [0, 1, 2, 3]


async def test_recv_into_and_read_take_a_tensor() -> None:
    torch = _torch()
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("b") as b:
            out = torch.zeros(4)
            await a.send("b", torch.arange(4.0))
            msg = await b.recv_into(out, timeout=10)
            assert out.tolist() == [0.0, 1.0, 2.0, 3.0]
            assert type(msg.data) is torch.Tensor and msg.data.data_ptr() == out.data_ptr()
            into = torch.zeros(1 << 17)

            async def read() -> Any:
                st = await b.recv(timeout=10)
                return await st.read(into)
            sent = torch.arange(1 << 17, dtype=torch.float32)
            _, got = await asyncio.gather(a.send_stream("b", sent), read())
            assert torch.equal(into, sent) and got.data_ptr() == into.data_ptr()


def test_a_tensor_and_an_array_of_one_shape_get_their_own_meta() -> None:
    torch = _torch()
    x = np.zeros(3, np.float32)
    assert type(_round_trip(x)) is np.ndarray and _round_trip(x).dtype.metadata is None
    got = _round_trip(arrays.host_array(torch.zeros(3)))
    assert type(arrays.arrival(got, "auto")) is torch.Tensor
    assert _round_trip(x).dtype.metadata is None  # the tensor's meta did not replace the array's


async def test_recv_into_a_tensor_that_waits_for_the_message() -> None:
    torch = _torch()
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("b") as b:
            out = torch.zeros(3, dtype=torch.bfloat16)
            into = asyncio.create_task(b.recv_into(out, timeout=10))
            await asyncio.sleep(0)  # (recv_into now waits: its pipe is empty)
            await a.send("b", torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16))
            msg = await into
            assert out.tolist() == [1.0, 2.0, 3.0] and type(msg.data) is torch.Tensor
