"""The stream protocol, sans-I/O: one state machine per stream side.

Theory of operation
===================
A stream (the patent's SINFO) is one sender GP, one receiver GP and a
numbered run of segments between them.  This module is the *whole* protocol
of one stream, and nothing else: like h11's ``Connection`` it does no I/O,
owns no task and imports neither asyncio nor mpi4py nor cupy.  Code that does
I/O (:mod:`aiopdbp.streams.sender`: the one sender loop; :mod:`aiopdbp.streams.receiver`: the one receiver;
:mod:`aiopdbp.streams.table`: the bindings; :mod:`aiopdbp.streams.devicepath`: device
staging) feeds it *events* -- what happened -- and carries out the *actions*
it answers -- what to put on the wire, what to hand the reading GP.  Anything
that is not a valid next step (an event in the wrong state, a duplicate, late
or out-of-window segment, a stream nobody knows) is answered with
:class:`~aiopdbp.errors.ProtocolError`, never another kind of exception, so a
misbehaving peer can never crash the I/O code with an ``IndexError``.

The wire
--------
Five CDU ops of kind ``STREAM`` (:class:`~aiopdbp.wire.mesp.StreamOp`): OPEN
(meta; or, ``segno`` 1, the whole stream: its one segment as the record's
payload, which stands for a SEG 0 and an END of one segment), SEG ``segno``,
END (``segno`` = number of segments, data = bytes sent), ABORT (data = why);
from the receiver back on the control channel, DONE (whole, or why it gave
up; the DONEs of one loop iteration travel together; none for a stream its
OPEN carried whole, see below) and CREDIT (``n`` more segments may come).

States (both sides, :class:`StreamState`)::

    OPENING --Opened/Open--> OPEN --End--> ENDING --Done--> DONE      (sender)
    OPENING --SendWhole--> DONE             (sender: all of it in its OPEN)
    OPENING --Open--> OPEN --all segments + End verified--> DONE      (receiver)
    any live state --Cancel/Abort--> ABORTED      the sender gave up
    any live state --Close/Break/peer error--> BROKEN   receiver gave up,
                                                          host lost, bad input

DONE, ABORTED and BROKEN are terminal: every later event is a ProtocolError
(the I/O code, which knows that late credit or a late segment after a give-up
is a normal race, drops them; see :class:`Registry`).

Sender (:class:`SenderProtocol`)
--------------------------------
``Opened`` (the OPEN is routed ahead of any segment) lets segments go.
``SendSegment(nbytes)`` numbers the next segment (``EmitSegment(segno)``);
with a credit *window* (a remote receiver) each one takes a credit and the
receiver's ``Credit(n)`` gives them back, so a sender is never more than a
window ahead of its reader: the I/O code waits while :attr:`~SenderProtocol.
can_send` is False.  A segment may be *staged* (device data carried by raw
transport messages, paced by the stager): it is numbered and counted but takes
no credit and emits nothing.  ``End`` answers ``EmitEnd(nseg, nbytes)``;
``Done()`` from the receiver completes, ``Done(error)`` breaks;
``Cancel(why)`` answers ``EmitAbort`` (an ABORT overtakes backpressure: it
takes no credit).

Receiver (:class:`ReceiverProtocol`)
------------------------------------
``Open`` starts it.  ``Segment(segno, data, nbytes)`` may come in any order
within a reorder window of ``window`` segments past the next expected one;
the protocol keeps the early ones and answers ``Deliver(data)`` for each
segment that is now in order.  ``End(nseg, nbytes)`` may also come early
(device segments land after the END that announced them): the stream is
DONE once ``nseg`` segments are delivered and their bytes match the END
(``Finished`` + ``SendDone(None)``).  ``Consumed`` (the GP took a segment)
answers ``SendCredit(n)`` each half window, when the sender has a window.
``Abort`` answers ``Aborted(why)``; ``Close(why)`` (the GP gave up) answers
``SendDone(why)``; ``Break`` (host lost, node closing) answers nothing.
A ProtocolError caused by the peer breaks the stream first, so the I/O code
fails the reader and tells the sender (``SendDone(error)``).

*A fast path is the slow path that found it need not wait*: a stream whose
one segment and END are known when it opens (its OPEN carries it whole) may
say so in one event on each side: ``SendWhole(nbytes)`` on the sender is
``Opened``, a staged ``SendSegment(nbytes)``, ``End`` and ``Done`` back to
back (the END's credit taken, nothing to emit: the OPEN carried them;
``Finished``); ``Whole(data, nbytes)`` on the receiver is ``Segment(0,
data, nbytes)`` and ``End(1, nbytes)`` (``Deliver``, ``Finished``).  Same
states, same checks, one dispatch instead of four (a short stream feels each
one).  Such a stream is DONE for its sender once its OPEN is sent, as SPEC
section 5 has it ("the sender waits until the whole stream is sent"), so
the receiver answers it with no DONE: a short stream costs what a message
costs, one record one way.  A longer stream's sender waits for the DONE
instead, because its segments are paced by the receiver's credit anyway
and the DONE bounds how many such streams one sender has open at a time.
The commonest events of a stream of many small segments have one-call
forms too, for an I/O loop that carries the action out itself:
:meth:`SenderProtocol.segment` (``SendSegment``, its segment number back),
:meth:`ReceiverProtocol.take_next` (the ``Segment`` next in order, when
nothing is early and no END came) and :meth:`ReceiverProtocol.consumed`
(``Consumed``, the credit to give back); ``handle`` runs through them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from aiopdbp.errors import ProtocolError
from aiopdbp.records import Record

__all__ = [
    "Aborted", "Action", "Break", "Cancel", "Close", "Consumed", "Credit", "Deliver", "Done",
    "EmitAbort", "EmitEnd", "EmitSegment", "End", "Event", "Fail", "Finished", "Open", "Opened",
    "ReceiverProtocol", "Registry", "SendCredit", "SendDone", "SendSegment", "SendWhole", "Segment",
    "SenderProtocol", "StreamState", "TERMINAL", "TRANSITIONS", "Whole",
]


class StreamState(enum.Enum):
    """Where one side of a stream is (``IncomingStream.state`` on the
    receiving side).

    ``OPENING``: not open yet; ``OPEN``: segments flow; ``ENDING``: the
    sender has sent everything and waits for the receiver to confirm;
    ``DONE``: delivered whole; ``ABORTED``: the sender gave up (cancelled or
    failed); ``BROKEN``: the receiver gave up, or a peer, a host or the
    protocol failed.  The last three are final.
    """

    OPENING = "opening"  # sender: bound, its OPEN not routed yet; receiver: not opened yet
    OPEN = "open"        # segments flow
    ENDING = "ending"    # sender: END emitted, waiting for the receiver's DONE
    DONE = "done"        # delivered whole (receiver: END verified)
    ABORTED = "aborted"  # the sender gave up (cancelled, failed)
    BROKEN = "broken"    # the receiver gave up, or a peer, host or protocol failed


TRANSITIONS: dict[StreamState, frozenset[StreamState]] = {
    StreamState.OPENING: frozenset({StreamState.OPEN, StreamState.ABORTED, StreamState.BROKEN}),
    StreamState.OPEN: frozenset({StreamState.ENDING, StreamState.DONE, StreamState.ABORTED,
                                 StreamState.BROKEN}),
    StreamState.ENDING: frozenset({StreamState.DONE, StreamState.ABORTED, StreamState.BROKEN}),
    StreamState.DONE: frozenset(),
    StreamState.ABORTED: frozenset(),
    StreamState.BROKEN: frozenset(),
}
TERMINAL = frozenset({StreamState.DONE, StreamState.ABORTED, StreamState.BROKEN})
# The same by the states' values: hashing an Enum member runs Python code
# (Enum.__hash__), a str's hash is cached; every event checks these.
_ALLOWED = {state.value: tuple(nxt) for state, nxt in TRANSITIONS.items()}
_DONE, _ABORTED, _BROKEN = StreamState.DONE, StreamState.ABORTED, StreamState.BROKEN
_OPENING, _OPEN, _ENDING = StreamState.OPENING, StreamState.OPEN, StreamState.ENDING


# ---------------------------------------------------------------- events
class Event(Record):
    """Something that happened to a stream side (or, as an action, what to do).

    Each kind is a mutable record (:mod:`aiopdbp.records`): its fields are
    its ``__slots__``, its ``__init__`` is written out, equality and repr
    are a dataclass's -- without the methods a dataclass compiles at import,
    on every rank."""

    __slots__ = ()


Action = Event  # actions are plain records too


class Opened(Event):
    """Sender: the OPEN is routed; every segment goes after it."""

    __slots__ = ()


class SendSegment(Event):
    """Sender: the next segment of ``nbytes`` (``staged``: carried outside
    the stream's CDUs, e.g. by device staging; it takes no credit)."""

    __slots__ = ("nbytes", "staged")
    nbytes: int
    staged: bool

    def __init__(self, nbytes: int, staged: bool = False) -> None:
        self.nbytes = nbytes
        self.staged = staged


class SendWhole(Event):
    """Sender: the routed OPEN carried the whole stream, ``nbytes`` in one
    segment, and its END (``Opened``, a staged ``SendSegment``, ``End``)."""

    __slots__ = ("nbytes",)
    nbytes: int

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


class Credit(Event):
    """Sender: the receiver consumed ``n`` segments."""

    __slots__ = ("n",)
    n: int

    def __init__(self, n: int) -> None:
        self.n = n


class Done(Event):
    """Sender: the receiver took the whole stream (``error`` None) or gave up."""

    __slots__ = ("error",)
    error: str | None

    def __init__(self, error: str | None = None) -> None:
        self.error = error


class Cancel(Event):
    """Sender: this side gives up (cancelled, failed)."""

    __slots__ = ("why",)
    why: str

    def __init__(self, why: str) -> None:
        self.why = why


class Open(Event):
    """Receiver: the stream's OPEN arrived."""

    __slots__ = ()


class Segment(Event):
    """Receiver: segment ``segno`` arrived (``data`` is opaque here)."""

    __slots__ = ("segno", "data", "nbytes")
    segno: int
    data: Any
    nbytes: int

    def __init__(self, segno: int, data: Any, nbytes: int) -> None:
        self.segno = segno
        self.data = data
        self.nbytes = nbytes


class Whole(Event):
    """Receiver: the OPEN carried the whole stream: segment 0 (``data``,
    ``nbytes``) and an END of one segment of ``nbytes``."""

    __slots__ = ("data", "nbytes")
    data: Any
    nbytes: int

    def __init__(self, data: Any, nbytes: int) -> None:
        self.data = data
        self.nbytes = nbytes


class End(Event):
    """Sender: emit the END.  Receiver: the END arrived (``nseg``
    segments, ``nbytes`` bytes were sent)."""

    __slots__ = ("nseg", "nbytes")
    nseg: int
    nbytes: int

    def __init__(self, nseg: int = -1, nbytes: int = -1) -> None:
        self.nseg = nseg
        self.nbytes = nbytes


class Abort(Event):
    """Receiver: the sender's ABORT arrived."""

    __slots__ = ("why",)
    why: str

    def __init__(self, why: str) -> None:
        self.why = why


class Consumed(Event):
    """Receiver: the GP took one delivered segment."""

    __slots__ = ()


class Close(Event):
    """Receiver: this side gives up (``aclose()``, its GP left, a device error)."""

    __slots__ = ("why",)
    why: str

    def __init__(self, why: str) -> None:
        self.why = why


class Break(Event):
    """Either side: the peer's host is gone or the node closes (nobody to tell)."""

    __slots__ = ("why",)
    why: str

    def __init__(self, why: str) -> None:
        self.why = why


# --------------------------------------------------------------- actions
class EmitSegment(Event):
    """Sender: put segment ``segno`` on the wire."""

    __slots__ = ("segno",)
    segno: int

    def __init__(self, segno: int) -> None:
        self.segno = segno


class EmitEnd(Event):
    """Sender: put the END on the wire."""

    __slots__ = ("nseg", "nbytes")
    nseg: int
    nbytes: int

    def __init__(self, nseg: int, nbytes: int) -> None:
        self.nseg = nseg
        self.nbytes = nbytes


class EmitAbort(Event):
    """Sender: put an ABORT on the wire (after segment ``segno`` - 1)."""

    __slots__ = ("segno", "why")
    segno: int
    why: str

    def __init__(self, segno: int, why: str) -> None:
        self.segno = segno
        self.why = why


class Finished(Event):
    """Either side: the stream was delivered whole."""

    __slots__ = ()


class Fail(Event):
    """Sender: the stream failed at the receiver (or its host): report ``why``."""

    __slots__ = ("why",)
    why: str

    def __init__(self, why: str) -> None:
        self.why = why


class Deliver(Event):
    """Receiver: hand ``data`` (the next segment in order) to the GP."""

    __slots__ = ("data",)
    data: Any

    def __init__(self, data: Any) -> None:
        self.data = data


class Aborted(Event):
    """Receiver: the sender gave up (``why``)."""

    __slots__ = ("why",)
    why: str

    def __init__(self, why: str) -> None:
        self.why = why


class SendDone(Event):
    """Receiver: tell the sender the stream is over (``error`` None: whole)."""

    __slots__ = ("error",)
    error: str | None

    def __init__(self, error: str | None) -> None:
        self.error = error


class SendCredit(Event):
    """Receiver: give the sender ``n`` credits back."""

    __slots__ = ("n",)
    n: int

    def __init__(self, n: int) -> None:
        self.n = n


_NONE: tuple[Event, ...] = ()
_FINISHED: tuple[Event, ...] = (Finished(),)  # (an event carries no state: one serves every stream)
_OPEN_EVENT = Open()


def _ints(ev: Event, *values: object) -> None:
    """Numbers of the wire are ints (a float or a bool would corrupt the order)."""
    for v in values:
        if type(v) is not int:
            raise ProtocolError(f"malformed {ev!r}: {v!r} is not an int")


class _Side:
    """State and checked transitions, shared by both sides."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = StreamState.OPENING

    @property
    def ended(self) -> bool:
        state = self.state
        return state is _DONE or state is _ABORTED or state is _BROKEN

    def _move(self, new: StreamState) -> None:
        if new not in _ALLOWED[self.state._value_]:
            raise ProtocolError(f"stream state {self.state.name} -> {new.name} is not allowed")
        self.state = new

    def _expect(self, event: Event, *states: StreamState) -> None:
        if self.state not in states:
            raise ProtocolError(f"{type(event).__name__} in state {self.state.name} "
                                f"(expected {' or '.join(s.name for s in states)})")

    def handle(self, event: Event) -> tuple[Event, ...]:
        """Feed one event; the actions to carry out, in order.

        Raises ProtocolError for an event that is not a valid next step.
        """
        h = self._handlers.get(type(event))  # type: ignore[attr-defined]
        if h is None:
            raise ProtocolError(f"{type(self).__name__} takes no {type(event).__name__} event")
        try:
            return h(self, event)  # type: ignore[no-any-return]
        except (TypeError, ValueError) as exc:  # a field of the wrong type (checked before any change)
            raise ProtocolError(f"malformed {event!r}: {exc}") from None


# ------------------------------------------------------------------ sender
class SenderProtocol(_Side):
    """The sending side of one stream (see the module docstring).

    ``window``: credits (segments) the receiver granted up front; None for a
    receiver whose bounded pipe is the backpressure (no credit accounting).
    """

    __slots__ = ("credits", "segno", "nbytes")

    def __init__(self, window: int | None) -> None:
        super().__init__()
        if window is not None and window < 1:
            raise ProtocolError(f"a credit window must be >= 1 segment, not {window}")
        self.credits = window
        self.segno = 0
        self.nbytes = 0

    @property
    def can_send(self) -> bool:
        """True when a segment (or the END) may go now without waiting for credit."""
        return self.credits is None or self.credits > 0

    def _take_credit(self, what: str) -> None:
        if self.credits is not None:
            if self.credits <= 0:
                raise ProtocolError(f"{what} without credit (window used up)")
            self.credits -= 1

    def _opened(self, ev: Opened) -> tuple[Event, ...]:
        if self.state is not _OPENING:
            self._expect(ev, StreamState.OPENING)
        self._move(StreamState.OPEN)
        return _NONE

    def segment(self, nbytes: int, staged: bool = False) -> int:
        """``handle(SendSegment(nbytes, staged))`` without its event and
        action, for a sender loop that emits the segment itself (a stream of
        small segments feels every call): the segment's number, which an
        ``EmitSegment`` would carry.  ``ProtocolError`` as ``handle`` raises."""
        if self.state is not _OPEN:
            self._expect(SendSegment(nbytes, staged), StreamState.OPEN)
        if type(nbytes) is not int or nbytes < 0:
            _ints(SendSegment(nbytes, staged), nbytes)
            raise ProtocolError(f"a segment of {nbytes} bytes")
        segno = self.segno
        if not staged:
            credits = self.credits
            if credits is not None:
                if credits <= 0:
                    raise ProtocolError(f"segment {segno} without credit (window used up)")
                self.credits = credits - 1
        self.segno = segno + 1
        self.nbytes += nbytes
        return segno

    def _segment(self, ev: SendSegment) -> tuple[Event, ...]:
        segno = self.segment(ev.nbytes, ev.staged)
        return _NONE if ev.staged else (EmitSegment(segno),)

    def _end(self, ev: End) -> tuple[Event, ...]:
        if self.state is not _OPEN:
            self._expect(ev, StreamState.OPEN)
        self._take_credit("the END")
        self._move(StreamState.ENDING)
        return (EmitEnd(self.segno, self.nbytes),)

    def _whole(self, ev: SendWhole) -> tuple[Event, ...]:
        if self.state is not _OPENING:
            self._expect(ev, StreamState.OPENING)
        if type(ev.nbytes) is not int or ev.nbytes < 0:
            _ints(ev, ev.nbytes)
            raise ProtocolError(f"a segment of {ev.nbytes} bytes")
        credits = self.credits
        if credits is not None:
            if credits <= 0:
                raise ProtocolError("the END without credit (window used up)")
            self.credits = credits - 1
        # OPENING -> OPEN -> ENDING -> DONE, all allowed: the four events in
        # one.  Every byte left in the OPEN, and a stream is done for its
        # sender once it is sent (SPEC section 5): no DONE comes back for it.
        self.state = _DONE
        self.segno = 1
        self.nbytes = ev.nbytes
        return _FINISHED

    def _credit(self, ev: Credit) -> tuple[Event, ...]:
        self._expect(ev, StreamState.OPENING, StreamState.OPEN, StreamState.ENDING)
        _ints(ev, ev.n)
        if ev.n < 1:
            raise ProtocolError(f"a credit of {ev.n} segments")
        if self.credits is None:
            raise ProtocolError("credit for a stream that has no credit window")
        self.credits += ev.n
        return _NONE

    def _done(self, ev: Done) -> tuple[Event, ...]:
        if ev.error is not None:
            self._expect(ev, StreamState.OPENING, StreamState.OPEN, StreamState.ENDING)
            self._move(StreamState.BROKEN)
            return (Fail(ev.error),)
        if self.state is not _ENDING:  # whole before the END was sent: a lie
            self._expect(ev, StreamState.ENDING)
        self._move(StreamState.DONE)
        return (Finished(),)

    def _cancel(self, ev: Cancel) -> tuple[Event, ...]:
        self._expect(ev, StreamState.OPENING, StreamState.OPEN, StreamState.ENDING)
        self._move(StreamState.ABORTED)
        return (EmitAbort(self.segno, ev.why),)

    def _break(self, ev: Break) -> tuple[Event, ...]:
        self._expect(ev, StreamState.OPENING, StreamState.OPEN, StreamState.ENDING)
        self._move(StreamState.BROKEN)
        return (Fail(ev.why),)

    _handlers: dict[type[Event], Callable[[Any, Any], tuple[Event, ...]]] = {
        Opened: _opened, SendSegment: _segment, End: _end, Credit: _credit, Done: _done,
        Cancel: _cancel, Break: _break, SendWhole: _whole}


# ---------------------------------------------------------------- receiver
class ReceiverProtocol(_Side):
    """The receiving side of one stream (see the module docstring).

    ``window``: how far past the next expected segment one may arrive (the
    reorder window); ``credit_window``: the sender's credit window (0: it has
    none, give no credit back).
    """

    __slots__ = ("window", "credit_window", "next", "nbytes", "end", "_early", "_consumed")

    def __init__(self, window: int, credit_window: int = 0) -> None:
        self.state = _OPENING  # (_Side's, without the call: one of these per stream received)
        if window < 1 or credit_window < 0:
            raise ProtocolError(f"bad stream windows: reorder {window}, credit {credit_window}")
        self.window = window
        self.credit_window = credit_window
        self.next = 0                       # segments delivered in order so far
        self.nbytes = 0                     # their bytes
        self.end: tuple[int, int] | None = None  # the END's (nseg, nbytes) once it arrived
        self._early: dict[int, tuple[Any, int]] = {}
        self._consumed = 0

    def _open(self, ev: Open) -> tuple[Event, ...]:
        if self.state is not _OPENING:
            self._expect(ev, StreamState.OPENING)
        self._move(StreamState.OPEN)
        return _NONE

    def _peer_error(self, why: str) -> ProtocolError:
        """A peer's bad input: the stream breaks; the I/O code tells the sender."""
        if not self.ended:
            self.state = StreamState.BROKEN
        return ProtocolError(why)

    def take_next(self, segno: int, nbytes: int) -> bool:
        """``handle(Segment(segno, data, nbytes))`` in one step for the
        commonest segment -- the next in order, none early, no END yet --
        without its event and action: True once taken (its one ``Deliver``
        is the caller's to do).  False, having changed nothing, for any
        other, which ``handle`` then takes (or refuses)."""
        if (self.state is not _OPEN or segno != self.next or self._early or self.end is not None
                or type(segno) is not int or type(nbytes) is not int):
            return False
        self.next = segno + 1
        self.nbytes += nbytes
        return True

    def _segment(self, ev: Segment) -> tuple[Event, ...]:
        if self.take_next(ev.segno, ev.nbytes):
            return (Deliver(ev.data),)
        if self.state is not _OPEN:
            self._expect(ev, StreamState.OPEN)
        _ints(ev, ev.segno, ev.nbytes)
        segno = ev.segno
        nxt = self.next
        if segno < nxt or segno in self._early:
            raise self._peer_error(f"duplicate segment {segno}")
        if self.end is not None and segno >= self.end[0]:
            raise self._peer_error(f"segment {segno} after an END of {self.end[0]} segments")
        if segno >= nxt + self.window:
            raise self._peer_error(f"segment {segno} is out of the reorder window "
                                   f"(segment {nxt} missing, window {self.window})")
        if segno != nxt:
            self._early[segno] = (ev.data, ev.nbytes)
            return _NONE
        out: list[Event] = [Deliver(ev.data)]
        self.nbytes += ev.nbytes
        nxt += 1
        early = self._early
        while early and nxt in early:
            data, n = early.pop(nxt)
            out.append(Deliver(data))
            self.nbytes += n
            nxt += 1
        self.next = nxt
        out.extend(self._maybe_finish())
        return tuple(out)

    def _maybe_finish(self) -> tuple[Event, ...]:
        end = self.end
        if end is None or self.next < end[0]:
            return _NONE
        if end[1] != self.nbytes:
            why = f"END announced {end[0]} segments/{end[1]} bytes, received {self.next}/{self.nbytes}"
            self.state = StreamState.BROKEN
            raise ProtocolError(why)
        self._move(StreamState.DONE)
        return (Finished(), SendDone(None))

    def _end(self, ev: End) -> tuple[Event, ...]:
        if self.state is not _OPEN:
            self._expect(ev, StreamState.OPEN)
        _ints(ev, ev.nseg, ev.nbytes)
        if self.end is not None:
            raise self._peer_error("a second END")
        if ev.nseg < self.next or ev.nbytes < 0 or (self._early and any(s >= ev.nseg for s in self._early)):
            raise self._peer_error(f"END announced {ev.nseg} segments/{ev.nbytes} bytes, "
                                   f"{self.next + len(self._early)} segments arrived")
        self.end = (ev.nseg, ev.nbytes)
        return self._maybe_finish()

    def _whole(self, ev: Whole) -> tuple[Event, ...]:
        if self.state is not _OPEN:
            self._expect(ev, StreamState.OPEN)
        if type(ev.nbytes) is not int:
            _ints(ev, ev.nbytes)
        if self.next or self._early or self.end is not None:
            raise self._peer_error("a whole stream after other segments or an END")
        if ev.nbytes < 0:
            raise self._peer_error(f"a segment of {ev.nbytes} bytes")
        # Segment 0 in order, then its END of one segment: DONE at once.
        self.next = 1
        self.nbytes = ev.nbytes
        self.end = (1, ev.nbytes)
        self.state = _DONE
        # no SendDone: the sender was done once the OPEN left (SendWhole)
        return (Deliver(ev.data), _FINISHED[0])

    def take_whole(self, nbytes: int) -> None:
        """The OPEN, the one segment of ``nbytes`` and the END of a stream
        carried whole, in one step, for a receiver that keeps the segment
        itself: the state ``handle(Open())`` then ``handle(Whole(...))``
        leave (DONE), without their events and actions (a short stream
        feels every call).  ``ProtocolError`` as those would raise."""
        if self.state is not _OPENING:
            self._expect(_OPEN_EVENT, StreamState.OPENING)
        if type(nbytes) is not int or nbytes < 0:
            raise self._peer_error(f"a segment of {nbytes!r} bytes")
        self.next = 1
        self.nbytes = nbytes
        self.end = (1, nbytes)
        self.state = _DONE

    def _abort(self, ev: Abort) -> tuple[Event, ...]:
        self._expect(ev, StreamState.OPENING, StreamState.OPEN)
        self._move(StreamState.ABORTED)
        self._early.clear()
        return (Aborted(ev.why),)

    def consumed(self) -> int:
        """``handle(Consumed())`` without its event and action: the credit
        to give the sender back now, 0 for none (a ``SendCredit(n)``)."""
        window = self.credit_window
        if window <= 0:
            return 0
        # The sender gets its credit back in half-windows: it never runs more
        # than a window ahead of what this GP consumed.
        n = self._consumed + 1
        if n >= (window >> 1 or 1) and not self.ended:
            self._consumed = 0
            return n
        self._consumed = n
        return 0

    def _consumed_one(self, ev: Consumed) -> tuple[Event, ...]:
        n = self.consumed()
        return (SendCredit(n),) if n else _NONE

    def _close(self, ev: Close) -> tuple[Event, ...]:
        self._expect(ev, StreamState.OPENING, StreamState.OPEN)
        self._move(StreamState.BROKEN)
        self._early.clear()
        return (SendDone(ev.why),)

    def _break(self, ev: Break) -> tuple[Event, ...]:
        self._expect(ev, StreamState.OPENING, StreamState.OPEN)
        self._move(StreamState.BROKEN)
        self._early.clear()
        return _NONE

    _handlers: dict[type[Event], Callable[[Any, Any], tuple[Event, ...]]] = {
        Open: _open, Segment: _segment, End: _end, Abort: _abort, Consumed: _consumed_one,
        Close: _close, Break: _break, Whole: _whole}


# ---------------------------------------------------------------- registry
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Registry(Generic[K, V]):
    """The live streams of one side, by key, and the ones it gave up.

    :meth:`get` of a key never seen is a ProtocolError (unknown stream); of a
    key this side gave up it is None: what the peer still had on the way is
    late, not wrong, and is dropped.
    """

    __slots__ = ("live", "_given_up")

    def __init__(self) -> None:
        self.live: dict[K, V] = {}
        self._given_up: set[K] = set()

    def __len__(self) -> int:
        return len(self.live)

    def add(self, key: K, value: V) -> None:
        if key in self.live:
            raise ProtocolError(f"stream {key} is already open")
        self._given_up.discard(key)
        self.live[key] = value

    def get(self, key: K) -> V | None:
        v = self.live.get(key)
        if v is not None:
            return v
        if key in self._given_up:
            return None
        raise ProtocolError(f"unknown stream {key}")

    def remove(self, key: K, given_up: bool = False) -> V | None:
        """Forget ``key``; ``given_up``: drop whatever still comes for it."""
        if given_up:
            self._given_up.add(key)
        return self.live.pop(key, None)

    def settle(self, key: K) -> None:
        """The peer's last word (END or ABORT) on a given-up stream arrived."""
        self._given_up.discard(key)
