"""A GP's sending side: what ``await gp.send(...)`` does once awaited.

:meth:`GP.send <aiopdbp.runtime.process.GP.send>` does at the call only
what cannot wait (a tensor's memory taken, a device array's pending work
captured) and returns :meth:`GPSender.send`'s coroutine: the argument checks,
the payload's snapshot, the fairness of a run of sends (``BURST_BYTES``), and
the route -- the router's one call when nothing waits, an owned send for a
large writable array, the device path, a multicast.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from aiopdbp.wire.mesp import Kind
from aiopdbp.errors import ClosedResourceError
from aiopdbp.wire.message import CREDIT_OVERHEAD, credit_cost
from aiopdbp.arrays import cpu_tensor_view, host_array, plain_snapshot
from aiopdbp.device.backend import Captured
from aiopdbp.runtime.payloads import MAX_NDIM, check_com, check_dest, check_timeout, ownable, snapshot
from aiopdbp.runtime.sendcore import SendPath
from aiopdbp.runtime.sendpath import BURST_BYTES

if TYPE_CHECKING:
    from aiopdbp.routing.router import Router
    from aiopdbp.streams.devicepath import DevicePath
    from aiopdbp.streams.table import StreamTable

__all__ = ["BURST_BYTES", "GPSender", "SenderHost"]

_SHORT, _COMMAND = Kind.SHORT, Kind.COMMAND


class SenderHost(Protocol):
    """What a GP's sending side needs of its node."""

    @property
    def allow_pickle(self) -> bool: ...
    @property
    def router(self) -> Router: ...
    @property
    def streams(self) -> StreamTable: ...
    @property
    def devices(self) -> DevicePath: ...
    @property
    def owned_min(self) -> int | None: ...


class GPSender:
    """The sending side of one GP (its ``Sender``, as the device path sees it).

    Its :attr:`path` (:class:`~aiopdbp.runtime.sendpath.SendPath`, compiled
    where built) takes the common case and holds the state every send
    shares -- whether the GP was freed, the credit left in a run of sends --
    and hands anything else to :meth:`send`.  The GP marks the path freed
    when it is freed; its receives reset the path's ``burst`` when they
    suspend.
    """

    __slots__ = ("_node", "_owned_min", "_router", "_try_send", "name", "path", "pid")

    def __init__(self, node: SenderHost, name: str, pid: int) -> None:
        #: the sending GP's name and pid (what every message carries)
        self.name = name
        self.pid = pid
        self._node = node
        self._router = node.router
        self._try_send = node.router.try_send  # hot path: one call, no coroutine, when nothing waits
        # arrays this large take send_owned (MPI_Send ownership); smaller ones the copy path
        self._owned_min = node.owned_min if node.owned_min is not None else sys.maxsize
        #: send's common case in one step; this sender's :meth:`send` is its slow path
        self.path = SendPath(name, pid, node.router, self.send, owned_min=self._owned_min,
                             snapshot=plain_snapshot, max_ndim=MAX_NDIM, tensor_view=cpu_tensor_view)

    async def send(self, dest: str | Iterable[str], data: Any, com: int, kind: Kind, timeout: float | None,
                   copy: bool) -> None:
        """Body of :meth:`GP.send <aiopdbp.runtime.process.GP.send>` (``data`` a
        :class:`Captured` device array or host data).

        Cancellation: as for ``GP.send``.
        """
        path = self.path
        if path.freed:
            raise ClosedResourceError(f"GP {self.name!r} was freed")
        if type(com) is not int or not 0 <= com <= 0xFFFFFFFF:
            check_com(com)
        if kind is not _SHORT and kind is not _COMMAND:
            raise ValueError(f"send() carries Kind.SHORT or Kind.COMMAND messages, not {kind!r} "
                             "(streams go with send_stream)")
        if timeout is not None:
            check_timeout(timeout)
        if not isinstance(dest, str):
            check_dest(dest)
            names = list(dest)
            for n in names:
                if not isinstance(n, str):
                    raise TypeError(f"dest: GP names are strings, not {type(n).__name__} ({n!r})")
            await self._multicast(names, data, com, kind, timeout)
            return
        # Snapshot first: a refused payload must not hold a reservation.
        if type(data) is bytes:
            cost = len(data) + CREDIT_OVERHEAD
        elif (type(data) is np.ndarray and (nbytes := data.nbytes) < self._owned_min
              and (plain := plain_snapshot(data, MAX_NDIM)) is not None):
            # the commonest array (a plain dtype, copied or shared): snapshot's rule in one call
            data = plain
            cost = nbytes + CREDIT_OVERHEAD
        else:
            if data is not None:
                node = self._node
                if type(data) is not np.ndarray and (arr := host_array(data)) is not None:
                    data = arr  # a tensor's memory as an ndarray (no copy): the paths numpy takes
                if type(data) is np.ndarray and data.nbytes >= self._owned_min and ownable(data):
                    # large: sent from this very buffer, the call returns once it may be reused
                    await self._router.send_owned(dest, (self.name, kind, com, data, self.pid),
                                                  data.nbytes + CREDIT_OVERHEAD, timeout,
                                                  lambda d: snapshot(d, node.allow_pickle, False))
                    return
                if type(data) is Captured:
                    await node.devices.send(self, node.streams, dest, data, com=com, kind=kind,
                                            timeout=timeout, copy=copy)
                    return
                data = snapshot(data, node.allow_pickle, False)
            cost = credit_cost(data)
        # A run of sends that never suspend yields once per BURST_BYTES of
        # credit, so that a looping sender cannot fill an empty window before
        # the other senders have run (aiopdbp.hosts.link, "From the first
        # message").  Before anything is queued: a cancel here has sent nothing.
        path.burst -= cost
        if path.burst <= 0:
            path.burst = BURST_BYTES
            await asyncio.sleep(0)
            if path.freed:
                raise ClosedResourceError(f"GP {self.name!r} was freed")
        fields = (self.name, kind, com, data, self.pid)
        if not self._try_send(dest, fields, cost):  # the router routed it: nothing to wait for
            path.burst = BURST_BYTES
            await self._router.send_waiting(dest, fields, cost, timeout)

    async def _multicast(self, names: list[str], data: Any, com: int, kind: Kind,
                         timeout: float | None) -> None:
        node = self._node
        router = self._router
        if not names:
            raise ValueError("multicast to an empty set of names")
        if type(data) is Captured:  # one device transfer per receiver
            for name in dict.fromkeys(names):
                await node.devices.send(self, node.streams, name, data, com=com, kind=kind, timeout=timeout, copy=True)
            return
        pids = tuple(dict.fromkeys([await router.resolve(n, timeout) for n in names]))
        data = snapshot(data, node.allow_pickle, len(pids) > 1)
        await router.multicast(f"the multicast group {names!r}", pids, (self.name, kind, com, data, self.pid),
                               credit_cost(data), timeout)
