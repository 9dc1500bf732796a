# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.runtime.recvpath` (read its docstring):
the same :class:`RecvPath`, its ``recv`` a compiled coroutine that looks at
the pipe's first item and, in the common case, takes it from the pipe's one
FIFO itself -- :meth:`Pipe.receive_nowait
<aiopdbp.routing.pipes.Pipe.receive_nowait>`'s one-FIFO lines, inline (the
count taken, the local bytes freed, a parked sender served, the credit
watch) -- so that no Python frame runs for it; an array to convert (a
tensor's) is converted first and its ``Message`` filled in C; an incoming
stream is taken the same way.  Anything else is the GP's
coroutine, as in the pure form, with nothing taken (``tests/test_recvpath.py``
runs both)."""

import numpy as np

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
__sources__ = ("recvpath.py", "crecvpath.pyx")
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

cdef object _Message = Message
cdef object _ndarray = np.ndarray
cdef object _IncomingStream = IncomingStream
# (Message must stay a plain tuple subclass for the fill above)
assert Message.__new__ is tuple.__new__ and Message.__init__ is object.__init__


cdef class RecvPath:
    """See :class:`aiopdbp.runtime.recvpath.RecvPath`."""

    cdef public object pipe
    cdef object _rx, _node, _slow, _arrival

    def __init__(self, rx, node, slow, arrival):
        self.pipe = None
        self._rx = rx
        self._node = node
        self._slow = slow
        self._arrival = arrival

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
                    if type(data) is _ndarray:
                        kind = self._node.arrays
                        if kind != "auto" or data.dtype.metadata is not None:
                            # converted before the take: a conversion that raises takes nothing
                            item = self._arrive(<tuple>item, data, kind)
                    _take_first(pipe, items)
                    return item
                if isinstance(item, _IncomingStream) and type(item.source) is str:
                    # an incoming stream: told the node's arrays (the GP's
                    # coroutine's, for a stream), then taken as a message is
                    kind = self._node.arrays
                    if kind != "auto":
                        item.arrays = kind
                    _take_first(pipe, items)
                    return item
        return await self._slow(timeout, None, None)

    def arrive(self, item, kind):
        """As :meth:`aiopdbp.runtime.recvpath.RecvPath.arrive`."""
        if type(item) is not _Message:
            raise TypeError(f"arrive() takes a Message, not {type(item).__name__}")
        return self._arrive(<tuple>item, (<tuple>item)[3], kind)

    cdef object _arrive(self, tuple item, data, kind):
        return aiopdbp_message5(_Message, item[0], item[1], item[2], self._arrival(data, kind), item[4])


cdef inline int _take_first(pipe, items) except -1:
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
    return 0
