"""The device backend interface: everything aiopdbp asks of a GPU library.

A backend moves bytes between device arrays and host memory *asynchronously*
and tells, without blocking, when that work is done.  The staging machinery
(:mod:`aiopdbp.device.staging`) is written against this interface only, so
the same code runs over CuPy (:mod:`aiopdbp.device.cupy_backend`) and over
the simulated backend (:mod:`aiopdbp.device.sim`) that CI uses.

Vocabulary (CUDA's):

* a **stream** is an ordered queue of device work (kernels, copies); work on
  one stream runs in order, work on different streams may overlap;
* an **event** recorded on a stream completes when everything queued on that
  stream before the record has completed; ``done()`` asks without blocking
  (``cudaEventQuery``) and raises :class:`~aiopdbp.errors.DeviceError` when
  that work failed; ``wait_event(stream, ev)`` makes later work on ``stream``
  wait for ``ev`` on the device (no host involvement);
* a **device array** is any object the backend's :meth:`DeviceBackend.inspect`
  accepts: for CuPy a ``cupy.ndarray``, any ``__cuda_array_interface__``
  object or a DLPack object on a CUDA device; for the simulator a
  :class:`~aiopdbp.device.sim.SimArray`.

Host buffers handed to the copies are 1-D ``uint8`` numpy arrays; they must
be pinned (page-locked, from :meth:`DeviceBackend.alloc_pinned`) for a copy to
be truly asynchronous.  Byte offsets index a contiguous array's memory in its
own order (C or Fortran).

Every failure of the GPU library surfaces as ``DeviceError`` with the
library's exception as ``__cause__``; wrong arguments raise ``TypeError`` or
``ValueError`` before anything is queued.

This module also has the backend-independent helpers: :func:`classify`
(is an object host data or device data?) and :func:`default_device` (which
device a rank uses by default: its local rank modulo the visible devices).
"""

from __future__ import annotations

import abc
import importlib
import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeAlias

import numpy as np

from aiopdbp.env import LOCAL_RANK_VARS, local_rank
from aiopdbp.records import FrozenRecord, init_field

__all__ = [
    "ArrayInfo", "Captured", "DeviceBackend", "Event", "HostBuffer", "LOCAL_RANK_VARS", "Order",
    "Placement", "Stream", "classify", "default_device", "is_device_array", "local_rank", "order_of",
]

if TYPE_CHECKING:
    import numpy.typing as npt

    HostBuffer: TypeAlias = npt.NDArray[np.uint8]
else:   # at run time the class: numpy.typing would cost every rank an import at start
    HostBuffer = np.ndarray

Order = Literal["C", "F"]

# DLPack device types (dlpack.h, DLDeviceType)
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13


class Event(Protocol):
    """A point in a stream's work (a recorded CUDA event)."""

    def done(self) -> bool:
        """True once the captured work has completed; never blocks.  Raises
        ``DeviceError`` if that work failed."""
        ...

    def synchronize(self) -> None:
        """Block the calling thread until :meth:`done`.  Tests and shutdown
        only: never call it in the event loop."""
        ...


class Stream(Protocol):
    """An ordered queue of device work on one device."""

    @property
    def device(self) -> int: ...


class ArrayInfo(FrozenRecord):
    """What the staging machinery needs to know about a device array."""

    __slots__ = ("array", "device", "dtype", "shape", "strides", "nbytes", "order", "stream")
    array: Any  #: the backend's own array object (the source of copies)
    device: int  #: device id
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    strides: tuple[int, ...]  #: in bytes
    nbytes: int
    order: Order | None  #: memory order, None when not contiguous
    stream: Stream  #: the stream the array's pending producer work is on

    def __init__(self, array: Any,
                 device: int,
                 dtype: np.dtype[Any],
                 shape: tuple[int, ...],
                 strides: tuple[int, ...],
                 nbytes: int,
                 order: Order | None,
                 stream: Stream) -> None:
        init_field(self, "array", array)
        init_field(self, "device", device)
        init_field(self, "dtype", dtype)
        init_field(self, "shape", shape)
        init_field(self, "strides", strides)
        init_field(self, "nbytes", nbytes)
        init_field(self, "order", order)
        init_field(self, "stream", stream)


class Captured(NamedTuple):
    """A device array as it was when the user sent it: the producer's work
    pending at that moment is captured by ``after``, events recorded then on
    the producer's stream (and the sending SGP's ``gp.stream``).  Here, not
    with the device path that makes it, so that a send can tell one without
    importing the path (:mod:`aiopdbp.runtime.devices`)."""

    data: Any  #: the user's object (kept alive for the whole send)
    info: ArrayInfo
    after: tuple[Event, ...]


class DeviceBackend(abc.ABC):
    """Allocate, copy asynchronously, record and query events.  One instance
    serves every device of a process; not thread safe (use it from the thread
    that drives the transfers)."""

    name: str = "abstract"

    # -- devices
    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of visible devices."""

    @abc.abstractmethod
    def get_device(self) -> int:
        """The calling thread's current device."""

    @abc.abstractmethod
    def set_device(self, device: int) -> None:
        """Make ``device`` the calling thread's current device."""

    # -- arrays and memory
    @abc.abstractmethod
    def inspect(self, obj: Any, stream: Stream | None = None) -> ArrayInfo:
        """Describe a device array (``TypeError`` if this backend cannot use it).
        Its producer's stream is ``stream``, else the calling thread's current
        stream of its device (a DLPack producer orders its work before it)."""

    @abc.abstractmethod
    def empty(self, shape: tuple[int, ...], dtype: npt.DTypeLike, order: Order, device: int,
              stream: Stream | None = None) -> Any:
        """Allocate an uninitialised device array on ``device``, from the memory
        pool of ``stream`` (default: the current stream): the memory may be
        handed to the next allocation on that stream once the array is gone,
        so whoever uses it on another stream orders that work after ``stream``."""

    def as_stream(self, obj: Any, device: int) -> Stream:
        """The backend's handle of a user's stream object (``stream=`` arguments)."""
        return obj  # type: ignore[no-any-return]

    def is_pinned(self, buf: Any) -> bool:
        """True when host buffer ``buf`` is pinned (a copy with it is truly asynchronous)."""
        return False

    @abc.abstractmethod
    def contiguous(self, array: Any, stream: Stream) -> Any:
        """A C-contiguous copy of ``array``, made by work queued on ``stream``."""

    def as_tensor(self, array: Any) -> Any:
        """A torch tensor over device array ``array``, no copy, on its
        device (``torch.from_dlpack``; the tensor holds the array's memory):
        what a device array sent as a tensor arrives as where torch imports."""
        torch: Any = importlib.import_module("torch")  # (only a tensor's receiver imports it)
        return torch.from_dlpack(array)

    @abc.abstractmethod
    def alloc_pinned(self, nbytes: int) -> HostBuffer:
        """One pinned (page-locked) host allocation, usable by every device."""

    # -- streams and events
    @abc.abstractmethod
    def create_stream(self, device: int) -> Stream:
        """A new non-blocking stream on ``device`` (for aiopdbp's own copies)."""

    @abc.abstractmethod
    def current_stream(self, device: int) -> Stream:
        """The calling thread's current stream on ``device`` (the user's work)."""

    @abc.abstractmethod
    def record_event(self, stream: Stream) -> Event:
        """A new event capturing everything queued on ``stream`` so far."""

    @abc.abstractmethod
    def wait_event(self, stream: Stream, event: Event) -> None:
        """Work queued on ``stream`` from now on starts after ``event``."""

    # -- copies (contiguous arrays; byte offsets in the array's memory order)
    @abc.abstractmethod
    def copy_d2h(self, src: Any, src_offset: int, dst: HostBuffer, stream: Stream) -> None:
        """Queue a copy of ``dst.nbytes`` bytes of ``src`` from ``src_offset`` into ``dst``."""

    @abc.abstractmethod
    def copy_h2d(self, src: HostBuffer, dst: Any, dst_offset: int, stream: Stream) -> None:
        """Queue a copy of ``src`` into ``dst``'s bytes from ``dst_offset``."""

    @abc.abstractmethod
    def copy_d2d(self, src: Any, dst: Any, stream: Stream) -> None:
        """Queue a copy of all of ``src`` into ``dst`` (same nbytes; may cross devices)."""

    def close(self) -> None:
        """Release the backend's resources (idempotent)."""

    # -- helpers built on the primitives
    def from_host(
        self, host: Any, dtype: npt.DTypeLike, shape: tuple[int, ...], order: Order, device: int, stream: Stream,
        consumer: Stream | None = None,
    ) -> tuple[Any, Event]:
        """Wrap received *pinned* host bytes as a new device array: allocate
        from ``consumer``'s pool (default: the current stream), queue the copy
        on ``stream`` after ``consumer``'s work and return ``(array, event)``;
        the array is valid once ``event.done()``.  ``host`` must stay
        untouched until then.  Pageable memory raises ``ValueError``: its
        copy would block the calling thread (the event loop)."""
        buf = np.frombuffer(host, dtype=np.uint8)
        dt = np.dtype(dtype)
        if buf.nbytes != dt.itemsize * _prod(shape):
            raise ValueError(f"{buf.nbytes} bytes cannot hold a {dt} array of shape {shape}")
        if buf.nbytes and not self.is_pinned(buf):
            raise ValueError("from_host needs pinned host memory (alloc_pinned): a copy from pageable "
                             "memory is synchronous")
        owner = self.current_stream(device) if consumer is None else consumer
        arr = self.empty(shape, dt, order, device, owner)
        self.wait_event(stream, self.record_event(owner))
        if buf.nbytes:
            self.copy_h2d(buf, arr, 0, stream)
        return arr, self.record_event(stream)

    def __enter__(self) -> DeviceBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def order_of(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> Order | None:
    """``"C"``/``"F"`` when an array with these byte strides is contiguous in
    that order (C when both, e.g. 1-D), else None."""
    if _prod(shape) <= 1:
        return "C"

    def dense(dims: list[tuple[int, int]]) -> bool:
        expect = itemsize
        for n, s in dims:
            if n != 1 and s != expect:
                return False
            expect *= n
        return True

    dims = list(zip(shape, strides))
    if dense(dims[::-1]):
        return "C"
    if dense(dims):
        return "F"
    return None


class Placement(enum.Enum):
    """Where an array-like object's memory lives, as far as aiopdbp cares."""

    HOST = "host"  #: numpy, buffer protocol, DLPack on the CPU or in CUDA host memory
    CUDA = "cuda"  #: ``__cuda_array_interface__`` or DLPack on a CUDA device
    SIM = "sim"  #: a simulated device array (:class:`~aiopdbp.device.sim.SimArray`)
    OTHER = "other"  #: DLPack on a device aiopdbp cannot move (ROCm, Metal, ...)


def classify(obj: Any) -> Placement:
    """Say whether ``obj`` is host data or device data, without touching it.

    ``__cuda_array_interface__`` means a CUDA device array; otherwise
    ``__dlpack_device__()`` decides (kDLCUDA and kDLCUDAManaged are device
    memory, kDLCPU and kDLCUDAHost are host memory).  Everything else
    (bytes, numpy arrays, arbitrary objects) is ``HOST``: whether it can be
    sent at all is the codec's business.
    """
    if getattr(obj, "__aiopdbp_sim_device__", False):
        return Placement.SIM
    if type(obj) is np.ndarray or isinstance(obj, (bytes, bytearray, memoryview)):
        return Placement.HOST  # fast path for the common host payloads
    if getattr(obj, "is_cuda", None) is False and type(obj).__module__.startswith("torch"):
        return Placement.HOST  # a CPU (or meta) tensor, whose __cuda_array_interface__ raises: slow
    try:
        if getattr(obj, "__cuda_array_interface__", None) is not None:
            return Placement.CUDA
    except Exception:  # e.g. a CPU tensor raising from the property
        pass
    probe = getattr(obj, "__dlpack_device__", None)
    if probe is None:
        return Placement.HOST
    try:
        dev_type = int(probe()[0])
    except Exception:
        return Placement.HOST
    if dev_type in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        return Placement.CUDA
    if dev_type in (_KDL_CPU, _KDL_CUDA_HOST):
        return Placement.HOST
    return Placement.OTHER


def is_device_array(obj: Any) -> bool:
    """True for CUDA and simulated device arrays (see :func:`classify`)."""
    return classify(obj) in (Placement.CUDA, Placement.SIM)


def default_device(count: int, environ: Mapping[str, str] | None = None) -> int:
    """The device a rank uses when none is given: its local rank modulo the
    ``count`` visible devices (``CUDA_VISIBLE_DEVICES`` already applied), so
    ranks sharing a host spread over its GPUs; device 0 outside a launcher."""
    if count < 1:
        raise ValueError("no device is visible")
    return (local_rank(environ) or 0) % count
