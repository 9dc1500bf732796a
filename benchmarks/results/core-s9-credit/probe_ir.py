"""The empty probe of a progress step (nothing waiting on either channel), N times, for
instruction counting under callgrind (N=0 vs N=K: instructions per probe).  Runs on one
MPI process (a singleton); the base calls probe_all's nine arguments, the new tree its Prober.

    PYTHONPATH=TREE N=20000 python probe_ir.py"""
import os

from aiopdbp.transport.mpiload import prepare_mpi_import

prepare_mpi_import()
from mpi4py import MPI  # noqa: E402

from aiopdbp.transport.core import kernel_core as k  # noqa: E402

N = int(os.environ.get("N", "2000"))
comms = [MPI.COMM_WORLD.Dup(), MPI.COMM_WORLD.Dup()]
status, fifo, sinks = MPI.Status(), {}, (print, print)
if hasattr(k, "Prober"):
    probe = k.Prober(comms, 5, status, 16384, sinks, fifo, print).probe
    for _ in range(N):
        probe(0, 1 << 20)
else:
    probe_all = k.probe_all
    for _ in range(N):
        probe_all(comms, 0, 5, status, 16384, sinks, fifo, print, 1 << 20)
print(k.__name__, N)
