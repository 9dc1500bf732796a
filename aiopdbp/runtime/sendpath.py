"""A GP's send, the common case in one step: :meth:`SendPath.send` is the
awaitable :meth:`~aiopdbp.runtime.process.GP.send` returns, and in the
compiled form ``gp.send`` is :meth:`SendPath.call` itself.

The common case is a ``bytes`` payload or a small array of a plain dtype
(its snapshot in one call) to one GP by name, with a valid ``com``,
``kind`` and ``timeout``: the checks, the burst's yield, and the routing
decision when nothing has to wait (the router's ``try_send``: name -> pid ->
target, the target's ``offer``) are this one coroutine.  So is a large array
sent from its own buffer (``MPI_Send`` ownership) when the router's
``send_owned`` would take its own common case -- a known remote GP whose
link's ``owned`` takes it now -- and the wait is that link's
:class:`~aiopdbp.hosts.owned.OwnedDone` (:meth:`SendPath._owned`).  Anything
else -- a multicast, another payload, a device array, an owned send the link
does not take now -- is the sending side's coroutine (``slow``:
``GPSender.send``), unchanged; so is
the wait when the target cannot take the message now (the router's
``send_waiting``).  The same checks come in the same order as in the GP's
coroutine, so a wrong argument raises the same error.  A stream of one
short buffer to a GP on another host is the same kind of step
(:meth:`SendPath.stream`; in the compiled form ``gp.send_stream`` is
:meth:`SendPath.call_stream`): its record through the link's ``offer``, or
the table's wait for credit; anything else is ``GP.send_stream``.

This module has a compiled twin (``aiopdbp.runtime.csendpath``, chosen by
:mod:`aiopdbp.runtime.sendcore`): a compiled coroutine instead of a Python
frame per send, and no Python call between the GP and the host link's
compiled ``offer``; there ``gp.send`` is the compiled :meth:`SendPath.call`
(host data without ``stream=``, and a plain CPU tensor seen before as its
memory's ndarray: this path's ``send``, as a coroutine of the compiled form's
own whose first step is the common case; anything else -- another tensor, a
device array, ``stream=`` -- the GP's own ``send``, ``whole``), so no Python
frame runs between the caller and the compiled coroutine.  Where
the compiled form is not built, ``gp.send`` stays the GP's own (this form's
``call`` would be the same one frame); this one is the twin the compiled one
is held to.  ``tests/test_sendpath.py`` runs both forms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.errors import ClosedResourceError, UnknownProcessError
from aiopdbp.runtime.payloads import ownable
from aiopdbp.streams.receiver import DEFAULT_SEGMENT, EAGER_LIMIT
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import CREDIT_OVERHEAD

if TYPE_CHECKING:
    from aiopdbp.hosts.owned import OwnedDone
    from aiopdbp.routing.router import Router
    from aiopdbp.streams.table import StreamTable

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
#: the GP's own ``send_stream`` (its signature: dest, data, segment_size=, com=, timeout=, copy=, stream=)
WholeStream = Callable[..., Coroutine[Any, Any, int]]
#: dtype kinds a short stream's array may have without a closer look (numbers, bools, datetimes)
_PLAIN = "biufcmM"


class SendPath:
    """One GP's send state -- its name and pid, whether it was freed, the
    credit left in its run of sends that never suspended (``burst``) -- and
    the router's tables the common case reads."""

    def __init__(self, name: str, pid: int, router: Router, slow: Slow, *, owned_min: int,
                 snapshot: Callable[[np.ndarray[Any, Any], int], Any], max_ndim: int,
                 tensor_view: Callable[[Any], np.ndarray[Any, Any] | None] | None = None) -> None:
        self.name = name
        self.pid = pid
        self.freed = False
        #: credit left before a run of sends that never suspended yields
        self.burst = BURST_BYTES
        self._router = router
        self._try_send = router.try_send  # the routing decision when nothing waits (the twin: inline)
        self._pids = router.pids          # (what an owned send's common case reads: _owned)
        self._targets = router.targets
        self._queued = router._queued
        self._slow = slow
        self._owned_min = owned_min       # arrays this large are sent from their own buffer (_owned)
        self._snapshot = snapshot         # a plain array's snapshot in one call (None: not plain)
        self._max_ndim = max_ndim
        # a plain CPU tensor's memory as an ndarray, else None (arrays.cpu_tensor_view)
        self._tensor_view = tensor_view
        #: the GP's own ``send`` for what :meth:`call` does not take (the GP sets it)
        self.whole: Whole | None = None
        #: the node's stream table (the GP sets it; None: every stream is ``whole_stream``'s)
        self.streams: StreamTable | None = None
        #: the GP's own ``send_stream`` for what :meth:`stream` does not take (the GP sets it)
        self.whole_stream: WholeStream | None = None

    def call(self, dest: Any, data: Any = None, *, com: int = 0, kind: Kind = _SHORT,
             timeout: float | None = None, copy: bool = True, stream: Any = None) -> Coroutine[Any, Any, None]:
        """``GP.send`` (read its docstring): host data (``None``, ``bytes``, an
        ndarray) without ``stream=`` is :meth:`send`'s coroutine, which checks
        the rest when awaited; anything else is the GP's own ``send``
        (``whole``), which converts a tensor and captures a device array at
        the call.  A plain CPU tensor seen before is its memory's ndarray
        here (:meth:`_tensor`), and that array takes the same way."""
        if stream is None and (data is None or type(data) is bytes or type(data) is np.ndarray):
            return self.send(dest, data, com, kind, timeout, copy)
        if stream is None and (view := self._tensor(data)) is not None:
            return self.send(dest, view, com, kind, timeout, copy)
        if self.whole is None:
            raise RuntimeError("SendPath.call: no GP send set (whole) for this payload")
        return self.whole(dest, data, com=com, kind=kind, timeout=timeout, copy=copy, stream=stream)

    def _tensor(self, data: Any) -> np.ndarray[Any, Any] | None:
        # (the view GP.send takes first, without its frame; None: what the
        # view leaves -- a device, sparse or non-contiguous tensor, one that
        # requires grad -- goes to the GP's send, which says why)
        return None if self._tensor_view is None else self._tensor_view(data)

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
        elif type(data) is np.ndarray and data.nbytes >= self._owned_min:
            done = self._owned(dest, data, com, kind)
            if done is None:
                await self._slow(dest, data, com, kind, timeout, copy)
            else:
                await done   # (its cancel rule is OwnedDone's: see Router.send_owned)
            return
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

    def _owned(self, dest: str, data: np.ndarray[Any, Any], com: int, kind: Kind) -> OwnedDone | None:
        """The common case of :meth:`Router.send_owned
        <aiopdbp.routing.router.Router.send_owned>` (the same reads, in the
        same order): an ownable array to a known remote GP, nothing queued
        ahead, the link's ``owned`` taking it now -- its wait, else None
        (nothing done: the GP's coroutine takes the send from its start)."""
        if not ownable(data):
            return None
        pid = self._pids.get(dest)
        if pid is None or self._queued:
            return None
        tgt = self._targets.get(pid)
        owned = getattr(tgt, "owned", None)   # (None: no target, or a pipe here)
        if tgt is None or owned is None or not tgt.remote:
            return None
        done: OwnedDone | None = owned(pid, data.nbytes + CREDIT_OVERHEAD, (self.name, kind, com, data, self.pid))
        return done

    # -- short streams ----------------------------------------------------------
    def call_stream(self, dest: Any, data: Any, *, segment_size: int | None = None, com: int = 0,
                    timeout: float | None = None, copy: bool = True,
                    stream: Any = None) -> Coroutine[Any, Any, int]:
        """``GP.send_stream`` (read its docstring): ``bytes`` or an ndarray
        without ``stream=`` is :meth:`stream`'s coroutine, which checks the
        rest when awaited; anything else is the GP's own ``send_stream``
        (``whole_stream``), which converts a tensor and captures a device
        array at the call."""
        if stream is None and (type(data) is np.ndarray or type(data) is bytes):
            return self.stream(dest, data, segment_size, com, timeout, copy)
        if self.whole_stream is None:
            raise RuntimeError("SendPath.call_stream: no GP send_stream set (whole_stream)")
        return self.whole_stream(dest, data, segment_size=segment_size, com=com, timeout=timeout, copy=copy,
                                 stream=stream)

    async def stream(self, dest: Any, data: Any, segment_size: int | None, com: int, timeout: float | None,
                     copy: bool) -> int:
        """Send ``data`` (``bytes`` or an ndarray) as a stream to the GP named
        ``dest`` (see ``GP.send_stream``); the bytes sent.  Its common case
        -- one short buffer (what :func:`~aiopdbp.streams.sender.short_segment`
        takes, C-contiguous, of a plain dtype) to a known GP on another host
        -- is this coroutine: its record (the table's ``whole_record``), put
        at once when the link takes it (the table's ``send_whole_nowait``),
        else after the wait for credit (``send_whole``) when there is no
        timeout.  Anything else -- a local receiver, a name not known yet, a
        long stream, a timeout to wait under -- is the GP's own
        ``send_stream``, which has sent nothing of it yet."""
        streams = self.streams
        size = DEFAULT_SEGMENT if segment_size is None else segment_size
        if (streams is None or self.freed or type(com) is not int or not 0 <= com <= 0xFFFFFFFF
                or type(dest) is not str or type(size) is not int or size < 1
                or (timeout is not None and (type(timeout) is not float or not timeout >= 0))):
            return await self._whole_stream(dest, data, segment_size, com, timeout, copy)  # (it raises what is wrong)
        limit = EAGER_LIMIT if EAGER_LIMIT < size else size
        eager: Any
        if type(data) is np.ndarray:
            n = data.nbytes
            if not 0 < n <= limit or not data.ndim or data.dtype.kind not in _PLAIN or not data.flags.c_contiguous:
                return await self._whole_stream(dest, data, segment_size, com, timeout, copy)
            eager = data
        else:
            n = len(data)
            if not 0 < n <= limit:
                return await self._whole_stream(dest, data, segment_size, com, timeout, copy)
            eager = memoryview(data)
        router = self._router
        pid = router.pids.get(dest)
        tgt = None if pid is None else router.targets.get(pid)
        if pid is None or tgt is None or not tgt.remote:
            return await self._whole_stream(dest, data, segment_size, com, timeout, copy)
        record = streams.whole_record(self.pid, com, eager)
        cost = n + CREDIT_OVERHEAD  # its bytes, charged as a message's
        if streams.send_whole_nowait(tgt, pid, record, cost):
            return n
        if timeout is None:  # credit to wait for, as a message's (as send_stream waits)
            try:
                if await streams.send_whole(self.pid, tgt, pid, record, cost):
                    return n
            except UnknownProcessError:
                await router.resolve(dest, 0)  # the name rule says it by name (as send_stream)
                raise
        return await self._whole_stream(dest, data, segment_size, com, timeout, copy)

    def _whole_stream(self, dest: Any, data: Any, segment_size: int | None, com: int, timeout: float | None,
                      copy: bool) -> Coroutine[Any, Any, int]:
        if self.whole_stream is None:
            raise RuntimeError("SendPath.stream: no GP send_stream set (whole_stream)")
        return self.whole_stream(dest, data, segment_size=segment_size, com=com, timeout=timeout, copy=copy)
