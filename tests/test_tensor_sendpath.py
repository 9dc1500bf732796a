"""A tensor's send through a GP's send path: in the compiled form ``gp.send``
is the path's ``call``, which takes a plain CPU tensor's memory as an ndarray
itself (:meth:`aiopdbp.tensormem.view.TensorPaths.view`, one C call) and
sends it as numpy's are sent; what that view leaves (device, sparse,
non-contiguous, empty tensors, one that requires grad or has its negative
or conjugate bit set) goes to ``GP.send``, which sends it or says why not.
The pure form (``AIOPDBP_NO_EXTENSIONS=1``) keeps ``GP.send``: the same
arrivals and errors are checked there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest

from aiopdbp import arrays
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.runtime.sendcore import COMPILED
from aiopdbp.tensormem import view as pure_view

torch = pytest.importorskip("torch")

try:
    from aiopdbp.tensormem import cview as compiled_view  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_view = None

pytestmark = pytest.mark.timeout(30)

VIEW_FORMS = [pytest.param(pure_view, id="pure"),
              pytest.param(compiled_view, id="compiled",
                           marks=pytest.mark.skipif(compiled_view is None, reason="compiled tensormem not built"))]


class _Whole:
    """Wraps a GP's own send and counts what reaches it."""

    def __init__(self, send: Any) -> None:
        self.send = send
        self.calls = 0

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        return self.send(*args, **kw)


@asynccontextmanager
async def _pair() -> AsyncIterator[tuple[Any, Any, _Whole]]:
    """GP a on one node, b on another; a's path's ``whole`` counted."""
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            await nodes[0].lookup("b", timeout=10)
            whole = _Whole(a._path.whole)
            a._path.whole = whole
            yield a, b, whole


CASES = {
    "float32": lambda: torch.arange(6, dtype=torch.float32).reshape(2, 3) / 3,
    "bfloat16": lambda: torch.arange(5, dtype=torch.bfloat16) / 7,
    "int64": lambda: torch.arange(-3, 4, dtype=torch.int64),
    "bool": lambda: torch.tensor([True, False, True]),
    "0-d": lambda: torch.tensor(2.5),
    "empty": lambda: torch.zeros(0, 3, dtype=torch.float32),
}


def _same(got: Any, sent: Any) -> bool:
    return (type(got) is torch.Tensor and got.dtype == sent.dtype and got.shape == sent.shape
            and bool(torch.equal(got, sent)))


@pytest.mark.parametrize("case", list(CASES))
async def test_a_tensor_sent_arrives_equal(case: str) -> None:
    async with _pair() as (a, b, _):
        for _ in range(2):  # (the first of a dtype plans it; the second takes the plan)
            t = CASES[case]()
            await a.send("b", t, timeout=10.0)
            assert _same((await b.recv(timeout=10.0)).data, t)


@pytest.mark.skipif(not COMPILED, reason="the pure form keeps GP.send")
@pytest.mark.parametrize("case", ["float32", "bfloat16", "int64", "bool", "0-d"])
async def test_a_plain_tensor_seen_before_is_the_paths_own_in_the_compiled_form(case: str) -> None:
    async with _pair() as (a, b, whole):
        await a.send("b", CASES[case](), timeout=10.0)
        await b.recv(timeout=10.0)
        before = whole.calls
        t = CASES[case]()
        await a.send("b", t, timeout=10.0)
        assert whole.calls == before  # the path's call took it: GP.send did not run
        assert _same((await b.recv(timeout=10.0)).data, t)


@pytest.mark.parametrize("case", ["empty", "non-contiguous"])
async def test_what_the_view_leaves_is_sent_by_the_gps_own_send(case: str) -> None:
    async with _pair() as (a, b, whole):
        await a.send("b", torch.ones(2), timeout=10.0)   # (float32 planned, the tensor type tracked)
        await b.recv(timeout=10.0)
        before = whole.calls
        t = torch.zeros(0, 3) if case == "empty" else torch.arange(6.0).reshape(2, 3).t()
        await a.send("b", t, timeout=10.0)
        if COMPILED:
            assert whole.calls == before + 1
        assert _same((await b.recv(timeout=10.0)).data, t)


REFUSED = {
    "requires grad": (lambda: torch.ones(2, requires_grad=True), "requires grad"),
    "negative bit": (lambda: torch.ones(2)._neg_view(), "negative bit"),
    "conjugate bit": (lambda: torch.ones(2, dtype=torch.complex64).conj(), "conjugate bit"),
    "sparse": (lambda: torch.ones(2).to_sparse(), "sparse"),
    "meta": (lambda: torch.ones(2, device="meta"), "meta device"),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_tensor_that_cannot_travel_raises_the_gps_error(case: str) -> None:
    make, match = REFUSED[case]
    async with _pair() as (a, b, whole):
        await a.send("b", torch.ones(2, dtype=torch.complex64), timeout=10.0)  # (plans made, type tracked)
        await a.send("b", torch.ones(2), timeout=10.0)
        before = whole.calls
        with pytest.raises(TypeError, match=match):
            await a.send("b", make(), timeout=10.0)
        if COMPILED:
            assert whole.calls == before + 1


async def test_a_cpu_tensor_with_a_stream_raises_at_the_await() -> None:
    async with _pair() as (a, b, _):
        await a.send("b", torch.ones(2), timeout=10.0)
        coro = a.send("b", torch.ones(2), stream=object())
        with pytest.raises(TypeError, match="stream= is for device arrays"):
            await coro


# -- TensorPaths.view, both forms


def _paths(form: Any) -> Any:
    general: list[Any] = []
    paths = form.TensorPaths(lambda t: general.append(t), lambda arr, kind: arr, {})
    paths.track(torch.Tensor, torch.strided)
    form.bind(torch.Tensor)
    t = torch.ones(2)
    paths.add_plan(t, arrays.host_array(t).dtype, False)  # type: ignore[union-attr]
    return paths, general


@pytest.mark.parametrize("form", VIEW_FORMS)
def test_view_is_a_plain_tensors_memory(form: Any) -> None:
    paths, general = _paths(form)
    t = torch.arange(4, dtype=torch.float32)
    arr = paths.view(t)
    assert type(arr) is np.ndarray and arr.tolist() == [0.0, 1.0, 2.0, 3.0]
    t[0] = 9.0
    assert arr[0] == 9.0 and not general  # its memory, not a copy; the general path not asked


@pytest.mark.parametrize("form", VIEW_FORMS)
@pytest.mark.parametrize("case", ["requires grad", "non-contiguous", "no plan", "not a tensor"])
def test_view_leaves_anything_else_without_raising_or_asking_the_general_path(form: Any, case: str) -> None:
    paths, general = _paths(form)
    obj = {"requires grad": lambda: torch.ones(2, requires_grad=True),
           "non-contiguous": lambda: torch.ones(2, 3).t(),
           "no plan": lambda: torch.ones(2, dtype=torch.int32),
           "not a tensor": lambda: np.ones(2)}[case]()
    assert paths.view(obj) is None and not general
