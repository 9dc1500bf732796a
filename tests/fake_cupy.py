"""A fake ``cupy`` module over host memory, for plumbing tests of the CuPy backend.

It implements exactly the CuPy API that ``aiopdbp.device.cupy_backend`` uses
(checked against CuPy's sources), with "device" memory in numpy arrays and
``memcpyAsync`` as a synchronous ``ctypes.memmove``.  What it can catch:
wrong pointers, offsets, sizes, copy kinds, argument order, which stream an
event is recorded on or waited by, and how CUDA status codes are mapped to
errors.  What it cannot: anything CUDA actually does (asynchrony, pinning,
real streams) -- that is ``tests/test_device_cupy.py`` on a GPU.

``install()`` puts it into ``sys.modules`` as ``cupy``; ``runtime.calls``
records every runtime call, ``runtime.event_status`` overrides what
``eventQuery`` returns for an event.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import types
from typing import Any

import numpy as np

_ptrs = itertools.count(0x1000)


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"cudaError {status}")


class _Runtime:
    memcpyHostToDevice, memcpyDeviceToHost, memcpyDeviceToDevice, memcpyDefault = 1, 2, 3, 4
    hostAllocPortable = 1
    CUDARuntimeError = CUDARuntimeError

    def __init__(self, ndev: int) -> None:
        self.ndev = ndev
        self.device = 0
        self.calls: list[tuple[Any, ...]] = []
        self.event_status: dict[int, int] = {}
        self.owners: dict[int, int] = {}  # device pointer -> device
        self.pinned: list[tuple[int, int]] = []  # address ranges of pinned allocations

    def getDeviceCount(self) -> int:
        return self.ndev

    def getDevice(self) -> int:
        return self.device

    def setDevice(self, device: int) -> None:
        if not 0 <= device < self.ndev:
            raise CUDARuntimeError(101)  # cudaErrorInvalidDevice
        self.device = device

    def memcpyAsync(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        self.calls.append(("memcpyAsync", kind, size, stream, self.device))
        ctypes.memmove(dst, src, size)

    def eventRecord(self, event: int, stream: int) -> None:
        self.calls.append(("eventRecord", event, stream))

    def streamWaitEvent(self, stream: int, event: int, flags: int = 0) -> None:
        self.calls.append(("streamWaitEvent", stream, event))

    def eventQuery(self, event: int) -> int:
        return self.event_status.get(event, 0)

    def eventSynchronize(self, event: int) -> None:
        status = self.eventQuery(event)
        if status:
            raise CUDARuntimeError(status)

    def pointerGetAttributes(self, ptr: int) -> Any:
        pinned = any(lo <= ptr < hi for lo, hi in self.pinned)  # cudaMemoryTypeHost, else Device
        return types.SimpleNamespace(device=self.owners.get(ptr, 0), type=1 if pinned else 2)


class _Device:
    def __init__(self, device: int) -> None:
        self.id = device
        self._prev: list[int] = []

    def use(self) -> None:
        runtime.setDevice(self.id)

    def __enter__(self) -> _Device:
        self._prev.append(runtime.device)
        runtime.setDevice(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        runtime.device = self._prev.pop()


class _Stream:
    def __init__(self, non_blocking: bool = False, ptr: int | None = None) -> None:
        self.ptr = next(_ptrs) if ptr is None else ptr
        self.is_non_blocking = non_blocking
        self._prev: list[_Stream] = []

    def __enter__(self) -> _Stream:
        self._prev.append(_current[runtime.device])
        _current[runtime.device] = self
        return self

    def __exit__(self, *exc: object) -> None:
        _current[runtime.device] = self._prev.pop()


class _Event:
    def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
        self.ptr = next(_ptrs)


class _Flags:
    def __init__(self, a: np.ndarray[Any, Any]) -> None:
        self.c_contiguous = bool(a.flags.c_contiguous)
        self.f_contiguous = bool(a.flags.f_contiguous)


class ndarray:  # noqa: N801  (CuPy's name)
    """A fake device array: numpy memory plus a device id."""

    def __init__(self, shape: Any, dtype: Any, memptr: Any, strides: Any = None) -> None:
        """CuPy's constructor over (unowned) device memory."""
        raw = (ctypes.c_char * max(memptr.mem.size, 1)).from_address(memptr.ptr)
        self._a: np.ndarray[Any, Any] = np.ndarray(shape, np.dtype(dtype), buffer=raw, strides=strides)
        self.device = _Device(memptr.mem.device_id)

    @classmethod
    def _wrap(cls, a: np.ndarray[Any, Any], device: int) -> ndarray:
        self = cls.__new__(cls)
        self._a, self.device = a, _Device(device)
        runtime.owners[a.ctypes.data] = device
        return self

    shape = property(lambda self: self._a.shape)
    strides = property(lambda self: self._a.strides)
    dtype = property(lambda self: self._a.dtype)
    nbytes = property(lambda self: self._a.nbytes)
    flags = property(lambda self: _Flags(self._a))
    data = property(lambda self: types.SimpleNamespace(ptr=self._a.ctypes.data))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._a.ctypes.data, False),
                "strides": None if self._a.flags.c_contiguous else self.strides, "version": 3,
                "stream": _current[self.device.id].ptr or 1}

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device.id)

    def __getitem__(self, key: Any) -> ndarray:
        return ndarray._wrap(self._a[key], self.device.id)

    def fill(self, value: Any) -> None:
        self._a.fill(value)

    def get(self) -> np.ndarray[Any, Any]:
        return self._a.copy()


def empty(shape: Any, dtype: Any, order: str = "C") -> ndarray:
    return ndarray._wrap(np.empty(shape, dtype, order=order), runtime.device)


def array(host: Any, order: str = "K") -> ndarray:
    return ndarray._wrap(np.array(host, order=order), runtime.device)


def asnumpy(a: ndarray) -> np.ndarray[Any, Any]:
    return a.get()


def ascontiguousarray(a: ndarray) -> ndarray:
    runtime.calls.append(("ascontiguousarray", _current[runtime.device].ptr))
    return ndarray._wrap(np.ascontiguousarray(a._a), runtime.device)


def from_dlpack(obj: Any) -> ndarray:
    obj.__dlpack__(stream=_current[runtime.device].ptr)
    return obj._arr  # type: ignore[no-any-return]  # the wrapped fake array


class _Unowned:
    def __init__(self, ptr: int, size: int, owner: Any, device_id: int) -> None:
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id


class _MemoryPointer:
    def __init__(self, mem: _Unowned, offset: int) -> None:
        self.mem, self.ptr = mem, mem.ptr + offset


class _PinnedMemory:
    def __init__(self, size: int, flags: int = 0) -> None:
        self.size, self.flags = size, flags
        self.buf = bytearray(size)
        runtime.calls.append(("PinnedMemory", size, flags))
        addr = np.frombuffer(self.buf, dtype=np.uint8).ctypes.data
        runtime.pinned.append((addr, addr + size))


def _pinned_pointer(mem: _PinnedMemory, offset: int) -> memoryview:
    return memoryview(mem.buf)[offset:]


runtime = _Runtime(2)
_current: dict[int, _Stream] = {}


def install(ndev: int = 2) -> types.ModuleType:
    """Register a fresh fake ``cupy`` in ``sys.modules`` and return it."""
    global runtime, _current
    runtime = _Runtime(ndev)
    _current = {d: _Stream(ptr=0) for d in range(ndev)}  # the legacy default stream
    cuda = types.SimpleNamespace(
        runtime=runtime, Device=_Device, Stream=_Stream, Event=_Event,
        get_current_stream=lambda: _current[runtime.device], PinnedMemory=_PinnedMemory,
        PinnedMemoryPointer=_pinned_pointer, UnownedMemory=_Unowned, MemoryPointer=_MemoryPointer,
    )
    mod = types.ModuleType("cupy")
    mod.__dict__.update(cuda=cuda, ndarray=ndarray, empty=empty, array=array, asnumpy=asnumpy,
                        ascontiguousarray=ascontiguousarray, from_dlpack=from_dlpack)
    sys.modules["cupy"] = mod
    return mod
