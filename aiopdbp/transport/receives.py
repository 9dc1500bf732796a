"""The receive side of the progress engine: matching, receiving and landing
messages, delivered in arrival order per (channel, source).

:class:`Receives` does step 1 and step 3 of a progress step (see
:mod:`aiopdbp.transport.progress`): it probes the control communicator, then
the data one; the common message -- small, in order -- is matched and
received by the kernel (:class:`aiopdbp.transport.kernel.Prober`,
compiled where it is built) and handed to its channel's sink there, and what the kernel leaves matched is received here,
inline (``Mrecv``) up to ``inline_limit`` or with an ``Imrecv`` posted a byte
budget per step, so that a control message behind a data backlog is found
after one probe per backlog message.  Every message goes to its channel's
sink the moment it is received (or, behind a large one of its source still
landing, the moment that one has landed).  Large payloads announced by a header (the bulk
communicator, never probed) land in buffers posted by :attr:`Receives.bulk_in`
(the kernel's :class:`~aiopdbp.transport.kernel.BulkRecv`).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
from mpi4py import MPI

from aiopdbp.transport.base import AllocFn, Channel, SinkFn
from aiopdbp.transport.core import kernel_core
from aiopdbp.transport.kernel import Prober
from aiopdbp.transport.recvcache import NUMPY_ALLOC_THRESHOLD, RECV_CACHE_MIN_SIZE, RecvBufferCache

__all__ = ["KERNEL_RECV_MAX", "Receives", "STEP_RECV_BYTES"]

#: a step stops receiving after this many bytes (fairness with the sends)
STEP_RECV_BYTES: Final = 1 << 20
#: the largest message the receive kernel takes itself (a lone message of a
#: few KiB included); larger ones land in a pooled or numpy buffer here
KERNEL_RECV_MAX: Final = 16384

_BYTE = MPI.BYTE
_CHANNELS = (Channel.CONTROL, Channel.DATA)  # index -> member, without an enum call


class _RecvOp:
    """A matched large message: its buffer, and whether its bytes have landed."""

    __slots__ = ("channel", "source", "view", "done")

    def __init__(self, channel: int, source: int, view: Any) -> None:
        self.channel = channel
        self.source = source
        self.view = view
        self.done = False


class Receives:
    """The receives of one progress engine (its communicators ``comms``,
    ``comms[i]`` for ``Channel(i)``, all on ``tag``; ``bulk``: the large
    payloads' communicator).  ``report(message, exc)`` tells the loop's
    exception handler what went wrong without stopping progress.
    :meth:`start` names where messages go: ``sinks[i](source, buffer)`` for
    ``Channel(i)``, ``fail(exc)`` when a sink raised."""

    def __init__(self, comms: Sequence[MPI.Comm], tag: int, inline_limit: int, cache_bytes: int,
                 bulk: MPI.Comm | None, report: Callable[[str, BaseException], None]) -> None:
        self._comms = list(comms)
        self._tag = tag
        self._inline_limit = inline_limit
        self._bulk = bulk
        self._report = report
        self._cache = RecvBufferCache(cache_bytes, RECV_CACHE_MIN_SIZE)
        self._status = MPI.Status()
        # large receives in flight: (request, op); matched, not posted yet, per channel
        self._recvs: list[tuple[Any, _RecvOp]] = []
        #: payloads posted by post_bulk: (request, buffer, done callback)
        self.bulk_recvs: list[tuple[Any, Any, Callable[[Any], None]]] = []
        self._matched: list[collections.deque[tuple[Any, Any, _RecvOp]]] = [
            collections.deque() for _ in self._comms]
        # per (channel, source): arrivals waiting behind a large one still landing
        self._fifo: dict[tuple[int, int], collections.deque[_RecvOp]] = {}
        self._alloc: AllocFn | None = None
        self._alloc_min = 0           # messages below this skip the alloc hook
        self._sinks: tuple[SinkFn, ...] = ()
        self._fail: Callable[[Exception], None] = _unstarted
        self._nmatched = 0            # messages in _matched
        #: large payloads' receives (the kernel's BulkRecv), made by bulk()
        self.bulk_in: Any = None
        self._small_limit = self._small()
        self._prober = self._make_prober()
        self.n_recvs = self.bytes_recv = 0
        self.n_alloc_errors = self.n_user_allocs = 0

    def start(self, sinks: tuple[SinkFn, SinkFn], fail: Callable[[Exception], None], alloc: AllocFn | None,
              alloc_min: int) -> None:
        """Messages go to ``sinks`` (one per channel); those of at least
        ``alloc_min`` bytes land in buffers ``alloc`` gives."""
        self._sinks = sinks
        self._fail = fail
        self._alloc = alloc
        self._alloc_min = alloc_min
        self._small_limit = self._small()
        self._prober = self._make_prober()

    def _make_prober(self) -> Prober:
        """The kernel's prober, holding what the probe of every step needs
        but where it starts and its budget (made again when the sinks change)."""
        prober: Prober = kernel_core.Prober(self._comms, self._tag, self._status, self._small_limit,
                                            self._sinks, self._fifo, self._fail)
        return prober

    def pending(self) -> bool:
        """True while a receive of ours is matched or landing."""
        return bool(self._recvs or self.bulk_recvs or self._nmatched)

    def inflight(self) -> int:
        return len(self._recvs) + len(self.bulk_recvs)

    def abandon(self) -> tuple[Any, ...]:
        """Give up on every receive; what MPI may still write into, to keep alive."""
        kept = (list(self._recvs), [list(m) for m in self._matched], list(self.bulk_recvs))
        self._recvs.clear()
        self.bulk_recvs.clear()
        for m in self._matched:
            m.clear()
        self._nmatched = 0
        self._fifo.clear()
        return kept

    def stats(self) -> dict[str, int]:
        bulk = self.bulk_in
        return {"recvs": self.n_recvs, "bytes_recv": self.bytes_recv + (bulk.nbytes if bulk is not None else 0),
                "bulk_recvs": bulk.recvs if bulk is not None else 0,
                "bulk_recvs_user": bulk.user if bulk is not None else 0, "alloc_errors": self.n_alloc_errors,
                "user_allocs": self.n_user_allocs, "recv_cache_hits": self._cache.hits,
                "recv_cache_misses": self._cache.misses}

    def bulk(self, size: int, later: Callable[[Any, Any, Callable[[Any], None]], None],
             refuse: Callable[[int], None]) -> Any:
        """The receives of large payloads from ranks below ``size`` (the
        kernel's :class:`~aiopdbp.transport.kernel.BulkRecv`: shut until
        opened), into buffers of the receive cache's rule; one that does not
        land at once goes to ``later(request, buffer, done)``."""
        assert self._bulk is not None
        cache = self._cache
        # below the cache's sizes a plain numpy buffer, without the cache's frame
        hi = cache.min_size if cache.capacity > 0 else 1 << 62
        self.bulk_in = kernel_core.BulkRecv(self._bulk, size, NUMPY_ALLOC_THRESHOLD, hi,
                                            functools.partial(np.empty, dtype=np.uint8), cache.alloc, later, refuse)
        return self.bulk_in

    def complete_bulk(self, landed: list[tuple[Callable[[Any], None], Any]]) -> bool:
        """Large payloads that landed, as ``(done, buffer)`` into ``landed``; True if any."""
        still = []
        for item in self.bulk_recvs:
            if item[0].Test():
                landed.append((item[2], item[1]))
            else:
                still.append(item)
        if len(still) == len(self.bulk_recvs):
            return False
        self.bulk_recvs = still
        return True

    def _buffer(self, src: int, ch: int, size: int) -> tuple[Any, Any]:
        """(buffer to receive into, object to deliver): the alloc hook's
        buffer is delivered as it is, our own as a memoryview."""
        if self._alloc is not None and size >= self._alloc_min:
            try:
                buf = self._alloc(src, _CHANNELS[ch], size)
                if buf is not None:
                    mv = memoryview(buf)
                    if mv.nbytes != size or mv.readonly or not mv.c_contiguous:
                        raise ValueError(f"alloc hook gave a {'read-only ' if mv.readonly else ''}"
                                         f"buffer of {mv.nbytes} bytes for a {size}-byte message")
            except Exception as exc:  # a broken hook must not stop progress
                self.n_alloc_errors += 1
                self._report("aiopdbp: MPI transport alloc hook failed; using an own buffer", exc)
                buf = None
            if buf is not None:
                self.n_user_allocs += 1
                return buf, buf
        buf = self._cache.alloc(size)
        return buf, memoryview(buf)

    def _small(self) -> int:
        """Messages shorter than this are the receive kernel's: received
        into a ``bytearray`` (uninitialised in the compiled kernel), up to
        :data:`KERNEL_RECV_MAX` and never one the alloc hook wants."""
        small = min(KERNEL_RECV_MAX, self._inline_limit + 1)
        return small if self._alloc is None else min(small, self._alloc_min)

    def receive(self) -> bool:
        """Match, receive and complete what has come, handing each message
        to its channel's sink in order per (channel, source); True if
        anything happened."""
        status = self._status
        got = 0
        busy = False
        inline = self._inline_limit
        fifo = self._fifo
        probe = self._prober.probe
        ch = 0
        while True:
            # the common message (small, in order) in the kernel, every
            # channel in one call, each handed to its sink there; what it
            # leaves matched comes here, its envelope in `status`
            n, nbytes, ch, msg = probe(ch, STEP_RECV_BYTES - got)
            if n:
                busy = True
                self.n_recvs += n
                self.bytes_recv += nbytes
                got += nbytes
            if msg is None:
                break
            busy = True
            src = status.Get_source()
            size = status.Get_count(_BYTE)
            self.n_recvs += 1
            self.bytes_recv += size
            if size <= inline:
                got += size
            buf, view = self._buffer(src, ch, size)
            q = fifo.get((ch, src))
            if size <= inline:
                msg.Recv([buf, _BYTE])
                if q:
                    op = _RecvOp(ch, src, view)
                    op.done = True
                    q.append(op)
                else:
                    self._hand(ch, src, view)
            else:
                # Only matched now; its Irecv is posted below, a budget
                # per step, so that probing (control first) goes on
                # while a data backlog lands.
                op = _RecvOp(ch, src, view)
                if q is None:
                    q = fifo[(ch, src)] = collections.deque()
                q.append(op)
                self._matched[ch].append((msg, buf, op))
                self._nmatched += 1
        if not self._nmatched and not self._recvs:
            return busy   # the commonest: nothing matched or landing
        for matched in self._matched:
            while matched and got < STEP_RECV_BYTES:
                msg, buf, op = matched.popleft()
                self._nmatched -= 1
                self._recvs.append((msg.Irecv([buf, _BYTE]), op))
                got += op.view.nbytes if hasattr(op.view, "nbytes") else len(op.view)
                busy = True
        if self._recvs:
            still = []
            for req, op in self._recvs:
                if req.Test():
                    op.done = True
                    busy = True
                    self._release(op.channel, op.source)
                else:
                    still.append((req, op))
            self._recvs = still
        return busy

    def _release(self, ch: int, src: int) -> None:
        q = self._fifo[(ch, src)]
        while q and q[0].done:
            op = q.popleft()
            self._hand(op.channel, op.source, op.view)
        if not q:
            del self._fifo[(ch, src)]

    def _hand(self, ch: int, src: int, view: Any) -> None:
        """A message received here (not by the kernel) to its channel's sink."""
        try:
            self._sinks[ch](src, view)
        except Exception as exc:  # a broken sink must not stop progress
            self._fail(exc)


def _unstarted(exc: Exception) -> None:
    raise RuntimeError("Receives.start() was not called") from exc
