# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of :mod:`aiopdbp.transport.probe` (read its docstring):
the same function, calling MPI's C API instead of mpi4py's methods."""

from mpi4py.libmpi cimport (MPI_ANY_SOURCE, MPI_BYTE, MPI_Get_count, MPI_Improbe, MPI_Message, MPI_Mrecv,
                            MPI_STATUS_IGNORE, MPI_SUCCESS)
cimport mpi4py.MPI as MPI
from mpi4py import MPI as _MPI
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("probe.py", "cprobe.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")


def probe_small(MPI.Comm comm, int tag, MPI.Status status, Py_ssize_t small, int ch, object channel,
                dict fifo, list deliveries, Py_ssize_t budget):
    """See :func:`aiopdbp.transport.probe.probe_small`."""
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
        deliveries.append((src, channel, memoryview(buf)))
        n += 1
        got += count
    return n, got, None
