"""The dynamic double buffer pool (DDBP) of one host: paper sections 2.2-2.6, SPEC section 6.

Theory of operation
-------------------
A host buffers its remote traffic in two M x N matrices drawing on one set of
equal memory blocks (the UMB): the send matrix (SBP) has a row for each host
it sends to, the receive matrix (RBP) a row for each host it receives from.
A row is a ring of N cells of which only some are mapped to blocks (real
space); Algorithm 1 grows a busy row's real space when its writer reaches
the last real cell, so busy rows get memory and quiet ones little, and a
pool never overflows: a writer that finds its row full waits.

* :mod:`~aiopdbp.pool.matrix` -- the data structures and Algorithm 1, all
  synchronous: :class:`UserMemory` (the UMB), :class:`SubPool` (one row),
  :class:`PoolMatrix` (M rows), :func:`growth_cells` (the growth formula).
* :mod:`~aiopdbp.pool.asyncpool` -- the asyncio front: :class:`SendPool`,
  :class:`RecvPool` and their :class:`Slot` (a held block), bundled per host
  by :class:`BufferPool`.

A data structure with no I/O: nothing here sends or receives; the hosts
layer moves the blocks.  Log records go to the ``aiopdbp.pool`` logger.
"""

from __future__ import annotations

from aiopdbp.pool.asyncpool import AsyncPool, BufferPool, RecvPool, SendPool, Slot
from aiopdbp.pool.matrix import Clock, PoolMatrix, Reclaimer, SubPool, UserMemory, growth_cells

__all__ = [
    "AsyncPool", "BufferPool", "Clock", "PoolMatrix", "Reclaimer", "RecvPool", "SendPool", "Slot",
    "SubPool", "UserMemory", "growth_cells",
]
