"""Device (GPU) support: move device arrays through pinned host memory.

Theory of operation
-------------------
An MPI library that is not CUDA-aware cannot read device memory, so a device
array travels in chunk-sized pieces staged through a fixed pool of pinned
host chunks, with the copies of one chunk overlapping the sends of the
others.

* :class:`DeviceBackend` (``backend``): everything aiopdbp asks of a GPU
  library -- asynchronous copies between device arrays and host memory on a
  :class:`Stream`, and an :class:`Event` that says, without blocking, when
  they are done.  :func:`classify` tells a device array from host data
  (DLPack), :func:`default_device` picks a rank's GPU from its local rank.
* Two backends: ``CupyBackend`` (``cupy_backend``, CUDA through CuPy,
  imported only by :func:`open_backend`) and :class:`SimBackend` (``sim``,
  CUDA's ordering rules over host memory with injectable faults, for CI).
* :class:`ChunkPlan` / :class:`ArrayMeta` (``chunks``): how both ends cut an
  array identically from the header alone; :class:`PinnedChunkPool`, the
  pinned chunks.
* :class:`Stager` (``staging``): the pipelined :class:`SendTransfer` /
  :class:`RecvTransfer` state machines, driven by ``poll()`` from a progress
  step.  Sends and receives of the pieces are posted through callables the
  caller hands in (``post_send`` / ``post_recv``), so this package never
  names a transport.

Importing this package imports neither CuPy nor MPI.  Imports: only
:mod:`aiopdbp.errors`, :mod:`aiopdbp.env`, :mod:`aiopdbp.records` and this package (streams/ above
uses it; wire/, pool/ and transport/ beside it are not imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiopdbp.env import device_backend
from aiopdbp.lazy import lazy_exports
from aiopdbp.errors import DeviceError
from aiopdbp.device.backend import (
    ArrayInfo,
    DeviceBackend,
    Event,
    Placement,
    Stream,
    classify,
    default_device,
    is_device_array,
    local_rank,
)

__all__ = [
    "ArrayInfo", "ArrayMeta", "ChunkPlan", "ChunkState", "DeviceBackend", "Event", "Fault", "Placement",
    "PinnedChunkPool", "RecvTransfer", "Request", "SendTransfer", "SimArray", "SimBackend", "SimTensor", "Stager", "Stream",
    "TransferState", "classify", "default_device", "is_device_array", "local_rank", "open_backend", "BACKENDS",
]

BACKENDS = ("auto", "cupy", "sim")

# The staging machinery and the simulated device are loaded on first use
# (PEP 562): every rank imports this package (a send asks whether its data is
# a device array), few stage a device array, fewer simulate a device.
__getattr__ = lazy_exports(globals(), {
    **dict.fromkeys(("ArrayMeta", "ChunkPlan", "PinnedChunkPool"), "aiopdbp.device.chunks"),
    **dict.fromkeys(("ChunkState", "RecvTransfer", "Request", "SendTransfer", "Stager", "TransferState"),
                    "aiopdbp.device.staging"),
    **dict.fromkeys(("Fault", "SimArray", "SimBackend", "SimTensor"), "aiopdbp.device.sim"),
})


if TYPE_CHECKING:
    from aiopdbp.device.chunks import ArrayMeta as ArrayMeta
    from aiopdbp.device.chunks import ChunkPlan as ChunkPlan
    from aiopdbp.device.chunks import PinnedChunkPool as PinnedChunkPool
    from aiopdbp.device.staging import ChunkState as ChunkState
    from aiopdbp.device.staging import RecvTransfer as RecvTransfer
    from aiopdbp.device.staging import Request as Request
    from aiopdbp.device.staging import SendTransfer as SendTransfer
    from aiopdbp.device.staging import Stager as Stager
    from aiopdbp.device.staging import TransferState as TransferState
    from aiopdbp.device.sim import Fault as Fault
    from aiopdbp.device.sim import SimArray as SimArray
    from aiopdbp.device.sim import SimBackend as SimBackend
    from aiopdbp.device.sim import SimTensor as SimTensor


def open_backend(kind: str | None = None, **options: Any) -> DeviceBackend:
    """A device backend: ``"cupy"``, ``"sim"`` (:class:`SimBackend`, with
    ``options``), or ``"auto"`` (the default; env ``AIOPDBP_DEVICE`` may name
    one): CuPy when it imports and sees a device, else ``DeviceError``."""
    if kind is None:
        kind = device_backend()
    if kind not in BACKENDS:
        raise ValueError(f"device backend must be one of {BACKENDS}, got {kind!r}")
    if kind == "sim":
        from aiopdbp.device.sim import SimBackend

        return SimBackend(**options)
    from aiopdbp.device.cupy_backend import CupyBackend  # imports CuPy

    backend = CupyBackend(**options)
    if kind == "auto" and backend.device_count() < 1:
        raise DeviceError("CuPy sees no CUDA device (use the simulated backend: AIOPDBP_DEVICE=sim)")
    return backend
