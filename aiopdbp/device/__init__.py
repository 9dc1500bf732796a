"""Device (GPU) support: the backend interface, the CuPy and simulated
backends, and pipelined staging of device arrays through pinned host memory.

Importing this package imports neither CuPy nor MPI; :func:`open_backend`
loads CuPy only when asked for it.
"""

from __future__ import annotations

import os
from typing import Any

from aiopdbp.errors import DeviceError
from aiopdbp.device.backend import ArrayInfo, DeviceBackend, Event, Placement, Stream, classify, default_device, is_device_array
from aiopdbp.device.chunks import ArrayMeta, ChunkPlan, PinnedChunkPool
from aiopdbp.device.sim import Fault, SimArray, SimBackend
from aiopdbp.device.staging import ChunkState, RecvTransfer, SendTransfer, Stager, TransferState

__all__ = [
    "ArrayInfo", "ArrayMeta", "ChunkPlan", "ChunkState", "DeviceBackend", "Event", "Fault", "Placement",
    "PinnedChunkPool", "RecvTransfer", "SendTransfer", "SimArray", "SimBackend", "Stager", "Stream",
    "TransferState", "classify", "default_device", "is_device_array", "open_backend",
]

BACKENDS = ("auto", "cupy", "sim")


def open_backend(kind: str | None = None, **options: Any) -> DeviceBackend:
    """A device backend: ``"cupy"``, ``"sim"`` (:class:`SimBackend`, with
    ``options``), or ``"auto"`` (the default; env ``AIOPDBP_DEVICE`` may name
    one): CuPy when it imports and sees a device, else ``DeviceError``."""
    if kind is None:
        kind = os.environ.get("AIOPDBP_DEVICE", "").strip().lower() or "auto"
    if kind not in BACKENDS:
        raise ValueError(f"device backend must be one of {BACKENDS}, got {kind!r}")
    if kind == "sim":
        return SimBackend(**options)
    from aiopdbp.device.cupy_backend import CupyBackend  # imports CuPy

    backend = CupyBackend(**options)
    if kind == "auto" and backend.device_count() < 1:
        raise DeviceError("CuPy sees no CUDA device (use the simulated backend: AIOPDBP_DEVICE=sim)")
    return backend
