"""The sending end of one bound stream: :class:`OutgoingStream`.

The stream table (:mod:`aiopdbp.streams.table`) makes one per stream this
host sends (its MTA row) and the sender loop
(:mod:`aiopdbp.streams.sender`) drives it: it holds the stream's
:class:`~aiopdbp.streams.protocol.SenderProtocol`, the segment window and the
futures its sender waits on (routed, delivered).  :class:`OpenRoute` is the
OPEN's target in the PipeManager: it lets the segments go once the OPEN is
routed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiopdbp.wire.mesp import CDU, Kind, StreamOp
from aiopdbp.streams import protocol as sp
from aiopdbp.errors import STREAM_READING, BrokenResourceError, ProtocolError, WouldBlock
from aiopdbp.wire.message import CREDIT_OVERHEAD
from aiopdbp.routing.pipes import Pipe
from aiopdbp.routing.router import Target
from aiopdbp.streams.protocol import StreamState
from aiopdbp.stall import Waits
from aiopdbp.streams.receiver import IncomingStream

__all__ = ["OpenRoute", "OutgoingStream", "WholeRoute", "host_gone"]

# events without fields, made once (a short stream feels every allocation)
_OPENED, _DONE_WHOLE = sp.Opened(), sp.Done()  # (DONE of a stream taken whole)
_SEGMENT = StreamOp.SEGMENT


class OutgoingStream:
    """Sender-side handle of one bound stream (its MTA row) and its
    :class:`~aiopdbp.streams.protocol.SenderProtocol`.

    ``window`` bounds the segments in flight to a *remote* receiver (its
    credit window: the receiver gives credit back as its GP consumes
    segments), so a cancelled sender is never more than a window ahead of its
    ABORT.  ``None`` for a local receiver, whose bounded PipeB gives the same
    backpressure.
    """

    __slots__ = ("key", "dest_pid", "pipe_a", "abort", "target", "done", "broken", "incoming", "routed",
                 "proto", "_credit_waiter", "host", "_waits", "_names", "_head", "carried", "_route")

    def __init__(self, key: tuple[int, int], dest_pid: int, pipe_a: Pipe[Any] | None, target: Target,
                 incoming: IncomingStream | None, host: int, *, window: int | None = None,
                 src_pid: int = 0, com: int = 0, rank: int = 0, waits: Waits | None = None,
                 names: Callable[[], tuple[str, str]] | None = None,
                 route: Callable[[Pipe[Any], Target, int, Any], None] | None = None) -> None:
        loop = asyncio.get_running_loop()
        # how a segment goes: the PipeManager's put (at once when nothing is
        # queued, else behind it in PipeA); None: always into PipeA
        self._route = route
        self._waits = waits                 # where a wait for the window is registered (stalls)
        self._names = names                 # () -> (sending GP, receiving GP), asked only for a wait
        self.key = key
        self.dest_pid = dest_pid
        # PipeA; None for a stream whose OPEN carries it whole (nothing else
        # of it goes but an ABORT, held in ``abort`` for close_outgoing)
        self.pipe_a = pipe_a
        self.abort: CDU | None = None
        self.target = target
        self.host = host                    # the receiver's host
        self.done: asyncio.Future[None] = loop.create_future()
        self.broken: BaseException | None = None
        self.incoming = incoming
        # Set when the PipeManager has routed the OPEN: every message this GP
        # sent before the stream is then ahead of it on the way, so no
        # segment can overtake them (they travel different public pipes).
        self.routed: asyncio.Future[None] = loop.create_future()
        self.proto = sp.SenderProtocol(window)
        self.carried = 0  # > 0: the OPEN carried the whole stream, this many bytes, and its END
        self._credit_waiter: asyncio.Future[None] | None = None
        self._head = (src_pid, (dest_pid,), com, rank)  # what every CDU of the stream carries

    @property
    def state(self) -> StreamState:
        return self.proto.state

    @property
    def credits(self) -> int | None:
        """Segments that may go now without waiting (None: no credit window)."""
        return self.proto.credits

    def _cdu(self, data: Any, segno: int, op: StreamOp = StreamOp.SEGMENT) -> tuple[Target, int, CDU]:
        src, dest, com, rank = self._head
        # PipeA holds (target, pid, CDU) for the PipeManager; pid 0: stream
        # data takes no GP credit
        return self.target, 0, CDU(Kind.STREAM, src, dest, data, com, 0, self.key[1], segno, rank, (), op)

    def opened(self) -> None:
        """The OPEN was routed: segments may follow."""
        if self.proto.state is StreamState.OPENING:
            if self.carried:
                # The OPEN just routed carried the one segment and the END:
                # the stream is sent, so it is done (the protocol's SendWhole;
                # its bytes were copied on the way or are a private copy, see
                # StreamTable.whole_record).  Nobody waits for ``routed``.
                self.proto.handle(sp.SendWhole(self.carried))
                if not self.done.done():
                    self.done.set_result(None)
                return
            self.proto.handle(_OPENED)
            if not self.routed.done():
                self.routed.set_result(None)

    def emit_segment(self, seg: Any) -> None:
        """Route the next segment (after :meth:`reserve`): through PipeA, or
        at once when nothing is queued ahead of it (the PipeManager's put)."""
        pipe = self._pipe_a()
        segno = self.proto.segment(int(seg.nbytes))  # the protocol's SendSegment, in one call
        src, dest, com, rank = self._head
        cdu = CDU(Kind.STREAM, src, dest, seg, com, 0, self.key[1], segno, rank, (), _SEGMENT)
        # pid 0: stream data takes no GP credit
        if self._route is not None:
            self._route(pipe, self.target, 0, cdu)
        else:
            pipe.force_put((self.target, 0, cdu))

    def staged(self, nbytes: int) -> None:
        """The next segment went outside the stream's CDUs (device staging)."""
        self.proto.handle(sp.SendSegment(nbytes, staged=True))

    def emit_end(self) -> None:
        """Put the END (after :meth:`reserve`) into PipeA."""
        act = self.proto.handle(sp.End())[0]
        self._pipe_a().force_put(self._cdu(act.nbytes.to_bytes(8, "little"), act.nseg,  # type: ignore[attr-defined]
                                    StreamOp.END))

    def cancel(self, exc: BaseException) -> None:
        """The sender gave up: an ABORT overtakes backpressure (unless the
        stream is already over, e.g. the receiver gave up first)."""
        if self.proto.ended or self.done.done():
            return
        if isinstance(exc, asyncio.CancelledError):
            why = "sender cancelled"
        elif isinstance(exc, TimeoutError):
            why = "sender timed out" + (f": {exc}" if str(exc) else "")
        else:
            why = f"sender failed: {type(exc).__name__}" + (f": {exc}" if str(exc) else "")
        act = self.proto.handle(sp.Cancel(why))[0]
        if self.carried:
            # Its OPEN, which may still be on its way, is the whole stream:
            # an ABORT behind it would find nothing to abort.
            return
        item = self._cdu(why.encode(), act.segno, StreamOp.ABORT)  # type: ignore[attr-defined]
        if self.pipe_a is not None:
            self.pipe_a.force_put(item)
        else:
            self.abort = item[2]

    def _pipe_a(self) -> Pipe[Any]:
        if self.pipe_a is None:  # a stream carried whole by its OPEN emits no segment or END
            raise ProtocolError(f"stream {self.key} was carried whole by its OPEN")
        return self.pipe_a

    def delivered(self) -> None:
        """The receiver took the whole stream."""
        try:
            self.proto.handle(_DONE_WHOLE)
        except ProtocolError as exc:  # a DONE before the END, or after the sender gave up
            if not self.proto.ended:
                self.break_(BrokenResourceError(f"stream receiver: {exc}"))
            return
        if not self.done.done():
            self.done.set_result(None)

    def break_(self, exc: BaseException, refused: bool = False) -> None:
        """The receiver gave up (``refused``), or its host is gone: the sender gets ``exc``."""
        if self.broken is None:
            self.broken = exc
        if not self.proto.ended:
            self.proto.handle(sp.Done(str(exc)) if refused else sp.Break(str(exc)))
        if not self.done.done():
            self.done.set_exception(exc)
            self.done.exception()
        if not self.routed.done():
            # Broken before its OPEN was routed (the receiver left while the
            # OPEN queued): ``opened`` will not move a broken stream, so the
            # sender waiting for the routing hears it here.
            self.routed.set_exception(exc)
            self.routed.exception()
        self.wake()

    def grant(self, n: int) -> None:
        """The receiver consumed ``n`` segments: that many more may be sent."""
        try:
            self.proto.handle(sp.Credit(n))
        except ProtocolError:
            return  # late (the stream is over) or meaningless: nothing waits on it
        self.wake()

    def wake(self) -> None:
        """Wake a sender waiting for credit (granted, or the stream broke)."""
        w = self._credit_waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def delivery(self) -> None:
        """Wait for the receiver's DONE (it took the whole stream) as a wait
        on a peer the stall watch sees: a sender whose receiver does not
        read is reported, and GPs that each wait so for the next, none of
        them reading, fail with ``DeadlockError`` instead of hanging.

        Cancellation: the wait ends (``done`` with it); every byte may have left.
        """
        if self.done.done():
            self.done.result()
            return
        await self._watched(STREAM_READING, self.done)

    async def _watched(self, resource: str, aw: Awaitable[Any]) -> None:
        """Await ``aw``, a wait for ``resource`` of the receiver, registered
        with the stall watch (when there is one) for as long as it lasts.

        Cancellation: the wait ends; one the watch failed (a deadlock)
        raises its error instead.
        """
        if self._waits is None:
            await aw
            return
        src, dest = self._names() if self._names is not None else ("?", "?")
        wait = self._waits.begin(src, resource, dest, self.host)
        try:
            await aw
        except asyncio.CancelledError:
            wait.check()
            raise
        finally:
            self._waits.end(wait)

    async def reserve(self) -> None:
        """Room for one more CDU of this stream (credit, or a PipeB slot).

        Cancellation: a cancelled reserve holds nothing.
        """
        if self.broken is not None:
            raise self.broken
        credits = self.proto.credits
        if credits is not None:
            if credits > 0:
                return  # a link takes stream data without GP credit
        else:
            try:
                self.target.reserve_nowait()
                return
            except WouldBlock:
                pass
            except BrokenResourceError:
                if self.broken is not None:  # say why: the receiver gave up the stream
                    raise self.broken from None
                raise
        await self._watched("the segment window of a stream", self._wait_room())

    async def _wait_room(self) -> None:
        if self.proto.credits is not None:
            while not self.proto.can_send:
                fut = self._credit_waiter = asyncio.get_running_loop().create_future()
                try:
                    await fut
                finally:
                    self._credit_waiter = None
                if self.broken is not None:
                    raise self.broken
            return
        try:
            await self.target.reserve()
        except BrokenResourceError:
            if self.broken is not None:  # say why: the receiver gave up the stream
                raise self.broken from None
            raise
        if self.broken is not None:  # receiver went away while we waited
            raise self.broken


class OpenRoute:
    """The OPEN's target: delivers it, then lets the stream's segments go."""

    __slots__ = ("target", "out")
    remote = False

    def __init__(self, target: Target, out: OutgoingStream) -> None:
        self.target = target
        self.out = out

    def put_to(self, pid: int, item: Any) -> bool | None:
        out = self.out
        if out.carried and (out.done.cancelled() or out.proto.state is StreamState.ABORTED):
            # A stream carried whole whose sender gave up (cancelled, timed
            # out: its wait cancelled ``done``) while its OPEN queued here: it
            # is not sent (GP.send_stream: "sent or not"), so the caller's
            # buffer, its own again since the CancelledError, is not read
            # now; its credit goes back.
            self.target.unreserve(pid, CREDIT_OVERHEAD + out.carried)
            return True
        put = self.target.put_to(pid, item)
        if put is False and out.carried:
            # A stream carried whole to a local GP that left, or to a host
            # whose link failed, while its OPEN queued: nothing will break it
            # later (it binds nothing), and its sender, done once the OPEN is
            # routed, must not hear "sent".
            names = out._names() if out._names is not None else ("?", "its receiver")
            why = f"GP {names[1]!r} left" if out.incoming is not None else f"host {out.host} is gone"
            out.break_(BrokenResourceError(f"the stream was not received: {why}"))
            return put
        out.opened()
        return put


def host_gone(target: Target) -> BrokenResourceError:
    """Why a short stream's record routed to ``target``, a host's link that
    refused it (failed), was not received: for its sender, who sent
    nothing after it and must not hear "sent"."""
    return BrokenResourceError(f"the stream was not received: host {getattr(target, 'host', '?')} is gone")


class WholeRoute:
    """The target of a short stream's record sent without a handle
    (:meth:`~aiopdbp.streams.table.StreamTable.send_whole`): routes it to
    the link and tells its sender, who waits (:meth:`wait`) only when the
    record queued behind other entries in the PipeManager.  A sender that
    gave up while it queued (cancelled, timed out) had its stream not sent:
    the record is dropped and its credit given back, as :class:`OpenRoute`
    does for a stream carried whole."""

    __slots__ = ("target", "cost", "routed", "error", "_fut")
    remote = False

    def __init__(self, target: Target, cost: int) -> None:
        self.target = target
        self.cost = cost
        self.routed = False
        self.error: BaseException | None = None  # why it could not be routed
        self._fut: asyncio.Future[None] | None = None

    def put_to(self, pid: int, item: Any) -> bool | None:
        fut = self._fut
        if fut is not None and fut.cancelled():
            # its sender's task was cancelled (or timed out) while this
            # queued: the cancel cancels the future it awaits at once
            self.target.unreserve(pid, self.cost)
            return True
        put = self.target.put_to(pid, item)
        # A link that failed while the record queued: nothing breaks a
        # stream that binds nothing later, and its sender must not hear "sent".
        self.routed = True
        if put is False:
            self.error = host_gone(self.target)
        if fut is not None:
            fut.set_result(None)
        return put

    async def wait(self) -> None:
        """Until the record is routed (at once when it was routed in the
        sender's call); raises why it could not be.

        Cancellation: a record not routed yet is not sent.
        """
        if not self.routed:
            fut = self._fut = asyncio.get_running_loop().create_future()
            await fut
        if self.error is not None:
            raise self.error
