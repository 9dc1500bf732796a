# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of :mod:`aiopdbp.wire.blocks` (see its docstring for the
format): the same classes, the same records, bytes and ``ProtocolError``
messages, with the record fields read and written through C pointers
instead of ``struct`` and ``memoryview`` slices.  ``tests/test_blocks.py``
holds both forms to identical outputs; :mod:`aiopdbp.ext` chooses this one
when it is built and not older than ``blocks.py``."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.ref cimport PyObject, Py_INCREF
from libc.stdint cimport uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy, memcmp
cimport numpy as cnp

import numpy as np

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.blocks import SHORT, SHORT_ARRAY, SHORT_MAX, SHORT_NONE, STREAM_HEAD
from aiopdbp.wire.mesp import DEFAULT_LIMITS, VERSION, Kind, MsgType
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.wire.payload import SHORT_ARRAY_MAX, decode_short_ndarray, short_ndarray

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    # what np.empty(shape, dtype) calls, without parsing its arguments
    # (numpy's pxd leaves it out: it steals a reference to the dtype)
    object _PyArray_Empty "PyArray_Empty"(int nd, cnp.npy_intp* dims, PyObject* descr, int fortran)

__all__ = ["BlockReader", "BlockWriter"]

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char* AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext refuses a stale twin)
__sources__ = ("blocks.py", "cblocks.pyx", "cblocks.pxd")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

cdef int _BPS = int(MsgType.BPS)
cdef int _BP = int(MsgType.BP)
cdef int _VERSION = VERSION
cdef int _NONE = SHORT_NONE
cdef int _ARRAY = SHORT_ARRAY
cdef Py_ssize_t _SMAX = SHORT_MAX
cdef Py_ssize_t _CREDIT_OVERHEAD = CREDIT_OVERHEAD
cdef object _COMMAND = Kind.COMMAND
cdef object _SHORT = Kind.SHORT
cdef object _STREAM = Kind.STREAM
cdef object _ndarray = np.ndarray
cdef Py_ssize_t _ARRAY_MAX = SHORT_ARRAY_MAX
cdef enum:
    SHORT_SIZE = 15
    HEAD_SIZE = 8
    MAX_COUNT = 0xFFFF


cdef extern from *:
    """
    /* make((a, b, c, d, e)) for a make that is tuple or a subclass adding no
       __new__ or __init__ (Message): the tuple filled in place, as tuple's own
       new does for a subclass (tp_alloc, then the items), without the
       argument tuple and the type call */
    static int aiopdbp_plain_tuple_type(PyObject *make) {
        PyTypeObject *t;
        if (!PyType_Check(make)) return 0;
        t = (PyTypeObject *)make;
        return t == &PyTuple_Type || (PyType_IsSubtype(t, &PyTuple_Type)
            && t->tp_new == PyTuple_Type.tp_new && t->tp_init == PyBaseObject_Type.tp_init);
    }
    static PyObject *aiopdbp_tuple5(PyObject *make, PyObject *a, PyObject *b, PyObject *c,
                                    PyObject *d, PyObject *e) {
        PyTypeObject *t = (PyTypeObject *)make;
        PyObject *o = t == &PyTuple_Type ? PyTuple_New(5) : t->tp_alloc(t, 5);
        if (o == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(o, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(o, 1, b);
        Py_INCREF(c); PyTuple_SET_ITEM(o, 2, c);
        Py_INCREF(d); PyTuple_SET_ITEM(o, 3, d);
        Py_INCREF(e); PyTuple_SET_ITEM(o, 4, e);
        return o;
    }
    """
    bint aiopdbp_plain_tuple_type(object make) noexcept
    object aiopdbp_tuple5(object make, object a, object b, object c, object d, object e)


cdef inline uint32_t _rd32(const uint8_t* p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint16_t _rd16(const uint8_t* p) noexcept nogil:
    return p[0] | (<uint16_t>p[1] << 8)


cdef inline void _wr32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


cdef inline void _wr16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF


cdef inline void _header(uint8_t* p, int mtype, Py_ssize_t count, Py_ssize_t body_len) noexcept nogil:
    p[0] = <uint8_t>_VERSION
    p[1] = <uint8_t>mtype
    _wr16(p + 2, <uint16_t>count)
    _wr32(p + 4, <uint32_t>body_len)


cdef inline void _record(uint8_t* p, uint32_t pid, uint32_t src, uint32_t com, int flags,
                         Py_ssize_t n) noexcept nogil:
    _wr32(p, pid)
    _wr32(p + 4, src)
    _wr32(p + 8, com)
    p[12] = <uint8_t>flags
    _wr16(p + 13, <uint16_t>n)


cdef Py_ssize_t _copy(uint8_t* dst, object src) except -1:
    """Copy the bytes of buffer ``src`` to ``dst``; their count."""
    cdef Py_buffer view
    cdef Py_ssize_t n
    if type(src) is bytes:
        n = len(<bytes>src)
        memcpy(dst, PyBytes_AS_STRING(<bytes>src), n)
        return n
    PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)
    try:
        memcpy(dst, view.buf, view.len)
        return view.len
    finally:
        PyBuffer_Release(&view)


cdef class BlockWriter:
    """Records for one destination host, into one block at a time (see
    :class:`aiopdbp.wire.blocks.BlockWriter`; its fields: cblocks.pxd)."""

    def __init__(self, Py_ssize_t short_limit):
        self.short_limit = min(_SMAX + 1, short_limit)
        self.kind = 0
        self.count = 0
        self._view = None
        self._held = False
        self._pos = 0
        self._limit = 0
        self._adescr = None
        self._andim = -1
        self._ameta = None

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._buf)

    cpdef Py_ssize_t offset(self, int kind):
        return self._pos if self.kind == kind else HEAD_SIZE

    cpdef open(self, object view, int kind):
        self._drop()
        PyObject_GetBuffer(view, &self._buf, PyBUF_WRITABLE)
        self._held = True
        self._view = view
        self.kind = kind
        self._pos = HEAD_SIZE
        self.count = 0
        self._limit = self._buf.len

    cdef void _drop(self):
        if self._held:
            PyBuffer_Release(&self._buf)
            self._held = False
        self._view = None

    cpdef Py_ssize_t close(self):
        if self._view is None:
            return 0
        cdef Py_ssize_t count = self.count
        cdef Py_ssize_t pos = self._pos
        if count:
            _header(<uint8_t*>self._buf.buf, self.kind, count, pos - HEAD_SIZE)
        self.kind = 0
        self._drop()
        return pos if count else 0

    cdef bint _known(self, cnp.ndarray arr):
        """Whether ``arr`` is C-contiguous, of at most SHORT_ARRAY_MAX bytes,
        with the dtype object and shape of the remembered meta."""
        cdef int nd = cnp.PyArray_NDIM(arr)
        if <object>cnp.PyArray_DESCR(arr) is not self._adescr or nd != self._andim:
            return False
        if nd and memcmp(cnp.PyArray_DIMS(arr), self._ashape, nd * sizeof(cnp.npy_intp)) != 0:
            return False
        return cnp.PyArray_IS_C_CONTIGUOUS(arr) and cnp.PyArray_NBYTES(arr) <= _ARRAY_MAX

    cdef void _remember(self, cnp.ndarray arr, bytes meta):
        cdef int nd = cnp.PyArray_NDIM(arr)
        if nd > KNOWN_NDIM:
            return
        if nd:
            memcpy(self._ashape, cnp.PyArray_DIMS(arr), nd * sizeof(cnp.npy_intp))
        self._adescr = <object>cnp.PyArray_DESCR(arr)
        self._andim = nd
        self._ameta = meta

    cpdef object put_short(self, unsigned int pid, unsigned int src, unsigned int com, int kind, object data,
                           bytes head, bint lone):
        cdef object meta = head
        cdef object body = None
        cdef Py_ssize_t n, m, pos
        cdef int flags
        cdef bytes frame
        cdef uint8_t* p
        cdef const uint8_t* araw = NULL   # a known array's bytes (else body is copied)
        cdef Py_ssize_t size = 0
        cdef cnp.ndarray arr
        if type(data) is bytes and not head:
            n = len(<bytes>data)
            if n >= self.short_limit:
                return None
            flags = kind
            body = data
        elif data is None:
            if head:
                return None
            n = 0
            flags = kind | _NONE
        elif type(data) is _ndarray:
            arr = <cnp.ndarray>data
            if self._known(arr):
                size = cnp.PyArray_NBYTES(arr)
                if size >= self.short_limit:
                    return None
                meta = self._ameta if not head else head + self._ameta
                araw = <const uint8_t*>cnp.PyArray_DATA(arr)
            else:
                parts = short_ndarray(data)
                if parts is None or data.nbytes >= self.short_limit:
                    return None
                self._remember(arr, <bytes>parts[0])
                meta = head + <bytes>parts[0]
                body = parts[1]
                size = data.nbytes
            n = len(<bytes>meta) + size
            if n > _SMAX:
                return None
            flags = kind | _ARRAY
        elif type(data) is bytes or (type(data) is memoryview and head):
            n = len(head) + (len(<bytes>data) if type(data) is bytes else (<memoryview>data).nbytes)
            if n > _SMAX or n > self.short_limit or (type(data) is memoryview
                                                     and not (<memoryview>data).c_contiguous):
                return None
            flags = kind
            body = data
        else:
            return None
        m = len(<bytes>meta)
        if lone:
            frame = PyBytes_FromStringAndSize(NULL, HEAD_SIZE + SHORT_SIZE + n)
            p = <uint8_t*>PyBytes_AS_STRING(frame)
            _header(p, _BPS, 1, SHORT_SIZE + n)
            _record(p + HEAD_SIZE, pid, src, com, flags, n)
            pos = HEAD_SIZE + SHORT_SIZE
            if m:
                memcpy(p + pos, PyBytes_AS_STRING(<bytes>meta), m)
                pos += m
            if araw != NULL:
                memcpy(p + pos, araw, size)
            elif n > m:
                _copy(p + pos, body)
            return frame
        pos = self._pos
        if self.kind != _BPS or pos + SHORT_SIZE + n > self._limit or self.count == MAX_COUNT:
            return False
        p = <uint8_t*>self._buf.buf + pos
        _record(p, pid, src, com, flags, n)
        p += SHORT_SIZE
        if m:
            memcpy(p, PyBytes_AS_STRING(<bytes>meta), m)
        if araw != NULL:
            memcpy(p + m, araw, size)
        elif n > m:
            _copy(p + m, body)
        self._pos = pos + SHORT_SIZE + n
        self.count += 1
        return True

    cpdef bint put_record(self, list parts, Py_ssize_t nbytes) except -1:
        cdef Py_ssize_t pos = self._pos
        if self.kind != _BP or pos + nbytes > self._limit or self.count == MAX_COUNT:
            return False
        for part in parts:
            pos += _copy(<uint8_t*>self._buf.buf + pos, part)
        self._pos = pos
        self.count += 1
        return True


cdef class BlockReader:
    """Decodes BPS frames into the receiver's records (see
    :class:`aiopdbp.wire.blocks.BlockReader`)."""

    cdef public object names
    cdef object _make
    cdef bint _plain    # make is tuple or Message-like: records are filled in place
    cdef public object unknown
    cdef public object limits
    # a lone array's meta bytes -> (dtype, shape, data bytes), as read before
    # (never text: its code points are checked every time)
    cdef dict _arrays

    def __init__(self, names=None, make=tuple, unknown=None, limits=DEFAULT_LIMITS):
        self.names = names
        self.make = make
        self.unknown = unknown
        self.limits = limits
        self._arrays = {}

    @property
    def make(self):
        return self._make

    @make.setter
    def make(self, make):
        self._make = make
        self._plain = aiopdbp_plain_tuple_type(make)

    cdef inline object _record(self, object source, object kind, uint32_t com, object data, uint32_t src):
        if self._plain:
            return aiopdbp_tuple5(self._make, source, kind, com, data, src)
        return self._make((source, kind, com, data, src))

    cpdef list read(self, object buf, object stream=None):
        cdef bytes b = bytes(buf)
        cdef Py_ssize_t end = len(b)
        cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(b)
        if end < HEAD_SIZE:
            raise ProtocolError(f"frame of {end} bytes is shorter than its header")
        version = p[0]
        if version != _VERSION:
            raise ProtocolError(f"unsupported version {version}")
        mtype = p[1]
        if mtype != _BPS:
            raise ProtocolError(f"not a BPS frame: type {mtype}")
        body_len = _rd32(p + 4)
        if body_len > self.limits.max_frame:
            raise ProtocolError(f"frame body of {body_len} bytes > limit {self.limits.max_frame}")
        if end != HEAD_SIZE + body_len:
            raise ProtocolError(f"frame holds {end - HEAD_SIZE} body bytes, header says {body_len}")
        count = _rd16(p + 2)
        if not count:
            raise ProtocolError("a BPS frame holds at least one record")
        return self.records(b, count, stream)

    cpdef tuple read_one(self, object buf):
        """See :meth:`aiopdbp.wire.blocks.BlockReader.read_one` (read in
        place: no copy of the frame, only of its payload)."""
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef Py_ssize_t end, n
        cdef uint32_t dest, src, com
        cdef int flags, bits
        cdef object data, kind, source
        cdef bytes frame = None
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            end = view.len
            p = <const uint8_t*>view.buf
            if end < HEAD_SIZE + SHORT_SIZE or p[0] != _VERSION or p[1] != _BPS or _rd16(p + 2) != 1:
                return None
            if <Py_ssize_t>_rd32(p + 4) != end - HEAD_SIZE or _rd32(p + 4) > self.limits.max_frame:
                return None
            dest = _rd32(p + HEAD_SIZE)
            src = _rd32(p + HEAD_SIZE + 4)
            com = _rd32(p + HEAD_SIZE + 8)
            flags = p[HEAD_SIZE + 12]
            n = _rd16(p + HEAD_SIZE + 13)
            if n != end - HEAD_SIZE - SHORT_SIZE:
                return None
            bits = flags & 0x3F
            if bits == 3:
                kind = _SHORT
            elif bits == 2:
                kind = _COMMAND
            else:
                return None
            if flags == bits:
                data = PyBytes_FromStringAndSize(<const char*>p + HEAD_SIZE + SHORT_SIZE, n)
            elif flags == bits | _NONE and not n:
                data = None
            elif flags == bits | _ARRAY:
                data = self._array(p, end)
                if data is None:
                    frame = PyBytes_FromStringAndSize(<const char*>p, end)
                else:
                    n = (<object>data).nbytes
            else:
                return None
        finally:
            PyBuffer_Release(&view)
        if frame is not None:  # its credit is its nbytes, as sent
            try:
                data = decode_short_ndarray(frame, HEAD_SIZE + SHORT_SIZE, end, self.limits)
            except ProtocolError:
                return None
            n = data.nbytes
            meta = self._meta(p, end) if data.dtype.kind != "U" and len(self._arrays) < 256 else None
            if meta is not None:
                self._arrays[meta] = (data.dtype, data.shape, data.nbytes)
        if self.names is None:
            source = src
        else:
            source = self.names.get(src)
            if source is None:
                source = f"<pid {src}>" if self.unknown is None else self.unknown(src)
        return dest, self._record(source, kind, com, data, src), n

    cdef bytes _meta(self, const uint8_t* p, Py_ssize_t end):
        """A lone array record's meta bytes (None: they run past the frame)."""
        cdef Py_ssize_t off = HEAD_SIZE + SHORT_SIZE
        cdef Py_ssize_t mend
        if off + 2 > end:
            return None
        mend = off + p[off] + 2
        if mend > end:
            return None
        mend += 8 * p[mend - 1]
        if mend > end:
            return None
        return PyBytes_FromStringAndSize(<const char*>p + off, mend - off)

    cdef object _array(self, const uint8_t* p, Py_ssize_t end):
        """A lone record's array whose meta was read before, filled in one
        copy (what ``decode_short_ndarray`` makes: writable, aligned, its
        own); None when it was not (or does not match its bytes)."""
        cdef bytes meta
        cdef Py_ssize_t start
        cdef cnp.npy_intp dims[64]
        cdef int nd, i
        if not self._arrays:
            return None
        meta = self._meta(p, end)
        if meta is None:
            return None
        hit = self._arrays.get(meta)
        start = HEAD_SIZE + SHORT_SIZE + len(meta)
        if hit is None or <Py_ssize_t>hit[2] != end - start or len(hit[1]) > self.limits.max_ndim:
            return None
        shape = <tuple>hit[1]
        nd = len(shape)
        if nd > 64:  # (the limits' own bound on max_ndim)
            return None
        for i in range(nd):
            dims[i] = <cnp.npy_intp>shape[i]
        descr = hit[0]
        Py_INCREF(descr)
        arr = _PyArray_Empty(nd, dims, <PyObject*>descr, 0)  # (a fresh C-contiguous array)
        memcpy(cnp.PyArray_DATA(<cnp.ndarray>arr), p + start, end - start)
        return arr

    cpdef list records(self, bytes b, Py_ssize_t count, object stream):
        cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(b)
        cdef Py_ssize_t end = len(b)
        cdef Py_ssize_t off = HEAD_SIZE
        cdef Py_ssize_t stop, n, i
        cdef uint32_t dest, src, com
        cdef int flags, bits
        cdef long long run_dest = -1
        cdef long long last_src = -1
        cdef long long sno = -1
        cdef long long window = -1
        cdef Py_ssize_t run_bytes = 0
        cdef list runs = []
        cdef list run = []
        cdef object names = self.names
        cdef object limits = self.limits
        cdef object source = None
        cdef object data, kind, item
        for i in range(count):
            if off + SHORT_SIZE > end:
                raise ProtocolError("truncated short record")
            dest = _rd32(p + off)
            src = _rd32(p + off + 4)
            com = _rd32(p + off + 8)
            flags = p[off + 12]
            n = _rd16(p + off + 13)
            off += SHORT_SIZE
            bits = flags & 0x3F
            if flags & 0x80 and flags & 0x40:
                raise ProtocolError(f"bad short record flags 0x{flags:02x}")
            if bits == 3:
                kind = _SHORT
            elif bits == 2:
                kind = _COMMAND
            elif bits == 1 and not flags & 0x80:
                kind = _STREAM
            else:
                raise ProtocolError(f"bad short record flags 0x{flags:02x}")
            if flags & 0x80 and n:
                raise ProtocolError("None payload with a length")
            stop = off + n
            if stop > end:
                raise ProtocolError("truncated short record payload")
            if bits != 1:
                if flags & 0x80:
                    data = None
                elif flags & 0x40:  # its credit is its nbytes, as sent
                    data = decode_short_ndarray(b, off, stop, limits)
                    n = data.nbytes
                else:
                    data = PyBytes_FromStringAndSize(<const char*>p + off, n)
            else:  # a short stream: its credit is its data's bytes, as sent
                if n <= HEAD_SIZE:
                    raise ProtocolError("truncated short stream record")
                if stream is None:
                    raise ProtocolError("a short stream record where no stream may come")
                sno = _rd32(p + off)
                window = _rd32(p + off + 4)
                if flags & 0x40:
                    data = decode_short_ndarray(b, off + HEAD_SIZE, stop, limits)
                    n = data.nbytes
                else:
                    data = bytearray(PyBytes_FromStringAndSize(<const char*>p + off + HEAD_SIZE, n - HEAD_SIZE))
                    n -= HEAD_SIZE
            off = stop
            if src != last_src:
                last_src = src
                if names is None:
                    source = src
                else:
                    source = names.get(src)
                    if source is None:
                        source = f"<pid {src}>" if self.unknown is None else self.unknown(src)
            if dest != run_dest:
                if run:
                    runs.append((run_dest, run, run_bytes))
                run = []
                run_dest = dest
                run_bytes = 0
            if sno < 0:
                run.append(self._record(source, kind, com, data, src))
            else:
                item = stream(dest, src, source, com, sno, window, data)
                if item is not None:
                    run.append(item)
                else:
                    n += _CREDIT_OVERHEAD
                sno = -1
            run_bytes += n
        if off != end:
            raise ProtocolError(f"{end - off} trailing bytes after the last short record")
        runs.append((run_dest, run, run_bytes))
        return runs
