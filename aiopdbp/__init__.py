"""aiopdbp: asyncio PDBP (Pipe Dynamic Buffer Pool) for GPU-cluster communication.

Named generalized processes (GPs) send messages and data streams to each other
by name; a PipeManager per host routes them to local private pipes or over
MPI; buffer pools coalesce and pace remote traffic.  See README.md.

The public names below are loaded on first use (PEP 562), so that importing
one layer (``import aiopdbp.transport``) loads that layer and the ones below
it only, not the whole library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from aiopdbp.hosts.tables import NodeType, PType, Tables
    from aiopdbp.routing.pipes import Pipe, PipePool
    from aiopdbp.runtime.cluster import open_cluster
    from aiopdbp.runtime.node import Node, open_node, run
    from aiopdbp.runtime.process import GP
    from aiopdbp.runtime.stats import LinkStats, NodeStats
    from aiopdbp.stall import WaitEdge
    from aiopdbp.streams.stream import IncomingStream, StreamState
    from aiopdbp.sync.barriers import (
        ALGORITHMS,
        Barrier,
        BarrierStats,
        BarrierSummary,
        BarrierTimeoutError,
        NeighbourStats,
        Neighbours,
        aggregate_stats,
    )
    from aiopdbp.wire.codec import CDU, Kind, StreamOp
    from aiopdbp.wire.message import Message

__version__ = "0.1.0"

#: where each public name lives (loaded on first access)
_HOMES: dict[str, str] = {
    **dict.fromkeys(["CDU", "Kind", "StreamOp"], "aiopdbp.wire.codec"),
    **dict.fromkeys(["BarrierError", "BrokenResourceError", "ClosedResourceError", "DeadlockError",
                     "DeviceError", "DuplicateProcessError", "HandshakeError", "HostLostError",
                     "NoPipeError", "PDBPError", "ProtocolError", "RankFailedError", "StreamError",
                     "TransportError", "UnknownProcessError", "WouldBlock"], "aiopdbp.errors"),
    **dict.fromkeys(["Node", "open_node", "run"], "aiopdbp.runtime.node"),
    **dict.fromkeys(["Pipe", "PipePool"], "aiopdbp.routing.pipes"),
    "Message": "aiopdbp.wire.message",
    "GP": "aiopdbp.runtime.process",
    **dict.fromkeys(["LinkStats", "NodeStats"], "aiopdbp.runtime.stats"),
    "WaitEdge": "aiopdbp.stall",
    **dict.fromkeys(["IncomingStream", "StreamState"], "aiopdbp.streams.stream"),
    **dict.fromkeys(["ALGORITHMS", "Barrier", "BarrierStats", "BarrierSummary", "BarrierTimeoutError",
                     "NeighbourStats", "Neighbours", "aggregate_stats"], "aiopdbp.sync.barriers"),
    **dict.fromkeys(["NodeType", "PType", "Tables"], "aiopdbp.hosts.tables"),
    "open_cluster": "aiopdbp.runtime.cluster",
}

__all__ = [
    "CDU", "GP", "BarrierError", "BrokenResourceError", "ClosedResourceError",
    "DeadlockError", "DeviceError", "DuplicateProcessError", "WaitEdge", "HandshakeError", "HostLostError", "RankFailedError", "IncomingStream", "Kind", "Message", "NoPipeError",
    "Node", "NodeType", "PDBPError", "PType", "Pipe", "PipePool", "ProtocolError", "StreamError",
    "StreamOp", "StreamState", "LinkStats", "NodeStats", "Tables", "TransportError", "UnknownProcessError", "WouldBlock", "__version__",
    "open_node", "run", "ALGORITHMS", "Barrier", "BarrierStats", "BarrierSummary",
    "BarrierTimeoutError", "NeighbourStats", "Neighbours", "aggregate_stats", "open_cluster",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None and not name.startswith("_"):
        # a subpackage (``aiopdbp.runtime``) reached as an attribute
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value   # the next access does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
