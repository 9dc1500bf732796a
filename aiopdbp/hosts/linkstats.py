"""The counters of one link (``node.stats().links[h]``): a frozen dataclass of 17 fields.

Its own module, loaded when ``node.stats()`` first asks for it: making a
dataclass of this size costs about as much as all the rest of
:mod:`aiopdbp.hosts.link`, and every rank of a job would pay it at import
for counters most jobs never read.  ``aiopdbp.hosts.link.LinkStats`` still
names it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LinkStats"]


@dataclass(frozen=True)
class LinkStats:
    """Counters of the link to one other host (``node.stats().links[h]``):
    what this host sent it, and how its senders waited for credit (what
    the other host lets them have in flight).

    ``host`` the other host's rank; ``cdus`` items handed to the link
    (messages, stream segments), ``lone`` of them sent at once in a frame of
    their own, ``blocks`` coalesced blocks sent, ``splits`` large payloads
    sent from their own buffer; ``messages`` / ``bytes`` MPI messages and
    bytes posted, ``inflight`` MPI sends not complete yet, ``queued`` blocks
    waiting for an in-flight slot; ``credit_waits`` times a sender waited
    for a receiver's credit, ``credit_short`` receivers whose credit is below
    their window now, ``credit_min`` the least credit left towards any
    receiver (bytes), ``credit_parked`` senders parked for credit now,
    ``credit_asks`` asks for more credit sent, ``credit_out`` bytes sent to
    the host's GPs and not credited back yet; ``pool_fallbacks`` blocks taken outside the send pool (its
    row was full); ``credit_carried`` split headers that carried this
    host's credit grants to the other (instead of a ``CreditMsg``).
    """

    host: int
    cdus: int            # CDUs handed to the link
    lone: int            # CDUs sent at once, in a frame of their own
    blocks: int          # coalesced blocks sent (BPS + BP)
    splits: int          # large payloads sent as split frames
    messages: int        # MPI messages posted
    bytes: int           # bytes posted
    inflight: int        # MPI sends not complete yet
    queued: int          # blocks waiting for an in-flight slot
    credit_waits: int    # times a sender waited for a destination's credit
    credit_short: int    # destinations whose credit is below their window now
    credit_min: int      # the least credit left towards any destination (bytes)
    pool_fallbacks: int  # blocks taken outside the pool (its row was full)
    credit_parked: int = 0  # senders parked for credit now
    credit_asks: int = 0    # CreditAskMsg sent (a sender parked, see "Credit")
    credit_out: int = 0     # bytes of credit outstanding towards all GPs of h (window - credit)
    credit_carried: int = 0  # split headers that carried this host's grants to h (no CreditMsg)
