"""A GP's send, the common case in one step: :meth:`SendPath.send` is the
awaitable :meth:`~aiopdbp.runtime.process.GP.send` returns, and in the
compiled form ``gp.send`` is :meth:`SendPath.call` itself.

The common case is a ``bytes`` payload or a small array of a plain dtype
(its snapshot in one call) to one GP by name, with a valid ``com``,
``kind`` and ``timeout``: the checks, the burst's yield, and the routing
decision when nothing has to wait (the router's ``try_send``: name -> pid ->
target, the target's ``offer``) are this one coroutine.  Anything else --
a multicast, another payload, a large array sent from its own buffer, a
device array -- is the sending side's coroutine (``slow``: ``GPSender.send``), unchanged; so is
the wait when the target cannot take the message now (the router's
``send_waiting``).  The same checks come in the same order as in the GP's
coroutine, so a wrong argument raises the same error.

This module has a compiled twin (``aiopdbp.runtime.csendpath``, chosen by
:mod:`aiopdbp.runtime.sendcore`): a compiled coroutine instead of a Python
frame per send, and no Python call between the GP and the host link's
compiled ``offer``; there ``gp.send`` is the compiled :meth:`SendPath.call`
(host data without ``stream=``: this path's ``send``, as a coroutine of the
compiled form's own whose first step is the common case; anything else -- a
tensor, a device array, ``stream=`` -- the GP's own ``send``, ``whole``), so
no Python frame runs between the caller and the compiled coroutine.  Where
the compiled form is not built, ``gp.send`` stays the GP's own (this form's
``call`` would be the same one frame); this one is the twin the compiled one
is held to.  ``tests/test_sendpath.py`` runs both forms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.errors import ClosedResourceError
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import CREDIT_OVERHEAD

if TYPE_CHECKING:
    from aiopdbp.routing.router import Router

__all__ = ["BURST_BYTES", "SendPath"]

#: a GP's run of sends that complete without suspending yields once every
#: this many bytes of credit (``credit_cost``): k looping senders then fill an
#: empty window (1 MiB by default) in turns of this much each -- fair from the
#: first message -- at one loop turn per 16 KiB (15 messages of 1 KiB, 128 of
#: 64 B: few enough to keep a block's coalescing)
BURST_BYTES = 16 << 10

_SHORT, _COMMAND = Kind.SHORT, Kind.COMMAND

#: the GP's coroutine for everything else: (dest, data, com, kind, timeout, copy)
Slow = Callable[[Any, Any, int, Kind, "float | None", bool], Coroutine[Any, Any, None]]
#: the GP's own ``send`` (``GP.send``'s signature: dest, data, com=, kind=, timeout=, copy=, stream=)
Whole = Callable[..., Coroutine[Any, Any, None]]


class SendPath:
    """One GP's send state -- its name and pid, whether it was freed, the
    credit left in its run of sends that never suspended (``burst``) -- and
    the router's tables the common case reads."""

    def __init__(self, name: str, pid: int, router: Router, slow: Slow, *, owned_min: int,
                 snapshot: Callable[[np.ndarray[Any, Any], int], Any], max_ndim: int) -> None:
        self.name = name
        self.pid = pid
        self.freed = False
        #: credit left before a run of sends that never suspended yields
        self.burst = BURST_BYTES
        self._router = router
        self._try_send = router.try_send  # the routing decision when nothing waits (the twin: inline)
        self._slow = slow
        self._owned_min = owned_min       # arrays this large are sent from their own buffer (slow)
        self._snapshot = snapshot         # a plain array's snapshot in one call (None: not plain)
        self._max_ndim = max_ndim
        #: the GP's own ``send`` for what :meth:`call` does not take (the GP sets it)
        self.whole: Whole | None = None

    def call(self, dest: Any, data: Any = None, *, com: int = 0, kind: Kind = _SHORT,
             timeout: float | None = None, copy: bool = True, stream: Any = None) -> Coroutine[Any, Any, None]:
        """``GP.send`` (read its docstring): host data (``None``, ``bytes``, an
        ndarray) without ``stream=`` is :meth:`send`'s coroutine, which checks
        the rest when awaited; anything else is the GP's own ``send``
        (``whole``), which converts a tensor and captures a device array at
        the call."""
        if stream is None and (data is None or type(data) is bytes or type(data) is np.ndarray):
            return self.send(dest, data, com, kind, timeout, copy)
        if self.whole is None:
            raise RuntimeError("SendPath.call: no GP send set (whole) for this payload")
        return self.whole(dest, data, com=com, kind=kind, timeout=timeout, copy=copy, stream=stream)

    async def send(self, dest: Any, data: Any, com: int, kind: Kind, timeout: float | None,
                   copy: bool) -> None:
        """Send ``data`` to the GP named ``dest`` (see ``GP.send``)."""
        if (self.freed or type(com) is not int or not 0 <= com <= 0xFFFFFFFF
                or (kind is not _SHORT and kind is not _COMMAND) or type(dest) is not str
                or (timeout is not None and (type(timeout) is not float or not timeout >= 0))):
            await self._slow(dest, data, com, kind, timeout, copy)   # (it raises what is wrong)
            return
        if type(data) is bytes:
            cost = len(data) + CREDIT_OVERHEAD
        elif type(data) is np.ndarray and data.nbytes < self._owned_min and (
                plain := self._snapshot(data, self._max_ndim)) is not None:
            cost = data.nbytes + CREDIT_OVERHEAD
            data = plain
        else:
            await self._slow(dest, data, com, kind, timeout, copy)
            return
        # A run of sends that never suspend yields once per BURST_BYTES of
        # credit, so that a looping sender cannot fill an empty window before
        # the other senders have run (aiopdbp.hosts.link, "From the first
        # message").  Before anything is queued: a cancel here has sent nothing.
        self.burst -= cost
        if self.burst <= 0:
            self.burst = BURST_BYTES
            await asyncio.sleep(0)
            if self.freed:
                raise ClosedResourceError(f"GP {self.name!r} was freed")
        fields = (self.name, kind, com, data, self.pid)
        if not self._try_send(dest, fields, cost):  # the router routed it: nothing to wait for
            self.burst = BURST_BYTES
            await self._router.send_waiting(dest, fields, cost, timeout)
