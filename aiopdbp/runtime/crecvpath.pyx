# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.runtime.recvpath` (read its docstring):
the same :class:`RecvPath`, its ``recv`` -- when an item is first in the
pipe -- a compiled coroutine of its own (:class:`_Take`: no coroutine object,
closure or await wrapper per message) whose first step looks at the pipe's
first item and, in the common case, takes it from the pipe's one
FIFO itself -- :meth:`Pipe.receive_nowait
<aiopdbp.routing.pipes.Pipe.receive_nowait>`'s one-FIFO lines, inline (the
count taken, the local bytes freed, a parked sender served, the credit
watch) -- so that no Python frame runs for it; an array to convert (a
tensor's) is converted first and its ``Message`` filled in C; an incoming
stream is taken the same way.  A receive without a timeout that finds the
pipe empty waits in :class:`_Wait` (``GP._recv``'s wait, compiled: no Python
frame per message for the wait either).  Anything else is the GP's
coroutine, as in the pure form, with nothing taken (``tests/test_recvpath.py``
runs both).  The pipe's, its room's and the receiving side's attributes a
take reads are those classes' ``__slots__``, read and written in place
(:class:`_Slots`)."""

from asyncio import CancelledError, get_running_loop

import numpy as np

cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF

from aiopdbp.routing.pipes import _wake_first
from aiopdbp.runtime.sendpath import BURST_BYTES
from aiopdbp.streams.receiver import IncomingStream
from aiopdbp.wire.message import Message

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("recvpath.py", "crecvpath.pyx", "coshell.pxd", "cslots.pxd")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["RecvPath"]

cdef extern from *:
    """
    /* Message((a, b, c, d, e)) for Message, a tuple subclass adding no __new__
       or __init__: filled in place, as tuple's own new does for a subclass
       (as aiopdbp.wire.cblocks makes its records), without the argument
       tuple and the type call */
    static PyObject *aiopdbp_message5(PyObject *make, PyObject *a, PyObject *b, PyObject *c,
                                      PyObject *d, PyObject *e) {
        PyTypeObject *t = (PyTypeObject *)make;
        PyObject *o = t->tp_alloc(t, 5);
        if (o == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(o, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(o, 1, b);
        Py_INCREF(c); PyTuple_SET_ITEM(o, 2, c);
        Py_INCREF(d); PyTuple_SET_ITEM(o, 3, d);
        Py_INCREF(e); PyTuple_SET_ITEM(o, 4, e);
        return o;
    }
    """
    object aiopdbp_message5(object make, object a, object b, object c, object d, object e)

from aiopdbp.runtime.coshell cimport (CO_FRESH, CoState, PyIter_Send, aiopdbp_set_am_send, co_begin, co_close,
                                     co_dealloc, co_send, co_started, co_step, co_throw)

from aiopdbp.runtime.cslots cimport aiopdbp_slot_get, aiopdbp_slot_offset, aiopdbp_slot_set

cdef object _Message = Message
cdef object _ndarray = np.ndarray
cdef object _IncomingStream = IncomingStream
cdef object _BURST_BYTES = BURST_BYTES
cdef object _CancelledError = CancelledError
cdef object _running_loop = get_running_loop
cdef object _wake_waiter = _wake_first
# (Message must stay a plain tuple subclass for the fill above)
assert Message.__new__ is tuple.__new__ and Message.__init__ is object.__init__


# the attributes a take reads: of the pipe, its room, the receiving side
cdef tuple _PIPE = ("_items", "_turns", "taken", "room", "watch_at", "on_watch", "_host",
                    "_recv_waiters", "_closed", "_eof")
cdef enum:
    P_ITEMS, P_TURNS, P_TAKEN, P_ROOM, P_WATCH_AT, P_ON_WATCH, P_HOST, P_WAITERS, P_CLOSED, P_EOF
cdef tuple _ROOM = ("marks", "lot")
cdef enum:
    R_MARKS, R_LOT
cdef tuple _RX = ("held", "into_task")
cdef enum:
    X_HELD, X_INTO


@cython.final
cdef class _Slots:
    """One class's attributes that a take reads and writes (the pipe's,
    its room's, the receiving side's: ``__slots__`` of pure classes), read
    and written where the class keeps them in its objects -- a C load, not
    an attribute look-up -- when they are plain slots of it; else as
    attributes (a stand-in in a test).  Only for objects of exactly that
    class (:func:`_slots_for`)."""

    cdef object cls
    cdef tuple names
    cdef Py_ssize_t off[12]

    def __init__(self, cls, tuple names):
        self.cls = cls
        self.names = names
        for i, name in enumerate(names):
            self.off[i] = aiopdbp_slot_offset(cls, name)

    cdef inline object get(self, o, int i):
        cdef PyObject *v
        if self.off[i] >= 0:
            v = aiopdbp_slot_get(o, self.off[i])
            if v != NULL:
                return <object>v
        return getattr(o, <str>self.names[i])   # (not set: its AttributeError)

    cdef inline int put(self, o, int i, v) except -1:
        if self.off[i] >= 0:
            aiopdbp_slot_set(o, self.off[i], v)
        else:
            setattr(o, <str>self.names[i], v)
        return 0


cdef inline _Slots _slots_for(_Slots known, o, tuple names):
    if known is not None and type(o) is known.cls:
        return known
    return _Slots(type(o), names)


cdef class RecvPath:
    """See :class:`aiopdbp.runtime.recvpath.RecvPath`."""

    cdef public object pipe
    cdef public object gp
    cdef object _rx, _node, _slow, _arrival
    cdef _Slots _ps, _rs, _xs

    def __init__(self, rx, node, slow, arrival):
        self.pipe = None
        self.gp = None
        self._rx = rx
        self._node = node
        self._slow = slow
        self._arrival = arrival

    def recv(self, timeout=None, *, arrays=None):
        # Decided at the call: an item first in the one FIFO now, or a wait
        # without a timeout for the GP (``gp``) on it, this path's coroutine
        # (which checks again when it runs); else the GP's own, with no
        # second coroutine around it
        cdef _Slots ps
        pipe = self.pipe
        if pipe is not None and arrays is None:
            ps = self._ps = _slots_for(self._ps, pipe, _PIPE)
            if ps.get(pipe, P_TURNS) is None and (
                    ps.get(pipe, P_ITEMS) or (timeout is None and self.gp is not None)):
                return _new_take(self, timeout)
        return self._slow(timeout, arrays, None)

    cdef object _later(self, timeout):
        # what a _Take that took nothing runs: the wait (_Wait) where it is the
        # GP's wait without a timeout on an empty one-FIFO pipe, else the GP's
        # coroutine from its start (nothing was taken)
        cdef _Slots ps, xs
        pipe = self.pipe
        gp = self.gp
        if timeout is None and gp is not None and pipe is not None:
            rx = self._rx
            ps = self._ps = _slots_for(self._ps, pipe, _PIPE)
            xs = self._xs = _slots_for(self._xs, rx, _RX)
            if (xs.get(rx, X_HELD) is None and xs.get(rx, X_INTO) is None
                    and ps.get(pipe, P_TURNS) is None and not ps.get(pipe, P_ITEMS)):
                return _new_wait(self, pipe, gp)
        return self._slow(timeout, None, None)

    cdef object _now(self):
        # the item taken and returned in one step, or None: nothing taken
        cdef _Slots ps, xs
        pipe = self.pipe
        if pipe is None:
            return None
        rx = self._rx
        ps = self._ps = _slots_for(self._ps, pipe, _PIPE)
        xs = self._xs = _slots_for(self._xs, rx, _RX)
        if xs.get(rx, X_HELD) is None and xs.get(rx, X_INTO) is None and ps.get(pipe, P_TURNS) is None:
            items = ps.get(pipe, P_ITEMS)
            if items:
                item = items[0]
                if type(item) is _Message and type((<tuple>item)[0]) is str:
                    data = (<tuple>item)[3]
                    if type(data) is _ndarray:
                        kind = self._node.arrays
                        if kind != "auto" or data.dtype.metadata is not None:
                            # converted before the take: a conversion that raises takes nothing
                            item = self._arrive(<tuple>item, data, kind)
                    self._take_first(pipe, ps, items)
                    return item
                if isinstance(item, _IncomingStream) and type(item.source) is str:
                    # an incoming stream: told the node's arrays (the GP's
                    # coroutine's, for a stream), then taken as a message is
                    kind = self._node.arrays
                    if kind != "auto":
                        item.arrays = kind
                    self._take_first(pipe, ps, items)
                    return item
        return None

    cdef int _take_first(self, pipe, _Slots ps, items) except -1:
        # Pipe.receive_nowait's one FIFO, inline
        cdef _Slots rs
        items.popleft()
        taken = ps.get(pipe, P_TAKEN) + 1
        ps.put(pipe, P_TAKEN, taken)
        room = ps.get(pipe, P_ROOM)
        rs = self._rs = _slots_for(self._rs, room, _ROOM)
        if rs.get(room, R_MARKS):
            room.release(taken)
        if rs.get(room, R_LOT):
            room.serve()
        if taken >= ps.get(pipe, P_WATCH_AT):
            on_watch = ps.get(pipe, P_ON_WATCH)
            if on_watch is not None:
                ps.put(pipe, P_WATCH_AT, on_watch(pipe, taken, ps.get(pipe, P_HOST)))
        return 0

    def arrive(self, item, kind):
        """As :meth:`aiopdbp.runtime.recvpath.RecvPath.arrive`."""
        if type(item) is not _Message:
            raise TypeError(f"arrive() takes a Message, not {type(item).__name__}")
        return self._arrive(<tuple>item, (<tuple>item)[3], kind)

    cdef object _arrive(self, tuple item, data, kind):
        return aiopdbp_message5(_Message, item[0], item[1], item[2], self._arrival(data, kind), item[4])


cdef inline _Take _new_take(RecvPath path, timeout):
    cdef _Take aw = _Take.__new__(_Take)
    aw.path = path
    aw.timeout = timeout
    return aw


@cython.final
@cython.no_gc
@cython.freelist(8)
cdef class _Take:
    """What :meth:`RecvPath.recv` returns when an item is first in the pipe
    (or the GP's wait without a timeout may be the path's): a coroutine
    (``send``, ``throw``, ``close``, ``__await__``) whose first step is
    :meth:`RecvPath._now`, its item the value (``am_send``: no
    StopIteration); where that takes nothing, it runs :meth:`RecvPath._later`
    (the wait, :class:`_Wait`, or the GP's coroutine) and passes every step,
    throw and close on to it (the protocol: ``runtime/coshell.pxd``)."""

    cdef RecvPath path
    cdef object timeout
    cdef CoState cs

    def __dealloc__(self):
        co_dealloc(&self.cs, "RecvPath.recv")

    cdef int _step(self, arg, PyObject **result) except -1:
        if self.cs.state == CO_FRESH:
            co_begin(&self.cs, arg)
            item = self.path._now()
            if item is not None:
                Py_INCREF(item)
                result[0] = <PyObject *>item
                return 0
            co_started(&self.cs, self.path._later(self.timeout))
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
    return (<_Take>o)._step(<object>arg, result)


aiopdbp_set_am_send(_Take, <void *>_am_send)


cdef inline _Wait _new_wait(RecvPath path, pipe, gp):
    cdef _Wait w = _Wait.__new__(_Wait)
    w.path = path
    w.pipe = pipe
    w.gp = gp
    return w


cdef enum:
    _W_START, _W_DRIVE, _W_TAKE, _W_PARK, _W_SLOW, _W_OVER


cdef object _exception(typ, val):
    # what throw(typ, val) raises, as one object (a generator's forms)
    if isinstance(typ, BaseException):
        return typ
    if isinstance(val, BaseException):
        return val
    return typ() if val is None else typ(val)


@cython.final
@cython.freelist(8)
cdef class _Wait:
    """The GP's wait for an item, without a timeout, on an empty one-FIFO
    pipe (what :meth:`RecvPath._later` gives a :class:`_Take` that took
    nothing): ``GP._recv``'s wait and :meth:`Pipe.receive
    <aiopdbp.routing.pipes.Pipe.receive>`'s loop, compiled, with no Python
    frame of its own.  It counts itself in the GP's ``receiving``, starts
    the GP's send run afresh, lets the driver (the GP's ``_drive``) step MPI
    until the pipe is ready, then takes the item as :meth:`RecvPath._now`
    does; with nothing there it parks on a future in the pipe's receive
    waiters (the future itself is what it yields to the task), and takes
    the item when woken, passing on a wake-up left over.  An item ``_now``
    does not take is taken from the pipe and handed to the GP's coroutine
    (``slow(None, None, item)``), as ``GP._recv`` goes on after its wait;
    a closed pipe, one at its end and a cancelled park raise and clean up as
    ``Pipe.receive`` does (``tests/test_recvpath.py``)."""

    cdef RecvPath path
    cdef object pipe, gp
    cdef object co      # the driver's coroutine, or the GP's after the wait
    cdef object fut     # parked on it
    cdef int state
    cdef bint waiting   # counted in the GP's ``receiving``
    cdef bint woken     # resumed by its future (a wake-up left over goes on)

    def __dealloc__(self):
        # dropped while it waits (its task gone): uncounted, as a coroutine's ``finally`` on close
        if self.waiting:
            self.waiting = False
            gp = self.gp
            gp.receiving -= 1

    cdef int _leave(self) except -1:
        # GP._recv's ``finally``: once, whichever way the wait ends
        if self.waiting:
            self.waiting = False
            gp = self.gp
            gp.receiving -= 1
        return 0

    cdef int _step(self, arg, PyObject **result) except -1:
        # am_send's contract: 0 returned (*result), 1 yielded (*result), -1 raised
        cdef int r
        try:
            if self.state == _W_START:
                gp = self.gp
                gp.receiving += 1
                self.waiting = True
                gp._path.burst = _BURST_BYTES   # this task suspends: a send run starts afresh
                drive = gp._drive
                if drive is not None:
                    self.co = drive(self.pipe.ready)
                    self.state = _W_DRIVE
                else:
                    self.state = _W_TAKE
            if self.state == _W_DRIVE:
                r = PyIter_Send(self.co, arg, result)
                if r == 1:
                    return 1
                Py_XDECREF(result[0])   # (the driver's None)
                result[0] = NULL
                self.co = None
                self.state = _W_OVER
            elif self.state == _W_PARK:
                fut = self.fut
                self.fut = None
                self.state = _W_OVER
                if not fut.done():
                    raise RuntimeError("await wasn't used with future")
                fut.result()    # (a closed pipe's error raises here, as in ``await fut``)
                self.woken = True
            elif self.state == _W_SLOW:
                r = PyIter_Send(self.co, arg, result)
                if r != 1:
                    self.state = _W_OVER
                    self.co = None
                return r
            elif self.state == _W_OVER:
                raise RuntimeError("cannot reuse already awaited coroutine")
            return self._take(result)
        except BaseException:
            self.state = _W_OVER
            self.co = None
            self._leave()
            raise

    cdef int _take(self, PyObject **result) except -1:
        # after the driver or a wake-up (state _W_OVER): the item, the GP's
        # coroutine with it, the pipe's error, or a park
        cdef RecvPath path = self.path
        cdef _Slots ps
        self.state = _W_OVER
        pipe = self.pipe
        item = path._now() if path.pipe is pipe else None
        if item is not None:
            if self.woken:
                self._pass_wake(pipe)
            self._leave()
            Py_INCREF(item)
            result[0] = <PyObject *>item
            return 0
        ps = path._ps = _slots_for(path._ps, pipe, _PIPE)
        if len(pipe):
            # an item the path does not take as it is: the GP's coroutine goes on with it
            item = pipe.receive_nowait()
            if self.woken:
                self._pass_wake(pipe)
            self._leave()
            self.co = path._slow(None, None, item)
            self.state = _W_SLOW
            return self._step(None, result)
        if ps.get(pipe, P_CLOSED) or ps.get(pipe, P_EOF):
            pipe.receive_nowait()   # raises what Pipe.receive raises (closed; at its end)
            raise AssertionError("an empty pipe gave an item")
        fut = _running_loop().create_future()
        ps.get(pipe, P_WAITERS).append(fut)
        fut._asyncio_future_blocking = True   # (what Future.__await__ sets before its yield)
        self.fut = fut
        self.state = _W_PARK
        Py_INCREF(fut)
        result[0] = <PyObject *>fut
        return 1

    cdef int _pass_wake(self, pipe) except -1:
        # Pipe.receive's rule: items left and receivers parked: the next one's turn
        waiters = self.path._ps.get(pipe, P_WAITERS)
        if waiters and len(pipe):
            _wake_waiter(waiters)
        return 0

    def __await__(self):
        return self

    def __next__(self):
        return co_send(self, _wait_am_send, None)

    def send(self, value):
        return co_send(self, _wait_am_send, value)

    def throw(self, typ, val=None, tb=None):
        cdef PyObject *res = NULL
        cdef int r
        if self.state == _W_PARK:
            # Pipe.receive's ``except CancelledError`` around ``await fut``
            fut = self.fut
            self.fut = None
            self.state = _W_OVER
            self._leave()
            exc = _exception(typ, val)
            if isinstance(exc, _CancelledError):
                pipe = self.pipe
                waiters = self.path._ps.get(pipe, P_WAITERS)
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    if self.path._ps.get(pipe, P_ITEMS):
                        _wake_waiter(waiters)
                else:
                    try:
                        waiters.remove(fut)
                    except ValueError:
                        pass
            if tb is not None:
                raise exc.with_traceback(tb)
            raise exc
        if self.state == _W_DRIVE or self.state == _W_SLOW:
            co = self.co
            try:
                return co.throw(typ) if val is None and tb is None else co.throw(typ, val, tb)
            except StopIteration:
                if self.state == _W_SLOW:
                    self.state = _W_OVER
                    self.co = None
                    raise
            except BaseException:
                self.state = _W_OVER
                self.co = None
                self._leave()
                raise
            # the driver returned: the wait goes on as after it
            self.co = None
            self.state = _W_OVER
            try:
                r = self._take(&res)
            except BaseException:
                self._leave()
                raise
            out = <object>res
            Py_XDECREF(res)
            if r == 1:
                return out
            raise StopIteration(out)
        self.state = _W_OVER
        self._leave()
        raise _exception(typ, val)

    def close(self):
        co = self.co
        state = self.state
        self.state = _W_OVER
        self.co = None
        self.fut = None   # (a parked one stays in the waiters, as when ``await fut`` is closed)
        try:
            if co is not None and (state == _W_DRIVE or state == _W_SLOW):
                co.close()
        finally:
            self._leave()


cdef int _wait_am_send(PyObject *o, PyObject *arg, PyObject **result) except -1:
    return (<_Wait>o)._step(<object>arg, result)


aiopdbp_set_am_send(_Wait, <void *>_wait_am_send)
