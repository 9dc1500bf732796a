# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.hosts.splitin` (read its docstring):
the same :class:`ArraysIn`, the header's work from the cache lookup to the
delivered message in one C call (the header's fields read from the
:class:`~aiopdbp.wire.codec.SplitArray` tuple by position, the array made
as ``SplitArray.array`` makes it)."""

import numpy as np

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message
from aiopdbp.wire.payload import check_text

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("splitin.py", "csplitin.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["ArraysIn"]

cdef object _frombuffer = np.frombuffer
cdef object _Message = Message
cdef Py_ssize_t _OVERHEAD = CREDIT_OVERHEAD


cdef class ArraysIn:
    """See :class:`aiopdbp.hosts.splitin.ArraysIn`."""

    cdef public dict arrays, names
    cdef public object post, book, landing, waiting, name_of, place, place_one
    cdef public Py_ssize_t tags

    def __init__(self, dict arrays, object post, Py_ssize_t tags, object book, object landing, object waiting,
                 dict names, object name_of, object place, object place_one=None):
        self.arrays = arrays
        self.post = post
        self.tags = tags
        self.book = book
        self.landing = landing
        self.waiting = waiting
        self.names = names
        self.name_of = name_of
        self.place = place
        self.place_one = place_one

    def admissible(self, host, pid, Py_ssize_t nbytes, ahead):
        return self._admissible(host, pid, nbytes, ahead)

    cdef object _admissible(self, host, pid, Py_ssize_t nbytes, ahead):
        cost = nbytes + _OVERHEAD
        book = self.book
        if book is not None:
            out = book.outstanding(host, pid) + ahead
            window = book.window
            if out > 0 and out + cost > window:
                raise ProtocolError(f"host {host} announced a {nbytes}-byte payload for GP {pid} beyond the "
                                    f"credit granted to it ({max(0, window - out)} bytes left)")
        return cost

    def take(self, s, buf):
        cdef bytes head = bytes(buf)
        cdef tuple arr
        cdef Py_ssize_t nbytes, tag
        got = self.arrays.get(head)
        if got is None:
            return None
        arr = <tuple>got
        pid = arr[1]
        post = self.post
        if post is None or not pid:
            return head, got, 0, None
        host = s.host
        nbytes = arr[0]
        out = None
        if self.waiting and self.landing is not None:
            out = self.landing(pid, nbytes)
        cost = self._admissible(host, pid, nbytes, 0)   # (nothing queued: nothing announced)
        tag = s.bulk_seq
        s.bulk_seq = (tag + 1) % self.tags
        try:
            payload, track = post(host, tag, nbytes, out)
        except MemoryError:
            raise ProtocolError(f"no memory for the {nbytes}-byte payload announced by host {host}") from None
        if track is not None:
            return head, got, cost, track
        source_p = arr[3]
        name = self.names.get(source_p)
        if not name:
            name = self.name_of(source_p)
        dt, shape = arr[5], arr[6]
        try:   # SplitArray.array
            data = _frombuffer(payload, dt, arr[7])
            if len(<tuple>shape) != 1:
                data = data.reshape(shape)
        except (ValueError, OverflowError) as exc:
            raise ProtocolError(f"bad ndarray shape {shape}") from exc
        if dt.kind == "U":
            data = check_text(data)
        msg = _Message((name, arr[2], arr[4], data, source_p))
        place_one = self.place_one
        if place_one is None or not place_one(host, pid, msg, cost):
            self.place(host, (pid,), msg, cost)
        return True
