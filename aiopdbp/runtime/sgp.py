"""SGP: a generalized process bound to a GPU (``PType.GPU``).

``async with node.process(name, ptype=PType.GPU, device=None) as gp`` makes
an :class:`SGP`: a :class:`~aiopdbp.runtime.process.GP` with one device
(``gp.device``, by default the rank's: its local rank modulo the visible
devices) and one non-blocking stream of its own on that device
(``gp.stream``: a ``cupy.cuda.Stream`` with CuPy), and the SGP delivery rule
of :mod:`aiopdbp.streams.devicepath`: device data arrives as device arrays on
``gp.device``; host data arrives as numpy unless the SGP was opened with
``to_device=True``, which copies numpy message payloads and numpy array
streams to the device.  Several SGPs of one rank may use different devices.

Ordering: a send from an SGP is ordered after the work pending, when
``send`` is called, on the array's stream (``stream=``, else CuPy's current
stream) *and* on ``gp.stream``; a received array is complete when
``recv``/``read`` returns, and comes from ``gp.stream``'s memory pool (its
copies waited for that stream's work), so kernels on ``gp.stream`` may use
it and drop it at once.  aiopdbp never changes the current device: enter
``cupy.cuda.Device(gp.device)`` before ``gp.stream`` on a multi-GPU rank.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.wire.message import Message
from aiopdbp.runtime.process import GP, GPHost
from aiopdbp.streams.receiver import IncomingStream
from aiopdbp.hosts.tables import PType

if TYPE_CHECKING:
    from aiopdbp.device.backend import Stream

__all__ = ["SGP"]


class SGP(GP):
    """A GPU GP: a GP bound to one device, with its own stream.

    Get one with ``node.process(name, ptype=PType.GPU, device=None,
    to_device=False)``.  It receives device arrays on its device, complete
    (their copies done); host arrays arrive as numpy, or on its device too
    with ``to_device=True``.  See :doc:`/guide/gpu`.
    """

    def __init__(self, node: GPHost, name: str, pid: int, *, device: int, stream: Stream,
                 to_device: bool = False) -> None:
        super().__init__(node, name, pid, PType.GPU)
        self._device = device
        self._stream = stream
        self.to_device = to_device
        self._held: Message | None = None  # taken from the pipe, its copy to the device cancelled

    def __repr__(self) -> str:
        return f"<SGP {self.name!r} pid={self.pid} device={self._device} on node {self.node.rank}>"

    @property
    def device(self) -> int:
        """The device this GP runs on."""
        return self._device

    @property
    def stream(self) -> Any:
        """This GP's own stream, as the GPU library knows it (``cupy.cuda.Stream``
        for CuPy): queue work on it, and sends are ordered after it."""
        return getattr(self._stream, "owner", None) or self._stream

    @property
    def device_stream(self) -> Stream:
        """The same stream as the device backend knows it."""
        return self._stream

    async def recv(self, timeout: float | None = None, *,
                   arrays: str | None = None) -> Message | IncomingStream:
        """As :meth:`GP.recv`; with ``to_device=True`` a host array payload
        is first copied to this GP's device (a CPU tensor arrives as a
        tensor there, where torch imports).

        Cancellation: nothing is lost: a message whose copy was cancelled is
        returned by the next ``recv``.
        """
        item: Message | IncomingStream
        if self._held is not None:
            item, self._held = self._held, None
        else:
            item = await super().recv(timeout, arrays=arrays)
        if self.to_device and type(item) is Message and item.data is not None and type(item.data) is not bytes:
            try:
                data = await self.node.devices.to_device(item.data, self.pid)
            except asyncio.CancelledError:
                self._held = item
                raise
            return Message((item.source, item.kind, item.com, data, item.source_pid))
        return item
