"""The stream table: this host's live data streams and their MTA bindings.

Theory of operation
-------------------
A stream is bound for its whole life (SPEC section 5, the MTA row
``(Pid, group, sno, PipeA, PipeB)``): on the sending host a public pipe
*PipeA* from the stream group of the CPS, on the receiving host a private
pipe *PipeB* from the PPS.  :class:`StreamTable` keeps both ends of every
stream of this host; each end's state (OPENING -> OPEN -> ENDING -> DONE, or
ABORTED / BROKEN) is its :mod:`aiopdbp.streams.protocol` state machine, which the
table and the stream objects feed with what arrives:

* :meth:`open_outgoing` binds PipeA (a row of this host's MTA, :attr:`mta`:
  no table update, nothing through rank 0), finds the receiver, and sends the
  OPEN on the *message* path, so
  the receiver sees the stream in order with the sender's messages; the
  segments wait until the OPEN is routed (``out.routed``).  For a local
  receiver it creates the :class:`IncomingStream` right away (its PipeB is
  the segments' target); for a remote one the OPEN carries the stream's meta
  and ``stream_window`` credit, and the target is the host's link.
* :meth:`place` takes the stream CDUs that arrive from other hosts: an OPEN
  binds PipeB (the receiving host's MTA row: the receiver decides it) and
  creates the incoming stream and hands it to the receiving GP (through the
  arrivals, which park it if the GP is not bound yet); segments, END and
  ABORT go to the stream's PipeB.  An OPEN may carry a short stream whole
  (``open_outgoing(eager=...)``: one segment of at most
  :data:`~aiopdbp.streams.receiver.EAGER_LIMIT` bytes, then its END): its
  record is then the segment itself -- a short record among the short
  messages (:class:`~aiopdbp.wire.shorts.ShortStream`, handed over by the
  arrivals: :meth:`StreamTable.open_whole`) or, when it does not fit one, a
  CDU record of ``segno`` :data:`EAGER_OPEN` -- and the meta is the
  record's (:func:`eager_meta`: no msgpack).  Such a stream binds
  neither PipeA nor PipeB and nothing of it follows the OPEN: it is done for
  its sender once the OPEN is routed (SPEC section 5: "the sender waits
  until the whole stream is sent"; its bytes copied by then), arrives
  complete (``IncomingStream(whole=...)``: the protocol hears its
  segment and END at once), and is the reader's like a message -- no row
  in either MTA, no DONE back.  A local one goes the same way, a copy of
  its own straight into the receiving GP's pipe.  A CDU of a stream nobody
  here knows is a ``ProtocolError`` of the protocol's :class:`Registry`
  (counted as ``stream_cdus_dropped``); one of a stream given up here is late
  and dropped quietly.
* Device streams (OPEN meta kind ``"device"``) are handed to
  :attr:`StreamTable.device` (:mod:`aiopdbp.streams.devicepath`): it chooses the
  incoming stream's class, moves the array's chunks outside the link, and
  feeds the stream's segments into PipeB itself (the END comes from the
  sender, on the stream path).
* Endings travel back on the control channel: the receiver's DONE (whole,
  or why it gave up) and its segment credit (``StreamDoneMsg``,
  ``StreamCreditMsg``); a lost or failed host breaks every stream with it.

*Only the two hosts.*  Opening, running and closing a stream involves the
sending and the receiving host and nothing else: the OPEN (data channel)
and the DONE and credit (control channel) travel between them, each keeps
its own MTA row, and rank 0 is never asked (the SPEC replicated the MTA with
every binding; that made every stream of the job queue behind one sequencer).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgpack
import numpy as np

from aiopdbp.wire.mesp import CDU, Kind, StreamOp
from aiopdbp.wire.shorts import EAGER_OPEN, ShortStream
from aiopdbp.errors import BrokenResourceError, NoPipeError, ProtocolError, StreamError, WouldBlock
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.routing.pipes import Pipe, PipePool
from aiopdbp.routing.arrivals import Arrivals
from aiopdbp.routing.router import Router, Target
from aiopdbp.streams.protocol import Registry, StreamState
from aiopdbp.streams.outgoing import OpenRoute, OutgoingStream, WholeRoute, host_gone
from aiopdbp.streams.receiver import LAND_MAX, IncomingStream, StreamMeta, WholeStream, whole_meta
from aiopdbp.hosts.tables import StreamEntry, Tables
from aiopdbp.transport.recvcache import DEFAULT_RECV_CACHE_BYTES, RECV_CACHE_MIN_SIZE, RecvBufferCache

log = logging.getLogger("aiopdbp.streams.table")

_SEGMENT = StreamOp.SEGMENT
#: segments below this size get a window of more of them (StreamTable.window_for)
SMALL_SEGMENT = 16 << 10
#: the most segments a stream's window holds (and its reorder window, its PipeB)
WINDOW_MAX = 4096

__all__ = ["EAGER_OPEN", "SMALL_SEGMENT", "WINDOW_MAX", "OutgoingStream", "StreamDevices", "StreamPeers", "StreamTable", "eager_meta", "pack_meta",
           "unpack_meta"]


class StreamPeers(Protocol):
    """How the table reaches a stream's other host (the control channel)."""

    def send_done(self, host: int, key: tuple[int, int], error: str | None) -> None: ...
    def send_credit(self, host: int, key: tuple[int, int], segments: int) -> None: ...


class StreamDevices(Protocol):
    """What the table asks of the device path (:class:`aiopdbp.streams.devicepath.DevicePath`)."""

    def stream_class(self, kind: str, dest_pid: int) -> type[IncomingStream]: ...
    def start_incoming(self, host: int, stream: IncomingStream) -> bool: ...
    def refuse_incoming(self, host: int, key: tuple[int, int], meta: StreamMeta) -> None: ...
    def break_host(self, host: int, exc: BaseException) -> None: ...




def pack_meta(meta: StreamMeta) -> bytes:
    """The OPEN's payload: the stream's meta, for the wire."""
    return msgpack.packb(meta.to_wire())  # type: ignore[no-any-return]


def unpack_meta(data: Any) -> StreamMeta:
    """The stream meta of an OPEN."""
    try:
        return StreamMeta.from_wire(msgpack.unpackb(bytes(data), raw=False))
    except Exception as exc:
        raise ProtocolError(f"bad stream OPEN meta: {exc}") from exc


def eager_meta(cdu: CDU) -> StreamMeta:
    """The meta of an OPEN that carries its whole stream (``segno``
    :data:`EAGER_OPEN`): its record is the meta -- an array payload gives an
    array stream of its dtype and shape, a bytes payload a bytes stream; the
    sender's credit window is the record's ``id`` (:func:`whole_meta`)."""
    return whole_meta(cdu.data, cdu.com, cdu.id)


def _own_copy(data: Any) -> Any:
    """A private copy of a short stream's one segment, as its receiver reads
    it: an array of any ndarray subclass (np.memmap, say) as a plain
    ndarray -- the receiver takes only a plain one for an array, and would
    read a subclass as bytes -- and any other buffer as a bytearray."""
    if isinstance(data, np.ndarray):
        return data.copy() if type(data) is np.ndarray else np.array(data)
    return bytearray(data)


def _nbytes(data: Any) -> int:
    return int(data.nbytes) if hasattr(data, "nbytes") else len(data)


class StreamTable:
    """Both ends of this host's streams (see the module docstring)."""

    def __init__(self, rank: int, window: int, tables: Tables, pps: PipePool, cps: PipePool,
                 router: Router, arrivals: Arrivals, *, submit: Callable[[Any, int, Any], None],
                 watch: Callable[[Pipe[Any]], None], device: StreamDevices | None = None,
                 peers: StreamPeers | None = None, large: int | None = None,
                 offer: Callable[[Target, int, int, Any], bool] | None = None,
                 route: Callable[[Pipe[Any], Target, int, Any], None] | None = None,
                 route_now: Callable[[Target, int, Any], bool | None] | None = None) -> None:
        self.rank = rank
        #: payloads at least this large leave from the sender's own buffer
        #: (``RemoteConfig.large``; None on one host)
        self.large = large
        self.window = window
        self.tables = tables
        self.pps = pps
        self.cps = cps
        self.router = router
        self.arrivals = arrivals   # where a stream that comes from another host goes in
        self.peers = peers    # the other hosts' stream ends (None: a single host)
        self.device = device
        #: this host's MTA rows: its outgoing streams (PipeA) and incoming ones (PipeB)
        self.mta: dict[tuple[int, int], StreamEntry] = {}
        self._submit = submit
        self._offer = offer   # the PipeManager's no-wait path (send_whole_nowait)
        self._route = route   # the PipeManager's put: a segment at once when nothing is queued
        self._route_now = route_now  # ... and a record at once, or None when something is (send_whole)
        self._watch = watch
        self._snos = itertools.count(1)
        self._out: dict[tuple[int, int], OutgoingStream] = {}
        # incoming streams, and the remote ones this host gave up (their late CDUs are dropped)
        self._in: Registry[tuple[int, int], IncomingStream] = Registry()
        # recycled arrays of the streams whose segments land in place
        self._landings = RecvBufferCache(DEFAULT_RECV_CACHE_BYTES, RECV_CACHE_MIN_SIZE)
        self.landed = 0       # segments given a place in their stream's array
        self._land_bytes = 0  # bytes of the arrays of streams not closed yet (<= LAND_MAX)
        self.dropped = 0

    # --------------------------------------------------------------- sending
    def whole_record(self, src_pid: int, com: int, eager: Any, sno: int = 0) -> ShortStream:
        """The OPEN of a stream it carries whole (stream number ``sno``, 0:
        the next one), for another host: a short
        record among the messages when it fits (the link decides), its meta
        the payload's kind, dtype and shape.  Its sender is done once it is
        routed: below ``large`` the link copies it on the way; at or above,
        the link would send it from this very buffer, so it gets a copy of
        its own (as GP.send takes a snapshot)."""
        if not sno:
            sno = next(self._snos)
        if self.large is not None and eager.nbytes >= self.large:
            eager = _own_copy(eager)
            if type(eager) is bytearray:  # the record's bytes are a memoryview (nbytes)
                eager = memoryview(eager)
        return ShortStream((None, Kind.STREAM, com, eager, src_pid, sno, self.window, self.rank))

    def send_whole_nowait(self, tgt: Target, pid: int, record: ShortStream, cost: int) -> bool:
        """Send a stream its OPEN carries whole (``record``, of
        :meth:`whole_record`, and its credit ``cost``: its segment's bytes
        and ``CREDIT_OVERHEAD``) to GP ``pid`` on another host (``tgt``, the
        link to it) in one step, when nothing has to wait (credit there,
        nothing queued ahead): True once it is routed, which ends it for its
        sender (the protocol's ``SendWhole``: OPENING and DONE in the same
        step, so no state is kept and nothing can break it after).  False,
        having done nothing: then :meth:`send_whole`, which waits.  Like
        ``try_send`` for a message: the common case costs no coroutine and
        no handle."""
        offer = self._offer
        return offer is not None and offer(tgt, pid, cost, record)

    async def send_whole(self, src_pid: int, tgt: Target, pid: int, record: ShortStream, cost: int) -> bool:
        """The rest of :meth:`send_whole_nowait` when it said no: wait, as a
        message does, for credit at GP ``pid``'s host (registered with the
        stall watch), then route the record -- at once when nothing is
        queued ahead of it, else behind what is (a :class:`WholeRoute`
        tells it when) -- True once it is routed.  False,
        having done nothing, where there is no no-wait path to pair it
        with: then :meth:`open_outgoing`.
        The protocol's ``SendWhole`` again, with no handle, no protocol
        object and no MTA row: a short stream waits as a message does.

        Cancellation: before its record is routed nothing goes and no
        credit is held.
        """
        if self._offer is None:
            return False
        # (the sender's name, for a stall report: a GP here is always named)
        await self.router.reserve(tgt, pid, cost, None, f"<pid {pid}>",
                                  self.tables.names.get(src_pid) or self.tables.name_of(src_pid))
        put = None if self._route_now is None else self._route_now(tgt, pid, record)
        if put is not None:  # nothing was queued ahead: routed now (WholeRoute's answer, without one)
            if put is False:
                raise host_gone(tgt)
            return True
        route = WholeRoute(tgt, cost)
        self._submit(route, pid, record)
        if not route.routed:  # it queued behind others in the PipeManager
            await route.wait()
        elif route.error is not None:
            raise route.error
        return True

    def window_for(self, segment_size: int | None) -> int:
        """The credit window (segments) of a stream to another host whose
        segments are at most ``segment_size`` bytes (None: not known): the
        node's ``stream_window``, or for segments below
        :data:`SMALL_SEGMENT` as many as ``stream_window`` segments of that
        size hold (at most :data:`WINDOW_MAX`).  The bytes a receiver holds
        of a stream stay bounded as they are for segments of
        ``SMALL_SEGMENT``, and a stream of small segments is not paced by a
        credit round trip every ``stream_window / 2`` of them."""
        w = self.window
        if segment_size is None or segment_size >= SMALL_SEGMENT or segment_size < 1:
            return w
        return max(w, min(WINDOW_MAX, w * SMALL_SEGMENT // segment_size))

    async def open_outgoing(self, src_pid: int, pid: int, meta: StreamMeta,
                            timeout: float | None, eager: Any = None,
                            segment_size: int | None = None) -> OutgoingStream:
        """Bind a stream from GP ``src_pid`` to GP ``pid`` and send its OPEN.

        ``eager``: the stream's one (short) segment; the OPEN carries it and
        the END (``out.carried``), so the stream costs one record, one way,
        and is done once the OPEN is routed (as a message's send is).  The
        stream protocol sees the same events as for segments and an END.
        ``segment_size``: the most bytes of one segment (None: not known),
        which sets a remote stream's window (:meth:`window_for`).

        Cancellation: whatever was bound is undone.
        """
        entry = self.tables.process(pid)
        sno = next(self._snos)
        key = (self.rank, sno)
        whole = eager is not None and not meta.extra
        window = self.window
        pipe_a: Pipe[Any] | None = None
        if not whole:  # a stream carried whole by its OPEN sends nothing through PipeA
            try:  # the awaits below only when they must wait: a short stream feels each one
                pipe_a = self.cps.apply_nowait()
            except NoPipeError:
                pipe_a = await self.cps.apply()
        incoming: IncomingStream | None = None
        out: OutgoingStream | None = None
        try:
            if pipe_a is not None:  # (a stream carried whole binds no pipe: no MTA row)
                self.mta[key] = StreamEntry(pid, src_pid, sno, self.rank, pipe_a.pipe_id, -1)
            tgt = self.router.targets.get(pid) or await self.router.target(pid, timeout)
            if entry.node == self.rank and whole:
                # The whole stream, complete, straight into the receiving
                # GP's pipe (no PipeB): a copy of its own, as a local send
                # takes one, since the sender returns once it is there.
                incoming = self._new_incoming(key, src_pid, pid, meta, whole=_own_copy(eager), owned=True)
                target: Target = tgt
                open_item: Any = incoming
            elif entry.node == self.rank:
                pipe_b = await self.pps.apply()
                incoming = self._new_incoming(key, src_pid, pid, meta, pipe_b)
                target = pipe_b
                open_item = incoming
            else:
                target = tgt
                meta.window = window = self.window_for(segment_size)
                if whole:
                    open_item = self.whole_record(src_pid, meta.com, eager, sno)
                else:
                    open_item = CDU(Kind.STREAM, src_pid, (pid,), pack_meta(meta), meta.com, 0, sno, 0,
                                    self.rank, (), StreamOp.OPEN)
            out = OutgoingStream(key, pid, pipe_a, target, incoming, entry.node,
                                 window=window if incoming is None else None, src_pid=src_pid,
                                 com=meta.com, rank=self.rank, waits=self.router.waits,
                                 names=lambda: (self.tables.name_of(src_pid), entry.name), route=self._route)
            if whole:
                out.carried = int(eager.nbytes)  # an array or a memoryview
            self._out[key] = out
            # An OPEN that carries the stream charges its bytes too, as a
            # message would: the receiving GP's window bounds them.
            cost = CREDIT_OVERHEAD + (out.carried if whole else 0)
            if incoming is not None:   # local: its pipe holds these bytes until it is taken
                incoming.pipe_cost = cost
            try:
                tgt.reserve_nowait(pid, cost)
            except WouldBlock:
                await self.router.reserve(tgt, pid, cost, timeout, f"GP {entry.name!r}",
                                          self.tables.name_of(src_pid))
            if pipe_a is not None:
                self._watch(pipe_a)
            self._submit(OpenRoute(tgt, out), pid, open_item)
            return out
        except BaseException:
            if incoming is not None:
                self.incoming_closed(incoming, "the sender failed to open the stream", False)
            self._out.pop(key, None)
            if pipe_a is not None:
                self.cps.release(pipe_a)
            self.mta.pop(key, None)
            raise

    def close_outgoing(self, out: OutgoingStream) -> None:
        """The sending side is done: flush PipeA, undo the binding, free it."""
        if self._out.get(out.key) is not out:
            return
        # Route what is still in PipeA (an ABORT among it) before forgetting it.
        if out.pipe_a is not None:
            for target, pid, item in out.pipe_a.drain_nowait():
                target.put_to(pid, item)
            self.cps.release(out.pipe_a)
        elif out.abort is not None:  # behind the OPEN, which may still queue in the PipeManager
            self._submit(out.target, 0, out.abort)
        del self._out[out.key]
        self.mta.pop(out.key, None)

    def done(self, key: tuple[int, int], error: str | None, origin: int) -> None:
        """The receiver (on rank ``origin``) took the whole stream, or gave up."""
        out = self._out.get(key)
        if out is None:
            return
        if error is None:
            out.delivered()
            return
        exc = BrokenResourceError(f"the stream was not received: {error}")
        if origin != self.rank:
            exc.origin_rank = origin
        out.break_(exc, refused=True)

    def credit(self, key: tuple[int, int], segments: int) -> None:
        """A remote receiver consumed ``segments`` segments."""
        out = self._out.get(key)
        if out is not None:
            out.grant(segments)

    # ------------------------------------------------------------- receiving
    def _new_incoming(self, key: tuple[int, int], src_pid: int, dest_pid: int,
                      meta: StreamMeta, pipe_b: Pipe[Any] | None = None, whole: Any = None,
                      source: str | None = None, owned: bool = False) -> IncomingStream:
        """The receiving end of stream ``key``; ``whole``: the one segment
        its OPEN carried with its END, so it needs no PipeB (nothing more
        comes), ``owned`` when that is a copy of its own; ``source``: the
        sender's name, when the caller has it already."""
        window = max(self.window, meta.window)
        if pipe_b is None and whole is None:
            pipe_b = self.pps.apply_nowait()
        if pipe_b is not None:
            pipe_b.room.capacity = window
        cls = IncomingStream if self.device is None else self.device.stream_class(meta.kind, dest_pid)
        stream = cls(self, key, self.tables.name_of(src_pid) if source is None else source, pipe_b, window,
                     src_pid, dest_pid, meta, whole=whole, owned=owned)
        if whole is not None:
            # complete on arrival, nothing more comes and nobody waits on it:
            # no binding to keep (it is the reader's, like a message)
            return stream
        self._in.add(key, stream)
        pipe_id = -1 if pipe_b is None else pipe_b.pipe_id
        row = self.mta.get(key)
        if row is not None:       # a local stream: one row, both ends
            row.pipe_b = pipe_id
        else:
            self.mta[key] = StreamEntry(dest_pid, src_pid, key[1], key[0], -1, pipe_id)
        return stream

    def place(self, host: int, cdu: CDU) -> None:
        """A stream CDU arrived from ``host``."""
        key = (cdu.source_n, cdu.sno)
        op = cdu.op
        if op is _SEGMENT:  # the commonest: a segment of a live stream
            found = self._in.live.get(key)
            if found is not None and found.pipe is not None:
                found.pipe.force_put(cdu)  # the stream's credit window bounds what comes
                return
        if op is StreamOp.OPEN:
            if key in self._in.live or not cdu.dest_ps:
                return
            dest = cdu.dest_ps[0]
            meta: StreamMeta | None = None
            whole = cdu.segno == EAGER_OPEN
            try:
                meta = eager_meta(cdu) if whole else unpack_meta(cdu.data)
                stream = self._new_incoming(key, cdu.source_p, dest, meta, whole=cdu.data if whole else None)
            except (NoPipeError, ProtocolError) as exc:
                if meta is not None and meta.kind == "device" and self.device is not None:
                    self.device.refuse_incoming(host, key, meta)  # still takes the chunks sent
                if self.peers is not None:
                    self.peers.send_done(key[0], key, f"cannot receive the stream: {exc}")
                return
            if meta.kind == "device" and self.device is not None and self.device.start_incoming(host, stream):
                return  # a device message: delivered as a Message once it is complete
            cost = CREDIT_OVERHEAD + (_nbytes(cdu.data) if whole else 0)  # as the sender charged
            if not self.arrivals.deliver_remote(host, dest, [stream], cost):
                self.incoming_closed(stream, "the receiving GP is gone", True)
            return
        try:
            found = self._in.get(key)
        except ProtocolError as exc:  # nobody here knows the stream
            self.dropped += 1
            log.debug("host %d: %s dropped", host, exc)
            return
        if found is None:  # given up here: what was on the way is late, not wrong
            if op is StreamOp.END or op is StreamOp.ABORT:
                self._in.settle(key)
            return
        if found.pipe is not None:
            found.pipe.force_put(cdu)  # the stream's credit window bounds what comes
        # (a stream carried whole by its OPEN is in no table here, and its
        # sender sends nothing after the OPEN, not even an ABORT)

    def open_whole(self, host: int, dest: int, src_pid: int, source: Any, com: int, sno: int, window: int,
                   data: Any) -> IncomingStream | None:
        """A stream from ``host`` arrived whole in a short record (the
        arrivals' :class:`~aiopdbp.routing.arrivals.WholeStreams`): its
        incoming stream, for the arrivals to put in GP ``dest``'s pipe among
        the messages around it -- or None when its record is malformed
        (dropped and counted: its sender, done once it sent it, waits for
        nothing).  ``data`` is the segment, a copy of its own.  The stream is
        a :class:`~aiopdbp.streams.receiver.WholeStream` (made in one call)
        unless the device path takes arrays for GP ``dest`` (an SGP that
        receives to its device)."""
        try:
            if type(source) is not str:
                source = self.tables.name_of(src_pid)
            device = self.device
            if type(data) is np.ndarray and device is not None and \
                    device.stream_class("ndarray", dest) is not IncomingStream:
                return self._new_incoming((host, sno), src_pid, dest, whole_meta(data, com, window), whole=data,
                                          source=source, owned=True)
            return WholeStream(self, (host, sno), source, src_pid, dest, data, com, window)
        except ProtocolError as exc:
            self.dropped += 1
            log.debug("host %d: a stream record dropped: %s", host, exc)
            return None

    def undelivered(self, items: list[Any]) -> None:
        """Items the arrivals could not deliver (their GP is gone): the
        streams among them end, their senders hear it."""
        for item in items:
            if isinstance(item, IncomingStream):
                self.incoming_closed(item, "the receiving GP is gone", True)

    # StreamOwner: what an IncomingStream tells its table
    def landing_array(self, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
        """An array for a stream whose segments land in place, or None when
        the streams that hold one now already hold :data:`LAND_MAX` bytes
        (without it, 16 streams in flight of 16 MiB each would take 256 MiB
        at once, where their windows bound them to a few segments).
        Recycled memory, as received messages get: fresh memory would fault
        on every page as the bytes land (measured: 0.5x against 0.7x the
        message bandwidth at 16 MiB)."""
        if self._land_bytes + nbytes > LAND_MAX:
            return None
        self._land_bytes += nbytes
        if nbytes < RECV_CACHE_MIN_SIZE:
            return np.empty(nbytes, dtype=np.uint8)
        arr: np.ndarray[Any, np.dtype[np.uint8]] = self._landings.alloc(nbytes)
        return arr

    def landing(self, key: tuple[int, int], nbytes: int) -> Any | None:
        """Where the next segment of stream ``key`` (``nbytes``, announced by
        its header) may land: its slice of the stream's array, or None."""
        found = self._in.live.get(key)
        out = found.landing(nbytes) if found is not None else None
        if out is not None:
            self.landed += 1
        return out

    def incoming_closed(self, stream: IncomingStream, error: str | None, notify: bool) -> None:
        """The receiving side is done (finished, aborted, abandoned)."""
        if stream.pipe is not None:  # (a stream that arrived whole landed nothing)
            self._land_bytes -= stream.landing_bytes()   # its array is the reader's now, or garbage
        if self._in.live.get(stream.key) is not stream:
            return
        sender = stream.key[0]
        # a remote stream given up here: drop what is still on its way (a
        # stream that arrived whole has nothing on its way whose END or ABORT
        # would settle the key: remembering it would keep it forever)
        self._in.remove(stream.key, given_up=stream.pipe is not None and sender != self.rank and
                        stream.state not in (StreamState.DONE, StreamState.ABORTED))
        if sender != self.rank:
            self.mta.pop(stream.key, None)
            if notify and self.peers is not None:
                self.peers.send_done(sender, stream.key, error)
        elif notify:
            self.done(stream.key, error, self.rank)
        if stream.pipe is not None:
            self.pps.release(stream.pipe)

    def give_credit(self, stream: IncomingStream, segments: int) -> None:
        if stream.key[0] != self.rank and self.peers is not None:
            self.peers.send_credit(stream.key[0], stream.key, segments)

    # --------------------------------------------------------------- failing
    def abort_to(self, pid: int, why: str) -> None:
        """GP ``pid`` released its pipe: its incoming streams end, their
        senders hear ``why``."""
        for stream in [s for s in self._in.live.values() if s.dest_pid == pid]:
            stream.fail(BrokenResourceError(why))
            self.incoming_closed(stream, why, True)

    def break_host(self, host: int, exc: BaseException) -> None:
        """Host ``host`` failed or is gone: every stream with it ends with ``exc``."""
        if self.device is not None:
            self.device.break_host(host, exc)  # its staged chunks will never come or go
        for out in list(self._out.values()):
            if out.incoming is None and out.host == host:
                out.break_(exc)
        for stream in [s for s in self._in.live.values() if s.key[0] == host]:
            err = StreamError(f"stream {stream.key} from {stream.source!r} was cut off: {exc}")
            err.__cause__ = exc
            stream.fail(err)
            self.incoming_closed(stream, None, False)

    def close(self, exc: BaseException) -> None:
        """The node closes: every live stream ends."""
        for stream in list(self._in.live.values()):
            stream.fail(BrokenResourceError("node closed"))
            self.incoming_closed(stream, "receiving node closed", True)
        for out in list(self._out.values()):
            out.break_(exc)

    @property
    def outgoing(self) -> int:
        return len(self._out)

    @property
    def incoming(self) -> int:
        return len(self._in)

    def stats(self) -> dict[str, int]:
        return {"streams_in": len(self._in), "streams_out": len(self._out),
                "stream_cdus_dropped": self.dropped}

