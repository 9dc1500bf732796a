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

from aiopdbp.transport.backoff import Backoff
from aiopdbp.transport.base import AllocFn, Buffer, Channel, DeliverFn, LoopPoller, RawRequest, Transport
from aiopdbp.transport.doorbell import Doorbell
from aiopdbp.transport.inproc import InProcFabric, InProcTransport
from aiopdbp.transport.mpi import MPITransport
from aiopdbp.transport.mpiload import load_mpi, mpi_world_size

__all__ = [
    "AllocFn", "Backoff", "Buffer", "Channel", "DeliverFn", "Doorbell", "InProcFabric",
    "InProcTransport", "LoopPoller", "MPITransport", "RawRequest", "Transport", "load_mpi",
    "mpi_world_size",
]
