"""How a device array is cut into chunk-sized pieces, and the pinned chunk pool.

Both ends of a staged transfer must cut an array identically, from nothing
but the :class:`ArrayMeta` the sender puts in the stream header:

* the array's bytes are taken in its own memory order (C or Fortran; a
  non-contiguous source is made C-contiguous first);
* the *outer axis* is axis 0 for C order and the last axis for F order (the
  axis whose slices are contiguous); a 0-d array is one row of one item;
* rows of at most ``piece_size`` bytes are grouped, as many whole rows as fit,
  into one *piece* -- one pinned chunk, one message -- and each such piece is
  one *segment*, the unit the receiver delivers (a view ``arr[start:stop]``,
  or ``arr[..., start:stop]`` for F order);
* a row longer than ``piece_size`` is split into ``ceil(row / piece_size)``
  pieces, and that row alone is a segment.

So a stream's ``segment_size`` maps onto the staging as ``piece_size =
min(segment_size, chunk_size)``: segments are never larger than a chunk
unless a single row is.

:class:`PinnedChunkPool` is the fixed pool of pinned host chunks: one pinned
allocation made when it is created, carved into ``pool_bytes // chunk_size``
equal chunks (chunk size 256 KiB-16 MiB, default 4 MiB), never grown.
``acquire`` never blocks and never over-commits; ``recv_reserve`` chunks are
kept for receivers, because a sender's chunk comes back only once the *peer*
has received it: two ranks streaming to each other with every chunk held by
senders would wait for each other forever.
"""

from __future__ import annotations

import collections
import enum
from typing import Any

import numpy as np

from aiopdbp.arrays import parse_name, wire_name
from aiopdbp.errors import ClosedResourceError, ProtocolError
from aiopdbp.device.backend import DeviceBackend, HostBuffer, Order
from aiopdbp.records import FrozenRecord, init_field

__all__ = [
    "ArrayMeta", "Chunk", "ChunkPlan", "DEFAULT_CHUNK_SIZE", "DEFAULT_POOL_BYTES", "MAX_CHUNK_SIZE",
    "MIN_CHUNK_SIZE", "Piece", "PinnedChunkPool", "Role", "Segment", "segment_view",
]

MIN_CHUNK_SIZE = 256 * 1024
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
MAX_CHUNK_SIZE = 16 * 1024 * 1024
DEFAULT_POOL_BYTES = 64 * 1024 * 1024


class Piece(FrozenRecord):
    """One chunk-sized piece of an array: bytes ``[offset, offset + nbytes)``."""

    __slots__ = ("index", "offset", "nbytes", "segment")
    index: int
    offset: int
    nbytes: int
    segment: int

    def __init__(self, index: int, offset: int, nbytes: int, segment: int) -> None:
        init_field(self, "index", index)
        init_field(self, "offset", offset)
        init_field(self, "nbytes", nbytes)
        init_field(self, "segment", segment)


class Segment(FrozenRecord):
    """Rows ``[start, stop)`` of the outer axis, bytes ``[offset, offset + nbytes)``."""

    __slots__ = ("index", "start", "stop", "offset", "nbytes")
    index: int
    start: int
    stop: int
    offset: int
    nbytes: int

    def __init__(self, index: int, start: int, stop: int, offset: int, nbytes: int) -> None:
        init_field(self, "index", index)
        init_field(self, "start", start)
        init_field(self, "stop", stop)
        init_field(self, "offset", offset)
        init_field(self, "nbytes", nbytes)


class ArrayMeta(FrozenRecord):
    """What a receiver needs to rebuild a staged array (goes in the stream header)."""

    __slots__ = ("dtype", "shape", "order", "piece_size")
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    order: Order
    piece_size: int

    def __init__(self, dtype: np.dtype[Any], shape: tuple[int, ...], order: Order, piece_size: int) -> None:
        init_field(self, "dtype", dtype)
        init_field(self, "shape", shape)
        init_field(self, "order", order)
        init_field(self, "piece_size", piece_size)
        self._check()

    def _check(self) -> None:
        if self.dtype.hasobject:
            raise TypeError("device arrays cannot hold Python objects")
        if self.order not in ("C", "F") or self.piece_size < 1 or any(n < 0 for n in self.shape):
            raise ValueError(f"invalid array meta {self}")

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))

    def to_wire(self) -> dict[str, Any]:
        return {"dtype": wire_name(self.dtype), "shape": list(self.shape), "order": self.order, "piece": self.piece_size}

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> ArrayMeta:
        """Parse a received header; ``ProtocolError`` when it is malformed."""
        try:
            shape = tuple(int(n) for n in d["shape"])
            return cls(parse_name(str(d["dtype"])), shape, d["order"], int(d["piece"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed device array header {d!r}: {exc}") from None


class ChunkPlan:
    """How an array is cut into pieces and segments (identical on both sides)."""

    def __init__(self, meta: ArrayMeta) -> None:
        self.meta = meta
        nbytes = meta.nbytes
        shape = meta.shape
        outer = 0 if meta.order == "C" else len(shape) - 1
        self.nrows = shape[outer] if shape else 1
        self.row_bytes = nbytes // self.nrows if self.nrows else 0
        if nbytes == 0:
            self.npieces = self.nsegments = self._rows_per_piece = self._pieces_per_row = 0
        elif self.row_bytes <= meta.piece_size:  # whole rows per piece; a segment is a piece
            self._rows_per_piece = meta.piece_size // self.row_bytes
            self._pieces_per_row = 0
            self.npieces = self.nsegments = -(-self.nrows // self._rows_per_piece)
        else:  # a long row spans several pieces; a segment is a row
            self._rows_per_piece = 0
            self._pieces_per_row = -(-self.row_bytes // meta.piece_size)
            self.npieces = self.nrows * self._pieces_per_row
            self.nsegments = self.nrows

    def piece(self, i: int) -> Piece:
        if not 0 <= i < self.npieces:
            raise IndexError(i)
        if self._rows_per_piece:
            start = i * self._rows_per_piece
            rows = min(self._rows_per_piece, self.nrows - start)
            return Piece(i, start * self.row_bytes, rows * self.row_bytes, i)
        row, j = divmod(i, self._pieces_per_row)
        off = j * self.meta.piece_size
        return Piece(i, row * self.row_bytes + off, min(self.meta.piece_size, self.row_bytes - off), row)

    def segment(self, s: int) -> Segment:
        if not 0 <= s < self.nsegments:
            raise IndexError(s)
        k = self._rows_per_piece or 1
        start, stop = s * k, min(self.nrows, (s + 1) * k)
        return Segment(s, start, stop, start * self.row_bytes, (stop - start) * self.row_bytes)

    def last_piece(self, s: int) -> int:
        """Index of the last piece of segment ``s``."""
        return s if self._rows_per_piece else (s + 1) * self._pieces_per_row - 1


def segment_view(array: Any, meta: ArrayMeta, seg: Segment) -> Any:
    """The rows of ``seg`` as a view of ``array`` (axis 0 for C, the last for F)."""
    if not meta.shape:
        return array
    if meta.order == "C":
        return array[seg.start : seg.stop]
    return array[..., seg.start : seg.stop]


class Role(enum.Enum):
    SEND = "send"
    RECV = "recv"


class Chunk:
    """One chunk of the pinned pool; ``buf`` is its ``chunk_size`` bytes."""

    __slots__ = ("index", "buf", "role")

    def __init__(self, index: int, buf: HostBuffer) -> None:
        self.index = index
        self.buf = buf
        self.role: Role | None = None  # None while free


_ABANDONED: list[HostBuffer] = []  # pinned memory that may still be written: kept for the process


class PinnedChunkPool:
    """A fixed set of equal pinned chunks carved from one allocation."""

    def __init__(
        self,
        backend: DeviceBackend,
        *,
        pool_bytes: int = DEFAULT_POOL_BYTES,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        recv_reserve: int | None = None,
    ) -> None:
        if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
            raise ValueError(f"chunk_size must be in [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}] bytes, got {chunk_size}")
        nchunks = pool_bytes // chunk_size
        reserve = max(1, nchunks // 4) if recv_reserve is None else recv_reserve
        if nchunks < 1 or not 0 <= reserve < nchunks:
            raise ValueError(
                f"pool_bytes={pool_bytes} gives {nchunks} chunks of {chunk_size} bytes: need more than "
                f"recv_reserve={reserve} (one at least for senders)"
            )
        self.chunk_size = chunk_size
        self.nchunks = nchunks
        self.recv_reserve = reserve
        self._memory: HostBuffer | None = backend.alloc_pinned(nchunks * chunk_size)
        mem = self._memory
        self._chunks = [Chunk(i, mem[i * chunk_size : (i + 1) * chunk_size]) for i in range(nchunks)]
        self._free: collections.deque[Chunk] = collections.deque(self._chunks)
        self._held = {Role.SEND: 0, Role.RECV: 0}
        self.lost = 0  #: chunks withdrawn for good by :meth:`lose`
        self.high_water = 0  #: most chunks ever taken at once

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def in_use(self) -> int:
        return self.nchunks - len(self._free) - self.lost

    def held_by(self, role: Role) -> int:
        return self._held[role]

    def acquire(self, role: Role) -> Chunk | None:
        """A free chunk, or None (never blocks, never over-commits).  Senders
        leave ``recv_reserve`` chunks to receivers."""
        if self._memory is None:
            raise ClosedResourceError("the pinned chunk pool is closed")
        if not self._free or (role is Role.SEND and self._held[Role.SEND] >= self.nchunks - self.recv_reserve):
            return None
        chunk = self._free.popleft()
        chunk.role = role
        self._held[role] += 1
        self.high_water = max(self.high_water, self.in_use)
        return chunk

    def release(self, chunk: Chunk) -> None:
        """Give a chunk back; nothing may touch its memory any more."""
        if chunk.role is None or self._chunks[chunk.index] is not chunk:
            raise RuntimeError(f"chunk {chunk.index} released twice or not from this pool")
        self._held[chunk.role] -= 1
        chunk.role = None
        self._free.append(chunk)

    def lose(self, chunk: Chunk) -> None:
        """Withdraw a chunk that MPI or the device may still write: never reused."""
        if chunk.role is None:
            raise RuntimeError(f"chunk {chunk.index} is free")
        self._held[chunk.role] -= 1
        chunk.role = None
        self.lost += 1

    def close(self) -> None:
        """Drop the allocation (idempotent); raises while chunks are taken.  A
        pool with lost chunks keeps its memory alive for the process."""
        if self._memory is None:
            return
        if self.in_use:
            raise RuntimeError(f"{self.in_use} pinned chunks are still in use")
        if self.lost:
            _ABANDONED.append(self._memory)
        self._memory = None
        self._free.clear()
        self._chunks.clear()
