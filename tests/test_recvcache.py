"""The receive-buffer cache (aiopdbp.transport.recvcache): large receive
buffers come back to it when the receiver drops them, and not before."""

from __future__ import annotations

import gc

import numpy as np

from aiopdbp.transport.recvcache import RecvBufferCache

MIB = 1 << 20


def test_dropped_buffer_is_handed_out_again() -> None:
    cache = RecvBufferCache(8 * MIB, 128 << 10)
    a = cache.alloc(MIB)
    addr = a.__array_interface__["data"][0]
    del a
    b = cache.alloc(MIB)
    assert (cache.hits, cache.misses) == (1, 1)
    assert b.__array_interface__["data"][0] == addr and b.nbytes == MIB and b.flags.writeable


def test_buffer_stays_out_while_a_view_of_it_lives() -> None:
    cache = RecvBufferCache(8 * MIB, 128 << 10)
    a = cache.alloc(MIB)
    view = a.view(np.float64)[10:20]
    del a
    b = cache.alloc(MIB)
    assert cache.hits == 0 and not np.shares_memory(b, view)
    del view
    gc.collect()
    cache.alloc(MIB)
    assert cache.hits == 1


def test_buffer_over_capacity_is_not_kept() -> None:
    cache = RecvBufferCache(MIB, 128 << 10)
    a, b = cache.alloc(MIB), cache.alloc(MIB)
    del a, b  # the second one does not fit the 1 MiB budget
    c, d = cache.alloc(MIB), cache.alloc(MIB)  # held: the second cannot be the first
    assert (cache.hits, cache.misses) == (1, 3)


def test_buffer_outlives_its_dropped_cache() -> None:
    cache = RecvBufferCache(8 * MIB, 128 << 10)
    a = cache.alloc(MIB)
    a[:] = 7
    del cache
    gc.collect()
    assert (a == 7).all()
    del a  # its callback has no cache to go back to: nothing happens
    gc.collect()
