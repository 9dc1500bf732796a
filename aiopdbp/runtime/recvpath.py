"""A GP's receive, the common case in one step: in the compiled form
``gp.recv()`` is :meth:`RecvPath.recv` itself.

The common case is a call without ``arrays``, an item already in the GP's
pipe, nothing held back by an earlier receive, no ``recv_into`` waiting, and a
:class:`~aiopdbp.wire.message.Message` or an incoming stream whose sender's
name is known: it is taken and returned, a message's array as the node's
``arrays`` asks (a tensor's array as a tensor: :meth:`RecvPath.arrive`,
which the GP's coroutine also calls), a stream told the node's ``arrays``
for its read.  Everything else -- an empty pipe (the wait), items held,
``recv_into``, a name not known yet, a freed GP -- is the GP's
coroutine (``slow``: ``GP._recv``), unchanged, which also takes the item
this path took and could not return as it is.

This module has a compiled twin (``aiopdbp.runtime.crecvpath``, chosen by
:mod:`aiopdbp.runtime.recvcore`): its ``recv`` decides at the call -- its
own coroutine (a compiled object, no frame) when an item is first in the pipe's one FIFO (which takes it
in C: the one-FIFO case of :meth:`Pipe.receive_nowait
<aiopdbp.routing.pipes.Pipe.receive_nowait>`, inline), else the GP's
coroutine itself -- so no Python frame runs for a message taken there.  A
receive without a timeout that finds the pipe empty is the compiled path's
too, where the GP set ``gp``: ``GP._recv``'s wait compiled (the driver, the
park on a future, the take, in ``crecvpath._Wait``), with no frame of the
GP's coroutine; a wait with a timeout is the GP's coroutine.  Where the compiled form is not
built, the GP runs its own coroutine alone (this form would put a second
one around a receive that waits); this one is the twin the compiled one is
held to (``tests/test_recvpath.py`` runs both).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.streams.receiver import IncomingStream
from aiopdbp.wire.message import Message

if TYPE_CHECKING:
    from aiopdbp.routing.pipes import Pipe
    from aiopdbp.runtime.receiving import GPReceiver

__all__ = ["RecvPath"]

#: the GP's coroutine for everything else: (timeout, arrays, the item this path took or None)
Slow = Callable[["float | None", "str | None", Any], Coroutine[Any, Any, "Message | IncomingStream"]]
#: a received array as the receiver asked, ``(arr, kind)``: :data:`aiopdbp.arrays.arrival`
Arrival = Callable[[np.ndarray[Any, Any], str], Any]


class RecvPath:
    """One GP's receive state the common case reads: its pipe (``None``
    when it has none or was freed: the GP sets it), its receiving side's
    held items and ``recv_into`` task (``rx``), and its node's ``arrays``;
    ``arrival`` converts an array."""

    def __init__(self, rx: GPReceiver, node: Any, slow: Slow, arrival: Arrival) -> None:
        #: the GP's pipe while it has one and is not freed (else None: ``slow`` says why)
        self.pipe: Pipe[Any] | None = None
        #: the GP whose wait without a timeout this path may run (its
        #: ``receiving``, ``_path`` and ``_drive``); None: every wait is ``slow``.
        #: The compiled form's wait is ``GP._recv``'s, compiled; this form's
        #: is ``slow`` itself (the same code)
        self.gp: Any = None
        self._rx = rx
        self._node = node     # (its ``arrays``: read at each array, it may change)
        self._slow = slow
        self._arrival = arrival

    async def recv(self, timeout: float | None = None, *,
                   arrays: str | None = None) -> Message | IncomingStream:
        """The GP's next item (see ``GP.recv``)."""
        pipe = self.pipe
        rx = self._rx
        if (pipe is None or arrays is not None or rx.held is not None or rx.into_task is not None
                or not len(pipe)):
            return await self._slow(timeout, arrays, None)
        item = pipe.receive_nowait()
        if type(item) is Message and type(item.source) is str:
            data = item.data
            if type(data) is not np.ndarray:
                return item  # the commonest
            kind = self._node.arrays
            if kind == "auto" and data.dtype.metadata is None:
                return item  # an array that arrives as it came
            return self.arrive(item, kind)
        if isinstance(item, IncomingStream) and type(item.source) is str:
            kind = self._node.arrays
            if kind != "auto":  # (the GP's coroutine's, for a stream)
                item.arrays = kind
            return item
        return await self._slow(timeout, arrays, item)

    def arrive(self, item: Message, kind: str) -> Message:
        """``item`` (from a named sender, its payload an ndarray) with its
        array as ``kind`` asks (a tensor's array as a tensor: ``arrival``)."""
        return Message((item.source, item.kind, item.com, self._arrival(item.data, kind), item.source_pid))
