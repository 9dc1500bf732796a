"""The per-message MPI calls of a progress engine: posting a send and
matching and receiving a small message.

Two functions, :func:`post_one` and :func:`probe_small`, in two forms with
one interface (as :mod:`aiopdbp.wire.blocks` has): this Python source,
always present, and a twin compiled by Cython, ``aiopdbp.transport.ckernel``,
which calls MPI's C API directly (``MPI_Isend``, ``MPI_Test``,
``MPI_Improbe``, ``MPI_Mrecv``) and so makes no Python object per message
but what it returns.  :mod:`aiopdbp.transport.receives` asks
:func:`aiopdbp.ext.choose` which one runs.  The twin is compiled against
MPICH's ``mpi.h`` and linked to its library by soname (``libmpi.so.12``):
under an MPI of another ABI (Open MPI) it does not import and this form runs.

The common message is small and in order: :func:`probe_small` receives it
into a fresh ``bytearray`` and appends it to ``deliveries``.  Anything else
-- a message of ``small`` bytes or more (a numpy buffer, the receiver's
allocation hook, an ``Imrecv``), or one from a source whose earlier large
message is still landing (``fifo``) -- is matched and handed back for the
engine to handle the long way; no message is received out of order or twice.
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

__all__ = ["post_one", "probe_small"]

_ANY_SOURCE = MPI.ANY_SOURCE
_BYTE = MPI.BYTE


def post_one(comm: MPI.Comm, buf: Any, dest: int, tag: int) -> MPI.Request | None:
    """``Isend`` of the bytes of ``buf`` to rank ``dest`` with ``tag``, and one
    ``Test``: None when it completed at once (eager), else its request (the
    caller keeps ``buf`` alive until the request completes)."""
    req = comm.Isend([buf, _BYTE], dest, tag)
    if req.Test():
        return None
    return req


def probe_small(comm: MPI.Comm, tag: int, status: MPI.Status, small: int, ch: int, channel: Any,
                fifo: dict[tuple[int, int], Any], deliveries: list[tuple[int, Any, Any]],
                budget: int) -> tuple[int, int, MPI.Message | None]:
    """Receive the messages of ``tag`` waiting on ``comm`` (channel number
    ``ch``, delivered as ``channel``) that are shorter than ``small`` and not
    queued behind a large one of their source (a non-empty ``fifo[(ch,
    source)]``), each as ``(source, channel, memoryview)`` appended to
    ``deliveries``, until none is waiting or ``budget`` bytes were received.

    Returns ``(messages, bytes, matched)``: ``matched`` is the first message
    this function does not receive (matched, its envelope in ``status``),
    for the caller to handle, or None.  MPI errors raise ``MPI.Exception``.
    """
    n = got = 0
    improbe = comm.Improbe
    while got < budget:
        msg = improbe(_ANY_SOURCE, tag, status)
        if msg is None:
            break
        size = status.Get_count(_BYTE)
        src = status.Get_source()
        if size >= small or (fifo and fifo.get((ch, src))):
            return n, got, msg
        buf = bytearray(size)
        msg.Recv([buf, _BYTE])
        deliveries.append((src, channel, memoryview(buf)))
        n += 1
        got += size
    return n, got, None
