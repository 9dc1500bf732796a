"""The per-message MPI calls as this process runs them: the compiled twin of
:mod:`aiopdbp.transport.kernel` where it is built, current and loadable under
the MPI library mpi4py loaded, else the Python source
(:func:`aiopdbp.ext.choose` decides and records why)."""

from __future__ import annotations

from aiopdbp.transport.mpiload import prepare_mpi_import

prepare_mpi_import()
from mpi4py import MPI  # noqa: E402, F401  (first: the twin binds to the MPI library it loaded)

from aiopdbp import ext  # noqa: E402
from aiopdbp.transport import kernel as _pure  # noqa: E402

__all__ = ["kernel_core"]

#: the form of the per-message MPI calls that runs (:mod:`aiopdbp.transport.kernel`)
kernel_core = ext.twin("kernel", _pure, "aiopdbp.transport.ckernel")

