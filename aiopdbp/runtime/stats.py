"""Typed, documented snapshots of what a node is doing (``node.stats()``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiopdbp.hosts.linkstats import LinkStats

__all__ = ["LinkStats", "NodeStats"]


@dataclass(frozen=True)
class NodeStats:
    """``node.stats()``: counters of one node, read at one moment.

    Routing: ``routed`` entries the PipeManager routed (inline or from the
    public pipes), ``dropped`` items (messages, stream segments) that had
    nowhere to go (a freed GP, a released pipe, a stream given up),
    ``parked`` items that had to wait for a
    GP's registration or binding to arrive, ``bind_waits`` sends from this
    node waiting now for their destination GP to bind a pipe (``send`` with a
    timeout to a GP registered without one).  Resources: ``gps`` registered
    here, ``pipes_in_use`` / ``pipes_created`` of the private pipe pool,
    ``streams_in`` / ``streams_out`` live streams, ``segments_landed``
    stream segments received straight into the array ``read()`` returns
    (:meth:`~aiopdbp.streams.receiver.IncomingStream.landing`), ``table_version`` /
    ``table_digest`` of this host's tables (the updates applied here: the
    node table, and the names this host registered or looked up, each in its
    home host's order -- :mod:`aiopdbp.hosts.names`).  Remote hosts: ``links`` per host
    (:class:`~aiopdbp.hosts.link.LinkStats`), ``received`` data messages per host,
    ``credit_owed`` bytes of credit not yet returned, ``protocol_errors``,
    ``fallback_allocs`` (receive-pool row full), ``failed_hosts``, ``pool``
    (the buffer pools between hosts: their blocks and per-host sub-pools), ``transport`` (the progress engine's
    counters) and ``liveness`` (heartbeats).  ``devices``: the device path
    (backend, pinned chunks free / in use / lost / high water, device
    transfers sent and received; see :meth:`aiopdbp.streams.devicepath.DevicePath.stats`).
    ``messages_sent`` / ``messages_received``: per other host, per kind, the
    messages exchanged with it -- control messages by class name
    (``"TableMsg"``, ``"CreditMsg"``, ``"StreamDoneMsg"``, ...) and ``"data"``
    for data-channel messages (blocks, split frames, lone items).
    ``stall``: ``waiting`` sends waiting on a destination now, ``stalls``
    waits reported as stalled, ``deadlocks`` cycles of waits failed
    (:mod:`aiopdbp.stall`).
    """

    rank: int
    size: int
    gps: int
    routed: int
    dropped: int
    parked: int
    pipes_in_use: int
    pipes_created: int
    streams_in: int
    streams_out: int
    table_version: int
    table_digest: str
    credit_owed: int = 0
    bind_waits: int = 0
    segments_landed: int = 0
    links: dict[int, LinkStats] = field(default_factory=dict)
    received: dict[int, int] = field(default_factory=dict)
    protocol_errors: int = 0
    fallback_allocs: int = 0
    failed_hosts: tuple[int, ...] = ()
    pool: dict[str, Any] = field(default_factory=dict)
    transport: dict[str, Any] = field(default_factory=dict)
    liveness: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, Any] = field(default_factory=dict)
    stall: dict[str, int] = field(default_factory=dict)
    messages_sent: dict[int, dict[str, int]] = field(default_factory=dict)
    messages_received: dict[int, dict[str, int]] = field(default_factory=dict)
