# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.runtime.recvpath` (read its docstring):
the same :class:`RecvPath`, its ``recv`` a compiled coroutine that looks at
the pipe's first item and, in the common case, takes it from the pipe's one
FIFO itself -- :meth:`Pipe.receive_nowait
<aiopdbp.routing.pipes.Pipe.receive_nowait>`'s one-FIFO lines, inline (the
count taken, the local bytes freed, a parked sender served, the credit
watch) -- so that no Python frame runs for it.  Anything else is the GP's
coroutine, as in the pure form, with nothing taken (``tests/test_recvpath.py``
runs both)."""

import numpy as np

from aiopdbp.wire.message import Message

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("recvpath.py", "crecvpath.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["RecvPath"]

cdef object _Message = Message
cdef object _ndarray = np.ndarray


cdef class RecvPath:
    """See :class:`aiopdbp.runtime.recvpath.RecvPath`."""

    cdef public object pipe
    cdef object _rx, _node, _slow

    def __init__(self, rx, node, slow):
        self.pipe = None
        self._rx = rx
        self._node = node
        self._slow = slow

    def recv(self, timeout=None, *, arrays=None):
        # Decided at the call: an item first in the one FIFO now, this path's
        # coroutine (which checks again when it runs); else the GP's own, with
        # no second coroutine around it (a receive that waits pays one)
        pipe = self.pipe
        if pipe is not None and arrays is None and pipe._turns is None and pipe._items:
            return self._take(timeout)
        return self._slow(timeout, arrays, None)

    async def _take(self, timeout):
        pipe = self.pipe
        rx = self._rx
        if (pipe is not None and rx.held is None and rx.into_task is None
                and pipe._turns is None):
            items = pipe._items
            if items:
                item = items[0]
                if type(item) is _Message and type((<tuple>item)[0]) is str:
                    data = (<tuple>item)[3]
                    if type(data) is not _ndarray or (self._node.arrays == "auto"
                                                      and data.dtype.metadata is None):
                        # Pipe.receive_nowait's one FIFO, inline
                        items.popleft()
                        taken = pipe.taken + 1
                        pipe.taken = taken
                        room = pipe.room
                        if room.marks:
                            room.release(taken)
                        if room.lot:
                            room.serve()
                        if taken >= pipe.watch_at and pipe.on_watch is not None:
                            pipe.watch_at = pipe.on_watch(pipe, taken, pipe._host)
                        return item
        return await self._slow(timeout, None, None)
