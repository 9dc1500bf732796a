"""The DDBP's asyncio front: SBP / RBP and the buffer pool of one host (SPEC section 6).

Theory of operation
-------------------
:class:`SendPool` (SBP) and :class:`RecvPool` (RBP), bundled by
:class:`BufferPool` over one UMB, put waiting on top of a
:class:`~aiopdbp.pool.matrix.PoolMatrix`: writers ``acquire`` a
:class:`Slot` (waiting while the row is full and cannot grow: backpressure,
a pool never overflows), fill it (possibly coalescing many small records),
``commit``; readers ``next_filled`` in FIFO order per row and ``release``.
The rows, cells and blocks behind it, and Algorithm 1 that sizes them, are
:mod:`aiopdbp.pool.matrix`'s.

Threading: everything here must be used from one event-loop thread.  There are
no locks; the sync bookkeeping is atomic because it never awaits.
"""

from __future__ import annotations

import asyncio
import time

from aiopdbp.errors import ClosedResourceError, WouldBlock
from aiopdbp.pool.matrix import Clock, PoolMatrix, SubPool, UserMemory

__all__ = ["AsyncPool", "BufferPool", "RecvPool", "SendPool", "Slot"]


class Slot:
    """One block of a row, held by a writer (between acquire and commit) or by
    a reader (between next_filled and release).

    ``view`` is the whole block for a writer, the committed bytes for a reader;
    ``used`` is how many bytes are written/committed.  A writer may
    :meth:`append` several small records (coalescing) before committing.
    """

    __slots__ = ("host", "cell", "view", "used", "owner", "mode")

    def __init__(
        self, pool: AsyncPool, host: int, cell: int, view: memoryview, used: int, mode: str
    ) -> None:
        self.host = host
        self.cell = cell
        self.view = view
        self.used = used
        self.owner = pool
        self.mode = mode  # "w" held by writer, "r" held by reader, "" finished

    @property
    def room(self) -> int:
        """Bytes still free in the block."""
        return len(self.view) - self.used if self.mode == "w" else 0

    @property
    def data(self) -> memoryview:
        """The bytes written/committed so far."""
        return self.view[: self.used]

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy ``data`` after what is there; returns its offset in the block."""
        if self.mode != "w":
            raise ValueError("slot is not open for writing")
        src = memoryview(data).cast("B")
        n = len(src)
        if n > self.room:
            raise ValueError(f"{n} bytes do not fit ({self.room} left)")
        offset = self.used
        self.view[offset : offset + n] = src
        self.used += n
        return offset

    def __repr__(self) -> str:
        return f"Slot(host={self.host}, cell={self.cell}, used={self.used}, mode={self.mode!r})"


class _Waiters:
    """Futures parked on one condition; wake_all so a cancelled waiter can
    never swallow a wake-up meant for someone else."""

    def __init__(self) -> None:
        self._futs: list[asyncio.Future[None]] = []

    def __len__(self) -> int:
        return len(self._futs)

    async def wait(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._futs.append(fut)
        try:
            await fut
        finally:
            if fut in self._futs:
                self._futs.remove(fut)

    def wake_all(self) -> None:
        futs, self._futs = self._futs, []
        for fut in futs:
            if not fut.done():
                fut.set_result(None)


class _ByHost(dict[int, _Waiters]):
    """The waiters of each host's row, made at the host's first use."""

    def __missing__(self, host: int) -> _Waiters:
        made = self[host] = _Waiters()
        return made


class AsyncPool:
    """asyncio front of one :class:`PoolMatrix` (base of SendPool/RecvPool).

    Per row there is one queue of waiting writers (space) and one of waiting
    readers (data).  Concurrent writers of one row are not served in strict
    FIFO order (the node has one writer per row); blocks are FIFO per row.
    """

    direction = "pool"

    def __init__(self, matrix: PoolMatrix) -> None:
        self.matrix = matrix
        # per host, made when the row is first waited on or woken
        self._space = _ByHost()
        self._data = _ByHost()
        self._closed = False
        # Blocks freed anywhere in the shared UMB may let a row with no real
        # space bootstrap: wake this pool's writers.
        matrix.umb.add_free_listener(self._wake_writers)

    @property
    def closed(self) -> bool:
        return self._closed

    def acquire_nowait(self, host: int, nbytes: int = 0) -> Slot:
        """Non-waiting :meth:`acquire`; raises WouldBlock when the row is full."""
        row = self._writable(host, nbytes)
        got = row.reserve()
        if got is None:
            raise WouldBlock(f"{row.name} is full")
        return Slot(self, host, got[0], got[1], 0, "w")

    async def acquire(self, host: int, nbytes: int = 0) -> Slot:
        """A writable block of the row for ``host`` with room for ``nbytes``.

        Waits while the row is full and cannot grow (backpressure).  Raises
        ClosedResourceError once the pool is closed.

        Cancellation: safe.  The reservation happens synchronously after the
        last await, so a cancelled acquire holds no cell and no block.
        """
        row = self._writable(host, nbytes)
        counted = False
        while True:
            got = row.reserve()
            if got is not None:
                return Slot(self, host, got[0], got[1], 0, "w")
            if not counted:
                row.waits += 1
                counted = True
            await self._space[host].wait()
            if self._closed:
                raise ClosedResourceError(f"{self.direction} pool is closed")

    def commit(self, slot: Slot, nbytes: int | None = None) -> None:
        """Hand the slot to the reader with ``nbytes`` (default ``slot.used``)."""
        self._own(slot, "w")
        n = slot.used if nbytes is None else nbytes
        self.matrix[slot.host].commit(slot.cell, n)
        slot.used, slot.mode = n, ""
        self._data[slot.host].wake_all()

    def abort(self, slot: Slot) -> None:
        """Give an acquired slot back without sending anything."""
        self._own(slot, "w")
        self.matrix[slot.host].abort(slot.cell)
        slot.mode = ""
        self._data[slot.host].wake_all()  # a later committed cell may be next now
        self._space[slot.host].wake_all()

    def consume(self, slot: Slot) -> bool:
        """Finish a writer's slot whose bytes were read in place, with no
        commit/next_filled/release round (the receive path decodes a landed
        block at once); False, with nothing done, when older committed blocks
        of the row come first -- then take that round."""
        self._own(slot, "w")
        if not self.matrix[slot.host].consume(slot.cell):
            return False
        slot.mode = ""
        self._space[slot.host].wake_all()
        return True

    def next_filled_nowait(self, host: int) -> Slot:
        """Non-waiting :meth:`next_filled`; raises WouldBlock when nothing is
        ready, ClosedResourceError when closed and drained."""
        row = self.matrix[host]
        before = row.used
        got = row.take()
        if row.used < before:  # aborted cells were skipped: space freed
            self._space[host].wake_all()
        if got is not None:
            return Slot(self, host, got[0], got[1], got[2], "r")
        if self._closed:
            raise ClosedResourceError(f"{self.direction} pool is closed")
        raise WouldBlock(f"{row.name} has nothing committed")

    async def next_filled(self, host: int) -> Slot:
        """The oldest committed block of the row for ``host`` (FIFO).

        Waits until one is committed.  After :meth:`close` it still drains
        what was committed, then raises ClosedResourceError.

        Cancellation: safe.  The take happens synchronously after the last
        await, so a cancelled next_filled loses no block; it stays next.
        """
        while True:
            try:
                return self.next_filled_nowait(host)
            except WouldBlock:
                await self._data[host].wait()

    def waiting_readers(self, host: int) -> int:
        """How many :meth:`next_filled` calls wait now on the row for ``host``."""
        return len(self._data[host])

    def release(self, slot: Slot) -> None:
        """The reader is done with ``slot``; its cell may be reused."""
        self._own(slot, "r")
        self.matrix[slot.host].release(slot.cell)
        slot.mode = ""
        self._space[slot.host].wake_all()

    def close(self) -> None:
        """Refuse new acquires and wake every waiter.  Held slots may still be
        committed, aborted and released.  Idempotent."""
        self._closed = True
        for waiters in (*self._space.values(), *self._data.values()):
            waiters.wake_all()

    def size_history(self, host: int) -> list[tuple[float, int]]:
        return self.matrix.size_history(host)

    def stats(self) -> dict[str, object]:
        return {"direction": self.direction, **self.matrix.stats()}

    def _writable(self, host: int, nbytes: int) -> SubPool:
        if self._closed:
            raise ClosedResourceError(f"{self.direction} pool is closed")
        row = self.matrix[host]
        if not 0 <= nbytes <= self.matrix.umb.block_size:
            raise ValueError(f"{nbytes} bytes do not fit a {self.matrix.umb.block_size}-byte block")
        return row

    def _own(self, slot: Slot, mode: str) -> None:
        if slot.owner is not self or slot.mode != mode:
            held = "for writing" if mode == "w" else "for reading"
            raise ValueError(f"{slot!r} is not held {held} here")

    def _wake_writers(self) -> None:
        for waiters in tuple(self._space.values()):
            waiters.wake_all()


class SendPool(AsyncPool):
    """SBP: row i buffers blocks for remote host i (SBP writer -> SBP reader)."""

    direction = "send"


class RecvPool(AsyncPool):
    """RBP: row j holds blocks received from host j (RBP writer -> RBP reader)."""

    direction = "recv"


class BufferPool:
    """The DDBP of one host: a :class:`SendPool` and a :class:`RecvPool` of M
    rows of N cells each, both drawing on one :class:`UserMemory`."""

    def __init__(
        self,
        hosts: int,
        capacity: int,
        block_size: int,
        nblocks: int,
        initial: int,
        threshold: float,
        *,
        local: int | None = None,
        reclaim: bool = True,
        clock: Clock = time.monotonic,
    ) -> None:
        self.umb = UserMemory(block_size, nblocks)

        def matrix(name: str) -> PoolMatrix:
            return PoolMatrix(
                hosts, capacity, self.umb, initial, threshold,
                local=local, reclaim=reclaim, name=name, clock=clock,
            )

        self.send = SendPool(matrix("SBP"))
        self.recv = RecvPool(matrix("RBP"))

    def close(self) -> None:
        self.send.close()
        self.recv.close()

    def stats(self) -> dict[str, object]:
        return {"umb": self.umb.stats(), "send": self.send.stats(), "recv": self.recv.stats()}
