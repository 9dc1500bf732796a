# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.tensormem.view` (read its docstring): the
same :func:`tensor_array`, the ndarray made by one numpy C call over the
tensor's memory, with the tensor as its base; :func:`tensor_of`,
:func:`frozen` and :func:`plain_snapshot` without the Python-level reads
of the dtype and the flags.

For the tensor type handed to :func:`bind` (``torch.Tensor``), exactly, both
ways go through DLPack's C exchange API (``__dlpack_c_exchange_api__``, DLPack
1.2): one C call describes a tensor's memory (pointer, device, shape,
strides) where five attribute reads did, and one makes a tensor over an
array's memory where ``torch.from_numpy`` parsed its argument and the
array's layout.  The flags DLPack does not carry (requires grad, the
negative and conjugate bits) are still read, the first two by the C
functions behind them, found once by :func:`bind`.  Other types, and a
framework without the API, take the attribute reads and ``from_numpy``."""

cimport numpy as cnp
from cpython.dict cimport PyDict_GetItem
from cpython.exc cimport PyErr_Clear
from cpython.long cimport PyLong_FromVoidPtr
from cpython.object cimport PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

import numpy as np

cnp.import_array()

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

cdef extern from "Python.h":
    # (CPython's own structs, public in its non-limited API): a C method's and
    # a C attribute's descriptor, to call the function behind one without
    # looking it up on the instance each time
    ctypedef PyObject *(*PyCFunction)(PyObject *, PyObject *)
    ctypedef PyObject *(*getter)(PyObject *, void *)
    ctypedef struct PyMethodDef:
        PyCFunction ml_meth
        int ml_flags
    ctypedef struct PyGetSetDef:
        getter get
        void *closure
    ctypedef struct PyMethodDescrObject:
        PyMethodDef *d_method
    ctypedef struct PyGetSetDescrObject:
        PyGetSetDef *d_getset
    PyObject *Py_True
    PyTypeObject PyMethodDescr_Type
    PyTypeObject PyGetSetDescr_Type
    int METH_NOARGS

cdef extern from "numpy/arrayobject.h":
    # (numpy's own .pxd leaves it out): steals a reference to descr
    object PyArray_NewFromDescr(PyTypeObject *subtype, cnp.PyArray_Descr *descr, int nd, cnp.npy_intp *dims,
                                cnp.npy_intp *strides, void *data, int flags, object obj)

# DLPack's ABI (dlpack.h 1.2+, the parts read here), written out so that the
# build needs no framework's headers; the prefix keeps clear of a dlpack.h
cdef extern from *:
    """
    typedef struct { uint32_t major; uint32_t minor; } aiopdbp_DLPackVersion;
    typedef struct { int32_t device_type; int32_t device_id; } aiopdbp_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } aiopdbp_DLDataType;
    typedef struct { void *data; aiopdbp_DLDevice device; int32_t ndim; aiopdbp_DLDataType dtype;
                     int64_t *shape; int64_t *strides; uint64_t byte_offset; } aiopdbp_DLTensor;
    typedef struct aiopdbp_DLManagedTensorVersioned {
        aiopdbp_DLPackVersion version; void *manager_ctx;
        void (*deleter)(struct aiopdbp_DLManagedTensorVersioned *self);
        uint64_t flags; aiopdbp_DLTensor dl_tensor; } aiopdbp_DLManagedTensorVersioned;
    typedef struct aiopdbp_DLPackExchangeAPIHeader {
        aiopdbp_DLPackVersion version; struct aiopdbp_DLPackExchangeAPIHeader *prev_api; } aiopdbp_DLPackExchangeAPIHeader;
    typedef struct {
        aiopdbp_DLPackExchangeAPIHeader header;
        void *managed_tensor_allocator;
        void *managed_tensor_from_py_object_no_sync;
        int (*managed_tensor_to_py_object_no_sync)(aiopdbp_DLManagedTensorVersioned *, void **);
        int (*dltensor_from_py_object_no_sync)(void *, aiopdbp_DLTensor *);
        void *current_work_stream; } aiopdbp_DLPackExchangeAPI;
    """
    ctypedef struct aiopdbp_DLPackVersion:
        uint32_t major
        uint32_t minor
    ctypedef struct aiopdbp_DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct aiopdbp_DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct aiopdbp_DLTensor:
        void *data
        aiopdbp_DLDevice device
        int32_t ndim
        aiopdbp_DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset
    ctypedef struct aiopdbp_DLManagedTensorVersioned:
        aiopdbp_DLPackVersion version
        void *manager_ctx
        void (*deleter)(aiopdbp_DLManagedTensorVersioned *self) noexcept
        uint64_t flags
        aiopdbp_DLTensor dl_tensor
    ctypedef struct aiopdbp_DLPackExchangeAPIHeader:
        aiopdbp_DLPackVersion version
    ctypedef struct aiopdbp_DLPackExchangeAPI:
        aiopdbp_DLPackExchangeAPIHeader header
        int (*managed_tensor_to_py_object_no_sync)(aiopdbp_DLManagedTensorVersioned *, void **) noexcept
        int (*dltensor_from_py_object_no_sync)(void *, aiopdbp_DLTensor *) noexcept

DEF _kDLCPU = 1
DEF _kDLInt = 0
DEF _kDLUInt = 1
DEF _kDLComplex = 5
DEF _kDLBool = 6
# DLPack's type codes below this have a slot in a TensorPaths' plan table
DEF _CODES = 32

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("view.py", "cview.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["PLAIN_NUMS", "TensorPaths", "bind", "frozen", "ownable", "plain_snapshot", "tensor_array", "tensor_of"]

#: as :data:`aiopdbp.tensormem.view.PLAIN_NUMS`
PLAIN_NUMS = frozenset(range(17)) | {21, 22, 23}

# (numpy's own limit on dimensions; a tensor with more takes the general path)
DEF _MAX_DIMS = 64


# the type bind() took, and its exchange API (NULL: none)
cdef object _bound = None
cdef const aiopdbp_DLPackExchangeAPI *_api = NULL
# the C functions behind the bound type's is_neg() and requires_grad (NULL:
# call them by name), and their descriptors, held
cdef PyCFunction _is_neg = NULL
cdef getter _requires_grad = NULL
cdef void *_requires_grad_closure = NULL
cdef object _flag_descrs = None
# the calling-convention bits of PyMethodDef.ml_flags (METH_COEXIST is not one)
DEF _CALL_FLAGS = 0x2BF


def bind(cls):
    """As :func:`aiopdbp.tensormem.view.bind`: here, use ``cls``'s DLPack C
    exchange API for instances of exactly ``cls`` (the API is only for the
    type it was found on); True when it has a usable one."""
    global _bound, _api
    cap = cls.__dict__.get("__dlpack_c_exchange_api__")
    if cap is None or not PyCapsule_IsValid(cap, b"dlpack_exchange_api"):
        return False
    api = <const aiopdbp_DLPackExchangeAPI *>PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
    if (api.header.version.major != 1 or api.header.version.minor < 2
            or api.dltensor_from_py_object_no_sync == NULL or api.managed_tensor_to_py_object_no_sync == NULL):
        return False
    _api, _bound = api, cls
    _bind_flags(cls)
    return True


cdef void _bind_flags(cls) noexcept:
    # The C functions that torch's is_neg() and requires_grad run, found once
    # on the class: called directly they skip the method lookup on each
    # tensor (its instance dict, the MRO) and the descriptor's own call;
    # torch's function itself still runs (its __torch_function__ check
    # included).  Anything not a plain C method / attribute keeps the
    # by-name call.
    global _is_neg, _requires_grad, _requires_grad_closure, _flag_descrs
    neg = getattr(cls, "is_neg", None)
    grad = getattr(cls, "requires_grad", None)
    _is_neg = _requires_grad = NULL
    if (type(neg) is <object>&PyMethodDescr_Type
            and (<PyMethodDescrObject *>neg).d_method.ml_flags & _CALL_FLAGS == METH_NOARGS):
        _is_neg = (<PyMethodDescrObject *>neg).d_method.ml_meth
    if type(grad) is <object>&PyGetSetDescr_Type and (<PyGetSetDescrObject *>grad).d_getset.get != NULL:
        _requires_grad = (<PyGetSetDescrObject *>grad).d_getset.get
        _requires_grad_closure = (<PyGetSetDescrObject *>grad).d_getset.closure
    _flag_descrs = (neg, grad)


cdef int _truth(PyObject *r) except -1:
    # a flag function's new reference as 0/1 (NULL: its error, raised)
    cdef int v
    if r == NULL:
        return -1
    v = r == Py_True
    Py_DECREF(<object>r)
    return v


cdef inline int _neg(t) except -1:
    # t.is_neg() for a tensor of the bound type
    if _is_neg != NULL:
        return _truth(_is_neg(<PyObject *>t, NULL))
    return bool(t.is_neg())


cdef inline int _grad(t) except -1:
    # t.requires_grad for a tensor of the bound type
    if _requires_grad != NULL:
        return _truth(_requires_grad(<PyObject *>t, _requires_grad_closure))
    return bool(t.requires_grad)


cpdef object tensor_array(t, cnp.dtype dt, strided, bint complex_):
    """As :func:`aiopdbp.tensormem.view.tensor_array`."""
    cdef cnp.npy_intp dims[_MAX_DIMS]
    cdef Py_ssize_t nd, i
    cdef cnp.npy_intp n = 1
    cdef void *ptr
    cdef aiopdbp_DLTensor d
    if type(t) is _bound:
        # (a sparse, nested or quantized tensor: DLPack refuses it, as the reads below would)
        if _api.dltensor_from_py_object_no_sync(<void *>t, &d) != 0:
            PyErr_Clear()
            return None
        if not _plain_cpu(t, &d, dims, complex_):
            return None
        return _over(t, dt, d.ndim, dims, <char *>d.data + d.byte_offset)
    else:
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
        ptr = <void *><uintptr_t>t.data_ptr()
    return _over(t, dt, nd, dims, ptr)


cdef bint _plain_cpu(t, aiopdbp_DLTensor *d, cnp.npy_intp *dims, bint complex_) except -1:
    # Whether the tensor t that DLPack described as d is one tensor_array views as it is
    # (on the CPU, C-contiguous, not empty, no grad, no negative or conjugate bit); its
    # sizes into dims (_MAX_DIMS of them)
    cdef Py_ssize_t i
    cdef cnp.npy_intp n = 1
    cdef uint8_t code = d.dtype.code
    if d.device.device_type != _kDLCPU or d.ndim > _MAX_DIMS:
        return False
    for i in range(d.ndim - 1, -1, -1):  # C-contiguous: each stride the product of the sizes after it
        dims[i] = d.shape[i]
        if dims[i] != 1 and d.strides[i] != n:
            return False
        n *= dims[i]
    # (an integer or bool tensor cannot require grad: torch refuses it, so its flag is not read)
    return not (n == 0 or code != _kDLInt and code != _kDLUInt and code != _kDLBool and _grad(t)
                or _neg(t) or complex_ and t.is_conj())


cdef object _over(t, dt, int nd, cnp.npy_intp *dims, void *ptr):
    # an ndarray of dt over ptr, holding t
    cdef cnp.ndarray arr
    Py_INCREF(dt)  # PyArray_NewFromDescr steals a reference to the dtype
    arr = PyArray_NewFromDescr(<PyTypeObject *>cnp.ndarray, <cnp.PyArray_Descr *>dt, nd, dims, NULL,
                               ptr, cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_WRITEABLE, None)
    cnp.set_array_base(arr, t)  # the array holds the tensor, and so its memory, alive
    return arr


cdef void _release(aiopdbp_DLManagedTensorVersioned *m) noexcept with gil:
    # (the tensor's storage calls this when it goes, from whichever thread)
    Py_DECREF(<object>m.manager_ctx)
    free(m)


cdef void _free_block(aiopdbp_DLManagedTensorVersioned *m) noexcept nogil:
    # a tensor whose bytes are in its own block: nothing of Python's to let go,
    # so no GIL to take back (torch drops a tensor with the GIL released)
    free(m)


# an array of at most this many bytes is copied into its tensor's own block
# (freed without the GIL) rather than held (a DECREF that retakes it)
DEF _OWN_MAX = 1024
# the block's header is padded to this (malloc's own alignment), so that the
# bytes after it are aligned for any item (complex128's 16 bytes included)
DEF _ALIGN = 16


cdef object _dlpack_tensor(cnp.ndarray a, bint landed):
    """A tensor of the bound type over ``a``'s memory (C-contiguous, of a
    native dtype the framework has), holding ``a`` -- or, ``landed`` (``a``
    is a message's own array, which no one else sees) and small, over a
    copy of its bytes in the tensor's own block; None where DLPack has no
    code for the dtype or the framework refused it."""
    cdef cnp.dtype descr = <cnp.dtype><object><PyObject *>cnp.PyArray_DESCR(a)
    cdef int nd = cnp.PyArray_NDIM(a), i
    cdef uint8_t code
    cdef void *out = NULL
    cdef aiopdbp_DLManagedTensorVersioned *m
    cdef int64_t *sizes
    cdef char kind = descr.kind
    cdef Py_ssize_t nbytes = cnp.PyArray_NBYTES(a), head
    cdef bint own = landed and nbytes <= _OWN_MAX
    if kind == b'f':
        code = 2  # kDLFloat
    elif kind == b'i':
        code = 0  # kDLInt
    elif kind == b'u':
        code = 1  # kDLUInt
    elif kind == b'b':
        code = 6  # kDLBool
    elif kind == b'c':
        code = 5  # kDLComplex
    else:
        return None
    # one block: the struct, then the sizes, then (a small array) its bytes
    head = (sizeof(aiopdbp_DLManagedTensorVersioned) + nd * sizeof(int64_t) + _ALIGN - 1) // _ALIGN * _ALIGN
    m = <aiopdbp_DLManagedTensorVersioned *>malloc(head + nbytes if own else head)
    if m == NULL:
        raise MemoryError()
    sizes = <int64_t *>(m + 1)
    for i in range(nd):
        sizes[i] = cnp.PyArray_DIMS(a)[i]
    m.version.major = 1
    m.version.minor = 2
    if own:
        memcpy(<char *>m + head, cnp.PyArray_DATA(a), nbytes)
        m.manager_ctx = NULL
        m.deleter = _free_block
        m.dl_tensor.data = <char *>m + head
    else:
        Py_INCREF(a)
        m.manager_ctx = <void *>a
        m.deleter = _release
        m.dl_tensor.data = cnp.PyArray_DATA(a)
    m.flags = 0
    m.dl_tensor.device.device_type = _kDLCPU
    m.dl_tensor.device.device_id = 0
    m.dl_tensor.ndim = nd
    m.dl_tensor.dtype.code = code
    m.dl_tensor.dtype.bits = <uint8_t>(8 * cnp.PyArray_ITEMSIZE(a))
    m.dl_tensor.dtype.lanes = 1
    m.dl_tensor.shape = sizes
    # (DLPack's compact row-major: the framework takes its own contiguous
    # strides rather than checking given ones)
    m.dl_tensor.strides = NULL
    m.dl_tensor.byte_offset = 0
    if _api.managed_tensor_to_py_object_no_sync(m, &out) != 0:
        # (m is the framework's now, whatever it did with it: from_numpy tries)
        PyErr_Clear()
        return None
    t = <object>out
    Py_DECREF(t)  # out was a new reference, and <object> took another
    return t


cdef class TensorPaths


def tensor_of(arr, dict known, from_numpy):
    """As :func:`aiopdbp.tensormem.view.tensor_of`."""
    return _tensor_of(arr, known, from_numpy, False, None)


cdef object _tensor_of(arr, dict known, from_numpy, bint landed, TensorPaths seen):
    # (seen: the paths whose last dtype found in known is kept, to skip the
    # look-up when the next array has it too)
    cdef cnp.ndarray a
    cdef PyObject *hit
    if not cnp.PyArray_CheckExact(arr):
        return None
    a = <cnp.ndarray>arr
    descr = <PyObject *>cnp.PyArray_DESCR(a)
    if seen is None or descr != <PyObject *>seen.seen:
        hit = PyDict_GetItem(known, PyLong_FromVoidPtr(descr))
        if hit != descr:
            return None
        if seen is not None:
            seen.seen = <object>descr
    if not cnp.PyArray_ISWRITEABLE(a):
        return None
    if _api != NULL and cnp.PyArray_IS_C_CONTIGUOUS(a):
        t = _dlpack_tensor(a, landed)
        if t is not None:
            return t
    return from_numpy(a)


cdef class TensorPaths:
    """As :class:`aiopdbp.tensormem.view.TensorPaths`.  Here a bound tensor
    (:func:`bind`) finds its plan by the DLPack type code and bits of the
    one call that describes it."""

    cdef public object tracked, strided, from_numpy, general_send, general_arrival
    cdef public dict plans
    cdef dict _known
    # the last dtype arrive() found in known (its callers only add to it);
    # forgotten when known is replaced
    cdef object seen
    # (DLPack code, bits / 8) -> the plan's tagged dtype, held by held
    cdef PyObject *by_code[_CODES][17]
    cdef list held

    def __init__(self, general_send, general_arrival, dict known):
        self.tracked = self.strided = self.from_numpy = None
        self.general_send = general_send
        self.general_arrival = general_arrival
        self.plans = {}
        self._known = known
        self.held = []

    @property
    def known(self):
        return self._known

    @known.setter
    def known(self, dict known):
        self._known, self.seen = known, None

    def track(self, cls, strided):
        """As :meth:`aiopdbp.tensormem.view.TensorPaths.track`."""
        self.tracked, self.strided = cls, strided

    def add_plan(self, t, cnp.dtype dt, bint complex_):
        """As :meth:`aiopdbp.tensormem.view.TensorPaths.add_plan`."""
        cdef aiopdbp_DLTensor d
        self.plans[t.dtype] = (dt, complex_)
        if _bound is None or type(t) is not _bound:
            return
        if _api.dltensor_from_py_object_no_sync(<void *>t, &d) != 0:
            PyErr_Clear()
            return
        if (d.dtype.lanes == 1 and d.dtype.code < _CODES and d.dtype.bits % 8 == 0 and d.dtype.bits <= 128
                and (d.dtype.code == _kDLComplex) == complex_):
            self.held.append(dt)
            self.by_code[d.dtype.code][d.dtype.bits >> 3] = <PyObject *>dt

    def send(self, obj):
        """As :meth:`aiopdbp.tensormem.view.TensorPaths.send`."""
        if type(obj) is not self.tracked:
            return None
        arr = self._view(obj)
        return arr if arr is not None else self.general_send(obj)

    def view(self, obj):
        """As :meth:`aiopdbp.tensormem.view.TensorPaths.view`."""
        if type(obj) is not self.tracked:
            return None
        return self._view(obj)

    cdef object _view(self, obj):
        # view()'s work for an object of the tracked type
        cdef aiopdbp_DLTensor d
        cdef cnp.npy_intp dims[_MAX_DIMS]
        cdef PyObject *dt
        if type(obj) is _bound:
            if _api.dltensor_from_py_object_no_sync(<void *>obj, &d) != 0:
                PyErr_Clear()  # (what DLPack refuses, the general path refuses with its reason)
            elif d.dtype.lanes == 1 and d.dtype.code < _CODES and d.dtype.bits % 8 == 0 and d.dtype.bits <= 128:
                dt = self.by_code[d.dtype.code][d.dtype.bits >> 3]
                if dt != NULL and _plain_cpu(obj, &d, dims, d.dtype.code == _kDLComplex):
                    return _over(obj, <object>dt, d.ndim, dims, <char *>d.data + d.byte_offset)
            return None
        plan = self.plans.get(obj.dtype)
        if plan is None:
            return None
        return tensor_array(obj, plan[0], self.strided, plan[1])

    def arrive(self, arr, kind):
        """As :meth:`aiopdbp.tensormem.view.TensorPaths.arrive`."""
        if kind != "numpy":
            t = _tensor_of(arr, self._known, self.from_numpy, False, self)
            if t is not None:
                return t
        return self.general_arrival(arr, kind)

    def land(self, arr, kind):
        """As :meth:`aiopdbp.tensormem.view.TensorPaths.land`: here a small
        array's tensor has its bytes in its own block, which it frees
        without taking the GIL back (one that holds the array retakes it to
        let it go)."""
        if kind != "numpy":
            t = _tensor_of(arr, self._known, self.from_numpy, True, self)
            if t is not None:
                return t
        return self.general_arrival(arr, kind)


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


cdef extern from "numpy/arrayobject.h":
    bint PyDataType_REFCHK(cnp.dtype)   # (the dtype's hasobject)


def ownable(cnp.ndarray arr):
    """As :func:`aiopdbp.tensormem.view.ownable`."""
    cdef cnp.dtype dt = arr.descr
    return (cnp.PyArray_IS_C_CONTIGUOUS(arr) and not PyDataType_REFCHK(dt) and not cnp.PyDataType_HASFIELDS(dt)
            and not cnp.PyDataType_HASSUBARRAY(dt) and not _frozen(arr))


cpdef object plain_snapshot(cnp.ndarray arr, int max_ndim):
    """As :func:`aiopdbp.tensormem.view.plain_snapshot`."""
    if not _plain(cnp.PyArray_TYPE(arr)) or cnp.PyArray_NDIM(arr) > max_ndim:
        return None
    return arr if _frozen(arr) else cnp.PyArray_NewCopy(arr, cnp.NPY_CORDER)
