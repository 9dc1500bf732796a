"""One device interface over the simulated backend and CuPy, for tests that
run on both (``tests/test_device_defects.py``): user streams, kernels that
fill or read an array on the current stream, and a hold that keeps a stream
busy until released (on a GPU: a kernel spinning on a pinned flag)."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from aiopdbp.device import DeviceBackend, SimBackend
from aiopdbp.streams.devicebind import DeviceConfig

CHUNK = 256 << 10


class Hold(Protocol):
    def release(self) -> None: ...


class Dev(Protocol):
    backend: DeviceBackend

    def config(self) -> DeviceConfig: ...
    def device_count(self) -> int: ...
    def stream(self, non_blocking: bool = True) -> Any: ...
    def zeros(self, n: int) -> Any: ...
    def fill(self, arr: Any, value: float) -> None: ...
    def snapshot(self, arr: Any) -> Any: ...
    def hold(self, stream: Any) -> Hold: ...
    def get(self, arr: Any) -> np.ndarray[Any, Any]: ...
    def synchronize(self, stream: Any) -> None: ...
    def on_device(self, device: int) -> contextlib.AbstractContextManager[Any]: ...
    def violations(self) -> list[str]: ...
    def close(self) -> None: ...


def cupy_available() -> bool:
    """CuPy imports and sees a CUDA device."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False


class SimDev:
    """The simulated device, two of them."""

    def __init__(self) -> None:
        self.backend = SimBackend(devices=2, copy_delay=0.0002)

    def config(self) -> DeviceConfig:
        return DeviceConfig(backend=self.backend, pool_bytes=8 * CHUNK, chunk_size=CHUNK)

    def device_count(self) -> int:
        return self.backend.devices

    def stream(self, non_blocking: bool = True) -> Any:
        return self.backend.create_stream(self.backend.get_device(), non_blocking=non_blocking)

    def zeros(self, n: int) -> Any:
        return self.backend.asarray(np.zeros(n, np.float32))

    def fill(self, arr: Any, value: float) -> None:
        view = arr.unsafe_host_view()
        self.backend.launch(self.backend.current_stream(arr.device), lambda: view.fill(value), uses=[arr])

    def snapshot(self, arr: Any) -> Any:
        out = np.empty(arr.shape, arr.dtype)
        view = arr.unsafe_host_view()
        self.backend.launch(self.backend.current_stream(arr.device), lambda: np.copyto(out, view), uses=[arr])
        return out

    def hold(self, stream: Any) -> Hold:
        return self.backend.hold(stream)

    def get(self, arr: Any) -> np.ndarray[Any, Any]:
        return arr if isinstance(arr, np.ndarray) else arr.get()

    def synchronize(self, stream: Any) -> None:
        stream.synchronize()

    @contextlib.contextmanager
    def on_device(self, device: int) -> Iterator[None]:
        before = self.backend.get_device()
        self.backend.set_device(device)
        try:
            yield
        finally:
            self.backend.set_device(before)

    def violations(self) -> list[str]:
        return list(self.backend.violations)

    def close(self) -> None:
        self.backend.close()


_GATE_SRC = r"""
extern "C" __global__ void aiopdbp_gate(const volatile int* flag) {
    while (*flag == 0) { __nanosleep(1000); }
}
"""


class _CupyHold:
    """A one-thread kernel spinning on a pinned flag until released."""

    def __init__(self, cp: Any, stream: Any) -> None:
        self._memory = cp.cuda.alloc_pinned_memory(4)
        self._flag = np.frombuffer(self._memory, np.int32, 1)
        self._flag[0] = 0
        with stream:
            cp.RawKernel(_GATE_SRC, "aiopdbp_gate")((1,), (1,), (np.uint64(self._flag.ctypes.data),))

    def release(self) -> None:
        self._flag[0] = 1


class CupyDev:
    """CuPy on a real GPU (no violation record: corruption shows in the data)."""

    def __init__(self) -> None:
        import cupy

        from aiopdbp.device.cupy_backend import CupyBackend

        self.cp: Any = cupy
        self.backend = CupyBackend()
        self._holds: list[_CupyHold] = []

    def config(self) -> DeviceConfig:
        return DeviceConfig(backend=self.backend, pool_bytes=8 * CHUNK, chunk_size=CHUNK)

    def device_count(self) -> int:
        return self.backend.device_count()

    def stream(self, non_blocking: bool = True) -> Any:
        return self.cp.cuda.Stream(non_blocking=non_blocking)

    def zeros(self, n: int) -> Any:
        return self.cp.zeros(n, self.cp.float32)

    def fill(self, arr: Any, value: float) -> None:
        arr.fill(value)

    def snapshot(self, arr: Any) -> Any:
        return arr.copy()

    def hold(self, stream: Any) -> Hold:
        h = _CupyHold(self.cp, stream)
        self._holds.append(h)
        return h

    def get(self, arr: Any) -> np.ndarray[Any, Any]:
        return arr if isinstance(arr, np.ndarray) else self.cp.asnumpy(arr)

    def synchronize(self, stream: Any) -> None:
        stream.synchronize()

    def on_device(self, device: int) -> contextlib.AbstractContextManager[Any]:
        return self.cp.cuda.Device(device)  # type: ignore[no-any-return]

    def violations(self) -> list[str]:
        return []

    def close(self) -> None:
        for h in self._holds:  # a kernel left spinning would hang every later CUDA call
            h.release()
        self.cp.cuda.runtime.deviceSynchronize()
