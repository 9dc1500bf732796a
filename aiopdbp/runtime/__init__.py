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

from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.runtime.node import Node, open_node, run
from aiopdbp.runtime.process import GP
from aiopdbp.runtime.sgp import SGP
from aiopdbp.runtime.stats import LinkStats, NodeStats

__all__ = ["GP", "SGP", "LinkStats", "Node", "NodeStats", "open_cluster", "open_node", "run"]
