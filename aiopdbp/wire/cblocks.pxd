# The compiled block writer's fields and methods, for C calls from another
# compiled module (csender: ``put_short`` without a Python call).
cimport numpy as cnp

cdef enum:
    KNOWN_NDIM = 4      # the largest array rank the writer remembers a meta for


cdef class BlockWriter:
    cdef public Py_ssize_t short_limit
    cdef public int kind
    cdef public Py_ssize_t count
    cdef object _view
    cdef Py_buffer _buf
    cdef bint _held
    cdef Py_ssize_t _pos
    cdef Py_ssize_t _limit
    # The last array put as a short record: its dtype object (held, so that
    # its identity stays its own), rank, shape and the meta short_ndarray
    # gave for them.  The payload module's meta caches only ever add
    # entries, so the same dtype object and shape have the same meta for
    # good: a sender of one kind of array skips the Python call, its dict
    # lookup and the memoryview of the data.
    cdef object _adescr
    cdef int _andim
    cdef cnp.npy_intp _ashape[KNOWN_NDIM]
    cdef bytes _ameta

    cpdef Py_ssize_t offset(self, int kind)
    cpdef open(self, object view, int kind)
    cdef void _drop(self)
    cpdef Py_ssize_t close(self)
    cdef bint _known(self, cnp.ndarray arr)
    cdef void _remember(self, cnp.ndarray arr, bytes meta)
    cpdef object put_short(self, unsigned int pid, unsigned int src, unsigned int com, int kind, object data,
                           bytes head, bint lone)
    cpdef bint put_record(self, list parts, Py_ssize_t nbytes) except -1
