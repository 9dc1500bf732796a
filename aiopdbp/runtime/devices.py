"""A node's device path, made when it is first needed.

Most ranks never touch a device array: the device path
(:class:`~aiopdbp.streams.devicepath.DevicePath`, its bindings, the staging
and chunk modules) is imported and built at the first thing that needs it
-- an SGP, a device array sent, a device stream arriving, ``node.devices``
asked for -- not when the node is made.  A node whose ``device=`` option
(or ``AIOPDBP_DEVICE``) names a backend, a config or a backend instance
builds it at once, as before: a named backend opens at node start, and a bad
option fails ``open_node``.  :class:`NodeDevices` stands in for the path
where the node's other parts hold it (the stream table, the GP registry)
and answers as an unbuilt, idle path would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiopdbp.env import device_backend
from aiopdbp.streams.receiver import IncomingStream, StreamMeta

if TYPE_CHECKING:
    from aiopdbp.device.backend import Stream
    from aiopdbp.streams.devicebind import DeviceGP
    from aiopdbp.streams.devicepath import DevicePath

__all__ = ["NodeDevices", "on_demand"]

#: ``device=`` values whose path waits for its first use (they open nothing at start)
_LAZY = ("auto", "none")


def on_demand(option: object) -> bool:
    """True when a node's ``device=`` option leaves its device path to be
    made on first use: unset with ``AIOPDBP_DEVICE`` unset (or ``auto`` /
    ``none``), or the name ``"auto"`` / ``"none"``."""
    if option is None:
        return device_backend() in _LAZY
    return type(option) is str and option in _LAZY


class NodeDevices:
    """The node's device path behind ``make``, built on first use (now, when
    ``eager``); the stream table's device hooks and the GP registry's SGP
    bindings go through here."""

    __slots__ = ("_make", "_path", "_closed")

    def __init__(self, make: Callable[[], DevicePath], *, eager: bool) -> None:
        self._make = make
        self._path: DevicePath | None = None
        self._closed = False
        if eager:
            self.path  # noqa: B018  (built now: a bad option fails here)

    @property
    def path(self) -> DevicePath:
        """The device path, made now if it was not."""
        path = self._path
        if path is None:
            path = self._path = self._make()
            if self._closed:
                path.close()  # asked for after the node closed: a closed path
        return path

    @property
    def built(self) -> bool:
        """Whether the device path was made."""
        return self._path is not None

    # -- the node's lifecycle
    def start(self) -> None:
        if self._path is not None:
            self._path.start()

    def close(self) -> None:
        self._closed = True
        if self._path is not None:
            self._path.close()

    def stats(self) -> dict[str, Any]:
        if self._path is not None:
            return self._path.stats()
        # what an idle path that opened nothing says (DevicePath.stats)
        return {"backend": None, "sent_local": 0, "sent_remote": 0, "received_remote": 0, "drained": 0,
                "jobs": 0, "sgps": 0}

    # -- the stream table's hooks (aiopdbp.streams.table.StreamDevices)
    def stream_class(self, kind: str, dest_pid: int) -> type[IncomingStream]:
        if self._path is None and kind != "device":
            return IncomingStream   # no SGP (none opened before the path was made), no device stream
        return self.path.stream_class(kind, dest_pid)

    def start_incoming(self, host: int, stream: IncomingStream) -> bool:
        return self.path.start_incoming(host, stream)

    def refuse_incoming(self, host: int, key: tuple[int, int], meta: StreamMeta) -> None:
        self.path.refuse_incoming(host, key, meta)

    def break_host(self, host: int, exc: BaseException) -> None:
        if self._path is not None:
            self._path.break_host(host, exc)

    # -- the GP registry's SGP bindings (aiopdbp.streams.devicebind.DeviceBindings)
    def bind(self, name: str, device: int | None, to_device: bool) -> tuple[int, Stream]:
        return self.path.sgps.bind(name, device, to_device)

    def unbind(self, name: str) -> None:
        if self._path is not None:
            self._path.sgps.unbind(name)

    def add(self, gp: DeviceGP) -> None:
        self.path.sgps.add(gp)

    def remove(self, pid: int) -> None:
        if self._path is not None:   # (no path: no SGP to remove)
            self._path.sgps.remove(pid)
