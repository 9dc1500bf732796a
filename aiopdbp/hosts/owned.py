"""Buffer ownership as ``MPI_Send``: the wait of a send whose large payload
travels from the caller's own buffer (see :mod:`aiopdbp.hosts.link`,
"Large payloads", and :meth:`aiopdbp.routing.router.Router.send_owned`)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from aiopdbp.hosts.toolate import despite_cancel
from aiopdbp.wire.message import Message

__all__ = ["OwnedDone", "OwnedSend", "fail_owned", "resolve_owned"]


class OwnedDone(asyncio.Future[None]):
    """The completion of an owned send's payload (:class:`OwnedSend`).

    Until the link posts the payload it is an ordinary future: a cancelled
    owner cancels it, and the link then drops the message (and returns its
    credit).  Once posted (:meth:`hold`), its awaiting task can no longer
    cancel it: ``Task.cancel()`` marks the task instead, and the cancel
    reaches the await once the future completes -- once MPI no longer
    reads the caller's buffer, or the link failed, or the transport closed.
    Awaiting it tells the truth then (:func:`~aiopdbp.hosts.toolate.despite_cancel`):
    the payload sent, the await returns and the cancel is raised at the
    task's next suspension (if still wanted); not sent (the link failed),
    ``CancelledError``.  The transport resolves it from the progress step
    that sees the completion: one hop to the waiting task."""

    _held = False

    def hold(self) -> None:
        """The payload is posted: MPI reads the buffer until this completes."""
        self._held = True

    def cancel(self, msg: Any | None = None) -> bool:
        if self._held:
            return False
        return super().cancel(msg)

    def __await__(self) -> Generator[Any, None, None]:
        try:
            yield from super().__await__()
        except asyncio.CancelledError:
            # the task's cancel, raised here once the held payload's send
            # completed: the send returns if the payload went
            if not self._held or not (yield from despite_cancel(self).__await__()):
                raise


class OwnedSend:
    """A message whose large payload is the *caller's* buffer, not a copy
    (``await gp.send(big)``, see "Large payloads"): ``done`` completes once
    the buffer may be reused -- or with the link's error."""

    __slots__ = ("msg", "done")

    def __init__(self, msg: Message, done: OwnedDone) -> None:
        self.msg = msg
        self.done = done


def resolve_owned(fut: asyncio.Future[None]) -> None:
    """Complete an owned send's wait (idempotent)."""
    if not fut.done():
        fut.set_result(None)


def fail_owned(fut: asyncio.Future[None], exc: BaseException) -> None:
    """Fail an owned send's wait with ``exc`` (idempotent; never logged as unretrieved)."""
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()  # retrieved: a cancelled owner must not log it
