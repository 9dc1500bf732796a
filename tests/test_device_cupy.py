"""The staging scenarios of ``tests/device_scenarios.py`` over the CuPy
backend, plus CuPy-only checks (foreign CUDA arrays, pinned memory, streams).

Marked ``gpu``; skipped as a whole without CuPy or without a CUDA device.
Run on a GPU machine with::

    python3 tools/dev.py test tests/test_device_cupy.py -m gpu -v

A *hold* on a stream is a one-thread kernel spinning on a flag in pinned host
memory (directly addressable by the device under unified addressing) until
the test sets it: "the producer's work is still pending" without timing.
Every hold is released at teardown, so a failing test never leaves the GPU
spinning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(60, method="thread")]  # a CUDA call blocked behind a held kernel ignores signals

from tests.cuda_guard import cupy_or_skip

cp, _NDEV = cupy_or_skip()

from aiopdbp.device.backend import Stream  # noqa: E402
from aiopdbp.device.cupy_backend import CupyBackend, CupyStream  # noqa: E402
from aiopdbp.device.staging import Stager, TransferState  # noqa: E402

from tests.device_scenarios import *  # noqa: E402, F403  (the shared scenarios)
from tests.device_scenarios import Wire, drive  # noqa: E402

_GATE_SRC = r"""
extern "C" __global__ void aiopdbp_gate(const volatile int* flag) {
    while (*flag == 0) { __nanosleep(1000); }
}
"""


class CupyHold:
    def __init__(self, flag: np.ndarray[Any, Any], memory: Any) -> None:
        self._flag = flag
        self._memory = memory  # keeps the pinned flag alive while the kernel reads it

    def release(self) -> None:
        self._flag[0] = 1


class CupyHarness:
    """The scenario harness over :class:`CupyBackend` (one or two GPUs)."""

    faults = False

    def __init__(self) -> None:
        self.backend = CupyBackend()
        self.devices = min(2, _NDEV)
        self._gate = cp.RawKernel(_GATE_SRC, "aiopdbp_gate")
        self._holds: list[CupyHold] = []

    def array(self, host: np.ndarray[Any, Any], device: int = 0) -> Any:
        with cp.cuda.Device(device):
            return cp.array(host, order="K")

    def to_numpy(self, arr: Any) -> np.ndarray[Any, Any]:
        return cp.asnumpy(arr)

    def hold(self, stream: Stream) -> CupyHold:
        assert isinstance(stream, CupyStream) and stream.owner is not None
        memory = cp.cuda.alloc_pinned_memory(4)
        flag = np.frombuffer(memory, np.int32, 1)
        flag[0] = 0
        hold = CupyHold(flag, memory)
        self._holds.append(hold)
        with cp.cuda.Device(stream.device), stream.owner:
            self._gate((1,), (1,), (np.uint64(flag.ctypes.data),))
        return hold

    def fill_async(self, arr: Any, value: float, stream: Stream) -> None:
        assert isinstance(stream, CupyStream) and stream.owner is not None
        with cp.cuda.Device(stream.device), stream.owner:
            arr.fill(value)

    def close(self) -> None:
        for hold in self._holds:
            hold.release()
        for d in range(self.devices):
            with cp.cuda.Device(d):
                cp.cuda.runtime.deviceSynchronize()  # teardown only


@pytest.fixture
def dev() -> Iterator[CupyHarness]:
    h = CupyHarness()
    yield h
    h.close()


# ------------------------------------------------------------- CuPy only
class _ForeignCAI:
    """A foreign CUDA array: only ``__cuda_array_interface__`` (v3, with a stream)."""

    def __init__(self, arr: Any) -> None:
        self._arr = arr
        self.__cuda_array_interface__ = arr.__cuda_array_interface__


class _ForeignDLPack:
    """A foreign CUDA array: only DLPack."""

    def __init__(self, arr: Any) -> None:
        self._arr = arr

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return tuple(self._arr.__dlpack_device__())  # type: ignore[return-value]


@pytest.mark.parametrize("wrap", [_ForeignCAI, _ForeignDLPack])
def test_foreign_device_arrays_are_staged_without_copying_them_first(
    dev: CupyHarness, new_stager: Callable[..., Stager], wrap: Callable[[Any], Any]
) -> None:
    host = np.arange(600 * 500, dtype=np.float32).reshape(600, 500)
    src = dev.array(host)
    info = dev.backend.inspect(wrap(src))
    assert info.array.data.ptr == src.data.ptr and info.shape == host.shape and info.order == "C"
    tx, rx = new_stager(), new_stager()
    wire = Wire()
    t = tx.send(wrap(src), wire.post_send)
    r = rx.recv(t.meta, wire.post_recv, device=0)
    drive([tx, rx], wire, lambda: t.settled and r.settled)
    assert r.state is TransferState.DONE
    np.testing.assert_array_equal(cp.asnumpy(r.array), host)


def test_pinned_chunks_are_page_locked_host_memory(dev: CupyHarness) -> None:
    buf = dev.backend.alloc_pinned(1 << 20)
    attrs = cp.cuda.runtime.pointerGetAttributes(buf.ctypes.data)
    assert attrs.type == 1  # cudaMemoryTypeHost: registered (pinned) host memory


def test_copy_streams_are_non_blocking(dev: CupyHarness) -> None:
    s = dev.backend.create_stream(0)
    assert s.owner.is_non_blocking and s.ptr not in (0, 1, 2)


def test_select_device_uses_the_local_rank(dev: CupyHarness) -> None:
    assert dev.backend.select_device(environ={"MPI_LOCALRANKID": str(_NDEV)}) == 0
    assert dev.backend.get_device() == 0
