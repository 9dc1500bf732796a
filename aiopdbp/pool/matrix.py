"""The DDBP's data structures and Algorithm 1: paper sections 2.2-2.5, SPEC section 6.

Theory of operation
-------------------
* **UMB** (:class:`UserMemory`): one numpy arena cut into ``nblocks`` blocks of
  ``block_size`` bytes, named by blockId.  This is the physical address space
  (PAS) and is shared by the send matrix (SBP) and the receive matrix (RBP).
* **Sub-pool** (:class:`SubPool`): one row SCBP_i / RCBP_i of an M x N matrix.
  It is a ring of N *logical* cells.  Cells ``0 .. real-1`` hold a blockId
  (real elements, RE); cells ``real .. N-1`` hold none (virtual elements, VE).
  The ring turns over the real cells only.  CRE = cell ``real-1``, CVE = cell
  ``real``.  Three cursors move forward: ``recv`` (the next cell a writer
  fills), ``send`` (the next cell the reader takes) and ``tail`` (the oldest
  cell not yet released; a cell is reused only after its reader is done).
* **Algorithm 1** (:meth:`SubPool.reserve`): when the writer's ``recv`` sits on
  the CRE, compute SU; if ``SU > Threshold`` and ``DF < 1`` and the UMB has free
  blocks, map ``m = (RSR - 1) * curSize`` VEs from the CVE on to free blocks.
  Because real space grows only at the end and only while recv sits on the CRE
  with the CRE free, the occupied cells ``[tail, recv)`` never straddle the
  ring seam, so growth needs no copying and FIFO order is preserved.
* **Extension, not in the paper**: under UMB pressure, idle rows (no occupied
  cell) give real space above their initial size back (``reclaim=True``), so a
  stream that ended does not keep its memory forever.  And a host that stopped
  talking to a peer gives that peer's rows back whole
  (:meth:`PoolMatrix.reclaim_idle`, called on a timer by the node): their
  blocks return to the UMB and their pages to the OS, and the rows are made
  again at the next traffic, so memory follows the peers a rank talks to now.

Everything here is synchronous (no asyncio, no I/O): the asyncio front that
makes writers and readers wait is :mod:`aiopdbp.pool.asyncpool`.

Threading: everything here must be used from one event-loop thread.  There are
no locks; the bookkeeping is atomic because it never awaits.
"""

from __future__ import annotations

import contextlib
import logging
import math
import mmap
import time
from collections import deque
from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:   # (annotations only: numpy.typing costs every rank an import at start)
    import numpy.typing as npt

__all__ = ["Clock", "PoolMatrix", "Reclaimer", "SubPool", "UserMemory", "growth_cells"]

# One logger for the package: "aiopdbp.pool" is what a program configures.
logger = logging.getLogger("aiopdbp.pool")

Clock = Callable[[], float]
# reclaimer(blocks_wanted, requester) -> blocks given back to the UMB
Reclaimer = Callable[[int, object], int]


def _lazy_arena(nbytes: int) -> npt.NDArray[np.uint8]:
    """A zeroed arena whose pages become resident only where they are written.

    Anonymous ``mmap`` memory is zero and lazily paged, like ``np.zeros``; but
    numpy asks for transparent huge pages on large arrays, and then one write
    into a block makes 2 MiB resident: with blocks of every peer spread over
    the arena, a rank's memory would grow by megabytes per peer it talks to.
    The mapping is private (``mmap``'s default is shared): pages given back
    (:meth:`UserMemory.discard`) are then freed, not kept by the shared
    backing store.
    """
    if nbytes <= 0:
        return np.zeros(0, dtype=np.uint8)
    private = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    buf = mmap.mmap(-1, nbytes, flags=private) if private else mmap.mmap(-1, nbytes)
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):  # a kernel without THP refuses the advice
            buf.madvise(advice)
    return np.frombuffer(buf, dtype=np.uint8)


# ----------------------------------------------------------------------------
# UMB
# ----------------------------------------------------------------------------
class UserMemory:
    """The UMB: equal blocks of one arena, named by blockId ``0..nblocks-1``.

    It also plays the UMBInfo-Tab: it knows which blocks are free, who can give
    blocks back under pressure (reclaimers) and who wants to hear when blocks
    are freed (listeners, e.g. writers waiting for a first block).
    """

    def __init__(self, block_size: int, nblocks: int) -> None:
        if block_size <= 0 or nblocks <= 0:
            raise ValueError("block_size and nblocks must be positive")
        self.block_size = block_size
        self.nblocks = nblocks
        # One contiguous arena: one allocation from the OS (paper 2.4), and a
        # buffer MPI/CUDA can register or pin once.
        self.arena: npt.NDArray[np.uint8] = _lazy_arena(block_size * nblocks)
        self._mem: memoryview = self.arena.data
        base = getattr(self.arena.base, "obj", None)   # the memoryview numpy keeps of the mmap
        self._map: mmap.mmap | None = base if isinstance(base, mmap.mmap) else None
        # Blocks never handed out are those from _fresh up: the bookkeeping is
        # made as blocks are first used, so a UMB sized for every peer of a
        # large job costs nothing until the traffic comes.  Freed blocks go on
        # a stack whose lowest id is on top: allocation order is deterministic.
        self._fresh = 0
        self._free: list[int] = []
        self._freed: set[int] = set()      # the ids on the free stack
        self._reclaimers: list[Reclaimer] = []
        self._listeners: list[Callable[[], None]] = []

    @property
    def free_blocks(self) -> int:
        return len(self._free) + self.nblocks - self._fresh

    @property
    def used_blocks(self) -> int:
        return self.nblocks - self.free_blocks

    def alloc(self) -> int | None:
        """Take one free block; ``None`` when the UMB is exhausted."""
        if self._free:
            block_id = self._free.pop()
            self._freed.discard(block_id)
            return block_id
        if self._fresh < self.nblocks:
            self._fresh += 1
            return self._fresh - 1
        return None

    def free(self, block_id: int) -> None:
        """Give a block back.  Bad id or double free -> ValueError."""
        self._check(block_id)
        if block_id in self._freed or block_id >= self._fresh:
            raise ValueError(f"block {block_id} is already free")
        self._freed.add(block_id)
        self._free.append(block_id)
        for listener in tuple(self._listeners):
            listener()

    def discard(self, block_ids: list[int]) -> None:
        """Give the pages of free blocks back to the OS (they read as zeros,
        and cost memory again only when written); a block taken again since
        it was freed is left alone."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if self._map is None or advice is None:
            return
        size = self.block_size
        for block_id in block_ids:
            if block_id in self._freed:
                with contextlib.suppress(OSError, ValueError):
                    self._map.madvise(advice, block_id * size, size)

    def view(self, block_id: int) -> memoryview:
        """Writable view of exactly one block (valid only while it is held)."""
        self._check(block_id)
        start = block_id * self.block_size
        return self._mem[start : start + self.block_size]

    def add_reclaimer(self, reclaimer: Reclaimer) -> None:
        self._reclaimers.append(reclaimer)

    def add_free_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def reclaim(self, want: int, requester: object) -> int:
        """Ask the reclaimers for ``want`` blocks (never from ``requester``)."""
        got = 0
        for reclaimer in tuple(self._reclaimers):
            if got >= want:
                break
            got += reclaimer(want - got, requester)
        return got

    def stats(self) -> dict[str, int]:
        return {
            "block_size": self.block_size,
            "nblocks": self.nblocks,
            "free_blocks": self.free_blocks,
            "used_blocks": self.used_blocks,
        }

    def _check(self, block_id: int) -> None:
        if not 0 <= block_id < self.nblocks:
            raise ValueError(f"no block {block_id} (UMB has {self.nblocks})")


# ----------------------------------------------------------------------------
# One sub-pool (row) and Algorithm 1
# ----------------------------------------------------------------------------
class _Cell(IntEnum):
    FREE = 0  # real cell, no data
    WRITING = 1  # reserved by a writer, not committed yet
    FILLED = 2  # committed, waiting for the reader
    READING = 3  # taken by the reader, not released yet
    DONE = 4  # released, waiting for older cells to be released
    ABORTED = 5  # writer gave up; the reader skips it


def growth_cells(used: int, real: int) -> int:
    """Algorithm 1 line 13: ``m = (RSR - 1) * curSize``, exact and rounded up.

    With RSR = used / (real - used) this is ``(2*used - real) * real /
    (real - used)``; integer arithmetic avoids float ceil surprises.  When
    RSR <= 1 the formula gives m <= 0; since the caller only asks after
    ``SU > Threshold`` said the row is busy, we grow by at least one block
    (the paper's intent: busy rows get more memory).
    """
    unused = real - used
    if real <= 0 or not 0 <= used < real:
        raise ValueError("growth needs 0 <= used < real (the CRE is free)")
    num = (2 * used - real) * real
    return max(1, -(-num // unused))


class SubPool:
    """One row SCBP_i / RCBP_i: a ring of ``capacity`` (N) logical cells.

    Sync API for the writer: :meth:`reserve` + :meth:`commit` (or :meth:`put`,
    both at once) and :meth:`abort`; for the reader: :meth:`take` (FIFO) and
    :meth:`release`.  Cells are reused strictly in ring order, so a cell
    released out of order is reused only after every older cell is released.
    """

    def __init__(
        self,
        capacity: int,
        umb: UserMemory,
        threshold: float,
        *,
        initial: int = 0,
        name: str = "",
        clock: Clock = time.monotonic,
        history: int = 1024,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity N must be >= 1")
        if not 0.0 < threshold < 1.0:
            raise ValueError("Threshold must satisfy 0 < Threshold < 1")
        if not 0 <= initial <= capacity:
            raise ValueError("initial real space must be in 0..N")
        self.capacity = capacity
        self.threshold = threshold
        self.initial = initial
        self.name = name
        self._umb = umb
        self._clock = clock
        self._blocks: list[int] = []  # cell -> blockId for the real cells
        self._state: list[_Cell] = []
        self._nbytes: list[int] = []
        self.recv = 0  # next cell the writer fills
        self.send = 0  # next cell the reader takes
        self.tail = 0  # oldest cell not yet released
        self._occupied = 0  # cells in [tail, recv): not FREE
        self._filled = 0  # cells in state FILLED
        self._starved = False  # a "UMB exhausted" warning is out (once per episode)
        self.grows = self.shrinks = self.denied = self.waits = 0
        self.puts = self.takes = self.peak_used = self.peak_real = 0
        self._history: deque[tuple[float, int]] = deque(maxlen=history)
        self._history.append((clock(), 0))
        if initial:
            self.allocate_rs(initial)  # Algorithm 1 line 3

    # -- the paper's quantities ------------------------------------------------
    @property
    def real(self) -> int:
        """|RE|: cells mapped to a UMB block."""
        return len(self._blocks)

    @property
    def density_factor(self) -> float:
        """DF = |RE| / N (formula 1)."""
        return self.real / self.capacity

    @property
    def used(self) -> int:
        """Occupied real cells: reserved, filled, being read or not yet reusable."""
        return self._occupied

    @property
    def pending(self) -> int:
        """Committed cells the reader has not taken yet."""
        return self._filled

    @property
    def space_utilization(self) -> float:
        """SU = used real / available real (formula 2); 1.0 with no real space
        (such a row is as full as it can be: a writer would have to wait)."""
        return self._occupied / self.real if self.real else 1.0

    @property
    def receive_send_ratio(self) -> float:
        """RSR = used real / unused real (formula 3); ``math.inf`` when nothing
        is unused (full, or no real space).  At the growth check the CRE is
        free, so there RSR is always finite."""
        unused = self.real - self._occupied
        return self._occupied / unused if unused else math.inf

    @property
    def cre(self) -> int | None:
        """Index of the critical real element (last RE), None without real space."""
        return self.real - 1 if self.real else None

    @property
    def cve(self) -> int | None:
        """Index of the critical virtual element (first VE), None at DF == 1."""
        return self.real if self.real < self.capacity else None

    @property
    def at_cre(self) -> bool:
        """The recv position sits on the CRE (Algorithm 1 line 8)."""
        return self.real > 0 and self.recv == self.real - 1

    def cells(self) -> list[int | None]:
        """The logical row: blockId for each RE, None for each VE."""
        return [*self._blocks, *([None] * (self.capacity - self.real))]

    # -- Allocation_RS and its inverse ----------------------------------------
    def allocate_rs(self, m: int) -> int:
        """Allocation_RS: map up to ``m`` VEs, from the CVE on, to UMB blocks.

        Returns how many were mapped (clamped to N and to what the UMB has,
        after asking idle rows to give blocks back).  Only legal while the
        occupied cells do not wrap the ring seam, else RuntimeError.
        """
        if m < 0:
            raise ValueError("m must be >= 0")
        # Appending cells after the CRE is safe iff no occupied cell lies
        # beyond the seam: empty, or [tail, recv) is one linear run.
        if self._occupied and not self.tail < self.recv:
            raise RuntimeError("cannot add real space while the ring wraps")
        m = min(m, self.capacity - self.real)
        if self._umb.free_blocks < m:
            self._umb.reclaim(m - self._umb.free_blocks, self)
        added = 0
        while added < m:
            block_id = self._umb.alloc()
            if block_id is None:
                break
            self._blocks.append(block_id)
            self._state.append(_Cell.FREE)
            self._nbytes.append(0)
            added += 1
        if added:
            self.peak_real = max(self.peak_real, self.real)
            self._history.append((self._clock(), self.real))
        return added

    @property
    def block_ids(self) -> tuple[int, ...]:
        """The UMB blocks of the real cells, in cell order."""
        return tuple(self._blocks)

    def shrink_to(self, real: int) -> int:
        """Give the real space beyond ``real`` cells back to the UMB.

        Only an idle row (``used == 0``) shrinks, so no data ever moves; the
        cursors restart at cell 0.  Returns the blocks freed (0 if not idle).
        """
        if real < 0:
            raise ValueError("real must be >= 0")
        if self._occupied or real >= self.real:
            return 0
        freed = self._blocks[real:]
        del self._blocks[real:], self._state[real:], self._nbytes[real:]
        self.tail = self.send = self.recv = 0
        self.shrinks += 1
        self._history.append((self._clock(), self.real))
        for block_id in freed:  # after the row is consistent: listeners may run
            self._umb.free(block_id)
        return len(freed)

    # -- writer side -----------------------------------------------------------
    def reserve(self) -> tuple[int, memoryview] | None:
        """Reserve the cell at ``recv`` for writing; None when the row is full.

        Algorithm 1 lines 8-17 run here: the writer arriving at the CRE is the
        paper's "recv reaches the CRE", tested at the latest moment (with the
        freshest send/tail), when the CRE itself is still free.
        """
        if not self.real:
            # A row that got no real space (UMB ran out in step 1, or the local
            # row) bootstraps on first use; it has no CRE to trigger growth.
            if not self.allocate_rs(max(1, self.initial)):
                self._refused("no real space")
                return None
        blocks = self._blocks  # (len(blocks) is self.real, read often on the receive path)
        occupied = self._occupied
        if occupied == len(blocks):
            return None
        cell = self.recv
        if cell == len(blocks) - 1:
            self._check_growth()
        self._state[cell] = _Cell.WRITING
        self.recv = (cell + 1) % len(blocks)  # after growth: cell + 1, no wrap
        self._occupied = occupied = occupied + 1
        self.puts += 1
        if occupied > self.peak_used:
            self.peak_used = occupied
        return cell, self._umb.view(blocks[cell])

    def commit(self, cell: int, nbytes: int) -> None:
        """Mark a reserved cell as holding ``nbytes`` bytes for the reader."""
        self._expect(cell, _Cell.WRITING)
        if not 0 <= nbytes <= self._umb.block_size:
            raise ValueError(f"nbytes {nbytes} outside 0..{self._umb.block_size}")
        self._state[cell] = _Cell.FILLED
        self._nbytes[cell] = nbytes
        self._filled += 1

    def put(self, nbytes: int) -> tuple[int, memoryview] | None:
        """reserve + commit: returns the cell and an ``nbytes`` view to fill
        right away (before any await), or None when the row is full."""
        if not 0 <= nbytes <= self._umb.block_size:
            raise ValueError(f"nbytes {nbytes} outside 0..{self._umb.block_size}")
        got = self.reserve()
        if got is None:
            return None
        self.commit(got[0], nbytes)
        return got[0], got[1][:nbytes]

    def abort(self, cell: int) -> None:
        """Give up a reserved cell; the reader will skip it."""
        self._expect(cell, _Cell.WRITING)
        self._state[cell] = _Cell.ABORTED
        self._skip_aborted()

    def consume(self, cell: int) -> bool:
        """commit + take + release of the reserved ``cell`` in one step, for a
        writer that is its own reader (a block decoded where it landed, at
        once); False, with nothing done, unless ``cell`` is the reader's next
        (then the three steps, in order, keep the FIFO)."""
        state = self._state
        if state[self.send] is _Cell.ABORTED:
            self._skip_aborted()
        if self._filled or cell != self.send or state[cell] is not _Cell.WRITING:
            return False
        state[cell] = _Cell.DONE
        self.send = (cell + 1) % len(self._blocks)
        self.takes += 1
        self._advance_tail()
        return True

    # -- reader side -----------------------------------------------------------
    def take(self) -> tuple[int, memoryview, int] | None:
        """The oldest committed cell ``(cell, view[:nbytes], nbytes)``, or None
        when the cell at ``send`` is empty or still being written (FIFO)."""
        if not self.real:
            return None
        self._skip_aborted()
        cell = self.send
        if self._state[cell] is not _Cell.FILLED:
            return None
        self._state[cell] = _Cell.READING
        self._filled -= 1
        self.send = (cell + 1) % self.real
        self.takes += 1
        nbytes = self._nbytes[cell]
        return cell, self._umb.view(self._blocks[cell])[:nbytes], nbytes

    def release(self, cell: int) -> None:
        """The reader is done with ``cell``; it becomes reusable in ring order."""
        self._expect(cell, _Cell.READING)
        self._state[cell] = _Cell.DONE
        self._advance_tail()

    # -- internals -------------------------------------------------------------
    def _check_growth(self) -> None:
        real, used = self.real, self._occupied
        if used / real <= self.threshold or real >= self.capacity:
            return  # quiet row, or DF == 1: nothing to do (line 10)
        want = min(growth_cells(used, real), self.capacity - real)
        if self.allocate_rs(want):
            self.grows += 1
            self._starved = False
            logger.debug("%s grew %d -> %d cells (SU=%.3f)",
                         self.name, real, self.real, used / real)
        else:
            self._refused("cannot grow")

    def _refused(self, what: str) -> None:
        self.denied += 1
        if not self._starved:  # line 15 "output a message", once per episode
            self._starved = True
            logger.warning(
                "%s: UMB exhausted (%d blocks), %s (real=%d of N=%d)",
                self.name, self._umb.nblocks, what, self.real, self.capacity,
            )

    def _skip_aborted(self) -> None:
        while self._occupied and self._state[self.send] is _Cell.ABORTED:
            self._state[self.send] = _Cell.DONE
            self.send = (self.send + 1) % self.real
        self._advance_tail()

    def _advance_tail(self) -> None:
        while self._occupied and self._state[self.tail] is _Cell.DONE:
            self._state[self.tail] = _Cell.FREE
            self._nbytes[self.tail] = 0
            self.tail = (self.tail + 1) % self.real
            self._occupied -= 1

    def _expect(self, cell: int, state: _Cell) -> None:
        if not 0 <= cell < self.real or self._state[cell] is not state:
            raise ValueError(f"{self.name}: cell {cell} is not {state.name}")

    def size_history(self) -> list[tuple[float, int]]:
        """(timestamp, real cells) at creation and after every grow/shrink."""
        return list(self._history)

    def stats(self) -> dict[str, float]:
        return {
            "capacity": self.capacity,
            "real": self.real,
            "density_factor": self.density_factor,
            "used": self.used,
            "pending": self.pending,
            "space_utilization": self.space_utilization,
            "grows": self.grows,
            "shrinks": self.shrinks,
            "denied": self.denied,
            "waits": self.waits,
            "puts": self.puts,
            "takes": self.takes,
            "peak_used": self.peak_used,
            "peak_real": self.peak_real,
        }


# ----------------------------------------------------------------------------
# The M x N matrix
# ----------------------------------------------------------------------------
class PoolMatrix:
    """SM or RM: one :class:`SubPool` per host, all drawing on one UMB.

    ``local`` names this host's own row: it carries no remote traffic, so it
    gets no initial real space (it still works, bootstrapping on first use).
    """

    def __init__(
        self,
        hosts: int,
        capacity: int,
        umb: UserMemory,
        initial: int,
        threshold: float,
        *,
        local: int | None = None,
        reclaim: bool = True,
        name: str = "pool",
        clock: Clock = time.monotonic,
    ) -> None:
        if hosts < 1:
            raise ValueError("hosts M must be >= 1")
        self.umb = umb
        self.name = name
        self._hosts = hosts
        self._capacity, self._initial, self._threshold = capacity, initial, threshold
        self._local, self._clock = local, clock
        # Rows are made at their host's first traffic (Algorithm 1 lines 1-6
        # then run for that row alone): a rank of a large job that talks to a
        # few peers holds rows, and initial real space, for those only.
        self._rows: dict[int, SubPool] = {}
        # host -> (puts, takes) of its row at the last reclaim_idle: a row
        # whose counters have not moved since, and that holds nothing, is idle
        self._seen: dict[int, tuple[int, int]] = {}
        if reclaim:
            umb.add_reclaimer(self._reclaim_idle)

    @property
    def hosts(self) -> int:
        return self._hosts

    @property
    def rows(self) -> list[SubPool]:
        """The rows made so far, in host order."""
        return [self._rows[h] for h in sorted(self._rows)]

    def made(self, host: int) -> bool:
        """True once the row for ``host`` exists (it had traffic)."""
        return host in self._rows

    def __len__(self) -> int:
        return self._hosts

    def __iter__(self) -> Iterator[SubPool]:
        return iter(self.rows)

    def __getitem__(self, host: int) -> SubPool:
        row = self._rows.get(host)
        if row is not None:
            return row
        if not 0 <= host < self._hosts:
            raise ValueError(f"{self.name}: no host {host}")
        initial = 0 if host == self._local else self._initial
        row = self._rows[host] = SubPool(self._capacity, self.umb, self._threshold, initial=initial,
                                         name=f"{self.name}[{host}]", clock=self._clock)
        if row.real < row.initial:
            logger.warning("%s: UMB exhausted; row %d got %d of its %d initial cells",
                           self.name, host, row.real, initial)
        return row

    def _reclaim_idle(self, want: int, requester: object) -> int:
        # Largest surplus first; take only what is asked, never below initial.
        got = 0
        for row in sorted(self._rows.values(), key=lambda r: r.initial - r.real):
            if got >= want:
                break
            if row is not requester and not row.used and row.real > row.initial:
                got += row.shrink_to(max(row.initial, row.real - (want - got)))
        # Still short: the UMB is the rank's budget, shared by every peer it
        # talks to, so rows with nothing in them give up their initial space
        # too (an empty row holds no order to keep; its next writer
        # bootstraps it like a new row).
        if got < want:
            for row in self._rows.values():
                if got >= want:
                    break
                if row is not requester and not row.used and row.real:
                    got += row.shrink_to(0)
        return got

    def reclaim_idle(self) -> int:
        """Give back every row that has held nothing and seen no traffic since
        the last call: its blocks to the UMB, their pages to the OS.  The row
        is made again, with its initial space, at its host's next traffic (an
        empty row holds no order to keep).  Called every T seconds, a row goes
        after T to 2T of idleness.  Returns how many rows went."""
        seen, self._seen = self._seen, {}
        gone = 0
        for host, row in list(self._rows.items()):
            mark = (row.puts, row.takes)
            if row.used or seen.get(host) != mark:
                self._seen[host] = mark
                continue
            blocks = list(row.block_ids)
            row.shrink_to(0)
            del self._rows[host]
            self.umb.discard(blocks)
            gone += 1
        return gone

    def size_history(self, host: int) -> list[tuple[float, int]]:
        return self[host].size_history()

    def stats(self) -> dict[str, object]:
        return {"name": self.name, "umb": self.umb.stats(), "hosts": sorted(self._rows),
                "rows": [r.stats() for r in self.rows]}
