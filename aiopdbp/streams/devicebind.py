"""What the device path is configured with, and who is on which device.

:class:`DeviceConfig` is the node's ``device=`` option (backend, pinned
pool, chunks in flight); :class:`DeviceBindings` the SGPs of a node and
their devices -- where device data for a GP lands; :class:`Sender` and
:class:`DeviceGP` what the device path needs of a GP (the runtime's GP and
SGP satisfy them; the streams layer never imports the runtime).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiopdbp.device import BACKENDS
from aiopdbp.device.backend import Captured as Captured  # (its home; named here too, as before)
from aiopdbp.device.backend import DeviceBackend, Stream, default_device
from aiopdbp.device.chunks import DEFAULT_CHUNK_SIZE, DEFAULT_POOL_BYTES
from aiopdbp.device.staging import DEFAULT_MAX_IN_FLIGHT
from aiopdbp.env import device_backend
from aiopdbp.hosts.tables import Tables

__all__ = ["BACKEND_CHOICES", "Captured", "DeviceBindings", "DeviceConfig", "DeviceGP", "Sender", "device_config"]


class Sender(Protocol):
    """The sending GP, as the device path sees it."""

    @property
    def name(self) -> str: ...
    @property
    def pid(self) -> int: ...


class DeviceGP(Sender, Protocol):
    """An SGP of this node (:class:`aiopdbp.runtime.sgp.SGP`)."""

    @property
    def device(self) -> int: ...
    @property
    def to_device(self) -> bool: ...
    @property
    def device_stream(self) -> Stream: ...

BACKEND_CHOICES = (*BACKENDS, "none")  # what open_backend opens, or no device support


@dataclass
class DeviceConfig:
    """Device support of a node (``open_node(device=DeviceConfig(...))``).

    ``backend``: ``"auto"``, ``"cupy"``, ``"sim"``, ``"none"`` or a
    :class:`~aiopdbp.device.backend.DeviceBackend` instance (not closed by
    the node); None reads env ``AIOPDBP_DEVICE`` (default ``"auto"``).
    ``pool_bytes`` / ``chunk_size``: the pinned pool, allocated once
    (chunks of 256 KiB-16 MiB); ``max_in_flight``: chunks in flight per
    transfer; ``recv_reserve``: chunks kept for receivers; ``sim``: options
    of the simulated backend (``copy_delay``, ``byte_delay``, ``devices``).
    """

    backend: str | DeviceBackend | None = None
    pool_bytes: int = DEFAULT_POOL_BYTES
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    recv_reserve: int | None = None
    sim: dict[str, Any] = field(default_factory=dict)


def device_config(value: DeviceConfig | str | DeviceBackend | None) -> DeviceConfig:
    """Normalise the node's ``device=`` option (a name, a backend, a config)."""
    if isinstance(value, DeviceConfig):
        cfg = dataclasses.replace(value)  # a copy: the caller's config is never changed here
    elif value is None or isinstance(value, (str, DeviceBackend)):
        cfg = DeviceConfig(backend=value)
    else:
        raise TypeError(f"device= takes a backend name, a DeviceBackend or a DeviceConfig, not {value!r}")
    if cfg.backend is None:
        cfg.backend = device_backend()
    if isinstance(cfg.backend, str) and cfg.backend not in BACKEND_CHOICES:
        raise ValueError(f"device backend must be one of {BACKEND_CHOICES}, got {cfg.backend!r}")
    return cfg


class DeviceBindings:
    """The SGPs of a node and their devices: where device data for a GP lands."""

    def __init__(self, tables: Tables, backend: Callable[[], DeviceBackend]) -> None:
        self._tables = tables
        self._backend = backend    # opens the node's backend on first use
        self._sgps: dict[int, DeviceGP] = {}
        # name -> (device, to_device) from before the registration is applied,
        # so a transfer that arrives before register() resumes lands right
        self._by_name: dict[str, tuple[int, bool]] = {}
        #: True while some SGP of this node was opened with ``to_device=True``
        #: (kept as they change: asked for every incoming array stream)
        self.any_to_device = False
        self._streams: dict[str, Stream] = {}  # name -> the SGP's stream (received arrays' pool)

    def __len__(self) -> int:
        return len(self._sgps)

    def bind(self, name: str, device: int | None, to_device: bool) -> tuple[int, Stream]:
        """Validate the device of SGP ``name`` (default: the rank's) and make
        its stream; from now on data for ``name`` lands on that device."""
        backend = self._backend()
        # the rank's device, never the thread's current one: aiopdbp does not change it
        dev = default_device(backend.device_count()) if device is None else device
        if type(dev) is not int or not 0 <= dev < backend.device_count():
            raise ValueError(f"device must be an int in [0, {backend.device_count()}), got {device!r}")
        stream = backend.create_stream(dev)
        self._by_name[name] = (dev, bool(to_device))
        self._streams[name] = stream
        self.any_to_device = any(td for _, td in self._by_name.values())
        return dev, stream

    def unbind(self, name: str) -> None:
        """SGP ``name`` was not registered after all, or is gone."""
        self._by_name.pop(name, None)
        self._streams.pop(name, None)
        self.any_to_device = any(td for _, td in self._by_name.values())

    def add(self, gp: DeviceGP) -> None:
        """SGP ``gp`` is registered."""
        self._sgps[gp.pid] = gp

    def remove(self, pid: int) -> None:
        """GP ``pid`` is gone (nothing happens if it was no SGP)."""
        gp = self._sgps.pop(pid, None)
        if gp is not None:
            self.unbind(gp.name)

    def get(self, pid: int) -> DeviceGP | None:
        """The SGP ``pid`` of this node, if it is one."""
        return self._sgps.get(pid)

    def binding(self, pid: int, name: str = "") -> tuple[int, bool] | None:
        """(device, to_device) of GP ``pid`` (or, not registered yet here, of ``name``)."""
        gp = self._sgps.get(pid)
        if gp is not None:
            return gp.device, gp.to_device
        known = self._tables.names.get(pid)
        b = None if known is None else self._by_name.get(known)
        return b if b is not None or not name else self._by_name.get(name)

    def stream_of(self, pid: int, name: str = "") -> Stream | None:
        """The stream of SGP ``pid`` (or ``name``): received device arrays are
        allocated from its memory pool and ordered after its work."""
        gp = self._sgps.get(pid)
        if gp is not None:
            return gp.device_stream
        known = self._tables.names.get(pid) or name
        return self._streams.get(known) if known else None

    def device_of(self, pid: int) -> int | None:
        """The device of GP ``pid`` if it is an SGP of this node, else None."""
        b = self.binding(pid)
        return None if b is None else b[0]

    def wants_device(self, pid: int) -> bool:
        """True for an SGP of this node opened with ``to_device=True``."""
        b = self.binding(pid)
        return b is not None and b[1]

