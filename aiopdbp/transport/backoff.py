"""The one back-off policy of aiopdbp, for the polls that cannot be avoided.

MPI offers nothing asyncio can wait on (no file descriptor turns readable),
so a few places must poll: the progress engine when it is idle, the close
and flush waits, the start-up join.  They all use :class:`Backoff`: a delay
that starts small (latency right after activity) and doubles up to a cap
(a quiet rank costs a few wake-ups per millisecond at most), reset after
progress.  The loop's timers round sleeps up to about 1 ms anyway.

A wait for an MPI collective (the start-up join) uses :class:`SpinThenBackoff`:
a collective moves on only while its ranks call into MPI, round after round,
so each rank sleeping its back-off between tests adds a sleep and a
reschedule to every round -- with more ranks than cores, most of the
collective's time.  So it first polls at every loop turn, giving the core up
(``sched_yield``) between tests as MPICH's own blocking waits do, and backs
off only once that has gone on for a while (a rank that is late to start
must not find every core taken by ranks polling for it).
"""

from __future__ import annotations

import asyncio
import os
import time

__all__ = ["Backoff", "SpinThenBackoff"]


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


class SpinThenBackoff:
    """``await sleep()``: for the first ``spin`` seconds (from construction)
    give the core up and return at the next loop turn; then sleep
    ``backoff``'s delays."""

    __slots__ = ("backoff", "_until")

    def __init__(self, spin: float, backoff: Backoff) -> None:
        self.backoff = backoff
        self._until = time.monotonic() + spin

    def spinning(self) -> bool:
        """Whether :meth:`sleep` still returns at the next loop turn."""
        return time.monotonic() < self._until

    async def sleep(self) -> None:
        """Yield the core and the loop, or sleep the back-off's next delay.

        Cancellation: nothing to undo.
        """
        if self.spinning():
            os.sched_yield()
            await asyncio.sleep(0)
        else:
            await self.backoff.sleep()
