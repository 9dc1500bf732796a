"""``aiopdbp bench``: the PDBP paper's experiments and OSU-style tests, side by side
with raw mpi4py, ``MPI_Alltoall`` and an asyncio floor, in the same MPI job.

Modules (each usable on its own):

* :mod:`~aiopdbp.bench.cli` -- command line, self-launch, sweeps over rank counts;
* :mod:`~aiopdbp.bench.plan` -- options and the cases of each test;
* :mod:`~aiopdbp.bench.runner` -- one job under MPI: interleaved runs, gathering;
* :mod:`~aiopdbp.bench.workload` -- flows, payload rings, verification;
* :mod:`~aiopdbp.bench.aio` / :mod:`~aiopdbp.bench.raw` / :mod:`~aiopdbp.bench.floor`
  -- the aiopdbp, raw mpi4py and asyncio-floor drivers;
* :mod:`~aiopdbp.bench.stats` -- the paper's statistic, ratios, merging;
* :mod:`~aiopdbp.bench.report` / :mod:`~aiopdbp.bench.plots` -- table, JSON, CSV, PNG;
* :mod:`~aiopdbp.bench.streams` -- ``aiopdbp bench streams``: streams against
  messages of the same bytes.

Nothing here imports mpi4py until a job starts, and importing one module of
the package does not import the others: ``main`` and ``register`` load
:mod:`~aiopdbp.bench.cli` on first use (PEP 562), so that the rank programs
(``scale_job`` under ``aiopdbp bench scale``) start as light as the raw
programs they are measured against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiopdbp.lazy import lazy_exports

__all__ = ["main", "register"]


__getattr__ = lazy_exports(globals(), dict.fromkeys(__all__, "aiopdbp.bench.cli"))


if TYPE_CHECKING:
    from aiopdbp.bench.cli import main as main
    from aiopdbp.bench.cli import register as register
