"""Environment plumbing under mpiexec: mpi_world_size() reads the launcher's
variables without importing mpi4py; MPITransport.available(); the MPI thread
level requested; AIOPDBP_PROGRESS selects the progress mode for "auto"."""

from __future__ import annotations

import os
import sys

from aiopdbp.transport.mpi import MPITransport, mpi_world_size

assert "mpi4py.MPI" not in sys.modules, "importing aiopdbp.transport.mpi initialised MPI"
assert mpi_world_size() == 2, mpi_world_size()
assert MPITransport.mpi_world_size() == 2
assert MPITransport.available()
assert "mpi4py.MPI" not in sys.modules, "mpi_world_size()/available() imported mpi4py.MPI"

os.environ["AIOPDBP_PROGRESS"] = "poll"
t = MPITransport()  # progress="auto" -> env
from mpi4py import MPI  # noqa: E402  (already initialised by the transport)

# MULTIPLE: the liveness heartbeat thread calls MPI beside the event loop
assert MPI.Query_thread() == MPI.THREAD_MULTIPLE, MPI.Query_thread()
assert t.progress_mode == "poll", t.progress_mode
os.environ["AIOPDBP_PROGRESS"] = "thread"
try:
    MPITransport()
except ValueError as exc:  # the thread mode is gone: say so, do not fall back silently
    assert "progress mode" in str(exc), exc
else:
    raise AssertionError("AIOPDBP_PROGRESS=thread was accepted")
sys.stdout.write(f"rank {t.rank} OK env size={t.size} mode={t.progress_mode} thread_level={MPI.Query_thread()}\n")
sys.stdout.flush()  # one write: mpiexec merges the ranks' output
