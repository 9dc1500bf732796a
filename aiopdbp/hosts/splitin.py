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

This class has a compiled twin (``aiopdbp.hosts.csplitin``, chosen by
:mod:`aiopdbp.hosts.splitincore`): the same method and results, one C call
instead of the Python frames of each step; ``tests/test_splitin.py`` runs
both.  It imports no asyncio and no MPI: the receive is handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Any

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.codec import SplitArray
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message

__all__ = ["ArraysIn"]

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
    message, cost)`` delivers (the arrivals'); ``place_one(host, pid,
    message, cost)``, where given, delivers into an open pipe in one call
    (the arrivals' placer: False where the GP has none here, and ``place``
    does it)."""

    __slots__ = ("arrays", "post", "tags", "book", "landing", "waiting", "names", "name_of", "place", "place_one")

    def __init__(self, arrays: dict[bytes, SplitArray], post: PostFn | None, tags: int, book: Any,
                 landing: Callable[[int, int], Any] | None, waiting: Sized, names: dict[int, str],
                 name_of: Callable[[int], str], place: Callable[[int, tuple[int, ...], Any, int], None],
                 place_one: Callable[[int, int, Any, int], bool] | None = None) -> None:
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
        msg = Message((name, arr.kind, arr.com, arr.array(got), source_p))
        if self.place_one is None or not self.place_one(host, pid, msg, cost):
            self.place(host, (pid,), msg, cost)
        return True

