"""A GP's receiving side beyond its pipe: the items a receive took from the
pipe but has not returned yet, a sender's name awaited, and ``recv_into``'s
buffer (the wait for a payload to land in it, the copy into it).

:meth:`GP.recv <aiopdbp.runtime.process.GP.recv>` takes the next item from the
pipe itself -- every message passes there, so it reads this side's state
rather than calling it -- and comes here only when an item is held, its
sender's name is not known yet, or a ``recv_into`` waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.wire.message import Message
from aiopdbp.routing.pipes import Pipe
from aiopdbp.streams.receiver import IncomingStream
from aiopdbp.runtime.payloads import host_data, payload_size, views_start

if TYPE_CHECKING:
    from aiopdbp.routing.router import Router

__all__ = ["GPReceiver"]


class GPReceiver:
    """The receiving side of one GP: what its receives hold back, and
    ``recv_into``'s wait and copy.

    Items held are returned, in order, before anything new from the pipe: a
    receive taken back by a cancel must lose nothing, and a ``recv_into``
    that steps over items to find the payload that landed in its buffer
    keeps them for the next receive.
    """

    __slots__ = ("_more", "_name", "_pid", "_router", "held", "into_task")

    def __init__(self, router: Router, name: str, pid: int) -> None:
        self._router = router
        self._name = name
        self._pid = pid
        #: the first item held (taken from the pipe, then its receive was
        #: cancelled, refused or stepped over): the next receive returns it
        self.held: Message | IncomingStream | None = None
        self._more: deque[Message | IncomingStream] = deque()  # held after ``held``, in order
        #: the task waiting in ``recv_into`` for a payload to land in its buffer, if any
        self.into_task: asyncio.Task[Any] | None = None

    def take(self) -> Message | IncomingStream:
        """The first item held (there is one: :attr:`held` is not None)."""
        item = self.held
        assert item is not None
        self.held = self._more.popleft() if self._more else None
        return item

    def hold(self, item: Message | IncomingStream, *, front: bool = False) -> None:
        """Keep ``item`` for the next receive (``front``: before those held)."""
        if self.held is None:
            self.held = item
        elif front:
            self._more.appendleft(self.held)
            self.held = item
        else:
            self._more.append(item)

    async def named(self, item: Message | IncomingStream) -> Message | IncomingStream:
        """``item`` with its sender's name: its data overtook the table update
        that registers the sender (:class:`~aiopdbp.hosts.tables.PendingName`).

        Cancellation: ``item`` is held, first: the next receive returns it.
        """
        try:
            name = await self._router.source_name(item.source_pid)
        except asyncio.CancelledError:
            self.hold(item, front=True)  # the next recv returns it: nothing is lost
            raise
        if type(item) is Message:
            return Message((name, item[1], item[2], item[3], item[4]))
        item.source = name
        return item

    async def landing(self, pipe: Pipe[Any], flat: memoryview, timeout: float | None,
                      recv: Callable[[], Awaitable[Message | IncomingStream]]) -> Message | IncomingStream:
        """``recv_into``'s wait with an empty pipe: ``flat`` is offered to a
        large payload from another host (:mod:`aiopdbp.hosts.inbound`,
        "Bulk payloads") while ``recv`` (the GP's) waits; the item returned
        is the one that landed there, if one did, else the next.

        Cancellation: as for :meth:`GP.recv_into <aiopdbp.runtime.process.GP.recv_into>`.
        """
        router = self._router
        self.into_task = asyncio.current_task()
        router.landings.post(self._pid, flat)
        taken = False
        try:
            async with asyncio.timeout(timeout):
                item = await recv()
                taken = router.landings.withdraw(self._pid)
                if taken:
                    # Our buffer was chosen for a payload whose header came
                    # while the pipe was empty: that message is ours, even if
                    # other items got into the pipe before its bytes landed.
                    while not views_start(item, flat):
                        self.hold(item)
                        item = await pipe.receive()
        except BaseException as exc:
            if not taken:
                router.landings.withdraw(self._pid)
            if type(exc) is TimeoutError and not exc.args:
                raise TimeoutError(f"GP {self._name!r} received nothing into its buffer within "
                                   f"{timeout:g} s") from None
            raise
        finally:
            self.into_task = None
        return item

    def into(self, flat: memoryview, item: Message | IncomingStream) -> Message:
        """``item``'s payload in ``flat`` (copied unless it landed there); a
        refused item is held, first, for the next receive."""
        data: Any = host_data(item.data) if type(item) is Message else None
        err: Exception | None = None
        if type(item) is not Message:
            err = TypeError("recv_into: the next item is a stream, not a message")
        elif data is None or not (type(data) is bytes or (isinstance(data, np.ndarray)
                                                          and not data.dtype.hasobject)):
            err = TypeError(f"recv_into: the next message carries {type(data).__name__}, "
                            "not bytes or a numeric array")
        elif payload_size(data) > flat.nbytes:
            err = ValueError(f"recv_into: the next message ({payload_size(data)} bytes) does not fit "
                             f"in the buffer ({flat.nbytes} bytes)")
        if err is not None:
            self.hold(item, front=True)
            raise err
        assert type(item) is Message
        if type(data) is bytes:
            n = len(data)
            flat[:n] = data
            return Message((item[0], item[1], item[2], flat[:n], item[4]))
        if views_start(item, flat):
            return item
        view = np.frombuffer(flat, dtype=data.dtype, count=data.size).reshape(data.shape)
        view[...] = data
        return Message((item[0], item[1], item[2], view, item[4]))
