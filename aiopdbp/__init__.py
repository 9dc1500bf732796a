"""aiopdbp: asyncio PDBP (Pipe Dynamic Buffer Pool) for GPU-cluster communication.

Named generalized processes (GPs) send messages and data streams to each other
by name; a PipeManager per host routes them to local private pipes or over
MPI; buffer pools coalesce and pace remote traffic.  See README.md.
"""

from __future__ import annotations

from aiopdbp.wire.codec import CDU, Kind, StreamOp
from aiopdbp.errors import (
    BarrierError,
    BrokenResourceError,
    ClosedResourceError,
    DeadlockError,
    DeviceError,
    DuplicateProcessError,
    HandshakeError,
    HostLostError,
    NoPipeError,
    PDBPError,
    ProtocolError,
    RankFailedError,
    StreamError,
    TransportError,
    UnknownProcessError,
    WouldBlock,
)
from aiopdbp.runtime.node import Node, open_node, run
from aiopdbp.routing.pipes import Pipe, PipePool
from aiopdbp.wire.message import Message
from aiopdbp.runtime.process import GP
from aiopdbp.runtime.stats import LinkStats, NodeStats
from aiopdbp.stall import WaitEdge
from aiopdbp.streams.stream import IncomingStream, StreamState
from aiopdbp.sync import (
    ALGORITHMS,
    Barrier,
    BarrierStats,
    BarrierSummary,
    BarrierTimeoutError,
    NeighbourStats,
    Neighbours,
    aggregate_stats,
)
from aiopdbp.hosts.tables import NodeType, PType, Tables

__version__ = "0.1.0"

__all__ = [
    "CDU", "GP", "BarrierError", "BrokenResourceError", "ClosedResourceError",
    "DeadlockError", "DeviceError", "DuplicateProcessError", "WaitEdge", "HandshakeError", "HostLostError", "RankFailedError", "IncomingStream", "Kind", "Message", "NoPipeError",
    "Node", "NodeType", "PDBPError", "PType", "Pipe", "PipePool", "ProtocolError", "StreamError",
    "StreamOp", "StreamState", "LinkStats", "NodeStats", "Tables", "TransportError", "UnknownProcessError", "WouldBlock", "__version__",
    "open_node", "run", "ALGORITHMS", "Barrier", "BarrierStats", "BarrierSummary",
    "BarrierTimeoutError", "NeighbourStats", "Neighbours", "aggregate_stats", "open_cluster",
]
from aiopdbp.runtime.cluster import open_cluster  # noqa: E402
