"""The one back-off policy of aiopdbp, for the polls that cannot be avoided.

MPI offers nothing asyncio can wait on (no file descriptor turns readable),
so a few places must poll: the progress engine when it is idle, the close
and flush waits, the start-up join.  They all use :class:`Backoff`: a delay
that starts small (latency right after activity) and doubles up to a cap
(a quiet rank costs a few wake-ups per millisecond at most), reset after
progress.  The loop's timers round sleeps up to about 1 ms anyway.
"""

from __future__ import annotations

import asyncio

__all__ = ["Backoff"]


class Backoff:
    """``delay()`` grows from ``first`` by doubling to ``most`` seconds;
    ``reset()`` after progress; ``await sleep()`` sleeps the next delay."""

    __slots__ = ("first", "most", "_next")

    def __init__(self, first: float = 50e-6, most: float = 1e-3) -> None:
        if not 0 < first <= most:
            raise ValueError("Backoff needs 0 < first <= most")
        self.first = first
        self.most = most
        self._next = first

    def delay(self) -> float:
        d = self._next
        self._next = min(self.most, d * 2)
        return d

    def reset(self) -> None:
        self._next = self.first

    async def sleep(self) -> None:
        """Sleep the next delay.

        Cancellation: nothing to undo.
        """
        await asyncio.sleep(self.delay())
