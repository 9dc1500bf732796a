# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of :mod:`aiopdbp.transport.kernel` (read its docstring):
the same functions, calling MPI's C API instead of mpi4py's methods."""

cimport cython
from libc.limits cimport INT_MAX
from mpi4py.libmpi cimport (MPI_ANY_SOURCE, MPI_BYTE, MPI_Get_count, MPI_Improbe, MPI_Irecv, MPI_Isend,
                            MPI_Message, MPI_Mrecv, MPI_Request, MPI_STATUS_IGNORE, MPI_SUCCESS, MPI_Test)
cimport mpi4py.MPI as MPI
from mpi4py import MPI as _MPI
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from functools import partial
from time import perf_counter

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("kernel.py", "ckernel.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")


cdef object _tested(int ierr, MPI_Request req):
    """A posted request's one ``Test``: None when it completed, else the
    request as mpi4py's (``ierr``: the posting call's error code)."""
    cdef int flag = 0
    cdef MPI.Request out
    if ierr != MPI_SUCCESS:
        raise _MPI.Exception(ierr)
    ierr = MPI_Test(&req, &flag, MPI_STATUS_IGNORE)
    if ierr != MPI_SUCCESS:
        raise _MPI.Exception(ierr)
    if flag:
        return None
    out = MPI.Request.__new__(MPI.Request)
    out.ob_mpi = req
    return out


def post_one(MPI.Comm comm, object buf, int dest, int tag):
    """See :func:`aiopdbp.transport.kernel.post_one`."""
    cdef Py_buffer view
    cdef MPI_Request req
    cdef int ierr
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    if view.len > INT_MAX:  # (a count MPI_Isend cannot say: mpi4py's large-count path)
        PyBuffer_Release(&view)
        r = comm.Isend([buf, _MPI.BYTE], dest, tag)
        return None if r.Test() else r
    # the caller keeps buf alive until the request completes (mpi4py's Isend
    # would keep it in the request): releasing the view here is safe
    ierr = MPI_Isend(view.buf, <int>view.len, MPI_BYTE, dest, tag, comm.ob_mpi, &req)
    PyBuffer_Release(&view)
    return _tested(ierr, req)


cdef class SendLane:
    """See :class:`aiopdbp.transport.kernel.SendLane`."""

    cdef public MPI.Comm comm, bulk
    cdef public int dest, tag
    cdef public list last
    cdef public double after
    cdef public object bell, pending, refuse, pending_bulk
    cdef public bint open
    cdef public Py_ssize_t sends, fast, nbytes, bulk_sends

    def __init__(self, MPI.Comm comm, int dest, int tag, list last, double after, object bell,
                 object pending, object refuse, MPI.Comm bulk=None, object pending_bulk=None):
        self.comm = comm
        self.dest = dest
        self.tag = tag
        self.last = last
        self.after = after
        self.bell = bell
        self.pending = pending
        self.refuse = refuse
        self.bulk = bulk
        self.pending_bulk = pending_bulk
        self.open = True
        self.sends = self.fast = self.nbytes = self.bulk_sends = 0

    cdef inline object _isend(self, MPI.Comm comm, object buf, int tag, Py_ssize_t *n):
        """``Isend`` of ``buf`` to ``dest`` on ``comm`` and one ``Test`` (see post_one); its length in ``n``."""
        cdef Py_buffer view
        cdef MPI_Request req
        cdef int ierr
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        n[0] = view.len
        if view.len > INT_MAX:
            PyBuffer_Release(&view)
            return post_one(comm, buf, self.dest, tag)
        # the caller keeps buf alive until the request completes (see post_one)
        ierr = MPI_Isend(view.buf, <int>view.len, MPI_BYTE, self.dest, tag, comm.ob_mpi, &req)
        PyBuffer_Release(&view)
        return _tested(ierr, req)

    def post_pair(self, object head, object buf, int tag, object done):
        cdef Py_ssize_t nh = 0, nb = 0
        cdef double now
        if not self.open:
            self.refuse()
        hr = self._isend(self.comm, head, self.tag, &nh)
        self.sends += 1
        if self.bell is not None:
            now = perf_counter()
            if now - <double>self.last[self.dest] > self.after:
                self.bell.ring(self.dest)
            self.last[self.dest] = now
        if hr is None:
            self.fast += 1
        else:
            self.pending(hr, head)
        r = self._isend(self.bulk, buf, tag, &nb)
        self.bulk_sends += 1
        self.nbytes += nh + nb
        if r is None:
            return None
        return self.pending_bulk(r, buf, done)

    def post(self, object buf):
        cdef Py_buffer view
        cdef MPI_Request req
        cdef int ierr
        cdef Py_ssize_t n
        cdef double now
        if not self.open:
            self.refuse()
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        n = view.len
        if n > INT_MAX:
            PyBuffer_Release(&view)
            r = post_one(self.comm, buf, self.dest, self.tag)
        else:
            # the caller keeps buf alive until the request completes (see post_one)
            ierr = MPI_Isend(view.buf, <int>n, MPI_BYTE, self.dest, self.tag, self.comm.ob_mpi, &req)
            PyBuffer_Release(&view)
            r = _tested(ierr, req)
        self.sends += 1
        self.nbytes += n
        if self.bell is not None:
            now = perf_counter()
            if now - <double>self.last[self.dest] > self.after:
                self.bell.ring(self.dest)
            self.last[self.dest] = now
        if r is None:
            self.fast += 1
            return None
        return self.pending(r, buf)


def recv_one(MPI.Comm comm, object buf, Py_ssize_t nbytes, int source, int tag):
    """See :func:`aiopdbp.transport.kernel.recv_one`."""
    cdef Py_buffer view
    cdef MPI_Request req
    cdef int ierr
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    if nbytes > INT_MAX or nbytes > view.len or nbytes < 0:  # mpi4py's checks and large counts
        PyBuffer_Release(&view)
        r = comm.Irecv([buf, nbytes, _MPI.BYTE], source, tag)
        return None if r.Test() else r
    # the caller keeps buf alive until the request completes (see post_one)
    ierr = MPI_Irecv(view.buf, <int>nbytes, MPI_BYTE, source, tag, comm.ob_mpi, &req)
    PyBuffer_Release(&view)
    return _tested(ierr, req)


cdef class BulkRecv:
    """See :class:`aiopdbp.transport.kernel.BulkRecv`."""

    cdef public MPI.Comm comm
    cdef public int size
    cdef public Py_ssize_t lo, hi, recvs, user, nbytes
    cdef public object empty, alloc, later, refuse
    cdef public bint open

    def __init__(self, MPI.Comm comm, int size, Py_ssize_t lo, Py_ssize_t hi, object empty, object alloc,
                 object later, object refuse):
        self.comm = comm
        self.size = size
        self.lo = lo
        self.hi = hi
        self.empty = empty
        self.alloc = alloc
        self.later = later
        self.refuse = refuse
        self.open = False
        self.recvs = self.user = self.nbytes = 0

    def post(self, int source, int tag, Py_ssize_t nbytes, object out):
        cdef Py_buffer view
        cdef MPI_Request req
        cdef int ierr
        if not self.open or not 0 <= source < self.size:
            self.refuse(source)
        if out is None:
            buf = self.empty(nbytes) if self.lo <= nbytes < self.hi else self.alloc(nbytes)
        else:
            buf = out
            self.user += 1
        self.recvs += 1
        self.nbytes += nbytes
        PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
        if nbytes > INT_MAX or nbytes > view.len or nbytes < 0:  # (recv_one's checks)
            PyBuffer_Release(&view)
            r = recv_one(self.comm, buf, nbytes, source, tag)
        else:
            # the caller keeps buf alive until the request completes (see post_one)
            ierr = MPI_Irecv(view.buf, <int>nbytes, MPI_BYTE, source, tag, self.comm.ob_mpi, &req)
            PyBuffer_Release(&view)
            r = _tested(ierr, req)
        if r is None:
            return buf, None
        return buf, partial(self.later, r, buf)


cdef tuple _probe(MPI.Comm comm, int tag, MPI.Status status, Py_ssize_t small, int ch, object sink,
                  dict fifo, object fail, Py_ssize_t budget):
    cdef MPI_Message m
    cdef int flag = 0, count = 0, src, ierr
    cdef Py_ssize_t n = 0, got = 0
    cdef MPI.Message matched
    cdef bytearray buf
    while got < budget:
        ierr = MPI_Improbe(MPI_ANY_SOURCE, tag, comm.ob_mpi, &flag, &m, &status.ob_mpi)
        if ierr != MPI_SUCCESS:
            raise _MPI.Exception(ierr)
        if not flag:
            break
        ierr = MPI_Get_count(&status.ob_mpi, MPI_BYTE, &count)
        if ierr != MPI_SUCCESS:
            raise _MPI.Exception(ierr)
        src = status.ob_mpi.MPI_SOURCE
        if count >= small or (fifo and fifo.get((ch, src))):
            matched = MPI.Message.__new__(MPI.Message)
            matched.ob_mpi = m
            return n, got, matched
        buf = PyByteArray_FromStringAndSize(NULL, count)
        ierr = MPI_Mrecv(PyByteArray_AS_STRING(buf), count, MPI_BYTE, &m, MPI_STATUS_IGNORE)
        if ierr != MPI_SUCCESS:
            raise _MPI.Exception(ierr)
        n += 1
        got += count
        try:
            sink(src, memoryview(buf))
        except Exception as exc:  # a broken sink must not stop progress
            fail(exc)
    return n, got, None


@cython.final
cdef class Prober:
    """See :class:`aiopdbp.transport.kernel.Prober`."""

    cdef public list comms
    cdef public int tag
    cdef public MPI.Status status
    cdef public Py_ssize_t small
    cdef public tuple sinks
    cdef public dict fifo
    cdef public object fail

    def __init__(self, list comms, int tag, MPI.Status status, Py_ssize_t small, tuple sinks, dict fifo,
                 object fail):
        self.comms = comms
        self.tag = tag
        self.status = status
        self.small = small
        self.sinks = sinks
        self.fifo = fifo
        self.fail = fail

    def probe(self, int start, Py_ssize_t budget):
        cdef Py_ssize_t n = 0, got = 0, k, b
        cdef int ch
        for ch in range(start, len(self.comms)):
            if got >= budget:
                break
            k, b, msg = _probe(<MPI.Comm>self.comms[ch], self.tag, self.status, self.small, ch, self.sinks[ch],
                               self.fifo, self.fail, budget - got)
            n += k
            got += b
            if msg is not None:
                return n, got, ch, msg
        return n, got, -1, None
