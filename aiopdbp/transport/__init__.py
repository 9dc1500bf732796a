"""Transports: move opaque byte blocks between hosts, in order, on two channels.

Theory of operation
-------------------
A transport knows nothing of CDUs, GPs or pools: it carries *blocks* (any
buffer) from this host to another on ``Channel.CONTROL`` (small, latency
critical, never queued behind data) or ``Channel.DATA``, in order per
(destination, channel), and hands incoming blocks to the ``deliver`` callback
given to ``start()`` (the layer above hands itself in that way; nothing here
calls up by name).  The contract is :class:`Transport` (``base``).

* :class:`InProcFabric` / :class:`InProcTransport` (``inproc``): several hosts
  in one event loop -- the tests, and a node that is a single host.
* :class:`MPITransport` (``mpi``): ranks of an MPI job, over two duplicated
  communicators, zero copy.  Its :class:`~aiopdbp.transport.progress.ProgressEngine`
  (``progress``) turns MPI completions into asyncio events: one task per rank
  that probes, receives, completes sends, and sleeps with a :class:`Backoff`
  (``backoff``) that a peer's :class:`Doorbell` (``doorbell``) can cut short;
  a task waiting for a reply may step it itself (``drive``).  Large messages
  land in recycled, pre-faulted memory (``recvcache``).
* ``mpiload``: how MPI is loaded (thread level, start-up watchdog) and the
  world size read from the launcher without MPI (:func:`mpi_world_size`).

Importing this package imports neither mpi4py nor MPI: ``mpi`` loads MPI
when the first :class:`MPITransport` is created (:func:`load_mpi`), and
``progress`` -- which imports mpi4py -- is imported only then, so it is not
re-exported here.

Imports: only :mod:`aiopdbp.errors`, :mod:`aiopdbp.env` and this package
(a layer of its own under hosts/, beside wire/, pool/ and device/).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiopdbp.lazy import lazy_exports

# Loaded on first use (PEP 562): a rank of an MPI job, which imports
# transport.base, transport.mpi and what they need, does not load the
# in-process transport it never uses.
_EXPORTS: dict[str, str] = {
    "Backoff": "aiopdbp.transport.backoff",
    **dict.fromkeys(["AllocFn", "Buffer", "Channel", "DeliverFn", "LoopPoller", "RawRequest", "Transport"],
                    "aiopdbp.transport.base"),
    "Doorbell": "aiopdbp.transport.doorbell",
    **dict.fromkeys(["InProcFabric", "InProcTransport"], "aiopdbp.transport.inproc"),
    "MPITransport": "aiopdbp.transport.mpi",
    **dict.fromkeys(["load_mpi", "mpi_world_size"], "aiopdbp.transport.mpiload"),
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(globals(), _EXPORTS)


if TYPE_CHECKING:
    from aiopdbp.transport.backoff import Backoff as Backoff
    from aiopdbp.transport.base import AllocFn as AllocFn
    from aiopdbp.transport.base import Buffer as Buffer
    from aiopdbp.transport.base import Channel as Channel
    from aiopdbp.transport.base import DeliverFn as DeliverFn
    from aiopdbp.transport.base import LoopPoller as LoopPoller
    from aiopdbp.transport.base import RawRequest as RawRequest
    from aiopdbp.transport.base import Transport as Transport
    from aiopdbp.transport.doorbell import Doorbell as Doorbell
    from aiopdbp.transport.inproc import InProcFabric as InProcFabric
    from aiopdbp.transport.inproc import InProcTransport as InProcTransport
    from aiopdbp.transport.mpi import MPITransport as MPITransport
    from aiopdbp.transport.mpiload import load_mpi as load_mpi
    from aiopdbp.transport.mpiload import mpi_world_size as mpi_world_size
