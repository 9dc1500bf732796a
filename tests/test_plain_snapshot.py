"""A send's snapshot of an array of a plain dtype (``plain_snapshot``),
whether anyone can change an array's memory (``frozen``) and whether a send
may travel from it (``ownable``):
aiopdbp.tensormem.view and its compiled twin aiopdbp.tensormem.cview give the
same answers for the same arrays, and both follow the general rule of
:func:`aiopdbp.runtime.payloads.snapshot`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiopdbp.runtime.payloads import MAX_NDIM, snapshot
from aiopdbp.tensormem import view as pure_memory

try:
    from aiopdbp.tensormem import cview as compiled_memory  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_memory = None

needs_compiled = pytest.mark.skipif(compiled_memory is None, reason="tensormem.cview is not built")

PLAIN = ["?", "i1", "u1", "<i2", ">i4", "<u8", "<f2", "<f4", ">f8", "g", "<c8", "G",
         "<M8[ns]", "<m8[s]", "M8"]
OTHER = ["O", "S3", "U2", "V4", "S0", [("a", "<i4"), ("b", "u1")]]
DTYPES = [np.dtype(d) for d in PLAIN + OTHER] + [np.dtype("<f4", metadata={"aiopdbp": ("torch", "x")})]
SHAPES = [(), (0,), (8,), (3, 4), (2, 0, 3), (1,) * (MAX_NDIM + 1)]


def _values(dt: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    n = int(np.prod(shape, dtype=np.int64))
    if dt.hasobject:
        return np.array(list(range(n)), dtype=dt).reshape(shape)
    if dt.itemsize == 0:
        return np.zeros(shape, dtype=dt)
    return np.frombuffer(bytes(i % 251 for i in range(n * dt.itemsize)), dtype=dt).reshape(shape).copy()


#: how a sender may hold the array: each makes it from a fresh writable one
ORIGINS: dict[str, Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]] = {
    "writable": lambda a: a,
    "read-only flag": lambda a: _readonly(a),
    "read-only view of writable memory": lambda a: _readonly(a.view()),
    "over bytes": lambda a: _over(a, lambda b: b),
    "view over bytes": lambda a: _over(a, lambda b: b)[...],
    "over a memoryview of bytes": lambda a: _over(a, memoryview),
    "strided": lambda a: a[..., ::2] if a.ndim else a,
    "a subclass": lambda a: a.view(np.matrix) if a.ndim == 2 and not a.dtype.hasobject else a,
}


def _over(a: np.ndarray[Any, Any], wrap: Callable[[bytes], Any]) -> np.ndarray[Any, Any]:
    """``a``'s values in an array over an immutable bytes object (``a`` itself where it cannot be)."""
    if a.dtype.hasobject or a.dtype.itemsize == 0:
        return a
    return np.frombuffer(wrap(a.tobytes()), dtype=a.dtype).reshape(a.shape)


def _readonly(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    a.flags.writeable = False
    return a


arrays = st.builds(lambda dt, shape, origin: ORIGINS[origin](_values(dt, shape)),
                   st.sampled_from(DTYPES), st.sampled_from(SHAPES), st.sampled_from(sorted(ORIGINS)))


def _same(a: Any, b: Any, src: np.ndarray[Any, Any]) -> None:
    """Both None, or both ``src`` itself, or both equal C-order copies."""
    assert (a is None) == (b is None)
    if a is None:
        return
    assert (a is src) == (b is src)
    if a is not src:
        for out in (a, b):
            assert type(out) is np.ndarray and out.dtype is src.dtype and out.shape == src.shape
            assert out.flags.c_contiguous and out.flags.writeable and not np.shares_memory(out, src)
            assert out.tobytes() == src.tobytes()


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(arrays)
def test_both_forms_take_the_same_snapshot(arr: np.ndarray[Any, Any]) -> None:
    if type(arr) is not np.ndarray:
        return  # (plain_snapshot is for exact ndarrays; its callers check)
    _same(pure_memory.plain_snapshot(arr, MAX_NDIM), compiled_memory.plain_snapshot(arr, MAX_NDIM), arr)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(arrays)
def test_both_forms_agree_on_frozen(arr: np.ndarray[Any, Any]) -> None:
    assert pure_memory.frozen(arr) is compiled_memory.frozen(arr)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(arrays)
def test_both_forms_agree_on_ownable(arr: np.ndarray[Any, Any]) -> None:
    assert pure_memory.ownable(arr) is compiled_memory.ownable(arr)


@pytest.mark.parametrize("form", [pytest.param(pure_memory, id="pure"),
                                  pytest.param(compiled_memory, id="compiled", marks=needs_compiled)])
@settings(max_examples=200, deadline=None)
@given(arr=arrays)
def test_a_plain_snapshot_is_the_general_rules_snapshot(form: Any, arr: np.ndarray[Any, Any]) -> None:
    if type(arr) is not np.ndarray:
        return
    got = form.plain_snapshot(arr, MAX_NDIM)
    if got is None:  # left to the general path: a dtype it does not take, or too many dimensions
        assert arr.dtype.num not in form.PLAIN_NUMS or arr.ndim > MAX_NDIM
        return
    assert arr.dtype.num in form.PLAIN_NUMS
    # the general rule: shared when no one can change it, else copied
    assert (got is arr) == pure_memory.frozen(arr)
    assert got.tobytes() == arr.tobytes() and got.dtype is arr.dtype and got.shape == arr.shape


@pytest.mark.parametrize("form", [pytest.param(pure_memory, id="pure"),
                                  pytest.param(compiled_memory, id="compiled", marks=needs_compiled)])
def test_an_array_over_bytes_is_shared_and_a_writable_one_copied(form: Any) -> None:
    ro = np.frombuffer(b"12345678", dtype=np.uint8)
    assert form.plain_snapshot(ro, MAX_NDIM) is ro
    rw = np.arange(8, dtype=np.uint8)
    out = form.plain_snapshot(rw, MAX_NDIM)
    rw[0] = 99
    assert out is not rw and out[0] == 0


@pytest.mark.parametrize("form", [pytest.param(pure_memory, id="pure"),
                                  pytest.param(compiled_memory, id="compiled", marks=needs_compiled)])
def test_the_two_forms_plain_dtypes_are_the_same(form: Any) -> None:
    assert form.PLAIN_NUMS == pure_memory.PLAIN_NUMS


def test_snapshot_of_a_plain_array_is_unchanged_by_the_fast_rule() -> None:
    rw = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = snapshot(rw, False, False)
    rw[0, 0] = -1
    assert out[0, 0] == 0 and out.flags.writeable
    shared = snapshot(rw, False, True)  # a multicast's one copy: read-only
    assert shared is not rw and not shared.flags.writeable
