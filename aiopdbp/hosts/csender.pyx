# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.hosts.sender` (read its docstring): the
same :class:`LinkSender`, its state in C fields, and the steps from an item
to its ``Isend`` -- the lone-frame rule, the in-flight limit, the send lane
-- as C calls instead of Python frames.  The encoders, the block writer,
the pool and the transport are called as they are in the pure form, so
both post the same frames in the same order (``tests/test_sender.py``) --
except that a compiled gate's ``admit`` (the ``admit`` given is that gate's
own) and a compiled block writer's ``put_short`` are C calls here
(``cgate.pxd``, ``cblocks.pxd``): the same methods, without a Python call."""

import asyncio
import functools
import logging

import numpy as np

from collections import deque

from aiopdbp.errors import WouldBlock
from aiopdbp.hosts.inbound import RBP_MIN
from aiopdbp.hosts.owned import OwnedDone, fail_owned, resolve_owned
from aiopdbp.hosts.sender import _OWNED_PRUNE, HOLD_BELOW, large_enough, send_lane
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.transport.base import Channel
from aiopdbp.wire.codec import encode_cdu, encode_record, encode_split, encode_split_array
from aiopdbp.wire import codec as _codec
from aiopdbp.wire.control import credit_frame
from aiopdbp.wire.core import BlockWriter
from aiopdbp.wire.mesp import CDU, L1, MsgType
from aiopdbp.wire.shorts import STREAM_HEAD, ShortStream

from aiopdbp.hosts.cgate cimport CreditGate as CGate
from aiopdbp.wire.cblocks cimport BlockWriter as CWriter

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("sender.py", "csender.pyx", "csender.pxd", "cgate.pxd", "../wire/cblocks.pxd")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["LinkSender", "large_enough", "send_lane"]

log = logging.getLogger("aiopdbp.hosts.link")

cdef int _BPS = int(MsgType.BPS)
cdef int _BP = int(MsgType.BP)
cdef Py_ssize_t _L1_SIZE = L1.size
cdef object _DATA = Channel.DATA
cdef object _STREAM_HEAD = STREAM_HEAD.pack
cdef object _ndarray = np.ndarray
cdef object _ShortStream = ShortStream
cdef object _OwnedDone = OwnedDone
cdef object _running_loop = asyncio.get_running_loop
cdef Py_ssize_t _OVERHEAD = CREDIT_OVERHEAD
# the split headers' cache of encode_split_array (cleared in place when full: this is that dict)
cdef dict _HEADS = _codec._SPLIT_HEADS


cdef inline object _split_array(kind, source_p, pid, com, data):
    """``encode_split_array(kind, source_p, pid, com, data)`` for a
    C-contiguous array: its cached header and its bytes read here, without
    the Python frame; anything else (a first header, a tagged dtype, a
    buffer memoryview cannot cast) by that function, with the same result."""
    dt = data.dtype
    if dt.metadata is None:
        head = _HEADS.get((kind, source_p, pid, com, dt, data.shape))
        if head is not None:
            try:
                mv = memoryview(data)
                return head, (mv if mv.ndim == 1 and mv.format == "B" else mv.cast("B"))
            except (ValueError, TypeError):  # (datetime64, a non-native byte order: the function's way)
                pass
    return encode_split_array(kind, source_p, pid, com, data)


cdef class LinkSender:
    """See :class:`aiopdbp.hosts.sender.LinkSender`.  (Its fields are in
    ``csender.pxd``: ``offer`` is a C call from the compiled send path.)"""

    def __init__(self, host, transport, pool, *, block_size, large, max_inflight, allow_pickle, on_error,
                 admit=None, refund=None):
        self.host = host
        self._transport = transport
        self._pool = pool
        self._block_size = block_size
        self.large = large
        self._max_inflight = max_inflight
        self._allow_pickle = allow_pickle
        self._on_error = on_error
        self._admit = admit
        gate = getattr(admit, "__self__", None)
        self._gate = gate if type(gate) is CGate and admit == gate.admit else None
        self._refund = refund
        self.offered = 0
        self.error = None
        self.writer = BlockWriter(large)
        self._slot = None
        self._block = None
        self._tick = -1
        self._flush_scheduled = False
        self._units = deque()
        self.inflight = 0
        self.sent_msgs = 0
        self.lone = self.blocks = self.splits = self.nbytes = self.fallbacks = 0
        self._bulk_tags = getattr(transport, "bulk_tags", 0)
        self._lane = send_lane(transport, host)
        self._bulk_seq = 0
        self._owned = set()
        self._owned_cap = _OWNED_PRUNE
        self.carries = bool(self._bulk_tags)
        self._bulk_heads = bool(self._bulk_tags) and getattr(transport, "bulk_heads", False)
        self._hold_below = HOLD_BELOW if getattr(transport, "holds_blocks", False) else 0
        self._starved = 0
        self._pairs = self._bulk_heads and getattr(self._lane, "bulk", None) is not None
        self.carried = []
        self.carry_missed = True
        self.n_carried = 0
        self.stamp = None

    # ---------------------------------------------------------------- items
    cpdef bint offer(self, object pid, object nbytes, object fields) except -1:
        if self.error is not None:
            return False
        if self._gate is not None:
            if not self._gate.admit(pid, nbytes):
                return False
        elif self._admit is not None and not self._admit(pid, nbytes):
            return False
        try:
            if type(fields) is _ShortStream:
                self.stream(pid, fields)
            elif not self._short(pid, fields, b""):
                self.message(pid, fields)
        except BaseException:
            if self._refund is not None:
                self._refund(pid, nbytes)
            raise
        self.offered += 1
        return True

    def owned(self, pid, nbytes, fields):
        if self.error is not None or nbytes - _OVERHEAD < self.large or (
                self._admit is not None and not self._admit(pid, nbytes)):
            return None
        done = _OwnedDone(loop=_running_loop())
        try:
            self.message(pid, fields, done)
        except BaseException as exc:
            if self._refund is not None:
                self._refund(pid, nbytes)
            fail_owned(done, exc)
            raise
        self.offered += 1
        return done

    def short(self, pid, fields, head=b""):
        return self._short(pid, fields, head)

    cdef bint _short(self, pid, fields, bytes head) except -1:
        w = self.writer
        # the tick only when no block is open (as the pure form reads it): the
        # coalesced message of a burst reads no property of the transport
        if not w.kind and not self._units and not self._starved and (tick := self._transport.tick) != self._tick:
            frame = self._put_short(w, pid, fields, head, True)
            if frame is None:
                return False
            self._tick = tick
            self.lone += 1
            self._post([frame], len(frame), None)
            return True
        put = self._put_short(w, pid, fields, head, False)
        if put is False:
            self._new_block(_BPS)
            put = self._put_short(self.writer, pid, fields, head, False)
        return put is True

    cdef object _put_short(self, w, pid, fields, bytes head, bint lone):
        # the writer's put_short: a C call to the compiled writer
        if type(w) is CWriter:
            return (<CWriter>w).put_short(pid, fields[4], fields[2], fields[1], fields[3], head, lone)
        return w.put_short(pid, fields[4], fields[2], fields[1], fields[3], head, lone)

    def stream(self, pid, item):
        if not self._short(pid, item, _STREAM_HEAD(item[5], item[6])):
            self.cdu(item.cdu(pid))

    cpdef message(self, pid, fields, done=None):
        # (cpdef, as cdu, split and flush: an owned send's steps are C calls)
        data = fields[3]
        if self._bulk_tags and type(data) is _ndarray and data.nbytes >= self.large and (
                done is not None or (data.flags.c_contiguous and large_enough(data, self.large))):
            self.flush()
            self.split(_split_array(fields[1], fields[4], pid, fields[2], data), done)
        else:
            self.cdu(CDU(fields[1], fields[4], (pid,), data, fields[2]), done)

    cpdef cdu(self, cdu, done=None):
        data = cdu.data
        if data is not None and large_enough(data, self.large):
            self.flush()
            self.split(encode_split(cdu), done)
            return
        if done is not None:
            resolve_owned(done)
        w = self.writer
        if not w.kind and not self._units and not self._starved and (tick := self._transport.tick) != self._tick:
            self._tick = tick
            parts = encode_cdu(cdu, allow_pickle=self._allow_pickle)
            frame = b"".join(parts) if len(parts) > 1 else bytes(parts[0])
            self.lone += 1
            self._post([frame], len(frame), None)
            return
        at = w.offset(_BP)
        parts, n = encode_record(cdu, at, allow_pickle=self._allow_pickle)
        if w.put_record(parts, n):
            return
        if n + _L1_SIZE > self._block_size:
            self.flush()
            whole = b"".join([bytes(p) for p in encode_cdu(cdu, allow_pickle=self._allow_pickle)])
            self._post([whole], len(whole), None)
            return
        self._new_block(_BP)
        if w.offset(_BP) != at:
            parts, n = encode_record(cdu, w.offset(_BP), allow_pickle=self._allow_pickle)
        w.put_record(parts, n)

    cpdef split(self, split, done):
        head, payload = split
        self.splits += 1
        # (a memoryview already, from the header's cache: no second view of it)
        nbytes = payload.nbytes if type(payload) is memoryview else memoryview(payload).nbytes
        if done is not None:
            done._held = True   # OwnedDone.hold(), without its Python frame
        cdef Py_ssize_t tag
        cdef bint now, with_head
        if not self._bulk_tags:
            if done is not None and (self._units or self.inflight >= self._max_inflight):
                payload = bytes(payload)
            fut = self._post([head, payload], len(head) + nbytes, None)
        else:
            tag = self._bulk_seq
            self._bulk_seq = (tag + 1) % self._bulk_tags
            self.carry_missed = False
            now = not (self._units or self.inflight >= self._max_inflight)
            if self.carried and now:
                frame = credit_frame(self.carried)
                if len(frame) + len(head) < RBP_MIN:
                    head = frame + head
                    self.carried = []
                    self.n_carried += 1
            with_head = self._bulk_heads and now
            if with_head:
                self.sent_msgs += 1
                self.nbytes += len(head)
            else:
                self._post([head], len(head), None)
            self.nbytes += nbytes
            try:
                if with_head:
                    if self._pairs:
                        fut = self._lane.post_pair(head, payload, tag, done)
                    else:
                        fut = self._transport.post_bulk(self.host, tag, payload, done, head)
                else:
                    fut = self._transport.post_bulk(self.host, tag, payload, done)
            except Exception as exc:
                self._on_error(exc)
                fut = None
        if done is None:
            return
        if self.error is not None:
            fail_owned(done, self.error)
        elif fut is None:
            resolve_owned(done)
        elif fut is done:
            # kept for fail(); pruned here, not by a done callback (see sender.py)
            if len(self._owned) >= self._owned_cap:
                self._owned = {d for d in self._owned if not d.done()}
                self._owned_cap = max(_OWNED_PRUNE, 2 * len(self._owned))
            self._owned.add(done)
        else:
            self._owned.add(done)
            fut.add_done_callback(functools.partial(self._owned_sent, done))

    def _owned_sent(self, done, fut):
        self._owned.discard(done)
        if fut.cancelled() or fut.exception() is None:
            resolve_owned(done)
        else:
            fail_owned(done, fut.exception())

    # --------------------------------------------------------------- blocks
    cdef _new_block(self, int kind):
        self.flush()
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_soon)
        try:
            slot = self._pool.acquire_nowait(self.host, self._block_size)
        except WouldBlock:
            slot = None
            self.fallbacks += 1
        view = slot.view if slot is not None else memoryview(bytearray(self._block_size))
        self._slot = slot
        self._block = view
        self.writer.open(view, kind)

    def _flush_soon(self):
        self._flush_scheduled = False
        if self._starved:
            return  # held: it leaves when the small sends in flight complete (_sent), or when full
        self.flush()

    cpdef flush(self):
        if not self.writer.kind:
            return
        slot, view = self._slot, self._block
        self._slot = self._block = None
        n = self.writer.close()
        if not n:
            if slot is not None:
                self._pool.abort(slot)
            return
        self.blocks += 1
        if slot is None:
            self._post([view[:n]], n, None)
            return
        pool = self._pool
        pool.commit(slot, n)
        taken = pool.next_filled_nowait(self.host)
        self._post([taken.data], n, taken)

    # -------------------------------------------------------------- sending
    cdef object _post(self, list blocks, Py_ssize_t nbytes, object slot):
        if self._units or self.inflight >= self._max_inflight:
            self._units.append((blocks, nbytes, slot))
            return None
        return self._send(blocks, nbytes, slot)

    cdef object _send(self, list blocks, Py_ssize_t nbytes, object slot):
        stamp = self.stamp
        if stamp is not None:
            stamp(False)
        self.sent_msgs += len(blocks)
        self.nbytes += nbytes
        try:
            if len(blocks) == 1 and self._lane is not None:
                fut = self._lane.post(blocks[0])
            else:
                fut = self._transport.post_nowait(self.host, _DATA, blocks)
        except Exception as exc:
            fut = None
            self._release(slot)
            self._on_error(exc)
        else:
            if fut is None:
                self._release(slot)
            else:
                self.inflight += 1
                small = nbytes <= self._hold_below
                self._starved += small
                fut.add_done_callback(functools.partial(self._sent, slot, small))
        if stamp is not None:
            stamp(True)
        return fut

    def _sent(self, slot, small, fut):
        self.inflight -= 1
        self._starved -= small
        self._release(slot)
        if not fut.cancelled() and fut.exception() is not None and self.error is None:
            # news to no one: the engine reported its own failure through the
            # loop's exception handler, and a transport we closed abandons its
            # sends because this rank is stopping (its stop line says why)
            log.debug("sending to host %d failed: %s", self.host, fut.exception())
            self._on_error(fut.exception())
            return
        units = self._units
        while units and self.inflight < self._max_inflight:
            blocks, nbytes, slot = units.popleft()
            self._send(blocks, nbytes, slot)
        if small and not self._starved and self.writer.kind and not self._flush_scheduled:
            self.flush()  # the block held while small sends were in flight

    cdef _release(self, slot):
        if slot is not None:
            try:
                self._pool.release(slot)
            except Exception:
                pass

    # --------------------------------------------------------------- status
    def fail(self, exc):
        if self.error is None:
            self.error = exc
        owned, self._owned = self._owned, set()
        for done in owned:
            fail_owned(done, exc)

    @property
    def idle(self):
        return not self.writer.kind and not self._units and self.inflight == 0

    @property
    def queued(self):
        return len(self._units)
