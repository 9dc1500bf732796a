"""The MPI transport's three communicators, from creation to ``Free``.

Every transport duplicates its base communicator three times -- control,
data, bulk (see :mod:`aiopdbp.transport.mpi`) -- with ``Idup``, not ``Dup``:
a rank that never creates its transport must not block the others inside
MPI, where no timeout and no Ctrl-C reach them; :meth:`Comms.join` waits for
the three, bounded.  At close, :meth:`Comms.quiesce` agrees with the other
ranks that everyone is closing and discards what is still unmatched before
:meth:`Comms.free`: MPICH reuses a freed communicator's context id for the
next ``Idup``, so a message left behind would otherwise reach the *next*
transport of this process (e.g. a late BYE closing the next node at once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from aiopdbp.errors import HandshakeError
from aiopdbp.transport.backoff import Backoff, SpinThenBackoff
from aiopdbp.transport.mpiload import load_mpi

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["JOIN_SPIN_S", "Comms"]

#: how long :meth:`Comms.join` tests the Idups at every loop turn before it
#: backs off (see :class:`~aiopdbp.transport.backoff.SpinThenBackoff`)
JOIN_SPIN_S: Final = 0.5


class Comms:
    """``control``, ``data`` and ``bulk``: three ``Idup`` of ``base`` (a
    collective call: every rank makes its transports in the same order)."""

    def __init__(self, base: MPI.Comm) -> None:
        self.control: MPI.Comm
        self.data: MPI.Comm
        self.bulk: MPI.Comm
        self.control, req_c = base.Idup()
        self.data, req_d = base.Idup()
        self.bulk, req_b = base.Idup()
        self._joining: list[Any] = [req_c, req_d, req_b]
        self._freed = False

    async def join(self, timeout: float, rank: int, size: int) -> None:
        """Wait until every rank has made its communicators (the Idups);
        :class:`HandshakeError` after ``timeout`` seconds.

        Cancellation: safe; the Idups stay pending (``free`` then frees nothing).
        """
        _MPI = load_mpi()
        backoff = SpinThenBackoff(JOIN_SPIN_S, Backoff(50e-6, 5e-3))
        deadline = time.monotonic() + timeout
        while not _MPI.Request.Testall(self._joining):
            if time.monotonic() > deadline:
                raise HandshakeError(
                    f"rank {rank}: not every one of the {size} ranks opened its node "
                    f"within {timeout:g} s (a rank that never calls open_node(), or is "
                    "stuck before it; raise handshake_timeout / name_timeout to wait longer)")
            await backoff.sleep()
        self._joining = []
        self.control.Set_name("aiopdbp.control")
        self.data.Set_name("aiopdbp.data")
        self.bulk.Set_name("aiopdbp.bulk")

    async def quiesce(self, timeout: float) -> None:
        """Agree with the other ranks that everyone is closing (a
        non-blocking barrier on each communicator, bounded by ``timeout``)
        and discard what is still unmatched (read the module docstring).

        Cancellation: safe; a barrier left pending is never freed.
        """
        if self._freed:
            return
        _MPI = load_mpi()
        if _MPI.Is_finalized():
            return
        comms = (self.control, self.data, self.bulk)
        try:
            reqs = [c.Ibarrier() for c in comms]
        except _MPI.Exception:  # pragma: no cover - best effort
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Backing off, not a fixed short sleep: with more ranks than cores the
        # ranks that closed first would otherwise wake every half millisecond,
        # taking the cores from the ranks still closing that the barrier waits for.
        backoff = Backoff(5e-4, 5e-3)
        while True:
            _discard_unmatched(comms)
            if _MPI.Request.Testall(reqs):
                break
            if loop.time() > deadline:
                return  # a rank never closed: leave its barrier pending
            await backoff.sleep()
        _discard_unmatched(comms)

    def leave(self) -> None:
        """Free nothing, ever (a failing or interrupted close: peers may be
        gone, and the process is ending)."""
        self._freed = True

    def free(self) -> None:
        """``Free`` the three (once; nothing when the Idups never completed
        or MPI is finalized)."""
        if self._freed:
            return
        self._freed = True
        if self._joining:
            return  # the Idups never completed: nothing to free safely
        _MPI = load_mpi()
        if _MPI.Is_finalized():
            return
        for c in (self.control, self.data, self.bulk):
            try:
                c.Free()
            except _MPI.Exception:  # pragma: no cover - freeing is best effort
                pass


def _discard_unmatched(comms: Sequence[Any]) -> None:
    """Receive and drop every message still unmatched on ``comms``."""
    _MPI = load_mpi()
    status = _MPI.Status()
    for c in comms:
        while True:
            msg = c.Improbe(_MPI.ANY_SOURCE, _MPI.ANY_TAG, status)
            if msg is None:
                break
            msg.Recv([bytearray(status.Get_count(_MPI.BYTE)), _MPI.BYTE])
