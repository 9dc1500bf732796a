"""The send side of the DDBP towards one remote host: SCBP_h and its sender.

Theory of operation
-------------------
A :class:`HostLink` is the routing target (:mod:`aiopdbp.routing.router`) of every GP
that lives on host ``h``.  It does the paper's SBP work without a task: it
admits each item by credit (below) and hands it to its
:class:`~aiopdbp.hosts.sender.LinkSender`, which coalesces, splits and posts:

* **Per-destination credit.**  Host ``h`` lets this host have ``window``
  bytes of messages (payload + :data:`~aiopdbp.wire.message.CREDIT_OVERHEAD` each)
  outstanding per destination GP; it gives them back (``grant``) as that GP
  takes them.  A sender reserves credit for *its* destination before
  queuing, so a GP that stops reading stops only its own senders; every other
  GP of ``h`` keeps receiving at full rate.  Stream segments (pid 0) take no
  GP credit: a stream has its own window of segments (:mod:`aiopdbp.streams.receiver`).
* **Coalescing.**  The first CDU for ``h`` in a loop iteration leaves at once,
  as a frame of its own (latency).  The CDUs that follow in the same
  iteration are encoded straight into the open block of the sub-pool SCBP_h
  -- short messages, and streams carried whole by their OPEN
  (:class:`~aiopdbp.wire.shorts.ShortStream`), in the 15-byte compact
  record of a BPS block, anything else as a full record of a BP block -- and the block is sent when it is
  full or at the end of the iteration (``call_soon``): a burst becomes one
  MPI message per 64 KiB, whatever the number of senders.  Where ranks
  outnumber cores (the transport's ``holds_blocks``), a small send to ``h``
  that did not complete at once (:data:`~aiopdbp.hosts.sender.HOLD_BELOW`:
  MPI is waiting for one of the rank's shared-memory cells, all taken) holds
  the next items back: no lone frame, and the open block is not sent at the
  iteration's end but when those sends complete (or when it is full), so the
  items of several iterations share one MPI message and one cell instead of
  queueing one each behind receivers that have no core.
* **Large payloads** (``>= large``: stream segments, big messages) are not
  copied: a split frame, its header on the data channel and the payload as
  ONE more MPI message straight from the caller's buffer (see "Large
  payloads" below).
* **Sending.**  Up to ``max_inflight`` MPI sends per host are in flight; more
  wait in order and go as earlier ones complete (the progress engine's
  completion callback), so blocks of different hosts travel in parallel.
  A block returns to the pool when its send has completed.

Everything here runs in the event loop thread and never awaits, except
:meth:`HostLink.reserve` (a sender waiting for credit).

Credit: one admission rule, a fair hand-off
-------------------------------------------
The rule lives in one sans-I/O class, :class:`~aiopdbp.hosts.gate.CreditGate`
(the receiving side's in :class:`~aiopdbp.hosts.gate.CreditBook`); the link
turns its answers into futures woken and asks sent.  Per destination GP
``pid`` the gate keeps ``credit`` (a full ``window`` when absent) and a FIFO
queue of parked senders, each with the bytes it needs.  The **rule**
(``_admit``): a request of ``n`` bytes is admitted when ``pid`` is not
*contended* (below) and ``credit >= min(n, window)``; it takes
``n`` (so a message larger than the window goes once the whole window is
back, and credit runs negative by the excess: never more than
``max(window, largest message)`` bytes are outstanding per destination).
``reserve_nowait`` and ``offer`` (the fast paths) are this rule and nothing
else; ``reserve`` applies it and otherwise parks at the tail.  A ``grant``
adds the returned bytes and **serves** the queue head first, reserving for
each waiter before waking it, while the credit covers the head's
``min(need, window)``; so a newcomer can never spend what a grant returned
for a parked sender, every grant is used in full, and a large head holds the
smaller senders behind it (FIFO: none of them can starve it).  A cancelled
waiter that had been served gives its credit back and the queue is served
again; one cancelled while parked leaves the queue, and if it was the head,
the senders behind it are served as far as the credit covers (the rule of
``asyncio.Semaphore`` and trio's channels).  Local pipe slots follow the
same hand-off (:meth:`aiopdbp.routing.pipes.Pipe.reserve`, in the same
:class:`~aiopdbp.hosts.gate.ParkingLot`).

*Fair for every size.*  A destination is **contended** from the moment a
sender parks for it until its queue is empty *and* every sender a grant
woke has run.  A grant that covers all k parked senders (small messages, a
quarter window at a time) would otherwise leave credit over, and the first
woken sender -- whose ``await gp.send`` then completes without suspending --
would loop and spend all of it on the fast path before the other k - 1 had
run: it got nearly every message.  While contended, ``admit`` refuses
everyone, so that sender parks at the tail behind the senders woken with it
(and, if the credit left covers it at once, still yields one loop turn, so
they run first).  Each of k senders waiting on one reader is therefore
served once per round, whatever the message size; senders on several hosts
then share the reader by its pipe's turns ("Local senders too").  The
uncontended fast path is unchanged: one dict lookup.  ``tests/test_load.py`` checks each sender's
count against 1/k.

*From the first message.*  Before anyone parks, the destination is not
contended and the window is empty: a whole window (a thousand 1 KiB
messages in the default 1 MiB, ten seconds of a reader taking one per
10 ms) is there for the fast path.  A looping sender whose sends complete
without suspending would fill it alone before the others ran, and the
reader, taking its pipe in arrival order, would give it every message for
as long as that window lasts.  So a GP yields one loop turn each time a run
of sends that did not suspend has spent ``BURST_BYTES`` (16 KiB) of credit
(:meth:`aiopdbp.runtime.process.GP.send`, as trio's ``send`` checkpoints,
but once per 16 KiB, not once per send); a send or a receive that waits
starts the run afresh.  k senders ready together therefore fill the first
window in turns of 16 KiB each (15 messages of 1 KiB), and once it is spent
they park in that order: each gets 1/k, to within one turn, from the first
message on.  The cost is one loop turn per 16 KiB of sends that never wait
(per 128 messages of 64 B; a turn every few messages would cost the
small-message rate), none for a sender that waits for replies (ping-pong).
What the yield cannot share is a head start: a host whose messages reach
the pipe first (the reader's own, against a link's latency) has its window
queued ahead of the others'; the reader's turns (below) share that.

*Local senders too.*  The senders on the reader's own host have no link:
the reader's private pipe admits them (:meth:`aiopdbp.routing.pipes.Pipe.reserve`)
by the same rule in the same :class:`~aiopdbp.hosts.gate.ParkingLot`.  Room
the reader frees is reserved for the head before it is woken, and the pipe
is contended while anyone is parked or a woken sender has not run yet: a
sender refused then parks at the tail, to be served once one woken
before it has run.  So k local senders are served once per round as well.  And
the local host is one more host with a window of its own: the pipe holds at
most ``gp_window`` bytes of local messages (and streams carried whole), and
its ``pipe_capacity`` slots count local items only (other hosts' items come
past it, bounded by their credit), so neither side's items can take the
other's room.

*The reader's turns.*  Each host, the reader's own included, then has up
to a window (or ``pipe_capacity`` local items, when fewer) queued in the
pipe, in the order it arrived: one host's whole window can be queued ahead
of another's (the first to start, the one with no link to cross).  So the
reader does not take its pipe in arrival order once it holds items of
several senders: it takes one item of each sender in turn, each sender's
in its order (:mod:`aiopdbp.routing.pipes`, "Turns"); k senders with items
queued get 1/k each, wherever they are and from the first message.  Credit
(and the local byte bound) come back as the items are taken, counted up to
the oldest item not taken yet (local items and other hosts' apart:
``Pipe.on_watch``), so the turns never free an item still queued: the
bounds above are unchanged, and so is "every wait is released by the
destination GP reading".  Each host's credit is
counted apart, and messages of one cost taken out of arrival order count as
taken in order, so no sender's long queue holds back another's credit.  For
messages of about a window (1 MiB in the default 1 MiB window) a host has
one in the pipe at a time, from its parked senders in turn; the turns go
in rounds, a sender served in this one waiting for the next, and a round
that served such a host waits (at most ``Pipe.hold_s``) for that host's
next message before the next round begins -- else, while it is on its
way (the credit's round trip and the transfer), the reader's own senders
alone made up the rounds (:mod:`aiopdbp.routing.pipes`, "Rounds wait for
a host") -- so each of k senders still gets 1/k, however unevenly they
are spread over hosts.

*A head start within a host.*  A sender that starts before its
host-mates fills that host's window alone, and the others then park
behind it with nothing in the pipe, so the reader's turns cannot reach
them: they join only as the reader takes the early sender's messages and
that credit comes back.  So the step of that return is what the head
start is worth: an asking sender's credit comes back once ``window / 64``
of that host's messages are taken (16 messages of 1 KiB), and the
receiver's marks are no coarser (:mod:`aiopdbp.routing.arrivals`); the grant is shared among the
parked senders in rounds, and from then on each has items queued and its
turn.  (With eighth-window marks the late senders waited for 128 of the
early one's messages -- seconds of a slow reader.)
``tests/test_load.py`` checks even and uneven spreads, 1 KiB and 1 MiB,
and a head start.

*Owed credit below a quarter window.*  The receiving host returns credit in
steps of at least ``window / 4`` (the router's owed-credit book: one
control message per quarter window, not per message; none when a split
header to that host leaves first and carries it, :mod:`aiopdbp.hosts.credit`,
"Grants carried").  A remainder below
that could strand a sender whose need exceeds what is left, so **a parked
sender asks**: when a queue forms, and again after each grant that leaves
it non-empty, the link sends host ``h`` one :class:`~aiopdbp.wire.control.CreditAskMsg`.
Host ``h`` then returns everything owed for ``pid`` as soon as the GP has
taken every item of ours that waits in its pipe, or ``window / 64`` of them
(at once if it already has), and that grant answers the ask.  So while a sender is parked, every byte it
is owed comes back once the destination has read what was sent: a healthy
job sends at most one ask per grant, an idle one none.

Large payloads: one MPI message, buffer ownership, admission
------------------------------------------------------------
(issue 18 item 3.)  A payload of ``large`` bytes or more (32 KiB,
``RemoteConfig.large``; below it a copy into a coalesced block costs less
than a message of its own) leaves as a *split frame*: the CDU header (~100
bytes) as a data-channel message, then -- on a transport with bulk payloads
(MPI: :meth:`~aiopdbp.transport.mpi.MPITransport.post_bulk`) -- the payload as
one ``Isend`` on the bulk communicator, tagged with the frame's number
towards this host.  The receiving host posts the matching ``Irecv`` when the
header arrives, into the buffer the payload lands in for good (a pooled one,
or the destination GP's own in ``recv_into``: :mod:`aiopdbp.hosts.inbound`);
MPICH's rendezvous moves the bytes, once, with no pool block and no copy on
either side.  (The in-process transport has no bulk payloads: header and
payload follow each other on the data channel, and it copies at the send.)
The header of one GP's array to one GP depends only on (kind, source,
destination, com, dtype, shape), so it is encoded once and kept
(:func:`~aiopdbp.wire.codec.encode_split_array`): a loop sending arrays of
one shape skips the encoder (~3 us of a 64 KiB hop's ~30).

*Buffer ownership* (``MPI_Send``'s): ``await gp.send(big)`` of a writable
array does not copy it (:meth:`~aiopdbp.routing.router.Router.send_owned`):
the link gets an :class:`OwnedSend` whose future completes when the
payload's ``Isend`` has completed, and only then does the call return -- so
the caller may overwrite the array as soon as ``send`` returns.  A read-only
array over immutable memory needs no wait (nothing can change it), a local
destination gets a copy (its pipe keeps the message), and
``send_nowait`` copies (it cannot wait for MPI; refusing large writable
arrays there would break code that works today for a saving the caller can
have with ``await send``).  If host ``h`` fails, every owned send still
waiting fails with the link's error (MPI keeps the buffer referenced).
Cancellation: the completion is an :class:`OwnedDone`, which the transport
resolves from the progress step that sees it (one hop to the sender) and
which a cancel cannot abort once the payload is posted -- the sender's
cancel waits until MPI is done with the buffer (or the link fails, or the
transport closes and abandons the request), then the send returns if the
payload went (the cancel comes at the task's next suspension) and raises
``CancelledError`` if not; a send cancelled before the link took it is
dropped here with its credit returned.

*Admission: credit is the clear-to-send.*  The sender reserves the message's
bytes of the destination GP's credit (the fair rule above) *before* the
header and the payload are posted; the receiving host therefore only posts
receives for bytes it has admitted, and allocates the landing buffer then
(the payload is never matched, probed or allocated earlier).  A message
larger than the window waits until the whole window is back, so per
(sending host, GP) at most ``max(window, largest message)`` bytes have
landed or are landing.  No extra round trip (RTS/CTS) is needed for that:
MPICH's own rendezvous already keeps the bytes at the sender until the
``Irecv`` is posted, and the posting is bounded by the credit.  Measured
bound (``tests/mpi_scripts/large_rss.py``): three hosts sending 16 MiB
arrays to one GP that reads nothing grow the receiving rank's peak RSS by
about 3 x 16 MiB, within the documented ``(senders + 2) x 16 MiB``.

Why nothing waits forever inside the library
--------------------------------------------
(the argument of the paper's Algorithm 1: what a sender may hold while it
waits, and what releases the wait.)

* **Credit** (here).  A parked sender holds nothing of the destination (a
  multicast may hold credit or slots it reserved for *other* destinations;
  they are released by those GPs reading, independently).  Outstanding
  credit of ``pid`` is in one of four places: in flight as data, in ``pid``'s
  pipe, owed by ``h``, in flight as a grant.  Data in flight lands without
  waiting (below); items in the pipe become owed when ``pid`` reads; owed
  credit is granted by the quarter rule or by the ask; grants land.  Hence
  the only thing a credit wait needs is **the destination GP reading** --
  never another sender's resources, never the waiter's own.
* **Pipe slots** of a local GP: released by that GP reading (``receive`` /
  ``drain`` hand the slot to the head waiter).  Items from other hosts go in
  past capacity (``put_many``): credit already bounded them, so the receive
  path never waits for a slot.
* **Pool blocks.**  Nothing waits for one: the send side takes a block with
  ``acquire_nowait`` and falls back to a private buffer when the row is full
  (``pool_fallbacks``); the receive side does the same when the transport
  allocates (``fallback_allocs``).  Fallbacks are bounded by the credit and
  stream windows that bound what may be in flight at all.
* **Stream segment windows**: released by the receiving GP reading segments
  (:class:`~aiopdbp.streams.receiver.IncomingStream`), which returns stream credit.
* **Table updates** (register, bind, stream binding): a request to rank 0,
  answered by rank 0's event loop without any resource of the requester; a
  lost rank 0 fails it through liveness (``host_timeout``).
* **Sends of the transport**: ``max_inflight`` per host; a completed MPI send
  frees the next, and MPI sends complete because the receiving transport
  always posts a buffer (it never waits for the application).

So every wait is released by *a destination GP reading*, and no wait inside
the library needs the resources of another waiter: there is no cycle of
waits inside the library.  A cycle can only come from the application (two
GPs that each send more than a window to the other before reading, as with
``MPI_Send``); :mod:`aiopdbp.stall` reports a wait that lasts and fails such
a cycle with :class:`~aiopdbp.errors.DeadlockError`.

*Memory.*  Per (sending host, destination GP) at most ``max(window, largest
message)`` bytes of messages are outstanding, and per stream ``stream_window``
segments; so a receiver that keeps what it got makes only its own senders
wait, and the data a rank holds for its GPs is bounded by ``window x peers
x GPs`` plus the pools (``RemoteConfig``), whatever the number of sender
tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiopdbp.errors import WouldBlock
from aiopdbp.lazy import lazy_exports
from aiopdbp.hosts.gate import GateWait, Wake
from aiopdbp.hosts.gatecore import CreditGate
from aiopdbp.hosts.owned import OwnedDone, OwnedSend, fail_owned
from aiopdbp.hosts import sendercore
from aiopdbp.hosts.sender import LinkSender
from aiopdbp.pool import SendPool
from aiopdbp.transport.base import Transport
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import Message, credit_cost
from aiopdbp.wire.shorts import ShortStream

if TYPE_CHECKING:
    from aiopdbp.hosts.linkstats import LinkStats

__all__ = ["HostLink", "LinkStats"]


# LinkStats lives in its own module, loaded when first asked for
__getattr__ = lazy_exports(globals(), {"LinkStats": "aiopdbp.hosts.linkstats"})


class HostLink:
    """Routing target for every GP on one remote host: credit towards its
    GPs (the gate), and the sender its admitted items go to
    (:class:`~aiopdbp.hosts.sender.LinkSender`: SCBP_h and its MPI sends)."""

    remote = True

    def __init__(self, host: int, transport: Transport, pool: SendPool, *, window: int,
                 block_size: int, large: int, max_inflight: int, allow_pickle: bool,
                 ask: Callable[[int, int], None] | None = None,
                 sender: type[LinkSender] = sendercore.LinkSender) -> None:
        self.host = host
        self.window = window
        self._gate = CreditGate(window)
        self._admit = self._gate.admit   # the one admission rule (aiopdbp.hosts.gate)
        self._ask = ask
        self.error: BaseException | None = None
        self._cdus = 0
        #: SCBP_h's sender: the blocks, lone and split frames, the MPI sends
        self.sender = sender(host, transport, pool, block_size=block_size, large=large,
                             max_inflight=max_inflight, allow_pickle=allow_pickle, on_error=self.fail,
                             admit=self._admit, refund=self.grant)
        self._short = self.sender.short
        #: Target protocol: reserve ``nbytes`` of GP ``pid``'s credit and put
        #: the message ``fields`` (or a :class:`ShortStream`) in one step,
        #: when neither has to wait; False (nothing taken) otherwise -- the
        #: caller then takes the waiting path.  The sender's, with the gate's
        #: rule: the commonest send's step here is one call (into C where the
        #: sender is compiled); a refused item's credit comes back (``grant``).
        self.offer: Callable[[int, int, tuple[str, Kind, int, Any, int]], bool] = self.sender.offer
        #: an owned send's entry (Router.send_owned): the credit, then the
        #: message from the caller's buffer, in one call (the sender's); its
        #: :class:`OwnedDone`, or None (nothing taken: the caller's long way)
        self.owned: Callable[[int, int, tuple[str, Kind, int, Any, int]], OwnedDone | None] = self.sender.owned

    # --------------------------------------------------------------- credit
    # The rule is the gate's (aiopdbp.hosts.gate, "Credit" above); the link
    # only turns its answers into futures woken and asks sent.
    def reserve_nowait(self, pid: int = 0, nbytes: int = 0) -> None:
        """Take ``nbytes`` of GP ``pid``'s credit, or raise :class:`WouldBlock`
        (pid 0: stream data, no GP credit; its segments have a window of
        their own)."""
        if self.error is not None:
            raise self.error
        if pid and not self._admit(pid, nbytes):
            raise WouldBlock

    async def reserve(self, pid: int = 0, nbytes: int = 0) -> None:
        """Take credit towards GP ``pid``, waiting for it (backpressure) in
        FIFO order behind the senders already parked for ``pid``.

        Cancellation: a cancelled reserve holds no credit.  If a grant had
        already reserved for it, the credit goes back and is handed on to
        the next parked sender; if it was the head of the queue, the senders
        behind it are served as far as the credit covers.
        """
        if self.error is not None:
            raise self.error
        if pid and not self._admit(pid, nbytes):
            await self._park(pid, nbytes)

    async def _park(self, pid: int, nbytes: int) -> None:
        """Park behind the waiters of ``pid``; a grant reserves for us."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._act(self._gate.park(pid, nbytes, fut), pid)
        try:
            if fut.done():
                # served at once (a contended destination with credit left):
                # still yield, so the senders woken before us run first
                await asyncio.sleep(0)
            await fut
        except asyncio.CancelledError:
            if self.error is None:  # a failed link's gate holds nothing more
                self._act(self._gate.cancel(pid, nbytes, fut), pid)
            raise
        self._gate.resumed(pid)

    def _act(self, wake: Wake, pid: int) -> None:
        """Do what the gate said: wake the served senders, ask for credit."""
        for fut in wake.tokens:
            # one cancelled while parked is done already: its task gives the
            # credit back when it handles the cancel (``_park``)
            if not fut.done():  # type: ignore[attr-defined]
                fut.set_result(None)  # type: ignore[attr-defined]
        if wake.ask and self._ask is not None and self.error is None:
            self._ask(self.host, pid)

    def unreserve(self, pid: int = 0, nbytes: int = 0) -> None:
        """Give back credit that will not be used."""
        self.grant(pid, nbytes)

    def grant(self, pid: int, nbytes: int) -> None:
        """Host ``h`` gives back ``nbytes`` of GP ``pid``'s credit; parked
        senders are served in order for as much as it covers."""
        if pid:
            wake = self._gate.grant(pid, nbytes)
            if wake.tokens or wake.ask:
                self._act(wake, pid)

    def fail(self, exc: BaseException) -> None:
        """Host ``h`` is gone: every sender waiting for it gets ``exc``."""
        if self.error is not None:
            return
        self.error = exc
        for fut in self._gate.fail():
            if not fut.done():  # type: ignore[attr-defined]
                fut.set_exception(exc)  # type: ignore[attr-defined]
                fut.exception()  # type: ignore[attr-defined]
        self.sender.fail(exc)  # the payloads of owned sends may never complete now

    def waits(self) -> list[GateWait]:
        """What is parked now, per destination GP (see :class:`GateWait`)."""
        return self._gate.waiting()

    # ------------------------------------------------------------- putting
    def put_to(self, pid: int, item: Any) -> bool:
        """Hand one routed item for host ``h`` (its credit was reserved) to
        the sender: a :class:`Message` for GP ``pid``, or a CDU (streams,
        multicast).  False when it was dropped (the host is gone)."""
        if self.error is not None:
            if type(item) is OwnedSend:
                fail_owned(item.done, self.error)
            return False  # the sender was told, or will be, by reserve
        self._cdus += 1
        out = self.sender
        if type(item) is Message:
            try:
                if not self._short(pid, item):
                    out.message(pid, item)
            except BaseException:  # refused by the encoder: nothing was queued, the credit goes back
                self._cdus -= 1
                self.grant(pid, credit_cost(item[3]))
                raise
        elif type(item) is ShortStream:  # a stream whole in its OPEN: a short record if it fits
            try:
                out.stream(pid, item)
            except BaseException:  # refused: nothing queued, its credit goes back
                self._cdus -= 1
                self.grant(pid, credit_cost(item[3]))
                raise
        elif type(item) is OwnedSend:
            if item.done.done():   # its sender was cancelled before it got here
                self.grant(pid, credit_cost(item.msg[3]))
                return True
            try:
                out.message(pid, item.msg, item.done)
            except BaseException as exc:
                fail_owned(item.done, exc)
                raise
        else:
            out.cdu(item)
        return True

    def owns(self, nbytes: int) -> bool:
        """Whether a payload of ``nbytes`` travels from the caller's buffer
        (see "Large payloads"): an :class:`OwnedSend` of it need not be a copy."""
        return nbytes >= self.sender.large

    # -------------------------------------------------------------- status
    @property
    def idle(self) -> bool:
        """Nothing open, queued or in flight."""
        return self.sender.idle

    @property
    def sent_msgs(self) -> int:
        """Data messages posted to host ``h`` (the BYE count)."""
        return self.sender.sent_msgs

    def flush(self) -> None:
        """Send the open block now (before code that blocks the loop)."""
        self.sender.flush()

    def stats(self) -> LinkStats:
        from aiopdbp.hosts.linkstats import LinkStats  # (only node.stats() asks: see linkstats)

        gate, out = self._gate, self.sender
        return LinkStats(self.host, self._cdus + out.offered, out.lone, out.blocks, out.splits, out.sent_msgs,
                         out.nbytes, out.inflight, out.queued, gate.waits,
                         gate.short(), gate.least(), out.fallbacks, gate.parked(), gate.asks,
                         gate.outstanding(), out.n_carried)
