"""The sending half of a host link: SCBP_h's block writer and its MPI sends.

:class:`LinkSender` owns everything that turns items already admitted by
credit into MPI messages towards one host (the rules are written in
:mod:`aiopdbp.hosts.link`, "Coalescing", "Large payloads" and "Sending"):

* the open block -- a pool slot, or a private buffer when the pool row is
  full -- written by the core's :class:`~aiopdbp.wire.core.BlockWriter`,
  and sent at the end of the loop iteration or when full;
* the lone frame: the first item of a loop iteration leaves at once, in a
  frame of its own (latency);
* split frames: a large payload's header on the data channel, its payload
  as one bulk MPI message from the caller's buffer, with the grants owed to
  that host riding on the header (:mod:`aiopdbp.hosts.credit`, "Grants
  carried");
* the sends in flight: at most ``max_inflight``, the rest queued in order,
  a pool block returned once its send has completed.

Credit is not here: :class:`~aiopdbp.hosts.link.HostLink` admits an item
(:class:`~aiopdbp.hosts.gate.CreditGate`) before it hands it over -- on the
commonest send through :meth:`LinkSender.offer`, which applies the gate's
rule it was given and encodes in the same call.  This
class has a compiled twin (``aiopdbp.hosts.csender``, chosen by
:mod:`aiopdbp.hosts.sendercore`): the same methods, the same frames and
counters, with the steps from an item to its ``Isend`` as C calls instead
of Python frames.  ``tests/test_sender.py`` holds both to the same frames.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from aiopdbp.errors import WouldBlock
from aiopdbp.hosts.inbound import RBP_MIN
from aiopdbp.hosts.owned import OwnedDone, fail_owned, resolve_owned
from aiopdbp.pool import SendPool, Slot
from aiopdbp.transport.base import Channel, Transport
from aiopdbp.wire.codec import encode_cdu, encode_record, encode_split, encode_split_array
from aiopdbp.wire.control import credit_frame
from aiopdbp.wire.core import BlockWriter
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.wire.mesp import CDU, L1, MsgType
from aiopdbp.wire.shorts import STREAM_HEAD, ShortStream

log = logging.getLogger("aiopdbp.hosts.link")

__all__ = ["HOLD_BELOW", "LinkSender", "large_enough", "send_lane"]

_BPS = int(MsgType.BPS)
_BP = int(MsgType.BP)
_DATA = Channel.DATA
_STREAM_HEAD = STREAM_HEAD.pack
#: owned sends kept for fail() are pruned of the completed ones at this many
_OWNED_PRUNE = 64

#: where the transport ``holds_blocks``: a send of at most this many bytes
#: that did not complete at once holds the link's next block back until it
#: completes.  MPI takes a message this small eagerly (a shared-memory cell of
#: the bundled MPICH is 8 KiB), so it is waiting for the rank's cells, all
#: taken, and so would the next one; a larger send waits for its receiver
#: (rendezvous), and holding the small items behind it would starve them
HOLD_BELOW = 8 << 10


def send_lane(transport: Transport, host: int) -> Any:
    """The transport's send lane to ``host`` (None: it has none, or cannot
    send now -- the sender then posts the general way, which raises what is
    wrong)."""
    make = getattr(transport, "send_lane", None)
    if make is None:
        return None
    try:
        return make(host, _DATA)
    except Exception:
        return None


def large_enough(data: Any, large: int) -> bool:
    """A payload that travels as the second half of a split frame."""
    if type(data) is bytes:
        return len(data) >= large
    nbytes = getattr(data, "nbytes", None)
    if nbytes is None or nbytes < large:
        return False
    if isinstance(data, memoryview):
        return True
    dt = getattr(data, "dtype", None)
    return dt is not None and not (dt.hasobject or dt.fields is not None or dt.subdtype is not None)


class LinkSender:
    """SCBP_h's sender: admitted items in, MPI messages to host ``host`` out.

    ``on_error`` is called once with the exception when the transport
    refuses or fails a send (the link then fails every waiter).
    """

    def __init__(self, host: int, transport: Transport, pool: SendPool, *, block_size: int, large: int,
                 max_inflight: int, allow_pickle: bool, on_error: Callable[[BaseException], None],
                 admit: Callable[[int, int], bool] | None = None,
                 refund: Callable[[int, int], None] | None = None) -> None:
        self.host = host
        self._transport = transport
        self._pool = pool
        self._block_size = block_size
        self.large = large
        self._max_inflight = max_inflight
        self._allow_pickle = allow_pickle
        self._on_error = on_error
        # the credit rule offer() applies (the link's gate), and what gives
        # back the credit of an item the encoder refused (None: no credit)
        self._admit = admit
        self._refund = refund
        self.offered = 0            # items taken by offer()
        self.error: BaseException | None = None
        # the open block (the core's writer) and the pool slot it is in (None:
        # a private buffer, or no block open)
        self.writer = BlockWriter(large)   # bytes payloads shorter than large go as short records
        self._slot: Slot | None = None
        self._block: memoryview | None = None
        self._tick = -1                 # the transport tick of the last lone frame
        self._flush_scheduled = False
        self._units: deque[tuple[list[Any], int, Slot | None]] = deque()
        self.inflight = 0
        self.sent_msgs = 0          # data messages posted (the BYE count)
        self.lone = self.blocks = self.splits = self.nbytes = self.fallbacks = 0
        self._bulk_tags: int = getattr(transport, "bulk_tags", 0)  # 0: payloads follow their header
        self._lane = send_lane(transport, host)
        self._bulk_seq = 0                      # the next split frame's number (its bulk tag)
        # owned sends whose payload may not be done yet (fail() fails them);
        # the completed ones are pruned once there are _owned_cap
        self._owned: set[asyncio.Future[None]] = set()
        self._owned_cap = _OWNED_PRUNE
        # Credit this host owes host h's senders, carried by the next split
        # header to h (hosts.credit, "Grants carried"); whether a whole
        # window's grant found no reply to ride since h last got a split header
        self.carries = bool(self._bulk_tags)
        self._bulk_heads = bool(self._bulk_tags) and getattr(transport, "bulk_heads", False)
        # ranks outnumber cores: a partly filled block waits while small sends
        # to this host are in flight (link.py, "Coalescing")
        self._hold_below = HOLD_BELOW if getattr(transport, "holds_blocks", False) else 0
        self._starved = 0   # sends of at most _hold_below bytes in flight
        # the lane posts a split frame's header and payload in one call too (the kernel's post_pair)
        self._pairs = self._bulk_heads and getattr(self._lane, "bulk", None) is not None
        self.carried: list[tuple[int, int]] = []
        self.carry_missed = True
        self.n_carried = 0        # split headers that carried grants
        #: called with False before each MPI send is posted and True after
        #: (``bench pingpong --hops`` times the posting; None: not timed)
        self.stamp: Callable[[bool], None] | None = None

    # ---------------------------------------------------------------- items
    def offer(self, pid: int, nbytes: int, fields: tuple[Any, ...]) -> bool:
        """The link's offer (``HostLink.offer`` is this method) in one
        call: admit ``nbytes`` of GP ``pid``'s credit by the link's rule
        (``admit``) and take the message ``fields`` (or a
        :class:`ShortStream`); False, nothing taken, when the host is gone
        or the credit says wait.  An item the encoder refuses gives its
        credit back (``refund``) before the error propagates."""
        if self.error is not None or (self._admit is not None and not self._admit(pid, nbytes)):
            return False
        try:
            if type(fields) is ShortStream:
                self.stream(pid, fields)
            elif not self.short(pid, fields):
                self.message(pid, fields)
        except BaseException:  # refused by the encoder: nothing was queued
            if self._refund is not None:
                self._refund(pid, nbytes)
            raise
        self.offered += 1
        return True

    def owned(self, pid: int, nbytes: int, fields: tuple[Any, ...]) -> OwnedDone | None:
        """An owned send's entry (``HostLink.owned`` is this method; see
        :meth:`~aiopdbp.routing.router.Router.send_owned`) in one call: admit
        ``nbytes`` of GP ``pid``'s credit by the link's rule, then send the
        message ``fields`` (its payload a large array, sent from its own
        memory) as :meth:`message` does with a new :class:`OwnedDone`, and
        return that future.  None, nothing taken, when the host is gone, the
        payload is below ``large`` (it is copied: the caller's long way) or
        the credit says wait.  A message refused before it was posted gives
        its credit back (``refund``) and fails the future before the error
        propagates."""
        if self.error is not None or nbytes - CREDIT_OVERHEAD < self.large or (
                self._admit is not None and not self._admit(pid, nbytes)):
            return None
        done = OwnedDone(loop=asyncio.get_running_loop())
        try:
            self.message(pid, fields, done)
        except BaseException as exc:
            if self._refund is not None:
                self._refund(pid, nbytes)
            fail_owned(done, exc)
            raise
        self.offered += 1
        return done

    def short(self, pid: int, fields: tuple[Any, ...], head: bytes = b"") -> bool:
        """A message ``(source, kind, com, data, source_pid)`` for GP ``pid``
        as a compact short record: into the open block, or, as the first
        item of this loop iteration, in a frame of its own that leaves at
        once.  False (nothing queued): its payload needs a full record
        (:meth:`cdu`).  A :class:`ShortStream` too, its ``head`` (sno,
        window) first."""
        w = self.writer
        if (not w.kind and not self._units and self._transport.tick != self._tick
                and not self._starved):
            frame = w.put_short(pid, fields[4], fields[2], fields[1], fields[3], head, True)
            if frame is None:
                return False
            self._tick = self._transport.tick
            self.lone += 1
            self._post([frame], len(frame), None)
            return True
        put = w.put_short(pid, fields[4], fields[2], fields[1], fields[3], head, False)
        if put is False:  # no block open, a BP one, or full
            self._new_block(_BPS)
            put = w.put_short(pid, fields[4], fields[2], fields[1], fields[3], head, False)
        return put is True

    def stream(self, pid: int, item: ShortStream) -> None:
        """A stream whole in its OPEN: a short record (its head, sno and
        window, first) if it fits, else a full CDU record."""
        if not self.short(pid, item, _STREAM_HEAD(item[5], item[6])):
            self.cdu(item.cdu(pid))

    def message(self, pid: int, fields: tuple[Any, ...], done: OwnedDone | None = None) -> None:
        """A message (``fields``) that is not a short record: a large
        C-contiguous array goes as a split frame from its own memory, its
        header from the cache (the commonest large send); anything else as
        :meth:`cdu` would.  ``done``: an owned send's completion (its
        array was checked by the owner)."""
        data = fields[3]
        if self._bulk_tags and type(data) is np.ndarray and data.nbytes >= self.large and (
                done is not None or (data.flags.c_contiguous and large_enough(data, self.large))):
            self.flush()
            self.split(encode_split_array(fields[1], fields[4], pid, fields[2], data), done)
        else:
            self.cdu(CDU(fields[1], fields[4], (pid,), data, fields[2]), done)

    def cdu(self, cdu: CDU, done: OwnedDone | None = None) -> None:
        """Any CDU: a split frame when its payload is large, else a frame of
        its own (first of the iteration, or too big for a block) or a full
        record of a BP block."""
        data = cdu.data
        if data is not None and large_enough(data, self.large):
            self.flush()
            self.split(encode_split(cdu), done)
            return
        if done is not None:  # not large after all (an owner's mistake): it is copied below
            resolve_owned(done)
        w = self.writer
        if (not w.kind and not self._units and self._transport.tick != self._tick
                and not self._starved):
            self._tick = self._transport.tick
            parts = encode_cdu(cdu, allow_pickle=self._allow_pickle)
            frame = b"".join(parts) if len(parts) > 1 else bytes(parts[0])
            self.lone += 1
            self._post([frame], len(frame), None)
            return
        at = w.offset(_BP)
        parts, n = encode_record(cdu, at, allow_pickle=self._allow_pickle)
        if w.put_record(parts, n):
            return
        if n + L1.size > self._block_size:  # too big for a block, not splittable: its own frame
            self.flush()
            whole = b"".join(bytes(p) for p in encode_cdu(cdu, allow_pickle=self._allow_pickle))
            self._post([whole], len(whole), None)
            return
        self._new_block(_BP)
        if w.offset(_BP) != at:  # padding depends on the offset: encode again
            parts, n = encode_record(cdu, w.offset(_BP), allow_pickle=self._allow_pickle)
        w.put_record(parts, n)

    def split(self, split: tuple[bytes, Any], done: OwnedDone | None) -> None:
        """A large payload (``split``: a frame's header and payload, from
        :func:`~aiopdbp.wire.codec.encode_split`; the open block was
        flushed): the header on the data channel, the payload as one MPI
        message straight from the caller's buffer; ``done`` (an owned send)
        completes when the payload may be reused."""
        head, payload = split
        self.splits += 1
        nbytes = memoryview(payload).nbytes
        if done is not None:
            done.hold()
        fut: asyncio.Future[None] | None
        if not self._bulk_tags:  # header and payload, in order on the data channel
            if done is not None and (self._units or self.inflight >= self._max_inflight):
                payload = bytes(payload)  # it would wait behind other sends: a copy
            fut = self._post([head, payload], len(head) + nbytes, None)
        else:
            tag = self._bulk_seq
            self._bulk_seq = (tag + 1) % self._bulk_tags
            self.carry_missed = False   # h gets our replies: a large grant may wait for the next
            now = not (self._units or self.inflight >= self._max_inflight)   # (else the header queues)
            if self.carried and now:
                frame = credit_frame(self.carried)
                # A message of RBP_MIN bytes or more may be received into a
                # pool slot, where a carried grant cannot be taken off: such a
                # header leaves alone, its grants in the iteration's CreditMsg.
                if len(frame) + len(head) < RBP_MIN:
                    head = frame + head   # one MPI message: no CreditMsg of its own
                    self.carried = []
                    self.n_carried += 1
            with_head = self._bulk_heads and now   # the commonest: both posts in one transport call
            if with_head:
                self.sent_msgs += 1
                self.nbytes += len(head)
            else:
                self._post([head], len(head), None)
            self.nbytes += nbytes
            try:
                # the transport resolves ``done`` itself: no callback hop
                # between MPI's completion and the waiting sender
                if with_head:
                    if self._pairs:
                        fut = self._lane.post_pair(head, payload, tag, done)
                    else:
                        fut = self._transport.post_bulk(self.host, tag, payload, done, head)
                else:
                    fut = self._transport.post_bulk(self.host, tag, payload, done)
            except Exception as exc:  # the transport is closed or broken
                self._on_error(exc)
                fut = None
        if done is None:
            return
        if self.error is not None:
            fail_owned(done, self.error)
        elif fut is None:
            resolve_owned(done)
        elif fut is done:
            # kept for fail(); pruned here, not by a done callback (a loop
            # handle per message when the send completes)
            if len(self._owned) >= self._owned_cap:
                self._owned = {d for d in self._owned if not d.done()}
                self._owned_cap = max(_OWNED_PRUNE, 2 * len(self._owned))
            self._owned.add(done)
        else:
            self._owned.add(done)
            fut.add_done_callback(functools.partial(self._owned_sent, done))

    def _owned_sent(self, done: asyncio.Future[None], fut: asyncio.Future[None]) -> None:
        self._owned.discard(done)
        if fut.cancelled() or fut.exception() is None:
            resolve_owned(done)
        else:
            fail_owned(done, fut.exception())  # type: ignore[arg-type]

    # --------------------------------------------------------------- blocks
    def _new_block(self, kind: int) -> None:
        self.flush()
        if not self._flush_scheduled:  # sent at the end of this loop iteration
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_soon)
        try:
            slot: Slot | None = self._pool.acquire_nowait(self.host, self._block_size)
        except WouldBlock:
            slot = None  # the row is full and may not grow: a private buffer
            self.fallbacks += 1
        view = slot.view if slot is not None else memoryview(bytearray(self._block_size))
        self._slot = slot
        self._block = view
        self.writer.open(view, kind)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        if self._starved:
            return  # held: it leaves when the small sends in flight complete (_sent), or when full
        self.flush()

    def flush(self) -> None:
        """Send the open block, if any."""
        if not self.writer.kind:
            return
        slot, view = self._slot, self._block
        self._slot = self._block = None
        n = self.writer.close()
        if not n:
            # opened for a record the encoder then refused: nothing to send,
            # and its pool cell must not stay reserved (it would jam the row)
            if slot is not None:
                self._pool.abort(slot)
            return
        self.blocks += 1
        if slot is None:
            assert view is not None
            self._post([view[:n]], n, None)
            return
        pool = self._pool
        pool.commit(slot, n)
        taken = pool.next_filled_nowait(self.host)  # the oldest committed: this one
        self._post([taken.data], n, taken)

    # -------------------------------------------------------------- sending
    def _post(self, blocks: list[Any], nbytes: int, slot: Slot | None) -> asyncio.Future[None] | None:
        """Send ``blocks`` (``nbytes`` in all) now, or after the sends in
        flight when ``max_inflight`` are; ``slot`` returns to the pool once
        the send has completed.  The transport's future when it was posted
        now and has not completed (None otherwise)."""
        if self._units or self.inflight >= self._max_inflight:
            self._units.append((blocks, nbytes, slot))
            return None
        return self._send(blocks, nbytes, slot)

    def _send(self, blocks: list[Any], nbytes: int, slot: Slot | None) -> asyncio.Future[None] | None:
        stamp = self.stamp
        if stamp is not None:
            stamp(False)
        self.sent_msgs += len(blocks)
        self.nbytes += nbytes
        fut: asyncio.Future[None] | None
        try:
            if len(blocks) == 1 and self._lane is not None:  # the commonest: one frame, in one call
                fut = self._lane.post(blocks[0])
            else:
                fut = self._transport.post_nowait(self.host, _DATA, blocks)
        except Exception as exc:  # the transport is closed or broken
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

    def _sent(self, slot: Slot | None, small: bool, fut: asyncio.Future[None]) -> None:
        self.inflight -= 1
        self._starved -= small
        self._release(slot)
        if not fut.cancelled() and fut.exception() is not None and self.error is None:
            # news to no one: the engine reported its own failure through the
            # loop's exception handler, and a transport we closed abandons its
            # sends because this rank is stopping (its stop line says why)
            log.debug("sending to host %d failed: %s", self.host, fut.exception())
            self._on_error(fut.exception())  # type: ignore[arg-type]
            return
        units = self._units
        while units and self.inflight < self._max_inflight:
            self._send(*units.popleft())
        if small and not self._starved and self.writer.kind and not self._flush_scheduled:
            self.flush()  # the block held while small sends were in flight

    def _release(self, slot: Slot | None) -> None:
        if slot is not None:
            try:
                self._pool.release(slot)
            except Exception:  # the pool closed during shutdown
                pass

    # --------------------------------------------------------------- status
    def fail(self, exc: BaseException) -> None:
        """Host ``h`` is gone: every owned send whose payload is not done
        gets ``exc`` (MPI may keep the buffer: it is never handed back)."""
        if self.error is None:
            self.error = exc
        owned, self._owned = self._owned, set()
        for done in owned:
            fail_owned(done, exc)

    @property
    def idle(self) -> bool:
        """Nothing open, queued or in flight."""
        return not self.writer.kind and not self._units and self.inflight == 0

    @property
    def queued(self) -> int:
        """Sends waiting for an in-flight slot."""
        return len(self._units)
