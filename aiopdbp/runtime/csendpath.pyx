# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.runtime.sendpath` (read its docstring):
the same :class:`SendPath`, its state in C fields, its ``send`` a compiled
coroutine -- which ``asyncio`` takes wherever it takes a coroutine -- and the
router's ``try_send`` inline (the same four steps: name -> pid -> target,
nothing queued ahead, the target's ``offer``), so that no Python frame runs
between ``GP.send`` and the host link's compiled ``offer``; ``gp.send`` is
this path's ``call`` itself, so none runs before it either.  For host data
``call`` returns a coroutine of its own (:class:`_Send`), not ``send``'s:
its first step is the common case done at once (:meth:`SendPath._now`), with
no coroutine object, closure and await wrapper made per message; where that
step does nothing, it runs ``send``'s coroutine.  Everything else is the
GP's coroutine and the router's ``send_waiting``, as in the pure form
(``tests/test_sendpath.py`` runs both)."""

import asyncio

import numpy as np

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF

from aiopdbp.errors import ClosedResourceError, UnknownProcessError
from aiopdbp.hosts.toolate import despite_cancel
from aiopdbp.runtime.payloads import ownable
from aiopdbp.runtime.sendpath import BURST_BYTES
from aiopdbp.streams.receiver import DEFAULT_SEGMENT, EAGER_LIMIT
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import CREDIT_OVERHEAD

from aiopdbp.hosts.csender cimport LinkSender as CSender

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("sendpath.py", "csendpath.pyx", "coshell.pxd", "cslots.pxd", "../hosts/csender.pxd", "../hosts/cgate.pxd")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["BURST_BYTES", "SendPath"]

from aiopdbp.runtime.coshell cimport (CO_FRESH, CoState, aiopdbp_set_am_send, co_begin, co_close,
                                     co_dealloc, co_send, co_started, co_step, co_throw)

from aiopdbp.runtime.cslots cimport aiopdbp_slot_incr, aiopdbp_slot_offset

cdef extern from *:
    bint PyMethod_Check(object o)
    PyObject *PyMethod_GET_FUNCTION(object o)
    PyObject *PyMethod_GET_SELF(object o)

cdef object _SHORT = Kind.SHORT
cdef object _COMMAND = Kind.COMMAND
cdef object _ndarray = np.ndarray
cdef object _ownable = ownable
cdef object _future_await = asyncio.Future.__await__
cdef object _Cancelled = asyncio.CancelledError
cdef object _sleep = asyncio.sleep
cdef Py_ssize_t _OVERHEAD = CREDIT_OVERHEAD
cdef Py_ssize_t _BURST = BURST_BYTES
cdef Py_ssize_t _EAGER = EAGER_LIMIT
cdef object _DEFAULT_SEGMENT = DEFAULT_SEGMENT
cdef str _PLAIN = "biufcmM"
# the compiled sender's offer as a HostLink holds it (a method of the sender)
cdef object _SENDER_OFFER = CSender.__dict__["offer"]


cdef inline bint _offer(tgt, pid, Py_ssize_t cost, fields) except -1:
    # tgt.offer(pid, cost, fields): a C call where it is the compiled
    # sender's (a HostLink's), without the bound method's Python call
    off = tgt.offer
    if PyMethod_Check(off) and PyMethod_GET_FUNCTION(off) == <PyObject *>_SENDER_OFFER:
        sender = <object>PyMethod_GET_SELF(off)
        if type(sender) is CSender:
            return (<CSender>sender).offer(pid, cost, fields)
    return bool(off(pid, cost, fields))


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
    cdef Py_ssize_t _offered_at     # where the router keeps its count (-1: its attribute)

    def __init__(self, name, pid, router, slow, *, owned_min, snapshot, max_ndim, tensor_view=None):
        self.name = name
        self.pid = pid
        self.freed = False
        self.burst = _BURST
        self._router = router
        self._pids = router.pids
        self._targets = router.targets
        self._queued = router._queued
        self._offered_at = aiopdbp_slot_offset(type(router), "offered")
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
            return _new_send(self, dest, data, com, kind, timeout, copy)
        if stream is None and (view := self._tensor(data)) is not None:
            return _new_send(self, dest, view, com, kind, timeout, copy)
        if self.whole is None:
            raise RuntimeError("SendPath.call: no GP send set (whole) for this payload")
        return self.whole(dest, data, com=com, kind=kind, timeout=timeout, copy=copy, stream=stream)

    cdef inline int _count(self) except -1:
        # the router's ``offered += 1``: in its slot where it has one (Router)
        if self._offered_at < 0 or not aiopdbp_slot_incr(self._router, self._offered_at):
            self._router.offered += 1
        return 0

    cdef object _tensor(self, data):
        # (a plain CPU tensor seen before: its memory's ndarray, one C call of
        # the tensor paths' own; None: the GP's send takes it and says why)
        if self._tensor_view is None:
            return None
        return self._tensor_view(data)

    cdef int _now(self, dest, data, com, kind, timeout) except -1:
        # send's common case done in one step, or nothing done (0: then send's
        # coroutine does it all, from its start): valid arguments, host data,
        # a burst that does not yield now, nothing queued, a known target
        # whose offer takes it.  The same reads and writes as send's, so that
        # a send done here is the one send's coroutine would have done.
        cdef Py_ssize_t cost
        if (self.freed or type(com) is not int or not 0 <= com <= 0xFFFFFFFF
                or (kind is not _SHORT and kind is not _COMMAND) or type(dest) is not str
                or (timeout is not None and (type(timeout) is not float
                                             or not PyFloat_AS_DOUBLE(timeout) >= 0))):
            return 0
        if type(data) is bytes:
            cost = len(<bytes>data) + _OVERHEAD
        elif type(data) is _ndarray and data.nbytes < self._owned_min:
            cost = data.nbytes + _OVERHEAD
        else:
            return 0
        if self.burst - cost <= 0 or self._queued:
            return 0
        pid = self._pids.get(dest)
        if pid is None:
            return 0
        tgt = self._targets.get(pid)
        if tgt is None:
            return 0
        if type(data) is not bytes:
            data = self._snapshot(data, self._max_ndim)
            if data is None:
                return 0
        self.burst -= cost
        if _offer(tgt, pid, cost, (self.name, kind, com, data, self.pid)):
            self._count()
            return 1
        self.burst += cost   # not taken: the coroutine starts from the same state
        return 0

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
        elif type(data) is _ndarray and data.nbytes >= self._owned_min:
            done = self._owned(dest, data, com, kind)
            if done is None:
                await self._slow(dest, data, com, kind, timeout, copy)
                return
            try:
                await _held_wait(done)
            except _Cancelled:
                # OwnedDone.__await__'s rule, read there: a held payload that
                # went returns, and the cancel comes at the next suspension
                if not done._held or not await despite_cancel(done):
                    raise
            return
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
            if tgt is not None and not self._queued and _offer(tgt, pid, cost, fields):
                self._count()
                return
        self.burst = _BURST
        await self._router.send_waiting(dest, fields, cost, timeout)

    cdef object _owned(self, dest, data, com, kind):
        # Router.send_owned's common case, inline (the pure form's _owned)
        if not _ownable(data):
            return None
        pid = self._pids.get(dest)
        if pid is None or self._queued:
            return None
        tgt = self._targets.get(pid)
        owned = getattr(tgt, "owned", None)
        if tgt is None or owned is None or not tgt.remote:
            return None
        return owned(pid, data.nbytes + _OVERHEAD, (self.name, kind, com, data, self.pid))

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
        if not self._queued and _offer(tgt, pid, cost, record):
            self._count()
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

@cython.final
cdef class _Held:
    # an owned send's OwnedDone awaited through the C future's own iterator,
    # without OwnedDone.__await__'s Python generator (send applies its rule)
    cdef object done

    def __await__(self):
        return _future_await(self.done)


cdef inline _Held _held_wait(done):
    cdef _Held h = _Held.__new__(_Held)
    h.done = done
    return h


cdef inline _Send _new_send(SendPath path, dest, data, com, kind, timeout, copy):
    cdef _Send aw = _Send.__new__(_Send)
    aw.path = path
    aw.dest = dest
    aw.data = data
    aw.com = com
    aw.kind = kind
    aw.timeout = timeout
    aw.copy = copy
    return aw


@cython.final
@cython.no_gc
@cython.freelist(8)
cdef class _Send:
    """What :meth:`SendPath.call` returns for host data: a coroutine (it has
    ``send``, ``throw``, ``close`` and ``__await__``: ``asyncio`` takes it as
    one) whose first step is :meth:`SendPath._now`; where that does nothing,
    it runs the path's ``send`` coroutine from its start and passes every
    step, throw and close on to it, as ``await path.send(...)`` would.  So
    the common send needs no coroutine object, closure and await wrapper, and
    nothing is sent before it is awaited (a task cancelled before it runs
    throws into a fresh one: nothing sent; the protocol: ``runtime/coshell.pxd``)."""

    cdef SendPath path
    cdef object dest, data, com, kind, timeout, copy
    cdef CoState cs

    def __dealloc__(self):
        co_dealloc(&self.cs, "SendPath.send")

    cdef int _step(self, arg, PyObject **result) except -1:
        if self.cs.state == CO_FRESH:
            co_begin(&self.cs, arg)
            if self.path._now(self.dest, self.data, self.com, self.kind, self.timeout):
                Py_INCREF(None)
                result[0] = <PyObject *>None
                return 0
            co_started(&self.cs, self.path.send(self.dest, self.data, self.com, self.kind, self.timeout, self.copy))
        return co_step(&self.cs, arg, result)

    def __await__(self):
        return self

    def __next__(self):
        return co_send(self, _am_send, None)

    def send(self, value):
        return co_send(self, _am_send, value)

    def throw(self, typ, val=None, tb=None):
        return co_throw(&self.cs, typ, val, tb)

    def close(self):
        co_close(&self.cs)


cdef int _am_send(PyObject *o, PyObject *arg, PyObject **result) except -1:
    return (<_Send>o)._step(<object>arg, result)


aiopdbp_set_am_send(_Send, <void *>_am_send)
