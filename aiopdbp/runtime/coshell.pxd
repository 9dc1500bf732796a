# The coroutine protocol of the compiled core's awaitables, in one place:
# runtime/csendpath.pyx's _Send (what SendPath.call returns for host data) and
# runtime/crecvpath.pyx's _Take (what RecvPath.recv returns when an item is
# first in the pipe).  Each is a coroutine to asyncio (send, throw, close,
# __await__) whose am_send -- what `await` calls -- runs its first step as a C
# call: the common case at once, its value handed back with no StopIteration;
# where that does nothing, it starts a coroutine that does the rest from its
# start, and passes every step, throw and close on to it, as `await coroutine`
# would.  So the common case needs no coroutine object, closure and await
# wrapper, and nothing happens before it is awaited (a task cancelled before
# it runs throws into a fresh one: nothing done).
#
# Inline functions over a CoState, not a base class: Cython keeps a free list
# only on a base type, and these objects are made and dropped once a message
# (a base class costs each ~300 instructions more).  A class using them:
#     cdef CoState cs
#     def __dealloc__(self): co_dealloc(&self.cs, "Its.name")
#     cdef int _step(self, arg, PyObject **result) except -1:
#         if self.cs.state == CO_FRESH:
#             co_begin(&self.cs, arg)
#             <the common case: set *result, return 0>
#             co_started(&self.cs, <the coroutine for the rest>)
#         return co_step(&self.cs, arg, result)
#     def __await__(self): return self
#     def __next__(self): return co_send(self, _am_send, None)
#     def send(self, value): return co_send(self, _am_send, value)
#     def throw(self, typ, val=None, tb=None): return co_throw(&self.cs, typ, val, tb)
#     def close(self): co_close(&self.cs)
# with `_am_send` the module's C function calling `_step`, and
# `aiopdbp_set_am_send(Cls, <void *>_am_send)` at import.

from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF

cdef extern from *:
    """
    /* am_send, set on a type: PyIter_Send (what `await` and `yield from`
       call) takes a finished step's value from it directly, with no
       StopIteration raised and caught */
    static void aiopdbp_set_am_send(PyObject *type, void *f) {
        ((PyTypeObject *)type)->tp_as_async->am_send = (sendfunc)f;
    }
    /* a fresh awaitable dropped unawaited warns as a coroutine does */
    static void aiopdbp_unawaited(const char *what) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "coroutine '%s' was never awaited", what) < 0)
            PyErr_WriteUnraisable(NULL);
        PyErr_Restore(t, v, tb);
    }
    """
    void aiopdbp_set_am_send(object type, void *f)
    void aiopdbp_unawaited(const char *what)
    int PyIter_Send(object iter, object arg, PyObject **presult) except -1

ctypedef int (*stepfunc)(PyObject *, PyObject *, PyObject **) except -1

# not yet stepped; running the coroutine; finished
cdef enum:
    CO_FRESH, CO_RUNNING, CO_DONE

cdef struct CoState:
    PyObject *co    # the coroutine doing the rest (owned), once started
    int state


cdef inline void co_dealloc(CoState *s, const char *name) noexcept:
    if s.state == CO_FRESH:
        aiopdbp_unawaited(name)
    Py_XDECREF(s.co)
    s.co = NULL


cdef inline int co_begin(CoState *s, arg) except -1:
    if arg is not None:
        raise TypeError("can't send non-None value to a just-started coroutine")
    s.state = CO_DONE
    return 0


cdef inline int co_started(CoState *s, co) except -1:
    Py_INCREF(co)
    s.co = <PyObject *>co
    s.state = CO_RUNNING
    return 0


cdef inline void co_finish(CoState *s) noexcept:
    s.state = CO_DONE
    Py_XDECREF(s.co)
    s.co = NULL


cdef inline int co_step(CoState *s, arg, PyObject **result) except -1:
    # am_send's contract: 0 returned (*result), 1 yielded (*result), -1 raised
    if s.state == CO_DONE:
        raise RuntimeError("cannot reuse already awaited coroutine")
    cdef int r
    co = <object>s.co   # held across the step: a close from inside it drops s.co
    try:
        r = PyIter_Send(co, arg, result)
    except BaseException:
        co_finish(s)
        raise
    if r != 1:
        co_finish(s)
    return r


cdef inline object co_send(self, stepfunc step, value):
    cdef PyObject *res = NULL
    cdef int r = step(<PyObject *>self, <PyObject *>value, &res)
    out = <object>res
    Py_XDECREF(res)
    if r == 1:
        return out
    raise StopIteration(out)


cdef inline object co_throw(CoState *s, typ, val, tb):
    if s.state == CO_RUNNING:
        co = <object>s.co
        try:
            return co.throw(typ, val, tb) if val is not None or tb is not None else co.throw(typ)
        except BaseException:
            co_finish(s)
            raise
    s.state = CO_DONE
    if isinstance(typ, BaseException):
        raise typ
    raise typ if val is None else typ(val)


cdef inline int co_close(CoState *s) except -1:
    if s.state == CO_RUNNING:
        co = <object>s.co
        co_finish(s)
        co.close()
    s.state = CO_DONE
    return 0
