"""The GPs living on one node: their registration, their inboxes, their release.

:class:`LocalGPs` carries out what :meth:`Node.register
<aiopdbp.runtime.node.Node.register>`, ``apply_pipe``, ``release_pipe`` and
``free`` promise: it makes a GP (an :class:`~aiopdbp.runtime.sgp.SGP` on a
device), binds and unbinds its private pipe, and asks for each table update
through the node's single update point (the ``commit`` and ``commit_nowait``
it is handed).  When the node closes it refuses new GPs and pipes
(:meth:`LocalGPs.close`) and at the end frees the GPs still here without
waiting (:meth:`LocalGPs.drop_all`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiopdbp.errors import ClosedResourceError
from aiopdbp.hosts.tables import PType, Tables
from aiopdbp.routing.arrivals import Arrivals
from aiopdbp.routing.pipes import PipePool
from aiopdbp.runtime.job import root_cause, summary
from aiopdbp.runtime.process import GP, GPHost
from aiopdbp.streams.table import StreamTable

if TYPE_CHECKING:
    from aiopdbp.runtime.devices import NodeDevices

__all__ = ["LocalGPs"]


class LocalGPs:
    """The GPs of one node by pid, and what registers, binds and frees them.

    ``host`` is the node (what each GP gets); ``commit`` and
    ``commit_nowait`` are its table-update point."""

    __slots__ = ("_host", "_rank", "_tables", "_pps", "_arrivals", "_streams", "_sgps", "_commit",
                 "_commit_nowait", "_gps", "_closed")

    def __init__(self, host: GPHost, *, tables: Tables, pps: PipePool, arrivals: Arrivals,
                 streams: StreamTable, sgps: NodeDevices,
                 commit: Callable[..., Awaitable[Any]], commit_nowait: Callable[..., None]) -> None:
        self._host = host
        self._rank = host.rank
        self._tables = tables
        self._pps = pps
        self._arrivals = arrivals
        self._streams = streams
        self._sgps = sgps
        self._commit = commit
        self._commit_nowait = commit_nowait
        self._gps: dict[int, GP] = {}
        self._closed = False

    def __len__(self) -> int:
        return len(self._gps)

    async def register(self, name: str, ptype: PType, *, bind: bool, device: int | None,
                       to_device: bool) -> GP:
        """A new GP named ``name`` (see :meth:`Node.register <aiopdbp.runtime.node.Node.register>`)."""
        if self._closed:
            raise ClosedResourceError(f"node {self._rank} is closed")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a GP name is a non-empty str, not {name!r}")
        if ptype is not PType.GPU and (device is not None or to_device):
            raise ValueError("device= and to_device= are for SGPs (ptype=PType.GPU)")
        # an SGP's device is known before the registration is, so data that
        # arrives before this call resumes lands on it
        bound = self._sgps.bind(name, device, to_device) if ptype is PType.GPU else None
        try:
            pipe = self._pps.apply_nowait() if bind else None
            if pipe is not None:  # its errors name the GP ("pipe pps3 of GP 'x' was closed ...")
                pipe.label = f"{pipe.label} of GP {name!r}"
            try:
                pid = await self._commit("proc_reg", name, int(ptype), self._rank,
                                         pipe.pipe_id if pipe is not None else None)
            except BaseException:
                if pipe is not None:
                    self._pps.release(pipe)
                raise
        except BaseException:
            if bound is not None:
                self._sgps.unbind(name)
            raise
        if bound is not None:
            from aiopdbp.runtime.sgp import SGP

            sgp = SGP(self._host, name, pid, device=bound[0], stream=bound[1], to_device=to_device)
            self._sgps.add(sgp)
            gp: GP = sgp
        else:
            gp = GP(self._host, name, pid, ptype)
        if pipe is not None:
            gp.bound(pipe)
        self._gps[pid] = gp
        return gp

    async def apply_pipe(self, gp: GP, timeout: float | None) -> None:
        """Bind a private pipe to ``gp`` (see :meth:`GP.apply_pipe`)."""
        if self._closed:
            raise ClosedResourceError(f"node {self._rank} is closed")
        pipe = await self._pps.apply(timeout)
        pipe.label = f"{pipe.label} of GP {gp.name!r}"
        try:
            await self._commit("pipe_bind", gp.pid, pipe.pipe_id)
        except BaseException:
            self._pps.release(pipe)
            raise
        gp.bound(pipe)

    async def release_pipe(self, gp: GP, reason: BaseException | None, *, tell: bool = True) -> None:
        """Unbind ``gp``'s pipe (see :meth:`GP.release_pipe`); ``tell=False``:
        no table update (the GP's free follows at once: it says so)."""
        pipe = gp.pipe
        if pipe is None:
            return
        gp.bound(None)
        why = (f"GP {gp.name!r} on rank {self._rank} released its pipe" if reason is None else
               f"GP {gp.name!r} on rank {self._rank} left with {summary(root_cause(reason, self._rank))}")
        self._streams.abort_to(gp.pid, why)
        self._arrivals.forget_pipe(pipe)
        self._pps.release(pipe)
        if self._closed or not tell:
            return
        if reason is not None:
            # A GP leaving with an exception does not wait for rank 0: its
            # loop may be blocked (a raw MPI call), and this rank must go on
            # to report the failure.  Rank 0 gets the request in order.
            self._commit_nowait("pipe_release", gp.pid)
        else:
            await self._commit("pipe_release", gp.pid)

    async def free(self, gp: GP, *, wait: bool) -> None:
        """Unregister ``gp`` (see :meth:`GP.free`)."""
        self._gps.pop(gp.pid, None)
        self._sgps.remove(gp.pid)
        if gp.pid in self._tables.pta and not self._closed:
            if wait:
                await self._commit("proc_free", gp.pid)
            else:
                self._commit_nowait("proc_free", gp.pid)

    def receivers(self) -> list[tuple[str, bool, int, int]]:
        """(name, waits in recv, queued, taken) of every GP here (the stall
        watch, once this is the last rank open)."""
        out = []
        for gp in self._gps.values():
            pipe = gp.pipe
            out.append((gp.name, gp.receiving > 0, len(pipe), pipe.taken) if pipe is not None else
                       (gp.name, False, 0, 0))
        return out

    # -- the node's close ---------------------------------------------------------
    def close(self) -> None:
        """The node is closing: no new GP or pipe; a GP that leaves from now
        on asks for no table update (the node's close frees what is left)."""
        self._closed = True

    async def aclose_owned(self) -> None:
        """Close what the GPs here still own (a Barrier of a GP not freed),
        while the peers can still hear it."""
        await asyncio.gather(*(gp.aclose_owned() for gp in list(self._gps.values())))

    def drop_all(self) -> None:
        """Free every GP still here, synchronously (the end of the node's close)."""
        for gp in list(self._gps.values()):
            self._drop(gp)

    def _drop(self, gp: GP) -> None:
        pipe = gp.pipe
        gp.mark_freed()
        if pipe is not None:
            self._arrivals.forget_pipe(pipe)
            self._pps.release(pipe)
            if gp.pid in self._tables.pta:
                self._commit_nowait("pipe_release", gp.pid)
        self._gps.pop(gp.pid, None)
        self._sgps.remove(gp.pid)
        if gp.pid in self._tables.pta:
            self._commit_nowait("proc_free", gp.pid)
