"""Receive buffers for large messages, recycled (:class:`RecvBufferCache`).

A fresh large allocation is ``mmap``-ed by malloc and every page faults on
first touch; on the shared-memory path that capped receive bandwidth at
~3 GB/s instead of ~9 GB/s.  The cache keeps the memory of delivered
buffers the receiver has dropped and hands it out again, pre-faulted.
Thread safe, bounded.  Used by the progress engine
(:mod:`aiopdbp.transport.progress`).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Final

_np: Any
try:  # numpy gives uninitialised (no memset) large receive buffers
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is a dependency of aiopdbp
    _np = None

__all__ = ["DEFAULT_RECV_CACHE_BYTES", "NUMPY_ALLOC_THRESHOLD", "RECV_CACHE_MIN_SIZE", "RecvBufferCache"]

#: receive buffers at least this long come from ``numpy.empty`` (no memset)
NUMPY_ALLOC_THRESHOLD: Final = 4096
#: receive buffers at least this long come from the recycling cache
RECV_CACHE_MIN_SIZE: Final = 128 * 1024
DEFAULT_RECV_CACHE_BYTES: Final = 64 * 2**20


def _size_class(size: int) -> int:
    """Round up to 1/8 of the size's power of two (<= 12.5 % slack)."""
    step = 1 << max(0, size.bit_length() - 4)
    return (size + step - 1) // step * step


class RecvBufferCache:
    """Recycles the memory of large receive buffers (thread safe, bounded).

    A large message gets a fresh-looking ``numpy`` array of exactly its size,
    carved from a pooled owner block.  When the receiver drops its last
    reference to that array (and every view of it), a weak reference's
    callback returns the owner block to the cache (a ``weakref.ref`` kept
    here: ~1.3 us per buffer where ``weakref.finalize`` cost ~3 us).  Why: fresh large allocations are
    ``mmap``-ed by malloc and every page faults again on first touch -- on the
    shared-memory path that capped receive bandwidth at ~3 GB/s instead of
    ~9 GB/s.  ``capacity`` bounds the bytes kept while unused (0 disables
    the cache: plain ``numpy.empty`` per message).  Owner blocks are wrapped
    in a ``memoryview`` so numpy views of the delivered array keep the
    *array* (not the owner) alive, which is what the finalizer watches.
    """

    def __init__(self, capacity: int, min_size: int) -> None:
        self.capacity = capacity
        self.min_size = min_size
        self._free: dict[int, list[memoryview]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        # buffers handed out: id(weak reference) -> (it, size class, owner block)
        self._out: dict[int, tuple[weakref.ref[Any], int, memoryview]] = {}
        self.hits = 0
        self.misses = 0

    def alloc(self, size: int) -> Any:
        if size < NUMPY_ALLOC_THRESHOLD or _np is None:
            return bytearray(size)
        if size < self.min_size or self.capacity <= 0:
            return _np.empty(size, dtype=_np.uint8)
        cls = _size_class(size)
        owner: memoryview | None = None
        with self._lock:
            lst = self._free.get(cls)
            if lst:
                owner = lst.pop()
                self._bytes -= cls
        if owner is None:
            self.misses += 1
            owner = memoryview(_np.empty(cls, dtype=_np.uint8))
        else:
            self.hits += 1
        arr = _np.frombuffer(owner, dtype=_np.uint8, count=size)
        ref = weakref.ref(arr, self._put)
        self._out[id(ref)] = (ref, cls, owner)
        return arr

    def _put(self, ref: weakref.ref[Any]) -> None:
        with self._lock:
            entry = self._out.pop(id(ref), None)
            if entry is None:
                return
            _, cls, owner = entry
            if self._bytes + cls > self.capacity:
                return  # over budget: let it go back to the OS
            self._free.setdefault(cls, []).append(owner)
            self._bytes += cls

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._bytes = 0
