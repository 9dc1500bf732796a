# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.tensormem.view` (read its docstring): the
same :func:`tensor_array`, the ndarray made by one numpy C call over the
tensor's memory, with the tensor as its base; :func:`tensor_of`,
:func:`frozen` and :func:`plain_snapshot` without the Python-level reads
of the dtype and the flags."""

cimport numpy as cnp
from cpython.dict cimport PyDict_GetItem
from cpython.long cimport PyLong_FromVoidPtr
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uintptr_t

import numpy as np

cnp.import_array()

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

cdef extern from "numpy/arrayobject.h":
    # (numpy's own .pxd leaves it out): steals a reference to descr
    object PyArray_NewFromDescr(PyTypeObject *subtype, cnp.PyArray_Descr *descr, int nd, cnp.npy_intp *dims,
                                cnp.npy_intp *strides, void *data, int flags, object obj)

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("view.py", "cview.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["PLAIN_NUMS", "frozen", "plain_snapshot", "tensor_array", "tensor_of"]

#: as :data:`aiopdbp.tensormem.view.PLAIN_NUMS`
PLAIN_NUMS = frozenset(range(17)) | {21, 22, 23}

# (numpy's own limit on dimensions; a tensor with more takes the general path)
DEF _MAX_DIMS = 64


cpdef object tensor_array(t, cnp.dtype dt, strided, bint complex_):
    """As :func:`aiopdbp.tensormem.view.tensor_array`."""
    cdef cnp.npy_intp dims[_MAX_DIMS]
    cdef Py_ssize_t nd, i
    cdef cnp.npy_intp n = 1
    cdef uintptr_t ptr
    cdef cnp.ndarray arr
    if (not t.is_cpu or t.layout is not strided or t.requires_grad or t.is_neg()
            or complex_ and t.is_conj() or not t.is_contiguous()):
        return None
    try:
        shape = t.shape
    except RuntimeError:  # a nested tensor has none
        return None
    nd = len(shape)
    if nd > _MAX_DIMS:
        return None
    for i in range(nd):
        dims[i] = shape[i]
        n *= dims[i]
    if n == 0:
        return None
    ptr = t.data_ptr()
    Py_INCREF(dt)  # PyArray_NewFromDescr steals a reference to the dtype
    arr = PyArray_NewFromDescr(<PyTypeObject *>np.ndarray, <cnp.PyArray_Descr *>dt, <int>nd, dims, NULL,
                               <void *>ptr, cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_WRITEABLE, None)
    cnp.set_array_base(arr, t)  # the array holds the tensor, and so its memory, alive
    return arr


def tensor_of(arr, dict known, from_numpy):
    """As :func:`aiopdbp.tensormem.view.tensor_of`."""
    cdef cnp.ndarray a
    cdef PyObject *hit
    if not cnp.PyArray_CheckExact(arr):
        return None
    a = <cnp.ndarray>arr
    descr = <PyObject *>cnp.PyArray_DESCR(a)
    hit = PyDict_GetItem(known, PyLong_FromVoidPtr(descr))
    if hit != descr or not cnp.PyArray_ISWRITEABLE(a):
        return None
    return from_numpy(a)


cdef inline bint _plain(int num):
    # PLAIN_NUMS: NPY_BOOL .. NPY_CLONGDOUBLE, NPY_DATETIME, NPY_TIMEDELTA, NPY_HALF
    return 0 <= num <= 16 or 21 <= num <= 23


cdef bint _frozen(cnp.ndarray arr):
    if cnp.PyArray_ISWRITEABLE(arr):
        return False
    base = cnp.get_array_base(arr)
    while isinstance(base, cnp.ndarray):
        if cnp.PyArray_ISWRITEABLE(<cnp.ndarray>base):
            return False
        base = cnp.get_array_base(<cnp.ndarray>base)
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, bytes)


def frozen(cnp.ndarray arr):
    """As :func:`aiopdbp.tensormem.view.frozen`."""
    return _frozen(arr)


cpdef object plain_snapshot(cnp.ndarray arr, int max_ndim):
    """As :func:`aiopdbp.tensormem.view.plain_snapshot`."""
    if not _plain(cnp.PyArray_TYPE(arr)) or cnp.PyArray_NDIM(arr) > max_ndim:
        return None
    return arr if _frozen(arr) else cnp.PyArray_NewCopy(arr, cnp.NPY_CORDER)
