"""Inbound data: the receive pool (RBP), decoding, delivery to the arrivals.

Theory of operation
-------------------
The transport asks :meth:`Inbound.alloc` for a buffer before it receives a
data message: one up to ``block_size`` lands in a block of the sub-pool
RCBP_src.  A block of short messages (BPS) is decoded in bulk into
:class:`~aiopdbp.wire.message.Message` objects, handed to the arrivals per
destination GP, and the block is released at once; everything else that
landed in a block has its payload copied out first -- full records (BP), and
the payload half of a split frame, which the transport may have put in a
block because it allocates when it probes, before the header half is
delivered.  Messages larger than a block arrive in their own buffer and are
not copied.

Delivery goes up through two small doors handed in at construction:
:class:`Deliver` (the arrivals: messages per destination GP) and
:class:`StreamSink` (the stream table: stream CDUs).  A malformed message
fails its host (``fail_host``) with a :class:`~aiopdbp.errors.ProtocolError`.

*Bulk payloads* (a transport with ``bulk_tags``: MPI).  The header half of
a split frame (:func:`~aiopdbp.wire.codec.split_target` reads its payload
size and destination GP) makes the inbound path post the receive of its
payload -- tag: the frame's number from that host -- into the buffer it will
be delivered in: the destination GP's own when it waits in
:meth:`~aiopdbp.runtime.process.GP.recv_into` with an empty pipe and the
payload fits (:class:`~aiopdbp.routing.router.Landings`), else a pooled,
recycled one from the transport's receive cache.  Until it has landed, later
data messages from that host wait behind it (per-source order); a later
split header posts its own receive at once, so payloads land in parallel.
The credit the sender reserved admitted these bytes (see
:mod:`aiopdbp.hosts.link`, "Large payloads"), and this side checks it
(*admission by grant*, :meth:`Inbound.admit`): a header that asks for more
than this host granted its sender -- the credit book's outstanding bytes
plus the payloads admitted and not delivered yet -- is a ``ProtocolError``
that fails the sender, and no receive is posted for it; so the landing
buffers are bounded by the credit windows, whatever a peer announces.  A header that announces one GP's array is
checked once and kept per header bytes (:func:`~aiopdbp.wire.codec.split_array`):
when the same bytes come again (a loop sending arrays of one shape),
:meth:`Inbound.on_data` hands the header to :class:`~aiopdbp.hosts.splitin.ArraysIn`,
which admits it, posts the payload's receive and, when the payload landed in
that receive, delivers the GP's message, all in one call (compiled where
built) -- no decoder, no queue entry.

*Closing.*  The transport's count exchange says how many data messages
all hosts together sent here, and :meth:`Inbound.arrived` tells when as many
arrived; without it, each host's BYE says how many it sent, and
:meth:`Inbound.drained` tells when as many arrived from everyone (in both,
every payload has landed).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Collection, Sized
from typing import Any, Protocol, cast

import numpy as np

from aiopdbp.errors import ProtocolError, WouldBlock
from aiopdbp.hosts.gate import CreditBook
from aiopdbp.hosts.splitincore import ArraysIn
from aiopdbp.pool import RecvPool, Slot
from aiopdbp.transport.base import Channel, Transport
from aiopdbp.wire.codec import (SPLIT_CACHE_MAX, SplitArray, decode, decode_split, split_array,
                                split_stream_key, split_target)
from aiopdbp.wire.mesp import CDU, L1, Kind, MsgType, peek_header
from aiopdbp.wire.control import ByeMsg, CreditMsg, decode_control
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message, credit_cost

log = logging.getLogger("aiopdbp.hosts.inbound")

__all__ = ["RBP_MIN", "Deliver", "Inbound", "StreamSink"]

#: data messages smaller than this (a lone message, a handful of records)
#: skip the receive pool: the transport's receive kernel takes them into a
#: plain buffer in one C call, where a pool block costs the hook, the pool's
#: bookkeeping and a receive in Python
RBP_MIN = 16384
_DATA = Channel.DATA
_BPS = int(MsgType.BPS)
_REMOTE = int(MsgType.REMOTE)
_CREDIT = int(MsgType.CREDIT)
#: split headers are this long at most when cached (one GP, a few dimensions)
_HEAD_MAX = 512


class Deliver(Protocol):
    """Where arrived messages go (:mod:`aiopdbp.routing.arrivals`)."""

    def place_shorts(self, host: int, buf: Any) -> None: ...
    def place_messages(self, host: int, pids: tuple[int, ...], item: Any, cost: int) -> None: ...
    def deliver_carried(self, pid: int, fields: tuple[Any, ...]) -> bool: ...


class StreamSink(Protocol):
    """Where arrived stream CDUs go (the stream table, :mod:`aiopdbp.streams.table`)."""

    def place(self, host: int, cdu: CDU) -> None: ...
    def landing(self, key: tuple[int, int], nbytes: int) -> Any | None: ...


class _Landing:
    """A large payload announced by its header, landing (bulk receive)."""

    __slots__ = ("head", "arr", "buf", "pid", "cost")

    def __init__(self, head: bytes, arr: SplitArray | None, pid: int = 0, cost: int = 0) -> None:
        self.head = head
        self.arr = arr          # what the header says, when it is one GP's array
        self.buf: Any = None    # the buffer, once the payload has landed
        self.pid = pid          # the GP it was admitted for (0: a stream segment, a multicast)
        self.cost = cost        # the credit it was admitted with


class _Source:
    """Receive side of one remote host."""

    __slots__ = ("host", "split_head", "received", "bye", "queue", "bulk_seq", "announced")

    def __init__(self, host: int) -> None:
        self.host = host
        self.split_head: bytes | None = None
        self.received = 0       # data messages taken off the network
        self.bye: int | None = None
        # arrivals behind a payload still landing, in order: _Landing or a data message
        self.queue: deque[_Landing | memoryview] = deque()
        self.bulk_seq = 0       # the next split frame's bulk tag
        # credit of payloads admitted and not delivered yet, per GP (see Inbound.admit)
        self.announced: dict[int, int] = {}


class Inbound:
    """Data messages from the other hosts: receive buffers, decoding, delivery."""

    def __init__(self, rank: int, size: int, pool: RecvPool, deliver: Deliver, streams: StreamSink, *,
                 name_of: Callable[[int], str], fail_host: Callable[[int, BaseException], None],
                 block_size: int, allow_pickle: bool, bulk: Transport | None = None,
                 landing: Callable[[int, int], Any] | None = None, book: CreditBook | None = None,
                 on_credit: Callable[[int, CreditMsg], None] | None = None, waiting: Sized | None = None,
                 names: dict[int, str] | None = None) -> None:
        self.rank, self.size = rank, size
        self._on_credit = on_credit  # grants a split header carried (hosts.credit, "Grants carried")
        self.credit_carried = 0      # data messages that carried grants
        self._grant_frames: dict[bytes, CreditMsg] = {}  # CREDIT frames seen -> what they say
        self._book = book  # what this host granted each sender (admission by grant)
        self._bulk = bulk if getattr(bulk, "bulk_tags", 0) else None
        self._landing = landing  # (pid, nbytes) -> a GP's own buffer (recv_into) or None
        self._pool = pool
        self._deliver = deliver
        self._streams = streams
        self._name_of = name_of
        self._fail_host = fail_host
        self._block_size = block_size
        self._allow_pickle = allow_pickle
        self._sources: dict[int, _Source] = {}   # made at each host's first message
        self._slots: dict[int, Slot] = {}
        # split headers of one GP's array seen before -> what they say (checked
        # once: the same bytes say the same; see aiopdbp.wire.codec)
        self._arrays: dict[bytes, SplitArray] = {}
        place = getattr(deliver, "place_messages", None)
        # a header seen before, its payload's receive and the message in one
        # call (hosts.splitin) where the bulk transport hands back a payload
        # landed at once (no callback, no _Landing): MPI's (see Transport.recv_bulk)
        now = getattr(self._bulk, "recv_bulk_now", None) if place is not None else None
        self._in = ArraysIn(self._arrays, now, getattr(self._bulk, "bulk_tags", 0), book, landing,
                            (1,) if waiting is None else waiting, {} if names is None else names, name_of,
                            cast(Callable[[int, tuple[int, ...], Any, int], None], place),  # (None: never called)
                            getattr(deliver, "place_one", None))  # (the arrivals' placer, where it has one)
        self.protocol_errors = 0   # malformed data messages
        self.fallback_allocs = 0   # receives that found the pool row full

    def alloc(self, src: int, channel: Channel, nbytes: int) -> memoryview | None:
        """Where the transport receives a data message: a block of RCBP_src
        (None: the transport's own buffer -- control messages, payload
        halves of split frames, messages larger than a block, and lone
        messages below :data:`RBP_MIN`)."""
        if channel != _DATA or not RBP_MIN <= nbytes <= self._block_size or src == self.rank:
            return None
        s = self._source(src)
        if s is None or s.split_head is not None:
            return None
        try:
            slot = self._pool.acquire_nowait(src, nbytes)
        except (WouldBlock, Exception):
            # The row is full and Algorithm 1 may not grow it: a private
            # buffer instead (the senders' credit still bounds it).
            self.fallback_allocs += 1
            return None
        view = slot.view[:nbytes]
        self._slots[id(view)] = slot
        return view

    def on_data(self, src: int, buf: memoryview) -> None:
        """One data message from host ``src`` (the transport's callback)."""
        s = self._sources.get(src)  # (the commonest: a host heard from before, no call)
        if s is None:
            s = self._source(src)
            if s is None:
                return
        s.received += 1
        if s.bye is not None and s.received > s.bye:
            self._malformed(src, ProtocolError(f"data message {s.received} after a BYE that said {s.bye}"))
            return
        # Only where a peer may carry grants: elsewhere a split frame's
        # payload follows its header on this channel, and its bytes are the user's.
        if self._on_credit is not None and len(buf) > 1 and buf[1] == _CREDIT:
            try:
                buf = self._carried(src, buf)
            except ProtocolError as exc:
                self._malformed(src, exc)
                return
        if s.queue:
            self._behind(s, buf)
            return
        if s.split_head is None and len(buf) > 1 and not self._slots:
            mt = buf[1]
            if mt == _BPS:
                # the commonest: short messages in a plain buffer (checked in decode)
                try:
                    self._deliver.place_shorts(src, buf)
                except ProtocolError as exc:
                    self._malformed(src, exc)
                return
            if mt == _REMOTE and len(buf) <= _HEAD_MAX and self._arrays:
                try:  # a split header seen before: its payload's receive and message now
                    got = self._in.take(s, buf)
                    if got is not None and got is not True:
                        self._land_later(s, *got)
                except ProtocolError as exc:
                    self._malformed(src, exc)
                    return
                if got is not None:
                    return
        slot = self._slots.pop(id(buf), None) if self._slots else None
        try:
            if slot is None:
                self._place(s, buf, False)
                return
            # The block is in RCBP_src; it is decoded and copied out here, at
            # once, so the RBP reader is this same step: it goes back by
            # consume(), not a commit/next_filled/release round (~5 us).
            try:
                self._place(s, buf, True)
            finally:
                rpool = self._pool
                if not rpool.consume(slot):  # older blocks first: the FIFO round
                    rpool.commit(slot, memoryview(buf).nbytes)
                    rpool.release(rpool.next_filled_nowait(src))
        except ProtocolError as exc:
            self._malformed(src, exc)

    def _carried(self, src: int, buf: memoryview) -> memoryview:
        """A split header that carries credit grants (one CREDIT control
        frame before it, see :mod:`aiopdbp.hosts.credit`, "Grants carried"):
        hand them on, return the header."""
        if self._on_credit is None or id(buf) in self._slots:
            raise ProtocolError("credit grants carried by a data message this host cannot take them on")
        mv = memoryview(buf)
        _, body_len = peek_header(mv)
        n = L1.size + body_len
        if len(mv) <= n + 1 or mv[n + 1] != _REMOTE:
            raise ProtocolError("credit grants carried by something other than a split header")
        frame = bytes(mv[:n])
        msg = self._grant_frames.get(frame)
        if msg is None:  # (a request/response of one size carries the same grant every time)
            got = decode_control(frame)
            assert type(got) is CreditMsg  # (a CREDIT frame decodes to nothing else)
            if len(self._grant_frames) >= 64:
                self._grant_frames.clear()
            msg = self._grant_frames[frame] = got
        self.credit_carried += 1
        self._on_credit(src, msg)
        return mv[n:]

    def _malformed(self, src: int, exc: ProtocolError) -> None:
        self.protocol_errors += 1
        log.error("malformed data message from host %d: %s", src, exc)
        self._fail_host(src, ProtocolError(f"malformed data message from host {src}: {exc}"))

    def _place(self, s: _Source, buf: memoryview, in_block: bool) -> None:
        """Decode one data message from host ``s.host`` and hand it on."""
        host = s.host
        if s.split_head is not None:
            head, s.split_head = s.split_head, None
            # The payload half may sit in a pool block too: the transport
            # allocates when it probes, before the header half is delivered.
            self._place_cdu(host, decode_split(head, buf), in_block)
            return
        if len(buf) > 1 and buf[1] == _BPS:  # the commonest: short messages (checked in decode)
            self._deliver.place_shorts(host, buf)
            return
        mt, body_len = peek_header(buf)
        if mt is MsgType.REMOTE and memoryview(buf).nbytes < 8 + body_len:
            if self._bulk is not None:
                self._land(s, bytes(buf))
            else:
                s.split_head = bytes(buf)   # header now, payload next
            return
        for cdu in decode(buf, allow_pickle=self._allow_pickle):
            if isinstance(cdu, CDU):
                self._place_cdu(host, cdu, in_block)

    def _place_cdu(self, host: int, cdu: CDU, in_block: bool) -> None:
        data = cdu.data
        if data is not None and (in_block or (type(data) is memoryview and cdu.kind is not Kind.STREAM)):
            # Out of the pool block before it is reused; message payloads
            # are bytes (as on one host).
            cdu.data = _own(data, cdu.kind)
        if cdu.kind is Kind.STREAM:
            self._streams.place(host, cdu)
            return
        msg = Message((self._name_of(cdu.source_p), cdu.kind, cdu.com, cdu.data, cdu.source_p))
        self._deliver.place_messages(host, cdu.dest_ps, msg, credit_cost(cdu.data))

    # ------------------------------------------------------ bulk payloads
    def _land(self, s: _Source, head: bytes, arr: SplitArray | None = None) -> None:
        """A split frame's header: post the receive of its payload (bulk tag:
        the frame's number from this host) into a GP's own buffer if it
        waits in ``recv_into`` for exactly this, a stream segment into its
        place in the stream's array (:meth:`StreamSink.landing`), else a
        pooled one; deliver it, in order, once it has landed."""
        bulk = self._bulk
        assert bulk is not None
        if arr is None:
            arr = self._arrays.get(head)
        if arr is not None:
            nbytes, pid, stream = arr.nbytes, arr.pid, False
        else:
            nbytes, pid, stream = split_target(head)
            if pid and not stream:
                arr = split_array(head)
                if arr is not None:
                    if len(self._arrays) >= SPLIT_CACHE_MAX:
                        self._arrays.clear()
                    self._arrays[head] = arr
        out = None
        if stream:  # a segment: its slice of the array the reader gets, if the stream keeps one
            out = self._streams.landing(split_stream_key(head), nbytes)
        elif pid and self._landing is not None and not s.queue:
            # One GP's array, and nothing of this host's is ahead of it (the
            # GP's next message must be this one): its own buffer may do.
            out = self._landing(pid, nbytes)
        cost = self.admit(s, pid, nbytes) if pid and not stream else 0
        entry = _Landing(head, arr, pid if cost else 0, cost)
        s.queue.append(entry)   # before the receive: it may land at once
        tag = s.bulk_seq
        s.bulk_seq = (tag + 1) % bulk.bulk_tags
        try:
            bulk.recv_bulk(s.host, tag, nbytes, out, functools.partial(self._landed, s, entry))
        except MemoryError:
            # what the header announced cannot be held here: the sender's
            # fault or not, its frames cannot be taken any more
            s.queue.remove(entry)
            self._settled(s, entry)
            raise ProtocolError(f"no memory for the {nbytes}-byte payload announced by host {s.host}") \
                from None

    def _land_later(self, s: _Source, head: bytes, arr: SplitArray, cost: int, track: Any) -> None:
        """A header seen before whose payload :class:`ArraysIn` did not
        deliver in its call: still landing (``track``: the transport's), it
        takes the queue with its admitted ``cost``; else (``track`` None) the
        header takes :meth:`_land`."""
        if track is None:
            self._land(s, head, arr)
            return
        entry = _Landing(head, arr, arr.pid, cost)
        s.queue.append(entry)
        s.announced[arr.pid] = cost
        track(functools.partial(self._landed, s, entry))

    def admit(self, s: _Source, pid: int, nbytes: int) -> int:
        """Admission by grant, before a payload's receive is posted: the
        credit (``nbytes`` + the per-message overhead) a split header asks
        for GP ``pid``, which must be within what this host granted
        ``s.host`` -- what the sender's own rule allows (the credit book's
        view, :meth:`~aiopdbp.hosts.gate.CreditBook.outstanding`, plus the
        payloads admitted and not delivered yet).  Raises
        :class:`~aiopdbp.errors.ProtocolError` otherwise: no receive of a
        size nobody granted is ever posted."""
        ahead = s.announced.get(pid, 0)
        cost = self._in.admissible(s.host, pid, nbytes, ahead)
        s.announced[pid] = ahead + cost
        return cost

    def _settled(self, s: _Source, entry: _Landing) -> None:
        """An admitted payload was delivered (the book counts it now) or dropped."""
        if entry.cost:
            left = s.announced.get(entry.pid, 0) - entry.cost
            if left > 0:
                s.announced[entry.pid] = left
            else:
                s.announced.pop(entry.pid, None)

    def _landed(self, s: _Source, entry: _Landing, buf: Any) -> None:
        entry.buf = buf
        q = s.queue
        while q:
            item = q[0]
            if type(item) is _Landing:
                if item.buf is None:
                    return          # the next payload has not landed yet
                q.popleft()
                self._settled(s, item)
                try:
                    arr = item.arr
                    if arr is None:
                        self._place_cdu(s.host, decode_split(item.head, item.buf), False)
                    else:  # what decode_split and _place_cdu would give, from the cache
                        msg = Message((self._name_of(arr.source_p), arr.kind, arr.com, arr.array(item.buf),
                                       arr.source_p))
                        self._deliver.place_messages(s.host, (arr.pid,), msg, arr.nbytes + CREDIT_OVERHEAD)
                except ProtocolError as exc:
                    self._malformed(s.host, exc)
            else:
                q.popleft()
                try:
                    self._place(s, item, False)  # type: ignore[arg-type]
                except ProtocolError as exc:
                    self._malformed(s.host, exc)

    def _behind(self, s: _Source, buf: memoryview) -> None:
        """A data message from a host whose earlier payload is still landing:
        it waits its turn (a split header posts its own receive at once)."""
        slot = self._slots.pop(id(buf), None) if self._slots else None
        if slot is not None:  # out of the pool block: it is held for a while
            rpool = self._pool
            rpool.commit(slot, memoryview(buf).nbytes)
            slot = rpool.next_filled_nowait(s.host)
            try:
                buf = memoryview(bytes(buf))
            finally:
                rpool.release(slot)
        try:
            mt, body_len = peek_header(buf)
        except ProtocolError as exc:
            self._malformed(s.host, exc)
            return
        if mt is MsgType.REMOTE and memoryview(buf).nbytes < 8 + body_len and self._bulk is not None:
            try:
                self._land(s, bytes(buf))
            except ProtocolError as exc:
                self._malformed(s.host, exc)
            return
        s.queue.append(buf)

    # ---------------------------------------------------------------- closing
    def on_bye(self, src: int, msg: ByeMsg) -> None:
        """Host ``src`` closes, having sent ``msg.sent`` data messages (a
        second BYE, or one saying fewer than arrived, is a
        :class:`~aiopdbp.errors.ProtocolError`)."""
        s = self._source(src)
        if s is not None:
            if s.bye is not None:
                raise ProtocolError(f"second BYE from host {src} (said {s.bye}, now {msg.sent})")
            if msg.sent < s.received:
                raise ProtocolError(f"BYE from host {src} says {msg.sent} data messages, {s.received} arrived")
            s.bye = msg.sent

    def _source(self, src: int) -> _Source | None:
        """The state of host ``src`` (made at its first message; None: not a peer)."""
        s = self._sources.get(src)
        if s is None and 0 <= src < self.size and src != self.rank:
            s = self._sources[src] = _Source(src)
        return s

    def drained(self, failed: Collection[int]) -> bool:
        """Whether every host not in ``failed`` said BYE and everything it
        sent before has arrived."""
        for h in range(self.size):
            s = self._sources.get(h)
            if h != self.rank and h not in failed and (
                    s is None or s.bye is None or s.received < s.bye or s.queue):
                return False
        return True

    def without_bye(self, failed: Collection[int]) -> list[int]:
        """The hosts not in ``failed`` that have not said BYE."""
        return [h for h in range(self.size) if h != self.rank and h not in failed
                and ((s := self._sources.get(h)) is None or s.bye is None)]

    def arrived(self, total: int) -> bool:
        """Whether ``total`` data messages, from all hosts together, were taken
        off the network and nothing of them is still landing."""
        got = 0
        for s in self._sources.values():
            if s.queue:
                return False
            got += s.received
        return got >= total

    def received(self) -> dict[int, int]:
        """Data messages taken off the network, per host."""
        return {h: s.received for h, s in self._sources.items()}


def _own(data: Any, kind: Kind) -> Any:
    if isinstance(data, memoryview):
        return bytes(data) if kind is not Kind.STREAM else memoryview(bytes(data))
    if isinstance(data, np.ndarray):
        return data.copy()
    return data
