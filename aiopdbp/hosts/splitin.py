"""A large message's receive fast path: a split header seen before, its
payload's receive and the message, in one call (:class:`ArraysIn`).

A loop sending arrays of one shape sends the very same split header every
time (:mod:`aiopdbp.wire.codec`, "split frames of one array, cached"); the
inbound side (:mod:`aiopdbp.hosts.inbound`) keeps what each header says,
checked once, in :attr:`ArraysIn.arrays`.  When such a header comes again
from a host with nothing of its queued, :meth:`ArraysIn.take` does the rest
of the header's work: admission by grant (:meth:`ArraysIn.admissible`, the
rule :meth:`~aiopdbp.hosts.inbound.Inbound.admit` applies too), the
payload's receive (the transport's ``recv_bulk_now``, into the GP's own
buffer when it waits in ``recv_into``), and -- when the payload landed in
that receive (MPICH's single copy over shared memory, the commonest case)
-- the GP's :class:`~aiopdbp.wire.message.Message`, handed to the arrivals.

A split frame sent whole (its header and payload in one message, see
:mod:`aiopdbp.hosts.sender`, "whole frames") takes :meth:`ArraysIn.whole`:
the same work but the payload's receive -- the message is the array's
memory, the array a view of it after the header.

This class has a compiled twin (``aiopdbp.hosts.csplitin``, chosen by
:mod:`aiopdbp.hosts.splitincore`): the same method and results, one C call
instead of the Python frames of each step; ``tests/test_splitin.py`` runs
both.  It imports no asyncio and no MPI: the receive is handed in.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sized
from typing import Any

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.codec import SplitArray
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message

__all__ = ["ArraysIn", "PLEN_AT", "whole_head_len"]

#: where a REMOTE frame's payload length is (its one record's last field:
#: :mod:`aiopdbp.wire.codec`'s level-2 record after the level-1 header)
PLEN_AT = 8 + 35
_PLEN = struct.Struct("<Q")
#: a split header longer than this is not cached (the inbound side's rule)
_HEAD_MAX = 512


def whole_head_len(buf: Any) -> int:
    """The header's length in a whole REMOTE frame ``buf`` (its length less
    the payload length its record says), or 0 when that is no header
    length one of :class:`ArraysIn`'s could have."""
    n = len(buf)
    if n < PLEN_AT + 8:
        return 0
    hlen = n - _PLEN.unpack_from(buf, PLEN_AT)[0]
    return hlen if PLEN_AT + 8 <= hlen <= _HEAD_MAX else 0

#: ``recv_bulk_now(source, tag, nbytes, out) -> (buffer, track or None)`` (see the transport)
PostFn = Callable[[int, int, int, Any], tuple[Any, Any]]


class ArraysIn:
    """Split headers of one GP's array seen before (``arrays``: header
    bytes -> :class:`~aiopdbp.wire.codec.SplitArray`) and what their payloads
    take.  ``post`` receives a payload (None: the transport has no receive
    that hands back a landed payload, and every header takes the queue);
    ``tags`` is the number of bulk tags; ``book`` the receive side's credit
    book (None: no admission check); ``landing(pid, nbytes)`` a GP's own
    buffer or None, asked only while ``waiting`` (the GPs in ``recv_into``)
    is not empty; ``names`` the names known here (pid -> name), and
    ``name_of(pid)`` the name of one not in it; ``place(host, pids,
    message, cost)`` delivers (the arrivals')."""

    __slots__ = ("arrays", "post", "tags", "book", "landing", "waiting", "names", "name_of", "place")

    def __init__(self, arrays: dict[bytes, SplitArray], post: PostFn | None, tags: int, book: Any,
                 landing: Callable[[int, int], Any] | None, waiting: Sized, names: dict[int, str],
                 name_of: Callable[[int], str], place: Callable[[int, tuple[int, ...], Any, int], None]) -> None:
        self.arrays = arrays
        self.post = post
        self.tags = tags
        self.book = book
        self.landing = landing
        self.waiting = waiting
        self.names = names
        self.name_of = name_of
        self.place = place

    def admissible(self, host: int, pid: int, nbytes: int, ahead: int) -> int:
        """The credit a payload of ``nbytes`` for GP ``pid`` takes, checked
        against what this host granted ``host`` (``ahead``: the credit of its
        payloads admitted and not delivered yet): a
        :class:`~aiopdbp.errors.ProtocolError` beyond it."""
        cost = nbytes + CREDIT_OVERHEAD
        book = self.book
        if book is not None:
            out = book.outstanding(host, pid) + ahead
            if out > 0 and out + cost > book.window:
                raise ProtocolError(f"host {host} announced a {nbytes}-byte payload for GP {pid} beyond the "
                                    f"credit granted to it ({max(0, book.window - out)} bytes left)")
        return cost

    def take(self, s: Any, buf: Any) -> Any:
        """A split header ``buf`` from host ``s.host`` (its inbound state:
        ``host``, ``bulk_seq``) with nothing of that host queued.  Returns
        None when the header was not seen before (the caller decodes it);
        True when its payload landed and the message was delivered; else
        ``(head, arr, cost, track)``: the header's bytes and what they say,
        and -- when ``track`` is not None -- the admitted credit and the
        transport's ``track(done)`` of the payload still landing (the caller
        queues it); ``track`` None: the caller takes the queue's way
        (``post`` is None, or the array is not one GP's)."""
        head = bytes(buf)
        arr = self.arrays.get(head)
        if arr is None:
            return None
        pid = arr.pid
        post = self.post
        if post is None or not pid:
            return head, arr, 0, None
        host = s.host
        nbytes = arr.nbytes
        out = self.landing(pid, nbytes) if self.waiting and self.landing is not None else None
        cost = self.admissible(host, pid, nbytes, 0)   # (nothing queued: nothing announced)
        tag = s.bulk_seq
        s.bulk_seq = (tag + 1) % self.tags
        try:
            got, track = post(host, tag, nbytes, out)
        except MemoryError:
            raise ProtocolError(f"no memory for the {nbytes}-byte payload announced by host {host}") from None
        if track is not None:
            return head, arr, cost, track
        source_p = arr.source_p
        name = self.names.get(source_p) or self.name_of(source_p)
        self.place(host, (pid,), Message((name, arr.kind, arr.com, arr.array(got), source_p)), cost)
        return True

    def whole(self, s: Any, buf: Any) -> bool:
        """A split frame sent whole, ``buf`` (a writable buffer of its own),
        from host ``s.host`` with nothing of that host queued: True when its
        header was seen before and the message -- its array a view of
        ``buf`` after the header -- was delivered; False (nothing done) when
        the caller decodes it (a header not seen before, not one GP's array,
        a GP waiting in ``recv_into``, no ``post``: as :meth:`take`)."""
        hlen = whole_head_len(buf)
        if not hlen:
            return False
        arr = self.arrays.get(bytes(buf[:hlen]))
        if arr is None or self.post is None or not arr.pid or (self.waiting and self.landing is not None):
            return False
        pid = arr.pid
        host = s.host
        cost = self.admissible(host, pid, arr.nbytes, 0)   # (nothing queued: nothing announced)
        source_p = arr.source_p
        name = self.names.get(source_p) or self.name_of(source_p)
        data = arr.array(memoryview(buf)[hlen:])
        self.place(host, (pid,), Message((name, arr.kind, arr.com, data, source_p)), cost)
        return True

