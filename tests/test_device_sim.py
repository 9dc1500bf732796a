"""Device support without a GPU: the simulated backend, the chunk plan and
pool, and the staging scenarios of ``tests/device_scenarios.py`` over the
simulated backend (the same scenarios run over CuPy in test_device_cupy.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiopdbp.device import open_backend
from aiopdbp.device.backend import Placement, Stream, classify, default_device, is_device_array, local_rank
from aiopdbp.device.chunks import ArrayMeta, ChunkPlan, PinnedChunkPool, Role
from aiopdbp.device.sim import Fault, SimArray, SimBackend, SimFault, SimHold
from aiopdbp.device.staging import ChunkState, Stager, Transfer, TransferState
from aiopdbp.errors import DeviceError, PDBPError, ProtocolError

from tests.device_scenarios import *  # noqa: F403  (the shared scenarios)
from tests.device_scenarios import CHUNK, Wire, drive, linger, states


def _sim_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("aiopdbp-sim")]


class SimHarness:
    """The scenario harness over :class:`SimBackend` (two simulated devices)."""

    devices = 2
    faults = True

    def __init__(self, **options: Any) -> None:
        self.backend = SimBackend(self.devices, **options)

    def array(self, host: np.ndarray[Any, Any], device: int = 0) -> SimArray:
        return self.backend.asarray(host, device)

    def to_numpy(self, arr: SimArray) -> np.ndarray[Any, Any]:
        return arr.get()

    def hold(self, stream: Stream) -> SimHold:
        return self.backend.hold(stream)

    def fill_async(self, arr: SimArray, value: float, stream: Stream) -> None:
        self.backend.launch(stream, lambda: arr.unsafe_host_view().fill(value))


@pytest.fixture
def dev() -> Iterator[SimHarness]:
    h = SimHarness(copy_delay=1e-4)
    yield h
    h.backend.close()
    assert not _sim_threads()  # close() joined every worker


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    b = SimBackend(2)
    yield b
    b.close()


# ------------------------------------------------------------ classification
class _CAI:
    __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}


class _DLPack:
    def __init__(self, dev_type: int) -> None:
        self.dev_type = dev_type

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.dev_type, 0)


@pytest.mark.parametrize(
    ("obj", "placement"),
    [
        (np.zeros(3), Placement.HOST),
        (b"abc", Placement.HOST),
        (object(), Placement.HOST),
        (_CAI(), Placement.CUDA),
        (_DLPack(2), Placement.CUDA),  # kDLCUDA
        (_DLPack(13), Placement.CUDA),  # kDLCUDAManaged
        (_DLPack(1), Placement.HOST),  # kDLCPU
        (_DLPack(3), Placement.HOST),  # kDLCUDAHost: pinned host memory
        (_DLPack(10), Placement.OTHER),  # kDLROCM
    ],
)
def test_classify_tells_host_from_device_data(obj: Any, placement: Placement) -> None:
    assert classify(obj) is placement
    assert is_device_array(obj) is (placement is Placement.CUDA)


def test_classify_sees_sim_arrays_as_device_data(sim: SimBackend) -> None:
    arr = sim.asarray(np.arange(3))
    assert classify(arr) is Placement.SIM and is_device_array(arr)


def test_sim_array_refuses_implicit_numpy_conversion(sim: SimBackend) -> None:
    arr = sim.asarray(np.arange(3))
    with pytest.raises(TypeError, match=r"\.get\(\)"):
        np.asarray(arr)
    assert not hasattr(arr, "__cuda_array_interface__") and not hasattr(arr, "__dlpack__")


@pytest.mark.parametrize(
    ("env", "count", "device"),
    [({}, 4, 0), ({"MPI_LOCALRANKID": "5"}, 4, 1), ({"OMPI_COMM_WORLD_LOCAL_RANK": "2"}, 4, 2),
     ({"SLURM_LOCALID": "3"}, 2, 1), ({"MPI_LOCALRANKID": "1", "SLURM_LOCALID": "0"}, 8, 1)],
)
def test_default_device_is_local_rank_modulo_visible_devices(env: dict[str, str], count: int, device: int) -> None:
    assert default_device(count, env) == device


def test_local_rank_rejects_a_non_integer_value() -> None:
    with pytest.raises(ValueError, match="SLURM_LOCALID"):
        local_rank({"SLURM_LOCALID": "x"})


# --------------------------------------------------------- simulated backend
def test_sim_stream_completes_events_in_order_and_only_after_their_work(sim: SimBackend) -> None:
    s = sim.create_stream(0)
    hold = sim.hold(s)
    arr = sim.asarray(np.arange(8, dtype=np.uint8))
    dst = sim.alloc_pinned(8)
    sim.copy_d2h(arr, 0, dst, s)
    ev = sim.record_event(s)
    assert not ev.done() and not dst.any()
    hold.release()
    ev.synchronize()
    assert ev.done() and dst.tolist() == list(range(8))


def test_sim_wait_event_orders_a_stream_after_another(sim: SimBackend) -> None:
    a, b = sim.create_stream(0), sim.create_stream(0)
    hold = sim.hold(a)
    arr = sim.asarray(np.zeros(4, np.float64))
    sim.launch(a, lambda: arr.unsafe_host_view().fill(3.0))
    sim.wait_event(b, sim.record_event(a))
    dst = sim.alloc_pinned(32)
    sim.copy_d2h(arr, 0, dst, b)
    ev_b = sim.record_event(b)
    other = sim.create_stream(0)  # an unrelated stream is not held up
    ev_other = sim.record_event(other)
    ev_other.synchronize()
    assert not ev_b.done()
    hold.release()
    ev_b.synchronize()
    assert dst.view(np.float64).tolist() == [3.0] * 4


def test_sim_fault_at_completion_raises_from_the_next_event_with_cause(sim: SimBackend) -> None:
    sim.faults.append(Fault("d2h", 2))
    s = sim.create_stream(0)
    arr = sim.asarray(np.arange(4, dtype=np.uint8))
    dst = sim.alloc_pinned(4)
    events = []
    for _ in range(3):
        sim.copy_d2h(arr, 0, dst, s)
        events.append(sim.record_event(s))
    events[2].synchronize()
    assert events[0].done() and events[2].done()  # not sticky: later work is fine
    with pytest.raises(DeviceError) as info:
        events[1].done()
    assert isinstance(info.value, PDBPError) and isinstance(info.value.__cause__, SimFault)


def test_sim_fault_at_submit_raises_and_queues_nothing(sim: SimBackend) -> None:
    sim.faults.append(Fault("h2d", 1, at="submit"))
    arr = sim.asarray(np.zeros(4, np.uint8))
    with pytest.raises(DeviceError) as info:
        sim.copy_h2d(np.ones(4, np.uint8), arr, 0, sim.create_stream(0))
    assert isinstance(info.value.__cause__, SimFault)
    assert not [e for e in sim.trace if e.kind == "h2d"] and not arr.get().any()


def test_sim_sticky_fault_fails_every_later_event_of_its_stream(sim: SimBackend) -> None:
    sim.faults.append(Fault("d2h", 1, sticky=True))
    s = sim.create_stream(0)
    arr = sim.asarray(np.arange(4, dtype=np.uint8))
    dst = sim.alloc_pinned(4)
    sim.copy_d2h(arr, 0, dst, s)
    sim.record_event(s)
    sim.copy_d2h(arr, 0, dst, s)
    later = sim.record_event(s)
    with pytest.raises(DeviceError):
        later.synchronize()
    assert not dst.any()


def test_sim_failed_kernel_propagates_through_wait_event(sim: SimBackend) -> None:
    a, b = sim.create_stream(0), sim.create_stream(0)

    def bad_kernel() -> None:
        raise ZeroDivisionError("kernel fault")

    sim.launch(a, bad_kernel)
    sim.wait_event(b, sim.record_event(a))
    ev = sim.record_event(b)
    with pytest.raises(DeviceError) as info:
        ev.synchronize()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_sim_close_fails_pending_events_and_joins_every_worker() -> None:
    be = SimBackend(copy_delay=30.0)  # a copy that would take 30 s
    s = be.create_stream(0)
    be.copy_d2h(be.asarray(np.zeros(4, np.uint8)), 0, be.alloc_pinned(4), s)
    ev = be.record_event(s)
    held = be.create_stream(0)
    be.hold(held)
    ev2 = be.record_event(held)
    assert _sim_threads()
    be.close()
    assert not _sim_threads()
    for e in (ev, ev2):
        with pytest.raises(DeviceError):
            e.done()
    with pytest.raises(DeviceError):
        be.record_event(s)


def test_from_host_wraps_received_bytes_as_a_device_array(sim: SimBackend) -> None:
    host = np.asfortranarray(np.arange(12, dtype=">i4").reshape(3, 4))
    copy_stream = sim.create_stream(1)
    pinned = sim.alloc_pinned(host.nbytes)
    pinned[:] = np.frombuffer(host.tobytes(order="A"), np.uint8)
    arr, ev = sim.from_host(memoryview(pinned), host.dtype, (3, 4), "F", 1, copy_stream)
    ev.synchronize()
    info = sim.inspect(arr)
    assert (info.device, info.dtype, info.shape, info.order) == (1, host.dtype, (3, 4), "F")
    np.testing.assert_array_equal(arr.get(), host)
    with pytest.raises(ValueError, match="cannot hold"):
        sim.from_host(b"abc", np.int32, (1,), "C", 0, copy_stream)


def test_copy_d2d_moves_an_array_across_devices(sim: SimBackend) -> None:
    src = sim.asarray(np.arange(10.0), device=0)
    dst = sim.empty((10,), np.float64, "C", 1)
    s = sim.create_stream(1)
    sim.copy_d2d(src, dst, s)
    sim.record_event(s).synchronize()
    np.testing.assert_array_equal(dst.get(), np.arange(10.0))
    with pytest.raises(ValueError):
        sim.copy_d2d(src, sim.empty((3,), np.float64, "C", 1), s)


def test_sim_rejects_out_of_range_copies_and_foreign_objects(sim: SimBackend) -> None:
    arr = sim.asarray(np.zeros(4, np.uint8))
    with pytest.raises(ValueError):
        sim.copy_d2h(arr, 2, sim.alloc_pinned(4), sim.create_stream(0))
    with pytest.raises(ValueError):
        sim.copy_d2h(sim.asarray(np.zeros((4, 4)))[:, ::2], 0, sim.alloc_pinned(8), sim.create_stream(0))
    with pytest.raises(TypeError):
        sim.inspect(np.zeros(4))
    with pytest.raises(TypeError):
        SimBackend().inspect(arr)  # another backend's array (never started: nothing to close)


# ----------------------------------------------------------- plan and pool
@settings(deadline=None)
@given(
    shape=st.lists(st.integers(0, 40), min_size=0, max_size=3).map(tuple),
    itemsize=st.sampled_from([1, 2, 8, 16]),
    order=st.sampled_from(["C", "F"]),
    piece=st.integers(1, 500),
)
def test_plan_pieces_tile_the_bytes_and_segments_tile_the_rows(
    shape: tuple[int, ...], itemsize: int, order: str, piece: int
) -> None:
    meta = ArrayMeta(np.dtype(f"V{itemsize}"), shape, order, piece)  # type: ignore[arg-type]
    plan = ChunkPlan(meta)
    pieces = [plan.piece(i) for i in range(plan.npieces)]
    assert sum(p.nbytes for p in pieces) == meta.nbytes
    assert all(p.offset == q.offset + q.nbytes for q, p in zip(pieces, pieces[1:]))
    assert all(0 < p.nbytes <= piece for p in pieces)
    segs = [plan.segment(s) for s in range(plan.nsegments)]
    assert all(b.start == a.stop and b.offset == a.offset + a.nbytes for a, b in zip(segs, segs[1:]))
    if segs:
        assert segs[0].start == 0 and segs[-1].stop == plan.nrows
    by_segment: dict[int, list[Any]] = {}
    for p in pieces:
        by_segment.setdefault(p.segment, []).append(p)
    assert sorted(by_segment) == [s.index for s in segs]
    for s in segs:  # a segment's pieces are exactly its bytes, in order
        mine = by_segment[s.index]
        assert mine[-1].index == plan.last_piece(s.index)
        assert mine[0].offset == s.offset and sum(p.nbytes for p in mine) == s.nbytes


def test_array_meta_round_trips_through_the_wire_and_rejects_garbage() -> None:
    meta = ArrayMeta(np.dtype(">i2"), (3, 4), "F", 1000)
    assert ArrayMeta.from_wire(meta.to_wire()) == meta
    for bad in ({}, {"dtype": "O", "shape": [1], "order": "C", "piece": 1},
                {"dtype": "<f4", "shape": [-1], "order": "C", "piece": 1},
                {"dtype": "<f4", "shape": [1], "order": "K", "piece": 1},
                {"dtype": "nope", "shape": [1], "order": "C", "piece": 1}):
        with pytest.raises(ProtocolError):
            ArrayMeta.from_wire(bad)


def test_pool_makes_one_pinned_allocation_and_never_overcommits(sim: SimBackend) -> None:
    pool = PinnedChunkPool(sim, pool_bytes=4 * CHUNK + 5, chunk_size=CHUNK, recv_reserve=1)
    assert sim.pinned_allocations == 1 and pool.nchunks == 4
    sends = [pool.acquire(Role.SEND) for _ in range(4)]
    assert sends[3] is None  # the last chunk is reserved for receivers
    recv = pool.acquire(Role.RECV)
    assert recv is not None and pool.acquire(Role.RECV) is None and pool.free == 0
    assert len({c.index for c in sends[:3] if c} | {recv.index}) == 4 and sim.pinned_allocations == 1
    pool.release(recv)
    with pytest.raises(RuntimeError):
        pool.release(recv)
    with pytest.raises(RuntimeError, match="in use"):
        pool.close()
    for c in sends[:3]:
        assert c is not None
        pool.release(c)
    pool.close()


@pytest.mark.parametrize("chunk_size", [CHUNK - 1, 16 * 2**20 + 1])
def test_pool_rejects_a_chunk_size_out_of_range(sim: SimBackend, chunk_size: int) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        PinnedChunkPool(sim, pool_bytes=64 * 2**20, chunk_size=chunk_size)
    assert sim.pinned_allocations == 0


# ------------------------------------------------- staging over the simulator
def test_copy_of_chunk_two_runs_entirely_while_chunk_one_is_on_the_wire(
    dev: SimHarness, new_stager: Callable[..., Stager]
) -> None:
    be = dev.backend
    tx = new_stager()
    wire = Wire(auto=False, note=be.note)
    gate = be.gate("d2h", 2)  # the copy of piece 1 starts only when released
    t = tx.send(dev.array(np.arange(3 * CHUNK, dtype=np.uint8)), wire.post_send, max_in_flight=3)
    drive([tx], None, lambda: states(t).get(0) is ChunkState.SENDING)
    assert states(t)[1] is ChunkState.D2H_COPYING
    gate.release()
    drive([tx], None, lambda: states(t).get(1) is ChunkState.SENDING)
    wire.complete_send(0)
    seq = {}
    for e in be.trace:
        key = e.kind if e.phase == "note" else f"{e.kind} {e.phase}"
        seq.setdefault(key, []).append(e.seq)
    post0, done0 = seq["send-post 0"][0], seq["send-done 0"][0]
    start1, end1 = seq["d2h start"][1], seq["d2h end"][1]
    assert post0 < start1 < end1 < done0  # copy 1 ran while send 0 was in flight
    for i in (1, 2):
        drive([tx], None, lambda: i in wire.sends)
        wire.complete_send(i)
    drive([tx], None, lambda: t.settled)
    assert t.state is TransferState.DONE and wire.payload[1] == bytes(range(256)) * (CHUNK // 256)


def test_failing_copy_fails_the_transfer_and_returns_every_chunk(
    dev: SimHarness, new_stager: Callable[..., Stager]
) -> None:
    dev.backend.faults.append(Fault("d2h", 2))
    tx = new_stager()
    wire = Wire()
    done: list[Transfer] = []
    t = tx.send(dev.array(np.ones(6 * CHUNK, np.uint8)), wire.post_send, on_done=done.append)
    drive([tx], wire, lambda: t.settled)
    assert t.state is TransferState.FAILED and done == [t] and tx.pool.in_use == 0
    assert isinstance(t.error, DeviceError) and isinstance(t.error.__cause__, SimFault)
    assert set(wire.sends) <= {0}  # the failed piece and the later ones never left


def test_failing_copy_submit_fails_the_transfer_without_losing_chunks(
    dev: SimHarness, new_stager: Callable[..., Stager]
) -> None:
    dev.backend.faults.append(Fault("d2h", 3, at="submit"))
    tx = new_stager()
    t = tx.send(dev.array(np.ones(6 * CHUNK, np.uint8)), Wire().post_send)
    drive([tx], None, lambda: t.settled)
    assert t.state is TransferState.FAILED and isinstance(t.error, DeviceError)
    assert tx.pool.in_use == 0 and tx.pool.lost == 0


def test_failing_h2d_copy_fails_the_receiver_and_returns_every_chunk(
    dev: SimHarness, new_stager: Callable[..., Stager]
) -> None:
    dev.backend.faults.append(Fault("h2d", 1))
    rx = new_stager()
    wire = Wire()
    for i in range(4):
        wire.payload[i] = bytes(CHUNK)
    segments: list[Any] = []
    r = rx.recv(ArrayMeta(np.dtype(np.uint8), (4 * CHUNK,), "C", CHUNK), wire.post_recv, device=1,
                on_segment=lambda r, s: segments.append(s))
    drive([rx], wire, lambda: r.settled)
    assert r.state is TransferState.FAILED and isinstance(r.error, DeviceError)
    assert not segments and rx.pool.in_use == 0 and r.array is None


def test_failing_producer_kernel_fails_the_send(dev: SimHarness, new_stager: Callable[..., Stager]) -> None:
    tx = new_stager()
    arr = dev.array(np.ones(2 * CHUNK, np.uint8))

    def bad_kernel() -> None:
        raise FloatingPointError("illegal address")

    dev.backend.launch(dev.backend.current_stream(0), bad_kernel)
    wire = Wire()
    t = tx.send(arr, wire.post_send)
    drive([tx], wire, lambda: t.settled)
    assert t.state is TransferState.FAILED and isinstance(t.error.__cause__, FloatingPointError)
    assert not wire.sends and tx.pool.in_use == 0


def test_abort_keeps_a_chunk_until_its_pending_copy_completes(
    dev: SimHarness, new_stager: Callable[..., Stager]
) -> None:
    tx = new_stager()
    gate = dev.backend.gate("d2h", 1)
    t = tx.send(dev.array(np.ones(CHUNK, np.uint8)), Wire().post_send)
    t.abort(RuntimeError("cancelled"))
    linger([tx])
    assert t.state is TransferState.DRAINING and tx.pool.in_use == 1  # the GPU still writes it
    gate.release()
    drive([tx], None, lambda: t.settled)
    assert t.state is TransferState.FAILED and tx.pool.in_use == 0


def test_stager_close_abandons_unsettled_transfers(dev: SimHarness) -> None:
    s = Stager(dev.backend, chunk_size=CHUNK, pool_bytes=4 * CHUNK)
    t = s.send(dev.array(np.ones(2 * CHUNK, np.uint8)), Wire(auto=False).post_send)
    drive([s], None, lambda: ChunkState.SENDING in states(t).values())
    s.close()
    assert t.state is TransferState.FAILED and not s.pending and s.pool.lost >= 1


# ------------------------------------------------------------------- imports
def test_open_backend_sim_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPDBP_DEVICE", "sim")
    with open_backend(copy_delay=0.0) as be:
        assert isinstance(be, SimBackend)
    with pytest.raises(ValueError):
        open_backend("opencl")


def test_importing_aiopdbp_and_its_device_package_never_imports_cupy() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('cupy', 'cupyx'): raise ImportError('cupy imported')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import aiopdbp, aiopdbp.device, aiopdbp.device.staging, aiopdbp.device.cupy_backend\n"
        "print('ok', 'mpi4py' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "ok"


def test_cupy_backend_without_cupy_raises_device_error() -> None:
    pytest.importorskip("aiopdbp.device.cupy_backend")
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed")
    with pytest.raises(DeviceError) as info:
        open_backend("cupy")
    assert isinstance(info.value.__cause__, ImportError)


def test_array_freed_while_the_memory_lock_is_held_does_not_deadlock() -> None:
    """The cyclic GC may free an array (a reference cycle) at any allocation,
    also while a thread holds the simulated memory's lock: its block's free
    must not wait on that lock (it did, freezing that thread -- a rank's event
    loop -- for good).  Here the last reference goes while ``touch`` iterates
    its blocks inside the lock, as a collection there would drop it."""
    b = SimBackend(1)
    held = [b.asarray(np.zeros(4))]
    done = threading.Event()

    def blocks() -> Iterator[int]:
        held.clear()  # the block's __del__ runs here, inside the lock
        yield 1

    def touch() -> None:
        b.memory.touch(cast(Any, blocks()), object(), 1)
        done.set()

    worker = threading.Thread(target=touch, daemon=True)  # a deadlocked one must not block the exit
    worker.start()
    assert done.wait(20.0), "the memory's lock deadlocked on a block freed inside it"
    assert b.memory.reuses == 0 and b.asarray(np.zeros(4)) is not None and b.memory.reuses == 1, "the block was not freed"
    b.close()
