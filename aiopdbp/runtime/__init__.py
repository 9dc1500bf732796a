"""The runtime: what a program holds -- the node, its GPs, the job.

Theory of operation
-------------------
:class:`~aiopdbp.runtime.node.Node` is the composition root: it builds the
tables, pipe pools, router, PipeManager, stream table, device path and, with
more than one rank, the remote-host layer, handing each its dependencies in
its constructor.  A :class:`~aiopdbp.runtime.process.GP` (an
:class:`~aiopdbp.runtime.sgp.SGP` on a device) only names destinations: the
router decides where a message goes.  :mod:`~aiopdbp.runtime.job` is the
rank's lifecycle under :func:`aiopdbp.run` (signals, the failure rule, the
launcher's job directory); :mod:`~aiopdbp.runtime.cluster` runs several
nodes in one process.

Imports: everything below (streams, routing, hosts, wire, pool, transport,
device, the foundation); nothing above (sync, the tools).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiopdbp.lazy import lazy_exports

# Loaded on first use (PEP 562): a rank that imports aiopdbp.runtime.job (as
# aiopdbp.run does) need not make the in-process cluster, SGPs or the stats.
_EXPORTS: dict[str, str] = {
    "open_cluster": "aiopdbp.runtime.cluster",
    **dict.fromkeys(["Node", "open_node", "run"], "aiopdbp.runtime.node"),
    "GP": "aiopdbp.runtime.process",
    "SGP": "aiopdbp.runtime.sgp",
    **dict.fromkeys(["LinkStats", "NodeStats"], "aiopdbp.runtime.stats"),
}

__all__ = ["GP", "SGP", "LinkStats", "Node", "NodeStats", "open_cluster", "open_node", "run"]


__getattr__ = lazy_exports(globals(), _EXPORTS)


if TYPE_CHECKING:
    from aiopdbp.runtime.cluster import open_cluster as open_cluster
    from aiopdbp.runtime.node import Node as Node
    from aiopdbp.runtime.node import open_node as open_node
    from aiopdbp.runtime.node import run as run
    from aiopdbp.runtime.process import GP as GP
    from aiopdbp.runtime.sgp import SGP as SGP
    from aiopdbp.runtime.stats import LinkStats as LinkStats
    from aiopdbp.runtime.stats import NodeStats as NodeStats
