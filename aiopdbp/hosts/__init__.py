"""The other hosts as seen from this one: tables, links, arrivals, failures.

Theory of operation
-------------------
On more than one host (MPI rank) a node talks to the others through
``hosts/``.  Its door is :class:`Remote`, which the node builds with what it
needs and which puts together small parts, each owning one job:

* :class:`~aiopdbp.hosts.channel.ControlChannel` -- typed control messages
  (:mod:`aiopdbp.wire.control`) out and in; each kind is handled by the one
  part below that owns its job (:class:`~aiopdbp.hosts.channel.Dispatch`);
* :class:`~aiopdbp.hosts.sequencer.Sequencer` -- initialisation (paper
  Fig. 6) and, through :class:`~aiopdbp.hosts.names.NameService`, the GP
  names of the tables (:class:`Tables`: NTA/PTA/MTA), each name kept and
  ordered by its home host;
* :class:`~aiopdbp.hosts.inbound.Inbound` -- the receive pool (RBP),
  decoding, delivery of arrived messages and stream CDUs;
* :class:`~aiopdbp.hosts.credit.Credit` -- one :class:`HostLink` per other
  host (the send side: SCBP_h and its sender, :mod:`aiopdbp.hosts.link`) and
  the per-GP and stream credit that paces them;
* :class:`~aiopdbp.hosts.failure.HostFailures` -- failed and lost hosts
  (liveness: :mod:`aiopdbp.hosts.liveness`), the job-wide :class:`Stop`
  notices; :class:`~aiopdbp.hosts.failure.StallRelay` -- stall reports to
  rank 0's deadlock detector.

Layering: ``hosts/`` imports only ``wire/``, ``pool/``, ``transport/`` and the
foundation (``errors``, ``stall``), never ``routing/``, ``streams/`` or
``runtime/``.  It reaches up only through what the node hands in at
construction: the routing layer's arrivals as an :class:`ArrivalsPort`, the stream table as a
:class:`StreamPort`, the running job as a callable returning a
:class:`JobControl`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiopdbp.lazy import lazy_exports
from aiopdbp.hosts.channel import ControlChannel, Dispatch
from aiopdbp.hosts.credit import Credit
from aiopdbp.hosts.failure import HostFailures, JobControl, StallRelay, Stop, StopKind, where
from aiopdbp.hosts.inbound import Inbound
from aiopdbp.hosts.link import HostLink
from aiopdbp.hosts.remote import Remote, RemoteConfig, ArrivalsPort, StreamPort
from aiopdbp.hosts.sequencer import Sequencer
from aiopdbp.hosts.tables import NodeType, PType, Tables

if TYPE_CHECKING:
    from aiopdbp.hosts.linkstats import LinkStats as LinkStats

__all__ = [
    "ControlChannel", "Credit", "Dispatch", "HostFailures", "HostLink", "Inbound", "JobControl",
    "LinkStats", "NodeType", "PType", "Remote", "RemoteConfig", "ArrivalsPort", "Sequencer",
    "StallRelay", "Stop", "StopKind", "StreamPort", "Tables", "where",
]


# LinkStats: loaded on first use (see aiopdbp.hosts.linkstats)
__getattr__ = lazy_exports(globals(), {"LinkStats": "aiopdbp.hosts.linkstats"})
