"""A tensor's arrival through a GP's receive path (:mod:`aiopdbp.runtime.recvpath`
and its compiled twin): the common take converts a tensor's array to a tensor
itself, in both forms, over a real pipe with a stand-in receiving side, node and
GP coroutine (as ``tests/test_recvpath.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aiopdbp import arrays
from aiopdbp.routing.pipes import Pipe
from aiopdbp.runtime import recvpath as pure_path
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import Message

torch = pytest.importorskip("torch")

try:
    from aiopdbp.runtime import crecvpath as compiled_path  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_path = None

FORMS = [pytest.param(pure_path, id="pure"),
         pytest.param(compiled_path, id="compiled",
                      marks=pytest.mark.skipif(compiled_path is None, reason="the compiled receive path is not built"))]

pytestmark = pytest.mark.timeout(10)


class _Rx:
    held: Any = None
    into_task: Any = None


class _Node:
    arrays = "auto"


async def _slow(timeout: float | None, arrays_: str | None, taken: Any) -> Any:
    raise AssertionError("the GP's coroutine was not to run")


def _landed(t: Any) -> np.ndarray[Any, Any]:
    """``t``'s array as a landing buffer has it: a fresh array of the send's tagged dtype."""
    arr = arrays.host_array(t)
    assert arr is not None
    out: np.ndarray[Any, Any] = np.empty(arr.shape, arr.dtype)
    out[...] = arr
    return out


async def _received(form: Any, data: Any) -> Any:
    pipe: Pipe[Any] = Pipe(8)
    pipe.put_many([Message(("a", Kind.SHORT, 3, data, 5))], 1)
    path = form.RecvPath(_Rx(), _Node(), _slow, arrays.arrival)
    path.pipe = pipe
    got = await path.recv()
    assert type(got) is Message and got[:3] == ("a", Kind.SHORT, 3) and got.source_pid == 5
    assert pipe.taken == 1 and not len(pipe)
    return got.data


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "float8_e4m3fn"])
async def test_a_tensors_array_taken_by_the_path_arrives_as_a_tensor_of_its_dtype(form: Any, dtype: str) -> None:
    sent = torch.arange(6).reshape(2, 3).to(getattr(torch, dtype))
    got = await _received(form, _landed(sent))
    assert type(got) is torch.Tensor and got.dtype == sent.dtype and got.shape == sent.shape
    assert got.view(torch.uint8).numpy().tobytes() == sent.view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("form", FORMS)
async def test_a_0d_tensors_array_taken_by_the_path_arrives_as_a_0d_tensor(form: Any) -> None:
    got = await _received(form, _landed(torch.tensor(2.5)))
    assert type(got) is torch.Tensor and got.shape == () and got.item() == 2.5


@pytest.mark.parametrize("form", FORMS)
async def test_an_empty_tensors_array_taken_by_the_path_arrives_as_an_empty_tensor(form: Any) -> None:
    got = await _received(form, _landed(torch.empty(0, 4, dtype=torch.bfloat16)))
    assert type(got) is torch.Tensor and got.dtype == torch.bfloat16 and got.shape == (0, 4)
