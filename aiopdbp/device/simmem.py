"""The simulated device's memory and current streams (:mod:`aiopdbp.device.sim`).

:class:`SimMemory` is CuPy's caching allocator in miniature: a block belongs
to the stream it was allocated for, goes back to that stream's free list when
its last array is collected, and is handed to the next allocation of the
same size on that stream.  It also tracks which queued operations touch a
block, so that freeing one while work on *another* stream still uses it --
what corrupts data on a GPU -- is recorded in :attr:`SimMemory.violations`,
and which host ranges are pinned.  :class:`CurrentStreams` is the per-thread,
per-device current stream (``with stream:``) and current device.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["CurrentStreams", "SimMemory"]

S = TypeVar("S")


class SimMemory:
    """Blocks per stream, their users, and the pinned ranges (thread safe)."""

    def __init__(self) -> None:
        #: device memory freed while work on another stream still touched it (each a description)
        self.violations: list[str] = []
        self.reuses = 0  #: allocations served from a freed block
        # reentrant: an array's last reference may go -- and its block come
        # back through free() -- while this thread holds the lock (the cyclic
        # GC runs at any allocation), which must not deadlock
        self._lock = threading.RLock()
        self._pinned: list[tuple[int, int]] = []  # address ranges of pinned allocations
        self._cache: dict[tuple[int, int], list[npt.NDArray[np.uint8]]] = {}  # (id(stream), nbytes) -> blocks
        self._busy: dict[int, collections.Counter[int]] = {}  # id(block) -> id(stream) -> queued operations

    def alloc(self, nbytes: int, stream: object) -> npt.NDArray[np.uint8]:
        """A block of ``nbytes`` for ``stream``: one it freed, else a new one."""
        with self._lock:
            free = self._cache.get((id(stream), nbytes))
            if free:
                self.reuses += 1
                return free.pop()
        return np.empty(nbytes, dtype=np.uint8)

    def free(self, raw: npt.NDArray[np.uint8], stream: object, name: str) -> None:
        """``raw``'s last array is gone: back to ``stream``'s free list."""
        with self._lock:
            users: collections.Counter[int] = self._busy.get(id(raw)) or collections.Counter()
            if any(k != id(stream) for k in users):
                self.violations.append(f"{raw.nbytes} bytes allocated on {name} freed while work on "
                                       "another stream still touches them")
            self._cache.setdefault((id(stream), raw.nbytes), []).append(raw)

    def touch(self, blocks: tuple[int, ...], stream: object, delta: int) -> None:
        """Operations on ``stream`` start (+1) or stop (-1) touching ``blocks``."""
        with self._lock:
            for b in blocks:
                users = self._busy.setdefault(b, collections.Counter())
                users[id(stream)] += delta
                if users[id(stream)] <= 0:
                    del users[id(stream)]
                if not users:
                    del self._busy[b]

    def pin(self, buf: npt.NDArray[np.uint8]) -> None:
        """``buf`` is pinned host memory from now on."""
        with self._lock:
            self._pinned.append((buf.ctypes.data, buf.ctypes.data + buf.nbytes))

    def is_pinned(self, buf: Any) -> bool:
        """True for memory inside a pinned allocation."""
        arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
        start = arr.ctypes.data
        with self._lock:
            return any(lo <= start and start + arr.nbytes <= hi for lo, hi in self._pinned)


class CurrentStreams(Generic[S]):
    """Per thread: the current device and, per device, the ``with`` stack of streams."""

    def __init__(self) -> None:
        self._tls = threading.local()

    @property
    def device(self) -> int:
        return int(getattr(self._tls, "device", 0))

    @device.setter
    def device(self, device: int) -> None:
        self._tls.device = device

    def stack(self, device: int) -> list[S]:
        """This thread's entered streams of ``device``, innermost last."""
        stacks: dict[int, list[S]] | None = getattr(self._tls, "streams", None)
        if stacks is None:
            stacks = self._tls.streams = {}
        return stacks.setdefault(device, [])
