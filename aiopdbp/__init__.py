"""aiopdbp: asyncio PDBP (Pipe Dynamic Buffer Pool) for GPU-cluster communication.

Named generalized processes (GPs) send messages and data streams to each other
by name; a router per host decides where each goes -- a local private pipe
or, over MPI, another host -- and a PipeManager moves it; buffer pools
coalesce and pace remote traffic.  See README.md.

The public API is re-exported here, loaded on first use (PEP 562): ``import
aiopdbp.wire`` alone loads the codec and nothing above it, while
``aiopdbp.open_node`` loads the runtime when it is first touched.  The
layers, top to bottom (a package imports only packages below it)::

    cli                      the command line
    bench                    the benchmark harness
    launch                   the launcher, the emulated cluster
    sync                     barriers and neighbours, built on GPs
    runtime                  Node (the composition root), GP, SGP, the job
    streams                  the stream protocol, sender, receiver, device streams
    routing                  pipes, the router, the PipeManager
    hosts                    one remote host: sequencer, inbound, credit, failure
    wire  pool  transport  device
    stall  env               wait reports; the environment, read in one place
    errors                   the exceptions
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiopdbp.lazy import lazy_exports

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["CDU", "Kind", "StreamOp"], "aiopdbp.wire.mesp"),
    "Message": "aiopdbp.wire.message",
    **dict.fromkeys([
        "BarrierError", "BrokenResourceError", "ClosedResourceError", "DeadlockError", "DeviceError",
        "DuplicateProcessError", "HandshakeError", "HostLostError", "NoPipeError", "PDBPError",
        "ProtocolError", "RankFailedError", "StreamError", "TransportError", "UnknownProcessError",
        "WouldBlock"], "aiopdbp.errors"),
    "WaitEdge": "aiopdbp.stall",
    **dict.fromkeys(["NodeType", "PType", "Tables"], "aiopdbp.hosts.tables"),
    "RemoteConfig": "aiopdbp.hosts.remote",
    **dict.fromkeys(["Pipe", "PipePool"], "aiopdbp.routing.pipes"),
    **dict.fromkeys(["IncomingStream", "StreamState"], "aiopdbp.streams.receiver"),
    **dict.fromkeys(["Node", "open_node", "run"], "aiopdbp.runtime.node"),
    "GP": "aiopdbp.runtime.process",
    "SGP": "aiopdbp.runtime.sgp",
    **dict.fromkeys(["LinkStats", "NodeStats"], "aiopdbp.runtime.stats"),
    "open_cluster": "aiopdbp.runtime.cluster",
    **dict.fromkeys(["ALGORITHMS", "Barrier", "BarrierStats", "BarrierSummary", "BarrierTimeoutError",
                     "NeighbourStats", "Neighbours", "aggregate_stats"], "aiopdbp.sync"),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__ = lazy_exports(globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, eagerly
    from aiopdbp.errors import BarrierError as BarrierError
    from aiopdbp.errors import BrokenResourceError as BrokenResourceError
    from aiopdbp.errors import ClosedResourceError as ClosedResourceError
    from aiopdbp.errors import DeadlockError as DeadlockError
    from aiopdbp.errors import DeviceError as DeviceError
    from aiopdbp.errors import DuplicateProcessError as DuplicateProcessError
    from aiopdbp.errors import HandshakeError as HandshakeError
    from aiopdbp.errors import HostLostError as HostLostError
    from aiopdbp.errors import NoPipeError as NoPipeError
    from aiopdbp.errors import PDBPError as PDBPError
    from aiopdbp.errors import ProtocolError as ProtocolError
    from aiopdbp.errors import RankFailedError as RankFailedError
    from aiopdbp.errors import StreamError as StreamError
    from aiopdbp.errors import TransportError as TransportError
    from aiopdbp.errors import UnknownProcessError as UnknownProcessError
    from aiopdbp.errors import WouldBlock as WouldBlock
    from aiopdbp.hosts.remote import RemoteConfig as RemoteConfig
    from aiopdbp.hosts.tables import NodeType as NodeType
    from aiopdbp.hosts.tables import PType as PType
    from aiopdbp.hosts.tables import Tables as Tables
    from aiopdbp.routing.pipes import Pipe as Pipe
    from aiopdbp.routing.pipes import PipePool as PipePool
    from aiopdbp.runtime.cluster import open_cluster as open_cluster
    from aiopdbp.runtime.node import Node as Node
    from aiopdbp.runtime.node import open_node as open_node
    from aiopdbp.runtime.node import run as run
    from aiopdbp.runtime.process import GP as GP
    from aiopdbp.runtime.sgp import SGP as SGP
    from aiopdbp.runtime.stats import LinkStats as LinkStats
    from aiopdbp.runtime.stats import NodeStats as NodeStats
    from aiopdbp.stall import WaitEdge as WaitEdge
    from aiopdbp.streams.receiver import IncomingStream as IncomingStream
    from aiopdbp.streams.receiver import StreamState as StreamState
    from aiopdbp.sync import ALGORITHMS as ALGORITHMS
    from aiopdbp.sync import Barrier as Barrier
    from aiopdbp.sync import BarrierStats as BarrierStats
    from aiopdbp.sync import BarrierSummary as BarrierSummary
    from aiopdbp.sync import BarrierTimeoutError as BarrierTimeoutError
    from aiopdbp.sync import NeighbourStats as NeighbourStats
    from aiopdbp.sync import Neighbours as Neighbours
    from aiopdbp.sync import aggregate_stats as aggregate_stats
    from aiopdbp.wire.mesp import CDU as CDU
    from aiopdbp.wire.mesp import Kind as Kind
    from aiopdbp.wire.mesp import StreamOp as StreamOp
    from aiopdbp.wire.message import Message as Message
