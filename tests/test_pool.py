"""Tests of aiopdbp.pool: the DDBP (UMB, sub-pools, Algorithm 1, async layer).

Hand-computed Algorithm 1 cases use N=16, initial m=4, Threshold=0.5 unless
said otherwise.  The growth test runs when the writer arrives at the CRE
(recv == real-1, CRE still free), so there SU = used/real and
RSR = used/(real-used) count only the cells before the CRE.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiopdbp.errors import ClosedResourceError, WouldBlock
from aiopdbp.pool import (
    BufferPool,
    PoolMatrix,
    RecvPool,
    SendPool,
    SubPool,
    UserMemory,
    growth_cells,
)

N, M0, T = 16, 4, 0.5


def row(capacity: int = N, initial: int = M0, threshold: float = T, nblocks: int = 64) -> SubPool:
    return SubPool(capacity, UserMemory(8, nblocks), threshold, initial=initial, name="row")


def put_byte(sp: SubPool, value: int) -> int:
    got = sp.put(1)
    assert got is not None
    got[1][0] = value
    return got[0]


def take_release(sp: SubPool) -> int:
    got = sp.take()
    assert got is not None
    sp.release(got[0])
    return got[1][0]


async def until(pred: Callable[[], bool]) -> None:
    """Let other tasks run (no wall-clock sleeping) until pred() holds."""
    for _ in range(100):
        if pred():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


# -- UMB ------------------------------------------------------------------------
def test_umb_alloc_lowest_free_block_first() -> None:
    umb = UserMemory(16, 3)
    assert [umb.alloc(), umb.alloc(), umb.alloc(), umb.alloc()] == [0, 1, 2, None]
    assert umb.free_blocks == 0


def test_umb_free_twice_raises() -> None:
    umb = UserMemory(16, 2)
    b = umb.alloc()
    assert b is not None
    umb.free(b)
    with pytest.raises(ValueError):
        umb.free(b)


@pytest.mark.parametrize("bad", [-1, 2, 99])
def test_umb_bad_block_id_raises(bad: int) -> None:
    umb = UserMemory(16, 2)
    with pytest.raises(ValueError):
        umb.view(bad)
    with pytest.raises(ValueError):
        umb.free(bad)


def test_umb_views_are_disjoint_writable_blocks() -> None:
    umb = UserMemory(4, 2)
    umb.view(0)[:] = b"aaaa"
    umb.view(1)[:] = b"bbbb"
    assert len(umb.view(0)) == 4
    assert bytes(umb.arena) == b"aaaabbbb"


# -- Algorithm 1 arithmetic ---------------------------------------------------------
@pytest.mark.parametrize(
    ("used", "real", "m"),
    [(3, 4, 8), (11, 12, 120), (5, 8, 6), (2, 4, 1), (1, 4, 1)],
)
def test_growth_cells_is_rsr_minus_one_times_cursize_rounded_up(
    used: int, real: int, m: int
) -> None:
    # (3,4): RSR=3 -> 2*4=8; (5,8): RSR=5/3 -> 2/3*8=5.33 -> 6; RSR<=1 -> 1.
    assert growth_cells(used, real) == m


def test_growth_cells_without_free_cre_raises() -> None:
    with pytest.raises(ValueError):
        growth_cells(4, 4)


# -- SubPool: the paper's quantities and Algorithm 1 ------------------------------------
def test_subpool_initial_real_space_is_contiguous_from_ring_start() -> None:
    sp = row()
    assert sp.cells() == [0, 1, 2, 3] + [None] * 12
    assert (sp.real, sp.cre, sp.cve, sp.density_factor) == (4, 3, 4, 0.25)


def test_subpool_metrics_hand_computed_when_recv_reaches_cre() -> None:
    sp = row()
    for v in range(3):
        put_byte(sp, v)
    assert sp.at_cre and sp.recv == 3
    assert sp.density_factor == 0.25  # 4 / 16
    assert sp.used == 3
    assert sp.space_utilization == 0.75  # 3 / 4
    assert sp.receive_send_ratio == 3.0  # 3 / 1


def test_subpool_grows_by_rsr_formula_at_cre() -> None:
    sp = row()
    for v in range(3):
        put_byte(sp, v)
    cell = put_byte(sp, 3)  # SU=0.75 > 0.5, DF<1: m = (3-1)*4 = 8
    assert (cell, sp.real, sp.recv, sp.grows) == (3, 12, 4, 1)
    assert sp.density_factor == 0.75
    assert sp.cells()[:12] == list(range(12))


def test_subpool_growth_clamped_to_capacity() -> None:
    sp = row()
    for v in range(11):
        put_byte(sp, v)  # grows to 12 at the 4th put
    assert sp.at_cre and sp.space_utilization == 11 / 12
    put_byte(sp, 11)  # m = (11-1)*12 = 120, clamped to N-real = 4
    assert (sp.real, sp.density_factor, sp.grows) == (16, 1.0, 2)


def test_subpool_full_density_does_not_grow() -> None:
    sp = row(capacity=4, initial=4)
    for v in range(4):
        put_byte(sp, v)  # 4th put: SU=0.75 but DF=1
    assert (sp.real, sp.grows, sp.denied) == (4, 0, 0)
    assert sp.put(1) is None


def test_subpool_quiet_row_does_not_grow() -> None:
    sp = row()
    for v in range(20):  # reader keeps up: SU = 0 at every CRE
        put_byte(sp, v)
        assert take_release(sp) == v
    assert (sp.real, sp.grows) == (4, 0)


def test_subpool_su_equal_threshold_does_not_grow() -> None:
    sp = row()
    put_byte(sp, 0)
    put_byte(sp, 1)
    take_release(sp)
    put_byte(sp, 2)  # recv at CRE with 2 used: SU = 0.5, not > 0.5
    put_byte(sp, 3)
    assert (sp.real, sp.grows) == (4, 0)


def test_subpool_rsr_below_one_grows_one_block_when_su_over_threshold() -> None:
    sp = row(threshold=0.3)
    put_byte(sp, 0)
    put_byte(sp, 1)
    take_release(sp)
    put_byte(sp, 2)  # at CRE: used 2, SU=0.5 > 0.3, RSR=1 -> formula m=0 -> 1
    assert sp.receive_send_ratio == 1.0
    put_byte(sp, 3)
    assert (sp.real, sp.grows) == (5, 1)


def test_subpool_umb_exhausted_no_growth_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    sp = row(nblocks=4)
    with caplog.at_level(logging.WARNING, logger="aiopdbp.pool"):
        for v in range(4):
            put_byte(sp, v)  # 4th put would grow by 8: UMB has none
        assert sp.put(1) is None  # full, cannot grow: writer must wait
        for lap in range(4):  # second lap, second refused growth at the CRE
            assert take_release(sp) == lap
            put_byte(sp, 4 + lap)
    assert (sp.real, sp.grows, sp.denied) == (4, 0, 2)
    warnings = [r for r in caplog.records if "UMB exhausted" in r.getMessage()]
    assert len(warnings) == 1


def test_subpool_full_row_put_returns_none() -> None:
    sp = row(capacity=2, initial=2)
    put_byte(sp, 0)
    put_byte(sp, 1)
    assert sp.put(1) is None and sp.used == 2 and sp.space_utilization == 1.0
    assert sp.receive_send_ratio == math.inf


def test_subpool_fifo_order_across_wraparound() -> None:
    sp = row(capacity=3, initial=3)
    cells, out = [], []
    for v in range(10):
        if sp.used == sp.real:  # full: the reader frees the oldest cell
            out.append(take_release(sp))
        cells.append(put_byte(sp, v))
    while sp.pending:
        out.append(take_release(sp))
    assert out == list(range(10))
    assert cells == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]


def test_subpool_release_out_of_order_reuses_in_ring_order() -> None:
    sp = row(capacity=2, initial=2)
    put_byte(sp, 0)
    put_byte(sp, 1)
    a, b = sp.take(), sp.take()
    assert a is not None and b is not None
    sp.release(b[0])  # cell 1 done, but cell 0 is older and still held
    assert sp.used == 2 and sp.put(1) is None
    sp.release(a[0])
    assert sp.used == 0 and put_byte(sp, 2) == 0


def test_subpool_release_makes_block_reusable() -> None:
    sp = row(capacity=1, initial=1)
    put_byte(sp, 7)
    assert sp.put(1) is None
    assert take_release(sp) == 7
    assert put_byte(sp, 8) == 0 and sp.cells() == [0]


def test_subpool_growth_after_wraparound_keeps_fifo() -> None:
    sp = row()
    put_byte(sp, 0), put_byte(sp, 1)
    take_release(sp), take_release(sp)
    for v in (2, 3, 4, 5):  # cells 2, 3, 0, 1: ring wrapped, now full
        put_byte(sp, v)
    assert take_release(sp) == 2
    put_byte(sp, 6)  # cell 2, recv -> CRE
    assert take_release(sp) == 3  # tail -> 0: cells 0..2 occupied, linear
    assert sp.at_cre and sp.space_utilization == 0.75
    assert put_byte(sp, 7) == 3 and sp.real == 12
    assert put_byte(sp, 8) == 4  # into new real space, not cell 0
    assert [take_release(sp) for _ in range(5)] == [4, 5, 6, 7, 8]


def test_subpool_abort_is_skipped_by_reader() -> None:
    sp = row()
    got = sp.reserve()
    assert got is not None
    put_byte(sp, 9)
    assert sp.take() is None  # FIFO: blocked behind the open cell
    sp.abort(got[0])
    assert take_release(sp) == 9 and sp.used == 0


def test_subpool_consume_finishes_the_readers_next_cell_in_one_step() -> None:
    sp = row(capacity=1, initial=1)
    got = sp.reserve()
    assert got is not None and sp.put(1) is None  # full while it is written
    assert sp.consume(got[0])
    assert sp.used == 0 and sp.pending == 0 and sp.stats()["takes"] == 1
    assert put_byte(sp, 3) == 0 and take_release(sp) == 3


def test_subpool_consume_refused_behind_an_older_committed_cell() -> None:
    sp = row()
    put_byte(sp, 5)
    got = sp.reserve()
    assert got is not None
    assert not sp.consume(got[0])  # FIFO: the committed cell is read first
    assert sp.used == 2 and take_release(sp) == 5


def test_subpool_consume_skips_aborted_cells_ahead() -> None:
    sp = row()
    first, second = sp.reserve(), sp.reserve()
    assert first is not None and second is not None
    sp.abort(first[0])
    assert sp.consume(second[0]) and sp.used == 0


def test_subpool_release_of_unheld_cell_raises() -> None:
    sp = row()
    put_byte(sp, 1)
    with pytest.raises(ValueError):
        sp.release(0)  # committed but never taken
    with pytest.raises(ValueError):
        sp.commit(0, 1)  # already committed


def test_subpool_commit_oversize_raises() -> None:
    sp = row()
    got = sp.reserve()
    assert got is not None
    with pytest.raises(ValueError):
        sp.commit(got[0], 9)  # block_size is 8


def test_subpool_shrink_only_when_idle() -> None:
    sp = row()
    for v in range(4):
        put_byte(sp, v)  # grew to 12
    assert sp.shrink_to(4) == 0  # busy: nothing moves
    for v in range(4):
        take_release(sp)
    assert sp.shrink_to(4) == 8 and sp.real == 4 and sp.recv == 0


@pytest.mark.parametrize("threshold", [0.0, 1.0, -0.1])
def test_subpool_threshold_outside_open_interval_raises(threshold: float) -> None:
    with pytest.raises(ValueError):
        row(threshold=threshold)


# -- PoolMatrix -------------------------------------------------------------------
def test_matrix_makes_a_row_and_its_initial_space_at_its_hosts_first_use() -> None:
    pm = PoolMatrix(3, N, UserMemory(8, 64), M0, T)
    assert pm.rows == [] and pm.umb.free_blocks == 64
    assert pm[2].real == 4 and not pm.made(0) and pm.umb.free_blocks == 60


def test_an_empty_row_gives_its_initial_space_to_a_new_peer_when_the_umb_is_spent() -> None:
    pm = PoolMatrix(3, N, UserMemory(8, 8), M0, T)
    assert pm[0].real == 4 and pm[1].real == 4 and pm.umb.free_blocks == 0
    put_byte(pm[1], 7)                       # row 1 holds data: it keeps its space
    assert pm[2].real == 4 and pm[0].real == 0   # row 0 was empty: its space went to row 2
    assert pm[1].real == 4 and take_release(pm[1]) == 7


def test_a_row_made_again_after_giving_its_space_away_keeps_fifo() -> None:
    pm = PoolMatrix(2, N, UserMemory(8, 4), M0, T)
    for v in (1, 2):
        put_byte(pm[0], v)
    assert [take_release(pm[0]) for _ in range(2)] == [1, 2]
    assert pm[1].real == 4 and pm[0].real == 0   # row 0, empty, gave its 4 blocks away
    for v in (3, 4, 5):
        put_byte(pm[1], v)
    take_release(pm[1]), take_release(pm[1]), take_release(pm[1])
    for v in (6, 7, 8):                      # row 0 again: bootstraps from row 1's idle space
        put_byte(pm[0], v)
    assert [take_release(pm[0]) for _ in range(3)] == [6, 7, 8]


def test_matrix_initial_allocation_equal_per_row() -> None:
    pm = PoolMatrix(3, N, UserMemory(8, 64), M0, T)
    assert [pm[h].real for h in range(3)] == [4, 4, 4] and pm.umb.free_blocks == 52


def test_matrix_initial_allocation_short_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="aiopdbp.pool"):
        pm = PoolMatrix(3, N, UserMemory(8, 10), M0, T)
        put_byte(pm[0], 1), put_byte(pm[1], 2)   # busy rows keep their space
        assert [pm[h].real for h in range(3)] == [4, 4, 2]
    assert any("UMB exhausted; row 2" in r.getMessage() for r in caplog.records)


def test_matrix_local_row_gets_no_space_until_used() -> None:
    pm = PoolMatrix(3, N, UserMemory(8, 64), M0, T, local=1)
    assert [pm[h].real for h in range(3)] == [4, 0, 4]
    assert pm[1].put(1) is not None and pm[1].real == 1


def test_matrix_bad_host_raises() -> None:
    pm = PoolMatrix(2, N, UserMemory(8, 64), M0, T)
    with pytest.raises(ValueError):
        pm[2]


def test_matrix_busy_row_grows_quiet_row_stays_small() -> None:
    pm = PoolMatrix(2, N, UserMemory(8, 64), M0, T)
    busy, quiet = pm[0], pm[1]
    for step in range(40):
        busy.put(1)  # refused while full: the writer would wait
        if step % 3 == 0:  # the busy row's reader runs at 1/3 the rate
            take_release(busy)
        put_byte(quiet, step)
        take_release(quiet)
    assert busy.real == N and busy.grows >= 1
    assert quiet.real == M0 and quiet.grows == 0


def test_matrix_reclaims_idle_row_space_under_pressure() -> None:
    pm = PoolMatrix(2, N, UserMemory(8, 16), M0, T)
    a, b = pm[0], pm[1]
    for v in range(4):
        put_byte(a, v)  # a grows 4 -> 12: UMB now empty
    while a.pending:
        take_release(a)  # a is idle again
    for v in range(4):
        put_byte(b, v)  # b wants 8: a gives back down to its initial 4
    assert (a.real, b.real, pm.umb.free_blocks) == (4, 12, 0)
    assert a.shrinks == 1


def test_matrix_reclaim_disabled_keeps_idle_space() -> None:
    pm = PoolMatrix(2, N, UserMemory(8, 16), M0, T, reclaim=False)
    for v in range(4):
        put_byte(pm[0], v)
    while pm[0].pending:
        take_release(pm[0])
    for v in range(4):
        put_byte(pm[1], v)
    assert (pm[0].real, pm[1].real) == (12, 4)


def test_size_history_records_growth() -> None:
    now = [0.0]
    pm = PoolMatrix(1, N, UserMemory(8, 64), M0, T, clock=lambda: now[0])
    assert pm[0].real == 4  # the row is made (its history begins) at its first use
    now[0] = 5.0
    for v in range(12):
        put_byte(pm[0], v)
    assert pm.size_history(0) == [(0.0, 0), (0.0, 4), (5.0, 12), (5.0, 16)]


def test_stats_report_counters_and_peak() -> None:
    pm = PoolMatrix(1, N, UserMemory(8, 64), M0, T)
    for v in range(4):
        put_byte(pm[0], v)
    take_release(pm[0])
    s = pm.stats()["rows"][0]  # type: ignore[index]
    got = tuple(s[k] for k in ("real", "grows", "used", "peak_used", "puts", "takes"))
    assert got == (12, 1, 3, 4, 4, 1)


# -- async layer ---------------------------------------------------------------------
def send_pool(capacity: int = 2, nblocks: int = 8, hosts: int = 1) -> SendPool:
    return SendPool(PoolMatrix(hosts, capacity, UserMemory(8, nblocks), capacity, T))


@pytest.mark.asyncio
async def test_acquire_waits_until_release() -> None:
    pool = send_pool()
    for _ in range(2):
        pool.commit(await pool.acquire(0))
    acquired = asyncio.Event()

    async def writer() -> None:
        await pool.acquire(0, 4)
        acquired.set()

    task = asyncio.create_task(writer())
    await until(lambda: pool.matrix[0].waits == 1)
    assert not acquired.is_set()
    pool.release(await pool.next_filled(0))
    await acquired.wait()
    await task


@pytest.mark.asyncio
async def test_acquire_cancelled_while_waiting_holds_nothing() -> None:
    pool = send_pool()
    for _ in range(2):
        pool.commit(await pool.acquire(0))
    task = asyncio.create_task(pool.acquire(0))
    await until(lambda: pool.matrix[0].waits == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(2):
        pool.release(await pool.next_filled(0))
    assert pool.matrix[0].used == 0 and pool.matrix.umb.free_blocks == 6
    pool.commit(await pool.acquire(0))  # the row still works


@pytest.mark.asyncio
async def test_next_filled_waits_until_commit() -> None:
    pool = send_pool()
    slot = await pool.acquire(0)
    reader = asyncio.create_task(pool.next_filled(0))
    await until(lambda: pool.waiting_readers(0) == 1)
    slot.append(b"hi")
    pool.commit(slot)
    got = await reader
    assert bytes(got.data) == b"hi"


@pytest.mark.asyncio
async def test_next_filled_cancelled_loses_nothing() -> None:
    pool = send_pool()
    reader = asyncio.create_task(pool.next_filled(0))
    await until(lambda: pool.waiting_readers(0) == 1)
    slot = await pool.acquire(0)
    slot.append(b"x")
    pool.commit(slot)  # wakes the reader...
    reader.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert bytes((await pool.next_filled(0)).data) == b"x"


@pytest.mark.asyncio
async def test_slot_append_coalesces_records_in_one_block() -> None:
    pool = send_pool()
    slot = await pool.acquire(0, 3)
    assert (slot.append(b"abc"), slot.append(b"de"), slot.room) == (0, 3, 3)
    pool.commit(slot)
    got = await pool.next_filled(0)
    assert (bytes(got.data), got.used) == (b"abcde", 5)


@pytest.mark.asyncio
async def test_slot_append_past_block_end_raises() -> None:
    slot = await send_pool().acquire(0)
    slot.append(b"1234567")
    with pytest.raises(ValueError):
        slot.append(b"89")


@pytest.mark.asyncio
async def test_acquire_larger_than_block_raises() -> None:
    with pytest.raises(ValueError):
        await send_pool().acquire(0, 9)


@pytest.mark.asyncio
async def test_release_twice_raises() -> None:
    pool = send_pool()
    pool.commit(await pool.acquire(0))
    slot = await pool.next_filled(0)
    pool.release(slot)
    with pytest.raises(ValueError):
        pool.release(slot)


@pytest.mark.asyncio
async def test_commit_with_explicit_nbytes_after_direct_write() -> None:
    pool = send_pool()
    slot = await pool.acquire(0)
    slot.view[:4] = b"mpi!"  # e.g. an Irecv landing in the block
    pool.commit(slot, 4)
    assert bytes((await pool.next_filled(0)).data) == b"mpi!"


@pytest.mark.asyncio
async def test_abort_unblocks_reader_of_later_commit() -> None:
    pool = send_pool()
    first = await pool.acquire(0)
    second = await pool.acquire(0)
    second.append(b"2")
    pool.commit(second)
    reader = asyncio.create_task(pool.next_filled(0))
    await until(lambda: pool.waiting_readers(0) == 1)
    pool.abort(first)
    assert bytes((await reader).data) == b"2"


@pytest.mark.asyncio
async def test_umb_exhausted_writer_waits_until_release(caplog: pytest.LogCaptureFixture) -> None:
    pool = SendPool(PoolMatrix(1, N, UserMemory(8, 4), M0, T))
    with caplog.at_level(logging.WARNING, logger="aiopdbp.pool"):
        for _ in range(4):
            pool.commit(await pool.acquire(0))
        waiting = asyncio.create_task(pool.acquire(0))
        await until(lambda: pool.matrix[0].waits == 1)
    assert pool.matrix[0].real == 4
    assert any("UMB exhausted" in r.getMessage() for r in caplog.records)
    pool.release(await pool.next_filled(0))
    assert (await waiting).cell == 0


@pytest.mark.asyncio
async def test_bootstrap_writer_wakes_when_blocks_freed() -> None:
    umb = UserMemory(8, 4)
    pm = PoolMatrix(2, N, umb, M0, T, local=1, reclaim=False)
    pool = SendPool(pm)
    assert pm[0].real == 4  # row 0 holds every block of the UMB
    waiting = asyncio.create_task(pool.acquire(1))  # row 1 has no real space
    await until(lambda: pm[1].waits == 1)
    assert pm[0].shrink_to(2) == 2  # blocks come back to the UMB
    slot = await waiting
    assert pm[1].real == 1 and slot.cell == 0  # local row bootstraps one block


@pytest.mark.asyncio
async def test_close_wakes_waiting_acquire_with_closed_error() -> None:
    pool = send_pool()
    for _ in range(2):
        pool.commit(await pool.acquire(0))
    task = asyncio.create_task(pool.acquire(0))
    await until(lambda: pool.matrix[0].waits == 1)
    pool.close()
    with pytest.raises(ClosedResourceError):
        await task


@pytest.mark.asyncio
async def test_next_filled_drains_committed_data_after_close() -> None:
    pool = send_pool()
    slot = await pool.acquire(0)
    slot.append(b"last")
    pool.commit(slot)
    pool.close()
    assert bytes((await pool.next_filled(0)).data) == b"last"
    with pytest.raises(ClosedResourceError):
        await pool.next_filled(0)


def test_acquire_nowait_on_full_row_raises_would_block() -> None:
    pool = send_pool(capacity=1)
    pool.commit(pool.acquire_nowait(0))
    with pytest.raises(WouldBlock):
        pool.acquire_nowait(0)


async def test_consume_wakes_a_writer_waiting_for_space() -> None:
    pool = send_pool(capacity=1)
    slot = pool.acquire_nowait(0)
    waiter = asyncio.create_task(pool.acquire(0))
    await until(lambda: pool.matrix[0].waits == 1)
    assert pool.consume(slot) and slot.mode == ""
    assert (await asyncio.wait_for(waiter, 5)).mode == "w"


def test_buffer_pool_send_and_recv_share_one_umb() -> None:
    bp = BufferPool(3, N, 64, 40, M0, T, local=0)
    assert isinstance(bp.send, SendPool) and isinstance(bp.recv, RecvPool)
    assert bp.send.matrix.umb is bp.recv.matrix.umb is bp.umb
    for host in range(3):
        bp.send.matrix[host], bp.recv.matrix[host]  # the rows of every host, made
    assert bp.umb.free_blocks == 40 - 2 * 2 * M0
    umb = {"block_size": 64, "nblocks": 40, "free_blocks": 24, "used_blocks": 16}
    assert bp.stats()["umb"] == umb


# -- property: any op sequence keeps FIFO and conserves blocks ---------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("ppptra"), max_size=120))
def test_subpool_random_ops_keep_fifo_and_conserve_blocks(ops: list[str]) -> None:
    umb = UserMemory(4, 12)
    pm = PoolMatrix(2, 8, umb, 2, 0.4)
    sp = pm[0]
    sent, seen, taken, reserved = 0, [], [], []
    for op in ops:
        if op == "p":
            got = sp.put(4)
            if got is not None:
                got[1][:] = sent.to_bytes(4, "little")
                sent += 1
        elif op == "a":
            r = sp.reserve()
            if r is not None:
                reserved.append(r[0])
            if len(reserved) > 1:
                sp.abort(reserved.pop(0))
        elif op == "t":
            got2 = sp.take()
            if got2 is not None:
                seen.append(int.from_bytes(got2[1], "little"))
                taken.append(got2[0])
        elif op == "r" and taken:
            sp.release(taken.pop(0))
        assert 0 <= sp.used <= sp.real <= sp.capacity
        assert umb.used_blocks == sum(r.real for r in pm)
    assert seen == sorted(seen) and seen == list(range(len(seen)))


def _resident_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def test_matrix_gives_back_a_row_idle_for_a_whole_period_and_its_pages() -> None:
    umb = UserMemory(1 << 20, 64)
    m = PoolMatrix(3, N, umb, 4, T, reclaim=False)
    busy, idle = m[1], m[2]
    for cell in range(4):            # every block of the idle row written through
        res = idle.reserve()
        assert res is not None
        res[1][:] = b"x" * len(res[1])
        idle.commit(res[0], len(res[1]))
        taken = idle.take()
        assert taken is not None
        idle.release(taken[0])
    held = idle.block_ids
    assert m.reclaim_idle() == 0     # first look: both rows seen, neither idle for a period yet
    put_byte(busy, 1)                # the busy row holds a block: never given back
    before = _resident_kib()
    assert m.reclaim_idle() == 1
    assert m.stats()["hosts"] == [1]
    assert umb.free_blocks == 64 - 4
    assert before - _resident_kib() >= 3 * 1024   # 4 MiB written, its pages back to the OS
    assert all(not umb.arena[b * (1 << 20):(b + 1) * (1 << 20)].any() for b in held)
    assert m[2].real == 4            # made again at the next traffic, with its initial space
    put_byte(m[2], 7)
    assert take_release(m[2]) == 7
