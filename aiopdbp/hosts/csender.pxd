# The compiled link sender's fields and methods, for C calls from another
# compiled module (csendpath: a GP's send calls ``offer`` without a Python call).
from aiopdbp.hosts.cgate cimport CreditGate as CGate


cdef class LinkSender:
    cdef public object host, large, error, writer, carried, stamp
    cdef public Py_ssize_t inflight, sent_msgs, lone, blocks, splits, nbytes, fallbacks, n_carried, offered
    cdef public bint carries, carry_missed
    cdef object _transport, _pool, _on_error, _slot, _block, _units, _lane, _owned, _admit, _refund
    cdef Py_ssize_t _block_size, _max_inflight, _bulk_tags, _bulk_seq, _hold_below, _starved, _owned_cap
    cdef bint _allow_pickle, _flush_scheduled, _bulk_heads, _pairs
    cdef object _tick
    cdef CGate _gate    # the compiled gate whose admit _admit is (None: _admit is called)

    cpdef bint offer(self, object pid, object nbytes, object fields) except -1
    cdef bint _short(self, pid, fields, bytes head) except -1
    cdef object _put_short(self, w, pid, fields, bytes head, bint lone)
    cpdef message(self, pid, fields, done=*)
    cpdef cdu(self, cdu, done=*)
    cpdef split(self, split, done)
    cdef _new_block(self, int kind)
    cpdef flush(self)
    cdef object _post(self, list blocks, Py_ssize_t nbytes, object slot)
    cdef object _send(self, list blocks, Py_ssize_t nbytes, object slot)
    cdef _release(self, slot)
