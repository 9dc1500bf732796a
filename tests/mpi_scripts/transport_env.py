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

os.environ["AIOPDBP_PROGRESS"] = "thread"
t = MPITransport()  # progress="auto" -> env
from mpi4py import MPI  # noqa: E402  (already initialised by the transport)

assert MPI.Query_thread() == MPI.THREAD_MULTIPLE, MPI.Query_thread()
assert t.progress_mode == "thread", t.progress_mode
assert MPITransport(progress="poll").progress_mode == "poll"  # explicit wins over env
print(f"rank {t.rank} OK env size={t.size} mode={t.progress_mode} thread_level={MPI.Query_thread()}", flush=True)
