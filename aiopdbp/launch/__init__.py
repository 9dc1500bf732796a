"""Tools that start aiopdbp jobs: ``aiopdbp launch`` and the emulated cluster.

Theory of operation
-------------------
:func:`launch` (``launcher``) runs ``mpiexec -n N python prog.py`` with the
mpiexec it finds (:func:`find_mpiexec`) and watches the job from outside
(:class:`JobWatch` of ``watch``, Linux ``/proc``): a Ctrl-C or SIGTERM goes straight to the
ranks, which stop the whole job themselves (:mod:`aiopdbp.runtime.job`);
whatever the end, the MPICH shared-memory segments the job's processes
mapped are removed.  It talks to the ranks only through the job directory
of :mod:`aiopdbp.env` (``AIOPDBP_JOB_DIR``: the segments each rank maps, the
status of a failing rank).  :func:`run_job` is the same for a ready-made
``mpiexec`` command line.  ``exits`` tells how a rank process ended, from
outside it (pidfds, the status of a zombie, the kernel log): the launcher
names the rank that vanished first.

:class:`EmulatedCluster` (``emulate``) builds N hosts on one Linux machine --
network namespaces behind a bridge, with ``tbf``-shaped links -- and points
hydra at them; :func:`launch_emulated` (``aiopdbp launch --emulate``) runs a
job on one.  ``emulate`` knows nothing of the launcher; the launcher uses it.

Imports: :mod:`aiopdbp.env` and this package only.  Nothing here imports
mpi4py: the ranks are other processes.
"""

from __future__ import annotations

from aiopdbp.launch.emulate import (
    EmulateConfig,
    EmulatedCluster,
    EmulatedHost,
    EmulateError,
    EmulationUnavailable,
    check_requirements,
    cleanup,
    requirements_problems,
)
from aiopdbp.launch.launcher import (
    TCP_ENV,
    find_mpiexec,
    launch,
    launch_command,
    launch_emulated,
    launch_env,
    reporting_failures,
    run_job,
)
from aiopdbp.launch.watch import JobWatch

__all__ = [
    "EmulateConfig", "EmulateError", "EmulatedCluster", "EmulatedHost", "EmulationUnavailable",
    "JobWatch", "TCP_ENV", "check_requirements", "cleanup", "find_mpiexec", "launch",
    "launch_command", "launch_emulated", "launch_env", "reporting_failures", "requirements_problems",
    "run_job",
]
