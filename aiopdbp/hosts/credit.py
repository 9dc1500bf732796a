"""Flow control per destination: the links to the other hosts and their credit.

Theory of operation
-------------------
:class:`Credit` owns one :class:`~aiopdbp.hosts.link.HostLink` per other host
(made on first use, the router's target for every GP there) and the control
messages that pace them:

*Per-GP credit.*  A host may have ``window`` message bytes outstanding
towards each GP on another host (the window that host announced at the
handshake).  A link's sender parked for a GP's credit asks for it
(:meth:`Credit.ask`, ``CreditAskMsg``); the receiving host's arrivals give credit
back as its GPs take messages (:meth:`Credit.grant`, ``CreditMsg``), and
:meth:`Credit.on_credit` hands each grant to the link, which serves its
parked senders in FIFO order (see :mod:`aiopdbp.hosts.link`).

*Grants carried* (issue 27 item 3: fewer messages per message).  The
arrivals hand grants here as they fall due (``grants_at_once``), and they
wait for the end of the loop iteration, where each host's are sent in one
``CreditMsg`` -- unless a split header (a large message's, on a transport
with bulk payloads) leaves for that host first: then the header carries
them, as one CREDIT control frame before it in the same MPI message
(:meth:`~aiopdbp.hosts.inbound.Inbound.on_data` takes them off).  A GP that
answers a large message with one (a request/response) so returns its credit
with the answer, not in a control message of its own.  A whole window's
grant (a large message's: its sender waits for it at its next send) goes
at once as before, unless host ``h`` has had a split header from here since
the last such grant had to go on its own: a one-way flow of large messages
is not held up until the reader next waits, and a conversation carries them.

*Stream credit.*  A stream's receiver returns credit in segments
(``StreamCreditMsg``) and tells the sender when it is done
(``StreamDoneMsg``); both are forwarded between the stream tables of the two
hosts through the :class:`StreamControl` door.  The DONEs of streams taken
whole leave at the end of the loop iteration, all of them to one host in one
``StreamDonesMsg``: a receiver that finishes many streams in a burst answers
them with one MPI message, not one each (and the senders they wake together
send their next OPENs together, which the link coalesces).  A failed
stream's DONE (it carries why) leaves at once.  (A short stream, carried
whole by its OPEN, gets no DONE: its sender was done once it sent it.)

*Failure.*  A failed host's link fails every waiter (:meth:`Credit.fail`);
nothing more is sent to it, and a link made later starts failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from aiopdbp.errors import BrokenResourceError
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.hosts.link import HostLink
from aiopdbp.pool import SendPool
from aiopdbp.transport.backoff import Backoff
from aiopdbp.transport.base import Transport
from aiopdbp.wire.control import CreditAskMsg, CreditMsg, StreamCreditMsg, StreamDoneMsg, StreamDonesMsg

if TYPE_CHECKING:
    from aiopdbp.hosts.linkstats import LinkStats

__all__ = ["Credit", "CreditLedger", "StreamControl"]


class CreditLedger(Protocol):
    """The receiving side's credit book (:mod:`aiopdbp.routing.arrivals`)."""

    def on_ask(self, host: int, pid: int) -> None: ...
    def flush_grants(self, everything: bool = False) -> None: ...


class StreamControl(Protocol):
    """Stream completions and credit (the stream table, :mod:`aiopdbp.streams.table`)."""

    def done(self, key: tuple[int, int], error: str | None, origin: int) -> None: ...
    def credit(self, key: tuple[int, int], segments: int) -> None: ...


class Credit:
    """The links to the other hosts and the credit that paces them."""

    def __init__(self, rank: int, size: int, transport: Transport, pool: SendPool,
                 channel: ControlChannel, ledger: CreditLedger, streams: StreamControl, *,
                 window: Callable[[int], int], block_size: int, large: int, max_inflight: int,
                 allow_pickle: bool, on_link: Callable[[int], None] | None = None) -> None:
        self.rank = rank
        self._on_link = on_link   # told of each link made (the names service announces our GPs)
        self.size = size
        self._transport = transport
        self._pool = pool
        self._channel = channel
        self._ledger = ledger
        self._streams = streams
        self._window = window
        self._block_size = block_size
        self._large = large
        self._max_inflight = max_inflight
        self._allow_pickle = allow_pickle
        self.links: dict[int, HostLink] = {}
        self._failed: dict[int, BaseException] = {}
        # DONEs of streams taken whole, sent at the end of the loop iteration:
        # (host, the streams' node) -> their snos
        self._dones: dict[tuple[int, int], list[int]] = {}
        # grants due to hosts without a link (nothing sent to them yet), sent
        # at the end of the loop iteration with the links' carried ones
        self._due: dict[int, list[tuple[int, int]]] = {}
        self._grants_scheduled = False
        if hasattr(ledger, "grants_at_once"):
            ledger.grants_at_once = True   # grants come here as they fall due; batched here
        # a grant of this much is a whole window's, a large message's (0: a
        # ledger without one, every grant goes at once)
        self._whole = getattr(ledger, "window", 0)

    # ------------------------------------------------------------------ links
    def link(self, host: int) -> HostLink:
        """The link to ``host`` (made on first use)."""
        link = self.links.get(host)
        if link is None:
            if not 0 <= host < self.size or host == self.rank:
                raise BrokenResourceError(f"no remote host {host}")
            link = self.links[host] = HostLink(
                host, self._transport, self._pool, window=self._window(host),
                block_size=self._block_size, large=self._large, max_inflight=self._max_inflight,
                allow_pickle=self._allow_pickle, ask=self.ask)
            if host in self._failed:
                link.fail(self._failed[host])
            elif self._on_link is not None:
                self._on_link(host)
        return link

    def fail(self, host: int, exc: BaseException) -> None:
        """Host ``host`` failed with ``exc``: its link (now or later) fails."""
        self._failed.setdefault(host, exc)
        for hk in [hk for hk in self._dones if hk[0] == host]:
            del self._dones[hk]  # nobody there to tell
        link = self.links.get(host)
        if link is not None:
            link.fail(exc)

    async def flush(self, timeout: float = float("inf")) -> bool:
        """Wait until every link has handed its CDUs to MPI and the sends
        completed (False: not within ``timeout``).

        Cancellation: nothing to undo.
        """
        self.send_dones()
        for link in self.links.values():
            link.flush()
        deadline = time.monotonic() + timeout
        backoff = Backoff(100e-6, 2e-3)
        while not all(link.idle or link.error for link in self.links.values()):
            if time.monotonic() > deadline:
                return False
            await backoff.sleep()
        return True

    def sent(self) -> dict[int, int]:
        """Data messages posted to each host (the BYE counts)."""
        return {h: link.sent_msgs for h, link in self.links.items()}

    def stats(self) -> dict[int, LinkStats]:
        return {h: link.stats() for h, link in self.links.items()}

    # --------------------------------------------------------- per-GP credit
    def grant(self, host: int, grants: list[tuple[int, int]]) -> None:
        """Give ``host`` credit back for GPs here (the arrivals call it as the
        grants fall due; see "Grants carried")."""
        if host in self._failed:
            return
        link = self.links.get(host)
        out = link.sender if link is not None else None
        if link is None or out is None or link.error is not None or not out.carries:
            if out is None or out.carry_missed:
                if any(n >= self._whole for _, n in grants):
                    self._channel.send(host, CreditMsg(self._due.pop(host, []) + grants))
                    return
            self._due.setdefault(host, []).extend(grants)
        elif out.carry_missed and any(n >= self._whole for _, n in grants):
            # a large message's grant, and host h has not had a reply from
            # here since the last one: its sender may wait for it, send it now
            self._channel.send(host, CreditMsg(out.carried + grants))
            out.carried = []
            return
        else:
            out.carried += grants
        if not self._grants_scheduled:
            self._grants_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_grants)

    def _send_grants(self) -> None:
        """The grants no split header carried in this loop iteration: one
        ``CreditMsg`` per host."""
        self._grants_scheduled = False
        due, self._due = self._due, {}
        for link in self.links.values():
            out = link.sender
            if out.carried:
                grants, out.carried = out.carried, []
                if any(n >= self._whole for _, n in grants):
                    out.carry_missed = True   # no reply carried it: the next goes at once
                due.setdefault(link.host, []).extend(grants)
        for host, grants in due.items():
            if host not in self._failed:
                self._channel.send(host, CreditMsg(grants))

    def flush_grants(self) -> None:
        """Give back all credit owed, also below the return threshold (closing)."""
        self._ledger.flush_grants(everything=True)
        self._send_grants()

    def ask(self, host: int, pid: int) -> None:
        """A sender here is parked for GP ``pid``'s credit on ``host``."""
        if host not in self._failed:
            self._channel.send(host, CreditAskMsg([pid]))

    def on_credit_ask(self, src: int, msg: CreditAskMsg) -> None:
        for pid in msg.pids:
            self._ledger.on_ask(src, pid)

    def on_credit(self, src: int, msg: CreditMsg) -> None:
        link = self.links.get(src)
        if link is not None:
            for pid, nbytes in msg.grants:
                link.grant(pid, nbytes)

    # ------------------------------------------------------------ streams
    def send_done(self, host: int, key: tuple[int, int], error: str | None) -> None:
        """Tell ``host`` that stream ``key`` ended (``error``: why it failed):
        a failure at once, a stream taken whole at the end of this loop
        iteration, with the others of the iteration (:meth:`send_dones`)."""
        if error is not None:
            self._channel.send(host, StreamDoneMsg(key[0], key[1], False, error))
            return
        if not self._dones:
            asyncio.get_running_loop().call_soon(self.send_dones)
        snos = self._dones.get((host, key[0]))
        if snos is None:
            self._dones[(host, key[0])] = [key[1]]
        else:
            snos.append(key[1])

    def send_dones(self) -> None:
        """Send the DONEs :meth:`send_done` holds, one message per host."""
        dones, self._dones = self._dones, {}
        for (host, node), snos in dones.items():
            if host not in self._failed:
                self._channel.send(host, StreamDonesMsg(node, snos) if len(snos) > 1
                                   else StreamDoneMsg(node, snos[0], True, ""))

    def send_credit(self, host: int, key: tuple[int, int], segments: int) -> None:
        """Give ``host``'s stream ``key`` credit for ``segments`` segments."""
        self._channel.send(host, StreamCreditMsg(key[0], key[1], segments))

    def on_stream_done(self, src: int, msg: StreamDoneMsg) -> None:
        self._streams.done((msg.node, msg.sno), None if msg.ok else msg.error, src)

    def on_stream_dones(self, src: int, msg: StreamDonesMsg) -> None:
        done, node = self._streams.done, msg.node
        for sno in msg.snos:
            done((node, sno), None, src)

    def on_stream_credit(self, src: int, msg: StreamCreditMsg) -> None:
        self._streams.credit((msg.node, msg.sno), msg.segments)
