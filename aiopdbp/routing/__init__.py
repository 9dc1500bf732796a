"""Routing: private pipes, the router, the PipeManager (SPEC 4-5).

Theory of operation
-------------------
Every GP has a private :class:`~aiopdbp.routing.pipes.Pipe` from a
:class:`~aiopdbp.routing.pipes.PipePool`.  The :class:`~aiopdbp.routing.router.Router`
knows where every bound GP of the cluster is reached -- its pipe here, or
the link to its host -- and makes the routing decision for a send
(:meth:`Router.try_send`, then :meth:`Router.send_waiting`: the name, the
binding, room at the target).  The
:class:`~aiopdbp.routing.manager.PipeManager` is the coroutine that moves
what was routed: from the public pipes into private pipes or host links,
in batches, never a task per message.

Imports: hosts (the tables), wire and the foundation.  The host
links are reached through the :class:`~aiopdbp.routing.router.Target`
protocol, handed in by the node.
"""

from aiopdbp.routing.manager import PipeManager
from aiopdbp.routing.pipes import Pipe, PipePool
from aiopdbp.routing.router import Router, Target

__all__ = ["Pipe", "PipeManager", "PipePool", "Router", "Target"]
