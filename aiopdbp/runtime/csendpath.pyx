# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.runtime.sendpath` (read its docstring):
the same :class:`SendPath`, its state in C fields, its ``send`` a compiled
coroutine -- which ``asyncio`` takes wherever it takes a coroutine -- and the
router's ``try_send`` inline (the same four steps: name -> pid -> target,
nothing queued ahead, the target's ``offer``), so that no Python frame runs
between ``GP.send`` and the host link's compiled ``offer``; ``gp.send`` is
this path's ``call`` itself, so none runs before it either.  Everything else
is the GP's coroutine and the router's ``send_waiting``, as in the pure form
(``tests/test_sendpath.py`` runs both)."""

import asyncio

import numpy as np

from cpython.float cimport PyFloat_AS_DOUBLE

from aiopdbp.errors import ClosedResourceError, UnknownProcessError
from aiopdbp.runtime.sendpath import BURST_BYTES
from aiopdbp.streams.receiver import DEFAULT_SEGMENT, EAGER_LIMIT
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import CREDIT_OVERHEAD

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("sendpath.py", "csendpath.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["BURST_BYTES", "SendPath"]

cdef object _SHORT = Kind.SHORT
cdef object _COMMAND = Kind.COMMAND
cdef object _ndarray = np.ndarray
cdef object _sleep = asyncio.sleep
cdef Py_ssize_t _OVERHEAD = CREDIT_OVERHEAD
cdef Py_ssize_t _BURST = BURST_BYTES
cdef Py_ssize_t _EAGER = EAGER_LIMIT
cdef object _DEFAULT_SEGMENT = DEFAULT_SEGMENT
cdef str _PLAIN = "biufcmM"


cdef class SendPath:
    """See :class:`aiopdbp.runtime.sendpath.SendPath`."""

    cdef public object name, pid
    cdef public bint freed
    cdef public Py_ssize_t burst
    cdef public object whole
    cdef public object streams, whole_stream
    cdef dict _pids, _targets
    cdef object _router, _queued, _slow, _snapshot
    cdef Py_ssize_t _owned_min
    cdef object _max_ndim
    cdef object _tensor_view

    def __init__(self, name, pid, router, slow, *, owned_min, snapshot, max_ndim, tensor_view=None):
        self.name = name
        self.pid = pid
        self.freed = False
        self.burst = _BURST
        self._router = router
        self._pids = router.pids
        self._targets = router.targets
        self._queued = router._queued
        self._slow = slow
        self._owned_min = owned_min
        self._snapshot = snapshot
        self._max_ndim = max_ndim
        self._tensor_view = tensor_view
        self.whole = None
        self.streams = None
        self.whole_stream = None

    def call(self, dest, data=None, *, com=0, kind=Kind.SHORT, timeout=None, copy=True, stream=None):
        if stream is None and (data is None or type(data) is bytes or type(data) is _ndarray):
            return self.send(dest, data, com, kind, timeout, copy)
        if stream is None and (view := self._tensor(data)) is not None:
            return self.send(dest, view, com, kind, timeout, copy)
        if self.whole is None:
            raise RuntimeError("SendPath.call: no GP send set (whole) for this payload")
        return self.whole(dest, data, com=com, kind=kind, timeout=timeout, copy=copy, stream=stream)

    cdef object _tensor(self, data):
        # (a plain CPU tensor seen before: its memory's ndarray, one C call of
        # the tensor paths' own; None: the GP's send takes it and says why)
        if self._tensor_view is None:
            return None
        return self._tensor_view(data)

    async def send(self, dest, data, com, kind, timeout, copy):
        cdef Py_ssize_t cost
        if (self.freed or type(com) is not int or not 0 <= com <= 0xFFFFFFFF
                or (kind is not _SHORT and kind is not _COMMAND) or type(dest) is not str
                or (timeout is not None and (type(timeout) is not float
                                             or not PyFloat_AS_DOUBLE(timeout) >= 0))):
            await self._slow(dest, data, com, kind, timeout, copy)
            return
        if type(data) is bytes:
            cost = len(<bytes>data) + _OVERHEAD
        elif type(data) is _ndarray and data.nbytes < self._owned_min:
            plain = self._snapshot(data, self._max_ndim)
            if plain is None:
                await self._slow(dest, data, com, kind, timeout, copy)
                return
            cost = data.nbytes + _OVERHEAD
            data = plain
        else:
            await self._slow(dest, data, com, kind, timeout, copy)
            return
        self.burst -= cost
        if self.burst <= 0:
            self.burst = _BURST
            await _sleep(0)
            if self.freed:
                raise ClosedResourceError(f"GP {self.name!r} was freed")
        fields = (self.name, kind, com, data, self.pid)
        # Router.try_send, inline
        pid = self._pids.get(dest)
        if pid is not None:
            tgt = self._targets.get(pid)
            if tgt is not None and not self._queued and tgt.offer(pid, cost, fields):
                self._router.offered += 1
                return
        self.burst = _BURST
        await self._router.send_waiting(dest, fields, cost, timeout)

    # -- short streams ----------------------------------------------------------
    def call_stream(self, dest, data, *, segment_size=None, com=0, timeout=None, copy=True, stream=None):
        if stream is None and (type(data) is _ndarray or type(data) is bytes):
            return self.stream(dest, data, segment_size, com, timeout, copy)
        if self.whole_stream is None:
            raise RuntimeError("SendPath.call_stream: no GP send_stream set (whole_stream)")
        return self.whole_stream(dest, data, segment_size=segment_size, com=com, timeout=timeout, copy=copy,
                                 stream=stream)

    async def stream(self, dest, data, segment_size, com, timeout, copy):
        cdef Py_ssize_t n, limit, size
        streams = self.streams
        size_obj = _DEFAULT_SEGMENT if segment_size is None else segment_size
        if (streams is None or self.freed or type(com) is not int or not 0 <= com <= 0xFFFFFFFF
                or type(dest) is not str or type(size_obj) is not int or not size_obj >= 1
                or (timeout is not None and (type(timeout) is not float
                                             or not PyFloat_AS_DOUBLE(timeout) >= 0))):
            return await self._whole_stream(dest, data, segment_size, com, timeout, copy)
        limit = _EAGER if size_obj >= _EAGER else <Py_ssize_t>size_obj
        if type(data) is _ndarray:
            n = data.nbytes
            if (not 0 < n <= limit or not data.ndim or data.dtype.kind not in _PLAIN
                    or not data.flags.c_contiguous):
                return await self._whole_stream(dest, data, segment_size, com, timeout, copy)
            eager = data
        else:
            n = len(<bytes>data)
            if not 0 < n <= limit:
                return await self._whole_stream(dest, data, segment_size, com, timeout, copy)
            eager = memoryview(data)
        pid = self._pids.get(dest)
        tgt = None if pid is None else self._targets.get(pid)
        if pid is None or tgt is None or not tgt.remote:
            return await self._whole_stream(dest, data, segment_size, com, timeout, copy)
        record = streams.whole_record(self.pid, com, eager)
        cost = n + _OVERHEAD
        # the table's send_whole_nowait (the manager's offer), inline: the
        # router counts what a GP's path routed at once (stats add the two)
        if not self._queued and tgt.offer(pid, cost, record):
            self._router.offered += 1
            return n
        if timeout is None:
            try:
                if await streams.send_whole(self.pid, tgt, pid, record, cost):
                    return n
            except UnknownProcessError:
                await self._router.resolve(dest, 0)
                raise
        return await self._whole_stream(dest, data, segment_size, com, timeout, copy)

    cdef object _whole_stream(self, dest, data, segment_size, com, timeout, copy):
        if self.whole_stream is None:
            raise RuntimeError("SendPath.stream: no GP send_stream set (whole_stream)")
        return self.whole_stream(dest, data, segment_size=segment_size, com=com, timeout=timeout, copy=copy)
