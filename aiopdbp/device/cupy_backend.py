"""The CuPy device backend: the backend interface over CUDA, through CuPy.

CuPy is imported when a :class:`CupyBackend` is created, never when aiopdbp
is imported.  Install it yourself for your CUDA version (``pip install
cupy-cuda12x`` or ``cupy-cuda13x``), or use the ``aiopdbp[gpu-cuda12]`` /
``aiopdbp[gpu-cuda13]`` extras.

What it uses, and why:

* **Pinned memory**: :meth:`CupyBackend.alloc_pinned` makes one
  ``cudaHostAlloc`` allocation (``cupy.cuda.PinnedMemory``) with
  ``cudaHostAllocPortable``, so the memory counts as pinned for every device
  of the process; CuPy's pinned memory *pool* (which keeps growing) is not
  used.  The staging pool calls it once.
* **Streams**: aiopdbp's copy streams are ``cupy.cuda.Stream(non_blocking=True)``:
  they never synchronise with the legacy default stream.  The *user's* stream
  is CuPy's current stream of the array's device, or the ``stream`` entry of a
  foreign object's ``__cuda_array_interface__`` (v3).
* **Copies**: ``cudaMemcpyAsync`` (``cupy.cuda.runtime.memcpyAsync``) on a given
  stream, with raw pointers and byte offsets.
* **Events**: ``cudaEventRecord`` / ``cudaStreamWaitEvent`` / ``cudaEventQuery``
  on events created with timing disabled.  ``CupyEvent.done()`` calls
  ``cudaEventQuery`` itself rather than ``cupy.cuda.Event.done``, which
  returns False for *every* non-success status: a failed copy would then look
  pending forever instead of raising ``DeviceError``.
* **Ordering after the producer**: an event recorded on the producer's stream,
  waited on by the copy stream -- never ``cudaDeviceSynchronize`` and never a
  stream synchronize (also not for foreign ``__cuda_array_interface__``
  objects, which CuPy's own import would synchronise); DLPack objects are
  imported with ``cupy.from_dlpack``, whose ``stream`` argument makes the
  producer order its work before the current stream.  No CUDA host callbacks
  (a callback needing the GIL can deadlock against a thread inside a CUDA call).
* **Device choice**: :meth:`CupyBackend.select_device` -- by default the rank's
  local rank (``MPI_LOCALRANKID``, ``OMPI_COMM_WORLD_LOCAL_RANK``,
  ``SLURM_LOCALID``, ...) modulo the visible devices; call it before any CUDA
  context exists (``cudaGetDeviceCount`` creates none).

Every CUDA failure is raised as ``DeviceError`` with CuPy's exception as
``__cause__``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from aiopdbp.errors import DeviceError
from aiopdbp.device.backend import (
    ArrayInfo,
    DeviceBackend,
    Event,
    HostBuffer,
    Order,
    Placement,
    Stream,
    classify,
    default_device,
    order_of,
)

__all__ = ["CupyBackend", "CupyEvent", "CupyStream"]

_SUCCESS = 0
_NOT_READY = 600  # cudaErrorNotReady


@contextlib.contextmanager
def _cuda(what: str) -> Iterator[None]:
    """Turn any failure of CuPy/CUDA inside the block into ``DeviceError``."""
    try:
        yield
    except DeviceError:
        raise
    except Exception as exc:
        raise DeviceError(f"CUDA {what} failed: {exc}") from exc


class CupyStream:
    """A CUDA stream handle: raw pointer, device, and the CuPy object owning it."""

    __slots__ = ("ptr", "_device", "owner")

    def __init__(self, ptr: int, device: int, owner: Any = None) -> None:
        self.ptr = ptr
        self._device = device
        self.owner = owner  # a cupy.cuda.Stream, or None for a foreign stream

    @property
    def device(self) -> int:
        return self._device

    def __repr__(self) -> str:
        return f"CupyStream(ptr={self.ptr:#x}, device={self._device})"


class CupyEvent:
    """A recorded CUDA event; ``done()`` is ``cudaEventQuery``."""

    __slots__ = ("event", "_runtime")

    def __init__(self, event: Any, runtime: Any) -> None:
        self.event = event  # cupy.cuda.Event (destroys the handle when collected)
        self._runtime = runtime

    def done(self) -> bool:
        status = int(self._runtime.eventQuery(self.event.ptr))
        if status == _SUCCESS:
            return True
        if status == _NOT_READY:
            return False
        raise DeviceError("CUDA work before an event failed") from self._runtime.CUDARuntimeError(status)

    def synchronize(self) -> None:
        with _cuda("event synchronize"):
            self._runtime.eventSynchronize(self.event.ptr)


class CupyBackend(DeviceBackend):
    """The backend interface over CuPy (see the module docstring)."""

    name = "cupy"

    def __init__(self) -> None:
        try:
            import cupy
        except ImportError as exc:
            raise DeviceError(
                "CuPy is not installed: pip install cupy-cuda12x or cupy-cuda13x (matching your CUDA), "
                "or use the simulated backend"
            ) from exc
        self._cp: Any = cupy
        self._rt: Any = cupy.cuda.runtime

    # -- devices
    def device_count(self) -> int:
        with _cuda("getDeviceCount"):
            return int(self._rt.getDeviceCount())

    def get_device(self) -> int:
        with _cuda("getDevice"):
            return int(self._rt.getDevice())

    def set_device(self, device: int) -> None:
        with _cuda(f"setDevice({device})"):
            self._cp.cuda.Device(device).use()

    def select_device(self, device: int | None = None, environ: Mapping[str, str] | None = None) -> int:
        """Make ``device`` -- by default the local rank modulo the visible
        devices -- current, and return it.  Call before any CUDA context."""
        if device is None:
            device = default_device(self.device_count(), environ)
        self.set_device(device)
        return device

    # -- arrays and memory
    def as_stream(self, obj: Any, device: int) -> CupyStream:
        """A ``cupy.cuda.Stream``, a torch stream (``cuda_stream``) or any
        object with a ``ptr``, as a stream handle on ``device``."""
        if isinstance(obj, CupyStream):
            return obj
        ptr = getattr(obj, "ptr", None)
        if ptr is None:
            ptr = getattr(obj, "cuda_stream", None)
        if ptr is None:
            raise TypeError(f"{type(obj).__name__} is not a CUDA stream")
        return CupyStream(int(ptr), device, obj if hasattr(obj, "ptr") and hasattr(obj, "__enter__") else None)

    def is_pinned(self, buf: Any) -> bool:
        arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
        if not arr.nbytes:
            return True
        try:
            return int(self._rt.pointerGetAttributes(arr.ctypes.data).type) == 1  # cudaMemoryTypeHost
        except Exception:  # pageable memory unknown to CUDA
            return False

    def _owner(self, s: CupyStream) -> Any:
        """A CuPy stream object for ``s`` (for ``with``)."""
        return s.owner if s.owner is not None else self._cp.cuda.ExternalStream(s.ptr, s.device)

    def inspect(self, obj: Any, stream: Stream | None = None) -> ArrayInfo:
        cp = self._cp
        user = None if stream is None else self._stream(stream)
        if isinstance(obj, cp.ndarray):
            arr, dev, stream = obj, int(obj.device.id), None
        elif classify(obj) is not Placement.CUDA:
            raise TypeError(f"{type(obj).__name__} is not a CUDA device array")
        else:
            cai = getattr(obj, "__cuda_array_interface__", None)
            if cai is not None:
                arr, dev, stream = self._from_cai(obj, cai)
            else:  # DLPack on a CUDA device (torch): the producer orders its work before that stream
                dev = int(obj.__dlpack_device__()[1])
                with _cuda("DLPack import"), cp.cuda.Device(dev):
                    if user is not None:
                        with self._owner(user):
                            arr = cp.from_dlpack(obj)
                    else:
                        arr = cp.from_dlpack(obj)
                stream = None
        if user is not None:
            stream = user
        dtype = np.dtype(arr.dtype)
        shape, strides = tuple(int(n) for n in arr.shape), tuple(int(s) for s in arr.strides)
        return ArrayInfo(arr, dev, dtype, shape, strides, int(arr.nbytes), order_of(shape, strides, dtype.itemsize),
                         stream if stream is not None else self.current_stream(dev))

    def _from_cai(self, obj: Any, cai: dict[str, Any]) -> tuple[Any, int, CupyStream | None]:
        """A CuPy view of a foreign ``__cuda_array_interface__`` object,
        without the stream synchronize CuPy's own import would do."""
        cp = self._cp
        shape = tuple(int(n) for n in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        if dtype.byteorder == ">" or cai.get("mask") is not None:
            raise TypeError("big-endian and masked device arrays are not supported")
        strides = cai.get("strides")
        items = int(np.prod(shape, dtype=np.int64))
        if items == 0:
            extent = 0
        elif strides is None or not shape:
            extent = items * dtype.itemsize
        else:  # as CuPy computes it
            extent = max(abs(n * int(s)) for n, s in zip(shape, strides))
        ptr = int(cai["data"][0])
        with _cuda("__cuda_array_interface__ import"):
            dev = int(self._rt.pointerGetAttributes(ptr).device) if ptr else self.get_device()
            mem = cp.cuda.UnownedMemory(ptr, extent, obj, dev)
            arr = cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0), strides)
        sptr = cai.get("stream")  # v3: None, 1 (legacy default), 2 (per-thread default) or a handle
        return arr, dev, (CupyStream(int(sptr), dev) if sptr is not None else None)

    def empty(self, shape: tuple[int, ...], dtype: npt.DTypeLike, order: Order, device: int,
              stream: Stream | None = None) -> Any:
        with _cuda("allocation"), self._cp.cuda.Device(device):
            if stream is None:
                return self._cp.empty(shape, dtype, order=order)
            with self._owner(self._stream(stream)):  # the memory pool is per stream
                return self._cp.empty(shape, dtype, order=order)

    def contiguous(self, array: Any, stream: Stream) -> Any:
        s = self._stream(stream)
        if s.owner is None:
            raise TypeError("contiguous() needs a stream created by this backend")
        with _cuda("contiguous copy"), self._cp.cuda.Device(s.device), s.owner:
            return self._cp.ascontiguousarray(array)

    def alloc_pinned(self, nbytes: int) -> HostBuffer:
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        if nbytes == 0:
            return np.empty(0, dtype=np.uint8)
        cuda = self._cp.cuda
        with _cuda(f"pinned allocation of {nbytes} bytes"):
            mem = cuda.PinnedMemory(nbytes, self._rt.hostAllocPortable)
            # the array keeps the pointer, and so the allocation, alive
            return np.frombuffer(cuda.PinnedMemoryPointer(mem, 0), dtype=np.uint8, count=nbytes)

    # -- streams and events
    def create_stream(self, device: int) -> CupyStream:
        with _cuda("stream creation"), self._cp.cuda.Device(device):
            s = self._cp.cuda.Stream(non_blocking=True)
        return CupyStream(int(s.ptr), device, s)

    def current_stream(self, device: int) -> CupyStream:
        with _cuda("current stream"), self._cp.cuda.Device(device):
            s = self._cp.cuda.get_current_stream()
        return CupyStream(int(s.ptr), device, s)

    def record_event(self, stream: Stream) -> CupyEvent:
        s = self._stream(stream)
        with _cuda("event record"), self._cp.cuda.Device(s.device):
            ev = self._cp.cuda.Event(block=False, disable_timing=True)
            self._rt.eventRecord(ev.ptr, s.ptr)
        return CupyEvent(ev, self._rt)

    def wait_event(self, stream: Stream, event: Event) -> None:
        s = self._stream(stream)
        if not isinstance(event, CupyEvent):
            raise TypeError(f"expected a CupyEvent, got {type(event).__name__}")
        with _cuda("stream wait event"), self._cp.cuda.Device(s.device):
            self._rt.streamWaitEvent(s.ptr, event.event.ptr)

    # -- copies
    def copy_d2h(self, src: Any, src_offset: int, dst: HostBuffer, stream: Stream) -> None:
        n = dst.nbytes
        ptr = self._device_ptr(src, src_offset, n)
        if n:
            self._memcpy(dst.ctypes.data, ptr, n, self._rt.memcpyDeviceToHost, self._stream(stream))

    def copy_h2d(self, src: HostBuffer, dst: Any, dst_offset: int, stream: Stream) -> None:
        n = src.nbytes
        ptr = self._device_ptr(dst, dst_offset, n)
        if n:
            self._memcpy(ptr, src.ctypes.data, n, self._rt.memcpyHostToDevice, self._stream(stream))

    def copy_d2d(self, src: Any, dst: Any, stream: Stream) -> None:
        if src.nbytes != dst.nbytes:
            raise ValueError(f"copy_d2d of {src.nbytes} bytes into {dst.nbytes}")
        n = int(src.nbytes)
        a, b = self._device_ptr(src, 0, n), self._device_ptr(dst, 0, n)
        if n:  # cudaMemcpyDefault: unified addressing finds both devices (peer copy)
            self._memcpy(b, a, n, self._rt.memcpyDefault, self._stream(stream))

    # -- internals
    def _memcpy(self, dst: int, src: int, n: int, kind: int, s: CupyStream) -> None:
        with _cuda("cudaMemcpyAsync"), self._cp.cuda.Device(s.device):
            self._rt.memcpyAsync(dst, src, n, kind, s.ptr)

    def _device_ptr(self, arr: Any, offset: int, n: int) -> int:
        if not isinstance(arr, self._cp.ndarray):
            raise TypeError(f"expected a cupy.ndarray, got {type(arr).__name__} (pass ArrayInfo.array)")
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            raise ValueError("copies need a C- or F-contiguous device array (use contiguous())")
        if offset < 0 or offset + n > arr.nbytes:
            raise ValueError(f"byte range [{offset}, {offset + n}) outside a {arr.nbytes}-byte array")
        return int(arr.data.ptr) + offset if arr.nbytes else 0

    def _stream(self, stream: Stream) -> CupyStream:
        if not isinstance(stream, CupyStream):
            raise TypeError(f"expected a CupyStream, got {type(stream).__name__}")
        return stream
