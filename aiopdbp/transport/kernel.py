"""The per-message MPI calls of a progress engine: posting a send or a
receive, and matching and receiving a small message.

Two functions, :func:`post_one` and :func:`recv_one`, and three classes,
:class:`Prober`, :class:`SendLane` and :class:`BulkRecv`, in two forms with one interface (as :mod:`aiopdbp.wire.blocks` has): this Python source,
always present, and a twin compiled by Cython, ``aiopdbp.transport.ckernel``,
which calls MPI's C API directly (``MPI_Isend``, ``MPI_Irecv``,
``MPI_Test``, ``MPI_Improbe``, ``MPI_Mrecv``) and so makes no Python object per message
but what it returns.  :mod:`aiopdbp.transport.receives` asks
:func:`aiopdbp.ext.choose` which one runs.  The twin is compiled against
MPICH's ``mpi.h`` and linked to its library by soname (``libmpi.so.12``):
under an MPI of another ABI (Open MPI) it does not import and this form runs.

The common message is small and in order: :meth:`Prober.probe` receives it
into a fresh ``bytearray`` and hands it to its channel's sink at once (the
inbound side's ``on_data`` for a data message: no tuple, list or Python
dispatch between ``Mrecv`` and the code that reads it).  Anything else
-- a message of ``small`` bytes or more (a numpy buffer, the receiver's
allocation hook, an ``Imrecv``), or one from a source whose earlier large
message is still landing (``fifo``) -- is matched and handed back for the
engine to handle the long way; no message is received out of order or twice.

The common send is one frame to one host, completed at once (eager): a
:class:`SendLane` per (host, channel) does it in one call -- the ``Isend``,
its ``Test``, the engine's counters and the doorbell's rule -- where the
general path (:meth:`~aiopdbp.transport.sends.Sends.post`)
crosses the transport and the engine in Python.  A large payload's receive,
posted when its header arrived, is one call of the engine's
:class:`BulkRecv`: its buffer, the ``Irecv``, its ``Test`` and the counters.
"""

from __future__ import annotations

import functools
from time import perf_counter
from typing import Any

from mpi4py import MPI

__all__ = ["BulkRecv", "Prober", "SendLane", "post_one", "recv_one"]

_ANY_SOURCE = MPI.ANY_SOURCE
_BYTE = MPI.BYTE


def post_one(comm: MPI.Comm, buf: Any, dest: int, tag: int) -> MPI.Request | None:
    """``Isend`` of the bytes of ``buf`` to rank ``dest`` with ``tag``, and one
    ``Test``: None when it completed at once (eager), else its request (the
    caller keeps ``buf`` alive until the request completes)."""
    req = comm.Isend([buf, _BYTE], dest, tag)
    if req.Test():
        return None
    return req


class SendLane:
    """One-frame sends to rank ``dest`` on ``comm`` with ``tag``, counted.

    ``post(buf)`` is :func:`post_one` plus what the engine's send path does
    around it: refuse once the lane is shut (``refuse()`` raises the reason),
    count the send and its bytes, ring the doorbell ``bell`` when the last
    send to ``dest`` (``last[dest]``, the engine's list, shared by every lane)
    is older than ``after`` seconds, and hand a send that did not complete at
    once to ``pending(request, buf)``, whose future it returns (None: it
    completed).  The engine adds the counters to its own and shuts the lane
    (``open = False``) when it fails or its transport closes; ``bell`` is
    None when there is no doorbell (or it was closed).

    With ``bulk`` (the large payloads' communicator), ``post_pair(head, buf,
    tag, done)`` is a split frame's two posts in one call: ``head`` as
    ``post`` posts it (one that does not complete at once is handed to
    ``pending`` and its future dropped: nobody waits for a header), then
    ``buf`` on ``bulk`` with ``tag``; None when the payload's send
    completed at once, else ``pending_bulk(request, buf, done)``'s future.
    """

    __slots__ = ("after", "bell", "bulk", "bulk_sends", "comm", "dest", "fast", "last", "nbytes", "open",
                 "pending", "pending_bulk", "refuse", "sends", "tag")

    def __init__(self, comm: MPI.Comm, dest: int, tag: int, last: list[float], after: float, bell: Any,
                 pending: Any, refuse: Any, bulk: MPI.Comm | None = None, pending_bulk: Any = None) -> None:
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

    def post(self, buf: Any) -> Any:
        if not self.open:
            self.refuse()
        req = post_one(self.comm, buf, self.dest, self.tag)
        self.sends += 1
        self.nbytes += len(buf) if type(buf) is bytes else memoryview(buf).nbytes
        bell = self.bell
        if bell is not None:
            now = perf_counter()
            last = self.last
            if now - last[self.dest] > self.after:
                bell.ring(self.dest)
            last[self.dest] = now
        if req is None:
            self.fast += 1
            return None
        return self.pending(req, buf)

    def post_pair(self, head: Any, buf: Any, tag: int, done: Any) -> Any:
        if not self.open:
            self.refuse()
        hreq = post_one(self.comm, head, self.dest, self.tag)
        self.sends += 1
        bell = self.bell
        if bell is not None:
            now = perf_counter()
            last = self.last
            if now - last[self.dest] > self.after:
                bell.ring(self.dest)
            last[self.dest] = now
        if hreq is None:
            self.fast += 1
        else:
            self.pending(hreq, head)
        req = post_one(self.bulk, buf, self.dest, tag)  # type: ignore[arg-type]
        self.bulk_sends += 1
        self.nbytes += len(head) + memoryview(buf).nbytes
        if req is None:
            return None
        return self.pending_bulk(req, buf, done)


def recv_one(comm: MPI.Comm, buf: Any, nbytes: int, source: int, tag: int) -> MPI.Request | None:
    """``Irecv`` of ``nbytes`` from rank ``source`` with ``tag`` into the
    writable ``buf`` (at least ``nbytes`` long), and one ``Test``: None when
    it landed at once, else its request (the caller keeps ``buf`` alive)."""
    req = comm.Irecv([buf, nbytes, _BYTE], source, tag)
    if req.Test():
        return None
    return req


class BulkRecv:
    """Large payloads' receives on ``comm`` (the bulk communicator: matched
    by source and tag, never probed), counted.

    ``post(source, tag, nbytes, out)`` receives the payload of ``nbytes``
    that rank ``source`` sent with ``tag`` into ``out`` -- or, when None,
    into a buffer of its own, ``empty(nbytes)`` for ``lo <= nbytes < hi``
    and ``alloc(nbytes)`` otherwise (the receive cache's rule, see
    :mod:`aiopdbp.transport.recvcache`) -- and tests it once: ``(buffer,
    None)`` when it landed, else ``(buffer, track)``, where ``track(done)``
    has ``later(request, buffer, done)`` call ``done(buffer)`` once it
    has landed (the engine's ``track_bulk``).  A source outside ``size`` or
    a shut receiver (``open`` False: the transport is not started, closed or
    failed) is ``refuse(source)``'s to raise.
    """

    __slots__ = ("comm", "size", "lo", "hi", "empty", "alloc", "later", "refuse", "open", "recvs", "user",
                 "nbytes")

    def __init__(self, comm: MPI.Comm, size: int, lo: int, hi: int, empty: Any, alloc: Any, later: Any,
                 refuse: Any) -> None:
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

    def post(self, source: int, tag: int, nbytes: int, out: Any) -> tuple[Any, Any]:
        if not self.open or not 0 <= source < self.size:
            self.refuse(source)
        if out is None:
            buf = self.empty(nbytes) if self.lo <= nbytes < self.hi else self.alloc(nbytes)
        else:
            buf = out
            self.user += 1
        self.recvs += 1
        self.nbytes += nbytes
        req = recv_one(self.comm, buf, nbytes, source, tag)
        if req is None:
            return buf, None
        return buf, functools.partial(self.later, req, buf)


class Prober:
    """The probe of a step: receive the messages of ``tag`` waiting on
    ``comms[start]``, then ``comms[start + 1]``, ... (channel number ``i``)
    that are shorter than ``small`` and not queued behind a large one of
    their source (a non-empty ``fifo[(i, source)]``), handing each to its
    channel's sink as soon as it is received, ``sinks[i](source,
    memoryview)``, until none is waiting or ``budget`` bytes were received:
    the whole probe of a step in one call, and no record per message
    between the receive and its sink.  A sink that raises does not stop the
    probe: ``fail(exc)`` is told and the next message is received.

    What does not change from step to step is set once, here (the engine
    makes a prober when its sinks are set); :meth:`probe` takes the rest.
    """

    __slots__ = ("comms", "tag", "status", "small", "sinks", "fifo", "fail")

    def __init__(self, comms: list[MPI.Comm], tag: int, status: MPI.Status, small: int,
                 sinks: tuple[Any, ...], fifo: dict[tuple[int, int], Any], fail: Any) -> None:
        self.comms = comms
        self.tag = tag
        self.status = status
        self.small = small
        self.sinks = sinks
        self.fifo = fifo
        self.fail = fail

    def probe(self, start: int, budget: int) -> tuple[int, int, int, MPI.Message | None]:
        """Probe from channel ``start`` on, receiving up to ``budget`` bytes.

        Returns ``(messages, bytes, ch, matched)``: ``matched`` is the first
        message this does not receive (matched, its envelope in ``status``)
        and ``ch`` its channel number, for the caller to handle (and to
        probe on from), or -1 and None.  MPI errors raise ``MPI.Exception``.
        """
        comms, tag, status, small, fifo = self.comms, self.tag, self.status, self.small, self.fifo
        n = got = 0
        for ch in range(start, len(comms)):
            improbe = comms[ch].Improbe
            sink = self.sinks[ch]
            while got < budget:
                msg = improbe(_ANY_SOURCE, tag, status)
                if msg is None:
                    break
                size = status.Get_count(_BYTE)
                src = status.Get_source()
                if size >= small or (fifo and fifo.get((ch, src))):
                    return n, got, ch, msg
                buf = bytearray(size)
                msg.Recv([buf, _BYTE])
                n += 1
                got += size
                try:
                    sink(src, memoryview(buf))
                except Exception as exc:  # a broken sink must not stop progress
                    self.fail(exc)
        return n, got, -1, None
