# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`aiopdbp.hosts.gate` (read its docstring): the
same :class:`CreditGate`, :class:`CreditBook` (its :class:`CreditAccount`) and :class:`PipeMarks`, their
state in C fields, typed dicts and (the marks) C rings.  The wait queue and the records they return are the pure
module's own (:class:`ParkingLot`, :class:`Wake`, :class:`GateWait`)."""

import time

cimport cython

from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from libc.stdlib cimport free, malloc

from aiopdbp.hosts.gate import ASK_STEP, LATER, NOW, SOON, GateWait, ParkingLot, Wake
from aiopdbp.wire.message import CREDIT_OVERHEAD

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("gate.py", "cgate.pyx", "cgate.pxd")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["LATER", "NOW", "SOON", "CreditAccount", "CreditBook", "CreditGate", "GateWait", "ParkingLot", "PipeMarks", "Placer", "Wake"]

cdef long long _OVERHEAD = CREDIT_OVERHEAD
cdef int _LATER = LATER, _SOON = SOON, _NOW = NOW, _ASK_STEP = ASK_STEP
cdef object _NOTHING = Wake([], False)


cdef class _Dest:
    def __init__(self, double now):
        self.lot = ParkingLot()
        self.woken = 0
        self.asked = False
        self.progress_at = now


cdef class _Credit:
    pass


cdef class CreditGate:
    """See :class:`aiopdbp.hosts.gate.CreditGate` (its fields: cgate.pxd).
    A GP's credit below the window is a :class:`_Credit` here (the pure
    form's int, in a box changed in place): an admit sets no dict item and
    makes no int."""

    def __init__(self, window, clock=time.monotonic):
        self.window = window
        self._window = window
        self._credit = {}
        self._dests = {}
        self._clock = clock
        self.waits = 0
        self.asks = 0

    def credit(self, pid):
        got = self._credit.get(pid)
        return self.window if got is None else (<_Credit>got).c

    cdef long long _get(self, object pid) except? -1:
        cdef PyObject *got = PyDict_GetItem(self._credit, pid)
        return self._window if got == NULL else (<_Credit>got).c

    cdef int _put(self, object pid, long long c) except -1:
        cdef PyObject *got = PyDict_GetItem(self._credit, pid)
        cdef _Credit box
        if got != NULL:
            (<_Credit>got).c = c
        else:
            box = _Credit.__new__(_Credit)
            box.c = c
            self._credit[pid] = box
        return 0

    def contended(self, pid):
        return pid in self._dests

    def parked(self):
        return sum(len((<_Dest>d).lot) for d in self._dests.values())

    def short(self):
        return len(self._credit)

    def least(self):
        return min([(<_Credit>b).c for b in self._credit.values()], default=self.window)

    def outstanding(self):
        return sum([self._window - (<_Credit>b).c for b in self._credit.values()])

    def waiting(self):
        return [GateWait(pid, len((<_Dest>d).lot), (<_Dest>d).lot.head_need(), (<_Dest>d).progress_at)
                for pid, d in self._dests.items() if (<_Dest>d).lot]

    cpdef bint admit(self, object pid, long long nbytes):
        cdef long long c
        cdef PyObject *got
        if self._dests and pid in self._dests:
            return False
        got = PyDict_GetItem(self._credit, pid)
        c = self._window if got == NULL else (<_Credit>got).c
        if c >= nbytes or c >= self._window:
            if got != NULL:
                (<_Credit>got).c = c - nbytes
            else:
                self._put(pid, c - nbytes)
            return True
        return False

    def park(self, pid, nbytes, token):
        d = self._dests.get(pid)
        if d is None:
            d = self._dests[pid] = _Dest(self._clock())
        (<_Dest>d).lot.park(token, nbytes)
        self.waits += 1
        return self._serve(pid, <_Dest>d)

    def resumed(self, pid):
        d = self._dests.get(pid)
        if d is not None:
            (<_Dest>d).woken -= 1
            if (<_Dest>d).woken <= 0 and not (<_Dest>d).lot:
                del self._dests[pid]

    def grant(self, pid, long long nbytes):
        cdef long long c = self._get(pid) + nbytes
        d = self._dests.get(pid)
        if d is None:
            if c >= self._window:
                self._credit.pop(pid, None)
            else:
                self._put(pid, c)
            return _NOTHING
        self._put(pid, c)
        (<_Dest>d).asked = False
        return self._serve(pid, <_Dest>d)

    def cancel(self, pid, long long nbytes, token):
        d = self._dests.get(pid)
        if d is None:
            return _NOTHING
        if not (<_Dest>d).lot.leave(token):
            (<_Dest>d).woken -= 1
            self._put(pid, self._get(pid) + nbytes)
        return self._serve(pid, <_Dest>d)

    def fail(self):
        tokens = [t for d in self._dests.values() for t in (<_Dest>d).lot.take_all()]
        self._dests.clear()
        return tokens

    cdef object _serve(self, object pid, _Dest d):
        cdef long long c, need, window = self._window
        cdef list woken = []
        cdef bint ask = False
        lot = d.lot
        c = self._get(pid)
        while lot:
            need = lot.head_need()
            if c < need and c < window:
                break
            c -= need
            woken.append(lot.serve())
        if woken:
            d.woken += len(woken)
            d.progress_at = self._clock()
        if c >= window:
            self._credit.pop(pid, None)
        else:
            self._put(pid, c)
        if lot:
            if not d.asked:
                d.asked = ask = True
                self.asks += 1
        elif d.woken <= 0:
            del self._dests[pid]
        return Wake(woken, ask) if woken or ask else _NOTHING


@cython.final
cdef class CreditAccount:
    """See :class:`aiopdbp.hosts.gate.CreditAccount`."""

    cdef readonly long long host, pid, pending, owed
    cdef readonly bint asked, holding, owing

    def __init__(self, host, pid):
        self.host = host
        self.pid = pid


@cython.final
cdef class CreditBook:
    """See :class:`aiopdbp.hosts.gate.CreditBook`."""

    cdef public object window
    cdef long long _window, _quarter, _ask_at
    cdef dict _accounts, _owing, _grants

    def __init__(self, window):
        self.window = window
        self._window = window
        self._quarter = (window - 1) // 4   # owed * 4 < window, without the product (no overflow)
        self._ask_at = (window - 1) // _ASK_STEP   # owed * ASK_STEP >= window: owed > this
        self._accounts = {}
        self._owing = {}
        self._grants = {}

    cpdef CreditAccount account(self, object host, object pid):
        key = (host, pid)
        got = self._accounts.get(key)
        if got is None:
            got = self._accounts[key] = CreditAccount(host, pid)
        return <CreditAccount>got

    cpdef void deliver(self, CreditAccount acct, long long cost):
        acct.pending += cost
        acct.holding = True

    cpdef int take(self, CreditAccount acct, long long cost) except -1:
        cdef long long left = acct.pending - cost
        if left > 0:
            acct.pending = left
        else:
            acct.pending = 0
            acct.holding = False
        return self._owe(acct, cost)

    cpdef void delivered(self, object host, object pid, long long cost):
        self.deliver(self.account(host, pid), cost)

    cpdef int taken(self, object host, object pid, long long cost) except -1:
        return self.take(self.account(host, pid), cost)

    cpdef int ask(self, object host, object pid) except -1:
        cdef CreditAccount acct = self.account(host, pid)
        acct.asked = True
        if acct.owed and (not acct.holding or acct.owed > self._ask_at):
            return self._owe(acct, 0)
        return _LATER

    cpdef int owe(self, object host, object pid, long long cost) except -1:
        return self._owe(self.account(host, pid), cost)

    cdef int _owe(self, CreditAccount acct, long long cost) except -1:
        cdef long long owed = acct.owed + cost
        if owed <= self._quarter and not (owed and acct.asked and (
                not acct.holding or owed > self._ask_at)):
            acct.owed = owed
            if not acct.owing:
                acct.owing = True
                self._owing[acct] = None
            return _LATER
        acct.owed = 0
        if acct.owing:
            acct.owing = False
            del self._owing[acct]
        acct.asked = False
        grants = self._grants.get(acct.host)
        if grants is None:
            grants = self._grants[acct.host] = []
        (<list>grants).append((acct.pid, owed))
        return _NOW if owed >= self._window else _SOON

    def grants(self, bint everything=False):
        cdef CreditAccount acct
        if everything:
            for got in self._owing:
                acct = <CreditAccount>got
                self._grants.setdefault(acct.host, []).append((acct.pid, acct.owed))
                acct.owed = 0
                acct.owing = False
            self._owing.clear()
        grants, self._grants = self._grants, {}
        return grants

    def owed(self):
        return sum((<CreditAccount>a).owed for a in self._owing)

    def outstanding(self, host, pid):
        got = self._accounts.get((host, pid))
        return 0 if got is None else (<CreditAccount>got).pending + (<CreditAccount>got).owed

    def admits(self, host, pid, nbytes):
        out = self.outstanding(host, pid)
        return out <= 0 or out + nbytes <= self.window


cdef long long _NO_WATCH = 1LL << 62


cdef class _Ring:
    """One host's marks: ``[end, pid, cost]`` triples in a C ring, and the
    account of the GP it marked last."""

    cdef long long* m
    cdef Py_ssize_t head, n, cap
    cdef CreditAccount acct

    def __cinit__(self):
        self.m = <long long*>malloc(3 * 4 * sizeof(long long))
        if self.m == NULL:
            raise MemoryError()
        self.cap = 4
        self.head = self.n = 0

    def __dealloc__(self):
        free(self.m)

    cdef int push(self, long long end, long long pid, long long cost) except -1:
        cdef Py_ssize_t i, j
        cdef long long* grown
        if self.n == self.cap:
            grown = <long long*>malloc(6 * self.cap * sizeof(long long))
            if grown == NULL:
                raise MemoryError()
            for i in range(self.n):
                j = 3 * ((self.head + i) % self.cap)
                grown[3 * i] = self.m[j]
                grown[3 * i + 1] = self.m[j + 1]
                grown[3 * i + 2] = self.m[j + 2]
            free(self.m)
            self.m = grown
            self.head = 0
            self.cap *= 2
        j = 3 * ((self.head + self.n) % self.cap)
        self.m[j] = end
        self.m[j + 1] = pid
        self.m[j + 2] = cost
        self.n += 1
        return 0


@cython.final
cdef class PipeMarks:
    """See :class:`aiopdbp.hosts.gate.PipeMarks`."""

    cdef public CreditBook book
    cdef object _due
    cdef dict _hosts

    def __init__(self, CreditBook book, object due):
        self.book = book
        self._due = due
        self._hosts = {}

    cpdef long long mark(self, object host, object pid, long long cost, long long end) except? -2:
        cdef _Ring r
        cdef Py_ssize_t j
        cdef long long p = pid
        cdef CreditBook book = self.book
        got = self._hosts.get(host)
        if got is None:
            r = _Ring()
            r.acct = book.account(host, pid)
            self._hosts[host] = r
        else:
            r = <_Ring>got
            if r.acct.pid != p:
                r.acct = book.account(host, pid)
        book.deliver(r.acct, cost)
        if r.n:
            j = 3 * ((r.head + r.n - 1) % r.cap)
            if r.m[j + 1] == p and r.m[j + 2] * _ASK_STEP < book._window:
                # extend the last mark (see the pure form)
                r.m[j] = end
                r.m[j + 2] += cost
                return end if r.n == 1 else -1
        r.push(end, p, cost)
        return end if r.n == 1 else -1

    cpdef long long settle(self, object pipe, long long taken, object host) except? -2:
        cdef _Ring r
        cdef Py_ssize_t j
        cdef long long pid, cost
        cdef int due
        cdef CreditBook book = self.book
        got = self._hosts.get(host)
        if got is None:
            return _NO_WATCH
        r = <_Ring>got
        while r.n and r.m[3 * r.head] <= taken:
            j = 3 * r.head
            pid = r.m[j + 1]
            cost = r.m[j + 2]
            r.head = (r.head + 1) % r.cap
            r.n -= 1
            if r.acct.pid != pid:
                r.acct = book.account(host, pid)
            due = book.take(r.acct, cost)
            if due != _LATER:
                self._due(due)
        return r.m[3 * r.head] if r.n else _NO_WATCH

    def drain(self):
        cdef _Ring r
        cdef Py_ssize_t i, j
        out = []
        for host, got in self._hosts.items():
            r = <_Ring>got
            for i in range(r.n):
                j = 3 * ((r.head + i) % r.cap)
                out.append((host, r.m[j + 1], r.m[j + 2]))
        self._hosts.clear()
        return out


@cython.final
cdef class Placer:
    """See :class:`aiopdbp.hosts.gate.Placer`."""

    cdef public object reader
    cdef public dict targets
    cdef public object pipe_type
    cdef public CreditBook book
    cdef public dict marks
    cdef object _due, _other, _runs

    def __init__(self, reader, dict targets, pipe_type, CreditBook book, due, other, runs):
        self.reader = reader
        self.targets = targets
        self.pipe_type = pipe_type
        self.book = book
        self.marks = {}
        self._due = due
        self._other = other
        self._runs = runs

    cpdef place(self, object host, object buf):
        cdef tuple t
        cdef long long cost
        one = self.reader.read_one(buf)
        if one is None:
            self._runs(host, buf)
            return
        t = <tuple>one
        pid = t[0]
        msg = t[1]
        cost = <long long>t[2] + _OVERHEAD
        if not self.place_one(host, pid, msg, cost):
            self._other(host, pid, [msg], cost)

    cpdef bint place_one(self, object host, object pid, object msg, long long cost) except -1:
        pipe = self.targets.get(pid)
        if type(pipe) is self.pipe_type and pipe.put_many([msg], host):
            self.mark(pipe, host, pid, cost)
            return True
        return False

    cpdef mark(self, object pipe, object host, object pid, long long cost):
        cdef PipeMarks marks
        cdef long long watch
        got = self.marks.get(pipe)
        if got is None:
            marks = PipeMarks(self.book, self._due)
            self.marks[pipe] = marks
            pipe.on_watch = marks.settle
        else:
            marks = <PipeMarks>got
        watch = marks.mark(host, pid, cost, pipe.appended)
        if watch >= 0:
            pipe.watch_at = watch
