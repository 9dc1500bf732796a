"""Shared helpers of the ``transport_*`` MPI test scripts (run under mpiexec).

Each script builds an :class:`MPITransport`, runs an async ``main`` and exits
0 on success.  Any failure prints a traceback and aborts the whole job (so the
other ranks never hang waiting); the pytest side asserts on the exit code and
on the ``OK``/``INFO`` lines printed to stdout.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
import zlib
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

TIMEOUT = float(os.environ.get("TRANSPORT_TEST_TIMEOUT", "30"))


class Inbox:
    """Deliver callback that records everything, per (source, channel)."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[int, Channel], list[memoryview]] = defaultdict(list)
        self.log: list[tuple[int, Channel, int]] = []  # (source, channel, nbytes) in arrival order
        self.count = 0
        self._changed = asyncio.Event()

    def deliver(self, source: int, channel: Channel, view: memoryview) -> None:
        assert isinstance(view, memoryview), type(view)
        assert isinstance(channel, Channel), channel
        self.by_key[(source, channel)].append(view)
        self.log.append((source, channel, view.nbytes))
        self.count += 1
        self._changed.set()

    async def wait_until(self, cond: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
        async def _wait() -> None:
            while not cond():
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(_wait(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"timed out waiting for {what}; got {self.count} messages") from None

    async def wait_count(self, n: int, timeout: float = TIMEOUT) -> None:
        await self.wait_until(lambda: self.count >= n, f"{n} messages", timeout)


def make_block(src: int, seq: int, size: int) -> bytes:
    """Deterministic payload: header (src, seq, size) + pattern."""
    head = f"{src}:{seq}:{size}:".encode()
    if size < len(head):
        return head[:size]
    body = bytes((seq + i) & 0xFF for i in range(min(size - len(head), 251)))
    reps = (size - len(head)) // 251 + 1 if body else 0
    return (head + (body * reps))[:size] if body else head


def crc(buf: Any) -> int:
    return zlib.crc32(buf) & 0xFFFFFFFF


def run(
    main: Callable[[MPITransport, Inbox], Awaitable[None]],
    progress: str = "auto",
    inbox_factory: Callable[[], Inbox] = Inbox,
    **kw: Any,
) -> None:
    """Create the transport, run ``main`` in asyncio, check hygiene, exit."""
    transport = MPITransport(progress=progress, **kw)

    async def _amain() -> None:
        inbox = inbox_factory()
        await transport.start(inbox.deliver, getattr(inbox, "alloc", None),
                              alloc_min=getattr(inbox, "alloc_min", 0))
        try:
            await asyncio.wait_for(main(transport, inbox), TIMEOUT)
        except BaseException:
            tail = [(src, ch.name, n) for src, ch, n in inbox.log[-8:]]
            print(f"rank {transport.rank} FAILED; last arrivals {tail}; stats {transport.stats()}", file=sys.stderr)
            raise
        finally:
            await transport.aclose()
        await asyncio.sleep(0)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not others, f"pending tasks at exit: {others}"

    try:
        if os.environ.get("TRANSPORT_TEST_LOOP") == "uvloop":
            import uvloop

            uvloop.run(_amain())
        else:
            asyncio.run(_amain())
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        transport.abort(f"rank {transport.rank}: transport test failed", 1)
    # one write (print() writes the newline separately; mpiexec merges ranks' output)
    sys.stdout.write(f"rank {transport.rank} OK {transport.progress_mode}\n")
    sys.stdout.flush()
