"""A cancel that comes too late for a send that cannot be recalled: a
carried first message (:mod:`aiopdbp.hosts.carry`) once it left with its
lookup, an owned large send (:class:`aiopdbp.hosts.owned.OwnedDone`) once
MPI took its payload.  Such a send answers the cancel truthfully
(:func:`despite_cancel`): not sent -- ``CancelledError``, nothing queued;
sent -- the send returns, and the cancel is raised at the task's next
suspension instead (as trio delivers a cancel that came too late for an
operation at its next checkpoint), if the task is still being cancelled
then."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["despite_cancel"]


def _sent(result: Any) -> bool:
    return True


async def despite_cancel(fut: asyncio.Future[Any], happened: Callable[[Any], bool] = _sent) -> bool:
    """After a cancel in a send whose outcome is ``fut``: wait for ``fut``
    (cancels that come meanwhile are taken too).  True when the send
    happened -- ``fut`` has a result and ``happened(result)`` -- and the
    cancel is then raised again at the caller's next suspension, if it is
    still wanted then.  False when it did not (``fut`` cancelled or failed:
    a host lost on the way): the caller raises ``CancelledError``."""
    task = asyncio.current_task()
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            pass
    if fut.cancelled() or fut.exception() is not None or not happened(fut.result()):
        return False
    if task is not None:
        # Not task.cancel() now: a task that is this send alone would end
        # cancelled, as if nothing had been sent.  Soon: the task has then
        # finished (nothing to cancel) or waits at its next suspension.  The
        # cancels taken stay counted (``cancelling()``) until then, so that
        # a scope that asked for one -- ``asyncio.timeout`` -- and has ended
        # since withdraws it (``uncancel``): that cancel is not raised.
        asyncio.get_running_loop().call_soon(_cancel_again, task)
    return True


def _cancel_again(task: asyncio.Task[Any]) -> None:
    """Raise the cancels a send that happened took, if still wanted."""
    if not task.done() and task.cancelling():
        task.uncancel()   # one request, counted already: cancel() counts it again
        task.cancel()
