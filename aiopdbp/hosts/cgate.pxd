# The compiled gate's fields and its admit, for a C call from another
# compiled module (csender's offer: ``admit`` without a Python call).

cdef class _Dest:
    cdef public object lot
    cdef public Py_ssize_t woken
    cdef public bint asked
    cdef public double progress_at


cdef class _Credit:
    cdef long long c    # a contended GP's credit, changed in place (no int made per admit)


cdef class CreditGate:
    cdef public object window
    cdef long long _window
    cdef dict _credit, _dests
    cdef object _clock
    cdef public Py_ssize_t waits, asks

    cpdef bint admit(self, object pid, long long nbytes)
    cdef object _serve(self, object pid, _Dest d)
    cdef long long _get(self, object pid) except? -1
    cdef int _put(self, object pid, long long c) except -1
