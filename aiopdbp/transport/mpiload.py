"""Loading MPI: the thread level, the lazy import of ``mpi4py.MPI`` with a
start-up watchdog, and the world size read without MPI.

:mod:`aiopdbp.transport.mpi` (the transport) and
:mod:`aiopdbp.transport.progress` (its engine) both need MPI loaded the same
way; this module is what they share, so neither imports the other to get
it.  Importing this module imports neither mpi4py nor MPI.

MPI thread level: ``MPI_THREAD_MULTIPLE`` is requested (see
:func:`prepare_mpi_import`) because the liveness heartbeat thread
(:mod:`aiopdbp.hosts.liveness`) calls MPI while the event loop thread posts
``Isend``.  With MPICH the cost on the message path is within noise.  If the
application imported mpi4py first, its choice stands.

MPICH's shared-memory cells: an eager message to a rank on the same host is
copied into a cell (8 KiB in the bundled MPICH) of the *sender's* pool, one
pool per rank for all its local peers
(``MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS`` cells, 64 by default), and the
receiver hands the cell back once it has taken the message.  The pool's
cells are used in turn, and a receiver keeps mapped every cell of a peer
that it read a message from, so a rank that hears a few dozen small
messages from every peer pays for up to that many cells per peer -- most of
an all-to-all's memory per peer.  aiopdbp coalesces small messages into
blocks and bounds the sends it posts per host, so a rank of a job asks for
a budget of :data:`SHM_CELL_BUDGET` cells shared out among its local peers
(:func:`shm_cells`: MPICH's own 64 for 2 or 3 ranks on a host, 42 for 4, 8
from 16 on) unless the environment names a count.  Every rank on a host
computes the same count from the local size the launcher announces; a
process that is not a rank leaves the variable alone, so the jobs it starts
choose their own.  A send that finds its rank's cells all taken waits
inside MPI until a receiver hands one back, whichever peer it is for: a
peer that stops taking messages keeps the cells sent to it (the heartbeat
sends such a peer at most two beats, :mod:`aiopdbp.hosts.liveness`).
Other MPI libraries ignore the variable.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from typing import Any

from aiopdbp.env import (default_mpich_shm_cells, env_rank, env_size, in_mpi_job, local_ranks,
                         mpi_thread_level, record_failure)

__all__ = ["ABORT_FLUSH_S", "SHM_CELL_BUDGET", "load_mpi", "mpi_world_size", "prepare_mpi_import", "shm_cells"]

#: seconds between a rank's last output and MPI_Abort: hydra's proxy forwards
#: a rank's output from a pipe, and an abort that came at once lost it under load
ABORT_FLUSH_S = 0.2

#: MPICH's shared-memory cells a rank's local peers share (see the module docstring)
SHM_CELL_BUDGET = 128
#: the fewest cells per rank asked for, and the most (MPICH's own default)
SHM_CELLS_MIN, SHM_CELLS_MAX = 8, 64


def shm_cells(local: int) -> int:
    """MPICH's eager cells per rank that aiopdbp asks for when ``local``
    ranks of the job share a host: :data:`SHM_CELL_BUDGET` over the peers,
    within ``SHM_CELLS_MIN .. SHM_CELLS_MAX``."""
    return max(SHM_CELLS_MIN, min(SHM_CELLS_MAX, SHM_CELL_BUDGET // max(1, local - 1)))


def mpi_world_size() -> int:
    """World size announced by the MPI launcher, without importing mpi4py.

    Returns 1 when no launcher variable is set (plain ``python prog.py``).
    Use ``mpi_world_size() > 1`` to decide whether to create an
    :class:`~aiopdbp.transport.mpi.MPITransport` at all.
    """
    return env_size()


def prepare_mpi_import() -> None:
    """Set ``mpi4py.rc.thread_level`` and, in a rank of a job, MPICH's
    shared-memory cells per rank (:func:`shm_cells`, unless the environment
    names a count) before MPI is first initialised.

    Both are read when ``mpi4py.MPI`` is first imported, so this only
    has an effect if nobody imported ``mpi4py.MPI`` yet (then the
    application's choice stands).  Level: env ``AIOPDBP_MPI_THREAD_LEVEL``
    (single/funneled/serialized/multiple), default ``"multiple"``.
    """
    if "mpi4py.MPI" in sys.modules:
        return
    if in_mpi_job():
        default_mpich_shm_cells(shm_cells(local_ranks()))
    import mpi4py

    mpi4py.rc.thread_level = mpi_thread_level()


def load_mpi(timeout: float | None = None) -> Any:
    """Import (and so initialise) ``mpi4py.MPI`` with aiopdbp's settings.

    ``MPI_Init`` waits for every rank of the job (MPICH's start-up exchange),
    holding the GIL: no exception, no Ctrl-C, no Python thread reaches this
    process meanwhile.  With ``timeout``, a forked watchdog process ends it
    with a clear message when the initialisation takes longer, so a rank
    that never calls ``open_node()`` does not hang the others for ever.
    """
    if "mpi4py.MPI" in sys.modules:
        return sys.modules["mpi4py.MPI"]
    prepare_mpi_import()
    dog = _watchdog(timeout) if timeout is not None and mpi_world_size() > 1 else None
    try:
        from mpi4py import MPI as _MPI
    finally:
        if dog is not None:
            fd, pid = dog
            os.close(fd)            # the watchdog sees EOF and leaves
            os.waitpid(pid, 0)
    return _MPI


def _watchdog(timeout: float) -> tuple[int, int] | None:
    """Fork a process that kills this one, with the HandshakeError message,
    unless the pipe it watches is closed within ``timeout`` seconds."""
    if not hasattr(os, "fork"):  # pragma: no cover - not POSIX
        return None
    message = (f"aiopdbp: rank {env_rank()}: HandshakeError: MPI did not start within {timeout:g} s: "
               "not every rank of the job initialised MPI (a rank that never calls open_node(), or is "
               "stuck before it); raise handshake_timeout / name_timeout to wait longer\n").encode()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the watchdog child
        try:
            os.close(w)
            if not select.select([r], [], [], timeout)[0]:
                os.write(2, message)
                # the failure is the rank's own, said above: under aiopdbp
                # launch the record makes it the job's status and its line,
                # not a rank that vanished by SIGKILL under hydra's banner
                record_failure(1)
                os.kill(os.getppid(), signal.SIGKILL)
        finally:
            os._exit(0)
    os.close(r)
    return w, pid
